// The run folder every `autodidact evolve` writes:
//   metrics.jsonl            one JSON line per step (step 0: the held-out accuracy before training)
//   latest.json              { method, step, checkpoint } — the checkpoint path relative to the run
//                            folder, so a moved or copied run folder (or a relative --out) resumes
//   checkpoints/step-NNNNNN  complete checkpoints (checkpoint.ts), the newest `keep` of them kept
//   report.html
// Reading any of it is hostile-input safe: a corrupt or hostile file is a CheckpointError naming
// it, never a raw SyntaxError/TypeError/ENOENT.
import { existsSync } from 'node:fs'
import { readdir, readFile, rename, rm, truncate } from 'node:fs/promises'
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { CheckpointError } from '../../engine/errors.js'
import { writeJsonAtomic } from '../../util/atomic.js'

export const METRICS_FILE = 'metrics.jsonl'
export const LATEST_FILE = 'latest.json'
export const CHECKPOINTS_DIR = 'checkpoints'
/** Checkpoints kept by default (the one latest.json names is never pruned). */
export const DEFAULT_KEEP = 3
/** No run takes more steps than this: a larger count in a file is corruption. */
export const MAX_STEPS = 1_000_000_000

const CHECKPOINT_NAME = /^step-(\d{6,})$/
/** Folders a checkpoint leaves while it is written (`.tmp-PID`) or replaced (`.old-PID`). */
const TRANSIENT_NAME = /^(step-\d{6,})\.(tmp|old)-(\d+)$/

export function checkpointDir(outDir: string, step: number): string {
  return join(outDir, CHECKPOINTS_DIR, `step-${String(step).padStart(6, '0')}`)
}

/** A step count read from a file: an integer in [0, MAX_STEPS], else a CheckpointError. */
export function checkedStep(v: unknown, file: string, field = 'step'): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_STEPS)
    throw new CheckpointError(file, field, 'field', `${file}: ${field} must be an integer in [0, ${MAX_STEPS}], got ${JSON.stringify(v) ?? String(v)}`)
  return v
}

