// gemm_nt over weights kept below f32 (native/cpu/gemm_weights.h; the loadModel `weights` option):
// bf16 and f16 bits, and int8 codes with one f16 scale per block of 32 along the depth (Q8_0-style).
// On fresh random inputs (seed printed with every failure; GEMM_SEED replays one):
//  - the stored values: bf16 / f16 round to nearest even exactly as safetensors.ts's converters
//    do; int8's scale d of a block is the least f16 with 127·d ≥ max|w|, and |w − q·d| ≤ d/2;
//  - the product over stored weights has the bits of the f32 product over the widened weights
//    (the weights widen exactly, the order of every sum is the same), so the only error beyond the
//    f32 GEMM's is the weights' own rounding — none for bf16/f16 against the rounded weights;
//  - against float64 over the ROUNDED weights: |y − y64| ≤ (depth + 2)·2⁻²⁴·(Σ|x·w'| + |bias| + |y_old|)
//    (the f32 bound of gemm.test.ts), every element written (Y NaN-filled first);
//  - int8 against float64 over the ORIGINAL weights, per element:
//      |y − y64(w)| ≤ Σ_k |x_k|·|w_k − q_k·d_k| + γ·Σ|x·w'| ≤ Σ_k |x_k|·d_k/2 + γ·Σ|x·w'|.
// Shapes: odd and skinny (decode), several depth blocks, thread splits; 1 and 2 threads.
import { beforeAll, describe, expect, it } from 'vitest'
import { nativeAddon } from '../../src/native.js'
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../src/engine/hf/safetensors.js'
import { mulberry32 } from '../reference/random-weights.js'

type Stored = 'bf16' | 'f16' | 'int8'
interface GemmBinding {
  multiply(variant: 'nt' | 'nn', args: Record<string, unknown>): void
  stored(weights: Stored, w: Float32Array, rows: number, cols: number): { values: Float32Array; scales?: Float32Array }
}

const SEED = Number(process.env.GEMM_SEED ?? Math.floor(Math.random() * 2 ** 31))
const U = 2 ** -24
let gemm: GemmBinding
beforeAll(async () => {
  gemm = ((await nativeAddon()) as unknown as { gemm: GemmBinding }).gemm
})

function uniform(n: number, random: () => number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => scale * (2 * random() - 1))
}

interface Case {
  rows: number
  cols: number
  depth: number
  accumulate: boolean
  bias: boolean
  threads: number
  pad: number
}

// W [cols × depth] with ld = depth + pad, and the weights as the product reads them (dense).
function weightsOf(c: Case, random: () => number) {
  const ldw = c.depth + c.pad
  const w = uniform(c.cols * ldw, random)
  if (c.cols > 2) w.fill(0, ldw, ldw + Math.min(c.depth, 40)) // a row starting with zero blocks (scale 0)
  const dense = new Float32Array(c.cols * c.depth)
  for (let j = 0; j < c.cols; j++) dense.set(w.subarray(j * ldw, j * ldw + c.depth), j * c.depth)
  return { w, ldw, dense }
}

