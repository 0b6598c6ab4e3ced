// COSE run configuration: Appendix C's defaults (the 'paper' preset) and a preset scaled down
// for the bundled toy model. Ablations are switches (COSE Table 5, §4.6, Table 7).
import { priorityModes } from '../../replay/index.js'
import { advantageEstimators } from '../../rl/advantages.js'
import { confidenceSignals, type TokenStats } from '../../signals/confidence.js'
import {
  greedyEvalSchema,
  intAtLeast,
  levels,
  loraShape,
  optimizerShape,
  policyLossShape,
  registered,
  resolveWith,
  runShape,
  samplingShape,
  unitInterval,
  warmupStepsShape,
  z,
} from '../common/schema.js'
import { roleAdaptersField, roleAdaptersNeedRank } from '../common/role-adapters.js'

/** The per-token statistics COSE has of a verdict: what the sampling pass returns (COSE §3.2). */
const SAMPLED_STATS: TokenStats = { entropy: [1], maxLogit: [1], margin: [1], topKLogits: [1], topK: 1, vocabSize: 2 }

/** A registered confidence signal that the sampling pass's statistics suffice for. */
function samplingPassSignal() {
  return registered(confidenceSignals).refine(
    (name) => {
      try {
        confidenceSignals.get(name)(SAMPLED_STATS)
        return true
      } catch {
        return false
      }
    },
    { error: (iss) => `signal '${String(iss.input)}' needs statistics the sampling pass does not return` },
  )
}

/** Who scores the Solver's answers: the paper's Judge role, a frozen Judge model beside the trained policy, or the world's verifier (a control, like TTRL's reference-label arm). */
export const JUDGE_SOURCES = ['policy', 'model', 'verifier'] as const

export function coseSchema() {
  return z.strictObject({
    ...runShape,
    proposeEvery: intAtLeast(1).describe('Proposer/Validator phase every K steps (Appendix C: K = 1)'),
    proposer: z.strictObject({ count: intAtLeast(1), levels: levels(), ...samplingShape }),
    validator: z.strictObject({ ...samplingShape, acceptThreshold: unitInterval().describe('accept when v(q) ≥ this') }),
    solver: z.strictObject({
      questions: intAtLeast(1),
      freshFirst: intAtLeast(0).describe("this step's accepted proposals solved before the priority draw (their r_P, Eq. 8, then uses a measured p(q)); the rest of the batch is drawn from the replay by Eq. 6. At freshFirst ≥ questions the priority never acts"),
      n: intAtLeast(1),
      ...samplingShape,
    }),
    judge: z.strictObject({
      ...samplingShape,
      model: z
        .string()
        .min(1)
        .nullable()
        .describe("with switches.judge 'model': the model folder whose Judge role scores the Solver's answers, frozen (never trained), beside the trained policy; null otherwise"),
      adapter: z
        .string()
        .min(1)
        .nullable()
        .describe(
          "with roleAdapters, outside the paper's recipe: a PEFT adapter folder the Judge role's adapter starts from (a Judge stage trained as LoRA on the same base, so the Solver starts from the base untouched); null: a fresh adapter (B = 0), the base's own Judge",
        ),
    }),
    confidence: samplingPassSignal().describe('COSE §3.2 and Table 7: which per-token signal becomes c_V and c_J'),
    switches: z.strictObject({
      weighting: z.boolean().describe('false: every w = 1 (Table 5 "w/o weighting")'),
      priority: registered(priorityModes).describe("'cose' (Eq. 6), 'uniform' (Table 5 \"w/o priority\") or 'one-minus-p' (§4.6)"),
      judge: z
        .enum(JUDGE_SOURCES)
        .describe("'policy' (COSE: the backbone's Judge role scores each answer); 'model', outside the paper: the Judge role of another, frozen model (judge.model) scores them, with its own c_J, while the policy's Proposer, Validator and Solver train; or 'verifier', a control outside the paper: the world's verifier scores each answer 1 or 0 with full confidence, so a run measures what COSE's loop reaches when p(q, a) is never wrong"),
    }),
    replay: z.strictObject({ capacity: intAtLeast(1), floor: unitInterval() }),
    ppo: z.strictObject({
      ...optimizerShape,
      ...warmupStepsShape,
      ...policyLossShape,
      ...loraShape,
      advantage: registered(advantageEstimators),
    }),
    eval: greedyEvalSchema(),
    roleAdapters: roleAdaptersField(
      "true: the Proposer, the Solver (with the Validator) and the Judge each have their own LoRA adapter ('proposer', 'solver', 'judge', rank ppo.loraRank) on the one shared base; each role's update reaches only its adapter, and the Judge's (inference-only, as in COSE) stays at its init. false: one policy for every role, as in the paper",
    ),
  })
    .refine(...roleAdaptersNeedRank('ppo'))
    .refine((c) => (c.switches.judge === 'model') === (c.judge.model !== null), {
      error: "judge.model names the Judge's model folder exactly when switches.judge is 'model'",
      path: ['judge', 'model'],
    })
    .refine((c) => c.judge.adapter === null || c.roleAdapters, {
      error: "judge.adapter is the Judge role's adapter: it needs roleAdapters",
      path: ['judge', 'adapter'],
    })
}

