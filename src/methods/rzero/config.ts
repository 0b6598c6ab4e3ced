// R-Zero run configuration with the DIS disagreement reward: the 'paper' preset (DIS §5.1 on
// R-Zero's official settings) and a 'toy' preset sized for the bundled model on 2 CPU cores.
// β = 0 is plain R-Zero (the baseline); ensemble.mode 'auto' then samples the Solver alone.
import { greedyEvalSchema, intAtLeast, levels, loraShape, nonNegative, oneOf, optimizerShape, policyLossShape, positive, resolveWith, runShape, temperature, unitInterval, warmupStepsShape, z } from '../common/schema.js'
import { roleAdaptersField, roleAdaptersNeedRank } from '../common/role-adapters.js'

/** An extra OpenAI-compatible endpoint of the solver ensemble (e.g. `autodidact serve`). */
function remoteVariantSchema() {
  return z.strictObject({
    url: z.string().regex(/^https?:\/\//, { error: 'must be an http(s) URL' }).describe('OpenAI-compatible server root, e.g. http://127.0.0.1:8080'),
    model: z.string().default('').describe("`model` field of the requests; '' = the first id the server's /v1/models lists"),
    temperature: temperature(),
    k: intAtLeast(0, ' (0: ensemble.k)').describe('samples per question; 0 = ensemble.k'),
    timeoutMs: nonNegative().default(0).describe('per-variant timeout (ms); 0 = ensemble.timeoutMs'),
  })
}

export type RemoteVariantConfig = z.infer<ReturnType<typeof remoteVariantSchema>>

export function rzeroSchema() {
  return z.strictObject({
    ...runShape,
    phases: z
      .strictObject({ challengerSteps: intAtLeast(0), solverSteps: intAtLeast(0) })
      .refine((p) => p.challengerSteps + p.solverSteps > 0, { error: 'needs integer step counts ≥ 0, not both 0' })
      .describe('one iteration = this many Challenger steps, then this many Solver steps (the other role frozen)'),
    challenger: z.strictObject({
      batch: intAtLeast(2, ' (one GRPO group)').describe('questions per Challenger step: one GRPO group (DIS §5.1: batch 16)'),
      levels: levels().describe('difficulty levels of the Challenger prompt; each step draws one'),
      temperature: temperature(),
      maxTokens: intAtLeast(1),
    }),
    reward: z.strictObject({
      alpha: nonNegative().describe('α, weight of r_unc (DIS §3)'),
      beta: nonNegative().describe('β, weight of r_dis (DIS §3); 0 = plain R-Zero'),
      uncertainty: oneOf(['dis', 'rzero']).describe("'dis' = min(p̂, 1 − p̂) (DIS §4.4, R-Zero's code); 'rzero' = 1 − 2|p̂ − ½| (R-Zero's paper)"),
      parseFailure: z.number().describe('reward of a parse failure (DIS §4.3: −1)'),
      repetition: z
        .strictObject({ tau: positive().max(1, { error: 'must be in (0, 1]' }), lambda: nonNegative() })
        .describe('BLEU-distance threshold τ and strength λ of r_rep (R-Zero: 0.5, 1)'),
    }),
    ensemble: z.strictObject({
      mode: oneOf(['auto', 'ensemble', 'solver']).describe("'auto': the full ensemble when β > 0, the Solver alone when β = 0; or force either"),
      solverTemperatures: z.array(temperature()).describe('DIS §4.2 S_a, S_b: the current Solver at these temperatures'),
      k: intAtLeast(1).describe('samples per variant (DIS: k = 10)'),
      solverOnly: z.strictObject({ temperature: temperature(), k: intAtLeast(1) }).describe("the Solver alone (mode 'solver', plain R-Zero): temperature and samples m (R-Zero: m = 10)"),
      second: z
        .strictObject({ model: z.string(), temperature: temperature(), healSteps: intAtLeast(0) })
        .describe("DIS §4.2 S_c: '' = the default (on the bundled toy model its Llama-architecture variant; on any other model none: the ensemble is the Solver at its temperatures); 'none' = no second model; else a model folder"),
      remote: z.array(remoteVariantSchema()),
      timeoutMs: positive().describe('per-variant timeout in ms (DIS §4.5: 30 s)'),
      maxTokens: intAtLeast(1),
    }),
    solver: z.strictObject({
      candidates: intAtLeast(1).describe('questions drawn from the frozen Challenger per Solver step, before filtering'),
      band: z
        .tuple([unitInterval(), unitInterval()], { error: 'must be [lo, hi] with 0 ≤ lo ≤ hi ≤ 1' })
        .refine(([lo, hi]) => lo <= hi, { error: 'must be [lo, hi] with 0 ≤ lo ≤ hi ≤ 1' })
        .describe('keep questions with band[0] ≤ p̂ ≤ band[1] (pooled p̂)'),
      questions: intAtLeast(1).describe('at most this many kept questions per step'),
      n: intAtLeast(2, ' (a GRPO group)').describe('GRPO rollouts per kept question'),
      temperature: temperature(),
      maxTokens: intAtLeast(1),
    }),
    grpo: z.strictObject({ ...optimizerShape, warmupSteps: warmupStepsShape.warmupSteps, clip: policyLossShape.clip, klCoef: policyLossShape.klCoef, ...loraShape }),
    eval: greedyEvalSchema(),
    roleAdapters: roleAdaptersField(
      "true: the Challenger and the Solver each have their own LoRA adapter ('challenger', 'solver', rank grpo.loraRank) on the one shared base — R-Zero's two models started from one base, in one process; each phase's GRPO step moves only its role's adapter, on its own schedule and step clock. false: two models, as in the paper",
    ),
  }).refine(...roleAdaptersNeedRank('grpo'))
}

export type RzeroConfig = z.infer<ReturnType<typeof rzeroSchema>>

/** DIS §5.1 on R-Zero: batch 16, 6 Challenger then 20 Solver steps, m = k = 10, S_a/S_b T = 0.7/1.0, S_c T = 0.7, 30 s timeout. */
export const PAPER_PRESET: RzeroConfig = {
  seed: 0,
  steps: 26,
  phases: { challengerSteps: 6, solverSteps: 20 },
  challenger: { batch: 16, levels: [3], temperature: 1, maxTokens: 512 },
  reward: { alpha: 1, beta: 1, uncertainty: 'dis', parseFailure: -1, repetition: { tau: 0.5, lambda: 1 } },
  ensemble: {
    mode: 'auto',
    solverTemperatures: [0.7, 1.0],
    k: 10,
    solverOnly: { temperature: 1.0, k: 10 },
    second: { model: '', temperature: 0.7, healSteps: 120 },
    remote: [],
    timeoutMs: 30_000,
    maxTokens: 1024,
  },
  solver: { candidates: 64, band: [0.3, 0.8], questions: 16, n: 10, temperature: 1, maxTokens: 1024 },
  grpo: { lr: 1e-6, warmupSteps: 0, clip: 0.2, klCoef: 0.01, microBatchSize: 8, clipGradNorm: 1, loraRank: 0, loraAlpha: 0 },
  eval: { every: 13, size: 100, benchmarks: [] },
  checkpointEvery: 13,
  roleAdapters: false,
}

/** The same loop sized for the bundled tiny model: about 1–3 s a step on 2 cores. */
export const TOY_PRESET: RzeroConfig = {
  ...PAPER_PRESET,
  steps: 20,
  phases: { challengerSteps: 2, solverSteps: 3 },
  challenger: { batch: 12, levels: [3], temperature: 1, maxTokens: 40 },
  ensemble: { ...PAPER_PRESET.ensemble, k: 4, solverOnly: { temperature: 1.0, k: 8 }, timeoutMs: 30_000, maxTokens: 64 },
  solver: { candidates: 16, band: [0.3, 0.8], questions: 8, n: 4, temperature: 1, maxTokens: 64 },
  // COSE's toy finding carries over: lr 3e-5 moves the 1.2M model without collapsing it.
  grpo: { ...PAPER_PRESET.grpo, lr: 3e-5, warmupSteps: 2, microBatchSize: 16 },
  eval: { every: 5, size: 50, benchmarks: [] },
  checkpointEvery: 5,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

/** An R-Zero config: `override` deep-merged onto `base`, checked; throws ConfigError naming `file` and the field. */
export function resolveRzeroConfig(override: unknown, base: RzeroConfig = TOY_PRESET, file = '(config)'): RzeroConfig {
  return resolveWith(rzeroSchema(), base, override, file)
}

/** Whether the run samples the full ensemble (DIS) or the Solver alone (plain R-Zero). */
export function usesEnsemble(c: RzeroConfig): boolean {
  return c.ensemble.mode === 'ensemble' || (c.ensemble.mode === 'auto' && c.reward.beta > 0)
}
