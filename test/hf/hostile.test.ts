// Regression tests of issue 23 for the model-folder side: findings 3 (a config field kills the
// loader), 4 (chat template and tokenizer regex crash or freeze) and 5 (safetensors framing,
// NaN/Inf weights, unused tensors), plus FIFOs as model files (finding 6's loader part).
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { ConfigError, InvalidArgumentError, ResourceLimitError, SafetensorsError, TokenizerError, UnsupportedArchitectureError } from '../../src/engine/errors.js'
import { parseModelConfig } from '../../src/engine/hf/config.js'
import { readModelFolder } from '../../src/engine/hf/folder.js'
import { decodeToFloat32, f32ToBf16Bits, f32ToF16Bits, findDuplicateKey, firstNonFinite, readSafetensorsHeader, writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { loadModel } from '../../src/engine/model.js'
import { isNativeError, nativeAddon } from '../../src/native.js'
import { Tokenizer } from '../../src/engine/tokenizer.js'
import { seededUniform, tinyTokenizerFiles, writeTinyModel } from '../helpers/tiny-model.js'

let root: string
let n = 0
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-hostile-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))
const fresh = () => join(root, `m${n++}`)

async function rejection(p: Promise<unknown>): Promise<Error> {
  return p.then(
    () => {
      throw new Error('expected a rejection')
    },
    (e: unknown) => e as Error,
  )
}

function thrown(f: () => unknown): Error {
  try {
    f()
  } catch (e) {
    return e as Error
  }
  throw new Error('expected a throw')
}

/** A file of the given header (object or raw string) and data bytes, with header length `len` (default: exact). */
function rawSafetensors(path: string, header: unknown, data: Uint8Array | number, len?: bigint, lead = ''): void {
  const json = Buffer.from(lead + (typeof header === 'string' ? header : JSON.stringify(header)), 'utf8')
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(len ?? BigInt(json.byteLength))
  const bytes = typeof data === 'number' ? new Uint8Array(data) : data
  writeFileSync(path, Buffer.concat([prefix, json, bytes]))
}

function reasonOf(e: Error): string {
  expect(e).toBeInstanceOf(SafetensorsError)
  return (e as SafetensorsError).reason
}

describe('finding 3: config.json sizes are checked against the checkpoint before anything is built', () => {
  it('num_hidden_layers 1e9 is a typed error at once (no tensor list of a billion layers)', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 1 })
    writeFileSync(join(tiny.dir, 'config.json'), JSON.stringify({ ...tiny.configJson, num_hidden_layers: 1e9 }))
    const t0 = performance.now()
    const e = await rejection(readModelFolder(tiny.dir))
    expect(performance.now() - t0).toBeLessThan(5_000) // it used to abort the process on a V8 heap OOM after 13 s
    expect(e).toBeInstanceOf(ResourceLimitError)
    expect((e as ResourceLimitError).limit).toBe('model-size')
    expect(e.message).toContain('num_hidden_layers 1000000000')
    expect(e.message).toContain(join(tiny.dir, 'config.json'))
  })

  it('with sliding windows switched on, 1e9 layers are not listed either', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen2', dtype: 'F32', seed: 2 })
    writeFileSync(join(tiny.dir, 'config.json'), JSON.stringify({ ...tiny.configJson, num_hidden_layers: 1e9, use_sliding_window: true, max_window_layers: 1e9 }))
    expect(await rejection(readModelFolder(tiny.dir))).toBeInstanceOf(ResourceLimitError)
  })

  it('the sliding-window check decides without listing layers, as transformers lists them', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen2', dtype: 'F32', seed: 2, layers: 3 })
    const cfg = (patch: object) => parseModelConfig({ ...tiny.configJson, use_sliding_window: true, sliding_window: 64, ...patch }, 'config.json')
    expect(cfg({ max_window_layers: 3 }).numLayers).toBe(3) // layers 0..2 < 3: all full attention
    expect(cfg({ max_window_layers: 2.5 }).numLayers).toBe(3) // no integer layer i in 0..2 has i ≥ 2.5
    expect(() => cfg({ max_window_layers: 2 })).toThrow(UnsupportedArchitectureError) // layer 2 slides
    expect(cfg({ max_window_layers: 0, sliding_window: null }).numLayers).toBe(3)
  })

  it('dims and vocabulary far beyond the bytes on disk are refused the same way', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'llama', dtype: 'F32', seed: 3 })
    for (const patch of [{ hidden_size: 1 << 30, num_attention_heads: 1 << 20 }, { vocab_size: 1e12 }, { intermediate_size: 1e11 }]) {
      writeFileSync(join(tiny.dir, 'config.json'), JSON.stringify({ ...tiny.configJson, ...patch }))
      const e = await rejection(readModelFolder(tiny.dir))
      expect(e).toBeInstanceOf(ResourceLimitError)
      expect(e.message).toContain('parameters but the checkpoint holds')
    }
  })

  it('a config a little off still gets the precise missing-tensor error', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'llama', dtype: 'F32', seed: 4, layers: 2 })
    writeFileSync(join(tiny.dir, 'config.json'), JSON.stringify({ ...tiny.configJson, num_hidden_layers: 3 }))
    const e = await rejection(readModelFolder(tiny.dir))
    expect(e.name).toBe('MissingTensorError')
    expect(e.message).toContain('model.layers.2.')
  })
})