export type CoseConfig = z.infer<ReturnType<typeof coseSchema>>

/** COSE Appendix C (Qwen3-0.6B): clip 0.2, lr 1e-6 cosine, KL 0.01, batch 128, floor 0.1, 8K replay, K = 1. */
export const PAPER_PRESET: CoseConfig = {
  seed: 0,
  steps: 260,
  proposeEvery: 1,
  proposer: { count: 128, levels: [3], temperature: 1, maxTokens: 512 },
  validator: { temperature: 1, maxTokens: 512, acceptThreshold: 0.5 },
  solver: { questions: 16, freshFirst: 16, n: 8, temperature: 1, maxTokens: 1024 },
  judge: { temperature: 1, maxTokens: 512, model: null, adapter: null },
  confidence: 'normalized-entropy',
  switches: { weighting: true, priority: 'cose', judge: 'policy' },
  replay: { capacity: 8192, floor: 0.1 },
  ppo: { lr: 1e-6, minLrRatio: 0, warmupSteps: 0, clip: 0.2, klCoef: 0.01, entropyCoef: 0, advantage: 'grpo', microBatchSize: 8, clipGradNorm: 1, loraRank: 0, loraAlpha: 0 },
  eval: { every: 20, size: 100, benchmarks: [] },
  checkpointEvery: 20,
  roleAdapters: false,
}

/** The same loop sized for the bundled tiny model on 2 CPU cores. */
export const TOY_PRESET: CoseConfig = {
  ...PAPER_PRESET,
  steps: 20,
  proposer: { count: 8, levels: [2, 3, 4], temperature: 1, maxTokens: 40 },
  validator: { temperature: 1, maxTokens: 64, acceptThreshold: 0.5 },
  // freshFirst 3 of 6: with all 6 slots for fresh proposals (5–8 accepted a step) the replay was drawn from by
  // priority for at most 1 question in 10 steps, so 'w/o priority' trained the same Solver as full COSE
  solver: { questions: 6, freshFirst: 3, n: 4, temperature: 1, maxTokens: 64 },
  judge: { temperature: 1, maxTokens: 96, model: null, adapter: null },
  // lr: 3e-4 collapsed held-out accuracy 0.60 → 0.04 in 20 steps (Adam's normalized steps swamp a 1.2M-parameter
  // model); 3e-5 keeps it (0.60 → 0.58), 1e-5 barely moves the policy (KL ≈ 1e-4).
  ppo: { ...PAPER_PRESET.ppo, lr: 3e-5, warmupSteps: 2, klCoef: 0.01, microBatchSize: 16, loraRank: 0 },
  eval: { every: 5, size: 50, benchmarks: [] },
  checkpointEvery: 5,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

/** A COSE config: `override` deep-merged onto `base`, checked; throws ConfigError naming `file` and the field. */
export function resolveCoseConfig(override: unknown, base: CoseConfig = TOY_PRESET, file = '(config)'): CoseConfig {
  return resolveWith(coseSchema(), base, override, file)
}
