// The bundled toy model (models/arith-qwen3-tiny) and its recipe (src/toymodel): the folder loads
// as a Qwen3 model, its tokenizer round-trips the world's text exactly, its greedy Solver writes
// well-formed answers, and a few-step recipe run writes a valid, loadable, deterministic folder.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { parseModelConfig } from '../../src/engine/hf/config.js'
import { loadModel, Tokenizer, type Model } from '../../src/index.js'
import {
  auroc,
  bootstrapMean,
  buildToyModel,
  DEFAULT_TOY_MODEL_DIR,
  TOY_ARCHITECTURE,
  TOY_IDS,
  TOY_TOKENIZER_SIZE,
  TOY_VOCAB_SIZE,
  toyTokenizerFiles,
  validatorEvalItems,
} from '../../src/toymodel/index.js'
import { buildCorpus, DEFAULT_LEVEL, evalSet, formatIndicator, parseSolution, solverPrompt } from '../../src/worlds/arith/index.js'

const root = mkdtempSync(join(tmpdir(), 'ad-toymodel-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('toy tokenizer', () => {
  const files = toyTokenizerFiles()
  const tok = new Tokenizer({ tokenizerJson: files.tokenizerJson, tokenizerConfig: files.tokenizerConfig })

  it('has one id per token, the tags as whole tokens, <|im_end|> as eos, and a padded vocab_size', () => {
    expect(tok.vocabSize).toBe(TOY_TOKENIZER_SIZE)
    expect(TOY_VOCAB_SIZE % 8).toBe(0)
    expect(TOY_VOCAB_SIZE).toBeGreaterThanOrEqual(TOY_TOKENIZER_SIZE)
    expect(tok.eosTokenIds).toEqual([TOY_IDS.imEnd])
    for (const tag of ['<question>', '</question>', '<think>', '</think>', '<answer>', '</answer>', '<score>', '</score>', '\\boxed{', '<|im_end|>'])
      expect(tok.encode(tag)).toHaveLength(1)
    expect(tok.encode('Solve: (12+7)*3\n').length).toBe('Solve: (12+7)*3\n'.length)
  })

  it('round-trips the whole corpus (toy prompts, completions, ChatML) exactly', () => {
    const corpus = buildCorpus({ seed: 11, size: 1500, chat: true })
    const chars = new Set<string>()
    for (const it of corpus) {
      for (const text of [it.prompt + it.completion, tok.applyChatTemplate(it.messages!)]) {
        for (const ch of text) chars.add(ch)
        expect(tok.decode(tok.encode(text))).toBe(text)
      }
    }
    expect(chars.size).toBeGreaterThan(50)
  })

  it('never drops a character: anything outside ASCII goes through byte fallback', () => {
    for (const text of ['héllo ✓ 😀', '3×4−2', '\u0000\u0007\u007f', 'tabs\tand\r\nCRLF', '<thinkk></answer >\\boxed{\\boxed{']) {
      const ids = tok.encode(text)
      expect(ids.every((id) => Number.isInteger(id) && id < TOY_TOKENIZER_SIZE)).toBe(true)
      expect(tok.decode(ids)).toBe(text)
    }
  })
})

describe('eval helpers', () => {
  it('AUROC is the Mann–Whitney probability with ties counted half', () => {
    expect(auroc([3, 4], [1, 2])).toBe(1)
    expect(auroc([1, 2], [3, 4])).toBe(0)
    expect(auroc([1, 2], [1, 2])).toBe(0.5)
    expect(auroc([2], [1, 2, 3])).toBeCloseTo(0.5)
    expect(Number.isNaN(auroc([], [1]))).toBe(true)
  })

  it('the bootstrap interval brackets the mean and is seeded', () => {
    const v = Array.from({ length: 50 }, (_, i) => (i % 3 === 0 ? 1 : 0))
    const a = bootstrapMean(v, { seed: 3, replicates: 500 })
    expect(a).toEqual(bootstrapMean(v, { seed: 3, replicates: 500 }))
    expect(a.lo).toBeLessThanOrEqual(a.estimate)
    expect(a.hi).toBeGreaterThanOrEqual(a.estimate)
    expect(a.hi - a.lo).toBeGreaterThan(0.1)
  })

  it('validator inputs mix held-out good questions with bad ones', () => {
    const items = validatorEvalItems(3, 40)
    expect(items).toHaveLength(40)
    const good = items.filter((i) => i.good).length
    expect(good).toBeGreaterThanOrEqual(18)
    expect(good).toBeLessThanOrEqual(24)
  })
})

