// The offline response pool (UID §4.3, B.1 "Offline scoring", B.3, C.1): k responses per training
// prompt from the frozen base model with the sampling pass's top-K statistics (the generating
// model is the scoring model, so no rescoring pass is needed), a calibration fitted on a disjoint
// unlabeled split, and per prompt the deduplicated, complete, UID-eligible, verifier-correct
// responses with their calibrated SC, UID-Conj and UID-Mix scores. Pairs and weights derive from it.
// It also keeps a few distinct complete wrong responses per prompt, for the right-vs-wrong DPO
// control (outside the paper) alone.
import { existsSync } from 'node:fs'
import { mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ConfigError } from '../../engine/errors.js'
import { writeJsonAtomic } from '../../util/atomic.js'
import type { Policy } from '../common/policy.js'
import { auxPreferencePair, auxSftWeights, randomPreferencePair } from '../../rl/offline.js'
import type { UidCalibration } from '../../signals/calibration.js'
import { Rng } from '../../util/prng.js'
import { samplePools } from '../solving/selection.js'
import { calibratedScores, fitCalibrationOn, isScoreEligible } from '../solving/selectors.js'
import type { TaskWorld } from '../../worlds/types.js'
import { RIGHT_VS_WRONG, RIGHT_VS_WRONG_ALL, RIGHT_VS_WRONG_ARMS, type OfflineConfig, type PoolConfig, type ScoreMethod } from './config.js'

export interface PoolResponse {
  text: string
  /** Completion token ids as sampled (end-of-sequence token included). */
  completion: number[]
  scores: Record<ScoreMethod, number>
  /** Diagnostics only: the world's trace-validity proxy (null when unknown). */
  valid: boolean | null
}

/** A complete response the verifier marks wrong (the right-vs-wrong control's rejected side). */
export interface WrongResponse {
  text: string
  completion: number[]
  valid: boolean | null
}

export interface PoolPrompt {
  id: string
  question: string
  /** Eligible correct responses, distinct strings, in generation order. */
  responses: PoolResponse[]
  /** Up to WRONG_KEPT distinct complete wrong responses, in generation order (absent from version-2 pools). */
  wrong?: WrongResponse[]
}

export interface ResponsePool {
  format: 'autodidact.uid-pool'
  /** 3 keeps wrong responses; 2 (read, never written) does not. */
  version: 2 | 3
  model: string
  /** The task world whose prompts and verifier built it. */
  world: string
  config: PoolConfig
  calibration: UidCalibration
  prompts: PoolPrompt[]
  stats: { sampled: number; complete: number; correct: number; eligibleCorrect: number; distinctEligibleCorrect: number }
}

export const POOL_FILE = 'pool.json'
/** Wrong responses kept per prompt: the control draws one. */
export const WRONG_KEPT = 4

export async function buildPool(model: Policy, world: TaskWorld, p: PoolConfig): Promise<ResponsePool> {
  const train = world.data.trainingProblems({ seed: p.seed, count: p.prompts, level: p.level })
  const taken = new Set(train.map((t) => t.question))
  const calibrationItems = world.data.trainingProblems({ seed: `${p.seed}-calibration`, count: p.calibrationPrompts, level: p.level }).filter((c) => !taken.has(c.question)) // disjoint splits (C.1)
  const sampling = { n: p.k, temperature: p.temperature, topP: p.topP, maxTokens: p.maxTokens, seed: 11, scoring: p.scoring }
  const poolPrompt = (q: string) => world.solve.poolPrompt(q) // UID Tables 17–18
  const calibration = fitCalibrationOn(await samplePools(model, world, calibrationItems, sampling, 10_000_000, poolPrompt))
  const pools = await samplePools(model, world, train, sampling, 0, poolPrompt)
  const stats = { sampled: 0, complete: 0, correct: 0, eligibleCorrect: 0, distinctEligibleCorrect: 0 }
  const prompts: PoolPrompt[] = []
  for (const [qi, group] of pools.entries()) {
    const item = train[qi]
    const scores = calibratedScores(calibration, group)
    const seen = new Set<string>()
    const responses: PoolResponse[] = []
    const wrong: WrongResponse[] = []
    group.forEach((t, i) => {
      stats.sampled++
      if (t.complete) stats.complete++
      const correct = t.complete && world.verifier.verify(item, t.text)
      if (correct) stats.correct++
      else if (t.complete && wrong.length < WRONG_KEPT && !wrong.some((w) => w.text === t.text))
        wrong.push({ text: t.text, completion: t.tokenIds, valid: world.verifier.traceValid?.(t.text) ?? null })
      // UID B.1 eligibility for training: complete, UID-eligible, correct, finite scores for every method
      if (!correct || !isScoreEligible(t) || scores.sc[i] === null || scores.conj[i] === null || scores.mix[i] === null) return
      stats.eligibleCorrect++
      if (seen.has(t.text)) return // UID B.3: identical response strings are deduplicated within a prompt
      seen.add(t.text)
      responses.push({ text: t.text, completion: t.tokenIds, scores: { sc: scores.sc[i]!, 'uid-conj': scores.conj[i]!, 'uid-mix': scores.mix[i]! }, valid: world.verifier.traceValid?.(t.text) ?? null })
    })
    stats.distinctEligibleCorrect += responses.length
    prompts.push({ id: item.id, question: item.question, responses, wrong })
  }
  return { format: 'autodidact.uid-pool', version: 3, model: model.dir, world: world.name, config: p, calibration, prompts, stats }
}

