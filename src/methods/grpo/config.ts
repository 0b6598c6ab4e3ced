// Verifier-rewarded GRPO's configuration: the example method of the kit, built from its shared
// sub-schemas (run, sampling, optimizer, policy loss, evaluation). The toy preset is what
// bench/grpo-verifier.mjs runs by hand on the bundled model.
import { advantageEstimators } from '../../rl/advantages.js'
import { greedyEvalSchema, intAtLeast, loraShape, optimizerShape, policyLossShape, registered, resolveWith, runShape, samplingShape, topP, warmupStepsShape, z } from '../common/schema.js'

export function grpoSchema() {
  return z.strictObject({
    ...runShape,
    questions: z
      .strictObject({ level: intAtLeast(1).describe("difficulty hint (ignored by a world without levels)"), perStep: intAtLeast(1) })
      .describe("the world's labeled training problems per step (never held-out ones)"),
    rollout: z.strictObject({ n: intAtLeast(2, ' (a GRPO group)'), ...samplingShape, topP: topP() }),
    ppo: z.strictObject({ ...optimizerShape, ...warmupStepsShape, ...policyLossShape, ...loraShape, advantage: registered(advantageEstimators) }),
    eval: greedyEvalSchema(),
  })
}

export type GrpoConfig = z.infer<ReturnType<typeof grpoSchema>>

/** 16 questions × 8 samples a step, lr 3e-5 cosine to 0.1 after 2 warmup steps, no KL (bench/grpo-verifier.mjs). */
export const TOY_PRESET: GrpoConfig = {
  seed: 0,
  steps: 30,
  questions: { level: 3, perStep: 16 },
  rollout: { n: 8, temperature: 1, topP: 1, maxTokens: 64 },
  ppo: { lr: 3e-5, warmupSteps: 2, minLrRatio: 0.1, clip: 0.2, klCoef: 0, entropyCoef: 0, advantage: 'grpo', microBatchSize: 32, clipGradNorm: 1, loraRank: 0, loraAlpha: 0 },
  eval: { every: 10, size: 100, benchmarks: [] },
  checkpointEvery: 10,
}

export const PRESETS = { toy: TOY_PRESET } as const

export function resolveGrpoConfig(override: unknown, base: GrpoConfig = TOY_PRESET, file = '(config)'): GrpoConfig {
  return resolveWith(grpoSchema(), base, override, file)
}
