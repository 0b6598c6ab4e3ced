// Small measured probes behind issue 27's "why does the method not move the model" (bench/evidence.mjs
// runs the headline comparisons). Each probe prints one JSON object and writes it to
// bench/results/evidence-probe-NAME.json.
//   cose-confidence: the bundled model as COSE's Judge and Validator on fresh level-2..4 questions.
//     Per verdict: c (COSE Eq. 2–3, mean over every generated token, as the paper), the same over the
//     score tokens only, and over the non-format tokens; the verdict's agreement with the verifier;
//     how much each confidence varies, and its AUROC for "the verdict is right" (0.5: no signal);
//     on wrong answers, what the Judge's check wrote at the Solver's first wrong step (copy.atFirstSlip:
//     the Solver's wrong result copied, the true value computed, other, or unchecked).
//   jzero-judge: the bundled toy Judge (J-Zero's reward model) on the bundled Solver's own samples:
//     per question, every (right, wrong) pair of its samples by the verifier; the Judge's pairwise
//     accuracy there (what the Solver's reward σ(J) rests on) beside its accuracy on the world's
//     scripted held-out pairs.
//   rzero-signals: the bundled Solver at T 0.7 and 1.0 (4 samples each, DIS's S_a and S_b; no second
//     model) on fresh level-2..4 questions: the pooled p̂ and r_dis R-Zero's Challenger is rewarded
//     by, against the Solver's true accuracy; and the majority pseudo-labels of the questions in the
//     Solver step's band (p̂ in [0.3, 0.8]) against the reference answers.
// Usage: npm run build && nice node bench/evidence-probes.mjs cose-confidence [--questions 100] [--temperatures 1,0.6,0]
//        nice node bench/evidence-probes.mjs jzero-judge [--questions 100] [--samples 5]
//   Every probe: [--model DIR] [--judge DIR] (other weights than the bundled ones, e.g. a previous
//   build, for the same seeds) and [--tag NAME] (writes evidence-probe-PROBE-NAME.json).
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { loadModel } from '../dist/engine/model.js'
import { auroc, pearson, spread } from '../dist/stats/index.js'
import { judgeQuestion } from '../dist/ensemble/ensemble.js'
import { pairMargins, pairwiseAccuracy, rawJudgeScores } from '../dist/methods/jzero/judge.js'
import { verifierPairMargins } from '../dist/methods/jzero/loop.js'
import { BUNDLED_JUDGE } from '../dist/toymodel/bundled.js'
import { arithWorld, trainingQuestions, writtenSteps } from '../dist/worlds/arith/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const probe = process.argv[2]
const world = arithWorld()
const MODEL = arg('model', DEFAULT_MODEL)
const JUDGE = arg('judge', BUNDLED_JUDGE)

/** Normalized-entropy confidence (COSE Eq. 2–3) over the positions `keep` selects. */
function confidence(entropy, keep, vocab) {
  let s = 0
  let n = 0
  for (let t = 0; t < entropy.length; t++) if (keep(t)) [s, n] = [s + Math.max(0, Math.min(1, 1 - entropy[t] / Math.log(vocab))), n + 1]
  return n ? s / n : NaN
}

/** Per-position masks of a verdict: the score's digits, and the tokens that are not fixed format (tags, punctuation). */
function masks(model, tokens) {
  const pieces = Array.from(tokens, (id) => model.tokenizer.decode([id]))
  let inScore = false
  const score = pieces.map((p) => {
    if (p.includes('<score>')) inScore = true
    const here = inScore && /\d/.test(p)
    if (p.includes('</score>')) inScore = false
    return here
  })
  const content = pieces.map((p) => !/^[<>/a-z]*(think|score)[<>/]*$|^[<>/]+$|^[;:.,\s]*$/.test(p) && p.length > 0)
  return { score, content, pieces }
}

function summarize(rows, vocab) {
  const out = {}
  for (const k of ['all', 'score', 'content']) {
    const c = rows.map((r) => r.c[k])
    const right = rows.filter((r) => r.right === true).map((r) => r.c[k])
    const wrong = rows.filter((r) => r.right === false).map((r) => r.c[k])
    out[k] = { ...spread(c), aurocRightVsWrong: auroc(right.filter(Number.isFinite), wrong.filter(Number.isFinite)) }
  }
  const rate = (xs) => (xs.length ? xs.filter((r) => r.says).length / xs.length : NaN)
  const parsed = rows.filter((r) => r.says !== null)
  const confusion = { saysYesWhenTrue: rate(parsed.filter((r) => r.truth)), saysYesWhenFalse: rate(parsed.filter((r) => !r.truth)), truthRate: parsed.filter((r) => r.truth).length / parsed.length }
  return { confusion, verdicts: rows.length, parsed: rows.filter((r) => r.right !== null).length, agreement: rows.filter((r) => r.right === true).length / rows.filter((r) => r.right !== null).length, vocab, confidence: out }
}

