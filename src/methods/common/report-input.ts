// What the run report needs from a run folder beyond metrics.jsonl: the per-question evaluations
// under evals/ (n, bootstrap intervals, the paired before/after change, the protocol), the
// checkpoint's run_state.json (base model, config, world) and the folder of the trained model in
// the checkpoint (the role the held-out accuracy is measured on: `model/`, or `solver/` for the
// methods with several roles). A file that cannot be read is left out with a note, never a crash:
// the report is written at the end of a run whose real outputs are already on disk.
import { existsSync } from 'node:fs'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { EvaluationDetail, EvaluationProtocol } from '../../report/index.js'
import { EVALS_DIR, validateEvalRecord, type EvalRecord } from './evaluation.js'
import { RUN_STATE_FILE } from './checkpoint.js'

/** Roles whose folder is the run's trained model, in order of preference (the role evaluated on held-out questions). */
const EVALUATED_ROLES = ['model', 'solver']
/** The Solver's adapter name in every method's role adapters (COSE, R-Zero, J-Zero). */
const SOLVER_ADAPTER = 'solver'

export interface RunEvaluations {
  records: EvalRecord[]
  /** Files left out (unreadable or not eval files), one line each. */
  skipped: string[]
}

/** Every evaluation under `<run>/evals/`, by step. */
export async function readRunEvaluations(outDir: string): Promise<RunEvaluations> {
  const dir = join(outDir, EVALS_DIR)
  if (!existsSync(dir)) return { records: [], skipped: [] }
  const records: EvalRecord[] = []
  const skipped: string[] = []
  for (const name of (await readdir(dir)).filter((f) => /^step-\d+\.json$/.test(f)).sort()) {
    const file = join(dir, name)
    try {
      records.push(validateEvalRecord(JSON.parse(await readFile(file, 'utf8')), file))
    } catch (e) {
      skipped.push(`${file} left out of the report: ${(e as Error).message}`)
    }
  }
  return { records: records.sort((a, b) => a.step - b.step), skipped }
}

/** Per question over every benchmark, the fraction of its responses right (greedy: 0 or 1). */
export function perQuestion(r: EvalRecord): number[] {
  return r.benchmarks.flatMap((b) => b.items.map((it) => it.correct.reduce((s, x) => s + x, 0) / it.correct.length))
}

/** An eval record as the report's per-question detail. */
export function evaluationDetail(r: EvalRecord): EvaluationDetail {
  return {
    step: r.step,
    correct: perQuestion(r),
    ids: r.benchmarks.flatMap((b) => b.items.map((it) => `${b.name}/${it.id}`)),
    benchmarks: r.benchmarks.flatMap((b) => b.items.map(() => b.name)),
  }
}

/** The protocol in words and the benchmarks with their sizes. */
export function evaluationProtocol(r: EvalRecord): EvaluationProtocol {
  const p = r.protocol
  const protocol =
    p.temperature === 0 && p.samples === 1
      ? `greedy decoding, 1 response per question, at most ${p.maxTokens} tokens`
      : `mean@${p.samples} of sampled responses (temperature ${p.temperature}, top-p ${p.topP}, at most ${p.maxTokens} tokens)`
  return { protocol, benchmarks: r.benchmarks.map((b) => ({ name: b.name, n: b.items.length })) }
}

export interface CheckpointFacts {
  baseModel: string | null
  config: unknown
  world: string | null
}

/** Base model, config and world from a checkpoint's run_state.json (nulls where it lacks them or cannot be read). */
export async function checkpointFacts(checkpoint: string): Promise<CheckpointFacts> {
  try {
    const s = JSON.parse(await readFile(join(checkpoint, RUN_STATE_FILE), 'utf8')) as Record<string, unknown>
    const world = s.world as { name?: unknown } | undefined
    return { baseModel: typeof s.baseModel === 'string' ? s.baseModel : null, config: s.config ?? null, world: typeof world?.name === 'string' ? world.name : null }
  } catch {
    return { baseModel: null, config: null, world: null }
  }
}

export interface TrainedModel {
  dir: string
  /** 'model': a full Hugging Face folder (serve / export load it); 'adapter': a PEFT LoRA adapter over the base model. */
  kind: 'model' | 'adapter'
}

/**
 * The folder of the trained model in a checkpoint, or null when it holds none. With role adapters
 * (one base, an adapter per role in the role folder's sub-folders) it is the Solver's adapter.
 */
export function trainedModelIn(checkpoint: string): TrainedModel | null {
  for (const role of EVALUATED_ROLES) {
    const dir = join(checkpoint, role)
    if (existsSync(join(dir, 'config.json'))) return { dir, kind: 'model' }
    if (existsSync(join(dir, 'adapter_config.json'))) return { dir, kind: 'adapter' }
    if (existsSync(join(dir, SOLVER_ADAPTER, 'adapter_config.json'))) return { dir: join(dir, SOLVER_ADAPTER), kind: 'adapter' }
  }
  return null
}
