// COSE run configuration: Appendix C's defaults (the 'paper' preset) and a preset scaled down
// for the bundled toy model. Ablations are switches (COSE Table 5, §4.6, Table 7).
import { mergeConfig, requireThat } from '../common/config.js'

export interface CoseConfig {
  seed: number
  /** Optimizer steps (iterations) to run. */
  steps: number
  /** Proposer/Validator phase every K steps (Appendix C: K = 1). */
  proposeEvery: number
  proposer: { count: number; levels: number[]; temperature: number; maxTokens: number }
  validator: { temperature: number; maxTokens: number; /** accept when v(q) ≥ this */ acceptThreshold: number }
  solver: { questions: number; n: number; temperature: number; maxTokens: number }
  judge: { temperature: number; maxTokens: number }
  /** COSE §3.2 and Table 7: which per-token signal becomes c_V and c_J. */
  confidence: 'normalized-entropy' | 'self-certainty-topk' | 'margin' | 'max-logit' | 'neg-entropy'
  switches: {
    /** false: every w = 1 (Table 5 "w/o weighting"). */
    weighting: boolean
    /** 'cose' (Eq. 6), 'uniform' (Table 5 "w/o priority") or 'one-minus-p' (§4.6). */
    priority: 'cose' | 'uniform' | 'one-minus-p'
  }
  replay: { capacity: number; floor: number }
  ppo: {
    lr: number
    minLrRatio: number
    warmupSteps: number
    clip: number
    klCoef: number
    entropyCoef: number
    advantage: 'grpo' | 'dr-grpo' | 'rloo' | 'reinforce++'
    microBatchSize: number
    clipGradNorm: number
    /** LoRA rank (0 = full fine-tuning with a frozen reference copy for KL). */
    loraRank: number
    loraAlpha: number
  }
  eval: { every: number; level: number; size: number }
  checkpointEvery: number
}

/** COSE Appendix C (Qwen3-0.6B): clip 0.2, lr 1e-6 cosine, KL 0.01, batch 128, floor 0.1, 8K replay, K = 1. */
export const PAPER_PRESET: CoseConfig = {
  seed: 0,
  steps: 260,
  proposeEvery: 1,
  proposer: { count: 128, levels: [3], temperature: 1, maxTokens: 512 },
  validator: { temperature: 1, maxTokens: 512, acceptThreshold: 0.5 },
  solver: { questions: 16, n: 8, temperature: 1, maxTokens: 1024 },
  judge: { temperature: 1, maxTokens: 512 },
  confidence: 'normalized-entropy',
  switches: { weighting: true, priority: 'cose' },
  replay: { capacity: 8192, floor: 0.1 },
  ppo: { lr: 1e-6, minLrRatio: 0, warmupSteps: 0, clip: 0.2, klCoef: 0.01, entropyCoef: 0, advantage: 'grpo', microBatchSize: 8, clipGradNorm: 1, loraRank: 0, loraAlpha: 0 },
  eval: { every: 20, level: 3, size: 100 },
  checkpointEvery: 20,
}

/** The same loop sized for the bundled tiny model on 2 CPU cores. */
export const TOY_PRESET: CoseConfig = {
  ...PAPER_PRESET,
  steps: 20,
  proposer: { count: 8, levels: [2, 3, 4], temperature: 1, maxTokens: 40 },
  validator: { temperature: 1, maxTokens: 64, acceptThreshold: 0.5 },
  solver: { questions: 6, n: 4, temperature: 1, maxTokens: 64 },
  judge: { temperature: 1, maxTokens: 96 },
  // lr: 3e-4 collapsed held-out accuracy 0.60 → 0.04 in 20 steps (Adam's normalized steps swamp a 1.2M-parameter
  // model); 3e-5 keeps it (0.60 → 0.58), 1e-5 barely moves the policy (KL ≈ 1e-4).
  ppo: { ...PAPER_PRESET.ppo, lr: 3e-5, warmupSteps: 2, klCoef: 0.01, microBatchSize: 16, loraRank: 0 },
  eval: { every: 5, level: 3, size: 50 },
  checkpointEvery: 5,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

export function resolveCoseConfig(override: unknown, base: CoseConfig = TOY_PRESET, file = '(config)'): CoseConfig {
  const c = mergeConfig(base, override, file)
  const intAtLeast = (v: number, min: number) => Number.isInteger(v) && v >= min
  requireThat(intAtLeast(c.steps, 1), file, 'steps', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.proposeEvery, 1), file, 'proposeEvery', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.proposer.count, 1), file, 'proposer.count', 'must be an integer ≥ 1')
  requireThat(c.proposer.levels.length > 0 && c.proposer.levels.every((l) => intAtLeast(l, 1)), file, 'proposer.levels', 'must list difficulty levels ≥ 1')
  requireThat(intAtLeast(c.solver.n, 1), file, 'solver.n', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.solver.questions, 1), file, 'solver.questions', 'must be an integer ≥ 1')
  requireThat(c.validator.acceptThreshold >= 0 && c.validator.acceptThreshold <= 1, file, 'validator.acceptThreshold', 'must be in [0, 1]')
  requireThat(['normalized-entropy', 'self-certainty-topk', 'margin', 'max-logit', 'neg-entropy'].includes(c.confidence), file, 'confidence', `unknown signal '${c.confidence}'`)
  requireThat(['cose', 'uniform', 'one-minus-p'].includes(c.switches.priority), file, 'switches.priority', `must be cose | uniform | one-minus-p`)
  requireThat(['grpo', 'dr-grpo', 'rloo', 'reinforce++'].includes(c.ppo.advantage), file, 'ppo.advantage', `unknown estimator '${c.ppo.advantage}'`)
  requireThat(c.ppo.lr > 0, file, 'ppo.lr', 'must be positive')
  requireThat(intAtLeast(c.ppo.loraRank, 0), file, 'ppo.loraRank', 'must be an integer ≥ 0')
  requireThat(intAtLeast(c.replay.capacity, 1), file, 'replay.capacity', 'must be an integer ≥ 1')
  return c
}
