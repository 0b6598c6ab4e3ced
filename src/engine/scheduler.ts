// Continuous batching for one model: every generate() and stream() call on a model hands its
// sequences to the model's one DecodeScheduler, whose single decode loop steps every live sequence
// of every call together. A finished sequence's slot goes to the next waiting one at the next step
// (no waves), a call that arrives while another decodes joins the running batch, and a prompt's
// last-but-one tokens are prefilled in the same engine step as the others' decode rows.
//
// The n samples of a prompt share its prefix: one sample (the group's leader) prefills it, the
// others take it with copyPrefix — on a paged cache (the `step.pagedCache` verb, CPU) that shares
// the prefix's pages copy-on-write, on the slot layout it copies. Admission reserves, per sequence,
// the pages it can ever need (prompt + maxTokens; the group's shared full pages once per group),
// so a running step never finds the pool empty.
//
// Batch independence: a sample depends only on (seed, sequence id, position) through the
// engine's Philox keying and on its own slot's keys, so a sequence decodes the same tokens and
// statistics alone or inside any batch; test/engine/generate-batching.test.ts holds this.
import { freemem } from 'node:os'
import { InvalidArgumentError } from './errors.js'
import { positiveInt, type ResolvedSampling } from './options.js'
import type { ModelConfig } from './types.js'
import { isNativeError, type NativeCacheDescription, type NativeKVCache, type NativeModel, type NativeStepRequest, type NativeStepResult } from '../native.js'

/** One sequence a job decodes: its prompt, its sample's RNG keys and its own abort signal. */
export interface DecodeSequence {
  prompt: readonly number[]
  /** Sequences of one job with the same group share the prompt (its prefix KV). */
  group: number
  seed: number
  streamId: number
  signal: AbortSignal | undefined
  /** The LoRA adapter (engine index, −1: the base alone) its rows apply; a group shares one. */
  adapter: number
}

/** One generate() or stream() call, as the scheduler sees it. */
export interface DecodeJob<S extends DecodeSequence = DecodeSequence> {
  sequences: S[]
  /** Most of this job's sequences decoding at once (generate's maxBatch). */
  maxLive: number
  maxTokens: number
  topK: number
  sampling: ResolvedSampling
  signal?: AbortSignal
  /** A step's row for `seq`; returns true when the sequence has finished. */
  onRow(seq: S, result: NativeStepResult, row: number): boolean
  /** The sequence is done (aborted: its reason is 'abort'). */
  onFinish(seq: S, aborted: boolean): void
  /** The job failed; none of its sequences will report again. */
  onError(error: unknown): void
}

export interface SchedulerOptions {
  /** Most sequences in one engine step. Default 1024 on a paged cache, 256 on the slot layout. */
  maxRows?: number
  /** Positions per KV page (paged caches). Default 16. */
  pageSize?: number
  /** Bytes of KV cache the scheduler may hold (paged caches). Default min(4 GiB, free memory / 4), or AUTODIDACT_KV_CACHE_BYTES. */
  kvCacheBytes?: number
  /** false: the slot layout even where the backend pages (a fixed slot per row, prefixes copied). Default true. */
  paged?: boolean
}

export interface SchedulerStats {
  /** Engine steps run, and sequences admitted, since the scheduler was created. */
  steps: number
  admitted: number
  /** Most sequences in one step. */
  largestStep: number
  /** Steps that carried rows of more than one job. */
  sharedSteps: number
  /** Most jobs (generate() and stream() calls) whose rows shared one step. */
  largestStepCalls: number
  /** Most KV bytes prefix sharing saved at once, and bytes shared instead of copied in all (paged caches). */
  peakSharedBytes: number
  sharedBytesTotal: number
  /** The cache now (null while idle: the cache goes when the last sequence does). */
  cache: NativeCacheDescription | null
}

type RowState = 'prefill' | 'await-prefix' | 'decode'

interface Row<S extends DecodeSequence> {
  job: JobState<S>
  seq: S
  slot: number
  state: RowState
  /** The token this row feeds at its next decode step. */
  pending: number
  /** Pages reserved for this row alone. */
  pages: number
  group: GroupState<S>
  /** The leader whose prefill this row waits for. */
  leader: Row<S> | null
}

