// safetensors: header parsing and validation, reading/decoding, writing (single, sharded, atomic),
// and the bf16/f16 conversions.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { InvalidArgumentError, MissingTensorError, SafetensorsError } from '../../src/engine/errors.js'
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ArrayToBf16,
  f32ToBf16Bits,
  f32ToF16Bits,
  readSafetensorsHeader,
  readSafetensorsIndex,
  readSafetensorsRefs,
  readTensorBytes,
  readTensorFloat32,
  readTensorFloat64,
  writeSafetensors,
  writeShardedSafetensors,
  type TensorToWrite,
} from '../../src/engine/hf/safetensors.js'
import { roundToDtype, seededNormal } from '../helpers/tiny-model.js'

let root: string
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-st-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

let n = 0
function freshDir(): string {
  const d = join(root, `d${n++}`)
  mkdirSync(d)
  return d
}

function randomTensor(name: string, dtype: TensorToWrite['dtype'], shape: number[], seed: number): TensorToWrite {
  const g = seededNormal(seed)
  const count = shape.reduce((a, b) => a * b, 1)
  const data = new Float32Array(count)
  for (let i = 0; i < count; i++) data[i] = g()
  return { name, dtype, shape, data }
}

/** A hand-made safetensors file: 8-byte length, header JSON as given, `dataBytes` zero bytes. */
function rawFile(path: string, header: unknown, dataBytes: number, headerLenOverride?: bigint): void {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8')
  const len = Buffer.alloc(8)
  len.writeBigUInt64LE(headerLenOverride ?? BigInt(json.length))
  writeFileSync(path, Buffer.concat([len, json, Buffer.alloc(dataBytes)]))
}

async function expectSafetensorsError(p: Promise<unknown>, reason: string, mentions: string[]): Promise<SafetensorsError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SafetensorsError)
  const e = err as SafetensorsError
  expect(e.reason).toBe(reason)
  expect(e.code).toBe('SAFETENSORS_ERROR')
  for (const m of mentions) expect(e.message).toContain(m)
  return e
}

describe('safetensors round trip', () => {
  it.each(['F32', 'BF16', 'F16'] as const)('%s: write → parse → read gives the stored values', async (dtype) => {
    const dir = freshDir()
    const file = join(dir, 'model.safetensors')
    const tensors = [
      randomTensor('b.weight', dtype, [3, 5], 1),
      randomTensor('a.weight', dtype, [7], 2),
      randomTensor('scalar', dtype, [], 3),
      randomTensor('empty', dtype, [0, 4], 4),
    ]
    await writeSafetensors(file, tensors, { note: 'hi' })
    const h = await readSafetensorsHeader(file)
    expect(h.metadata).toEqual({ format: 'pt', note: 'hi' })
    expect(h.tensors.map((t) => t.name).sort()).toEqual(['a.weight', 'b.weight', 'empty', 'scalar'])
    for (const t of tensors) {
      const ref = h.tensors.find((r) => r.name === t.name)!
      expect(ref.dtype).toBe(dtype)
      expect(ref.shape).toEqual(t.shape)
      expect(ref.file).toBe(file)
      const got = await readTensorFloat64(ref)
      const want = Array.from(t.data, (x) => roundToDtype(x, dtype))
      expect(Array.from(got)).toEqual(want)
      const got32 = await readTensorFloat32(ref)
      expect(Array.from(got32)).toEqual(want)
    }
  })

  it('lays the file out like the reference writer: 8-byte-aligned header padded with spaces, dtype then name order', async () => {
    const dir = freshDir()
    const file = join(dir, 'x.safetensors')
    await writeSafetensors(file, [
      randomTensor('z', 'F16', [3], 1),
      randomTensor('y', 'F32', [1], 2),
      randomTensor('b', 'BF16', [2], 3),
      randomTensor('a', 'F32', [2], 4),
    ])
    const bytes = readFileSync(file)
    const hlen = Number(bytes.readBigUInt64LE(0))
    expect((8 + hlen) % 8).toBe(0)
    const headerText = bytes.subarray(8, 8 + hlen).toString('utf8')
    expect(/^\{.*\} *$/.test(headerText)).toBe(true)
    const keys = Object.keys(JSON.parse(headerText))
    expect(keys).toEqual(['__metadata__', 'a', 'y', 'b', 'z'])
    const h = JSON.parse(headerText)
    expect(h.a.data_offsets).toEqual([0, 8])
    expect(h.y.data_offsets).toEqual([8, 12])
    expect(h.b.data_offsets).toEqual([12, 16])
    expect(h.z.data_offsets).toEqual([16, 22])
    expect(bytes.length).toBe(8 + hlen + 22)
    // refs carry absolute offsets
    const refs = (await readSafetensorsHeader(file)).tensors
    expect(refs.find((r) => r.name === 'b')!.offset).toBe(8 + hlen + 12)
  })

  it('accepts raw bf16/f16 bits as Uint16Array', async () => {
    const dir = freshDir()
    const file = join(dir, 'bits.safetensors')
    const bits = f32ArrayToBf16(Float32Array.of(1, -2, 0.5))
    await writeSafetensors(file, [{ name: 't', dtype: 'BF16', shape: [3], data: bits }])
    const [ref] = (await readSafetensorsHeader(file)).tensors
    expect(Array.from(await readTensorFloat32(ref))).toEqual([1, -2, 0.5])
    expect(Array.from(new Uint16Array((await readTensorBytes(ref)).buffer))).toEqual(Array.from(bits))
  })

  it('rejects bad writer arguments before creating any file', async () => {
    const dir = freshDir()
    const file = join(dir, 'bad.safetensors')
    await expect(writeSafetensors(file, [{ name: 't', dtype: 'F32', shape: [2, 2], data: new Float32Array(3) }])).rejects.toThrow(
      InvalidArgumentError,
    )
    await expect(
      writeSafetensors(file, [
        { name: 't', dtype: 'F32', shape: [1], data: new Float32Array(1) },
        { name: 't', dtype: 'F32', shape: [1], data: new Float32Array(1) },
      ]),
    ).rejects.toThrow(/twice/)
    await expect(writeSafetensors(file, [{ name: 't', dtype: 'F32', shape: [1], data: new Uint16Array(1) }])).rejects.toThrow(/Float32Array/)
    expect(readdirSync(dir)).toEqual([])
  })
})

