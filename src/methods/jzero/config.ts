// J-Zero run configuration: Table 4's hyper-parameters (the 'paper' preset) and a preset scaled
// down for the bundled toy models on 2 CPU cores. Ablations are switches (JZ Table 3).
import { mergeConfig, requireThat } from '../common/config.js'

/** Sampling and GRPO settings of one policy (Challenger or Solver). */
export interface PolicyStage {
  /** Optimizer steps per iteration (Table 4 "steps per iteration"). */
  steps: number
  temperature: number
  topP: number
  maxTokens: number
  lr: number
  klCoef: number
  /** Asymmetric PPO clip (ε_low, ε_high): the ratio is clipped to [1 − ε_low, 1 + ε_high]. */
  clipLow: number
  clipHigh: number
}

export interface JzeroConfig {
  seed: number
  /** 'toy': the toy world's prompt formats (the bundled model); 'paper': JZ App. C's prompts as chat messages (chat models). */
  prompts: 'toy' | 'paper'
  /** Iterations; each runs the three stages (JZ §3). */
  steps: number
  challenger: PolicyStage & {
    /** Task-generation prompts per step (Table 4 "training batch size"). */
    batch: number
    /** Tasks sampled per prompt (Table 4 "number of rollouts"). All batch·rollouts tasks answer one instruction: one GRPO group (JZ §3.1). */
    rollouts: number
    /** M: Solver responses per task whose mean Judge score is r̄_i (Eq. 4). Not in Table 4; we use the Solver's rollout count. */
    solverSamples: number
    /** Difficulty the task prompt asks for (the toy world's instruction carries a level). */
    level: number
    /** Repetition penalty (Eq. 5): BLEU-distance threshold τ and strength λ (R-Zero's 0.5 and 1). */
    repetition: { tau: number; lambda: number }
  }
  /** Task selection for the Solver by score dispersion (Eq. 8). */
  selection: {
    /** Candidate tasks sampled from the frozen Challenger (the paper: "a larger pool"; size not given). */
    pool: number
    /** K: tasks kept, the largest std of M Judge scores. */
    keep: number
    /** M: Solver responses per candidate. */
    samples: number
  }
  solver: PolicyStage & {
    /** Tasks per step (Table 4 "training batch size"); the K kept tasks are cycled through. */
    batch: number
    /** Tasks per optimizer update (Table 4 "mini-batch size"): batch/miniBatch updates per step. */
    miniBatch: number
    /** G: responses per task (Table 4 "number of rollouts"). */
    rollouts: number
  }
  judge: {
    /** Judge folder (a *ForSequenceClassification model); null: the bundled toy Judge. */
    model: string | null
    /** Bradley–Terry steps per iteration (Table 4). */
    steps: number
    /** Preference pairs per step (Table 4 "training batch size"). */
    batch: number
    lr: number
    /** Held-out tasks (sampled from the latest Challenger, never used to train the Solver) on which pairs are built. */
    tasks: number
    /** Subtasks a decomposition may have (App. C: 3–5; a toy problem of n operations has n natural ones). */
    minSubtasks: number
    maxSubtasks: number
    /**
     * How an amplified answer y_amp (Eq. 11) is shown to the Judge: 'transcript' = the Solver's
     * format, the subtask solutions as the working and the composed answer; 'compose-output' = the
     * Compose output as it is (in the toy world a bare <answer>, a surface cue the Judge could learn).
     */
    ampResponse: 'transcript' | 'compose-output'
  }
  switches: {
    /** false: the Judge stays frozen (Table 3 "− Judge"). */
    trainJudge: boolean
    /** false: no role-asymmetry pairs (Table 3 "w/o D_role"). */
    rolePairs: boolean
    /** false: no subtask-amplification pairs (Table 3 "w/o D_amp"). */
    ampPairs: boolean
  }
  ppo: {
    advantage: 'grpo' | 'dr-grpo' | 'rloo'
    /** Eq. 7 and 9 average over each response's tokens, then over responses. */
    aggregation: 'seq-mean-token-mean' | 'token-mean'
    microBatchSize: number
    clipGradNorm: number
  }
  eval: {
    every: number
    level: number
    size: number
    /** Held-out preference set for the Judge's pairwise accuracy: levels and pairs per level. */
    judgeLevels: number[]
    judgePerLevel: number
  }
  checkpointEvery: number
}

