// Writes a complete Hugging Face model folder of a tiny random model (config.json, safetensors,
// tokenizer.json, tokenizer_config.json with a ChatML template, generation_config.json) for tests
// of every layer above the file format: numerics against a float64 reference, sampling, loading.

import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'

import { expectedTensors, parseModelConfig } from '../../src/engine/hf/config.js'
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  writeSafetensors,
  writeShardedSafetensors,
  type TensorToWrite,
} from '../../src/engine/hf/safetensors.js'
import { writeJsonAtomic } from '../../src/util/atomic.js'
import type { Llama3RopeScaling, ModelConfig, TensorDtype } from '../../src/engine/types.js'

export type TinyFamily = 'llama' | 'qwen2' | 'qwen3'

export interface TinyModelOptions {
  family: TinyFamily
  dtype: TensorDtype
  seed: number
  /** tie_word_embeddings (default false: the model has lm_head.weight). */
  tied?: boolean
  /** config vocab_size; at least TINY_TOKENIZER_SIZE (default 320, like real models' padded rows). */
  vocabSize?: number
  hiddenSize?: number
  layers?: number
  heads?: number
  kvHeads?: number
  /** Default: 16 for qwen3 (≠ hidden/heads, as in real Qwen3), hidden/heads otherwise. */
  headDim?: number
  intermediate?: number
  /** Llama 3 rope scaling: true for a setting that exercises all three frequency bands at head_dim 8. */
  ropeScaling?: boolean | Llama3RopeScaling
  ropeTheta?: number
  rmsNormEps?: number
  /** llama/qwen3 `attention_bias` (q, k, v, o biases). */
  attentionBias?: boolean
  /** Write shards + index: true (3–4 shards) or a max shard size in bytes. */
  sharded?: boolean | number
}

export interface TinyModel {
  dir: string
  config: ModelConfig
  /** Exact stored values (after rounding to the dtype), by tensor name. */
  weights: Map<string, Float64Array>
  tensorShapes: Map<string, number[]>
  /** The config.json written. */
  configJson: Record<string, unknown>
  /** The weight files written (model.safetensors, or the shards then the index). */
  weightFiles: string[]
}

// ---------------------------------------------------------------------------------------------
// Seeded randomness

/** mulberry32: small, fast, good enough for test weights. */
export function seededUniform(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Standard normal samples (Box–Muller over seededUniform). */
export function seededNormal(seed: number): () => number {
  const u = seededUniform(seed)
  let spare: number | null = null
  return () => {
    if (spare !== null) {
      const s = spare
      spare = null
      return s
    }
    let u1 = u()
    while (u1 <= 1e-12) u1 = u()
    const r = Math.sqrt(-2 * Math.log(u1))
    const th = 2 * Math.PI * u()
    spare = r * Math.sin(th)
    return r * Math.cos(th)
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer: byte-level BPE shaped like Qwen2/Qwen3's (NFC, Split with Qwen's regex, ByteLevel),
// so every string encodes (each byte has a token) and decodes back exactly.

/** GPT-2's byte → printable-character map used by byte-level BPE. */
export function bytesToUnicode(): string[] {
  const bs: number[] = []
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b)
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b)
  for (let b = 0xae; b <= 0xff; b++) bs.push(b)
  const cs = bs.slice()
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n)
      n++
    }
  }
  const out = new Array<string>(256)
  bs.forEach((b, i) => (out[b] = String.fromCharCode(cs[i])))
  return out
}

const MERGES: Array<[string, string]> = [
  ['Ġ', 't'], ['h', 'e'], ['i', 'n'], ['r', 'e'], ['o', 'n'], ['Ġ', 'a'], ['e', 'r'], ['Ġt', 'he'],
  ['a', 'n'], ['Ġ', 's'], ['o', 'u'], ['l', 'l'], ['Ġ', 'w'], ['i', 's'], ['Ġ', 'h'], ['e', 'n'],
  ['Ġ', 'c'], ['Ġ', 'b'], ['Ġ', 'o'], ['Ġ', 'i'], ['a', 't'], ['o', 'r'], ['e', 's'], ['Ġ', 'f'],
  ['i', 't'], ['a', 'r'], ['Ġ', 'p'], ['Ġ', 'm'], ['e', 'd'], ['Ġt', 'o'], ['Ġa', 'n'], ['Ġan', 'd'],
  ['Ġ', 'Ġ'], ['ĠĠ', 'ĠĠ'], ['Ċ', 'Ċ'], ['H', 'e'], ['He', 'll'], ['Hell', 'o'], ['l', 'd'], ['Ġw', 'or'],
  ['Ġwor', 'ld'], ['Ġi', 's'],
]

export const TINY_SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const
/** Added but not special (as in Qwen3). */
export const TINY_THINK_TOKENS = ['<think>', '</think>'] as const

