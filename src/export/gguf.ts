// GGUF export: a Hugging Face model folder (Llama / Qwen2 / Qwen3, config.json + safetensors +
// tokenizer.json) written as a GGUF v3 file that llama.cpp (and Ollama, node-llama-cpp) loads, with
// f32 or f16 tensors; and a reader for the header (metadata, tensor infos) and the tensor data.
//
// The layout follows ggml's gguf.h / gguf-py (GGUF v3): magic "GGUF", version, tensor count,
// metadata count, the key/value pairs, the tensor infos (name, dims innermost first, ggml type,
// offset from the start of the data section), padding to general.alignment (32), then each
// tensor's bytes, each padded to the alignment. The names, keys and weight transforms are those of
// llama.cpp's convert_hf_to_gguf.py (conversion/llama.py, conversion/qwen.py, conversion/base.py):
//   - HF Linear weights [out, in] are the same bytes as ggml's [in, out]: dims are written reversed.
//   - llama: q_proj / k_proj rows are permuted from transformers' rotate-half RoPE layout to ggml's
//     interleaved-pair layout (LlamaModel.permute); qwen2/qwen3 use ggml's NEOX RoPE: no permutation.
//   - Llama 3 RoPE scaling becomes a `rope_freqs.weight` tensor of per-frequency factors.
//   - 1-D tensors (norms, biases, rope_freqs) stay f32 in an f16 file, as convert_hf_to_gguf does.
//
// Tokenizers: a byte-level BPE tokenizer.json (Qwen2/Qwen3, Llama 3) is written as llama.cpp's
// "gpt2" model with its merges and the pre-tokenizer named by its split regex ("qwen2" or
// "llama-bpe"). A character-level BPE without merges and with byte fallback (the bundled toy
// model's tokenizer, src/toymodel/tokenizer.ts) cannot be a "gpt2" vocabulary: llama.cpp's BPE
// vocabulary maps text through GPT-2's byte→unicode table, where the toy's character token "A"
// and its byte token <0x41> would become the same text (llama.cpp asserts token texts are
// unique), and its BPE detokenizer drops BYTE tokens. It is written as llama.cpp's "llama"
// (SentencePiece-style) model instead, which has exactly the toy's semantics: whole characters
// first, UTF-8 bytes as <0xNN> BYTE tokens otherwise, no merges to apply (scores all 0), no space
// prefix; the space token is stored as "▁" because that model escapes spaces to U+2581 before the
// lookup. The one text it encodes differently is a literal "▁" (U+2581) in the input.

import { closeSync, fstatSync, openSync, readSync } from 'node:fs'
import { open, type FileHandle } from 'node:fs/promises'
import { basename, join, resolve } from 'node:path'

import { AutodidactError, ConfigError, InvalidArgumentError, TokenizerError, UnsupportedArchitectureError } from '../engine/errors.js'
import { fileWriteError, checkOutputTarget, commitTemps, removeStaleTemps, writeTemp } from '../util/atomic.js'
import { MAX_TOKENIZER_FILE_BYTES, readRegularFile } from '../engine/hf/files.js'
import { expectedTensors } from '../engine/hf/config.js'
import { readModelFolder, type ModelFolder } from '../engine/hf/folder.js'
import { f16ArrayToF32, f32ToF16Bits, readTensorFloat32 } from '../engine/hf/safetensors.js'
import type { ModelConfig, TensorRef } from '../engine/types.js'

// ---------------------------------------------------------------------------------------------
// Format constants (gguf-py/gguf/constants.py)

export const GGUF_MAGIC = 0x46554747 // "GGUF" little-endian
export const GGUF_VERSION = 3
export const GGUF_DEFAULT_ALIGNMENT = 32
const GGML_QUANT_VERSION = 2

export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** ggml tensor types this module writes and reads. */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
}

/** llama_ftype (general.file_type): LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_Q8_0. */
const FILE_TYPE = { f32: 0, f16: 1, q8_0: 7 } as const

/** The weight-matrix types an export writes. */
export type GgufDtype = keyof typeof FILE_TYPE

/** Q8_0: blocks of 32 values along the row, each one f16 scale d and 32 int8 codes (34 bytes). */
export const Q8_0_BLOCK = 32
const Q8_0_BLOCK_BYTES = 2 + Q8_0_BLOCK

/** llama.cpp token types (tokenizer.ggml.token_type). */
export enum GgufTokenType {
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6,
}

/** The GGUF file is malformed or not one this reader understands. */
export class GgufFormatError extends AutodidactError {
  readonly file: string
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super('GGUF_FORMAT', message, options)
    this.file = file
  }
}

// ---------------------------------------------------------------------------------------------
// Metadata values

type Scalar =
  | { type: GgufValueType.UINT32 | GgufValueType.INT32 | GgufValueType.FLOAT32 | GgufValueType.UINT8 | GgufValueType.INT8 | GgufValueType.UINT16 | GgufValueType.INT16 | GgufValueType.FLOAT64; value: number }
  | { type: GgufValueType.UINT64 | GgufValueType.INT64; value: bigint }
  | { type: GgufValueType.BOOL; value: boolean }
  | { type: GgufValueType.STRING; value: string }

/** One metadata value; arrays hold scalars of one type. */
export type GgufValue = Scalar | { type: GgufValueType.ARRAY; itemType: Scalar['type']; values: Array<Scalar['value']> }

