// The memory plan of a training step on the CUDA backend: the peak device bytes of one
// forward + backward + AdamW step, counted from a model config and a batch shape the way
// native/cuda/model_cuda.cu allocates them — so that a run that cannot fit fails at once with the
// numbers (loadModel, Trainer.create, each new micro-batch shape), not after an hour.
//
// What the device holds (model_cuda.h): every parameter as an f32 master plus, for matrices, a
// bf16 copy for the GEMMs; per trainable parameter an f32 gradient and two f32 AdamW moments; per
// decoder layer the taped activations of the forward (or, with gradient checkpointing, only each
// layer's input plus one layer's tape for the recompute); the training KV cache (bf16 K and V);
// the forward's and backward's scratch of T rows; and the LM head's logits chunks (native
// logits_chunk: one chunk ≤ clamp(free / 8, 256 MiB, 2 GiB)). Scratch arrays only grow, so the
// largest shape a model has run stays allocated: the peak of a step is also what it holds after.
import { DeviceMemoryError, InvalidArgumentError } from './errors.js'
import { modelTensors, type TableHead } from './tensor-table.js'
import type { ModelConfig } from './types.js'

const F32 = 4
const BF16 = 2
const I32 = 4
/** native/cuda/model_cuda.cu reusable_cache: the training KV cache's positions are rounded up to this. */
const KV_ROUND = 256
/** native/cuda/ops_attention.h attention_fwd_work_floats' default split count. */
const ATTENTION_SPLITS = 16
/** model_cuda.cu logits_chunk: the chunk budget's clamp, and the most rows one chunk takes. */
export const LOGITS_BUDGET_MIN = 256 * 2 ** 20
export const LOGITS_BUDGET_MAX = 2 * 2 ** 30
const LOGITS_MAX_ROWS = 32768
/**
 * What the plan does not count exactly: the GEMM split-K workspace, cuBLASLt's workspace, the
 * allocator's rounding, small index arrays. A fixed allowance, stated as its own line.
 */
export const RUNTIME_RESERVE_BYTES = 256 * 2 ** 20

/** The seven PEFT target modules and the weight each adapts (rows = out, cols = in). */
const LORA_MODULES: Record<string, { out: (c: ModelConfig) => number; in: (c: ModelConfig) => number }> = {
  q_proj: { out: (c) => c.numHeads * c.headDim, in: (c) => c.hiddenSize },
  k_proj: { out: (c) => c.numKvHeads * c.headDim, in: (c) => c.hiddenSize },
  v_proj: { out: (c) => c.numKvHeads * c.headDim, in: (c) => c.hiddenSize },
  o_proj: { out: (c) => c.hiddenSize, in: (c) => c.numHeads * c.headDim },
  gate_proj: { out: (c) => c.intermediateSize, in: (c) => c.hiddenSize },
  up_proj: { out: (c) => c.intermediateSize, in: (c) => c.hiddenSize },
  down_proj: { out: (c) => c.hiddenSize, in: (c) => c.intermediateSize },
}

export interface TrainingShape {
  /** Sequences per forward (the trainer's micro-batch). */
  batch: number
  /** Tokens per sequence, prompt and completion together. */
  sequenceLength: number
  /** Completion tokens per sequence (the rows through the LM head); default sequenceLength − 1 (every position). */
  completionLength?: number
}

/** One LoRA adapter on the model, counted at its own rank and targets. */
export interface PlannedAdapter {
  /** Names it in the plan's details. */
  name?: string
  rank: number
  /** PEFT target modules; default all seven. */
  targets?: readonly string[]
  /** Trained (an f32 gradient and two f32 moments per element, base frozen), else frozen: its weights only. Default true. */
  trained?: boolean
  /** Attached before the trainer (held from then on: phase 'load'), else attached by the trainer (phase 'trainer'). Default false. */
  attached?: boolean
}

export interface MemoryPlanOptions {
  /** Train one LoRA adapter of this rank on these PEFT modules (default all seven) with the base frozen: `adapters` with one trained adapter. */
  lora?: { rank: number; targets?: readonly string[] } | null
  /**
   * Several adapters on one base (roles, each its own adapter), each at its own rank and targets:
   * every one's weights, and the trained ones' gradients and moments. When any trains, the base is
   * frozen; when none does, the base trains (full fine-tuning beside frozen adapters).
   */
  adapters?: readonly PlannedAdapter[]
  gradientCheckpointing?: boolean
  /** A score head of this many labels (a reward model): trained in place of the LM head. */
  scoreLabels?: number
  /** The score head alone trains, the backbone frozen (TrainerOptions.scoreHeadOnly): gradients and moments for the head only. */
  scoreHeadOnly?: boolean
  /** The KL reference: none, the base with adapters off (no memory), or a frozen full copy. */
  reference?: 'none' | 'lora-off' | 'copy'
  /** The LM head's chunk budget in bytes; default the clamp's upper end (what a large free memory gives). */
  logitsBudgetBytes?: number
  /** A generation KV cache held beside training (rollouts): slots × positions. */
  generationCache?: { slots: number; capacity: number } | null
}

