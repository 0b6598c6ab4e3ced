// The recipe of the bundled toy Judge (models/arith-judge-tiny), J-Zero's scalar reward model for
// the arithmetic world: the bundled policy's backbone (models/arith-qwen3-tiny) with a fresh score
// head on the last token (HF Qwen3ForSequenceClassification), fitted with the Bradley–Terry loss
// (JZ Eq. 13) on *noisy* synthetic preferences, and stopped early, so that it starts imperfect —
// better than chance, clearly improvable — and J-Zero's co-evolution has something to do.
//
// Training pairs: a question from the world's generator (never a held-out question), the scripted
// teachers' right response over a wrong one (one slipped step, or with `malformedRate` a malformed
// output); and a share `onPolicyShare` of pairs from the backbone's own Solver samples on such
// questions (the verifier's right one over a wrong one), because the reward J-Zero gives rests on
// the Judge ordering exactly those (a Judge fitted on scripted slips alone ordered the policy's own
// pairs at 52–58%: bench/evidence-probes.mjs jzero-judge). Each label flipped with probability `noise`. Measured on the held-out preference
// set the loop uses (arithHeldOutPreferences: held-out questions, verifier-ordered), overall and on
// its "plain" split where neither response hedges. Deterministic in (seed, options, threads).
// The command line is scripts/build-toy-judge.mjs.
import { isAbsolute, join, relative, resolve } from 'node:path'

import { loadModel, type Model } from '../engine/model.js'
import { packageRoot } from '../native.js'
import { writeJsonAtomic } from '../util/atomic.js'
import { bradleyTerryBatch, pairMargins, pairwiseAccuracy, type JudgeView } from '../methods/jzero/judge.js'
import type { HeldOutPreference, PreferencePair } from '../worlds/types.js'
import { arithHeldOutPreferences, arithTrainingQuestions, arithWorld, deriveSeed, evalSet, parseExpr, Rng as WorldRng, scriptedRightWrong, scriptedSolve, solverPrompt, verifyAnswer } from '../worlds/arith/index.js'
import { BUNDLED_JUDGE, BUNDLED_MODEL } from './bundled.js'

/** The bundled toy Judge folder (the recipe's default output). */
export { BUNDLED_JUDGE as DEFAULT_TOY_JUDGE_DIR }

export interface ToyJudgeOptions {
  outDir: string
  /** The backbone (default: the bundled policy model). */
  base?: string
  /** The policy whose own Solver samples make the on-policy pairs (default: the backbone). */
  policy?: string
  /** > 0: a critiquing Judge (JudgeView): it writes a critique of up to this many tokens before its score head reads (default 0). */
  critiqueTokens?: number
  /** Train the score head alone, the backbone frozen (default false: every weight). */
  scoreHeadOnly?: boolean
  seed?: number
  /** Bradley–Terry steps (default TOY_JUDGE_DEFAULTS.steps). */
  steps?: number
  /** Pairs per step. */
  batchPairs?: number
  lr?: number
  /** Probability that a training pair's label is flipped. */
  noise?: number
  /** Fraction of rejected responses that are malformed rather than slipped. */
  malformedRate?: number
  /** Fraction of training pairs drawn from the backbone's own Solver samples (verifier-ordered). */
  onPolicyShare?: number
  /** Solver samples per question when drawing on-policy pairs. */
  onPolicySamples?: number
  /** Weights of levels 1..5 for the training questions. */
  levelWeights?: readonly number[]
  /** Held-out preference set: levels and questions per level. */
  evalLevels?: readonly number[]
  evalPerLevel?: number
  /** Measure the held-out accuracy every this many steps (0: only before and after). */
  evalEvery?: number
  threads?: number
  log?: (line: string) => void
}

export const TOY_JUDGE_DEFAULTS = {
  seed: 1,
  steps: 60,
  batchPairs: 32,
  lr: 3e-5,
  noise: 0.3,
  malformedRate: 0.1,
  onPolicyShare: 0.5,
  onPolicySamples: 6,
  levelWeights: [1, 2, 3, 2, 1] as readonly number[],
  evalLevels: [2, 3, 4] as readonly number[],
  evalPerLevel: 100,
  evalEvery: 10,
}