export type GgufMetadata = Array<[key: string, value: GgufValue]>

const u32 = (value: number): GgufValue => ({ type: GgufValueType.UINT32, value })
const f32 = (value: number): GgufValue => ({ type: GgufValueType.FLOAT32, value })
const str = (value: string): GgufValue => ({ type: GgufValueType.STRING, value })
const bool = (value: boolean): GgufValue => ({ type: GgufValueType.BOOL, value })
const arr = (itemType: Scalar['type'], values: Array<Scalar['value']>): GgufValue => ({ type: GgufValueType.ARRAY, itemType, values })

/** Growable little-endian byte writer for the header. */
class ByteWriter {
  private buf = Buffer.alloc(1 << 16)
  length = 0

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return
    let size = this.buf.length * 2
    while (size < this.length + n) size *= 2
    const next = Buffer.alloc(size)
    this.buf.copy(next, 0, 0, this.length)
    this.buf = next
  }
  u8(v: number): void {
    this.reserve(1)
    this.buf.writeUInt8(v, this.length)
    this.length += 1
  }
  u32(v: number): void {
    this.reserve(4)
    this.buf.writeUInt32LE(v, this.length)
    this.length += 4
  }
  i32(v: number): void {
    this.reserve(4)
    this.buf.writeInt32LE(v, this.length)
    this.length += 4
  }
  u64(v: number | bigint): void {
    this.reserve(8)
    this.buf.writeBigUInt64LE(BigInt(v), this.length)
    this.length += 8
  }
  i64(v: bigint): void {
    this.reserve(8)
    this.buf.writeBigInt64LE(v, this.length)
    this.length += 8
  }
  f32(v: number): void {
    this.reserve(4)
    this.buf.writeFloatLE(v, this.length)
    this.length += 4
  }
  f64(v: number): void {
    this.reserve(8)
    this.buf.writeDoubleLE(v, this.length)
    this.length += 8
  }
  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8')
    this.u64(bytes.length)
    this.reserve(bytes.length)
    bytes.copy(this.buf, this.length)
    this.length += bytes.length
  }
  pad(alignment: number): void {
    const n = (alignment - (this.length % alignment)) % alignment
    this.reserve(n)
    this.buf.fill(0, this.length, this.length + n)
    this.length += n
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length)
  }
}

function writeScalar(w: ByteWriter, type: Scalar['type'], v: Scalar['value']): void {
  switch (type) {
    case GgufValueType.UINT8: return w.u8(v as number)
    case GgufValueType.INT8: { w.u8((v as number) & 0xff); return }
    case GgufValueType.UINT16:
    case GgufValueType.INT16: { w.u8((v as number) & 0xff); w.u8(((v as number) >> 8) & 0xff); return }
    case GgufValueType.UINT32: return w.u32(v as number)
    case GgufValueType.INT32: return w.i32(v as number)
    case GgufValueType.FLOAT32: return w.f32(v as number)
    case GgufValueType.FLOAT64: return w.f64(v as number)
    case GgufValueType.UINT64: return w.u64(v as bigint)
    case GgufValueType.INT64: return w.i64(v as bigint)
    case GgufValueType.BOOL: return w.u8(v ? 1 : 0)
    case GgufValueType.STRING: return w.string(v as string)
  }
}

function writeValue(w: ByteWriter, v: GgufValue): void {
  w.u32(v.type)
  if (v.type === GgufValueType.ARRAY) {
    w.u32(v.itemType)
    w.u64(v.values.length)
    for (const x of v.values) writeScalar(w, v.itemType, x)
  } else writeScalar(w, v.type, v.value)
}

// ---------------------------------------------------------------------------------------------
// Architecture metadata and tensor plan

/** What the exporter writes for one model (metadata + the tensors and where their data comes from). */
interface TensorPlan {
  name: string
  /** ggml dims: innermost (contiguous) first. */
  dims: number[]
  type: GgmlType
  /** Produces the tensor's float32 values in HF (row-major) order after any transform. */
  values: () => Promise<Float32Array>
}

/** LlamaModel.permute: rotate-half rows → interleaved pairs, per head (convert_hf_to_gguf.py). */
export function permuteForLlamaRope(w: Float32Array, rows: number, cols: number, nHead: number): Float32Array {
  const headDim = rows / nHead
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) {
    throw new InvalidArgumentError('rows', `cannot permute ${rows} rows into ${nHead} heads of even size`)
  }
  const half = headDim / 2
  const out = new Float32Array(w.length)
  // reshape(n_head, 2, half, cols).swapaxes(1, 2): new row h*D + 2j + t ← old row h*D + t*half + j
  for (let h = 0; h < nHead; h++) {
    for (let j = 0; j < half; j++) {
      for (let t = 0; t < 2; t++) {
        const src = (h * headDim + t * half + j) * cols
        const dst = (h * headDim + 2 * j + t) * cols
        out.set(w.subarray(src, src + cols), dst)
      }
    }
  }
  return out
}

