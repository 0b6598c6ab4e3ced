// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, __metadata__},
// then the tensors' bytes, offsets relative to the end of the header. We read only the header and
// hand out TensorRefs (absolute offsets) so the native engine reads the bytes itself; the readers
// below decode one tensor to float for tests and tools. Writers follow the layout of the reference
// implementation (header padded with spaces to 8 bytes, tensors ordered by dtype then name) and
// are atomic.

import { constants as fsConstants } from 'node:fs'
import { access, readdir, stat, unlink, type FileHandle } from 'node:fs/promises'
import { endianness } from 'node:os'
import { basename, dirname, isAbsolute, join, normalize, sep } from 'node:path'

import { InvalidArgumentError, MissingTensorError, SafetensorsError } from '../errors.js'
import type { TensorDtype, TensorRef } from '../types.js'
import { commitTemps, discardTemps, fsyncDir, writeAll, writeTemp } from '../../util/atomic.js'
import { describeFsError } from '../../util/fs-words.js'
import { MAX_JSON_FILE_BYTES, openRegularFile, readExactly, readRegularFile, type FileErrorFactory } from './files.js'

if (endianness() !== 'LE') {
  // safetensors is little-endian and we view file bytes through typed arrays.
  throw new Error('autodidact: big-endian hosts are not supported')
}

/** The reference implementation refuses headers larger than this (100 MB). */
export const MAX_HEADER_BYTES = 100_000_000

/** Byte size of every dtype the format defines (sub-byte float formats: null). */
const DTYPE_BYTES: Readonly<Record<string, number | null>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  F8_E8M0: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  F64: 8,
  I64: 8,
  U64: 8,
  C64: 8,
  F4: null,
  F6_E2M3: null,
  F6_E3M2: null,
}

/** The dtypes autodidact loads. */
export const SUPPORTED_DTYPES: readonly TensorDtype[] = ['F32', 'BF16', 'F16']

export function dtypeBytes(dtype: TensorDtype): number {
  return dtype === 'F32' ? 4 : 2
}

/** Order in which the reference writer lays out dtypes (descending enum order: F32, BF16, F16). */
const DTYPE_WRITE_RANK: Record<TensorDtype, number> = { F32: 0, BF16: 1, F16: 2 }

export interface SafetensorsHeader {
  file: string
  fileSize: number
  /** N, the JSON header's length in bytes. */
  headerLength: number
  /** Absolute offset of the data section (8 + N). */
  dataStart: number
  /** `__metadata__`, or null when absent. */
  metadata: Record<string, string> | null
  /** In header order. Offsets are absolute within `file`. */
  tensors: TensorRef[]
}

// ---------------------------------------------------------------------------------------------
// Header parsing

function fail(file: string, tensor: string | null, reason: SafetensorsError['reason'], msg: string, cause?: unknown): never {
  throw new SafetensorsError(file, tensor, reason, `${file}: ${msg}`, cause === undefined ? undefined : { cause })
}

function numel(shape: readonly number[]): number {
  let n = 1
  for (const d of shape) n *= d
  return n
}

/**
 * The first key any object in `text` (valid JSON) names twice, or null. JSON.parse keeps the last
 * of duplicate keys silently; a safetensors header with two entries of one name is corrupt.
 */
export function findDuplicateKey(text: string): string | null {
  const keys: Array<Set<string> | null> = [] // per open container: an object's keys, or null for an array
  let expectKey = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22 /* " */) {
      let j = i + 1
      while (j < text.length && text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c /* \ */ ? 2 : 1
      const top = keys[keys.length - 1]
      if (expectKey && top) {
        const key = JSON.parse(text.slice(i, j + 1)) as string
        if (top.has(key)) return key
        top.add(key)
        expectKey = false
      }
      i = j
    } else if (c === 0x7b /* { */) {
      keys.push(new Set())
      expectKey = true
    } else if (c === 0x5b /* [ */) {
      keys.push(null)
      expectKey = false
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      keys.pop()
      expectKey = false
    } else if (c === 0x2c /* , */) {
      expectKey = keys[keys.length - 1] !== null
    }
  }
  return null
}

/**
 * Validate a header's JSON bytes against the file's size and return its tensors. Pure: the
 * caller read the 8-byte length and the JSON; `fileSize` is the whole file's size.
 *
 * The framing rules are the reference implementation's (huggingface/safetensors,
 * safetensors/src/tensor.rs: `SafeTensors::read_metadata` and `Metadata::validate`): the header is
 * UTF-8 JSON starting with `{` (no BOM, no leading junk); sorted by data_offsets, every tensor starts
 * exactly where the previous one ended (the first at 0) and spans dtype size × Π shape bytes; and
 * the last one ends exactly at the end of the file ("MetadataIncompleteBuffer" otherwise). So no
 * gap, no overlap, no leading padding and no trailing bytes; a header length off by one shifts the
 * data section and is caught by the last rule. We also refuse duplicate keys, which the reference's
 * map keeps only one of (and then fails on the uncovered bytes).
 */
