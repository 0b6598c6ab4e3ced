// Offline DPO and weighted-SFT runs on a scored response pool (UID §4.3, B.3, C.3). Every arm of
// an objective sees the same examples in the same order: DPO arms share the prompt set (and the
// SFT warm start that is also their frozen reference); SFT arms share the responses and differ in
// their weights only.
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdir, readFile, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { writeFileAtomic } from '../../engine/hf/atomic.js'
import { loadModel, type Model } from '../../engine/model.js'
import type { StepMetrics, Trainer, TrainerOptions, TrainSequence } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import { evaluateBenchmarks, macroAccuracy, writeEvalRecords, type EvalRecord } from '../select/evaluation.js'
import { arithSolveWorld, type SolveWorld } from '../select/world.js'
import { DPO_ARMS, type OfflineConfig } from './config.js'
import { dpoPairs, ensurePool, warmStartExamples, wsftExamples, type ResponsePool } from './pool.js'

/** One training unit: a weighted SFT example, or a DPO pair (chosen, rejected) of one prompt. */
type Unit = { kind: 'sft'; prompt: number; response: number; weight: number } | { kind: 'dpo'; prompt: number; chosen: number; rejected: number }

export interface OfflineStepRecord {
  step: number
  objective: string
  arm: string
  /** Examples (SFT) or pairs (DPO) of the whole arm, and in this step. */
  dataSize: number
  batch: number
  loss: number
  train: StepMetrics
  heldOutAccuracy?: number
  generatedTokens: number
  seconds: number
}

export interface OfflineRunState {
  format: 'autodidact.offline.run'
  version: 1
  step: number
  /** The model the adapters sit on (the base model, or the DPO warm start). */
  modelDir: string
  poolDir: string
  config: OfflineConfig
}

const ADAMW = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 } // UID C.3

function schedule(updates: number, warmupRatio: number, minLrRatio: number): TrainerOptions['schedule'] {
  if (updates <= 1) return { kind: 'constant' }
  return { kind: 'cosine', warmupSteps: Math.min(Math.round(warmupRatio * updates), updates - 1), totalSteps: updates, minLrRatio }
}

/** Units of the arm, in a seeded order shared by every arm of the objective. */
export function armUnits(pool: ResponsePool, c: OfflineConfig): Unit[] {
  const units: Unit[] =
    c.objective === 'dpo'
      ? dpoPairs(pool, c.arm, c.pairs, c.seed).map((p) => ({ kind: 'dpo' as const, ...p }))
      : wsftExamples(pool, c.arm, c.train.alpha).map((e) => ({ kind: 'sft' as const, ...e }))
  return units
}

/** Batch b of `epochs` passes over the units, each pass in its own seeded order. */
export function batchAt(units: readonly Unit[], batchSize: number, step: number, seed: number): Unit[] {
  const perEpoch = Math.ceil(units.length / batchSize)
  const epoch = Math.floor(step / perEpoch)
  const order = new Rng(`offline-order-${seed}-${epoch}`).shuffle(Array.from({ length: units.length }, (_, i) => i))
  const k = step % perEpoch
  return order.slice(k * batchSize, (k + 1) * batchSize).map((i) => units[i])
}

/** Sequences and DPO pair indices of a batch. */
function toBatch(model: Model, world: SolveWorld, pool: ResponsePool, units: readonly Unit[]): { sequences: TrainSequence[]; pairs?: [number, number][] } {
  const prompt = (pi: number) => model.encodePrompt(world.prompt(pool.prompts[pi].question))
  const sequences: TrainSequence[] = []
  const pairs: [number, number][] = []
  for (const u of units) {
    const p = prompt(u.prompt)
    if (u.kind === 'sft') sequences.push({ prompt: p, completion: pool.prompts[u.prompt].responses[u.response].completion, weight: u.weight })
    else {
      pairs.push([sequences.length, sequences.length + 1])
      sequences.push({ prompt: p, completion: pool.prompts[u.prompt].responses[u.chosen].completion })
      sequences.push({ prompt: p, completion: pool.prompts[u.prompt].responses[u.rejected].completion })
    }
  }
  return pairs.length ? { sequences, pairs } : { sequences }
}

/**
 * The shared DPO warm start (UID B.3): LoRA SFT on the union of every DPO arm's pair responses,
 * merged into the weights and saved as a full model folder in the pool folder (built once).
 */
export async function ensureWarmStart(poolDir: string, pool: ResponsePool, c: OfflineConfig, baseModel: string, world: SolveWorld, threads?: number): Promise<string> {
  const key = createHash('sha256').update(JSON.stringify({ w: c.warmStart, p: c.pairs, s: c.seed, l: [c.train.loraRank, c.train.loraAlpha] })).digest('hex').slice(0, 10)
  const dir = join(poolDir, `warmstart-${key}`)
  if (existsSync(join(dir, 'config.json'))) return dir
  const examples = warmStartExamples(pool, DPO_ARMS.filter((a) => a === 'random' || c.pairs.commonMethods.includes(a)), c.pairs, c.seed)
  const model = await loadModel(baseModel, { threads })
  try {
    const units: Unit[] = examples.map((e) => ({ kind: 'sft', prompt: e.prompt, response: e.response, weight: 1 }))
    const bs = c.warmStart.batchSize
    const updates = Math.max(1, Math.ceil(units.length / bs) * c.warmStart.epochs)
    const trainer = await model.trainer({
      objective: { name: 'sft' },
      lora: { rank: c.train.loraRank, alpha: c.train.loraAlpha },
      optimizer: { lr: c.warmStart.lr, ...ADAMW },
      schedule: schedule(updates, c.train.warmupRatio, c.train.minLrRatio),
      clipGradNorm: c.train.clipGradNorm,
      microBatchSize: c.train.microBatchSize,
    })
    if (units.length) for (let s = 0; s < updates; s++) await trainer.step(toBatch(model, world, pool, batchAt(units, bs, s, c.seed)))
    const tmp = `${dir}.tmp-${process.pid}`
    await rm(tmp, { recursive: true, force: true })
    await model.save(tmp, { adapterOnly: false }) // LoRA merged into the weights
    await rename(tmp, dir)
    return dir
  } finally {
    model.dispose()
  }
}

