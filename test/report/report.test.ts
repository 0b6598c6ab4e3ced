// The run report as a pure function: scales and ticks, the accuracy summary with n and
// intervals (checked against the binomial normal approximation), the page's content for a real
// COSE run's data (test/report/fixtures/cose-3-steps, from scripts/report-demo.mjs), and an
// explanation for every abbreviation the methods print and every metric they chart.
import { describe, expect, it } from 'vitest'
import { METHODS } from '../../src/methods/index.js'
import { accuracyChange, accuracyTrajectory, explainSignals, formatSignalHelp, formatTicks, METRICS, metricAt, niceTicks, renderRunReport, TRAINING_SERIES } from '../../src/report/index.js'
import { loadFixture } from './fixture.js'

describe('axes', () => {
  it('ticks are 1, 2 or 5 × 10^k and cover the range', () => {
    expect(niceTicks(0, 1).ticks).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1])
    for (const [lo, hi] of [[-0.07, 0.045], [0, 147], [1.5e-5, 3e-5], [0.1, 0.1]]) {
      const t = niceTicks(lo, hi)
      expect(t.lo).toBeLessThanOrEqual(lo)
      expect(t.hi).toBeGreaterThanOrEqual(hi)
      const step = t.ticks[1] - t.ticks[0]
      const mantissa = step / 10 ** Math.floor(Math.log10(step))
      expect([1, 2, 5].some((m) => Math.abs(mantissa - m) < 1e-9)).toBe(true)
      expect(t.ticks.length).toBeGreaterThanOrEqual(3)
    }
  })

  it('labels one axis in one style, without float noise', () => {
    expect(formatTicks([0, 0.2, 0.4, 0.6000000000000001])).toEqual(['0.0', '0.2', '0.4', '0.6'])
    expect(formatTicks([0, 0.0005, 0.001, 0.0015])).toEqual(['0.0000', '0.0005', '0.0010', '0.0015'])
    expect(formatTicks([0, 1e-5, 2e-5, 3e-5])).toEqual(['0', '1e-5', '2e-5', '3e-5'])
    expect(formatTicks([0, 50, 100, 150])).toEqual(['0', '50', '100', '150'])
  })
})

describe('metrics', () => {
  it('reads dotted paths, averages arrays on the way, skips what is not a finite number', () => {
    const row = { step: 3, train: [{ loss: 1 }, { loss: 3 }, { loss: NaN }], rewardSolver: { mean: 0.5 }, x: 'a' }
    expect(metricAt(row, 'train.loss')).toBe(2)
    expect(metricAt(row, 'rewardSolver.mean')).toBe(0.5)
    expect(metricAt(row, 'x')).toBeNull()
    expect(metricAt(row, 'missing.path')).toBeNull()
  })

  it('accuracy at each evaluated step has n and a 95% interval close to the binomial one', () => {
    const input = loadFixture()
    const trajectory = accuracyTrajectory(input.rows, input.evaluations)
    expect(trajectory.map((a) => a.step)).toEqual(input.rows.filter((r) => typeof r.heldOutAccuracy === 'number').map((r) => r.step))
    for (const a of trajectory) {
      expect(a.n).toBe(50)
      const { lo, hi } = a.interval!
      expect(lo).toBeLessThanOrEqual(a.accuracy)
      expect(hi).toBeGreaterThanOrEqual(a.accuracy)
      const halfWidth = 1.96 * Math.sqrt((a.accuracy * (1 - a.accuracy)) / a.n!)
      expect(Math.abs((hi - lo) / 2 - halfWidth)).toBeLessThan(0.03)
    }
    expect(accuracyTrajectory([{ step: 0, heldOutAccuracy: 0.5 }])).toEqual([{ step: 0, accuracy: 0.5, n: null, interval: null, intervalKind: null }])
  })

  it('the before/after change is paired over the same questions, and refused for different ones', () => {
    const zeros = { step: 0, correct: Array(40).fill(false), ids: Array.from({ length: 40 }, (_, i) => `q${i}`) }
    const ones = { step: 9, correct: Array(40).fill(true), ids: zeros.ids }
    expect(accuracyChange(zeros, ones)).toEqual({ estimate: 1, lo: 1, hi: 1 })
    const same = accuracyChange(zeros, { ...zeros, step: 9 })!
    expect([same.estimate, same.lo, same.hi]).toEqual([0, 0, 0])
    const half = { step: 9, correct: zeros.correct.map((_, i) => i % 2 === 0), ids: zeros.ids }
    const d = accuracyChange(zeros, half)!
    expect(d.estimate).toBeCloseTo(0.5, 12)
    expect(d.lo).toBeGreaterThan(0.3)
    expect(d.hi).toBeLessThan(0.7)
    expect(accuracyChange(zeros, { ...ones, ids: ones.ids.map((id) => `${id}'`) })).toBeNull()
    expect(accuracyChange(zeros, { step: 9, correct: [true] })).toBeNull()
  })
})

