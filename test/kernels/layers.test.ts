// The per-layer kernel pairs of native/kernels/ (RMSNorm, RoPE and its inverse, SwiGLU, the
// attention row), the same functions the CPU and CUDA backends call, through the addon's kernel
// bindings: each forward against its float64 reference (test/reference/layers64.ts), each
// backward against central differences of that reference, on fresh random inputs of odd shapes.
// Outputs arrive NaN-poisoned from the binding, so an element a kernel does not write fails.
//
// Bounds: forward |native − ref| ≤ 4e-6·max(1, |ref|) (f32 arithmetic on rows of ≤ 64 terms, with
// the f64-accumulating RMSNorm; 3e-5 for the f32-accumulating variant the device runs). Gradients
// |native − fd| ≤ 2e-5·(|fd| + s), s the largest |fd| of that tensor (fd: float64, h = 1e-6).
import { describe, expect, it } from 'vitest'
import { attentionRow64, rmsnormRows64, ropeRows64, swiglu64 } from '../reference/layers64.js'
import { kernels } from './kernels.js'

const k = await kernels()

function rng(seed: number) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
    return s / 2 ** 32
  }
}
const random = (r: () => number, n: number, scale = 1, offset = 0) => Float32Array.from({ length: n }, () => offset + scale * (2 * r() - 1))

function expectClose(name: string, got: ArrayLike<number>, want: ArrayLike<number>, tol: number) {
  expect(got.length, name).toBe(want.length)
  for (let i = 0; i < want.length; ++i) {
    expect(Number.isFinite(got[i]), `${name}[${i}] = ${got[i]}`).toBe(true)
    expect(Math.abs(got[i] - want[i]), `${name}[${i}]: ${got[i]} vs ${want[i]}`).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(want[i])))
  }
}

/** Central differences of L(inputs) = Σ f(inputs)·c with respect to every element of inputs[which]. */
function finiteDifferences(inputs: Float64Array[], which: number, f: (xs: Float64Array[]) => Float64Array, c: ArrayLike<number>, h = 1e-6): Float64Array {
  const x = inputs[which]
  const loss = () => f(inputs).reduce((s, y, i) => s + y * c[i], 0)
  return Float64Array.from(x, (orig, i) => {
    x[i] = orig + h
    const up = loss()
    x[i] = orig - h
    const down = loss()
    x[i] = orig
    return (up - down) / (2 * h)
  })
}

function expectGradient(name: string, got: ArrayLike<number>, fd: Float64Array) {
  const s = Math.max(...Array.from(fd, Math.abs))
  expect(got.length, name).toBe(fd.length)
  for (let i = 0; i < fd.length; ++i) {
    expect(Number.isFinite(got[i]), `${name}[${i}] = ${got[i]}`).toBe(true)
    expect(Math.abs(got[i] - fd[i]), `${name}[${i}]: ${got[i]} vs finite difference ${fd[i]}`).toBeLessThanOrEqual(2e-5 * (Math.abs(fd[i]) + s))
  }
}

const f64 = (a: ArrayLike<number>) => Float64Array.from(a)

