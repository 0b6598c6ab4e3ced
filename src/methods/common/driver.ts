// Runs a method's loop with the conventions every `autodidact evolve` shares: a JSONL metrics
// line per step, held-out accuracy before, every N steps and after, checkpoints that resume
// exactly (the newest `keep` kept, and the best evaluated one), a stop request → the step
// finished and checkpointed, events for the progress output (phases, steps, the collapse guard),
// and the run report (src/report). The run folder's layout is in run-folder.ts.
import { existsSync } from 'node:fs'
import { appendFile, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { formatDuration, metricAt, renderRunReport, type MetricsRow, type ReportSeries, type RunReportInput } from '../../report/index.js'
import { fileWriteError } from '../../util/atomic.js'
import { checkCollapse, DEFAULT_COLLAPSE_RULE, DEFAULT_COLLAPSE_WINDOW, NOISE_Z, TRAINING_REWARD, type CollapseAction, type CollapseCheck, type CollapseRule, type HeldOutPoint, type RewardPoint } from './collapse.js'
import { checkpointFacts, evaluationDetail, evaluationProtocol, perQuestion, readRunEvaluations, trainedModelIn, type TrainedModel } from './report-input.js'
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from './run.js'
import { trainingMeter } from '../../train/mfu.js'
import { CHECKPOINTS_DIR, checkpointDir, DEFAULT_KEEP, METRICS_FILE, pruneCheckpoints, readMetrics, truncateMetrics, writeLatest } from './run-folder.js'

export { checkpointDir, LATEST_FILE, METRICS_FILE } from './run-folder.js'

export const REPORT_FILE = 'report.html'

/** What a phase is part of: set-up before the first step, a step's own work, held-out evaluation, checkpointing, the report. */
export type PhaseKind = 'setup' | 'step' | 'evaluate' | 'checkpoint' | 'report'

/** What the driver reports while it runs (the CLI renders them: a progress line, plain lines, or JSON). */
export type DriveEvent =
  | { event: 'phase'; kind: PhaseKind; phase: string; step: number; totalSteps: number }
  | { event: 'step'; step: number; totalSteps: number; line: string; etaSeconds: number; record: BaseStepRecord }
  | { event: 'collapse'; step: number; action: CollapseAction; check: CollapseCheck }

export interface DriveOptions<R extends BaseStepRecord = BaseStepRecord> {
  outDir: string
  method: string
  totalSteps: number
  evalEvery: number
  checkpointEvery: number
  /** Checkpoints kept (default 3); the latest and the best evaluated one are never pruned. */
  keep?: number
  /** Charts of the report. */
  series: readonly ReportSeries[]
  /** One short progress string of a step's metrics. */
  describe(record: R): string
  /** The step's progress line (also in the 'step' event). */
  progress?: (line: string) => void
  /** Phases, steps and the collapse guard's findings. */
  onEvent?: (event: DriveEvent) => void
  /** Set to stop after the current step (checkpointed). */
  stopRequested?: () => boolean
  /** One line about the method, for the report. */
  summary?: string
  /** What the collapse guard does when it fires (default warn). */
  onCollapse?: CollapseAction
  /** Evaluations the collapse guard looks back over (default 3). */
  collapseWindow?: number
  /** What the collapse guard calls collapse (default: held-out falling while the reward rises). */
  collapseRule?: CollapseRule
  /** The command that continues this run, for the report of a run stopped early. */
  resumeCommand?: string
}

export interface DriveResult {
  stepsRun: number
  stoppedEarly: boolean
  accuracyBefore: number | null
  /** Held-out accuracy of the final model (after a rollback: of the restored checkpoint). */
  accuracyAfter: number | null
  seconds: number
  /** Why the run stopped before its last step: a stop request, or the collapse guard. */
  stopReason: 'requested' | 'collapse' | null
  /** The collapse guard's first finding of this session, if it fired. */
  collapse: CollapseCheck | null
  /** The step whose checkpoint became the final model by --on-collapse rollback. */
  rolledBackTo: number | null
  /** The checkpoint latest.json names at the end (what --resume continues from). */
  checkpoint: string
  trainedModel: TrainedModel | null
  report: string
}

/** The step's one-line progress: bar, the method's signals, held-out accuracy when evaluated, throughput (tok/s only when the step generated tokens), MFU when it trained, ETA. */
function progressLine(method: string, record: BaseStepRecord, described: string, totalSteps: number, eta: number): string {
  const bar = '█'.repeat(Math.round((20 * Math.min(record.step, totalSteps)) / totalSteps)).padEnd(20, '░')
  const heldOut = typeof record.heldOutAccuracy === 'number' ? ` held-out ${record.heldOutAccuracy.toFixed(3)}` : ''
  const pace = record.generatedTokens > 0 && record.seconds > 0 ? `${(record.generatedTokens / record.seconds).toFixed(0)} tok/s` : `${record.seconds.toFixed(1)} s/step`
  const mfu = typeof record.mfu === 'number' ? ` MFU ${(100 * record.mfu).toFixed(1)}%` : ''
  return `[${method}] step ${record.step}/${totalSteps} ${bar} ${described}${heldOut} ${pace}${mfu} ETA ${formatDuration(eta)}`
}

/** Rows as metrics.jsonl holds them (the JSON of the record). */
const asRow = (record: object): MetricsRow => JSON.parse(JSON.stringify(record)) as MetricsRow

function rewardPoints(rows: readonly MetricsRow[], method: string): RewardPoint[] {
  const r = TRAINING_REWARD[method]
  if (!r) return []
  return rows.flatMap((row) => {
    if (row.step === 0 || (r.phase !== undefined && row.phase !== r.phase)) return []
    const reward = metricAt(row, r.path)
    return reward === null ? [] : [{ step: row.step, reward }]
  })
}

/** The held-out evaluations of the rows, with n and per-question values from the eval files on disk (the same questions every evaluation: any file gives n). */
async function heldOutPoints(outDir: string, rows: readonly MetricsRow[]): Promise<HeldOutPoint[]> {
  const { records } = await readRunEvaluations(outDir)
  const byStep = new Map(records.map((r) => [r.step, perQuestion(r)]))
  const n = records.length ? perQuestion(records.at(-1)!).length : null
  return rows.flatMap((row) => (typeof row.heldOutAccuracy === 'number' ? [{ step: row.step, accuracy: row.heldOutAccuracy, n: byStep.get(row.step)?.length ?? n, perQuestion: byStep.get(row.step) }] : []))
}

/** The collapse guard's verdict on every window of the run it can judge, fired or not. */
function collapseChecks(points: readonly HeldOutPoint[], rewards: readonly RewardPoint[], window: number, rule: CollapseRule): CollapseCheck[] {
  const checks: CollapseCheck[] = []
  for (let k = window; k <= points.length; k++) {
    const c = checkCollapse(points.slice(0, k), rewards, window, rule)
    if (c) checks.push(c)
  }
  return checks
}

/** Every window of the run where the collapse guard fires (for the report: the whole run, earlier sessions included). */
function collapseFindings(points: readonly HeldOutPoint[], rewards: readonly RewardPoint[], window: number, rule: CollapseRule): CollapseCheck[] {
  return collapseChecks(points, rewards, window, rule).filter((c) => c.collapsed)
}

/** A run folder's every collapse-guard window, fired or not, from its metrics rows and eval files (why the guard did or did not fire). */
export async function runCollapseChecks(outDir: string, rows: readonly MetricsRow[], method: string, window = DEFAULT_COLLAPSE_WINDOW, rule = DEFAULT_COLLAPSE_RULE): Promise<CollapseCheck[]> {
  return collapseChecks(await heldOutPoints(outDir, rows), rewardPoints(rows, method), window, rule)
}

export async function drive<C extends BaseMethodConfig, R extends BaseStepRecord>(run: MethodRun<C, R>, o: DriveOptions<R>): Promise<DriveResult> {
  const keep = o.keep ?? DEFAULT_KEEP
  if (!Number.isInteger(keep) || keep < 1) throw new RangeError(`keep must be an integer ≥ 1, got ${keep}`)
  const window = o.collapseWindow ?? DEFAULT_COLLAPSE_WINDOW
  const rule = o.collapseRule ?? DEFAULT_COLLAPSE_RULE
  const onCollapse = o.onCollapse ?? 'warn'
  await mkdir(o.outDir, { recursive: true }).catch((e) => {
    throw fileWriteError(e, o.outDir)
  })
  const emit = (e: DriveEvent) => o.onEvent?.(e)
  const phase = (kind: PhaseKind, name: string) => emit({ event: 'phase', kind, phase: name, step: run.step, totalSteps: o.totalSteps })
  const metricsFile = join(o.outDir, METRICS_FILE)
  await truncateMetrics(metricsFile, run.step)
  const rows = (await readMetrics(metricsFile)).rows
  const startedAt = new Date()
  const write = async (record: BaseStepRecord | MetricsRow) => {
    rows.push(asRow(record))
    await appendFile(metricsFile, JSON.stringify(record) + '\n').catch((e) => {
      throw fileWriteError(e, metricsFile)
    })
  }
  let before: number | null = null
  if (run.step === 0) {
    phase('evaluate', 'evaluating the base model on the held-out questions')
    before = await run.evaluate()
    await write({ step: 0, heldOutAccuracy: before })
  }
  // The best evaluated checkpoint so far (kept from pruning; --on-collapse rollback restores it).
  const evaluatedCheckpoints = rows.filter((r) => r.step > 0 && typeof r.heldOutAccuracy === 'number' && existsSync(checkpointDir(o.outDir, r.step)))
  let best: { step: number; accuracy: number } | null = evaluatedCheckpoints.reduce<{ step: number; accuracy: number } | null>(
    (b, r) => (b === null || (r.heldOutAccuracy as number) > b.accuracy ? { step: r.step, accuracy: r.heldOutAccuracy as number } : b),
    null,
  )
  let stopReason: DriveResult['stopReason'] = null
  let collapse: CollapseCheck | null = null
  let ran = 0
  let lastCheckpoint = run.step
  const save = async () => {
    phase('checkpoint', `checkpointing step ${run.step}`)
    const dir = checkpointDir(o.outDir, run.step)
    await run.checkpoint(dir)
    await writeLatest(o.outDir, o.method, run.step, dir)
    const evaluated = rows.at(-1)?.step === run.step ? rows.at(-1)!.heldOutAccuracy : undefined
    if (typeof evaluated === 'number' && (best === null || evaluated > best.accuracy)) best = { step: run.step, accuracy: evaluated }
    await pruneCheckpoints(join(o.outDir, CHECKPOINTS_DIR), keep, best ? [dir, checkpointDir(o.outDir, best.step)] : [dir])
    lastCheckpoint = run.step
  }
  const stepping = Date.now()
  while (run.step < o.totalSteps) {
    phase('step', `step ${run.step + 1}/${o.totalSteps} running`)
    const meter = trainingMeter.snapshot()
    const record = await run.runStep()
    const mfu = trainingMeter.since(meter) // the step's training, whichever trainers the method ran
    if (mfu !== null) record.mfu = mfu
    ran++
    const evaluates = run.step % o.evalEvery === 0 || run.step === o.totalSteps
    if (evaluates) {
      phase('evaluate', `evaluating step ${run.step} on the held-out questions`)
      record.heldOutAccuracy = await run.evaluate()
    }
    await write(record)
    if (run.step % o.checkpointEvery === 0 || run.step === o.totalSteps) await save()
    const check = evaluates ? checkCollapse(await heldOutPoints(o.outDir, rows), rewardPoints(rows, o.method), window, rule) : null
    const eta = ((Date.now() - stepping) / 1000 / ran) * (o.totalSteps - run.step)
    const line = progressLine(o.method, record, o.describe(record), o.totalSteps, eta) + (check?.collapsed ? ' ⚠ collapse' : '')
    o.progress?.(line)
    emit({ event: 'step', step: run.step, totalSteps: o.totalSteps, line, etaSeconds: eta, record })
    if (check?.collapsed) {
      collapse ??= check
      emit({ event: 'collapse', step: run.step, action: onCollapse, check })
      if (onCollapse !== 'warn' && run.step < o.totalSteps) {
        stopReason = 'collapse'
        break
      }
    }
    if (o.stopRequested?.()) {
      if (run.step < o.totalSteps) stopReason = 'requested'
      break
    }
  }
  if (lastCheckpoint !== run.step) await save()
  let checkpoint = checkpointDir(o.outDir, run.step)
  let rolledBackTo: number | null = null
  if (collapse && onCollapse === 'rollback' && best && best.step !== run.step) {
    // the best evaluated checkpoint becomes the final model, and what --resume continues from
    rolledBackTo = best.step
    checkpoint = checkpointDir(o.outDir, best.step)
    await writeLatest(o.outDir, o.method, best.step, checkpoint)
  }
  phase('report', 'writing the report')
  const finishedAt = new Date()
  const trainedModel = trainedModelIn(checkpoint)
  const report = join(o.outDir, REPORT_FILE)
  await writeFile(report, renderRunReport(await reportInput(run, o, { rows, window, rule, startedAt, finishedAt, checkpoint, trainedModel, rolledBackTo, best, stopReason }))).catch((e) => {
    throw fileWriteError(e, report)
  })
  const accuracies = rows.filter((r) => typeof r.heldOutAccuracy === 'number')
  const finalRow = rolledBackTo === null ? accuracies.at(-1) : accuracies.find((r) => r.step === rolledBackTo)
  return {
    stepsRun: ran,
    stoppedEarly: stopReason !== null,
    accuracyBefore: before ?? ((accuracies[0]?.heldOutAccuracy as number | undefined) ?? null),
    accuracyAfter: (finalRow?.heldOutAccuracy as number | undefined) ?? null,
    seconds: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    stopReason,
    collapse,
    rolledBackTo,
    checkpoint,
    trainedModel,
    report,
  }
}

interface Outcome {
  rows: MetricsRow[]
  window: number
  rule: CollapseRule
  startedAt: Date
  finishedAt: Date
  checkpoint: string
  trainedModel: TrainedModel | null
  rolledBackTo: number | null
  best: { step: number; accuracy: number } | null
  stopReason: DriveResult['stopReason']
}

/** The report's line on what the collapse guard watched. */
function collapseGuardNote(method: string, window: number, rule: CollapseRule): string {
  if (rule === 'falls') return `collapse guard (--collapse-rule falls): over the last ${window} evaluations, held-out accuracy falling by more than ${NOISE_Z} standard errors, whatever the training reward does`
  const reward = TRAINING_REWARD[method]
  if (!reward) return 'collapse guard: not applicable (this method trains on no reward of its own; --collapse-rule falls watches held-out accuracy alone)'
  return `collapse guard: over the last ${window} evaluations, held-out accuracy falling while the training reward (${reward.path}) rises, both by more than ${NOISE_Z} standard errors`
}

async function reportInput<C extends BaseMethodConfig, R extends BaseStepRecord>(run: MethodRun<C, R>, o: DriveOptions<R>, x: Outcome): Promise<RunReportInput> {
  const facts = await checkpointFacts(x.checkpoint)
  const { records, skipped } = await readRunEvaluations(o.outDir)
  const findings = collapseFindings(await heldOutPoints(o.outDir, x.rows), rewardPoints(x.rows, o.method), x.window, x.rule)
  const alerts = findings.length
    ? [`The collapse guard fired ${findings.length === 1 ? 'once' : `${findings.length} times`}: ${findings[0].message}.${x.rolledBackTo !== null ? ` Rolled back: the final model is the checkpoint of step ${x.rolledBackTo}, the best held-out one (${x.best!.accuracy.toFixed(3)}).` : x.stopReason === 'collapse' ? ` The run stopped there (--on-collapse ${o.onCollapse}${o.onCollapse === 'rollback' ? ': no earlier checkpoint scored higher on the held-out questions, nothing to roll back to' : ''}).` : ' (--on-collapse warn: the run went on; stop or rollback act on it.)'}`]
    : []
  const notes = [
    ...(x.stopReason === 'requested' ? [`stopped early at step ${run.step} of ${o.totalSteps}${o.resumeCommand ? `; resume with: ${o.resumeCommand}` : ''}`] : []),
    ...(x.stopReason === 'collapse' ? [`stopped by the collapse guard at step ${run.step} of ${o.totalSteps}`] : []),
    collapseGuardNote(o.method, x.window, x.rule),
    ...skipped,
  ]
  const last = records.at(-1)
  return {
    method: o.method,
    summary: o.summary,
    model: facts.baseModel ?? '(unknown: the checkpoint does not say)',
    world: facts.world ?? '(unknown)',
    config: facts.config ?? run.config,
    seed: run.config.seed,
    startedAt: x.startedAt,
    finishedAt: x.finishedAt,
    rows: x.rows,
    evaluations: records.map(evaluationDetail),
    evaluation: last ? evaluationProtocol(last) : null,
    heldOutSize: last ? perQuestion(last).length : null,
    series: o.series,
    trainedModel: x.trainedModel?.dir ?? null,
    trainedModelKind: x.trainedModel?.kind,
    finalStep: x.rolledBackTo ?? undefined,
    plannedSteps: o.totalSteps,
    notes,
    alerts,
  }
}
