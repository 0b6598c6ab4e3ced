// A remote ensemble variant (DIS §4.5): an OpenAI-compatible endpoint, such as `autodidact serve`,
// vLLM or llama.cpp's server — `/v1/completions` for a text (or token-id) prompt, and
// `/v1/chat/completions` for chat messages, which the server renders with its own chat template
// (Qwen3's `enable_thinking` passed as vLLM's `chat_template_kwargs`). One HTTP request per
// prompt (concurrent requests are the server's to batch), each with its own
// timeout and the caller's AbortSignal. A bad status, a malformed body or a timeout is a
// RemoteVariantError naming the endpoint; the ensemble turns it into a dropped variant.
import { AutodidactError, InvalidArgumentError } from '../engine/errors.js'
import type { FinishReason, Prompt } from '../engine/model.js'
import type { ChatMessage } from '../engine/tokenizer.js'
import type { VariantSample, VariantSampleOptions, VariantSampler } from './types.js'

export type RemoteFailure = 'timeout' | 'aborted' | 'network' | 'http-status' | 'bad-response'

/** A remote variant failed to answer: unreachable, timed out, refused, or answered nonsense. */
export class RemoteVariantError extends AutodidactError {
  readonly url: string
  readonly reason: RemoteFailure
  /** HTTP status, when the server answered. */
  readonly status: number | null

  constructor(url: string, reason: RemoteFailure, message: string, status: number | null = null, options?: { cause?: unknown }) {
    super('REMOTE_VARIANT_ERROR', message, options)
    this.url = url
    this.reason = reason
    this.status = status
  }
}

export interface RemoteSamplerOptions {
  /** Server root, e.g. `http://127.0.0.1:8080` (a trailing `/v1` is accepted). */
  baseUrl: string
  /** The `model` field of each request (default: the first id `GET /v1/models` lists, asked once). */
  model?: string
  /** Name in metrics (default `remote:<baseUrl> <model>`). */
  name?: string
  /** Timeout of each HTTP request in milliseconds (default 30 000, DIS §4.5). */
  requestTimeoutMs?: number
  /** Bearer token, when the server wants one. */
  apiKey?: string
  /** Ask for per-token logprobs (`logprobs: 0`) and return them. Default false. */
  logprobs?: boolean
  /** fetch implementation (default: the global one). */
  fetch?: typeof fetch
}

/** The fields of an OpenAI completion (or chat completion) response this client reads. */
interface CompletionBody {
  choices?: Array<{ index?: unknown; text?: unknown; message?: { content?: unknown } | null; finish_reason?: unknown; logprobs?: { token_logprobs?: unknown } | null }>
}

function normalizeBase(url: string): string {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    throw new InvalidArgumentError('baseUrl', `not a URL: ${JSON.stringify(url)}`)
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InvalidArgumentError('baseUrl', `baseUrl must be http(s), got ${u.protocol}`)
  return u.toString().replace(/\/+$/, '').replace(/\/v1$/, '')
}

/** The request body of one prompt (OpenAI completions; top_k and min_p as vLLM's extensions, only when set). */
export function completionRequest(model: string, prompt: string | readonly number[], o: VariantSampleOptions, logprobs: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { model, prompt, n: o.n ?? 1 }
  return withSampling(body, o, logprobs)
}

/** The request body of one chat prompt (OpenAI chat completions; the template's enable_thinking as vLLM's chat_template_kwargs). */
export function chatRequest(model: string, chat: { messages: ChatMessage[]; template?: { enableThinking?: boolean } }, o: VariantSampleOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { model, messages: chat.messages, n: o.n ?? 1 }
  if (chat.template?.enableThinking !== undefined) body.chat_template_kwargs = { enable_thinking: chat.template.enableThinking }
  return withSampling(body, o, false)
}

function withSampling(body: Record<string, unknown>, o: VariantSampleOptions, logprobs: boolean): Record<string, unknown> {
  if (o.temperature !== undefined) body.temperature = o.temperature
  if (o.topP !== undefined) body.top_p = o.topP
  if (o.topK !== undefined && o.topK > 0) body.top_k = o.topK
  if (o.minP !== undefined && o.minP > 0) body.min_p = o.minP
  if (o.maxTokens !== undefined) body.max_tokens = o.maxTokens
  if (o.stop !== undefined && o.stop.length) body.stop = o.stop
  if (o.seed !== undefined) body.seed = o.seed
  if (logprobs) body.logprobs = 0
  return body
}

function finishReason(v: unknown): FinishReason {
  return v === 'length' ? 'length' : 'stop'
}

