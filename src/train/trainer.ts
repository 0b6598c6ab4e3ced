// The trainer: micro-batched taped forwards on the engine, the objective's loss and per-token
// coefficients in float64 TypeScript, backward, AdamW with clipping and a schedule. A step whose
// loss or gradient is not finite is skipped and reported, never applied.
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { CheckpointError, InvalidArgumentError } from '../engine/errors.js'
import { writeFileAtomic } from '../util/atomic.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors } from '../engine/hf/safetensors.js'
import { adapterIndex, attachAdapter, defaultAdapter, resolveAdapterOptions, DEFAULT_ADAPTER, type AdapterOptions } from '../engine/adapters.js'
import { checkContext, checkPerToken, checkTokenIds } from '../engine/options.js'
import type { LoraInfo } from '../engine/persistence.js'
import { assertFits, trainingMemoryPlan, type MemoryPlan, type MemoryPlanOptions, type PlannedAdapter, type TrainingShape } from '../engine/memory-plan.js'
import type { ModelConfig } from '../engine/types.js'
import { nativeAddon, type NativeAddon, type NativeModel, type NativeTrain } from '../native.js'
import {
  createObjective,
  globalNormalizer,
  NonFiniteError,
  type BatchNormalizer,
  type DpoSequence,
  type Objective,
  type ObjectiveSpec,
  type PolicySequence,
  type SftSequence,
  type TokenSequence,
} from './objectives.js'
import { createSchedule, type Schedule, type ScheduleOptions } from './schedule.js'
import { shareOf, type Collective } from '../parallel/collective.js'
import { mfuOf, peakFlopsOf, trainingMeter, trainingStepFlops } from './mfu.js'
import { microBatchCount, packMicroBatches } from './packing.js'

export { LORA_TARGETS } from '../engine/adapters.js'

/** A LoRA adapter the trainer attaches (rank, alpha, PEFT target modules, seed of A). */
export type LoraOptions = AdapterOptions

export interface OptimizerOptions {
  lr: number
  beta1?: number
  beta2?: number
  eps?: number
  weightDecay?: number
}

/** What the trainer needs of the model it trains (a Model is one). */
export interface TrainerModel {
  /** The native handle; throws once the model is disposed. */
  readonly handle: NativeModel
  readonly config: ModelConfig
  /** The adapters attached, by name in attach order; the trainer attaches its own when its options ask for LoRA. */
  readonly adapters: Map<string, LoraInfo>
  readonly scoreLabels: number
}

/** A frozen model on the same vocabulary (a Model). */
export interface ReferenceModel {
  readonly handle: NativeModel
}

export interface TrainerOptions {
  objective: ObjectiveSpec
  /** Train a LoRA adapter (base frozen) instead of every weight: attached as `adapter` unless the model has it already. */
  lora?: LoraOptions | null
  /**
   * The adapter(s) this trainer trains, base frozen (default 'default' with `lora`): each
   * sequence's loss flows only into the adapter it names (TrainSequence.adapter); the other
   * adapters and the base get no gradient and no optimizer state. Without `lora` they must be
   * attached already (addAdapter, loadAdapter).
   */
  adapter?: string | string[]
  optimizer: OptimizerOptions
  schedule?: ScheduleOptions
  /**
   * Per trained adapter, its own learning-rate schedule and step clock (roles that train in turns
   * on one base, as R-Zero's phases): a step trains the one adapter its sequences name, with that
   * adapter's lr and AdamW bias correction, and advances only its clock (kept in trainer_state.json
   * as `adapterSteps`). Names exactly the trained adapters; replaces `schedule`. Default: one
   * schedule and one clock for every adapter.
   */
  adapterSchedules?: Record<string, ScheduleOptions>
  /**
   * Train the score head alone, the backbone frozen (no gradient or optimizer state for it): a linear
   * probe of the last token's hidden state. A reward model that writes before it scores (a critiquing
   * Judge) keeps what it writes. Needs a score head and a score objective; not with LoRA.
   */
  scoreHeadOnly?: boolean
  /** Global gradient-norm clip; 0 = off. Default 1. */
  clipGradNorm?: number
  /** Sequences per forward/backward; gradients accumulate over a step's micro-batches. Default 8. */
  microBatchSize?: number
  /**
   * Tokens per forward/backward at most (a sequence longer than this one has a forward of its
   * own): more micro-batches when the step's tokens need them. Either way the step's sequences
   * are dealt into micro-batches of nearly equal tokens (src/train/packing.ts). Default: no limit.
   */
  microBatchTokens?: number
  /** For KL and DPO: 'lora-off' (the base weights, default with LoRA) or a frozen copy. */
  reference?: 'lora-off' | ReferenceModel
  /** Keep only each layer's input for backward and recompute the rest (less memory, ~1/3 more compute). */
  gradientCheckpointing?: boolean
  /**
   * Data parallelism (src/parallel): every rank is given the whole batch and trains its contiguous
   * share of the micro-batches; losses are normalized over the whole batch, so the gradients summed
   * over the ranks (before the optimizer step) are the 1-rank step's. Score objectives run whole on every rank.
   */
  collective?: Collective
}