export function parseSafetensorsHeader(
  file: string,
  headerJson: Uint8Array,
  fileSize: number,
): SafetensorsHeader {
  const headerLength = headerJson.byteLength
  const dataStart = 8 + headerLength
  const dataSize = fileSize - dataStart
  if (dataSize < 0) {
    fail(file, null, 'truncated', `header length ${headerLength} runs past the end of the file (${fileSize} bytes): the file is truncated`)
  }

  let text: string
  try {
    // ignoreBOM keeps a byte-order mark in the text, so that it fails the "{" check as in the reference
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(headerJson)
  } catch (e) {
    fail(file, null, 'json', 'header is not valid UTF-8: the file is corrupt or not a safetensors file', e)
  }
  if (!text.startsWith('{')) {
    const what = text.startsWith('\uFEFF') ? 'starts with a byte-order mark' : 'does not start with "{"'
    fail(file, null, 'json', `header ${what}: the file is corrupt or not a safetensors file`)
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    fail(file, null, 'json', `header is not valid JSON (${(e as Error).message}): the file is corrupt or truncated`, e)
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    fail(file, null, 'header', 'header JSON is not an object')
  }
  const duplicate = findDuplicateKey(text)
  if (duplicate !== null) fail(file, duplicate, 'duplicate', `header names "${duplicate}" twice: the file is corrupt`)

  let metadata: Record<string, string> | null = null
  const tensors: TensorRef[] = []
  const ranges: Array<{ name: string; begin: number; end: number }> = []

  for (const [name, raw] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (raw === null) continue
      if (typeof raw !== 'object' || Array.isArray(raw)) {
        fail(file, null, 'header', '"__metadata__" must be an object of strings')
      }
      metadata = {}
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') fail(file, null, 'header', `"__metadata__.${k}" must be a string`)
        metadata[k] = v
      }
      continue
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      fail(file, name, 'header', `tensor "${name}": entry is not an object`)
    }
    const entry = raw as Record<string, unknown>
    const { dtype, shape, data_offsets: offsets } = entry
    if (typeof dtype !== 'string') fail(file, name, 'header', `tensor "${name}": "dtype" missing or not a string`)
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) {
      fail(file, name, 'shape', `tensor "${name}": "shape" must be an array of non-negative integers, got ${JSON.stringify(shape)}`)
    }
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && (o as number) >= 0)
    ) {
      fail(file, name, 'offsets', `tensor "${name}": "data_offsets" must be two non-negative integers, got ${JSON.stringify(offsets)}`)
    }
    if (!Object.prototype.hasOwnProperty.call(DTYPE_BYTES, dtype)) {
      fail(file, name, 'dtype', `tensor "${name}" has unknown dtype "${dtype}"`)
    }
    if (!(SUPPORTED_DTYPES as readonly string[]).includes(dtype)) {
      fail(
        file,
        name,
        'dtype',
        `tensor "${name}" has dtype ${dtype}; autodidact loads ${SUPPORTED_DTYPES.join(', ')} tensors only ` +
          '(convert the checkpoint to bf16 or f32 first)',
      )
    }
    const [begin, end] = offsets as [number, number]
    if (end < begin) {
      fail(file, name, 'offsets', `tensor "${name}": data_offsets [${begin}, ${end}] end before they begin`)
    }
    const dims = shape as number[]
    const want = numel(dims) * dtypeBytes(dtype as TensorDtype)
    if (!Number.isSafeInteger(want) || end - begin !== want) {
      fail(
        file,
        name,
        'shape',
        `tensor "${name}": ${dtype} shape [${dims.join(', ')}] needs ${want} bytes but data_offsets ` +
          `[${begin}, ${end}] span ${end - begin}`,
      )
    }
    ranges.push({ name, begin, end })
    tensors.push({
      name,
      dtype: dtype as TensorDtype,
      shape: dims.slice(),
      file,
      offset: dataStart + begin,
      nbytes: end - begin,
    })
  }
  checkTiling(file, ranges, dataSize, fileSize)
  return { file, fileSize, headerLength, dataStart, metadata, tensors }
}

/**
 * Metadata::validate of the reference: sorted by (begin, end), each range starts where the last
 * ended, and together they cover the data section exactly. Each failure is named by what it
 * most likely means (a cut-off download, a corrupt header, a wrong header length).
 */
