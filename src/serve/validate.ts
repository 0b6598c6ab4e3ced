// Request validation for `autodidact serve`: a parsed JSON body in, a typed request spec out, or a
// ServeRequestError naming the offending field. Pure (no model): the server encodes prompts and
// checks the context length afterwards. Fields OpenAI defines that this server does not implement
// are refused when set to a non-default value (never silently ignored); unknown fields are ignored,
// as OpenAI clients send vendor extras.
import type { ChatMessage } from '../engine/tokenizer.js'
import { badRequest } from './errors.js'

export interface ServeLimits {
  /** Most samples per prompt (`n`). */
  maxN: number
  /** Most prompts in one completions request. */
  maxPrompts: number
  /** Most sequences (prompts × n) in one request. */
  maxSequences: number
  /** Most top-N alternatives per token (OpenAI: 20; the engine allows 64). */
  maxTopLogprobs: number
  /** Most stop strings. */
  maxStop: number
}

export const DEFAULT_LIMITS: ServeLimits = { maxN: 128, maxPrompts: 1024, maxSequences: 4096, maxTopLogprobs: 20, maxStop: 16 }

export interface SamplingSpec {
  temperature: number
  topK: number
  topP: number
  minP: number
  presencePenalty: number
  frequencyPenalty: number
  repetitionPenalty: number
}

interface CommonSpec {
  /** The `model` field, or null when absent. */
  model: string | null
  n: number
  /** null: the endpoint's default. */
  maxTokens: number | null
  sampling: SamplingSpec
  /** null: the server draws one (and may batch the request with others). */
  seed: number | null
  stop: string[]
  /** null: no logprobs; otherwise the number of top alternatives per token (0: the chosen token only). */
  logprobs: number | null
  stream: boolean
  /** stream_options.include_usage: a last chunk carrying usage. */
  includeUsage: boolean
  /** vLLM's `ignore_eos` extension: end-of-sequence tokens do not end generation (max_tokens does). */
  ignoreEos: boolean
}

export interface CompletionSpec extends CommonSpec {
  kind: 'completion'
  /** Text prompts or token-id prompts. */
  prompts: Array<string | number[]>
}

export interface ChatSpec extends CommonSpec {
  kind: 'chat'
  messages: ChatMessage[]
}

type Body = Record<string, unknown>

function isObject(v: unknown): v is Body {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function typeName(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v
}

/** An optional number field in [lo, hi] (integer when asked); absent or null → fallback. */
function numberField(body: Body, name: string, fallback: number, lo: number, hi: number, integer = false): number {
  const v = body[name]
  if (v === undefined || v === null) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v)) throw badRequest('invalid_type', name, `'${name}' must be a ${integer ? 'integer' : 'number'}, got ${typeName(v)}`)
  if (integer && !Number.isInteger(v)) throw badRequest('invalid_type', name, `'${name}' must be an integer, got ${v}`)
  if (v < lo || v > hi) throw badRequest('invalid_value', name, `'${name}' must be in [${lo}, ${hi}], got ${v}`)
  return v
}

function booleanField(body: Body, name: string, fallback: boolean): boolean {
  const v = body[name]
  if (v === undefined || v === null) return fallback
  if (typeof v !== 'boolean') throw badRequest('invalid_type', name, `'${name}' must be a boolean, got ${typeName(v)}`)
  return v
}

function modelField(body: Body): string | null {
  const v = body.model
  if (v === undefined || v === null) return null
  if (typeof v !== 'string') throw badRequest('invalid_type', 'model', `'model' must be a string, got ${typeName(v)}`)
  return v
}

function stopField(body: Body, limits: ServeLimits): string[] {
  const v = body.stop
  if (v === undefined || v === null) return []
  const list = typeof v === 'string' ? [v] : v
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string'))
    throw badRequest('invalid_type', 'stop', `'stop' must be a string or an array of strings, got ${typeName(v)}`)
  if (list.length > limits.maxStop) throw badRequest('invalid_value', 'stop', `'stop' holds ${list.length} strings; at most ${limits.maxStop}`)
  return (list as string[]).filter((s) => s.length > 0)
}

