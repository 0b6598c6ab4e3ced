// The J-Zero Judge J_φ: a scalar reward model (a backbone with a score head, HF
// *ForSequenceClassification), σ mapping its raw score to [0, 1] (JZ §3.1), trained with the
// Bradley–Terry loss (Eq. 13) on preference pairs, and measured by pairwise accuracy.
// A critiquing Judge (judge.critiqueTokens > 0; outside JZ, after critique-out-loud reward models)
// first writes its critique of the response with its own LM head, greedily, in the world's Judge
// prompt; its score head then reads the task, the response and that critique. A small backbone that
// can check an answer by writing the check out cannot do it inside one forward pass to the score head.
import { InvalidArgumentError } from '../../engine/errors.js'
import { sigmoid } from '../../train/objectives.js'
import type { TrainSequence } from '../../train/trainer.js'
import type { Policy, PolicyRef, PolicySet } from '../common/policy.js'
import type { JzeroCritique, PreferencePair, TaskWorld } from '../../worlds/types.js'
import type { ScorePair } from '../../engine/model.js'

/** What the Judge functions need of a reward model. */
type Judge = Pick<Policy, 'rewardScores' | 'encodePrompt' | 'tokenizer' | 'generate'>

/** How the Judge reads a response: as it is (JZ, 0), or after writing a critique of up to this many tokens. */
export interface JudgeView {
  critiqueTokens: number
  /** Told how many critique tokens each critiquing call wrote (a run's generated-token count). */
  wrote?: (tokens: number) => void
  /**
   * Critiques already written, by critique prompt: only for a Judge whose writing weights never
   * change (a frozen Judge, or one that trains its score head alone). A greedy critique is the same
   * whatever else is in the batch (the engine's samples are batch-independent), so a kept one is
   * the one the Judge would write again.
   */
  critiqueCache?: Map<string, string>
}

const AS_IS: JudgeView = { critiqueTokens: 0 }

/** A (task, response) item the Judge scores. */
type Judged = { question: string; response: string }

/** Opens a Judge folder into `set` (or the base with a fresh score head, `ref.scoreHead`); it must carry a one-label score head. */
export async function openJudge(set: PolicySet, ref: PolicyRef, world: TaskWorld, view: JudgeView = AS_IS): Promise<Policy> {
  if (view.critiqueTokens > 0) critiqueRoles(world)
  const judge = await set.open(ref)
  if (judge.scoreLabels !== 1)
    throw new InvalidArgumentError('judge', `${ref.model}: a J-Zero Judge must be a *ForSequenceClassification folder with num_labels 1 (a scalar reward model); this one has ${judge.scoreLabels || 'no'} score labels`)
  // a *ForSequenceClassification folder keeps no lm_head: only a tied one can write, here and after a resume
  if (view.critiqueTokens > 0 && judge.config.tieWordEmbeddings === false)
    throw new InvalidArgumentError('judge.critiqueTokens', `${ref.model}: a critiquing Judge writes with its LM head, and a reward-model folder keeps one only when the embeddings are tied (tie_word_embeddings true); this model's are not — set judge.critiqueTokens 0`)
  return judge
}

/** The world's critique roles, or an InvalidArgumentError when it has none. */
function critiqueRoles(world: TaskWorld): JzeroCritique {
  if (!world.jzero.critique) throw new InvalidArgumentError('judge.critiqueTokens', `the '${world.name}' world has no jzero.critique roles (a critique prompt and the score head's view of a critiqued response): set judge.critiqueTokens 0`)
  return world.jzero.critique
}

/**
 * What the score head reads for each item: the world's judgeInput, or with a critique, the Judge's
 * greedy critique of the response first (the world's critique prompt), then the world's view of all three.
 */