/**
 * JZ Table 4 (Qwen3-4B/8B-Base, Skywork-Reward-V2-Llama-3.1-8B Judge): steps per iteration 5 / 15 / 8,
 * batch 16 / 128 / 64, Solver mini-batch 16, lr 1e-6 / 1e-6 / 5e-7 constant, weight decay 0, KL 0.01,
 * rollouts 4 / 5, temperature 1.0, top-p 0.99, clip (0.20, 0.28), response length 4096. The pool and
 * K of Eq. 8 are not given: K = 15 × 128 covers the Solver's steps once; pool = 2K.
 */
export const PAPER_PRESET: JzeroConfig = {
  seed: 0,
  prompts: 'paper',
  steps: 10,
  challenger: {
    steps: 5,
    batch: 16,
    rollouts: 4,
    solverSamples: 5,
    level: 4,
    temperature: 1,
    topP: 0.99,
    maxTokens: 4096,
    lr: 1e-6,
    klCoef: 0.01,
    clipLow: 0.2,
    clipHigh: 0.28,
    repetition: { tau: 0.5, lambda: 1 },
  },
  selection: { pool: 3840, keep: 1920, samples: 5 },
  solver: { steps: 15, batch: 128, miniBatch: 16, rollouts: 5, temperature: 1, topP: 0.99, maxTokens: 4096, lr: 1e-6, klCoef: 0.01, clipLow: 0.2, clipHigh: 0.28 },
  judge: { model: null, steps: 8, batch: 64, lr: 5e-7, tasks: 512, minSubtasks: 3, maxSubtasks: 5, ampResponse: 'compose-output' },
  switches: { trainJudge: true, rolePairs: true, ampPairs: true },
  ppo: { advantage: 'grpo', aggregation: 'seq-mean-token-mean', microBatchSize: 8, clipGradNorm: 1 },
  eval: { every: 1, level: 3, size: 100, judgeLevels: [2, 3, 4], judgePerLevel: 100 },
  checkpointEvery: 1,
}

