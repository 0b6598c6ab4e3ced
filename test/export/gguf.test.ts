// GGUF export, checked without llama.cpp: the written file is parsed back byte by byte (header,
// metadata, tensor infos, offsets and alignment, data against the source safetensors), for the
// bundled model (character tokenizer → llama.cpp "llama" vocabulary) and tiny Llama / Qwen2 / Qwen3
// folders (byte-level tokenizer → "gpt2" vocabulary with merges). The round trip through llama.cpp
// itself is gguf-roundtrip.test.ts.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { InvalidArgumentError, TokenizerError, UnsupportedArchitectureError } from '../../src/engine/errors.js'
import { expectedTensors, type ExpectedTensor } from '../../src/engine/hf/config.js'
import { readModelFolder } from '../../src/engine/hf/folder.js'
import { f16BitsToF32, readTensorFloat32, writeSafetensors } from '../../src/engine/hf/safetensors.js'
import {
  exportGguf,
  GGUF_DEFAULT_ALIGNMENT,
  GgmlType,
  GgufFormatError,
  GgufTokenType,
  GgufValueType,
  ggufTensorName,
  llama3RopeFactors,
  permuteForLlamaRope,
  readGguf,
  readGgufTensor,
  type GgufFile,
  type GgufTensorInfo,
  type GgufValue,
} from '../../src/export/gguf.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

const BUNDLED = 'models/arith-qwen3-tiny'
let root: string

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-gguf-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

function scalar(g: GgufFile, key: string): unknown {
  const v = g.metadata.get(key)
  if (v === undefined) throw new Error(`missing metadata ${key}`)
  if (v.type === GgufValueType.ARRAY) throw new Error(`${key} is an array`)
  return v.value
}
function typed(g: GgufFile, key: string): GgufValue {
  const v = g.metadata.get(key)
  if (v === undefined) throw new Error(`missing metadata ${key}`)
  return v
}
function array(g: GgufFile, key: string): unknown[] {
  const v = typed(g, key)
  if (v.type !== GgufValueType.ARRAY) throw new Error(`${key} is not an array`)
  return v.values
}

interface ExportedMatrix {
  e: ExpectedTensor
  info: GgufTensorInfo
  src: Float32Array
  got: Float32Array
}
/** Every tensor of a GGUF export of the bundled model beside its source: 1-D tensors (norms) must be exact f32
 *  copies; each 2-D tensor goes to `check`. */
async function forEachBundledMatrix(g: GgufFile, check: (m: ExportedMatrix) => void): Promise<void> {
  const folder = await readModelFolder(BUNDLED)
  for (const e of expectedTensors(folder.config)) {
    const info = g.tensors.find((t) => t.name === ggufTensorName(e.name))!
    const src = await readTensorFloat32(folder.tensors.find((t) => t.name === e.name)!)
    const got = await readGgufTensor(g, info.name)
    if (e.shape.length === 1) {
      expect(info.type).toBe(GgmlType.F32)
      expect(Array.from(got)).toEqual(Array.from(src))
      continue
    }
    check({ e, info, src, got })
  }
}

/** Independent float16 decode of the stored f16 rounding error bound: |x − f16(x)| ≤ 2^-11·|x| for normal values. */
function f16RelativeBound(x: number): number {
  return Math.abs(x) >= 2 ** -14 ? 2 ** -11 * Math.abs(x) : 2 ** -25
}

/** Layout checks every written file must pass: aligned, in order, non-overlapping, inside the file. */
function checkLayout(g: GgufFile): void {
  expect(g.version).toBe(3)
  expect(g.alignment).toBe(GGUF_DEFAULT_ALIGNMENT)
  expect(g.dataOffset % GGUF_DEFAULT_ALIGNMENT).toBe(0)
  let end = 0
  for (const t of g.tensors) {
    expect(t.offset % GGUF_DEFAULT_ALIGNMENT).toBe(0)
    expect(t.offset).toBeGreaterThanOrEqual(end)
    const n = t.dims.reduce((a, b) => a * b, 1)
    end = t.offset + (t.type === GgmlType.Q8_0 ? (n / 32) * 34 : n * (t.type === GgmlType.F32 ? 4 : 2))
  }
  expect(g.size).toBe(g.dataOffset + Math.ceil(end / GGUF_DEFAULT_ALIGNMENT) * GGUF_DEFAULT_ALIGNMENT)
}

