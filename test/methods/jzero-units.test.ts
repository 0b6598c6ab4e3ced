// J-Zero's pure parts: the Challenger reward (JZ Eq. 4–6) in both branches, task selection by
// score dispersion (Eq. 8), pair construction (Eq. 10–12: which side is chosen, equal
// proportions), the verifier win rate (Figure 2 counterpart), the config presets (Table 4) and
// the command-line switches (Table 3).
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/engine/errors.js'
import { PAPER_PRESET, resolveJzeroConfig, TOY_PRESET } from '../../src/methods/jzero/config.js'
import { judgeReward, pairwiseAccuracy } from '../../src/methods/jzero/judge.js'
import { amplify, ampPair, balancedUnion, judgeBatches, rolePair, verifierWinRate, type AmplifySamplers, type JudgePair } from '../../src/methods/jzero/pairs.js'
import { challengerBatchRewards, jzChallengerReward, solverReward } from '../../src/methods/jzero/rewards.js'
import { selectByDispersion } from '../../src/methods/jzero/select.js'
import { jzeroFlagsToOverride } from '../../src/methods/jzero/spec.js'
import { verifierScore, verifyPosed } from '../../src/methods/common/world.js'
import { scriptedAnswer } from './arith-script.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { Rng } from '../../src/util/prng.js'

/** The toy world (the bundled model's prompts, strict parsers) and its chat-model style (App. C prompts, lenient parsers). */
const world = arithWorld()
const arithJzeroChatWorld = arithWorld({ style: 'chat' })

describe('Challenger reward (JZ Eq. 4–6)', () => {
  it('well-formed task: max(0, 1 − r̄ − r_rep), clamped at 0', () => {
    expect(jzChallengerReward({ formatOk: true, meanScore: 0.3, rRep: 0.25 })).toBeCloseTo(0.45, 15)
    expect(jzChallengerReward({ formatOk: true, meanScore: 0.9, rRep: 0.25 })).toBe(0)
    expect(jzChallengerReward({ formatOk: true, meanScore: 0, rRep: 0 })).toBe(1)
  })

  it('format failure: −1 − r_rep, whatever r̄', () => {
    expect(jzChallengerReward({ formatOk: false, meanScore: 0.3, rRep: 0.25 })).toBeCloseTo(-1.25, 15)
    expect(jzChallengerReward({ formatOk: false, meanScore: NaN, rRep: 0 })).toBe(-1)
  })

  it('over a batch: r̄ is the mean of M scores, near-duplicates share a cluster penalty λ|C_k|/N', () => {
    // two identical tasks cluster (BLEU distance 0); the third is far from both; one fails the format check
    // BLEU splits on whitespace: the toy world spaces out an expression's numbers and operators
    const tasks = ['(12+7)*3-45', '(12+7)*3-45', '98*76+54', null].map((t) => (t === null ? null : world.answers.repetitionText(t)))
    expect(tasks[0]).toBe('( 12 + 7 ) * 3 - 45')
    const scores = [[0.2, 0.4], [0.6, 0.8], [0.1, 0.1, 0.4], []]
    const r = challengerBatchRewards({ tasks, scores, tau: 0.5, lambda: 1 })
    // float64 references by hand: N = 3 well-formed tasks (a format failure is left out of the clustering)
    const ref = [[0.2, 0.4], [0.6, 0.8], [0.1, 0.1, 0.4]].map((xs) => xs.reduce((a, b) => a + b, 0) / xs.length)
    r.meanScores.slice(0, 3).forEach((m, i) => expect(m).toBeCloseTo(ref[i], 15))
    expect(Number.isNaN(r.meanScores[3])).toBe(true)
    expect(r.repetition).toEqual([2 / 3, 2 / 3, 1 / 3, 0])
    expect(r.rewards[0]).toBeCloseTo(Math.max(0, 1 - 0.3 - 2 / 3), 15)
    expect(r.rewards[1]).toBe(0) // 1 − 0.7 − 2/3 < 0
    expect(r.rewards[2]).toBeCloseTo(1 - 0.2 - 1 / 3, 15)
    expect(r.rewards[3]).toBe(-1)
    expect(r.clusters[0]).toBe(r.clusters[1])
    expect(r.clusters[2]).not.toBe(r.clusters[0])
    expect(r.clusters[3]).toBe(-1)
  })

  it('a well-formed task without finite Judge scores is an error, not a silent NaN', () => {
    expect(() => challengerBatchRewards({ tasks: ['1+2*3'], scores: [[]], tau: 0.5, lambda: 1 })).toThrow(RangeError)
  })

  it('the Solver reward is σ of the raw Judge score (Eq. 9)', () => {
    for (const x of [-30, -2.5, 0, 0.7, 12]) expect(solverReward(x)).toBeCloseTo(1 / (1 + Math.exp(-x)), 14)
    expect(judgeReward(0)).toBe(0.5)
  })
})

