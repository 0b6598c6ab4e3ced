// `autodidact serve`: an OpenAI-compatible HTTP server over one loaded model, on Node's http module.
//   POST /v1/completions        prompt (string | string[] | token ids | token-id arrays), n, max_tokens,
//                               temperature, top_p, top_k, min_p, penalties, stop, seed, logprobs (top-N), stream
//   POST /v1/chat/completions   messages (rendered with the model folder's chat template), n, logprobs,
//                               top_logprobs, max_tokens | max_completion_tokens, the sampling fields, stream
//                               (both also take vLLM's top_k, min_p, repetition_penalty and ignore_eos)
//   GET  /v1/models, /v1/models/{id}, /health
// Every request goes through the Batcher (batcher.ts): it joins the model's one running batch when
// the batching window closes; identical-option unstreamed requests share one engine call. A streamed
// request runs one Model.stream per choice, each with the sequence id it would have in generate(),
// so a seeded stream yields the same samples as the same request unstreamed.
// In a stream, text arrives token by token, each chunk with the logprobs of the tokens whose text
// it carries (a token whose text is held back — a partial character, a possible stop string —
// goes with the chunk that releases it; the rest with the final chunk).
// A client that disconnects aborts its generation; every failure is a JSON error, never a crash.
//
// Holding its ground against hostile clients (issue 23):
//   - admission control (admission.ts) for streamed and unstreamed requests alike: a cap on the
//     sequences generating at once, a bounded FIFO queue, 429 when it is full, 503 after a long wait;
//   - a cap on the reply a request may ask for (n × max_tokens × logprobs), checked before it runs;
//   - chat templates rendered and prompts tokenized in a worker thread (prompt-worker.ts) under the
//     bounded kernel, after a cheap lower bound on the prompt's tokens has been checked against the
//     context, so a 1 MiB prompt or a pathological template never blocks the event loop;
//   - header and body timeouts (408), 431 for oversized headers, a JSON error for every refusal;
//   - `apiKey` (Authorization: Bearer), POST bodies only as application/json (415 otherwise: no
//     CORS-simple request from a web page can reach the model), and a Host allow-list against DNS
//     rebinding (loopback names on a loopback bind; a warning when bound elsewhere).
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { isIP, type AddressInfo, type Socket } from 'node:net'
import { basename } from 'node:path'
import type { TemplateLimits } from '../engine/hf/template.js'
import type { Completion, Model, StreamChunk } from '../engine/model.js'
import { Admission, type AdmissionOptions, type AdmissionStats } from './admission.js'
import { Batcher, type BatchRequest, type BatcherOptions, type BatcherStats } from './batcher.js'
import { badRequest, errorBody, ServeRequestError, toServeError } from './errors.js'
import { PromptWorker } from './prompt-worker.js'
import { chatLogprobs, chatLogprobsOf, chunkTokens, completionLogprobs, completionLogprobsOf, shownTokens, TokenTexts } from './logprobs.js'
import type { ChatCompletionResponse, CompletionResponse, ModelList, ModelObject, Usage } from './openai.js'
import { DEFAULT_LIMITS, parseChatRequest, parseCompletionRequest, type ChatSpec, type CompletionSpec, type ServeLimits } from './validate.js'

