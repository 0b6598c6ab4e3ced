// Deterministic pseudo-random token ids (an LCG) for tests that need many different prompts.
export function randomTokens(n: number, seed: number, vocab: number): number[] {
  let x = seed >>> 0
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0
    return x % vocab
  })
}
