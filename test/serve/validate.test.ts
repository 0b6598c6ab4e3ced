// Request parsing and logprob conversion of `autodidact serve`, without a model or sockets.
import { describe, expect, it } from 'vitest'
import { ServeRequestError } from '../../src/serve/errors.js'
import { shownTokens, topAlternatives } from '../../src/serve/logprobs.js'
import { parseChatRequest, parseCompletionRequest } from '../../src/serve/validate.js'

describe('parseCompletionRequest', () => {
  it('fills OpenAI defaults', () => {
    expect(parseCompletionRequest({ prompt: 'hi' })).toEqual({
      kind: 'completion',
      model: null,
      n: 1,
      maxTokens: null,
      sampling: { temperature: 1, topK: 0, topP: 1, minP: 0, presencePenalty: 0, frequencyPenalty: 0, repetitionPenalty: 1 },
      seed: null,
      stop: [],
      ignoreEos: false,
      stream: false,
      includeUsage: false,
      logprobs: null,
      prompts: ['hi'],
    })
  })

  it('reads every field it implements, mapping vLLM top_k -1 and top_p 0 to the engine', () => {
    const s = parseCompletionRequest({
      model: 'm', prompt: [[1, 2, 3], [4]], n: 3, max_tokens: 9, temperature: 0, top_k: -1, top_p: 0, min_p: 0.1,
      presence_penalty: 0.5, frequency_penalty: -0.5, repetition_penalty: 1.2, seed: 42, stop: 'X', logprobs: 0,
      stream: true, stream_options: { include_usage: true }, ignore_eos: true, user: 'someone', echo: false, best_of: 3,
    })
    expect(s.prompts).toEqual([[1, 2, 3], [4]])
    expect(s.sampling).toEqual({ temperature: 0, topK: 0, topP: Number.MIN_VALUE, minP: 0.1, presencePenalty: 0.5, frequencyPenalty: -0.5, repetitionPenalty: 1.2 })
    expect([s.model, s.n, s.maxTokens, s.seed, s.stop, s.logprobs, s.stream, s.includeUsage, s.ignoreEos]).toEqual(['m', 3, 9, 42, ['X'], 0, true, true, true])
  })

  it('counts sequences against the limit', () => {
    const limits = { maxN: 8, maxPrompts: 4, maxSequences: 10, maxTopLogprobs: 20, maxStop: 4 }
    expect(() => parseCompletionRequest({ prompt: ['a', 'b', 'c'], n: 4 }, limits)).toThrow(/12 sequences; at most 10/)
    expect(() => parseCompletionRequest({ prompt: ['a', 'b', 'c', 'd', 'e'] }, limits)).toThrow(/at most 4/)
    expect(() => parseCompletionRequest({ prompt: 'a', stop: ['1', '2', '3', '4', '5'] }, limits)).toThrow(/at most 4/)
    expect(parseCompletionRequest({ prompt: ['a', 'b'], n: 5 }, limits).n).toBe(5)
  })

  it('throws ServeRequestError 400 with the field named', () => {
    try {
      parseCompletionRequest({ prompt: 'x', top_p: 'high' })
      expect.unreachable()
    } catch (e) {
      expect(e).toBeInstanceOf(ServeRequestError)
      expect((e as ServeRequestError).status).toBe(400)
      expect((e as ServeRequestError).param).toBe('top_p')
      expect((e as ServeRequestError).code).toBe('invalid_type')
    }
  })
})

describe('parseChatRequest', () => {
  it('joins text parts, keeps names, maps logprobs/top_logprobs', () => {
    const s = parseChatRequest({
      messages: [{ role: 'system', content: 'be brief' }, { role: 'user', name: 'ann', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }],
      logprobs: true,
      top_logprobs: 4,
      max_completion_tokens: 7,
      tool_choice: 'none',
      tools: [],
    })
    expect(s.messages).toEqual([{ role: 'system', content: 'be brief' }, { role: 'user', name: 'ann', content: 'ab' }])
    expect(s.logprobs).toBe(4)
    expect(s.maxTokens).toBe(7)
    expect(parseChatRequest({ messages: [{ role: 'user', content: 'x' }], logprobs: true }).logprobs).toBe(0)
    expect(parseChatRequest({ messages: [{ role: 'user', content: 'x' }], logprobs: false }).logprobs).toBeNull()
  })
})

describe('logprobs from engine statistics', () => {
  // two steps, vocabulary of 4: raw logits per step; the engine's stats are what it would report
  const logits = [
    [2, 0.5, -1, 1],
    [0, 3, 1, -2],
  ]
  const lse = logits.map((row) => Math.log(row.reduce((a, z) => a + Math.exp(z), 0)))
  const topIds = logits.map((row) => row.map((_, i) => i).sort((a, b) => row[b] - row[a]).slice(0, 3))
  const stats = {
    tokens: Int32Array.from([0, 2]),
    logsumexp: Float32Array.from(lse),
    topK: { k: 3, ids: Int32Array.from(topIds.flat()), logits: Float32Array.from(topIds.flatMap((ids, t) => ids.map((i) => logits[t][i]))) },
  }

  it('top alternatives are log-softmax values of the raw logits (float64 reference, 1e-6)', () => {
    for (let t = 0; t < 2; ++t) {
      const alts = topAlternatives(stats, t, 2)
      expect(alts.map((a) => a.id)).toEqual(topIds[t].slice(0, 2))
      alts.forEach((a) => expect(Math.abs(a.logprob - (logits[t][a.id] - lse[t]))).toBeLessThan(1e-6))
    }
    expect(topAlternatives(stats, 0, 10)).toHaveLength(3) // no more than the engine recorded
    expect(topAlternatives(stats, 0, 0)).toEqual([])
    expect(topAlternatives({ logsumexp: stats.logsumexp }, 0, 2)).toEqual([])
  })

  it('hides a final stop token only when it ended the sequence', () => {
    const stop = new Set([2])
    expect(shownTokens({ tokens: Int32Array.from([5, 2]), finishReason: 'stop' }, stop)).toBe(1)
    expect(shownTokens({ tokens: Int32Array.from([5, 2]), finishReason: 'length' }, stop)).toBe(2)
    expect(shownTokens({ tokens: Int32Array.from([5, 6]), finishReason: 'stop' }, stop)).toBe(2) // a stop string ended it
    expect(shownTokens({ tokens: Int32Array.from([]), finishReason: 'stop' }, stop)).toBe(0)
  })
})