describe('bundled model (Qwen3, character tokenizer)', () => {
  it('f32: header, architecture metadata, tensor infos and every tensor byte-equal to the safetensors', async () => {
    const out = join(root, 'toy-f32.gguf')
    const r = await exportGguf(BUNDLED, out, { dtype: 'f32' })
    const g = await readGguf(out)
    expect(r.bytes).toBe(statSync(out).size)
    expect(r.tensors).toBe(g.tensors.length)
    checkLayout(g)

    const cfg = JSON.parse(readFileSync(join(BUNDLED, 'config.json'), 'utf8'))
    expect(scalar(g, 'general.architecture')).toBe('qwen3')
    expect(scalar(g, 'general.file_type')).toBe(0)
    const u32 = (k: string) => {
      const v = typed(g, k)
      expect(v.type, k).toBe(GgufValueType.UINT32)
      return scalar(g, k)
    }
    expect(u32('qwen3.block_count')).toBe(cfg.num_hidden_layers)
    expect(u32('qwen3.embedding_length')).toBe(cfg.hidden_size)
    expect(u32('qwen3.feed_forward_length')).toBe(cfg.intermediate_size)
    expect(u32('qwen3.context_length')).toBe(cfg.max_position_embeddings)
    expect(u32('qwen3.attention.head_count')).toBe(cfg.num_attention_heads)
    expect(u32('qwen3.attention.head_count_kv')).toBe(cfg.num_key_value_heads)
    expect(u32('qwen3.attention.key_length')).toBe(cfg.head_dim)
    expect(u32('qwen3.attention.value_length')).toBe(cfg.head_dim)
    expect(typed(g, 'qwen3.rope.freq_base').type).toBe(GgufValueType.FLOAT32)
    expect(scalar(g, 'qwen3.rope.freq_base')).toBe(cfg.rope_theta)
    expect(scalar(g, 'qwen3.attention.layer_norm_rms_epsilon')).toBe(Math.fround(cfg.rms_norm_eps))

    // Tensors: one per HF tensor (tied embeddings: no output.weight), HF [out, in] → ggml [in, out].
    const folder = await readModelFolder(BUNDLED)
    const expected = expectedTensors(folder.config)
    expect(g.tensors.map((t) => t.name)).toEqual(expected.map((e) => ggufTensorName(e.name)))
    expect(g.tensors.some((t) => t.name === 'output.weight')).toBe(false)
    for (const e of expected) {
      const info = g.tensors.find((t) => t.name === ggufTensorName(e.name))!
      expect(info.dims).toEqual([...e.shape].reverse())
      expect(info.type).toBe(GgmlType.F32)
      const ref = folder.tensors.find((t) => t.name === e.name)!
      const src = await readTensorFloat32(ref)
      const got = await readGgufTensor(g, info.name)
      expect(Buffer.from(got.buffer).equals(Buffer.from(src.buffer)), e.name).toBe(true)
    }
  })

  it('tokenizer metadata: llama vocabulary with byte tokens, ▁ for the space, control and user-defined tags, padding', async () => {
    const out = join(root, 'toy-f32.gguf')
    const g = await readGguf(out)
    const tj = JSON.parse(readFileSync(join(BUNDLED, 'tokenizer.json'), 'utf8'))
    const tc = JSON.parse(readFileSync(join(BUNDLED, 'tokenizer_config.json'), 'utf8'))
    expect(scalar(g, 'tokenizer.ggml.model')).toBe('llama')
    const tokens = array(g, 'tokenizer.ggml.tokens') as string[]
    const types = array(g, 'tokenizer.ggml.token_type') as number[]
    expect(typed(g, 'tokenizer.ggml.token_type')).toMatchObject({ itemType: GgufValueType.INT32 })
    expect(tokens.length).toBe(368)
    expect(new Set(tokens).size).toBe(368) // llama.cpp asserts unique texts
    for (const [text, id] of Object.entries(tj.model.vocab as Record<string, number>)) {
      if (/^<0x[0-9A-F]{2}>$/.test(text)) {
        expect(types[id]).toBe(GgufTokenType.BYTE)
        expect(tokens[id]).toBe(text)
      } else if (!tj.added_tokens.some((a: { id: number }) => a.id === id)) {
        expect(types[id]).toBe(GgufTokenType.NORMAL)
        expect(tokens[id]).toBe(text === ' ' ? '\u2581' : text)
      }
    }
    for (const a of tj.added_tokens as Array<{ id: number; content: string; special: boolean }>) {
      expect(tokens[a.id]).toBe(a.content)
      expect(types[a.id]).toBe(a.special ? GgufTokenType.CONTROL : GgufTokenType.USER_DEFINED)
    }
    for (let i = 365; i < 368; i++) {
      expect(tokens[i]).toBe(`[PAD${i}]`)
      expect(types[i]).toBe(GgufTokenType.UNUSED)
    }
    expect(scalar(g, 'tokenizer.ggml.add_space_prefix')).toBe(false)
    expect(scalar(g, 'tokenizer.ggml.add_bos_token')).toBe(false)
    expect(scalar(g, 'tokenizer.ggml.eos_token_id')).toBe(2) // <|im_end|>
    expect(scalar(g, 'tokenizer.ggml.bos_token_id')).toBe(0)
    expect(scalar(g, 'tokenizer.ggml.padding_token_id')).toBe(0)
    expect(scalar(g, 'tokenizer.chat_template')).toBe(tc.chat_template)
  })

  it('f16: 2-D tensors as f16 within half-precision rounding, 1-D tensors (norms) stay f32, half the size', async () => {
    const out = join(root, 'toy-f16.gguf')
    const r = await exportGguf(BUNDLED, out, { dtype: 'f16' })
    const g = await readGguf(out)
    checkLayout(g)
    expect(scalar(g, 'general.file_type')).toBe(1)
    expect(r.bytes).toBeLessThan(0.51 * statSync(join(BUNDLED, 'model.safetensors')).size)
    await forEachBundledMatrix(g, ({ e, info, src, got }) => {
      expect(info.type).toBe(GgmlType.F16)
      let worst = 0
      for (let i = 0; i < src.length; i++) worst = Math.max(worst, Math.abs(got[i] - src[i]) - f16RelativeBound(src[i]))
      expect(worst, e.name).toBeLessThanOrEqual(0)
    })
    // the f16 bits decode independently to the same values readGgufTensor returns
    const emb = g.tensors.find((t) => t.name === 'token_embd.weight')!
    const raw = readFileSync(out).subarray(g.dataOffset + emb.offset, g.dataOffset + emb.offset + 16)
    const viaBits = Array.from({ length: 8 }, (_, i) => f16BitsToF32(raw.readUInt16LE(2 * i)))
    expect(Array.from((await readGgufTensor(g, 'token_embd.weight')).subarray(0, 8))).toEqual(viaBits)
  })
})