/** Llama 3 RoPE scaling as per-frequency factors (LlamaModel.generate_extra_tensors). */
export function llama3RopeFactors(config: ModelConfig): Float32Array {
  const s = config.ropeScaling
  if (!s) throw new InvalidArgumentError('config', 'the model has no llama3 rope scaling')
  const dim = config.headDim
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor
  const out = new Float32Array(dim / 2)
  for (let i = 0; i < dim / 2; i++) {
    const freq = 1 / config.ropeTheta ** ((2 * i) / dim)
    const wavelen = (2 * Math.PI) / freq
    if (wavelen < highWavelen) out[i] = 1
    else if (wavelen > lowWavelen) out[i] = s.factor
    else {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor)
      out[i] = 1 / ((1 - smooth) / s.factor + smooth)
    }
  }
  return out
}

/** HF tensor name → llama.cpp tensor name (gguf-py TENSOR_NAMES for LLAMA / QWEN2 / QWEN3). */
export function ggufTensorName(hfName: string): string {
  const fixed: Record<string, string> = {
    'model.embed_tokens.weight': 'token_embd.weight',
    'model.norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight',
  }
  if (hfName in fixed) return fixed[hfName]
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hfName)
  const parts: Record<string, string> = {
    input_layernorm: 'attn_norm',
    'self_attn.q_proj': 'attn_q',
    'self_attn.k_proj': 'attn_k',
    'self_attn.v_proj': 'attn_v',
    'self_attn.o_proj': 'attn_output',
    'self_attn.q_norm': 'attn_q_norm',
    'self_attn.k_norm': 'attn_k_norm',
    post_attention_layernorm: 'ffn_norm',
    'mlp.gate_proj': 'ffn_gate',
    'mlp.up_proj': 'ffn_up',
    'mlp.down_proj': 'ffn_down',
  }
  if (!m || !(m[2] in parts)) throw new InvalidArgumentError('tensor', `no GGUF name for tensor "${hfName}"`)
  return `blk.${m[1]}.${parts[m[2]]}.${m[3]}`
}

function archMetadata(folder: ModelFolder, dtype: GgufDtype): GgufMetadata {
  const c = folder.config
  const a = c.architecture
  const name = basename(resolve(folder.dir))
  const md: GgufMetadata = [
    ['general.architecture', str(a)],
    ['general.type', str('model')],
    ['general.name', str(name)],
    ['general.quantization_version', u32(GGML_QUANT_VERSION)],
    ['general.file_type', u32(FILE_TYPE[dtype])],
    [`${a}.vocab_size`, u32(c.vocabSize)],
    [`${a}.context_length`, u32(c.maxPositionEmbeddings)],
    [`${a}.embedding_length`, u32(c.hiddenSize)],
    [`${a}.block_count`, u32(c.numLayers)],
    [`${a}.feed_forward_length`, u32(c.intermediateSize)],
    [`${a}.attention.head_count`, u32(c.numHeads)],
    [`${a}.attention.head_count_kv`, u32(c.numKvHeads)],
    [`${a}.attention.key_length`, u32(c.headDim)],
    [`${a}.attention.value_length`, u32(c.headDim)],
    [`${a}.rope.dimension_count`, u32(c.headDim)],
    [`${a}.rope.freq_base`, f32(c.ropeTheta)],
    [`${a}.attention.layer_norm_rms_epsilon`, f32(c.rmsNormEps)],
  ]
  return md
}

/** A matrix's type in a file of `dtype`: q8_0 needs rows of whole blocks, else (as convert_hf_to_gguf.py) f16. */
function matrixType(dtype: GgufDtype, rowLength: number): GgmlType {
  if (dtype === 'f32') return GgmlType.F32
  if (dtype === 'q8_0' && rowLength % Q8_0_BLOCK === 0) return GgmlType.Q8_0
  return GgmlType.F16
}

function tensorPlan(folder: ModelFolder, dtype: GgufDtype): TensorPlan[] {
  const c = folder.config
  const byName = new Map<string, TensorRef>(folder.tensors.map((t) => [t.name, t]))
  const plans: TensorPlan[] = []
  for (const e of expectedTensors(c, folder.head)) {
    const ref = byName.get(e.name)!
    const rows = e.shape[0]
    const cols = e.shape.length > 1 ? e.shape[1] : 1
    let values = () => readTensorFloat32(ref)
    if (c.architecture === 'llama') {
      // LlamaModel.modify_tensors: q with n_head, k with n_kv_head (weights and biases)
      const q = /self_attn\.q_proj\.(weight|bias)$/.test(e.name)
      const k = /self_attn\.k_proj\.(weight|bias)$/.test(e.name)
      if (q || k) {
        const heads = q ? c.numHeads : c.numKvHeads
        values = async () => permuteForLlamaRope(await readTensorFloat32(ref), rows, cols, heads)
      }
    }
    plans.push({
      name: ggufTensorName(e.name),
      dims: [...e.shape].reverse(),
      type: e.shape.length >= 2 ? matrixType(dtype, cols) : GgmlType.F32,
      values,
    })
  }
  if (c.ropeScaling?.type === 'llama3') {
    const factors = llama3RopeFactors(c)
    plans.push({ name: 'rope_freqs.weight', dims: [factors.length], type: GgmlType.F32, values: async () => factors })
  }
  return plans
}

// ---------------------------------------------------------------------------------------------
// Tokenizer metadata

type Json = Record<string, unknown>
const isObj = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v)

