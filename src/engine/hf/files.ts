// Reading the files of a model folder without trusting them: only regular files are read (a FIFO
// would block the reader forever, a device would stream without end), opened non-blocking so that
// even a FIFO swapped in after a check cannot hang the process, and read up to a size limit. Every
// failure goes through the caller's error factory, so each file kind keeps its own typed error.

import { constants as fsConstants, type Stats } from 'node:fs'
import { open, type FileHandle } from 'node:fs/promises'

import { describeFsError, fileKind } from '../../util/fs-words.js'

/** What went wrong opening or reading a file. */
export type FileProblem = 'not-found' | 'not-regular' | 'too-large' | 'io'

/** Builds the caller's typed error for a file problem. */
export type FileErrorFactory = (problem: FileProblem, message: string, cause?: unknown) => Error

/** O_NONBLOCK where the platform has it: opening a FIFO then returns at once instead of waiting for a writer. */
const OPEN_FLAGS = fsConstants.O_RDONLY | (fsConstants.O_NONBLOCK ?? 0)

function problemOf(e: unknown): FileProblem {
  const code = (e as NodeJS.ErrnoException)?.code
  if (code === 'ENOENT' || code === 'ENOTDIR') return 'not-found'
  if (code === 'ENXIO' || code === 'EISDIR') return 'not-regular'
  return 'io'
}

/** Opens `path` for reading if it is a regular file (symbolic links to one are followed). */
export async function openRegularFile(path: string, onError: FileErrorFactory): Promise<{ fh: FileHandle; size: number }> {
  let fh: FileHandle
  try {
    fh = await open(path, OPEN_FLAGS)
  } catch (e) {
    throw onError(problemOf(e), describeFsError(path, e, 'open it'), e)
  }
  let st: Stats
  try {
    st = await fh.stat()
  } catch (e) {
    await fh.close().catch(() => undefined)
    throw onError('io', describeFsError(path, e, 'stat it'), e)
  }
  if (!st.isFile()) {
    await fh.close().catch(() => undefined)
    throw onError('not-regular', `${path}: is ${fileKind(st)}, not a regular file: refused`)
  }
  return { fh, size: st.size }
}

/** Reads exactly `into.byteLength` bytes at `position`, or fewer at the end of the file; returns the count. */
export async function readExactly(fh: FileHandle, into: Uint8Array, position: number): Promise<number> {
  let got = 0
  while (got < into.byteLength) {
    const { bytesRead } = await fh.read(into, got, into.byteLength - got, position + got)
    if (bytesRead === 0) break
    got += bytesRead
  }
  return got
}

/** The whole of a regular file of at most `maxBytes` bytes. */
export async function readRegularFile(path: string, maxBytes: number, onError: FileErrorFactory): Promise<Buffer> {
  const { fh, size } = await openRegularFile(path, onError)
  try {
    if (size > maxBytes) throw onError('too-large', `${path}: is ${size} bytes; a file of this kind may hold at most ${maxBytes}: refused`)
    const buf = Buffer.alloc(size)
    let got: number
    try {
      got = await readExactly(fh, buf, 0)
    } catch (e) {
      throw onError('io', describeFsError(path, e, 'read it'), e)
    }
    return got === size ? buf : buf.subarray(0, got)
  } finally {
    await fh.close().catch(() => undefined)
  }
}

/** Largest JSON side file of a model folder read (config.json, tokenizer_config.json, …): 64 MiB. */
export const MAX_JSON_FILE_BYTES = 64 << 20
/** Largest tokenizer.json read: 512 MiB (the largest published ones are a few tens of MiB). */
export const MAX_TOKENIZER_FILE_BYTES = 512 << 20
