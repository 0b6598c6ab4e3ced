// The per-step reward diagnostics (issue 27) on the scripted policy, where the truth is known: a
// script decides which proposals are well posed, which the Validator accepts, on which questions
// the Judge lies and how often the Solver is right, and each test recomputes from the scripted
// outputs what every diagnostic must equal.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { scriptedPolicies, type ScriptContext, type ScriptedPolicyOptions } from '../../src/methods/common/scripted-policy.js'
import { resolveCoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { resolveJzeroConfig } from '../../src/methods/jzero/config.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { resolveRzeroConfig } from '../../src/methods/rzero/config.js'
import { RzeroRun, type ChallengerRecord } from '../../src/methods/rzero/loop.js'
import { resolveTtrlConfig } from '../../src/methods/ttrl/config.js'
import { TtrlRun } from '../../src/methods/ttrl/loop.js'
import { judgeQuestion } from '../../src/ensemble/ensemble.js'
import { pearson } from '../../src/stats/summary.js'
import { answerOf, arithWorld as toyWorld, verifyAnswer } from '../../src/worlds/arith/index.js'
import { scriptedAnswer } from './arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-diagnostics-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const BASE = join(root, 'no-such-base-model')
const world = toyWorld()

/** The scripted questions: whether the verifier calls each well posed, whether the Validator accepts it, whether the Judge tells the truth on it, and how often the Solver is right. */
const QUESTIONS = [
  { q: '12+7', good: true, accept: true, honest: true, solve: 1 },
  { q: '(3+4)*5', good: true, accept: true, honest: false, solve: 0.5 },
  { q: '7*1', good: false, accept: true, honest: true, solve: 0.5 }, // trivial (×1): the Validator wrongly accepts it
  { q: '9*8-6', good: true, accept: false, honest: true, solve: 0.25 },
  { q: '5-5', good: false, accept: false, honest: true, solve: 1 }, // trivial (x−x), rightly rejected
  { q: '(12+7)*3', good: true, accept: true, honest: true, solve: 0 },
]
const info = (q: string) => QUESTIONS.find((x) => x.q === q.replace(/\s+/g, ''))
const after = (prompt: string, head: string) => prompt.slice(head.length).split('\n')[0].trim()
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
/** The Judge's 1..10 verdict: 9 for "right", 2 for "wrong"; a lie on dishonest questions. */
const judgeScore = (q: string, response: string) => ((verifyAnswer(q, response) === true) === info(q)!.honest ? 9 : 2)

function script(c: ScriptContext): string {
  const p = c.prompt
  if (p.startsWith('Propose')) return `<question>${QUESTIONS[(c.promptIndex + c.sampleIndex) % QUESTIONS.length].q}</question>`
  if (p.startsWith('Rate problem: ')) return `<score>${info(after(p, 'Rate problem: '))!.accept ? 8 : 3}</score>`
  if (p.startsWith('Judge: ')) {
    const [q, r] = p.split('\n')
    return `<score>${judgeScore(q.slice('Judge: '.length), r.slice('Response: '.length))}</score>`
  }
  if (p.startsWith('Solve: ')) {
    const q = after(p, 'Solve: ')
    return scriptedAnswer(q, c.uniform < (QUESTIONS.find((x) => x.q === q)?.solve ?? 0.5), c.uniform)
  }
  return 'unscripted prompt'
}

describe('the well-posedness the script assumes', () => {
  it('is the verifier\'s', () => {
    for (const x of QUESTIONS) expect(world.verifier.questionInfo!(x.q).wellPosed, x.q).toBe(x.good)
  })
})

describe('COSE diagnostics', () => {
  it('equal the Validator\'s accept precision, the Judge\'s agreement with the verifier and p(q) against the true solve rate', async () => {
    const config = resolveCoseConfig({ steps: 1, proposer: { count: 12, levels: [3], temperature: 1, maxTokens: 40 }, solver: { questions: 6, n: 4, temperature: 1, maxTokens: 64 }, eval: { every: 1, size: 6, benchmarks: [] } })
    const open = scriptedPolicies({ script })
    const run = await CoseRun.start(BASE, config, world, { openPolicy: open })
    const r = await run.runStep()
    const policy = open.policies.find((p) => p.trainerOf)!
    const [proposed, , solved] = policy.calls
    const questions = proposed.outputs.map((g) => /<question>(.*)<\/question>/.exec(g[0].text)![1])
    const accepted = questions.filter((q) => info(q)!.accept)
    expect(r.diagnostics.proposalGoodRate).toBeCloseTo(questions.filter((q) => info(q)!.good).length / questions.length, 12)
    expect(r.diagnostics.validatorAcceptPrecision).toBeCloseTo(accepted.filter((q) => info(q)!.good).length / accepted.length, 12)
    expect(r.diagnostics.validatorAcceptPrecision).toBeCloseTo(3 / 4, 12) // every question proposed twice; 3 of the 4 accepted ones are good

    const solvedQs = solved.prompts.map((p) => after(p, 'Solve: '))
    expect(new Set(solvedQs)).toEqual(new Set(accepted))
    const answers = solved.outputs.flatMap((g, qi) => g.map((c) => ({ q: solvedQs[qi], right: verifyAnswer(solvedQs[qi], c.text) === true, judged: (judgeScore(solvedQs[qi], c.text) - 1) / 9 })))
    expect(r.diagnostics.judgeVerifierAgreement).toBeCloseTo(answers.filter((a) => info(a.q)!.honest).length / answers.length, 12)
    const trueRate = solvedQs.map((q) => mean(answers.filter((a) => a.q === q).map((a) => (a.right ? 1 : 0))))
    const pq = solvedQs.map((q) => mean(answers.filter((a) => a.q === q).map((a) => a.judged))) // COSE Eq. 1
    expect(r.diagnostics.trueSolveRate.mean).toBeCloseTo(mean(trueRate), 12)
    expect(r.diagnostics.solveRateError).toBeCloseTo(mean(pq.map((p, i) => Math.abs(p - trueRate[i]))), 12)
    expect(r.diagnostics.solveRateCorrelation).toBeCloseTo(pearson(pq, trueRate), 12)
    expect(r.diagnostics.solveRateError).toBeGreaterThan(0) // the lying Judge on (3+4)*5 puts p(q) off the truth
    run.dispose()
  })
})

describe('TTRL diagnostics', () => {
  it('equal the pseudo-labels\' and the single rollouts\' accuracy against the reference answers', async () => {
    // each rollout is right with probability ½, else off by one or by two: the majority is sometimes wrong
    const ttrlScript = (c: ScriptContext) => {
      const q = after(c.prompt, 'Solve: ')
      const truth = answerOf(q)!
      const given = c.uniform < 0.45 ? truth : c.uniform < 0.8 ? truth + 1n : truth + 2n
      return `<think>x</think><answer>${given}</answer>`
    }
    const config = resolveTtrlConfig({ steps: 1, prompts: { offset: 0, size: 8 }, promptsPerStep: 8, rollout: { n: 5, temperature: 1, topP: 1, maxTokens: 64 } })
    const open = scriptedPolicies({ script: ttrlScript })
    const run = await TtrlRun.start(BASE, config, world, { openPolicy: open })
    const r = await run.runStep()
    const [call] = open.policies.find((p) => p.trainerOf)!.calls
    const items = world.data.unlabeledPrompts()
    const byQuestion = new Map(items.map((p) => [p.question, p.answer!]))
    const groups = call.outputs.map((g, qi) => ({ truth: byQuestion.get(after(call.prompts[qi], 'Solve: '))!, answers: g.map((c) => /<answer>(.*)<\/answer>/.exec(c.text)![1]) }))
    const majority = (xs: string[]) => xs.reduce((best, x) => (xs.filter((y) => y === x).length > xs.filter((y) => y === best).length ? x : best), xs[0]) // first occurrence wins ties
    expect(r.labelAccuracy).toBeCloseTo(groups.filter((g) => majority(g.answers) === g.truth).length / groups.length, 12)
    expect(r.rolloutAccuracy).toBeCloseTo(mean(groups.flatMap((g) => g.answers.map((a) => (a === g.truth ? 1 : 0)))), 12)
    expect(r.labelAccuracy).toBeLessThan(1)
    run.dispose()
  })
})

describe('R-Zero diagnostics', () => {
  it('equal the Solver\'s true accuracy on the Challenger\'s questions and its correlation with r_dis and p̂', async () => {
    // the Solver at T 0.7 is right on a question's own rate, at T 1.0 it is right half as often: variants disagree on some
    const rzeroScript = (c: ScriptContext) => {
      if (c.prompt.startsWith('Solve: ')) {
        const q = after(c.prompt, 'Solve: ')
        const rate = info(q)!.solve * (c.temperature === 1 ? 0.5 : 1)
        return scriptedAnswer(q, c.uniform < rate, c.uniform)
      }
      return script(c)
    }
    const config = resolveRzeroConfig({
      steps: 1,
      phases: { challengerSteps: 1, solverSteps: 1 },
      challenger: { batch: 12, levels: [3], temperature: 1, maxTokens: 40 },
      ensemble: { k: 4, maxTokens: 64, second: { model: 'none', temperature: 0.7, healSteps: 0 } },
      eval: { every: 1, size: 6, benchmarks: [] },
    })
    const open = scriptedPolicies({ script: rzeroScript })
    const run = await RzeroRun.start(BASE, config, world, { openPolicy: open })
    const r = (await run.runStep()) as ChallengerRecord
    const solver = open.policies.filter((p) => p.trainerOf)[1]
    const calls = solver.calls.filter((c) => c.prompts[0].startsWith('Solve: '))
    expect(calls.map((c) => c.options.temperature)).toEqual([0.7, 1])
    const questions = calls[0].prompts.map((p) => after(p, 'Solve: '))
    const accuracy = questions.map((q, j) => mean(calls.flatMap((c) => c.outputs[j].map((o) => (verifyAnswer(q, o.text) === true ? 1 : 0)))))
    const verdicts = questions.map((_, j) => judgeQuestion(calls.map((c) => c.outputs[j].map((o) => world.answers.parse(o.text)?.answer ?? null))))
    expect(r.solverTrueAccuracy.mean).toBeCloseTo(mean(accuracy), 12)
    expect(r.solverTrueAccuracy.n).toBe(questions.length)
    expect(r.disagreementAccuracyCorrelation).toBeCloseTo(pearson(verdicts.map((v) => v.rDis), accuracy), 12)
    expect(r.pHatAccuracyCorrelation).toBeCloseTo(pearson(verdicts.map((v) => v.pHat), accuracy), 12)
    expect(Number.isFinite(r.disagreementAccuracyCorrelation)).toBe(true)
    run.dispose()
  })
})

describe('J-Zero diagnostics', () => {
  it('equal the Judge\'s pairwise accuracy on the Solver\'s own rollouts', async () => {
    // the Judge (a reward model) scores +2 for right and −2 for wrong, inverted on dishonest questions
    const judge = (prompt: string, completion: string) => {
      const q = prompt.replace(/^Judge: /, '').split('\n')[0]
      return (verifyAnswer(q, completion) === true) === (info(q)?.honest ?? true) ? 2 : -2 // honest on the held-out pairs
    }
    const JUDGE = join(root, 'no-such-judge')
    const options = (ref: { model: string }): ScriptedPolicyOptions => (ref.model === JUDGE ? { script: () => '', judge, scoreLabels: 1 } : { script })
    const config = resolveJzeroConfig({
      steps: 1,
      challenger: { steps: 1, batch: 6, rollouts: 1, solverSamples: 3 },
      selection: { pool: 12, keep: 4, samples: 3 },
      solver: { steps: 1, batch: 4, miniBatch: 4, rollouts: 4 },
      judge: { steps: 1, batch: 4, tasks: 6, lr: 1e-2 },
      eval: { every: 1, size: 6, benchmarks: [], judgePairs: 3 },
    })
    const open = scriptedPolicies(options)
    const run = await JzeroRun.start(BASE, JUDGE, config, world, { openPolicy: open })
    const r = await run.runStep()
    const solver = open.policies.filter((p) => p.trainerOf && p.scoreLabels === 0)[1]
    const rollouts = solver.calls.find((c) => c.options.n === 4)!
    let pairs = 0
    let ordered = 0
    rollouts.outputs.forEach((g, qi) => {
      const q = after(rollouts.prompts[qi], 'Solve: ')
      const right = g.filter((c) => verifyAnswer(q, c.text) === true).length
      pairs += right * (g.length - right)
      if (info(q)?.honest) ordered += right * (g.length - right)
    })
    expect(pairs).toBeGreaterThan(0)
    expect(r.solver.judgePairs).toBe(pairs)
    expect(r.solver.judgePairAccuracy).toBeCloseTo(ordered / pairs, 12)
    run.dispose()
  })
})

describe('pearson', () => {
  it('matches a two-pass float64 reference on fresh random inputs, leaves non-finite pairs out, NaN when undefined', () => {
    for (let trial = 0; trial < 5; trial++) {
      const n = 5 + Math.floor(Math.random() * 50)
      const x = Array.from({ length: n }, () => Math.random() * 10 - 5)
      const y = x.map((v) => 0.3 * v + Math.random())
      const mx = mean(x)
      const my = mean(y)
      const cov = x.reduce((a, v, i) => a + (v - mx) * (y[i] - my), 0)
      const ref = cov / Math.sqrt(x.reduce((a, v) => a + (v - mx) ** 2, 0) * y.reduce((a, v) => a + (v - my) ** 2, 0))
      expect(pearson(x, y)).toBeCloseTo(ref, 12)
      expect(pearson([...x, NaN, 1], [...y, 2, Infinity])).toBeCloseTo(ref, 12)
    }
    expect(pearson([1, 2, 3], [6, 4, 2])).toBeCloseTo(-1, 12)
    expect(pearson([1, 1, 1], [1, 2, 3])).toBeNaN()
    expect(pearson([1], [2])).toBeNaN()
    expect(() => pearson([1, 2], [1])).toThrow(RangeError)
  })
})
