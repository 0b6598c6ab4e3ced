// config.json of a Hugging Face model folder → ModelConfig, with transformers' defaults for each
// family (LlamaConfig, Qwen2Config, Qwen3Config), and the list of tensors such a model has
// (names and [out, in] shapes as transformers saves them).

import { ConfigError, MissingTensorError, ResourceLimitError, TensorShapeError, UnsupportedArchitectureError } from '../errors.js'
import { modelTensors } from '../tensor-table.js'
import type { Architecture, Llama3RopeScaling, ModelConfig, TensorRef } from '../types.js'

/** What sits on top of the decoder: the LM head, or a sequence-classification score head. */
export type ModelHead =
  | { kind: 'causal-lm' }
  | { kind: 'sequence-classification'; numLabels: number; padTokenId: number | null }

interface FamilyDefaults {
  architecture: Architecture
  maxPositionEmbeddings: number
  /** null: hidden_size / num_attention_heads. */
  headDim: number | null
  bosTokenId: number | null
  eosTokenIds: number[]
  /** Qwen2 always has q/k/v bias and no attention_bias switch. */
  fixedQkvBias: boolean | null
  qkNorm: boolean
}

// Defaults as in transformers' LlamaConfig / Qwen2Config / Qwen3Config.
const FAMILIES: Record<Architecture, FamilyDefaults> = {
  llama: { architecture: 'llama', maxPositionEmbeddings: 2048, headDim: null, bosTokenId: 1, eosTokenIds: [2], fixedQkvBias: null, qkNorm: false },
  qwen2: { architecture: 'qwen2', maxPositionEmbeddings: 32768, headDim: null, bosTokenId: null, eosTokenIds: [], fixedQkvBias: true, qkNorm: false },
  qwen3: { architecture: 'qwen3', maxPositionEmbeddings: 32768, headDim: 128, bosTokenId: null, eosTokenIds: [], fixedQkvBias: null, qkNorm: true },
}

const ARCHITECTURES: Record<string, { family: Architecture; head: ModelHead['kind'] }> = {
  LlamaForCausalLM: { family: 'llama', head: 'causal-lm' },
  Qwen2ForCausalLM: { family: 'qwen2', head: 'causal-lm' },
  Qwen3ForCausalLM: { family: 'qwen3', head: 'causal-lm' },
  LlamaForSequenceClassification: { family: 'llama', head: 'sequence-classification' },
  Qwen2ForSequenceClassification: { family: 'qwen2', head: 'sequence-classification' },
  Qwen3ForSequenceClassification: { family: 'qwen3', head: 'sequence-classification' },
}

const MODEL_TYPES: Record<string, string> = {
  llama: 'LlamaForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
}

export const SUPPORTED_ARCHITECTURES: readonly string[] = Object.keys(ARCHITECTURES)

type Json = Record<string, unknown>

function asObject(json: unknown, file: string): Json {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new ConfigError(file, null, `${file}: expected a JSON object`)
  }
  return json as Json
}

function has(o: Json, k: string): boolean {
  return o[k] !== undefined && o[k] !== null
}

function posInt(o: Json, k: string, file: string, fallback?: number): number {
  if (!has(o, k)) {
    if (fallback !== undefined) return fallback
    throw new ConfigError(file, k, `${file}: required field "${k}" is missing`)
  }
  const v = o[k]
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ConfigError(file, k, `${file}: "${k}" must be a positive integer, got ${JSON.stringify(v)}`)
  }
  return v
}

function posNum(o: Json, k: string, file: string, fallback: number, prefix = ''): number {
  if (!has(o, k)) return fallback
  const v = o[k]
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw new ConfigError(file, prefix + k, `${file}: "${prefix + k}" must be a positive number, got ${JSON.stringify(v)}`)
  }
  return v
}

function bool(o: Json, k: string, file: string, fallback: boolean): boolean {
  if (!has(o, k)) return fallback
  const v = o[k]
  if (typeof v !== 'boolean') throw new ConfigError(file, k, `${file}: "${k}" must be true or false, got ${JSON.stringify(v)}`)
  return v
}

function tokenId(v: unknown, file: string, k: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new ConfigError(file, k, `${file}: "${k}" must be a non-negative integer token id, got ${JSON.stringify(v)}`)
  }
  return v
}