/** Split regexes of the byte-level pre-tokenizers llama.cpp knows (tokenizer.json's original form). */
const PRE_TOKENIZERS: Array<{ pre: string; regex: string }> = [
  { pre: 'qwen2', regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
  { pre: 'llama-bpe', regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
]

function components(v: unknown, listKey: string): Json[] {
  if (!isObj(v)) return []
  if (v.type === 'Sequence' && Array.isArray(v[listKey])) return (v[listKey] as unknown[]).filter(isObj)
  return [v]
}

interface AddedToken {
  id: number
  content: string
  special: boolean
}

/** convert_hf_to_gguf's does_token_look_special, the cases that matter for these families. */
function looksSpecial(t: string): boolean {
  return (t.startsWith('<|') && t.endsWith('|>')) || (t.startsWith('<｜') && t.endsWith('｜>'))
}

interface VocabTables {
  tokens: string[]
  types: number[]
}

/** Token texts and types for ids 0..vocabSize-1 (padding ids become [PADi] UNUSED, as convert does). */
function vocabTables(
  vocab: Json,
  added: AddedToken[],
  vocabSize: number,
  file: string,
  normal: (text: string) => { text: string; type: GgufTokenType },
): VocabTables {
  const tokens: Array<string | undefined> = new Array(vocabSize)
  const types = new Array<number>(vocabSize).fill(GgufTokenType.UNUSED)
  for (const [text, id] of Object.entries(vocab)) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) throw new TokenizerError(file, `${file}: vocab entry ${JSON.stringify(text)} has no valid id`)
    if (id >= vocabSize) throw new TokenizerError(file, `${file}: token id ${id} ≥ the model's vocab_size ${vocabSize}`)
    const n = normal(text)
    tokens[id] = n.text
    types[id] = n.type
  }
  for (const a of added) {
    if (a.id >= vocabSize) throw new TokenizerError(file, `${file}: added token id ${a.id} ≥ the model's vocab_size ${vocabSize}`)
    tokens[a.id] = a.content
    types[a.id] = a.special || looksSpecial(a.content) ? GgufTokenType.CONTROL : GgufTokenType.USER_DEFINED
  }
  const out: string[] = []
  const seen = new Map<string, number>()
  for (let i = 0; i < vocabSize; i++) {
    const t = tokens[i] ?? `[PAD${i}]`
    if (tokens[i] === undefined) types[i] = GgufTokenType.UNUSED
    const prev = seen.get(t)
    if (prev !== undefined) {
      // llama.cpp asserts id_to_token.size() == token_to_id.size(): texts must be unique.
      throw new TokenizerError(file, `${file}: ids ${prev} and ${i} both have the text ${JSON.stringify(t)} in the GGUF vocabulary; llama.cpp requires unique token texts`)
    }
    seen.set(t, i)
    out.push(t)
  }
  return { tokens: out, types }
}

function mergeStrings(merges: unknown, file: string): string[] {
  if (!Array.isArray(merges)) throw new TokenizerError(file, `${file}: model.merges must be a list`)
  return merges.map((m, i) => {
    if (typeof m === 'string') return m
    if (Array.isArray(m) && m.length === 2 && typeof m[0] === 'string' && typeof m[1] === 'string') return `${m[0]} ${m[1]}`
    throw new TokenizerError(file, `${file}: merge ${i} is neither "a b" nor ["a", "b"]`)
  })
}

const BYTE_TOKEN = /^<0x[0-9A-F]{2}>$/

function tokenizerMetadata(folder: ModelFolder, tj: Json, tc: Json): GgufMetadata {
  const file = join(folder.dir, 'tokenizer.json')
  const model = tj.model
  if (!isObj(model) || model.type !== 'BPE' || !isObj(model.vocab)) {
    throw new TokenizerError(file, `${file}: only BPE tokenizers can be exported to GGUF (model.type is ${JSON.stringify(isObj(model) ? model.type : null)})`)
  }
  const added: AddedToken[] = (Array.isArray(tj.added_tokens) ? tj.added_tokens : [])
    .filter(isObj)
    .map((t) => ({ id: Number(t.id), content: String(t.content), special: t.special === true }))
  const V = folder.config.vocabSize
  const pre = components(tj.pre_tokenizer, 'pretokenizers')
  const dec = components(tj.decoder, 'decoders')
  const byteLevel = pre.some((p) => p.type === 'ByteLevel') || dec.some((d) => d.type === 'ByteLevel')
  const merges = Array.isArray(model.merges) ? model.merges : []
  const md: GgufMetadata = []

  if (byteLevel) {
    const split = pre.find((p) => p.type === 'Split')
    const regex = isObj(split) && isObj(split.pattern) ? split.pattern.Regex : undefined
    const known = PRE_TOKENIZERS.find((p) => p.regex === regex)
    if (!known) {
      throw new TokenizerError(
        file,
        `${file}: the byte-level pre-tokenizer's split pattern ${JSON.stringify(regex ?? null)} is not one autodidact maps to ` +
          `llama.cpp's tokenizer.ggml.pre (known: Qwen2/Qwen3 "qwen2", Llama 3 "llama-bpe")`,
      )
    }
    const t = vocabTables(model.vocab, added, V, file, (text) => ({ text, type: GgufTokenType.NORMAL }))
    md.push(
      ['tokenizer.ggml.model', str('gpt2')],
      ['tokenizer.ggml.pre', str(known.pre)],
      ['tokenizer.ggml.tokens', arr(GgufValueType.STRING, t.tokens)],
      ['tokenizer.ggml.token_type', arr(GgufValueType.INT32, t.types)],
      ['tokenizer.ggml.merges', arr(GgufValueType.STRING, mergeStrings(merges, file))],
    )
  } else {
    // Character-level BPE with byte fallback and no merges (see the header comment).
    const plain = tj.normalizer == null && tj.pre_tokenizer == null && model.byte_fallback === true && merges.length === 0
    if (!plain) {
      throw new TokenizerError(
        file,
        `${file}: this tokenizer is neither byte-level BPE (Qwen, Llama 3) nor a character BPE with byte fallback, ` +
          'no merges, no normalizer and no pre-tokenizer; llama.cpp would tokenize it differently, so it is not exported',
      )
    }
    const t = vocabTables(model.vocab, added, V, file, (text) =>
      BYTE_TOKEN.test(text) ? { text, type: GgufTokenType.BYTE } : { text: text.replaceAll(' ', '\u2581'), type: GgufTokenType.NORMAL },
    )
    md.push(
      ['tokenizer.ggml.model', str('llama')],
      ['tokenizer.ggml.pre', str('default')],
      ['tokenizer.ggml.tokens', arr(GgufValueType.STRING, t.tokens)],
      ['tokenizer.ggml.scores', arr(GgufValueType.FLOAT32, new Array<number>(V).fill(0))],
      ['tokenizer.ggml.token_type', arr(GgufValueType.INT32, t.types)],
      ['tokenizer.ggml.add_space_prefix', bool(false)],
    )
  }
  md.push(...specialTokenMetadata(folder, tj, tc))
  return md
}