describe('sharded checkpoints', () => {
  const tensors = () => [
    randomTensor('model.embed_tokens.weight', 'BF16', [16, 8], 1),
    randomTensor('model.layers.0.mlp.up_proj.weight', 'BF16', [8, 8], 2),
    randomTensor('model.layers.0.mlp.down_proj.weight', 'BF16', [8, 8], 3),
    randomTensor('model.norm.weight', 'BF16', [8], 4),
    randomTensor('lm_head.weight', 'BF16', [16, 8], 5),
  ]

  it('writes model-0000i-of-0000N + index when over the limit, and reads back every value', async () => {
    const dir = freshDir()
    const ts = tensors()
    const res = await writeShardedSafetensors(dir, ts, { maxShardBytes: 300 })
    // greedy in order: [embed 256] [up 128, down 128, norm 16] [lm_head 256]
    expect(readdirSync(dir).sort()).toEqual([
      'model-00001-of-00003.safetensors',
      'model-00002-of-00003.safetensors',
      'model-00003-of-00003.safetensors',
      'model.safetensors.index.json',
    ])
    expect(res.indexFile).toBe(join(dir, 'model.safetensors.index.json'))
    const index = JSON.parse(readFileSync(res.indexFile!, 'utf8'))
    expect(index.metadata.total_size).toBe(256 + 128 + 128 + 16 + 256)
    expect(Object.keys(index.weight_map)).toEqual([...Object.keys(index.weight_map)].sort())
    expect(index.weight_map['model.norm.weight']).toBe('model-00002-of-00003.safetensors')
    expect(index.weight_map['lm_head.weight']).toBe('model-00003-of-00003.safetensors')

    const read = await readSafetensorsIndex(res.indexFile!)
    expect(read.shards).toHaveLength(3)
    expect(read.tensors.map((t) => t.name).sort()).toEqual(ts.map((t) => t.name).sort())
    for (const t of ts) {
      const ref = read.tensors.find((r) => r.name === t.name)!
      expect(Array.from(await readTensorFloat64(ref))).toEqual(Array.from(t.data, (x) => roundToDtype(x, 'BF16')))
    }
    // The folder-level helper finds the index too.
    expect((await readSafetensorsRefs(dir)).length).toBe(5)
  })

  it('writes a single model.safetensors when it fits, removing stale shards; and the other way round', async () => {
    const dir = freshDir()
    await writeShardedSafetensors(dir, tensors(), { maxShardBytes: 300 })
    const single = await writeShardedSafetensors(dir, tensors(), { maxShardBytes: 1 << 20 })
    expect(single.indexFile).toBeNull()
    expect(readdirSync(dir)).toEqual(['model.safetensors'])
    await writeShardedSafetensors(dir, tensors(), { maxShardBytes: 400 })
    expect(readdirSync(dir).sort()).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json'])
  })

  it('names a missing shard, and a tensor the index lists that its shard lacks', async () => {
    const dir = freshDir()
    const res = await writeShardedSafetensors(dir, tensors(), { maxShardBytes: 300 })
    const index = JSON.parse(readFileSync(res.indexFile!, 'utf8'))
    index.weight_map['model.layers.0.self_attn.q_proj.weight'] = 'model-00002-of-00003.safetensors'
    writeFileSync(res.indexFile!, JSON.stringify(index))
    const err = await readSafetensorsIndex(res.indexFile!).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(MissingTensorError)
    expect((err as MissingTensorError).tensor).toBe('model.layers.0.self_attn.q_proj.weight')
    expect((err as MissingTensorError).file).toBe(join(dir, 'model-00002-of-00003.safetensors'))
    expect((err as Error).message).toMatch(/model-00002-of-00003\.safetensors.*q_proj.*listed in model\.safetensors\.index\.json/)

    rmSync(join(dir, 'model-00003-of-00003.safetensors'))
    const e2 = await expectSafetensorsError(readSafetensorsIndex(res.indexFile!), 'not-found', ['model-00003-of-00003.safetensors', 'incomplete'])
    expect(e2.file).toBe(join(dir, 'model-00003-of-00003.safetensors'))
  })

  it('rejects an index that is not JSON or has no weight_map, or points outside the folder', async () => {
    const dir = freshDir()
    const p = join(dir, 'model.safetensors.index.json')
    writeFileSync(p, '{"weight_map": ')
    await expectSafetensorsError(readSafetensorsIndex(p), 'index', ['model.safetensors.index.json', 'not valid JSON'])
    writeFileSync(p, '{"metadata": {}}')
    await expectSafetensorsError(readSafetensorsIndex(p), 'index', ['weight_map'])
    writeFileSync(p, '{"weight_map": {"a": "../x.safetensors"}}')
    await expectSafetensorsError(readSafetensorsIndex(p), 'index', ['outside the model folder'])
  })
})