function checkTiling(file: string, ranges: Array<{ name: string; begin: number; end: number }>, dataSize: number, fileSize: number): void {
  const sorted = ranges.slice().sort((a, b) => a.begin - b.begin || a.end - b.end)
  let tiled = true
  let cursor = 0
  for (const r of sorted) {
    if (r.begin !== cursor) tiled = false
    cursor = Math.max(cursor, r.end)
  }
  // Past the end: a header whose ranges tile [0, end) is a cut-off file; otherwise the offsets are wrong.
  const outside = sorted.find((r) => r.end > dataSize)
  if (outside && tiled) {
    fail(
      file,
      outside.name,
      'truncated',
      `file is truncated: tensor "${outside.name}" needs data bytes [${outside.begin}, ${outside.end}) but the file holds only ` +
        `${dataSize} data bytes (${fileSize} bytes in all; the header describes ${cursor}). Re-download or re-save it.`,
    )
  }
  if (outside) {
    fail(
      file,
      outside.name,
      'offsets',
      `tensor "${outside.name}": data_offsets [${outside.begin}, ${outside.end}] lie outside the data section (${dataSize} bytes): ` +
        'the header is corrupt or the file is truncated',
    )
  }
  let end = 0
  let prev: { name: string; begin: number; end: number } | null = null
  for (const r of sorted) {
    if (r.begin < end) {
      fail(file, r.name, 'overlap', `tensors "${prev!.name}" [${prev!.begin}, ${prev!.end}) and "${r.name}" [${r.begin}, ${r.end}) overlap: the header is corrupt`)
    }
    if (r.begin > end) {
      const where = prev === null ? 'before the first tensor' : `between "${prev.name}" and "${r.name}"`
      fail(file, r.name, 'gap', `data bytes [${end}, ${r.begin}) ${where} belong to no tensor: the header is corrupt`)
    }
    end = r.end
    prev = r
  }
  if (end < dataSize) {
    fail(
      file,
      null,
      'trailing',
      `${dataSize - end} bytes follow the last tensor (the header describes ${end} data bytes, the file holds ${dataSize}): ` +
        'the header length is wrong or the file is corrupt',
    )
  }
}

function ioFail(file: string, e: unknown, what: string): never {
  const code = (e as NodeJS.ErrnoException)?.code
  if (code === 'ENOENT') fail(file, null, 'not-found', 'no such file', e)
  if (code === 'EISDIR') fail(file, null, 'not-regular', 'is a directory, not a safetensors file', e)
  fail(file, null, 'io', describeFsError(file, e, what).slice(file.length + 2), e)
}

/** The typed error for a file problem of a safetensors file. */
function fileError(file: string): FileErrorFactory {
  return (problem, message, cause) =>
    new SafetensorsError(file, null, problem === 'too-large' ? 'io' : problem, message, cause === undefined ? undefined : { cause })
}

