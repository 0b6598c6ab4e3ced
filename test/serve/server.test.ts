// `autodidact serve` in-process on the bundled toy model: OpenAI shapes of both endpoints, seeded
// equality with Model.generate, logprobs against Model.score, streaming, models/health, and a load
// of concurrent requests.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Model } from '../../src/engine/model.js'
import type { OpenAIServer } from '../../src/serve/server.js'
import { get, parseSse, post, serveBundledModel, type ServedModel, stopServing } from './helpers.js'

const PROMPTS = ['Solve: 3+4\n', 'Solve: 12*3-5\n']

let served: ServedModel | undefined
let model: Model
let server: OpenAIServer
let base: string

beforeAll(async () => {
  served = await serveBundledModel()
  ;({ model, server, base } = served)
})
afterAll(() => stopServing(served))

/** OpenAI's common envelope. */
function expectEnvelope(body: any, object: string): void {
  expect(body.id).toMatch(object.startsWith('chat') ? /^chatcmpl-[0-9a-f]{24}$/ : /^cmpl-[0-9a-f]{24}$/)
  expect(body.object).toBe(object)
  expect(Number.isInteger(body.created)).toBe(true)
  expect(body.model).toBe('arith-qwen3-tiny')
}

describe('POST /v1/completions', () => {
  it('answers a prompt array with n samples each, in OpenAI order, equal to Model.generate with the same seed', async () => {
    const r = await post(base, '/v1/completions', { model: 'arith-qwen3-tiny', prompt: PROMPTS, n: 3, max_tokens: 40, temperature: 0.9, seed: 11 })
    expect(r.status).toBe(200)
    expect(r.headers['content-type']).toMatch(/^application\/json/)
    expectEnvelope(r.json, 'text_completion')
    const choices = r.json.choices
    expect(choices.map((c: any) => c.index)).toEqual([0, 1, 2, 3, 4, 5])
    const direct = await model.generate(PROMPTS, { n: 3, maxTokens: 40, temperature: 0.9, seed: 11 })
    const flat = direct.flat()
    choices.forEach((c: any, i: number) => {
      expect(c.text).toBe(flat[i].text)
      expect(c.finish_reason).toBe(flat[i].finishReason)
      expect(c.logprobs).toBeNull()
    })
    const promptTokens = PROMPTS.reduce((a, p) => a + model.encodePrompt(p).length, 0)
    const completionTokens = flat.reduce((a, c) => a + c.tokens.length, 0)
    expect(r.json.usage).toEqual({ prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens })
    // the toy model answers these: the served text is the engine's text, and it is meaningful
    expect(choices[0].text).toContain('<answer>7</answer>')
  })

  it('takes token-id prompts, honours stop strings and max_tokens (finish_reason length)', async () => {
    const ids = model.encodePrompt(PROMPTS[0])
    const r = await post(base, '/v1/completions', { prompt: [ids], max_tokens: 40, temperature: 0, stop: ['</think>'] })
    expect(r.status).toBe(200)
    expect(r.json.choices[0].text).toBe('<think>3+4=7')
    expect(r.json.choices[0].finish_reason).toBe('stop')
    const short = await post(base, '/v1/completions', { prompt: PROMPTS[0], max_tokens: 3, temperature: 0 })
    expect(short.json.choices[0].finish_reason).toBe('length')
    expect(short.json.usage.completion_tokens).toBe(3)
    expect(short.json.choices[0].text).toBe('<think>3+')
  })

  it('logprobs: chosen tokens match Model.score within 1e-4, top-N are logit − logsumexp of the same step', async () => {
    const r = await post(base, '/v1/completions', { prompt: PROMPTS, n: 2, max_tokens: 40, temperature: 1, seed: 3, logprobs: 5 })
    expect(r.status).toBe(200)
    const choices = r.json.choices
    const pairs = choices.map((c: any, i: number) => ({ prompt: PROMPTS[Math.floor(i / 2)], completion: c.text }))
    const scored = await model.score(pairs, { stats: { topK: 5 } })
    choices.forEach((c: any, i: number) => {
      const lp = c.logprobs
      const s = scored[i]
      // the text re-encodes to the shown tokens (the final <|im_end|> is not shown, as its text is not in `text`)
      expect(lp.tokens.length).toBe(s.tokens.length)
      expect(lp.tokens).toEqual([...s.tokens].map((id) => model.tokenizer.decode([id])))
      expect(lp.tokens.join('')).toBe(c.text)
      expect(lp.text_offset[0]).toBe(0)
      for (let t = 0; t < lp.tokens.length; ++t) {
        expect(Math.abs(lp.token_logprobs[t] - s.logprobs[t])).toBeLessThan(1e-4)
        expect(lp.text_offset[t]).toBe(lp.tokens.slice(0, t).join('').length)
        const top = Object.entries(lp.top_logprobs[t] as Record<string, number>)
        expect(top.length).toBeGreaterThan(0)
        expect(top.length).toBeLessThanOrEqual(5)
        // float64 checks: a distribution's top-5 mass is at most 1, and the chosen token is no likelier than the best
        const mass = top.reduce((a, [, v]) => a + Math.exp(v), 0)
        expect(mass).toBeLessThanOrEqual(1 + 1e-5)
        expect(lp.token_logprobs[t]).toBeLessThanOrEqual(Math.max(...top.map(([, v]) => v)) + 1e-5)
        // every alternative of the score pass is there (a text shared by two ids keeps the likelier), as logit − logsumexp
        const seen = new Set<string>()
        for (let j = 0; j < 5; ++j) {
          const text = model.tokenizer.decode([s.topK!.ids[t * 5 + j]])
          if (seen.has(text)) continue
          seen.add(text)
          expect(Math.abs(lp.top_logprobs[t][text] - (s.topK!.logits[t * 5 + j] - s.logsumexp[t]))).toBeLessThan(1e-4)
        }
        expect(top.length).toBe(seen.size)
      }
    })
  })
})

