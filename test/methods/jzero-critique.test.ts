// The critiquing J-Zero Judge (judge.critiqueTokens > 0, outside the paper): it writes its critique
// of a response greedily in the world's critique prompt, and its score head reads task, response and
// critique — in scoring, pair margins and Bradley–Terry batches alike. A world without critique roles
// and a Judge that cannot write after a save (untied embeddings) are refused with typed errors.
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { ConfigError, InvalidArgumentError } from '../../src/engine/errors.js'
import type { GenerateOptions, Prompt, ScorePair } from '../../src/engine/model.js'
import { openPolicy, PolicySet } from '../../src/methods/common/policy.js'
import { resolveJzeroConfig } from '../../src/methods/jzero/config.js'
import { bradleyTerryBatch, critiqueCacheFor, judgeInputs, openJudge, pairMargins, rawJudgeScores } from '../../src/methods/jzero/judge.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { DEFAULT_TOY_JUDGE_DIR } from '../../src/toymodel/judge.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { chatWorld } from '../../src/worlds/math/world.js'
import type { TaskWorld } from '../../src/worlds/types.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const world = arithWorld()
const root = mkdtempSync(join(tmpdir(), 'ad-jzero-critique-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** A Judge double: writes `critique:<n>` for the n-th prompt it is asked, scores an input by its completion's length. */
function fakeJudge() {
  const calls: { prompts: Prompt[]; options: GenerateOptions | undefined }[] = []
  const judge = {
    calls,
    tokenizer: { encode: (text: string) => Array.from(text, (ch) => ch.charCodeAt(0)), tokenToId: () => null, specialTokenIds: new Set<number>() },
    encodePrompt: (p: Prompt) => (typeof p === 'string' ? Array.from(p, (ch) => ch.charCodeAt(0)) : [0]),
    generate: async (prompts: Prompt[], options?: GenerateOptions) => {
      calls.push({ prompts, options })
      return prompts.map((_, i) => [{ text: `critique:${i}`, tokens: Int32Array.from(`critique:${i}`, (ch) => ch.charCodeAt(0)) }]) as never
    },
    rewardScores: async (pairs: ScorePair[]) => Float32Array.from(pairs, (p) => (typeof p.completion === 'string' ? p.completion.length : p.completion.length)),
  }
  return judge
}

const items = [
  { question: '(12+7)*3', response: '<think>12+7=19; 19*3=57</think><answer>57</answer>' },
  { question: '4*5-6', response: '<think>4*5=20; 20-6=15</think><answer>15</answer>' },
]

describe('critiquing Judge inputs', () => {
  it('critiqueTokens 0 reads the response as it is and writes nothing (the paper)', async () => {
    const judge = fakeJudge()
    expect(await judgeInputs(judge, world, items, { critiqueTokens: 0 })).toEqual(items.map((it) => world.jzero.judgeInput(it.question, it.response)))
    expect(judge.calls).toEqual([])
  })

  it('a critique is written greedily, up to N tokens, to the world critique prompt, and the score head reads all three', async () => {
    const judge = fakeJudge()
    const wrote: number[] = []
    const inputs = await judgeInputs(judge, world, items, { critiqueTokens: 37, wrote: (n) => wrote.push(n) })
    expect(judge.calls).toHaveLength(1)
    expect(wrote).toEqual(['critique:0'.length + 'critique:1'.length]) // what the call wrote, for the run's generated-token count
    expect(judge.calls[0].prompts).toEqual(items.map((it) => world.cose.judgePrompt(it.question, it.response)))
    expect(judge.calls[0].options).toMatchObject({ n: 1, temperature: 0, maxTokens: 37 })
    expect(inputs).toEqual(items.map((it, i) => world.jzero.critique!.input(it.question, it.response, `critique:${i}`)))
    // the toy view: the plain input's response line, then the critique on its own line
    const plain = world.jzero.judgeInput(items[0].question, items[0].response)
    expect(inputs[0].prompt).toBe(plain.prompt)
    expect(inputs[0].completion).toBe(`${plain.completion as string}critique:0\n`)
  })

  it('scores, margins and Bradley–Terry batches all read the critiqued inputs', async () => {
    const view = { critiqueTokens: 8 }
    const judge = fakeJudge()
    const expected = await judgeInputs(fakeJudge(), world, items, view)
    const lengths = expected.map((p) => (p.completion as string).length)
    expect(Array.from(await rawJudgeScores(judge, world, items, view))).toEqual(lengths)
    const pair = { question: items[0].question, chosen: items[0].response, rejected: items[1].response }
    // the pair's rejected side is the second item written: its critique is critique:1, as items[1]'s was, and the lengths differ by the responses
    const [margin] = await pairMargins(judge, world, [pair], view)
    const sides = await judgeInputs(fakeJudge(), world, [{ question: pair.question, response: pair.chosen }, { question: pair.question, response: pair.rejected }], view)
    expect(margin).toBe((sides[0].completion as string).length - (sides[1].completion as string).length)
    const batch = await bradleyTerryBatch(judge, world, [pair, pair], view)
    expect(batch.pairs).toEqual([[0, 1], [2, 3]])
    expect(batch.sequences[0].completion).toEqual(judge.tokenizer.encode(sides[0].completion as string))
    expect(batch.sequences[1].completion).toEqual(judge.tokenizer.encode(sides[1].completion as string))
  })

  it('each distinct response is critiqued once a call, and with a cache once a run; only written tokens are counted', async () => {
    const judge = fakeJudge()
    const wrote: number[] = []
    const twice = [items[0], items[1], items[0]]
    const inputs = await judgeInputs(judge, world, twice, { critiqueTokens: 8, wrote: (n) => wrote.push(n) })
    expect(judge.calls[0].prompts).toEqual(items.map((it) => world.cose.judgePrompt(it.question, it.response)))
    expect(inputs[2]).toEqual(inputs[0])
    expect(inputs[1]).toEqual(world.jzero.critique!.input(items[1].question, items[1].response, 'critique:1'))
    // a cache: the second call writes only the response it has not seen
    const cache = new Map<string, string>()
    const view = { critiqueTokens: 8, wrote: (n: number) => wrote.push(n), critiqueCache: cache }
    const cached = fakeJudge()
    const first = await judgeInputs(cached, world, [items[0]], view)
    const both = await judgeInputs(cached, world, items, view)
    expect(cached.calls.map((c) => c.prompts)).toEqual([[world.cose.judgePrompt(items[0].question, items[0].response)], [world.cose.judgePrompt(items[1].question, items[1].response)]])
    expect(both[0]).toEqual(first[0])
    expect(both[1]).toEqual(world.jzero.critique!.input(items[1].question, items[1].response, 'critique:0'))
    expect(cache.size).toBe(2)
    expect(await judgeInputs(cached, world, items, view)).toEqual(both)
    expect(cached.calls).toHaveLength(2) // nothing left to write
    expect(wrote).toEqual(['critique:0critique:1'.length, 'critique:0'.length, 'critique:0'.length])
    // a J-Zero Judge keeps one only when what it writes cannot change: frozen, or training its score head alone
    expect(critiqueCacheFor({ critiqueTokens: 8, scoreHeadOnly: false }, false)).toBeInstanceOf(Map)
    expect(critiqueCacheFor({ critiqueTokens: 8, scoreHeadOnly: true }, true)).toBeInstanceOf(Map)
    expect(critiqueCacheFor({ critiqueTokens: 8, scoreHeadOnly: false }, true)).toBeUndefined()
    expect(critiqueCacheFor({ critiqueTokens: 0, scoreHeadOnly: true }, false)).toBeUndefined()
  })

  it('the chat worlds review after the response; a world without critique roles is refused by name', async () => {
    const math = chatWorld({ name: 'math', problems: [], benchmarks: [] })
    const [input] = await judgeInputs(fakeJudge(), math, [{ question: 'What is 2+3?', response: 'It is 5.' }], { critiqueTokens: 4 })
    expect(input.completion).toBe('It is 5.\n\nReview:\ncritique:0')
    const bare: TaskWorld = { ...world, name: 'bare', jzero: { ...world.jzero, critique: undefined } }
    await expect(judgeInputs(fakeJudge(), bare, items, { critiqueTokens: 4 })).rejects.toThrow(InvalidArgumentError)
    await expect(judgeInputs(fakeJudge(), bare, items, { critiqueTokens: 4 })).rejects.toThrow(/'bare' world has no jzero.critique/)
    // without a critique nothing is asked of the world's critique roles
    expect(await judgeInputs(fakeJudge(), bare, items, { critiqueTokens: 0 })).toHaveLength(2)
  })

  it('the config takes a non-negative whole number of critique tokens', () => {
    expect(resolveJzeroConfig({ judge: { critiqueTokens: 200 } }).judge.critiqueTokens).toBe(200)
    expect(() => resolveJzeroConfig({ judge: { critiqueTokens: -1 } })).toThrow(ConfigError)
    expect(() => resolveJzeroConfig({ judge: { critiqueTokens: 2.5 } })).toThrow(ConfigError)
  })
})

const haveModels = existsSync(join(DEFAULT_MODEL, 'model.safetensors')) && existsSync(join(DEFAULT_TOY_JUDGE_DIR, 'model.safetensors'))

describe.skipIf(!haveModels)('critiquing Judge on the engine', () => {
  it('a cached critique is the one the Judge writes in any other batch: inputs with a cache equal inputs without', async () => {
    const set = new PolicySet(openPolicy)
    try {
      const judge = await openJudge(set, { model: DEFAULT_TOY_JUDGE_DIR, threads: 2 }, world, { critiqueTokens: 48 })
      const more = [...items, ...['(3+4)*5', '9-2*3', '17+25'].map((q, i) => ({ question: q, response: `<think>${q}=${i}</think><answer>${i}</answer>` }))]
      const cache = new Map<string, string>()
      await judgeInputs(judge, world, [more[3], items[1]], { critiqueTokens: 48, critiqueCache: cache }) // written in a batch of two
      const cached = await judgeInputs(judge, world, more, { critiqueTokens: 48, critiqueCache: cache })
      const fresh = await judgeInputs(judge, world, more, { critiqueTokens: 48 })
      expect(cache.size).toBe(more.length)
      expect(cached).toEqual(fresh)
    } finally {
      set.dispose()
    }
  })

  it('the bundled Judge writes its critique with its tied LM head, and the score head reads it', async () => {
    const set = new PolicySet(openPolicy)
    try {
      const judge = await openJudge(set, { model: DEFAULT_TOY_JUDGE_DIR, threads: 2 }, world, { critiqueTokens: 48 })
      const written = await judge.generate(items.map((it) => world.cose.judgePrompt(it.question, it.response)), { n: 1, temperature: 0, maxTokens: 48 })
      expect(written.every(([c]) => c.text.length > 0)).toBe(true)
      const byHand = await judge.rewardScores(items.map((it, i) => world.jzero.critique!.input(it.question, it.response, written[i][0].text)))
      const critiqued = await rawJudgeScores(judge, world, items, { critiqueTokens: 48 })
      const plain = await rawJudgeScores(judge, world, items)
      Array.from(critiqued).forEach((s, i) => {
        expect(Number.isFinite(s)).toBe(true)
        expect(s).toBe(byHand[i])
        expect(s).not.toBe(plain[i])
      })
    } finally {
      set.dispose()
    }
  })

  it('a Judge with untied embeddings is refused: its reward-model folder would keep no LM head to write with', async () => {
    const dir = join(root, 'untied')
    await writeTinyModel(dir, { family: 'qwen3', dtype: 'F32', seed: 3, tied: false })
    const set = new PolicySet(openPolicy)
    try {
      await expect(openJudge(set, { model: dir, scoreHead: { seed: 1 } }, world, { critiqueTokens: 8 })).rejects.toThrow(/tie_word_embeddings/)
      // the paper's Judge reads without writing: the same folder opens
      expect((await openJudge(set, { model: dir, scoreHead: { seed: 1 } }, world)).scoreLabels).toBe(1)
    } finally {
      set.dispose()
    }
  })

  const smallCritiqueRun = (judge: object) =>
    resolveJzeroConfig({
      steps: 1,
      challenger: { steps: 1, batch: 4, rollouts: 1, solverSamples: 2 },
      selection: { pool: 6, keep: 3, samples: 2 },
      solver: { steps: 1, batch: 3, miniBatch: 3, rollouts: 2 },
      judge: { steps: 2, batch: 4, tasks: 6, lr: 1e-4, critiqueTokens: 32, ...judge },
      eval: { every: 1, size: 4, benchmarks: [], judgePairs: 4 },
    })
  const critiqueProbe = world.cose.judgePrompt(items[0].question, items[0].response)

  it('one J-Zero iteration with a critiquing Judge runs every stage and trains the Judge on critiqued pairs', async () => {
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, smallCritiqueRun({}), world, { threads: 2 })
    try {
      const [[before]] = await run.judge.generate([critiqueProbe], { temperature: 0, maxTokens: 32 })
      const r = await run.runStep()
      expect(r.solver.reward.min).toBeGreaterThan(0)
      expect(r.solver.reward.max).toBeLessThan(1)
      expect(r.judge.trainPairs).toBeGreaterThan(0)
      expect(r.judge.train!.updates).toBe(2)
      expect(Number.isFinite(r.judge.train!.loss)).toBe(true)
      expect(Number.isFinite(r.judgeAccuracy)).toBe(true)
      // the paper's Judge trains every weight: what it writes moves with its score head
      const [[after]] = await run.judge.generate([critiqueProbe], { temperature: 0, maxTokens: 32 })
      expect(Array.from(after.logprobs)).not.toEqual(Array.from(before.logprobs))
    } finally {
      run.dispose()
    }
  })

  it('judge.scoreHeadOnly: the Judge learns in its score head alone, and writes the same critique after its steps', async () => {
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, smallCritiqueRun({ scoreHeadOnly: true, lr: 1e-3 }), world, { threads: 2 })
    try {
      const [[before]] = await run.judge.generate([critiqueProbe], { temperature: 0, maxTokens: 32 })
      const [scoreBefore] = await run.judge.rewardScores([world.jzero.judgeInput(items[0].question, items[0].response)])
      const r = await run.runStep()
      expect(r.judge.train!.updates).toBe(2)
      const [[after]] = await run.judge.generate([critiqueProbe], { temperature: 0, maxTokens: 32 })
      const [scoreAfter] = await run.judge.rewardScores([world.jzero.judgeInput(items[0].question, items[0].response)])
      expect(after.text).toBe(before.text)
      expect(Array.from(after.logprobs)).toEqual(Array.from(before.logprobs))
      expect(scoreAfter).not.toBe(scoreBefore)
    } finally {
      run.dispose()
    }
  })
})
