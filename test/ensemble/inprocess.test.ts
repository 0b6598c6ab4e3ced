// In-process variants over the bundled model: k samples per prompt with the engine's statistics,
// and two variants over one Model (the Solver at two temperatures, DIS §4.2) sampled concurrently
// give exactly what each gives alone (the counter-based RNG keys on seed and sequence, not batch).
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { loadModel, type Model } from '../../src/engine/model.js'
import { queryEnsemble, variantSeed } from '../../src/ensemble/ensemble.js'
import { InProcessSampler } from '../../src/ensemble/inprocess.js'
import { arithWorld } from '../../src/worlds/arith/index.js'

const world = arithWorld()
/** R-Zero's view of the toy world: its Solver prompt, answers and equivalence, the BLEU text. */
const w = {
  solverPrompt: (q: string) => world.rzero.solverPrompt(q) as string,
  extractAnswer: (t: string) => world.answers.parse(t)?.answer ?? null,
  equivalent: world.answers.equivalent,
  bleuText: world.answers.repetitionText,
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('InProcessSampler on the bundled model', () => {
  let model: Model
  beforeAll(async () => {
    model = await loadModel(DEFAULT_MODEL, { threads: 2 })
  })
  afterAll(() => model?.dispose())

  it('returns k samples per prompt with per-token statistics', async () => {
    const s = new InProcessSampler(model, { name: 'solver@1' })
    const out = await s.sample([w.solverPrompt('12+7'), w.solverPrompt('(3+8)*4')], { n: 3, temperature: 1, maxTokens: 48, seed: 4 })
    expect(out.map((g) => g.length)).toEqual([3, 3])
    for (const c of out.flat()) {
      expect(typeof c.text).toBe('string')
      expect(c.tokens!.length).toBe(c.logprobs!.length)
    }
    expect(s.name).toBe('solver@1')
    expect(new InProcessSampler(model).name).toBe('inprocess:arith-qwen3-tiny')
  })

  it('two variants over one model, sampled concurrently, equal the same variants sampled alone', async () => {
    const prompts = ['17+(31+37)', '41*(54-47)', '(12+7)*3-4'].map(w.solverPrompt)
    const variants = [0.7, 1.0].map((t) => ({ sampler: new InProcessSampler(model, { name: `solver@${t}` }), temperature: t, k: 4 }))
    const o = { extract: (t: string) => w.extractAnswer(t), equivalent: w.equivalent, maxTokens: 64, seed: 9, keepSamples: true }
    const together = await queryEnsemble(variants, prompts, o)
    const alone0 = await queryEnsemble([variants[0]], prompts, o)
    expect(together.variants.map((v) => v.status)).toEqual(['ok', 'ok'])
    expect(together.variants[0].samples!.map((g) => g.map((s) => s.text))).toEqual(alone0.variants[0].samples!.map((g) => g.map((s) => s.text)))
    // variant 1 samples under the seed of ensemble slot 1
    const lone1 = await variants[1].sampler.sample(prompts, { n: 4, temperature: 1.0, maxTokens: 64, seed: variantSeed(9, 1) })
    expect(together.variants[1].samples!.map((g) => g.map((s) => s.text))).toEqual(lone1.map((g) => g.map((s) => s.text)))
    // the two temperatures are different streams: their samples are not copies of each other
    expect(together.variants[0].samples!.flat().map((s) => s.text)).not.toEqual(together.variants[1].samples!.flat().map((s) => s.text))
    expect(together.questions.every((q) => q.responding === 2 && q.pooled.length === 8)).toBe(true)
  })
})
