// Challenger rewards of the Challenger–Solver loops: R-Zero's uncertainty reward, the DIS
// composite with multi-solver disagreement (DIS §3, §4.3), and J-Zero's Judge-difficulty reward
// with task selection by score dispersion (JZ Eq. 4–6, 8). Uncertainty, disagreement and the
// repetition penalty themselves live in src/tasks (vote.ts, cluster.ts).

import { disUncertainty, rzeroUncertainty } from '../tasks/vote.js'

export type UncertaintyForm = 'rzero' | 'dis'

/** r_unc in the named form: 'rzero' = 1 − 2|p̂ − ½|, 'dis' = min(p̂, 1 − p̂). */
export function uncertaintyReward(pHat: number, form: UncertaintyForm = 'rzero'): number {
  return form === 'rzero' ? rzeroUncertainty(pHat) : disUncertainty(pHat)
}

export interface RzeroChallengerInput {
  /** The rollout held a parseable question (and answer). */
  parsed: boolean
  /** Solver agreement with its majority answer, p̂. */
  pHat: number
  /** Repetition penalty r_rep of this question (0 when not clustered). */
  rRep: number
}

// R-Zero: r = r_unc(p̂) − r_rep for a parsed question, −1 − r_rep otherwise.
export function rzeroChallengerReward(x: RzeroChallengerInput, opts: { form?: UncertaintyForm } = {}): number {
  return (x.parsed ? uncertaintyReward(x.pHat, opts.form ?? 'rzero') : -1) - x.rRep
}

export interface DisChallengerInput {
  parsed: boolean
  /** r_unc (DIS form min(p̂, 1 − p̂) unless configured otherwise). */
  rUnc: number
  /** r_dis, normalized entropy over the variants' plurality answers. */
  rDis: number
  rRep: number
}

export interface DisChallengerOptions {
  /** α, weight of r_unc (default 1; the value is not given in the DIS text). */
  alpha?: number
  /** β, weight of r_dis (default 1; not given in the DIS text). */
  beta?: number
  /** Reward of a parse failure (default −1, DIS §4.3). */
  failure?: number
}

// DIS §3: r(q) = α·r_unc(q) + β·r_dis(q) − r_rep(q); a parse failure gets −1 (§4.3).
export function disChallengerReward(x: DisChallengerInput, opts: DisChallengerOptions = {}): number {
  if (!x.parsed) return opts.failure ?? -1
  return (opts.alpha ?? 1) * x.rUnc + (opts.beta ?? 1) * x.rDis - x.rRep
}

// JZ Eq. 4: r̄_i = (1/M) Σ_j r^S_{i,j}, the mean Judge score of task i's Solver responses.
export function jzMeanJudgeScore(scores: ArrayLike<number>): number {
  if (scores.length === 0) return NaN
  let s = 0
  for (let j = 0; j < scores.length; j++) s += scores[j]
  return s / scores.length
}

export interface JzChallengerInput {
  /** The rollout passed the <question> format check. */
  formatOk: boolean
  /** r̄_i (JZ Eq. 4); ignored when the format check failed. */
  meanScore: number
  rRep: number
}

// JZ Eq. 6: r^C_i = max(0, 1 − r̄_i − r^rep_i) if the format check passes, −1 − r^rep_i otherwise.
export function jzChallengerReward(x: JzChallengerInput): number {
  return x.formatOk ? Math.max(0, 1 - x.meanScore - x.rRep) : -1 - x.rRep
}

// JZ Eq. 8: s_i = std({r^S_{i,j}}_j); population std by default (ddof 0), sample std with ddof 1.
export function scoreDispersion(scores: ArrayLike<number>, ddof: 0 | 1 = 0): number {
  const n = scores.length
  if (n === 0) return NaN
  if (ddof === 1 && n < 2) return 0
  let m = 0
  for (let j = 0; j < n; j++) m += scores[j]
  m /= n
  let ss = 0
  for (let j = 0; j < n; j++) ss += (scores[j] - m) ** 2
  return Math.sqrt(ss / (n - ddof))
}

// JZ §3.1 task selection: indices of the K tasks with the largest s_i (ties → lower index),
// NaN dispersions never selected.
export function selectTopKByDispersion(dispersions: ArrayLike<number>, K: number): number[] {
  const idx: number[] = []
  for (let i = 0; i < dispersions.length; i++) if (!Number.isNaN(dispersions[i])) idx.push(i)
  idx.sort((a, b) => dispersions[b] - dispersions[a] || a - b)
  return idx.slice(0, Math.max(0, K))
}
