// `autodidact export --format onnx`: a Llama / Qwen2 / Qwen3 Hugging Face folder (or a PEFT LoRA
// adapter folder, merged into its base) written as an ONNX causal-LM graph in the layout
// transformers.js and onnxruntime-genai-style loaders expect:
//
//   inputs   input_ids [batch, seq] int64, attention_mask [batch, past+seq] int64,
//            position_ids [batch, seq] int64, past_key_values.N.key / .value [batch, kv_heads, past, head_dim]
//   outputs  logits [batch, seq, vocab] float32, present.N.key / .value [batch, kv_heads, past+seq, head_dim]
//
// in outDir/onnx/model.onnx (f32) or outDir/onnx/model_fp16.onnx (f16), next to config.json,
// generation_config.json and the tokenizer files, as transformers.js reads a model folder.
//
// The graph uses standard ONNX ops only (opset 14): RMSNorm as Pow/ReduceMean/Add/Sqrt/Div/Mul,
// RoPE without Sin/Cos (cos/sin tables over max_position_embeddings, computed here in float64
// exactly as the engine does, gathered by position_ids; Llama 3 scaling folded into inv_freq),
// KV concatenation with Concat, a causal-and-padding mask from attention_mask, GQA as a
// broadcasting MatMul over [batch, kv_heads, group, seq, head_dim], SiLU as x·Sigmoid(x).
//
// f16: weights are stored as float16 and Cast to float32 in the graph; activations, KV cache and
// logits stay float32 (onnxruntime's CPU provider lacks float16 kernels for several of these ops,
// and transformers.js's default kv_cache_dtype is float32). The file is half the size; the
// arithmetic is the f32 graph's.
import { existsSync } from 'node:fs'
import { mkdir, rm, rmdir, stat, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'
import type { FileHandle } from 'node:fs/promises'
import { performance } from 'node:perf_hooks'

import { ConfigError, InvalidArgumentError, ResourceLimitError, UnsupportedArchitectureError } from '../engine/errors.js'
import { readAdapterConfig } from '../engine/hf/adapter.js'
import { fileWriteError, checkOutputTarget, commitTemps, discardTemps, registerTemp, removeStaleTemps, unregisterTemp, writeAll, writeTemp } from '../util/atomic.js'
import { MAX_JSON_FILE_BYTES, MAX_TOKENIZER_FILE_BYTES, readRegularFile } from '../engine/hf/files.js'
import { readModelFolder } from '../engine/hf/folder.js'
import { f32ArrayToF16, readTensorFloat32 } from '../engine/hf/safetensors.js'
import type { ModelConfig, TensorRef } from '../engine/types.js'
import { DT, GraphBuilder, bytesOf, valueInfo } from '../onnx/proto.js'

export type OnnxDtype = 'f32' | 'f16'

export interface OnnxExportOptions {
  dtype: OnnxDtype
  /** Weights in a separate `<model>.onnx_data` file: 'auto' (default) when they exceed 1.8 GB (protobuf's limit is 2 GB). */
  externalData?: boolean | 'auto'
}

export interface OnnxExportResult {
  /** Bytes written (graph, external data, config and tokenizer files). */
  bytes: number
  seconds: number
  /** Every file written, absolute paths. */
  files: string[]
}

/** The opset of the exported graph (every op used is standard and unchanged in ONNX ≤ 17). */
export const ONNX_OPSET = 14
const EXTERNAL_AUTO_BYTES = 1.8e9
/** Tensors below this stay inline even in external-data mode (as onnx's own converter does). */
const INLINE_MAX_BYTES = 1024
const FOLDER_FILES = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'chat_template.json']
/** torch.finfo(float32).min, the additive mask transformers uses. */
const MASK_MIN = -3.4028234663852886e38