function checkCase(kind: Stored, c: Case, seed: number): void {
  const at = `${kind} ${c.rows}×${c.cols}×${c.depth} acc=${c.accumulate} bias=${c.bias} threads=${c.threads} seed=${seed}`
  const random = mulberry32(seed)
  const ldx = c.depth + c.pad, ldy = c.cols + c.pad
  const x = uniform(c.rows * ldx, random)
  const { w, ldw, dense } = weightsOf(c, random)
  const { values, scales } = gemm.stored(kind, dense, c.cols, c.depth)
  const bias = c.bias ? uniform(c.cols, random) : undefined
  const start = uniform(c.rows * ldy, random)
  if (!c.accumulate) for (let i = 0; i < c.rows; i++) start.fill(NaN, i * ldy, i * ldy + c.cols)
  const run = (weights: Stored | undefined) => {
    const y = start.slice()
    const wArg = weights ? w : values
    gemm.multiply('nt', { x, ldx, w: wArg, ldw: weights ? ldw : c.depth, bias, y, ldy, rows: c.rows, cols: c.cols, depth: c.depth, accumulate: c.accumulate, threads: c.threads, weights })
    return y
  }
  const y = run(kind), y32 = run(undefined)
  // the same bits as the f32 product over the widened weights, the padding untouched
  for (let i = 0; i < c.rows * ldy; i++)
    if (!Object.is(y[i], y32[i])) expect.fail(`${at}: y[${i}] = ${y[i]} but the f32 product over the stored weights gives ${y32[i]}`)
  const gamma = (c.depth + 2) * U
  const blocks = Math.ceil(c.depth / 32)
  for (let i = 0; i < c.rows; i++)
    for (let j = 0; j < c.cols; j++) {
      let exact = 0, magnitude = 0, original = 0, weightError = 0, apriori = 0
      for (let k = 0; k < c.depth; k++) {
        const xk = x[i * ldx + k], wq = values[j * c.depth + k], w0 = dense[j * c.depth + k]
        exact += xk * wq
        magnitude += Math.abs(xk * wq)
        original += xk * w0
        weightError += Math.abs(xk) * Math.abs(w0 - wq)
        if (scales) apriori += (Math.abs(xk) * scales[j * blocks + Math.floor(k / 32)]) / 2
      }
      const base = (bias ? bias[j] : 0) + (c.accumulate ? start[i * ldy + j] : 0)
      const baseMagnitude = (bias ? Math.abs(bias[j]) : 0) + (c.accumulate ? Math.abs(start[i * ldy + j]) : 0)
      const got = y[i * ldy + j], bound = gamma * (magnitude + baseMagnitude)
      const err = Math.abs(got - (exact + base))
      if (!(err <= bound)) expect.fail(`${at}: y[${i}][${j}] = ${got}, float64 over the stored weights ${exact + base}, |err| ${err} > ${bound}`)
      if (kind !== 'int8') continue
      const errOriginal = Math.abs(got - (original + base))
      if (!(errOriginal <= weightError + bound))
        expect.fail(`${at}: y[${i}][${j}] = ${got}, float64 over the f32 weights ${original + base}, |err| ${errOriginal} > Σ|x||w − q·d| + γ·Σ|x·w'| = ${weightError + bound}`)
      if (!(weightError <= apriori)) expect.fail(`${at}: Σ|x||w − q·d| = ${weightError} beyond Σ|x|·d/2 = ${apriori}`)
    }
}

