// Typed HTTP errors of `autodidact serve`: every request the server refuses becomes one of these,
// then an OpenAI-style JSON body `{ error: { message, type, param, code } }` with its status.
import { AutodidactError, InvalidArgumentError, ResourceLimitError, TokenizerError } from '../engine/errors.js'
import type { ErrorBody } from './openai.js'

export type ServeErrorCode =
  | 'invalid_json'
  | 'invalid_type'
  | 'invalid_value'
  | 'missing_field'
  | 'unsupported'
  | 'model_not_found'
  | 'context_length_exceeded'
  | 'body_too_large'
  | 'not_found'
  | 'method_not_allowed'
  | 'server_shutting_down'
  | 'server_overloaded' // 503: queued too long, or the prompt worker had to be restarted
  | 'too_many_requests' // 429: the admission queue is full
  | 'response_too_large' // 400: n × max_tokens × logprobs would make a reply past the cap
  | 'prompt_too_expensive' // 400: the chat template or tokenizer hit a resource limit
  | 'invalid_api_key' // 401
  | 'host_not_allowed' // 403: the Host header is not in the allow-list (DNS rebinding)
  | 'unsupported_media_type' // 415: a POST body that is not application/json
  | 'invalid_path' // 400: a malformed percent-encoding in the path
  | 'request_timeout' // 408: headers or body too slow
  | 'headers_too_large' // 431
  | 'internal_error'

/** A request the server answers with an error status (4xx for the client's faults, 5xx for its own). */
export class ServeRequestError extends AutodidactError {
  readonly status: number
  readonly type: ErrorBody['error']['type']
  /** The offending request field (dotted path), when one is to blame. */
  readonly param: string | null

  constructor(status: number, code: ServeErrorCode, message: string, param: string | null = null, options?: { cause?: unknown }) {
    super(code, message, options)
    this.status = status
    this.param = param
    this.type =
      status === 404
        ? 'not_found_error'
        : status === 503
          ? 'service_unavailable'
          : status === 401
            ? 'authentication_error'
            : status === 429
              ? 'rate_limit_error'
              : status >= 500
                ? 'server_error'
                : 'invalid_request_error'
  }
}

/** 400 with the offending field named. */
export function badRequest(code: ServeErrorCode, param: string | null, message: string): ServeRequestError {
  return new ServeRequestError(400, code, message, param)
}

/**
 * Maps anything thrown while serving a request to a ServeRequestError: the engine's argument and
 * chat-template errors are the client's fault (400); anything else is the server's (500).
 */
export function toServeError(e: unknown): ServeRequestError {
  if (e instanceof ServeRequestError) return e
  if (e instanceof InvalidArgumentError) return new ServeRequestError(400, 'invalid_value', e.message, e.argument, { cause: e })
  if (e instanceof TokenizerError) return new ServeRequestError(400, 'invalid_value', e.message, 'messages', { cause: e })
  if (e instanceof ResourceLimitError) return new ServeRequestError(400, 'prompt_too_expensive', e.message, null, { cause: e })
  const message = e instanceof Error ? e.message : String(e)
  return new ServeRequestError(500, 'internal_error', `internal error: ${message}`, null, { cause: e })
}

export function errorBody(e: ServeRequestError): ErrorBody {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } }
}