/** bos/eos/pad/unk ids, add_bos/add_eos and the chat template (gguf-py SpecialVocab). */
function specialTokenMetadata(folder: ModelFolder, tj: Json, tc: Json): GgufMetadata {
  const tok = folder.tokenizer
  const c = folder.config
  const md: GgufMetadata = []
  const bos = tok.bosTokenId ?? c.bosTokenId
  const eosFromConfig = tok.eosToken !== null ? tok.tokenToId(tok.eosToken) : null
  const eos = eosFromConfig ?? c.eosTokenIds[0] ?? null
  const pad = tok.padTokenId
  const unk = tok.unkToken !== null ? tok.tokenToId(tok.unkToken) : null
  if (bos !== null) md.push(['tokenizer.ggml.bos_token_id', u32(bos)])
  if (eos !== null) md.push(['tokenizer.ggml.eos_token_id', u32(eos)])
  if (pad !== null) md.push(['tokenizer.ggml.padding_token_id', u32(pad)])
  if (unk !== null) md.push(['tokenizer.ggml.unknown_token_id', u32(unk)])
  md.push(['tokenizer.ggml.add_bos_token', bool(addsBos(tj, tc, bos, tok))])
  md.push(['tokenizer.ggml.add_eos_token', bool(tc.add_eos_token === true)])
  if (tok.hasChatTemplate()) {
    try {
      md.push(['tokenizer.chat_template', str(tok.chatTemplate())])
    } catch {
      // several named templates and no default: none is written
    }
  }
  return md
}

/** Whether encoding adds a BOS: tokenizer_config's add_bos_token, else the post-processor's template. */
function addsBos(tj: Json, tc: Json, bos: number | null, tok: ModelFolder['tokenizer']): boolean {
  if (typeof tc.add_bos_token === 'boolean') return tc.add_bos_token
  if (bos === null) return false
  for (const p of components(tj.post_processor, 'processors')) {
    if (p.type !== 'TemplateProcessing' || !Array.isArray(p.single)) continue
    const first = p.single[0]
    if (isObj(first) && isObj(first.SpecialToken) && tok.tokenToId(String(first.SpecialToken.id)) === bos) return true
  }
  return false
}

