// Seeded random weights and tiny configs for tests of the float64 reference (and of the native
// engine against it). Deterministic: the same (config, seed, options) gives the same bits on every
// machine, because the generator is integer arithmetic only and tensors are filled in name order.

import type { Architecture, ModelConfig } from '../../src/engine/types.js'
import { weightShapes64, type Weights64 } from './model64.js'

/** mulberry32: a small 32-bit PRNG; returns uniforms in [0, 1) with 32 random bits. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Standard normal samples by Box–Muller from a uniform source. */
export function gaussian(uniform: () => number): () => number {
  return () => {
    const u1 = 1 - uniform() // (0, 1]: log is finite
    const u2 = uniform()
    return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2)
  }
}

/** Rounds to the nearest bfloat16 (round to nearest, ties to even), returned as a double. */
export function roundBf16(x: number): number {
  const f = new Float32Array([x])
  const u = new Uint32Array(f.buffer)
  if (Number.isNaN(f[0])) return x
  const lsb = (u[0] >>> 16) & 1
  u[0] = ((u[0] + 0x7fff + lsb) >>> 16) << 16
  return f[0]
}

export type WeightRounding = 'f32' | 'bf16' | 'none'

export interface RandomWeightOptions {
  /**
   * Round every value so it is exactly representable in this dtype (default 'f32'), so a model
   * written to safetensors in that dtype holds exactly the weights the reference computes with.
   */
  round?: WeightRounding
}

/**
 * Random weights for `config`, keyed by HF tensor names:
 *  - every matrix ~ N(0, 1/H or 1/in), so activations stay O(1) and logits have O(1) spread (a
 *    high-entropy next-token distribution) whether or not lm_head is tied to embed_tokens;
 *  - RMSNorm weights ~ 1 + 0.2·N(0, 1) and biases ~ 0.2·N(0, 1), so neither is a no-op.
 */
export function randomWeights64(config: ModelConfig, seed: number, options: RandomWeightOptions = {}): Weights64 {
  const round = options.round ?? 'f32'
  const rounder = round === 'f32' ? Math.fround : round === 'bf16' ? roundBf16 : (x: number) => x
  const normal = gaussian(mulberry32(seed))
  const weights: Weights64 = new Map()
  const shapes = weightShapes64(config)
  for (const name of [...shapes.keys()].sort()) {
    const shape = shapes.get(name)!
    const n = shape.reduce((a, b) => a * b, 1)
    let sample: () => number
    if (name.endsWith('norm.weight')) sample = () => 1 + 0.2 * normal()
    else if (name.endsWith('.bias')) sample = () => 0.2 * normal()
    else {
      const std = 1 / Math.sqrt(shape[1]) // [out, in]; [V, H] for embed_tokens
      sample = () => std * normal()
    }
    const t = new Float64Array(n)
    for (let i = 0; i < n; i++) t[i] = rounder(sample())
    weights.set(name, t)
  }
  return weights
}

/**
 * A tiny config of one family, with the family's defining switches: Llama (no biases, untied),
 * Qwen2 (q/k/v bias, tied), Qwen3 (q/k norm, tied, headDim ≠ hidden/heads). Override anything.
 */
export function tinyConfig64(architecture: Architecture, overrides: Partial<ModelConfig> = {}): ModelConfig {
  const base: ModelConfig = {
    architecture,
    hfArchitecture: { llama: 'LlamaForCausalLM', qwen2: 'Qwen2ForCausalLM', qwen3: 'Qwen3ForCausalLM' }[architecture],
    vocabSize: 97,
    hiddenSize: 32,
    intermediateSize: 48,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    headDim: architecture === 'qwen3' ? 16 : 8,
    rmsNormEps: 1e-6,
    ropeTheta: architecture === 'llama' ? 500000 : 1000000,
    ropeScaling: null,
    maxPositionEmbeddings: 2048,
    tieWordEmbeddings: architecture !== 'llama',
    qkvBias: architecture === 'qwen2',
    oBias: false,
    qkNorm: architecture === 'qwen3',
    bosTokenId: null,
    eosTokenIds: [],
    torchDtype: 'float32',
  }
  return { ...base, ...overrides }
}