describe('the bundled model', () => {
  const dir = DEFAULT_TOY_MODEL_DIR
  let model: Model
  beforeAll(async () => {
    model = await loadModel(dir, { threads: 2 })
  })
  afterAll(() => model?.dispose())

  it('is a small Qwen3 folder with a ChatML template and <|im_end|> as eos', () => {
    const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'))
    expect(cfg.architectures).toEqual(['Qwen3ForCausalLM'])
    expect(cfg.vocab_size).toBe(TOY_VOCAB_SIZE)
    expect(cfg.tie_word_embeddings).toBe(true)
    expect(model.config.hiddenSize).toBe(TOY_ARCHITECTURE.hiddenSize)
    expect(model.config.qkNorm).toBe(true)
    for (const f of ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'README.md']) expect(existsSync(join(dir, f))).toBe(true)
    expect(readFileSync(join(dir, 'model.safetensors')).length).toBeLessThan(8e6)
    expect(model.tokenizer.eosTokenIds).toContain(TOY_IDS.imEnd)
    expect(model.tokenizer.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true })).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')
  })

  it('its tokenizer round-trips corpus text exactly', () => {
    for (const it of buildCorpus({ seed: 5, size: 300 })) {
      const text = it.prompt + it.completion
      expect(model.tokenizer.decode(model.tokenizer.encode(text))).toBe(text)
    }
  })

  it('writes well-formed greedy Solver answers on held-out questions', async () => {
    const items = evalSet(DEFAULT_LEVEL, 20)
    const out = await model.generate(items.map((q) => solverPrompt(q.question)), { temperature: 0, maxTokens: 96 })
    const f = out.map(([c]) => formatIndicator(parseSolution(c.text)))
    expect(out.filter(([c]) => c.finishReason === 'stop').length).toBeGreaterThanOrEqual(17)
    expect(f.filter((x) => x === 1).length).toBeGreaterThanOrEqual(17)
  })
})

describe('the recipe', () => {
  const tiny = { ...TOY_ARCHITECTURE, hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, headDim: 16, intermediateSize: 64 }

  it('a 5-step run writes a loadable, valid Hugging Face folder, byte for byte the same on a rerun', async () => {
    const run = async (name: string) => {
      const outDir = join(root, name)
      const r = await buildToyModel({ outDir, steps: 5, batchSize: 4, microBatchSize: 4, arch: tiny, evalEvery: 0, threads: 2, seed: 3 })
      r.model.dispose()
      return outDir
    }
    const a = await run('a')
    const b = await run('b')
    expect(readFileSync(join(a, 'model.safetensors')).equals(readFileSync(join(b, 'model.safetensors')))).toBe(true)
    expect(readFileSync(join(a, 'recipe.json'), 'utf8')).toBe(readFileSync(join(b, 'recipe.json'), 'utf8'))

    const cfg = parseModelConfig(JSON.parse(readFileSync(join(a, 'config.json'), 'utf8')), 'config.json')
    expect(cfg.hfArchitecture).toBe('Qwen3ForCausalLM')
    expect(cfg.eosTokenIds).toEqual([TOY_IDS.imEnd])
    const gen = JSON.parse(readFileSync(join(a, 'generation_config.json'), 'utf8'))
    expect(gen.eos_token_id).toContain(TOY_IDS.imEnd)
    const tok = await Tokenizer.fromFolder(a)
    expect(tok.decode(tok.encode('<think>1+2=3</think><answer>3</answer>'))).toBe('<think>1+2=3</think><answer>3</answer>')

    const m = await loadModel(a, { threads: 1 })
    try {
      const [[c]] = await m.generate(solverPrompt('2+3'), { maxTokens: 8, temperature: 0 })
      expect(c.tokens.length).toBeGreaterThan(0)
      const recipe = JSON.parse(readFileSync(join(a, 'recipe.json'), 'utf8'))
      expect(recipe.curve.at(-1).step).toBe(5)
      expect(Number.isFinite(recipe.curve.at(-1).loss)).toBe(true)
    } finally {
      m.dispose()
    }
  })
})
