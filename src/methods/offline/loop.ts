// Offline DPO and weighted-SFT runs on a scored response pool (UID §4.3, B.3, C.3). Every arm of
// an objective sees the same examples in the same order: DPO arms share the prompt set (and the
// SFT warm start that is also their frozen reference); SFT arms share the responses and differ in
// their weights only.
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { ConfigError } from '../../engine/errors.js'
import type { StepMetrics, TrainSequence } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import { openPolicy, PolicySet, type OpenPolicy, type Policy, type PolicyTrainer } from '../common/policy.js'
import { learningRateSchedule, openTrainee, type TrainingPlan } from '../common/training.js'
import type { Benchmark, TaskWorld } from '../../worlds/types.js'
import { EvalLog, evaluateBenchmarks, selectBenchmarks } from '../common/evaluation.js'
import { checkLevels, worldRecord } from '../common/world.js'
import { DPO_ARMS, DPO_TOY_PRESET, resolveOfflineConfig, TOY_PRESET, type OfflineConfig, type PairSpan } from './config.js'
import { dpoPairs, ensurePool, pairResponses, POOL_FILE, poolDirOf, readPool, warmStartExamples, wsftExamples, type DpoPair, type ResponsePool } from './pool.js'

/** One training unit: a weighted SFT example, or a DPO pair (chosen, rejected) of one prompt. */
type Unit = { kind: 'sft'; prompt: number; response: number; weight: number } | ({ kind: 'dpo' } & DpoPair)

export interface OfflineStepRecord extends BaseStepRecord {
  step: number
  objective: string
  arm: string
  /** Examples (SFT) or pairs (DPO) of the whole arm, and in this step. */
  dataSize: number
  batch: number
  loss: number
  train: StepMetrics
}

export interface OfflineRunState extends BaseRunState {
  format: 'autodidact.offline.run'
  /** The model the adapters sit on (the base model, or the DPO warm start). */
  modelDir: string
  poolDir: string
  config: OfflineConfig
}

export interface RunOptions {
  threads?: number
  openPolicy?: OpenPolicy
  /** The run folder (the pool goes to pool/ in it unless pool.dir names one). */
  outDir?: string
  /** Progress lines of the set-up (the pool, the warm start), which runs before step 1. */
  log?: (line: string) => void
}

const FORMAT = 'autodidact.offline.run'
const ROLE = 'model'
const ADAMW = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 } // UID C.3

/** UID B.3 / C.3: LoRA, AdamW (0.9, 0.95), cosine to 0.1 over the run's updates. */
function trainingPlan(c: OfflineConfig, objective: TrainingPlan['objective'], lr: number, updates: number): TrainingPlan {
  return {
    objective,
    optimizer: { lr, ...ADAMW },
    schedule: learningRateSchedule(updates, { warmupRatio: c.train.warmupRatio, minLrRatio: c.train.minLrRatio }),
    clipGradNorm: c.train.clipGradNorm,
    microBatchSize: c.train.microBatchSize,
    lora: { rank: c.train.loraRank, alpha: c.train.loraAlpha },
  }
}

/** The run's plan: DPO against the warm start (the frozen reference, LoRA off) or weighted SFT. */
function runPlan(c: OfflineConfig): TrainingPlan {
  return trainingPlan(c, c.objective === 'dpo' ? { name: 'dpo', beta: c.train.beta, rpoAlpha: c.train.rpoAlpha, dpopLambda: c.train.dpopLambda } : { name: 'sft' }, c.train.lr, c.steps)
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

/**
 * A DPO pair's two training sequences. 'whole' scores every completion token (UID B.3).
 * 'first-difference' masks each response after the first token where the two differ, a token-level
 * form of Step-DPO (Lai et al. 2024): the shared prefix cancels in z, so z compares the two tokens
 * where the responses split, and the rejected response's tokens after its error (in a toy trace,
 * the copy of a wrong result into <answer>) are not pushed down. On the toy it does not help: the
 * right token at the split is displaced with the wrong one (README, issue 27 evidence).
 */
export function pairSequences(prompt: readonly number[], chosen: readonly number[], rejected: readonly number[], span: PairSpan): [TrainSequence, TrainSequence] {
  if (span === 'whole') return [{ prompt, completion: chosen }, { prompt, completion: rejected }]
  const split = firstDifference(chosen, rejected)
  const through = (c: readonly number[]) => Uint8Array.from(c, (_, t) => (t <= split ? 1 : 0))
  return [
    { prompt, completion: chosen, mask: through(chosen) },
    { prompt, completion: rejected, mask: through(rejected) },
  ]
}

/** The first position where a and b differ (the shorter's length when one is a prefix of the other). */
export function firstDifference(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length)
  let t = 0
  while (t < n && a[t] === b[t]) t++
  return t
}

