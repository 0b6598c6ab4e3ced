// `autodidact evolve --method jzero [--judge DIR] [--judge-critique N] [--frozen-judge] [--no-role-pairs] [--no-amp-pairs]`:
// J-Zero's presets, runs and report charts for the evolve command.
import { toyJudge } from '../../toymodel/bundled.js'
import { fmt } from '../common/format.js'
import { defineMethod, type FlagValues } from '../common/method.js'
import { ROLE_ADAPTERS_FLAG, roleAdaptersOverride } from '../common/role-adapters.js'
import { jzeroSchema, PRESETS, type JzeroConfig } from './config.js'
import { JzeroRun } from './loop.js'

/** Command-line switches → a config override (JZ Table 3 ablations, the Judge folder, --role-adapters R). */
export function jzeroFlagsToOverride(flags: FlagValues): unknown {
  const o: { judge?: Partial<Pick<JzeroConfig['judge'], 'model' | 'critiqueTokens'>>; switches?: Partial<JzeroConfig['switches']> } = {}
  if (typeof flags.judge === 'string') o.judge = { model: flags.judge }
  // --judge-critique N: the Judge writes its check of each answer, up to N tokens, before scoring (judge.critiqueTokens)
  if (flags['judge-critique'] !== undefined) o.judge = { ...o.judge, critiqueTokens: flags['judge-critique'] as number }
  const switches: Partial<JzeroConfig['switches']> = {}
  if (flags['frozen-judge'] === true) switches.trainJudge = false
  if (flags['no-role-pairs'] === true) switches.rolePairs = false
  if (flags['no-amp-pairs'] === true) switches.ampPairs = false
  if (Object.keys(switches).length) o.switches = switches
  const all = { ...o, ...roleAdaptersOverride(flags, 'ppo') }
  return Object.keys(all).length ? all : undefined
}

export const spec = defineMethod({
  name: 'jzero',
  summary: 'J-Zero: Challenger, Solver and a co-evolving Bradley–Terry Judge (paper 003)',
  presets: PRESETS,
  defaultPreset: 'toy',
  schema: jzeroSchema,
  // the default Judge: the bundled toy Judge on the bundled toy model, a fresh score head on the base otherwise
  start: (config, o) => JzeroRun.start(o.model, config.judge.model ?? toyJudge(o.model), config, o.world, o),
  resume: (dir, o) => JzeroRun.resume(dir, o.world, o),
  // --role-adapters R: the Challenger and the Solver each their own LoRA adapter of rank R on one base
  flags: { judge: 'string', 'judge-critique': 'number', 'frozen-judge': 'boolean', 'no-role-pairs': 'boolean', 'no-amp-pairs': 'boolean', ...ROLE_ADAPTERS_FLAG },
  flagsToOverride: jzeroFlagsToOverride,
  series: [
    { title: 'held-out Solver accuracy (greedy)', path: 'heldOutAccuracy' },
    { title: 'Judge held-out pairwise accuracy', path: 'judgeAccuracy' },
    { title: 'Judge held-out accuracy, no-hedge split', path: 'judge.heldOut.plainAfter' },
    { title: 'Challenger reward r^C (Eq. 6)', path: 'challenger.reward.mean' },
    { title: 'mean Judge score r̄ (Eq. 4)', path: 'challenger.meanJudgeScore.mean' },
    { title: 'Solver reward σ(J) (Eq. 9)', path: 'solver.reward.mean' },
    { title: 'Solver sample accuracy (verifier)', path: 'solver.verifierAccuracy' },
    { title: 'Judge pairwise accuracy on Solver rollouts', path: 'solver.judgePairAccuracy' },
    { title: 'kept-task dispersion s_i (Eq. 8)', path: 'selection.dispersionKept.mean' },
    { title: 'role pairs: chosen wins (verifier)', path: 'judge.winRate.role.rate' },
    { title: 'amplification pairs: chosen wins (verifier)', path: 'judge.winRate.amp.rate' },
    { title: 'Judge BT loss (Eq. 13)', path: 'judge.train.loss' },
    { title: 'Solver KL to reference', path: 'solver.train.kl' },
  ],
  describe: (r) => `r_C ${fmt(r.challenger.reward.mean)} r_S ${fmt(r.solver.reward.mean)} judge ${fmt(r.judgeAccuracy)}`,
})