describe('task selection by score dispersion (JZ Eq. 8)', () => {
  it('keeps the top-K by the population std of the M scores, ties to the lower index, none from empty lists', () => {
    const scores = [
      [0.5, 0.5, 0.5, 0.5], // s = 0
      [0, 1, 0, 1], // s = 0.5
      [0.2, 0.4, 0.2, 0.4], // s = 0.1
      [], // no scores: never kept
      [1, 0, 1, 0], // s = 0.5 (ties with index 1)
      [0.1, 0.9, 0.5, 0.5], // s = sqrt(0.08)
    ]
    const { kept, dispersions } = selectByDispersion(scores, 3)
    expect(dispersions[0]).toBe(0)
    expect(dispersions[1]).toBeCloseTo(0.5, 15)
    expect(dispersions[5]).toBeCloseTo(Math.sqrt((0.16 + 0.16 + 0 + 0) / 4), 15)
    expect(Number.isNaN(dispersions[3])).toBe(true)
    expect(kept).toEqual([1, 4, 5])
    expect(selectByDispersion(scores, 10).kept).toEqual([1, 4, 5, 2, 0])
    expect(selectByDispersion(scores, 0).kept).toEqual([])
    expect(() => selectByDispersion(scores, -1)).toThrow(RangeError)
  })
})

describe('preference pairs (JZ Eq. 10–12)', () => {
  it('role asymmetry prefers the Solver; amplification prefers the composed answer', () => {
    const r = rolePair('1+2', 'SOLVER', 'CHALLENGER')
    expect([r.kind, r.chosen, r.rejected]).toEqual(['role', 'SOLVER', 'CHALLENGER'])
    const a = ampPair('1+2', 'AMPLIFIED', 'ONE-SHOT')
    expect([a.kind, a.chosen, a.rejected]).toEqual(['amp', 'AMPLIFIED', 'ONE-SHOT'])
  })

  it('amplify: decompose → subtasks in context (earlier answers known) → compose; failures named', async () => {
    const seen: string[][] = []
    const samplers: AmplifySamplers = {
      // task 0 decomposes well, task 1 is malformed, task 2 decomposes but its composition is malformed
      decompose: async (ps) => ps.map(String).map((p) => (p.includes('(12+7)*3') ? '1. 12+7\n2. #1*3' : p.includes('5*6') ? '1. 5*6\n2. #1+1' : 'no list here')),
      subtask: async (ps) => {
        seen.push(ps.map(String))
        return ps.map(String).map((p) => (p.includes('Solve #1: 12+7') ? '<think>12+7=19</think><answer>19</answer>' : p.includes('Solve #2: #1*3') ? '<think>19*3=57</think><answer>57</answer>' : p.includes('Solve #1: 5*6') ? 'garbage' : '<answer>31</answer>'))
      },
      compose: async (ps) => ps.map(String).map((p) => (p.includes('(12+7)*3') ? '<answer>57</answer>' : '<answer>31')),
    }
    const qs = ['(12+7)*3', '9+9*9', '5*6+1']
    const out = await amplify(world, qs, samplers, { minSubtasks: 1, maxSubtasks: 5, ampResponse: 'transcript' })
    expect(out[0]).toEqual({ ok: true, subtasks: ['12+7', '#1*3'], subAnswers: ['19', '57'], response: '<think>12+7=19; 19*3=57</think><answer>57</answer>' })
    expect(out[1]).toEqual({ ok: false, stage: 'decompose', subtasks: [] })
    expect(out[2]).toMatchObject({ ok: false, stage: 'compose', subtasks: ['5*6', '#1+1'] })
    // subtasks of both decomposed tasks go in one call per index; #2 sees #1's answer ('?' when malformed)
    expect(seen.map((ps) => ps.length)).toEqual([2, 2])
    expect(seen[1][0]).toContain('Known: #1=19')
    expect(seen[1][1]).toContain('Known: #1=?')
    // the transcript is a well-formed Solver answer the verifier checks like any other
    expect(verifyPosed(world, '(12+7)*3', (out[0] as { response: string }).response)).toBe(true)
    const raw = await amplify(world, qs.slice(0, 1), samplers, { minSubtasks: 1, maxSubtasks: 5, ampResponse: 'compose-output' })
    expect(raw[0]).toMatchObject({ ok: true, response: '<answer>57</answer>' })
    // App. C's 3–5 bound rejects a 2-subtask list
    const strict = await amplify(world, qs.slice(0, 1), samplers, { minSubtasks: 3, maxSubtasks: 5, ampResponse: 'transcript' })
    expect(strict[0]).toMatchObject({ ok: false, stage: 'decompose' })
  })

  const make = (kind: 'role' | 'amp', n: number): JudgePair[] => Array.from({ length: n }, (_, i) => ({ kind, question: `${kind}${i}`, chosen: 'a', rejected: 'b' }))

  it('the union holds equal numbers of each type; a switched-off type contributes none', () => {
    const role = make('role', 10)
    const amp = make('amp', 4)
    const both = balancedUnion(role, amp, { role: true, amp: true }, new Rng(1))
    expect(both.filter((p) => p.kind === 'role').length).toBe(4)
    expect(both.filter((p) => p.kind === 'amp').length).toBe(4)
    expect(new Set(both.map((p) => p.question)).size).toBe(8)
    const fewerRole = balancedUnion(make('role', 3), make('amp', 7), { role: true, amp: true }, new Rng(2))
    expect(fewerRole.filter((p) => p.kind === 'role').length).toBe(3)
    expect(fewerRole.filter((p) => p.kind === 'amp').length).toBe(3)
    expect(balancedUnion(role, amp, { role: true, amp: false }, new Rng(1)).every((p) => p.kind === 'role')).toBe(true)
    expect(balancedUnion(role, amp, { role: true, amp: false }, new Rng(1)).length).toBe(10)
    expect(balancedUnion(role, amp, { role: false, amp: true }, new Rng(1)).length).toBe(4)
    expect(balancedUnion(role, [], { role: true, amp: true }, new Rng(1))).toEqual([])
  })

  it('Bradley–Terry batches cycle through D, every pair once per epoch', () => {
    const D = make('role', 5)
    const batches = judgeBatches(D, 3, 4, new Rng(3))
    expect(batches.map((b) => b.length)).toEqual([4, 4, 4])
    const firstEpoch = batches.flat().slice(0, 5).map((p) => p.question)
    expect(new Set(firstEpoch).size).toBe(5)
    expect(judgeBatches(D, 2, 9, new Rng(3)).map((b) => b.length)).toEqual([5, 5])
    expect(judgeBatches([], 2, 4, new Rng(3))).toEqual([])
  })

  it('verifier win rate counts wins and losses of the chosen side and drops ties', () => {
    const right = '<think>12+7=19; 19*3=57</think><answer>57</answer>'
    const wrong = '<think>12+7=19; 19*3=56</think><answer>56</answer>'
    const pairs = [
      rolePair('(12+7)*3', right, wrong), // win
      rolePair('(12+7)*3', wrong, right), // loss
      rolePair('(12+7)*3', right, right), // tie
      rolePair('(12+7)*3', 'malformed', wrong), // tie (both wrong)
      rolePair('(12+7)*3', right, 'malformed'), // win (malformed is wrong)
    ]
    expect(verifierWinRate(world, pairs)).toEqual({ wins: 2, losses: 1, ties: 2, rate: 2 / 3 })
    expect(Number.isNaN(verifierWinRate(world, [pairs[2]]).rate)).toBe(true)
  })

  it('pairwise accuracy counts ties as half and is NaN for no pairs', () => {
    expect(pairwiseAccuracy([1, -1, 0, 2])).toBe(0.625)
    expect(Number.isNaN(pairwiseAccuracy([]))).toBe(true)
  })
})