describe('corrupt and truncated files give a SafetensorsError naming the file and tensor', () => {
  async function goodFile(): Promise<string> {
    const file = join(freshDir(), 'model.safetensors')
    await writeSafetensors(file, [randomTensor('a', 'F32', [4, 4], 1), randomTensor('b', 'F32', [8], 2)])
    return file
  }

  it('a file cut inside the data', async () => {
    const file = await goodFile()
    const size = readFileSync(file).length
    truncateSync(file, size - 10)
    await expectSafetensorsError(readSafetensorsHeader(file), 'truncated', [file, 'truncated', '"b"'])
  })

  it('a file shorter than the length prefix, and an empty file', async () => {
    const file = await goodFile()
    truncateSync(file, 5)
    await expectSafetensorsError(readSafetensorsHeader(file), 'truncated', [file, '5 bytes'])
    truncateSync(file, 0)
    await expectSafetensorsError(readSafetensorsHeader(file), 'truncated', [file])
  })

  it('a header length past the end of the file', async () => {
    const file = await goodFile()
    truncateSync(file, 40)
    await expectSafetensorsError(readSafetensorsHeader(file), 'truncated', [file, 'past the end of the file'])
  })

  it('an absurd header length', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, {}, 0, 1n << 40n)
    await expectSafetensorsError(readSafetensorsHeader(file), 'header', [file, 'limit'])
    rawFile(file, '', 0, 0n)
    await expectSafetensorsError(readSafetensorsHeader(file), 'header', [file, 'length is 0'])
  })

  it('corrupt header JSON', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]', 4)
    await expectSafetensorsError(readSafetensorsHeader(file), 'json', [file, 'not valid JSON'])
    rawFile(file, 'garbage!', 4)
    await expectSafetensorsError(readSafetensorsHeader(file), 'json', [file])
    rawFile(file, '[1, 2]', 4)
    await expectSafetensorsError(readSafetensorsHeader(file), 'json', [file])
    const bad = Buffer.from([0x7b, 0xff, 0xfe, 0x7d])
    const len = Buffer.alloc(8)
    len.writeBigUInt64LE(4n)
    writeFileSync(file, Buffer.concat([len, bad]))
    await expectSafetensorsError(readSafetensorsHeader(file), 'json', [file, 'UTF-8'])
  })

  it('offsets outside the data section (header not contiguous)', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [100, 108] } }, 16)
    const e = await expectSafetensorsError(readSafetensorsHeader(file), 'offsets', [file, '"b"', '[100, 108]'])
    expect(e.tensor).toBe('b')
  })

  it('offsets that end before they begin, or are not integers', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { a: { dtype: 'F32', shape: [0], data_offsets: [8, 4] } }, 16)
    await expectSafetensorsError(readSafetensorsHeader(file), 'offsets', [file, '"a"'])
    rawFile(file, { a: { dtype: 'F32', shape: [1], data_offsets: [0, 4.5] } }, 16)
    await expectSafetensorsError(readSafetensorsHeader(file), 'offsets', [file, '"a"'])
    rawFile(file, { a: { dtype: 'F32', shape: [1] } }, 16)
    await expectSafetensorsError(readSafetensorsHeader(file), 'offsets', [file, '"a"'])
  })

  it('overlapping tensors', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] }, b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] } }, 16)
    const e = await expectSafetensorsError(readSafetensorsHeader(file), 'overlap', [file, '"a"', '"b"', 'overlap'])
    expect(e.tensor).toBe('b')
  })

  it('a byte range that does not match shape × dtype size', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { w: { dtype: 'BF16', shape: [2, 3], data_offsets: [0, 24] } }, 24)
    const e = await expectSafetensorsError(readSafetensorsHeader(file), 'shape', [file, '"w"', 'needs 12 bytes', 'span 24'])
    expect(e.tensor).toBe('w')
    rawFile(file, { w: { dtype: 'F32', shape: [2, -1], data_offsets: [0, 8] } }, 8)
    await expectSafetensorsError(readSafetensorsHeader(file), 'shape', [file, '"w"'])
  })

  it('an unsupported or unknown dtype', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { ids: { dtype: 'I64', shape: [2], data_offsets: [0, 16] } }, 16)
    await expectSafetensorsError(readSafetensorsHeader(file), 'dtype', [file, '"ids"', 'I64', 'F32, BF16, F16'])
    rawFile(file, { q: { dtype: 'Q4_K', shape: [2], data_offsets: [0, 1] } }, 16)
    await expectSafetensorsError(readSafetensorsHeader(file), 'dtype', [file, '"q"', 'unknown dtype'])
  })

  it('bad __metadata__', async () => {
    const file = join(freshDir(), 'x.safetensors')
    rawFile(file, { __metadata__: { format: 1 } }, 0)
    await expectSafetensorsError(readSafetensorsHeader(file), 'header', [file, '__metadata__.format'])
  })

  it('a missing file, and a folder without weights', async () => {
    const dir = freshDir()
    await expectSafetensorsError(readSafetensorsHeader(join(dir, 'nope.safetensors')), 'not-found', ['nope.safetensors'])
    writeFileSync(join(dir, 'pytorch_model.bin'), 'x')
    await expectSafetensorsError(readSafetensorsRefs(dir), 'not-found', [dir, 'model.safetensors', 'safe_serialization'])
  })

  it('a file truncated after its header was read', async () => {
    const file = await goodFile()
    const refs = (await readSafetensorsHeader(file)).tensors
    truncateSync(file, refs[1].offset + 3)
    await expectSafetensorsError(readTensorFloat32(refs[1]), 'truncated', [file, `"${refs[1].name}"`])
  })
})