describe(`gemm_nt over bf16 / f16 / int8 weights (seed ${SEED})`, () => {
  it('bf16 and f16 round to nearest even as the safetensors converters do, subnormals and ties included', () => {
    const random = mulberry32(SEED)
    const n = 4096
    const w = new Float32Array(n)
    for (let i = 0; i < n; i++) {
      const kind = i % 4
      // ordinary values, f16 subnormals, exact ties of both formats, values near f16's top
      w[i] = kind === 0 ? 2 * random() - 1 : kind === 1 ? (2 * random() - 1) * 2 ** -16 : kind === 2 ? (1 + (2 * Math.floor(random() * 512) + 1) / 2048) * 2 ** Math.floor(random() * 20 - 10) : (random() * 2 - 1) * 65000
    }
    w[0] = 0, w[1] = -0, w[2] = 65504, w[3] = 2 ** -24, w[4] = 2 ** -25 * 3, w[5] = 65519
    const bf = gemm.stored('bf16', w, 64, 64).values, h = gemm.stored('f16', w, 64, 64).values
    for (let i = 0; i < n; i++) {
      expect(Object.is(bf[i], bf16BitsToF32(f32ToBf16Bits(w[i]))), `bf16 of ${w[i]}: ${bf[i]}`).toBe(true)
      expect(Object.is(h[i], f16BitsToF32(f32ToF16Bits(w[i]))), `f16 of ${w[i]}: ${h[i]}`).toBe(true)
    }
  })

  it('int8: each block of 32 has the least f16 scale d with 127·d ≥ max|w|, and |w − q·d| ≤ d/2', () => {
    const random = mulberry32(SEED + 1)
    for (const [rows, cols, scale] of [[7, 100, 1], [3, 64, 1e-3], [5, 33, 50], [2, 31, 1e-6]] as const) {
      const w = uniform(rows * cols, random, scale)
      w.fill(0, 0, 32) // an all-zero block: scale 0, codes 0
      const { values, scales } = gemm.stored('int8', w, rows, cols)
      const blocks = Math.ceil(cols / 32)
      expect(scales!.length).toBe(rows * blocks)
      for (let r = 0; r < rows; r++)
        for (let b = 0; b < blocks; b++) {
          const d = scales![r * blocks + b]
          let amax = 0
          for (let k = b * 32; k < Math.min(cols, b * 32 + 32); k++) amax = Math.max(amax, Math.abs(w[r * cols + k]))
          const at = `rows ${rows} cols ${cols} scale ${scale} block (${r}, ${b}), seed ${SEED + 1}`
          if (amax === 0) expect(d, at).toBe(0)
          else {
            expect(127 * d >= amax, `${at}: 127·${d} < ${amax}`).toBe(true)
            expect(f16BitsToF32(f32ToF16Bits(d)), `${at}: the scale is an f16`).toBe(d)
            expect(127 * f16BitsToF32(f32ToF16Bits(d) - 1) < amax, `${at}: a smaller f16 scale would do`).toBe(true)
          }
          for (let k = b * 32; k < Math.min(cols, b * 32 + 32); k++) {
            const q = d === 0 ? 0 : values[r * cols + k] / d
            expect(Number.isInteger(q) && Math.abs(q) <= 127, `${at}: code ${q}`).toBe(true)
            expect(Math.abs(w[r * cols + k] - values[r * cols + k]) <= d / 2, `${at}: |w − q·d| > d/2 at ${k}`).toBe(true)
          }
        }
    }
  })

  for (const kind of ['bf16', 'f16', 'int8'] as const) {
    it(`${kind}: odd and skinny shapes, overwrite and accumulate, 1 and 2 threads`, () => {
      let seed = SEED + 100
      for (const rows of [1, 2, 3, 5, 8])
        for (const cols of [1, 3, 17, 50])
          for (const depth of [1, 7, 9, 31, 33, 64])
            for (const threads of [1, 2])
              for (const accumulate of [false, true]) checkCase(kind, { rows, cols, depth, accumulate, bias: !accumulate, threads, pad: 3 }, seed++)
    })

    it(`${kind}: depth blocks, column blocks and thread splits`, () => {
      let seed = SEED + 200
      for (const [rows, cols, depth] of [[1, 100, 1030], [8, 290, 257], [37, 100, 2050], [61, 5, 300]] as const)
        for (const threads of [1, 2]) checkCase(kind, { rows, cols, depth, accumulate: threads === 2, bias: true, threads, pad: 5 }, seed++)
    })

    // Few rows (decode, ≤ 12) take their own path through W (each tile walks its whole depth,
    // int8 scales widened per tile); a row's bits must still be those it has in a larger batch.
    it(`${kind}: a row is the same bits alone, among 12, and in a batch of 29, on 1 or 2 threads`, () => {
      const random = mulberry32(SEED + 300)
      const cols = 151, depth = 2100, pad = 3, batch = 29 // three depth blocks, a tail step, an odd column count
      const ldw = depth + pad
      const dense = uniform(cols * depth, random)
      const { values, scales } = gemm.stored(kind, dense, cols, depth)
      const w = new Float32Array(cols * ldw)
      for (let j = 0; j < cols; j++) w.set(dense.subarray(j * depth, (j + 1) * depth), j * ldw)
      expect(values.length).toBe(cols * depth)
      if (kind === 'int8') expect(scales!.length).toBe(cols * Math.ceil(depth / 32))
      const bias = uniform(cols, random), x = uniform(batch * depth, random)
      const run = (rows: Float32Array, count: number, threads: number) => {
        const y = new Float32Array(count * cols).fill(NaN)
        gemm.multiply('nt', { x: rows, ldx: depth, w, ldw, bias, y, ldy: cols, rows: count, cols, depth, threads, weights: kind })
        return y
      }
      const full = run(x, batch, 2)
      for (let i = 0; i < full.length; i++) if (Number.isNaN(full[i])) expect.fail(`${kind}: y[${i}] not written`)
      for (const r of [0, 11, 28]) {
        const want = full.subarray(r * cols, (r + 1) * cols)
        for (const threads of [1, 2]) expect(run(x.subarray(r * depth, (r + 1) * depth), 1, threads), `row ${r} alone, ${threads} threads (seed ${SEED})`).toEqual(want)
        const first = Math.min(r, batch - 12)
        expect(run(x.subarray(first * depth, (first + 12) * depth), 12, 2).subarray((r - first) * cols, (r - first + 1) * cols), `row ${r} among 12`).toEqual(want)
      }
    })
  }

  it('refuses weights it cannot hold, and layouts that do not read them, with typed errors', () => {
    const w = new Float32Array(64).fill(0.5)
    const nan = w.slice()
    nan[40] = NaN
    expect(() => gemm.stored('int8', nan, 2, 32)).toThrow(/not finite/)
    const big = w.slice()
    big[3] = 1e6
    expect(() => gemm.stored('f16', big, 2, 32)).toThrow(/beyond f16's range/)
    big[3] = 1e7 // 1e7/127 is past f16's largest value
    expect(() => gemm.stored('int8', big, 2, 32)).toThrow(/beyond the int8 format's f16 scale/)
    expect(() => gemm.stored('int4' as Stored, w, 2, 32)).toThrow(TypeError)
    expect(() => gemm.stored('bf16', w, 3, 32)).toThrow(RangeError)
    const y = new Float32Array(4)
    expect(() => gemm.multiply('nn', { x: w, ldx: 32, w, ldw: 2, y, ldy: 2, rows: 2, cols: 2, depth: 32, weights: 'bf16' })).toThrow(TypeError)
  })
})
