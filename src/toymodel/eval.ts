// Evaluation of a model in the arithmetic world, on the held-out sets (evalSet) only:
// - Solver: accuracy by difficulty, greedy and mean@k of k samples at temperature 1 (plus pass@k
//   and the strict-format rate), each with a seeded percentile bootstrap interval over questions.
// - Validator: agreement of its verdict (score ≥ SCORE_PASS) with the verifier's class (good vs
//   malformed / trivial / too-hard) on held-out good questions and held-out bad ones.
// - Judge: agreement of its verdict with the verifier on the model's own sampled Solver responses.
// - For both: how well the normalized-entropy confidence of the feedback (COSE Eq. 2–3, mean over
//   the output tokens of 1 − H_t / log|V|) separates right from wrong verdicts (AUROC).
// - Chat: greedy Solver accuracy by difficulty when the same held-out question comes as a ChatML
//   conversation — the toy prompt as the user's message, and the math world's Solver prompt (UID's
//   rollout prompt) asking for a `\boxed{}` answer.
// Works on any model that speaks the toy prompts (the bundled one, or one trained from it).

import type { Completion, Model } from '../engine/model.js'
import { normalizedEntropyConfidence } from '../signals/confidence.js'
import {
  checkDecomposition,
  classifyQuestion,
  composePrompt,
  decomposeExpr,
  decomposePrompt,
  deriveSeed,
  difficultyOf,
  evalSet,
  judgePrompt,
  parseDecomposition,
  parseExpr,
  parseQuestion,
  parseScore,
  parseSolution,
  proposerPrompt,
  Rng as WorldRng,
  SCORE_PASS,
  scriptedPropose,
  solverPrompt,
  subtaskPrompt,
  subtaskValues,
  validatorPrompt,
  verifyAnswer,
  type EvalItem,
} from '../worlds/arith/index.js'
import { chatWorld } from '../worlds/math/world.js'

/** The math world's prompts and answer rules over arithmetic questions (its data plays no part here). */
const MATH_WORLD = chatWorld({ name: 'math', problems: [], benchmarks: [] })

// Re-exported for callers of the toy evaluation; they live in the statistics toolkit.
import { auroc, bootstrapMean, type Interval } from '../stats/index.js'
export { auroc, bootstrapMean, type Interval }

export interface ToyEvalOptions {
  /** Solver levels (default 1..5). */
  levels?: number[]
  /** Held-out questions per level (default 100). */
  size?: number
  /** Samples per question for mean@k (default 8; 0 = greedy only, and no Judge eval). */
  k?: number
  temperature?: number
  /** Sampling seed (default 1). */
  seed?: number
  /** Validator items per level (default 40: half held-out good questions, half bad ones). */
  validatorSize?: number
  /** Solver responses judged per question (default 2, taken from the mean@k samples). */
  judgePerQuestion?: number
  /** Also judge with one sample at temperature 1 (default true). */
  judgeSampled?: boolean
  /** Bootstrap replicates (default 2000). */
  replicates?: number
  /** Sequences decoded together (default 512). */
  maxBatch?: number
  log?: (line: string) => void
}

export interface SolverLevelReport {
  level: number
  questions: number
  greedy: Interval
  greedyFormat: number
  /** mean@k: per question the fraction of k samples that are right, averaged. */
  meanK: Interval
  passK: number
  sampledFormat: number
}

export interface FeedbackReport {
  items: number
  /** Fraction of outputs the strict parser accepts. */
  format: number
  /** Fraction of all items whose verdict agrees with the verifier (unparseable = disagree). */
  agreement: number
  agreementInterval: Interval
  /** Of the parseable outputs: right and wrong verdicts, and the AUROC of their confidence. */
  right: number
  wrong: number
  auroc: number
  meanConfidenceRight: number
  meanConfidenceWrong: number
  /** By level (judge) or by true class (validator). */
  breakdown: Record<string, { items: number; agreement: number; auroc: number }>
}