function seedField(body: Body): number | null {
  const v = body.seed
  if (v === undefined || v === null) return null
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw badRequest('invalid_value', 'seed', `'seed' must be a non-negative integer, got ${JSON.stringify(v)}`)
  return v
}

function samplingFields(body: Body): SamplingSpec {
  const topK = numberField(body, 'top_k', 0, -1, 1 << 20, true)
  return {
    temperature: numberField(body, 'temperature', 1, 0, 2),
    topK: topK < 0 ? 0 : topK, // vLLM's -1 and our 0 both mean off
    topP: numberField(body, 'top_p', 1, 0, 1) || Number.MIN_VALUE, // top_p 0 keeps the single most likely token
    minP: numberField(body, 'min_p', 0, 0, 1),
    presencePenalty: numberField(body, 'presence_penalty', 0, -2, 2),
    frequencyPenalty: numberField(body, 'frequency_penalty', 0, -2, 2),
    repetitionPenalty: numberField(body, 'repetition_penalty', 1, Number.MIN_VALUE, 10),
  }
}

function streamFields(body: Body): { stream: boolean; includeUsage: boolean } {
  const stream = booleanField(body, 'stream', false)
  const so = body.stream_options
  if (so === undefined || so === null) return { stream, includeUsage: false }
  if (!isObject(so)) throw badRequest('invalid_type', 'stream_options', `'stream_options' must be an object, got ${typeName(so)}`)
  if (!stream) throw badRequest('invalid_value', 'stream_options', `'stream_options' is only allowed with 'stream': true`)
  const iu = so.include_usage
  if (iu !== undefined && iu !== null && typeof iu !== 'boolean') throw badRequest('invalid_type', 'stream_options.include_usage', `'stream_options.include_usage' must be a boolean`)
  return { stream, includeUsage: iu === true }
}

/** Fields OpenAI defines that this server does not implement: refused unless absent or default. */
function refuseUnsupported(body: Body, fields: Record<string, (v: unknown) => boolean>): void {
  for (const [name, isDefault] of Object.entries(fields)) {
    const v = body[name]
    if (v !== undefined && v !== null && !isDefault(v)) throw badRequest('unsupported', name, `'${name}' is not supported by this server`)
  }
}

const isEmptyObject = (v: unknown) => isObject(v) && Object.keys(v).length === 0
const isEmptyArray = (v: unknown) => Array.isArray(v) && v.length === 0

function commonFields(body: Body, limits: ServeLimits, maxTokensName: 'max_tokens' | 'max_completion_tokens' | null): Omit<CommonSpec, 'logprobs'> {
  const n = numberField(body, 'n', 1, 1, limits.maxN, true)
  let maxTokens: number | null = null
  for (const name of ['max_tokens', maxTokensName] as const) {
    if (!name || body[name] === undefined || body[name] === null) continue
    maxTokens = numberField(body, name, 0, 1, 1 << 20, true)
  }
  return {
    model: modelField(body),
    n,
    maxTokens,
    sampling: samplingFields(body),
    seed: seedField(body),
    stop: stopField(body, limits),
    ignoreEos: booleanField(body, 'ignore_eos', false),
    ...streamFields(body),
  }
}

function requireBody(body: unknown): Body {
  if (!isObject(body)) throw badRequest('invalid_type', null, `the request body must be a JSON object, got ${typeName(body)}`)
  return body
}

function isTokenIds(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0)
}

/** `prompt`: a string, an array of strings, an array of token ids, or an array of token-id arrays. */
function promptField(body: Body, limits: ServeLimits): Array<string | number[]> {
  const v = body.prompt
  if (v === undefined || v === null) throw badRequest('missing_field', 'prompt', `'prompt' is required`)
  let prompts: Array<string | number[]>
  if (typeof v === 'string') prompts = [v]
  else if (isTokenIds(v)) prompts = [v]
  else if (Array.isArray(v) && v.length > 0 && v.every((p) => typeof p === 'string' || isTokenIds(p))) prompts = v as Array<string | number[]>
  else if (Array.isArray(v) && v.length === 0) throw badRequest('invalid_value', 'prompt', `'prompt' must not be an empty array`)
  else throw badRequest('invalid_type', 'prompt', `'prompt' must be a string, an array of strings, or (arrays of) non-negative integer token ids`)
  if (prompts.length > limits.maxPrompts) throw badRequest('invalid_value', 'prompt', `'prompt' holds ${prompts.length} prompts; at most ${limits.maxPrompts}`)
  return prompts
}

