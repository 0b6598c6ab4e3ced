// The solver ensemble of the disagreement reward (DIS §4.2, §4.5): every variant answers every
// question concurrently, each under its own timeout; a variant that times out or fails is dropped
// from this call and the reward degrades to the variants that responded (§4.5 (i)). Per question:
// each variant's plurality answer a_i (union-find over equivalent answers), the pooled majority
// pseudo-label ỹ and its share p̂ (DIS §3), and r_dis, the normalized entropy over the a_i. Never
// throws for a variant's failure: it is reported with its latency and counted.
import {
  disagreementReward,
  exactEquality,
  majorityShare,
  majorityVote,
  variantPlurality,
  type Answer,
  type Equivalence,
  type VoteResult,
} from '../tasks/vote.js'
import type { Prompt } from '../engine/model.js'
import type { EnsembleVariant, VariantSample, VariantSampleOptions } from './types.js'

export type VariantStatus = 'ok' | 'timeout' | 'error'

export interface EnsembleQueryOptions {
  /** The answer a sample states, or null when it states none (malformed output). */
  extract(text: string): Answer
  /** Equivalence of two extracted answers (default: string identity). */
  equivalent?: Equivalence
  maxTokens: number
  stop?: string[]
  /** Base sampling seed; variant i samples with its own seed derived from it. */
  seed: number
  /** Timeout of variants that set none (milliseconds; default none). */
  timeoutMs?: number
  /** Aborts every variant. */
  signal?: AbortSignal
  /** Extra sampling controls passed to every variant (top-p, stats…). */
  sampling?: Omit<VariantSampleOptions, 'n' | 'temperature' | 'maxTokens' | 'stop' | 'seed' | 'signal'>
  /** Keep the raw samples in the result (default false). */
  keepSamples?: boolean
}

export interface VariantReport {
  name: string
  temperature: number
  k: number
  status: VariantStatus
  /** Wall time from dispatch to answer, timeout or failure. */
  latencyMs: number
  error?: string
  /** answers[q][j]: the j-th extracted answer to question q (null rows when the variant dropped out). */
  answers: Answer[][] | null
  /** a_i per question (DIS §4.2), null when the variant dropped out. */
  pluralities: Answer[] | null
  samples?: VariantSample[][]
}

export interface QuestionVerdict {
  /** Every responding variant's answers, pooled. */
  pooled: Answer[]
  /** Majority vote over the pooled answers: the pseudo-label ỹ. */
  vote: VoteResult
  /** DIS §3: share of the pooled answers agreeing with ỹ (0 when nothing was pooled). */
  pHat: number
  /** a_i of each responding variant, in variant order. */
  pluralities: Answer[]
  /** DIS §4.2: normalized entropy over the responding variants' plurality answers. */
  rDis: number
  /** Variants that responded. */
  responding: number
}

export interface EnsembleResult {
  variants: VariantReport[]
  questions: QuestionVerdict[]
}

/** The seed of variant i: distinct streams for variants that share a model (e.g. one Solver at two temperatures). */
export function variantSeed(seed: number, index: number): number {
  return (seed * 7919 + index * 104_729) % 2_147_483_647
}

class VariantTimeout extends Error {}

/** Resolves with `work`, or rejects with VariantTimeout after `ms` (aborting `controller`). */
function withTimeout<T>(work: Promise<T>, ms: number | undefined, controller: AbortController): Promise<T> {
  if (ms === undefined || !Number.isFinite(ms)) return work
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort()
      reject(new VariantTimeout(`no answer within ${ms} ms`))
    }, ms)
  })
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer))
}

function checkShape(samples: VariantSample[][], questions: number, k: number): string | null {
  if (!Array.isArray(samples) || samples.length !== questions) return `returned ${Array.isArray(samples) ? samples.length : typeof samples} groups for ${questions} prompts`
  for (const g of samples) if (!Array.isArray(g) || g.length !== k || g.some((s) => typeof s?.text !== 'string')) return `returned a group without ${k} text samples`
  return null
}