/** The file name transformers.js loads for a dtype (its DEFAULT_DTYPE_SUFFIX_MAPPING: fp32 '', fp16 '_fp16'). */
export function onnxFileName(dtype: OnnxDtype): string {
  return dtype === 'f16' ? 'model_fp16.onnx' : 'model.onnx'
}

// ---------------------------------------------------------------------------------------------
// RoPE tables

/**
 * inv_freq[i] = θ^(−2i/d), then Llama 3's rescaling of long wavelengths (transformers'
 * `_compute_llama3_parameters`), in float64 like the engine's kernels::rope_inv_freq.
 */
export function ropeInvFreq(config: Pick<ModelConfig, 'headDim' | 'ropeTheta' | 'ropeScaling'>): Float64Array {
  const d = config.headDim
  const inv = Float64Array.from({ length: d / 2 }, (_, i) => 1 / Math.pow(config.ropeTheta, (2 * i) / d))
  const s = config.ropeScaling
  if (!s) return inv
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor
  for (let i = 0; i < inv.length; i++) {
    const wavelen = (2 * Math.PI) / inv[i]
    if (wavelen < highWavelen) continue
    if (wavelen > lowWavelen) inv[i] /= s.factor
    else {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor)
      inv[i] = ((1 - smooth) * inv[i]) / s.factor + smooth * inv[i]
    }
  }
  return inv
}

/** Largest RoPE cos+sin tables an export embeds (max_position_embeddings × head_dim × 4 bytes): 1 GiB. */
export const MAX_ROPE_TABLE_BYTES = 1 << 30

/** cos and sin of position·inv_freq for every position below max_position_embeddings: [positions, head_dim/2] each. */
export function ropeTables(config: ModelConfig): { cos: Float32Array; sin: Float32Array; positions: number } {
  const inv = ropeInvFreq(config)
  const half = inv.length
  const positions = config.maxPositionEmbeddings
  const bytes = positions * half * 4 * 2
  if (bytes > MAX_ROPE_TABLE_BYTES)
    throw new ResourceLimitError(
      'model-size',
      null,
      `max_position_embeddings ${positions} × head_dim ${config.headDim} needs ${bytes} bytes of RoPE tables in the graph; at most ${MAX_ROPE_TABLE_BYTES}: ` +
        'lower max_position_embeddings in config.json to the context you need',
    )
  const cos = new Float32Array(positions * half)
  const sin = new Float32Array(positions * half)
  for (let p = 0; p < positions; p++)
    for (let i = 0; i < half; i++) {
      const angle = p * inv[i] // float64 angle, cast to float32 after cos/sin, as the engine does
      cos[p * half + i] = Math.cos(angle)
      sin[p * half + i] = Math.sin(angle)
    }
  return { cos, sin, positions }
}

// ---------------------------------------------------------------------------------------------
// Weights: inline or external, f32 or f16 (then Cast to f32 in the graph)

/** [rows, cols] row-major → [cols, rows]: torch Linear weights [out, in] become MatMul's [in, out]. */
export function transpose2d(w: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(w.length)
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = w[r * cols + c]
  return out
}

class WeightWriter {
  private offset = 0
  bytes = 0

  constructor(
    private readonly g: GraphBuilder,
    private readonly dtype: OnnxDtype,
    private readonly external: { fh: FileHandle; location: string } | null,
  ) {}

  /** Stores `data` under `name` at the export dtype; returns the name of its float32 value in the graph. */
  async add(name: string, data: Float32Array, dims: number[], keepF32 = false): Promise<string> {
    const half = this.dtype === 'f16' && !keepF32
    const bytes = half ? bytesOf(f32ArrayToF16(data)) : bytesOf(data)
    const stored = half ? `${name}.f16` : name
    await this.store(stored, half ? DT.FLOAT16 : DT.FLOAT, dims, bytes)
    return half ? this.g.op1('Cast', [stored], { to: { i: DT.FLOAT } }, name) : name
  }