/** Read and validate the header of one .safetensors file (the tensor data is not read). */
export async function readSafetensorsHeader(file: string): Promise<SafetensorsHeader> {
  const { fh, size } = await openRegularFile(file, fileError(file))
  try {
    if (size < 8) {
      fail(file, null, 'truncated', `file is ${size} bytes, too short for a safetensors header: it is truncated or empty`)
    }
    const lenBuf = new Uint8Array(8)
    await readExactly(fh, lenBuf, 0)
    const n = new DataView(lenBuf.buffer).getBigUint64(0, true)
    if (n === 0n) fail(file, null, 'header', 'header length is 0: not a safetensors file')
    if (n > BigInt(MAX_HEADER_BYTES)) {
      fail(file, null, 'header', `header length ${n} exceeds the ${MAX_HEADER_BYTES}-byte limit: not a safetensors file, or corrupt`)
    }
    const headerLength = Number(n)
    if (8 + headerLength > size) {
      fail(
        file,
        null,
        'truncated',
        `header length ${headerLength} runs past the end of the file (${size} bytes): the file is truncated or not a safetensors file`,
      )
    }
    const header = new Uint8Array(headerLength)
    const got = await readExactly(fh, header, 8)
    if (got !== headerLength) fail(file, null, 'truncated', 'file ended while reading the header')
    return parseSafetensorsHeader(file, header, size)
  } catch (e) {
    if (e instanceof SafetensorsError) throw e
    ioFail(file, e, 'read it')
  } finally {
    await fh.close().catch(() => undefined)
  }
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints

export interface SafetensorsIndex {
  indexFile: string
  /** `metadata` of the index (e.g. total_size), or null. */
  metadata: Record<string, unknown> | null
  /** Tensor name → absolute shard path. */
  weightMap: Map<string, string>
  /** Every tensor of every shard; for names listed in weight_map, the copy in the listed shard. */
  tensors: TensorRef[]
  shards: SafetensorsHeader[]
}

/** Read a `model.safetensors.index.json` and the headers of all shards it lists. */
export async function readSafetensorsIndex(indexFile: string): Promise<SafetensorsIndex> {
  const text = (await readRegularFile(indexFile, MAX_JSON_FILE_BYTES, fileError(indexFile))).toString('utf8')
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (e) {
    fail(indexFile, null, 'index', `not valid JSON (${(e as Error).message})`, e)
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) fail(indexFile, null, 'index', 'not a JSON object')
  const { weight_map: wm, metadata } = json as Record<string, unknown>
  if (wm === null || typeof wm !== 'object' || Array.isArray(wm)) {
    fail(indexFile, null, 'index', '"weight_map" is missing or not an object of tensor name → shard file')
  }
  const dir = dirname(indexFile)
  const weightMap = new Map<string, string>()
  for (const [name, shard] of Object.entries(wm as Record<string, unknown>)) {
    if (typeof shard !== 'string' || shard === '') {
      fail(indexFile, name, 'index', `weight_map["${name}"] must be a shard file name`)
    }
    const rel = normalize(shard)
    if (isAbsolute(rel) || rel === '..' || rel.startsWith(`..${sep}`)) {
      fail(indexFile, name, 'index', `weight_map["${name}"] = "${shard}" points outside the model folder`)
    }
    weightMap.set(name, join(dir, rel))
  }

  const shardPaths = [...new Set(weightMap.values())]
  for (const p of shardPaths) {
    try {
      await access(p, fsConstants.R_OK)
    } catch (e) {
      const listed = [...weightMap].filter(([, s]) => s === p).map(([n]) => n)
      throw new SafetensorsError(
        p,
        listed[0] ?? null,
        'not-found',
        `${p}: shard listed in ${indexFile} (for ${listed.length} tensor${listed.length === 1 ? '' : 's'}, ` +
          `e.g. "${listed[0]}") is missing or unreadable: the download is incomplete`,
        { cause: e },
      )
    }
  }
  const shards = await Promise.all(shardPaths.map((p) => readSafetensorsHeader(p)))
  const byShard = new Map(shards.map((h) => [h.file, new Map(h.tensors.map((t) => [t.name, t]))]))

  const tensors: TensorRef[] = []
  const taken = new Set<string>()
  for (const [name, shard] of weightMap) {
    const ref = byShard.get(shard)?.get(name)
    if (!ref) {
      throw new MissingTensorError(
        shard,
        name,
        null,
        `${shard}: tensor "${name}" is listed in ${basename(indexFile)} but absent from this shard`,
      )
    }
    tensors.push(ref)
    taken.add(name)
  }
  for (const h of shards) {
    for (const t of h.tensors) {
      if (!taken.has(t.name)) {
        tensors.push(t)
        taken.add(t.name)
      }
    }
  }
  const meta = metadata !== null && typeof metadata === 'object' && !Array.isArray(metadata) ? (metadata as Record<string, unknown>) : null
  return { indexFile, metadata: meta, weightMap, tensors, shards }
}

/**
 * TensorRefs of a checkpoint: `path` is a .safetensors file, a .safetensors.index.json, or a
 * folder holding model.safetensors or model.safetensors.index.json.
 */
export async function readSafetensorsRefs(path: string): Promise<TensorRef[]> {
  if (path.endsWith('.index.json')) return (await readSafetensorsIndex(path)).tensors
  let isDir = false
  try {
    isDir = (await stat(path)).isDirectory()
  } catch (e) {
    ioFail(path, e, 'stat it')
  }
  if (!isDir) return (await readSafetensorsHeader(path)).tensors
  const single = join(path, 'model.safetensors')
  const index = join(path, 'model.safetensors.index.json')
  if (await exists(single)) return (await readSafetensorsHeader(single)).tensors
  if (await exists(index)) return (await readSafetensorsIndex(index)).tensors
  const names = await readdir(path).catch(() => [] as string[])
  const hint = names.some((n) => n.endsWith('.bin') || n.endsWith('.pt') || n.endsWith('.pth'))
    ? ' (found PyTorch .bin/.pt weights: re-save them as safetensors, e.g. model.save_pretrained(dir, safe_serialization=True))'
    : names.some((n) => n.endsWith('.gguf'))
      ? ' (found .gguf: autodidact reads Hugging Face safetensors checkpoints, not GGUF)'
      : ''
  throw new SafetensorsError(single, null, 'not-found', `${path}: no model.safetensors or model.safetensors.index.json${hint}`)
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p, fsConstants.F_OK)
    return true
  } catch {
    return false
  }
}