interface GroupState<S extends DecodeSequence> {
  /** Rows holding the prompt's prefix now. */
  holders: Set<Row<S>>
  /** Pages reserved once for the prefix's shared full pages while any holder lives. */
  sharedPages: number
}

interface JobState<S extends DecodeSequence> {
  job: DecodeJob<S>
  waiting: S[]
  live: number
  groups: Map<number, GroupState<S>>
  failed: boolean
}

/** The options' values checked (typed errors naming the option). */
export function checkSchedulerOptions(options: SchedulerOptions): void {
  positiveInt('pageSize', options.pageSize, 16, 1 << 16)
  positiveInt('maxRows', options.maxRows, 1, 1 << 20)
  positiveInt('kvCacheBytes', options.kvCacheBytes, 1)
  if (options.paged !== undefined && typeof options.paged !== 'boolean') throw new InvalidArgumentError('paged', 'paged must be a boolean')
}

/** Bytes of one KV page on the CPU backend (f32 keys and values of every layer). */
export function pageBytes(config: ModelConfig, pageSize: number): number {
  return config.numLayers * 2 * pageSize * config.numKvHeads * config.headDim * 4
}

function defaultKvBytes(): number {
  const env = process.env.AUTODIDACT_KV_CACHE_BYTES
  if (env !== undefined && env !== '') {
    const v = Number(env)
    if (!Number.isSafeInteger(v) || v <= 0) throw new InvalidArgumentError('AUTODIDACT_KV_CACHE_BYTES', `AUTODIDACT_KV_CACHE_BYTES must be a positive integer (bytes), got ${env}`)
    return v
  }
  return Math.min(4 * 2 ** 30, Math.floor(freemem() / 4))
}

const PAGED_CAPACITY = 1 << 30  // a paged slot's length limit: pages, not capacity, bound memory
const MAX_PAGES = 1 << 24

export class DecodeScheduler {
  private jobs: JobState<DecodeSequence>[] = []
  private rows: Row<DecodeSequence>[] = []
  private freeSlots: number[] = []
  private cache: NativeKVCache | null = null
  private slotCount = 0
  private capacity = 0
  private budgetPages = 0
  private reservedPages = 0
  private running = false
  private paged: boolean
  private readonly pageSize: number
  private readonly rowsOption: number | undefined
  private readonly kvBytes: number
  /** Most rows in one step: the option, else 1024 on a paged cache and 256 on the slot layout. */
  private get maxRows(): number {
    return this.rowsOption ?? (this.paged ? 1024 : 256)
  }
  private readonly counters = { steps: 0, admitted: 0, largestStep: 0, sharedSteps: 0, largestStepCalls: 0, peakSharedBytes: 0, sharedBytesTotal: 0 }
  private sharedBefore = 0  // sharedBytesTotal of the caches already gone
  private shared = false  // a prefix was shared since the counters were last read

  constructor(
    private readonly handle: () => NativeModel,
    private readonly config: ModelConfig,
    paged: boolean,
    options: SchedulerOptions = {},
  ) {
    this.paged = paged && options.paged !== false
    checkSchedulerOptions(options)
    this.pageSize = options.pageSize ?? 16
    this.rowsOption = options.maxRows
    this.kvBytes = options.kvCacheBytes ?? defaultKvBytes()
  }

  /** Whether any call's sequences are queued or decoding. */
  busy(): boolean {
    return this.running
  }

  stats(): SchedulerStats {
    return { ...this.counters, cache: this.cache ? this.cache.describe() : null }
  }

  /** Reads the cache's sharing counters after a step that shared a prefix. */
  private countSharing(): void {
    if (!this.shared || !this.cache) return
    this.shared = false
    const d = this.cache.describe()
    this.counters.peakSharedBytes = Math.max(this.counters.peakSharedBytes, d.sharedBytes)
    this.counters.sharedBytesTotal = this.sharedBefore + d.sharedBytesTotal
  }

