// A selector run (UID §3): sample a pool of n responses per prompt with the per-token top-K
// statistics of the sampling pass, fit the calibration on a disjoint unlabeled split, and measure
// every selector on nested prefixes of the pools.
import type { Policy } from '../common/policy.js'
import type { UidCalibration } from '../../signals/calibration.js'
import { fitCalibrationOn, evaluateSelectors, type SelectionTable } from './selectors.js'
import { trajectoryOf, unscoredTokenIds, type ScoringOptions, type Trajectory } from './trajectory.js'
import { heldOutSlice, trainingQuestions, type Item, type SliceSpec, type SolveWorld } from './world.js'

export interface SelectionOptions {
  /** The evaluated prompts (held-out slice). */
  eval: SliceSpec
  /** Unlabeled calibration prompts (fresh questions, disjoint from every held-out set). */
  calibration: { level: number; size: number; seed: string }
  n: number
  ns: number[]
  temperature: number
  topP: number
  maxTokens: number
  seed: number
  scoring: ScoringOptions
}

/** UID §3.1: 8 responses at T = 0.7, top-p 0.95; calibration on its own split. */
export const DEFAULT_SELECTION: SelectionOptions = {
  eval: { level: 3, offset: 0, size: 100 },
  calibration: { level: 3, size: 50, seed: 'uid-select-calibration' },
  n: 8,
  ns: [2, 4, 8],
  temperature: 0.7,
  topP: 0.95,
  maxTokens: 64,
  seed: 1,
  scoring: { topK: 25, bins: 8, minTokens: 8 },
}

export async function samplePools(model: Policy, world: SolveWorld, items: readonly Item[], o: Pick<SelectionOptions, 'n' | 'temperature' | 'topP' | 'maxTokens' | 'seed' | 'scoring'>, sequenceOffset = 0): Promise<Trajectory[][]> {
  const unscored = unscoredTokenIds(model)
  const groups = await model.generate(items.map((i) => world.prompt(i.question)), {
    n: o.n,
    temperature: o.temperature,
    topP: o.topP,
    maxTokens: o.maxTokens,
    seed: o.seed,
    sequenceOffset,
    stats: { topK: o.scoring.topK },
  })
  return groups.map((g) => g.map((c) => trajectoryOf(c, world, unscored, o.scoring)))
}

export interface SelectionReport {
  options: SelectionOptions
  calibration: UidCalibration
  table: SelectionTable
  /** Share of evaluated responses eligible for scoring. */
  eligibleRate: number
}

export async function runSelection(model: Policy, world: SolveWorld, o: SelectionOptions): Promise<SelectionReport> {
  const items = heldOutSlice(o.eval)
  const calItems = trainingQuestions(o.calibration.seed, o.calibration.level, o.calibration.size)
  const evalSetTexts = new Set(items.map((i) => i.question))
  if (calItems.some((c) => evalSetTexts.has(c.question))) throw new Error('calibration and evaluation prompts overlap') // UID A.1: overlap is checked
  const calPools = await samplePools(model, world, calItems, o, 1_000_000)
  const calibration = fitCalibrationOn(calPools)
  const pools = await samplePools(model, world, items, o)
  const table = evaluateSelectors(items.map((it, i) => ({ reference: it.answer, group: pools[i] })), calibration, o.ns)
  const flat = pools.flat()
  return { options: o, calibration, table, eligibleRate: flat.filter((t) => t.complete && t.bins !== null).length / flat.length }
}