export interface ToyEvalReport {
  model: string
  options: Required<Omit<ToyEvalOptions, 'log'>>
  vocabSize: number
  solver: SolverLevelReport[]
  validator: FeedbackReport
  judge: { greedy: FeedbackReport; sampled: FeedbackReport | null; positiveRate: number } | null
  /** The J-Zero / R-Zero roles at the default level (see otherRoles). */
  roles: OtherRolesReport
  /** Greedy Solver accuracy by level with chat prompts: the toy prompt as a ChatML user message, and the math world's rollout prompt. */
  chat: { level: number; questions: number; chatml: number; mathPrompt: number }[]
  sampling: { sequences: number; tokens: number; seconds: number; tokensPerSecond: number; n: number; maxBatch: number }
  seconds: number
}

export interface OtherRolesReport {
  level: number
  /** Proposer at temperature 1: strict format rate, and of all samples the fraction that is a good question / one of the level asked / distinct. */
  proposer: { samples: number; format: number; good: number; atLevel: number; distinct: number }
  /** Decompose, greedy: strict format rate and fraction whose subtasks compute the question. */
  decompose: { questions: number; format: number; faithful: number }
  /** Subtask solver, greedy, on the reference decomposition with the true earlier values: accuracy per subtask. */
  subtask: { subtasks: number; accuracy: number }
  /** Compose, greedy, given the true sub-answers: accuracy. */
  compose: { questions: number; accuracy: number }
}

/** Proposer, decompose, subtask and compose on held-out questions of one level (greedy unless noted). */
export async function evaluateOtherRoles(model: Model, level: number, size: number, seed: number, maxBatch: number): Promise<OtherRolesReport> {
  const items = evalSet(level, Math.min(size, level === 1 ? 100 : 1000))
  const [proposals] = await model.generate([proposerPrompt(level)], { n: size, temperature: 1, seed, maxTokens: 48, maxBatch })
  const parsed = proposals.map((c) => parseQuestion(c.text))
  const texts = parsed.map((r) => (r.ok ? r.value.text : null))
  const good = texts.filter((t): t is string => t !== null && classifyQuestion(t) === 'good')
  const decomp = await model.generate(items.map((it) => decomposePrompt(it.question)), { temperature: 0, maxTokens: 64, maxBatch })
  const dParsed = decomp.map(([c]) => parseDecomposition(c.text))
  const faithful = dParsed.filter((r, i) => r.ok && checkDecomposition(items[i].question, r.value.subtasks) === true).length
  const subs: { prompt: string; truth: bigint }[] = []
  const composeTruth: string[] = []
  const composePrompts: string[] = []
  for (const it of items) {
    const e = parseExpr(it.question)!
    const steps = decomposeExpr(e)
    const values = subtaskValues(steps)!
    steps.forEach((st, k) => subs.push({ prompt: subtaskPrompt(it.question, k + 1, st, values.slice(0, k)), truth: values[k] }))
    composePrompts.push(composePrompt(it.question, values))
    composeTruth.push(it.answer)
  }
  const sOut = await model.generate(subs.map((x) => x.prompt), { temperature: 0, maxTokens: 64, maxBatch })
  const sOk = sOut.filter(([c], i) => {
    const r = parseSolution(c.text)
    return r.ok && r.value.answer === subs[i].truth
  }).length
  const cOut = await model.generate(composePrompts, { temperature: 0, maxTokens: 32, maxBatch })
  const cOk = cOut.filter(([c], i) => {
    const r = parseSolution(c.text)
    return r.ok && r.value.answer !== null && r.value.answer.toString() === composeTruth[i]
  }).length
  return {
    level,
    proposer: {
      samples: size,
      format: parsed.filter((r) => r.ok).length / size,
      good: good.length / size,
      atLevel: good.filter((t) => difficultyOf(t) === level).length / size,
      distinct: new Set(texts.filter((t) => t !== null)).size / size,
    },
    decompose: { questions: items.length, format: dParsed.filter((r) => r.ok).length / items.length, faithful: faithful / items.length },
    subtask: { subtasks: subs.length, accuracy: sOk / subs.length },
    compose: { questions: items.length, accuracy: cOk / items.length },
  }
}

