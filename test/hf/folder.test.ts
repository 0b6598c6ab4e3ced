// readModelFolder over tiny random models of each family and dtype (the folders the engine tests
// load), single-file and sharded, and every way a folder can be broken.
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import {
  AutodidactError,
  ConfigError,
  MissingTensorError,
  SafetensorsError,
  TensorShapeError,
  TokenizerError,
  UnsupportedArchitectureError,
} from '../../src/engine/errors.js'
import { readModelFolder } from '../../src/engine/hf/folder.js'
import { readSafetensorsHeader, readTensorFloat64, writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { TINY_TOKENIZER_SIZE, writeTinyModel, type TinyModelOptions } from '../helpers/tiny-model.js'


/** The error a promise rejects with (fails the test if it resolves). */
async function rejection<E>(p: Promise<unknown>): Promise<E> {
  return p.then(
    () => {
      throw new Error('expected a rejection')
    },
    (e: unknown) => e as E,
  )
}

let root: string
let n = 0
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-folder-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))
const fresh = () => join(root, `m${n++}`)

const CASES: Array<[string, TinyModelOptions]> = [
  ['llama F32 (llama3 rope, attention bias)', { family: 'llama', dtype: 'F32', seed: 1, ropeScaling: true, attentionBias: true }],
  ['llama F16', { family: 'llama', dtype: 'F16', seed: 2 }],
  ['qwen2 BF16 tied', { family: 'qwen2', dtype: 'BF16', seed: 3, tied: true }],
  ['qwen2 F32', { family: 'qwen2', dtype: 'F32', seed: 4 }],
  ['qwen3 BF16 sharded', { family: 'qwen3', dtype: 'BF16', seed: 5, sharded: true }],
  ['qwen3 F16 MHA, 3 layers', { family: 'qwen3', dtype: 'F16', seed: 6, heads: 4, kvHeads: 4, layers: 3 }],
]

describe.each(CASES)('tiny %s', (_name, opts) => {
  it('reads back config, tensors, exact weights, tokenizer and generation config', async () => {
    const tiny = await writeTinyModel(fresh(), opts)
    const m = await readModelFolder(tiny.dir)
    expect(m.config).toEqual(tiny.config)
    expect(m.config.architecture).toBe(opts.family)
    expect(m.configPath).toBe(join(tiny.dir, 'config.json'))
    expect(m.head).toEqual({ kind: 'causal-lm' })
    expect(m.extraTensors).toEqual([])
    expect(m.weightsPath).toBe(join(tiny.dir, opts.sharded ? 'model.safetensors.index.json' : 'model.safetensors'))
    const files = new Set(m.tensors.map((t) => t.file))
    if (opts.sharded) {
      expect(files.size).toBeGreaterThanOrEqual(2)
      expect([...files].sort()).toEqual(tiny.weightFiles.filter((f) => f.endsWith('.safetensors')).sort())
    } else expect([...files]).toEqual([join(tiny.dir, 'model.safetensors')])
    expect(m.tensors.map((t) => t.name).sort()).toEqual([...tiny.weights.keys()].sort())
    for (const ref of m.tensors) {
      expect(ref.dtype).toBe(opts.dtype)
      expect(ref.shape).toEqual(tiny.tensorShapes.get(ref.name))
      expect(Array.from(await readTensorFloat64(ref)), ref.name).toEqual(Array.from(tiny.weights.get(ref.name)!))
    }
    expect(m.tokenizer.vocabSize).toBe(TINY_TOKENIZER_SIZE)
    expect(m.tokenizer.decode(m.tokenizer.encode('héllo 世界'))).toBe('héllo 世界')
    expect(m.generationConfig?.eos_token_id).toEqual(m.tokenizer.eosTokenIds)
    expect(m.config.tieWordEmbeddings).toBe(opts.tied ?? false)
    expect(m.tensors.some((t) => t.name === 'lm_head.weight')).toBe(!(opts.tied ?? false))
  })
})