async function readJsonObject(path: string, required: boolean): Promise<Json> {
  let missing = false
  let text: string
  try {
    text = (
      await readRegularFile(path, MAX_TOKENIZER_FILE_BYTES, (problem, message, cause) => {
        missing = problem === 'not-found'
        return new TokenizerError(path, message, { cause })
      })
    ).toString('utf8')
  } catch (e) {
    if (!required && missing) return {}
    throw e
  }
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch (e) {
    throw new TokenizerError(path, `${path}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
  if (!isObj(v)) throw new TokenizerError(path, `${path}: expected a JSON object`)
  return v
}

// ---------------------------------------------------------------------------------------------
// Writer

function alignUp(n: number, a: number): number {
  return Math.ceil(n / a) * a
}

function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1)
}

/** Bytes of `n` values of type `t` (q8_0: n a multiple of the block). */
function tensorBytes(t: GgmlType, n: number): number {
  if (t === GgmlType.Q8_0) return (n / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES
  return n * (t === GgmlType.F32 ? 4 : 2)
}

/** C's roundf: halves away from zero (Math.round takes −2.5 to −2). */
const roundHalfAway = (v: number): number => Math.sign(v) * Math.round(Math.abs(v))

/**
 * Q8_0 as ggml's quantize_row_q8_0_ref: per block d = max|x| / 127, codes round(x / d) in
 * [−127, 127], d stored as f16; a value decodes to code · f16(d), within d/2 plus the f16
 * rounding of d times |code|.
 */
export function quantizeQ8_0(values: Float32Array): Buffer {
  const out = Buffer.alloc(tensorBytes(GgmlType.Q8_0, values.length))
  for (let b = 0; b * Q8_0_BLOCK < values.length; b++) {
    const x = values.subarray(b * Q8_0_BLOCK, (b + 1) * Q8_0_BLOCK)
    let amax = 0
    for (const v of x) amax = Math.max(amax, Math.abs(v))
    const d = Math.fround(amax / 127)
    const id = d !== 0 ? Math.fround(1 / d) : 0
    const at = b * Q8_0_BLOCK_BYTES
    out.writeUInt16LE(f32ToF16Bits(d), at)
    for (let i = 0; i < Q8_0_BLOCK; i++) out.writeInt8(roundHalfAway(Math.fround(x[i] * id)), at + 2 + i)
  }
  return out
}

/** Q8_0 bytes back to float32 values (code · f16(d), as ggml's dequantize_row_q8_0). */
export function dequantizeQ8_0(bytes: Uint8Array, n: number): Float32Array {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const out = new Float32Array(n)
  for (let b = 0; b * Q8_0_BLOCK < n; b++) {
    const at = b * Q8_0_BLOCK_BYTES
    const d = f16ArrayToF32(Uint16Array.of(buf.readUInt16LE(at)))[0]
    for (let i = 0; i < Q8_0_BLOCK; i++) out[b * Q8_0_BLOCK + i] = buf.readInt8(at + 2 + i) * d
  }
  return out
}

/** The header bytes: magic, version, counts, metadata, tensor infos, padded to the alignment. */
function encodeHeader(metadata: GgufMetadata, tensors: ReadonlyArray<{ name: string; dims: number[]; type: GgmlType; offset: number }>): Buffer {
  const w = new ByteWriter()
  w.u32(GGUF_MAGIC)
  w.u32(GGUF_VERSION)
  w.u64(tensors.length)
  w.u64(metadata.length)
  for (const [k, v] of metadata) {
    w.string(k)
    writeValue(w, v)
  }
  for (const t of tensors) {
    w.string(t.name)
    w.u32(t.dims.length)
    for (const d of t.dims) w.u64(d)
    w.u32(t.type)
    w.u64(t.offset)
  }
  w.pad(GGUF_DEFAULT_ALIGNMENT)
  return w.bytes()
}

function encodeData(name: string, values: Float32Array, type: GgmlType): Buffer {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) throw new InvalidArgumentError('model', `tensor ${name} has a non-finite value at element ${i}`)
  }
  if (type === GgmlType.F32) return Buffer.from(values.buffer, values.byteOffset, values.byteLength)
  if (type === GgmlType.Q8_0) {
    const q = quantizeQ8_0(values)
    for (let b = 0; b < q.length; b += Q8_0_BLOCK_BYTES) {
      if ((q.readUInt16LE(b) & 0x7c00) === 0x7c00) throw new InvalidArgumentError('dtype', `tensor ${name}: block ${b / Q8_0_BLOCK_BYTES}'s scale overflows f16; export with dtype f32`)
    }
    return q
  }
  const h = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) {
    const bits = f32ToF16Bits(values[i])
    if ((bits & 0x7c00) === 0x7c00) {
      throw new InvalidArgumentError('dtype', `tensor ${name}: element ${i} (${values[i]}) overflows f16; export with dtype f32`)
    }
    h[i] = bits
  }
  return Buffer.from(h.buffer, h.byteOffset, h.byteLength)
}

async function writeAll(fh: FileHandle, buf: Uint8Array): Promise<void> {
  let off = 0
  while (off < buf.length) {
    const { bytesWritten } = await fh.write(buf, off, buf.length - off)
    off += bytesWritten
  }
}

export interface ExportGgufOptions {
  /** The weight matrices' type: f32, f16, or q8_0 (f16 where a row is not whole blocks). Norms and biases stay f32. */
  dtype: GgufDtype
}

export interface ExportGgufResult {
  bytes: number
  tensors: number
  seconds: number
}

/**
 * Write the model folder `modelDir` as a GGUF file `outFile` (atomically: a crash leaves no
 * partial file). Throws the folder reader's typed errors for a bad folder, TokenizerError for a
 * tokenizer llama.cpp cannot reproduce, UnsupportedArchitectureError for a score-head model, and
 * InvalidArgumentError for a bad dtype or a value f16 cannot hold.
 */