export function resolveToyJudge(o: ToyJudgeOptions) {
  const d = TOY_JUDGE_DEFAULTS
  return {
    base: o.base ?? BUNDLED_MODEL,
    policy: o.policy ?? o.base ?? BUNDLED_MODEL,
    critiqueTokens: o.critiqueTokens ?? 0,
    scoreHeadOnly: o.scoreHeadOnly ?? false,
    seed: o.seed ?? d.seed,
    steps: o.steps ?? d.steps,
    batchPairs: o.batchPairs ?? d.batchPairs,
    lr: o.lr ?? d.lr,
    noise: o.noise ?? d.noise,
    malformedRate: o.malformedRate ?? d.malformedRate,
    onPolicyShare: o.onPolicyShare ?? d.onPolicyShare,
    onPolicySamples: o.onPolicySamples ?? d.onPolicySamples,
    levelWeights: o.levelWeights ?? d.levelWeights,
    evalLevels: o.evalLevels ?? d.evalLevels,
    evalPerLevel: o.evalPerLevel ?? d.evalPerLevel,
    evalEvery: o.evalEvery ?? d.evalEvery,
  }
}

/** The recipe's noisy synthetic preference pairs, `count` of them, a pure function of the seed. */
export function noisyPreferences(seed: number, count: number, o: { noise: number; malformedRate: number; levelWeights: readonly number[] }): (PreferencePair & { flipped: boolean })[] {
  const rng = new WorldRng(deriveSeed('toy-judge-pairs-v1', seed))
  const perLevel = o.levelWeights.map(() => [] as string[])
  const out: (PreferencePair & { flipped: boolean })[] = []
  while (out.length < count) {
    const li = rng.weighted([...o.levelWeights])
    if (!perLevel[li].length) perLevel[li] = arithTrainingQuestions(`toy-judge-questions-v1-${seed}-${out.length}`, li + 1, 64)
    const question = perLevel[li].pop()!
    const pair = scriptedRightWrong(rng, question)
    if (!pair) continue
    let rejected = pair.wrong
    if (rng.chance(o.malformedRate)) rejected = scriptedSolve(rng, parseExpr(question)!, { formatErrorRate: 1 })!.completion
    const flipped = rng.chance(o.noise)
    out.push(flipped ? { question, chosen: rejected, rejected: pair.right, flipped } : { question, chosen: pair.right, rejected, flipped })
  }
  return out
}

/**
 * Verifier-ordered pairs from the policy's own Solver samples (T 1, as J-Zero's Solver samples) on
 * training questions: per question, up to min(#right, #wrong) pairs of a right and a wrong sample;
 * each label flipped with probability `noise`. A pure function of (policy, seed, options, threads).
 */
export async function onPolicyPreferences(policy: Model, seed: number, count: number, o: { noise: number; levelWeights: readonly number[]; onPolicySamples: number }): Promise<(PreferencePair & { flipped: boolean })[]> {
  const rng = new WorldRng(deriveSeed('toy-judge-on-policy-v1', seed))
  const out: (PreferencePair & { flipped: boolean })[] = []
  for (let round = 0; out.length < count && round < 64; round++) {
    const questions = Array.from({ length: 64 }, (_, i) => arithTrainingQuestions(`toy-judge-on-policy-v1-${seed}-${round}-${i}`, rng.weighted([...o.levelWeights]) + 1, 1)[0])
    const samples = await policy.generate(questions.map((q) => solverPrompt(q)), { n: o.onPolicySamples, temperature: 1, maxTokens: 64, seed: seed * 1000 + round })
    samples.forEach((group, i) => {
      const right = group.filter((c) => verifyAnswer(questions[i], c.text) === true)
      const wrong = group.filter((c) => verifyAnswer(questions[i], c.text) !== true)
      for (let k = 0; k < Math.min(right.length, wrong.length) && out.length < count; k++) {
        const flipped = rng.chance(o.noise)
        const [chosen, rejected] = flipped ? [wrong[k].text, right[k].text] : [right[k].text, wrong[k].text]
        out.push({ question: questions[i], chosen, rejected, flipped })
      }
    })
  }
  return out
}

