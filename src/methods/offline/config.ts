// Offline extensions of UID (§4.3, B.3, C.1, C.3): a fixed response pool scored by the frozen base
// model with a calibration fitted on its own unlabeled split; DPO on max-vs-min score pairs of
// verifier-correct responses (and the random-pair control) from a shared SFT warm start; weighted
// SFT w = m·softmax(αq) against uniform weights on the same responses.
import { ConfigError } from '../../engine/errors.js'
import { mergeConfig, requireThat } from '../common/config.js'
import type { BenchmarkSpec, EvalProtocol } from '../select/evaluation.js'
import type { ScoringOptions } from '../select/trajectory.js'
import type { PromptFormat } from '../select/world.js'
import { checkEval, checkScoring } from '../ttrl/config.js'

export const DPO_ARMS = ['random', 'sc', 'uid-conj', 'uid-mix'] as const
export const WSFT_ARMS = ['uniform', 'sc', 'uid-conj', 'uid-mix'] as const
/** The score methods whose pairs must all qualify for a prompt to enter the common DPO set (B.3). */
export const SCORE_METHODS = ['sc', 'uid-conj', 'uid-mix'] as const
export type ScoreMethod = (typeof SCORE_METHODS)[number]
export type OfflineObjective = 'dpo' | 'wsft'

export interface PoolConfig {
  /** Pool folder; '' = a cache folder under runs/uid-pools keyed by the model and this section. */
  dir: string
  level: number
  /** Training prompts (fresh questions, disjoint from every held-out set). */
  prompts: number
  /** Unlabeled calibration prompts (disjoint from the training prompts). */
  calibrationPrompts: number
  /** Responses per prompt (UID C.1: 8). */
  k: number
  temperature: number
  topP: number
  maxTokens: number
  seed: string
  scoring: ScoringOptions
}

export interface OfflineConfig {
  seed: number
  /** Optimizer steps; 0 = `epochs` passes over the arm's data. */
  steps: number
  epochs: number
  objective: OfflineObjective
  arm: string
  format: PromptFormat
  pool: PoolConfig
  /** DPO pair rule (UID Eq. 6, B.3): gap ≥ minGap for every method in `commonMethods`. */
  pairs: { minGap: number; commonMethods: string[] }
  /** The shared SFT warm start of every DPO arm (UID B.3, C.3). */
  warmStart: { lr: number; batchSize: number; epochs: number }
  train: {
    lr: number
    batchSize: number
    warmupRatio: number
    minLrRatio: number
    /** DPO β (UID B.3: 0.1). */
    beta: number
    /** Weighted-SFT α (UID Eq. 7, B.3: 2). */
    alpha: number
    loraRank: number
    loraAlpha: number
    microBatchSize: number
    clipGradNorm: number
  }
  eval: { every: number; benchmarks: BenchmarkSpec[]; protocol: EvalProtocol }
  checkpointEvery: number
}

