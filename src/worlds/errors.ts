// Typed errors of task worlds: a data set record that cannot be read (naming the file, the line and
// the field), and a world that cannot be loaded (an unknown name, a module that does not export
// the task interface).
import { AutodidactError } from '../engine/errors.js'

/** A data set file or one of its records is unreadable or malformed. */
export class DataError extends AutodidactError {
  readonly file: string
  /** 1-based line of the record, or null when the whole file is at fault. */
  readonly line: number | null
  /** The offending field, or null. */
  readonly field: string | null

  constructor(file: string, line: number | null, field: string | null, message: string, options?: { cause?: unknown }) {
    super('DATA_ERROR', message, options)
    this.file = file
    this.line = line
    this.field = field
  }
}

/** A world cannot be loaded: an unknown name, or a module that does not export the task interface. */
export class WorldError extends AutodidactError {
  /** The world as named (`--world`). */
  readonly world: string
  /** What is missing or wrong (e.g. `jzero.parseTask`), or null. */
  readonly member: string | null

  constructor(world: string, member: string | null, message: string, options?: { cause?: unknown }) {
    super('WORLD_ERROR', message, options)
    this.world = world
    this.member = member
  }
}
