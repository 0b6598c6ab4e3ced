// Selectors of UID A.1 on hand-made pools (eligibility, tie rules, √-rank Borda, nested prefixes,
// calibrated scores checked against a direct float64 computation) and one selector run on the
// bundled model.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { formatSelectionTable, selectCommand } from '../../src/cli/select.js'
import { loadModel } from '../../src/engine/model.js'
import { runSelection } from '../../src/methods/solving/selection.js'
import { calibratedScores, evaluateSelectors, fitCalibrationOn, SELECTORS, selectAnswer } from '../../src/methods/solving/selectors.js'
import type { Trajectory } from '../../src/methods/solving/trajectory.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { empiricalCdfMidrank, offlineUidFeatures, robustScale } from '../../src/signals/calibration.js'

function t(answer: string | null, bins: number[] | null, sc: number, complete = true): Trajectory {
  return { text: '', tokenIds: [], answer: complete ? answer : null, complete, tokens: bins ? 16 : 3, bins: bins ? Float64Array.from(bins) : null, selfCertainty: sc }
}

const ramp = (a: number, b: number) => Array.from({ length: 8 }, (_, i) => a + ((b - a) * i) / 7)
const calPool = [[t('1', ramp(1, 2), 1), t('2', ramp(2, 1), 2), t('3', [1, 2, 1, 2, 1, 2, 1, 2], 3)], [t('4', ramp(0.5, 3), 4), t(null, [1, 1, 1, 1, 1, 1, 1, 2], 5), t('5', null, 9), t('6', ramp(1, 1.5), 6, false)]]

describe('selectors (UID A.1)', () => {
  const cal = fitCalibrationOn(calPool)

  it('calibration uses only complete, UID-eligible responses and matches a float64 recomputation', () => {
    expect(cal.count).toBe(5) // the short and the truncated responses are left out
    const eligible = calPool.flat().filter((r) => r.complete && r.bins)
    const s = robustScale(eligible.flatMap((r) => Array.from(r.bins!)))
    expect(cal.scale).toBe(s)
    const probe = t('1', [1, 1.5, 1, 2, 1.2, 1.1, 1.9, 1], 2.5)
    const [sc] = calibratedScores(cal, [probe]).sc
    const [conj] = calibratedScores(cal, [probe]).conj
    const f = offlineUidFeatures(probe.bins!, s)
    const G = eligible.map((r) => offlineUidFeatures(r.bins!, s).G).sort((a, b) => a - b)
    const S = eligible.map((r) => offlineUidFeatures(r.bins!, s).S).sort((a, b) => a - b)
    expect(conj).toBeCloseTo(empiricalCdfMidrank(G, f.G) * empiricalCdfMidrank(S, f.S), 14)
    expect(sc).toBeCloseTo(empiricalCdfMidrank([1, 2, 3, 4, 5], 2.5), 14) // 2 below → 0.4
  })

  it('majority: first-occurrence ties, incomplete responses do not vote, abstains when nobody answers', () => {
    const g = [t('7', null, 0), t('8', null, 0), t('8', null, 0, false), t('7', null, 0), t('8', null, 0)]
    const none = { sc: [], conj: [], mix: [] }
    expect(selectAnswer('majority', g, none)).toBe('7') // 2–2 (the truncated '8' does not count): '7' first
    expect(selectAnswer('majority', [t(null, null, 0), t('3', null, 0, false)], none)).toBeNull()
  })

  it('direct SC / UID-Conj pick the top eligible score, ties by generation order; Borda sums √(m − r + 1) per answer', () => {
    const g = [t('1', null, 0), t('2', null, 0), t('2', null, 0), t('3', null, 0)]
    const scores = { sc: [0.9, 0.5, 0.6, 0.9], conj: [null, 0.2, 0.3, 0.1], mix: [null, null, null, null] }
    expect(selectAnswer('sc', g, scores)).toBe('1') // 0.9 tie: the earlier response
    expect(selectAnswer('uid-conj', g, scores)).toBe('2') // response 0 is ineligible
    // SC ranks: r0 (√4 = 2), r3 (√3), r2 (√2), r1 (1): '2' gets √2 + 1 = 2.41 > 2 > √3
    expect(selectAnswer('sc-borda', g, scores)).toBe('2')
    // UID ranks among 3 eligible: r2 √3 ('2'), r1 √2 ('2'), r3 1 ('3')
    expect(selectAnswer('uid-conj-borda', g, scores)).toBe('2')
  })

  it('evaluates nested prefixes: pool size 1 is the first response, larger pools add later ones', () => {
    const pools = [
      { reference: '5', group: [t('4', ramp(1, 2), 1), t('5', ramp(1, 3), 2), t('5', ramp(2, 3), 3)] },
      { reference: '9', group: [t('9', ramp(1, 2), 1), t('8', ramp(1, 3), 2), t('8', ramp(2, 3), 3)] },
    ]
    const table = evaluateSelectors(pools, cal, [1, 3])
    expect(table.accuracy.majority.byN).toEqual([0.5, 0.5])
    expect(table.accuracy.sc.byN).toEqual([0.5, 0.5]) // the highest SC is the last response in both pools
    expect(Object.keys(table.accuracy)).toEqual([...SELECTORS])
    expect(() => evaluateSelectors(pools, cal, [4])).toThrow(RangeError)
  })
})