describe('finding 4: chat templates render with bounded loops, sizes and time', () => {
  const files = tinyTokenizerFiles()
  const tok = new Tokenizer({ tokenizerJson: files.tokenizerJson, tokenizerConfig: files.tokenizerConfig })
  const msgs = [{ role: 'user', content: 'hi' }]
  const render = (chatTemplate: string) => () => tok.applyChatTemplate(msgs, { chatTemplate })

  it('range(10000000000) is refused as Jinja\'s sandbox refuses it (no V8 "invalid size" abort)', () => {
    const e = thrown(render('{% for a in range(10000000000) %}x{% endfor %}'))
    expect(e).toBeInstanceOf(ResourceLimitError)
    expect((e as ResourceLimitError).limit).toBe('template-range')
    expect(e.message).toContain('100000')
  })

  it('nested range(10000) loops stop at the step limit in well under a second or two', () => {
    const t0 = performance.now()
    const e = thrown(render('{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}'))
    expect(performance.now() - t0).toBeLessThan(5_000) // it used to block for minutes
    expect(e).toBeInstanceOf(ResourceLimitError)
    // the step limit (1e6) stops it, or on a very loaded machine the 2 s budget first
    expect(['template-steps', 'template-time']).toContain((e as ResourceLimitError).limit)
  })

  it('a string or list doubled past the size cap, or a huge filter argument, is refused', () => {
    const doubling = '{% set ns = namespace(s="ab") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}'
    for (const t of [doubling, '{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}', "{{ 'a'|indent(1000000000) }}"]) {
      const e = thrown(render(t))
      expect(e).toBeInstanceOf(ResourceLimitError)
      expect((e as ResourceLimitError).limit).toBe('template-output')
    }
  })

  it('limits are options, a wall-clock budget stops a render, and ordinary templates render as before', () => {
    const e = thrown(() => tok.applyChatTemplate(msgs, { chatTemplate: '{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}', limits: { maxSteps: 1e12, timeMs: 200 } }))
    expect((e as ResourceLimitError).limit).toBe('template-time')
    expect(tok.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')
    expect(tok.applyChatTemplate(msgs, { chatTemplate: "{{ range(3)|join(',') }}{{ raise_exception is defined }}{{ strftime_now('%Y')|length }}" })).toBe('0,1,2true4')
    // a template's own error stays the conversation's fault
    expect(thrown(render("{{ raise_exception('no system message') }}"))).toBeInstanceOf(InvalidArgumentError)
  })
})

describe('finding 4: a tokenizer regex that backtracks exponentially is stopped, not run for seconds', () => {
  const files = tinyTokenizerFiles()
  const evil = { ...files.tokenizerJson, pre_tokenizer: { type: 'Split', pattern: { Regex: '(a+)+$' }, behavior: 'Isolated', invert: false } }
  const tok = new Tokenizer({ tokenizerJson: evil, tokenizerConfig: files.tokenizerConfig, files: { tokenizerJson: '/m/tokenizer.json' } })

  it('the (a+)+$ Split over 26 characters fails with a ResourceLimitError within its budget', () => {
    const before = tok.encode('aaab')
    const t0 = performance.now()
    const e = thrown(() => tok.encode(`${'a'.repeat(40)}b`))
    expect(performance.now() - t0).toBeLessThan(1_500)
    expect(e).toBeInstanceOf(ResourceLimitError)
    expect((e as ResourceLimitError).limit).toBe('tokenizer-time')
    expect(e.message).toContain('/m/tokenizer.json')
    expect(tok.encode('aaab')).toEqual(before) // the tokenizer still works after an interrupt
  })

  it('the real Qwen-style Split pattern is unaffected', () => {
    const plain = new Tokenizer({ tokenizerJson: files.tokenizerJson, tokenizerConfig: files.tokenizerConfig })
    const text = 'Hello world, 12345 — ünïcödé!\n\n  indented'
    expect(plain.decode(plain.encode(text))).toBe(text.normalize('NFC'))
  })
})

describe('finding 5: safetensors framing as the reference implementation checks it', () => {
  async function good(): Promise<{ file: string; bytes: Buffer; n: number }> {
    const file = join(fresh() + '.safetensors')
    const a = new Float32Array([1, 2, 3, 4])
    const b = new Float32Array([5, 6])
    await writeSafetensors(file, [
      { name: 'a', dtype: 'F32', shape: [4], data: a },
      { name: 'b', dtype: 'F32', shape: [2], data: b },
    ])
    const bytes = readFileSync(file)
    return { file, bytes, n: Number(bytes.readBigUInt64LE(0)) }
  }

  it('header length N−1 (every tensor shifted by a byte) is refused: bytes trail the last tensor', async () => {
    const { file, bytes, n } = await good()
    const shifted = Buffer.from(bytes)
    shifted.writeBigUInt64LE(BigInt(n - 1))
    writeFileSync(file, shifted)
    const e = await rejection(readSafetensorsHeader(file))
    expect(reasonOf(e)).toBe('trailing')
    expect(e.message).toContain(file)
  })

  it('header length N+1 is refused too', async () => {
    const { file, bytes, n } = await good()
    const longer = Buffer.from(bytes)
    longer.writeBigUInt64LE(BigInt(n + 1))
    writeFileSync(file, longer)
    expect(['json', 'truncated']).toContain(reasonOf(await rejection(readSafetensorsHeader(file))))
  })

  it('a gap between tensors, leading padding and trailing bytes are refused', async () => {
    const file = join(fresh() + '.safetensors')
    rawSafetensors(file, { a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] }, b: { dtype: 'F32', shape: [1], data_offsets: [8, 12] } }, 12)
    let e = await rejection(readSafetensorsHeader(file))
    expect(reasonOf(e)).toBe('gap')
    expect(e.message).toContain('[4, 8)')
    rawSafetensors(file, { a: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } }, 8)
    e = await rejection(readSafetensorsHeader(file))
    expect(reasonOf(e)).toBe('gap')
    expect(e.message).toContain('before the first tensor')
    rawSafetensors(file, { a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }, 5)
    expect(reasonOf(await rejection(readSafetensorsHeader(file)))).toBe('trailing')
  })

  it('a BOM or leading junk before "{" is refused (TextDecoder would strip a BOM silently)', async () => {
    const file = join(fresh() + '.safetensors')
    const header = { a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }
    rawSafetensors(file, header, 4, undefined, '\uFEFF')
    const e = await rejection(readSafetensorsHeader(file))
    expect(reasonOf(e)).toBe('json')
    expect(e.message).toContain('byte-order mark')
    rawSafetensors(file, header, 4, undefined, ' ')
    expect(reasonOf(await rejection(readSafetensorsHeader(file)))).toBe('json')
  })

  it('duplicate keys are refused, at any depth, whatever their escapes', async () => {
    const file = join(fresh() + '.safetensors')
    const entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    rawSafetensors(file, `{"a":${entry},"a":${entry}}`, 4)
    const e = await rejection(readSafetensorsHeader(file))
    expect(reasonOf(e)).toBe('duplicate')
    expect((e as SafetensorsError).tensor).toBe('a')
    rawSafetensors(file, `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"dtype":"F16"}}`, 4)
    expect(reasonOf(await rejection(readSafetensorsHeader(file)))).toBe('duplicate')
    expect(findDuplicateKey('{"a\\u0062":1,"ab":2}')).toBe('ab')
    expect(findDuplicateKey('{"a":[{"x":1},{"x":2}],"b":{"a":1},"c":"a,\\"a"}')).toBeNull()
  })
})