export async function exportGguf(modelDir: string, outFile: string, options: ExportGgufOptions): Promise<ExportGgufResult> {
  const t0 = performance.now()
  const dtype = options?.dtype
  if (typeof dtype !== 'string' || !Object.hasOwn(FILE_TYPE, dtype)) throw new InvalidArgumentError('dtype', `dtype must be "f32", "f16" or "q8_0", got ${JSON.stringify(dtype)}`)
  if (typeof outFile !== 'string' || outFile.length === 0) throw new InvalidArgumentError('outFile', 'outFile must be a path')
  // never written over a FIFO, device, socket or symbolic link; what a killed export left goes first
  await checkOutputTarget(outFile)
  await removeStaleTemps(outFile)
  const folder = await readModelFolder(modelDir)
  if (folder.head.kind !== 'causal-lm') {
    throw new UnsupportedArchitectureError(
      folder.config.hfArchitecture,
      `${folder.configPath}: ${folder.config.hfArchitecture} has a score head; GGUF export writes causal language models only`,
      folder.configPath,
    )
  }
  if (folder.config.architecture === 'qwen3' && folder.config.oBias) {
    // llama.cpp's qwen3 loader creates no attn_output.bias; the file would fail to load there.
    throw new UnsupportedArchitectureError(
      'qwen3 attention_bias',
      `${folder.configPath}: Qwen3 with "attention_bias": true has an o_proj bias that llama.cpp's qwen3 architecture does not load`,
      folder.configPath,
    )
  }
  const tj = await readJsonObject(join(folder.dir, 'tokenizer.json'), true)
  const tc = await readJsonObject(join(folder.dir, 'tokenizer_config.json'), false)
  const metadata = [...archMetadata(folder, dtype), ...tokenizerMetadata(folder, tj, tc)]
  const plans = tensorPlan(folder, dtype)

  let offset = 0
  const infos = plans.map((p) => {
    const info = { name: p.name, dims: p.dims, type: p.type, offset }
    offset = alignUp(offset + tensorBytes(p.type, elementCount(p.dims)), GGUF_DEFAULT_ALIGNMENT)
    return info
  })
  const header = encodeHeader(metadata, infos)
  const padding = Buffer.alloc(GGUF_DEFAULT_ALIGNMENT)
  const tmp = await writeTemp(outFile, async (fh) => {
    await writeAll(fh, header)
    let written = 0
    for (let i = 0; i < plans.length; i++) {
      const values = await plans[i].values()
      if (values.length !== elementCount(plans[i].dims)) {
        throw new ConfigError(folder.weightsPath, plans[i].name, `tensor ${plans[i].name}: ${values.length} values, expected ${elementCount(plans[i].dims)}`)
      }
      const data = encodeData(plans[i].name, values, plans[i].type)
      await writeAll(fh, data)
      written += data.length
      const pad = (infos[i + 1]?.offset ?? alignUp(written, GGUF_DEFAULT_ALIGNMENT)) - written
      if (pad > 0) await writeAll(fh, padding.subarray(0, pad))
      written += pad
    }
  }).catch((e: unknown) => {
    throw fileWriteError(e, outFile)
  })
  await commitTemps([[tmp, outFile]]).catch((e: unknown) => {
    throw fileWriteError(e, outFile, 'rename into place')
  })
  return { bytes: header.length + offset, tensors: plans.length, seconds: (performance.now() - t0) / 1000 }
}

// ---------------------------------------------------------------------------------------------
// Reader

export interface GgufTensorInfo {
  name: string
  dims: number[]
  type: number
  /** Offset from the start of the data section. */
  offset: number
}

export interface GgufFile {
  file: string
  version: number
  metadata: Map<string, GgufValue>
  tensors: GgufTensorInfo[]
  alignment: number
  /** Absolute file offset of the data section. */
  dataOffset: number
  /** File size in bytes. */
  size: number
}

/** Reads the header from a file descriptor on demand (the tensor data is never loaded). */
class ByteReader {
  pos = 0
  private buf = Buffer.alloc(0)
  /** File offset of buf[0]. */
  private base = 0

  constructor(
    private readonly fd: number,
    readonly size: number,
    private readonly file: string,
  ) {}

  private need(n: number): void {
    if (this.pos + n > this.size) throw new GgufFormatError(this.file, `${this.file}: truncated GGUF header at byte ${this.pos}`)
    if (this.pos + n <= this.base + this.buf.length) return
    const len = Math.min(this.size - this.pos, Math.max(n, 1 << 20))
    this.buf = Buffer.alloc(len)
    let got = 0
    while (got < len) {
      const k = readSync(this.fd, this.buf, got, len - got, this.pos + got)
      if (k === 0) break
      got += k
    }
    this.base = this.pos
  }
  private at(n: number): number {
    this.need(n)
    const off = this.pos - this.base
    this.pos += n
    return off
  }
  u8(): number {
    const o = this.at(1)
    return this.buf.readUInt8(o)
  }
  u16(): number {
    const o = this.at(2)
    return this.buf.readUInt16LE(o)
  }
  u32(): number {
    const o = this.at(4)
    return this.buf.readUInt32LE(o)
  }
  i32(): number {
    const o = this.at(4)
    return this.buf.readInt32LE(o)
  }
  u64(): bigint {
    const o = this.at(8)
    return this.buf.readBigUInt64LE(o)
  }
  i64(): bigint {
    const o = this.at(8)
    return this.buf.readBigInt64LE(o)
  }
  count(what: string): number {
    const v = this.u64()
    if (v > BigInt(this.size)) throw new GgufFormatError(this.file, `${this.file}: ${what} count ${v} exceeds the file`)
    return Number(v)
  }
  f32(): number {
    const o = this.at(4)
    return this.buf.readFloatLE(o)
  }
  f64(): number {
    const o = this.at(8)
    return this.buf.readDoubleLE(o)
  }
  string(): string {
    const n = this.count('string length')
    const off = this.at(n)
    return this.buf.toString('utf8', off, off + n)
  }
}