/** Qwen2's pre-tokenizer regex. */
const QWEN_SPLIT_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/** A ChatML template with Qwen3's `enable_thinking` switch and a tools section. */
export const TINY_CHAT_TEMPLATE = [
  "{%- if tools %}",
  "{{- '<|im_start|>system\\n' }}",
  "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}",
  "{{- '# Tools\\n<tools>' }}",
  "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
  "{{- '\\n</tools><|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- for message in messages %}",
  "{%- if not (tools and loop.first and message.role == 'system') %}",
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
  "{%- endif %}",
  "{%- endfor %}",
  "{%- if add_generation_prompt %}",
  "{{- '<|im_start|>assistant\\n' }}",
  "{%- if enable_thinking is defined and enable_thinking is false %}",
  "{{- '<think>\\n\\n</think>\\n\\n' }}",
  "{%- endif %}",
  "{%- endif %}",
].join('\n')

export interface TinyTokenizerFiles {
  tokenizerJson: Record<string, unknown>
  tokenizerConfig: Record<string, unknown>
  /** ids of <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>. */
  ids: { endoftext: number; imStart: number; imEnd: number; thinkStart: number; thinkEnd: number }
  /** Number of token ids (vocabulary + added tokens). */
  size: number
}

export function tinyTokenizerFiles(): TinyTokenizerFiles {
  const b2u = bytesToUnicode()
  const vocab: Record<string, number> = {}
  b2u.forEach((ch, byte) => (vocab[ch] = byte))
  let next = 256
  for (const [a, b] of MERGES) {
    if (!(a in vocab) || !(b in vocab)) throw new Error(`tiny tokenizer: merge ${a} ${b} uses an unknown token`)
    const m = a + b
    if (!(m in vocab)) vocab[m] = next++
  }
  const added: Array<Record<string, unknown>> = []
  const addedDecoder: Record<string, unknown> = {}
  const add = (content: string, special: boolean) => {
    const id = next++
    const tok = { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special }
    added.push(tok)
    addedDecoder[String(id)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special }
    return id
  }
  const endoftext = add('<|endoftext|>', true)
  const imStart = add('<|im_start|>', true)
  const imEnd = add('<|im_end|>', true)
  const thinkStart = add('<think>', false)
  const thinkEnd = add('</think>', false)

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: QWEN_SPLIT_REGEX }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: MERGES.map(([a, b]) => [a, b]),
    },
  }
  const tokenizerConfig = {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: addedDecoder,
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: null,
    chat_template: TINY_CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: '<|im_end|>',
    errors: 'replace',
    model_max_length: 4096,
    pad_token: '<|endoftext|>',
    split_special_tokens: false,
    tokenizer_class: 'Qwen2Tokenizer',
    unk_token: null,
  }
  return { tokenizerJson, tokenizerConfig, ids: { endoftext, imStart, imEnd, thinkStart, thinkEnd }, size: next }
}

/** Number of ids the tiny tokenizer uses. */
export const TINY_TOKENIZER_SIZE = tinyTokenizerFiles().size

/** Write tokenizer.json + tokenizer_config.json into `dir`. */
export async function writeTinyTokenizer(dir: string): Promise<TinyTokenizerFiles> {
  await mkdir(dir, { recursive: true })
  const files = tinyTokenizerFiles()
  await writeJsonAtomic(join(dir, 'tokenizer.json'), files.tokenizerJson, 2)
  await writeJsonAtomic(join(dir, 'tokenizer_config.json'), files.tokenizerConfig, 2)
  return files
}

// ---------------------------------------------------------------------------------------------
// The model

const TORCH_DTYPE: Record<TensorDtype, string> = { F32: 'float32', BF16: 'bfloat16', F16: 'float16' }

/** Round a float to what `dtype` stores, returning the stored value exactly. */
export function roundToDtype(x: number, dtype: TensorDtype): number {
  if (dtype === 'F32') return Math.fround(x)
  return dtype === 'BF16' ? bf16BitsToF32(f32ToBf16Bits(x)) : f16BitsToF32(f32ToF16Bits(x))
}