export interface ServeOptions {
  /** The model served (the server never disposes it). */
  model: Model
  /** The model id clients name in `model`; default: the model folder's name. */
  name?: string
  limits?: Partial<ServeLimits>
  /** Largest request body accepted (413 above). Default 1 MiB. */
  maxBodyBytes?: number
  /** Batching of requests into the running batch (see batcher.ts). */
  batch?: Omit<BatcherOptions, 'stopTokenIds'>
  /** max_tokens when a completions request gives none. Default 16 (OpenAI's). */
  defaultCompletionMaxTokens?: number
  /** max_tokens when a chat request gives none (capped by the context left). Default 256. */
  defaultChatMaxTokens?: number
  /** Clients must send `Authorization: Bearer <apiKey>` on every route but GET /health (401 otherwise). */
  apiKey?: string
  /**
   * Host header names accepted (403 otherwise; a guard against DNS rebinding), or 'any'. Default:
   * localhost, 127.0.0.1, ::1 and the bound address on a loopback bind; 'any' on other binds
   * (listen() then returns a warning).
   */
  allowedHosts?: readonly string[] | 'any'
  /** Admission control of streamed and unstreamed requests (admission.ts). */
  admission?: AdmissionOptions
  /** Largest reply a request may ask for, estimated from n, max_tokens and logprobs (400 above). Default 32 MiB. */
  maxResponseBytes?: number
  /** Time a client has to send the request headers (408 after). Default 10 s. */
  headersTimeoutMs?: number
  /** Time a client has to send the whole request, body included (408 after). Default 30 s. */
  requestTimeoutMs?: number
  /** Largest request header block (431 above). Default 16 KiB. */
  maxHeaderBytes?: number
  /** Bounds of a chat template render (steps, sizes, time); default DEFAULT_TEMPLATE_LIMITS. */
  templateLimits?: Partial<TemplateLimits>
}

export interface ServeStats extends BatcherStats {
  /** Streamed requests running now. */
  streams: number
  /** Streams that ended because their client left. */
  streamAborts: number
  /** Admission control: sequences running, requests waiting, refusals. */
  admission: AdmissionStats
}

/** Where a started server listens. */
export interface ListenInfo {
  host: string
  port: number
  url: string
  /** Things the operator should know (a non-loopback bind without an API key, …); the CLI prints them. */
  warnings: string[]
}

/** Host names that reach a loopback bind. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1']

/** Whether `host` (a bind address) is a loopback address. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase()
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'))
}

/** The Host names a server bound to `host` accepts by default: loopback names on a loopback bind, any elsewhere. */
export function defaultAllowedHosts(host: string): readonly string[] | 'any' {
  return isLoopback(host) ? [...new Set([...LOOPBACK_NAMES, host.replace(/^\[|\]$/g, '').toLowerCase()])] : 'any'
}

/** What the operator of a server bound to `host` should be warned about. */
export function bindWarnings(host: string, hasApiKey: boolean, allowedHosts: readonly string[] | 'any'): string[] {
  if (isLoopback(host)) return []
  return [
    `listening on ${host}, not a loopback address: anyone who can reach this machine can use the model` +
      (hasApiKey ? '' : '; set an API key (--api-key or AUTODIDACT_API_KEY) to require one') +
      (allowedHosts === 'any' ? '; any Host header is accepted (--allowed-hosts limits them)' : ''),
  ]
}

/** The host name of a Host header, without port or IPv6 brackets, lower-cased. */
export function hostName(header: string): string {
  const h = header.trim().toLowerCase()
  if (h.startsWith('[')) return h.slice(1, h.indexOf(']') < 0 ? undefined : h.indexOf(']'))
  const colon = h.indexOf(':')
  return colon < 0 ? h : h.slice(0, colon)
}

// Bytes a reply spends per generated token, for the reply-size estimate (measured on the serve tests'
// replies, rounded up): the text, each token's logprob entry, each top-N alternative, a stream chunk.
const REPLY_BYTES = { text: 16, choice: 256, completionLogprob: 64, completionAlternative: 40, chatLogprob: 112, chatAlternative: 72, streamChunk: 224 }

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' }

/** What `autodidact serve` prints on stdout, followed by the URL, once it listens (one line, nothing else on stdout). */
export const LISTENING_PREFIX = 'autodidact serve: listening on '

/** The server URL from a child process's stdout, once its listening line has arrived (else null). */
export function listeningUrl(stdout: string): string | null {
  for (const line of stdout.split('\n')) if (line.startsWith(LISTENING_PREFIX)) return line.slice(LISTENING_PREFIX.length).trim()
  return null
}