describe('the arithmetic world for UID', () => {
  it('extracts normalized answers and reads trace validity (every written step right)', () => {
    const w = arithWorld()
    expect(w.answers.answer('<think>35-6=29; 2+29=31</think><answer> 31 </answer>')).toBe('31')
    expect(w.answers.answer('no answer here')).toBeNull()
    expect(w.verifier.traceValid!('<think>35-6=29; 2+29=31</think><answer>31</answer>')).toBe(true)
    expect(w.verifier.traceValid!('<think>35-6=39; 2+39=31</think><answer>31</answer>')).toBe(false) // right answer, wrong steps
    expect(w.verifier.traceValid!('<answer>31</answer>')).toBeNull()
    expect(w.verifier.verify({ id: 'x', question: '2+(35-6)', answer: '31' }, '<think>35-6=39; 2+39=31</think><answer>31</answer>')).toBe(true)
    const chat = arithWorld({ style: 'chat' }).solve.solverPrompt('1+2') as { messages: { role: string }[] }
    expect(chat.messages.map((m) => m.role)).toEqual(['system', 'user'])
  })
})

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('a selector run on the bundled model', () => {
  it('samples pools with sampling-pass statistics, calibrates on a disjoint split and fills the table', async () => {
    const model = await loadModel(DEFAULT_MODEL, { threads: 2 })
    try {
      const r = await runSelection(model, arithWorld(), {
        eval: { benchmark: 'L3', offset: 0, size: 12 },
        calibration: { level: 3, size: 8, seed: 'test-cal' },
        n: 4,
        ns: [2, 4],
        temperature: 0.7,
        topP: 0.95,
        maxTokens: 48,
        seed: 1,
        scoring: { topK: 25, bins: 8, minTokens: 8 },
      })
      expect(r.calibration.count).toBeGreaterThan(10)
      expect(r.eligibleRate).toBeGreaterThan(0.5)
      for (const s of SELECTORS) for (const a of r.table.accuracy[s].byN) expect(a >= 0 && a <= 1).toBe(true)
      expect(formatSelectionTable(r)).toMatch(/uid-conj-borda/)
      // the pools are the engine's seeded samples: a second run gives the same table
      const again = await runSelection(model, arithWorld(), r.options)
      expect(again.table).toEqual(r.table)
    } finally {
      model.dispose()
    }
  })

  it('autodidact select: parses its flags, prints the table and writes the JSON report; rejects bad pool sizes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ad-select-'))
    const out = join(dir, 'select.json')
    const lines: string[] = []
    const spy = vi.spyOn(console, 'log').mockImplementation((s: string) => void lines.push(s))
    try {
      const code = await selectCommand(['--size', '4', '--calibration', '4', '--n', '2', '--ns', '1,2', '--max-tokens', '48', '--threads', '2', '--out', out])
      expect(code).toBe(0)
    } finally {
      spy.mockRestore()
    }
    expect(lines.join('\n')).toMatch(/n=1\s+n=2\s+mean/)
    const report = JSON.parse(readFileSync(out, 'utf8'))
    expect(report.table.ns).toEqual([1, 2])
    expect(report.table.prompts).toBe(4)
    rmSync(dir, { recursive: true, force: true })
    await expect(selectCommand(['--n', '2', '--ns', '4'])).rejects.toThrow(/--ns/)
    await expect(selectCommand(['--format', 'xml'])).rejects.toThrow(/--format/)
  })
})