/** `eos_token_id` may be an int, a list of ints, or null. */
export function parseEosTokenIds(v: unknown, file: string, field = 'eos_token_id'): number[] {
  if (v === undefined || v === null) return []
  if (Array.isArray(v)) return [...new Set(v.map((x, i) => tokenId(x, file, `${field}[${i}]`)))]
  return [tokenId(v, file, field)]
}

/** Resolve which transformers class config.json describes. */
function resolveArchitecture(cfg: Json, file: string): string {
  const archs = cfg.architectures
  if (archs !== undefined && archs !== null) {
    if (!Array.isArray(archs) || archs.length === 0 || !archs.every((a) => typeof a === 'string')) {
      throw new ConfigError(file, 'architectures', `${file}: "architectures" must be a non-empty list of class names`)
    }
    const known = (archs as string[]).find((a) => a in ARCHITECTURES)
    if (known) return known
    throw new UnsupportedArchitectureError(
      archs[0] as string,
      `${file}: architecture ${(archs as string[]).join(', ')} is not supported; autodidact loads ` +
        `${SUPPORTED_ARCHITECTURES.join(', ')}`,
      file,
    )
  }
  const mt = cfg.model_type
  if (typeof mt === 'string' && mt in MODEL_TYPES) return MODEL_TYPES[mt]
  throw new UnsupportedArchitectureError(
    typeof mt === 'string' ? mt : 'unknown',
    `${file}: neither "architectures" nor a supported "model_type" (llama, qwen2, qwen3) is given` +
      (typeof mt === 'string' ? ` (model_type is "${mt}")` : ''),
    file,
  )
}

/**
 * RoPE parameters from either the transformers ≤4 layout (`rope_theta`, `rope_scaling`) or the
 * v5 layout (`rope_parameters: {rope_type, rope_theta, …}`).
 */
function parseRope(cfg: Json, file: string): { theta: number; scaling: Llama3RopeScaling | null } {
  let theta = posNum(cfg, 'rope_theta', file, 10000)
  let scaling: unknown = cfg.rope_scaling
  let field = 'rope_scaling'
  const params = cfg.rope_parameters
  if (params !== undefined && params !== null) {
    if (typeof params !== 'object' || Array.isArray(params)) {
      throw new ConfigError(file, 'rope_parameters', `${file}: "rope_parameters" must be an object`)
    }
    const p = params as Json
    if (!('full_attention' in p) || typeof p.full_attention !== 'object') {
      theta = posNum(p, 'rope_theta', file, theta, 'rope_parameters.')
      scaling = p
      field = 'rope_parameters'
    } else {
      throw new UnsupportedArchitectureError(
        'rope_parameters per layer type',
        `${file}: per-layer-type "rope_parameters" are not supported`,
        file,
      )
    }
  }
  if (scaling === undefined || scaling === null) return { theta, scaling: null }
  if (typeof scaling !== 'object' || Array.isArray(scaling)) {
    throw new ConfigError(file, field, `${file}: "${field}" must be an object or null`)
  }
  const s = scaling as Json
  const type = s.rope_type ?? s.type ?? 'default'
  if (typeof type !== 'string') {
    throw new ConfigError(file, `${field}.rope_type`, `${file}: "${field}.rope_type" must be a string`)
  }
  if (type === 'default') return { theta, scaling: null }
  if (type !== 'llama3') {
    throw new UnsupportedArchitectureError(
      `${field}.rope_type=${type}`,
      `${file}: RoPE scaling type "${type}" is not supported (autodidact implements the default RoPE and ` +
        `Llama 3 "llama3" scaling); remove "${field}" to run without it at the original context length`,
      file,
    )
  }
  const need = (k: string): number => {
    if (!has(s, k)) {
      throw new ConfigError(file, `${field}.${k}`, `${file}: llama3 rope scaling needs "${field}.${k}"`)
    }
    return posNum(s, k, file, 0, `${field}.`)
  }
  const out: Llama3RopeScaling = {
    type: 'llama3',
    factor: need('factor'),
    lowFreqFactor: need('low_freq_factor'),
    highFreqFactor: need('high_freq_factor'),
    originalMaxPositionEmbeddings: need('original_max_position_embeddings'),
  }
  if (!(out.highFreqFactor > out.lowFreqFactor)) {
    throw new ConfigError(
      file,
      `${field}.high_freq_factor`,
      `${file}: llama3 rope scaling needs ${field}.high_freq_factor (${out.highFreqFactor}) > ` +
        `${field}.low_freq_factor (${out.lowFreqFactor})`,
    )
  }
  return { theta, scaling: out }
}