export async function judgeInputs(judge: Judge, world: TaskWorld, items: readonly Judged[], view: JudgeView = AS_IS): Promise<ScorePair[]> {
  if (view.critiqueTokens <= 0 || !items.length) return items.map((it) => world.jzero.judgeInput(it.question, it.response))
  const critique = critiqueRoles(world)
  const prompts = items.map((it) => critique.prompt(it.question, it.response))
  const keys = prompts.map((p) => (typeof p === 'string' ? p : JSON.stringify(p)))
  // each distinct prompt written once (within the call, and across calls with a cache)
  const known = view.critiqueCache ?? new Map<string, string>()
  const toWrite = [...new Map(keys.flatMap((k, i) => (known.has(k) ? [] : [[k, prompts[i]] as const]))).entries()]
  if (toWrite.length) {
    const written = await judge.generate(toWrite.map(([, p]) => p), { n: 1, temperature: 0, maxTokens: view.critiqueTokens, seed: 0 })
    view.wrote?.(written.reduce((sum, [c]) => sum + c.tokens.length, 0))
    toWrite.forEach(([k], i) => known.set(k, written[i][0].text))
  }
  return items.map((it, i) => critique.input(it.question, it.response, known.get(keys[i])!))
}

/** The critique cache a J-Zero Judge may keep: one whose writing weights never change (frozen, or score head alone), else none. */
export function critiqueCacheFor(judge: { critiqueTokens: number; scoreHeadOnly: boolean }, trainJudge: boolean): Map<string, string> | undefined {
  return judge.critiqueTokens > 0 && (!trainJudge || judge.scoreHeadOnly) ? new Map() : undefined
}

/** Raw Judge scores J_φ(x, y) of (question, response) pairs. */
export async function rawJudgeScores(judge: Judge, world: TaskWorld, items: readonly Judged[], view: JudgeView = AS_IS): Promise<Float64Array> {
  if (!items.length) return new Float64Array(0)
  const raw = await judge.rewardScores(await judgeInputs(judge, world, items, view))
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
export async function judgeRewards(judge: Judge, world: TaskWorld, items: readonly Judged[], view: JudgeView = AS_IS): Promise<number[]> {
  return Array.from(await rawJudgeScores(judge, world, items, view), judgeReward)
}

/** Each pair's chosen then rejected side as a (task, response) item. */
function pairSides(pairs: readonly PreferencePair[]): Judged[] {
  return pairs.flatMap((p) => [{ question: p.question, response: p.chosen }, { question: p.question, response: p.rejected }])
}

/** Per pair, J(x, y⁺) − J(x, y⁻) (positive: the Judge orders the pair as labelled). */
export async function pairMargins(judge: Judge, world: TaskWorld, pairs: readonly PreferencePair[], view: JudgeView = AS_IS): Promise<number[]> {
  const raw = await rawJudgeScores(judge, world, pairSides(pairs), view)
  return pairs.map((_, i) => raw[2 * i] - raw[2 * i + 1])
}

/** Pairwise accuracy: the fraction of pairs scored chosen > rejected (a tie counts ½); NaN for none. */
export function pairwiseAccuracy(margins: readonly number[]): number {
  if (!margins.length) return NaN
  return margins.reduce((a, m) => a + (m > 0 ? 1 : m === 0 ? 0.5 : 0), 0) / margins.length
}

/**
 * A Bradley–Terry batch (Eq. 13) for the trainer: each pair's chosen and rejected sequence, tokens
 * from the Judge's own tokenizer (with their critiques, written now), and the [chosen, rejected] index pairs.
 */
export async function bradleyTerryBatch(judge: Judge, world: TaskWorld, pairs: readonly PreferencePair[], view: JudgeView = AS_IS): Promise<{ sequences: TrainSequence[]; pairs: [number, number][] }> {
  const inputs = await judgeInputs(judge, world, pairSides(pairs), view)
  const sequences = inputs.map((input): TrainSequence => ({
    prompt: judge.encodePrompt(input.prompt),
    completion: typeof input.completion === 'string' ? judge.tokenizer.encode(input.completion, { addSpecialTokens: false }) : [...input.completion],
  }))
  return { sequences, pairs: pairs.map((_, i): [number, number] => [2 * i, 2 * i + 1]) }
}
