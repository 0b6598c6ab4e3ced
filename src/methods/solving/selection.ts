// A selector run (UID §3): sample a pool of n responses per prompt with the per-token top-K
// statistics of the sampling pass, fit the calibration on a disjoint unlabeled split (fresh
// training problems of the world, checked against the evaluated ones), and measure every selector
// on nested prefixes of the pools.
import { InvalidArgumentError } from '../../engine/errors.js'
import type { Prompt } from '../../engine/model.js'
import type { Policy } from '../common/policy.js'
import type { UidCalibration } from '../../signals/calibration.js'
import { fitCalibrationOn, evaluateSelectors, type SelectionTable } from './selectors.js'
import { trajectoryOf, unscoredTokenIds, type ScoringOptions, type Trajectory } from './trajectory.js'
import type { LabeledProblem, Problem, TaskWorld } from '../../worlds/types.js'

export interface SelectionOptions {
  /** The evaluated prompts: items [offset, offset + size) of one of the world's benchmarks. */
  eval: { benchmark: string; offset: number; size: number }
  /** Unlabeled calibration prompts (fresh training problems, disjoint from every held-out set; `level`: a difficulty hint). */
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
  eval: { benchmark: '', offset: 0, size: 100 },
  calibration: { level: 3, size: 50, seed: 'uid-select-calibration' },
  n: 8,
  ns: [2, 4, 8],
  temperature: 0.7,
  topP: 0.95,
  maxTokens: 64,
  seed: 1,
  scoring: { topK: 25, bins: 8, minTokens: 8 },
}

/** n responses per problem with their trajectories; `prompt` renders a question (default: the world's solver prompt). */
export async function samplePools(
  model: Policy,
  world: TaskWorld,
  items: readonly Problem[],
  o: Pick<SelectionOptions, 'n' | 'temperature' | 'topP' | 'maxTokens' | 'seed' | 'scoring'>,
  sequenceOffset = 0,
  prompt: (question: string) => Prompt = (q) => world.solve.solverPrompt(q),
): Promise<Trajectory[][]> {
  const unscored = unscoredTokenIds(model)
  const groups = await model.generate(items.map((i) => prompt(i.question)), {
    n: o.n,
    temperature: o.temperature,
    topP: o.topP,
    maxTokens: o.maxTokens,
    seed: o.seed,
    sequenceOffset,
    stats: { topK: o.scoring.topK },
  })
  return groups.map((g) => g.map((c) => trajectoryOf(c, world.answers, unscored, o.scoring)))
}

export interface SelectionReport {
  options: SelectionOptions
  calibration: UidCalibration
  table: SelectionTable
  /** Share of evaluated responses eligible for scoring. */
  eligibleRate: number
}

/** The evaluated problems of a selection: a slice of the named benchmark (the world's first when the name is ''). */
export function selectionItems(world: TaskWorld, e: SelectionOptions['eval']): LabeledProblem[] {
  const b = e.benchmark === '' ? world.data.benchmarks[0] : world.data.benchmarks.find((x) => x.name === e.benchmark)
  if (!b) throw new InvalidArgumentError('benchmark', `world '${world.name}' has no benchmark '${e.benchmark}' (${world.data.benchmarks.map((x) => x.name).join(', ') || 'none'})`)
  const items = b.problems.slice(e.offset, e.offset + e.size)
  if (!items.length) throw new InvalidArgumentError('offset', `benchmark ${b.name} has ${b.problems.length} problems: nothing from offset ${e.offset}`)
  return items
}

export async function runSelection(model: Policy, world: TaskWorld, o: SelectionOptions): Promise<SelectionReport> {
  const items = selectionItems(world, o.eval)
  const calItems = world.data.trainingProblems({ seed: o.calibration.seed, count: o.calibration.size, level: o.calibration.level })
  const evalSetTexts = new Set(items.map((i) => i.question))
  if (calItems.some((c) => evalSetTexts.has(c.question))) throw new InvalidArgumentError('calibration', 'calibration and evaluation prompts overlap') // UID A.1: overlap is checked
  const calPools = await samplePools(model, world, calItems, o, 1_000_000)
  const calibration = fitCalibrationOn(calPools)
  const pools = await samplePools(model, world, items, o)
  const table = evaluateSelectors(items.map((it, i) => ({ reference: it.answer, group: pools[i] })), calibration, o.ns)
  const flat = pools.flat()
  return { options: o, calibration, table, eligibleRate: flat.filter((t) => t.complete && t.bins !== null).length / flat.length }
}