describe('prompt styles', () => {
  it('chat models get App. C role prompts as messages and lenient parsers; the toy model its strings', () => {
    expect([world.name, arithJzeroChatWorld.name]).toEqual(['arith', 'arith-chat'])
    const p = arithJzeroChatWorld.jzero.decomposePrompt('(12+7)*3') as { messages: { role: string; content: string }[] }
    expect(p.messages.map((m) => m.role)).toEqual(['system', 'user'])
    expect(p.messages[0].content).toMatch(/breaking a hard task into simpler subtasks/)
    expect(arithJzeroChatWorld.jzero.parseTask('Here is one: <question>(12+7)*3</question> Enjoy.')).toEqual({ question: '(12+7)*3', key: '(12+7)*3' })
    expect(world.jzero.parseTask('Here is one: <question>(12+7)*3</question> Enjoy.')).toBeNull()
    expect(world.jzero.parseTask('<question>12 apples</question>')).toBeNull() // no Validator in J-Zero: a non-expression fails Eq. 6's check
    expect(arithJzeroChatWorld.answers.parse('So the result is \\boxed{57}.')).toEqual({ think: null, answer: '57' })
  })
})

describe("the verifier control's flipped verdicts", () => {
  it('are wrong on a fixed share p of inputs, the same verdict for the same input: pairwise accuracy 1 − p', () => {
    const rng = new Rng('flip-test')
    const questions = Array.from({ length: 2000 }, () => `${10 + rng.nextInt(90)}+${10 + rng.nextInt(90)}`)
    const right = questions.map((q) => scriptedAnswer(q, true, 0.5))
    const wrong = questions.map((q) => scriptedAnswer(q, false, 0.5))
    for (const p of [0, 0.15, 0.3]) {
      const r = questions.map((q, i) => verifierScore(world, q, right[i], p, '7'))
      const w = questions.map((q, i) => verifierScore(world, q, wrong[i], p, '7'))
      const errors = r.filter((x) => x === 0).length + w.filter((x) => x === 1).length
      // binomial over 4,000 verdicts: 4.5 standard deviations
      expect(Math.abs(errors / 4000 - p)).toBeLessThanOrEqual(4.5 * Math.sqrt((p * (1 - p)) / 4000) + 1e-12)
      const accuracy = pairwiseAccuracy(r.map((x, i) => x - w[i]))
      expect(Math.abs(accuracy - (1 - p))).toBeLessThanOrEqual(4.5 * Math.sqrt((p * (1 - p)) / 2000) + 1e-12)
      expect(questions.map((q, i) => verifierScore(world, q, right[i], p, '7'))).toEqual(r) // deterministic
    }
    // another key is another Judge: other inputs are flipped
    const a = questions.map((q, i) => verifierScore(world, q, right[i], 0.3, '7'))
    const b = questions.map((q, i) => verifierScore(world, q, right[i], 0.3, '8'))
    expect(a).not.toEqual(b)
  })
})