  /** Queues a job's sequences; they join the running batch at the next step. */
  submit<S extends DecodeSequence>(job: DecodeJob<S>): void {
    const state: JobState<S> = { job, waiting: job.sequences.slice(), live: 0, groups: new Map(), failed: false }
    this.jobs.push(state as unknown as JobState<DecodeSequence>)
    if (!this.running) {
      this.running = true
      void this.loop()
    }
  }

  /** Frees the cache (the model is going away). */
  dispose(): void {
    if (!this.cache) return
    this.countSharing()
    this.sharedBefore = this.counters.sharedBytesTotal
    this.cache.dispose()
    this.cache = null
  }

  // ---------------------------------------------------------------- the loop

  // `running` drops in the same synchronous stretch as the last check of `jobs`: a job submitted
  // after it starts a new loop, one submitted before it is seen by this one.
  private async loop(): Promise<void> {
    while (this.jobs.length) {
      try {
        this.dropAborted()
        this.admit()
        const batch = byAdapter(this.rows.filter((r) => r.state !== 'await-prefix'))
        if (!batch.length) {
          if (this.jobs.length) throw new Error('the decode scheduler could not admit any waiting sequence')  // a bug, never a hang
          continue
        }
        const result = await this.handle().step(this.cache!, this.request(batch))
        this.absorb(batch, result)
        this.countSharing()
      } catch (e) {
        this.failAll(e)
      }
    }
    // Idle: give the memory back; the next job builds a cache of its own size.
    this.dispose()
    this.running = false
  }

  /** Sequences whose call or prompt was aborted finish now, with what they have. */
  private dropAborted(): void {
    for (const j of this.jobs) {
      const all = j.job.signal?.aborted === true
      const gone = j.waiting.filter((s) => all || s.signal?.aborted)
      if (gone.length) {
        j.waiting = j.waiting.filter((s) => !gone.includes(s))
        for (const s of gone) j.job.onFinish(s, true)
      }
    }
    for (const r of this.rows.slice()) if (r.job.job.signal?.aborted || r.seq.signal?.aborted) this.finish(r, true)
    this.retireJobs()
  }

  /** Pages a sequence of this job may ever need beyond its group's shared full pages. */
  private ownPages(prompt: number, maxTokens: number): { own: number; shared: number } {
    if (!this.paged) return { own: 1, shared: 0 }
    const P = this.pageSize
    const shared = Math.floor((prompt - 1) / P)
    return { own: Math.ceil((prompt + maxTokens) / P) - shared, shared }
  }

  /** The cache the waiting sequences need, (re)built while nothing decodes. */
  private ensureCache(): void {
    const want = this.waitingNeed()
    if (!want) return
    if (this.cache && this.fits(want)) return
    if (this.rows.length) return  // a bigger cache waits until the running rows finish
    this.dispose()
    const m = this.handle()
    if (this.paged) {
      const bytes = pageBytes(this.config, this.pageSize)
      // The budget, but no more than a full batch of the largest waiting sequence (or all that wait) can use.
      const enough = Math.max(want.total, this.maxRows * want.pages)
      this.budgetPages = Math.min(MAX_PAGES, Math.max(Math.min(Math.floor(this.kvBytes / bytes), enough), want.pages))
      this.slotCount = this.maxRows
      this.capacity = PAGED_CAPACITY
      try {
        this.cache = m.createCache(this.slotCount, this.capacity, { pageSize: this.pageSize, pages: this.budgetPages })
      } catch (e) {
        if (!isNativeError(e, 'ERR_AD_UNSUPPORTED')) throw e
        this.paged = false  // this backend has the slot layout only
        return this.ensureCache()
      }
    } else {
      this.slotCount = Math.min(this.maxRows, want.sequences)
      this.capacity = want.positions
      this.budgetPages = this.slotCount
      this.cache = m.createCache(this.slotCount, this.capacity)
    }
    this.freeSlots = Array.from({ length: this.slotCount }, (_, i) => this.slotCount - 1 - i)
    this.reservedPages = 0
  }

