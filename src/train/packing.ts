// How a step's sequences are dealt into micro-batches. Every micro-batch is one packed forward:
// its sequences' tokens concatenated into one stream, no padding rows in any GEMM or in
// attention (the engine's ragged batch). What is left to choose is which sequences go together:
// RL batches are ragged (answers of 50 and of 1000 tokens), so cutting them by count gives
// forwards of very different sizes. They are dealt instead by tokens — longest first, each to the
// micro-batch holding the fewest tokens so far (LPT scheduling; verl's dynamic batch size balances
// the same way) — so every forward holds about the same number of tokens. The number of
// micro-batches is what a count of `microBatchSize` would give, or more when a token budget asks.

/** Micro-batches needed for `items` items of `tokens` tokens in all: ⌈items / size⌉, and ⌈tokens / budget⌉ with a budget. */
export function microBatchCount(items: number, tokens: number, microBatchSize: number, microBatchTokens?: number): number {
  const byCount = Math.ceil(items / microBatchSize)
  const byTokens = microBatchTokens ? Math.ceil(tokens / microBatchTokens) : 1
  return Math.max(1, Math.min(items, Math.max(byCount, byTokens)))
}

/**
 * Deals items of `lengths[i]` tokens into `bins` micro-batches of nearly equal tokens: longest
 * first, each to the lightest micro-batch (ties: the first). Each micro-batch lists its item
 * indices in batch order; none is empty.
 */
export function packMicroBatches(lengths: readonly number[], bins: number): number[][] {
  const k = Math.max(1, Math.min(bins, lengths.length))
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[b] - lengths[a] || a - b)
  const load = new Array<number>(k).fill(0)
  const out: number[][] = Array.from({ length: k }, () => [])
  for (const i of order) {
    let lightest = 0
    for (let b = 1; b < k; b++) if (load[b] < load[lightest]) lightest = b
    out[lightest].push(i)
    load[lightest] += lengths[i]
  }
  return out.filter((b) => b.length > 0).map((b) => b.sort((x, y) => x - y))
}