/** What one rank's micro-batches contributed to a step (gathered from every rank). */
interface StepShare {
  loss: number
  tokens: number
  flops: number
  metricSums: Record<string, number>
  metricCount: number
  nonFinite: string | null
}

/** One completion and what the objective needs of it. Token ids: prompt then completion. */
export interface TrainSequence {
  prompt: readonly number[]
  completion: readonly number[]
  /** policy: sampling-time logprobs per completion token (from generate). */
  oldLogprobs?: ArrayLike<number>
  /** policy: one advantage for the sequence or one per completion token. */
  advantages?: number | ArrayLike<number>
  /** Per-sample weight (COSE Eq. 4–5, UID Eq. 7). Default 1. */
  weight?: number
  /** Optional per-completion-token mask. */
  mask?: ArrayLike<number>
  /** The adapter this sequence runs through (null: the base alone). Default: the trainer's adapter when it trains one, else the model's default. */
  adapter?: string | null
}

export interface TrainBatch {
  sequences?: TrainSequence[]
  /** dpo: preference pairs as indices into `sequences` [chosen, rejected]. */
  pairs?: [number, number][]
}

export interface StepMetrics {
  step: number
  loss: number
  lr: number
  gradNorm: number
  skipped: boolean
  skipReason?: string
  tokens: number
  tokensPerSecond: number
  /** Forward + backward FLOPs of the step's shapes (src/train/mfu.ts). */
  flops: number
  /** Model FLOPs utilization: flops over the step's seconds × the device's peak (null when the peak is not known). */
  mfu: number | null
  /** The objective's own metrics (policy: kl, entropy, clip fractions, approxKl …), averaged over micro-batches. */
  objective: Record<string, number | null>
}

/** The free bytes of the device a model runs on, or null for a model on the CPU. */
function freeDeviceBytes(addon: NativeAddon, model: NativeModel): number | null {
  const d = model.describe()
  if (d.backend === 'cpu') return null
  return addon.deviceMemory('cuda', d.deviceIndex ?? 0)?.free ?? null
}

/** The step's totals over every rank's share, summed in rank order (the same on every rank). */
async function gatherShares(parallel: Collective, mine: StepShare): Promise<StepShare> {
  const shares = await parallel.allGatherJson(mine)
  const metricSums: Record<string, number> = {}
  for (const s of shares) for (const [k, v] of Object.entries(s.metricSums)) metricSums[k] = (metricSums[k] ?? 0) + v
  return {
    loss: shares.reduce((a, s) => a + s.loss, 0),
    tokens: shares.reduce((a, s) => a + s.tokens, 0),
    flops: shares.reduce((a, s) => a + s.flops, 0),
    metricSums,
    metricCount: shares.reduce((a, s) => a + s.metricCount, 0),
    nonFinite: shares.find((s) => s.nonFinite !== null)?.nonFinite ?? null,
  }
}

export class Trainer {
  private stepCount = 0
  private readonly objective: Objective
  private readonly schedule: Schedule
  private readonly clip: number
  private readonly micro: number
  private readonly microTokens: number | undefined
  /** The peak FLOP/s of the device the model runs on (MFU), set by create(). */
  private peakFlops: number | null = null
  private readonly adam: Required<OptimizerOptions>
  /** On a device: the largest step shape's plan checked so far (its scratch stays allocated). */
  private deviceStepPlan: MemoryPlan | null = null
  /** The adapters this trainer trains (empty: full fine-tuning). */
  private readonly trained: string[]
  /** With adapterSchedules: each trained adapter's schedule and optimizer steps taken. */
  private readonly clocks: Map<string, { schedule: Schedule; steps: number }> | null

