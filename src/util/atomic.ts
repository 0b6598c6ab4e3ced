// Atomic file writes, the one implementation for the whole library: write a temporary file in the
// destination's directory, fsync it, rename it over the destination, fsync the directory. A crash
// or an error leaves either the old file or the new one, never a half-written one, and no
// temporary file behind. A failed write is a FileWriteError naming the file it was writing and the
// system error (ENOSPC, EACCES, …), never a bare errno message.

import { randomBytes } from 'node:crypto'
import { open, rename, unlink, type FileHandle } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { AutodidactError, FileWriteError } from '../engine/errors.js'

const REASONS: Record<string, string> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EROFS: 'read-only file system',
  ENOENT: 'its folder does not exist',
  ENOTDIR: 'a parent path is not a folder',
  EISDIR: 'it is a folder',
  EMFILE: 'too many open files',
  EIO: 'input/output error',
}

/** `err` as a FileWriteError naming `file` (typed errors of this library pass through unchanged). */
export function fileWriteError(err: unknown, file: string): Error {
  if (err instanceof AutodidactError) return err
  const code = typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : null
  const why = code ? `${REASONS[code] ?? (err as Error).message} (${code})` : String((err as Error)?.message ?? err)
  return new FileWriteError(file, code, `cannot write ${file}: ${why}`, { cause: err })
}

/** A temporary sibling path of `target`, hidden, unique to this process and call. */
export function tempPathFor(target: string): string {
  const tag = `${process.pid}.${randomBytes(6).toString('hex')}`
  return join(dirname(target), `.${basename(target)}.${tag}.tmp`)
}

async function removeQuietly(path: string): Promise<void> {
  try {
    await unlink(path)
  } catch {
    // already gone
  }
}

/** fsync a directory so a rename inside it is durable. Best effort: not every platform allows it. */
export async function fsyncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined
  try {
    fh = await open(dir, 'r')
    await fh.sync()
  } catch {
    // Windows and some file systems refuse to open or sync directories.
  } finally {
    await fh?.close().catch(() => undefined)
  }
}

/**
 * Write a temporary file next to `target` through `fill`, fsync and close it, and return its
 * path without renaming it (for multi-file commits). On any error the temporary file is removed
 * and a FileWriteError naming `target` is thrown.
 */
export async function writeTemp(target: string, fill: (fh: FileHandle) => Promise<void>): Promise<string> {
  const tmp = tempPathFor(target)
  let fh: FileHandle | undefined
  try {
    fh = await open(tmp, 'wx', 0o644)
    await fill(fh)
    await fh.sync()
    await fh.close()
    fh = undefined
    return tmp
  } catch (err) {
    await fh?.close().catch(() => undefined)
    await removeQuietly(tmp)
    throw fileWriteError(err, target)
  }
}

/** Rename finished temporary files onto their targets; on failure remove the temporaries left. */
export async function commitTemps(pairs: ReadonlyArray<readonly [tmp: string, target: string]>): Promise<void> {
  let i = 0
  try {
    for (; i < pairs.length; i++) {
      const [tmp, target] = pairs[i]
      await rename(tmp, target)
    }
  } catch (err) {
    const target = pairs[i]?.[1] ?? pairs[0][1]
    for (let j = i; j < pairs.length; j++) await removeQuietly(pairs[j][0])
    throw fileWriteError(err, target)
  }
  const dirs = new Set(pairs.map(([, t]) => dirname(t)))
  for (const d of dirs) await fsyncDir(d)
}

/** Remove temporary files (after a failure before commit). */
export async function discardTemps(paths: Iterable<string>): Promise<void> {
  for (const p of paths) await removeQuietly(p)
}

/** Atomically replace `target` with what `fill` writes. */
export async function writeAtomic(target: string, fill: (fh: FileHandle) => Promise<void>): Promise<void> {
  const tmp = await writeTemp(target, fill)
  await commitTemps([[tmp, target]])
}

/** Atomically replace `target` with `data`. */
export async function writeFileAtomic(target: string, data: string | Uint8Array): Promise<void> {
  await writeAtomic(target, async (fh) => {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data
    await writeAll(fh, bytes)
  })
}

/** JSON.stringify `value` (indented by `indent` spaces; 0 = one line) and write it atomically with a trailing newline. */
export async function writeJsonAtomic(path: string, value: unknown, indent = 0): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(value, null, indent || undefined) + '\n')
}

const WRITE_CHUNK = 1 << 26

/** Write every byte of `bytes` (FileHandle.write may write less than asked). */
export async function writeAll(fh: FileHandle, bytes: Uint8Array): Promise<void> {
  let off = 0
  while (off < bytes.byteLength) {
    const len = Math.min(bytes.byteLength - off, WRITE_CHUNK)
    const { bytesWritten } = await fh.write(bytes, off, len)
    if (bytesWritten <= 0) throw new Error('write returned 0 bytes')
    off += bytesWritten
  }
}
