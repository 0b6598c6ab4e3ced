// File-system errors and file kinds in words, for messages that name the file and say what went
// wrong without a bare errno string. Used by the readers (src/engine/hf/files.ts) and the atomic
// writers (src/util/atomic.ts) alike.
import type { Stats } from 'node:fs'

/** What a non-regular file is, in words. */
export function fileKind(st: Stats): string {
  if (st.isDirectory()) return 'a directory'
  if (st.isFIFO()) return 'a FIFO (named pipe)'
  if (st.isCharacterDevice()) return 'a character device'
  if (st.isBlockDevice()) return 'a block device'
  if (st.isSocket()) return 'a socket'
  if (st.isSymbolicLink()) return 'a symbolic link'
  return 'not a regular file'
}

const WORDS: Record<string, string> = {
  ENOENT: 'no such file',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EISDIR: 'is a directory',
  ENOTDIR: 'a parent of it is not a directory',
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'the file system is read-only',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files',
  EIO: 'input/output error',
  EFBIG: 'the file would pass the size this process may write (ulimit -f) or the file system allows',
  ENXIO: 'not a regular file (a socket or an unconnected device)',
  ELOOP: 'too many levels of symbolic links',
}

/** The system error code of `e` (`"ENOSPC"`, …), or null when it is not a system error. */
export function fsErrorCode(e: unknown): string | null {
  const code = (e as NodeJS.ErrnoException)?.code
  return typeof code === 'string' && code.startsWith('E') ? code : null
}

/** Why a file operation failed, in words (the error's own message for codes without words). */
export function fsErrorWords(e: unknown): string {
  const code = fsErrorCode(e)
  return (code && WORDS[code]) ?? ((e as Error)?.message ?? String(e))
}

/** A system error in words, with the file named: `PATH: cannot VERB: why`. */
export function describeFsError(path: string, e: unknown, verb: string): string {
  return `${path}: cannot ${verb}: ${fsErrorWords(e)}`
}