export interface MemoryItem {
  /** 'weights', 'gradients', 'optimizer', 'attached-adapters', 'adapters', 'adapter-scratch', 'reference', 'activations', 'kv-cache', 'forward-scratch', 'backward-scratch', 'lm-head', 'generation-cache', 'reserve' */
  name: string
  bytes: number
  /** Whether the model holds it from load / trainer creation on (persistent) or from its first step. */
  phase: 'load' | 'trainer' | 'step'
  /** How it was counted, in words. */
  detail: string
}

export interface MemoryPlan {
  items: MemoryItem[]
  /** Held once the model is loaded (weights, a reference copy, a generation cache, adapters attached before the trainer). */
  loadBytes: number
  /** Added by creating the trainer (gradients, moments, adapters). */
  trainerBytes: number
  /** Added by the first step of this shape (activations, caches, scratch, LM-head chunks, reserve). */
  stepBytes: number
  /** The whole peak of a training step. */
  peakBytes: number
}

function positive(name: string, v: number): number {
  if (!Number.isSafeInteger(v) || v < 1) throw new InvalidArgumentError(name, `${name} must be a positive integer, got ${v}`)
  return v
}

/** Bytes of the model's own parameters on the device: an f32 master each, a bf16 copy of each matrix. */
export function weightBytes(config: ModelConfig, head: TableHead = { kind: 'causal-lm' }): { bytes: number; elements: number } {
  let bytes = 0
  let elements = 0
  for (const t of modelTensors(config, head)) {
    const n = t.shape.reduce((a, b) => a * b, 1)
    elements += n
    bytes += n * (t.shape.length >= 2 ? F32 + BF16 : F32)
  }
  return { bytes, elements }
}

/** Elements of the LoRA adapters (A: rank × in, B: out × rank per target per layer). */
export function loraElements(config: ModelConfig, rank: number, targets: readonly string[] = Object.keys(LORA_MODULES)): number {
  let per = 0
  for (const t of targets) {
    const m = LORA_MODULES[t]
    if (!m) throw new InvalidArgumentError('lora.targets', `unknown LoRA target '${t}'`)
    per += rank * (m.in(config) + m.out(config))
  }
  return per * config.numLayers
}

/** LM-head rows per chunk for `bytesPerLogit` (native logits_chunk). */
function logitsChunk(rows: number, vocab: number, bytesPerLogit: number, budget: number): number {
  return Math.max(1, Math.min(rows, Math.floor(budget / (bytesPerLogit * vocab)), LOGITS_MAX_ROWS))
}

/** Bytes of one decoder layer's tape per token (model_cuda.h LayerTape). */
function layerTapePerToken(c: ModelConfig): number {
  const H = c.hiddenSize, I = c.intermediateSize, qd = c.numHeads * c.headDim, kvd = c.numKvHeads * c.headDim
  // f32: x_in, q_raw, k_raw, lse, x_mid, gate, up; bf16: xn1, q, att, xn2
  return F32 * (H + qd + kvd + c.numHeads + H + I + I) + BF16 * (H + qd + qd + H)
}