/** http://host:port, bracketing IPv6 addresses. */
export function urlOf(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`
}

/** Generation settings a validated request resolves to (prompts encoded, max_tokens decided). */
interface Resolved {
  spec: CompletionSpec | ChatSpec
  prompts: number[][]
  maxTokens: number
}

export class OpenAIServer {
  readonly server: Server
  readonly name: string
  private readonly model: Model
  private readonly batcher: Batcher
  private readonly admission: Admission
  private readonly prompts: PromptWorker
  private readonly limits: ServeLimits
  private readonly maxResponseBytes: number
  private readonly apiKeyDigest: Buffer | null
  private allowedHosts: ReadonlySet<string> | 'any' = 'any'
  private readonly maxBodyBytes: number
  private readonly stopTokenIds: number[]
  private readonly stopSet: ReadonlySet<number>
  private readonly texts: TokenTexts
  private readonly created = Math.floor(Date.now() / 1000)
  private readonly fingerprint: string
  private readonly shutdown = new AbortController()
  /** The abort controllers of requests being handled (aborted on shutdown). */
  private readonly active = new Set<AbortController>()
  private readonly streams = new Set<Promise<void>>()
  private streamAborts = 0
  private closing: Promise<void> | null = null

  constructor(private readonly options: ServeOptions) {
    this.model = options.model
    this.name = options.name ?? basename(options.model.dir)
    this.limits = { ...DEFAULT_LIMITS, ...options.limits }
    this.maxBodyBytes = options.maxBodyBytes ?? 1 << 20
    // The engine's own default stop ids, passed explicitly so logprobs know which final token to hide.
    this.stopTokenIds = [...new Set([...this.model.tokenizer.eosTokenIds, ...this.model.config.eosTokenIds])]
    this.stopSet = new Set(this.stopTokenIds)
    this.texts = new TokenTexts(this.model.tokenizer)
    this.fingerprint = `autodidact-${this.model.config.architecture}-${this.model.config.numLayers}x${this.model.config.hiddenSize}`
    this.batcher = new Batcher(this.model, { ...options.batch, stopTokenIds: this.stopTokenIds })
    this.admission = new Admission(options.admission)
    this.prompts = new PromptWorker(this.model.tokenizer)
    this.maxResponseBytes = options.maxResponseBytes ?? 32 << 20
    if (options.apiKey !== undefined && (typeof options.apiKey !== 'string' || options.apiKey.length === 0))
      throw new TypeError('apiKey must be a non-empty string')
    this.apiKeyDigest = options.apiKey === undefined ? null : digest(options.apiKey)
    const headersTimeout = options.headersTimeoutMs ?? 10_000
    const requestTimeout = Math.max(options.requestTimeoutMs ?? 30_000, headersTimeout)
    this.server = createServer(
      {
        keepAliveTimeout: 5_000,
        headersTimeout,
        requestTimeout,
        // how often Node checks those timeouts (its default, 30 s, would let a slow client linger)
        connectionsCheckingInterval: Math.max(50, Math.min(1_000, headersTimeout / 4)),
        maxHeaderSize: options.maxHeaderBytes ?? 16 << 10,
      },
      // handle() answers every failure itself; should even that fail, drop the connection, never the process
      (req, res) => void this.handle(req, res).catch(() => res.destroy()),
    )
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => answerClientError(err, socket))
    this.prompts.start()
  }

  get stats(): ServeStats {
    return { ...this.batcher.stats, streams: this.streams.size, streamAborts: this.streamAborts, admission: { ...this.admission.stats } }
  }

  /** Starts listening (port 0: an ephemeral port). */
  listen(port = 0, host = '127.0.0.1'): Promise<ListenInfo> {
    return new Promise((resolve, reject) => {
      const onError = (e: Error) => reject(e)
      this.server.once('error', onError)
      this.server.listen(port, host, () => {
        this.server.off('error', onError)
        const addr = this.server.address() as AddressInfo
        const allowed = this.options.allowedHosts ?? defaultAllowedHosts(host)
        this.allowedHosts = allowed === 'any' ? 'any' : new Set(allowed.map((h) => h.trim().replace(/^\[|\]$/g, '').toLowerCase()))
        resolve({ host, port: addr.port, url: urlOf(host, addr.port), warnings: bindWarnings(host, this.apiKeyDigest !== null, allowed) })
      })
    })
  }

  /**
   * Stops accepting connections, answers queued requests 503, aborts running generations (their
   * clients get 503, or an error event in a stream), closes every connection, and resolves when the
   * engine is idle (the model may then be disposed).
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()))
      const reason = new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down')
      this.shutdown.abort(reason)
      this.admission.close()
      for (const request of this.active) request.abort(reason)
      await this.batcher.close()
      await this.prompts.close()
      await Promise.allSettled([...this.streams])
      this.server.closeAllConnections()
      await stopped
    })()
    return this.closing
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // The request's own signal: its client left before the answer was written, or the server stops.
    const request = new AbortController()
    let clientLeft = false
    res.on('close', () => {
      if (res.writableFinished) return
      clientLeft = true
      request.abort(new Error('client disconnected'))
    })
    this.active.add(request)
    try {
      if (this.closing) throw new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down')
      await this.route(req, res, request.signal)
    } catch (e) {
      if (clientLeft) return // nobody to answer
      const err = this.shutdown.signal.aborted && !(e instanceof ServeRequestError) ? new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down') : toServeError(e)
      this.sendError(res, err)
    } finally {
      this.active.delete(request)
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse, signal: AbortSignal): Promise<void> {
    this.checkHost(req)
    const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '') || '/'
    const method = req.method ?? 'GET'
    const allow = (m: string) => {
      if (method !== m) {
        res.setHeader('allow', m)
        throw new ServeRequestError(405, 'method_not_allowed', `${method} ${path}: use ${m}`)
      }
    }
    if (path === '/health') {
      allow('GET')
      return this.sendJson(res, 200, { status: 'ok', model: this.name, ...this.stats })
    }
    this.checkApiKey(req, res)
    if (path === '/v1/models') {
      allow('GET')
      return this.sendJson(res, 200, { object: 'list', data: [this.modelObject()] } satisfies ModelList)
    }
    if (path.startsWith('/v1/models/')) {
      allow('GET')
      const id = decodePathSegment(path.slice('/v1/models/'.length))
      if (id !== this.name) throw this.unknownModel(id)
      return this.sendJson(res, 200, this.modelObject())
    }
    if (path === '/v1/completions') {
      allow('POST')
      return this.serve(parseCompletionRequest(await this.readJson(req, res), this.limits), res, signal)
    }
    if (path === '/v1/chat/completions') {
      allow('POST')
      return this.serve(parseChatRequest(await this.readJson(req, res), this.limits), res, signal)
    }
    throw new ServeRequestError(404, 'not_found', `no route ${method} ${path}`)
  }

  /** 403 unless the Host header names this server (a page on another origin that rebinds its DNS to us cannot). */
  private checkHost(req: IncomingMessage): void {
    if (this.allowedHosts === 'any') return
    const host = hostName(req.headers.host ?? '')
    if (!this.allowedHosts.has(host))
      throw new ServeRequestError(403, 'host_not_allowed', `Host '${host}' is not allowed; this server answers to ${[...this.allowedHosts].join(', ')} (see allowedHosts / --allowed-hosts)`)
  }

  /** 401 unless the request carries `Authorization: Bearer <apiKey>` (compared in constant time). */
  private checkApiKey(req: IncomingMessage, res: ServerResponse): void {
    if (this.apiKeyDigest === null) return
    const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')
    if (m && timingSafeEqual(digest(m[1].trim()), this.apiKeyDigest)) return
    res.setHeader('www-authenticate', 'Bearer realm="autodidact"')
    throw new ServeRequestError(401, 'invalid_api_key', m ? 'the API key is not valid' : 'an API key is required: send Authorization: Bearer <key>')
  }

  private modelObject(): ModelObject {
    return { id: this.name, object: 'model', created: this.created, owned_by: 'autodidact' }
  }

  private unknownModel(id: string): ServeRequestError {
    return new ServeRequestError(404, 'model_not_found', `the model '${id}' does not exist; this server serves '${this.name}'`, 'model')
  }

  /** The body as JSON, at most maxBodyBytes (413 above); it must be declared application/json (415 otherwise). */
  private readJson(req: IncomingMessage, res: ServerResponse): Promise<unknown> {
    const limit = this.maxBodyBytes
    const tooLarge = () => new ServeRequestError(413, 'body_too_large', `the request body exceeds ${limit} bytes`)
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase()
    if (type !== 'application/json') {
      req.resume()
      res.setHeader('connection', 'close')
      return Promise.reject(
        new ServeRequestError(415, 'unsupported_media_type', `the request body must be sent as Content-Type: application/json, got ${type ? `'${type}'` : 'none'}`),
      )
    }
    const declared = Number(req.headers['content-length'])
    if (Number.isFinite(declared) && declared > limit) {
      req.resume() // drain, so the 413 can be read
      return Promise.reject(tooLarge())
    }
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = []
      let size = 0
      let failed = false
      req.on('data', (chunk: Buffer) => {
        if (failed) return
        size += chunk.length
        if (size > limit) {
          failed = true
          chunks.length = 0
          reject(tooLarge())
        } else chunks.push(chunk)
      })
      req.on('error', (e) => reject(e))
      req.on('close', () => {
        if (!req.complete) reject(new Error('client disconnected'))
      })
      req.on('end', () => {
        if (failed) return
        const text = Buffer.concat(chunks).toString('utf8')
        try {
          resolve(JSON.parse(text))
        } catch (e) {
          reject(badRequest('invalid_json', null, `the request body is not valid JSON: ${(e as Error).message}`))
        }
      })
    })
  }

  private checkModel(model: string | null): void {
    if (model !== null && model !== this.name) throw this.unknownModel(model)
  }

  private contextError(prompt: number, maxTokens: number, param: string, atLeast = false): ServeRequestError {
    const ctx = this.model.config.maxPositionEmbeddings
    return new ServeRequestError(
      400,
      'context_length_exceeded',
      `this model's maximum context length is ${ctx} tokens; the request asks for ${atLeast ? 'at least ' : ''}${prompt} prompt tokens + ${maxTokens} completion tokens`,
      param,
    )
  }

  private checkContext(prompts: number[][], maxTokens: number, param: string): void {
    const longest = Math.max(...prompts.map((p) => p.length))
    if (longest + maxTokens > this.model.config.maxPositionEmbeddings) throw this.contextError(longest, maxTokens, param)
  }

  /** max_tokens a request resolves to before its prompt is known (a chat's default is capped by the context left later). */
  private requestedMaxTokens(spec: CompletionSpec | ChatSpec): number {
    return spec.maxTokens ?? (spec.kind === 'chat' ? (this.options.defaultChatMaxTokens ?? 256) : (this.options.defaultCompletionMaxTokens ?? 16))
  }

  /**
   * Refuses (400) a request whose reply would pass maxResponseBytes: sequences × max_tokens × the
   * bytes each token costs with the logprobs asked (a 128-sample, 500-token, top-20 request is a
   * 128 MiB reply otherwise).
   */
  private checkReplySize(spec: CompletionSpec | ChatSpec): void {
    const sequences = spec.kind === 'chat' ? spec.n : spec.prompts.length * spec.n
    const top = spec.logprobs
    const b = REPLY_BYTES
    const perLogprob = top === null ? 0 : spec.kind === 'chat' ? b.chatLogprob + top * b.chatAlternative : b.completionLogprob + top * b.completionAlternative
    const perToken = b.text + perLogprob + (spec.stream ? b.streamChunk : 0)
    const estimate = sequences * (b.choice + this.requestedMaxTokens(spec) * perToken)
    if (estimate > this.maxResponseBytes)
      throw new ServeRequestError(
        400,
        'response_too_large',
        `this request could produce a reply of about ${(estimate / 2 ** 20).toFixed(1)} MiB (${sequences} sequences × ${this.requestedMaxTokens(spec)} tokens` +
          `${top === null ? '' : ` with ${top} top logprobs`}); the server sends at most ${(this.maxResponseBytes / 2 ** 20).toFixed(1)} MiB: lower n, max_tokens or logprobs`,
        top === null ? 'max_tokens' : 'logprobs',
      )
  }

  /** Before any tokenization: a text prompt whose token count is surely past the context is refused from its length alone. */
  private precheckContext(spec: CompletionSpec): void {
    const maxTokens = this.requestedMaxTokens(spec)
    for (const p of spec.prompts) {
      const atLeast = typeof p === 'string' ? this.model.tokenizer.minTokens(p) : p.length
      if (atLeast + maxTokens > this.model.config.maxPositionEmbeddings) throw this.contextError(atLeast, maxTokens, 'max_tokens', typeof p === 'string')
    }
  }

  private async resolveCompletion(spec: CompletionSpec): Promise<Resolved> {
    const vocab = this.model.config.vocabSize
    const prompts = await Promise.all(
      spec.prompts.map(async (p, i) => {
        if (typeof p !== 'string') {
          const bad = p.find((id) => id >= vocab)
          if (bad !== undefined) throw badRequest('invalid_value', 'prompt', `prompt ${i} holds token id ${bad}, outside the vocabulary [0, ${vocab})`)
          return p
        }
        const ids = await this.prompts.encode(p)
        if (ids.length === 0) throw badRequest('invalid_value', 'prompt', `prompt ${i} encodes to no tokens`)
        return ids
      }),
    )
    const maxTokens = this.requestedMaxTokens(spec)
    this.checkContext(prompts, maxTokens, 'max_tokens')
    return { spec, prompts, maxTokens }
  }

  private async resolveChat(spec: ChatSpec): Promise<Resolved> {
    const ids = await this.prompts.encodeChat(this.model.tokenizer.chatRender(spec.messages, { addGenerationPrompt: true, limits: this.options.templateLimits }))
    if (ids.length === 0) throw badRequest('invalid_value', 'messages', 'the conversation renders to no tokens')
    const left = this.model.config.maxPositionEmbeddings - ids.length
    const maxTokens = spec.maxTokens ?? Math.min(this.options.defaultChatMaxTokens ?? 256, Math.max(left, 1))
    this.checkContext([ids], maxTokens, spec.maxTokens === null ? 'messages' : 'max_tokens')
    return { spec, prompts: [ids], maxTokens }
  }

  /** Checks what costs nothing, waits for admission, prepares the prompts off the main thread, then generates. */
  private async serve(spec: CompletionSpec | ChatSpec, res: ServerResponse, signal: AbortSignal): Promise<void> {
    this.checkModel(spec.model)
    this.checkReplySize(spec)
    if (spec.kind === 'completion') this.precheckContext(spec)
    const sequences = spec.kind === 'chat' ? spec.n : spec.prompts.length * spec.n
    const release = await this.admission.acquire(sequences, signal, sequences * this.requestedMaxTokens(spec))
    try {
      const r = spec.kind === 'chat' ? await this.resolveChat(spec) : await this.resolveCompletion(spec)
      await (spec.stream ? this.serveStream(r, res, signal) : this.serveWhole(r, res, signal))
    } finally {
      release()
    }
  }

  private usage(r: Resolved, completions: Completion[]): Usage {
    const prompt = r.prompts.reduce((a, p) => a + p.length, 0)
    const completion = completions.reduce((a, c) => a + c.tokens.length, 0)
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
  }

  private finishReason(c: Completion): 'stop' | 'length' {
    if (c.finishReason === 'abort') throw new ServeRequestError(503, 'server_shutting_down', 'the generation was aborted: the server is shutting down')
    return c.finishReason
  }

  private batchRequest(r: Resolved, signal: AbortSignal): BatchRequest {
    const { spec } = r
    return { prompts: r.prompts, n: spec.n, maxTokens: r.maxTokens, sampling: spec.sampling, seed: spec.seed, stop: spec.stop, ignoreEos: spec.ignoreEos, statsTopK: spec.logprobs ?? 0, signal }
  }

  private async serveWhole(r: Resolved, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const { spec } = r
    const perPrompt = await this.batcher.submit(this.batchRequest(r, signal))
    const flat = perPrompt.flat()
    const created = Math.floor(Date.now() / 1000)
    if (spec.kind === 'completion') {
      const body: CompletionResponse = {
        id: `cmpl-${randomBytes(12).toString('hex')}`,
        object: 'text_completion',
        created,
        model: this.name,
        system_fingerprint: this.fingerprint,
        choices: flat.map((c, index) => ({
          index,
          text: c.text,
          logprobs: spec.logprobs === null ? null : completionLogprobs(c, spec.logprobs, this.stopSet, this.texts),
          finish_reason: this.finishReason(c),
        })),
        usage: this.usage(r, flat),
      }
      return this.sendJson(res, 200, body)
    }
    const body: ChatCompletionResponse = {
      id: `chatcmpl-${randomBytes(12).toString('hex')}`,
      object: 'chat.completion',
      created,
      model: this.name,
      system_fingerprint: this.fingerprint,
      choices: flat.map((c, index) => ({
        index,
        message: { role: 'assistant', content: c.text, refusal: null },
        logprobs: spec.logprobs === null ? null : chatLogprobs(c, spec.logprobs, this.stopSet, this.texts),
        finish_reason: this.finishReason(c),
      })),
      usage: this.usage(r, flat),
    }
    return this.sendJson(res, 200, body)
  }

  /** Server-sent events: one Model.stream per choice (joined to the running batch), chunks interleaved as they come, then [DONE]. */
  private async serveStream(r: Resolved, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const { spec } = r
    const streams = await this.batcher.stream(this.batchRequest(r, signal))
    const chat = spec.kind === 'chat'
    const id = `${chat ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`
    const created = Math.floor(Date.now() / 1000)
    const head = { id, object: chat ? 'chat.completion.chunk' : 'text_completion', created, model: this.name, system_fingerprint: this.fingerprint }
    const send = (payload: object | string) => {
      if (!res.destroyed && !res.writableEnded) res.write(`data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`)
    }
    const top = spec.logprobs ?? 0
    // The logprobs of a chunk's tokens in the endpoint's shape; offset: the characters of the
    // tokens sent before them (text_offset counts token texts, as the unstreamed reply does).
    const logprobsOf = (tokens: StreamChunk[], offset: number) =>
      spec.logprobs === null ? null : chat ? chatLogprobsOf(chunkTokens(tokens, top), this.texts) : completionLogprobsOf(chunkTokens(tokens, top), top, this.texts, offset)
    const textChunk = (index: number, text: string, logprobs: object | null) =>
      chat ? { ...head, choices: [{ index, delta: { content: text }, logprobs, finish_reason: null }] } : { ...head, choices: [{ index, text, logprobs, finish_reason: null }] }
    res.writeHead(200, SSE_HEADERS)
    res.flushHeaders()

    const finals: Completion[] = []
    const choice = async (p: number, s: number): Promise<void> => {
      const index = p * spec.n + s
      if (chat) send({ ...head, choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] })
      const gen = streams[p][s]
      let emitted = ''
      let unsent: StreamChunk[] = [] // tokens whose logprobs have not gone out yet
      let sentTokens = 0
      let offset = 0
      let step = await gen.next()
      while (!step.done) {
        unsent.push(step.value)
        // The last token's chunk waits for the final one, which knows whether it is shown.
        if (step.value.text && step.value.finishReason === null) {
          send(textChunk(index, step.value.text, logprobsOf(unsent, offset)))
          emitted += step.value.text
          sentTokens += unsent.length
          for (const ch of unsent) offset += this.texts.text(ch.token).length
          unsent = []
        }
        step = await gen.next()
      }
      const c = step.value
      finals[index] = c
      const finish = this.finishReason(c)
      // Text the stream held back (a partial character flushed at the end) goes in the last chunk,
      // with the logprobs of the tokens not yet sent — all of them shown but a final stop token.
      const rest = c.text.startsWith(emitted) ? c.text.slice(emitted.length) : ''
      const lastTokens = unsent.slice(0, Math.max(0, shownTokens(c, this.stopSet) - sentTokens))
      const logprobs = logprobsOf(lastTokens, offset)
      if (chat) send({ ...head, choices: [{ index, delta: rest ? { content: rest } : {}, logprobs, finish_reason: finish }] })
      else send({ ...head, choices: [{ index, text: rest, logprobs, finish_reason: finish }] })
    }

    const task = (async () => {
      const jobs: Promise<void>[] = []
      for (let p = 0; p < r.prompts.length; ++p) for (let s = 0; s < spec.n; ++s) jobs.push(choice(p, s))
      const outcomes = await Promise.allSettled(jobs)
      if (signal.aborted && !this.shutdown.signal.aborted) {
        this.streamAborts++
        return
      }
      const failure = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult | undefined
      if (failure) send(errorBody(this.shutdown.signal.aborted ? new ServeRequestError(503, 'server_shutting_down', 'the server is shutting down') : toServeError(failure.reason)))
      else if (spec.includeUsage) send({ ...head, choices: [], usage: this.usage(r, finals) })
      send('[DONE]')
      if (!res.destroyed) res.end()
    })()
    this.streams.add(task)
    return task.finally(() => this.streams.delete(task))
  }

  private sendJson(res: ServerResponse, status: number, body: unknown): void {
    if (res.destroyed || res.writableEnded) return
    const text = JSON.stringify(body)
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
    res.end(text)
  }

  private sendError(res: ServerResponse, e: ServeRequestError): void {
    if (res.headersSent) {
      // a stream already started: say so in the stream and end it
      if (!res.destroyed && !res.writableEnded) res.end(`data: ${JSON.stringify(errorBody(e))}\n\ndata: [DONE]\n\n`)
      return
    }
    if (e.status === 413) res.setHeader('connection', 'close')
    if (e.status === 429 || e.status === 503) res.setHeader('retry-after', '1')
    this.sendJson(res, e.status, errorBody(e))
  }
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest()
}

/** A path segment percent-decoded; a malformed escape is the client's error (400), not a crash (500). */
function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment)
  } catch {
    throw new ServeRequestError(400, 'invalid_path', `the path segment '${segment}' has a malformed percent-encoding`)
  }
}

/**
 * Answers what Node's HTTP parser refuses before a request exists, as JSON like every other
 * refusal: headers past maxHeaderBytes (431), headers or body too slow (408), anything else
 * unparsable (400). The connection is closed after.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  const started = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true
  if (!socket.writable || started || err.code === 'ECONNRESET') {
    socket.destroy()
    return
  }
  const [status, code, message] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'headers_too_large', 'the request headers are too large'] as const
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
        ? [408, 'request_timeout', 'the request (headers or body) took too long to arrive'] as const
        : [400, 'invalid_value', `the request could not be parsed (${err.code ?? 'malformed HTTP'})`] as const
  const body = JSON.stringify(errorBody(new ServeRequestError(status, code, message)))
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  )
}

/** A server over `options.model` (not yet listening). */
export function createOpenAIServer(options: ServeOptions): OpenAIServer {
  return new OpenAIServer(options)
}
