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
//   judge-checks: whether a check cheaper than the step lets the small model's Judge compute rather
//     than copy (JudgeCheck in src/worlds/arith/teachers.ts). For each form (recompute, units, nines)
//     the bundled model is fine-tuned briefly (--steps 600 × 32 sequences, lr 3e-4, cosine): half of
//     each batch Judge transcripts in that form (70% wrong inputs, no skimming), half the recipe's
//     other roles. Its Judge then rates the bundled Solver's own level-3 samples (T 1, 2 per question)
//     at T 1 and greedy: agreement with the verifier, P(says right | right), P(says right | wrong) and
//     their difference (how far the reward separates right from wrong answers) with a question
//     bootstrap, the same difference against the recompute fine-tune (paired), what a faultless checker
//     of the form would say, and at the first step the form flags, whether the Judge wrote its own
//     value or the response's. The bundled weights, unchanged, are the first row.
//   dpo-warm-start: what the DPO command's shared SFT warm start (UID B.3) does alone. The toy DPO
//     pool is rebuilt (deterministic, as bench/evidence.mjs builds it), each test seed's warm start is
//     evaluated on the level's test split by the evidence protocol, against the base and against the
//     DPO cells of a finished evidence run (--cells DIR, --lr-scale X: the run's chosen scale).
//   guard-effect: what --on-collapse did to a method's test cells. Pairs each arm's test cells of an
//     evidence run with the collapse guard (--guarded DIR) and of the same run without it (--cells DIR),
//     seed by seed at one lr scale, and reports guarded vs plain with the evidence's paired bootstrap
//     and where the guard fired. Reads saved cells only; trains and samples nothing.
//   against-base: each arm's test cells of an evidence run against the base model of another run on the
//     same test items (e.g. COSE on a fine-tune against the bundled model it was made from). Reads
//     saved cells only; without --cells it evaluates the --model weights on the test split instead.
// Usage: npm run build && nice node bench/evidence-probes.mjs cose-confidence [--questions 100] [--temperatures 1,0.6,0]
//        nice node bench/evidence-probes.mjs jzero-judge [--questions 100] [--samples 5] [--model POLICY] [--judge DIR] [--critique N]
//          (--critique N: a critiquing Judge, which writes its check of up to N tokens before its score head reads)
//        nice node bench/evidence-probes.mjs dpo-warm-start [--level 3] [--cells bench/results/evidence-cells-full-items400x500] [--lr-scale 1]
//        nice node bench/evidence-probes.mjs guard-effect --method jzero --cells DIR --guarded DIR --lr-scale 0.3
//        nice node bench/evidence-probes.mjs judge-checks [--checks recompute,units,nines] [--steps 600] [--lr 3e-4] [--questions 200] [--keep DIR]
//          [--rest teacher|own] (the other roles' half of each batch: the teachers' transcripts, or the
//          model's own T 1 samples, so that only the Judge learns)
//          [--lora R] (the check as a LoRA adapter of rank R, trained on Judge transcripts alone and kept
//          as DIR/<check>-loraR, a PEFT folder: with COSE's role adapters only the Judge runs through it)
//          (--keep DIR: the fine-tuned models stay, as DIR/<check>, e.g. for bench/evidence.mjs --model;
//          --steps 0: no fine-tune, the --model weights judge as they are, in each form; --solver DIR:
//          whose samples are rated, default the bundled model)
//        nice node bench/evidence-probes.mjs against-base --method cose --cells DIR --base-cells DIR --lr-scale 1 [--seeds 1,2,3]
//        nice node bench/evidence-probes.mjs against-base --model DIR --base-cells DIR --level 2 [--items 400,500]
//          (no --cells: the --model weights themselves, before any run, on that level's test split)
//   Every probe: [--model DIR] [--judge DIR] (other weights than the bundled ones, e.g. a previous
//   build, for the same seeds) and [--tag NAME] (writes evidence-probe-PROBE-NAME.json).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { loadModel } from '../dist/engine/model.js'
import { auroc, pearson, spread } from '../dist/stats/index.js'
import { judgeQuestion } from '../dist/ensemble/ensemble.js'
import { pairMargins, pairwiseAccuracy, rawJudgeScores } from '../dist/methods/jzero/judge.js'
import { verifierPairMargins } from '../dist/methods/jzero/loop.js'
import { BUNDLED_JUDGE } from '../dist/toymodel/bundled.js'
import { TOY_IDS, TOY_RECIPE_DEFAULTS } from '../dist/toymodel/index.js'
import { arithWorld, buildCorpus, JUDGE_CHECKS, parseExpr, Rng, scriptedJudge, stepResidues, trainingQuestions, writtenSteps } from '../dist/worlds/arith/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
/** judge-checks --keep DIR: where its fine-tuned models stay (null: removed after rating). */
const KEEP = arg('keep', null)
const probe = process.argv[2]
const world = arithWorld()
const MODEL = arg('model', DEFAULT_MODEL)
const JUDGE = arg('judge', BUNDLED_JUDGE)
/** judge-checks --rest: the other roles' half of each fine-tune batch, the teachers' transcripts or the model's own samples. */
const REST = arg('rest', 'teacher')
/** judge-checks --lora R: the Judge's check is trained as a LoRA adapter of rank R (alpha 2R) on Judge transcripts alone, the base untouched (null: every weight). */
const LORA = arg('lora', null) === null ? null : Number(arg('lora'))

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
  const view = { critiqueTokens: Number(arg('critique', 0)) }
  if (!(Number.isInteger(view.critiqueTokens) && view.critiqueTokens >= 0)) refuser('jzero-judge')(`--critique ${arg('critique')}: a whole number of tokens ≥ 0`)
  const out = { probe: 'jzero-judge', model: MODEL, judge: JUDGE, critiqueTokens: view.critiqueTokens, questionsPerLevel: n, samplesPerQuestion: k, note: 'Solver samples at T 1 (the toy preset), max 64 tokens', levels: {} }
  for (const level of [2, 3, 4]) {
    const problems = trainingQuestions(`evidence-probe-jz-${level}`, level, n)
    const groups = await model.generate(problems.map((p) => world.jzero.solverPrompt(p.question)), { n: k, temperature: 1, maxTokens: 64, seed: 21 })
    const items = groups.flatMap((g, i) => g.map((c) => ({ question: problems[i].question, response: c.text })))
    const scores = await rawJudgeScores(judge, world, items, view)
    const margins = verifierPairMargins(world, items, Array.from(scores), k)
    const heldOut = world.data.heldOutPreferences(50).filter((p) => p.group === `L${level}`)
    out.levels[`L${level}`] = {
      solverSampleAccuracy: items.filter((it, j) => world.verifier.verify(problems[Math.floor(j / k)], it.response)).length / items.length,
      onPolicyPairs: margins.length,
      onPolicyPairwiseAccuracy: pairwiseAccuracy(margins),
      heldOutPairs: heldOut.length,
      heldOutPairwiseAccuracy: pairwiseAccuracy(await pairMargins(judge, world, heldOut, view)),
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

/**
 * The bundled model after `steps` SFT steps whose batches are half Judge transcripts in the `check`
 * form; its folder. With --lora R, a LoRA adapter trained on Judge transcripts alone (the base, and
 * so every role that runs without the adapter, unchanged); its PEFT folder.
 */
async function fineTuneJudge(check, steps, lr) {
  const model = await loadModel(MODEL, { threads: 2 })
  const trainer = await model.trainer({
    objective: { name: 'sft' },
    ...(LORA ? { lora: { rank: LORA, alpha: 2 * LORA, seed: 7 } } : {}),
    optimizer: { lr, weightDecay: LORA ? 0 : 0.1, beta1: 0.9, beta2: 0.99 },
    schedule: { kind: 'cosine', warmupSteps: Math.min(20, steps), totalSteps: Math.max(steps, 21), minLrRatio: 0.1 },
    clipGradNorm: 1,
    microBatchSize: 16,
  })
  const perStep = 32
  const judgedPerStep = LORA ? perStep : perStep / 2
  const levelWeights = TOY_RECIPE_DEFAULTS.levelWeights
  const judged = buildCorpus({ seed: `judge-checks-${check}`, size: steps * judgedPerStep, mix: { judge: 1 }, levelWeights, judge: { check, lazyRate: 0, inputWrongRate: 0.7 } })
  const encode = (it) => ({ prompt: model.tokenizer.encode(it.prompt, { addSpecialTokens: false }), completion: [...model.tokenizer.encode(it.completion, { addSpecialTokens: false }), TOY_IDS.imEnd] })
  const restPerStep = perStep - judgedPerStep
  const rest = restPerStep ? buildCorpus({ seed: 'judge-checks-rest', size: steps * restPerStep, mix: { ...TOY_RECIPE_DEFAULTS.mix, judge: 0 }, levelWeights }) : []
  const restSequences = REST === 'own' ? await ownSamples(model, rest) : rest.map(encode)
  for (let step = 0; step < steps; step++) {
    const sequences = [...judged.slice(step * judgedPerStep, (step + 1) * judgedPerStep).map(encode), ...restSequences.slice(step * restPerStep, (step + 1) * restPerStep)]
    const m = await trainer.step({ sequences })
    if ((step + 1) % 100 === 0) process.stderr.write(`${check}: step ${step + 1}/${steps} loss ${m.loss.toFixed(4)}\n`)
  }
  const name = LORA ? `${check}-lora${LORA}` : check
  const dir = KEEP ? join(KEEP, name) : mkdtempSync(join(tmpdir(), `judge-checks-${name}-`))
  await model.save(dir)
  model.dispose()
  return dir
}

/** A judge-checks Judge: a model folder, or (--lora) the --model weights with the PEFT adapter folder `dir` attached. */
async function loadJudgeChecker(dir) {
  const isAdapter = existsSync(join(dir, 'adapter_config.json')) && !existsSync(join(dir, 'config.json'))
  const judge = await loadModel(isAdapter ? MODEL : dir, { threads: 2 })
  if (isAdapter) await judge.loadAdapter(dir)
  return judge
}

/**
 * judge-checks --rest own: the other roles' half of each batch is the model's own T 1 completions of
 * the same prompts, sampled before the fine-tune starts. SFT on its own samples minimizes
 * KL(p_before ‖ p_θ) on those roles, meant to hold the Solver, Proposer and Validator where they were
 * while the Judge learns the new check (at lr 3e-4 it did not quite: the README's evidence section).
 */
async function ownSamples(model, items) {
  const prompts = items.map((it) => model.tokenizer.encode(it.prompt, { addSpecialTokens: false }))
  const own = []
  for (let start = 0; start < prompts.length; start += 512) {
    const groups = await model.generate(prompts.slice(start, start + 512), { n: 1, temperature: 1, maxTokens: 256, seed: 17 + start })
    for (const [i, [c]] of groups.entries()) {
      const body = Array.from(c.tokens).filter((t) => t !== TOY_IDS.imEnd && t !== TOY_IDS.endoftext)
      own.push({ prompt: prompts[start + i], completion: c.finishReason === 'stop' ? [...body, TOY_IDS.imEnd] : body })
    }
  }
  return own
}

/** Mean of P(says right | right) − P(says right | wrong) over question resamples: [2.5%, 97.5%]. */
function discriminationInterval(rows, key, replicates = 2000) {
  const byQuestion = new Map()
  for (const r of rows) byQuestion.set(r.q, [...(byQuestion.get(r.q) ?? []), r])
  const groups = [...byQuestion.values()]
  const rng = new Rng('judge-checks-bootstrap')
  const stats = []
  for (let b = 0; b < replicates; b++) {
    const sample = Array.from({ length: groups.length }, () => groups[rng.int(0, groups.length - 1)]).flat()
    stats.push(key(sample))
  }
  stats.sort((a, b) => a - b)
  return [stats[Math.floor(0.025 * replicates)], stats[Math.floor(0.975 * replicates)]]
}

function discrimination(rows, says = (r) => r.says) {
  const rate = (xs) => xs.filter(says).length / xs.length
  return rate(rows.filter((r) => r.truth)) - rate(rows.filter((r) => !r.truth))
}

/** At the first step the check form flags (its residue disagrees), what the Judge wrote as its own residue there. */
function residueAtFirstFlag(check, response, verdict) {
  const steps = writtenSteps(response).map((s) => stepResidues(check, s))
  const k = steps.findIndex((r) => r.own !== r.written)
  if (k < 0) return null
  const line = (/<think>([\s\S]*?)(<\/think>|$)/.exec(verdict)?.[1] ?? '').split('. got')[0].split('; ')[k]
  const wrote = line === undefined ? null : /[+\-*]\d:(\d) /.exec(line)?.[1] ?? null
  if (wrote === null) return 'unchecked'
  return BigInt(wrote) === steps[k].own ? 'computed' : BigInt(wrote) === steps[k].written ? 'copied' : 'other'
}

async function judgeRows(dir, answers, check, temperature) {
  const judge = await loadJudgeChecker(dir)
  const verdicts = await judge.generate(answers.map((a) => world.cose.judgePrompt(a.problem.question, a.text)), { n: 1, temperature, maxTokens: 200, seed: 12 })
  judge.dispose()
  return answers.map((a, i) => {
    const v = verdicts[i][0].text
    const score = world.cose.parseScore(v)
    const e = parseExpr(a.problem.question)
    const faultless = world.cose.parseScore(scriptedJudge(new Rng(1), e, a.text, { lazyRate: 0, slipRate: 0, check }).completion)
    const atFlag = check === 'recompute' ? checkAtFirstSlip(a.text, v) : residueAtFirstFlag(check, a.text, v)
    return { q: a.q, truth: a.truth, says: score === null ? null : score >= 0.5, faultless: faultless >= 0.5, atFlag }
  })
}

function summarizeChecks(rows, baseline) {
  const parsed = rows.filter((r) => r.says !== null)
  const rate = (xs) => xs.filter((r) => r.says).length / xs.length
  const atFlag = { computed: 0, copied: 0, other: 0, unchecked: 0 }
  for (const r of rows) if (r.atFlag) atFlag[r.atFlag]++
  const out = {
    verdicts: rows.length,
    parsed: parsed.length,
    agreement: parsed.filter((r) => r.says === r.truth).length / parsed.length,
    saysRightWhenRight: rate(parsed.filter((r) => r.truth)),
    saysRightWhenWrong: rate(parsed.filter((r) => !r.truth)),
    discrimination: discrimination(parsed),
    discriminationCi95: discriminationInterval(parsed, (xs) => discrimination(xs)),
    faultlessAgreement: rows.filter((r) => r.faultless === r.truth).length / rows.length,
    faultlessDiscrimination: discrimination(rows, (r) => r.faultless),
    atFirstFlaggedStep: atFlag,
  }
  if (baseline) {
    // paired on the same answers: this form's discrimination minus the baseline's (unparsed verdicts count as "not right")
    const paired = rows.map((r, i) => ({ q: r.q, truth: r.truth, a: r.says === true, b: baseline[i].says === true }))
    const diff = (xs) => discrimination(xs, (r) => r.a) - discrimination(xs, (r) => r.b)
    out.discriminationVsRecompute = diff(paired)
    out.discriminationVsRecomputeCi95 = discriminationInterval(paired, diff)
  }
  return out
}

async function judgeChecks() {
  const steps = Number(arg('steps', 600))
  const lr = Number(arg('lr', 3e-4))
  const n = Number(arg('questions', 200))
  const checks = String(arg('checks', 'recompute,units,nines')).split(',')
  const refuse = refuser('judge-checks')
  if (!(Number.isInteger(steps) && steps >= 0)) refuse(`--steps must be a whole number ≥ 0, got ${arg('steps')}`)
  if (!(lr > 0)) refuse(`--lr must be a number > 0, got ${arg('lr')}`)
  if (!(Number.isInteger(n) && n >= 1)) refuse(`--questions must be a whole number ≥ 1, got ${arg('questions')}`)
  if (!['teacher', 'own'].includes(REST)) refuse(`--rest must be teacher or own, got ${REST}`)
  if (LORA !== null && !(Number.isInteger(LORA) && LORA >= 1 && LORA <= 64)) refuse(`--lora must be a whole number in [1, 64], got ${arg('lora')}`)
  if (LORA !== null && arg('rest', null) !== null) refuse('--lora trains on Judge transcripts alone: --rest does not apply')
  for (const c of checks) if (!JUDGE_CHECKS.includes(c)) refuse(`--checks: '${c}' is not one of ${JUDGE_CHECKS.join(', ')}`)
  const solverDir = arg('solver', DEFAULT_MODEL)
  const solver = await loadModel(solverDir, { threads: 2 })
  const problems = trainingQuestions('evidence-probe-checks-3', 3, n)
  const groups = await solver.generate(problems.map((p) => world.cose.solverPrompt(p.question)), { n: 2, temperature: 1, maxTokens: 64, seed: 11 })
  solver.dispose()
  const answers = groups.flatMap((g, q) => g.map((c) => ({ q, problem: problems[q], text: c.text, truth: world.verifier.verify(problems[q], c.text) })))
  const out = {
    probe: 'judge-checks',
    model: MODEL,
    solver: solverDir,
    fineTune: { steps, sequencesPerStep: 32, ...(LORA ? { lora: { rank: LORA, alpha: 2 * LORA }, judgeShare: 1 } : { judgeShare: 0.5, otherRoles: REST === 'own' ? "the model's own T 1 samples (self-distillation)" : "the teachers' transcripts" }), lr, schedule: 'cosine, 20 warmup steps, to 0.1×', judgeInputWrongRate: 0.7, judgeLazyRate: 0 },
    level: 3,
    questions: n,
    samplesPerQuestion: 2,
    solverSampleAccuracy: answers.filter((a) => a.truth).length / answers.length,
    rows: {},
  }
  // the --model weights as they are (the bundled ones by default), their Judge checking as it was taught
  for (const temperature of [1, 0]) out.rows[`${MODEL === DEFAULT_MODEL ? 'bundled' : 'as given'}, T ${temperature}`] = summarizeChecks(await judgeRows(MODEL, answers, 'recompute', temperature))
  for (const check of checks) {
    const dir = steps > 0 ? await fineTuneJudge(check, steps, lr) : MODEL
    try {
      for (const temperature of [1, 0]) {
        const rows = await judgeRows(dir, answers, check, temperature)
        out.rows[`${check}, T ${temperature}`] = summarizeChecks(rows, out.baselineRows?.[temperature])
        if (check === 'recompute') (out.baselineRows ??= {})[temperature] = rows
      }
    } finally {
      if (steps > 0 && !KEEP) rmSync(dir, { recursive: true, force: true })
    }
    process.stderr.write(`${check} done\n`)
  }
  delete out.baselineRows
  return out
}

async function dpoWarmStart() {
  const bench = await import('./evidence.mjs')
  const { ensurePool } = await import('../dist/methods/offline/pool.js')
  const { ensureWarmStart } = await import('../dist/methods/offline/loop.js')
  const refuse = refuser('dpo-warm-start')
  const level = Number(arg('level', 3))
  if (![2, 3, 4, 5].includes(level)) refuse(`--level must be 2, 3, 4 or 5, as the evidence runs; got ${arg('level')}`)
  const cells = arg('cells', join(here, 'results', 'evidence-cells-full-items400x500'))
  const scale = arg('lr-scale', '1')
  const seeds = [1, 2, 3]
  // the finished run's DPO test cells, read first: a wrong folder or scale is refused before any sampling
  const armCells = {}
  for (const arm of Object.keys(bench.METHOD_TABLE.dpo.arms)) {
    armCells[arm] = seeds.map((seed) => {
      const file = bench.cellFile(cells, bench.cellKey('dpo', arm, seed, scale, 'test'))
      if (!existsSync(file)) refuse(`no DPO test cell ${file}: --cells names the evidence run's cells folder and --lr-scale its chosen scale (the "lr×" of its test cells)`)
      return JSON.parse(readFileSync(file, 'utf8'))
    })
  }
  const levelWorld = arithWorld({ benchmarks: [`L${level}`] })
  const test = bench.splits(levelWorld, { dev: 400, test: 500 }, level).test
  if (armCells['uid-conj'][0].mean4.length !== test.problems.length) refuse(`the cells in ${cells} hold ${armCells['uid-conj'][0].mean4.length} test items, not the ${test.problems.length} of --items 400,500`)
  const dir = mkdtempSync(join(tmpdir(), 'dpo-warm-start-'))
  try {
    const config = (seed) => bench.METHOD_TABLE.dpo.resolve({ seed })
    const scorer = await loadModel(MODEL, { threads: 2 })
    const { pool } = await ensurePool(config(0), scorer, levelWorld, dir)
    const base = await bench.evaluate(scorer, levelWorld, test)
    scorer.dispose()
    const warm = []
    for (const seed of seeds) {
      const policy = await loadModel(await ensureWarmStart(dir, pool, config(seed), MODEL, levelWorld, { threads: 2 }), { threads: 2 })
      warm.push(await bench.evaluate(policy, levelWorld, test))
      policy.dispose()
    }
    const warmPooled = bench.pool(warm)
    const out = { probe: 'dpo-warm-start', model: MODEL, level, testItems: test.problems.length, seeds, warmStartVsBase: bench.compare(warmPooled, bench.baseAsSeeds(base, seeds.length)), dpoVsWarmStart: {} }
    for (const [arm, cellsOfArm] of Object.entries(armCells)) out.dpoVsWarmStart[arm] = bench.compare(bench.pool(cellsOfArm), warmPooled)
    return out
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** A probe's refusal of bad options: its message on stderr, exit code 2, nothing written. */
function refuser(probe) {
  return (message) => {
    console.error(`${probe}: ${message}`)
    process.exit(2)
  }
}

/** --method: one of the evidence table's method commands. */
function methodArg(bench, fallback, refuse) {
  const method = arg('method', fallback)
  if (!bench.METHOD_TABLE[method]) refuse(`--method ${method}: one of ${Object.keys(bench.METHOD_TABLE).join(', ')}`)
  return method
}

/** One saved evidence cell (its per-item mean@4 and greedy answers), or a refusal naming the file. */
function readCell(bench, dir, key, refuse) {
  const file = bench.cellFile(dir, key)
  if (!existsSync(file)) refuse(`no cell ${file}`)
  let cell
  try {
    cell = JSON.parse(readFileSync(file, 'utf8'))
  } catch (e) {
    refuse(`${file}: not a cell (${e.message})`)
  }
  if (!Array.isArray(cell?.mean4) || !Array.isArray(cell?.greedy)) refuse(`${file}: not a cell (no mean4 and greedy answers)`)
  return cell
}

async function guardEffect() {
  const bench = await import('./evidence.mjs')
  const refuse = refuser('guard-effect')
  const method = methodArg(bench, 'jzero', refuse)
  const [plainDir, guardedDir, scale] = [arg('cells', null), arg('guarded', null), arg('lr-scale', null)]
  if (!plainDir || !guardedDir || !scale) refuse('--cells DIR (the run without the guard), --guarded DIR (with it) and --lr-scale X (the scale of their test cells) are required')
  const seeds = [1, 2, 3]
  const read = (dir, arm, seed) => readCell(bench, dir, bench.cellKey(method, arm, seed, scale, 'test'), refuse)
  const out = { probe: 'guard-effect', method, plain: plainDir, guarded: guardedDir, lrScale: Number(scale), seeds, arms: {} }
  for (const arm of Object.keys(bench.METHOD_TABLE[method].arms)) {
    const plain = seeds.map((seed) => read(plainDir, arm, seed))
    const guarded = seeds.map((seed) => read(guardedDir, arm, seed))
    if (!guarded.every((c) => c.guard)) refuse(`the cells in ${guardedDir} were not run with --on-collapse`)
    if (plain.some((c) => c.guard)) refuse(`the cells in ${plainDir} were run with --on-collapse; --cells names the run without it`)
    if (guarded[0].mean4.length !== plain[0].mean4.length) refuse(`the two folders' cells hold ${guarded[0].mean4.length} and ${plain[0].mean4.length} test items`)
    out.arms[arm] = {
      guardedVsPlain: bench.compare(bench.pool(guarded), bench.pool(plain)),
      guard: guarded.map((c) => ({ fired: c.guard.fired, firedAt: c.guard.firedAt, rolledBackTo: c.guard.rolledBackTo, probe: c.guard.probe })),
    }
  }
  return out
}

/**
 * against-base: each arm's test cells of an evidence run (--cells DIR, --method, --lr-scale) against
 * the base test cell of another run on the same test items (--base-cells DIR), with the evidence's
 * paired bootstrap: e.g. COSE on a fine-tuned model against the bundled model it was made from.
 */
async function againstBase() {
  const bench = await import('./evidence.mjs')
  const refuse = refuser('against-base')
  const method = methodArg(bench, 'cose', refuse)
  const [cellsDir, baseDir, scale] = [arg('cells', null), arg('base-cells', null), arg('lr-scale', null)]
  if (!baseDir) refuse('--base-cells DIR (the run whose base model is the reference) is required')
  const otherBase = readCell(bench, baseDir, 'base|test', refuse)
  if (!cellsDir) return modelAgainstBase(bench, otherBase, baseDir, refuse)
  if (!scale) refuse('--cells DIR (the run) needs --lr-scale X (the scale of its test cells)')
  const seeds = String(arg('seeds', '1,2,3')).split(',').map(Number)
  if (levelOfCells(cellsDir) !== levelOfCells(baseDir)) refuse(`the cells in ${cellsDir} are of level ${levelOfCells(cellsDir)}, those in ${baseDir} of level ${levelOfCells(baseDir)}`)
  const ownBase = readCell(bench, cellsDir, 'base|test', refuse)
  if (otherBase.mean4.length !== ownBase.mean4.length) refuse(`the two folders' base cells hold ${ownBase.mean4.length} and ${otherBase.mean4.length} test items`)
  const asSeeds = (base) => bench.baseAsSeeds(base, seeds.length)
  const out = { probe: 'against-base', method, cells: cellsDir, baseCells: baseDir, lrScale: Number(scale), seeds, testItems: ownBase.mean4.length, ownBaseVsOtherBase: bench.compare(asSeeds(ownBase), asSeeds(otherBase)), arms: {} }
  for (const arm of Object.keys(bench.METHOD_TABLE[method].arms)) {
    const cells = seeds.map((seed) => readCell(bench, cellsDir, bench.cellKey(method, arm, seed, scale, 'test'), refuse))
    out.arms[arm] = { vsOtherBase: bench.compare(bench.pool(cells), asSeeds(otherBase)), vsOwnBase: bench.compare(bench.pool(cells), asSeeds(ownBase)) }
  }
  return out
}

/** The level an evidence cells folder was run at, read from its name (`-L<N>`; untagged: the default level, 3). */
function levelOfCells(dir) {
  const m = /-L(\d)(-|$)/.exec(basename(resolve(dir)))
  return m ? Number(m[1]) : 3
}

/** against-base without --cells: the --model weights, untrained, on --level's test split (--items), against the --base-cells run's base. */
async function modelAgainstBase(bench, otherBase, baseDir, refuse) {
  const level = Number(arg('level', 3))
  const [dev, test] = String(arg('items', '400,500')).split(',').map(Number)
  if (![2, 3, 4, 5].includes(level)) refuse(`--level must be 2, 3, 4 or 5, got ${arg('level')}`)
  if (!Number.isInteger(dev) || !Number.isInteger(test) || dev < 1 || test < 1) refuse(`--items must be DEV,TEST, two whole numbers ≥ 1, got ${arg('items')}`)
  if (levelOfCells(baseDir) !== level) refuse(`--level ${level}, but the cells in ${baseDir} are of level ${levelOfCells(baseDir)}`)
  if (test !== otherBase.mean4.length) refuse(`--items names ${test} test items; the cells in ${baseDir} hold ${otherBase.mean4.length}`)
  const levelWorld = arithWorld({ benchmarks: [`L${level}`] })
  const model = await loadModel(MODEL, { threads: 2 })
  const own = await bench.evaluate(model, levelWorld, bench.splits(levelWorld, { dev, test }, level).test)
  model.dispose()
  const asOne = (base) => bench.baseAsSeeds(base, 1)
  return { probe: 'against-base', model: MODEL, baseCells: baseDir, level, testItems: test, modelVsOtherBase: bench.compare(asOne(own), asOne(otherBase)) }
}

const probes = { 'against-base': againstBase, 'guard-effect': guardEffect, 'dpo-warm-start': dpoWarmStart, 'cose-confidence': coseConfidence, 'jzero-judge': jzeroJudge, 'rzero-signals': rzeroSignals, 'judge-checks': judgeChecks }
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
