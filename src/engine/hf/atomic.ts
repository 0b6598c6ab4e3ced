// Atomic file writes: write a temporary file in the destination's directory, fsync it, rename it
// over the destination, fsync the directory. A crash or an error leaves either the old file or the
// new one, never a half-written one, and no temporary file behind.

import { randomBytes } from 'node:crypto'
import { open, rename, unlink, type FileHandle } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'

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
 * and the error rethrown.
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
    throw err
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
    for (let j = i; j < pairs.length; j++) await removeQuietly(pairs[j][0])
    throw err
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