  private async store(name: string, type: 1 | 10, dims: number[], bytes: Uint8Array): Promise<void> {
    this.bytes += bytes.byteLength
    if (!this.external || bytes.byteLength < INLINE_MAX_BYTES) {
      this.g.initializer(name, type, dims, bytes)
      return
    }
    // Large tensors start on a 64 KiB boundary so runtimes can memory-map them.
    const align = bytes.byteLength >= 1 << 20 ? 65536 : 16
    const pad = (align - (this.offset % align)) % align
    if (pad) await writeAll(this.external.fh, new Uint8Array(pad))
    this.offset += pad
    this.g.initializer(name, type, dims, { location: this.external.location, offset: this.offset, length: bytes.byteLength })
    await writeAll(this.external.fh, bytes)
    this.offset += bytes.byteLength
  }
}

// ---------------------------------------------------------------------------------------------
// The graph

interface Weights {
  get(name: string): Promise<Float32Array>
}

/** y = x / sqrt(mean(x², last axis) + eps) · w (Llama / Qwen RMSNorm). */
function rmsNorm(g: GraphBuilder, x: string, weight: string, eps: number): string {
  const sq = g.op1('Pow', [x, g.float([2], [])])
  const mean = g.op1('ReduceMean', [sq], { axes: { ints: [-1] }, keepdims: { i: 1 } })
  const rms = g.op1('Sqrt', [g.op1('Add', [mean, g.float([eps], [])])])
  return g.op1('Mul', [g.op1('Div', [x, rms]), weight])
}

/** x·W (+b) with W stored transposed as [in, out]. */
async function linear(g: GraphBuilder, w: WeightWriter, weights: Weights, x: string, prefix: string, outDim: number, inDim: number, bias: boolean): Promise<string> {
  const W = await w.add(`${prefix}.weight`, transpose2d(await weights.get(`${prefix}.weight`), outDim, inDim), [inDim, outDim])
  const y = g.op1('MatMul', [x, W])
  if (!bias) return y
  return g.op1('Add', [y, await w.add(`${prefix}.bias`, await weights.get(`${prefix}.bias`), [outDim])])
}

/** RoPE in HF's rotate_half layout: x·cos + swap_halves(x)·sin±, with sin± = [−sin, sin] (cos = [cos, cos]). */
function rope(g: GraphBuilder, x: string, cos: string, sinSigned: string, half: number): string {
  const [a, b] = g.op('Split', [x, g.int64([half, half])], { axis: { i: -1 } }, 2)
  const swapped = g.op1('Concat', [b, a], { axis: { i: -1 } })
  return g.op1('Add', [g.op1('Mul', [x, cos]), g.op1('Mul', [swapped, sinSigned])])
}

interface Shared {
  x: string
  cos: string
  sin: string
  /** [batch, 1, 1, seq, total] bool: key visible to query. */
  allowed: string
}