function isPool(x: unknown): x is ResponsePool {
  const p = x as Partial<ResponsePool> | null
  if (p === null || typeof p !== 'object' || p.format !== 'autodidact.uid-pool' || (p.version !== 2 && p.version !== 3) || !Array.isArray(p.prompts) || typeof p.config !== 'object') return false
  // version 3 holds each prompt's wrong responses (the right-vs-wrong controls index into them)
  return p.version === 2 || p.prompts.every((q) => q !== null && typeof q === 'object' && Array.isArray(q.wrong) && Array.isArray(q.responses))
}

/** A pool file, or a ConfigError naming it (unreadable, not JSON, not a response pool). */
export async function readPool(file: string): Promise<ResponsePool> {
  let parsed: unknown
  try {
    parsed = JSON.parse(await readFile(file, 'utf8'))
  } catch (e) {
    throw new ConfigError(file, null, `${file}: cannot read the response pool (${(e as Error).message})`, { cause: e })
  }
  if (!isPool(parsed)) throw new ConfigError(file, null, `${file}: not a response pool`)
  return parsed
}

/** Where the pool of `c` lives: its pool.dir, else pool/ in the run folder `outDir` (nothing is written outside it). */
export function poolDirOf(c: OfflineConfig, outDir: string | undefined): string {
  if (c.pool.dir) return c.pool.dir
  if (outDir === undefined) throw new ConfigError('(config)', 'pool.dir', "(config): pool.dir: '' puts the pool in the run folder, and this run has none: name a pool folder")
  return join(outDir, 'pool')
}

/** The pool of `c` in `dir` (built there on first use). */
export async function ensurePool(c: OfflineConfig, model: Policy, world: TaskWorld, dir: string): Promise<{ dir: string; pool: ResponsePool }> {
  const file = join(dir, POOL_FILE)
  if (existsSync(file)) {
    const pool = await readPool(file)
    const want = JSON.stringify({ ...c.pool, dir: '' })
    if (JSON.stringify({ ...pool.config, dir: '' }) !== want || pool.model !== model.dir || pool.world !== world.name)
      throw new ConfigError(file, 'pool', `${file}: the pool there was built with another model, world or pool config; choose another pool.dir`)
    return { dir, pool }
  }
  const pool = await buildPool(model, world, c.pool)
  await mkdir(dir, { recursive: true })
  await writeJsonAtomic(file, pool)
  return { dir, pool }
}

export interface DpoPair {
  prompt: number
  /** Index into the prompt's correct responses. */
  chosen: number
  /** Index into its correct responses, or (rejectedWrong) into its wrong ones. */
  rejected: number
  rejectedWrong?: true
}

/** The two completions of a pair, as the pool holds them. */
export function pairResponses(pool: ResponsePool, pair: DpoPair): { chosen: PoolResponse; rejected: PoolResponse | WrongResponse } {
  const p = pool.prompts[pair.prompt]
  return { chosen: p.responses[pair.chosen], rejected: pair.rejectedWrong ? p.wrong![pair.rejected] : p.responses[pair.rejected] }
}

