// J-Zero rewards: the Challenger's composite reward over one batch of tasks (JZ Eq. 4–6, with the
// BLEU-cluster repetition penalty of Eq. 5) and the Solver's Judge reward (Eq. 9). The per-task
// formulas are the toolkit's (src/rl/challenger.ts, src/tasks/cluster.ts); this file applies them
// to a batch.
import { jzChallengerReward, jzMeanJudgeScore } from '../../rl/challenger.js'
import { repetitionPenalty } from '../../tasks/cluster.js'
import { judgeReward } from './judge.js'

export { jzChallengerReward, jzMeanJudgeScore } from '../../rl/challenger.js'

export interface ChallengerBatchInput {
  /** Each task's text, or null when it failed the format check. */
  tasks: ReadonlyArray<string | null>
  /** r^S_{i,j} of each task's M Solver responses (ignored for format failures). */
  scores: ReadonlyArray<ArrayLike<number>>
  tau: number
  lambda: number
}

export interface ChallengerBatchRewards {
  /** r^C_i (Eq. 6). */
  rewards: number[]
  /** r̄_i (Eq. 4); NaN for format failures. */
  meanScores: number[]
  /** r^rep_i (Eq. 5). */
  repetition: number[]
  /** BLEU cluster of each task (−1: not clustered). */
  clusters: number[]
}

// JZ Eq. 4–6 over one Challenger batch: r̄_i, r^rep_i = λ|C_k|/N over BLEU-distance clusters of
// the well-formed tasks, r^C_i = max(0, 1 − r̄_i − r^rep_i), or −1 − r^rep_i on a format failure.
export function challengerBatchRewards(x: ChallengerBatchInput): ChallengerBatchRewards {
  if (x.scores.length !== x.tasks.length) throw new RangeError(`${x.tasks.length} tasks but ${x.scores.length} score lists`)
  const rep = repetitionPenalty(x.tasks, { tau: x.tau, lambda: x.lambda })
  const meanScores = x.tasks.map((t, i) => (t === null ? NaN : jzMeanJudgeScore(x.scores[i])))
  meanScores.forEach((m, i) => {
    if (x.tasks[i] !== null && !Number.isFinite(m)) throw new RangeError(`task ${i}: no finite Judge scores for r̄ (Eq. 4)`)
  })
  const rewards = x.tasks.map((t, i) => jzChallengerReward({ formatOk: t !== null, meanScore: meanScores[i], rRep: rep.penalty[i] }))
  return { rewards, meanScores, repetition: Array.from(rep.penalty), clusters: Array.from(rep.labels) }
}

// JZ Eq. 9: the Solver's reward for a response is the Judge's score σ(J_φ(x, y)).
export function solverReward(rawJudgeScore: number): number {
  return judgeReward(rawJudgeScore)
}