function solverCorrect(c: Completion, item: EvalItem): { ok: boolean; format: boolean } {
  const r = parseSolution(c.text)
  return { format: r.ok, ok: r.ok && r.value.answer !== null && r.value.answer.toString() === item.answer }
}

interface FeedbackItem {
  group: string
  truth: boolean
  completion: Completion
}

function feedbackReport(items: FeedbackItem[], vocabSize: number, seed: string, replicates: number): FeedbackReport {
  const agree: number[] = []
  const confRight: number[] = []
  const confWrong: number[] = []
  const groups = new Map<string, { agree: number[]; right: number[]; wrong: number[] }>()
  let parsed = 0
  for (const it of items) {
    const r = parseScore(it.completion.text)
    const g = groups.get(it.group) ?? { agree: [], right: [], wrong: [] }
    groups.set(it.group, g)
    if (!r.ok) {
      agree.push(0)
      g.agree.push(0)
      continue
    }
    parsed++
    const right = r.value.score >= SCORE_PASS === it.truth
    const conf = normalizedEntropyConfidence(it.completion.entropy, vocabSize) // COSE Eq. 2–3
    agree.push(right ? 1 : 0)
    g.agree.push(right ? 1 : 0)
    ;(right ? confRight : confWrong).push(conf)
    ;(right ? g.right : g.wrong).push(conf)
  }
  const mean = (a: number[]) => (a.length ? a.reduce((s, v) => s + v, 0) / a.length : NaN)
  const breakdown: FeedbackReport['breakdown'] = {}
  for (const [k, g] of [...groups].sort(([a], [b]) => (a < b ? -1 : 1))) breakdown[k] = { items: g.agree.length, agreement: mean(g.agree), auroc: auroc(g.right, g.wrong) }
  const interval = bootstrapMean(agree, { seed, replicates })
  return {
    items: items.length,
    format: items.length ? parsed / items.length : NaN,
    agreement: interval.estimate,
    agreementInterval: interval,
    right: confRight.length,
    wrong: confWrong.length,
    auroc: auroc(confRight, confWrong),
    meanConfidenceRight: mean(confRight),
    meanConfidenceWrong: mean(confWrong),
    breakdown,
  }
}

/** Held-out Validator inputs of a level: half good (from the evaluation set), half bad (malformed, trivial, too hard). */
export function validatorEvalItems(level: number, size: number): { question: string; good: boolean }[] {
  const half = Math.ceil(size / 2)
  const good = evalSet(level, Math.min(half, level === 1 ? 100 : 1000)).map((it) => it.question)
  const rng = new WorldRng(deriveSeed('toymodel-eval-validator-v1', level))
  const out: { question: string; good: boolean }[] = []
  for (let i = 0; out.length < size; i++) {
    if (i % 2 === 0 && good.length) out.push({ question: good.shift()!, good: true })
    else {
      const p = scriptedPropose(rng, level, { rates: { tagError: 0, malformed: 0.4, trivial: 0.4, tooHard: 0.2, offLevel: 0 } })
      out.push({ question: p.question, good: classifyQuestion(p.question) === 'good' })
    }
  }
  return out
}