/** Embedding, RoPE tables gathered by position_ids, and the causal ∧ padding mask. */
async function buildShared(g: GraphBuilder, w: WeightWriter, weights: Weights, c: ModelConfig): Promise<Shared & { embed: string }> {
  const embed = await w.add('model.embed_tokens.weight', await weights.get('model.embed_tokens.weight'), [c.vocabSize, c.hiddenSize])
  const x = g.op1('Gather', [embed, 'input_ids'], { axis: { i: 0 } })

  const half = c.headDim / 2
  const tables = ropeTables(c)
  const cosT = await w.add('rope.cos', tables.cos, [tables.positions, half], true)
  const sinT = await w.add('rope.sin', tables.sin, [tables.positions, half], true)
  const cosH = g.op1('Gather', [cosT, 'position_ids'], { axis: { i: 0 } }) // [B, S, D/2]
  const sinH = g.op1('Gather', [sinT, 'position_ids'], { axis: { i: 0 } })
  const heads = g.int64([1])
  const cos = g.op1('Unsqueeze', [g.op1('Concat', [cosH, cosH], { axis: { i: -1 } }), heads]) // [B, 1, S, D]
  const sin = g.op1('Unsqueeze', [g.op1('Concat', [g.op1('Neg', [sinH]), sinH], { axis: { i: -1 } }), heads])

  // Query i of S new tokens sits at index P + i of the P + S keys (P = past length): it sees
  // key j when j ≤ P + i and attention_mask[b, j] = 1. Indices, not position_ids: left padding
  // shifts positions but not the causal order.
  const seq = g.op1('Gather', [g.op1('Shape', ['input_ids']), g.int64([1], [])], { axis: { i: 0 } })
  const total = g.op1('Gather', [g.op1('Shape', ['attention_mask']), g.int64([1], [])], { axis: { i: 0 } })
  const past = g.op1('Sub', [total, seq])
  const one = g.int64([1], [])
  const rows = g.op1('Unsqueeze', [g.op1('Range', [past, total, one]), g.int64([1])]) // [S, 1]
  const cols = g.op1('Unsqueeze', [g.op1('Range', [g.int64([0], []), total, one]), g.int64([0])]) // [1, T]
  const causal = g.op1('LessOrEqual', [cols, rows]) // [S, T]
  const padding = g.op1('Unsqueeze', [g.op1('Cast', ['attention_mask'], { to: { i: DT.BOOL } }), g.int64([1, 2, 3])]) // [B, 1, 1, 1, T]
  const allowed = g.op1('And', [causal, padding]) // [B, 1, 1, S, T]
  return { embed, x, cos, sin, allowed }
}

async function buildLayer(g: GraphBuilder, w: WeightWriter, weights: Weights, c: ModelConfig, l: number, s: Shared): Promise<string> {
  const p = `model.layers.${l}`
  const { hiddenSize: H, numHeads: NH, numKvHeads: KV, headDim: D, intermediateSize: I } = c
  const G = NH / KV
  const norm = async (name: string, dim: number) => w.add(name, await weights.get(name), [dim])

  const h = rmsNorm(g, s.x, await norm(`${p}.input_layernorm.weight`, H), c.rmsNormEps)
  const heads = async (proj: 'q' | 'k' | 'v', n: number) => {
    const y = await linear(g, w, weights, h, `${p}.self_attn.${proj}_proj`, n * D, H, c.qkvBias)
    let t = g.op1('Reshape', [y, g.int64([0, 0, n, D])]) // [B, S, n, D]
    if (c.qkNorm && proj !== 'v') t = rmsNorm(g, t, await norm(`${p}.self_attn.${proj}_norm.weight`, D), c.rmsNormEps) // Qwen3
    t = g.op1('Transpose', [t], { perm: { ints: [0, 2, 1, 3] } }) // [B, n, S, D]
    return proj === 'v' ? t : rope(g, t, s.cos, s.sin, D / 2)
  }
  const q = await heads('q', NH)
  const k = await heads('k', KV)
  const v = await heads('v', KV)
  const keys = g.op1('Concat', [`past_key_values.${l}.key`, k], { axis: { i: 2 } }, `present.${l}.key`) // [B, KV, T, D]
  const values = g.op1('Concat', [`past_key_values.${l}.value`, v], { axis: { i: 2 } }, `present.${l}.value`)

  // GQA: query head h = kv·G + g reads kv head kv (transformers' repeat_kv), as a broadcast over G.
  const q5 = g.op1('Reshape', [q, g.int64([0, KV, G, -1, D])]) // [B, KV, G, S, D]
  const kT = g.op1('Transpose', [g.op1('Unsqueeze', [keys, g.int64([2])])], { perm: { ints: [0, 1, 2, 4, 3] } }) // [B, KV, 1, D, T]
  const scores = g.op1('Mul', [g.op1('MatMul', [q5, kT]), g.float([1 / Math.sqrt(D)], [])]) // [B, KV, G, S, T]
  const masked = g.op1('Where', [s.allowed, scores, g.float([MASK_MIN], [])])
  const probs = g.op1('Softmax', [masked], { axis: { i: -1 } })
  const o5 = g.op1('MatMul', [probs, g.op1('Unsqueeze', [values, g.int64([2])])]) // [B, KV, G, S, D]
  const o4 = g.op1('Transpose', [g.op1('Reshape', [o5, g.int64([0, NH, -1, D])])], { perm: { ints: [0, 2, 1, 3] } }) // [B, S, NH, D]
  const o = g.op1('Reshape', [o4, g.int64([0, 0, NH * D])])
  const attn = await linear(g, w, weights, o, `${p}.self_attn.o_proj`, H, NH * D, c.oBias)
  const x1 = g.op1('Add', [s.x, attn])

  const h2 = rmsNorm(g, x1, await norm(`${p}.post_attention_layernorm.weight`, H), c.rmsNormEps)
  const gate = await linear(g, w, weights, h2, `${p}.mlp.gate_proj`, I, H, false)
  const up = await linear(g, w, weights, h2, `${p}.mlp.up_proj`, I, H, false)
  const act = g.op1('Mul', [g.op1('Mul', [gate, g.op1('Sigmoid', [gate])]), up]) // SiLU(gate)·up
  const down = await linear(g, w, weights, act, `${p}.mlp.down_proj`, H, I, false)
  return g.op1('Add', [x1, down])
}