/** The training pairs: scripted and on-policy ones interleaved by `onPolicyShare` (a pure function of the seed). */
async function trainingPreferences(policyDir: string, seed: number, count: number, r: ReturnType<typeof resolveToyJudge>, threads?: number): Promise<(PreferencePair & { flipped: boolean; onPolicy: boolean })[]> {
  const onPolicyCount = Math.round(count * r.onPolicyShare)
  let onPolicy: (PreferencePair & { flipped: boolean })[] = []
  if (onPolicyCount > 0) {
    const policy = await loadModel(policyDir, { threads })
    try {
      onPolicy = await onPolicyPreferences(policy, seed, onPolicyCount, r)
    } finally {
      policy.dispose()
    }
  }
  const scripted = noisyPreferences(seed, count - onPolicy.length, r)
  const rng = new WorldRng(deriveSeed('toy-judge-mix-v1', seed))
  const out: (PreferencePair & { flipped: boolean; onPolicy: boolean })[] = []
  let a = 0
  let b = 0
  while (a < scripted.length || b < onPolicy.length) {
    const takeOnPolicy = b < onPolicy.length && (a >= scripted.length || rng.chance(onPolicy.length / (onPolicy.length + scripted.length)))
    out.push(takeOnPolicy ? { ...onPolicy[b++], onPolicy: true } : { ...scripted[a++], onPolicy: false })
  }
  return out
}

export interface HeldOutJudgeAccuracy {
  accuracy: number
  plainAccuracy: number
  pairs: number
  plainPairs: number
  byLevel: Record<string, number>
}

/** Pairwise accuracy of a Judge on the verifier-ordered held-out preference set. */
/** The toy world the bundled Judge reads (its toy Judge input). */
const TOY_WORLD = arithWorld()

export async function heldOutJudgeAccuracy(judge: Model, set: readonly HeldOutPreference[], view?: JudgeView): Promise<HeldOutJudgeAccuracy> {
  const margins = await pairMargins(judge, TOY_WORLD, set, view)
  const plain = margins.filter((_, i) => set[i].plain)
  const byLevel: Record<string, number> = {}
  for (const group of [...new Set(set.map((p) => p.group))]) byLevel[group] = pairwiseAccuracy(margins.filter((_, i) => set[i].group === group))
  return { accuracy: pairwiseAccuracy(margins), plainAccuracy: pairwiseAccuracy(plain), pairs: margins.length, plainPairs: plain.length, byLevel }
}

export interface ToyJudgeResult {
  outDir: string
  curve: { step: number; loss: number; heldOut?: HeldOutJudgeAccuracy }[]
  before: HeldOutJudgeAccuracy
  after: HeldOutJudgeAccuracy
  trainingLabelAccuracy: number
  seconds: number
}

/** A path inside the package as written relative to it (recipe files stay machine-independent). */
function portable(path: string): string {
  const rel = relative(packageRoot, resolve(path))
  return rel && !rel.startsWith('..') && !isAbsolute(rel) ? rel : path
}

