// The CPU GEMM (native/cpu/gemm.cpp, its micro-kernels in native/cpu/gemm_kernels.h) against a
// float64 reference, on fresh random inputs (the seed is printed with every failure; set
// GEMM_SEED to replay one), in the three layouts the engine calls:
//   nt  Y = X·Wᵀ (+ bias)  a Linear's forward, the LM head, decode (gemm_nt)
//   nn  Y = X·W            dX = dY·W, the LM head's dh = dz·W (gemm_nn)
//   tn  Y = Xᵀ·W           dW = dYᵀ·X (gemm_tn)
// Shapes: skinny (1..8 rows, decode), odd (nothing a multiple of a tile or block), wider than
// one depth block (1024 nt, 256 nn/tn), wider than one column block, leading dimensions past the
// width; 1 and 2 threads.
//
// Bound, for every element: |y − y64| ≤ (depth + 2)·2⁻²⁴·(Σ_k |x_k·w_k| + |bias| + |y_old|), the
// worst case of any order of f32 sums (γ_n with n = depth + 2 roundings).
// Overwrite (accumulate = false): Y is filled with NaN first, so an element never written fails.
// Accumulate: Y holds random values first, and the bound includes them. Elements of Y outside the
// product (the ld padding) must keep their bits. NaN never passes.
// Batch invariance (gemm_nt): a row's bits do not depend on the other rows of the batch, the
// row count, or the thread count (the engine's generate depends on it).
import { beforeAll, describe, expect, it } from 'vitest'
import { nativeAddon } from '../../src/native.js'
import { mulberry32 } from '../reference/random-weights.js'

type Variant = 'nt' | 'nn' | 'tn'
interface MultiplyArgs {
  x: Float32Array
  ldx: number
  w: Float32Array
  ldw: number
  bias?: Float32Array
  y: Float32Array
  ldy: number
  rows: number
  cols: number
  depth: number
  accumulate?: boolean
  threads?: number
}
interface GemmBinding {
  multiply(variant: Variant, args: MultiplyArgs): void
  time(variant: Variant, rows: number, cols: number, depth: number, threads: number, reps: number): Float64Array
  fmaPeak(threads: number, iterations?: number): Float64Array
  kernel: string
}

const SEED = Number(process.env.GEMM_SEED ?? Math.floor(Math.random() * 2 ** 31))
const U = 2 ** -24
let gemm: GemmBinding
beforeAll(async () => {
  gemm = ((await nativeAddon()) as unknown as { gemm: GemmBinding }).gemm
})

function uniform(n: number, random: () => number): Float32Array {
  return Float32Array.from({ length: n }, () => 2 * random() - 1)
}

interface Shape {
  rows: number
  cols: number
  depth: number
}

// Operands of a variant with padded leading dimensions (ld = width + pad), and X's, W's index maps.
function operands(v: Variant, s: Shape, random: () => number, pad = 0) {
  const { rows, cols, depth } = s
  // x(i, k) and w(j, k): element i/j of the output's rows/columns at depth k.
  const xRows = v === 'tn' ? depth : rows, xWidth = v === 'tn' ? rows : depth
  const wRows = v === 'nt' ? cols : depth, wWidth = v === 'nt' ? depth : cols
  const ldx = xWidth + pad, ldw = wWidth + pad
  const x = uniform(Math.max(0, xRows * ldx), random), w = uniform(Math.max(0, wRows * ldw), random)
  const xAt = v === 'tn' ? (i: number, k: number) => x[k * ldx + i] : (i: number, k: number) => x[i * ldx + k]
  const wAt = v === 'nt' ? (j: number, k: number) => w[j * ldw + k] : (j: number, k: number) => w[k * ldw + j]
  return { x, ldx, w, ldw, xAt, wAt }
}

interface Case extends Shape {
  v: Variant
  accumulate: boolean
  bias: boolean
  threads: number
  pad: number
}

function label(c: Case, seed: number): string {
  return `${c.v} ${c.rows}×${c.cols}×${c.depth} acc=${c.accumulate} bias=${c.bias} threads=${c.threads} pad=${c.pad} seed=${seed}`
}