function unsupported(file: string, feature: string, message: string): never {
  throw new UnsupportedArchitectureError(feature, `${file}: ${message}`, file)
}

/**
 * Parse a config.json (already JSON-parsed) into a ModelConfig. `filePath` is named in errors.
 * Throws UnsupportedArchitectureError for architectures/options autodidact does not implement and
 * ConfigError for missing or invalid fields.
 */
export function parseModelConfig(json: unknown, filePath: string): ModelConfig {
  const file = filePath
  const cfg = asObject(json, file)
  const hfArchitecture = resolveArchitecture(cfg, file)
  const fam = FAMILIES[ARCHITECTURES[hfArchitecture].family]

  const act = cfg.hidden_act ?? 'silu'
  if (act !== 'silu' && act !== 'swish') unsupported(file, `hidden_act=${String(act)}`, `hidden_act "${String(act)}" is not supported (only silu)`)
  if (cfg.mlp_bias === true) unsupported(file, 'mlp_bias', '"mlp_bias": true is not supported')
  // pretraining_tp only changes how transformers splits matmuls, not the weights: ignored.
  if (has(cfg, 'partial_rotary_factor') && cfg.partial_rotary_factor !== 1) {
    unsupported(file, 'partial_rotary_factor', `partial_rotary_factor ${String(cfg.partial_rotary_factor)} is not supported`)
  }

  const vocabSize = posInt(cfg, 'vocab_size', file)
  const hiddenSize = posInt(cfg, 'hidden_size', file)
  const intermediateSize = posInt(cfg, 'intermediate_size', file)
  const numLayers = posInt(cfg, 'num_hidden_layers', file)
  const numHeads = posInt(cfg, 'num_attention_heads', file)
  const numKvHeads = posInt(cfg, 'num_key_value_heads', file, numHeads)
  if (numHeads % numKvHeads !== 0) {
    throw new ConfigError(
      file,
      'num_key_value_heads',
      `${file}: num_attention_heads (${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`,
    )
  }
  let headDim: number
  if (has(cfg, 'head_dim')) headDim = posInt(cfg, 'head_dim', file)
  else if (fam.headDim !== null) headDim = fam.headDim
  else {
    if (hiddenSize % numHeads !== 0) {
      throw new ConfigError(
        file,
        'head_dim',
        `${file}: hidden_size (${hiddenSize}) is not a multiple of num_attention_heads (${numHeads}) and no "head_dim" is given`,
      )
    }
    headDim = hiddenSize / numHeads
  }
  if (headDim % 2 !== 0) throw new ConfigError(file, 'head_dim', `${file}: head_dim (${headDim}) must be even for RoPE`)

  const rmsNormEps = posNum(cfg, 'rms_norm_eps', file, 1e-6)
  const rope = parseRope(cfg, file)
  const maxPositionEmbeddings = posInt(cfg, 'max_position_embeddings', file, fam.maxPositionEmbeddings)
  const tieWordEmbeddings = bool(cfg, 'tie_word_embeddings', file, false)

  // Sliding-window attention (Qwen2/Qwen3 option): reject if any layer would use it.
  if (fam.architecture !== 'llama') {
    const useSliding = bool(cfg, 'use_sliding_window', file, false)
    const layerTypes: unknown = cfg.layer_types
    // transformers makes layers i >= max_window_layers sliding when use_sliding_window is set
    // (decided without listing the layers: num_hidden_layers is not trusted yet)
    const maxWindowLayers = has(cfg, 'max_window_layers') ? Number(cfg.max_window_layers) : 28
    const window = cfg.sliding_window === undefined ? 4096 : cfg.sliding_window
    const someSliding =
      layerTypes === undefined || layerTypes === null
        ? useSliding && window !== null && Math.ceil(maxWindowLayers) < numLayers // some integer layer i ≥ max_window_layers
        : Array.isArray(layerTypes) && layerTypes.some((t) => t !== 'full_attention')
    if (someSliding) {
      unsupported(file, 'sliding_window', 'sliding-window attention layers (use_sliding_window / layer_types) are not supported')
    }
  }

  let qkvBias: boolean
  let oBias: boolean
  if (fam.fixedQkvBias !== null) {
    qkvBias = fam.fixedQkvBias
    oBias = false
  } else {
    qkvBias = oBias = bool(cfg, 'attention_bias', file, false)
  }

  const bosTokenId = cfg.bos_token_id === undefined ? fam.bosTokenId : cfg.bos_token_id === null ? null : tokenId(cfg.bos_token_id, file, 'bos_token_id')
  const eosTokenIds = cfg.eos_token_id === undefined ? fam.eosTokenIds.slice() : parseEosTokenIds(cfg.eos_token_id, file)

  const dt = cfg.torch_dtype ?? cfg.dtype ?? null
  const torchDtype = typeof dt === 'string' ? dt.replace(/^torch\./, '') : null

  return {
    architecture: fam.architecture,
    hfArchitecture,
    vocabSize,
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps,
    ropeTheta: rope.theta,
    ropeScaling: rope.scaling,
    maxPositionEmbeddings,
    tieWordEmbeddings,
    qkvBias,
    oBias,
    qkNorm: fam.qkNorm,
    bosTokenId,
    eosTokenIds,
    torchDtype,
  }
}