/** UID C.1 / C.3: k = 8 at T = 0.7, top-p 0.95; SFT lr 5e-5 batch 32, DPO lr 1e-5 batch 16 β 0.1, LoRA 64/64, AdamW (0.9, 0.95), cosine to 0.1. */
export const PAPER_PRESET: OfflineConfig = {
  seed: 42,
  steps: 0,
  epochs: 1,
  objective: 'wsft',
  arm: 'uid-conj',
  format: 'chat',
  pool: { dir: '', level: 3, prompts: 706, calibrationPrompts: 88, k: 8, temperature: 0.7, topP: 0.95, maxTokens: 16384, seed: 'uid-offline', scoring: { topK: 25, bins: 32, minTokens: 32 } },
  pairs: { minGap: 0.05, commonMethods: ['sc', 'uid-conj', 'uid-mix'] },
  warmStart: { lr: 5e-5, batchSize: 32, epochs: 1 },
  train: { lr: 5e-5, batchSize: 32, warmupRatio: 0.03, minLrRatio: 0.1, beta: 0.1, alpha: 2, loraRank: 64, loraAlpha: 64, microBatchSize: 1, clipGradNorm: 1 },
  eval: {
    every: 25,
    benchmarks: [
      { name: 'L3', level: 3, offset: 0, size: 100 },
      { name: 'L4', level: 4, offset: 0, size: 100 },
    ],
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
  format: 'toy',
  pool: { dir: '', level: 3, prompts: 400, calibrationPrompts: 60, k: 16, temperature: 1, topP: 0.95, maxTokens: 64, seed: 'uid-offline', scoring: { topK: 25, bins: 8, minTokens: 8 } },
  warmStart: { lr: 5e-4, batchSize: 32, epochs: 1 },
  train: { ...PAPER_PRESET.train, lr: 5e-4, loraRank: 16, loraAlpha: 32, microBatchSize: 32 },
  eval: {
    every: 1000,
    benchmarks: [
      { name: 'L3', level: 3, offset: 0, size: 100 },
      { name: 'L2', level: 2, offset: 0, size: 100 },
      { name: 'L4', level: 4, offset: 0, size: 100 },
    ],
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

const intAtLeast = (v: number, min: number) => Number.isInteger(v) && v >= min

export function resolveOfflineConfig(override: unknown, base: OfflineConfig, file = '(config)'): OfflineConfig {
  const c = mergeConfig(base, override, file)
  requireThat(c.objective === base.objective, file, 'objective', `this command trains '${base.objective}'`)
  const arms: readonly string[] = c.objective === 'dpo' ? DPO_ARMS : WSFT_ARMS
  requireThat(arms.includes(c.arm), file, 'arm', `must be one of ${arms.join(' | ')}`)
  requireThat(intAtLeast(c.steps, 0), file, 'steps', 'must be an integer ≥ 0 (0 = epochs over the data)')
  requireThat(intAtLeast(c.epochs, 1), file, 'epochs', 'must be an integer ≥ 1')
  requireThat(c.format === 'toy' || c.format === 'chat', file, 'format', "must be 'toy' or 'chat'")
  const p = c.pool
  requireThat(p.level >= 1 && p.level <= 5 && Number.isInteger(p.level), file, 'pool.level', 'must be a level 1..5')
  requireThat(intAtLeast(p.prompts, 1) && intAtLeast(p.calibrationPrompts, 1), file, 'pool.prompts', 'prompts and calibrationPrompts must be integers ≥ 1')
  requireThat(intAtLeast(p.k, 2), file, 'pool.k', 'must be an integer ≥ 2')
  requireThat(p.temperature > 0 && p.topP > 0 && p.topP <= 1, file, 'pool.temperature', 'temperature must be > 0 and topP in (0, 1]')
  requireThat(intAtLeast(p.maxTokens, 1), file, 'pool.maxTokens', 'must be an integer ≥ 1')
  checkScoring(p.scoring, file)
  requireThat(c.pairs.minGap >= 0, file, 'pairs.minGap', 'must be ≥ 0')
  requireThat(c.pairs.commonMethods.length > 0 && c.pairs.commonMethods.every((m) => (SCORE_METHODS as readonly string[]).includes(m)), file, 'pairs.commonMethods', `must list methods of ${SCORE_METHODS.join(' | ')}`)
  if (c.objective === 'dpo' && c.arm !== 'random' && !c.pairs.commonMethods.includes(c.arm)) throw new ConfigError(file, 'arm', `${file}: arm '${c.arm}' must be one of pairs.commonMethods`)
  for (const [path, t] of [['warmStart', c.warmStart], ['train', c.train]] as const) {
    requireThat(t.lr > 0, file, `${path}.lr`, 'must be positive')
    requireThat(intAtLeast(t.batchSize, c.objective === 'dpo' && path === 'train' ? 1 : 1), file, `${path}.batchSize`, 'must be an integer ≥ 1')
  }
  requireThat(intAtLeast(c.warmStart.epochs, 1), file, 'warmStart.epochs', 'must be an integer ≥ 1')
  requireThat(c.train.beta > 0, file, 'train.beta', 'must be positive')
  requireThat(Number.isFinite(c.train.alpha), file, 'train.alpha', 'must be finite')
  requireThat(intAtLeast(c.train.loraRank, 1) && c.train.loraAlpha > 0, file, 'train.loraRank', 'offline runs train LoRA adapters: rank ≥ 1, alpha > 0')
  requireThat(intAtLeast(c.train.microBatchSize, 1), file, 'train.microBatchSize', 'must be an integer ≥ 1')
  requireThat(c.train.warmupRatio >= 0 && c.train.warmupRatio < 1, file, 'train.warmupRatio', 'must be in [0, 1)')
  requireThat(c.train.minLrRatio >= 0 && c.train.minLrRatio <= 1, file, 'train.minLrRatio', 'must be in [0, 1]')
  checkEval(c.eval, file)
  requireThat(intAtLeast(c.checkpointEvery, 1), file, 'checkpointEvery', 'must be an integer ≥ 1')
  return c
}
