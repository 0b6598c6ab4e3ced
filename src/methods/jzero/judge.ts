// The J-Zero Judge J_φ: a scalar reward model (a backbone with a score head, HF
// *ForSequenceClassification), σ mapping its raw score to [0, 1] (JZ §3.1), trained with the
// Bradley–Terry loss (Eq. 13) on preference pairs, and measured by pairwise accuracy.
import { InvalidArgumentError } from '../../engine/errors.js'
import { sigmoid } from '../../train/objectives.js'
import type { TrainSequence } from '../../train/trainer.js'
import type { Policy, PolicyRef, PolicySet } from '../common/policy.js'
import type { PreferencePair, TaskWorld } from '../../worlds/types.js'

/** What the Judge functions need of a reward model. */
type Judge = Pick<Policy, 'rewardScores' | 'encodePrompt' | 'tokenizer'>

/** Opens a Judge folder into `set` (or the base with a fresh score head, `ref.scoreHead`); it must carry a one-label score head. */
export async function openJudge(set: PolicySet, ref: PolicyRef): Promise<Policy> {
  const judge = await set.open(ref)
  if (judge.scoreLabels !== 1)
    throw new InvalidArgumentError('judge', `${ref.model}: a J-Zero Judge must be a *ForSequenceClassification folder with num_labels 1 (a scalar reward model); this one has ${judge.scoreLabels || 'no'} score labels`)
  return judge
}

/** Raw Judge scores J_φ(x, y) of (question, response) pairs. */
export async function rawJudgeScores(judge: Judge, world: TaskWorld, items: readonly { question: string; response: string }[]): Promise<Float64Array> {
  if (!items.length) return new Float64Array(0)
  const raw = await judge.rewardScores(items.map((it) => world.jzero.judgeInput(it.question, it.response)))
  const out = Float64Array.from(raw)
  out.forEach((s, i) => {
    if (!Number.isFinite(s)) throw new RangeError(`the Judge returned a non-finite score (${s}) for item ${i}`)
  })
  return out
}

// JZ §3.1 / Eq. 2: r^S_{i,j} = σ(J_φ(x_i, y_{i,j})) ∈ [0, 1], the Solver's reward (Eq. 9).
export function judgeReward(raw: number): number {
  return sigmoid(raw)
}

/** σ-mapped Judge scores r^S of (question, response) pairs. */
export async function judgeRewards(judge: Judge, world: TaskWorld, items: readonly { question: string; response: string }[]): Promise<number[]> {
  return Array.from(await rawJudgeScores(judge, world, items), judgeReward)
}

/** Per pair, J(x, y⁺) − J(x, y⁻) (positive: the Judge orders the pair as labelled). */
export async function pairMargins(judge: Judge, world: TaskWorld, pairs: readonly PreferencePair[]): Promise<number[]> {
  const raw = await rawJudgeScores(judge, world, pairs.flatMap((p) => [{ question: p.question, response: p.chosen }, { question: p.question, response: p.rejected }]))
  return pairs.map((_, i) => raw[2 * i] - raw[2 * i + 1])
}

/** Pairwise accuracy: the fraction of pairs scored chosen > rejected (a tie counts ½); NaN for none. */
export function pairwiseAccuracy(margins: readonly number[]): number {
  if (!margins.length) return NaN
  return margins.reduce((a, m) => a + (m > 0 ? 1 : m === 0 ? 0.5 : 0), 0) / margins.length
}

/**
 * A Bradley–Terry batch (Eq. 13) for the trainer: each pair's chosen and rejected sequence, tokens
 * from the Judge's own tokenizer, and the [chosen, rejected] index pairs.
 */
export function bradleyTerryBatch(judge: Judge, world: TaskWorld, pairs: readonly PreferencePair[]): { sequences: TrainSequence[]; pairs: [number, number][] } {
  const sequences: TrainSequence[] = []
  const idx: [number, number][] = []
  for (const p of pairs) {
    for (const response of [p.chosen, p.rejected]) {
      const input = world.jzero.judgeInput(p.question, response)
      const completion = typeof input.completion === 'string' ? judge.tokenizer.encode(input.completion, { addSpecialTokens: false }) : [...input.completion]
      sequences.push({ prompt: judge.encodePrompt(input.prompt), completion })
    }
    idx.push([sequences.length - 2, sequences.length - 1])
  }
  return { sequences, pairs: idx }
}
