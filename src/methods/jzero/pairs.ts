// J-Zero's in-loop preference pairs for the Judge (JZ §3.2), whose order comes from how each
// response was produced, never from the Judge's scores:
//   role asymmetry (Eq. 10):        (y⁺, y⁻) = (y^S, y^C), the Solver's answer over the Challenger's
//                                   answer to the same task under the same answer prompt;
//   subtask amplification (Eq. 11–12): the Challenger decomposes x into subtasks, the Solver answers
//                                   each in context, the Challenger composes: (y⁺, y⁻) = (y^amp, y^S).
// The Judge trains on their union in equal proportions (App. A.2), and we measure how often each
// type's chosen side is right by the world's verifier (the toy counterpart of JZ Figure 2).
import type { Prompt } from '../../engine/model.js'
import type { Rng } from '../../util/prng.js'
import type { PreferencePair, TaskWorld } from '../../worlds/types.js'
import { verifyPosed } from '../common/world.js'

export type PairKind = 'role' | 'amp'

export interface JudgePair extends PreferencePair {
  kind: PairKind
}

// JZ Eq. 10: y^S ≻ y^C — the Solver is trained to answer, the Challenger only to pose.
export function rolePair(question: string, solverResponse: string, challengerResponse: string): JudgePair {
  return { kind: 'role', question, chosen: solverResponse, rejected: challengerResponse }
}

// JZ Eq. 12: y^amp ≻ y^S — the composed answer over the Solver's one-shot answer.
export function ampPair(question: string, amplified: string, oneShot: string): JudgePair {
  return { kind: 'amp', question, chosen: amplified, rejected: oneShot }
}

/** Batched samplers of the three amplification roles: one output per prompt. */
export interface AmplifySamplers {
  /** Decompose_C: the Challenger. */
  decompose(prompts: Prompt[]): Promise<string[]>
  /** y_k^sub ~ S(· | x, q_k): the Solver. */
  subtask(prompts: Prompt[]): Promise<string[]>
  /** Compose_C: the Challenger. */
  compose(prompts: Prompt[]): Promise<string[]>
}

export type Amplification =
  | { ok: true; subtasks: string[]; subAnswers: string[]; response: string }
  | { ok: false; stage: 'decompose' | 'compose'; subtasks: string[] }

export interface AmplifyOptions {
  minSubtasks: number
  maxSubtasks: number
  /** How y^amp is shown to the Judge (see JzeroConfig.judge.ampResponse). */
  ampResponse: 'transcript' | 'compose-output'
}

// JZ Eq. 11: {q_k} = Decompose_C(x); y_k^sub ~ S(· | x, q_k), k = 1..n_x, each subtask seeing the
// answers of the earlier ones; y^amp = Compose_C(x, {(q_k, y_k^sub)}). Subtasks of all tasks are
// answered index by index, one batched call per index. A malformed decomposition or composition
// leaves the task without an amplified answer; a malformed sub-answer becomes '?' for what follows
// (the Compose prompt asks to fix obvious subtask errors).
export async function amplify(world: TaskWorld, questions: readonly string[], samplers: AmplifySamplers, o: AmplifyOptions): Promise<Amplification[]> {
  const roles = world.jzero
  const decompositions = (await samplers.decompose(questions.map((q) => roles.decomposePrompt(q)))).map((out) => roles.parseDecomposition(out, o.minSubtasks, o.maxSubtasks))
  const answers: string[][] = questions.map(() => [])
  const work: (string | null)[][] = questions.map(() => [])
  for (let k = 1; k <= o.maxSubtasks; k++) {
    const open = questions.map((_, i) => i).filter((i) => (decompositions[i]?.length ?? 0) >= k)
    if (!open.length) break
    const outs = await samplers.subtask(open.map((i) => roles.subtaskPrompt(questions[i], k, decompositions[i]![k - 1], answers[i])))
    open.forEach((i, j) => {
      const a = roles.parseSubtaskAnswer(outs[j])
      answers[i].push(a?.answer ?? '?')
      work[i].push(a?.think ?? null)
    })
  }
  const decomposed = questions.map((_, i) => i).filter((i) => decompositions[i] !== null)
  const composed = await samplers.compose(decomposed.map((i) => roles.composePrompt(questions[i], answers[i].map((answer, k) => ({ subtask: decompositions[i]![k], answer })))))
  const out: Amplification[] = questions.map(() => ({ ok: false, stage: 'decompose', subtasks: [] }))
  decomposed.forEach((i, j) => {
    const a = world.answers.parse(composed[j])
    const subtasks = decompositions[i]!
    if (a === null) out[i] = { ok: false, stage: 'compose', subtasks }
    else out[i] = { ok: true, subtasks, subAnswers: answers[i], response: o.ampResponse === 'transcript' ? roles.amplifiedResponse(work[i], a.answer) : composed[j].trim() }
  })
  return out
}

/**
 * D = D_role ∪ D_amp in equal proportions (JZ App. A.2): with both types on, k = min(|D_role|, |D_amp|)
 * pairs of each, drawn at random; with one type switched off (Table 3), all pairs of the other.
 * The union is shuffled.
 */
export function balancedUnion(role: readonly JudgePair[], amp: readonly JudgePair[], use: { role: boolean; amp: boolean }, rng: Rng): JudgePair[] {
  const pick = (xs: readonly JudgePair[], k: number) => rng.shuffle([...xs]).slice(0, k)
  let out: JudgePair[]
  if (use.role && use.amp) {
    const k = Math.min(role.length, amp.length)
    out = [...pick(role, k), ...pick(amp, k)]
  } else out = use.role ? [...role] : use.amp ? [...amp] : []
  return rng.shuffle(out)
}

/** `steps` Bradley–Terry batches of `batch` pairs, cycling through D (an epoch boundary reshuffles). */
export function judgeBatches(pairs: readonly JudgePair[], steps: number, batch: number, rng: Rng): JudgePair[][] {
  if (!pairs.length) return []
  const out: JudgePair[][] = []
  let order = rng.shuffle([...pairs])
  let at = 0
  for (let s = 0; s < steps; s++) {
    const b: JudgePair[] = []
    while (b.length < Math.min(batch, pairs.length)) {
      if (at === order.length) {
        order = rng.shuffle([...pairs])
        at = 0
      }
      b.push(order[at++])
    }
    out.push(b)
  }
  return out
}

export interface WinRate {
  /** Chosen right and rejected wrong by the verifier. */
  wins: number
  /** Chosen wrong and rejected right. */
  losses: number
  /** Both right or both wrong (left out of the rate, as JZ Figure 2 drops ties). */
  ties: number
  /** wins / (wins + losses); NaN when every pair ties. */
  rate: number
}

/** How often the chosen side wins by the world's verifier (JZ Figure 2, with the verifier as the external judge). */
export function verifierWinRate(world: TaskWorld, pairs: readonly PreferencePair[]): WinRate {
  let wins = 0
  let losses = 0
  let ties = 0
  for (const p of pairs) {
    const c = verifyPosed(world, p.question, p.chosen)
    const r = verifyPosed(world, p.question, p.rejected)
    if (c === null || r === null || c === r) ties++
    else if (c) wins++
    else losses++
  }
  return { wins, losses, ties, rate: wins + losses ? wins / (wins + losses) : NaN }
}