// ---------------------------------------------------------------------------------------------
// Number formats

const f32Scratch = new Float32Array(1)
const u32Scratch = new Uint32Array(f32Scratch.buffer)

/** float32 → bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN. */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x
  const b = u32Scratch[0]
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) return ((b >>> 16) | 0x0040) & 0xffff
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff
}

/** float32 → IEEE half bits, round to nearest even; overflow → ±Inf, underflow → subnormal/±0. */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x
  const b = u32Scratch[0]
  const sign = (b >>> 16) & 0x8000
  const exp = (b >>> 23) & 0xff
  const mant = b & 0x7fffff
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0)
  const e = exp - 127 + 15
  if (e >= 0x1f) return sign | 0x7c00
  if (e <= 0) {
    if (e < -10) return sign
    const m = mant | 0x800000
    const shift = 14 - e
    const half = 1 << (shift - 1)
    let h = m >>> shift
    const rem = m & ((1 << shift) - 1)
    if (rem > half || (rem === half && (h & 1) !== 0)) h++
    return sign | h
  }
  let h = sign | (e << 10) | (mant >>> 13)
  const rem = mant & 0x1fff
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++
  return h
}

/** bfloat16 bits → number (exact). */
export function bf16BitsToF32(h: number): number {
  u32Scratch[0] = (h & 0xffff) << 16
  return f32Scratch[0]
}

/** IEEE half bits → number (exact). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1
  const exp = (h >>> 10) & 0x1f
  const mant = h & 0x3ff
  if (exp === 0) return sign * mant * 2 ** -24
  if (exp === 0x1f) return mant !== 0 ? NaN : sign * Infinity
  return sign * (1 + mant / 1024) * 2 ** (exp - 15)
}

export function f32ArrayToBf16(src: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(src.length)
  for (let i = 0; i < src.length; i++) out[i] = f32ToBf16Bits(src[i])
  return out
}

export function f32ArrayToF16(src: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(src.length)
  for (let i = 0; i < src.length; i++) out[i] = f32ToF16Bits(src[i])
  return out
}

let f16Table: Float32Array | null = null
function f16Lut(): Float32Array {
  if (f16Table === null) {
    f16Table = new Float32Array(65536)
    for (let i = 0; i < 65536; i++) f16Table[i] = f16BitsToF32(i)
  }
  return f16Table
}

export function bf16ArrayToF32(src: Uint16Array): Float32Array {
  const out = new Float32Array(src.length)
  const o32 = new Uint32Array(out.buffer)
  for (let i = 0; i < src.length; i++) o32[i] = src[i] << 16
  return out
}

export function f16ArrayToF32(src: Uint16Array): Float32Array {
  const lut = f16Lut()
  const out = new Float32Array(src.length)
  for (let i = 0; i < src.length; i++) out[i] = lut[src[i]]
  return out
}

/** Decode raw little-endian tensor bytes of `dtype` to float32. */
export function decodeToFloat32(dtype: TensorDtype, bytes: Uint8Array): Float32Array {
  // Copy into a fresh, aligned buffer: file buffers may sit at odd offsets.
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice()
  if (dtype === 'F32') {
    return new Float32Array(aligned.buffer.slice(aligned.byteOffset, aligned.byteOffset + aligned.byteLength))
  }
  const u16 = new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / 2)
  return dtype === 'BF16' ? bf16ArrayToF32(u16) : f16ArrayToF32(u16)
}

// ---------------------------------------------------------------------------------------------
// Reading tensor data

/** The raw bytes of one tensor. */
export async function readTensorBytes(ref: TensorRef): Promise<Uint8Array> {
  const { fh } = await openRegularFile(ref.file, fileError(ref.file))
  try {
    const buf = new Uint8Array(ref.nbytes)
    const got = await readExactly(fh, buf, ref.offset)
    if (got !== ref.nbytes) {
      fail(ref.file, ref.name, 'truncated', `tensor "${ref.name}": file ended after ${got} of its ${ref.nbytes} bytes: it is truncated`)
    }
    return buf
  } catch (e) {
    if (e instanceof SafetensorsError) throw e
    ioFail(ref.file, e, `read tensor "${ref.name}"`)
  } finally {
    await fh.close().catch(() => undefined)
  }
}

// ---------------------------------------------------------------------------------------------
// Finite weights

/** Bytes read at a time when scanning tensors for NaN/Inf (a multiple of 4). */
const SCAN_CHUNK_BYTES = 16 << 20

