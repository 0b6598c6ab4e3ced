// Offline extensions of UID (§4.3, B.3, C.1, C.3): a fixed response pool scored by the frozen base
// model with a calibration fitted on its own unlabeled split; DPO on max-vs-min score pairs of
// verifier-correct responses (and the random-pair control) from a shared SFT warm start; weighted
// SFT w = m·softmax(αq) against uniform weights on the same responses.
import { frozenWeights, intAtLeast, loraShape, maxTokens, nonNegative, oneOf, optimizerShape, positive, requireThat, resolveWith, topP, warmupRatioShape, z } from '../common/schema.js'
import { benchmarkEvalSchema, scoringSchema } from '../solving/config.js'

/**
 * DPO's controls outside the paper (as TTRL's reference labels): a verified response over a wrong
 * one, on the paper arms' prompts (same data size), or on every prompt that has both.
 */
export const RIGHT_VS_WRONG = 'right-vs-wrong'
export const RIGHT_VS_WRONG_ALL = 'right-vs-wrong-all'
export const RIGHT_VS_WRONG_ARMS: readonly string[] = [RIGHT_VS_WRONG, RIGHT_VS_WRONG_ALL]
export const DPO_ARMS = ['random', 'sc', 'uid-conj', 'uid-mix', RIGHT_VS_WRONG, RIGHT_VS_WRONG_ALL] as const
export const WSFT_ARMS = ['uniform', 'sc', 'uid-conj', 'uid-mix'] as const
/** The score methods whose pairs must all qualify for a prompt to enter the common DPO set (B.3). */
export const SCORE_METHODS = ['sc', 'uid-conj', 'uid-mix'] as const
export type ScoreMethod = (typeof SCORE_METHODS)[number]
/** What a DPO pair is scored on (train.pairSpan; src/methods/offline/loop.ts pairSequences). */
export const PAIR_SPANS = ['whole', 'first-difference'] as const
export type PairSpan = (typeof PAIR_SPANS)[number]

function poolSchema() {
  return z.strictObject({
    dir: z.string().describe("pool folder (share one between the arms of a comparison); '' = pool/ in the run folder"),
    level: intAtLeast(1).describe("difficulty hint for the world's training problems (ignored by a world without levels)"),
    prompts: intAtLeast(1).describe("training prompts (the world's labeled training problems, disjoint from every benchmark)"),
    calibrationPrompts: intAtLeast(1).describe('unlabeled calibration prompts (disjoint from the training prompts)'),
    k: intAtLeast(2).describe('responses per prompt (UID C.1: 8)'),
    temperature: positive(),
    topP: topP(),
    maxTokens: maxTokens(),
    seed: z.string(),
    scoring: scoringSchema(),
  })
}

export type PoolConfig = z.infer<ReturnType<typeof poolSchema>>

export function offlineSchema() {
  return z.strictObject({
    seed: z.number(),
    steps: intAtLeast(0, ' (0 = epochs over the data)').describe('optimizer steps; 0 = `epochs` passes over the arm\'s data'),
    epochs: intAtLeast(1),
    objective: oneOf(['dpo', 'wsft']),
    arm: z.string(),
    pool: poolSchema(),
    pairs: z
      .strictObject({ minGap: nonNegative(), commonMethods: z.array(oneOf(SCORE_METHODS)).min(1, { error: `must list methods of ${SCORE_METHODS.join(' | ')}` }) })
      .describe('DPO pair rule (UID Eq. 6, B.3): gap ≥ minGap for every method in commonMethods'),
    warmStart: z.strictObject({ lr: positive(), batchSize: intAtLeast(1), epochs: intAtLeast(1) }).describe('the shared SFT warm start of every DPO arm (UID B.3, C.3)'),
    train: z
      .strictObject({
        ...optimizerShape,
        ...warmupRatioShape,
        ...loraShape,
        batchSize: intAtLeast(1),
        beta: positive().describe('DPO β (UID B.3: 0.1)'),
        rpoAlpha: nonNegative().describe("DPO only: α of RPO's α·NLL(chosen) term (Pang et al. 2024, TRL's rpo_alpha), outside UID; 0: plain DPO, as UID"),
        dpopLambda: nonNegative().describe("DPO only: λ of DPO-Positive's β·λ·max(0, ref_c − π_c) penalty (Pal et al. 2024; their 50), outside UID; 0: plain DPO, as UID"),
        pairSpan: oneOf(PAIR_SPANS).describe(
          "DPO only: the tokens a pair is scored on. 'whole': every completion token (UID B.3). 'first-difference': each response up to and including the first token where the two differ, outside UID (a token-level Step-DPO)",
        ),
        alpha: z.number().describe('weighted-SFT α (UID Eq. 7, B.3: 2)'),
      })
      .refine((t) => t.loraRank >= 1 && t.loraAlpha > 0, { error: 'offline runs train LoRA adapters: rank ≥ 1, alpha > 0', path: ['loraRank'] }),
    eval: benchmarkEvalSchema(),
    checkpointEvery: intAtLeast(1),
    frozenWeights: frozenWeights(),
  })
}