describe('finding 5: NaN/Inf weights are a typed error; unused checkpoint tensors a warning naming them', () => {
  /** A tiny model folder whose tensor `name` holds `value` at `element` (negative: from the end). */
  async function corruptFolder(value: number, dtype: 'F32' | 'BF16' | 'F16', name = 'model.layers.0.mlp.down_proj.weight', element = 3): Promise<{ dir: string; element: number; numel: number }> {
    const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype, seed: 7, hiddenSize: 64 }) // embedding: 320 × 64 = 20480 elements
    const file = tiny.weightFiles[0]
    const header = await readSafetensorsHeader(file)
    const ref = header.tensors.find((t) => t.name === name)!
    const width = dtype === 'F32' ? 4 : 2
    const numel = ref.nbytes / width
    const index = element < 0 ? numel + element : element
    if (index >= numel) throw new Error(`${name} has ${numel} elements, not ${index + 1}`)
    const bytes = readFileSync(file)
    const at = ref.offset + index * width
    if (dtype === 'F32') bytes.writeFloatLE(value, at)
    else bytes.writeUInt16LE(dtype === 'BF16' ? (value !== value ? 0x7fc0 : value > 0 ? 0x7f80 : 0xff80) : value !== value ? 0x7e00 : value > 0 ? 0x7c00 : 0xfc00, at)
    writeFileSync(file, bytes)
    return { dir: tiny.dir, element: index, numel }
  }
  async function corrupt(value: number, dtype: 'F32' | 'BF16' | 'F16'): Promise<Error> {
    return rejection(readModelFolder((await corruptFolder(value, dtype)).dir))
  }

  it('NaN and ±Inf in a used tensor name the tensor, element and value, in every dtype', async () => {
    for (const [value, dtype] of [[NaN, 'F32'], [Infinity, 'BF16'], [-Infinity, 'F16'], [NaN, 'BF16']] as const) {
      const e = await corrupt(value, dtype)
      expect(reasonOf(e)).toBe('non-finite')
      expect((e as SafetensorsError).tensor).toBe('model.layers.0.mlp.down_proj.weight')
      expect(e.message).toContain('at element 3')
      expect(e.message).toContain(String(value))
    }
  })

  it('loadModel refuses them in its native conversion loop with the same error, in every dtype and weight storage, at any element', async () => {
    const embed = 'model.embed_tokens.weight' // the largest tensor: elements past the scan's blocks of 4096 and 16384
    const cases = [
      [NaN, 'F32', 'f32', 'model.layers.0.mlp.down_proj.weight', 3],
      [Infinity, 'BF16', 'bf16', 'model.layers.0.mlp.down_proj.weight', 3],
      [-Infinity, 'F16', 'int8', 'model.layers.0.mlp.down_proj.weight', 3],
      [NaN, 'BF16', 'checkpoint', embed, 4096],
      [Infinity, 'F32', 'int8', embed, 16384 + 5],
      [NaN, 'F16', 'f32', embed, -1],
      [-Infinity, 'F32', 'bf16', 'model.norm.weight', -1], // a norm: kept f32 under every storage
    ] as const
    for (const [value, dtype, weights, tensor, at] of cases) {
      const { dir, element, numel } = await corruptFolder(value, dtype, tensor, at)
      const e = await rejection(loadModel(dir, { threads: 2, weights }))
      const what = `${value} in ${dtype} ${tensor}[${element}], weights ${weights}`
      expect(reasonOf(e), what).toBe('non-finite')
      expect((e as SafetensorsError).tensor, what).toBe(tensor)
      expect((e as SafetensorsError).file, what).toBe(join(dir, 'model.safetensors'))
      expect(e.message, what).toContain(`holds ${value} at element ${element} (of ${numel})`)
      expect(isNativeError(e.cause, 'ERR_AD_NON_FINITE'), `${what}: found by the native loader, not a JavaScript scan`).toBe(true)
    }
  })

  it('the native loader widens bf16 and f16 exactly: every loaded tensor has the bits of the file decoded in JavaScript (subnormals, extremes, signed zeros)', async () => {
    const special = { BF16: [0x0001, 0x8001, 0x007f, 0x7f7f, 0xff7f, 0x8000, 0x0000, 0x0080], F16: [0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x8000, 0x0000, 0x0400] }
    for (const dtype of ['BF16', 'F16'] as const) {
      const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype, seed: 11, hiddenSize: 64 })
      const file = tiny.weightFiles[0]
      const header = await readSafetensorsHeader(file)
      const bytes = readFileSync(file)
      const embed = header.tensors.find((t) => t.name === 'model.embed_tokens.weight')!
      special[dtype].forEach((bits, k) => bytes.writeUInt16LE(bits, embed.offset + (4095 + k) * 2)) // across the first block edge
      writeFileSync(file, bytes)
      const model = await loadModel(tiny.dir, { threads: 2 })
      try {
        const loaded = new Map((await (await nativeAddon()).train.exportTensors(model.handle)).map((t) => [t.name, t.data]))
        for (const ref of header.tensors) {
          const want = decodeToFloat32(dtype, bytes.subarray(ref.offset, ref.offset + ref.nbytes))
          const got = loaded.get(ref.name)!
          expect(got.length, ref.name).toBe(want.length)
          for (let i = 0; i < want.length; i++) if (!Object.is(got[i], want[i])) expect.fail(`${dtype} ${ref.name}[${i}]: loaded ${got[i]}, the file holds ${want[i]}`)
        }
      } finally {
        model.dispose()
      }
    }
  })

  it('firstNonFinite finds the first NaN/Inf at any position (block edges, odd tails) as a decode-and-test does', () => {
    const r = seededUniform(99)
    for (const dtype of ['F32', 'BF16', 'F16'] as const) {
      const width = dtype === 'F32' ? 4 : 2
      for (let trial = 0; trial < 60; trial++) {
        const count = 1 + Math.floor(r() * (trial < 30 ? 40 : 20_000))
        const bytes = new Uint8Array(count * width)
        for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(r() * 256)
        // mostly finite values: clear exponents' top bit, then plant a few non-finite ones
        for (let i = 0; i < count; i++) bytes[i * width + width - 1] &= 0xbf
        const plants = Math.floor(r() * 3)
        for (let k = 0; k < plants; k++) {
          const at = Math.floor(r() * count)
          const v = [NaN, Infinity, -Infinity][k % 3]
          if (dtype === 'F32') new DataView(bytes.buffer).setFloat32(at * 4, v, true)
          else new DataView(bytes.buffer).setUint16(at * 2, dtype === 'BF16' ? f32ToBf16Bits(v) : f32ToF16Bits(v), true)
        }
        const values = decodeToFloat32(dtype, bytes)
        const want = values.findIndex((x) => !Number.isFinite(x))
        expect(firstNonFinite(dtype, bytes)).toBe(want)
        expect(firstNonFinite(dtype, new Uint8Array([0, ...bytes]).subarray(1))).toBe(want) // unaligned view
      }
    }
  })

  it('a tensor the config does not use draws a warning naming it; inv_freq buffers do not', async () => {
    const tiny = await writeTinyModel(fresh(), { family: 'llama', dtype: 'F32', seed: 8 })
    const header = await readSafetensorsHeader(tiny.weightFiles[0])
    const { readTensorFloat32 } = await import('../../src/engine/hf/safetensors.js')
    const tensors = await Promise.all(header.tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: await readTensorFloat32(t) })))
    const extra = (name: string) => ({ name, dtype: 'F32' as const, shape: [2], data: new Float32Array([Number.NaN, 1]) })
    await writeSafetensors(tiny.weightFiles[0], [...tensors, extra('model.layers.0.self_attn.rotary_emb.inv_freq'), extra('model.vision_tower.proj.weight')])
    const warnings: Error[] = []
    const listen = (w: Error) => warnings.push(w)
    process.on('warning', listen)
    try {
      const folder = await readModelFolder(tiny.dir) // the unused tensors' NaN is not scanned
      await new Promise((r) => setImmediate(r))
      expect(folder.extraTensors).toEqual(['model.layers.0.self_attn.rotary_emb.inv_freq', 'model.vision_tower.proj.weight'])
    } finally {
      process.off('warning', listen)
    }
    const ours = warnings.filter((w) => (w as { code?: string }).code === 'AUTODIDACT_UNUSED_WEIGHTS')
    expect(ours).toHaveLength(1)
    expect(ours[0].message).toContain('"model.vision_tower.proj.weight"')
    expect(ours[0].message).not.toContain('inv_freq')
  })
})