describe('the page of a real COSE run', () => {
  const input = loadFixture()
  const html = renderRunReport(input)
  const charts = [...html.matchAll(/<svg class="chart"[^>]*data-metric="([^"]+)" data-points="(\d+)" data-y-min="([^"]+)" data-y-max="([^"]+)"/g)].map((m) => ({ id: m[1], points: Number(m[2]), yMin: Number(m[3]), yMax: Number(m[4]) }))

  it('summarizes what ran, the accuracy before/after with n and intervals, and where the trained model is', () => {
    const accuracies = input.rows.filter((r) => typeof r.heldOutAccuracy === 'number').map((r) => (r.heldOutAccuracy as number).toFixed(3))
    expect(html).toContain(`<span data-value="before">${accuracies[0]}</span> → <span data-value="after">${accuracies.at(-1)}</span>`)
    expect(html.match(/n = 50 questions, 95% CI \d\.\d{3}–\d\.\d{3}/g)).toHaveLength(2)
    expect(html).toMatch(/change [−+±]\d\.\d{3} \(paired over the same 50 questions/)
    expect(html).toContain(`npx autodidact serve --model ${input.trainedModel}`)
    expect(html).toContain(`npx autodidact export --format gguf --model ${input.trainedModel} --out model.gguf`)
    expect(html).toContain('3 of 3 steps')
    for (const fact of [input.model, input.world, `<th>seed</th><td>${input.seed}</td>`]) expect(html).toContain(fact)
    expect(html).toContain('base model, from outside this run: 0.530, n = 100, 95% CI 0.430–0.620')
  })

  it('draws accuracy on 0–1 with the base model line, the training curves and every method series, each with its points', () => {
    const accuracy = charts.find((c) => c.id === 'heldOutAccuracy')!
    expect(accuracy).toMatchObject({ points: 2, yMin: 0, yMax: 1 })
    expect(html).toContain('base model 0.530')
    for (const s of [...TRAINING_SERIES, ...input.series.filter((s) => s.path !== 'heldOutAccuracy')]) {
      const expected = input.rows.filter((r) => metricAt(r, s.path) !== null).length
      expect(charts.find((c) => c.id === s.path)?.points, s.path).toBe(expected)
      expect(expected).toBeGreaterThan(0)
    }
    for (const c of charts.filter((c) => METRICS[c.id]?.range)) expect([c.yMin, c.yMax]).toEqual([...METRICS[c.id].range!])
    for (const c of charts) expect(c.yMin).toBeLessThanOrEqual(0) // every scale is honest: it includes zero
  })

  it('is self-contained: no script, no network address, and the text is escaped', () => {
    expect(html).not.toMatch(/<script|<link|src="http|href="http|url\(http/)
    const evil = renderRunReport({ ...input, model: '<img src=x onerror=alert(1)>', trainedModel: '/tmp/my run/model' })
    expect(evil).not.toContain('<img src=x')
    expect(evil).toContain('&lt;img src=x onerror=alert(1)&gt;')
    expect(evil).toContain('serve --model &#39;/tmp/my run/model&#39;') // quoted for the shell
  })
})

describe('what the driver adds to the page', () => {
  const input = loadFixture()
  const { baseAccuracy: _, ...noBase } = input

  it('a LoRA adapter is named as such, with the library lines that load it instead of serve/export', () => {
    const html = renderRunReport({ ...input, trainedModel: '/runs/r/checkpoints/step-000003/model', trainedModelKind: 'adapter' })
    expect(html).toContain('a PEFT LoRA adapter over the base model')
    expect(html).toContain(`await m.loadAdapter(&quot;/runs/r/checkpoints/step-000003/model&quot;)`)
    expect(html).not.toContain('npx autodidact serve')
  })

  it('the protocol and benchmarks, alerts on top, and the step-0 base line when no outside base accuracy is given', () => {
    const html = renderRunReport({ ...noBase, alerts: ['The collapse guard fired once: <x>'], evaluation: { protocol: 'mean@5 of sampled responses (temperature 0.6)', benchmarks: [{ name: 'L3', n: 50 }] } })
    expect(html).toContain('<p class="alert" data-alert>The collapse guard fired once: &lt;x&gt;</p>')
    expect(html).toContain('measured on L3 (n = 50); mean@5 of sampled responses (temperature 0.6).')
    expect(html).toContain(`base model (step 0) ${(input.rows[0].heldOutAccuracy as number).toFixed(3)}`)
  })

  it('Wilson intervals where only n is known, said as such', () => {
    const [a] = accuracyTrajectory([{ step: 0, heldOutAccuracy: 0.6 }], [], 50)
    expect(a).toMatchObject({ n: 50, intervalKind: 'wilson' })
    // Wilson 95% for 30/50: 0.4618–0.7239
    expect(a.interval!.lo).toBeCloseTo(0.4618, 3)
    expect(a.interval!.hi).toBeCloseTo(0.7239, 3)
    const html = renderRunReport({ ...noBase, evaluations: [], heldOutSize: 50 })
    expect(html).toMatch(/n = 50 questions, 95% CI \d\.\d{3}–\d\.\d{3} \(Wilson score interval: no per-question data\)/)
  })

  it('mean@k per-question fractions and several benchmarks: macro accuracy, bootstrap within each, paired change', () => {
    const before = { step: 0, correct: [1, 0.4, 0, 0.6, 1, 0], benchmarks: ['A', 'A', 'A', 'A', 'B', 'B'] }
    const after = { step: 1, correct: [1, 0.6, 0.2, 0.6, 1, 1], benchmarks: before.benchmarks }
    const [b, c] = accuracyTrajectory([{ step: 0, heldOutAccuracy: (0.5 + 0.5) / 2 }, { step: 1, heldOutAccuracy: (0.6 + 1) / 2 }], [before, after])
    expect(b.interval!.estimate).toBeCloseTo(0.5, 12) // macro of A 0.5 and B 0.5
    expect(c.interval!.estimate).toBeCloseTo(0.8, 12) // macro of A 0.6 and B 1
    expect(accuracyChange(before, after)!.estimate).toBeCloseTo(0.3, 12) // macro of A +0.1 and B +0.5
    expect(accuracyChange(before, { ...after, benchmarks: ['A', 'A', 'A', 'B', 'B', 'B'] })).toBeNull() // not the same questions
  })
})

describe('explanations', () => {
  it("every abbreviation on every method's progress line is explained", () => {
    const record = (name: string): Record<string, unknown> => {
      const spread = { mean: 0.5, min: 0, max: 1, n: 4 }
      return {
        step: 1, seconds: 1, generatedTokens: 10, rewardSolver: spread, rewardProposer: spread, acceptRate: 0.5, agreeRate: 0.5, labelAccuracy: 0.5, reward: spread,
        phase: name === 'rzero-solver' ? 'solver' : 'challenger', rDis: spread, rUnc: spread, rRep: spread, parseRate: 1, kept: 3, distinct: 5, pseudoLabelAccuracy: 0.5,
        challenger: { reward: spread }, solver: { reward: spread }, judgeAccuracy: 0.5, loss: 0.1, arm: 'ARM', dataSize: 7, informativeGroups: 3, questions: 4,
      }
    }
    const cases = Object.values(METHODS).flatMap((spec) => (spec.name === 'rzero' ? [['rzero', 'rzero'], ['rzero', 'rzero-solver']] : [[spec.name, spec.name]]))
    for (const [method, variant] of cases) {
      const line = METHODS[method].describe(record(variant))
      const labels = line.split(/[\s(),]+/).filter((w) => w && !/^[-–\d./]+$/.test(w) && w !== 'ARM')
      expect(labels.length, line).toBeGreaterThanOrEqual(2)
      const explained = new Set(explainSignals(method).map((s) => s.name))
      for (const label of labels) expect(explained.has(label), `${method}: '${label}' in "${line}"`).toBe(true)
    }
    expect(formatSignalHelp('cose')).toMatch(/^ {2}cose:\n {4}r_S +Solver reward/)
  })

  it("every series a method charts has an explanation and an axis title", () => {
    for (const spec of Object.values(METHODS))
      for (const s of spec.series) {
        expect(METRICS[s.path]?.explain, `${spec.name}: ${s.path}`).toBeTruthy()
        expect(METRICS[s.path].unit).toBeTruthy()
      }
  })
})
