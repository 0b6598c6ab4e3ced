// Logprobs in OpenAI's two shapes, from the engine's per-token statistics of the sampling pass.
// The chosen token's logprob is the engine's log π(token) under the raw (pre-temperature) logits;
// each top-N alternative j is converted from its raw logit z_j with the step's log-sum-exp:
//   log π(j) = z_j − log Σ_v exp(z_v)
// so every number is a log-probability of the model's own distribution, whatever the sampling
// temperature (as vLLM's default `logprobs_mode`).
import type { Completion, StreamChunk } from '../engine/model.js'
import type { Tokenizer } from '../engine/tokenizer.js'
import type { ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob } from './openai.js'

/** The text of single tokens, decoded once each. */
export class TokenTexts {
  private readonly cache = new Map<number, string>()
  constructor(private readonly tokenizer: Tokenizer) {}

  text(id: number): string {
    let t = this.cache.get(id)
    if (t === undefined) {
      t = this.tokenizer.decode([id], { skipSpecialTokens: false })
      this.cache.set(id, t)
    }
    return t
  }
}

/**
 * How many of a completion's tokens the logprobs show: all of them but a final stop token id,
 * whose text the engine leaves out of `text` (as OpenAI leaves out <|im_end|>).
 */
export function shownTokens(c: Pick<Completion, 'tokens' | 'finishReason'>, stopTokenIds: ReadonlySet<number>): number {
  const T = c.tokens.length
  return T > 0 && c.finishReason === 'stop' && stopTokenIds.has(c.tokens[T - 1]) ? T - 1 : T
}

/** Top-N alternatives of step t as (id, logprob), most likely first, from raw logits and the step's logsumexp. */
export function topAlternatives(c: Pick<Completion, 'topK' | 'logsumexp'>, t: number, n: number): Array<{ id: number; logprob: number }> {
  if (n <= 0 || !c.topK) return []
  const { k, ids, logits } = c.topK
  const lse = c.logsumexp[t]
  const out: Array<{ id: number; logprob: number }> = []
  for (let j = 0; j < Math.min(n, k); ++j) out.push({ id: ids[t * k + j], logprob: logits[t * k + j] - lse })
  return out
}

/** One shown token: its id, logprob and top-N alternatives (most likely first). */
export interface TokenLogprob {
  token: number
  logprob: number
  alternatives: Array<{ id: number; logprob: number }>
}

/** The shown tokens of a whole completion. */
export function completionTokens(c: Completion, top: number, stopTokenIds: ReadonlySet<number>): TokenLogprob[] {
  return Array.from({ length: shownTokens(c, stopTokenIds) }, (_, t) => ({ token: c.tokens[t], logprob: c.logprobs[t], alternatives: topAlternatives(c, t, top) }))
}

/** The tokens of stream chunks (each with its step's top-K and logsumexp), as completionTokens. */
export function chunkTokens(chunks: readonly StreamChunk[], top: number): TokenLogprob[] {
  return chunks.map((ch) => {
    const alternatives: Array<{ id: number; logprob: number }> = []
    if (top > 0 && ch.topK)
      for (let j = 0; j < Math.min(top, ch.topK.ids.length); ++j) alternatives.push({ id: ch.topK.ids[j], logprob: ch.topK.logits[j] - ch.logsumexp })
    return { token: ch.token, logprob: ch.logprob, alternatives }
  })
}

/**
 * Legacy completions logprobs; text_offset counts characters from the start of the choice's text
 * (`offset`: the characters before these tokens, for a stream's later chunks).
 */
export function completionLogprobsOf(tokens: readonly TokenLogprob[], top: number, texts: TokenTexts, offset = 0): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: top > 0 ? [] : null, text_offset: [] }
  for (const tk of tokens) {
    const text = texts.text(tk.token)
    out.tokens.push(text)
    out.token_logprobs.push(tk.logprob)
    out.text_offset.push(offset)
    offset += text.length
    if (out.top_logprobs) {
      const alt: Record<string, number> = {}
      for (const a of tk.alternatives) {
        const key = texts.text(a.id)
        if (!(key in alt)) alt[key] = a.logprob // two ids with one text: the likelier one (listed first) wins
      }
      out.top_logprobs.push(alt)
    }
  }
  return out
}

function entry(text: string, logprob: number): TopLogprob {
  return { token: text, logprob, bytes: [...Buffer.from(text, 'utf8')] }
}

/** Chat logprobs: one entry per token with its top-N alternatives. */
export function chatLogprobsOf(tokens: readonly TokenLogprob[], texts: TokenTexts): ChatLogprobs {
  const content: ChatTokenLogprob[] = tokens.map((tk) => ({
    ...entry(texts.text(tk.token), tk.logprob),
    top_logprobs: tk.alternatives.map((a) => entry(texts.text(a.id), a.logprob)),
  }))
  return { content, refusal: null }
}

/** Legacy completions logprobs of a whole completion. */
export function completionLogprobs(c: Completion, top: number, stopTokenIds: ReadonlySet<number>, texts: TokenTexts): CompletionLogprobs {
  return completionLogprobsOf(completionTokens(c, top, stopTokenIds), top, texts)
}

/** Chat logprobs of a whole completion. */
export function chatLogprobs(c: Completion, top: number, stopTokenIds: ReadonlySet<number>, texts: TokenTexts): ChatLogprobs {
  return chatLogprobsOf(completionTokens(c, top, stopTokenIds), texts)
}