/** Evaluates a model on the held-out sets (see the file comment). */
export async function evaluateToyModel(model: Model, options: ToyEvalOptions = {}): Promise<ToyEvalReport> {
  const started = Date.now()
  const o: Required<Omit<ToyEvalOptions, 'log'>> = {
    levels: options.levels ?? [1, 2, 3, 4, 5],
    size: options.size ?? 100,
    k: options.k ?? 8,
    temperature: options.temperature ?? 1,
    seed: options.seed ?? 1,
    validatorSize: options.validatorSize ?? 40,
    judgePerQuestion: options.judgePerQuestion ?? 2,
    judgeSampled: options.judgeSampled ?? true,
    replicates: options.replicates ?? 2000,
    maxBatch: options.maxBatch ?? 512,
  }
  const log = options.log ?? (() => {})
  const V = model.config.vocabSize
  const maxTokens = 192
  const solver: SolverLevelReport[] = []
  const judgeInputs: { level: number; question: string; response: string; correct: boolean }[] = []
  const speed = { sequences: 0, tokens: 0, seconds: 0 }
  for (const level of o.levels) {
    const items = evalSet(level, Math.min(o.size, level === 1 ? 100 : 1000))
    const prompts = items.map((it) => solverPrompt(it.question))
    const greedy = await model.generate(prompts, { n: 1, temperature: 0, maxTokens, maxBatch: o.maxBatch })
    const g = greedy.map(([c], i) => solverCorrect(c, items[i]))
    const greedyAcc = bootstrapMean(g.map((x) => (x.ok ? 1 : 0)), { seed: `solver-greedy-${level}`, replicates: o.replicates })
    let meanK: Interval = { estimate: NaN, lo: NaN, hi: NaN }
    let passK = NaN
    let sampledFormat = NaN
    if (o.k > 0) {
      const t0 = process.hrtime.bigint()
      const samples = await model.generate(prompts, { n: o.k, temperature: o.temperature, topP: 1, seed: o.seed + level, maxTokens, maxBatch: o.maxBatch })
      speed.seconds += Number(process.hrtime.bigint() - t0) / 1e9
      const perQ: number[] = []
      let pass = 0
      let fmt = 0
      samples.forEach((cs, i) => {
        const rs = cs.map((c) => solverCorrect(c, items[i]))
        speed.sequences += cs.length
        for (const c of cs) speed.tokens += c.tokens.length
        perQ.push(rs.filter((r) => r.ok).length / rs.length)
        if (rs.some((r) => r.ok)) pass++
        fmt += rs.filter((r) => r.format).length
        for (let j = 0; j < Math.min(o.judgePerQuestion, cs.length); j++)
          judgeInputs.push({ level, question: items[i].question, response: cs[j].text, correct: rs[j].ok })
      })
      meanK = bootstrapMean(perQ, { seed: `solver-meank-${level}`, replicates: o.replicates })
      passK = pass / items.length
      sampledFormat = fmt / (items.length * o.k)
    }
    const rep: SolverLevelReport = {
      level,
      questions: items.length,
      greedy: greedyAcc,
      greedyFormat: g.filter((x) => x.format).length / g.length,
      meanK,
      passK,
      sampledFormat,
    }
    solver.push(rep)
    log(`solver L${level}: greedy ${pct(rep.greedy.estimate)}  mean@${o.k} ${pct(rep.meanK.estimate)}  format ${pct(rep.greedyFormat)}`)
  }

  // Validator: greedy verdicts on held-out good and bad questions.
  const vItems = o.levels.flatMap((level) => validatorEvalItems(level, o.validatorSize).map((it) => ({ ...it, level })))
  const vOut = await model.generate(vItems.map((it) => validatorPrompt(it.question)), { n: 1, temperature: 0, maxTokens: 64, maxBatch: o.maxBatch })
  const validator = feedbackReport(
    vItems.map((it, i) => ({ group: it.good ? 'good' : classifyQuestion(it.question), truth: it.good, completion: vOut[i][0] })),
    V,
    'validator',
    o.replicates,
  )
  log(`validator: agreement ${pct(validator.agreement)}  AUROC ${validator.auroc.toFixed(3)}`)

  // Judge: the model's own sampled Solver responses, judged greedily (and once at temperature 1).
  let judge: ToyEvalReport['judge'] = null
  if (judgeInputs.length) {
    const prompts = judgeInputs.map((j) => judgePrompt(j.question, j.response))
    const asItems = (out: Completion[][]) => judgeInputs.map((j, i) => ({ group: `L${j.level}`, truth: j.correct, completion: out[i][0] }))
    const gOut = await model.generate(prompts, { n: 1, temperature: 0, maxTokens, maxBatch: o.maxBatch })
    const greedyRep = feedbackReport(asItems(gOut), V, 'judge-greedy', o.replicates)
    let sampledRep: FeedbackReport | null = null
    if (o.judgeSampled) {
      const sOut = await model.generate(prompts, { n: 1, temperature: o.temperature, seed: o.seed + 100, maxTokens, maxBatch: o.maxBatch })
      sampledRep = feedbackReport(asItems(sOut), V, 'judge-sampled', o.replicates)
    }
    judge = { greedy: greedyRep, sampled: sampledRep, positiveRate: judgeInputs.filter((j) => j.correct).length / judgeInputs.length }
    log(`judge: agreement ${pct(greedyRep.agreement)}  AUROC ${greedyRep.auroc.toFixed(3)}`)
  }

  const chat: ToyEvalReport['chat'] = []
  for (const level of o.levels) {
    const items = evalSet(level, Math.min(o.size, level === 1 ? 100 : 1000))
    const asChat = await model.generate(items.map((it) => ({ messages: [{ role: 'user', content: solverPrompt(it.question).trimEnd() }] })), { temperature: 0, maxTokens, maxBatch: o.maxBatch })
    const asMath = await model.generate(items.map((it) => MATH_WORLD.solve.solverPrompt(it.question)), { temperature: 0, maxTokens, maxBatch: o.maxBatch })
    const share = (outs: Completion[][]) => outs.filter(([c], i) => c.finishReason === 'stop' && MATH_WORLD.verifier.verify(items[i], c.text)).length / items.length
    const lenient = (outs: Completion[][]) => outs.filter(([c], i) => c.finishReason === 'stop' && verifyAnswer(items[i].question, c.text) === true).length / items.length
    chat.push({ level, questions: items.length, chatml: lenient(asChat), mathPrompt: share(asMath) })
    log(`chat L${level}: ChatML ${pct(chat.at(-1)!.chatml)}  math-world prompt ${pct(chat.at(-1)!.mathPrompt)}`)
  }

  const roleLevel = o.levels.includes(3) ? 3 : o.levels[0]
  const roles = await evaluateOtherRoles(model, roleLevel, o.size, o.seed + 200, o.maxBatch)
  log(`proposer: good ${pct(roles.proposer.good)}  decompose faithful ${pct(roles.decompose.faithful)}  subtask ${pct(roles.subtask.accuracy)}  compose ${pct(roles.compose.accuracy)}`)

  return {
    model: model.dir,
    options: o,
    vocabSize: V,
    solver,
    validator,
    judge,
    roles,
    chat,
    sampling: { ...speed, tokensPerSecond: speed.seconds > 0 ? speed.tokens / speed.seconds : NaN, n: o.k, maxBatch: o.maxBatch },
    seconds: (Date.now() - started) / 1000,
  }
}

