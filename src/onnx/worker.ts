// onnxruntime-node in a worker thread. Its InferenceSession.run() is synchronous native work on
// the calling thread, so sessions live in a worker: the main event loop keeps ticking while a
// graph runs. The worker also holds each sequence batch's KV cache (the present.* outputs become
// the next step's past_key_values.* inputs without crossing threads); only token ids go in and
// the requested logits rows come out (transferred, not copied).
//
// The worker's code is `workerMain` below, started with `eval: true` from its own source text.
// That keeps one TypeScript source that runs unchanged under tsc's dist/ and under vitest's
// on-the-fly transform (a separate worker file would exist only after a build); the function
// therefore uses nothing from this module's scope, only its parameter and `require`.
import { Worker } from 'node:worker_threads'
import type * as Ort from 'onnxruntime-node'

import { OnnxModelError } from './errors.js'
import { onnxRuntimeEntry } from './runtime.js'

export interface ValueMeta {
  name: string
  /** 'float32', 'float16', 'int64', … (empty when not a tensor). */
  type: string
  /** Fixed sizes as numbers, symbolic ones as strings. */
  shape: (number | string)[]
}

/** How to feed a causal-LM graph (decided on the main thread from the session's metadata). */
export interface FeedLayout {
  layers: number
  kvHeads: number
  headDim: number
  kvType: 'float32' | 'float16'
  attentionMask: boolean
  positionIds: boolean
  useCacheBranch: boolean
}

export type WorkerRequest =
  | { op: 'open'; path: string; threads: number }
  | { op: 'close'; session: number }
  | { op: 'newCache'; session: number; layout: FeedLayout }
  | { op: 'extend'; cache: number; tokens: Int32Array; rows: number; count: number; from: number }
  | { op: 'fork'; cache: number; copies: number }
  | { op: 'keep'; cache: number; rows: number[] }
  | { op: 'free'; cache: number }

export interface OpenResult {
  session: number
  inputs: ValueMeta[]
  outputs: ValueMeta[]
}

export interface ExtendResult {
  /** rows × (count − from) × vocab, row-major. */
  logits: Float32Array
  vocab: number
}

type Envelope = { id: number; request: WorkerRequest }
type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; message: string }