/** Which head config.json describes (*ForCausalLM or *ForSequenceClassification). */
export function parseModelHead(json: unknown, filePath: string): ModelHead {
  const cfg = asObject(json, filePath)
  const arch = resolveArchitecture(cfg, filePath)
  if (ARCHITECTURES[arch].head === 'causal-lm') return { kind: 'causal-lm' }
  let numLabels = 2
  if (cfg.id2label && typeof cfg.id2label === 'object') numLabels = Object.keys(cfg.id2label).length
  else if (has(cfg, 'num_labels')) numLabels = posInt(cfg, 'num_labels', filePath)
  const padTokenId = cfg.pad_token_id === undefined || cfg.pad_token_id === null ? null : tokenId(cfg.pad_token_id, filePath, 'pad_token_id')
  return { kind: 'sequence-classification', numLabels, padTokenId }
}

/** Whether the config describes a *ForSequenceClassification model. */
export function isSequenceClassification(config: ModelConfig): boolean {
  return ARCHITECTURES[config.hfArchitecture]?.head === 'sequence-classification'
}

export interface ExpectedTensor {
  name: string
  shape: number[]
}

/**
 * The tensors a model with this config has, with transformers' names and shapes (Linear weights
 * are [out, in]). `lm_head.weight` only when embeddings are not tied; a sequence-classification
 * model has `score.weight` [numLabels, hidden] instead of an LM head.
 */
export function expectedTensors(config: ModelConfig, head?: ModelHead): ExpectedTensor[] {
  // The names and shapes come from the one tensor table (native/model/tensor_table.def).
  const h = head ?? (isSequenceClassification(config) ? { kind: 'sequence-classification', numLabels: 2, padTokenId: null } : { kind: 'causal-lm' })
  return modelTensors(config, h).map(({ name, shape }) => ({ name, shape }))
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i])
}

// ---------------------------------------------------------------------------------------------
// Limits: what config.json may ask for, relative to the checkpoint on disk

/** Tensors each decoder layer has with this config (see expectedTensors). */
function tensorsPerLayer(config: ModelConfig): number {
  return 9 + (config.qkvBias ? 3 : 0) + (config.oBias ? 1 : 0) + (config.qkNorm ? 2 : 0)
}

/** Parameters the config implies, in float64 (it may exceed 2^53 for an absurd config; that only makes it larger). */
export function impliedParameterCount(config: ModelConfig, head?: ModelHead): number {
  const { hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim: D, vocabSize: V } = config
  const q = numHeads * D
  const kv = numKvHeads * D
  let layer = 2 * H + q * H + 2 * kv * H + H * q + 3 * I * H
  if (config.qkvBias) layer += q + 2 * kv
  if (config.oBias) layer += H
  if (config.qkNorm) layer += 2 * D
  const h = head ?? (isSequenceClassification(config) ? { kind: 'sequence-classification', numLabels: 2, padTokenId: null } : { kind: 'causal-lm' })
  const top = h.kind === 'sequence-classification' ? h.numLabels * H : config.tieWordEmbeddings ? 0 : V * H
  return V * H + config.numLayers * layer + H + top
}

/**
 * How far past the checkpoint a config may reach before it is refused outright: a config a little
 * off (a layer too many, a wrong hidden size) gets the precise MissingTensorError /
 * TensorShapeError of validateTensors; one far off is not listed at all.
 */
const TENSOR_COUNT_SLACK = { factor: 2, plus: 16 }
const PARAMETER_COUNT_SLACK = { factor: 16, plus: 1 << 20 }