/**
 * At the first step the Solver's trace got wrong (its own operands, a wrong result), what the Judge's
 * check of that step wrote: the Solver's wrong result (copied), the step's true value (computed),
 * something else, or nothing (its check stopped or skimmed before).
 */
function checkAtFirstSlip(response, verdict) {
  const lines = (/<think>([\s\S]*?)(<\/think>|$)/.exec(verdict)?.[1] ?? '').split('. got')[0].split('; ')
  const steps = writtenSteps(response)
  const k = steps.findIndex((s) => (s.op === '+' ? s.a + s.b : s.op === '-' ? s.a - s.b : s.a * s.b) !== s.result)
  if (k < 0) return null
  const s = steps[k]
  const exact = s.op === '+' ? s.a + s.b : s.op === '-' ? s.a - s.b : s.a * s.b
  const wrote = k < lines.length ? (/=(-?\d+)/.exec(lines[k])?.[1] ?? null) : null
  return wrote === null ? 'unchecked' : wrote === String(s.result) ? 'copied' : wrote === String(exact) ? 'computed' : 'other'
}

/** The value the Judge's own working arrives at (the last "=N" before its "got"), or null. */
function judgeWorkedValue(verdict) {
  const m = /=(-?\d+)[^=]*$/.exec(verdict.split('got')[0])
  return m ? m[1] : null
}

async function coseConfidence() {
  const n = Number(arg('questions', 100))
  const temperatures = String(arg('temperatures', '1,0.6,0')).split(',').map(Number)
  const model = await loadModel(MODEL, { threads: 2 })
  const out = { probe: 'cose-confidence', model: MODEL, questionsPerLevel: n, note: 'Solver answers sampled at T 1 (the toy preset); verdicts at each temperature', byTemperature: {} }
  for (const temperature of temperatures) out.byTemperature[temperature] = await coseConfidenceAt(model, n, temperature)
  model.dispose()
  return out
}

async function coseConfidenceAt(model, n, temperature) {
  const vocab = model.config.vocabSize
  const levels = [2, 3, 4]
  const result = { temperature, levels: {} }
  for (const level of levels) {
    const problems = trainingQuestions(`evidence-probe-${level}`, level, n)
    const [answers] = [await model.generate(problems.map((p) => world.cose.solverPrompt(p.question)), { n: 1, temperature: 1, maxTokens: 64, seed: 11 })]
    const judged = await model.generate(problems.map((p, i) => world.cose.judgePrompt(p.question, answers[i][0].text)), { n: 1, temperature, maxTokens: 96, seed: 12, stats: { topK: 0 } })
    const judgeRows = judged.map(([v], i) => {
      const m = masks(model, v.tokens)
      const score = world.cose.parseScore(v.text)
      const truth = world.verifier.verify(problems[i], answers[i][0].text)
      return { right: score === null ? null : score >= 0.5 === truth, says: score === null ? null : score >= 0.5, truth, c: { all: confidence(v.entropy, () => true, vocab), score: confidence(v.entropy, (t) => m.score[t], vocab), content: confidence(v.entropy, (t) => m.content[t], vocab) } }
    })
    const rated = await model.generate(problems.map((p) => world.cose.validatorPrompt(p.question)), { n: 1, temperature, maxTokens: 64, seed: 13 })
    const validatorRows = rated.map(([v], i) => {
      const m = masks(model, v.tokens)
      const score = world.cose.parseScore(v.text)
      const good = world.verifier.questionInfo(problems[i].question).wellPosed
      return { right: score === null ? null : score >= 0.5 === good, says: score === null ? null : score >= 0.5, truth: good, c: { all: confidence(v.entropy, () => true, vocab), score: confidence(v.entropy, (t) => m.score[t], vocab), content: confidence(v.entropy, (t) => m.content[t], vocab) } }
    })
    // the Judge re-derives the answer with the Solver's trace in view: on a wrong answer, does its working land on the Solver's wrong value?
    const wrong = problems.map((p, i) => i).filter((i) => !world.verifier.verify(problems[i], answers[i][0].text))
    const worked = wrong.map((i) => judgeWorkedValue(judged[i][0].text))
    const atFirstSlip = { copied: 0, computed: 0, other: 0, unchecked: 0 }
    for (const i of wrong) {
      const c = checkAtFirstSlip(answers[i][0].text, judged[i][0].text)
      if (c !== null) atFirstSlip[c]++
    }
    const copy = { wrongAnswers: wrong.length, judgeWorkingReachesSolversWrongValue: worked.filter((v, j) => v !== null && v === world.answers.answer(answers[wrong[j]][0].text)).length, judgeWorkingReachesTruth: worked.filter((v, j) => v === problems[wrong[j]].answer).length, atFirstSlip }
    result.levels[`L${level}`] = { solverAccuracy: answers.filter(([a], i) => world.verifier.verify(problems[i], a.text)).length / n, judge: { ...summarize(judgeRows, vocab), copy }, validator: summarize(validatorRows, vocab) }
    process.stderr.write(`T ${temperature} L${level} done\n`)
  }
  return result
}