  private constructor(
    private readonly model: TrainerModel,
    private readonly train: NativeTrain,
    private readonly options: TrainerOptions,
  ) {
    this.objective = createObjective(options.objective)
    if (this.objective.kind === 'score' && !model.scoreLabels)
      throw new InvalidArgumentError('objective', `objective '${this.objective.name}' trains a score head: load a *ForSequenceClassification folder or call model.attachScoreHead() first`)
    this.schedule = createSchedule(options.schedule)
    this.clip = options.clipGradNorm ?? 1
    this.micro = options.microBatchSize ?? 8
    if (!Number.isInteger(this.micro) || this.micro < 1) throw new InvalidArgumentError('microBatchSize', 'microBatchSize must be a positive integer')
    this.microTokens = options.microBatchTokens
    if (this.microTokens !== undefined && (!Number.isInteger(this.microTokens) || this.microTokens < 1))
      throw new InvalidArgumentError('microBatchTokens', 'microBatchTokens must be a positive integer')
    const o = options.optimizer
    if (!o || !(o.lr >= 0)) throw new InvalidArgumentError('optimizer.lr', 'optimizer.lr must be a non-negative number')
    this.adam = { lr: o.lr, beta1: o.beta1 ?? 0.9, beta2: o.beta2 ?? 0.999, eps: o.eps ?? 1e-8, weightDecay: o.weightDecay ?? 0 }
    const named = options.adapter === undefined ? [] : Array.isArray(options.adapter) ? options.adapter : [options.adapter]
    this.trained = named.length ? [...named] : options.lora ? [DEFAULT_ADAPTER] : []
    if (new Set(this.trained).size !== this.trained.length) throw new InvalidArgumentError('adapter', 'adapter lists a name twice')
    if (options.lora && this.trained.length !== 1) throw new InvalidArgumentError('adapter', 'lora attaches one adapter: name one in adapter')
    // refused here, before a run samples its first step: a rank's share could leave one of them untouched (checkDataParallelStep)
    if (options.collective && this.trained.length > 1)
      throw new InvalidArgumentError('adapter', `data-parallel training of several adapters at once (${this.trained.join(', ')}) is not supported: train one adapter per trainer`)
    this.clocks = options.adapterSchedules ? adapterClocks(options.adapterSchedules, this.trained) : null
    if (options.scoreHeadOnly) {
      if (this.objective.kind !== 'score') throw new InvalidArgumentError('scoreHeadOnly', `scoreHeadOnly trains a score head alone; objective '${this.objective.name}' trains the LM head`)
      if (this.trained.length) throw new InvalidArgumentError('scoreHeadOnly', 'scoreHeadOnly freezes the backbone; it does not train LoRA adapters too (leave lora and adapter unset)')
    }
  }

  static async create(model: TrainerModel, options: TrainerOptions): Promise<Trainer> {
    const addon = await nativeAddon()
    const train = addon.train
    const t = new Trainer(model, train, options)
    const lora = options.lora
    if (lora) resolveAdapterOptions(lora)
    for (const name of t.trained)
      if (!(lora && name === t.trained[0]) && !model.adapters.has(name)) adapterIndex(model, name, 'adapter')  // unknown: a typed error naming it
    // On a device, gradients and moments (or adapters and theirs) must fit before any is allocated.
    const free = freeDeviceBytes(addon, model.handle)
    if (free !== null) assertFits(trainingMemoryPlan(model.config, { batch: 1, sequenceLength: 2 }, t.planOptions()), 'trainer', free, 'creating the trainer')
    if (lora && !model.adapters.has(t.trained[0])) await attachAdapter(model, t.trained[0], lora)
    if (t.trained.length) train.setTrainable(model.handle, false, true, Int32Array.from(t.trained, (name) => adapterIndex(model, name)))
    else train.setTrainable(model.handle, !options.scoreHeadOnly, false)  // the score head trains whether or not the base does
    t.peakFlops = await peakFlopsOf(model.handle.describe())
    return t
  }

  /** Optimizer steps taken, over every adapter. */
  get steps(): number {
    return this.stepCount
  }

  /** The optimizer steps adapter `name` took on its own clock (adapterSchedules), else the trainer's steps. */
  adapterSteps(name: string): number {
    return this.clocks ? (this.clocks.get(name)?.steps ?? 0) : this.stepCount
  }

