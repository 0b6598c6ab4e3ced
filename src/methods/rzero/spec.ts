// `autodidact evolve --method rzero`: R-Zero's Challenger–Solver loop with the DIS multi-solver
// disagreement reward (β > 0 by default; `--beta 0` is plain R-Zero). `--remote URL[,URL]` adds
// OpenAI-compatible endpoints (e.g. `autodidact serve`) to the solver ensemble.
import { fmt } from '../common/format.js'
import { defineMethod, type FlagValues } from '../common/method.js'
import { ROLE_ADAPTERS_FLAG, roleAdaptersOverride } from '../common/role-adapters.js'
import { PRESETS, rzeroSchema } from './config.js'
import { RzeroRun } from './loop.js'

/** --beta, --alpha, --uncertainty, --remote, --role-adapters → a config override. */
export function rzeroFlagsToOverride(flags: FlagValues): unknown {
  const reward: Record<string, unknown> = {}
  if (flags.beta !== undefined) reward.beta = Number(flags.beta)
  if (flags.alpha !== undefined) reward.alpha = Number(flags.alpha)
  if (flags.uncertainty !== undefined) reward.uncertainty = String(flags.uncertainty)
  const override: Record<string, unknown> = {}
  if (Object.keys(reward).length) override.reward = reward
  if (typeof flags.remote === 'string' && flags.remote.trim()) {
    const remote = flags.remote.split(',').map((u) => u.trim()).filter(Boolean).map((url) => ({ url, model: '', temperature: 0.7, k: 0, timeoutMs: 0 }))
    override.ensemble = { remote }
  }
  return { ...override, ...roleAdaptersOverride(flags, 'grpo') }
}

export const spec = defineMethod({
  name: 'rzero',
  summary: 'R-Zero Challenger–Solver with the multi-solver disagreement reward (paper 002; --beta 0: plain R-Zero)',
  presets: PRESETS,
  defaultPreset: 'toy',
  schema: rzeroSchema,
  start: (config, o) => RzeroRun.start(o.model, config, o.world, o),
  resume: (dir, o) => RzeroRun.resume(dir, o.world, o),
  // --role-adapters R: the Challenger and the Solver each their own LoRA adapter of rank R on one base
  flags: { beta: 'number', alpha: 'number', uncertainty: 'string', remote: 'string', ...ROLE_ADAPTERS_FLAG },
  flagsToOverride: rzeroFlagsToOverride,
  series: [
    { title: 'held-out accuracy (greedy)', path: 'heldOutAccuracy' },
    { title: 'r_dis per batch (DIS §4.2)', path: 'rDis.mean' },
    { title: 'r_unc per batch (DIS §3)', path: 'rUnc.mean' },
    { title: 'r_rep per batch (BLEU clusters)', path: 'rRep.mean' },
    { title: 'Challenger reward', path: 'reward.mean' },
    { title: 'Challenger parse rate', path: 'parseRate' },
    { title: 'pooled p̂', path: 'pHat.mean' },
    { title: 'questions kept in the band', path: 'kept' },
    { title: 'pseudo-label accuracy (verifier)', path: 'pseudoLabelAccuracy' },
    { title: 'Solver true accuracy on Challenger questions', path: 'solverTrueAccuracy.mean' },
    { title: 'corr(r_dis, Solver true accuracy)', path: 'disagreementAccuracyCorrelation' },
    { title: 'corr(p̂, Solver true accuracy)', path: 'pHatAccuracyCorrelation' },
    { title: 'ensemble variants responding', path: 'ensemble.responding' },
    { title: 'KL to reference', path: 'train.objective.kl' },
  ],
  describe: (r) =>
    r.phase === 'challenger'
      ? `C r ${fmt(r.reward.mean)} dis ${fmt(r.rDis.mean)} unc ${fmt(r.rUnc.mean)} rep ${fmt(r.rRep.mean)} parse ${fmt(r.parseRate)}`
      : `S kept ${r.kept}/${r.distinct} r ${fmt(r.reward.mean)} label-acc ${fmt(r.pseudoLabelAccuracy)}`,
})