/** The same loop sized for the bundled tiny policy and Judge on 2 CPU cores (a few seconds an iteration). */
export const TOY_PRESET: JzeroConfig = {
  ...PAPER_PRESET,
  prompts: 'toy',
  steps: 8,
  challenger: { ...PAPER_PRESET.challenger, steps: 2, batch: 8, rollouts: 1, solverSamples: 4, level: 3, topP: 1, maxTokens: 40, lr: 3e-5 },
  selection: { pool: 24, keep: 8, samples: 4 },
  solver: { ...PAPER_PRESET.solver, steps: 3, batch: 8, miniBatch: 8, rollouts: 5, topP: 1, maxTokens: 64, lr: 3e-5 },
  // toy problems of 2–3 operations have 2–3 natural subtasks: allow 1–5
  // Judge lr 1e-5 on 32 tasks barely moved it in 6 iterations (held-out pairwise 74.0 → 75.3%); 3e-5 on 64
  // tasks moves it measurably (74.0 → 78.0% in 8), the rate its recipe (src/toymodel/judge.ts) uses
  judge: { model: null, steps: 4, batch: 16, lr: 3e-5, tasks: 64, minSubtasks: 1, maxSubtasks: 5, ampResponse: 'transcript' },
  ppo: { ...PAPER_PRESET.ppo, microBatchSize: 16 },
  eval: { every: 1, level: 3, size: 50, judgeLevels: [2, 3, 4], judgePerLevel: 50 },
  checkpointEvery: 2,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

function checkStage(s: PolicyStage, file: string, path: string): void {
  requireThat(Number.isInteger(s.steps) && s.steps >= 0, file, `${path}.steps`, 'must be an integer ≥ 0')
  requireThat(s.temperature >= 0, file, `${path}.temperature`, 'must be ≥ 0')
  requireThat(s.topP > 0 && s.topP <= 1, file, `${path}.topP`, 'must be in (0, 1]')
  requireThat(Number.isInteger(s.maxTokens) && s.maxTokens >= 1, file, `${path}.maxTokens`, 'must be an integer ≥ 1')
  requireThat(s.lr > 0, file, `${path}.lr`, 'must be positive')
  requireThat(s.klCoef >= 0, file, `${path}.klCoef`, 'must be ≥ 0')
  requireThat(s.clipLow >= 0 && s.clipLow < 1, file, `${path}.clipLow`, 'must be in [0, 1)')
  requireThat(s.clipHigh >= 0, file, `${path}.clipHigh`, 'must be ≥ 0')
}

export function resolveJzeroConfig(override: unknown, base: JzeroConfig = TOY_PRESET, file = '(config)'): JzeroConfig {
  const c = mergeConfig(base, override, file)
  const intAtLeast = (v: number, min: number) => Number.isInteger(v) && v >= min
  requireThat(intAtLeast(c.steps, 1), file, 'steps', 'must be an integer ≥ 1')
  requireThat(['toy', 'paper'].includes(c.prompts), file, 'prompts', 'must be toy | paper')
  checkStage(c.challenger, file, 'challenger')
  checkStage(c.solver, file, 'solver')
  requireThat(intAtLeast(c.challenger.batch, 1), file, 'challenger.batch', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.challenger.rollouts, 1), file, 'challenger.rollouts', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.challenger.solverSamples, 1), file, 'challenger.solverSamples', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.challenger.level, 1) && c.challenger.level <= 5, file, 'challenger.level', 'must be a level 1..5')
  requireThat(c.challenger.repetition.tau > 0 && c.challenger.repetition.tau <= 1, file, 'challenger.repetition.tau', 'must be in (0, 1]')
  requireThat(c.challenger.repetition.lambda >= 0, file, 'challenger.repetition.lambda', 'must be ≥ 0')
  requireThat(intAtLeast(c.selection.pool, 1), file, 'selection.pool', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.selection.keep, 1) && c.selection.keep <= c.selection.pool, file, 'selection.keep', 'must be an integer in 1..selection.pool')
  requireThat(intAtLeast(c.selection.samples, 2), file, 'selection.samples', 'must be an integer ≥ 2 (a std needs two scores)')
  requireThat(intAtLeast(c.solver.batch, 1), file, 'solver.batch', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.solver.miniBatch, 1) && c.solver.miniBatch <= c.solver.batch, file, 'solver.miniBatch', 'must be an integer in 1..solver.batch')
  requireThat(intAtLeast(c.solver.rollouts, 2), file, 'solver.rollouts', 'must be an integer ≥ 2 (GRPO groups)')
  requireThat(c.judge.model === null || typeof c.judge.model === 'string', file, 'judge.model', 'must be a folder path or null')
  requireThat(intAtLeast(c.judge.steps, 0), file, 'judge.steps', 'must be an integer ≥ 0')
  requireThat(intAtLeast(c.judge.batch, 1), file, 'judge.batch', 'must be an integer ≥ 1')
  requireThat(c.judge.lr > 0, file, 'judge.lr', 'must be positive')
  requireThat(intAtLeast(c.judge.tasks, 1), file, 'judge.tasks', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.judge.minSubtasks, 1) && c.judge.minSubtasks <= c.judge.maxSubtasks, file, 'judge.minSubtasks', 'must be an integer in 1..judge.maxSubtasks')
  requireThat(['transcript', 'compose-output'].includes(c.judge.ampResponse), file, 'judge.ampResponse', 'must be transcript | compose-output')
  requireThat(c.switches.rolePairs || c.switches.ampPairs || !c.switches.trainJudge, file, 'switches', 'a trained Judge needs at least one pair type (rolePairs or ampPairs)')
  requireThat(['grpo', 'dr-grpo', 'rloo'].includes(c.ppo.advantage), file, 'ppo.advantage', `unknown estimator '${c.ppo.advantage}'`)
  requireThat(['seq-mean-token-mean', 'token-mean'].includes(c.ppo.aggregation), file, 'ppo.aggregation', 'must be seq-mean-token-mean | token-mean')
  requireThat(intAtLeast(c.ppo.microBatchSize, 1), file, 'ppo.microBatchSize', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.eval.every, 1), file, 'eval.every', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.eval.size, 1), file, 'eval.size', 'must be an integer ≥ 1')
  requireThat(c.eval.judgeLevels.every((l) => intAtLeast(l, 1) && l <= 5), file, 'eval.judgeLevels', 'must list levels 1..5')
  requireThat(intAtLeast(c.eval.judgePerLevel, 1), file, 'eval.judgePerLevel', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.checkpointEvery, 1), file, 'checkpointEvery', 'must be an integer ≥ 1')
  return c
}