  // The clock a batch steps: null (the trainer's one) without adapterSchedules, else that of the one
  // trained adapter its sequences name; a batch that trains several is refused before any native work.
  private clockOf(seqs: readonly TrainSequence[]): { schedule: Schedule; steps: number } | null {
    if (!this.clocks) return null
    const names = new Set(seqs.map((s) => (s.adapter === undefined ? this.trained[0] : s.adapter)).filter((n): n is string => n !== null && this.clocks!.has(n)))
    if (names.size !== 1)
      throw new InvalidArgumentError('batch.sequences', `this trainer keeps a step clock per adapter (adapterSchedules): a step trains exactly one of ${this.trained.join(', ')}, this batch trains ${names.size ? [...names].join(', ') : 'none'}`)
    return this.clocks.get([...names][0])!
  }

  /** What the memory plan needs of this trainer's options (src/engine/memory-plan.ts). */
  private planOptions(): MemoryPlanOptions {
    // Every adapter on the model at its own rank and targets (the trained ones with their gradients
    // and moments), and the one the trainer's `lora` attaches when it is not attached yet.
    const adapters: PlannedAdapter[] = [...this.model.adapters].map(([name, a]) => ({ name, rank: a.rank, targets: a.targets, trained: this.trained.includes(name), attached: true }))
    const lora = this.options.lora
    if (lora && !this.model.adapters.has(this.trained[0])) adapters.push({ name: this.trained[0], rank: lora.rank, targets: lora.targets, trained: true, attached: false })
    const needsReference = this.needsReference()
    return {
      adapters,
      gradientCheckpointing: this.options.gradientCheckpointing ?? false,
      scoreLabels: this.model.scoreLabels,
      scoreHeadOnly: this.options.scoreHeadOnly ?? false,
      // a frozen copy is its own model (its load is checked on its own); 'lora-off' runs on this one
      reference: needsReference && adapters.length && (this.options.reference ?? 'lora-off') === 'lora-off' ? 'lora-off' : 'none',
    }
  }

  // On a device, a micro-batch of a larger shape than any before must fit what it adds: scratch
  // only grows, so what the largest earlier shape allocated is already held.
  private async checkDeviceStep(shape: TrainingShape): Promise<void> {
    const free = freeDeviceBytes(await nativeAddon(), this.model.handle)
    if (free === null) return
    const plan = trainingMemoryPlan(this.model.config, shape, this.planOptions())
    if (this.deviceStepPlan && plan.stepBytes <= this.deviceStepPlan.stepBytes) return
    assertFits(plan, 'step', free, `a training step of ${shape.batch} sequences of up to ${shape.sequenceLength} tokens`, this.deviceStepPlan?.stepBytes ?? 0)
    this.deviceStepPlan = plan
  }

  // DPO's reference log-ratios and the policy objective's KL term read a reference model.
  private needsReference(): boolean {
    return this.objective.name === 'dpo' || (this.objective.name === 'policy' && this.objective.config.klCoef > 0)
  }

  private referenceFor(): 'lora-off' | NativeModel | undefined {
    if (!this.needsReference()) return undefined
    const ref = this.options.reference ?? (this.model.adapters.size ? 'lora-off' : undefined)
    if (ref === undefined)
      throw new InvalidArgumentError('reference', `objective '${this.objective.name}' needs a reference: train LoRA (reference = base weights) or pass a frozen model`)
    return ref === 'lora-off' ? 'lora-off' : ref.handle
  }