/** Sequences and DPO pair indices of a batch. */
function toBatch(model: Policy, world: TaskWorld, pool: ResponsePool, units: readonly Unit[], span: PairSpan): { sequences: TrainSequence[]; pairs?: [number, number][] } {
  const prompt = (pi: number) => model.encodePrompt(world.solve.poolPrompt(pool.prompts[pi].question))
  const sequences: TrainSequence[] = []
  const pairs: [number, number][] = []
  for (const u of units) {
    const p = prompt(u.prompt)
    if (u.kind === 'sft') sequences.push({ prompt: p, completion: pool.prompts[u.prompt].responses[u.response].completion, weight: u.weight })
    else {
      pairs.push([sequences.length, sequences.length + 1])
      const { chosen, rejected } = pairResponses(pool, u)
      sequences.push(...pairSequences(p, chosen.completion, rejected.completion, span))
    }
  }
  return pairs.length ? { sequences, pairs } : { sequences }
}

/**
 * The shared DPO warm start (UID B.3): LoRA SFT on the union of every DPO arm's pair responses,
 * merged into the weights and saved as a full model folder in the pool folder (built once).
 */
export async function ensureWarmStart(poolDir: string, pool: ResponsePool, c: OfflineConfig, baseModel: string, world: TaskWorld, o: RunOptions = {}): Promise<string> {
  const key = createHash('sha256').update(JSON.stringify({ w: c.warmStart, p: c.pairs, s: c.seed, l: [c.train.loraRank, c.train.loraAlpha] })).digest('hex').slice(0, 10)
  const dir = join(poolDir, `warmstart-${key}`)
  if (existsSync(join(dir, 'config.json'))) return dir
  o.log?.('the shared DPO warm start: LoRA SFT on the pairs\' responses (reused once built)')
  // the paper's arms alone: the right-vs-wrong control's wrong responses never enter the SFT data
  const examples = warmStartExamples(pool, DPO_ARMS.filter((a) => a === 'random' || (c.pairs.commonMethods as readonly string[]).includes(a)), c.pairs, c.seed)
  const set = new PolicySet(o.openPolicy ?? openPolicy)
  try {
    const units: Unit[] = examples.map((e) => ({ kind: 'sft', prompt: e.prompt, response: e.response, weight: 1 }))
    const bs = c.warmStart.batchSize
    const updates = Math.max(1, Math.ceil(units.length / bs) * c.warmStart.epochs)
    const { policy, trainer } = await openTrainee(set, { base: baseModel, threads: o.threads, plan: trainingPlan(c, { name: 'sft' }, c.warmStart.lr, updates), reference: null })
    if (units.length) for (let s = 0; s < updates; s++) await trainer.step(toBatch(policy, world, pool, batchAt(units, bs, s, c.seed), 'whole'))
    const tmp = `${dir}.tmp-${process.pid}`
    await rm(tmp, { recursive: true, force: true })
    await policy.save(tmp, { adapterOnly: false }) // LoRA merged into the weights
    await rename(tmp, dir)
    return dir
  } finally {
    set.dispose()
  }
}

/** The toy preset of a saved config's objective: what a field it predates (train.rpoAlpha, dpopLambda, pairSpan) takes on resume. */
function presetOf(config: unknown): OfflineConfig {
  return (config as Partial<OfflineConfig> | null)?.objective === 'dpo' ? DPO_TOY_PRESET : TOY_PRESET
}

export class OfflineRun {
  private readonly evals = new EvalLog()
  private readonly benchmarks: Benchmark[]

  private constructor(
    readonly config: OfflineConfig,
    readonly world: TaskWorld,
    readonly model: Policy,
    private readonly trainer: PolicyTrainer,
    private readonly policies: PolicySet,
    readonly pool: ResponsePool,
    readonly units: Unit[],
    private stepIndex: number,
    readonly modelDir: string,
    readonly poolDir: string,
  ) {
    this.benchmarks = selectBenchmarks(world, config.eval.benchmarks, config.eval.size)
  }

