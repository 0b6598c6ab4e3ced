// Request batching for `autodidact serve`. Every request, streamed or not, joins the model's one
// running batch (src/engine/scheduler.ts: one matrix product per step for the rows of all calls):
// requests wait in a queue for `windowMs` after the first arrives, then every one of them enters
// the engine in the same tick, so they decode in the same steps as each other and as the requests
// already running; nothing waits for another call to finish. Admission (admission.ts) bounds how
// many sequences run and keeps room for short requests; the scheduler hands a finished row's slot
// to the next waiting sequence.
// Unstreamed requests are still merged into one call when their sampling options, n, max_tokens,
// stop strings and ignore_eos are identical (one prefill per shared prompt, fewer calls). Each
// request keeps its own seed (drawn when it gave none), sequence ids and abort signal through
// generate()'s `perPrompt`: a seeded request's samples equal Model.generate(prompts, { seed, n, … })
// exactly, whatever it was merged with, and a client that leaves stops its own rows. The call itself
// is aborted when every member has gone (or on shutdown). A streamed request gets one Model.stream
// per choice, each with the sequence id it has in generate(), so it streams the same samples.
// `maxInflight` (default: no cap) can still bound the unstreamed engine calls running at once;
// under a cap, when a call slot frees the cheapest waiting request (sequences × max_tokens) leads
// the next group, a request that has waited `agingMs` leads regardless, and long calls (above
// SHORT_REQUEST_COST) take at most maxInflight − 1 slots.
import { randomInt } from 'node:crypto'
import type { Completion, Model, StreamChunk } from '../engine/model.js'
import { SHORT_REQUEST_COST } from './admission.js'
import { ServeRequestError } from './errors.js'
import type { SamplingSpec } from './validate.js'

export interface BatchRequest {
  /** Encoded prompts. */
  prompts: number[][]
  n: number
  maxTokens: number
  sampling: SamplingSpec
  /** null: the server draws one and may merge the request with others. */
  seed: number | null
  stop: string[]
  /** End-of-sequence tokens do not end generation. */
  ignoreEos: boolean
  /** Top-K raw logits to record per token (0: none). */
  statsTopK: number
  signal: AbortSignal
}

export interface BatcherOptions {
  /** How long the first queued request waits for others to join it. Default 2 ms. */
  windowMs?: number
  /** Most sequences (prompts × n) merged into one engine call; also the engine's decode batch. Default 256. */
  maxBatch?: number
  /**
   * Most unstreamed engine generate() calls running at once. Default: no cap — every request joins
   * the model's running batch when its window closes (admission bounds the sequences).
   */
  maxInflight?: number
  /** Token ids that end a sequence (passed to the engine as stopTokenIds). */
  stopTokenIds: number[]
  /** A request waiting this long leads the next engine call, however costly. Default 2 s. */
  agingMs?: number
}

export interface BatcherStats {
  /** Unstreamed requests submitted. */
  requests: number
  /** Streamed requests submitted. */
  streamed: number
  /** Requests (streamed or not) whose engine calls are in the running batch now, and the most at once. */
  running: number
  peakRunning: number
  /** Engine generate() calls made. */
  batches: number
  /** Most requests merged into one call so far. */
  largestBatch: number
  /** Requests whose client left (while queued or running). */
  abandoned: number
  /** Engine calls that were aborted (every member gone, or shutdown). */
  engineAborts: number
  inflight: number
  queued: number
}

interface Job {
  req: BatchRequest
  /** The request's seed, or one drawn for it. */
  seed: number
  key: string
  sequences: number
  /** sequences × max_tokens: what the engine call costs at most. */
  cost: number
  queuedAt: number
  settled: boolean
  resolve(v: Completion[][]): void
  reject(e: unknown): void
  cleanup(): void
}

/** A streamed request waiting for the window: it starts (its streams enter the running batch) or fails. */
interface StreamJob {
  start(): void
  fail(e: unknown): void
}

/** What a request asks of the engine beyond its prompts, seeds and signals (shared by generate() and stream()). */
function engineOptions(r: BatchRequest, stopTokenIds: number[]) {
  const s = r.sampling
  return {
    maxTokens: r.maxTokens,
    temperature: s.temperature,
    topK: s.topK,
    topP: s.topP,
    minP: s.minP,
    presencePenalty: s.presencePenalty,
    frequencyPenalty: s.frequencyPenalty,
    repetitionPenalty: s.repetitionPenalty,
    stop: r.stop,
    stopTokenIds: r.ignoreEos ? [] : stopTokenIds,
  }
}

const shuttingDown = () => new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down')

/** The part of a request that decides whether it can share an engine call with another. */
function batchKey(r: BatchRequest): string {
  const s = r.sampling
  return JSON.stringify([r.n, r.maxTokens, s.temperature, s.topK, s.topP, s.minP, s.presencePenalty, s.frequencyPenalty, s.repetitionPenalty, r.ignoreEos, [...r.stop].sort()])
}

