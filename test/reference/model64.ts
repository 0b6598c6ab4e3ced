// Float64 reference forward pass of a decoder-only transformer in the Llama / Qwen2 / Qwen3 families.
//
// Written to be read, not to be fast: one token at a time, one vector at a time, every layer in
// plain loops. It follows Hugging Face transformers' modeling_llama.py, modeling_qwen2.py and
// modeling_qwen3.py:
//
//   x = embed_tokens[token]
//   for each layer:
//     h = rmsnorm(x, input_layernorm)
//     q, k, v = q_proj(h), k_proj(h), v_proj(h)          (+ bias when config.qkvBias)
//     q, k = q_norm(q), k_norm(k) per head               (Qwen3, config.qkNorm)
//     q, k = rope(q, pos), rope(k, pos)                  (rotate_half layout, absolute positions)
//     a = softmax(q·kᵀ / sqrt(headDim), causal) · v      (GQA: head h reads kv head h / (heads/kvHeads))
//     x = x + o_proj(a)                                  (+ bias when config.oBias)
//     h = rmsnorm(x, post_attention_layernorm)
//     x = x + down_proj(silu(gate_proj(h)) * up_proj(h))
//   logits = lm_head(rmsnorm(x, norm))                   (lm_head = embed_tokens when tied)
//
// Everything is float64. Where HF computes something in float32 regardless of the model dtype
// (inv_freq, RMSNorm, the attention softmax), this file computes it exactly in float64 instead.

import { modelTensors, tensorName } from '../../src/engine/tensor-table.js'
import type { ModelConfig } from '../../src/engine/types.js'

export type Weights64 = Map<string, Float64Array>

// ----------------------------------------------------------------------------------------------
// Tensor names and shapes

/**
 * Every tensor the model reads, with its HF name and shape ([out, in] for linear weights): the
 * engine's own tensor table (native/model/tensor_table.def), so the names are written once. The
 * arithmetic below is this file's own.
 */
export function weightShapes64(config: ModelConfig): Map<string, number[]> {
  return new Map(modelTensors(config).map((t) => [t.name, t.shape]))
}

/** Checks that every tensor the config needs is present with the right element count. */
export function checkWeights64(config: ModelConfig, weights: Weights64): void {
  for (const [name, shape] of weightShapes64(config)) {
    const t = weights.get(name)
    if (!t) throw new Error(`reference: missing tensor ${name}`)
    const n = shape.reduce((a, b) => a * b, 1)
    if (t.length !== n) throw new Error(`reference: ${name} has ${t.length} elements, expected [${shape}] = ${n}`)
  }
}

// ----------------------------------------------------------------------------------------------
// Ops, one vector at a time

/** RMSNorm: y = x / sqrt(mean(x²) + eps) * weight. */
export function rmsnorm64(x: Float64Array, weight: Float64Array, eps: number): Float64Array {
  const n = x.length
  if (weight.length !== n) throw new Error(`rmsnorm64: weight length ${weight.length} != ${n}`)
  let ss = 0
  for (let i = 0; i < n; i++) ss += x[i] * x[i]
  const inv = 1 / Math.sqrt(ss / n + eps)
  const y = new Float64Array(n)
  for (let i = 0; i < n; i++) y[i] = x[i] * inv * weight[i]
  return y
}

/** y = W x + b with W stored row-major as [outDim, inDim] (torch.nn.Linear layout). */
export function linear64(
  x: Float64Array,
  W: Float64Array,
  bias: Float64Array | null | undefined,
  outDim: number,
): Float64Array {
  const inDim = x.length
  if (W.length !== outDim * inDim) throw new Error(`linear64: W has ${W.length} elements, expected ${outDim}x${inDim}`)
  if (bias && bias.length !== outDim) throw new Error(`linear64: bias length ${bias.length} != ${outDim}`)
  const y = new Float64Array(outDim)
  for (let o = 0; o < outDim; o++) {
    let s = bias ? bias[o] : 0
    const row = o * inDim
    for (let i = 0; i < inDim; i++) s += W[row + i] * x[i]
    y[o] = s
  }
  return y
}

/** silu(x) = x * sigmoid(x). */
export function silu64(x: number): number {
  return x / (1 + Math.exp(-x))
}

/** SwiGLU: silu(gate) * up, elementwise. */
export function swiglu64(gate: Float64Array, up: Float64Array): Float64Array {
  if (gate.length !== up.length) throw new Error('swiglu64: gate and up differ in length')
  const y = new Float64Array(gate.length)
  for (let i = 0; i < gate.length; i++) y[i] = silu64(gate[i]) * up[i]
  return y
}

