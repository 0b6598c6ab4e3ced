// Held-out evaluation with per-prompt records (UID §5.1, C.4, D.4), for every method: on each of the
// world's benchmarks, k responses per question under a protocol (greedy for COSE, R-Zero, J-Zero and
// GRPO; UID's sampled mean@k for TTRL and the offline methods) and their 0/1 correctness, checked by
// the world's verifier (ground truth the loops never see), so that two runs can be compared with the
// paired prompt-cluster bootstrap (`autodidact compare`). Every method writes one eval file per
// evaluated step: `<run>/evals/step-NNNNNN.json` (and `eval.json` inside the checkpoint of that step).
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { ConfigError } from '../../engine/errors.js'
import type { Prompt } from '../../engine/model.js'
import { writeJsonAtomic } from '../../util/atomic.js'
import type { Benchmark, TaskWorld, Verifier } from '../../worlds/types.js'
import type { Policy } from './policy.js'

export interface EvalProtocol {
  /** Responses per question (UID C.4: mean accuracy of 5 samples). */
  samples: number
  /** 0 = greedy (then samples must be 1). */
  temperature: number
  topP: number
  maxTokens: number
  seed: number
}

/** Greedy decoding, one response per question (COSE, R-Zero and J-Zero report greedy held-out accuracy). */
export function greedyProtocol(maxTokens: number): EvalProtocol {
  return { samples: 1, temperature: 0, topP: 1, maxTokens, seed: 0 }
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

/** A benchmark named in a config: all of it, or its first `size` problems. */
export type BenchmarkRef = string | { name: string; size?: number }

/**
 * The benchmarks a run evaluates on: those `refs` names (all of the world's when empty), each cut
 * to its first `size` problems (a ref's own size first). A name the world lacks is a ConfigError
 * naming the ones it has.
 */
export function selectBenchmarks(world: TaskWorld, refs: readonly BenchmarkRef[], size: number, field = 'eval.benchmarks'): Benchmark[] {
  const all = world.data.benchmarks
  if (!all.length) throw new ConfigError('(world)', field, `world '${world.name}' has no benchmarks to evaluate on`)
  const wanted: { name: string; size?: number }[] = refs.length ? refs.map((r) => (typeof r === 'string' ? { name: r } : r)) : all.map((b) => ({ name: b.name }))
  return wanted.map((r) => {
    const b = all.find((x) => x.name === r.name)
    if (!b) throw new ConfigError('(config)', field, `(config): ${field}: '${r.name}' is not a benchmark of world '${world.name}' (${all.map((x) => x.name).join(', ')})`)
    return { name: b.name, problems: b.problems.slice(0, r.size ?? size) }
  })
}

/** How a method's Solver is evaluated: its prompt and the world's verifier. */
export interface Evaluator {
  prompt(question: string): Prompt
  verifier: Pick<Verifier, 'verify'>
}

/** Per-item correctness of `model` on each benchmark under the protocol (a truncated response is wrong, UID C.4). */
export async function evaluateBenchmarks(model: Pick<Policy, 'generate'>, benchmarks: readonly Benchmark[], e: Evaluator, p: EvalProtocol, step: number): Promise<EvalRecord> {
  const out: BenchmarkRecord[] = []
  for (const b of benchmarks) {
    const groups = await model.generate(b.problems.map((it) => e.prompt(it.question)), {
      n: p.samples,
      temperature: p.temperature,
      topP: p.topP,
      maxTokens: p.maxTokens,
      seed: p.seed,
    })
    out.push({
      name: b.name,
      items: b.problems.map((it, i) => ({ id: it.id, question: it.question, answer: it.answer, correct: groups[i].map((c) => (c.finishReason === 'stop' && e.verifier.verify(it, c.text) ? 1 : 0)) })),
    })
  }
  return { format: 'autodidact.eval', version: 1, step, protocol: { ...p }, benchmarks: out }
}

/**
 * The evaluations a run made since its last checkpoint: written into the checkpoint (its own
 * step's, as eval.json) and under `<run>/evals/` when the checkpoint is taken.
 */
export class EvalLog {
  private pending: EvalRecord[] = []

  /** Keeps `r` (replacing an earlier evaluation of the same step); returns its macro accuracy. */
  add(r: EvalRecord): number {
    this.pending = [...this.pending.filter((e) => e.step !== r.step), r]
    return macroAccuracy(r)
  }

  /** The checkpointRun `extra` step: the checkpoint step's evaluation into the temporary folder. */
  intoCheckpoint(tmp: string, step: number): Promise<void> {
    return writeCheckpointEval(tmp, step, this.pending)
  }

  /** After the checkpoint is in place: every pending evaluation under `<run>/evals/`. */
  async flush(checkpointDir: string): Promise<void> {
    await writeRunEvals(checkpointDir, this.pending)
    this.pending = []
  }
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
