// config.json → ModelConfig for the three families (with transformers' defaults), the expected
// tensor list, and tensor validation errors.
import { describe, expect, it } from 'vitest'

import { ConfigError, MissingTensorError, TensorShapeError, UnsupportedArchitectureError } from '../../src/engine/errors.js'
import {
  expectedTensors,
  isSequenceClassification,
  parseModelConfig,
  parseModelHead,
  validateTensors,
} from '../../src/engine/hf/config.js'
import type { TensorRef } from '../../src/engine/types.js'

const F = '/models/x/config.json'

// Real configs as published (trimmed of nothing).
const QWEN3_0_6B = {
  architectures: ['Qwen3ForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: 'silu',
  hidden_size: 1024,
  initializer_range: 0.02,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: 'qwen3',
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.51.0',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
}

const LLAMA_3_2_1B = {
  architectures: ['LlamaForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 128000,
  eos_token_id: 128001,
  head_dim: 64,
  hidden_act: 'silu',
  hidden_size: 2048,
  initializer_range: 0.02,
  intermediate_size: 8192,
  max_position_embeddings: 131072,
  mlp_bias: false,
  model_type: 'llama',
  num_attention_heads: 32,
  num_hidden_layers: 16,
  num_key_value_heads: 8,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' },
  rope_theta: 500000.0,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.45.0.dev0',
  use_cache: true,
  vocab_size: 128256,
}

const QWEN2_5_0_5B = {
  architectures: ['Qwen2ForCausalLM'],
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  hidden_act: 'silu',
  hidden_size: 896,
  initializer_range: 0.02,
  intermediate_size: 4864,
  max_position_embeddings: 32768,
  max_window_layers: 21,
  model_type: 'qwen2',
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 32768,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.43.1',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
}

const MINIMAL = { vocab_size: 100, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4 }

function errorOf(f: () => unknown): Error {
  try {
    f()
  } catch (e) {
    return e as Error
  }
  throw new Error('expected an error')
}

describe('parseModelConfig', () => {
  it('Qwen3-0.6B', () => {
    expect(parseModelConfig(QWEN3_0_6B, F)).toEqual({
      architecture: 'qwen3',
      hfArchitecture: 'Qwen3ForCausalLM',
      vocabSize: 151936,
      hiddenSize: 1024,
      intermediateSize: 3072,
      numLayers: 28,
      numHeads: 16,
      numKvHeads: 8,
      headDim: 128,
      rmsNormEps: 1e-6,
      ropeTheta: 1000000,
      ropeScaling: null,
      maxPositionEmbeddings: 40960,
      tieWordEmbeddings: true,
      qkvBias: false,
      oBias: false,
      qkNorm: true,
      bosTokenId: 151643,
      eosTokenIds: [151645],
      torchDtype: 'bfloat16',
    })
  })

  it('Llama-3.2-1B with llama3 rope scaling', () => {
    const c = parseModelConfig(LLAMA_3_2_1B, F)
    expect(c.architecture).toBe('llama')
    expect(c.headDim).toBe(64)
    expect(c.ropeTheta).toBe(500000)
    expect(c.ropeScaling).toEqual({ type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 })
    expect(c.tieWordEmbeddings).toBe(true)
    expect(c.qkvBias).toBe(false)
    expect(c.qkNorm).toBe(false)
    expect(c.eosTokenIds).toEqual([128001])
    // the legacy key `type` works too
    const legacy = { ...LLAMA_3_2_1B, rope_scaling: { ...LLAMA_3_2_1B.rope_scaling, rope_type: undefined, type: 'llama3' } }
    expect(parseModelConfig(legacy, F).ropeScaling?.factor).toBe(32)
  })

  it('Qwen2.5-0.5B: q/k/v bias, head_dim from hidden/heads, sliding window off', () => {
    const c = parseModelConfig(QWEN2_5_0_5B, F)
    expect(c.architecture).toBe('qwen2')
    expect(c.headDim).toBe(64)
    expect(c.qkvBias).toBe(true)
    expect(c.oBias).toBe(false)
    expect(c.qkNorm).toBe(false)
  })

  it("applies transformers' family defaults", () => {
    const llama = parseModelConfig({ ...MINIMAL, architectures: ['LlamaForCausalLM'] }, F)
    expect(llama).toMatchObject({
      numKvHeads: 4,
      headDim: 8,
      rmsNormEps: 1e-6,
      ropeTheta: 10000,
      ropeScaling: null,
      maxPositionEmbeddings: 2048,
      tieWordEmbeddings: false,
      qkvBias: false,
      oBias: false,
      bosTokenId: 1,
      eosTokenIds: [2],
      torchDtype: null,
    })
    const qwen2 = parseModelConfig({ ...MINIMAL, architectures: ['Qwen2ForCausalLM'] }, F)
    expect(qwen2).toMatchObject({ headDim: 8, ropeTheta: 10000, maxPositionEmbeddings: 32768, tieWordEmbeddings: false, bosTokenId: null, eosTokenIds: [] })
    const qwen3 = parseModelConfig({ ...MINIMAL, architectures: ['Qwen3ForCausalLM'] }, F)
    expect(qwen3).toMatchObject({ headDim: 128, ropeTheta: 10000, tieWordEmbeddings: false, qkNorm: true })
    // model_type alone is enough when architectures is absent
    expect(parseModelConfig({ ...MINIMAL, model_type: 'qwen3' }, F).hfArchitecture).toBe('Qwen3ForCausalLM')
  })

  it('attention_bias gives Llama and Qwen3 q, k, v and o biases', () => {
    expect(parseModelConfig({ ...LLAMA_3_2_1B, attention_bias: true }, F)).toMatchObject({ qkvBias: true, oBias: true })
    expect(parseModelConfig({ ...QWEN3_0_6B, attention_bias: true }, F)).toMatchObject({ qkvBias: true, oBias: true })
  })

  it('eos_token_id may be a list; null ids are fine', () => {
    const c = parseModelConfig({ ...LLAMA_3_2_1B, eos_token_id: [128001, 128008, 128009], bos_token_id: null }, F)
    expect(c.eosTokenIds).toEqual([128001, 128008, 128009])
    expect(c.bosTokenId).toBeNull()
    expect(parseModelConfig({ ...QWEN3_0_6B, eos_token_id: null }, F).eosTokenIds).toEqual([])
  })

  it('reads the transformers v5 layout (rope_parameters, dtype)', () => {
    const v5 = {
      ...LLAMA_3_2_1B,
      rope_scaling: undefined,
      rope_theta: undefined,
      torch_dtype: undefined,
      dtype: 'bfloat16',
      rope_parameters: { rope_type: 'llama3', rope_theta: 500000, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
    }
    const c = parseModelConfig(v5, F)
    expect(c.ropeTheta).toBe(500000)
    expect(c.ropeScaling?.type).toBe('llama3')
    expect(c.torchDtype).toBe('bfloat16')
    const plain = parseModelConfig({ ...QWEN3_0_6B, rope_theta: undefined, rope_parameters: { rope_type: 'default', rope_theta: 1000000 } }, F)
    expect(plain.ropeTheta).toBe(1000000)
    expect(plain.ropeScaling).toBeNull()
  })

  it('unsupported architectures name the file and the class', () => {
    const e = errorOf(() => parseModelConfig({ ...MINIMAL, architectures: ['MistralForCausalLM'] }, F))
    expect(e).toBeInstanceOf(UnsupportedArchitectureError)
    expect((e as UnsupportedArchitectureError).code).toBe('UNSUPPORTED_ARCHITECTURE')
    expect((e as UnsupportedArchitectureError).file).toBe(F)
    expect(e.message).toContain(F)
    expect(e.message).toContain('MistralForCausalLM')
    expect(e.message).toContain('Qwen3ForCausalLM')
    const e2 = errorOf(() => parseModelConfig({ ...MINIMAL, model_type: 'gemma' }, F))
    expect(e2).toBeInstanceOf(UnsupportedArchitectureError)
    expect(e2.message).toContain('gemma')
  })

  it.each(['yarn', 'linear', 'dynamic', 'longrope'])('rope_scaling type %s is an UnsupportedArchitectureError naming the type', (type) => {
    const e = errorOf(() => parseModelConfig({ ...QWEN2_5_0_5B, rope_scaling: { type, factor: 4.0 } }, F))
    expect(e).toBeInstanceOf(UnsupportedArchitectureError)
    expect(e.message).toContain(`"${type}"`)
    expect(e.message).toContain(F)
    expect((e as UnsupportedArchitectureError).feature).toBe(`rope_scaling.rope_type=${type}`)
  })

  it('other unsupported options', () => {
    expect(() => parseModelConfig({ ...LLAMA_3_2_1B, mlp_bias: true }, F)).toThrow(UnsupportedArchitectureError)
    expect(() => parseModelConfig({ ...LLAMA_3_2_1B, hidden_act: 'gelu' }, F)).toThrow(/hidden_act "gelu"/)
    expect(() => parseModelConfig({ ...QWEN2_5_0_5B, use_sliding_window: true, max_window_layers: 12 }, F)).toThrow(/sliding-window/)
    // sliding window enabled but no layer uses it (max_window_layers ≥ layers) is fine
    expect(parseModelConfig({ ...QWEN2_5_0_5B, use_sliding_window: true, max_window_layers: 24 }, F).numLayers).toBe(24)
  })

  it('missing or invalid fields are ConfigErrors naming file and field', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...QWEN3_0_6B, hidden_size: undefined }, 'hidden_size'],
      [{ ...QWEN3_0_6B, vocab_size: '151936' }, 'vocab_size'],
      [{ ...QWEN3_0_6B, num_hidden_layers: 0 }, 'num_hidden_layers'],
      [{ ...QWEN3_0_6B, num_key_value_heads: 3 }, 'num_key_value_heads'],
      [{ ...QWEN3_0_6B, rms_norm_eps: -1 }, 'rms_norm_eps'],
      [{ ...QWEN3_0_6B, tie_word_embeddings: 'yes' }, 'tie_word_embeddings'],
      [{ ...QWEN3_0_6B, eos_token_id: [1, 'x'] }, 'eos_token_id[1]'],
      [{ ...QWEN3_0_6B, head_dim: 7 }, 'head_dim'],
      [{ ...LLAMA_3_2_1B, head_dim: undefined, hidden_size: 2050 }, 'head_dim'],
      [{ ...LLAMA_3_2_1B, rope_scaling: { rope_type: 'llama3', factor: 8 } }, 'rope_scaling.low_freq_factor'],
      [{ ...LLAMA_3_2_1B, rope_scaling: { ...LLAMA_3_2_1B.rope_scaling, high_freq_factor: 1 } }, 'rope_scaling.high_freq_factor'],
      [{ ...QWEN3_0_6B, architectures: [] }, 'architectures'],
    ]
    for (const [json, field] of cases) {
      const e = errorOf(() => parseModelConfig(json, F))
      expect(e, field).toBeInstanceOf(ConfigError)
      expect((e as ConfigError).field, e.message).toBe(field)
      expect((e as ConfigError).file).toBe(F)
      expect(e.message).toContain(F)
      expect(e.message).toContain(field.replace(/\[.*/, ''))
    }
    expect(() => parseModelConfig([], F)).toThrow(ConfigError)
  })
})