describe.each([1, 2, 3])('kernel pairs on fresh random inputs (seed %d)', (seed) => {
  it('RMSNorm: forward (f64 and f32 accumulation) and backward (dx, dw)', () => {
    const r = rng(seed * 101)
    const rows = 3 + seed
    const n = 37 + 4 * seed
    const eps = 1e-5
    const x = random(r, rows * n, 2)
    const w = random(r, n, 0.5, 1)
    const dy = random(r, rows * n)
    const want = rmsnormRows64(x, w, rows, n, eps)
    expectClose('y', k.rmsnorm(x, w, rows, n, eps), want, 4e-6)
    expectClose('y (f32 accumulation)', k.rmsnorm(x, w, rows, n, eps, { accumulator: 'f32' }), want, 3e-5)
    const f = ([xs, ws]: Float64Array[]) => rmsnormRows64(xs, ws, rows, n, eps)
    const inputs = [f64(x), f64(w)]
    for (const accumulator of ['f64', 'f32'] as const) {
      const { dx, dw } = k.rmsnormBackward(x, w, dy, rows, n, eps, { accumulator })
      expectGradient(`dx (${accumulator})`, dx, finiteDifferences(inputs, 0, f, dy))
      expectGradient(`dw (${accumulator})`, dw, finiteDifferences(inputs, 1, f, dy))
    }
  })

  it('RoPE: forward, its inverse undoes it, and the inverse is the backward', () => {
    const r = rng(seed * 103)
    const rows = 2 + seed
    const d = 2 * (5 + seed)
    const x = random(r, rows * d, 3)
    const angles = Float64Array.from({ length: rows * (d / 2) }, () => 40 * r())
    const cos = Float32Array.from(angles, Math.cos)
    const sin = Float32Array.from(angles, Math.sin)
    const y = k.rope(x, cos, sin, rows, d)
    expectClose('rope(x)', y, ropeRows64(x, cos, sin, rows, d), 4e-6)
    expectClose('inverse(rope(x))', k.ropeInverse(y, cos, sin, rows, d), x, 4e-6)
    const c = random(r, rows * d)
    const fd = finiteDifferences([f64(x)], 0, ([xs]) => ropeRows64(xs, cos, sin, rows, d), c)
    expectGradient('dx = inverse(dy)', k.ropeInverse(c, cos, sin, rows, d), fd)
  })

  it('SwiGLU: forward and backward (d gate, d up)', () => {
    const r = rng(seed * 107)
    const n = 41 + 6 * seed
    const gate = random(r, n, 6)
    const up = random(r, n, 2)
    const dh = random(r, n)
    expectClose('h', k.swiglu(gate, up), swiglu64(gate, up), 4e-6)
    const { dgate, dup } = k.swigluBackward(gate, up, dh)
    const f = ([g, u]: Float64Array[]) => swiglu64(g, u)
    const inputs = [f64(gate), f64(up)]
    expectGradient('d gate', dgate, finiteDifferences(inputs, 0, f, dh))
    expectGradient('d up', dup, finiteDifferences(inputs, 1, f, dh))
  })

  it('attention row: two-pass and online forward; backward (dq, dk, dv) over strided keys', () => {
    const r = rng(seed * 109)
    const d = 7 + 2 * seed
    const n = 5 + 3 * seed
    const stride = d + 3
    const scale = 1 / Math.sqrt(d)
    const q = random(r, d, 2)
    const keys = random(r, n * stride, 2)
    const values = random(r, n * stride, 2)
    const want = attentionRow64(q, keys, values, stride, n, d, scale)
    expectClose('out (two-pass)', k.attentionRow(q, keys, values, stride, n, d, scale), want, 4e-6)
    expectClose('out (online)', k.attentionRow(q, keys, values, stride, n, d, scale, { online: true }), want, 4e-6)
    const dout = random(r, d)
    const { dq, dk, dv } = k.attentionRowBackward(q, keys, values, stride, n, d, scale, dout)
    const f = ([qs, ks, vs]: Float64Array[]) => attentionRow64(qs, ks, vs, stride, n, d, scale)
    const inputs = [f64(q), f64(keys), f64(values)]
    expectGradient('dq', dq, finiteDifferences(inputs, 0, f, dout))
    // dk and dv hold [n × stride]: the head's columns carry the gradient, the others stay 0.
    expectGradient('dk', dk, finiteDifferences(inputs, 1, f, dout))
    expectGradient('dv', dv, finiteDifferences(inputs, 2, f, dout))
  })
})

describe('kernel bindings reject what does not fit', () => {
  it('sizes that disagree are RangeErrors; RoPE needs an even head size', () => {
    const x = new Float32Array(12)
    expect(() => k.rmsnorm(x, new Float32Array(5), 2, 6, 1e-6)).toThrow(RangeError)
    expect(() => k.rope(x, new Float32Array(3), new Float32Array(3), 2, 6)).toThrow(RangeError)
    expect(() => k.rope(new Float32Array(10), new Float32Array(5), new Float32Array(5), 2, 5)).toThrow(/even/)
    expect(() => k.swigluBackward(x, x, new Float32Array(11))).toThrow(RangeError)
    expect(() => k.attentionRow(new Float32Array(4), x, x, 4, 4, 4, 0.5)).toThrow(RangeError)
  })
})