describe('atomic writes', () => {
  it('a failed write leaves neither a temp file nor a partial target', async () => {
    const dir = freshDir()
    // The target is a non-empty directory: the final rename fails after the data was written.
    mkdirSync(join(dir, 'model.safetensors'))
    writeFileSync(join(dir, 'model.safetensors', 'keep'), 'x')
    await expect(writeSafetensors(join(dir, 'model.safetensors'), [randomTensor('a', 'F32', [64], 1)])).rejects.toThrow()
    expect(readdirSync(dir)).toEqual(['model.safetensors'])
    expect(readdirSync(join(dir, 'model.safetensors'))).toEqual(['keep'])
  })

  it('a failed sharded write leaves no temp files and no index', async () => {
    const dir = freshDir()
    mkdirSync(join(dir, 'model-00002-of-00002.safetensors'))
    writeFileSync(join(dir, 'model-00002-of-00002.safetensors', 'keep'), 'x')
    const ts = [randomTensor('a', 'F32', [64], 1), randomTensor('b', 'F32', [64], 2)]
    await expect(writeShardedSafetensors(dir, ts, { maxShardBytes: 256 })).rejects.toThrow()
    const left = readdirSync(dir)
    expect(left.filter((f) => f.endsWith('.tmp'))).toEqual([])
    expect(left).not.toContain('model.safetensors.index.json')
  })

  it('overwrites an existing file in place', async () => {
    const dir = freshDir()
    const file = join(dir, 'model.safetensors')
    await writeSafetensors(file, [randomTensor('a', 'F32', [4], 1)])
    await writeSafetensors(file, [randomTensor('b', 'F32', [2], 2)])
    expect((await readSafetensorsHeader(file)).tensors.map((t) => t.name)).toEqual(['b'])
    expect(readdirSync(dir)).toEqual(['model.safetensors'])
  })
})

