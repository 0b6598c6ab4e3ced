// Config sub-schemas of the solve/evaluate library, shared by TTRL and the offline methods: held-out
// slices of the world's reserved evaluation streams, benchmark evaluation with a sampling protocol,
// trajectory scoring (UID B.1), and the prompt format.
import { intAtLeast, maxTokens, oneOf, temperature, topP, z } from '../common/schema.js'

/** Questions reserved for evaluation per level of the arithmetic world (level 1 has 100). */
const RESERVED = [0, 100, 1000, 1000, 1000, 1000]

export const promptFormatSchema = () => oneOf(['toy', 'chat'])

const sliceShape = () => ({ level: intAtLeast(1).max(5, { error: 'must be a level 1..5' }), offset: intAtLeast(0), size: intAtLeast(1) })
const fitsReserved = { check: (s: { level: number; offset: number; size: number }) => s.offset + s.size <= RESERVED[s.level], error: (iss: { input?: unknown }) => `offset + size must be ≤ ${RESERVED[(iss.input as { level: number }).level]} (the level's reserved questions)` }

/** Items [offset, offset + size) of a level's held-out stream. */
export function sliceSchema() {
  return z.strictObject(sliceShape()).refine(fitsReserved.check, { error: fitsReserved.error })
}

/** The sampling protocol of an evaluation (UID C.4: mean accuracy of k samples). */
export function evalProtocolSchema() {
  return z
    .strictObject({ samples: intAtLeast(1), temperature: temperature(), topP: topP(), maxTokens: maxTokens(), seed: z.number() })
    .refine((p) => p.temperature > 0 || p.samples === 1, { error: 'greedy evaluation (temperature 0) takes 1 sample', path: ['samples'] })
}

/** Evaluation every N steps on named benchmarks (held-out slices). */
export function benchmarkEvalSchema() {
  return z.strictObject({
    every: intAtLeast(1),
    benchmarks: z
      .array(z.strictObject({ name: z.string().min(1, { error: 'must be a non-empty string' }), ...sliceShape() }).refine(fitsReserved.check, { error: fitsReserved.error }))
      .min(1, { error: 'needs at least one benchmark' })
      .refine((bs) => new Set(bs.map((b) => b.name)).size === bs.length, { error: 'names must be distinct' }),
    protocol: evalProtocolSchema(),
  })
}

/** How trajectories are scored (UID B.1): top-k support, bins, the UID eligibility threshold. */
export function scoringSchema() {
  return z
    .strictObject({ topK: intAtLeast(1).max(64, { error: 'must be an integer in 1..64' }), bins: intAtLeast(2), minTokens: intAtLeast(1) })
    .refine((s) => s.minTokens >= s.bins, { error: 'must be an integer ≥ scoring.bins (no empty bin)', path: ['minTokens'] })
}
