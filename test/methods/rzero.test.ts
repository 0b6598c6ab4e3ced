// R-Zero pieces without a long run: config presets and validation, the --beta/--remote flags,
// the phase schedule, the toy world's BLEU text (so repeated questions do cluster), the variant
// list per mode, and the Llama-architecture ensemble variant built from the Qwen3 model.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { ConfigError } from '../../src/engine/errors.js'
import { loadModel } from '../../src/engine/model.js'
import { PAPER_PRESET, resolveRzeroConfig, TOY_PRESET, usesEnsemble } from '../../src/methods/rzero/config.js'
import { phaseOf, phaseSteps, RzeroRun, scoreChallengerBatch } from '../../src/methods/rzero/loop.js'
import { spread } from '../../src/stats/summary.js'
import { buildLlamaVariant, ensureLlamaVariant, qwen3ToLlamaTensors } from '../../src/toymodel/llama-variant.js'
import { rzeroFlagsToOverride, spec } from '../../src/methods/rzero/spec.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { repetitionPenalty } from '../../src/tasks/cluster.js'

const world = arithWorld()
/** R-Zero's view of the toy world: its prompts and parser, the Solver's answers and their equivalence, the BLEU text. */
const w = {
  solverPrompt: (q: string) => world.rzero.solverPrompt(q) as string,
  parseQuestion: world.rzero.parseQuestion,
  extractAnswer: (t: string) => world.answers.parse(t)?.answer ?? null,
  equivalent: world.answers.equivalent,
  bleuText: world.answers.repetitionText,
}

const root = mkdtempSync(join(tmpdir(), 'ad-rzero-unit-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('R-Zero config', () => {
  it('has the DIS §5.1 paper preset and a toy preset, β > 0 by default', () => {
    expect(PAPER_PRESET.phases).toEqual({ challengerSteps: 6, solverSteps: 20 })
    expect(PAPER_PRESET.challenger.batch).toBe(16)
    expect(PAPER_PRESET.ensemble).toMatchObject({ solverTemperatures: [0.7, 1.0], k: 10, timeoutMs: 30_000, second: { temperature: 0.7 } })
    expect(TOY_PRESET.reward).toEqual({ alpha: 1, beta: 1, uncertainty: 'dis', parseFailure: -1, repetition: { tau: 0.5, lambda: 1 } })
    expect(TOY_PRESET.solver.band).toEqual([0.3, 0.8])
    expect(spec.defaultPreset).toBe('toy')
    expect(spec.presets.paper).toBe(PAPER_PRESET)
  })

  it('rejects bad values with the offending path', () => {
    const bad: [unknown, RegExp][] = [
      [{ reward: { beta: -1 } }, /reward/],
      [{ reward: { uncertainty: 'entropy' } }, /reward\.uncertainty/],
      [{ solver: { band: [0.8, 0.3] } }, /solver\.band/],
      [{ challenger: { batch: 1 } }, /challenger\.batch/],
      [{ ensemble: { mode: 'all' } }, /ensemble\.mode/],
      [{ ensemble: { remote: [{ url: 'localhost:1', model: '', temperature: 1, k: 1, timeoutMs: 0 }] } }, /ensemble\.remote\[0\]\.url/],
      [{ phases: { challengerSteps: 0, solverSteps: 0 } }, /phases/],
      [{ nope: 1 }, /unknown key 'nope'/],
      [{ steps: '3' }, /steps: expected a number/],
    ]
    for (const [o, re] of bad) {
      expect(() => resolveRzeroConfig(o, TOY_PRESET, 'x.json'), JSON.stringify(o)).toThrow(ConfigError)
      expect(() => resolveRzeroConfig(o, TOY_PRESET, 'x.json')).toThrow(re)
    }
  })

  it('--beta 0 is plain R-Zero: the Solver alone; --remote adds endpoints', () => {
    const plain = resolveRzeroConfig(spec.flagsToOverride!({ beta: 0 }))
    expect(plain.reward.beta).toBe(0)
    expect(usesEnsemble(plain)).toBe(false)
    expect(usesEnsemble(resolveRzeroConfig({}))).toBe(true)
    expect(usesEnsemble(resolveRzeroConfig({ reward: { beta: 0 }, ensemble: { mode: 'ensemble' } }))).toBe(true)
    expect(spec.flags).toMatchObject({ beta: 'number', remote: 'string' })
    const remote = resolveRzeroConfig(rzeroFlagsToOverride({ remote: 'http://127.0.0.1:8080, http://127.0.0.1:8081', uncertainty: 'rzero' }))
    expect(remote.ensemble.remote.map((r) => r.url)).toEqual(['http://127.0.0.1:8080', 'http://127.0.0.1:8081'])
    expect(remote.reward.uncertainty).toBe('rzero')
    expect(rzeroFlagsToOverride({})).toEqual({})
  })

  it('alternates phases: challengerSteps then solverSteps, and counts each role’s steps', () => {
    const c = resolveRzeroConfig({ steps: 12, phases: { challengerSteps: 2, solverSteps: 3 } })
    expect(Array.from({ length: 12 }, (_, s) => phaseOf(c, s)[0]).join('')).toBe('ccsssccssscc')
    expect([phaseSteps(c, 'challenger'), phaseSteps(c, 'solver')]).toEqual([6, 6])
  })
})

