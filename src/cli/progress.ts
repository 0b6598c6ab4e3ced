// How `evolve` shows a run while it goes, in one of three modes:
//   tty    stderr is a terminal: one line updated in place (\r, cleared first), the phase named
//          while a step warms up with the seconds it has taken so far (so that a long set-up, e.g.
//          dpo's response pool, is visibly alive), finished steps' lines replaced by the next phase
//   plain  stderr is a file or pipe: one line per step and per slow phase (set-up, evaluation,
//          report), never a \r
//   json   --json: one JSON object per event on stdout (phase, step, collapse, log, result);
//          stderr stays silent
import type { DriveEvent } from '../methods/common/driver.js'

export type ProgressMode = 'tty' | 'plain' | 'json'

export interface TextSink {
  write(text: string): unknown
  isTTY?: boolean
  columns?: number
}

export function progressMode(json: boolean, stderr: TextSink): ProgressMode {
  return json ? 'json' : stderr.isTTY ? 'tty' : 'plain'
}

export class Progress {
  /** Whether the tty line holds text not yet ended by a newline. */
  private pending = false
  /** The tty phase being shown and its clock (redrawn every second). */
  private ticker: { text: string; since: number; timer: ReturnType<typeof setInterval> } | null = null
  /** The last step's line (tty: kept after the phase that follows it, so that its numbers stay in view). */
  private lastStep = ''

  constructor(
    readonly mode: ProgressMode,
    private readonly method: string,
    private readonly err: TextSink,
    private readonly out: TextSink,
  ) {}

  private json(event: string, fields: object): void {
    this.out.write(JSON.stringify({ event, method: this.method, ...fields }) + '\n')
  }

  /** The tty line, replaced (cut to the terminal's width so that it never wraps). */
  private update(text: string): void {
    const width = this.err.columns && this.err.columns > 20 ? this.err.columns - 1 : 160
    this.err.write(`\r\x1b[2K${text.length > width ? text.slice(0, width - 1) + '…' : text}`)
    this.pending = true
  }

  private showPhase(phase: string): void {
    this.stopTicker()
    const since = Date.now()
    const text = (clock: string) => `${phase}${clock}${this.lastStep ? ` · last: ${this.lastStep}` : ''}`
    const timer = setInterval(() => this.update(text(` ${Math.round((Date.now() - since) / 1000)} s`)), 1000)
    timer.unref()
    this.ticker = { text: phase, since, timer }
    this.update(text(''))
  }

  private stopTicker(): void {
    if (this.ticker) clearInterval(this.ticker.timer)
    this.ticker = null
  }

  /** A line that stays (ends the tty line first). */
  private permanent(text: string): void {
    this.stopTicker()
    if (this.pending) this.err.write('\n')
    this.pending = false
    this.err.write(text + '\n')
  }

  /** A phase of set-up the driver does not see (e.g. loading the model). */
  setup(phase: string): void {
    this.event({ event: 'phase', kind: 'setup', phase, step: 0, totalSteps: 0 })
  }

  /** A message of the method's set-up (a pool being built, an ensemble variant…). */
  log(line: string): void {
    if (this.mode === 'json') this.json('log', { line })
    else this.permanent(line)
  }

  event(e: DriveEvent): void {
    if (this.mode === 'json') {
      const { event, ...fields } = e
      this.json(event, fields)
      return
    }
    switch (e.event) {
      case 'phase':
        if (this.mode === 'tty') this.showPhase(`[${this.method}] ${e.phase}…`)
        else if (e.kind !== 'step' && e.kind !== 'checkpoint') this.permanent(`[${this.method}] ${e.phase}…`)
        return
      case 'step':
        if (this.mode === 'tty') {
          this.stopTicker()
          this.update(e.line)
          this.lastStep = e.line.slice(`[${this.method}] `.length)
        } else this.permanent(e.line)
        return
      case 'collapse':
        this.permanent(`[${this.method}] ⚠ ${e.check.message}${e.action === 'warn' ? ' (--on-collapse warn: going on)' : e.action === 'stop' ? ' (--on-collapse stop: stopping)' : ' (--on-collapse rollback: stopping, the best held-out checkpoint becomes the final model)'}`)
    }
  }

  /** Ends the tty line. */
  close(): void {
    this.stopTicker()
    if (this.pending) this.err.write('\n')
    this.pending = false
  }

  /** A message for the person at the terminal (stderr; a 'message' event in json mode). */
  message(text: string): void {
    if (this.mode === 'json') this.json('message', { text })
    else this.permanent(text)
  }

  /** The run's result: one JSON object in json mode, else the lines given (stdout). */
  result(fields: object, lines: readonly string[]): void {
    this.close()
    if (this.mode === 'json') this.json('result', fields)
    else for (const l of lines) this.out.write(l + '\n')
  }
}
