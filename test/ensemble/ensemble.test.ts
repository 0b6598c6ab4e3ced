// The solver ensemble with scripted variants: DIS's worked example through the real reward path
// (queryEnsemble → scoreChallengerBatch), per-variant plurality by union-find over equivalent
// answers, timeouts and failures that degrade the reward to the responding variants, and metrics.
import { describe, expect, it } from 'vitest'
import { queryEnsemble, variantStats, type EnsembleQueryOptions } from '../../src/ensemble/ensemble.js'
import type { EnsembleVariant, VariantSample, VariantSampleOptions, VariantSampler } from '../../src/ensemble/types.js'
import { resolveRzeroConfig } from '../../src/methods/rzero/config.js'
import { scoreChallengerBatch } from '../../src/methods/rzero/loop.js'
import { arithWorld } from '../../src/worlds/arith/index.js'

const world = arithWorld()
/** R-Zero's view of the toy world: its Solver prompt, answers and equivalence, the BLEU text. */
const w = {
  solverPrompt: (q: string) => world.rzero.solverPrompt(q) as string,
  extractAnswer: (t: string) => world.answers.parse(t)?.answer ?? null,
  equivalent: world.answers.equivalent,
  bleuText: world.answers.repetitionText,
}

const solution = (answer: string) => `<think>x</think><answer>${answer}</answer>`

/** A variant answering every prompt with a fixed list of texts (cycled to k samples). */
function scripted(name: string, texts: string[] | ((prompt: string) => string[]), delayMs = 0): VariantSampler & { calls: VariantSampleOptions[] } {
  const calls: VariantSampleOptions[] = []
  return {
    name,
    calls,
    async sample(prompts: string[], o: VariantSampleOptions): Promise<VariantSample[][]> {
      calls.push(o)
      if (delayMs) await new Promise((r) => setTimeout(r, delayMs))
      return prompts.map((p) => {
        const t = typeof texts === 'function' ? texts(p) : texts
        return Array.from({ length: o.n ?? 1 }, (_, j) => ({ text: t[j % t.length], finishReason: 'stop' as const }))
      })
    },
  }
}

/** A variant that answers only when aborted (then with nothing): a hung server. */
function hanging(name: string): VariantSampler & { aborted: boolean } {
  const s = {
    name,
    aborted: false,
    sample(_p: string[], o: VariantSampleOptions): Promise<VariantSample[][]> {
      return new Promise((_, reject) => o.signal?.addEventListener('abort', () => {
        s.aborted = true
        reject(new Error('aborted'))
      }))
    },
  }
  return s
}

const opts: EnsembleQueryOptions = { extract: (t) => w.extractAnswer(t), equivalent: w.equivalent, maxTokens: 64, seed: 5 }
const v = (sampler: VariantSampler, temperature = 0.7, k = 10, timeoutMs?: number): EnsembleVariant => ({ sampler, temperature, k, timeoutMs })

// float64 reference of DIS §4.2 for a 2-vs-1 split: H([2/3, 1/3]) / ln 3
const H21 = -((2 / 3) * Math.log(2 / 3) + (1 / 3) * Math.log(1 / 3)) / Math.log(3)

describe('DIS worked example (§4.4): S_a, S_b 10/10 "A", S_c 10/10 "B"', () => {
  const variants = [v(scripted('S_a', [solution('85')])), v(scripted('S_b', [solution('85')]), 1.0), v(scripted('S_c', [solution('86')]))]
  const questions = ['17+(31+37)', '41*(54-47)', '(12+7)*3']

  it('gives p̂ = 0.67, r_unc = 0.33, r_dis = 0.58 through queryEnsemble and the Challenger reward', async () => {
    const ens = await queryEnsemble(variants, questions.map(w.solverPrompt), opts)
    const q = ens.questions[0]
    expect(q.responding).toBe(3)
    expect(q.pooled).toHaveLength(30)
    expect(q.pluralities).toEqual(['85', '85', '86'])
    expect(q.vote.answer).toBe('85')
    expect(q.pHat).toBeCloseTo(20 / 30, 12)
    expect(q.rDis).toBeCloseTo(H21, 12)
    expect(q.rDis).toBeCloseTo(0.58, 2) // the paper's rounding

    const reward = resolveRzeroConfig({}).reward // α = β = 1, r_unc = min(p̂, 1 − p̂)
    const s = scoreChallengerBatch(questions, ens.questions, reward, w.bleuText)
    expect(s.rUnc[0]).toBeCloseTo(1 / 3, 12)
    expect(s.rUnc[0]).toBeCloseTo(0.33, 2)
    expect(s.rDis[0]).toBeCloseTo(0.58, 2)
    // three distinct questions: each its own BLEU cluster, r_rep = 1/3
    expect(s.rRep).toEqual([1 / 3, 1 / 3, 1 / 3])
    expect(s.rewards[0]).toBeCloseTo(1 / 3 + H21 - 1 / 3, 12)
    // β = 0 (plain R-Zero) drops the disagreement term; R-Zero's paper form of r_unc is 2·min(p̂, 1 − p̂)
    const plain = scoreChallengerBatch(questions, ens.questions, { ...reward, beta: 0, uncertainty: 'rzero' }, w.bleuText)
    expect(plain.rewards[0]).toBeCloseTo(2 / 3 - 1 / 3, 12)
  })

  it('a parse failure gets −1 whatever the ensemble says, and stays out of the BLEU clusters (DIS §4.3, §4.5)', async () => {
    const ens = await queryEnsemble(variants, [w.solverPrompt(questions[0])], opts)
    const reward = resolveRzeroConfig({}).reward
    const s = scoreChallengerBatch([questions[0], null, questions[0]], [ens.questions[0], null, ens.questions[0]], reward, w.bleuText)
    expect(s.rewards[1]).toBe(-1)
    expect(s.rRep).toEqual([1, 1]) // the two identical parsed questions form one cluster of the 2 parsed
    expect(s.rUnc).toHaveLength(2)
  })
})