describe('q8_0', () => {
  it('matrices with rows of whole 32-blocks as Q8_0 (f16 scale, codes in ±127, each block\'s largest magnitude at ±127), others f16, norms f32', async () => {
    const out = join(root, 'toy-q8.gguf')
    const r = await exportGguf(BUNDLED, out, { dtype: 'q8_0' })
    const g = await readGguf(out)
    checkLayout(g)
    expect(scalar(g, 'general.file_type')).toBe(7)
    // ~1.06 bytes per weight, but down_proj (rows of 432 = 13.5 blocks) at 2: about a third of the f32 file
    expect(r.bytes).toBeLessThan(0.35 * statSync(join(BUNDLED, 'model.safetensors')).size)
    const bytes = readFileSync(out)
    let q8 = 0
    await forEachBundledMatrix(g, ({ e, info, src, got }) => {
      if (e.shape[1] % 32 !== 0) {
        expect(info.type, e.name).toBe(GgmlType.F16) // convert_hf_to_gguf.py's fallback for rows that are not whole blocks
        return
      }
      expect(info.type, e.name).toBe(GgmlType.Q8_0)
      q8++
      const raw = bytes.subarray(g.dataOffset + info.offset)
      let bad = 0 // elements or blocks that break a property (one expect per tensor keeps this fast)
      for (let b = 0; b < src.length / 32; b++) {
        const block = src.subarray(32 * b, 32 * b + 32)
        let amax = 0
        for (const v of block) amax = Math.max(amax, Math.abs(v))
        const d = f16BitsToF32(raw.readUInt16LE(34 * b))
        if (Math.abs(d - amax / 127) > f16RelativeBound(amax / 127)) bad++
        let sawFull = amax === 0
        for (let i = 0; i < 32; i++) {
          const code = raw.readInt8(34 * b + 2 + i)
          if (Math.abs(code) > 127) bad++
          if (Math.abs(block[i]) === amax && Math.abs(code) === 127) sawFull = true
          // decoded = code · f16(d); the error: rounding (≤ d/2) plus the f16 rounding of d times |code|
          if (got[32 * b + i] !== code * d) bad++
          if (Math.abs(got[32 * b + i] - block[i]) > amax / 127 / 2 + 127 * Math.abs(d - amax / 127) + 1e-12) bad++
        }
        if (!sawFull) bad++
      }
      expect(bad, e.name).toBe(0)
    })
    expect(q8).toBeGreaterThan(0)
  })

  it('--dtype q8_0 is for GGUF only: ONNX refuses it with a typed error', async () => {
    const { exportCommand } = await import('../../src/cli/export.js')
    await expect(exportCommand(['--format', 'onnx', '--model', BUNDLED, '--out', join(root, 'x-onnx'), '--dtype', 'q8_0'])).rejects.toThrow(/GGUF type/)
  })
})