/** Builds the whole causal LM into `g`. */
async function buildCausalLM(g: GraphBuilder, w: WeightWriter, weights: Weights, c: ModelConfig): Promise<void> {
  const shared = await buildShared(g, w, weights, c)
  let x = shared.x
  for (let l = 0; l < c.numLayers; l++) x = await buildLayer(g, w, weights, c, l, { ...shared, x })
  const final = rmsNorm(g, x, await w.add('model.norm.weight', await weights.get('model.norm.weight'), [c.hiddenSize]), c.rmsNormEps)
  const head = c.tieWordEmbeddings
    ? g.op1('Transpose', [shared.embed], { perm: { ints: [1, 0] } }) // tied: one stored matrix, transposed in the graph
    : await w.add('lm_head.weight', transpose2d(await weights.get('lm_head.weight'), c.vocabSize, c.hiddenSize), [c.hiddenSize, c.vocabSize])
  g.op1('MatMul', [final, head], {}, 'logits')
}

function graphInputsOutputs(c: ModelConfig) {
  const { numKvHeads: KV, headDim: D } = c
  const inputs = [
    valueInfo('input_ids', DT.INT64, ['batch_size', 'sequence_length']),
    valueInfo('attention_mask', DT.INT64, ['batch_size', 'past_sequence_length + sequence_length']),
    valueInfo('position_ids', DT.INT64, ['batch_size', 'sequence_length']),
  ]
  const outputs = [valueInfo('logits', DT.FLOAT, ['batch_size', 'sequence_length', c.vocabSize])]
  for (let l = 0; l < c.numLayers; l++)
    for (const kind of ['key', 'value']) {
      inputs.push(valueInfo(`past_key_values.${l}.${kind}`, DT.FLOAT, ['batch_size', KV, 'past_sequence_length', D]))
      outputs.push(valueInfo(`present.${l}.${kind}`, DT.FLOAT, ['batch_size', KV, 'past_sequence_length + sequence_length', D]))
    }
  return { inputs, outputs }
}

// ---------------------------------------------------------------------------------------------
// Sources: an HF folder, or a PEFT adapter folder merged into its base by the engine