describe('J-Zero config', () => {
  it('the paper preset carries Table 4', () => {
    const c = PAPER_PRESET
    expect([c.challenger.steps, c.solver.steps, c.judge.steps]).toEqual([5, 15, 8])
    expect([c.challenger.batch, c.solver.batch, c.judge.batch, c.solver.miniBatch]).toEqual([16, 128, 64, 16])
    expect([c.challenger.lr, c.solver.lr, c.judge.lr]).toEqual([1e-6, 1e-6, 5e-7])
    expect([c.challenger.klCoef, c.solver.klCoef]).toEqual([0.01, 0.01])
    expect([c.challenger.rollouts, c.solver.rollouts]).toEqual([4, 5])
    for (const s of [c.challenger, c.solver]) expect([s.clipLow, s.clipHigh, s.temperature, s.topP, s.maxTokens]).toEqual([0.2, 0.28, 1, 0.99, 4096])
    expect([c.judge.minSubtasks, c.judge.maxSubtasks]).toEqual([3, 5])
    expect(resolveJzeroConfig(undefined, PAPER_PRESET)).toEqual(PAPER_PRESET)
    expect(resolveJzeroConfig(undefined)).toEqual(TOY_PRESET)
  })

  it('rejects bad values with the path, and switches come from the command line', () => {
    expect(() => resolveJzeroConfig({ solver: { rollouts: 1 } })).toThrow(/solver\.rollouts/)
    expect(() => resolveJzeroConfig({ selection: { keep: 100 } })).toThrow(ConfigError)
    expect(() => resolveJzeroConfig({ judge: { ampResponse: 'verbatim' } })).toThrow(/judge\.ampResponse/)
    expect(() => resolveJzeroConfig({ switches: { rolePairs: false, ampPairs: false } })).toThrow(/at least one pair type/)
    expect(() => resolveJzeroConfig({ judge: { unknown: 1 } })).toThrow(/unknown key 'judge\.unknown'/)
    expect(() => resolveJzeroConfig({ judge: { verifierFlip: 0.2 } })).toThrow(/judge\.verifierFlip.*switches\.judge 'verifier'/)
    expect(() => resolveJzeroConfig({ judge: { verifierFlip: 1 }, switches: { judge: 'verifier', trainJudge: false } })).toThrow(/judge\.verifierFlip/)
    expect(resolveJzeroConfig({ judge: { verifierFlip: 0.3 }, switches: { judge: 'verifier', trainJudge: false } }).judge.verifierFlip).toBe(0.3)
    expect(jzeroFlagsToOverride({})).toBeUndefined()
    const o = jzeroFlagsToOverride({ judge: '/x/judge', 'frozen-judge': true, 'no-amp-pairs': true })
    expect(o).toEqual({ judge: { model: '/x/judge' }, switches: { trainJudge: false, ampPairs: false } })
    const c = resolveJzeroConfig(o)
    expect(c.switches).toEqual({ trainJudge: false, rolePairs: true, ampPairs: false, judge: 'model' })
    expect(c.judge.model).toBe('/x/judge')
    expect(resolveJzeroConfig(jzeroFlagsToOverride({ judge: '/x/judge', 'judge-critique': 200 })).judge).toMatchObject({ model: '/x/judge', critiqueTokens: 200 })
    expect(() => resolveJzeroConfig(jzeroFlagsToOverride({ 'judge-critique': -3 }))).toThrow(/judge\.critiqueTokens/)
  })
})