export class Batcher {
  readonly stats: BatcherStats = { requests: 0, streamed: 0, running: 0, peakRunning: 0, batches: 0, largestBatch: 0, abandoned: 0, engineAborts: 0, inflight: 0, queued: 0 }
  private readonly queue: Job[] = []
  /** Streamed requests waiting for the window to close. */
  private readonly streamQueue: StreamJob[] = []
  private readonly running = new Set<AbortController>()
  private readonly settledCalls = new Set<Promise<void>>()
  private timer: NodeJS.Timeout | null = null
  private closed = false
  private readonly windowMs: number
  private readonly maxBatch: number
  private readonly maxInflight: number
  private readonly agingMs: number
  /** Engine calls running whose cost is above SHORT_REQUEST_COST. */
  private longInflight = 0

  constructor(
    private readonly model: Model,
    private readonly options: BatcherOptions,
  ) {
    this.windowMs = options.windowMs ?? 2
    this.maxBatch = options.maxBatch ?? 256
    this.maxInflight = options.maxInflight ?? Infinity
    this.agingMs = options.agingMs ?? 2_000
  }

  /** Completions per prompt of the request (result[promptIndex][sampleIndex]). */
  submit(req: BatchRequest): Promise<Completion[][]> {
    if (this.closed) return Promise.reject(shuttingDown())
    this.stats.requests++
    return new Promise<Completion[][]>((resolve, reject) => {
      const job: Job = {
        req,
        seed: req.seed ?? randomInt(0, 2 ** 47),
        key: batchKey(req),
        sequences: req.prompts.length * req.n,
        cost: req.prompts.length * req.n * req.maxTokens,
        queuedAt: performance.now(),
        settled: false,
        resolve: (v) => {
          if (job.settled) return
          job.settled = true
          job.cleanup()
          resolve(v)
        },
        reject: (e) => {
          if (job.settled) return
          job.settled = true
          job.cleanup()
          reject(e)
        },
        cleanup: () => req.signal.removeEventListener('abort', onAbort),
      }
      const onAbort = () => {
        this.stats.abandoned++
        const at = this.queue.indexOf(job)
        if (at >= 0) {
          this.queue.splice(at, 1)
          this.stats.queued = this.queue.length
        }
        job.reject(req.signal.reason ?? new Error('aborted'))
      }
      if (req.signal.aborted) {
        this.stats.abandoned++
        reject(req.signal.reason ?? new Error('aborted'))
        return
      }
      req.signal.addEventListener('abort', onAbort, { once: true })
      this.queue.push(job)
      this.stats.queued = this.queue.length
      this.armWindow()
    })
  }

  /**
   * The streams of a streamed request, one per choice (result[promptIndex][sampleIndex]), with the
   * sequence ids generate() gives them. They enter the running batch when the window closes, in the
   * same tick as the window's unstreamed requests. The caller iterates every stream to its end.
   */
  stream(req: BatchRequest): Promise<AsyncGenerator<StreamChunk, Completion, void>[][]> {
    if (this.closed) return Promise.reject(shuttingDown())
    this.stats.streamed++
    return new Promise((resolve, reject) => {
      if (req.signal.aborted) {
        this.stats.abandoned++
        reject(req.signal.reason ?? new Error('aborted'))
        return
      }
      const onAbort = () => {
        this.stats.abandoned++
        this.streamQueue.splice(this.streamQueue.indexOf(job), 1)
        job.fail(req.signal.reason ?? new Error('aborted'))
      }
      const job: StreamJob = {
        start: () => {
          req.signal.removeEventListener('abort', onAbort)
          resolve(this.openStreams(req))
        },
        fail: (e) => {
          req.signal.removeEventListener('abort', onAbort)
          reject(e)
        },
      }
      req.signal.addEventListener('abort', onAbort, { once: true })
      this.streamQueue.push(job)
      this.armWindow()
    })
  }

  /** The first request waiting starts the window. */
  private armWindow(): void {
    if (!this.timer) this.timer = setTimeout(() => this.pump(), this.windowMs)
  }

  private openStreams(req: BatchRequest): AsyncGenerator<StreamChunk, Completion, void>[][] {
    const seed = req.seed ?? randomInt(0, 2 ** 47)
    let open = req.prompts.length * req.n
    this.enterRunning(1)
    const ended = () => {
      if (--open === 0) this.leaveRunning(1)
    }
    const options = { ...engineOptions(req, this.options.stopTokenIds), seed, stats: { topK: req.statsTopK }, signal: req.signal }
    return req.prompts.map((prompt, p) =>
      Array.from({ length: req.n }, (_, s) => tracked(this.model.stream(prompt, { ...options, sequenceOffset: p * req.n + s }), ended)),
    )
  }