function readScalar(r: ByteReader, type: number, file: string): Scalar['value'] {
  switch (type) {
    case GgufValueType.UINT8: return r.u8()
    case GgufValueType.INT8: return (r.u8() << 24) >> 24
    case GgufValueType.UINT16: return r.u16()
    case GgufValueType.INT16: return (r.u16() << 16) >> 16
    case GgufValueType.UINT32: return r.u32()
    case GgufValueType.INT32: return r.i32()
    case GgufValueType.FLOAT32: return r.f32()
    case GgufValueType.FLOAT64: return r.f64()
    case GgufValueType.UINT64: return r.u64()
    case GgufValueType.INT64: return r.i64()
    case GgufValueType.BOOL: {
      const b = r.u8()
      if (b > 1) throw new GgufFormatError(file, `${file}: bool value ${b}`)
      return b === 1
    }
    case GgufValueType.STRING: return r.string()
    default: throw new GgufFormatError(file, `${file}: unknown metadata value type ${type}`)
  }
}

function readValue(r: ByteReader, file: string): GgufValue {
  const type = r.u32()
  if (type === GgufValueType.ARRAY) {
    const itemType = r.u32()
    if (itemType === GgufValueType.ARRAY) throw new GgufFormatError(file, `${file}: nested arrays are not supported`)
    const n = r.count('array')
    const values: Array<Scalar['value']> = new Array(n)
    for (let i = 0; i < n; i++) values[i] = readScalar(r, itemType, file)
    return { type: GgufValueType.ARRAY, itemType: itemType as Scalar['type'], values }
  }
  return { type, value: readScalar(r, type, file) } as GgufValue
}

/** Parse a GGUF file's header (metadata and tensor infos); tensor data stays on disk. */
export async function readGguf(file: string): Promise<GgufFile> {
  let fd: number
  try {
    fd = openSync(file, 'r')
  } catch (e) {
    throw new GgufFormatError(file, `${file}: cannot read: ${(e as Error).message}`, { cause: e })
  }
  try {
    return parseGguf(new ByteReader(fd, fstatSync(fd).size, file), file)
  } finally {
    closeSync(fd)
  }
}

function parseGguf(r: ByteReader, file: string): GgufFile {
  if (r.size < 24 || r.u32() !== GGUF_MAGIC) throw new GgufFormatError(file, `${file}: not a GGUF file (bad magic)`)
  const version = r.u32()
  if (version !== 2 && version !== 3) throw new GgufFormatError(file, `${file}: GGUF version ${version} is not supported`)
  const nTensors = r.count('tensor')
  const nKv = r.count('metadata')
  const metadata = new Map<string, GgufValue>()
  for (let i = 0; i < nKv; i++) {
    const key = r.string()
    if (metadata.has(key)) throw new GgufFormatError(file, `${file}: duplicate metadata key ${key}`)
    metadata.set(key, readValue(r, file))
  }
  const al = metadata.get('general.alignment')
  const alignment = al && al.type === GgufValueType.UINT32 ? al.value : GGUF_DEFAULT_ALIGNMENT
  const tensors: GgufTensorInfo[] = []
  for (let i = 0; i < nTensors; i++) {
    const name = r.string()
    const nd = r.u32()
    if (nd < 1 || nd > 4) throw new GgufFormatError(file, `${file}: tensor ${name} has ${nd} dims`)
    const dims = Array.from({ length: nd }, () => Number(r.u64()))
    const type = r.u32()
    const offset = Number(r.u64())
    if (offset % alignment !== 0) throw new GgufFormatError(file, `${file}: tensor ${name} offset ${offset} is not aligned to ${alignment}`)
    tensors.push({ name, dims, type, offset })
  }
  const dataOffset = alignUp(r.pos, alignment)
  for (const t of tensors) {
    if (t.type === GgmlType.Q8_0 && t.dims[0] % Q8_0_BLOCK !== 0) throw new GgufFormatError(file, `${file}: Q8_0 tensor ${t.name} has rows of ${t.dims[0]} values, not whole blocks of ${Q8_0_BLOCK}`)
    const size = t.type in GgmlType ? tensorBytes(t.type, elementCount(t.dims)) : 0
    if (dataOffset + t.offset + size > r.size) throw new GgufFormatError(file, `${file}: tensor ${t.name} extends past the end of the file`)
  }
  return { file, version, metadata, tensors, alignment, dataOffset, size: r.size }
}

/** One f32, f16 or q8_0 tensor of a parsed GGUF file as float32 values (ggml order: dims[0] fastest). */
export async function readGgufTensor(gguf: GgufFile, name: string): Promise<Float32Array> {
  const t = gguf.tensors.find((x) => x.name === name)
  if (!t) throw new GgufFormatError(gguf.file, `${gguf.file}: no tensor ${name}`)
  if (!(t.type in GgmlType)) throw new GgufFormatError(gguf.file, `${gguf.file}: tensor ${name} has ggml type ${t.type}; only F32, F16 and Q8_0 are read`)
  const n = elementCount(t.dims)
  const bytes = Buffer.alloc(tensorBytes(t.type, n))
  const fh = await open(gguf.file, 'r')
  try {
    await fh.read(bytes, 0, bytes.length, gguf.dataOffset + t.offset)
  } finally {
    await fh.close()
  }
  if (t.type === GgmlType.F32) return new Float32Array(bytes.buffer, bytes.byteOffset, n).slice()
  if (t.type === GgmlType.Q8_0) return dequantizeQ8_0(bytes, n)
  return f16ArrayToF32(new Uint16Array(bytes.buffer, bytes.byteOffset, n))
}
