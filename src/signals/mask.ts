// Token masks: which generated positions a signal reads. The engine returns one value per
// generated position; the caller marks the positions that count (response tokens) and clears
// prompt, padding, special and chat-control tokens (thinking delimiters included, UID A.1).

/** 1/true = the position is scored, 0/false = excluded. Length must equal the sequence length. */
export type TokenMask = Uint8Array | readonly boolean[]

/** Throws a RangeError unless `mask` is absent or has exactly `length` entries. */
export function checkMask(mask: TokenMask | undefined, length: number, what = 'mask'): void {
  if (mask !== undefined && mask.length !== length) {
    throw new RangeError(`${what} has ${mask.length} entries for ${length} positions`)
  }
}

/** Number of positions the mask keeps (all of them when there is no mask). */
export function countMasked(mask: TokenMask | undefined, length: number): number {
  checkMask(mask, length)
  if (mask === undefined) return length
  let n = 0
  for (let t = 0; t < length; t++) if (mask[t]) n++
  return n
}

/** The kept values, in order, as a new Float64Array. */
export function compactMasked(values: ArrayLike<number>, mask?: TokenMask): Float64Array {
  checkMask(mask, values.length)
  if (mask === undefined) return Float64Array.from(values)
  const out = new Float64Array(countMasked(mask, values.length))
  let j = 0
  for (let t = 0; t < values.length; t++) if (mask[t]) out[j++] = values[t]
  return out
}

/** Mean of the kept values; NaN when the mask keeps nothing. */
export function maskedMean(values: ArrayLike<number>, mask?: TokenMask): number {
  checkMask(mask, values.length)
  let s = 0
  let n = 0
  for (let t = 0; t < values.length; t++) {
    if (mask === undefined || mask[t]) {
      s += values[t]
      n++
    }
  }
  return n === 0 ? NaN : s / n
}

/**
 * A mask that keeps every position whose token id is not in `excluded` (special and control
 * tokens), intersected with `base` when given (e.g. a response-only mask).
 */
export function maskExcludingTokens(
  tokenIds: ArrayLike<number>,
  excluded: Iterable<number>,
  base?: TokenMask,
): Uint8Array {
  checkMask(base, tokenIds.length, 'base mask')
  const drop = new Set(excluded)
  const out = new Uint8Array(tokenIds.length)
  for (let t = 0; t < tokenIds.length; t++) {
    out[t] = (base === undefined || base[t]) && !drop.has(tokenIds[t]) ? 1 : 0
  }
  return out
}
