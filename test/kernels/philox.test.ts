// Philox-4x32-10 against the Random123 known-answer vectors (kat_vectors, philox4x32_10), and
// uniform01's mapping of (seed, stream, position) onto the counter and key.
import { beforeAll, describe, expect, it } from 'vitest'
import { kernels, type Kernels } from './kernels.js'

let k: Kernels
beforeAll(async () => {
  k = await kernels()
})

const hex = (words: ArrayLike<number>) => Array.from(words, (w) => w.toString(16).padStart(8, '0')).join(' ')

describe('philox4x32-10', () => {
  it('matches the Random123 known-answer vectors', () => {
    expect(hex(k.philox([0, 0, 0, 0], [0, 0]))).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8')
    expect(hex(k.philox([0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff]))).toBe(
      '408f276d 41c83b0e a20bc7c6 6d5451fd',
    )
    expect(hex(k.philox([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]))).toBe(
      'd16cfe09 94fdcceb 5001e420 24126ea1',
    )
  })

  it('rejects malformed counters and keys', () => {
    expect(() => k.philox([0, 0, 0], [0, 0])).toThrow(/counter/)
    expect(() => k.philox([0, 0, 0, 0], [0, -1])).toThrow(/key/)
  })
})

describe('uniform01(seed, stream, position)', () => {
  // counter = {pos lo, pos hi, stream lo, stream hi}, key = {seed lo, seed hi}; u = (word0 >> 8) / 2^24
  const expected = (seed: bigint, stream: bigint, position: bigint) => {
    const lo = (x: bigint) => Number(x & 0xffffffffn)
    const hi = (x: bigint) => Number(x >> 32n)
    const w = k.philox([lo(position), hi(position), lo(stream), hi(stream)], [lo(seed), hi(seed)])
    return (w[0] >>> 8) / 2 ** 24
  }

  it('is the first Philox word with a 24-bit mantissa, all 64 bits of each input used', () => {
    const cases: [bigint, bigint, bigint][] = [
      [0n, 0n, 0n],
      [42n, 7n, 123456n],
      [0xdeadbeefcafef00dn, 0x0123456789abcdefn, 0xfedcba9876543210n],
      [1n << 63n, 1n << 40n, (1n << 33n) + 5n],
    ]
    for (const [s, t, p] of cases) expect(k.uniform01(s, t, p)).toBe(expected(s, t, p))
    expect(k.uniform01(42, 7, 123456)).toBe(k.uniform01(42n, 7n, 123456n))
  })

  it('changes with each input and stays in [0, 1) with mean 1/2', () => {
    const a = k.uniform01(1, 2, 3)
    expect(k.uniform01(1, 2, 4)).not.toBe(a)
    expect(k.uniform01(1, 3, 3)).not.toBe(a)
    expect(k.uniform01(2, 2, 3)).not.toBe(a)
    expect(k.uniform01(1n + (1n << 32n), 2, 3)).not.toBe(a)
    const n = 20000
    let sum = 0
    let outside = 0
    for (let i = 0; i < n; i++) {
      const u = k.uniform01(9, 0, i)
      if (!(u >= 0 && u < 1)) outside++
      sum += u
    }
    expect(outside).toBe(0)
    // the mean of n uniforms has sd 1/sqrt(12 n) ≈ 0.002: allow 5 sd
    expect(Math.abs(sum / n - 0.5)).toBeLessThan(5 / Math.sqrt(12 * n))
  })

  it('refuses inputs that do not fit 64 unsigned bits', () => {
    expect(() => k.uniform01(-1, 0, 0)).toThrow(RangeError)
    expect(() => k.uniform01(1n << 64n, 0, 0)).toThrow(RangeError)
    expect(() => k.uniform01(0.5, 0, 0)).toThrow(RangeError)
  })
})