  /** What waiting sequences need: the most pages and positions of one, all their pages together, how many wait. */
  private waitingNeed(): { pages: number; positions: number; total: number; sequences: number } | null {
    let pages = 0, positions = 0, total = 0, sequences = 0
    for (const j of this.jobs) {
      sequences += j.waiting.length
      for (const s of j.waiting) {
        const p = this.ownPages(s.prompt.length, j.job.maxTokens)
        pages = Math.max(pages, p.own + p.shared)
        total += p.own + p.shared
        positions = Math.max(positions, s.prompt.length + j.job.maxTokens)
      }
    }
    return sequences ? { pages, positions, total, sequences } : null
  }

  private fits(want: { pages: number; positions: number }): boolean {
    return this.paged ? want.pages <= this.budgetPages : want.positions <= this.capacity
  }

  /** Waiting sequences take free slots, call by call in arrival order, while pages last. */
  private admit(): void {
    this.ensureCache()
    if (!this.cache) return
    for (const j of this.jobs) {
      while (j.waiting.length && j.live < j.job.maxLive && this.freeSlots.length && this.rows.length < this.maxRows) {
        const s = j.waiting[0]
        if (s.prompt.length + j.job.maxTokens > this.capacity) return  // needs the bigger cache: arrival order holds
        const group = j.groups.get(s.group) ?? { holders: new Set(), sharedPages: 0 }
        const need = this.ownPages(s.prompt.length, j.job.maxTokens)
        const extra = need.own + (group.holders.size ? 0 : need.shared)
        if (this.reservedPages + extra > this.budgetPages) return
        j.waiting.shift()
        j.groups.set(s.group, group)
        this.reservedPages += extra
        if (!group.holders.size) group.sharedPages = need.shared
        this.counters.admitted++
        j.live++
        this.rows.push(this.place(j, s, group, need.own))
      }
    }
  }

  /** A new row in a free slot: it prefills its prompt, waits for its leader's prefill, or takes a holder's prefix. */
  private place(j: JobState<DecodeSequence>, s: DecodeSequence, group: GroupState<DecodeSequence>, pages: number): Row<DecodeSequence> {
    const slot = this.freeSlots.pop()!
    const L = s.prompt.length
    const row: Row<DecodeSequence> = { job: j, seq: s, slot, state: 'decode', pending: s.prompt[L - 1], pages, group, leader: null }
    if (L === 1) return row
    const holder = [...group.holders].find((h) => h.state !== 'await-prefix')
    if (!holder) {
      row.state = 'prefill'
    } else if (holder.state === 'prefill') {
      row.state = 'await-prefix'
      row.leader = holder
    } else {
      this.cache!.copyPrefix(holder.slot, slot, L - 1)
      this.shared = true
    }
    group.holders.add(row)
    return row
  }

  /** One engine step: prefill entries (no output) and decode entries (one sampled row each). */
  private request(batch: Row<DecodeSequence>[]): NativeStepRequest {
    const B = batch.length
    const tokens: number[] = []
    for (const r of batch) {
      if (r.state === 'prefill') for (let i = 0; i < r.seq.prompt.length - 1; ++i) tokens.push(r.seq.prompt[i])
      else tokens.push(r.pending)
    }
    const col = <T extends Float32Array | Int32Array | Float64Array>(A: new (n: number) => T, f: (r: Row<DecodeSequence>) => number): T => {
      const a = new A(B)
      batch.forEach((r, i) => (a[i] = f(r)))
      return a
    }
    const p = (r: Row<DecodeSequence>) => r.job.job.sampling
    return {
      slots: col(Int32Array, (r) => r.slot),
      counts: col(Int32Array, (r) => (r.state === 'prefill' ? r.seq.prompt.length - 1 : 1)),
      outModes: Uint8Array.from(batch, (r) => (r.state === 'prefill' ? 0 : 1)),
      adapters: col(Int32Array, (r) => r.seq.adapter),
      tokens: Int32Array.from(tokens),
      sampling: {
        temperature: col(Float32Array, (r) => p(r).temperature),
        topK: col(Int32Array, (r) => p(r).topK),
        topP: col(Float32Array, (r) => p(r).topP),
        minP: col(Float32Array, (r) => p(r).minP),
        repetitionPenalty: col(Float32Array, (r) => p(r).repetitionPenalty),
        presencePenalty: col(Float32Array, (r) => p(r).presencePenalty),
        frequencyPenalty: col(Float32Array, (r) => p(r).frequencyPenalty),
        seed: col(Float64Array, (r) => r.seq.seed),
        stream: col(Float64Array, (r) => r.seq.streamId),
        promptLength: col(Int32Array, (r) => r.seq.prompt.length),
      },
      topK: Math.max(0, ...batch.map((r) => r.job.job.topK)),
    }
  }