/** A PEFT adapter folder (adapter_config.json, no config.json) becomes a merged HF folder in a temporary directory. */
async function resolveSource(modelDir: string): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const adapterConfig = join(modelDir, 'adapter_config.json')
  if (existsSync(join(modelDir, 'config.json')) || !existsSync(adapterConfig)) return { dir: modelDir, cleanup: async () => {} }
  const base = (await readAdapterConfig(modelDir)).baseModel
  if (base === null || !existsSync(join(base, 'config.json')))
    throw new ConfigError(adapterConfig, 'base_model_name_or_path', `${adapterConfig}: a LoRA adapter folder is exported merged into its base model, but base_model_name_or_path (${JSON.stringify(base)}) is not a local model folder; merge it first (model.loadAdapter(dir); model.save(out, { adapterOnly: false }))`)
  const { loadModel } = await import('../engine/model.js')
  const model = await loadModel(base, { threads: 1 })
  const tmp = await mkdtemp(join(tmpdir(), 'autodidact-merged-'))
  registerTemp(tmp) // removed should a signal stop the export
  const cleanup = async () => {
    await rm(tmp, { recursive: true, force: true })
    unregisterTemp(tmp)
  }
  try {
    await model.loadAdapter(modelDir)
    await model.save(tmp, { adapterOnly: false }) // W + α/r·B·A, the same merge as Model.mergeLora
  } catch (e) {
    await cleanup()
    throw e
  } finally {
    model.dispose()
  }
  return { dir: tmp, cleanup }
}

/** A folder file to copy (a regular file of bounded size, read without blocking on a FIFO). */
async function readFolderFile(file: string): Promise<Buffer> {
  return readRegularFile(file, file.endsWith('tokenizer.json') ? MAX_TOKENIZER_FILE_BYTES : MAX_JSON_FILE_BYTES, (_problem, message, cause) => new ConfigError(file, null, message, { cause }))
}

async function readJsonOrNull(file: string): Promise<Record<string, unknown> | null> {
  try {
    const v = JSON.parse((await readFolderFile(file)).toString('utf8')) as unknown
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null
  } catch {
    return null
  }
}

/** mkdir -p that returns the folders it created (deepest last), so a failed export can remove them. */
async function makeFolders(dir: string): Promise<string[]> {
  const missing: string[] = []
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) missing.unshift(d)
  try {
    await mkdir(dir, { recursive: true })
  } catch (e) {
    throw fileWriteError(e, dir, 'create')
  }
  return missing
}

/** Removes folders a failed export created, deepest first, if they are empty. */
async function removeFolders(created: string[]): Promise<void> {
  for (const d of created.slice().reverse()) await rmdir(d).catch(() => undefined)
}

/**
 * config.json with transformers.js's hints: a float32 KV cache, and which graphs keep their
 * weights in external data (kept from an earlier export of the other dtype into the same folder).
 */
function transformersJsConfig(configJson: Record<string, unknown>, earlier: Record<string, unknown> | null, fileName: string, external: boolean): Record<string, unknown> {
  const prior = { ...((configJson['transformers.js_config'] ?? {}) as Record<string, unknown>), ...((earlier?.['transformers.js_config'] ?? {}) as Record<string, unknown>) }
  const ext = { ...((typeof prior.use_external_data_format === 'object' && prior.use_external_data_format) || {}) } as Record<string, number>
  if (external) ext[fileName] = 1
  else delete ext[fileName]
  return { ...configJson, 'transformers.js_config': { ...prior, kv_cache_dtype: 'float32', use_external_data_format: ext } }
}

// ---------------------------------------------------------------------------------------------

