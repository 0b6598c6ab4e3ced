// Native backward against central finite differences of the float64 reference, on tiny random
// models of each family: full fine-tuning (every tensor kind) and LoRA adapters.
//
// The loss is the generic functional the engine back-propagates, L = Σ_t a_t·log p_t + b_t·H_t
// over completion tokens, with fresh random a, b. Bound: |g_native − g_fd| ≤ 2e-3·|g_fd| + 1e-4·s
// where s is the largest |g_fd| seen in that tensor (f32 backward against f64 differences, h = 1e-5).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { loadModel } from '../../src/index.js'
import { forward64 } from '../reference/model64.js'
import { writeTinyModel, type TinyModelOptions } from '../helpers/tiny-model.js'
import type { ModelConfig } from '../../src/engine/types.js'

type Weights = Map<string, Float64Array>

function lossOf(config: ModelConfig, weights: Weights, tokens: number[], promptLength: number, a: number[], b: number[]): number {
  const V = config.vocabSize
  const logits = forward64(config, weights, tokens.slice(0, -1))
  let loss = 0
  for (let t = promptLength - 1, r = 0; t < tokens.length - 1; ++t, ++r) {
    const z = logits.subarray(t * V, (t + 1) * V)
    let m = -Infinity
    for (const v of z) m = Math.max(m, v)
    let s = 0
    for (const v of z) s += Math.exp(v - m)
    const lse = m + Math.log(s)
    let H = 0
    for (const v of z) {
      const lp = v - lse
      H -= Math.exp(lp) * lp
    }
    loss += a[r] * (z[tokens[t + 1]] - lse) + b[r] * H
  }
  return loss
}

function rng(seed: number) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
    return s / 2 ** 32
  }
}

const roots: string[] = []
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })))

async function setup(opts: TinyModelOptions) {
  const root = mkdtempSync(join(tmpdir(), 'ad-grad-'))
  roots.push(root)
  const tiny = await writeTinyModel(join(root, 'm'), { ...opts, dtype: 'F32' })
  const model = await loadModel(tiny.dir, { threads: 2 })
  return { tiny, model }
}

function checkTensor(name: string, native: Float32Array, fd: Map<number, number>) {
  const scale = Math.max(...[...fd.values()].map(Math.abs))
  for (const [i, g] of fd) {
    const err = Math.abs(native[i] - g)
    expect(err, `${name}[${i}]: native ${native[i]} vs finite difference ${g}`).toBeLessThanOrEqual(2e-3 * Math.abs(g) + 1e-4 * scale + 1e-9)
  }
}

const FAMILIES: [string, TinyModelOptions][] = [
  ['llama (rope scaling, attention bias)', { family: 'llama', dtype: 'F32', seed: 31, ropeScaling: true, attentionBias: true, hiddenSize: 16, intermediate: 24 }],
  ['qwen2 (qkv bias, tied)', { family: 'qwen2', dtype: 'F32', seed: 32, tied: true, hiddenSize: 16, intermediate: 24 }],
  ['qwen3 (q/k norm)', { family: 'qwen3', dtype: 'F32', seed: 33, hiddenSize: 16, intermediate: 24, headDim: 8 }],
]

