// The example user world (examples/number-words/world.mjs), loaded as a user would load it —
// `--world ./examples/number-words/world.mjs` — and run through `autodidact evolve`: its own data,
// benchmarks and answer rules with the papers' prompts; the run records the module and resumes on it.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it, vi } from 'vitest'
import { evolveCommand } from '../../src/cli/evolve.js'
import { loadWorld } from '../../src/worlds/load.js'

const root = mkdtempSync(join(tmpdir(), 'ad-example-world-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const MODULE = './examples/number-words/world.mjs'

describe('the number-words user world', () => {
  it('loads from its path: its data, its benchmark, its answer rules', async () => {
    const w = await loadWorld({ world: MODULE })
    expect(w.name).toBe('number-words')
    expect(w.origin).toEqual({ world: resolve(MODULE) })
    expect(w.data.unlabeledPrompts()).toHaveLength(40)
    expect(w.data.benchmarks.map((b) => [b.name, b.problems.length])).toEqual([['test', 20]])
    const p = w.data.benchmarks[0].problems[0]
    expect(w.verifier.verify(p, `<think>…</think> So it is \\boxed{${p.answer.toUpperCase().replace(/-/g, ' ')}}.`)).toBe(true)
    expect(w.verifier.verify(p, '\\boxed{one}')).toBe(false)
    expect(w.answers.answer('\\boxed{Two Hundred and Five}')).toBe('two hundred five')
  })

  it('runs through evolve (grpo, the bundled model) and resumes on the module the run folder names', async () => {
    const cfg = join(root, 'grpo.json')
    writeFileSync(cfg, JSON.stringify({ questions: { level: 3, perStep: 2 }, rollout: { n: 2, temperature: 1, topP: 1, maxTokens: 24 }, eval: { every: 1, size: 3, benchmarks: [] }, checkpointEvery: 1 }))
    const out = join(root, 'run')
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      expect(await evolveCommand(['--method', 'grpo', '--world', MODULE, '--config', cfg, '--steps', '1', '--out', out, '--threads', '1'])).toBe(0)
      expect(await evolveCommand(['--resume', out, '--steps', '2', '--threads', '1'])).toBe(0)
    } finally {
      log.mockRestore()
      err.mockRestore()
    }
    const rows = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    expect(rows[1].questions).toBe(2)
    const state = JSON.parse(readFileSync(join(out, 'checkpoints', 'step-000002', 'run_state.json'), 'utf8'))
    expect(state.world).toEqual({ name: 'number-words', spec: { world: resolve(MODULE) } })
    expect(readdirSync(join(out, 'evals'))).toEqual(['step-000000.json', 'step-000001.json', 'step-000002.json'])
    const ev = JSON.parse(readFileSync(join(out, 'evals', 'step-000002.json'), 'utf8'))
    expect(ev.benchmarks.map((b: { name: string; items: unknown[] }) => [b.name, b.items.length])).toEqual([['test', 3]])
  }, 120_000)
})