describe('POST /v1/chat/completions', () => {
  const messages = [{ role: 'user', content: 'Solve: 3+4' }]

  it('renders the chat template, answers n choices with OpenAI message shapes and usage', async () => {
    const r = await post(base, '/v1/chat/completions', { model: 'arith-qwen3-tiny', messages, n: 2, max_tokens: 40, temperature: 0.7, seed: 5 })
    expect(r.status).toBe(200)
    expectEnvelope(r.json, 'chat.completion')
    const direct = (await model.generate([{ messages }], { n: 2, maxTokens: 40, temperature: 0.7, seed: 5 }))[0]
    expect(r.json.choices).toHaveLength(2)
    r.json.choices.forEach((c: any, i: number) => {
      expect(c.index).toBe(i)
      expect(c.message).toEqual({ role: 'assistant', content: direct[i].text, refusal: null })
      expect(c.finish_reason).toBe('stop')
      expect(c.logprobs).toBeNull()
    })
    const promptTokens = model.encodePrompt({ messages }).length
    expect(promptTokens).toBe(model.tokenizer.encode('<|im_start|>user\nSolve: 3+4<|im_end|>\n<|im_start|>assistant\n', { addSpecialTokens: false }).length)
    expect(r.json.usage.prompt_tokens).toBe(promptTokens)
    expect(r.json.usage.completion_tokens).toBe(direct[0].tokens.length + direct[1].tokens.length)
  })

  it('accepts content as text parts and max_completion_tokens', async () => {
    const r = await post(base, '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'text', text: 'Solve: ' }, { type: 'text', text: '3+4' }] }], max_completion_tokens: 40, temperature: 0 })
    expect(r.status).toBe(200)
    expect(r.json.choices[0].message.content).toBe('<think>3+4=7</think><answer>7</answer>')
  })

  it('logprobs with top_logprobs: chosen tokens match Model.score within 1e-4, with bytes', async () => {
    const r = await post(base, '/v1/chat/completions', { messages, max_tokens: 40, temperature: 1, seed: 9, logprobs: true, top_logprobs: 3 })
    expect(r.status).toBe(200)
    const c = r.json.choices[0]
    const [s] = await model.score([{ prompt: { messages }, completion: c.message.content }], { stats: { topK: 3 } })
    expect(c.logprobs.refusal).toBeNull()
    const content = c.logprobs.content
    expect(content.length).toBe(s.tokens.length)
    content.forEach((e: any, t: number) => {
      expect(e.token).toBe(model.tokenizer.decode([s.tokens[t]]))
      expect(e.bytes).toEqual([...Buffer.from(e.token, 'utf8')])
      expect(Math.abs(e.logprob - s.logprobs[t])).toBeLessThan(1e-4)
      expect(e.top_logprobs).toHaveLength(3)
      e.top_logprobs.forEach((a: any, j: number) => {
        expect(a.token).toBe(model.tokenizer.decode([s.topK!.ids[t * 3 + j]]))
        expect(Math.abs(a.logprob - (s.topK!.logits[t * 3 + j] - s.logsumexp[t]))).toBeLessThan(1e-4)
      })
    })
    const noTop = await post(base, '/v1/chat/completions', { messages, max_tokens: 40, temperature: 0, logprobs: true })
    expect(noTop.json.choices[0].logprobs.content.every((e: any) => Array.isArray(e.top_logprobs) && e.top_logprobs.length === 0)).toBe(true)
  })
})

describe('streaming', () => {
  it('completions: SSE chunks concatenate to the unstreamed text and logprobs of the same seed, token by token; finish_reason last; [DONE]', async () => {
    const req = { prompt: PROMPTS, n: 2, max_tokens: 40, temperature: 1, seed: 21, logprobs: 2 }
    const whole = await post(base, '/v1/completions', req)
    const streamed = await post(base, '/v1/completions', { ...req, stream: true })
    expect(streamed.status).toBe(200)
    expect(streamed.headers['content-type']).toMatch(/^text\/event-stream/)
    const { events, done } = parseSse(streamed.body)
    expect(done).toBe(true)
    expect(new Set(events.map((e) => e.id)).size).toBe(1)
    const text = ['', '', '', '']
    const finals: any[] = []
    const lp = [0, 1, 2, 3].map(() => ({ tokens: [] as string[], token_logprobs: [] as number[], top_logprobs: [] as object[], text_offset: [] as number[] }))
    let withLogprobs = 0
    for (const e of events) {
      expect(e.object).toBe('text_completion')
      expect(e.choices).toHaveLength(1)
      const ch = e.choices[0]
      expect(finals[ch.index]).toBeUndefined() // nothing after a choice's final chunk
      text[ch.index] += ch.text
      if (ch.finish_reason !== null) finals[ch.index] = ch
      if (ch.finish_reason === null && ch.logprobs.tokens.length) withLogprobs++
      for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) (lp[ch.index][key] as unknown[]).push(...ch.logprobs[key])
    }
    expect(events.length).toBeGreaterThan(8) // token by token, not one lump
    expect(withLogprobs).toBeGreaterThan(8) // logprobs arrive with their tokens, not all at the end
    whole.json.choices.forEach((c: any, i: number) => {
      expect(text[i]).toBe(c.text)
      expect(finals[i].finish_reason).toBe(c.finish_reason)
      expect(lp[i].tokens).toEqual(c.logprobs.tokens)
      expect(lp[i].text_offset).toEqual(c.logprobs.text_offset)
      expect(lp[i].top_logprobs.map((o) => Object.keys(o))).toEqual(c.logprobs.top_logprobs.map((o: object) => Object.keys(o)))
      lp[i].token_logprobs.forEach((v: number, t: number) => expect(Math.abs(v - c.logprobs.token_logprobs[t])).toBeLessThan(1e-4))
    })
  })

  it('chat: a role chunk, content deltas, a finish chunk, a usage chunk with include_usage, then [DONE]', async () => {
    const messages = [{ role: 'user', content: 'Solve: 3+4' }]
    const r = await post(base, '/v1/chat/completions', { messages, max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true }, logprobs: true })
    expect(r.status).toBe(200)
    const { events, done } = parseSse(r.body)
    expect(done).toBe(true)
    for (const e of events) expect(e.object).toBe('chat.completion.chunk')
    expect(events[0].choices[0].delta).toEqual({ role: 'assistant', content: '' })
    const usage = events[events.length - 1]
    expect(usage.choices).toEqual([])
    const last = events[events.length - 2].choices[0]
    expect(last.finish_reason).toBe('stop')
    const content = events.slice(1, -1).map((e) => e.choices[0].delta.content ?? '').join('')
    expect(content).toBe('<think>3+4=7</think><answer>7</answer>')
    const entries = events.slice(1, -1).flatMap((e) => e.choices[0].logprobs?.content ?? [])
    expect(entries.map((e: any) => e.token).join('')).toBe(content)
    for (const e of events.slice(1, -2)) expect(e.choices[0].logprobs.content.map((x: any) => x.token).join('')).toBe(e.choices[0].delta.content)
    expect(usage.usage.completion_tokens).toBe(entries.length + 1) // + the <|im_end|> that ended it
    expect(usage.usage.prompt_tokens).toBe(model.encodePrompt({ messages }).length)
  })
})

