// Crash-safe file writes for resumable state (replay buffer, UID calibration): write a temporary
// file in the same directory, fsync it, then rename over the target. A reader sees either the old
// file or the new one, never a half-written one.

import { randomBytes } from 'node:crypto'
import { open, rename, unlink } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'

/** Write `data` to `path` atomically (temp file + fsync + rename). */
export async function writeFileAtomic(path: string, data: string | Uint8Array): Promise<void> {
  const tmp = join(
    dirname(path),
    `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`,
  )
  let handle
  try {
    handle = await open(tmp, 'wx', 0o644)
    await handle.writeFile(data)
    await handle.sync()
    await handle.close()
    handle = undefined
    await rename(tmp, path)
  } catch (err) {
    if (handle !== undefined) await handle.close().catch(() => {})
    await unlink(tmp).catch(() => {})
    throw err
  }
}

/** JSON.stringify `value` and write it atomically; a trailing newline is added. */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(value) + '\n')
}
