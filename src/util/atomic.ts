// Atomic file writes, the one implementation for the whole library: write a temporary file in the
// destination's directory, fsync it, rename it over the destination, fsync the directory. A crash
// or an error leaves either the old file or the new one, never a half-written one, and no
// temporary behind: an error removes it, a signal handler can (removeLiveTempsSync), and a later
// write removes what a kill -9 left (removeStaleTemps). Targets that are not regular files are
// refused (checkOutputTarget). A failed write is an OutputFileError naming the file and the system
// error in words (ENOSPC, EACCES, …), never a bare errno message.

import { randomBytes } from 'node:crypto'
import { rmSync } from 'node:fs'
import { lstat, open, readdir, rename, unlink, type FileHandle } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'

import { AutodidactError, OutputFileError, type OutputFileReason } from '../engine/errors.js'
import { fileKind, fsErrorCode, fsErrorWords } from './fs-words.js'

const REASONS: Record<string, OutputFileReason> = { ENOSPC: 'no-space', EDQUOT: 'no-space', EACCES: 'permission', EPERM: 'permission', EROFS: 'permission' }

/**
 * A system error while writing `file` as an OutputFileError naming it (`cannot VERB FILE: why
 * (CODE)`); this library's typed errors and errors that are not system errors pass through unchanged.
 */
export function fileWriteError(err: unknown, file: string, verb = 'write'): unknown {
  const code = fsErrorCode(err)
  if (err instanceof AutodidactError || code === null) return err
  return new OutputFileError(file, REASONS[code] ?? 'io', `cannot ${verb} ${file}: ${fsErrorWords(err)} (${code})`, code, { cause: err })
}

// ---------------------------------------------------------------- temporaries: named, tracked, cleaned

/** Temporary files and folders this process is writing, removed on commit or discard; what a signal handler cleans. */
const liveTemps = new Set<string>()

/** Marks a temporary path as this process's to clean up should it be stopped by a signal. */
export function registerTemp(path: string): void {
  liveTemps.add(path)
}

export function unregisterTemp(path: string): void {
  liveTemps.delete(path)
}

/**
 * Removes, synchronously, every temporary file and folder this process is still writing: for a
 * SIGINT/SIGTERM handler, so that an interrupted write leaves no hidden temporary behind.
 */
export function removeLiveTempsSync(): void {
  for (const p of liveTemps) {
    try {
      rmSync(p, { recursive: true, force: true })
    } catch {
      // best effort: the process is going away
    }
  }
  liveTemps.clear()
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * Removes temporary siblings of `target` (tempPathFor's `.<name>.<pid>.<tag>.tmp`) whose process no
 * longer exists: what a kill -9 in the middle of a write leaves. Returns the paths removed.
 */
export async function removeStaleTemps(target: string): Promise<string[]> {
  const dir = dirname(target)
  const name = basename(target).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const pattern = new RegExp(`^\\.${name}\\.(\\d+)\\.[0-9a-f]{12}\\.tmp$`)
  const removed: string[] = []
  for (const entry of await readdir(dir).catch(() => [] as string[])) {
    const m = pattern.exec(entry)
    if (!m || Number(m[1]) === process.pid || isAlive(Number(m[1]))) continue
    await unlink(join(dir, entry)).then(
      () => removed.push(join(dir, entry)),
      () => undefined,
    )
  }
  return removed
}

/**
 * Refuses (OutputFileError 'not-regular') to write over anything but a regular file (`kind`
 * 'file') or a real folder ('directory'): a FIFO, device node, socket or symbolic link at the
 * target is never replaced (renaming over /dev/null as root would replace the device).
 */
export async function checkOutputTarget(target: string, kind: 'file' | 'directory' = 'file'): Promise<void> {
  let st
  try {
    st = await lstat(target)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return
    throw fileWriteError(e, target, 'inspect')
  }
  const ok = kind === 'file' ? st.isFile() : st.isDirectory()
  if (!ok) {
    throw new OutputFileError(target, 'not-regular', `${target}: is ${st.isFile() ? 'a regular file' : fileKind(st)}, not ${kind === 'file' ? 'a regular file' : 'a folder'}: refused, nothing was written`)
  }
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

// ---------------------------------------------------------------- writing

/**
 * Write a temporary file next to `target` through `fill`, fsync and close it, and return its
 * path without renaming it (for multi-file commits). On any error the temporary file is removed
 * and an OutputFileError naming `target` is thrown (for system errors).
 */
export async function writeTemp(target: string, fill: (fh: FileHandle) => Promise<void>): Promise<string> {
  const tmp = tempPathFor(target)
  let fh: FileHandle | undefined
  try {
    fh = await open(tmp, 'wx', 0o644)
    registerTemp(tmp)
    await fill(fh)
    await fh.sync()
    await fh.close()
    fh = undefined
    return tmp
  } catch (err) {
    await fh?.close().catch(() => undefined)
    await removeQuietly(tmp)
    unregisterTemp(tmp)
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
      unregisterTemp(tmp)
    }
  } catch (err) {
    const target = pairs[i]?.[1] ?? pairs[0][1]
    for (let j = i; j < pairs.length; j++) {
      await removeQuietly(pairs[j][0])
      unregisterTemp(pairs[j][0])
    }
    throw fileWriteError(err, target, 'rename into place')
  }
  const dirs = new Set(pairs.map(([, t]) => dirname(t)))
  for (const d of dirs) await fsyncDir(d)
}

/** Remove temporary files (after a failure before commit). */
export async function discardTemps(paths: Iterable<string>): Promise<void> {
  for (const p of paths) {
    await removeQuietly(p)
    unregisterTemp(p)
  }
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
