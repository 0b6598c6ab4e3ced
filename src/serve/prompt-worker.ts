// Prompt preparation for `autodidact serve` off the main thread: rendering a chat template and
// tokenizing a prompt are synchronous and, for a hostile template, regex or a 1 MiB prompt, long.
// A worker thread does both, with the same bounded kernel (src/engine/hf/template.ts) the library
// uses on its own thread, so the event loop stays free and answers every other client meanwhile.
// The worker rebuilds the model's tokenizer from Tokenizer.portable(); each job is a ChatRender
// (template, variables, limits) or a text; the reply is the token ids (transferred).
//
// As in src/onnx/worker.ts, the worker's code is `workerMain` (and `promptKernel`) started from
// their source text with `eval: true`: one TypeScript source that runs unchanged under tsc's dist/
// and under vitest's transform; those functions use only their parameters, globals and `require`.
// A job the kernel's own budget cannot stop (it should always) is cut off by a watchdog here that
// terminates the worker; the next job starts a fresh one.
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'

import { ResourceLimitError, TokenizerError } from '../engine/errors.js'
import { promptKernel, type LimitHit } from '../engine/hf/template.js'
import { renderError, type ChatRender, type PortableTokenizer, type Tokenizer } from '../engine/tokenizer.js'
import { ServeRequestError } from './errors.js'

type Job = { id: number; render: ChatRender | null; text: string | null; addSpecialTokens: boolean }
type Reply =
  | { id: number; ok: true; ids: Int32Array }
  | { id: number; ok: false; message: string; limitHit: LimitHit | null; noToken: boolean; stage: 'render' | 'encode' }

/** The worker thread's program (runs in the worker; see the header). */
function workerMain(paths: { jinja: string; tokenizers: string }, makeKernel: typeof promptKernel): void {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { parentPort, workerData } = require('node:worker_threads') as typeof import('node:worker_threads')
  const jinja = require(paths.jinja) as typeof import('@huggingface/jinja')
  const { Tokenizer } = require(paths.tokenizers) as typeof import('@huggingface/tokenizers')
  const kernel = makeKernel(jinja, require('node:vm') as typeof import('node:vm'))
  const source = workerData as PortableTokenizer
  const hf = new Tokenizer(source.tokenizerJson, source.libConfig)
  const templates = new Map<string, InstanceType<typeof jinja.Template>>()

  parentPort!.on('message', (job: Job) => {
    let stage: 'render' | 'encode' = 'render'
    try {
      let text = job.text ?? ''
      if (job.render) {
        let template = templates.get(job.render.source)
        if (!template) {
          template = new jinja.Template(job.render.source)
          templates.set(job.render.source, template)
        }
        text = kernel.render(template, job.render.context, job.render.limits)
      }
      stage = 'encode'
      const ids = Int32Array.from(kernel.encode(hf, text, job.addSpecialTokens, source.timedEncode))
      parentPort!.postMessage({ id: job.id, ok: true, ids } satisfies Reply, [ids.buffer as ArrayBuffer])
    } catch (e) {
      const err = e as { message?: string; limitHit?: LimitHit; noToken?: boolean }
      parentPort!.postMessage({ id: job.id, ok: false, message: err?.message ?? String(e), limitHit: err?.limitHit ?? null, noToken: err?.noToken === true, stage } satisfies Reply)
    }
  })
}

/** Extra time the watchdog gives a job beyond the kernel's own budget before it terminates the worker. */
const WATCHDOG_GRACE_MS = 5_000

interface Pending {
  resolve(ids: number[]): void
  reject(e: unknown): void
  timer: NodeJS.Timeout
  file: string
}

/** The main thread's handle: prompts in, token ids out, as Promises; the worker is started lazily and restarted after a failure. */
export class PromptWorker {
  private worker: Worker | null = null
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  private closed = false
  private readonly source: PortableTokenizer
  private readonly paths: { jinja: string; tokenizers: string }

