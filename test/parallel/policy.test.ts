// The rank-splitting Policy on one rank (the 'single' collective), on the bundled model: generate
// through the split-and-gather path equals the model's own generate token for token (the share's
// global sequence ids), the trainer steps through the data-parallel path, and the debug weight
// check throws RankDivergenceError when a rank's weights hash differs.
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { openPolicy } from '../../src/methods/common/policy.js'
import { Collective, openCollective } from '../../src/parallel/collective.js'
import { ParallelPolicy, RankDivergenceError } from '../../src/parallel/policy.js'

const MODEL = join(import.meta.dirname, '..', '..', 'models', 'arith-qwen3-tiny')

/** A 1-rank collective whose gathers of a string (the weight check's hash) come back with a second, different rank's. */
class DivergentPeer extends Collective {
  override async allGatherJson<T>(value: T): Promise<T[]> {
    return typeof value === 'string' ? [value, 'f'.repeat(64) as T] : super.allGatherJson(value)
  }
}

describe('ParallelPolicy on one rank', () => {
  it('generates what the model generates (same tokens, same statistics) through the split-and-gather path', async () => {
    const inner = await openPolicy({ model: MODEL, threads: 1 })
    const policy = new ParallelPolicy(inner, await openCollective({ backend: 'single' }))
    try {
      const prompts = ['3+4=', '12-5=', '7*6=']
      const o = { n: 2, temperature: 1, maxTokens: 12, seed: 5, sequenceOffset: 3 }
      const [direct, split] = [await inner.generate(prompts, o), await policy.generate(prompts, o)]
      expect(split.map((g) => g.map((c) => [c.promptIndex, c.sampleIndex, c.text]))).toEqual(direct.map((g) => g.map((c) => [c.promptIndex, c.sampleIndex, c.text])))
      for (const [i, g] of split.entries())
        for (const [k, c] of g.entries()) {
          expect(c.tokens).toEqual(direct[i][k].tokens)
          expect(c.logprobs).toEqual(direct[i][k].logprobs)
          expect(c.entropy).toBeInstanceOf(Float32Array)
        }
    } finally {
      policy.dispose()
    }
  })

  it('the debug weight check: a rank whose weights hash differs after a step is a RankDivergenceError', async () => {
    const inner = await openPolicy({ model: MODEL, threads: 1 })
    const collective = new DivergentPeer((await openCollective({ backend: 'single' })).native)
    const policy = new ParallelPolicy(inner, collective, 1)
    try {
      const trainer = await policy.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-4 } })
      const prompt = inner.encodePrompt('3+4=')
      const completion = inner.tokenizer.encode('7', { addSpecialTokens: false })
      const step = trainer.step({ sequences: [{ prompt, completion }] })
      await expect(step).rejects.toBeInstanceOf(RankDivergenceError)
      await expect(step).rejects.toThrow(/after optimizer step 1 the ranks' weights differ: rank 0 [0-9a-f]{12}, rank 1 ffffffffffff/)
      expect(await policy.weightsHash()).toMatch(/^[0-9a-f]{64}$/)
    } finally {
      policy.dispose()
    }
  })

  it('a step with fewer micro-batches than ranks is a typed error on every rank, before any collective runs', async () => {
    const inner = await openPolicy({ model: MODEL, threads: 1 })
    // one rank's view of a 2-rank world: the check runs before the first collective operation
    const twoRanks = Object.assign(Object.create(Collective.prototype), { rank: 0, worldSize: 2 }) as Collective
    try {
      const trainer = await inner.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-4 }, microBatchSize: 4, collective: twoRanks } as Parameters<typeof inner.trainer>[0])
      const prompt = inner.encodePrompt('3+4=')
      const completion = inner.tokenizer.encode('7', { addSpecialTokens: false })
      await expect(trainer.step({ sequences: [{ prompt, completion }, { prompt, completion }] })).rejects.toThrow(/1 micro-batch for 2 ranks/)
    } finally {
      inner.dispose()
    }
  })
})
