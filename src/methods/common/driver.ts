// Runs a method's loop with the conventions every `autodidact evolve` shares: a JSONL metrics
// line per step, held-out accuracy before, every N steps and after, checkpoints that resume
// exactly (the newest `keep` kept), Ctrl-C → checkpoint and clean exit, a progress line on
// stderr, an HTML report. The run folder's layout is in run-folder.ts.
import { appendFile, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileWriteError } from '../../util/atomic.js'
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from './run.js'
import { renderReport, type Series } from './report.js'
import { CHECKPOINTS_DIR, checkpointDir, DEFAULT_KEEP, METRICS_FILE, pruneCheckpoints, readMetrics, truncateMetrics, writeLatest } from './run-folder.js'

export { checkpointDir, LATEST_FILE, METRICS_FILE } from './run-folder.js'

export interface DriveOptions<R extends BaseStepRecord = BaseStepRecord> {
  outDir: string
  method: string
  totalSteps: number
  evalEvery: number
  checkpointEvery: number
  /** Checkpoints kept (default 3); the latest is never pruned. */
  keep?: number
  /** Charts of the report. */
  series: readonly Series[]
  /** One short progress string of a step's metrics. */
  describe(record: R): string
  progress?: (line: string) => void
  /** Set to stop after the current step (checkpointed). */
  stopRequested?: () => boolean
}

export interface DriveResult {
  stepsRun: number
  stoppedEarly: boolean
  accuracyBefore: number | null
  accuracyAfter: number | null
  seconds: number
}

function duration(s: number): string {
  if (!Number.isFinite(s)) return '?'
  const m = Math.floor(s / 60)
  return m ? `${m}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${s.toFixed(0)}s`
}

export async function drive<C extends BaseMethodConfig, R extends BaseStepRecord>(run: MethodRun<C, R>, o: DriveOptions<R>): Promise<DriveResult> {
  const keep = o.keep ?? DEFAULT_KEEP
  if (!Number.isInteger(keep) || keep < 1) throw new RangeError(`keep must be an integer ≥ 1, got ${keep}`)
  await mkdir(o.outDir, { recursive: true }).catch((e) => {
    throw fileWriteError(e, o.outDir)
  })
  const metricsFile = join(o.outDir, METRICS_FILE)
  await truncateMetrics(metricsFile, run.step)
  const started = Date.now()
  const write = (line: object) =>
    appendFile(metricsFile, JSON.stringify(line) + '\n').catch((e) => {
      throw fileWriteError(e, metricsFile)
    })
  let before: number | null = null
  if (run.step === 0) {
    before = await run.evaluate()
    await write({ step: 0, heldOutAccuracy: before })
  }
  let stoppedEarly = false
  let ran = 0
  let lastCheckpoint = run.step
  const save = async () => {
    const dir = checkpointDir(o.outDir, run.step)
    await run.checkpoint(dir)
    await writeLatest(o.outDir, o.method, run.step, dir)
    await pruneCheckpoints(join(o.outDir, CHECKPOINTS_DIR), keep, dir)
    lastCheckpoint = run.step
  }
  while (run.step < o.totalSteps) {
    const record = await run.runStep()
    ran++
    if (run.step % o.evalEvery === 0 || run.step === o.totalSteps) record.heldOutAccuracy = await run.evaluate()
    await write(record)
    const elapsed = (Date.now() - started) / 1000
    const eta = (elapsed / ran) * (o.totalSteps - run.step)
    const bar = '█'.repeat(Math.round((20 * run.step) / o.totalSteps)).padEnd(20, '░')
    o.progress?.(`[${o.method}] step ${run.step}/${o.totalSteps} ${bar} ${o.describe(record)} ${(record.generatedTokens / record.seconds).toFixed(0)} tok/s ETA ${duration(eta)}`)
    if (run.step % o.checkpointEvery === 0 || run.step === o.totalSteps) await save()
    if (o.stopRequested?.()) {
      stoppedEarly = run.step < o.totalSteps
      break
    }
  }
  if (lastCheckpoint !== run.step) await save()
  const { rows } = await readMetrics(metricsFile)
  const accuracies = rows.filter((r) => typeof r.heldOutAccuracy === 'number')
  const first = accuracies[0]?.heldOutAccuracy as number | undefined
  const last = accuracies.at(-1)?.heldOutAccuracy as number | undefined
  const seconds = (Date.now() - started) / 1000
  await writeFile(
    join(o.outDir, 'report.html'),
    renderReport(`autodidact evolve --method ${o.method}`, rows, [...o.series], {
      'steps': `${run.step} of ${o.totalSteps}${stoppedEarly ? ' (stopped early; resume with --resume)' : ''}`,
      'held-out accuracy': `${first?.toFixed(3) ?? '?'} → ${last?.toFixed(3) ?? '?'}`,
      'wall time of this session': duration(seconds),
      'metrics': METRICS_FILE,
    }),
  ).catch((e) => {
    throw fileWriteError(e, join(o.outDir, 'report.html'))
  })
  return { stepsRun: ran, stoppedEarly, accuracyBefore: before ?? first ?? null, accuracyAfter: last ?? null, seconds }
}
