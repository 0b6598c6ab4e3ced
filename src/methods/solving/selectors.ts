// Best-of-n selectors (UID §3.1, Appendix A.1): majority voting, Self-Certainty, UID-Conj, and the
// Borda-added variants of the two scores, on nested prefixes n ∈ {2, 4, 8} of one sampled pool.
// Scores are calibrated: the robust scale and the empirical midrank CDFs are fitted once on a
// split without labels (complete, UID-eligible responses) and then frozen.
import { InvalidArgumentError } from '../../engine/errors.js'
import { fitUidCalibration, scoreOfflineUid, type UidCalibration } from '../../signals/calibration.js'
import { bordaVote, majorityVote, selectTopScored } from '../../tasks/vote.js'
import type { Trajectory } from './trajectory.js'

export const SELECTORS = ['majority', 'sc', 'uid-conj', 'sc-borda', 'uid-conj-borda'] as const
export type SelectorName = (typeof SELECTORS)[number]

// UID A.1 / B.1 eligibility: complete, non-truncated, with at least the UID token threshold.
export function isScoreEligible(t: Trajectory): boolean {
  return t.complete && t.bins !== null && Number.isFinite(t.selfCertainty)
}

/** Fits the frozen calibration on eligible responses of an unlabeled split (UID A.1, B.1 "Offline scoring"). */
export function fitCalibrationOn(pool: readonly (readonly Trajectory[])[]): UidCalibration {
  const samples = pool.flat().filter(isScoreEligible).map((t) => ({ bins: t.bins!, selfCertainty: t.selfCertainty }))
  if (!samples.length)
    throw new InvalidArgumentError('calibration', `the calibration split gave no eligible response (complete, with the UID token threshold) among ${pool.flat().length}: the model never finished an answer; sample more tokens, or start from a model that finishes its answers`)
  return fitUidCalibration(samples)
}

export interface CalibratedScores {
  /** q_SC = F̂_SC(SC(y)); null when ineligible. */
  sc: (number | null)[]
  /** q_UID-Conj = F̂_G(G)·F̂_S(S). */
  conj: (number | null)[]
  /** q_UID-Mix = (F̂_G(G) + F̂_S(S))/2 (UID D.2). */
  mix: (number | null)[]
}

/** Calibrated scores of each response (UID A.1, Eq. 3, 13–15). */
export function calibratedScores(cal: UidCalibration, group: readonly Trajectory[]): CalibratedScores {
  const out: CalibratedScores = { sc: [], conj: [], mix: [] }
  for (const t of group) {
    if (!isScoreEligible(t)) {
      out.sc.push(null)
      out.conj.push(null)
      out.mix.push(null)
      continue
    }
    const s = scoreOfflineUid(cal, t.bins!, t.selfCertainty)
    out.sc.push(Number.isFinite(s.selfCertainty) ? s.selfCertainty : null)
    out.conj.push(s.conj)
    out.mix.push(s.mix)
  }
  return out
}

/** The answer a selector picks from a pool (null = abstain, counted incorrect). */
export function selectAnswer(name: SelectorName, group: readonly Trajectory[], scores: CalibratedScores): string | null {
  const answers = group.map((t) => t.answer) // incomplete responses carry no answer (A.1)
  switch (name) {
    case 'majority':
      return majorityVote(answers).answer
    case 'sc':
    case 'uid-conj': {
      const i = selectTopScored(name === 'sc' ? scores.sc : scores.conj) // ties → generation order
      return i < 0 ? null : answers[i]
    }
    case 'sc-borda':
      return bordaVote(answers, scores.sc).answer
    case 'uid-conj-borda':
      return bordaVote(answers, scores.conj).answer
  }
}

export interface SelectionTable {
  /** Pool sizes evaluated (nested prefixes). */
  ns: number[]
  /** accuracy[selector][k] on pool size ns[k], plus `mean` over the sizes (UID Table 1). */
  accuracy: Record<SelectorName, { byN: number[]; mean: number }>
  prompts: number
}

/** Accuracy of every selector on nested prefixes of each prompt's pool (UID §3.1, A.1). */
export function evaluateSelectors(
  pools: ReadonlyArray<{ reference: string; group: readonly Trajectory[] }>,
  cal: UidCalibration,
  ns: readonly number[] = [2, 4, 8],
): SelectionTable {
  const maxN = Math.min(...pools.map((p) => p.group.length))
  for (const n of ns) if (!Number.isInteger(n) || n < 1 || n > maxN) throw new RangeError(`pool size ${n} exceeds the ${maxN} responses sampled per prompt`)
  const scored = pools.map((p) => ({ reference: p.reference, group: p.group, scores: calibratedScores(cal, p.group) }))
  const accuracy = {} as SelectionTable['accuracy']
  for (const name of SELECTORS) {
    const byN = ns.map((n) => {
      let right = 0
      for (const p of scored) {
        const prefix = { sc: p.scores.sc.slice(0, n), conj: p.scores.conj.slice(0, n), mix: p.scores.mix.slice(0, n) }
        if (selectAnswer(name, p.group.slice(0, n), prefix) === p.reference) right++
      }
      return right / scored.length
    })
    accuracy[name] = { byN, mean: byN.reduce((a, b) => a + b, 0) / byN.length }
  }
  return { ns: [...ns], accuracy, prompts: pools.length }
}
