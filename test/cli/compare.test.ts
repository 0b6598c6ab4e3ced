// `autodidact compare`: per-benchmark accuracy, macro average and the paired prompt-cluster
// bootstrap of UID D.4, read from run folders, RUN@STEP and eval files; mismatched runs are errors.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, vi } from 'vitest'
import { compareCommand, compareRecords, formatComparison } from '../../src/cli/compare.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import type { EvalRecord } from '../../src/methods/common/evaluation.js'
import { pairedPromptBootstrap } from '../../src/stats/bootstrap.js'

const root = mkdtempSync(join(tmpdir(), 'ad-compare-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const protocol = { samples: 2, temperature: 0.6, topP: 0.95, maxTokens: 64, seed: 7 }
function record(step: number, benches: Record<string, number[][]>): EvalRecord {
  return {
    format: 'autodidact.eval',
    version: 1,
    step,
    protocol,
    benchmarks: Object.entries(benches).map(([name, rows]) => ({ name, items: rows.map((correct, i) => ({ id: `${name}-${i}`, question: `q${i}`, answer: '0', correct })) })),
  }
}

const A = record(4, { L3: [[1, 1], [1, 0], [0, 0], [1, 1]], L2: [[1, 1], [1, 1]] })
const B = record(0, { L3: [[1, 0], [0, 0], [0, 0], [1, 1]], L2: [[1, 1], [0, 1]] })

function runFolder(name: string, records: EvalRecord[]): string {
  const dir = join(root, name)
  mkdirSync(join(dir, 'evals'), { recursive: true })
  for (const r of records) writeFileSync(join(dir, 'evals', `step-${String(r.step).padStart(6, '0')}.json`), JSON.stringify(r))
  return dir
}

async function output(argv: string[]): Promise<string> {
  const lines: string[] = []
  const spy = vi.spyOn(console, 'log').mockImplementation((s: string) => void lines.push(s))
  try {
    expect(await compareCommand(argv)).toBe(0)
  } finally {
    spy.mockRestore()
  }
  return lines.join('\n')
}

describe('autodidact compare', () => {
  it('computes accuracies and the macro difference by hand, with the D.4 bootstrap of the same draws', () => {
    const c = compareRecords('a', A, 'b', B, { replicates: 2000, seed: 3 })
    expect(c.a.accuracy).toEqual({ L3: 62.5, L2: 100 })
    expect(c.b.accuracy).toEqual({ L3: 37.5, L2: 75 })
    expect(c.a.macro - c.b.macro).toBeCloseTo(25, 12)
    expect(c.bootstrap.macro.estimate).toBeCloseTo(25, 12) // Eq. 20: (25 + 25)/2
    expect(c.bootstrap.promptWeighted.estimate).toBeCloseTo((4 * 25 + 2 * 25) / 6, 12) // Eq. 21
    const direct = pairedPromptBootstrap([{ name: 'L3', a: A.benchmarks[0].items.map((i) => i.correct), b: B.benchmarks[0].items.map((i) => i.correct) }, { name: 'L2', a: A.benchmarks[1].items.map((i) => i.correct), b: B.benchmarks[1].items.map((i) => i.correct) }], { replicates: 2000, seed: 3 })
    expect(c.bootstrap.macro).toEqual(direct.macro)
    expect(c.bootstrap.macro.lo).toBeLessThanOrEqual(25)
    expect(c.bootstrap.macro.hi).toBeGreaterThanOrEqual(25)
  })

  it('reads run folders (latest evaluation), RUN@STEP and eval files, and prints the table', async () => {
    const run = runFolder('run', [B, A])
    const file = join(root, 'base.json')
    writeFileSync(file, JSON.stringify(B))
    const text = await output([run, `${run}@0`, '--replicates', '500'])
    expect(text).toMatch(/step 4/)
    expect(text).toMatch(/step 0/)
    expect(text).toMatch(/macro\s+6\s+81\.25\s+56\.25\s+\+25\.00/)
    expect(await output([run, file, '--replicates', '500'])).toMatch(/L3\s+4\s+62\.50\s+37\.50\s+\+25\.00/)
  })

  it('compares the benchmarks two runs share and names those it left out', async () => {
    const other = record(1, { L3: [[1, 1], [1, 0], [0, 0], [1, 1]], gsm8k: [[1, 0]] })
    const c = compareRecords('a', A, 'c', other, { replicates: 500 })
    expect(Object.keys(c.a.accuracy)).toEqual(['L3'])
    expect(c.a.accuracy.L3).toBe(62.5)
    expect(c.a.macro).toBe(62.5) // the macro average over the shared benchmarks only
    expect(c.bootstrap.perBenchmark.map((p) => p.name)).toEqual(['L3'])
    expect(c.leftOut).toEqual({ onlyA: ['L2'], onlyB: ['gsm8k'] })
    expect(formatComparison(c)).toMatch(/left out \(only A was evaluated on them\): L2\nleft out \(only B was evaluated on them\): gsm8k/)
  })

  it('rejects runs that share no benchmark or were evaluated on different prompts, bad files and a wrong number of runs', async () => {
    const other = record(1, { gsm8k: [[1, 1], [1, 0]] })
    expect(() => compareRecords('a', A, 'c', other)).toThrow(InvalidArgumentError)
    expect(() => compareRecords('a', A, 'c', other)).toThrow(/share no benchmark/)
    const shifted = structuredClone(B)
    shifted.benchmarks[0].items[0].id = 'x'
    expect(() => compareRecords('a', A, 'd', shifted)).toThrow(/different prompts/)
    const bad = join(root, 'bad.json')
    writeFileSync(bad, JSON.stringify({ format: 'autodidact.eval', version: 1, benchmarks: [{ name: 'L3', items: [{ id: 'a', correct: [2] }] }] }))
    await expect(compareCommand([bad, bad])).rejects.toThrow(/0\/1 correctness/)
    await expect(compareCommand([join(root, 'missing')])).rejects.toThrow(/two runs/)
    await expect(compareCommand([join(root, 'run@9'), join(root, 'run')])).rejects.toThrow(/no evaluation at step 9/)
  })
})
