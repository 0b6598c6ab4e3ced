// Shared by the ONNX tests: the logit error measure of test/engine/forward.test.ts.
import { expect } from 'vitest'

/** max over i of |a − e| / max(|e|, 1) (relative, with an absolute floor at magnitude 1), refusing non-finite values. */
export function maxRelError(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  expect(actual.length).toBe(expected.length)
  let worst = 0
  for (let i = 0; i < expected.length; i++) {
    if (!Number.isFinite(actual[i])) throw new Error(`element ${i} is ${actual[i]} (expected ${expected[i]})`)
    worst = Math.max(worst, Math.abs(actual[i] - expected[i]) / Math.max(Math.abs(expected[i]), 1))
  }
  return worst
}
