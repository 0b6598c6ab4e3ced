// R-Zero run configuration with the DIS disagreement reward: the 'paper' preset (DIS §5.1 on
// R-Zero's official settings) and a 'toy' preset sized for the bundled model on 2 CPU cores.
// β = 0 is plain R-Zero (the baseline); ensemble.mode 'auto' then samples the Solver alone.
import { mergeConfig, requireThat } from '../common/config.js'
import type { UncertaintyForm } from '../../rl/challenger.js'

export interface RemoteVariantConfig {
  /** OpenAI-compatible server root, e.g. http://127.0.0.1:8080. */
  url: string
  /** `model` field of the requests; '' = the first id the server's /v1/models lists. */
  model: string
  temperature: number
  /** Samples per question; 0 = ensemble.k. */
  k: number
  /** Per-variant timeout (ms); 0 = ensemble.timeoutMs. */
  timeoutMs: number
}

export interface RzeroConfig {
  seed: number
  /** Optimizer steps in all, Challenger and Solver phases together. */
  steps: number
  /** One iteration = this many Challenger steps, then this many Solver steps (the other role frozen). */
  phases: { challengerSteps: number; solverSteps: number }
  challenger: {
    /** Questions per Challenger step: one GRPO group (DIS §5.1: batch 16). */
    batch: number
    /** Difficulty levels of the Challenger prompt; each step draws one. */
    levels: number[]
    temperature: number
    maxTokens: number
  }
  reward: {
    /** α, weight of r_unc (DIS §3). */
    alpha: number
    /** β, weight of r_dis (DIS §3); 0 = plain R-Zero. */
    beta: number
    /** 'dis' = min(p̂, 1 − p̂) (DIS §4.4, R-Zero's code); 'rzero' = 1 − 2|p̂ − ½| (R-Zero's paper). */
    uncertainty: UncertaintyForm
    /** Reward of a parse failure (DIS §4.3: −1). */
    parseFailure: number
    /** BLEU-distance threshold τ and strength λ of r_rep (R-Zero: 0.5, 1). */
    repetition: { tau: number; lambda: number }
  }
  ensemble: {
    /** 'auto': the full ensemble when β > 0, the Solver alone when β = 0; or force either. */
    mode: 'auto' | 'ensemble' | 'solver'
    /** DIS §4.2 S_a, S_b: the current Solver at these temperatures. */
    solverTemperatures: number[]
    /** Samples per variant (DIS: k = 10). */
    k: number
    /** The Solver alone (mode 'solver', plain R-Zero): temperature and samples m (R-Zero: m = 10). */
    solverOnly: { temperature: number; k: number }
    /** DIS §4.2 S_c: '' = the Llama-architecture variant built from the base model; 'none' = no second model; else a model folder. */
    second: { model: string; temperature: number; healSteps: number }
    /** Extra OpenAI-compatible endpoints (e.g. `autodidact serve`). */
    remote: RemoteVariantConfig[]
    /** Per-variant timeout in ms (DIS §4.5: 30 s). */
    timeoutMs: number
    maxTokens: number
  }
  solver: {
    /** Questions drawn from the frozen Challenger per Solver step, before filtering. */
    candidates: number
    /** Keep questions with band[0] ≤ p̂ ≤ band[1] (pooled p̂). */
    band: number[]
    /** At most this many kept questions per step. */
    questions: number
    /** GRPO rollouts per kept question. */
    n: number
    temperature: number
    maxTokens: number
  }
  grpo: {
    lr: number
    warmupSteps: number
    clip: number
    klCoef: number
    microBatchSize: number
    clipGradNorm: number
  }
  eval: { every: number; level: number; size: number }
  checkpointEvery: number
}

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
  grpo: { lr: 1e-6, warmupSteps: 0, clip: 0.2, klCoef: 0.01, microBatchSize: 8, clipGradNorm: 1 },
  eval: { every: 13, level: 3, size: 100 },
  checkpointEvery: 13,
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
  grpo: { lr: 3e-5, warmupSteps: 2, clip: 0.2, klCoef: 0.01, microBatchSize: 16, clipGradNorm: 1 },
  eval: { every: 5, level: 3, size: 50 },
  checkpointEvery: 5,
}

export const PRESETS = { paper: PAPER_PRESET, toy: TOY_PRESET } as const