async function queryVariant(v: EnsembleVariant, index: number, prompts: Prompt[], o: EnsembleQueryOptions): Promise<VariantReport> {
  const started = performance.now()
  const controller = new AbortController()
  const onAbort = () => controller.abort()
  o.signal?.addEventListener('abort', onAbort)
  const base = { name: v.sampler.name, temperature: v.temperature, k: v.k }
  try {
    const work = Promise.resolve().then(() =>
      v.sampler.sample(prompts, { ...o.sampling, n: v.k, temperature: v.temperature, maxTokens: o.maxTokens, stop: o.stop, seed: variantSeed(o.seed, index), signal: controller.signal }),
    )
    const samples = await withTimeout(work, v.timeoutMs ?? o.timeoutMs, controller)
    const latencyMs = performance.now() - started
    const bad = checkShape(samples, prompts.length, v.k)
    if (bad) return { ...base, status: 'error', latencyMs, error: `${v.sampler.name} ${bad}`, answers: null, pluralities: null }
    const answers = samples.map((g) => g.map((s) => safeExtract(o.extract, s.text)))
    const pluralities = answers.map((a) => variantPlurality(a, o.equivalent ?? exactEquality)) // DIS §4.2
    return { ...base, status: 'ok', latencyMs, answers, pluralities, ...(o.keepSamples ? { samples } : {}) }
  } catch (e) {
    const latencyMs = performance.now() - started
    const status: VariantStatus = e instanceof VariantTimeout ? 'timeout' : 'error'
    return { ...base, status, latencyMs, error: `${v.sampler.name}: ${(e as Error)?.message ?? String(e)}`, answers: null, pluralities: null }
  } finally {
    o.signal?.removeEventListener('abort', onAbort)
  }
}

/** Malformed model output is no answer, never a crash. */
function safeExtract(extract: (text: string) => Answer, text: string): Answer {
  try {
    return extract(text)
  } catch {
    return null
  }
}

/** DIS §3, §4.2 for one question over the responding variants. */
export function judgeQuestion(perVariantAnswers: readonly (readonly Answer[])[], equivalent: Equivalence = exactEquality): QuestionVerdict {
  const pooled = perVariantAnswers.flat()
  const vote = majorityVote(pooled, { equivalent })
  const pluralities = perVariantAnswers.map((a) => variantPlurality(a, equivalent))
  return { pooled, vote, pHat: majorityShare(vote), pluralities, rDis: disagreementReward(pluralities, equivalent), responding: perVariantAnswers.length }
}

/** Queries every variant on every prompt concurrently and judges each question (DIS §4.5, Algorithm 1). */
export async function queryEnsemble(variants: readonly EnsembleVariant[], prompts: Prompt[], o: EnsembleQueryOptions): Promise<EnsembleResult> {
  const reports = await Promise.all(variants.map((v, i) => queryVariant(v, i, prompts, o)))
  const ok = reports.filter((r) => r.status === 'ok')
  const questions = prompts.map((_, q) => judgeQuestion(ok.map((r) => r.answers![q]), o.equivalent ?? exactEquality))
  return { variants: reports, questions }
}

export interface VariantStats {
  name: string
  calls: number
  ok: number
  timeouts: number
  errors: number
  meanLatencyMs: number
  maxLatencyMs: number
  lastError?: string
}

/** Latency and failure counts per variant name over one or more ensemble calls (for the metrics line). */
export function variantStats(results: readonly EnsembleResult[]): VariantStats[] {
  const by = new Map<string, VariantStats & { sum: number }>()
  for (const r of results)
    for (const v of r.variants) {
      const s = by.get(v.name) ?? { name: v.name, calls: 0, ok: 0, timeouts: 0, errors: 0, meanLatencyMs: 0, maxLatencyMs: 0, sum: 0 }
      s.calls++
      if (v.status === 'ok') s.ok++
      else if (v.status === 'timeout') s.timeouts++
      else s.errors++
      if (v.error) s.lastError = v.error
      s.sum += v.latencyMs
      s.maxLatencyMs = Math.max(s.maxLatencyMs, v.latencyMs)
      by.set(v.name, s)
    }
  return [...by.values()].map(({ sum, ...s }) => ({ ...s, meanLatencyMs: s.calls ? sum / s.calls : 0 }))
}
