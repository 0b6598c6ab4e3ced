// `autodidact evolve --method dpo` and `--method wsft`: the offline extensions of UID (paper 001, §4.3).
import { fmt } from '../common/format.js'
import { defineMethod } from '../common/method.js'
import { checkOfflineConfig, DPO_PAPER_PRESET, DPO_TOY_PRESET, offlineSchema, PAPER_PRESET, TOY_PRESET, type OfflineConfig } from './config.js'
import { OfflineRun } from './loop.js'

function offlineSpec(name: 'dpo' | 'wsft', presets: Record<string, OfflineConfig>, summary: string) {
  return defineMethod({
    name,
    summary,
    schema: offlineSchema,
    presets,
    defaultPreset: 'toy',
    check: checkOfflineConfig,
    start: (config, o) => OfflineRun.start(o.model, config, o.world, o),
    resume: (dir, o) => OfflineRun.resume(dir, o.world, o),
    flags: { arm: 'string', pool: 'string' },
    flagsToOverride: (f) => {
      const over: Record<string, unknown> = {}
      if (f.arm !== undefined) over.arm = f.arm
      if (f.pool !== undefined) over.pool = { dir: f.pool }
      return Object.keys(over).length ? over : undefined
    },
    series: [
      { title: 'held-out accuracy (macro, mean@k)', path: 'heldOutAccuracy' },
      { title: 'loss', path: 'loss' },
      ...(name === 'dpo'
        ? [
            { title: 'DPO reward margin', path: 'train.objective.rewardMargin' },
            { title: 'DPO pair accuracy', path: 'train.objective.accuracy' },
          ]
        : [
            { title: 'NLL', path: 'train.objective.nll' },
            { title: 'mean weight', path: 'train.objective.meanWeight' },
          ]),
      { title: 'gradient norm', path: 'train.gradNorm' },
    ],
    describe: (r) => `loss ${fmt(r.loss, 3)} (${r.arm}, ${r.dataSize} ${name === 'dpo' ? 'pairs' : 'examples'})`,
  })
}

export const dpoSpec = offlineSpec('dpo', { toy: DPO_TOY_PRESET, paper: DPO_PAPER_PRESET }, 'DPO on max-vs-min auxiliary-score pairs of correct responses, shared SFT warm start; arm random = control (paper 001)')
export const wsftSpec = offlineSpec('wsft', { toy: TOY_PRESET, paper: PAPER_PRESET }, 'weighted SFT w = m·softmax(2q) on verified responses; arm uniform = control (paper 001)')