// UID Eq. 6, B.3: per prompt, max- vs min-score eligible correct responses with gap ≥ minGap, kept
// only on prompts where every method in `common` qualifies; the random control draws two distinct
// responses of the same prompts and orients them at random. The right-vs-wrong controls (outside
// the paper, as TTRL's reference labels) pair a random verified response over a random wrong one,
// so the pair carries what the paper's pairs never do: on the same prompts (those with a wrong
// response), or on every prompt with both (the data a verifier would give DPO).
export function dpoPairs(pool: ResponsePool, arm: string, o: { minGap: number; commonMethods: readonly string[] }, seed: number): DpoPair[] {
  if (RIGHT_VS_WRONG_ARMS.includes(arm) && pool.version < 3)
    throw new ConfigError('(pool)', 'arm', `the '${arm}' control needs a pool that keeps wrong responses (version 3); this one is version ${pool.version}: rebuild it (another pool.dir, or delete its ${POOL_FILE})`)
  const out: DpoPair[] = []
  const rightOverWrong = (p: PoolPrompt, pi: number) => {
    const rng = new Rng(`dpo-right-vs-wrong-${seed}-${p.id}`)
    out.push({ prompt: pi, chosen: rng.nextInt(p.responses.length), rejected: rng.nextInt(p.wrong!.length), rejectedWrong: true })
  }
  pool.prompts.forEach((p, pi) => {
    if (arm === RIGHT_VS_WRONG_ALL) {
      if (p.responses.length && p.wrong!.length) rightOverWrong(p, pi)
      return
    }
    if (p.responses.length < 2) return
    const pairs = new Map<string, { chosen: number; rejected: number } | null>()
    for (const m of o.commonMethods) pairs.set(m, auxPreferencePair(p.responses.map((r) => r.scores[m as ScoreMethod]), { minGap: o.minGap }))
    if ([...pairs.values()].some((x) => x === null)) return
    if (arm === 'random') {
      const r = randomPreferencePair(p.responses.length, new Rng(`dpo-random-${seed}-${p.id}`))!
      out.push({ prompt: pi, chosen: r.chosen, rejected: r.rejected })
    } else if (arm === RIGHT_VS_WRONG) {
      if (p.wrong!.length) rightOverWrong(p, pi)
    } else {
      const pr = pairs.get(arm)
      if (!pr) throw new RangeError(`arm '${arm}' is not among the common pair methods`)
      out.push({ prompt: pi, chosen: pr.chosen, rejected: pr.rejected })
    }
  })
  return out
}

/** UID B.3 warm start data: the deduplicated union of the responses of every arm's pairs. */
export function warmStartExamples(pool: ResponsePool, arms: readonly string[], o: { minGap: number; commonMethods: readonly string[] }, seed: number): Array<{ prompt: number; response: number }> {
  const keys = new Set<string>()
  for (const arm of arms) for (const p of dpoPairs(pool, arm, o, seed)) for (const r of [p.chosen, p.rejected]) keys.add(`${p.prompt}:${r}`)
  return [...keys].map((k) => k.split(':').map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map(([prompt, response]) => ({ prompt, response }))
}

export interface WeightedExample {
  prompt: number
  response: number
  weight: number
}

// UID Eq. 7: w_i = m·exp(αq_i)/Σ_j exp(αq_j) within each prompt (mean 1); uniform: w = 1 on the same responses.
export function wsftExamples(pool: ResponsePool, arm: string, alpha: number): WeightedExample[] {
  const out: WeightedExample[] = []
  pool.prompts.forEach((p, pi) => {
    if (!p.responses.length) return
    const w = arm === 'uniform' ? new Float64Array(p.responses.length).fill(1) : auxSftWeights(p.responses.map((r) => r.scores[arm as ScoreMethod]), alpha)
    p.responses.forEach((_, ri) => out.push({ prompt: pi, response: ri, weight: w[ri] }))
  })
  return out
}

export interface TraceDiagnostics {
  /** DPO: pairs; SFT: examples. */
  count: number
  /** DPO: share of chosen / rejected responses whose trace is valid. */
  chosenValid?: number
  rejectedValid?: number
  /** SFT: weight-averaged share of valid traces (uniform weights: the plain share). */
  weightedValid?: number
}

const validShare = (xs: Array<boolean | null>) => {
  const known = xs.filter((x): x is boolean => x !== null)
  return known.length ? known.filter(Boolean).length / known.length : NaN
}

/** How often a DPO arm prefers the valid trace (the toy analogue of UID §3.3's judged validity). */
export function pairTraceDiagnostics(pool: ResponsePool, pairs: readonly DpoPair[]): TraceDiagnostics {
  return {
    count: pairs.length,
    chosenValid: validShare(pairs.map((p) => pairResponses(pool, p).chosen.valid)),
    rejectedValid: validShare(pairs.map((p) => pairResponses(pool, p).rejected.valid)),
  }
}

/** The share of the SFT weight that lands on valid traces. */
export function weightTraceDiagnostics(pool: ResponsePool, examples: readonly WeightedExample[]): TraceDiagnostics {
  let w = 0
  let v = 0
  for (const e of examples) {
    const valid = pool.prompts[e.prompt].responses[e.response].valid
    if (valid === null) continue
    w += e.weight
    if (valid) v += e.weight
  }
  return { count: examples.length, weightedValid: w > 0 ? v / w : NaN }
}