function pct(x: number): string {
  return Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : '—'
}

function iv(i: Interval): string {
  return Number.isFinite(i.estimate) ? `${pct(i.estimate)} [${(100 * i.lo).toFixed(1)}, ${(100 * i.hi).toFixed(1)}]` : '—'
}

function feedbackRow(name: string, r: FeedbackReport): string {
  return `| ${name} | ${r.items} | ${pct(r.format)} | ${iv(r.agreementInterval)} | ${r.right}/${r.wrong} | ${r.auroc.toFixed(3)} | ${r.meanConfidenceRight.toFixed(3)} / ${r.meanConfidenceWrong.toFixed(3)} |`
}

/** The report as Markdown tables (what the model card shows). */
export function formatToyEvalTable(r: ToyEvalReport): string {
  const k = r.options.k
  const lines = [
    `Solver, held-out accuracy (95% bootstrap interval over questions; mean@${k} at temperature ${r.options.temperature}):`,
    '',
    `| level | questions | greedy | mean@${k} | pass@${k} | format (greedy / sampled) |`,
    '|---|---|---|---|---|---|',
    ...r.solver.map((s) => `| ${s.level} | ${s.questions} | ${iv(s.greedy)} | ${iv(s.meanK)} | ${pct(s.passK)} | ${pct(s.greedyFormat)} / ${pct(s.sampledFormat)} |`),
    '',
    'Validator and Judge verdicts (score ≥ 6) against the verifier; confidence = COSE Eq. 2–3 normalized-entropy confidence, AUROC for right vs wrong verdicts:',
    '',
    '| role | items | format | agreement | right/wrong | AUROC | mean conf. right / wrong |',
    '|---|---|---|---|---|---|---|',
    feedbackRow('validator (greedy)', r.validator),
  ]
  if (r.judge) {
    lines.push(feedbackRow('judge (greedy)', r.judge.greedy))
    if (r.judge.sampled) lines.push(feedbackRow(`judge (T=${r.options.temperature})`, r.judge.sampled))
  }
  lines.push('')
  if (r.judge) {
    const b = r.judge.greedy.breakdown
    lines.push(
      `Judge (greedy) by level — inputs: ${r.options.judgePerQuestion} of the model's own sampled Solver responses per question, ${pct(r.judge.positiveRate)} of them right:`,
      '',
      '| level | items | agreement | AUROC |',
      '|---|---|---|---|',
      ...Object.entries(b).map(([g, x]) => `| ${g.slice(1)} | ${x.items} | ${pct(x.agreement)} | ${x.auroc.toFixed(3)} |`),
      '',
    )
  }
  const vb = r.validator.breakdown
  lines.push(`Validator by true class: ${Object.entries(vb).map(([g, x]) => `${g} ${pct(x.agreement)} (${x.items})`).join(', ')}`)
  const ro = r.roles
  lines.push(
    '',
    `Other roles at level ${ro.level} (held-out questions; greedy except the Proposer, ${ro.proposer.samples} samples at temperature 1):`,
    '',
    '| role | measure | value |',
    '|---|---|---|',
    `| proposer | strict format / good question / good and at level ${ro.level} / distinct | ${pct(ro.proposer.format)} / ${pct(ro.proposer.good)} / ${pct(ro.proposer.atLevel)} / ${pct(ro.proposer.distinct)} |`,
    `| decompose | strict format / subtasks compute the question | ${pct(ro.decompose.format)} / ${pct(ro.decompose.faithful)} |`,
    `| subtask | accuracy per subtask (reference decomposition, true earlier values; ${ro.subtask.subtasks} subtasks) | ${pct(ro.subtask.accuracy)} |`,
    `| compose | accuracy given the true sub-answers | ${pct(ro.compose.accuracy)} |`,
    '',
  )
  if (r.chat?.length)
    lines.push(
      'Chat formats, greedy Solver accuracy on the same held-out questions (ChatML: the toy prompt as the user message, answer read leniently; math-world prompt: UID\'s rollout prompt, the last \\boxed{} answer):',
      '',
      '| level | questions | ChatML | math-world prompt |',
      '|---|---|---|---|',
      ...r.chat.map((c) => `| ${c.level} | ${c.questions} | ${pct(c.chatml)} | ${pct(c.mathPrompt)} |`),
      '',
    )
  lines.push(
    `Sampling: ${r.sampling.sequences} Solver sequences (n=${r.sampling.n} per prompt, up to ${r.sampling.maxBatch} decoded together), ${r.sampling.tokens} tokens in ${r.sampling.seconds.toFixed(1)} s = ${r.sampling.tokensPerSecond.toFixed(0)} tokens/s. Eval took ${r.seconds.toFixed(0)} s.`,
  )
  return lines.join('\n')
}