export async function writeTinyModel(dir: string, opts: TinyModelOptions): Promise<TinyModel> {
  const { family, dtype, seed } = opts
  const tok = tinyTokenizerFiles()
  const vocabSize = opts.vocabSize ?? 320
  if (vocabSize < tok.size) throw new Error(`writeTinyModel: vocabSize must be ≥ ${tok.size} (the tiny tokenizer's size)`)
  const hidden = opts.hiddenSize ?? 32
  const heads = opts.heads ?? 4
  const kvHeads = opts.kvHeads ?? 2
  const headDim = opts.headDim ?? (family === 'qwen3' ? 16 : hidden / heads)
  if (!Number.isInteger(headDim)) throw new Error('writeTinyModel: hiddenSize must be a multiple of heads, or give headDim')
  const layers = opts.layers ?? 2
  const intermediate = opts.intermediate ?? 64
  const tied = opts.tied ?? false
  const bias = opts.attentionBias ?? false

  let ropeScaling: Record<string, unknown> | null = null
  if (opts.ropeScaling) {
    const rs: Llama3RopeScaling =
      opts.ropeScaling === true
        ? { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 256 }
        : opts.ropeScaling
    ropeScaling = {
      factor: rs.factor,
      high_freq_factor: rs.highFreqFactor,
      low_freq_factor: rs.lowFreqFactor,
      original_max_position_embeddings: rs.originalMaxPositionEmbeddings,
      rope_type: 'llama3',
    }
  }
  const ropeTheta = opts.ropeTheta ?? (ropeScaling ? 500000 : family === 'llama' ? 10000 : 1000000)

  const common = {
    attention_dropout: 0.0,
    bos_token_id: tok.ids.endoftext,
    eos_token_id: tok.ids.imEnd,
    hidden_act: 'silu',
    hidden_size: hidden,
    initializer_range: 0.02,
    intermediate_size: intermediate,
    max_position_embeddings: 1024,
    num_attention_heads: heads,
    num_hidden_layers: layers,
    num_key_value_heads: kvHeads,
    rms_norm_eps: opts.rmsNormEps ?? (family === 'llama' ? 1e-5 : 1e-6),
    rope_scaling: ropeScaling,
    rope_theta: ropeTheta,
    tie_word_embeddings: tied,
    torch_dtype: TORCH_DTYPE[dtype],
    transformers_version: '4.51.0',
    use_cache: true,
    vocab_size: vocabSize,
  }
  let configJson: Record<string, unknown>
  if (family === 'llama') {
    configJson = {
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      attention_bias: bias,
      head_dim: headDim,
      mlp_bias: false,
      pretraining_tp: 1,
      ...common,
    }
  } else if (family === 'qwen2') {
    if (bias) throw new Error('writeTinyModel: qwen2 has fixed q/k/v biases; attentionBias does not apply')
    configJson = {
      architectures: ['Qwen2ForCausalLM'],
      model_type: 'qwen2',
      max_window_layers: layers,
      sliding_window: null,
      use_sliding_window: false,
      ...(headDim !== hidden / heads ? { head_dim: headDim } : {}),
      ...common,
    }
  } else {
    configJson = {
      architectures: ['Qwen3ForCausalLM'],
      model_type: 'qwen3',
      attention_bias: bias,
      head_dim: headDim,
      max_window_layers: layers,
      sliding_window: null,
      use_sliding_window: false,
      ...common,
    }
  }
  // Sorted keys, like transformers' to_json_string.
  configJson = Object.fromEntries(Object.entries(configJson).sort(([a], [b]) => (a < b ? -1 : 1)))
  const config = parseModelConfig(configJson, join(dir, 'config.json'))

  // Weights: seeded normals, scaled so the residual stream and logits stay O(1).
  const normal = seededNormal(seed)
  const weights = new Map<string, Float64Array>()
  const tensorShapes = new Map<string, number[]>()
  const toWrite: TensorToWrite[] = []
  for (const { name, shape } of expectedTensors(config)) {
    const n = shape.reduce((a, b) => a * b, 1)
    const raw = new Float32Array(n)
    const isNorm = name.endsWith('norm.weight')
    const scale = isNorm
      ? 0.1
      : name.endsWith('.bias')
        ? 0.05
        : name.includes('embed_tokens') || name === 'lm_head.weight'
          ? 0.2
          : name.includes('down_proj')
            ? 0.1
            : 0.15
    for (let i = 0; i < n; i++) raw[i] = (isNorm ? 1 : 0) + scale * normal()
    const stored = new Float64Array(n)
    for (let i = 0; i < n; i++) stored[i] = roundToDtype(raw[i], dtype)
    weights.set(name, stored)
    tensorShapes.set(name, shape.slice())
    toWrite.push({ name, dtype, shape: shape.slice(), data: raw })
  }

  await mkdir(dir, { recursive: true })
  let weightFiles: string[]
  if (opts.sharded) {
    const total = toWrite.reduce((s, t) => s + t.data.length * (dtype === 'F32' ? 4 : 2), 0)
    const maxShardBytes = typeof opts.sharded === 'number' ? opts.sharded : Math.ceil(total / 3)
    weightFiles = (await writeShardedSafetensors(dir, toWrite, { maxShardBytes })).files
  } else {
    weightFiles = [join(dir, 'model.safetensors')]
    await writeSafetensors(weightFiles[0], toWrite)
  }
  await writeJsonAtomic(join(dir, 'config.json'), configJson, 2)
  await writeJsonAtomic(join(dir, 'generation_config.json'), {
    bos_token_id: tok.ids.endoftext,
    do_sample: true,
    eos_token_id: [tok.ids.imEnd, tok.ids.endoftext],
    pad_token_id: tok.ids.endoftext,
    temperature: 0.7,
    top_k: 20,
    top_p: 0.8,
    transformers_version: '4.51.0',
  }, 2)
  await writeJsonAtomic(join(dir, 'tokenizer.json'), tok.tokenizerJson, 2)
  await writeJsonAtomic(join(dir, 'tokenizer_config.json'), tok.tokenizerConfig, 2)

  return { dir, config, weights, tensorShapes, configJson, weightFiles }
}