describe.each(FAMILIES)('gradients: %s', (_name, opts) => {
  it('full fine-tuning: every tensor matches finite differences', async () => {
    const { tiny, model } = await setup(opts)
    const addon = (await import('../../src/native.js')).nativeAddon
    const train = (await addon()).train as any
    train.setTrainable(model.handle, true, false)
    const r = rng(opts.seed)
    const tokens = Array.from({ length: 9 }, () => Math.floor(r() * 300))
    const P = 3
    const rows = tokens.length - P
    const a = Array.from({ length: rows }, () => r() * 2 - 1)
    const b = Array.from({ length: rows }, () => r() * 2 - 1)
    const fwd = await train.forward(model.handle, { tokens: Int32Array.from(tokens), lengths: Int32Array.of(tokens.length), promptLengths: Int32Array.of(P) })
    expect(fwd.logp.length).toBe(rows)
    await train.backward(model.handle, { a: Float32Array.from(a), b: Float32Array.from(b) })
    const grads = new Map<string, Float32Array>(((await train.exportGradients(model.handle)) as { name: string; data: Float32Array }[]).map((g) => [g.name, g.data]))
    // every parameter tensor of the model received a gradient
    expect([...grads.keys()].sort()).toEqual([...tiny.weights.keys()].filter((n) => !(n === 'lm_head.weight' && tiny.config.tieWordEmbeddings)).sort())
    const h = 1e-5
    for (const [name, w] of tiny.weights) {
      const picks = new Set<number>()
      // embedding rows only move for tokens present; pick from those rows
      if (name === 'model.embed_tokens.weight') for (let k = 0; k < 3; ++k) picks.add(tokens[k] * tiny.config.hiddenSize + Math.floor(r() * tiny.config.hiddenSize))
      while (picks.size < Math.min(4, w.length)) picks.add(Math.floor(r() * w.length))
      const fd = new Map<number, number>()
      for (const i of picks) {
        const orig = w[i]
        w[i] = orig + h
        const up = lossOf(tiny.config, tiny.weights, tokens, P, a, b)
        w[i] = orig - h
        const down = lossOf(tiny.config, tiny.weights, tokens, P, a, b)
        w[i] = orig
        fd.set(i, (up - down) / (2 * h))
      }
      checkTensor(name, grads.get(name)!, fd)
    }
    model.dispose()
  })

  it('LoRA: adapter gradients match finite differences of the merged weights', async () => {
    const { tiny, model } = await setup(opts)
    const train = ((await (await import('../../src/native.js')).nativeAddon()) as any).train
    const rank = 2
    const alpha = 4
    train.attachLora(model.handle, { rank, alpha, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], seed: 5 })
    train.setTrainable(model.handle, false, true)
    const r = rng(opts.seed + 100)
    // B = 0 at init would zero every A gradient: give B random values first.
    const tensors = (await train.exportTensors(model.handle)) as { name: string; shape: number[]; data: Float32Array }[]
    const lora = new Map<string, { shape: number[]; data: Float32Array }>()
    for (const t of tensors) if (t.name.includes('lora_')) lora.set(t.name, t)
    for (const [name, t] of lora) if (name.includes('lora_B')) for (let i = 0; i < t.data.length; ++i) t.data[i] = (r() * 2 - 1) * 0.3
    await train.importTensors(model.handle, [...lora].map(([name, t]) => ({ name, data: t.data })))

    const merged = (): Weights => {
      const out = new Map(tiny.weights)
      for (const [name] of lora) {
        if (!name.includes('lora_A')) continue
        const base = name.replace('.lora_A.weight', '.weight')
        const A = lora.get(name)!
        const B = lora.get(name.replace('lora_A', 'lora_B'))!
        const [out_, in_] = [B.shape[0], A.shape[1]]
        const W = Float64Array.from(tiny.weights.get(base)!)
        for (let o = 0; o < out_; ++o)
          for (let i = 0; i < in_; ++i) {
            let s = 0
            for (let k = 0; k < rank; ++k) s += B.data[o * rank + k] * A.data[k * in_ + i]
            W[o * in_ + i] += (alpha / rank) * s
          }
        out.set(base, W)
      }
      return out
    }
    const tokens = Array.from({ length: 8 }, () => Math.floor(r() * 300))
    const P = 2
    const rows = tokens.length - P
    const a = Array.from({ length: rows }, () => r() * 2 - 1)
    const b = Array.from({ length: rows }, () => r() * 2 - 1)
    await train.forward(model.handle, { tokens: Int32Array.from(tokens), lengths: Int32Array.of(tokens.length), promptLengths: Int32Array.of(P) })
    await train.backward(model.handle, { a: Float32Array.from(a), b: Float32Array.from(b) })
    const grads = new Map<string, Float32Array>(((await train.exportGradients(model.handle)) as { name: string; data: Float32Array }[]).map((g) => [g.name, g.data]))
    expect([...grads.keys()].every((n) => n.includes('lora_'))).toBe(true)
    expect(grads.size).toBe(lora.size)
    // f32 adapters in the f64 reference: perturb a float64 copy
    const h = 1e-4
    for (const [name, t] of lora) {
      if (!/layers\.(0|1)\./.test(name)) continue
      const fd = new Map<number, number>()
      const copy = Float64Array.from(t.data)
      const view = t.data
      for (let k = 0; k < 3; ++k) {
        const i = Math.floor(r() * view.length)
        const evalAt = (x: number) => {
          const saved = view[i]
          ;(t as any).data = Float64Array.from(copy)
          ;(t as any).data[i] = x
          const L = lossOf(tiny.config, merged(), tokens, P, a, b)
          ;(t as any).data = view
          view[i] = saved
          return L
        }
        fd.set(i, (evalAt(copy[i] + h) - evalAt(copy[i] - h)) / (2 * h))
      }
      checkTensor(name, grads.get(name)!, fd)
    }
    model.dispose()
  })
})

describe('gradient checkpointing', () => {
  it('recomputing each layer in backward gives the same gradients, bit for bit', async () => {
    const { model } = await setup({ family: 'qwen3', dtype: 'F32', seed: 39 })
    const train = ((await (await import('../../src/native.js')).nativeAddon()) as any).train
    train.setTrainable(model.handle, true, false)
    const tokens = Int32Array.from([4, 8, 15, 16, 23, 42, 7, 9, 11])
    const request = { tokens: Int32Array.from([...tokens, ...tokens.slice(0, 6)]), lengths: Int32Array.of(9, 6), promptLengths: Int32Array.of(3, 2) }
    const a = Float32Array.from({ length: 10 }, (_, i) => Math.sin(i + 1))
    const b = Float32Array.from({ length: 10 }, (_, i) => Math.cos(i + 1) / 2)
    const gradsOf = async (checkpoint: boolean) => {
      train.zeroGrad(model.handle)
      await train.forward(model.handle, { ...request, checkpoint })
      await train.backward(model.handle, { a, b })
      return ((await train.exportGradients(model.handle)) as { name: string; data: Float32Array }[]).map((g) => [g.name, Array.from(g.data)])
    }
    const plain = await gradsOf(false)
    const recomputed = await gradsOf(true)
    expect(recomputed).toEqual(plain)
    expect(plain.length).toBeGreaterThan(10)
    model.dispose()
  })
})