describe('bf16 / f16 conversion', () => {
  it('bf16 rounds to nearest even and keeps NaN/Inf', () => {
    const bitsOf = (u: number) => new Float32Array(new Uint32Array([u]).buffer)[0]
    expect(f32ToBf16Bits(1)).toBe(0x3f80)
    expect(f32ToBf16Bits(bitsOf(0x3f808000))).toBe(0x3f80) // tie → even (down)
    expect(f32ToBf16Bits(bitsOf(0x3f818000))).toBe(0x3f82) // tie → even (up)
    expect(f32ToBf16Bits(bitsOf(0x3f808001))).toBe(0x3f81) // above tie → up
    expect(f32ToBf16Bits(Infinity)).toBe(0x7f80)
    expect(f32ToBf16Bits(-Infinity)).toBe(0xff80)
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(NaN)))).toBe(true)
    expect(f32ToBf16Bits(bitsOf(0x7f7fffff))).toBe(0x7f80) // max float rounds to Inf
    expect(f32ToBf16Bits(-0)).toBe(0x8000)
  })

  it('f16 rounds to nearest even, overflows to Inf and underflows through subnormals', () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00)
    expect(f32ToF16Bits(-2)).toBe(0xc000)
    expect(f32ToF16Bits(65504)).toBe(0x7bff)
    expect(f32ToF16Bits(65519)).toBe(0x7bff)
    expect(f32ToF16Bits(65520)).toBe(0x7c00) // tie → even = Inf
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001)
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000) // tie → even = 0
    expect(f32ToF16Bits(1.5 * 2 ** -25)).toBe(0x0001)
    expect(f32ToF16Bits(3 * 2 ** -25)).toBe(0x0002) // 1.5 ulp tie → even (2)
    expect(f32ToF16Bits(2 ** -14)).toBe(0x0400) // smallest normal
    expect(f32ToF16Bits(2 ** -14 - 2 ** -25)).toBe(0x0400) // rounds up into the normals
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00) // tie → even
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02)
    expect(f32ToF16Bits(-0)).toBe(0x8000)
    expect(f32ToF16Bits(Infinity)).toBe(0x7c00)
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(NaN)))).toBe(true)
    expect(f16BitsToF32(0x3555)).toBeCloseTo(0.33325, 5)
  })

  it('every non-NaN bf16 and f16 value survives decode → encode exactly', () => {
    const bad: string[] = []
    for (let h = 0; h < 65536; h++) {
      const b = bf16BitsToF32(h)
      if (!Number.isNaN(b) && f32ToBf16Bits(b) !== h) bad.push(`bf16 ${h.toString(16)}`)
      const f = f16BitsToF32(h)
      if (!Number.isNaN(f) && f32ToF16Bits(f) !== h) bad.push(`f16 ${h.toString(16)}`)
    }
    expect(bad).toEqual([])
  })

  it('encoding picks the nearest representable value (property)', () => {
    fc.assert(
      fc.property(fc.float({ noNaN: true, noDefaultInfinity: true, min: -60000, max: 60000 }), (x) => {
        const xf = Math.fround(x)
        for (const [enc, dec] of [
          [f32ToF16Bits, f16BitsToF32],
          [f32ToBf16Bits, bf16BitsToF32],
        ] as const) {
          const h = enc(xf)
          const v = dec(h)
          const err = Math.abs(v - xf)
          // neighbours one step away in bit space (same sign) are no closer
          for (const nb of [h - 1, h + 1]) {
            if (nb < 0 || nb > 0xffff || (nb & 0x7fff) === 0x7fff) continue
            const w = dec(nb)
            if (Number.isFinite(w) && Math.sign(w) === Math.sign(v)) expect(err).toBeLessThanOrEqual(Math.abs(w - xf))
          }
        }
      }),
      { numRuns: 2000 },
    )
  })
})
