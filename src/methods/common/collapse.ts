// The collapse guard (issue 27). Self-play's known failure: the reward a method gives itself keeps
// rising while the held-out accuracy (ground truth the loop never sees) falls. Over the last K
// evaluations e_1 … e_K of a run (K ≥ 2), the run is collapsing when both hold, each beyond
// sampling noise (z = 1.96, the 95% level of the report's intervals):
//   held-out fell:   acc(e_1) − acc(e_K) > z·SE(acc(e_1) − acc(e_K))
//   reward rose:     the least-squares slope b of the training reward over the steps [e_1, e_K]
//                    (at least 3 of them) has b > z·SE(b)
// SE of the accuracy drop is the paired one, sd(d_i)/√n over the per-question differences d_i,
// when both evaluations' per-question results are known; else √((p_1(1 − p_1) + p_K(1 − p_K))/n)
// from n alone. With n unknown, fewer than K evaluations, or fewer than 3 rewards in the window,
// nothing is claimed. The rule 'falls' drops the reward condition: held-out accuracy falling beyond
// noise is collapse whatever the reward does (a run whose reward falls with it is failing too, and
// self-rewarded runs can drift that way: measured on J-Zero in the README's evidence).

/** The reward each method trains on (the series the guard watches); `phase`: only rows of that phase. Methods without one (dpo, wsft: no self-rewarding loop) are not guarded. */
export const TRAINING_REWARD: Readonly<Record<string, { path: string; phase?: string }>> = {
  cose: { path: 'rewardSolver.mean' },
  ttrl: { path: 'reward.mean' },
  grpo: { path: 'reward.mean' },
  rzero: { path: 'reward.mean', phase: 'solver' },
  jzero: { path: 'solver.reward.mean' },
}

export const DEFAULT_COLLAPSE_WINDOW = 3

/** Standard errors a change must exceed to count as beyond sampling noise (two-sided 95%). */
export const NOISE_Z = 1.96

export const COLLAPSE_ACTIONS = ['warn', 'stop', 'rollback'] as const
export type CollapseAction = (typeof COLLAPSE_ACTIONS)[number]

/** What the guard calls collapse: held-out falling while the reward rises (the default), or held-out falling alone. */
export const COLLAPSE_RULES = ['falls-while-reward-rises', 'falls'] as const
export type CollapseRule = (typeof COLLAPSE_RULES)[number]
export const DEFAULT_COLLAPSE_RULE: CollapseRule = 'falls-while-reward-rises'

/** One held-out evaluation: its accuracy, n when known, and per-question values when known. */
export interface HeldOutPoint {
  step: number
  accuracy: number
  n: number | null
  /** Per question (same order in every evaluation of the run), the fraction of its responses right. */
  perQuestion?: readonly number[]
}

export interface RewardPoint {
  step: number
  reward: number
}

export interface CollapseCheck {
  collapsed: boolean
  /** First and last evaluated steps of the window. */
  from: number
  to: number
  /** acc(e_1) − acc(e_K): positive when held-out fell. */
  drop: number
  standardError: number
  /** Reward per step, least squares over the window, and its standard error (NaN with fewer than 3 rewards, under the rule 'falls'). */
  rewardSlope: number
  rewardSlopeError: number
  /** One line for the progress output and the report. */
  message: string
}

/** Least-squares slope of reward on step and its standard error √(Σ residual² / (n − 2) / Sxx); n ≥ 3. */
function slope(points: readonly RewardPoint[]): { slope: number; error: number } {
  const n = points.length
  const mx = points.reduce((s, p) => s + p.step, 0) / n
  const my = points.reduce((s, p) => s + p.reward, 0) / n
  let sxy = 0
  let sxx = 0
  for (const p of points) {
    sxy += (p.step - mx) * (p.reward - my)
    sxx += (p.step - mx) ** 2
  }
  if (!(sxx > 0)) return { slope: 0, error: Infinity }
  const b = sxy / sxx
  const residuals = points.reduce((s, p) => s + (p.reward - my - b * (p.step - mx)) ** 2, 0)
  return { slope: b, error: Math.sqrt(residuals / (n - 2) / sxx) }
}

function differenceStandardError(a: HeldOutPoint, b: HeldOutPoint): number | null {
  if (a.perQuestion && b.perQuestion && a.perQuestion.length === b.perQuestion.length && a.perQuestion.length > 1) {
    const d = a.perQuestion.map((v, i) => v - b.perQuestion![i])
    const mean = d.reduce((s, x) => s + x, 0) / d.length
    const variance = d.reduce((s, x) => s + (x - mean) ** 2, 0) / (d.length - 1)
    return Math.sqrt(variance / d.length)
  }
  const n = a.n ?? b.n
  if (!n) return null
  return Math.sqrt((a.accuracy * (1 - a.accuracy) + b.accuracy * (1 - b.accuracy)) / n)
}

/** The guard's verdict on the last `window` evaluations under `rule`, or null when it cannot judge (too few evaluations, n unknown, or, when the rule needs the reward, fewer than 3 rewards in the window). */
export function checkCollapse(evaluations: readonly HeldOutPoint[], rewards: readonly RewardPoint[], window = DEFAULT_COLLAPSE_WINDOW, rule: CollapseRule = DEFAULT_COLLAPSE_RULE): CollapseCheck | null {
  if (!Number.isInteger(window) || window < 2) throw new RangeError(`collapse window must be an integer ≥ 2, got ${window}`)
  if (!COLLAPSE_RULES.includes(rule)) throw new RangeError(`collapse rule must be ${COLLAPSE_RULES.join(' or ')}, got ${String(rule)}`)
  if (evaluations.length < window) return null
  const last = evaluations.slice(-window)
  const [first, end] = [last[0], last.at(-1)!]
  const se = differenceStandardError(first, end)
  const inWindow = rewards.filter((r) => r.step >= first.step && r.step <= end.step && Number.isFinite(r.reward))
  const rewardKnown = inWindow.length >= 3
  if (se === null || (rule === 'falls-while-reward-rises' && !rewardKnown)) return null
  const drop = first.accuracy - end.accuracy
  const { slope: rewardSlope, error: rewardSlopeError } = rewardKnown ? slope(inWindow) : { slope: NaN, error: NaN }
  const fell = drop > NOISE_Z * se
  const collapsed = fell && (rule === 'falls' || rewardSlope > NOISE_Z * rewardSlopeError)
  const trend = rewardKnown ? `reward slope ${rewardSlope.toPrecision(2)} ± ${rewardSlopeError.toPrecision(2)}/step` : 'reward unknown'
  const fall = `held-out accuracy fell ${first.accuracy.toFixed(3)} → ${end.accuracy.toFixed(3)} (steps ${first.step}–${end.step}, more than ${NOISE_Z} standard errors of ${se.toFixed(3)})`
  const message = !collapsed
    ? `no collapse over steps ${first.step}–${end.step}: held-out ${first.accuracy.toFixed(3)} → ${end.accuracy.toFixed(3)} (SE ${se.toFixed(3)}), ${trend}`
    : rule === 'falls'
      ? `collapse: ${fall}; ${trend}`
      : `collapse: training reward rising (${trend}) while ${fall}`
  return { collapsed, from: first.step, to: end.step, drop, standardError: se, rewardSlope, rewardSlopeError, message }
}