/** The peak device bytes of one training step of `shape` on a model of `config`. */
export function trainingMemoryPlan(config: ModelConfig, shape: TrainingShape, options: MemoryPlanOptions = {}): MemoryPlan {
  const B = positive('batch', shape.batch)
  const L = positive('sequenceLength', shape.sequenceLength)
  if (L < 2) throw new InvalidArgumentError('sequenceLength', 'a training sequence needs at least a prompt token and a completion token')
  const completion = positive('completionLength', shape.completionLength ?? L - 1)
  if (completion > L - 1) throw new InvalidArgumentError('completionLength', `completionLength must be at most sequenceLength − 1 (${L - 1}), got ${completion}`)
  const c = config
  const H = c.hiddenSize, I = c.intermediateSize, V = c.vocabSize, hd = c.headDim
  const qd = c.numHeads * hd, kvd = c.numKvHeads * hd
  const labels = options.scoreLabels ?? 0
  // A causal LM is fed all but each sequence's last token (only a target) and reads `completion`
  // rows through its head; a score head reads whole sequences and one row each.
  const T = labels > 0 ? B * L : B * (L - 1)
  const R = labels > 0 ? B : B * completion
  const head: TableHead = labels > 0 ? { kind: 'sequence-classification', numLabels: labels } : { kind: 'causal-lm' }
  if (options.lora && options.adapters) throw new InvalidArgumentError('adapters', 'give lora (one trained adapter) or adapters, not both')
  const adapters: PlannedAdapter[] = options.adapters ? [...options.adapters] : options.lora ? [{ ...options.lora, trained: true }] : []
  const sized = adapters.map((a, i) => {
    const rank = positive(options.lora ? 'lora.rank' : `adapters[${i}].rank`, a.rank)
    return { ...a, rank, label: a.name ?? `rank ${rank}`, elements: loraElements(config, rank, a.targets), trained: a.trained ?? true, attached: a.attached ?? false }
  })
  const trainsAdapters = sized.some((a) => a.trained)
  if (options.scoreHeadOnly && labels <= 0) throw new InvalidArgumentError('scoreHeadOnly', 'scoreHeadOnly trains a score head: give scoreLabels > 0')
  if (options.scoreHeadOnly && trainsAdapters) throw new InvalidArgumentError('scoreHeadOnly', 'scoreHeadOnly freezes the backbone; it trains no adapter')
  const items: MemoryItem[] = []
  const add = (name: string, bytes: number, phase: MemoryItem['phase'], detail: string) => items.push({ name, bytes, phase, detail })

  const w = weightBytes(c, head)
  add('weights', w.bytes, 'load', `${w.elements} parameters: f32 master + bf16 copy of each matrix`)
  if (options.generationCache) {
    const { slots, capacity } = options.generationCache
    add('generation-cache', 2 * c.numLayers * positive('slots', slots) * positive('capacity', capacity) * kvd * BF16, 'load', `bf16 K and V, ${slots} slots × ${capacity} positions`)
  }
  if (options.reference === 'copy') {
    const r = weightBytes(c)
    add('reference', r.bytes + T * (F32 * (H + qd + 2 * kvd + 2 * I) + BF16 * (H + 2 * qd + I)) + 2 * c.numLayers * B * Math.ceil(L / KV_ROUND) * KV_ROUND * kvd * BF16,
      'load', 'a frozen copy of the weights, its forward scratch and KV cache')
  }

  // ---- the adapters' weights (an f32 master and a bf16 copy each), each at its own rank and targets
  const adapterItem = (name: string, list: typeof sized, phase: MemoryItem['phase'], when: string) => {
    if (!list.length) return
    const n = list.reduce((a, x) => a + x.elements, 0)
    add(name, n * (F32 + BF16), phase, `${n} LoRA parameters (${list.map((x) => `${x.label}: ${x.elements}`).join(', ')}), ${when}: f32 master + bf16 copy`)
  }
  adapterItem('attached-adapters', sized.filter((a) => a.attached), 'load', 'attached before the trainer')
  adapterItem('adapters', sized.filter((a) => !a.attached), 'trainer', 'attached by the trainer')

  // ---- what the trainer adds: per trainable parameter an f32 gradient and two f32 moments
  if (trainsAdapters) {
    const trainedAdapters = sized.filter((a) => a.trained)
    // a score head trains beside the adapters (it is new: it cannot stay frozen); its weight is in 'weights'
    const trained = trainedAdapters.reduce((a, x) => a + x.elements, 0) + labels * H
    const which = `adapter${trainedAdapters.length > 1 ? 's' : ''} ${trainedAdapters.map((x) => x.label).join(', ')}${labels > 0 ? ' and score head' : ''}`
    add('gradients', trained * F32, 'trainer', `f32, ${which} only (base frozen)`)
    add('optimizer', trained * 2 * F32, 'trainer', `AdamW m and v in f32, ${which} only`)
  } else if (options.scoreHeadOnly) {
    add('gradients', labels * H * F32, 'trainer', 'f32, the score head only (backbone frozen)')
    add('optimizer', labels * H * 2 * F32, 'trainer', 'AdamW m and v in f32, the score head only')
  } else {
    add('gradients', w.elements * F32, 'trainer', 'f32, every parameter')
    add('optimizer', w.elements * 2 * F32, 'trainer', 'AdamW m and v in f32, every parameter')
  }

  // ---- the step: tape, caches, scratch, head
  const tapePerToken = layerTapePerToken(c)
  const finalTape = T * H * F32 + R * H * BF16 // x_final, the final-norm hidden rows
  if (options.gradientCheckpointing)
    add('activations', c.numLayers * T * H * F32 + T * tapePerToken + finalTape, 'step',
      `checkpointed: each layer's input (f32 ${H}/token) + one layer's tape for the recompute`)
  else add('activations', c.numLayers * T * tapePerToken + finalTape, 'step', `every layer's tape (${tapePerToken} B/token/layer)`)
  const maxRank = Math.max(0, ...sized.map((a) => a.rank))
  // one adapter's run of rows at a time (at most all T), so the buffers grow to the largest rank
  if (sized.length) add('adapter-scratch', 2 * T * maxRank * BF16, 'step', `s·x·Aᵀ and s·dy·B of one linear and one adapter at a time, at the largest rank ${maxRank} (bf16; recomputed in backward, not kept)`)
  const capacity = Math.ceil(L / KV_ROUND) * KV_ROUND
  const kv = 2 * c.numLayers * B * capacity * kvd * BF16
  add('kv-cache', kv, 'step', `training KV cache: bf16 K and V, ${B} × ${capacity} positions`)
  if (options.reference === 'lora-off') add('reference-kv-cache', kv, 'step', "the 'lora-off' reference's forward: its own KV cache of the same size")
  const forwardPerToken = F32 * (H + qd + 2 * kvd + 2 * I) + BF16 * (H + 2 * qd + I) + (hd / 2) * 8 + 3 * I32 * 2
  add('forward-scratch', T * forwardPerToken + R * H * BF16 + T * c.numHeads * (hd + 1) * ATTENTION_SPLITS * F32, 'step',
    'x, q, k, v, gate, up (f32); norm, q, attention, swiglu outputs (bf16); RoPE table; attention split workspace')
  const backwardPerToken = F32 * (2 * H + 2 * qd + 2 * kvd + I + c.numHeads) + BF16 * (Math.max(H, qd) + qd + 2 * kvd + 2 * I)
  add('backward-scratch', T * backwardPerToken + R * H * F32, 'step', 'dx, dxn, dq, dk, dv, d attention, d hidden (f32) and their bf16 casts')
  if (labels > 0) add('lm-head', R * labels * (F32 + BF16), 'step', 'score head: one row of scores per sequence (f32) and its bf16 gradient')
  else {
    const budget = Math.min(LOGITS_BUDGET_MAX, Math.max(LOGITS_BUDGET_MIN, options.logitsBudgetBytes ?? LOGITS_BUDGET_MAX))
    const fwdRows = logitsChunk(R, V, F32, budget) // row statistics: f32 logits
    const bwdRows = logitsChunk(R, V, F32 + BF16, budget) // loss backward: f32 logits + bf16 d logits
    add('lm-head', Math.max(fwdRows, bwdRows) * V * F32 + bwdRows * V * BF16 + fwdRows * 9 * F32, 'step',
      `logits in chunks of ${fwdRows} rows (forward) / ${bwdRows} rows (backward) × ${V}`)
  }
  add('reserve', RUNTIME_RESERVE_BYTES, 'step', 'GEMM and cuBLASLt workspaces, allocator rounding, index arrays')

  const sum = (phase: MemoryItem['phase']) => items.filter((i) => i.phase === phase).reduce((a, i) => a + i.bytes, 0)
  const loadBytes = sum('load'), trainerBytes = sum('trainer'), stepBytes = sum('step')
  return { items, loadBytes, trainerBytes, stepBytes, peakBytes: loadBytes + trainerBytes + stepBytes }
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`
}

/** The plan as a table: one line per item, then the peak (and the free memory it is held against). */
export function formatMemoryPlan(plan: MemoryPlan, freeBytes?: number): string {
  const width = Math.max(...plan.items.map((i) => i.name.length))
  const lines = plan.items.map((i) => `  ${i.name.padEnd(width)}  ${gib(i.bytes).padStart(11)}  ${i.phase.padEnd(7)}  ${i.detail}`)
  lines.push(`  ${'peak'.padEnd(width)}  ${gib(plan.peakBytes).padStart(11)}`)
  if (freeBytes !== undefined) lines.push(`  ${'free'.padEnd(width)}  ${gib(freeBytes).padStart(11)}  ${plan.peakBytes <= freeBytes ? 'fits' : 'does not fit'}`)
  return lines.join('\n')
}

/**
 * Throws DeviceMemoryError when the items of `phase` (what that phase adds beyond `heldBytes`
 * already allocated for it) exceed the device's free bytes: the refusal names every item.
 */
export function assertFits(plan: MemoryPlan, phase: MemoryItem['phase'], freeBytes: number, what: string, heldBytes = 0): void {
  const phaseBytes = plan.items.filter((i) => i.phase === phase).reduce((a, i) => a + i.bytes, 0)
  const needed = phaseBytes - heldBytes
  if (needed <= freeBytes) return
  throw new DeviceMemoryError(phase, needed, freeBytes,
    `${what} needs ${gib(needed)} more device memory than the ${gib(freeBytes)} free (peak of the whole step ${gib(plan.peakBytes)}):\n` +
      formatMemoryPlan(plan, freeBytes) +
      '\nlower the micro-batch or sequence length, train LoRA, turn on gradient checkpointing, or use a larger device')
}
