// Admission control for `autodidact serve`: one gate for streamed and unstreamed requests alike.
// A request asks for as many units as it has sequences (prompts × n) and runs once they fit under
// `maxSequences` (or, larger than that, once nothing else runs: it then runs alone); others wait in
// a FIFO queue of at most `maxQueue` requests. A full queue refuses at once with 429 (the client
// should back off); a request that waited `queueTimeoutMs` without room gets 503; a client that
// leaves while queued leaves the queue. The queue is FIFO so that a large request is not starved
// by a stream of small ones overtaking it.
import { ServeRequestError } from './errors.js'

export interface AdmissionOptions {
  /** Most sequences generating at once, streamed and unstreamed together. Default 1024. */
  maxSequences?: number
  /** Most requests waiting for room; more are refused 429. Default 256. */
  maxQueue?: number
  /** Longest wait for room before a 503. Default 60 s. */
  queueTimeoutMs?: number
}

export interface AdmissionStats {
  /** Sequences admitted and not yet released. */
  activeSequences: number
  /** Requests admitted and not yet released. */
  activeRequests: number
  /** Requests waiting. */
  waiting: number
  /** Refused because the queue was full (429). */
  refusedQueueFull: number
  /** Refused after waiting too long (503). */
  refusedTimeout: number
}

interface Waiter {
  sequences: number
  admit(): void
  refuse(e: unknown): void
}

export class Admission {
  readonly stats: AdmissionStats = { activeSequences: 0, activeRequests: 0, waiting: 0, refusedQueueFull: 0, refusedTimeout: 0 }
  readonly maxSequences: number
  readonly maxQueue: number
  readonly queueTimeoutMs: number
  private readonly queue: Waiter[] = []
  private closed = false

  constructor(options: AdmissionOptions = {}) {
    this.maxSequences = options.maxSequences ?? 1024
    this.maxQueue = options.maxQueue ?? 256
    this.queueTimeoutMs = options.queueTimeoutMs ?? 60_000
  }

  /** Waits until `sequences` fit, then resolves with the function that gives them back (call it once). */
  acquire(sequences: number, signal: AbortSignal): Promise<() => void> {
    if (this.closed) return Promise.reject(new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down'))
    if (signal.aborted) return Promise.reject(signal.reason ?? new Error('aborted'))
    if (this.queue.length === 0 && this.fits(sequences)) return Promise.resolve(this.take(sequences))
    if (this.queue.length >= this.maxQueue) {
      this.stats.refusedQueueFull++
      return Promise.reject(
        new ServeRequestError(429, 'too_many_requests', `the server is at capacity (${this.stats.activeSequences} sequences running, ${this.queue.length} requests queued): retry later`),
      )
    }
    return new Promise((resolve, reject) => {
      const leave = () => {
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        const at = this.queue.indexOf(waiter)
        if (at >= 0) this.queue.splice(at, 1)
        this.stats.waiting = this.queue.length
      }
      const waiter: Waiter = {
        sequences,
        admit: () => {
          leave()
          resolve(this.take(sequences))
        },
        refuse: (e) => {
          leave()
          reject(e)
        },
      }
      const onAbort = () => {
        leave()
        reject(signal.reason ?? new Error('aborted'))
        this.pump() // the head may have been the one blocking the rest
      }
      const timer = setTimeout(() => {
        leave()
        this.stats.refusedTimeout++
        reject(new ServeRequestError(503, 'server_overloaded', `no room for this request within ${this.queueTimeoutMs} ms: the server is overloaded, retry later`))
        this.pump()
      }, this.queueTimeoutMs)
      timer.unref()
      signal.addEventListener('abort', onAbort, { once: true })
      this.queue.push(waiter)
      this.stats.waiting = this.queue.length
    })
  }

  /** Refuses every waiting request (503); running ones finish and release as usual. */
  close(): void {
    this.closed = true
    const reason = new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down')
    for (const w of this.queue.slice()) w.refuse(reason)
    this.stats.waiting = 0
  }

  private fits(sequences: number): boolean {
    return this.stats.activeRequests === 0 || this.stats.activeSequences + sequences <= this.maxSequences
  }

  private take(sequences: number): () => void {
    this.stats.activeSequences += sequences
    this.stats.activeRequests++
    let released = false
    return () => {
      if (released) return
      released = true
      this.stats.activeSequences -= sequences
      this.stats.activeRequests--
      this.pump()
    }
  }

  /** Admits queued requests in order while the head fits. */
  private pump(): void {
    while (this.queue.length && this.fits(this.queue[0].sequences)) this.queue[0].admit()
  }
}