  constructor(private readonly tokenizer: Tokenizer) {
    this.source = tokenizer.portable()
    const req = createRequire(import.meta.url)
    this.paths = { jinja: req.resolve('@huggingface/jinja'), tokenizers: req.resolve('@huggingface/tokenizers') }
  }

  /** Starts the worker now (it otherwise starts with the first job). */
  start(): void {
    this.spawn()
  }

  /** Renders the chat and encodes it without special tokens (the template writes them), as Tokenizer.encodeChat. */
  encodeChat(render: ChatRender): Promise<number[]> {
    return this.submit({ render, text: null, addSpecialTokens: false }, render.file, render.limits.timeMs + this.tokenizer.budgetMs(render.limits.maxOutputChars))
  }

  /** Encodes a text prompt as Tokenizer.encode (special tokens added). */
  encode(text: string): Promise<number[]> {
    return this.submit({ render: null, text, addSpecialTokens: true }, this.source.file, this.tokenizer.budgetMs(text.length))
  }

  private spawn(): Worker {
    if (this.worker) return this.worker
    const code = `(${workerMain.toString()})(${JSON.stringify(this.paths)}, ${promptKernel.toString()})`
    const worker = new Worker(code, { eval: true, workerData: this.source })
    worker.unref()
    worker.on('message', (r: Reply) => this.settle(r))
    worker.on('error', (e) => this.lost(worker, `the prompt worker failed: ${e.message}`))
    worker.on('exit', (code) => this.lost(worker, `the prompt worker exited (code ${code})`))
    this.worker = worker
    return worker
  }

  private submit(job: Omit<Job, 'id'>, file: string, budgetMs: number): Promise<number[]> {
    if (this.closed) return Promise.reject(new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down'))
    const worker = this.spawn()
    const id = this.nextId++
    return new Promise<number[]>((resolve, reject) => {
      // Should a job outlive its budget and the grace, nothing in the worker can be trusted: end it.
      const timer = setTimeout(() => {
        void worker.terminate()
        this.lost(worker, `preparing a prompt outran its ${Math.ceil(budgetMs)} ms budget; the prompt worker was restarted`)
      }, budgetMs + WATCHDOG_GRACE_MS)
      timer.unref()
      this.pending.set(id, { resolve, reject, timer, file })
      if (this.pending.size === 1) worker.ref() // hold the process open only while work is pending
      worker.postMessage({ id, ...job } satisfies Job)
    })
  }

  private settle(r: Reply): void {
    const p = this.pending.get(r.id)
    if (!p) return
    this.pending.delete(r.id)
    clearTimeout(p.timer)
    if (this.pending.size === 0) this.worker?.unref()
    if (r.ok) p.resolve(Array.from(r.ids))
    else p.reject(this.typedError(r, p.file))
  }

  /** The worker's failure as the error the same failure on this thread would give. */
  private typedError(r: Extract<Reply, { ok: false }>, file: string): unknown {
    const cause = Object.assign(new Error(r.message), r.limitHit ? { limitHit: r.limitHit } : {})
    if (r.limitHit) return new ResourceLimitError(r.limitHit.limit, file, `${file}: ${r.limitHit.message}`, { cause })
    if (r.noToken) return new TokenizerError(file, `${file}: ${r.message}`, { cause })
    if (r.stage === 'render') return renderError(cause, file)
    return new TokenizerError(file, `${file}: cannot encode the prompt: ${r.message}`, { cause })
  }

  /** The worker died or was ended: its jobs fail with 503; the next job starts a new worker. */
  private lost(worker: Worker, message: string): void {
    if (this.worker !== worker) return
    this.worker = null
    for (const p of this.pending.values()) {
      clearTimeout(p.timer)
      p.reject(new ServeRequestError(503, 'server_overloaded', message))
    }
    this.pending.clear()
  }

  async close(): Promise<void> {
    this.closed = true
    const worker = this.worker
    if (worker) {
      this.lost(worker, 'the server is shutting down')
      await worker.terminate()
    }
  }
}