/** Reads the n choices of one completion response, in `index` order; throws on anything malformed. */
export function parseCompletionChoices(json: unknown, n: number, url: string): VariantSample[] {
  const choices = (json as CompletionBody | null)?.choices
  if (!Array.isArray(choices)) throw new RemoteVariantError(url, 'bad-response', `${url}: response has no "choices" array`)
  if (choices.length !== n) throw new RemoteVariantError(url, 'bad-response', `${url}: asked for ${n} choices, got ${choices.length}`)
  const out: (VariantSample | undefined)[] = new Array(n)
  choices.forEach((c, pos) => {
    const index = c?.index === undefined ? pos : c.index
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) >= n || out[index as number])
      throw new RemoteVariantError(url, 'bad-response', `${url}: choice index ${JSON.stringify(index)} is not a fresh integer in [0, ${n})`)
    const text = typeof c.text === 'string' ? c.text : c.message?.content
    if (typeof text !== 'string') throw new RemoteVariantError(url, 'bad-response', `${url}: choice ${index} has no text`)
    const sample: VariantSample = { text, finishReason: finishReason(c.finish_reason) }
    const lp = c.logprobs?.token_logprobs
    if (Array.isArray(lp) && lp.every((x) => typeof x === 'number')) sample.logprobs = Float32Array.from(lp as number[])
    out[index as number] = sample
  })
  return out as VariantSample[]
}

export class RemoteSampler implements VariantSampler {
  readonly name: string
  readonly baseUrl: string
  private model: string | null
  private modelLookup: Promise<string> | null = null
  private readonly timeoutMs: number
  private readonly fetchImpl: typeof fetch

  constructor(private readonly options: RemoteSamplerOptions) {
    this.baseUrl = normalizeBase(options.baseUrl)
    this.model = options.model || null
    this.name = options.name ?? `remote:${this.baseUrl}${this.model ? ` ${this.model}` : ''}`
    this.timeoutMs = options.requestTimeoutMs ?? 30_000
    if (!(this.timeoutMs > 0)) throw new InvalidArgumentError('requestTimeoutMs', `requestTimeoutMs must be positive, got ${this.timeoutMs}`)
    this.fetchImpl = options.fetch ?? fetch
  }

  async sample(prompts: Prompt[], o: VariantSampleOptions): Promise<VariantSample[][]> {
    return Promise.all(prompts.map((p) => (typeof p === 'string' || Array.isArray(p) ? this.complete(p as string | readonly number[], o) : this.chat(p as Exclude<Prompt, string | readonly number[]>, o))))
  }

  /** The served model's id: the configured one, or the first of `GET /v1/models`. */
  async modelId(signal?: AbortSignal): Promise<string> {
    if (this.model) return this.model
    this.modelLookup ??= this.request('GET', '/v1/models', undefined, signal).then((json) => {
      const id = (json as { data?: Array<{ id?: unknown }> })?.data?.[0]?.id
      if (typeof id !== 'string') throw new RemoteVariantError(`${this.baseUrl}/v1/models`, 'bad-response', `${this.baseUrl}/v1/models lists no model id`)
      this.model = id
      return id
    })
    return this.modelLookup.catch((e) => {
      this.modelLookup = null // ask again next time
      throw e
    })
  }

  /** One `/v1/completions` request: n samples of one prompt. */
  async complete(prompt: string | readonly number[], o: VariantSampleOptions): Promise<VariantSample[]> {
    const model = await this.modelId(o.signal)
    const json = await this.request('POST', '/v1/completions', completionRequest(model, prompt, o, this.options.logprobs ?? false), o.signal)
    return parseCompletionChoices(json, o.n ?? 1, `${this.baseUrl}/v1/completions`)
  }

  /** One `/v1/chat/completions` request: n samples of one conversation (the server applies its chat template). */
  async chat(prompt: { messages: ChatMessage[]; template?: { enableThinking?: boolean } }, o: VariantSampleOptions): Promise<VariantSample[]> {
    const model = await this.modelId(o.signal)
    const json = await this.request('POST', '/v1/chat/completions', chatRequest(model, prompt, o), o.signal)
    return parseCompletionChoices(json, o.n ?? 1, `${this.baseUrl}/v1/chat/completions`)
  }

  /** One HTTP request with the per-request timeout; the parsed JSON of a 2xx answer. */
  private async request(method: 'GET' | 'POST', path: string, body: unknown, callerSignal?: AbortSignal): Promise<unknown> {
    const url = `${this.baseUrl}${path}`
    const timeout = AbortSignal.timeout(this.timeoutMs)
    const signal = callerSignal ? AbortSignal.any([callerSignal, timeout]) : timeout
    const headers: Record<string, string> = {}
    if (body !== undefined) headers['content-type'] = 'application/json'
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`
    let res: Response
    let text: string
    try {
      res = await this.fetchImpl(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal })
      text = await res.text()
    } catch (e) {
      if (timeout.aborted) throw new RemoteVariantError(url, 'timeout', `${url}: no answer within ${this.timeoutMs} ms`, null, { cause: e })
      if (callerSignal?.aborted) throw new RemoteVariantError(url, 'aborted', `${url}: request aborted`, null, { cause: e })
      throw new RemoteVariantError(url, 'network', `${url}: ${(e as Error).message}${(e as { cause?: Error }).cause ? ` (${(e as { cause: Error }).cause.message})` : ''}`, null, { cause: e })
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      throw new RemoteVariantError(url, res.ok ? 'bad-response' : 'http-status', `${url}: HTTP ${res.status}, body is not JSON: ${text.slice(0, 200)}`, res.status)
    }
    if (!res.ok) {
      const message = (json as { error?: { message?: unknown } })?.error?.message
      throw new RemoteVariantError(url, 'http-status', `${url}: HTTP ${res.status}: ${typeof message === 'string' ? message : text.slice(0, 200)}`, res.status)
    }
    return json
  }
}
