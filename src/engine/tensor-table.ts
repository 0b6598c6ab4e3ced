// The model's tensor table as TypeScript reads it: native/model/tensor_table.def, the one list of
// tensor names, shapes, roles and conditions that the CPU and CUDA backends' finalize and the CUDA
// model check also read. Parsed once from the shipped native sources.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { ModelConfig } from './types.js'

export type TensorRole = 'EMBEDDING' | 'NORM' | 'LINEAR' | 'BIAS' | 'LM_HEAD' | 'SCORE_HEAD'
type Dim = 'ONE' | 'VOCAB' | 'HIDDEN' | 'INTERMEDIATE' | 'Q_DIM' | 'KV_DIM' | 'HEAD_DIM' | 'LABELS'
type Presence = 'ALWAYS' | 'QKV_BIAS' | 'O_BIAS' | 'QK_NORM' | 'LM_HEAD' | 'SCORE_HEAD'

export interface TensorSpec {
  id: string
  scope: 'MODEL' | 'LAYER'
  /** The full name (MODEL) or the part after `model.layers.<l>.` (LAYER). */
  name: string
  role: TensorRole
  rows: Dim
  cols: Dim
  presence: Presence
}

/** One tensor of a concrete model. */
export interface ModelTensor {
  name: string
  shape: number[]
  role: TensorRole
  /** The decoder layer, or -1 for a model-wide tensor. */
  layer: number
}

const TABLE_PATH = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..', 'native', 'model', 'tensor_table.def')
const ENTRY = /^AD_TENSOR\((\w+), (MODEL|LAYER), "([^"]+)", (\w+), (\w+), (\w+), (\w+)\)$/gm

let cached: TensorSpec[] | null = null

/** The table's entries in file order. */
export function tensorTable(): TensorSpec[] {
  if (cached) return cached
  const text = readFileSync(TABLE_PATH, 'utf8')
  const entries = [...text.matchAll(ENTRY)].map(([, id, scope, name, role, rows, cols, presence]) => ({ id, scope, name, role, rows, cols, presence }) as TensorSpec)
  if (!entries.length) throw new Error(`${TABLE_PATH} holds no AD_TENSOR entries`)
  cached = entries
  return cached
}

/** The HF name of a table entry by id (`kWq`, …), of layer `layer` for a per-layer entry. */
export function tensorName(id: string, layer = -1): string {
  const s = tensorTable().find((e) => e.id === id)
  if (!s) throw new Error(`the tensor table has no entry ${id}`)
  if (s.scope === 'LAYER' && layer < 0) throw new Error(`tensor table entry ${id} is per layer: name its layer`)
  return s.scope === 'LAYER' ? `model.layers.${layer}.${s.name}` : s.name
}

/** Which head the model has: an LM head (tied or not) or a sequence-classification score head. */
export interface TableHead {
  kind: 'causal-lm' | 'sequence-classification'
  numLabels?: number
}

function dim(d: Dim, c: ModelConfig, labels: number): number {
  switch (d) {
    case 'ONE': return 1
    case 'VOCAB': return c.vocabSize
    case 'HIDDEN': return c.hiddenSize
    case 'INTERMEDIATE': return c.intermediateSize
    case 'Q_DIM': return c.numHeads * c.headDim
    case 'KV_DIM': return c.numKvHeads * c.headDim
    case 'HEAD_DIM': return c.headDim
    case 'LABELS': return labels
  }
}

// Whether a model needs the entry (tensor_table.h's tensor_need, the optional LM head beside a
// score head left out: TypeScript lists what a checkpoint must hold).
function required(p: Presence, c: ModelConfig, head: TableHead): boolean {
  switch (p) {
    case 'ALWAYS': return true
    case 'QKV_BIAS': return c.qkvBias
    case 'O_BIAS': return c.oBias
    case 'QK_NORM': return c.qkNorm
    case 'LM_HEAD': return head.kind === 'causal-lm' && !c.tieWordEmbeddings
    case 'SCORE_HEAD': return head.kind === 'sequence-classification'
  }
}

/** Every tensor a model with this config and head must hold, in table order (each layer's block in place). */
export function modelTensors(config: ModelConfig, head: TableHead = { kind: 'causal-lm' }): ModelTensor[] {
  const table = tensorTable()
  const labels = head.numLabels ?? 0
  const out: ModelTensor[] = []
  const emit = (s: TensorSpec, layer: number) => {
    if (!required(s.presence, config, head)) return
    const shape = s.cols === 'ONE' ? [dim(s.rows, config, labels)] : [dim(s.rows, config, labels), dim(s.cols, config, labels)]
    out.push({ name: layer < 0 ? s.name : `model.layers.${layer}.${s.name}`, shape, role: s.role, layer })
  }
  for (let i = 0; i < table.length; ++i) {
    const s = table[i]
    if (s.scope === 'MODEL') {
      emit(s, -1)
      continue
    }
    if (i > 0 && table[i - 1].scope === 'LAYER') continue // the layer block starts at its first entry
    let end = i
    while (end < table.length && table[end].scope === 'LAYER') ++end
    for (let l = 0; l < config.numLayers; ++l) for (let j = i; j < end; ++j) emit(table[j], l)
  }
  return out
}