/**
 * RoPE inverse frequencies, headDim/2 of them: invFreq[i] = theta^(-2i/headDim), then Llama 3
 * frequency-dependent scaling when config.ropeScaling is set (transformers'
 * `_compute_llama3_parameters`): wavelengths shorter than oldCtx/highFreqFactor are kept, longer
 * than oldCtx/lowFreqFactor are divided by `factor`, and those between are blended smoothly.
 */
export function ropeInvFreq64(config: Pick<ModelConfig, 'headDim' | 'ropeTheta' | 'ropeScaling'>): Float64Array {
  const d = config.headDim
  if (d % 2 !== 0) throw new Error(`ropeInvFreq64: headDim ${d} is odd`)
  const inv = new Float64Array(d / 2)
  for (let i = 0; i < d / 2; i++) inv[i] = 1 / Math.pow(config.ropeTheta, (2 * i) / d)
  const s = config.ropeScaling
  if (s === null) return inv
  if (s.type !== 'llama3') throw new Error(`ropeInvFreq64: unsupported rope scaling ${String(s.type)}`)
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor
  for (let i = 0; i < inv.length; i++) {
    const wavelen = (2 * Math.PI) / inv[i]
    if (wavelen < highFreqWavelen) continue // high frequency: unchanged
    if (wavelen > lowFreqWavelen) {
      inv[i] = inv[i] / s.factor // low frequency: interpolated by `factor`
    } else {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor)
      inv[i] = (1 - smooth) * (inv[i] / s.factor) + smooth * inv[i]
    }
  }
  return inv
}

/**
 * Rotary embedding of one head vector at absolute position `pos`, in HF's rotate_half layout:
 * element i pairs with element i + d/2 (not with i+1 as in the original GPT-J / Meta layout).
 *   out[i]       = x[i]       cos(pos·f_i) − x[i + d/2] sin(pos·f_i)
 *   out[i + d/2] = x[i + d/2] cos(pos·f_i) + x[i]       sin(pos·f_i)
 */
export function applyRope64(x: Float64Array, pos: number, invFreq: Float64Array): Float64Array {
  const half = invFreq.length
  if (x.length !== 2 * half) throw new Error(`applyRope64: vector length ${x.length} != 2 * ${half}`)
  const y = new Float64Array(x.length)
  for (let i = 0; i < half; i++) {
    const angle = pos * invFreq[i]
    const c = Math.cos(angle)
    const s = Math.sin(angle)
    const a = x[i]
    const b = x[i + half]
    y[i] = a * c - b * s
    y[i + half] = b * c + a * s
  }
  return y
}

/**
 * Attention of one query position over the keys/values it may see (the caller passes exactly the
 * visible positions, so causality is the caller's slicing). q: [numHeads * headDim];
 * keys[j], values[j]: [numKvHeads * headDim]. Head h reads kv head floor(h / (numHeads/numKvHeads)),
 * as transformers' repeat_kv does. Scores are scaled by 1/sqrt(headDim). Returns [numHeads * headDim].
 */
export function attention64(
  q: Float64Array,
  keys: readonly Float64Array[],
  values: readonly Float64Array[],
  numHeads: number,
  numKvHeads: number,
  headDim: number,
): Float64Array {
  if (numHeads % numKvHeads !== 0) throw new Error(`attention64: ${numHeads} heads not divisible by ${numKvHeads} kv heads`)
  if (keys.length !== values.length || keys.length === 0) throw new Error('attention64: need ≥1 key, as many values')
  const groupSize = numHeads / numKvHeads
  const scale = 1 / Math.sqrt(headDim)
  const n = keys.length
  const out = new Float64Array(numHeads * headDim)
  const scores = new Float64Array(n)
  for (let h = 0; h < numHeads; h++) {
    const qOff = h * headDim
    const kvOff = Math.floor(h / groupSize) * headDim
    let max = -Infinity
    for (let j = 0; j < n; j++) {
      let dot = 0
      for (let d = 0; d < headDim; d++) dot += q[qOff + d] * keys[j][kvOff + d]
      scores[j] = dot * scale
      if (scores[j] > max) max = scores[j]
    }
    let sum = 0
    for (let j = 0; j < n; j++) {
      scores[j] = Math.exp(scores[j] - max)
      sum += scores[j]
    }
    for (let j = 0; j < n; j++) {
      const p = scores[j] / sum
      for (let d = 0; d < headDim; d++) out[qOff + d] += p * values[j][kvOff + d]
    }
  }
  return out
}

// ----------------------------------------------------------------------------------------------
// KV cache and forward