/**
 * Refuses a config that asks for far more than the checkpoint holds, before anything proportional
 * to its sizes is built: the tensor count (layers × tensors per layer) against the tensors in the
 * header, and the parameter count (layers × dims, vocabulary × hidden) against the elements on
 * disk. A real checkpoint has both equal; `num_hidden_layers: 1e9` fails here instead of listing a
 * billion layers' tensors (a V8 heap abort).
 */
export function checkConfigFitsCheckpoint(config: ModelConfig, refs: readonly TensorRef[], opts: { head?: ModelHead; configFile?: string } = {}): void {
  const file = opts.configFile ?? 'config.json'
  const h = opts.head
  const headTensors = h?.kind === 'sequence-classification' || (!h && isSequenceClassification(config)) ? 1 : config.tieWordEmbeddings ? 0 : 1
  const tensors = 2 + headTensors + config.numLayers * tensorsPerLayer(config)
  if (tensors > TENSOR_COUNT_SLACK.factor * refs.length + TENSOR_COUNT_SLACK.plus) {
    throw new ResourceLimitError(
      'model-size',
      file,
      `${file}: num_hidden_layers ${config.numLayers} needs ${tensors} tensors but the checkpoint holds ${refs.length}: ` +
        'config.json and the weights do not belong together',
    )
  }
  let onDisk = 0
  for (const r of refs) onDisk += r.nbytes / dtypeBytesOf(r.dtype)
  const needed = impliedParameterCount(config, h)
  if (needed > PARAMETER_COUNT_SLACK.factor * onDisk + PARAMETER_COUNT_SLACK.plus) {
    throw new ResourceLimitError(
      'model-size',
      file,
      `${file}: its sizes (vocab_size ${config.vocabSize}, hidden_size ${config.hiddenSize}, intermediate_size ${config.intermediateSize}, ` +
        `${config.numLayers} layers, ${config.numHeads}×${config.headDim} heads) need ${needed} parameters but the checkpoint holds ${onDisk}: ` +
        'config.json and the weights do not belong together',
    )
  }
}

function dtypeBytesOf(dtype: TensorRef['dtype']): number {
  return dtype === 'F32' ? 4 : 2
}

export interface ValidateTensorsOptions {
  head?: ModelHead
  /** config.json, named when the config asks for more than the checkpoint holds. */
  configFile?: string
  /**
   * File named when a tensor is missing (model.safetensors or the index). Defaults to the files
   * the refs come from.
   */
  source?: string
}

/**
 * Check that every tensor the config implies is present with the right shape. Throws
 * MissingTensorError / TensorShapeError naming file and tensor. Returns the names of tensors that
 * are present but not part of the model (e.g. rotary_emb.inv_freq buffers), sorted; they are
 * allowed. A `lm_head.weight` next to tied embeddings is allowed and not reported.
 */
export function validateTensors(config: ModelConfig, refs: readonly TensorRef[], opts: ValidateTensorsOptions = {}): string[] {
  const byName = new Map(refs.map((r) => [r.name, r]))
  const source = opts.source ?? ([...new Set(refs.map((r) => r.file))].join(', ') || 'the checkpoint')
  checkConfigFitsCheckpoint(config, refs, { head: opts.head, configFile: opts.configFile })
  const expected = expectedTensors(config, opts.head)
  const known = new Set(expected.map((e) => e.name))
  for (const e of expected) {
    const ref = byName.get(e.name)
    if (!ref) {
      let hint = ''
      if (e.name === 'lm_head.weight') hint = ' (config.json has tie_word_embeddings: false; set it to true if the LM head shares the embedding matrix)'
      throw new MissingTensorError(
        source,
        e.name,
        e.shape,
        `${source}: tensor "${e.name}" (shape [${e.shape.join(', ')}]) is missing${hint}`,
      )
    }
    if (!sameShape(ref.shape, e.shape)) throw new TensorShapeError(ref.file, e.name, e.shape, ref.shape)
  }
  const extras: string[] = []
  for (const r of refs) {
    if (known.has(r.name)) continue
    if (r.name === 'lm_head.weight' && config.tieWordEmbeddings) {
      const want = [config.vocabSize, config.hiddenSize]
      if (!sameShape(r.shape, want)) throw new TensorShapeError(r.file, r.name, want, r.shape)
      continue
    }
    extras.push(r.name)
  }
  return extras.sort()
}