/** Per 32-bit word shifted right by one (so the arithmetic stays in int32): exponent mask, its lowest bit, the bit past it. */
const NON_FINITE_TEST: Record<TensorDtype, { exp: number; one: number; carry: number; perWord: 1 | 2; half: number }> = {
  F32: { exp: 0x3fc00000, one: 0x00400000, carry: 0x40000000, perWord: 1, half: 0 },
  BF16: { exp: 0x3fc03fc0, one: 0x00400040, carry: 0x40004000, perWord: 2, half: 0x7f80 },
  F16: { exp: 0x3e003e00, one: 0x02000200, carry: 0x40004000, perWord: 2, half: 0x7c00 },
}

/**
 * Index of the first NaN or ±Inf among `bytes` (little-endian `dtype` values), or −1. An IEEE value
 * is non-finite exactly when its exponent bits are all ones, and then adding one at the exponent's
 * lowest bit carries out of the exponent: so a 32-bit word (one f32, or two 16-bit values) is tested
 * with a shift, a mask, an add and an AND, a block of words at a time; only a block with a hit is
 * searched word by word.
 */
export function firstNonFinite(dtype: TensorDtype, data: Uint8Array): number {
  const bytes = data.byteOffset % 4 === 0 ? data : data.slice()
  const words = new Int32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2)
  const { exp, one, carry, perWord, half } = NON_FINITE_TEST[dtype]
  const BLOCK = 4096
  for (let start = 0; start < words.length; start += BLOCK) {
    const end = Math.min(words.length, start + BLOCK)
    let hit = 0
    for (let i = start; i < end; i++) hit |= (((words[i] >>> 1) & exp) + one) & carry
    if (hit === 0) continue
    for (let i = start; i < end; i++) {
      const h = (((words[i] >>> 1) & exp) + one) & carry
      if (h !== 0) return perWord === 1 ? i : (h & 0x4000) !== 0 ? 2 * i : 2 * i + 1
    }
  }
  if (perWord === 2 && bytes.byteLength & 2) {
    const last = bytes[bytes.byteLength - 2] | (bytes[bytes.byteLength - 1] << 8)
    if ((last & half) === half) return 2 * words.length
  }
  return -1
}

/**
 * Throws SafetensorsError('non-finite') naming the first tensor of `refs` that holds a NaN or ±Inf,
 * its element and value. A non-finite weight can only make every logit it reaches NaN (and a
 * training step NaN everywhere): the file is corrupt or saved from a diverged run, so it is an
 * error, not a warning. Reads each file once, in order, a chunk at a time.
 */
export async function checkFiniteTensors(refs: readonly TensorRef[]): Promise<void> {
  const byFile = new Map<string, TensorRef[]>()
  for (const r of refs) byFile.set(r.file, [...(byFile.get(r.file) ?? []), r])
  // two buffers: the next chunk is read while this one is scanned
  const buffers = [new Uint8Array(SCAN_CHUNK_BYTES), new Uint8Array(SCAN_CHUNK_BYTES)]
  for (const [file, list] of byFile) {
    const chunks = list
      .slice()
      .sort((a, b) => a.offset - b.offset)
      .flatMap((ref) => Array.from({ length: Math.ceil(ref.nbytes / SCAN_CHUNK_BYTES) }, (_, k) => ({ ref, done: k * SCAN_CHUNK_BYTES })))
    const { fh } = await openRegularFile(file, fileError(file))
    const read = (k: number) => {
      const { ref, done } = chunks[k]
      const view = buffers[k % 2].subarray(0, Math.min(SCAN_CHUNK_BYTES, ref.nbytes - done))
      return readExactly(fh, view, ref.offset + done).then((got) => ({ view, got }))
    }
    let next = chunks.length ? read(0) : null
    try {
      for (let k = 0; k < chunks.length; k++) {
        const { view, got } = await next!
        next = k + 1 < chunks.length ? read(k + 1) : null
        const { ref, done } = chunks[k]
        if (got !== view.byteLength) {
          fail(file, ref.name, 'truncated', `tensor "${ref.name}": file ended after ${done + got} of its ${ref.nbytes} bytes: it is truncated`)
        }
        const at = firstNonFinite(ref.dtype, view)
        if (at >= 0) {
          const width = dtypeBytes(ref.dtype)
          const value = decodeToFloat32(ref.dtype, view.subarray(at * width, (at + 1) * width))[0]
          fail(
            file,
            ref.name,
            'non-finite',
            `tensor "${ref.name}" holds ${value} at element ${done / width + at} (of ${ref.nbytes / width}): ` +
              'the weights are corrupt or come from a diverged run',
          )
        }
      }
    } catch (e) {
      if (e instanceof SafetensorsError) throw e
      ioFail(file, e, 'read it')
    } finally {
      await next?.catch(() => undefined) // a read still in flight finishes before its file closes
      await fh.close().catch(() => undefined)
    }
  }
}