describe('sequence classification heads', () => {
  it('are accepted and reported, with a score head instead of lm_head', () => {
    const json = { ...QWEN3_0_6B, architectures: ['Qwen3ForSequenceClassification'], id2label: { 0: 'LABEL_0' }, pad_token_id: 151643 }
    const c = parseModelConfig(json, F)
    expect(c.architecture).toBe('qwen3')
    expect(c.hfArchitecture).toBe('Qwen3ForSequenceClassification')
    expect(isSequenceClassification(c)).toBe(true)
    const head = parseModelHead(json, F)
    expect(head).toEqual({ kind: 'sequence-classification', numLabels: 1, padTokenId: 151643 })
    const names = expectedTensors(c, head).map((t) => t.name)
    expect(names).toContain('score.weight')
    expect(names).not.toContain('lm_head.weight')
    expect(expectedTensors(c, head).find((t) => t.name === 'score.weight')!.shape).toEqual([1, 1024])
    expect(parseModelHead(QWEN3_0_6B, F)).toEqual({ kind: 'causal-lm' })
    expect(parseModelHead({ ...LLAMA_3_2_1B, architectures: ['LlamaForSequenceClassification'] }, F)).toMatchObject({ numLabels: 2 })
  })
})

describe('expectedTensors', () => {
  const small = (over: Record<string, unknown>) => parseModelConfig({ ...MINIMAL, num_key_value_heads: 2, ...over }, F)

  it('llama: 9 tensors a layer, lm_head unless tied, [out, in] shapes', () => {
    const t = expectedTensors(small({ architectures: ['LlamaForCausalLM'] }))
    expect(t).toHaveLength(1 + 2 * 9 + 1 + 1)
    const byName = new Map(t.map((x) => [x.name, x.shape]))
    expect(byName.get('model.embed_tokens.weight')).toEqual([100, 32])
    expect(byName.get('model.layers.1.self_attn.q_proj.weight')).toEqual([32, 32])
    expect(byName.get('model.layers.1.self_attn.k_proj.weight')).toEqual([16, 32])
    expect(byName.get('model.layers.1.self_attn.o_proj.weight')).toEqual([32, 32])
    expect(byName.get('model.layers.0.mlp.down_proj.weight')).toEqual([32, 64])
    expect(byName.get('model.layers.0.mlp.gate_proj.weight')).toEqual([64, 32])
    expect(byName.get('lm_head.weight')).toEqual([100, 32])
    expect(expectedTensors(small({ architectures: ['LlamaForCausalLM'], tie_word_embeddings: true })).map((x) => x.name)).not.toContain(
      'lm_head.weight',
    )
    const biased = expectedTensors(small({ architectures: ['LlamaForCausalLM'], attention_bias: true })).map((x) => x.name)
    expect(biased).toContain('model.layers.0.self_attn.o_proj.bias')
    expect(biased).toContain('model.layers.0.self_attn.v_proj.bias')
  })

  it('qwen2 adds q/k/v biases, qwen3 adds q/k norms of size head_dim', () => {
    const q2 = new Map(expectedTensors(small({ architectures: ['Qwen2ForCausalLM'] })).map((x) => [x.name, x.shape]))
    expect(q2.get('model.layers.0.self_attn.q_proj.bias')).toEqual([32])
    expect(q2.get('model.layers.0.self_attn.k_proj.bias')).toEqual([16])
    expect(q2.has('model.layers.0.self_attn.o_proj.bias')).toBe(false)
    const q3 = new Map(expectedTensors(small({ architectures: ['Qwen3ForCausalLM'], head_dim: 16 })).map((x) => [x.name, x.shape]))
    expect(q3.get('model.layers.0.self_attn.q_norm.weight')).toEqual([16])
    expect(q3.get('model.layers.0.self_attn.q_proj.weight')).toEqual([64, 32])
    expect(q3.get('model.layers.0.self_attn.o_proj.weight')).toEqual([32, 64])
    expect(q3.has('model.layers.0.self_attn.q_proj.bias')).toBe(false)
  })
})

