// `autodidact evolve --method cose`: COSE's presets, runs and report charts for the evolve command.
import { defineMethod, type FlagValues } from '../common/method.js'
import { fmt } from '../common/format.js'
import { ROLE_ADAPTERS_FLAG, roleAdaptersOverride } from '../common/role-adapters.js'
import { coseSchema, PRESETS } from './config.js'
import { CoseRun } from './loop.js'

/** Command-line switches → a config override (--judge DIR, --judge-adapter DIR, --role-adapters R). */
export function coseFlagsToOverride(flags: FlagValues): unknown {
  const judge = {
    ...(typeof flags.judge === 'string' ? { model: flags.judge } : {}),
    ...(typeof flags['judge-adapter'] === 'string' ? { adapter: flags['judge-adapter'] } : {}),
  }
  const all = {
    ...(typeof flags.judge === 'string' ? { switches: { judge: 'model' } } : {}),
    ...(Object.keys(judge).length ? { judge } : {}),
    ...roleAdaptersOverride(flags, 'ppo'),
  }
  return Object.keys(all).length ? all : undefined
}

export const spec = defineMethod({
  name: 'cose',
  summary: 'COSE: Proposer, Validator, Solver and Judge roles of one backbone, confidence-weighted (paper 000)',
  schema: coseSchema,
  presets: PRESETS,
  defaultPreset: 'toy',
  start: (config, o) => CoseRun.start(o.model, config, o.world, o),
  resume: (dir, o) => CoseRun.resume(dir, o.world, o),
  // --role-adapters R: the Proposer, Solver (with the Validator) and Judge each their own LoRA adapter of rank R on one base;
  // --judge DIR: a frozen Judge model scores the Solver's answers (switches.judge 'model');
  // --judge-adapter DIR: with --role-adapters, the Judge role's adapter starts from that PEFT folder
  flags: { ...ROLE_ADAPTERS_FLAG, judge: 'string', 'judge-adapter': 'string' },
  flagsToOverride: coseFlagsToOverride,
  series: [
    { title: 'held-out accuracy (greedy)', path: 'heldOutAccuracy' },
    { title: 'Solver reward r_S (Eq. 7)', path: 'rewardSolver.mean' },
    { title: 'Proposer reward r_P (Eq. 8)', path: 'rewardProposer.mean' },
    { title: 'Validator confidence c_V', path: 'confidenceValidator.mean' },
    { title: 'Judge confidence c_J', path: 'confidenceJudge.mean' },
    { title: 'Solver weight w_S (Eq. 5)', path: 'weightSolver.mean' },
    { title: 'accept rate', path: 'acceptRate' },
    { title: 'Validator accept precision (verifier)', path: 'diagnostics.validatorAcceptPrecision' },
    { title: 'well-posed proposals (verifier)', path: 'diagnostics.proposalGoodRate' },
    { title: 'Judge–verifier agreement', path: 'diagnostics.judgeVerifierAgreement' },
    { title: 'true solve rate (verifier)', path: 'diagnostics.trueSolveRate.mean' },
    { title: '|p(q) − true solve rate|', path: 'diagnostics.solveRateError' },
    { title: 'corr(p(q), true solve rate)', path: 'diagnostics.solveRateCorrelation' },
    { title: 'replay buffer size', path: 'bufferSize' },
    { title: 'KL to reference', path: 'train.objective.kl' },
    { title: 'policy entropy', path: 'train.objective.entropy' },
  ],
  describe: (r) => `r_S ${fmt(r.rewardSolver.mean)} r_P ${fmt(r.rewardProposer.mean)} accept ${fmt(r.acceptRate)}`,
})
