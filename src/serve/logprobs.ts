// Logprobs in OpenAI's two shapes, from the engine's per-token statistics of the sampling pass.
// The chosen token's logprob is the engine's log π(token) under the raw (pre-temperature) logits;
// each top-N alternative j is converted from its raw logit z_j with the step's log-sum-exp:
//   log π(j) = z_j − log Σ_v exp(z_v)
// so every number is a log-probability of the model's own distribution, whatever the sampling
// temperature (as vLLM's default `logprobs_mode`).
import type { Completion } from '../engine/model.js'
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

/** Legacy completions logprobs; text_offset counts characters from the start of the choice's text. */
export function completionLogprobs(c: Completion, top: number, stopTokenIds: ReadonlySet<number>, texts: TokenTexts): CompletionLogprobs {
  const T = shownTokens(c, stopTokenIds)
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: top > 0 ? [] : null, text_offset: [] }
  let offset = 0
  for (let t = 0; t < T; ++t) {
    const text = texts.text(c.tokens[t])
    out.tokens.push(text)
    out.token_logprobs.push(c.logprobs[t])
    out.text_offset.push(offset)
    offset += text.length
    if (out.top_logprobs) {
      const alt: Record<string, number> = {}
      for (const a of topAlternatives(c, t, top)) {
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
export function chatLogprobs(c: Completion, top: number, stopTokenIds: ReadonlySet<number>, texts: TokenTexts): ChatLogprobs {
  const T = shownTokens(c, stopTokenIds)
  const content: ChatTokenLogprob[] = []
  for (let t = 0; t < T; ++t) {
    const alts = topAlternatives(c, t, top).map((a) => entry(texts.text(a.id), a.logprob))
    content.push({ ...entry(texts.text(c.tokens[t]), c.logprobs[t]), top_logprobs: alts })
  }
  return { content, refusal: null }
}
