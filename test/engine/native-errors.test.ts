// Bad input never aborts the process (issue 23, finding 2): every repro that used to end in
// SIGABRT — a C++ exception reaching the Node-API boundary — runs in a child process, so a
// regression shows as a failed test, not a dead test runner; each must end in a typed error
// (an AutodidactError from the TypeScript checks, or the addon's own typed error with its code).
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const root = resolve(import.meta.dirname, '..', '..')
let dir: string
let modelDir: string

// One repro per child: prints the error it got as JSON, or {"ok": true}.
const CHILD = `
import { createRequire } from 'node:module'
import { join } from 'node:path'
const { ROOT, MODEL, ADAPTER, CASE } = process.env
const lib = await import(join(ROOT, 'dist', 'index.js'))
const addon = createRequire(import.meta.url)(join(ROOT, 'build', 'Release', 'autodidact.node'))
const model = () => lib.loadModel(MODEL, { device: 'cpu', threads: 1 })
const cases = {
  'loadAdapter r': async () => (await model()).loadAdapter(ADAPTER),
  'attachScoreHead labels 1e9': async () => (await model()).attachScoreHead({ labels: 1e9 }),
  'native attachScoreHead labels 1e9': async () => addon.train.attachScoreHead((await model()).handle, { labels: 1e9, std: 0.02, seed: 0 }),
  'trainer lora rank 1e9': async () => (await model()).trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 }, lora: { rank: 1e9, alpha: 8 } }),
  'native attachLora rank 1e9': async () => addon.train.attachLora((await model()).handle, { rank: 1e9, alpha: 8, targets: ['q_proj'], seed: 0 }),
  'native attachLora rank -1': async () => addon.train.attachLora((await model()).handle, { rank: -1, alpha: 8, targets: ['q_proj'], seed: 0 }),
  'native attachLora rank 0': async () => addon.train.attachLora((await model()).handle, { rank: 0, alpha: 8, targets: ['q_proj'], seed: 0 }),
  'logitStats threads 1024': async () => addon.kernels.logitStats(new Float32Array(8), 1, 8, { threads: 1024 }),
  'measureCopy 8e9': async () => addon.profiler.measureCopy(8e9),
  'measureGemm 16384^3': async () => addon.profiler.measureGemm(16384, 16384, 16384),
  'createCache beyond memory': async () => (await model()).handle.createCache(1, 2 ** 31 - 1),
  'loadModel threads 1e6': async () => addon.loadModel({ vocabSize: 8, hiddenSize: 8, intermediateSize: 8, numLayers: 1, numHeads: 1, numKvHeads: 1, headDim: 8, rmsNormEps: 1e-6, ropeTheta: 1e4 }, [], 1e6),
  'step: a token outside the vocabulary, from the worker': async () => {
    const m = await model()
    const cache = m.handle.createCache(1, 4)
    return m.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(1), outModes: Uint8Array.of(1), tokens: Int32Array.of(1 << 30) })
  },
}
try {
  await cases[CASE]()
  console.log(JSON.stringify({ ok: true }))
} catch (e) {
  console.log(JSON.stringify({ ok: false, type: e?.constructor?.name, code: e?.code ?? null, message: String(e?.message ?? e), autodidact: e instanceof lib.AutodidactError }))
}
`

function run(name: string, adapter = ''): { status: number | null; signal: string | null; out: { ok: boolean; type?: string; code?: string | null; message?: string; autodidact?: boolean } } {
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', CHILD], {
    env: { ...process.env, ROOT: root, MODEL: modelDir, ADAPTER: adapter, CASE: name },
    encoding: 'utf8',
    timeout: 60_000,
  })
  const line = r.stdout.trim().split('\n').at(-1) ?? ''
  let out
  try {
    out = JSON.parse(line)
  } catch {
    out = { ok: false, message: `no result (stdout ${JSON.stringify(r.stdout)}, stderr ${JSON.stringify(r.stderr.slice(-2000))})` }
  }
  return { status: r.status, signal: r.signal, out }
}

async function adapterWithRank(r: number): Promise<string> {
  const d = join(dir, `adapter-r${r}`)
  mkdirSync(d, { recursive: true })
  writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ peft_type: 'LORA', r, lora_alpha: 8, target_modules: ['q_proj'] }))
  await writeSafetensors(join(d, 'adapter_model.safetensors'), [
    { name: 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight', dtype: 'F32', shape: [1, 64], data: new Float32Array(64) },
  ])
  return d
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ad-native-errors-'))
  modelDir = (await writeTinyModel(join(dir, 'model'), { family: 'qwen3', dtype: 'F32', seed: 5, hiddenSize: 64 })).dir
})
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('no input aborts the process: each repro of issue 23 ends in a typed error', () => {
  it.each([-1, 0, 1e9])('loadAdapter with adapter_config.json r = %d: a ConfigError naming r', async (r) => {
    const { status, signal, out } = run('loadAdapter r', await adapterWithRank(r))
    expect(signal).toBeNull()
    expect(status).toBe(0)
    expect(out).toMatchObject({ ok: false, type: 'ConfigError', code: 'CONFIG_ERROR', autodidact: true })
    expect(out.message).toMatch(/"r" must be an integer in \[1, 16384\]/)
  })

  it.each([
    ['attachScoreHead labels 1e9', 'InvalidArgumentError', 'INVALID_ARGUMENT', /labels must be an integer in \[1, 65536\]/],
    ['trainer lora rank 1e9', 'InvalidArgumentError', 'INVALID_ARGUMENT', /lora\.rank must be an integer in \[1, 16384\]/],
  ])('%s: the TypeScript check answers first (%s)', (name, type, code, message) => {
    const { status, signal, out } = run(name)
    expect(signal).toBeNull()
    expect(status).toBe(0)
    expect(out).toMatchObject({ ok: false, type, code, autodidact: true })
    expect(out.message).toMatch(message)
  })

  it.each([
    ['native attachScoreHead labels 1e9', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /between 1 and 65536 labels/],
    ['native attachLora rank 1e9', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /LoRA rank must be an integer in \[1, 16384\]/],
    ['native attachLora rank -1', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /LoRA rank/],
    ['native attachLora rank 0', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /LoRA rank/],
    ['logitStats threads 1024', 'RangeError', null, /threads must be an integer in \[1, 256\]/],
    ['measureCopy 8e9', 'RangeError', null, /bytes must be in \[4096, 2\^30\]/],
    ['measureGemm 16384^3', 'RangeError', null, /gemm shape out of range|must be an integer/],
    ['createCache beyond memory', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /not enough memory for a KV cache/],
    ['loadModel threads 1e6', 'RangeError', null, /threads must be an integer in \[1, 256\]/],
    ['step: a token outside the vocabulary, from the worker', 'RangeError', 'ERR_AD_OUT_OF_RANGE', /outside the vocabulary/],
  ])('the addon itself, called directly: %s → %s', (name, type, code, message) => {
    const { status, signal, out } = run(name)
    expect(signal).toBeNull()
    expect(status).toBe(0)
    expect(out.ok).toBe(false)
    expect(out.type).toBe(type)
    if (code) expect(out.code).toBe(code)
    expect(out.message).toMatch(message)
  })
})