  /** Resolves `steps` = 0 to `epochs` passes over the arm's units. */
  static resolveSteps(c: OfflineConfig, units: number): OfflineConfig {
    if (units === 0)
      throw new ConfigError(
        '(config)',
        'pool',
        c.objective === 'dpo'
          ? `the pool gives arm '${c.arm}' no preference pairs (no prompt has two distinct verified responses whose scores differ by pairs.minGap ${c.pairs.minGap}): sample more or harder prompts or more responses (pool.prompts, pool.level, pool.k), or lower pairs.minGap`
          : `the pool gives arm '${c.arm}' no examples (it holds no verified response to learn from): sample more prompts or responses (pool.prompts, pool.k), or start from a model that solves some`,
      )
    return c.steps > 0 ? c : { ...c, steps: Math.ceil(units / c.train.batchSize) * c.epochs }
  }

  static async start(baseModel: string, config: OfflineConfig, world: TaskWorld, o: RunOptions = {}): Promise<OfflineRun> {
    checkLevels(world, [config.pool.level], 'pool.level')
    selectBenchmarks(world, config.eval.benchmarks, config.eval.size) // a bad benchmark name fails before the pool is built
    const base = resolve(baseModel)
    const dir = poolDirOf(config, o.outDir)
    const open = o.openPolicy ?? openPolicy
    const scorer = await open({ model: base, threads: o.threads, weights: config.frozenWeights }) // the frozen base that samples and scores the pool
    let pooled
    try {
      o.log?.(`building the response pool (${config.pool.prompts} prompts × ${config.pool.k} responses; reused when ${dir} holds it)`)
      pooled = await ensurePool(config, scorer, world, dir)
    } finally {
      scorer.dispose()
    }
    const poolDir = resolve(pooled.dir)
    const units = armUnits(pooled.pool, config)
    const c = OfflineRun.resolveSteps(config, units.length)
    const modelDir = c.objective === 'dpo' ? await ensureWarmStart(poolDir, pooled.pool, c, base, world, o) : base
    const set = new PolicySet(open)
    return set.build(async () => {
      const { policy, trainer } = await openTrainee(set, { base: modelDir, threads: o.threads, plan: runPlan(c), reference: null })
      return new OfflineRun(c, world, policy, trainer, set, pooled.pool, units, 0, modelDir, poolDir)
    })
  }

  /** Continues from a checkpoint folder written by `checkpoint()`; the folder is checked before anything is loaded. */
  static async resume(dir: string, world: TaskWorld, o: RunOptions = {}): Promise<OfflineRun> {
    const ckpt = await resumeRun<OfflineRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => ({ ...s, format: FORMAT, modelDir: checkedPath(s.modelDir, file, 'modelDir'), poolDir: checkedPath(s.poolDir, file, 'poolDir'), config: resolveOfflineConfig(s.config, presetOf(s.config), file) }),
      roles: () => [{ name: ROLE, trained: true }],
    })
    const { state } = ckpt
    const pool = await readPool(join(state.poolDir, POOL_FILE))
    const set = new PolicySet(o.openPolicy ?? openPolicy)
    return set.build(async () => {
      const { policy, trainer } = await openTrainee(set, { base: state.modelDir, checkpoint: ckpt.paths(ROLE), threads: o.threads, plan: runPlan(state.config), reference: null })
      return new OfflineRun(state.config, world, policy, trainer, set, pool, armUnits(pool, state.config), state.step, state.modelDir, state.poolDir)
    })
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.policies.dispose()
  }

  async runStep(): Promise<OfflineStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const units = batchAt(this.units, c.train.batchSize, this.stepIndex, c.seed)
    const train = await this.trainer.step(toBatch(this.model, this.world, this.pool, units, c.train.pairSpan))
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
    const solver = { prompt: (q: string) => this.world.solve.solverPrompt(q), verifier: this.world.verifier }
    return this.evals.add(await evaluateBenchmarks(this.model, this.benchmarks, solver, this.config.eval.protocol, this.stepIndex))
  }

  /** The adapter, its optimizer and the evaluations since the last checkpoint (checkpointRun). */
  async checkpoint(dir: string): Promise<void> {
    const state: OfflineRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), modelDir: this.modelDir, poolDir: this.poolDir, config: this.config }
    await checkpointRun(dir, { state, roles: [{ name: ROLE, policy: this.model, trainer: this.trainer }], extra: (tmp) => this.evals.intoCheckpoint(tmp, this.stepIndex) })
    await this.evals.flush(dir)
  }
}