/** Per layer, one post-RoPE key and one value vector ([numKvHeads * headDim]) per cached position. */
export interface KVCache64 {
  layers: { keys: Float64Array[]; values: Float64Array[] }[]
  /** Number of cached positions; the next token goes at absolute position `length`. */
  length: number
}

export function createKVCache64(config: ModelConfig): KVCache64 {
  const layers = []
  for (let l = 0; l < config.numLayers; l++) layers.push({ keys: [], values: [] })
  return { layers, length: 0 }
}

/**
 * Causal forward of `tokens`, at absolute positions startPos, startPos+1, …; returns logits
 * [tokens.length × vocabSize], row-major.
 *
 * With `cache`: the tokens continue the cached sequence, so `startPos` must equal `cache.length`
 * (it defaults to it); their keys/values are appended and attention sees cache + new tokens.
 * Without a cache: attention sees only `tokens`, and `startPos` only shifts RoPE positions.
 */
export function forward64(
  config: ModelConfig,
  weights: Weights64,
  tokens: readonly number[],
  startPos?: number,
  cache?: KVCache64,
): Float64Array {
  const pos0 = startPos ?? cache?.length ?? 0
  if (cache && pos0 !== cache.length) throw new Error(`forward64: startPos ${pos0} != cache length ${cache.length}`)
  const kv = cache ?? createKVCache64(config)
  if (kv.layers.length !== config.numLayers) throw new Error('forward64: cache has the wrong number of layers')
  const { vocabSize: V, hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim, rmsNormEps: eps } = config
  checkWeights64(config, weights)
  for (const token of tokens) {
    if (!Number.isInteger(token) || token < 0 || token >= V) throw new Error(`forward64: token ${token} out of range [0, ${V})`)
  }
  const w = (id: string, layer = -1) => weights.get(tensorName(id, layer))!
  const bias = (id: string, layer: number, present: boolean) => (present ? w(id, layer) : null)
  const invFreq = ropeInvFreq64(config)
  const embed = w('kEmbed')
  const lmHead = config.tieWordEmbeddings ? embed : w('kLmHead')
  const logits = new Float64Array(tokens.length * V)

  for (let t = 0; t < tokens.length; t++) {
    const token = tokens[t]
    const pos = pos0 + t
    const x = embed.slice(token * H, (token + 1) * H)

    for (let l = 0; l < config.numLayers; l++) {
      const layerCache = kv.layers[l]

      // Attention block
      const h = rmsnorm64(x, w('kAttnNorm', l), eps)
      const q = linear64(h, w('kWq', l), bias('kBq', l, config.qkvBias), numHeads * headDim)
      const k = linear64(h, w('kWk', l), bias('kBk', l, config.qkvBias), numKvHeads * headDim)
      const v = linear64(h, w('kWv', l), bias('kBv', l, config.qkvBias), numKvHeads * headDim)
      const qNorm = config.qkNorm ? w('kQNorm', l) : null
      const kNorm = config.qkNorm ? w('kKNorm', l) : null
      for (let hd = 0; hd < numHeads; hd++) {
        let head = q.subarray(hd * headDim, (hd + 1) * headDim)
        if (qNorm) head = rmsnorm64(head, qNorm, eps)
        q.set(applyRope64(head, pos, invFreq), hd * headDim)
      }
      for (let hd = 0; hd < numKvHeads; hd++) {
        let head = k.subarray(hd * headDim, (hd + 1) * headDim)
        if (kNorm) head = rmsnorm64(head, kNorm, eps)
        k.set(applyRope64(head, pos, invFreq), hd * headDim)
      }
      layerCache.keys.push(k)
      layerCache.values.push(v)
      const a = attention64(q, layerCache.keys, layerCache.values, numHeads, numKvHeads, headDim)
      const o = linear64(a, w('kWo', l), bias('kBo', l, config.oBias), H)
      for (let i = 0; i < H; i++) x[i] += o[i]

      // MLP block
      const h2 = rmsnorm64(x, w('kMlpNorm', l), eps)
      const gate = linear64(h2, w('kWGate', l), null, I)
      const up = linear64(h2, w('kWUp', l), null, I)
      const m = linear64(swiglu64(gate, up), w('kWDown', l), null, H)
      for (let i = 0; i < H; i++) x[i] += m[i]
    }
    kv.length = pos + 1

    const final = rmsnorm64(x, w('kFinalNorm'), eps)
    logits.set(linear64(final, lmHead, null, V), t * V)
  }
  return logits
}

/** Row `t` of a [T × V] logits array, as a view. */
export function logitsRow64(logits: Float64Array, vocabSize: number, t: number): Float64Array {
  return logits.subarray(t * vocabSize, (t + 1) * vocabSize)
}