/** Exports an HF model folder (or a LoRA adapter folder, merged) to `outDir` as an ONNX causal LM. */
export async function exportOnnx(modelDir: string, outDir: string, options: OnnxExportOptions): Promise<OnnxExportResult> {
  const t0 = performance.now()
  const dtype = options?.dtype
  if (dtype !== 'f32' && dtype !== 'f16') throw new InvalidArgumentError('dtype', `dtype must be 'f32' or 'f16', got ${String(dtype)}`)
  const source = await resolveSource(modelDir)
  try {
    const folder = await readModelFolder(source.dir)
    if (folder.head.kind !== 'causal-lm')
      throw new UnsupportedArchitectureError(folder.config.hfArchitecture, `${folder.configPath}: ${folder.config.hfArchitecture} has a score head; ONNX export covers causal LMs (*ForCausalLM) only`, folder.configPath)
    const c = folder.config
    const refs = new Map<string, TensorRef>(folder.tensors.map((t) => [t.name, t]))
    const weights: Weights = { get: (name) => readTensorFloat32(refs.get(name)!) }

    const onnxDir = join(outDir, 'onnx')
    const fileName = onnxFileName(dtype)
    const modelPath = join(onnxDir, fileName)
    const dataPath = `${modelPath}_data`
    const paramBytes = folder.tensors.filter((t) => !folder.extraTensors.includes(t.name)).reduce((s, t) => s + (t.nbytes / (t.dtype === 'F32' ? 4 : 2)) * (dtype === 'f16' ? 2 : 4), 0)
    const external = options.externalData === true || ((options.externalData ?? 'auto') === 'auto' && paramBytes > EXTERNAL_AUTO_BYTES)
    const copies = FOLDER_FILES.filter((f) => existsSync(join(source.dir, f)))
    const targets = [modelPath, ...(external ? [dataPath] : []), ...copies.map((f) => join(outDir, f))]

    // Nothing is written over a FIFO, device, socket or symbolic link; temporaries a killed export left go first.
    await checkOutputTarget(outDir, 'directory')
    await checkOutputTarget(onnxDir, 'directory')
    for (const t of [...targets, dataPath]) await checkOutputTarget(t)
    for (const t of targets) await removeStaleTemps(t)

    // Every file is written to a temporary beside its target and all are renamed together at the
    // end: a full disk or an error leaves the folder as it was (and removes folders it created).
    const created = [...(await makeFolders(outDir)), ...(await makeFolders(onnxDir))]
    const g = new GraphBuilder()
    const temps: [string, string][] = []
    const stage = async (target: string, fill: (fh: FileHandle) => Promise<void>) => {
      try {
        temps.push([await writeTemp(target, fill), target])
      } catch (e) {
        throw fileWriteError(e, target)
      }
    }
    try {
      if (external) await stage(dataPath, async (fh) => buildCausalLM(g, new WeightWriter(g, dtype, { fh, location: basename(dataPath) }), weights, c))
      else await buildCausalLM(g, new WeightWriter(g, dtype, null), weights, c)
      const { inputs, outputs } = graphInputsOutputs(c)
      const graph = g.encode({
        name: `${c.hfArchitecture} (autodidact export, ${dtype})`,
        inputs,
        outputs,
        opset: ONNX_OPSET,
        producer: 'autodidact',
        metadata: { architecture: c.hfArchitecture, weights_dtype: dtype, compute_dtype: 'float32' },
      })
      await stage(modelPath, (fh) => writeAll(fh, graph))
      for (const f of copies) {
        const src = join(source.dir, f)
        const dst = join(outDir, f)
        let bytes = await readFolderFile(src)
        if (f === 'config.json') {
          const cfg = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>
          bytes = Buffer.from(JSON.stringify(transformersJsConfig(cfg, await readJsonOrNull(dst), fileName, external), null, 2) + '\n', 'utf8')
        }
        await stage(dst, (fh) => writeAll(fh, bytes))
      }
      try {
        await commitTemps(temps)
      } catch (e) {
        throw fileWriteError(e, outDir, 'rename the finished files into')
      }
    } catch (e) {
      await discardTemps(temps.map(([t]) => t))
      await removeFolders(created)
      throw e
    }
    if (!external && existsSync(dataPath)) await rm(dataPath) // a stale external file of an earlier export
    const files = targets
    let bytes = 0
    for (const f of files) bytes += (await stat(f)).size
    return { bytes, seconds: (performance.now() - t0) / 1000, files }
  } finally {
    await source.cleanup()
  }
}
