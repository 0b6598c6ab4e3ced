// `autodidact evolve --method ttrl`: TTRL with auxiliary trajectory rewards (paper 001, UID).
import { fmt } from '../common/format.js'
import { defineMethod } from '../common/method.js'
import { PRESETS, ttrlSchema } from './config.js'
import { TtrlRun } from './loop.js'

export const spec = defineMethod({
  name: 'ttrl',
  summary: 'TTRL: majority-vote pseudo-labels on unlabeled prompts, gated SC / UID-Conj / UID-Mix rewards (paper 001)',
  presets: PRESETS,
  defaultPreset: 'toy',
  schema: ttrlSchema,
  start: (config, o) => TtrlRun.start(o.model, config, o.world, o),
  resume: (dir, o) => TtrlRun.resume(dir, o.world, o),
  flags: { arm: 'string', lambda: 'number' },
  flagsToOverride: (f) => {
    const reward: Record<string, unknown> = {}
    if (f.arm !== undefined) reward.arm = f.arm
    if (f.lambda !== undefined) reward.lambda = f.lambda
    return Object.keys(reward).length ? { reward } : undefined
  },
  series: [
    { title: 'held-out accuracy (macro, mean@k)', path: 'heldOutAccuracy' },
    { title: 'majority agreement rate', path: 'agreeRate' },
    { title: 'pseudo-label accuracy (diagnostic)', path: 'labelAccuracy' },
    { title: 'rollout accuracy (diagnostic)', path: 'rolloutAccuracy' },
    { title: 'reward R (Eq. 5)', path: 'reward.mean' },
    { title: 'auxiliary term b, agreeing responses', path: 'aux.max' },
    { title: 'responses with A ≠ 0', path: 'nonzeroAdvantages' },
    { title: 'KL to reference', path: 'kl' },
    { title: 'response length (tokens)', path: 'responseTokens.mean' },
  ],
  describe: (r) => `agree ${fmt(r.agreeRate)} label ${fmt(r.labelAccuracy)} R ${fmt(r.reward.mean)}`,
})