describe('queryEnsemble', () => {
  it('samples every variant with its own temperature, k and seed, all at once', async () => {
    const a = scripted('a', [solution('1')], 150)
    const b = scripted('b', [solution('1')], 150)
    const query = queryEnsemble([v(a, 0.7, 3), v(b, 1.0, 5)], ['p1', 'p2'], opts)
    await new Promise((r) => setTimeout(r, 20))
    // Concurrent: both variants were asked before either (150 ms each) could answer.
    expect([a.calls.length, b.calls.length]).toEqual([1, 1])
    await query
    expect(a.calls[0]).toMatchObject({ n: 3, temperature: 0.7, maxTokens: 64 })
    expect(b.calls[0]).toMatchObject({ n: 5, temperature: 1.0 })
    expect(a.calls[0].seed).not.toBe(b.calls[0].seed)
  })

  it('takes each variant’s plurality over equivalent answers (union-find), not raw strings', async () => {
    const texts = [solution('3'), solution('1/2'), solution('0.5')]
    const ens = await queryEnsemble([v(scripted('a', texts), 0.7, 3)], ['p'], opts)
    expect(ens.variants[0].answers![0]).toEqual(['3', '1/2', '0.5'])
    expect(ens.questions[0].pluralities).toEqual(['1/2']) // 1/2 ≡ 0.5 outnumber 3
    const exact = await queryEnsemble([v(scripted('a', texts), 0.7, 3)], ['p'], { ...opts, equivalent: undefined })
    expect(exact.questions[0].pluralities).toEqual(['3']) // all singletons: the earliest wins
  })

  it('malformed outputs are no answer; an extractor that throws is no answer, not a crash', async () => {
    const ens = await queryEnsemble([v(scripted('a', ['garbage', solution('4'), '<answer>4']), 1, 3)], ['p'], opts)
    expect(ens.variants[0].answers![0]).toEqual([null, '4', null])
    expect(ens.questions[0].pHat).toBeCloseTo(1 / 3, 12) // unanswered samples count against p̂
    const throwing = await queryEnsemble([v(scripted('a', ['x']), 1, 2)], ['p'], { ...opts, extract: () => { throw new Error('boom') } })
    expect(throwing.variants[0].status).toBe('ok')
    expect(throwing.questions[0].pooled).toEqual([null, null])
  })

  it('drops a variant that times out (aborting it) and degrades the reward to the responders (DIS §4.5)', async () => {
    const h = hanging('hung')
    const ens = await queryEnsemble([v(scripted('a', [solution('85')])), v(scripted('b', [solution('86')])), v(h, 0.7, 10, 60)], ['p'], opts)
    const report = ens.variants[2]
    expect(report.status).toBe('timeout')
    expect(report.latencyMs).toBeGreaterThanOrEqual(55)
    expect(report.latencyMs).toBeLessThan(1000)
    expect(h.aborted).toBe(true)
    const q = ens.questions[0]
    expect(q.responding).toBe(2)
    expect(q.pooled).toHaveLength(20)
    expect(q.pHat).toBeCloseTo(0.5, 12)
    expect(q.rDis).toBeCloseTo(1, 12) // 1-vs-1 over the two responders: ln 2 / ln 2
  })

  it('reports a failing or misshapen variant as an error and keeps going', async () => {
    const failing: VariantSampler = { name: 'down', sample: async () => { throw new Error('ECONNREFUSED') } }
    const short: VariantSampler = { name: 'short', sample: async () => [[{ text: 'x', finishReason: 'stop' }]] }
    const ens = await queryEnsemble([v(scripted('a', [solution('7')]), 1, 2), v(failing), v(short, 1, 2)], ['p', 'q'], opts)
    expect(ens.variants.map((r) => r.status)).toEqual(['ok', 'error', 'error'])
    expect(ens.variants[1].error).toContain('ECONNREFUSED')
    expect(ens.variants[2].error).toContain('1 groups for 2 prompts')
    expect(ens.questions.every((q) => q.responding === 1 && q.rDis === 0 && q.pHat === 1)).toBe(true)
  })

  it('with no variant answering, every question has nothing pooled: p̂ = 0, r_dis = 0', async () => {
    const failing: VariantSampler = { name: 'down', sample: async () => { throw new Error('down') } }
    const ens = await queryEnsemble([v(failing)], ['p'], opts)
    expect(ens.questions[0]).toMatchObject({ responding: 0, pHat: 0, rDis: 0, pooled: [] })
  })

  it('counts latencies, timeouts and errors per variant over calls', async () => {
    const failing: VariantSampler = { name: 'down', sample: async () => { throw new Error('down') } }
    const r1 = await queryEnsemble([v(scripted('a', [solution('1')], 5)), v(hanging('hung'), 1, 2, 20), v(failing)], ['p'], opts)
    const r2 = await queryEnsemble([v(scripted('a', [solution('1')], 5)), v(scripted('hung', [solution('1')])), v(failing)], ['p'], opts)
    const stats = variantStats([r1, r2])
    expect(stats.map((s) => [s.name, s.calls, s.ok, s.timeouts, s.errors])).toEqual([
      ['a', 2, 2, 0, 0],
      ['hung', 2, 1, 1, 0],
      ['down', 2, 0, 0, 2],
    ])
    expect(stats[0].meanLatencyMs).toBeGreaterThanOrEqual(4)
    expect(stats[1].maxLatencyMs).toBeGreaterThanOrEqual(18)
  })
})