/** One tensor decoded to float32 (F32 as is, BF16/F16 widened exactly). */
export async function readTensorFloat32(ref: TensorRef): Promise<Float32Array> {
  return decodeToFloat32(ref.dtype, await readTensorBytes(ref))
}

/** One tensor decoded to float64 (every F32/BF16/F16 value is exact in float64). */
export async function readTensorFloat64(ref: TensorRef): Promise<Float64Array> {
  return Float64Array.from(await readTensorFloat32(ref))
}

// ---------------------------------------------------------------------------------------------
// Writing

export interface TensorToWrite {
  name: string
  dtype: TensorDtype
  shape: number[]
  /**
   * F32: a Float32Array. BF16/F16: a Uint16Array of raw bits, or a Float32Array converted with
   * round-to-nearest-even.
   */
  data: Float32Array | Uint16Array
}

function tensorBytes(t: TensorToWrite): Uint8Array {
  let arr: Float32Array | Uint16Array
  if (t.dtype === 'F32') {
    if (!(t.data instanceof Float32Array)) {
      throw new InvalidArgumentError('data', `tensor "${t.name}": F32 data must be a Float32Array`)
    }
    arr = t.data
  } else if (t.data instanceof Uint16Array) {
    arr = t.data
  } else {
    arr = t.dtype === 'BF16' ? f32ArrayToBf16(t.data) : f32ArrayToF16(t.data)
  }
  return new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength)
}

function checkTensors(tensors: readonly TensorToWrite[]): void {
  const seen = new Set<string>()
  for (const t of tensors) {
    if (typeof t.name !== 'string' || t.name === '' || t.name === '__metadata__') {
      throw new InvalidArgumentError('name', `invalid tensor name ${JSON.stringify(t.name)}`)
    }
    if (seen.has(t.name)) throw new InvalidArgumentError('name', `tensor "${t.name}" given twice`)
    seen.add(t.name)
    if (!(SUPPORTED_DTYPES as readonly string[]).includes(t.dtype)) {
      throw new InvalidArgumentError('dtype', `tensor "${t.name}": dtype must be one of ${SUPPORTED_DTYPES.join(', ')}, got ${t.dtype}`)
    }
    if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new InvalidArgumentError('shape', `tensor "${t.name}": shape must be non-negative integers, got ${JSON.stringify(t.shape)}`)
    }
    if (t.data.length !== numel(t.shape)) {
      throw new InvalidArgumentError(
        'data',
        `tensor "${t.name}": shape [${t.shape.join(', ')}] has ${numel(t.shape)} elements but data has ${t.data.length}`,
      )
    }
  }
}

/** Header bytes (length prefix + JSON + space padding) and the ordered tensors for one file. */
function layout(tensors: readonly TensorToWrite[], metadata: Record<string, string> | undefined) {
  const ordered = tensors
    .slice()
    .sort((a, b) => DTYPE_WRITE_RANK[a.dtype] - DTYPE_WRITE_RANK[b.dtype] || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  const header: Record<string, unknown> = {}
  if (metadata && Object.keys(metadata).length > 0) {
    const m: Record<string, string> = {}
    for (const k of Object.keys(metadata).sort()) {
      if (typeof metadata[k] !== 'string') throw new InvalidArgumentError('metadata', `metadata "${k}" must be a string`)
      m[k] = metadata[k]
    }
    header.__metadata__ = m
  }
  let off = 0
  for (const t of ordered) {
    const n = numel(t.shape) * dtypeBytes(t.dtype)
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + n] }
    off += n
  }
  let json = Buffer.from(JSON.stringify(header), 'utf8')
  const pad = (8 - ((8 + json.byteLength) % 8)) % 8
  if (pad > 0) json = Buffer.concat([json, Buffer.alloc(pad, 0x20)])
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(BigInt(json.byteLength))
  return { head: Buffer.concat([prefix, json]), ordered, dataBytes: off }
}

async function fillSafetensors(fh: FileHandle, tensors: readonly TensorToWrite[], metadata?: Record<string, string>) {
  const { head, ordered } = layout(tensors, metadata)
  await writeAll(fh, head)
  for (const t of ordered) await writeAll(fh, tensorBytes(t))
}

const DEFAULT_METADATA = { format: 'pt' }

/**
 * Write one .safetensors file atomically. `metadata` is merged over `{format: "pt"}` (what
 * transformers expects).
 */