export type OfflineConfig = z.infer<ReturnType<typeof offlineSchema>>

/** UID C.1 / C.3: k = 8 at T = 0.7, top-p 0.95; SFT lr 5e-5 batch 32, DPO lr 1e-5 batch 16 β 0.1, LoRA 64/64, AdamW (0.9, 0.95), cosine to 0.1. */
export const PAPER_PRESET: OfflineConfig = {
  seed: 42,
  steps: 0,
  epochs: 1,
  objective: 'wsft',
  arm: 'uid-conj',
  pool: { dir: '', level: 3, prompts: 706, calibrationPrompts: 88, k: 8, temperature: 0.7, topP: 0.95, maxTokens: 16384, seed: 'uid-offline', scoring: { topK: 25, bins: 32, minTokens: 32 } },
  pairs: { minGap: 0.05, commonMethods: ['sc', 'uid-conj', 'uid-mix'] },
  warmStart: { lr: 5e-5, batchSize: 32, epochs: 1 },
  train: { lr: 5e-5, batchSize: 32, warmupRatio: 0.03, minLrRatio: 0.1, beta: 0.1, rpoAlpha: 0, dpopLambda: 0, pairSpan: 'whole', alpha: 2, loraRank: 64, loraAlpha: 64, microBatchSize: 1, clipGradNorm: 1 },
  eval: {
    every: 25,
    size: 100,
    benchmarks: [],
    protocol: { samples: 5, temperature: 0.6, topP: 0.95, maxTokens: 16384, seed: 7 },
  },
  checkpointEvery: 25,
}

/**
 * The bundled toy model: its correct traces are nearly deterministic strings, so the pool samples
 * 16 responses at T = 1 to find prompts with two distinct correct responses; 8 bins / 8 tokens.
 */
export const TOY_PRESET: OfflineConfig = {
  ...PAPER_PRESET,
  seed: 0,
  epochs: 2,
  pool: { dir: '', level: 3, prompts: 400, calibrationPrompts: 60, k: 16, temperature: 1, topP: 0.95, maxTokens: 64, seed: 'uid-offline', scoring: { topK: 25, bins: 8, minTokens: 8 } },
  warmStart: { lr: 5e-4, batchSize: 32, epochs: 1 },
  train: { ...PAPER_PRESET.train, lr: 5e-4, loraRank: 16, loraAlpha: 32, microBatchSize: 32 },
  eval: {
    every: 1000,
    size: 100,
    benchmarks: [],
    protocol: { samples: 4, temperature: 0.6, topP: 0.95, maxTokens: 64, seed: 7 },
  },
  checkpointEvery: 1000,
}

/**
 * Toy DPO: the common prompt set is taken over SC and UID-Conj only. UID-Mix scores of the toy's
 * short traces sit near 0.5 (G and S ranks are anti-correlated), so requiring a 0.05 UID-Mix gap
 * too left 9 of 97 multi-response prompts in a 400-prompt pool.
 */
export const DPO_TOY_PRESET: OfflineConfig = { ...TOY_PRESET, objective: 'dpo', epochs: 3, pairs: { minGap: 0.05, commonMethods: ['sc', 'uid-conj'] }, train: { ...TOY_PRESET.train, lr: 2e-4, batchSize: 16 } }
export const DPO_PAPER_PRESET: OfflineConfig = { ...PAPER_PRESET, objective: 'dpo', train: { ...PAPER_PRESET.train, lr: 1e-5, batchSize: 16 }, eval: { ...PAPER_PRESET.eval, every: 13 }, checkpointEvery: 13 }

/** The rules that depend on the preset: its objective is the command's, the arm one of that objective's. */
export function checkOfflineConfig(c: OfflineConfig, base: OfflineConfig, file: string): void {
  requireThat(c.objective === base.objective, file, 'objective', `this command trains '${base.objective}'`)
  const arms: readonly string[] = c.objective === 'dpo' ? DPO_ARMS : WSFT_ARMS
  requireThat(arms.includes(c.arm), file, 'arm', `must be one of ${arms.join(' | ')}`)
  if (c.objective === 'dpo' && c.arm !== 'random' && !RIGHT_VS_WRONG_ARMS.includes(c.arm)) requireThat(c.pairs.commonMethods.includes(c.arm as ScoreMethod), file, 'arm', `arm '${c.arm}' must be one of pairs.commonMethods`)
}

/** An offline config: `override` deep-merged onto `base` (whose objective it keeps), checked; throws ConfigError. */
export function resolveOfflineConfig(override: unknown, base: OfflineConfig, file = '(config)'): OfflineConfig {
  const c = resolveWith(offlineSchema(), base, override, file)
  checkOfflineConfig(c, base, file)
  return c
}