describe('validateTensors', () => {
  const config = parseModelConfig({ ...MINIMAL, num_key_value_heads: 2, architectures: ['Qwen3ForCausalLM'], head_dim: 8 }, F)
  const file = '/models/x/model.safetensors'
  const refsFor = (cfg = config): TensorRef[] =>
    expectedTensors(cfg).map((t, i) => ({ name: t.name, shape: t.shape, dtype: 'BF16', file, offset: i * 4, nbytes: 4 }))

  it('passes a complete checkpoint and reports extra tensors', () => {
    expect(validateTensors(config, refsFor())).toEqual([])
    const extra = [...refsFor(), { name: 'model.layers.0.self_attn.rotary_emb.inv_freq', shape: [4], dtype: 'F32' as const, file, offset: 0, nbytes: 16 }]
    expect(validateTensors(config, extra)).toEqual(['model.layers.0.self_attn.rotary_emb.inv_freq'])
  })

  it('a missing tensor names file and tensor', () => {
    const refs = refsFor().filter((r) => r.name !== 'model.layers.1.mlp.up_proj.weight')
    const e = errorOf(() => validateTensors(config, refs, { source: file }))
    expect(e).toBeInstanceOf(MissingTensorError)
    expect((e as MissingTensorError).file).toBe(file)
    expect((e as MissingTensorError).tensor).toBe('model.layers.1.mlp.up_proj.weight')
    expect((e as MissingTensorError).expectedShape).toEqual([64, 32])
    expect(e.message).toContain(file)
    expect(e.message).toContain('model.layers.1.mlp.up_proj.weight')
    expect(e.message).toContain('[64, 32]')
  })

  it('a misshapen tensor names file, tensor, expected and actual shape', () => {
    const refs = refsFor().map((r) => (r.name === 'model.layers.0.self_attn.k_proj.weight' ? { ...r, shape: [32, 16] } : r))
    const e = errorOf(() => validateTensors(config, refs))
    expect(e).toBeInstanceOf(TensorShapeError)
    expect((e as TensorShapeError).expectedShape).toEqual([16, 32])
    expect((e as TensorShapeError).actualShape).toEqual([32, 16])
    expect(e.message).toContain(file)
    expect(e.message).toContain('model.layers.0.self_attn.k_proj.weight')
    expect(e.message).toContain('[32, 16]')
    expect(e.message).toContain('[16, 32]')
  })

  it('an lm_head next to tied embeddings is fine (but still shape-checked)', () => {
    const tied = { ...config, tieWordEmbeddings: true }
    const refs = [...refsFor(tied), { name: 'lm_head.weight', shape: [100, 32], dtype: 'BF16' as const, file, offset: 0, nbytes: 4 }]
    expect(validateTensors(tied, refs)).toEqual([])
    refs[refs.length - 1] = { ...refs[refs.length - 1], shape: [99, 32] }
    expect(() => validateTensors(tied, refs)).toThrow(TensorShapeError)
    // untied without lm_head: missing, with a hint
    expect(() => validateTensors(config, refsFor(tied))).toThrow(/lm_head\.weight.*tie_word_embeddings/)
  })
})