async function jzeroJudge() {
  const n = Number(arg('questions', 100))
  const k = Number(arg('samples', 5))
  const model = await loadModel(MODEL, { threads: 2 })
  const judge = await loadModel(JUDGE, { threads: 2 })
  const out = { probe: 'jzero-judge', model: MODEL, judge: JUDGE, questionsPerLevel: n, samplesPerQuestion: k, note: 'Solver samples at T 1 (the toy preset), max 64 tokens', levels: {} }
  for (const level of [2, 3, 4]) {
    const problems = trainingQuestions(`evidence-probe-jz-${level}`, level, n)
    const groups = await model.generate(problems.map((p) => world.jzero.solverPrompt(p.question)), { n: k, temperature: 1, maxTokens: 64, seed: 21 })
    const items = groups.flatMap((g, i) => g.map((c) => ({ question: problems[i].question, response: c.text })))
    const scores = await rawJudgeScores(judge, world, items)
    const margins = verifierPairMargins(world, items, Array.from(scores), k)
    const heldOut = world.data.heldOutPreferences(50).filter((p) => p.group === `L${level}`)
    out.levels[`L${level}`] = {
      solverSampleAccuracy: items.filter((it, j) => world.verifier.verify(problems[Math.floor(j / k)], it.response)).length / items.length,
      onPolicyPairs: margins.length,
      onPolicyPairwiseAccuracy: pairwiseAccuracy(margins),
      heldOutPairs: heldOut.length,
      heldOutPairwiseAccuracy: pairwiseAccuracy(await pairMargins(judge, world, heldOut)),
    }
    process.stderr.write(`L${level} done\n`)
  }
  model.dispose()
  judge.dispose()
  return out
}

async function rzeroSignals() {
  const n = Number(arg('questions', 100))
  const model = await loadModel(MODEL, { threads: 2 })
  const out = { probe: 'rzero-signals', model: MODEL, questionsPerLevel: n, variants: 'Solver at T 0.7 and 1.0, k 4 each', band: [0.3, 0.8], levels: {} }
  const answerOf = (t) => world.answers.parse(t)?.answer ?? null
  for (const level of [2, 3, 4]) {
    const problems = trainingQuestions(`evidence-probe-rz-${level}`, level, n)
    const prompts = problems.map((p) => world.rzero.solverPrompt(p.question))
    const byVariant = [await model.generate(prompts, { n: 4, temperature: 0.7, maxTokens: 64, seed: 31 }), await model.generate(prompts, { n: 4, temperature: 1, maxTokens: 64, seed: 32 })]
    const rows = problems.map((p, i) => {
      const verdict = judgeQuestion(byVariant.map((v) => v[i].map((c) => answerOf(c.text))), (a, b) => world.answers.equivalent(a, b))
      const samples = byVariant.flatMap((v) => v[i])
      return { accuracy: samples.filter((c) => world.verifier.verify(p, c.text)).length / samples.length, pHat: verdict.pHat, rDis: verdict.rDis, label: verdict.vote.answer, truth: p.answer }
    })
    const kept = rows.filter((r) => r.label !== null && r.pHat >= 0.3 && r.pHat <= 0.8)
    out.levels[`L${level}`] = {
      solverAccuracy: spread(rows.map((r) => r.accuracy)).mean,
      pHatAccuracyCorrelation: pearson(rows.map((r) => r.pHat), rows.map((r) => r.accuracy)),
      disagreementAccuracyCorrelation: pearson(rows.map((r) => r.rDis), rows.map((r) => r.accuracy)),
      keptRate: kept.length / rows.length,
      keptPseudoLabelAccuracy: kept.filter((r) => world.answers.equivalent(r.label, r.truth)).length / kept.length,
      keptSolverAccuracy: spread(kept.map((r) => r.accuracy)).mean,
    }
    process.stderr.write(`L${level} done\n`)
  }
  model.dispose()
  return out
}

const probes = { 'cose-confidence': coseConfidence, 'jzero-judge': jzeroJudge, 'rzero-signals': rzeroSignals }
if (!probes[probe]) {
  console.error(`usage: node bench/evidence-probes.mjs ${Object.keys(probes).join('|')} [options]`)
  process.exit(2)
}
const started = Date.now()
const out = { ...(await probes[probe]()), seconds: (Date.now() - started) / 1000, date: new Date().toISOString() }
mkdirSync(join(here, 'results'), { recursive: true })
const tag = arg('tag', null)
writeFileSync(join(here, 'results', `evidence-probe-${probe}${tag ? `-${tag}` : ''}.json`), JSON.stringify(out, null, 2))
console.log(JSON.stringify(out, null, 2))