describe('tiny Llama / Qwen2 / Qwen3 folders (byte-level tokenizer)', () => {
  let llama: TinyModel
  let qwen2: TinyModel
  let qwen3: TinyModel
  beforeAll(async () => {
    llama = await writeTinyModel(join(root, 'llama'), { family: 'llama', dtype: 'BF16', seed: 3, ropeScaling: true, attentionBias: true })
    qwen2 = await writeTinyModel(join(root, 'qwen2'), { family: 'qwen2', dtype: 'F16', seed: 4 })
    qwen3 = await writeTinyModel(join(root, 'qwen3'), { family: 'qwen3', dtype: 'F32', seed: 5, tied: true })
  })

  it('llama: q/k rows permuted to interleaved RoPE pairs (weights and biases), rope_freqs for llama3 scaling, untied output', async () => {
    const out = join(root, 'llama.gguf')
    await exportGguf(llama.dir, out, { dtype: 'f32' })
    const g = await readGguf(out)
    checkLayout(g)
    expect(scalar(g, 'general.architecture')).toBe('llama')
    expect(scalar(g, 'llama.vocab_size')).toBe(llama.config.vocabSize)
    const { numHeads: H, numKvHeads: KV, headDim: D, hiddenSize: E } = llama.config
    for (const [hf, heads] of [['q_proj', H], ['k_proj', KV]] as const) {
      const w = llama.weights.get(`model.layers.1.self_attn.${hf}.weight`)!
      const b = llama.weights.get(`model.layers.1.self_attn.${hf}.bias`)!
      const gw = await readGgufTensor(g, `blk.1.attn_${hf[0]}.weight`)
      const gb = await readGgufTensor(g, `blk.1.attn_${hf[0]}.bias`)
      // interleaved pair (2j, 2j+1) of head h holds rotate-half rows (j, j + D/2)
      for (let h = 0; h < heads; h++) {
        for (let j = 0; j < D / 2; j++) {
          for (const [dst, src] of [[2 * j, j], [2 * j + 1, j + D / 2]]) {
            expect(gb[h * D + dst]).toBe(b[h * D + src])
            for (let c = 0; c < E; c += 7) expect(gw[(h * D + dst) * E + c]).toBe(w[(h * D + src) * E + c])
          }
        }
      }
    }
    // v and o are not permuted
    expect(Array.from(await readGgufTensor(g, 'blk.0.attn_v.weight'))).toEqual(Array.from(llama.weights.get('model.layers.0.self_attn.v_proj.weight')!))
    expect(Array.from(await readGgufTensor(g, 'blk.0.attn_output.bias'))).toEqual(Array.from(llama.weights.get('model.layers.0.self_attn.o_proj.bias')!))
    expect(g.tensors.some((t) => t.name === 'output.weight')).toBe(true)
    // Llama 3 factors, float64 reference of the three bands (factor 8, low 1, high 4, original 256, θ 500000)
    const rf = await readGgufTensor(g, 'rope_freqs.weight')
    const s = llama.config.ropeScaling!
    expect(rf.length).toBe(D / 2)
    for (let i = 0; i < D / 2; i++) {
      const wavelen = 2 * Math.PI * llama.config.ropeTheta ** ((2 * i) / D)
      const lo = s.originalMaxPositionEmbeddings / s.lowFreqFactor
      const hi = s.originalMaxPositionEmbeddings / s.highFreqFactor
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor)
      const want = wavelen < hi ? 1 : wavelen > lo ? s.factor : 1 / ((1 - smooth) / s.factor + smooth)
      expect(Math.abs(rf[i] - want)).toBeLessThanOrEqual(1e-6 * want)
    }
    const bands = new Set(Array.from(rf).map((x) => (x === 1 ? 'high' : x === s.factor ? 'low' : 'mid')))
    expect(bands).toEqual(new Set(['high', 'mid', 'low']))
  })

  it('qwen2: q/k/v biases as f32 even in an f16 file, no permutation; gpt2 vocabulary with merges and the qwen2 pre-tokenizer', async () => {
    const out = join(root, 'qwen2.gguf')
    await exportGguf(qwen2.dir, out, { dtype: 'f16' })
    const g = await readGguf(out)
    checkLayout(g)
    expect(scalar(g, 'general.architecture')).toBe('qwen2')
    const qb = g.tensors.find((t) => t.name === 'blk.0.attn_q.bias')!
    expect(qb.type).toBe(GgmlType.F32)
    expect(Array.from(await readGgufTensor(g, 'blk.0.attn_q.bias'))).toEqual(Array.from(qwen2.weights.get('model.layers.0.self_attn.q_proj.bias')!))
    // source weights are F16: the f16 export holds them exactly, in HF row order
    expect(Array.from(await readGgufTensor(g, 'blk.0.attn_q.weight'))).toEqual(Array.from(qwen2.weights.get('model.layers.0.self_attn.q_proj.weight')!))

    const tj = JSON.parse(readFileSync(join(qwen2.dir, 'tokenizer.json'), 'utf8'))
    expect(scalar(g, 'tokenizer.ggml.model')).toBe('gpt2')
    expect(scalar(g, 'tokenizer.ggml.pre')).toBe('qwen2')
    expect(array(g, 'tokenizer.ggml.merges')).toEqual(tj.model.merges.map((m: string[]) => m.join(' ')))
    const tokens = array(g, 'tokenizer.ggml.tokens') as string[]
    const types = array(g, 'tokenizer.ggml.token_type') as number[]
    expect(tokens.length).toBe(qwen2.config.vocabSize)
    expect(tokens[tj.model.vocab['Ġ']]).toBe('Ġ')
    const id = (c: string) => tj.added_tokens.find((a: { content: string }) => a.content === c).id
    expect(types[id('<|im_start|>')]).toBe(GgufTokenType.CONTROL)
    expect(types[id('<think>')]).toBe(GgufTokenType.USER_DEFINED)
    expect(scalar(g, 'tokenizer.ggml.eos_token_id')).toBe(id('<|im_end|>'))
    expect(types[tokens.length - 1]).toBe(GgufTokenType.UNUSED)
  })

  it('qwen3: key_length = head_dim ≠ hidden/heads, q/k norms, tied embeddings without output.weight', async () => {
    const out = join(root, 'qwen3.gguf')
    await exportGguf(qwen3.dir, out, { dtype: 'f32' })
    const g = await readGguf(out)
    checkLayout(g)
    expect(qwen3.config.headDim).not.toBe(qwen3.config.hiddenSize / qwen3.config.numHeads)
    expect(scalar(g, 'qwen3.attention.key_length')).toBe(qwen3.config.headDim)
    expect(scalar(g, 'qwen3.rope.dimension_count')).toBe(qwen3.config.headDim)
    expect(g.tensors.find((t) => t.name === 'blk.1.attn_k_norm.weight')!.dims).toEqual([qwen3.config.headDim])
    expect(g.tensors.some((t) => t.name === 'output.weight')).toBe(false)
    expect(Array.from(await readGgufTensor(g, 'blk.1.attn_q.weight'))).toEqual(Array.from(qwen3.weights.get('model.layers.1.self_attn.q_proj.weight')!))
  })

  it('bad input: typed errors for dtype, score-head models, unknown pre-tokenizers, overflow in f16, malformed GGUF', async () => {
    await expect(exportGguf(qwen3.dir, join(root, 'x.gguf'), { dtype: 'bf16' as 'f16' })).rejects.toBeInstanceOf(InvalidArgumentError)

    // a reward model (score head): same decoder, score.weight instead of an LM head
    const cls = await writeTinyModel(join(root, 'cls'), { family: 'qwen3', dtype: 'F32', seed: 6, tied: true })
    const tensors = [...cls.weights].map(([name, w]) => ({ name, dtype: 'F32' as const, shape: cls.tensorShapes.get(name)!, data: Float32Array.from(w) }))
    tensors.push({ name: 'score.weight', dtype: 'F32', shape: [1, cls.config.hiddenSize], data: new Float32Array(cls.config.hiddenSize).fill(0.1) })
    await writeSafetensors(join(cls.dir, 'model.safetensors'), tensors)
    const cfg = JSON.parse(readFileSync(join(cls.dir, 'config.json'), 'utf8'))
    writeFileSync(join(cls.dir, 'config.json'), JSON.stringify({ ...cfg, architectures: ['Qwen3ForSequenceClassification'], num_labels: 1 }))
    await expect(exportGguf(cls.dir, join(root, 'x.gguf'), { dtype: 'f32' })).rejects.toBeInstanceOf(UnsupportedArchitectureError)

    const odd = await writeTinyModel(join(root, 'odd'), { family: 'qwen3', dtype: 'F32', seed: 7 })
    const tj = JSON.parse(readFileSync(join(odd.dir, 'tokenizer.json'), 'utf8'))
    tj.pre_tokenizer.pretokenizers[0].pattern.Regex = '\\s+|\\S+'
    writeFileSync(join(odd.dir, 'tokenizer.json'), JSON.stringify(tj))
    await expect(exportGguf(odd.dir, join(root, 'x.gguf'), { dtype: 'f32' })).rejects.toBeInstanceOf(TokenizerError)

    const big = await writeTinyModel(join(root, 'big'), { family: 'qwen3', dtype: 'F32', seed: 8 })
    const st = readFileSync(join(big.dir, 'model.safetensors'))
    const hlen = Number(st.readBigUInt64LE(0))
    const header = JSON.parse(st.subarray(8, 8 + hlen).toString())
    const at = 8 + hlen + header['model.layers.0.mlp.up_proj.weight'].data_offsets[0]
    st.writeFloatLE(1e6, at) // > f16 max 65504
    writeFileSync(join(big.dir, 'model.safetensors'), st)
    await expect(exportGguf(big.dir, join(root, 'big.gguf'), { dtype: 'f16' })).rejects.toThrow(/overflows f16/)
    expect(() => statSync(join(root, 'big.gguf'))).toThrow() // atomic: nothing left behind
    await exportGguf(big.dir, join(root, 'big.gguf'), { dtype: 'f32' }) // f32 holds it

    const good = readFileSync(join(root, 'qwen3.gguf'))
    writeFileSync(join(root, 'trunc.gguf'), good.subarray(0, 200))
    await expect(readGguf(join(root, 'trunc.gguf'))).rejects.toBeInstanceOf(GgufFormatError)
    writeFileSync(join(root, 'short.gguf'), good.subarray(0, good.length - 64))
    await expect(readGguf(join(root, 'short.gguf'))).rejects.toThrow(/extends past the end/)
    writeFileSync(join(root, 'notgguf.gguf'), Buffer.from('not a gguf file at all, just text....'))
    await expect(readGguf(join(root, 'notgguf.gguf'))).rejects.toThrow(/bad magic/)
  })
})