// Runs one case and checks every element against float64 (and the padding against its old bits).
function check(c: Case, seed: number): void {
  const random = mulberry32(seed)
  const { x, ldx, w, ldw, xAt, wAt } = operands(c.v, c, random, c.pad)
  const ldy = c.cols + c.pad
  const y = uniform(c.rows * ldy, random)
  const before = y.slice()
  if (!c.accumulate) for (let i = 0; i < c.rows; i++) y.fill(NaN, i * ldy, i * ldy + c.cols)
  const bias = c.bias ? uniform(c.cols, random) : undefined
  gemm.multiply(c.v, { x, ldx, w, ldw, bias, y, ldy, rows: c.rows, cols: c.cols, depth: c.depth, accumulate: c.accumulate, threads: c.threads })
  const at = label(c, seed)
  const gamma = (c.depth + 2) * U
  // the operands as float64 rows along the depth: a[i][k] = x(i, k), b[j][k] = w(j, k)
  const a = new Float64Array(c.rows * c.depth), b = new Float64Array(c.cols * c.depth)
  for (let k = 0; k < c.depth; k++) {
    for (let i = 0; i < c.rows; i++) a[i * c.depth + k] = xAt(i, k)
    for (let j = 0; j < c.cols; j++) b[j * c.depth + k] = wAt(j, k)
  }
  for (let i = 0; i < c.rows; i++) {
    for (let j = 0; j < c.cols; j++) {
      let sum = 0, magnitude = 0
      for (let k = 0, ai = i * c.depth, bj = j * c.depth; k < c.depth; k++) {
        const t = a[ai + k] * b[bj + k]
        sum += t
        magnitude += Math.abs(t)
      }
      if (bias) (sum += bias[j]), (magnitude += Math.abs(bias[j]))
      if (c.accumulate) (sum += before[i * ldy + j]), (magnitude += Math.abs(before[i * ldy + j]))
      const got = y[i * ldy + j]
      const err = Math.abs(got - sum)
      if (!(err <= gamma * magnitude)) expect.fail(`${at}: y[${i}][${j}] = ${got}, float64 ${sum}, |err| ${err} > bound ${gamma * magnitude}`)
    }
    for (let j = c.cols; j < ldy; j++)
      if (!Object.is(y[i * ldy + j], before[i * ldy + j])) expect.fail(`${at}: wrote y[${i}][${j}], outside the product`)
  }
}

const VARIANTS: Variant[] = ['nt', 'nn', 'tn']