  /** One optimizer step over the batch (gradients accumulated over micro-batches). */
  async step(batch: TrainBatch): Promise<StepMetrics> {
    const seqs = batch.sequences ?? []
    if (!seqs.length) throw new InvalidArgumentError('batch.sequences', 'a training batch needs at least one sequence')
    this.checkBatch(seqs, batch.pairs)
    const clock = this.clockOf(seqs)
    const started = process.hrtime.bigint()
    if (this.objective.kind === 'score') return this.scoreStep(seqs, batch.pairs ?? [], started, clock)
    const reference = this.referenceFor()
    const isDpo = this.objective.name === 'dpo'
    // DPO pairs must stay inside one micro-batch: group sequences by pair.
    const groups: number[][] = isDpo
      ? (batch.pairs ?? []).map(([c, r]) => [c, r])
      : seqs.map((_, i) => [i])
    if (isDpo && !groups.length) throw new InvalidArgumentError('batch.pairs', 'a DPO batch needs pairs')
    const allMicro = this.microBatches(seqs, groups, isDpo)
    const parallel = this.options.collective
    if (parallel) this.checkDataParallelStep(allMicro.length, parallel.worldSize)
    const share = parallel ? shareOf(allMicro.length, parallel.rank, parallel.worldSize) : { start: 0, end: allMicro.length }
    const micro = allMicro.slice(share.start, share.end)
    const normalizer = this.normalizerOf(seqs, batch.pairs?.length ?? 0)
    let loss = 0
    let tokens = 0
    let flops = 0
    let metricSums: Record<string, number> = {}
    let metricCount = 0
    let nonFinite: string | null = null
    try {
      for (const group of micro) {
        const ids = group.flat()
        const local = new Map(ids.map((id, k) => [id, k]))
        const lengths = Int32Array.from(ids, (i) => seqs[i].prompt.length + seqs[i].completion.length)
        await this.checkDeviceStep({
          batch: ids.length,
          sequenceLength: Math.max(...lengths),
          completionLength: Math.max(1, Math.ceil(ids.reduce((a, i) => a + seqs[i].completion.length, 0) / ids.length)),
        })
        const fwd = await this.train.forward(this.model.handle, {
          tokens: Int32Array.from(ids.flatMap((i) => [...seqs[i].prompt, ...seqs[i].completion])),
          lengths,
          promptLengths: Int32Array.from(ids, (i) => seqs[i].prompt.length),
          adapters: this.adapterColumn(ids.map((i) => seqs[i])),
          reference,
          checkpoint: this.options.gradientCheckpointing ?? false,
        })
        let row = 0
        const rows = ids.map((i) => {
          const n = seqs[i].completion.length
          const r = { logp: fwd.logp.subarray(row, row + n), entropy: fwd.entropy.subarray(row, row + n), ref: fwd.refLogp?.subarray(row, row + n) }
          row += n
          return r
        })
        tokens += row
        // Rows fed: every token but each sequence's last; the LM head runs on the completion rows.
        flops += this.stepFlops(Array.from(lengths, (n) => n - 1), row, this.model.config.vocabSize, reference !== undefined)
        const result = this.computeObjective(ids, seqs, rows, isDpo ? group.map(([c, r]) => [local.get(c)!, local.get(r)!] as [number, number]) : [], normalizer)
        loss += result.loss
        for (const [k, v] of Object.entries(result.metrics)) if (typeof v === 'number') metricSums[k] = (metricSums[k] ?? 0) + v
        metricCount++
        await this.train.backward(this.model.handle, {
          a: Float32Array.from(result.a.flatMap((x) => Array.from(x))),
          b: Float32Array.from(result.b.flatMap((x) => Array.from(x))),
        })
      }
    } catch (error) {
      if (!(error instanceof NonFiniteError)) throw error
      nonFinite = error.message
    }
    if (parallel) ({ loss, tokens, flops, metricSums, metricCount, nonFinite } = await gatherShares(parallel, { loss, tokens, flops, metricSums, metricCount, nonFinite }))
    if (nonFinite !== null) {
      this.train.zeroGrad(this.model.handle)
      return this.report(NaN, 0, NaN, true, `non-finite ${nonFinite}`, tokens, flops, started, metricSums, metricCount)
    }
    if (parallel) await this.train.reduceGradients(this.model.handle, parallel.native)
    const { stepNumber, lr } = this.nextStep(clock)
    const opt = await this.train.optimizerStep(this.model.handle, { step: stepNumber, ...this.adam, lr, clipGradNorm: this.clip })
    if (opt.skipped) return this.report(loss, lr, opt.gradNorm, true, 'non-finite gradient norm', tokens, flops, started, metricSums, metricCount)
    this.countStep(clock, stepNumber)
    return this.report(loss, lr, opt.gradNorm, false, undefined, tokens, flops, started, metricSums, metricCount)
  }

  // The step's micro-batches (groups: one sequence each, or a DPO pair), packed by tokens.
  private microBatches(seqs: TrainSequence[], groups: number[][], isDpo: boolean): number[][][] {
    const tokensOf = (g: number[]) => g.reduce((a, i) => a + seqs[i].prompt.length + seqs[i].completion.length, 0)
    const lengths = groups.map(tokensOf)
    const perMicro = Math.max(1, isDpo ? Math.floor(this.micro / 2) : this.micro)
    const bins = microBatchCount(groups.length, lengths.reduce((a, n) => a + n, 0), perMicro, this.microTokens)
    return packMicroBatches(lengths, bins).map((b) => b.map((g) => groups[g]))
  }