describe('autodidact export', () => {
  it('--format gguf writes the file; bad options are typed errors', async () => {
    const { exportCommand } = await import('../../src/cli/export.js')
    const out = join(root, 'cli.gguf')
    const log = console.log
    console.log = () => undefined
    try {
      expect(await exportCommand(['--format', 'gguf', '--model', BUNDLED, '--out', out, '--dtype', 'f16'])).toBe(0)
    } finally {
      console.log = log
    }
    const g = await readGguf(out)
    expect(scalar(g, 'general.file_type')).toBe(1)
    await expect(exportCommand(['--format', 'gguf', '--model', BUNDLED, '--out', out, '--dtype', 'q4'])).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(exportCommand(['--format', 'safetensors', '--model', BUNDLED, '--out', out])).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(exportCommand(['--format', 'gguf', '--out', out])).rejects.toThrow(/--model DIR is required/)
  })
})

describe('helpers', () => {
  it('permuteForLlamaRope is convert_hf_to_gguf.py LlamaModel.permute (reshape(h, 2, D/2, c).swapaxes(1, 2))', () => {
    const rows = 8, cols = 3, heads = 2
    const w = Float32Array.from({ length: rows * cols }, (_, i) => i)
    const p = permuteForLlamaRope(w, rows, cols, heads)
    // numpy: np.arange(24).reshape(2,2,2,3).swapaxes(1,2).reshape(8,3)[:, 0] = [0, 6, 3, 9, 12, 18, 15, 21]
    expect(Array.from({ length: rows }, (_, r) => p[r * cols])).toEqual([0, 6, 3, 9, 12, 18, 15, 21])
    expect(() => permuteForLlamaRope(w, rows, cols, 3)).toThrow(InvalidArgumentError)
  })

  it('llama3RopeFactors matches Llama 3.2 1B (factor 32, low 1, high 4, original 8192, θ 500000, D 64) at the band edges', () => {
    const f = llama3RopeFactors({
      headDim: 64,
      ropeTheta: 500000,
      ropeScaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
    } as Parameters<typeof llama3RopeFactors>[0])
    expect(f.length).toBe(32)
    expect(f[0]).toBe(1)
    expect(f[31]).toBe(32)
    for (let i = 1; i < 32; i++) expect(f[i]).toBeGreaterThanOrEqual(f[i - 1])
  })
})
