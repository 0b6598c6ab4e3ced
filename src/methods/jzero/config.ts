// J-Zero run configuration: Table 4's hyper-parameters (the 'paper' preset) and a preset scaled
// down for the bundled toy models on 2 CPU cores. Ablations are switches (JZ Table 3).
import { LOSS_AGGREGATIONS } from '../../train/objectives.js'
import { advantageEstimators } from '../../rl/advantages.js'
import { benchmarksShape, intAtLeast, loraShape, nonNegative, oneOf, positive, ratio, registered, resolveWith, runShape, temperature, topP, maxTokens, z } from '../common/schema.js'
import { roleAdaptersField, roleAdaptersNeedRank } from '../common/role-adapters.js'

/**
 * The stage settings one optimizer step applies (lr) or its objective holds (KL, clip): with role
 * adapters the Challenger and the Solver share one trainer, so these must agree between them.
 */
export const SHARED_TRAINER_FIELDS = ['lr', 'klCoef', 'clipLow', 'clipHigh'] as const

/** Sampling and GRPO settings of one policy (Challenger or Solver). */
const stageShape = {
  steps: intAtLeast(0).describe('optimizer steps per iteration (Table 4 "steps per iteration")'),
  temperature: temperature(),
  topP: topP(),
  maxTokens: maxTokens(),
  lr: positive(),
  klCoef: nonNegative(),
  clipLow: ratio().describe('ε_low of the asymmetric PPO clip: the ratio is clipped to [1 − ε_low, 1 + ε_high]'),
  clipHigh: nonNegative().describe('ε_high of the asymmetric PPO clip'),
}

/** What scores the answers: J-Zero's reward model, or the world's verifier (a control outside the paper). */
export const JUDGE_SOURCES = ['model', 'verifier'] as const

