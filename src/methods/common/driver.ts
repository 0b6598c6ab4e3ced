// Runs a method's loop with the conventions every `autodidact evolve` shares: a JSONL metrics
// line per step, held-out accuracy before, every N steps and after, checkpoints that resume
// exactly, Ctrl-C → checkpoint and clean exit, a progress line on stderr, an HTML report.
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { writeFileAtomic } from '../../engine/hf/atomic.js'
import { renderReport, type Series } from './report.js'

export interface MethodRun<R extends { step: number; seconds: number; generatedTokens: number }> {
  readonly step: number
  runStep(): Promise<R>
  evaluate(): Promise<number>
  checkpoint(dir: string): Promise<void>
}

export interface DriveOptions {
  outDir: string
  method: string
  totalSteps: number
  evalEvery: number
  checkpointEvery: number
  /** Charts of the report. */
  series: Series[]
  /** One short progress string of a step's metrics. */
  describe(record: Record<string, unknown>): string
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

export const METRICS_FILE = 'metrics.jsonl'
export const LATEST_FILE = 'latest.json'

export function checkpointDir(outDir: string, step: number): string {
  return join(outDir, 'checkpoints', `step-${String(step).padStart(6, '0')}`)
}

/** Keeps only the metrics lines of steps ≤ `step` (a resumed run rewrites what follows). */
async function truncateMetrics(file: string, step: number): Promise<void> {
  if (!existsSync(file)) return
  const keep = (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim() && (JSON.parse(l) as { step: number }).step <= step)
  await writeFile(file, keep.map((l) => l + '\n').join(''))
}

function duration(s: number): string {
  if (!Number.isFinite(s)) return '?'
  const m = Math.floor(s / 60)
  return m ? `${m}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${s.toFixed(0)}s`
}

export async function drive<R extends { step: number; seconds: number; generatedTokens: number }>(run: MethodRun<R>, o: DriveOptions): Promise<DriveResult> {
  await mkdir(o.outDir, { recursive: true })
  const metricsFile = join(o.outDir, METRICS_FILE)
  await truncateMetrics(metricsFile, run.step)
  const started = Date.now()
  const write = (line: Record<string, unknown>) => appendFile(metricsFile, JSON.stringify(line) + '\n')
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
    await writeFileAtomic(join(o.outDir, LATEST_FILE), JSON.stringify({ method: o.method, step: run.step, checkpoint: dir }) + '\n')
    lastCheckpoint = run.step
  }
  while (run.step < o.totalSteps) {
    const record = (await run.runStep()) as R & { heldOutAccuracy?: number }
    ran++
    if (run.step % o.evalEvery === 0 || run.step === o.totalSteps) record.heldOutAccuracy = await run.evaluate()
    await write(record as unknown as Record<string, unknown>)
    const elapsed = (Date.now() - started) / 1000
    const eta = (elapsed / ran) * (o.totalSteps - run.step)
    const bar = '█'.repeat(Math.round((20 * run.step) / o.totalSteps)).padEnd(20, '░')
    o.progress?.(`[${o.method}] step ${run.step}/${o.totalSteps} ${bar} ${o.describe(record as unknown as Record<string, unknown>)} ${(record.generatedTokens / record.seconds).toFixed(0)} tok/s ETA ${duration(eta)}`)
    if (run.step % o.checkpointEvery === 0 || run.step === o.totalSteps) await save()
    if (o.stopRequested?.()) {
      stoppedEarly = run.step < o.totalSteps
      break
    }
  }
  if (lastCheckpoint !== run.step) await save()
  const rows = (await readFile(metricsFile, 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>)
  const accuracies = rows.filter((r) => typeof r.heldOutAccuracy === 'number')
  const first = accuracies[0]?.heldOutAccuracy as number | undefined
  const last = accuracies.at(-1)?.heldOutAccuracy as number | undefined
  const seconds = (Date.now() - started) / 1000
  await writeFile(
    join(o.outDir, 'report.html'),
    renderReport(`autodidact evolve --method ${o.method}`, rows, o.series, {
      'steps': `${run.step} of ${o.totalSteps}${stoppedEarly ? ' (stopped early; resume with --resume)' : ''}`,
      'held-out accuracy': `${first?.toFixed(3) ?? '?'} → ${last?.toFixed(3) ?? '?'}`,
      'wall time of this session': duration(seconds),
      'metrics': METRICS_FILE,
    }),
  )
  return { stepsRun: ran, stoppedEarly, accuracyBefore: before ?? first ?? null, accuracyAfter: last ?? null, seconds }
}