describe('models and health', () => {
  it('GET /v1/models lists the served model; /v1/models/{id} finds it or 404s; /health says ok', async () => {
    const list = await get(base, '/v1/models')
    expect(list.status).toBe(200)
    expect(list.json.object).toBe('list')
    expect(list.json.data).toEqual([{ id: 'arith-qwen3-tiny', object: 'model', created: expect.any(Number), owned_by: 'autodidact' }])
    expect((await get(base, '/v1/models/arith-qwen3-tiny')).json.id).toBe('arith-qwen3-tiny')
    const missing = await get(base, '/v1/models/gpt-4')
    expect(missing.status).toBe(404)
    expect(missing.json.error.code).toBe('model_not_found')
    const health = await get(base, '/health')
    expect(health.status).toBe(200)
    expect(health.json).toMatchObject({ status: 'ok', model: 'arith-qwen3-tiny' })
  })
})

describe('load', () => {
  it('holds 64 concurrent requests (completions, chat, streamed, seeded) without error, batching the identical ones', async () => {
    const before = { ...server.stats }
    const questions = Array.from({ length: 64 }, (_, i) => `${i + 2}+${(i * 7) % 30}`)
    const started = Date.now()
    const replies = await Promise.all(
      questions.map((q, i) => {
        if (i % 8 === 7) return post(base, '/v1/chat/completions', { messages: [{ role: 'user', content: `Solve: ${q}` }], max_tokens: 32, temperature: 0.5, stream: i % 16 === 15 })
        if (i % 8 === 6) return post(base, '/v1/completions', { prompt: `Solve: ${q}\n`, max_tokens: 32, temperature: 0.5, seed: i })
        return post(base, '/v1/completions', { prompt: `Solve: ${q}\n`, max_tokens: 32, temperature: 0.5 })
      }),
    )
    const seconds = (Date.now() - started) / 1000
    let answered = 0
    replies.forEach((r, i) => {
      expect(r.status).toBe(200)
      if (i % 16 === 15) {
        expect(parseSse(r.body).done).toBe(true)
        answered++
        return
      }
      const choice = r.json.choices[0]
      const text: string = choice.text ?? choice.message.content
      expect(['stop', 'length']).toContain(choice.finish_reason)
      if (/<answer>\d+<\/answer>/.test(text)) answered++
    })
    expect(answered).toBeGreaterThan(48) // the toy model answers in format almost always
    const after = server.stats
    const requests = after.requests - before.requests
    const batches = after.batches - before.batches
    expect(requests).toBe(60) // 4 of the 64 streamed, outside the batcher
    expect(batches).toBeLessThan(requests / 2) // the 48 identical unseeded completions shared calls
    expect(after.largestBatch).toBeGreaterThan(4)
    expect(after.inflight).toBe(0)
    expect(after.queued).toBe(0)
    console.log(`64 concurrent requests in ${seconds.toFixed(2)} s: ${requests} batched requests in ${batches} engine calls`)
  })
})