/** The worker thread's program (runs in the worker; see the header). */
function workerMain(ortPath: string): void {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { parentPort } = require('node:worker_threads') as typeof import('node:worker_threads')
  const ort = require(ortPath) as typeof Ort
  type Tensor = Ort.Tensor
  interface Cache {
    session: Ort.InferenceSession
    layout: FeedLayout
    rows: number
    length: number
    past: Map<string, Tensor>
  }
  const sessions = new Map<number, Ort.InferenceSession>()
  const caches = new Map<number, Cache>()
  let nextId = 1

  const meta = (list: readonly Ort.InferenceSession.ValueMetadata[]) =>
    list.map((m) => (m.isTensor ? { name: m.name, type: String(m.type), shape: [...m.shape] } : { name: m.name, type: '', shape: [] }))

  const halfToFloat = (h: number): number => {
    const sign = h & 0x8000 ? -1 : 1
    const exp = (h >>> 10) & 0x1f
    const mant = h & 0x3ff
    if (exp === 0) return sign * mant * 2 ** -24
    if (exp === 0x1f) return mant ? NaN : sign * Infinity
    return sign * (1 + mant / 1024) * 2 ** (exp - 15)
  }

  const pastNames = (layout: FeedLayout) => {
    const names: [string, string][] = []
    for (let l = 0; l < layout.layers; l++) for (const k of ['key', 'value']) names.push([`past_key_values.${l}.${k}`, `present.${l}.${k}`])
    return names
  }

  const emptyPast = (layout: FeedLayout, rows: number): Tensor => {
    const dims = [rows, layout.kvHeads, 0, layout.headDim]
    return layout.kvType === 'float16' ? new ort.Tensor('float16', new Uint16Array(0), dims) : new ort.Tensor('float32', new Float32Array(0), dims)
  }

  /** Batch rows `pick` of a [rows, …] tensor (a row may repeat). */
  const selectRows = (t: Tensor, pick: number[]): Tensor => {
    const data = t.data as Float32Array | Uint16Array
    const rowSize = t.dims[0] ? data.length / t.dims[0] : 0
    const Ctor = data.constructor as { new (n: number): Float32Array | Uint16Array }
    const out = new Ctor(rowSize * pick.length)
    pick.forEach((r, i) => out.set(data.subarray(r * rowSize, (r + 1) * rowSize), i * rowSize))
    return new ort.Tensor(t.type as 'float32', out as Float32Array, [pick.length, ...t.dims.slice(1)])
  }

  const cacheOf = (id: number): Cache => {
    const c = caches.get(id)
    if (!c) throw new Error(`no KV cache ${id} (freed?)`)
    return c
  }

  async function extend(r: Extract<WorkerRequest, { op: 'extend' }>): Promise<ExtendResult> {
    const c = cacheOf(r.cache)
    const { rows, count, from } = r
    if (rows !== c.rows) throw new Error(`the cache holds ${c.rows} rows, got tokens for ${rows}`)
    const total = c.length + count
    const feeds: Record<string, Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(r.tokens, (t) => BigInt(t)), [rows, count]),
    }
    if (c.layout.attentionMask) feeds.attention_mask = new ort.Tensor('int64', new BigInt64Array(rows * total).fill(1n), [rows, total])
    if (c.layout.positionIds) {
      const pos = new BigInt64Array(rows * count)
      for (let b = 0; b < rows; b++) for (let i = 0; i < count; i++) pos[b * count + i] = BigInt(c.length + i)
      feeds.position_ids = new ort.Tensor('int64', pos, [rows, count])
    }
    if (c.layout.useCacheBranch) feeds.use_cache_branch = new ort.Tensor('bool', Uint8Array.of(c.length > 0 ? 1 : 0), [1])
    const names = pastNames(c.layout)
    for (const [past] of names) feeds[past] = c.past.get(past) ?? emptyPast(c.layout, rows)
    const out = await c.session.run(feeds)
    for (const [past, present] of names) c.past.set(past, out[present])
    c.length = total

    const logits = out.logits
    const vocab = logits.dims[logits.dims.length - 1]
    const src = logits.data as Float32Array | Uint16Array
    const keep = count - from
    const res = new Float32Array(rows * keep * vocab)
    for (let b = 0; b < rows; b++) {
      const at = (b * count + from) * vocab
      const chunk = src.subarray(at, at + keep * vocab)
      if (logits.type === 'float16') for (let i = 0; i < chunk.length; i++) res[b * keep * vocab + i] = halfToFloat(chunk[i])
      else res.set(chunk as Float32Array, b * keep * vocab)
    }
    return { logits: res, vocab }
  }

  async function handle(r: WorkerRequest): Promise<unknown> {
    switch (r.op) {
      case 'open': {
        // No spinning: idle onnxruntime threads would busy-wait on cores the engine shares.
        const session = await ort.InferenceSession.create(r.path, {
          intraOpNumThreads: r.threads,
          interOpNumThreads: 1,
          executionProviders: ['cpu'],
          extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } },
        })
        const id = nextId++
        sessions.set(id, session)
        return { session: id, inputs: meta(session.inputMetadata), outputs: meta(session.outputMetadata) }
      }
      case 'close': {
        const s = sessions.get(r.session)
        sessions.delete(r.session)
        for (const [id, c] of caches) if (c.session === s) caches.delete(id)
        await s?.release()
        return null
      }
      case 'newCache': {
        const session = sessions.get(r.session)
        if (!session) throw new Error(`no session ${r.session} (closed?)`)
        const id = nextId++
        caches.set(id, { session, layout: r.layout, rows: 1, length: 0, past: new Map() })
        return id
      }
      case 'extend':
        return extend(r)
      case 'fork': {
        const c = cacheOf(r.cache)
        if (c.rows !== 1) throw new Error(`fork needs a one-row cache, this one has ${c.rows}`)
        const pick = new Array<number>(r.copies).fill(0)
        for (const [k, t] of c.past) c.past.set(k, selectRows(t, pick))
        c.rows = r.copies
        return null
      }
      case 'keep': {
        const c = cacheOf(r.cache)
        for (const row of r.rows) if (!(row >= 0 && row < c.rows)) throw new Error(`row ${row} outside the cache's ${c.rows} rows`)
        for (const [k, t] of c.past) c.past.set(k, selectRows(t, r.rows))
        c.rows = r.rows.length
        return null
      }
      case 'free':
        caches.delete(r.cache)
        return null
    }
  }

  // One request at a time, in arrival order: a cache's steps must not interleave.
  let queue: Promise<void> = Promise.resolve()
  parentPort!.on('message', (m: Envelope) => {
    queue = queue.then(async () => {
      let reply: Reply
      let transfer: ArrayBuffer[] = []
      try {
        const result = await handle(m.request)
        reply = { id: m.id, ok: true, result }
        if (result && typeof result === 'object' && 'logits' in result) transfer = [(result as ExtendResult).logits.buffer as ArrayBuffer]
      } catch (e) {
        reply = { id: m.id, ok: false, message: e instanceof Error ? e.message : String(e) }
      }
      parentPort!.postMessage(reply, transfer)
    })
  })
}

/** The main thread's handle on one worker: typed requests, replies as Promises. */
export class OnnxWorker {
  private readonly worker: Worker
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; what: string }>()
  private nextId = 1
  private dead: Error | null = null

  constructor(private readonly label: string) {
    const ortPath = onnxRuntimeEntry(label)
    this.worker = new Worker(`(${workerMain.toString()})(${JSON.stringify(ortPath)})`, { eval: true })
    this.worker.unref()
    this.worker.on('message', (r: Reply) => this.settle(r))
    this.worker.on('error', (e) => this.fail(new OnnxModelError(label, 'worker', `${label}: the onnxruntime worker failed: ${e.message}`, { cause: e })))
    this.worker.on('exit', (code) => this.fail(new OnnxModelError(label, 'worker', `${label}: the onnxruntime worker exited (code ${code})`)))
  }

  /** Sends one request; rejects with OnnxModelError (reason 'run' unless the worker died). */
  call<T>(request: WorkerRequest, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.dead) return Promise.reject(this.dead)
    const id = this.nextId++
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, what: request.op })
      if (this.pending.size === 1) this.worker.ref() // keep the process alive only while work is pending
      this.worker.postMessage({ id, request } satisfies Envelope, transfer)
    })
  }

  private settle(r: Reply): void {
    const p = this.pending.get(r.id)
    if (!p) return
    this.pending.delete(r.id)
    if (this.pending.size === 0) this.worker.unref()
    if (r.ok) p.resolve(r.result)
    else p.reject(new OnnxModelError(this.label, 'run', `${this.label}: onnxruntime ${p.what} failed: ${r.message}`))
  }

  private fail(e: OnnxModelError): void {
    if (this.dead) return
    this.dead = e
    for (const p of this.pending.values()) p.reject(e)
    this.pending.clear()
  }

  async terminate(): Promise<void> {
    if (!this.dead) this.dead = new OnnxModelError(this.label, 'worker', `${this.label}: the onnxruntime worker was closed`)
    for (const p of this.pending.values()) p.reject(this.dead)
    this.pending.clear()
    await this.worker.terminate()
  }
}