export async function writeSafetensors(
  path: string,
  tensors: readonly TensorToWrite[],
  metadata?: Record<string, string>,
): Promise<void> {
  checkTensors(tensors)
  const meta = { ...DEFAULT_METADATA, ...metadata }
  layout(tensors, meta) // validate metadata before creating any file
  await writeTemp(path, (fh) => fillSafetensors(fh, tensors, meta)).then((tmp) => commitTemps([[tmp, path]]))
}

export interface ShardedWriteOptions {
  /** Start a new shard when the next tensor would take the current one past this many bytes. */
  maxShardBytes: number
  metadata?: Record<string, string>
  /** File stem: "model" gives model.safetensors / model-00001-of-00002.safetensors. */
  baseName?: string
}

export interface ShardedWriteResult {
  /** Absolute paths of the files written (shards, then the index when there is one). */
  files: string[]
  indexFile: string | null
}

/**
 * Write a checkpoint the way transformers' save_pretrained does: `<base>.safetensors` when it fits
 * in `maxShardBytes`, else `<base>-0000i-of-0000N.safetensors` plus `<base>.safetensors.index.json`
 * (shards filled greedily in the given tensor order; a tensor larger than the limit gets its own
 * shard). All files are written to temporaries first and renamed only when every one is complete;
 * the index is renamed last. Stale weight files of the other layout left by an earlier save are
 * removed afterwards, so a loader never picks up old weights.
 */
export async function writeShardedSafetensors(
  dir: string,
  tensors: readonly TensorToWrite[],
  opts: ShardedWriteOptions,
): Promise<ShardedWriteResult> {
  checkTensors(tensors)
  const { maxShardBytes } = opts
  if (!(Number.isFinite(maxShardBytes) && maxShardBytes > 0)) {
    throw new InvalidArgumentError('maxShardBytes', `maxShardBytes must be a positive number, got ${maxShardBytes}`)
  }
  const base = opts.baseName ?? 'model'
  const meta = { ...DEFAULT_METADATA, ...opts.metadata }
  layout([], meta)

  const groups: TensorToWrite[][] = []
  let cur: TensorToWrite[] = []
  let curBytes = 0
  let total = 0
  for (const t of tensors) {
    const n = numel(t.shape) * dtypeBytes(t.dtype)
    total += n
    if (cur.length > 0 && curBytes + n > maxShardBytes) {
      groups.push(cur)
      cur = []
      curBytes = 0
    }
    cur.push(t)
    curBytes += n
  }
  if (cur.length > 0 || groups.length === 0) groups.push(cur)

  const single = join(dir, `${base}.safetensors`)
  const indexFile = join(dir, `${base}.safetensors.index.json`)
  const pad5 = (i: number) => String(i).padStart(5, '0')
  const names =
    groups.length === 1 ? [`${base}.safetensors`] : groups.map((_, i) => `${base}-${pad5(i + 1)}-of-${pad5(groups.length)}.safetensors`)

  const temps: Array<[string, string]> = []
  try {
    for (let i = 0; i < groups.length; i++) {
      const target = join(dir, names[i])
      const group = groups[i]
      temps.push([await writeTemp(target, (fh) => fillSafetensors(fh, group, meta)), target])
    }
    if (groups.length > 1) {
      const weightMap: Record<string, string> = {}
      const entries: Array<[string, string]> = []
      groups.forEach((g, i) => g.forEach((t) => entries.push([t.name, names[i]])))
      entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      for (const [n, f] of entries) weightMap[n] = f
      const index = { metadata: { total_size: total }, weight_map: weightMap }
      const text = JSON.stringify(index, null, 2) + '\n'
      temps.push([await writeTemp(indexFile, (fh) => writeAll(fh, Buffer.from(text, 'utf8'))), indexFile])
    }
  } catch (e) {
    await discardTemps(temps.map(([t]) => t))
    throw e
  }
  // An old index goes first: if the renames below are interrupted, a loader finds no index and
  // fails loudly instead of mixing old and new shards.
  if (groups.length > 1) await unlink(indexFile).catch(() => undefined)
  try {
    await commitTemps(temps)
  } catch (e) {
    await discardTemps(temps.map(([t]) => t))
    throw e
  }

  // Remove weights of an earlier save that the new layout does not overwrite.
  const keep = new Set(temps.map(([, t]) => basename(t)))
  const shardRe = new RegExp(`^${base.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-\\d{5}-of-\\d{5}\\.safetensors$`)
  const stale = (await readdir(dir)).filter(
    (n) => !keep.has(n) && (n === basename(single) || n === basename(indexFile) || shardRe.test(n)),
  )
  for (const n of stale) await unlink(join(dir, n)).catch(() => undefined)
  if (stale.length > 0) await fsyncDir(dir)

  return { files: temps.map(([, t]) => t), indexFile: groups.length > 1 ? indexFile : null }
}