/** Trains and saves the toy Judge (config.json, model.safetensors, tokenizer files, judge-recipe.json). */
export async function buildToyJudge(options: ToyJudgeOptions): Promise<ToyJudgeResult> {
  const r = resolveToyJudge(options)
  const log = options.log ?? (() => {})
  const started = Date.now()
  const judge = await loadModel(r.base, { threads: options.threads ?? 2 })
  try {
    await judge.attachScoreHead({ seed: r.seed })
    const heldOut = arithHeldOutPreferences(r.evalLevels, r.evalPerLevel)
    const before = await heldOutJudgeAccuracy(judge, heldOut, r)
    log(`toy Judge: ${r.steps} steps × ${r.batchPairs} pairs, lr ${r.lr}, label noise ${r.noise}${r.critiqueTokens ? `, critiques of up to ${r.critiqueTokens} tokens` : ''}; held-out ${heldOut.length} pairs, accuracy before ${before.accuracy.toFixed(3)}`)
    const data = await trainingPreferences(r.policy, r.seed, r.steps * r.batchPairs, r, options.threads)
    const trainer = await judge.trainer({ objective: { name: 'bradley-terry' }, optimizer: { lr: r.lr, weightDecay: 0 }, clipGradNorm: 1, scoreHeadOnly: r.scoreHeadOnly })
    const curve: ToyJudgeResult['curve'] = []
    for (let step = 1; step <= r.steps; step++) {
      const m = await trainer.step(await bradleyTerryBatch(judge, TOY_WORLD, data.slice((step - 1) * r.batchPairs, step * r.batchPairs), r))
      const point: ToyJudgeResult['curve'][number] = { step, loss: m.loss }
      if ((r.evalEvery > 0 && step % r.evalEvery === 0) || step === r.steps) {
        point.heldOut = await heldOutJudgeAccuracy(judge, heldOut, r)
        log(`step ${step}/${r.steps}  BT loss ${m.loss.toFixed(4)}  held-out accuracy ${point.heldOut.accuracy.toFixed(3)} (plain ${point.heldOut.plainAccuracy.toFixed(3)})`)
      }
      curve.push(point)
    }
    const after = curve.at(-1)!.heldOut!
    await judge.save(options.outDir)
    const seconds = (Date.now() - started) / 1000
    const trainingLabelAccuracy = data.filter((p) => !p.flipped).length / data.length
    await writeJsonAtomic(join(options.outDir, 'judge-recipe.json'), {
      recipe: { ...r, base: portable(r.base), policy: portable(r.policy), objective: 'bradley-terry (JZ Eq. 13)', optimizer: 'AdamW, constant lr, weight decay 0, gradient-norm clip 1', scoreHead: `N(0, 0.02²), seed ${r.seed}` },
      trainingPairs: data.length,
      onPolicyPairs: data.filter((p) => p.onPolicy).length,
      trainingLabelAccuracy,
      heldOut: { before, after },
      curve,
    }, 2)
    return { outDir: options.outDir, curve, before, after, trainingLabelAccuracy, seconds }
  } finally {
    judge.dispose()
  }
}

/**
 * The Judge on the bundled policy's own answers: for each held-out question, `n` Solver samples at
 * temperature 1; where both occur, the first right and the first wrong one (by the verifier) make a
 * pair. This is the distribution the Judge rewards in J-Zero's first iteration.
 */
export async function onPolicyJudgeAccuracy(
  judge: Model,
  policy: Model,
  levels: readonly number[],
  perLevel: number,
  { n = 8, seed = 123, view }: { n?: number; seed?: number; view?: JudgeView } = {},
): Promise<{ accuracy: number; pairs: number; byLevel: Record<string, number> }> {
  const byLevel: Record<string, number> = {}
  const all: number[] = []
  for (const level of levels) {
    const items = evalSet(level, perLevel)
    const out = await policy.generate(items.map((q) => solverPrompt(q.question)), { n, temperature: 1, maxTokens: 64, seed: seed + level })
    const pairs: PreferencePair[] = []
    out.forEach((group, i) => {
      const right = group.find((c) => verifyAnswer(items[i].question, c.text) === true)
      const wrong = group.find((c) => verifyAnswer(items[i].question, c.text) !== true)
      if (right && wrong) pairs.push({ question: items[i].question, chosen: right.text, rejected: wrong.text })
    })
    const margins = await pairMargins(judge, TOY_WORLD, pairs, view)
    byLevel[`L${level}`] = pairwiseAccuracy(margins)
    all.push(...margins)
  }
  return { accuracy: pairwiseAccuracy(all), pairs: all.length, byLevel }
}

/** Held-out and on-policy pairwise accuracy of a saved Judge, no training (`build-toy-judge --measure`). */
export async function measureToyJudge(
  judgeDir: string,
  { perLevel, threads, policy: policyDir = BUNDLED_MODEL, view }: { perLevel: number; threads?: number; policy?: string; view?: JudgeView },
): Promise<{ judge: string; heldOut: HeldOutJudgeAccuracy; onPolicy: Awaited<ReturnType<typeof onPolicyJudgeAccuracy>> }> {
  const judge = await loadModel(judgeDir, { threads })
  try {
    const policy = await loadModel(policyDir, { threads })
    try {
      const r = resolveToyJudge({ outDir: judgeDir })
      const heldOut = await heldOutJudgeAccuracy(judge, arithHeldOutPreferences(r.evalLevels, perLevel), view)
      return { judge: judgeDir, heldOut, onPolicy: await onPolicyJudgeAccuracy(judge, policy, r.evalLevels, perLevel, { view }) }
    } finally {
      policy.dispose()
    }
  } finally {
    judge.dispose()
  }
}