function trainerOptions(c: OfflineConfig, updates: number): TrainerOptions {
  return {
    objective: c.objective === 'dpo' ? { name: 'dpo', beta: c.train.beta } : { name: 'sft' },
    lora: { rank: c.train.loraRank, alpha: c.train.loraAlpha },
    optimizer: { lr: c.train.lr, ...ADAMW },
    schedule: schedule(updates, c.train.warmupRatio, c.train.minLrRatio),
    clipGradNorm: c.train.clipGradNorm,
    microBatchSize: c.train.microBatchSize,
    ...(c.objective === 'dpo' ? { reference: 'lora-off' as const } : {}), // the warm start is the frozen reference
  }
}

export class OfflineRun {
  private pendingEvals: EvalRecord[] = []

  private constructor(
    readonly config: OfflineConfig,
    readonly world: SolveWorld,
    readonly model: Model,
    private readonly trainer: Trainer,
    readonly pool: ResponsePool,
    readonly units: Unit[],
    private stepIndex: number,
    readonly modelDir: string,
    readonly poolDir: string,
  ) {}

  /** Resolves `steps` = 0 to `epochs` passes over the arm's units. */
  static resolveSteps(c: OfflineConfig, units: number): OfflineConfig {
    if (units === 0) throw new RangeError(`the pool gives arm '${c.arm}' no ${c.objective === 'dpo' ? 'preference pairs' : 'examples'}: sample more prompts or responses (pool.prompts, pool.k)`)
    return c.steps > 0 ? c : { ...c, steps: Math.ceil(units / c.train.batchSize) * c.epochs }
  }

  static async start(baseModel: string, config: OfflineConfig, threads?: number): Promise<OfflineRun> {
    const world = arithSolveWorld(config.format)
    const scorer = await loadModel(baseModel, { threads })
    let pooled
    try {
      pooled = await ensurePool(config, scorer, world)
    } finally {
      scorer.dispose()
    }
    const units = armUnits(pooled.pool, config)
    const c = OfflineRun.resolveSteps(config, units.length)
    const modelDir = c.objective === 'dpo' ? await ensureWarmStart(pooled.dir, pooled.pool, c, baseModel, world, threads) : baseModel
    const model = await loadModel(modelDir, { threads })
    const trainer = await model.trainer(trainerOptions(c, c.steps))
    return new OfflineRun(c, world, model, trainer, pooled.pool, units, 0, modelDir, pooled.dir)
  }

  static async resume(dir: string, threads?: number): Promise<OfflineRun> {
    const state = JSON.parse(await readFile(join(dir, 'run_state.json'), 'utf8')) as OfflineRunState
    if (state.format !== 'autodidact.offline.run') throw new TypeError(`${dir} is not an offline-run checkpoint`)
    const c = state.config
    const pool = JSON.parse(await readFile(join(state.poolDir, 'pool.json'), 'utf8')) as ResponsePool
    const model = await loadModel(state.modelDir, { threads })
    await model.loadAdapter(join(dir, 'model'))
    const trainer = await model.trainer(trainerOptions(c, c.steps))
    await trainer.loadState(dir)
    return new OfflineRun(c, arithSolveWorld(c.format), model, trainer, pool, armUnits(pool, c), state.step, state.modelDir, state.poolDir)
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.model.dispose()
  }

  async runStep(): Promise<OfflineStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const units = batchAt(this.units, c.train.batchSize, this.stepIndex, c.seed)
    const train = await this.trainer.step(toBatch(this.model, this.world, this.pool, units))
    this.stepIndex++
    return {
      step: this.stepIndex,
      objective: c.objective,
      arm: c.arm,
      dataSize: this.units.length,
      batch: units.length,
      loss: train.loss,
      train,
      generatedTokens: 0,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  async evaluate(): Promise<number> {
    const r = await evaluateBenchmarks(this.model, this.world, this.config.eval.benchmarks, this.config.eval.protocol, this.stepIndex)
    this.pendingEvals = [...this.pendingEvals.filter((e) => e.step !== r.step), r]
    return macroAccuracy(r)
  }

  async checkpoint(dir: string): Promise<void> {
    const tmp = `${dir}.tmp-${process.pid}`
    await rm(tmp, { recursive: true, force: true })
    await mkdir(tmp, { recursive: true })
    await this.model.save(join(tmp, 'model'))
    await this.trainer.saveState(tmp)
    const state: OfflineRunState = { format: 'autodidact.offline.run', version: 1, step: this.stepIndex, modelDir: this.modelDir, poolDir: this.poolDir, config: this.config }
    await writeFileAtomic(join(tmp, 'run_state.json'), JSON.stringify(state, null, 2) + '\n')
    if (existsSync(dir)) await rm(dir, { recursive: true, force: true })
    await rename(tmp, dir)
    await writeEvalRecords(dir, this.stepIndex, this.pendingEvals)
    this.pendingEvals = []
  }
}
