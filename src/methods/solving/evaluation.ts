// Held-out evaluation with per-prompt records (UID §5.1, C.4, D.4): for every benchmark, k sampled
// responses per question and their 0/1 correctness, so that two runs can be compared with the
// paired prompt-cluster bootstrap (`autodidact compare`). Every method of this family writes one
// eval file per evaluated step: `<run>/evals/step-NNNNNN.json` (and `eval.json` inside the
// checkpoint of that step).
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { ConfigError } from '../../engine/errors.js'
import { writeJsonAtomic } from '../../util/atomic.js'
import type { Policy } from '../common/policy.js'
import { heldOutSlice, type Item, type SliceSpec, type SolveWorld } from './world.js'

export interface BenchmarkSpec extends SliceSpec {
  name: string
}

export interface EvalProtocol {
  /** Responses per question (UID C.4: mean accuracy of 5 samples). */
  samples: number
  /** 0 = greedy (then samples must be 1). */
  temperature: number
  topP: number
  maxTokens: number
  seed: number
}

export interface BenchmarkRecord {
  name: string
  items: Array<{ id: string; question: string; answer: string; correct: number[] }>
}

export interface EvalRecord {
  format: 'autodidact.eval'
  version: 1
  step: number
  protocol: EvalProtocol
  benchmarks: BenchmarkRecord[]
}

/** Per-item correctness of `model` on each benchmark under the protocol. */
export async function evaluateBenchmarks(model: Policy, world: SolveWorld, benchmarks: readonly BenchmarkSpec[], p: EvalProtocol, step: number): Promise<EvalRecord> {
  const out: BenchmarkRecord[] = []
  for (const b of benchmarks) {
    const items: Item[] = heldOutSlice(b)
    const groups = await model.generate(items.map((i) => world.prompt(i.question)), {
      n: p.samples,
      temperature: p.temperature,
      topP: p.topP,
      maxTokens: p.maxTokens,
      seed: p.seed,
    })
    out.push({ name: b.name, items: items.map((it, i) => ({ ...it, correct: groups[i].map((c) => (c.finishReason === 'stop' && world.verify(it, c.text) ? 1 : 0)) })) })
  }
  return { format: 'autodidact.eval', version: 1, step, protocol: { ...p }, benchmarks: out }
}

/** Mean accuracy of one benchmark: mean over questions of the mean over its samples (UID C.4 MeanAcc). */
export function benchmarkAccuracy(b: BenchmarkRecord): number {
  if (!b.items.length) return NaN
  let s = 0
  for (const it of b.items) s += it.correct.reduce((a, x) => a + x, 0) / it.correct.length
  return s / b.items.length
}

/** Unweighted mean of the benchmark accuracies (UID §5.1 macro-average). */
export function macroAccuracy(r: EvalRecord): number {
  const accs = r.benchmarks.map(benchmarkAccuracy)
  return accs.reduce((a, x) => a + x, 0) / accs.length
}

export const EVALS_DIR = 'evals'
export const EVAL_FILE = 'eval.json'

export function evalFileName(step: number): string {
  return `step-${String(step).padStart(6, '0')}.json`
}

/** Writes `eval.json`, the evaluation of the checkpoint's own step, into the (temporary) checkpoint folder. */
export async function writeCheckpointEval(checkpointDir: string, step: number, records: readonly EvalRecord[]): Promise<void> {
  const own = records.find((r) => r.step === step)
  if (own) await writeJsonAtomic(join(checkpointDir, EVAL_FILE), own)
}

/** Writes every evaluation since the last checkpoint under `<run>/evals/`, when the checkpoint lies in the driver's `<run>/checkpoints/step-N` layout. */
export async function writeRunEvals(checkpointDir: string, records: readonly EvalRecord[]): Promise<void> {
  const parent = dirname(checkpointDir)
  if (basename(parent) !== 'checkpoints') return
  const evals = join(dirname(parent), EVALS_DIR)
  await mkdir(evals, { recursive: true })
  for (const r of records) await writeJsonAtomic(join(evals, evalFileName(r.step)), r)
}

function bad(file: string, msg: string): never {
  throw new ConfigError(file, null, `${file}: ${msg}`)
}

/** Parses and checks an eval file. */
export function validateEvalRecord(x: unknown, file: string): EvalRecord {
  const r = x as Partial<EvalRecord> | null
  if (!r || typeof r !== 'object' || r.format !== 'autodidact.eval') bad(file, 'not an autodidact eval file (format field)')
  if (r.version !== 1) bad(file, `unsupported eval file version ${String(r.version)}`)
  if (!Array.isArray(r.benchmarks) || !r.benchmarks.length) bad(file, 'no benchmarks')
  for (const b of r.benchmarks) {
    if (typeof b?.name !== 'string' || !Array.isArray(b.items) || !b.items.length) bad(file, 'each benchmark needs a name and items')
    for (const it of b.items) {
      if (typeof it?.id !== 'string' || !Array.isArray(it.correct) || !it.correct.length || !it.correct.every((v) => v === 0 || v === 1))
        bad(file, `benchmark ${b.name}: each item needs an id and 0/1 correctness per sample`)
    }
  }
  return r as EvalRecord
}

/**
 * An eval record from a path: an eval file, or a run folder (its latest `evals/step-*.json`), or
 * `RUN@STEP` for the evaluation of a given step (`RUN@0` is the model before training).
 */
export async function readEvalRecord(path: string): Promise<{ file: string; record: EvalRecord }> {
  let target = path
  let step: number | null = null
  const at = path.lastIndexOf('@')
  if (at > 0 && /^\d+$/.test(path.slice(at + 1))) {
    target = path.slice(0, at)
    step = Number(path.slice(at + 1))
  }
  let file = target
  if (existsSync(join(target, EVALS_DIR))) {
    const files = (await readdir(join(target, EVALS_DIR))).filter((f) => /^step-\d+\.json$/.test(f)).sort()
    if (!files.length) bad(target, 'the run folder has no evaluations')
    file = join(target, EVALS_DIR, step === null ? files.at(-1)! : evalFileName(step))
  } else if (existsSync(join(target, EVAL_FILE))) file = join(target, EVAL_FILE)
  if (!existsSync(file)) bad(file, step === null ? 'no such eval file or run folder' : `no evaluation at step ${step}`)
  let parsed: unknown
  try {
    parsed = JSON.parse(await readFile(file, 'utf8'))
  } catch (e) {
    bad(file, `not valid JSON (${(e as Error).message})`)
  }
  return { file, record: validateEvalRecord(parsed, file) }
}

/** Writes a standalone eval file (e.g. of a base model). */
export async function writeEvalRecord(file: string, r: EvalRecord): Promise<void> {
  await mkdir(dirname(file), { recursive: true })
  await writeJsonAtomic(file, r)
}
