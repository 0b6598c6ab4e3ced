// `autodidact evolve --method grpo`: plain verifier-rewarded GRPO, the kit's example method.
import { fmt } from '../common/format.js'
import { defineMethod } from '../common/method.js'
import { grpoSchema, PRESETS } from './config.js'
import { GrpoRun } from './loop.js'

export const spec = defineMethod({
  name: 'grpo',
  summary: "GRPO with the world's verifier as the reward (ground truth, no self-generated feedback): the kit's example method",
  schema: grpoSchema,
  presets: PRESETS,
  defaultPreset: 'toy',
  start: (config, o) => GrpoRun.start(o.model, config, o.world, o),
  resume: (dir, o) => GrpoRun.resume(dir, o.world, o),
  series: [
    { title: 'held-out accuracy (greedy)', path: 'heldOutAccuracy' },
    { title: 'verifier reward', path: 'reward.mean' },
    { title: 'groups with a nonzero advantage', path: 'informativeGroups' },
    { title: 'gradient norm', path: 'train.gradNorm' },
  ],
  describe: (r) => `reward ${fmt(r.reward.mean)} informative ${r.informativeGroups}/${r.questions}`,
})