/** A JSON object from a file, or a CheckpointError ('missing' or 'json'). */
export async function readJsonObject(file: string): Promise<Record<string, unknown>> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (e) {
    throw new CheckpointError(file, null, 'missing', `${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, { cause: e })
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (e) {
    throw new CheckpointError(file, null, 'json', `${file}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new CheckpointError(file, null, 'json', `${file}: expected a JSON object`)
  return parsed as Record<string, unknown>
}

export interface Latest {
  method: string
  step: number
  /** Absolute path of the checkpoint folder. */
  checkpoint: string
}

function inside(parent: string, child: string): boolean {
  const r = relative(parent, child)
  return r !== '' && !r.startsWith('..') && !isAbsolute(r)
}

/** Records the run's latest checkpoint, its path relative to the run folder. */
export async function writeLatest(outDir: string, method: string, step: number, checkpoint: string): Promise<void> {
  const rel = relative(resolve(outDir), resolve(checkpoint)).split(sep).join('/')
  await writeJsonAtomic(join(outDir, LATEST_FILE), { method, step, checkpoint: rel })
}

/**
 * The run's latest checkpoint. `isMethod` says whether a name is a registered method (an own
 * entry of the registry: `"__proto__"` is not). The checkpoint must lie in `<outDir>/checkpoints/`;
 * an absolute path from a run folder since moved is looked up there by its folder name.
 */
export async function readLatest(outDir: string, isMethod: (name: string) => boolean): Promise<Latest> {
  const file = join(outDir, LATEST_FILE)
  if (!existsSync(file)) throw new CheckpointError(file, null, 'missing', `${outDir} has no ${LATEST_FILE}: not a run folder with a checkpoint`)
  const j = await readJsonObject(file)
  const method = j.method ?? 'cose' // run folders written before the registry named the method
  if (typeof method !== 'string' || !isMethod(method)) throw new CheckpointError(file, 'method', 'method', `${file}: unknown method ${JSON.stringify(method)}`)
  const step = checkedStep(j.step, file)
  if (typeof j.checkpoint !== 'string' || !j.checkpoint) throw new CheckpointError(file, 'checkpoint', 'field', `${file}: checkpoint must be a path`)
  const root = join(resolve(outDir), CHECKPOINTS_DIR)
  let checkpoint = resolve(outDir, j.checkpoint)
  if (!inside(root, checkpoint) && isAbsolute(j.checkpoint)) checkpoint = join(root, basename(j.checkpoint)) // moved run folder
  if (!inside(root, checkpoint) || !CHECKPOINT_NAME.test(basename(checkpoint)))
    throw new CheckpointError(file, 'checkpoint', 'path', `${file}: checkpoint ${JSON.stringify(j.checkpoint)} is not a checkpoint folder of this run (${CHECKPOINTS_DIR}/step-NNNNNN)`)
  return { method, step, checkpoint }
}

/** Is process `pid` alive? (EPERM: alive, someone else's.) */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * Removes what interrupted checkpoints left in `checkpoints/`: `step-N.tmp-PID` and
 * `step-N.old-PID` folders of processes no longer running (or of this one, between its own writes).
 */
export async function removeStaleTransients(checkpointsDir: string): Promise<string[]> {
  if (!existsSync(checkpointsDir)) return []
  const removed: string[] = []
  for (const name of await readdir(checkpointsDir)) {
    const m = TRANSIENT_NAME.exec(name)
    if (!m) continue
    const pid = Number(m[3])
    if (pid !== process.pid && alive(pid)) continue
    await rm(join(checkpointsDir, name), { recursive: true, force: true })
    removed.push(name)
  }
  return removed
}

/**
 * Brings back a checkpoint that an interrupted replacement left only under a transient name
 * (checkpoint.ts renames the old folder aside before renaming the new one in): the complete new
 * one if it is there, else the old one.
 */
export async function recoverCheckpoint(dir: string, isComplete: (candidate: string) => boolean): Promise<boolean> {
  if (existsSync(dir)) return true
  const parent = join(dir, '..')
  if (!existsSync(parent)) return false
  const names = (await readdir(parent)).filter((n) => TRANSIENT_NAME.exec(n)?.[1] === basename(dir))
  const pick = names.find((n) => n.includes('.tmp-') && isComplete(join(parent, n))) ?? names.find((n) => n.includes('.old-') && isComplete(join(parent, n)))
  if (!pick) return false
  await rename(join(parent, pick), dir)
  return true
}

/** Removes all but the newest `keep` checkpoints; `protect` (the one latest.json names, the best evaluated one) is never removed. */
export async function pruneCheckpoints(checkpointsDir: string, keep: number, protect: string | readonly string[]): Promise<string[]> {
  const protectedDirs = new Set((typeof protect === 'string' ? [protect] : protect).map((p) => resolve(p)))
  if (!existsSync(checkpointsDir)) return []
  const steps = (await readdir(checkpointsDir))
    .map((name) => ({ name, m: CHECKPOINT_NAME.exec(name) }))
    .filter((x) => x.m)
    .map((x) => ({ name: x.name, step: Number(x.m![1]) }))
    .sort((a, b) => b.step - a.step)
  const removed: string[] = []
  for (const { name } of steps.slice(keep)) {
    if (protectedDirs.has(resolve(checkpointsDir, name))) continue
    await rm(join(checkpointsDir, name), { recursive: true, force: true })
    removed.push(name)
  }
  return removed
}

export type MetricsRow = Record<string, unknown> & { step: number }

/**
 * The metrics lines of `file` and the byte length of its whole lines. A last line without its
 * newline (a write the process did not finish) is left out: it is torn, not corrupt. Any other
 * line that is not a JSON object with a step is a CheckpointError naming the line.
 */
export async function readMetrics(file: string): Promise<{ rows: MetricsRow[]; lineEnds: number[]; torn: boolean }> {
  if (!existsSync(file)) return { rows: [], lineEnds: [], torn: false }
  const buf = await readFile(file)
  const rows: MetricsRow[] = []
  const lineEnds: number[] = []
  let start = 0
  let torn = false
  let line = 0
  while (start < buf.length) {
    const nl = buf.indexOf(0x0a, start)
    const end = nl < 0 ? buf.length : nl
    line++
    const text = buf.subarray(start, end).toString('utf8').trim()
    if (nl < 0) {
      torn = true // the last write stopped mid-line
      break
    }
    if (text) {
      let row: unknown
      try {
        row = JSON.parse(text)
      } catch (e) {
        throw new CheckpointError(file, `line ${line}`, 'metrics', `${file}: line ${line} is not valid JSON (${(e as Error).message})`, { cause: e })
      }
      if (row === null || typeof row !== 'object' || Array.isArray(row)) throw new CheckpointError(file, `line ${line}`, 'metrics', `${file}: line ${line} is not a metrics record`)
      checkedStep((row as { step?: unknown }).step, file, `line ${line}: step`)
      rows.push(row as MetricsRow)
      lineEnds.push(end + 1)
    }
    start = end + 1
  }
  return { rows, lineEnds, torn }
}

/**
 * Cuts metrics.jsonl back to the lines of steps ≤ `step` (a resumed run rewrites what follows) and
 * to its last whole line. Reads and checks the whole file before it changes a byte.
 */
export async function truncateMetrics(file: string, step: number): Promise<void> {
  const { rows, lineEnds, torn } = await readMetrics(file)
  const keep = rows.findIndex((r) => r.step > step)
  const cut = keep < 0 ? (lineEnds.at(-1) ?? 0) : keep === 0 ? 0 : lineEnds[keep - 1]
  if (keep >= 0 || torn) await truncate(file, cut)
}
