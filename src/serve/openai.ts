// The OpenAI wire shapes `autodidact serve` speaks (the subset it implements): legacy
// completions, chat completions, their streamed chunks, logprobs, models, usage and errors.
// Field names follow the OpenAI API reference exactly (snake_case), so any OpenAI client reads them.

export interface Usage {
  /** Prompt tokens, counted once per prompt (not once per sample). */
  prompt_tokens: number
  /** Generated tokens over all choices (an end-of-sequence token counts). */
  completion_tokens: number
  total_tokens: number
}

/** Legacy completions logprobs: parallel arrays over the choice's tokens. */
export interface CompletionLogprobs {
  tokens: string[]
  token_logprobs: number[]
  /** Per token: the top-N alternatives as token text → logprob (null when N = 0). */
  top_logprobs: Array<Record<string, number>> | null
  /** Character offset of each token in the choice's text. */
  text_offset: number[]
}

export interface CompletionChoice {
  index: number
  text: string
  logprobs: CompletionLogprobs | null
  finish_reason: 'stop' | 'length' | null
}

export interface CompletionResponse {
  id: string
  object: 'text_completion'
  created: number
  model: string
  system_fingerprint: string
  choices: CompletionChoice[]
  usage?: Usage | null
}

export interface TopLogprob {
  token: string
  logprob: number
  /** UTF-8 bytes of `token`. */
  bytes: number[]
}

export interface ChatTokenLogprob extends TopLogprob {
  top_logprobs: TopLogprob[]
}

export interface ChatLogprobs {
  content: ChatTokenLogprob[]
  refusal: null
}

export interface ChatChoice {
  index: number
  message: { role: 'assistant'; content: string; refusal: null }
  logprobs: ChatLogprobs | null
  finish_reason: 'stop' | 'length'
}

export interface ChatCompletionResponse {
  id: string
  object: 'chat.completion'
  created: number
  model: string
  system_fingerprint: string
  choices: ChatChoice[]
  usage: Usage
}

export interface ChatChunkChoice {
  index: number
  delta: { role?: 'assistant'; content?: string }
  logprobs: ChatLogprobs | null
  finish_reason: 'stop' | 'length' | null
}

export interface ChatCompletionChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  system_fingerprint: string
  choices: ChatChunkChoice[]
  usage?: Usage | null
}

export interface ModelObject {
  id: string
  object: 'model'
  created: number
  owned_by: string
}

export interface ModelList {
  object: 'list'
  data: ModelObject[]
}

export interface ErrorBody {
  error: {
    message: string
    type: 'invalid_request_error' | 'not_found_error' | 'authentication_error' | 'rate_limit_error' | 'server_error' | 'service_unavailable'
    param: string | null
    code: string | null
  }
}