export function jzeroSchema() {
  return z.strictObject({
    ...runShape,
    challenger: z.strictObject({
      ...stageShape,
      batch: intAtLeast(1).describe('task-generation prompts per step (Table 4 "training batch size")'),
      rollouts: intAtLeast(1).describe('tasks sampled per prompt; all batch·rollouts tasks answer one instruction: one GRPO group (JZ §3.1)'),
      solverSamples: intAtLeast(1).describe('M: Solver responses per task whose mean Judge score is r̄_i (Eq. 4)'),
      level: intAtLeast(1).describe("difficulty the task prompt asks for (one of the world's levels; ignored by a world without levels)"),
      repetition: z
        .strictObject({ tau: positive().max(1, { error: 'must be in (0, 1]' }), lambda: nonNegative() })
        .describe("repetition penalty (Eq. 5): BLEU-distance threshold τ and strength λ (R-Zero's 0.5 and 1)"),
    }),
    selection: z
      .strictObject({
        pool: intAtLeast(1).describe('candidate tasks sampled from the frozen Challenger'),
        keep: intAtLeast(1).describe('K: tasks kept, the largest std of M Judge scores (Eq. 8)'),
        samples: intAtLeast(2, ' (a std needs two scores)').describe('M: Solver responses per candidate'),
      })
      .refine((s) => s.keep <= s.pool, { error: 'must be an integer in 1..selection.pool', path: ['keep'] }),
    solver: z
      .strictObject({
        ...stageShape,
        batch: intAtLeast(1).describe('tasks per step (Table 4 "training batch size"); the K kept tasks are cycled through'),
        miniBatch: intAtLeast(1).describe('tasks per optimizer update (Table 4 "mini-batch size")'),
        rollouts: intAtLeast(2, ' (GRPO groups)').describe('G: responses per task'),
      })
      .refine((s) => s.miniBatch <= s.batch, { error: 'must be an integer in 1..solver.batch', path: ['miniBatch'] }),
    judge: z
      .strictObject({
        model: z.string().nullable().describe("Judge folder (a *ForSequenceClassification model); null: the default — the bundled toy Judge on the bundled toy model, else a fresh score head on the policy's base"),
        steps: intAtLeast(0).describe('Bradley–Terry steps per iteration (Table 4)'),
        batch: intAtLeast(1).describe('preference pairs per step'),
        lr: positive(),
        tasks: intAtLeast(1).describe('held-out tasks (from the latest Challenger, never used to train the Solver) on which pairs are built'),
        minSubtasks: intAtLeast(1),
        maxSubtasks: intAtLeast(1),
        ampResponse: oneOf(['transcript', 'compose-output']).describe("how an amplified answer (Eq. 11) is shown to the Judge: the Solver's format, or the Compose output as it is"),
        critiqueTokens: intAtLeast(0).describe(
          "0: the Judge scores (task, response) as JZ's reward model does. N > 0, outside the paper (after critique-out-loud reward models): the Judge first writes its critique of the response greedily with its own LM head, up to N tokens, in the world's critique prompt (jzero.critique; the built-in worlds use COSE's Judge prompt), and its score head reads task, response and critique, in scoring and in Bradley–Terry training alike. Needs a Judge whose LM head is its embedding (tie_word_embeddings)",
        ),
        scoreHeadOnly: z
          .boolean()
          .describe("true: the Judge's Bradley–Terry steps train its score head alone, the backbone frozen — a critiquing Judge then keeps the check it writes (full-backbone steps wore it away: README, evidence). false: every weight, as JZ trains its reward model"),
        verifierFlip: ratio().describe("the 'verifier' control only: its verdict is wrong on this fixed share of (task, answer) inputs, a deterministic Judge of pairwise accuracy 1 − p, to measure how right J-Zero's Judge must be (0: never wrong)"),
      })
      .refine((j) => j.minSubtasks <= j.maxSubtasks, { error: 'must be an integer in 1..judge.maxSubtasks', path: ['minSubtasks'] }),
    switches: z
      .strictObject({
        trainJudge: z.boolean().describe('false: the Judge stays frozen (Table 3 "− Judge")'),
        rolePairs: z.boolean().describe('false: no role-asymmetry pairs (Table 3 "w/o D_role")'),
        ampPairs: z.boolean().describe('false: no subtask-amplification pairs (Table 3 "w/o D_amp")'),
        judge: oneOf(JUDGE_SOURCES).describe(
          "what scores the Challenger's and the Solver's answers: 'model' (J-Zero: σ of the reward model J_φ, Eq. 2, 9); or 'verifier', a control outside the paper: the world's verifier scores each answer 1 or 0 (task selection, r̄ and the Solver's reward alike), so a run measures what J-Zero's loop reaches when its reward is never wrong. The Judge is still measured, frozen (trainJudge false)",
        ),
      })
      .refine((s) => s.rolePairs || s.ampPairs || !s.trainJudge, { error: 'a trained Judge needs at least one pair type (rolePairs or ampPairs)' })
      .refine((s) => s.judge !== 'verifier' || !s.trainJudge, { error: "the 'verifier' control rewards no answer by the Judge, so there is nothing to train it for: set switches.trainJudge false", path: ['trainJudge'] }),
    ppo: z.strictObject({
      advantage: registered(advantageEstimators),
      aggregation: oneOf(LOSS_AGGREGATIONS).describe('Eq. 7 and 9 average over each response\'s tokens, then over responses'),
      microBatchSize: intAtLeast(1),
      clipGradNorm: nonNegative(),
      ...loraShape,
    }),
    eval: z.strictObject({
      every: intAtLeast(1),
      ...benchmarksShape,
      judgePairs: intAtLeast(1).describe("pairs per group of the world's verifier-ordered held-out preference set (the Judge's pairwise accuracy)"),
    }),
    roleAdapters: roleAdaptersField(
      "true: the Challenger and the Solver each have their own LoRA adapter ('challenger', 'solver', rank ppo.loraRank) on the one shared base — JZ's two copies of one policy, in one process — trained by one trainer: each stage's GRPO steps move only its role's adapter, on its own step clock; the stages' lr, klCoef, clipLow and clipHigh must then agree. The Judge stays its own reward model. false: two policies, as in the paper",
    ),
  })
    .refine(...roleAdaptersNeedRank('ppo'))
    .refine((c) => c.judge.verifierFlip === 0 || c.switches.judge === 'verifier', { error: "flips the 'verifier' control's verdicts: set switches.judge 'verifier' (or leave it 0)", path: ['judge', 'verifierFlip'] })
    .superRefine((c, ctx) => {
      if (!c.roleAdapters) return
      for (const field of SHARED_TRAINER_FIELDS)
        if (c.challenger[field] !== c.solver[field])
          ctx.addIssue({ code: 'custom', path: ['solver', field], message: `with roleAdapters the Challenger and the Solver share one trainer, whose optimizer step and objective have one ${field}: solver.${field} (${c.solver[field]}) must equal challenger.${field} (${c.challenger[field]}), or set roleAdapters false` })
    })
}

