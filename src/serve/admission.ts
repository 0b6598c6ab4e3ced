// Admission control for `autodidact serve`: one gate for streamed and unstreamed requests alike.
// A request asks for as many units as it has sequences (prompts × n) and runs once they fit under
// `maxSequences` (or, larger than that, once nothing else runs: it then runs alone); others wait in
// a queue of at most `maxQueue` requests. A full queue refuses at once with 429 (the client should
// back off); a request that waited `queueTimeoutMs` without room gets 503; a client that leaves
// while queued leaves the queue.
//
// Long requests (sequences × max_tokens above `shortCost`) may together hold only the capacity
// outside a reserve kept for short ones, so a short request finds room while long ones run. When
// room frees, waiting requests are admitted cheapest first (sequences × max_tokens; arrival order
// among equals), each as soon as it fits — a short one need not wait behind long ones, nor behind a
// burst of costlier ones; once the oldest has waited `reserveAfterMs` it goes first, and others may
// pass it only if short and inside the reserve, so no request starves.
import { ServeRequestError } from './errors.js'

export interface AdmissionOptions {
  /** Most sequences generating at once, streamed and unstreamed together. Default 1024. */
  maxSequences?: number
  /** Most requests waiting for room; more are refused 429. Default 256. */
  maxQueue?: number
  /** Longest wait for room before a 503. Default 60 s. */
  queueTimeoutMs?: number
  /** How long the oldest waiting request lets later ones go first. Default 2 s. */
  reserveAfterMs?: number
  /** Fraction of maxSequences that long requests leave to short ones. Default 0.25. */
  shortReserve?: number
  /** Largest sequences × max_tokens of a short request. Default SHORT_REQUEST_COST. */
  shortCost?: number
}

/** Default largest sequences × max_tokens of a short request (e.g. 4 samples of 1,024 tokens). */
export const SHORT_REQUEST_COST = 4096

export interface AdmissionStats {
  /** Sequences admitted and not yet released. */
  activeSequences: number
  /** Of those, sequences of short requests. */
  activeShortSequences: number
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
  cost: number
  short: boolean
  since: number
  admit(): void
  refuse(e: unknown): void
}

export class Admission {
  readonly stats: AdmissionStats = { activeSequences: 0, activeShortSequences: 0, activeRequests: 0, waiting: 0, refusedQueueFull: 0, refusedTimeout: 0 }
  readonly maxSequences: number
  readonly maxQueue: number
  readonly queueTimeoutMs: number
  readonly reserveAfterMs: number
  /** Sequences long requests leave free. */
  readonly reserve: number
  readonly shortCost: number
  private readonly queue: Waiter[] = []
  private closed = false

  constructor(options: AdmissionOptions = {}) {
    this.maxSequences = options.maxSequences ?? 1024
    this.maxQueue = options.maxQueue ?? 256
    this.queueTimeoutMs = options.queueTimeoutMs ?? 60_000
    this.reserveAfterMs = options.reserveAfterMs ?? 2_000
    this.reserve = Math.floor(this.maxSequences * (options.shortReserve ?? 0.25))
    this.shortCost = options.shortCost ?? SHORT_REQUEST_COST
  }

  /**
   * Waits until `sequences` fit, then resolves with the function that gives them back (call it
   * once). `cost` (sequences × max_tokens) decides whether the request is short.
   */
  acquire(sequences: number, signal: AbortSignal, cost = sequences): Promise<() => void> {
    if (this.closed) return Promise.reject(new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down'))
    if (signal.aborted) return Promise.reject(signal.reason ?? new Error('aborted'))
    const short = cost <= this.shortCost
    if (this.fits(sequences, short, this.headReserved())) return Promise.resolve(this.take(sequences, short))
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
        cost,
        short,
        since: performance.now(),
        admit: () => {
          leave()
          resolve(this.take(sequences, short))
        },
        refuse: (e) => {
          leave()
          reject(e)
        },
      }
      const onAbort = () => {
        waiter.refuse(signal.reason ?? new Error('aborted'))
        this.pump() // it may have been the one holding the others back
      }
      const timer = setTimeout(() => {
        this.stats.refusedTimeout++
        waiter.refuse(new ServeRequestError(503, 'server_overloaded', `no room for this request within ${this.queueTimeoutMs} ms: the server is overloaded, retry later`))
        this.pump()
      }, this.queueTimeoutMs)
      timer.unref()
      signal.addEventListener('abort', onAbort, { once: true })
      this.queue.push(waiter)
      this.stats.waiting = this.queue.length
    })
  }

  /** Refuses every waiting request (503) and anything after; running ones finish and release as usual. */
  close(): void {
    this.closed = true
    const reason = new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down')
    for (const w of this.queue.slice()) w.refuse(reason)
  }

  /**
   * Whether a request fits now. Alone it always does; a long one must leave the short reserve free;
   * past a reserved (long-waiting) head, only a short one fits, and only inside the reserve.
   */
  private fits(sequences: number, short: boolean, pastReservedHead: boolean): boolean {
    const s = this.stats
    if (s.activeRequests === 0) return true
    if (s.activeSequences + sequences > this.maxSequences) return false
    if (pastReservedHead) return short && s.activeShortSequences + sequences <= this.reserve
    return short || s.activeSequences + sequences <= this.maxSequences - this.reserve
  }

  /** Whether the oldest waiting request has waited long enough that only the reserve may pass it. */
  private headReserved(): boolean {
    return this.queue.length > 0 && performance.now() - this.queue[0].since >= this.reserveAfterMs
  }

  private take(sequences: number, short: boolean): () => void {
    const s = this.stats
    s.activeSequences += sequences
    if (short) s.activeShortSequences += sequences
    s.activeRequests++
    let released = false
    return () => {
      if (released) return
      released = true
      s.activeSequences -= sequences
      if (short) s.activeShortSequences -= sequences
      s.activeRequests--
      this.pump()
    }
  }

  /** Admits waiting requests that fit: a reserved head first, then cheapest first (the oldest among equals). */
  private pump(): void {
    if (this.queue.length === 0) return
    const order = this.queue.slice().sort((a, b) => a.cost - b.cost || a.since - b.since)
    if (this.headReserved()) order.unshift(...order.splice(order.indexOf(this.queue[0]), 1))
    for (const w of order) if (this.fits(w.sequences, w.short, w !== this.queue[0] && this.headReserved())) w.admit()
  }
}