  // FLOPs of one micro-batch: what this trainer trains (the base, or LoRA adapters on a frozen base;
  // with several adapters, counted at the first one's rank and targets; a score head alone as a frozen base).
  private stepFlops(fed: number[], headRows: number, headWidth: number, referenceForward: boolean): number {
    const trainsAdapters = this.trained.length > 0
    const lora = trainsAdapters ? this.model.adapters.get(this.trained[0]) : this.model.adapters.values().next().value
    return trainingStepFlops(this.model.config, {
      lengths: fed,
      headRows,
      headWidth,
      trainBase: !trainsAdapters && !this.options.scoreHeadOnly,
      lora: lora ? { rank: lora.rank, targets: lora.targets, trained: trainsAdapters } : null,
      referenceForward,
    })
  }

  // Every token id in [0, vocab), every sequence within the context, every per-token array one
  // value per completion token, every pair two indices of the batch — as generate checks its
  // prompts, with the same errors, before any native work. Values are not judged here: a
  // non-finite advantage or weight reaches the objective, which skips and reports the step.
  private checkBatch(seqs: TrainSequence[], pairs: [number, number][] | undefined): void {
    const { vocabSize } = this.model.config
    seqs.forEach((s, i) => {
      const at = `batch.sequences[${i}]`
      if (!s.prompt?.length || !s.completion?.length) throw new InvalidArgumentError(at, 'every sequence needs a non-empty prompt and completion')
      checkTokenIds(s.prompt, vocabSize, `${at}.prompt`)
      checkTokenIds(s.completion, vocabSize, `${at}.completion`)
      checkContext(s.prompt.length + s.completion.length, this.model.config, at)
      checkPerToken(s.oldLogprobs, s.completion.length, `${at}.oldLogprobs`)
      checkPerToken(s.advantages, s.completion.length, `${at}.advantages`, true)
      checkPerToken(s.mask, s.completion.length, `${at}.mask`)
      this.adapterOf(s, at)
    })
    for (const [k, pair] of (pairs ?? []).entries())
      if (!Array.isArray(pair) || pair.length !== 2 || !pair.every((j) => Number.isInteger(j) && j >= 0 && j < seqs.length))
        throw new InvalidArgumentError(`batch.pairs[${k}]`, `batch.pairs[${k}] must be two indices into batch.sequences (0 … ${seqs.length - 1})`)
  }

  // Bradley–Terry (JZ Eq. 13) on the score head: one taped forward of every sequence (pairs may
  // share sequences), the objective's ∂L/∂s, one backward.
  private async scoreStep(seqs: TrainSequence[], pairs: [number, number][], started: bigint, clock: { schedule: Schedule; steps: number } | null): Promise<StepMetrics> {
    if (!pairs.length) throw new InvalidArgumentError('batch.pairs', 'a score objective needs preference pairs [chosen, rejected]')
    if (this.model.scoreLabels !== 1) throw new InvalidArgumentError('model', 'Bradley–Terry needs a score head with one label')
    const tokens = seqs.map((s) => [...s.prompt, ...s.completion])
    await this.checkDeviceStep({ batch: tokens.length, sequenceLength: Math.max(2, ...tokens.map((t) => t.length)) })
    const scores = await this.train.scoreForward(this.model.handle, { tokens: Int32Array.from(tokens.flat()), lengths: Int32Array.from(tokens, (t) => t.length), adapters: this.adapterColumn(seqs) })
    const sums: Record<string, number> = {}
    let result
    try {
      result = (this.objective as Extract<Objective, { kind: 'score' }>).compute({ scores, pairs })
    } catch (error) {
      // the taped forward is released by a zero backward, then the step is skipped
      await this.train.scoreBackward(this.model.handle, { dScores: new Float32Array(scores.length) })
      this.train.zeroGrad(this.model.handle)
      if (!(error instanceof NonFiniteError)) throw error
      return this.report(NaN, 0, NaN, true, `non-finite ${error.message}`, 0, 0, started, sums, 1)
    }
    for (const [k, v] of Object.entries(result.metrics)) if (typeof v === 'number') sums[k] = v
    await this.train.scoreBackward(this.model.handle, { dScores: Float32Array.from(result.dScores) })
    const { stepNumber, lr } = this.nextStep(clock)
    const opt = await this.train.optimizerStep(this.model.handle, { step: stepNumber, ...this.adam, lr, clipGradNorm: this.clip })
    const tokenCount = tokens.reduce((a, t) => a + t.length, 0)
    const flops = this.stepFlops(tokens.map((t) => t.length), tokens.length, this.model.scoreLabels, false)
    if (opt.skipped) return this.report(result.loss, lr, opt.gradNorm, true, 'non-finite gradient norm', tokenCount, flops, started, sums, 1)
    this.countStep(clock, stepNumber)
    return this.report(result.loss, lr, opt.gradNorm, false, undefined, tokenCount, flops, started, sums, 1)
  }