export type JzeroConfig = z.infer<ReturnType<typeof jzeroSchema>>
export type PolicyStage = Pick<JzeroConfig['solver'], keyof typeof stageShape>

/**
 * JZ Table 4 (Qwen3-4B/8B-Base, Skywork-Reward-V2-Llama-3.1-8B Judge): steps per iteration 5 / 15 / 8,
 * batch 16 / 128 / 64, Solver mini-batch 16, lr 1e-6 / 1e-6 / 5e-7 constant, weight decay 0, KL 0.01,
 * rollouts 4 / 5, temperature 1.0, top-p 0.99, clip (0.20, 0.28), response length 4096. The pool and
 * K of Eq. 8 are not given: K = 15 × 128 covers the Solver's steps once; pool = 2K.
 */
export const PAPER_PRESET: JzeroConfig = {
  seed: 0,
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
  judge: { model: null, steps: 8, batch: 64, lr: 5e-7, tasks: 512, minSubtasks: 3, maxSubtasks: 5, ampResponse: 'compose-output', critiqueTokens: 0, scoreHeadOnly: false, verifierFlip: 0 },
  switches: { trainJudge: true, rolePairs: true, ampPairs: true, judge: 'model' },
  ppo: { advantage: 'grpo', aggregation: 'seq-mean-token-mean', microBatchSize: 8, clipGradNorm: 1, loraRank: 0, loraAlpha: 0 },
  eval: { every: 1, size: 100, benchmarks: [], judgePairs: 100 },
  checkpointEvery: 1,
  roleAdapters: false,
}

/** The same loop sized for the bundled tiny policy and Judge on 2 CPU cores (a few seconds an iteration). */
export const TOY_PRESET: JzeroConfig = {
  ...PAPER_PRESET,
  steps: 8,
  challenger: { ...PAPER_PRESET.challenger, steps: 2, batch: 8, rollouts: 1, solverSamples: 4, level: 3, topP: 1, maxTokens: 40, lr: 3e-5 },
  selection: { pool: 24, keep: 8, samples: 4 },
  solver: { ...PAPER_PRESET.solver, steps: 3, batch: 8, miniBatch: 8, rollouts: 5, topP: 1, maxTokens: 64, lr: 3e-5 },
  // toy problems of 2–3 operations have 2–3 natural subtasks: allow 1–5
  // Judge lr 1e-5 on 32 tasks barely moved it in 6 iterations (held-out pairwise 74.0 → 75.3%); 3e-5 on 64
  // tasks moves it measurably (74.0 → 78.0% in 8), the rate its recipe (src/toymodel/judge.ts) uses
  judge: { model: null, steps: 4, batch: 16, lr: 3e-5, tasks: 64, minSubtasks: 1, maxSubtasks: 5, ampResponse: 'transcript', critiqueTokens: 0, scoreHeadOnly: false, verifierFlip: 0 },
  ppo: { ...PAPER_PRESET.ppo, microBatchSize: 16 },
  eval: { every: 1, size: 50, benchmarks: [], judgePairs: 50 },
  checkpointEvery: 2,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

/** A J-Zero config: `override` deep-merged onto `base`, checked; throws ConfigError naming `file` and the field. */
export function resolveJzeroConfig(override: unknown, base: JzeroConfig = TOY_PRESET, file = '(config)'): JzeroConfig {
  return resolveWith(jzeroSchema(), base, override, file)
}