describe(`gemm vs float64 (seed ${SEED})`, () => {
  it('names the micro-kernels it runs', () => {
    expect(gemm.kernel).toMatch(/dot .* outer /)
  })

  // Every combination of small odd sizes: edges of every tile (dot 4×3 on AVX2, 8×3 on AVX-512;
  // outer 6×16, 12×32) and of the 8- or 16-lane depth step, on 1 and 2 threads.
  for (const v of VARIANTS) {
    it(`${v}: odd and skinny shapes, overwrite and accumulate, 1 and 2 threads`, () => {
      let seed = SEED
      for (const rows of [1, 2, 3, 4, 5, 7, 8, 13])
        for (const cols of [1, 3, 4, 16, 17, 50])
          for (const depth of [0, 1, 7, 8, 9, 15, 17, 31, 33])
            for (const threads of [1, 2])
              for (const accumulate of [false, true])
                check({ v, rows, cols, depth, accumulate, bias: v === 'nt' && !accumulate, threads, pad: 3 }, seed++)
    })
  }

  // Shapes big enough to split across threads and to cross the cache blocks: depth past one
  // depth block, columns past one column block (and the next block's prefetch), rows past the
  // outer kernel's packed-rows limit.
  const BLOCKS: Array<[Variant, number, number, number]> = [
    ['nt', 37, 100, 1030], // two depth blocks, the second 6 deep; columns split by 48
    ['nt', 8, 290, 257], // decode-like: 8 rows, W panels across the block edge
    ['nt', 61, 5, 300], // too few columns to share: rows split
    ['nt', 1100, 100, 20], // rows packed 512 at a time
    ['nn', 23, 300, 531], // columns past one 256-column block, three depth blocks
    ['nn', 3, 300, 1900], // B of 2.2 MiB: the next block's lines are prefetched
    ['nn', 130, 40, 270],
    ['tn', 4200, 20, 50], // rows past the all-rows pack (4 MiB): row blocks, all columns one block
    ['tn', 4110, 4100, 2], // and columns past it too (1 thread): row blocks packed again per column block
    ['tn', 70, 270, 300],
    ['tn', 5, 33, 600],
  ]
  for (const [v, rows, cols, depth] of BLOCKS) {
    it(`${v} ${rows}×${cols}×${depth}: blocks and thread splits`, () => {
      let seed = SEED + rows * 7919 + cols * 131 + depth
      for (const threads of [1, 2])
        for (const accumulate of [false, true])
          check({ v, rows, cols, depth, accumulate, bias: v === 'nt' && !accumulate, threads, pad: 5 }, seed++)
    })
  }

  it('nt: a row is the same bits alone, in any batch, at any position, on 1 or 2 threads', () => {
    const random = mulberry32(SEED + 17)
    const cols = 150, depth = 1100 // two depth blocks, columns shared by two threads
    const w = uniform(cols * depth, random), bias = uniform(cols, random)
    const batch = 29
    const x = uniform(batch * depth, random)
    const run = (rows: Float32Array, count: number, threads: number) => {
      const y = new Float32Array(count * cols).fill(NaN)
      gemm.multiply('nt', { x: rows, ldx: depth, w, ldw: depth, bias, y, ldy: cols, rows: count, cols, depth, threads })
      return y
    }
    const full = run(x, batch, 2)
    expect(run(x, batch, 1), 'the batch on 1 thread vs 2').toEqual(full)
    for (const r of [0, 5, 28]) {
      const alone = run(x.subarray(r * depth, (r + 1) * depth), 1, 2)
      expect(alone, `row ${r} alone vs in the batch (seed ${SEED})`).toEqual(full.subarray(r * cols, (r + 1) * cols))
      // the same row in a batch of 3 as the middle row, and as the first of 8
      const three = new Float32Array(3 * depth)
      three.set(x.subarray(0, depth), 0), three.set(x.subarray(r * depth, (r + 1) * depth), depth), three.set(x.subarray(0, depth), 2 * depth)
      expect(run(three, 3, 2).subarray(cols, 2 * cols), `row ${r} as row 1 of 3`).toEqual(full.subarray(r * cols, (r + 1) * cols))
      if (r + 8 <= batch)
        expect(run(x.subarray(r * depth, (r + 8) * depth), 8, 1).subarray(0, cols), `row ${r} as row 0 of 8`).toEqual(full.subarray(r * cols, (r + 1) * cols))
    }
  })

  it('NaN in an input reaches the outputs that read it, and only those', () => {
    for (const v of VARIANTS) {
      const s = { rows: 9, cols: 20, depth: 40 }
      const { x, ldx, w, ldw } = operands(v, s, mulberry32(SEED + 3))
      // poison X's (row 4, depth 7): row 4 of Y reads it, no other row does
      x[v === 'tn' ? 7 * ldx + 4 : 4 * ldx + 7] = NaN
      const y = new Float32Array(s.rows * s.cols)
      gemm.multiply(v, { x, ldx, w, ldw, y, ldy: s.cols, ...s, threads: 2 })
      for (let i = 0; i < s.rows; i++)
        for (let j = 0; j < s.cols; j++) expect(Number.isNaN(y[i * s.cols + j]), `${v} y[${i}][${j}]`).toBe(i === 4)
    }
  })

  it('refuses arrays too small for the shape, aliasing, and bad variants with typed errors', () => {
    const x = new Float32Array(12), w = new Float32Array(12), y = new Float32Array(9)
    const ok = { x, ldx: 4, w, ldw: 4, y, ldy: 3, rows: 3, cols: 3, depth: 4 }
    const okNN = { ...ok, ldw: 3 } // W is depth × cols there
    expect(() => gemm.multiply('nt', ok)).not.toThrow()
    expect(() => gemm.multiply('nn', okNN)).not.toThrow()
    expect(() => gemm.multiply('nt', { ...ok, y: new Float32Array(8) })).toThrow(RangeError)
    expect(() => gemm.multiply('nt', { ...ok, ldx: 3 })).toThrow(RangeError)
    expect(() => gemm.multiply('nn', { ...okNN, w: new Float32Array(11) })).toThrow(RangeError)
    expect(() => gemm.multiply('nt', { ...ok, y: x.subarray(0, 9) })).toThrow(RangeError)
    expect(() => gemm.multiply('nn', { ...okNN, bias: new Float32Array(3) })).toThrow(TypeError)
    expect(() => gemm.multiply('nt', { ...ok, rows: 2.5 })).toThrow(RangeError)
    expect(() => gemm.multiply('xx' as Variant, ok)).toThrow(TypeError)
    expect(() => gemm.multiply('nt', { ...ok, x: [1, 2] as unknown as Float32Array })).toThrow(TypeError)
  })

  it('times a product and measures the FMA peak', () => {
    const t = gemm.time('nn', 16, 64, 64, 2, 2)
    expect(t.length).toBe(2)
    for (const s of t) expect(s).toBeGreaterThan(0)
    const peak = gemm.fmaPeak(2, 1 << 14)
    expect(peak.length).toBe(2)
    for (const f of peak) expect(f).toBeGreaterThan(0)
  })
})