  /** Hands each decode row its sampled token; prefilled leaders pass their prefix to the rows that wait. */
  private absorb(batch: Row<DecodeSequence>[], result: NativeStepResult): void {
    this.counters.steps++
    this.counters.largestStep = Math.max(this.counters.largestStep, batch.length)
    const calls = new Set(batch.map((r) => r.job)).size
    if (calls > 1) this.counters.sharedSteps++
    this.counters.largestStepCalls = Math.max(this.counters.largestStepCalls, calls)
    let out = 0
    const views = new Map<number, NativeStepResult>()
    const view = (k: number) => views.get(k) ?? views.set(k, topKView(result, k)).get(k)!
    for (const r of batch) {
      if (r.state === 'prefill') {
        r.state = 'decode'
        for (const w of this.rows)
          if (w.leader === r) {
            this.cache!.copyPrefix(r.slot, w.slot, r.seq.prompt.length - 1)
            this.shared = true
            w.state = 'decode'
            w.leader = null
          }
        continue
      }
      const done = r.job.failed ? false : r.job.job.onRow(r.seq, view(r.job.job.topK), out++)
      if (done) this.finish(r, false)
      else r.pending = result.tokens[out - 1]
    }
    this.retireJobs()
  }

  /** A row leaves: its slot and pages go back; the group's shared pages go when its last holder does. */
  private finish(r: Row<DecodeSequence>, aborted: boolean): void {
    this.rows.splice(this.rows.indexOf(r), 1)
    // Rows waiting on this leader's prefill (aborted before its step) prefill themselves.
    for (const w of this.rows) if (w.leader === r) ((w.state = 'prefill'), (w.leader = null))
    r.group.holders.delete(r)
    this.reservedPages -= r.pages
    if (!r.group.holders.size) this.reservedPages -= r.group.sharedPages
    if (!r.group.holders.size) r.group.sharedPages = 0
    this.cache!.truncate(r.slot, 0)
    this.freeSlots.push(r.slot)
    r.job.live--
    if (!r.job.failed) r.job.job.onFinish(r.seq, aborted)
  }

  private retireJobs(): void {
    this.jobs = this.jobs.filter((j) => j.waiting.length || j.live)
  }

  /** A step failed: every job with rows in it (and every waiting one) gets the error; the cache starts over. */
  private failAll(e: unknown): void {
    for (const j of this.jobs) {
      j.failed = true
      j.waiting = []
      j.job.onError(e)
    }
    for (const r of this.rows.slice()) this.finish(r, true)
    this.jobs = []
    this.rows = []
    this.dispose()
  }
}

/**
 * The step's rows with each adapter's rows together (stable), so the engine runs one low-rank
 * product per adapter, not one per change of adapter along the batch; a batch of one adapter
 * keeps its order. A row's results do not depend on where in the batch it sits.
 */
function byAdapter<R extends { seq: DecodeSequence }>(rows: R[]): R[] {
  if (rows.every((r) => r.seq.adapter === rows[0].seq.adapter)) return rows
  return rows.map((r, i) => ({ r, i })).sort((a, b) => a.r.seq.adapter - b.r.seq.adapter || a.i - b.i).map(({ r }) => r)
}

/** The result as a job with `k` top logits sees it (the step ran with the batch's largest K). */
function topKView(result: NativeStepResult, k: number): NativeStepResult {
  if (result.topK === k) return result
  const K = result.topK
  const rows = result.rows
  const ids = new Int32Array(rows * k)
  const logits = new Float32Array(rows * k)
  for (let r = 0; r < rows; ++r)
    for (let j = 0; j < k; ++j) {
      ids[r * k + j] = result.topkIds[r * K + j]
      logits[r * k + j] = result.topkLogits[r * K + j]
    }
  return { ...result, topK: k, topkIds: ids, topkLogits: logits }
}