  private enterRunning(requests: number): void {
    this.stats.running += requests
    this.stats.peakRunning = Math.max(this.stats.peakRunning, this.stats.running)
  }

  private leaveRunning(requests: number): void {
    this.stats.running -= requests
  }

  /** Starts engine calls for queued groups while there is room, and every waiting stream. */
  private pump(): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    while (!this.closed && this.queue.length && this.stats.inflight < this.maxInflight) {
      const group = this.takeGroup()
      if (!group) break
      this.dispatch(group)
    }
    if (!this.closed) for (const job of this.streamQueue.splice(0)) job.start()
  }

  /** Whether a long call may start: one slot stays for short calls (when there is more than one). */
  private longSlotFree(): boolean {
    return this.maxInflight === 1 || this.longInflight < this.maxInflight - 1
  }

  /** The request that leads the next call (null: only long ones wait and their slots are taken): the oldest eligible if it has waited agingMs, else the cheapest. */
  private leader(): Job | null {
    const eligible = this.longSlotFree() ? this.queue : this.queue.filter((j) => j.cost <= SHORT_REQUEST_COST)
    if (eligible.length === 0) return null
    const oldest = eligible[0]
    if (performance.now() - oldest.queuedAt >= this.agingMs) return oldest
    return eligible.reduce((best, j) => (j.cost < best.cost ? j : best), oldest)
  }

  /** The leading request and the queued ones sharing its key (oldest first), up to maxBatch sequences (and, in the short slot, SHORT_REQUEST_COST). */
  private takeGroup(): Job[] | null {
    const first = this.leader()
    if (!first) return null
    const costCap = this.longSlotFree() ? Infinity : SHORT_REQUEST_COST
    const group: Job[] = [first]
    let sequences = first.sequences
    let cost = first.cost
    for (const job of this.queue) {
      if (job === first || job.key !== first.key || sequences + job.sequences > this.maxBatch || cost + job.cost > costCap) continue
      group.push(job)
      sequences += job.sequences
      cost += job.cost
    }
    const taken = new Set(group)
    this.queue.splice(0, this.queue.length, ...this.queue.filter((j) => !taken.has(j)))
    this.stats.queued = this.queue.length
    return group
  }

  private dispatch(group: Job[]): void {
    const controller = new AbortController()
    // The engine call stops only when every member has gone.
    const memberGone = () => {
      if (group.every((j) => j.req.signal.aborted)) controller.abort()
    }
    for (const j of group) j.req.signal.addEventListener('abort', memberGone, { once: true })
    this.running.add(controller)
    const long = group.reduce((a, j) => a + j.cost, 0) > SHORT_REQUEST_COST
    if (long) this.longInflight++
    this.stats.inflight++
    this.enterRunning(group.length)
    this.stats.batches++
    this.stats.largestBatch = Math.max(this.stats.largestBatch, group.length)
    const call = this.generate(group, controller.signal)
      .then(
        (perPrompt) => {
          let p = 0
          for (const j of group) {
            j.resolve(perPrompt.slice(p, p + j.req.prompts.length))
            p += j.req.prompts.length
          }
        },
        (e) => {
          for (const j of group) j.reject(e)
        },
      )
      .finally(() => {
        if (controller.signal.aborted) this.stats.engineAborts++
        for (const j of group) j.req.signal.removeEventListener('abort', memberGone)
        this.running.delete(controller)
        this.settledCalls.delete(call)
        if (long) this.longInflight--
        this.stats.inflight--
        this.leaveRunning(group.length)
        this.pump()
      })
    this.settledCalls.add(call)
  }

  private generate(group: Job[], signal: AbortSignal): Promise<Completion[][]> {
    const head = group[0].req
    return this.model.generate(
      group.flatMap((j) => j.req.prompts),
      {
        ...engineOptions(head, this.options.stopTokenIds),
        n: head.n,
        perPrompt: group.flatMap((j) => j.req.prompts.map((_, q) => ({ seed: j.seed, sequenceOffset: q * head.n, signal: j.req.signal }))),
        stats: { topK: Math.max(...group.map((j) => j.req.statsTopK)) },
        signal,
        maxBatch: this.maxBatch,
      },
    )
  }

  /** Refuses queued requests (503), aborts running engine calls, and resolves once they have returned (running streams end with their requests' signals). */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    for (const j of this.queue.splice(0)) j.reject(shuttingDown())
    for (const j of this.streamQueue.splice(0)) j.fail(shuttingDown())
    this.stats.queued = 0
    for (const c of this.running) c.abort()
    await Promise.allSettled([...this.settledCalls])
  }
}

/** `gen` passed through; `ended` runs once it has finished, failed or been returned. */
async function* tracked<T, R>(gen: AsyncGenerator<T, R, void>, ended: () => void): AsyncGenerator<T, R, void> {
  try {
    return yield* gen
  } finally {
    ended()
  }
}