  // The 1-based number of the step about to be taken (AdamW's bias correction) and its lr: on the
  // stepped adapter's clock, else the trainer's.
  private nextStep(clock: { schedule: Schedule; steps: number } | null): { stepNumber: number; lr: number } {
    const stepNumber = (clock ? clock.steps : this.stepCount) + 1
    return { stepNumber, lr: this.adam.lr * (clock ? clock.schedule : this.schedule)(stepNumber) }
  }

  private countStep(clock: { steps: number } | null, stepNumber: number): void {
    this.stepCount++
    if (clock) clock.steps = stepNumber
  }

  // A sequence's adapter index: the one it names (null: the base alone), else the trainer's own
  // (it must name one when the trainer trains several), else the model's default.
  private adapterOf(s: TrainSequence, at: string): number {
    if (s.adapter !== undefined) return adapterIndex(this.model, s.adapter, `${at}.adapter`)
    if (this.trained.length > 1) throw new InvalidArgumentError(`${at}.adapter`, `this trainer trains ${this.trained.join(', ')}: each sequence names its adapter`)
    return adapterIndex(this.model, this.trained[0] ?? defaultAdapter(this.model), `${at}.adapter`)
  }

  /**
   * Every rank must reduce the same gradient tensors: a rank without a micro-batch, or a share
   * that leaves one of several trained adapters untouched, would hold a different set (the ranks'
   * all-reduce would then wait for one another until the timeout). Refused before any work, on
   * every rank alike (each sees the whole batch); several trained adapters are refused when the
   * trainer is created.
   */
  private checkDataParallelStep(microBatches: number, ranks: number): void {
    if (microBatches < ranks)
      throw new InvalidArgumentError('microBatchSize', `this step has ${microBatches} micro-batch${microBatches === 1 ? '' : 'es'} for ${ranks} ranks: every rank needs at least one (lower microBatchSize, or use fewer ranks)`)
  }

  /** The engine's adapter column of a micro-batch (absent on a model without adapters). */
  private adapterColumn(seqs: TrainSequence[]): Int32Array | undefined {
    if (!this.model.adapters.size) return undefined
    return Int32Array.from(seqs, (s, i) => this.adapterOf(s, `batch.sequences[${i}]`))
  }

  private report(loss: number, lr: number, gradNorm: number, skipped: boolean, skipReason: string | undefined, tokens: number, flops: number, started: bigint, sums: Record<string, number>, count: number): StepMetrics {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9
    const objective: Record<string, number | null> = {}
    for (const [k, v] of Object.entries(sums)) objective[k] = v / Math.max(1, count)
    // data parallel: the step's FLOPs are every rank's, over every rank's peak
    const peak = this.peakFlops === null ? null : this.peakFlops * (this.options.collective?.worldSize ?? 1)
    trainingMeter.add(flops, seconds, peak)
    return { step: this.stepCount, loss, lr, gradNorm, skipped, ...(skipReason ? { skipReason } : {}), tokens, tokensPerSecond: tokens / seconds, flops, mfu: mfuOf(flops, seconds, peak), objective }
  }

  private normalizerOf(seqs: TrainSequence[], pairs: number): BatchNormalizer {
    const stub = seqs.map((s) => ({ logp: new Float64Array(s.completion.length), mask: s.mask }) as TokenSequence)
    return { ...globalNormalizer([{ sequences: stub }]), pairs }
  }