describe('FIFOs, devices and folders where model files belong are refused without blocking', () => {
  const mkfifo = (p: string) => execFileSync('mkfifo', [p])

  it('model.safetensors, config.json, tokenizer.json and a shard as FIFOs', async () => {
    for (const [name, type] of [['model.safetensors', SafetensorsError], ['config.json', ConfigError], ['tokenizer.json', TokenizerError]] as const) {
      const tiny = await writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 9 })
      unlinkSync(join(tiny.dir, name))
      mkfifo(join(tiny.dir, name))
      const t0 = performance.now()
      const e = await rejection(readModelFolder(tiny.dir))
      expect(performance.now() - t0).toBeLessThan(5_000)
      expect(e).toBeInstanceOf(type)
      expect(e.message).toContain('FIFO')
      expect(e.message).toContain(join(tiny.dir, name))
    }
    const sharded = await writeTinyModel(fresh(), { family: 'qwen3', dtype: 'F32', seed: 9, sharded: true })
    const shard = sharded.weightFiles[0]
    unlinkSync(shard)
    mkfifo(shard)
    expect(reasonOf(await rejection(readModelFolder(sharded.dir)))).toBe('not-regular')
  })

  it('a character device and a directory', async () => {
    const e = await rejection(readSafetensorsHeader('/dev/zero'))
    expect(reasonOf(e)).toBe('not-regular')
    expect(e.message).toContain('character device')
    expect(reasonOf(await rejection(readSafetensorsHeader(root)))).toBe('not-regular')
  })
})
