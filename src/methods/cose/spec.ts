// `autodidact evolve --method cose`: COSE's presets, runs and report charts for the evolve command.
import type { MethodRunHandle, MethodSpec } from '../common/spec.js'
import { PRESETS, resolveCoseConfig, type CoseConfig } from './config.js'
import { CoseRun } from './loop.js'
import { arithWorld } from './world.js'

const fmt = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(2) : '–')

// CoseRun's step records are plain objects; the driver only needs step, seconds and generatedTokens.
const asHandle = (run: CoseRun) => run as unknown as MethodRunHandle

export const spec: MethodSpec<CoseConfig> = {
  name: 'cose',
  summary: 'COSE: Proposer, Validator, Solver and Judge roles of one backbone, confidence-weighted (paper 000)',
  presets: PRESETS,
  defaultPreset: 'toy',
  resolveConfig: resolveCoseConfig,
  start: async (config, o) => asHandle(await CoseRun.start(o.model, config, arithWorld, o.threads)),
  resume: async (dir, o) => asHandle(await CoseRun.resume(dir, arithWorld, o.threads)),
  series: [
    { title: 'held-out accuracy (greedy)', path: 'heldOutAccuracy' },
    { title: 'Solver reward r_S (Eq. 7)', path: 'rewardSolver.mean' },
    { title: 'Proposer reward r_P (Eq. 8)', path: 'rewardProposer.mean' },
    { title: 'Validator confidence c_V', path: 'confidenceValidator.mean' },
    { title: 'Judge confidence c_J', path: 'confidenceJudge.mean' },
    { title: 'Solver weight w_S (Eq. 5)', path: 'weightSolver.mean' },
    { title: 'accept rate', path: 'acceptRate' },
    { title: 'replay buffer size', path: 'bufferSize' },
    { title: 'KL to reference', path: 'train.objective.kl' },
    { title: 'policy entropy', path: 'train.objective.entropy' },
  ],
  describe: (r) => `r_S ${fmt((r.rewardSolver as { mean: number }).mean)} r_P ${fmt((r.rewardProposer as { mean: number }).mean)} accept ${fmt(r.acceptRate)}`,
}