  private computeObjective(
    ids: number[],
    seqs: TrainSequence[],
    rows: { logp: Float32Array; entropy: Float32Array; ref?: Float32Array }[],
    pairs: [number, number][],
    normalizer: BatchNormalizer,
  ) {
    const o = this.objective
    if (o.name === 'policy') {
      const sequences: PolicySequence[] = ids.map((i, k) => {
        const s = seqs[i]
        if (s.advantages === undefined) throw new InvalidArgumentError(`batch.sequences[${i}].advantages`, 'the policy objective needs advantages')
        return { logp: rows[k].logp, entropy: rows[k].entropy, oldLogp: s.oldLogprobs, refLogp: rows[k].ref, advantages: s.advantages, weight: s.weight, mask: s.mask }
      })
      return o.compute({ sequences }, normalizer)
    }
    if (o.name === 'sft') {
      const sequences: SftSequence[] = ids.map((i, k) => ({ logp: rows[k].logp, weight: seqs[i].weight, mask: seqs[i].mask }))
      return o.compute({ sequences }, normalizer)
    }
    if (o.name === 'dpo') {
      const sequences: DpoSequence[] = ids.map((i, k) => ({ logp: rows[k].logp, refLogp: rows[k].ref!, mask: seqs[i].mask }))
      return o.compute({ sequences, pairs }, normalizer)
    }
    throw new InvalidArgumentError('objective', `objective '${o.name}' is not a token objective`)
  }

  /** Saves the optimizer moments and step so a run resumes bit for bit (pair with model.save). */
  async saveState(dir: string): Promise<void> {
    const state = await this.train.exportOptimizerState(this.model.handle)
    const tensors = state.flatMap((s) => [
      { name: `${s.name}::m`, dtype: 'F32' as const, shape: [s.m.length], data: s.m },
      { name: `${s.name}::v`, dtype: 'F32' as const, shape: [s.v.length], data: s.v },
    ])
    await writeSafetensors(join(dir, 'optimizer.safetensors'), tensors)
    const adapterSteps = this.clocks ? { adapterSteps: Object.fromEntries([...this.clocks].map(([name, c]) => [name, c.steps])) } : {}
    await writeFileAtomic(join(dir, 'trainer_state.json'), JSON.stringify({ step: this.stepCount, format: 1, ...adapterSteps }, null, 2) + '\n')
  }

  async loadState(dir: string): Promise<void> {
    const stateFile = join(dir, 'trainer_state.json')
    const meta = JSON.parse(await readFile(stateFile, 'utf8')) as { step: number; adapterSteps?: unknown }
    const clockSteps = this.clocks ? storedAdapterSteps(meta.adapterSteps, [...this.clocks.keys()], stateFile) : null
    const header = await readSafetensorsHeader(join(dir, 'optimizer.safetensors'))
    const byName = new Map<string, { m?: Float32Array; v?: Float32Array }>()
    for (const ref of header.tensors) {
      const [name, part] = ref.name.split('::')
      const entry = byName.get(name) ?? {}
      entry[part as 'm' | 'v'] = await readTensorFloat32(ref)
      byName.set(name, entry)
    }
    await this.train.importOptimizerState(this.model.handle, [...byName].map(([name, e]) => ({ name, m: e.m!, v: e.v! })))
    this.stepCount = meta.step
    if (clockSteps) for (const [name, c] of this.clocks!) c.steps = clockSteps[name]
  }
}

/** Each trained adapter's schedule and clock at 0; the schedules must name exactly the trained adapters. */
function adapterClocks(schedules: Record<string, ScheduleOptions>, trained: readonly string[]): Map<string, { schedule: Schedule; steps: number }> {
  const named = Object.keys(schedules).sort()
  if (!trained.length || named.join() !== [...trained].sort().join())
    throw new InvalidArgumentError('adapterSchedules', `adapterSchedules names ${named.join(', ') || 'no adapter'}; it must name exactly the trained adapters (${trained.join(', ') || 'none: full fine-tuning has one clock'})`)
  return new Map(named.map((name) => [name, { schedule: createSchedule(schedules[name]), steps: 0 }]))
}

/** trainer_state.json's per-adapter clocks: a non-negative integer for each of `names`, else a CheckpointError. */
function storedAdapterSteps(v: unknown, names: readonly string[], file: string): Record<string, number> {
  const o = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null
  for (const name of names) {
    const n = o?.[name]
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0)
      throw new CheckpointError(file, 'adapterSteps', 'field', `${file}: adapterSteps must hold each adapter's step count (${names.join(', ')}); ${o ? `'${name}' is ${JSON.stringify(n)}` : 'it is missing'}`)
  }
  return Object.fromEntries(names.map((name) => [name, o![name] as number]))
}