export function resolveRzeroConfig(override: unknown, base: RzeroConfig = TOY_PRESET, file = '(config)'): RzeroConfig {
  const c = mergeConfig(base, override, file)
  const intAtLeast = (v: number, min: number) => Number.isInteger(v) && v >= min
  requireThat(intAtLeast(c.steps, 1), file, 'steps', 'must be an integer ≥ 1')
  requireThat(intAtLeast(c.phases.challengerSteps, 0) && intAtLeast(c.phases.solverSteps, 0) && c.phases.challengerSteps + c.phases.solverSteps > 0, file, 'phases', 'needs integer step counts ≥ 0, not both 0')
  requireThat(intAtLeast(c.challenger.batch, 2), file, 'challenger.batch', 'must be an integer ≥ 2 (one GRPO group)')
  requireThat(c.challenger.levels.length > 0 && c.challenger.levels.every((l) => intAtLeast(l, 1)), file, 'challenger.levels', 'must list difficulty levels ≥ 1')
  requireThat(c.reward.alpha >= 0 && c.reward.beta >= 0, file, 'reward', 'alpha and beta must be ≥ 0')
  requireThat(c.reward.uncertainty === 'dis' || c.reward.uncertainty === 'rzero', file, 'reward.uncertainty', `must be 'dis' or 'rzero'`)
  requireThat(c.reward.repetition.tau > 0 && c.reward.repetition.tau <= 1, file, 'reward.repetition.tau', 'must be in (0, 1]')
  requireThat(c.reward.repetition.lambda >= 0, file, 'reward.repetition.lambda', 'must be ≥ 0')
  requireThat(['auto', 'ensemble', 'solver'].includes(c.ensemble.mode), file, 'ensemble.mode', `must be auto | ensemble | solver`)
  requireThat(c.ensemble.solverTemperatures.every((t) => typeof t === 'number' && t >= 0), file, 'ensemble.solverTemperatures', 'must be temperatures ≥ 0')
  requireThat(intAtLeast(c.ensemble.k, 1) && intAtLeast(c.ensemble.solverOnly.k, 1), file, 'ensemble.k', 'must be an integer ≥ 1')
  requireThat(c.ensemble.timeoutMs > 0, file, 'ensemble.timeoutMs', 'must be positive')
  requireThat(intAtLeast(c.ensemble.second.healSteps, 0), file, 'ensemble.second.healSteps', 'must be an integer ≥ 0')
  c.ensemble.remote.forEach((r, i) => {
    const p = `ensemble.remote[${i}]`
    requireThat(r !== null && typeof r === 'object', file, p, 'must be an object { url, model, temperature, k, timeoutMs }')
    requireThat(typeof r.url === 'string' && /^https?:\/\//.test(r.url), file, `${p}.url`, 'must be an http(s) URL')
    requireThat(r.model === undefined || typeof r.model === 'string', file, `${p}.model`, 'must be a string')
    requireThat(typeof r.temperature === 'number' && r.temperature >= 0, file, `${p}.temperature`, 'must be a number ≥ 0')
    requireThat(intAtLeast(r.k, 0), file, `${p}.k`, 'must be an integer ≥ 0 (0: ensemble.k)')
    requireThat(r.timeoutMs === undefined || (typeof r.timeoutMs === 'number' && r.timeoutMs >= 0), file, `${p}.timeoutMs`, 'must be ≥ 0')
  })
  const [lo, hi] = c.solver.band
  requireThat(c.solver.band.length === 2 && lo >= 0 && hi <= 1 && lo <= hi, file, 'solver.band', 'must be [lo, hi] with 0 ≤ lo ≤ hi ≤ 1')
  requireThat(intAtLeast(c.solver.candidates, 1) && intAtLeast(c.solver.questions, 1) && intAtLeast(c.solver.n, 2), file, 'solver', 'candidates, questions ≥ 1 and n ≥ 2 (a GRPO group) must be integers')
  requireThat(c.grpo.lr > 0, file, 'grpo.lr', 'must be positive')
  requireThat(intAtLeast(c.eval.every, 1) && intAtLeast(c.eval.size, 1), file, 'eval', 'every and size must be integers ≥ 1')
  requireThat(intAtLeast(c.checkpointEvery, 1), file, 'checkpointEvery', 'must be an integer ≥ 1')
  return c
}

/** Whether the run samples the full ensemble (DIS) or the Solver alone (plain R-Zero). */
export function usesEnsemble(c: RzeroConfig): boolean {
  return c.ensemble.mode === 'ensemble' || (c.ensemble.mode === 'auto' && c.reward.beta > 0)
}