describe('tiny model shapes', () => {
  it('weights are O(1)-scaled: norms near 1, projections small', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 9 })
    const norm = tiny.weights.get('model.layers.0.self_attn.q_norm.weight')!
    expect(norm.length).toBe(16)
    for (const v of norm) expect(Math.abs(v - 1)).toBeLessThan(0.6)
    const q = tiny.weights.get('model.layers.0.self_attn.q_proj.weight')!
    const rms = Math.sqrt(q.reduce((s, v) => s + v * v, 0) / q.length)
    expect(rms).toBeGreaterThan(0.05)
    expect(rms).toBeLessThan(0.3)
    expect(tiny.config.headDim).toBe(16)
    expect(tiny.config.vocabSize).toBe(320)
    expect(tiny.config.ropeTheta).toBe(1000000)
  })

  it('the same seed writes the same weights', async () => {
    const a = await writeTinyModel(fresh(), { family: 'llama', dtype: 'BF16', seed: 42 })
    const b = await writeTinyModel(fresh(), { family: 'llama', dtype: 'BF16', seed: 42 })
    expect(readFileSync(join(a.dir, 'model.safetensors'))).toEqual(readFileSync(join(b.dir, 'model.safetensors')))
  })
})

describe('broken folders give typed errors naming the file (and tensor)', () => {
  async function tinyDir(opts: Partial<TinyModelOptions> = {}) {
    return writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 7, ...opts })
  }

  async function rewriteWeights(dir: string, edit: (ts: Array<{ name: string; dtype: 'F32'; shape: number[]; data: Float32Array }>) => void) {
    const file = join(dir, 'model.safetensors')
    const h = await readSafetensorsHeader(file)
    const ts = await Promise.all(
      h.tensors.map(async (t) => ({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: Float32Array.from(await readTensorFloat64(t)) })),
    )
    edit(ts)
    await writeSafetensors(file, ts)
    return file
  }

  it('a missing tensor', async () => {
    const { dir } = await tinyDir()
    const file = await rewriteWeights(dir, (ts) => ts.splice(ts.findIndex((t) => t.name === 'model.layers.1.self_attn.k_norm.weight'), 1))
    const e = await rejection<MissingTensorError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(MissingTensorError)
    expect(e.file).toBe(file)
    expect(e.tensor).toBe('model.layers.1.self_attn.k_norm.weight')
    expect(e.message).toContain(file)
    expect(e.message).toContain('model.layers.1.self_attn.k_norm.weight')
  })

  it('a misshapen tensor', async () => {
    const { dir } = await tinyDir()
    const file = await rewriteWeights(dir, (ts) => {
      const i = ts.findIndex((t) => t.name === 'model.layers.0.mlp.up_proj.weight')
      ts[i] = { ...ts[i], shape: [32, 64] }
    })
    const e = await rejection<TensorShapeError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(TensorShapeError)
    expect(e.file).toBe(file)
    expect(e.tensor).toBe('model.layers.0.mlp.up_proj.weight')
    expect(e.expectedShape).toEqual([64, 32])
    expect(e.actualShape).toEqual([32, 64])
  })

  it('extra tensors are allowed and reported', async () => {
    const { dir } = await tinyDir()
    await rewriteWeights(dir, (ts) => ts.push({ name: 'model.layers.0.self_attn.rotary_emb.inv_freq', dtype: 'F32', shape: [8], data: new Float32Array(8) }))
    expect((await readModelFolder(dir)).extraTensors).toEqual(['model.layers.0.self_attn.rotary_emb.inv_freq'])
  })

  it('a truncated weights file', async () => {
    const { dir } = await tinyDir()
    const file = join(dir, 'model.safetensors')
    const bytes = readFileSync(file)
    writeFileSync(file, bytes.subarray(0, bytes.length - 100))
    const e = await rejection<SafetensorsError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(SafetensorsError)
    expect(e.reason).toBe('truncated')
    expect(e.file).toBe(file)
    expect(e.tensor).not.toBeNull()
    expect(e.message).toContain(e.tensor!)
  })

  it('a missing shard', async () => {
    const { dir, weightFiles } = await tinyDir({ sharded: true })
    const shard = weightFiles[1]
    expect(shard).toMatch(/model-00002-of-0000\d\.safetensors$/)
    unlinkSync(shard)
    const e = await rejection<SafetensorsError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(SafetensorsError)
    expect(e.reason).toBe('not-found')
    expect(e.file).toBe(shard)
    expect(e.message).toContain('model.safetensors.index.json')
  })

  it('no weights at all', async () => {
    const { dir } = await tinyDir()
    unlinkSync(join(dir, 'model.safetensors'))
    const e = await rejection<SafetensorsError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(SafetensorsError)
    expect(e.reason).toBe('not-found')
    expect(e.message).toContain('model.safetensors')
  })

  it('an unsupported architecture', async () => {
    const { dir, configJson } = await tinyDir()
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...configJson, architectures: ['Gemma2ForCausalLM'], model_type: 'gemma2' }))
    const e = await rejection<UnsupportedArchitectureError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(UnsupportedArchitectureError)
    expect(e.file).toBe(join(dir, 'config.json'))
    expect(e.message).toContain('Gemma2ForCausalLM')
  })

  it('an unsupported rope type', async () => {
    const { dir, configJson } = await tinyDir()
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...configJson, rope_scaling: { rope_type: 'yarn', factor: 4 } }))
    await expect(readModelFolder(dir)).rejects.toThrow(UnsupportedArchitectureError)
    await expect(readModelFolder(dir)).rejects.toThrow(/"yarn"/)
  })

  it('a missing or corrupt config.json', async () => {
    const { dir } = await tinyDir()
    writeFileSync(join(dir, 'config.json'), '{"architectures": [')
    const e = await rejection<ConfigError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(ConfigError)
    expect(e.file).toBe(join(dir, 'config.json'))
    unlinkSync(join(dir, 'config.json'))
    await expect(readModelFolder(dir)).rejects.toThrow(/config\.json: not found/)
    await expect(readModelFolder(join(dir, 'nope'))).rejects.toThrow(ConfigError)
  })

  it('a missing tokenizer', async () => {
    const { dir } = await tinyDir()
    unlinkSync(join(dir, 'tokenizer.json'))
    const e = await rejection<TokenizerError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(TokenizerError)
    expect(e.file).toBe(join(dir, 'tokenizer.json'))
  })

  it('a tokenizer with ids beyond the embedding', async () => {
    const { dir } = await tinyDir()
    const tj = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'))
    tj.added_tokens.push({ id: 400, content: '<|extra|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj))
    const e = await rejection<TokenizerError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(TokenizerError)
    expect(e.message).toMatch(/ids up to 400 .* vocab_size 320/)
  })

  it('a corrupt generation_config.json', async () => {
    const { dir } = await tinyDir()
    writeFileSync(join(dir, 'generation_config.json'), '{')
    const e = await rejection<ConfigError>(readModelFolder(dir))
    expect(e).toBeInstanceOf(ConfigError)
    expect(e.file).toBe(join(dir, 'generation_config.json'))
  })

  it('every error is an AutodidactError with a code', async () => {
    const e = await rejection<AutodidactError>(readModelFolder(join(root, 'does-not-exist')))
    expect(e).toBeInstanceOf(AutodidactError)
    expect(e.code).toBe('CONFIG_ERROR')
    expect(e.name).toBe('ConfigError')
  })
})

describe('sequence classification folders', () => {
  it('are read with their score head reported', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 8, tied: true })
    const cfg = { ...tiny.configJson, architectures: ['Qwen3ForSequenceClassification'], id2label: { 0: 'LABEL_0' }, pad_token_id: 300 }
    writeFileSync(join(tiny.dir, 'config.json'), JSON.stringify(cfg))
    const file = join(tiny.dir, 'model.safetensors')
    const h = await readSafetensorsHeader(file)
    const ts = await Promise.all(h.tensors.map(async (t) => ({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: Float32Array.from(await readTensorFloat64(t)) })))
    await expect(readModelFolder(tiny.dir)).rejects.toThrow(/score\.weight/)
    ts.push({ name: 'score.weight', dtype: 'F32', shape: [1, 32], data: new Float32Array(32) })
    await writeSafetensors(file, ts)
    const m = await readModelFolder(tiny.dir)
    expect(m.config.hfArchitecture).toBe('Qwen3ForSequenceClassification')
    expect(m.head).toEqual({ kind: 'sequence-classification', numLabels: 1, padTokenId: 300 })
    expect(m.extraTensors).toEqual([])
  })
})