function checkSequences(prompts: number, n: number, limits: ServeLimits): void {
  if (prompts * n > limits.maxSequences)
    throw badRequest('invalid_value', 'n', `${prompts} prompt(s) × n=${n} = ${prompts * n} sequences; at most ${limits.maxSequences} per request`)
}

export function parseCompletionRequest(raw: unknown, limits: ServeLimits = DEFAULT_LIMITS): CompletionSpec {
  const body = requireBody(raw)
  refuseUnsupported(body, {
    echo: (v) => v === false,
    suffix: (v) => v === '',
    logit_bias: isEmptyObject,
    best_of: (v) => v === 1 || v === (body.n ?? 1),
  })
  const common = commonFields(body, limits, null)
  const logprobs = body.logprobs === undefined || body.logprobs === null ? null : numberField(body, 'logprobs', 0, 0, limits.maxTopLogprobs, true)
  const prompts = promptField(body, limits)
  checkSequences(prompts.length, common.n, limits)
  return { kind: 'completion', ...common, logprobs, prompts }
}

/** Message content: a string, or an array of `{ type: 'text', text }` parts (joined). */
function messageContent(content: unknown, i: number): string {
  if (typeof content === 'string') return content
  if (Array.isArray(content) && content.every((p) => isObject(p) && p.type === 'text' && typeof p.text === 'string'))
    return content.map((p) => (p as { text: string }).text).join('')
  if (Array.isArray(content)) throw badRequest('unsupported', `messages[${i}].content`, `messages[${i}].content: only text parts are supported`)
  throw badRequest('invalid_type', `messages[${i}].content`, `messages[${i}].content must be a string or an array of text parts, got ${typeName(content)}`)
}

/** The roles a chat message may have (a template given another role may render it as anything). */
export const CHAT_ROLES: readonly string[] = ['system', 'user', 'assistant', 'tool']

function messagesField(body: Body): ChatMessage[] {
  const v = body.messages
  if (v === undefined || v === null) throw badRequest('missing_field', 'messages', `'messages' is required`)
  if (!Array.isArray(v)) throw badRequest('invalid_type', 'messages', `'messages' must be an array, got ${typeName(v)}`)
  if (v.length === 0) throw badRequest('invalid_value', 'messages', `'messages' must not be empty`)
  return v.map((m, i) => {
    if (!isObject(m)) throw badRequest('invalid_type', `messages[${i}]`, `messages[${i}] must be an object, got ${typeName(m)}`)
    if (typeof m.role !== 'string' || m.role.length === 0) throw badRequest('invalid_type', `messages[${i}].role`, `messages[${i}].role must be a non-empty string`)
    if (!CHAT_ROLES.includes(m.role))
      throw badRequest('invalid_value', `messages[${i}].role`, `messages[${i}].role must be one of ${CHAT_ROLES.join(', ')}, got '${m.role}'`)
    const out: ChatMessage = { role: m.role, content: messageContent(m.content, i) }
    if (typeof m.name === 'string') out.name = m.name
    return out
  })
}

export function parseChatRequest(raw: unknown, limits: ServeLimits = DEFAULT_LIMITS): ChatSpec {
  const body = requireBody(raw)
  refuseUnsupported(body, {
    logit_bias: isEmptyObject,
    tools: isEmptyArray,
    functions: isEmptyArray,
    tool_choice: (v) => v === 'none',
    response_format: (v) => isObject(v) && v.type === 'text',
  })
  const common = commonFields(body, limits, 'max_completion_tokens')
  const want = booleanField(body, 'logprobs', false)
  const top = body.top_logprobs === undefined || body.top_logprobs === null ? null : numberField(body, 'top_logprobs', 0, 0, limits.maxTopLogprobs, true)
  if (top !== null && !want) throw badRequest('invalid_value', 'top_logprobs', `'top_logprobs' needs 'logprobs': true`)
  const messages = messagesField(body)
  checkSequences(1, common.n, limits)
  return { kind: 'chat', ...common, logprobs: want ? (top ?? 0) : null, messages }
}
