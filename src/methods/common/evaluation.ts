// Greedy held-out evaluation of a Solver policy, as COSE, R-Zero and J-Zero report it: the first
// `size` reserved questions of a difficulty level, answered at temperature 0, checked by the
// world's verifier (ground truth the loops themselves never see).
import type { Prompt } from '../../engine/model.js'
import type { Policy } from './policy.js'

/** What greedy evaluation needs of a world. */
export interface HeldOutWorld {
  evalSet(level: number, size: number): { question: string }[]
  solverPrompt(question: string): Prompt
  /** Right (true), wrong (false) or unverifiable (null: counted wrong). */
  verify(question: string, output: string): boolean | null
}

/** Per held-out question: is the greedy answer right? */
export async function greedyVerdicts(policy: Pick<Policy, 'generate'>, world: HeldOutWorld, o: { level: number; size: number; maxTokens: number }): Promise<boolean[]> {
  const items = world.evalSet(o.level, o.size)
  const out = await policy.generate(items.map((i) => world.solverPrompt(i.question)), { temperature: 0, maxTokens: o.maxTokens })
  return out.map((g, i) => world.verify(items[i].question, g[0].text) === true)
}

/** The share of true verdicts. */
export function accuracyOf(verdicts: readonly boolean[]): number {
  return verdicts.filter(Boolean).length / verdicts.length
}
