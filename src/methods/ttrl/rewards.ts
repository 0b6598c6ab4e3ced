// One prompt group's TTRL rewards (UID §4.2, Eq. 4–5, B.1–B.2.1), pure: majority pseudo-label
// with first-occurrence ties, the arm's within-group scores q, the gated auxiliary term b and
// R = 2g − 1 + λb (or original TTRL's binary g). Advantages are GRPO's (Eq. 16) over the group.
import { permuteAuxTerms, randomAuxScores, combineGatedReward, gatedAuxTerms, ttrlBinaryReward } from '../../rl/ttrl.js'
import { selfCertaintyGroupScoresOnline, uidGroupScoresOnline } from '../../signals/uid.js'
import { agreementMask, majorityVote } from '../../tasks/vote.js'
import type { Rng } from '../../util/prng.js'
import type { Trajectory } from '../solving/trajectory.js'
import type { RewardArm, TtrlConfig } from './config.js'

export interface GroupReward {
  /** Pseudo-label â_x (null: no complete response had an answer). */
  label: string | null
  /** g_i (UID Eq. 4). */
  agree: Uint8Array
  /** The arm's scores q_i (0 for ineligible responses and for original TTRL). */
  q: Float64Array
  /** 1 where the response was ranked by the arm's score. */
  eligible: Uint8Array
  /** The gated, centered, clipped auxiliary terms b_i (after permutation for the permuted control). */
  aux: Float64Array
  /** R_i. */
  rewards: Float64Array
}

const withQ = (g: { scores: Float64Array; eligible: Uint8Array }) => ({ q: g.scores, eligible: g.eligible })

// UID B.1: online scores for one group — SC midranks of mean C_t (≥ 1 token), UID-Conj/Mix
// midrank products/means of (G^on, S^on) (UID-eligible only), seeded U[0,1) for the random control.
export function armScores(arm: RewardArm, group: readonly Trajectory[], rng: Rng): { q: Float64Array; eligible: Uint8Array } {
  const n = group.length
  switch (arm) {
    case 'ttrl':
    case 'reference-label':
      return { q: new Float64Array(n), eligible: new Uint8Array(n) }
    case 'sc':
      return withQ(selfCertaintyGroupScoresOnline(group.map((t) => (Number.isFinite(t.selfCertainty) ? t.selfCertainty : null)), {
        tokenCounts: group.map((t) => t.tokens),
        minTokens: 1,
      }))
    case 'uid-conj':
    case 'permuted-uid':
      return withQ(uidGroupScoresOnline(group.map((t) => t.bins), 'conj'))
    case 'uid-mix':
      return withQ(uidGroupScoresOnline(group.map((t) => t.bins), 'mix'))
    case 'random':
      return { q: randomAuxScores(n, rng), eligible: new Uint8Array(n).fill(1) }
  }
}

/** A prompt's reference answer and the world's answer equivalence: what the reference-label control rewards against. */
export interface ReferenceLabel {
  answer: string
  equivalent: (a: string, b: string) => boolean
}

/** The group's rewards under an arm (UID Eq. 5; B.2: original TTRL keeps 0/1; B.2.1: permutation control; `reference` for the reference-label control). */
export function groupRewards(group: readonly Trajectory[], reward: TtrlConfig['reward'], rng: Rng, reference?: ReferenceLabel): GroupReward {
  if (reward.arm === 'reference-label') return referenceLabelRewards(group, reference)
  const vote = majorityVote(group.map((t) => t.answer)) // UID B.2: first-occurrence ties; scores play no part
  const agree = agreementMask(vote)
  const { q, eligible } = armScores(reward.arm, group, rng)
  if (reward.arm === 'ttrl') return { label: vote.answer, agree, q, eligible, aux: new Float64Array(group.length), rewards: ttrlBinaryReward(agree) }
  let aux = gatedAuxTerms(agree, q, { delta: reward.delta, minAgreeing: reward.minAgreeing })
  if (reward.arm === 'permuted-uid') aux = permuteAuxTerms(aux, agree, rng)
  return { label: vote.answer, agree, q, eligible, aux, rewards: combineGatedReward(agree, aux, reward.lambda) }
}

/** The reference-label control: original TTRL's binary reward with the true answer as the label. */
function referenceLabelRewards(group: readonly Trajectory[], reference: ReferenceLabel | undefined): GroupReward {
  if (!reference) throw new Error("the reference-label arm needs each prompt's reference answer")
  const agree = Uint8Array.from(group, (t) => (t.answer !== null && reference.equivalent(t.answer, reference.answer) ? 1 : 0))
  const none = new Float64Array(group.length)
  return { label: reference.answer, agree, q: none, eligible: new Uint8Array(group.length), aux: none, rewards: ttrlBinaryReward(agree) }
}