describe('Challenger reward pieces on the toy world', () => {
  it('spaces toy questions for BLEU, so repeats cluster and distinct ones do not', () => {
    expect(w.bleuText('(12+7)*3-4')).toBe('( 12 + 7 ) * 3 - 4')
    // without spacing, each question is one whitespace token and even identical ones never cluster
    const raw = repetitionPenalty(['(12+7)*3', '(12+7)*3', '45-9*2'])
    expect(Array.from(raw.penalty)).toEqual([1 / 3, 1 / 3, 1 / 3])
    const spaced = repetitionPenalty(['(12+7)*3', '(12+7)*3', '45-9*2'].map(w.bleuText))
    expect(Array.from(spaced.penalty)).toEqual([2 / 3, 2 / 3, 1 / 3])
  })

  it('scores a batch: parse failures −1, Table 2 lists hold the parsed questions only', () => {
    const verdict = (pHat: number, rDis: number) => ({ pooled: [], vote: { answer: '1', index: 0, count: 0, total: 0, members: [], labels: new Int32Array() }, pHat, pluralities: [], rDis, responding: 3 })
    const r = resolveRzeroConfig({}).reward
    const s = scoreChallengerBatch(['1+2*3', null, '(4+5)*6'], [verdict(0.5, 0), null, verdict(0.9, 1)], { ...r, alpha: 2, beta: 0.5 }, w.bleuText)
    expect(s.rewards[1]).toBe(-1)
    expect(s.rUnc).toEqual([0.5, expect.closeTo(0.1, 12)])
    expect(s.rewards[0]).toBeCloseTo(2 * 0.5 + 0 - 0.5, 12)
    expect(s.rewards[2]).toBeCloseTo(2 * 0.1 + 0.5 - 0.5, 12)
    expect(spread([1, 3]).std).toBe(1) // population std, as per batch in DIS Table 2
    expect(spread([]).n).toBe(0)
  })

  it('reads toy answers; malformed Solver output is no answer', () => {
    expect(w.extractAnswer('<think>1+2=3</think><answer>3</answer>')).toBe('3')
    expect(w.extractAnswer('<think>1+2=3</think><answer>3')).toBeNull()
    expect(w.parseQuestion('<question>(12+7)*3</question>')).toEqual({ question: '(12+7)*3', key: '(12+7)*3' })
    expect(w.parseQuestion('<question>twelve</question>')).toBeNull() // no Validator in R-Zero: not an expression = parse failure
    expect(w.equivalent('3', '3.0')).toBe(true)
  })
})

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('the Llama-architecture ensemble variant', () => {
  it('folds Qwen3 q/k norms into the projections and loads as a Llama model that writes the toy format', async () => {
    const { tensors, config } = await qwen3ToLlamaTensors(DEFAULT_MODEL)
    expect(config).toMatchObject({ architectures: ['LlamaForCausalLM'], model_type: 'llama', head_dim: 40 })
    expect(tensors.some((t) => t.name.includes('q_norm') || t.name.includes('k_norm'))).toBe(false)
    const dir = join(root, 'bare')
    await buildLlamaVariant(DEFAULT_MODEL, dir, { healSteps: 0, batchSize: 8, lr: 1e-3, corpusSeed: 77 })
    const m = await loadModel(dir, { threads: 2 })
    expect(m.config.architecture).toBe('llama')
    const [[c]] = await m.generate([w.solverPrompt('12+7')], { temperature: 0, maxTokens: 48 })
    m.dispose()
    expect(c.text.startsWith('<think>')).toBe(true)
  })

  it('heals by SFT and caches by (weights, recipe)', async () => {
    const recipe = { healSteps: 3, batchSize: 8, lr: 1e-3, corpusSeed: 77 }
    const cache = join(root, 'cache')
    const dir = await ensureLlamaVariant(DEFAULT_MODEL, recipe, { cacheRoot: cache, threads: 2 })
    expect(JSON.parse(readFileSync(join(dir, 'variant.json'), 'utf8')).recipe).toEqual(recipe)
    const bare = join(root, 'bare')
    expect(readFileSync(join(dir, 'model.safetensors')).equals(readFileSync(join(bare, 'model.safetensors')))).toBe(false)
    // A cache hit returns the same folder without rewriting it.
    const built = statSync(join(dir, 'model.safetensors')).mtimeMs
    expect(await ensureLlamaVariant(DEFAULT_MODEL, recipe, { cacheRoot: cache })).toBe(dir)
    expect(statSync(join(dir, 'model.safetensors')).mtimeMs).toBe(built)
    expect(await ensureLlamaVariant(DEFAULT_MODEL, { ...recipe, healSteps: 0 }, { cacheRoot: cache })).not.toBe(dir)
  })

  it('builds the ensemble per mode: Solver at two temperatures (+ S_c, + remote), or the Solver alone', async () => {
    const m = await loadModel(DEFAULT_MODEL, { threads: 1 })
    const dis = RzeroRun.buildVariants(resolveRzeroConfig({ ensemble: { remote: [{ url: 'http://127.0.0.1:9', model: 'm', temperature: 0.5, k: 0, timeoutMs: 0 }] } }), m, m)
    expect(dis.map((v) => [v.sampler.name, v.temperature, v.k, v.timeoutMs])).toEqual([
      ['solver@0.7', 0.7, 4, 30_000],
      ['solver@1', 1, 4, 30_000],
      ['qwen3:arith-qwen3-tiny@0.7', 0.7, 4, 30_000],
      ['remote:http://127.0.0.1:9 m', 0.5, 4, 30_000],
    ])
    const plain = RzeroRun.buildVariants(resolveRzeroConfig({ reward: { beta: 0 } }), m, m)
    expect(plain.map((v) => [v.sampler.name, v.k])).toEqual([['solver@1', 8]])
    m.dispose()
  })
})

describe('the Llama variant refuses a base it cannot convert', () => {
  it('names the config key to set instead', async () => {
    const dir = join(root, 'not-qwen3')
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ model_type: 'llama' }))
    await expect(qwen3ToLlamaTensors(dir)).rejects.toThrow(/ensemble\.second\.model/)
  })
})
