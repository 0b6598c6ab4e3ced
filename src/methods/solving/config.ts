// Config sub-schemas of the solve/evaluate library, shared by TTRL and the offline methods: benchmark
// evaluation with a sampling protocol, and trajectory scoring (UID B.1).
import { benchmarksShape, intAtLeast, maxTokens, temperature, topP, z } from '../common/schema.js'

/** The sampling protocol of an evaluation (UID C.4: mean accuracy of k samples). */
export function evalProtocolSchema() {
  return z
    .strictObject({ samples: intAtLeast(1), temperature: temperature(), topP: topP(), maxTokens: maxTokens(), seed: z.number() })
    .refine((p) => p.temperature > 0 || p.samples === 1, { error: 'greedy evaluation (temperature 0) takes 1 sample', path: ['samples'] })
}

/** Evaluation every N steps on the world's benchmarks under a sampling protocol (a shape, for methods to extend). */
export const benchmarkEvalShape = () => ({ every: intAtLeast(1), ...benchmarksShape, protocol: evalProtocolSchema() })

/** Evaluation every N steps on the world's benchmarks under a sampling protocol. */
export function benchmarkEvalSchema() {
  return z.strictObject(benchmarkEvalShape())
}

/** How trajectories are scored (UID B.1): top-k support, bins, the UID eligibility threshold. */
export function scoringSchema() {
  return z
    .strictObject({ topK: intAtLeast(1).max(64, { error: 'must be an integer in 1..64' }), bins: intAtLeast(2), minTokens: intAtLeast(1) })
    .refine((s) => s.minTokens >= s.bins, { error: 'must be an integer ≥ scoring.bins (no empty bin)', path: ['minTokens'] })
}
