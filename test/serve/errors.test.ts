// `autodidact serve` refuses bad requests with 4xx JSON errors and keeps serving; a client that
// disconnects aborts its generation in the engine; shutdown answers what is left and stops.
import { request } from 'node:http'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Completion, type Model } from '../../src/engine/model.js'
import { Batcher } from '../../src/serve/batcher.js'
import { createOpenAIServer, type OpenAIServer } from '../../src/serve/server.js'
import { writeTinyModel } from '../helpers/tiny-model.js'
import { get, post, send, serveBundledModel, type ServedModel, stopServing, until } from './helpers.js'

let served: ServedModel | undefined
let model: Model
let base: string

beforeAll(async () => {
  served = await serveBundledModel({ maxBodyBytes: 4096, limits: { maxN: 16 } })
  ;({ model, base } = served)
})
afterAll(() => stopServing(served))

const C = '/v1/completions'
const CHAT = '/v1/chat/completions'
const msgs = [{ role: 'user', content: 'Solve: 1+1' }]

// [what, path, body (string = raw), status, error.code, error.param]
const CASES: Array<[string, string, unknown, number, string, string | null]> = [
  ['malformed JSON', C, '{"prompt": "x",', 400, 'invalid_json', null],
  ['a JSON array body', C, '[1, 2]', 400, 'invalid_type', null],
  ['an empty body', C, '', 400, 'invalid_json', null],
  ['no prompt', C, { max_tokens: 4 }, 400, 'missing_field', 'prompt'],
  ['a numeric prompt', C, { prompt: 3 }, 400, 'invalid_type', 'prompt'],
  ['an empty prompt list', C, { prompt: [] }, 400, 'invalid_value', 'prompt'],
  ['a mixed prompt list', C, { prompt: ['a', 3] }, 400, 'invalid_type', 'prompt'],
  ['a token id outside the vocabulary', C, { prompt: [5, 99999] }, 400, 'invalid_value', 'prompt'],
  ['an unknown model', C, { model: 'gpt-4o', prompt: 'x' }, 404, 'model_not_found', 'model'],
  ['n = 0', C, { prompt: 'x', n: 0 }, 400, 'invalid_value', 'n'],
  ['fractional n', C, { prompt: 'x', n: 1.5 }, 400, 'invalid_type', 'n'],
  ['n too large', C, { prompt: 'x', n: 17 }, 400, 'invalid_value', 'n'],
  ['negative max_tokens', C, { prompt: 'x', max_tokens: -1 }, 400, 'invalid_value', 'max_tokens'],
  ['max_tokens as a string', C, { prompt: 'x', max_tokens: '10' }, 400, 'invalid_type', 'max_tokens'],
  ['max_tokens past the context', C, { prompt: 'x', max_tokens: 5000 }, 400, 'context_length_exceeded', 'max_tokens'],
  ['temperature out of range', C, { prompt: 'x', temperature: 3 }, 400, 'invalid_value', 'temperature'],
  ['temperature as a string', C, { prompt: 'x', temperature: 'hot' }, 400, 'invalid_type', 'temperature'],
  ['top_p above 1', C, { prompt: 'x', top_p: 1.5 }, 400, 'invalid_value', 'top_p'],
  ['fractional top_k', C, { prompt: 'x', top_k: 2.5 }, 400, 'invalid_type', 'top_k'],
  ['min_p below 0', C, { prompt: 'x', min_p: -0.1 }, 400, 'invalid_value', 'min_p'],
  ['a negative seed', C, { prompt: 'x', seed: -1 }, 400, 'invalid_value', 'seed'],
  ['a numeric stop', C, { prompt: 'x', stop: 5 }, 400, 'invalid_type', 'stop'],
  ['too many logprobs', C, { prompt: 'x', logprobs: 50 }, 400, 'invalid_value', 'logprobs'],
  ['stream as a string', C, { prompt: 'x', stream: 'yes' }, 400, 'invalid_type', 'stream'],
  ['stream_options without stream', C, { prompt: 'x', stream_options: { include_usage: true } }, 400, 'invalid_value', 'stream_options'],
  ['echo (not implemented)', C, { prompt: 'x', echo: true }, 400, 'unsupported', 'echo'],
  ['best_of (not implemented)', C, { prompt: 'x', best_of: 3 }, 400, 'unsupported', 'best_of'],
  ['no messages', CHAT, { max_tokens: 4 }, 400, 'missing_field', 'messages'],
  ['messages not a list', CHAT, { messages: 'hi' }, 400, 'invalid_type', 'messages'],
  ['empty messages', CHAT, { messages: [] }, 400, 'invalid_value', 'messages'],
  ['a message without a role', CHAT, { messages: [{ content: 'hi' }] }, 400, 'invalid_type', 'messages[0].role'],
  ['numeric content', CHAT, { messages: [{ role: 'user', content: 7 }] }, 400, 'invalid_type', 'messages[0].content'],
  ['image content', CHAT, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, 'unsupported', 'messages[0].content'],
  ['top_logprobs without logprobs', CHAT, { messages: msgs, top_logprobs: 2 }, 400, 'invalid_value', 'top_logprobs'],
  ['logprobs as a number', CHAT, { messages: msgs, logprobs: 3 }, 400, 'invalid_type', 'logprobs'],
  ['tools (not implemented)', CHAT, { messages: msgs, tools: [{ type: 'function', function: { name: 'f' } }] }, 400, 'unsupported', 'tools'],
  ['an unknown chat model', CHAT, { model: 'llama', messages: msgs }, 404, 'model_not_found', 'model'],
  ['a body over the limit', C, { prompt: 'x'.repeat(5000) }, 413, 'body_too_large', null],
]

describe('bad requests', () => {
  it.each(CASES)('%s', async (_what, path, body, status, code, param) => {
    const r = await post(base, path, body)
    expect(r.status).toBe(status)
    expect(r.headers['content-type']).toMatch(/^application\/json/)
    expect(r.json.error.code).toBe(code)
    expect(r.json.error.param).toBe(param)
    expect(typeof r.json.error.message).toBe('string')
    expect(r.json.error.message.length).toBeGreaterThan(5)
    expect(r.json.error.type).toBe(status === 404 ? 'not_found_error' : 'invalid_request_error')
  })

  it('a chunked body over the limit (no content-length) is refused with 413 too', async () => {
    const r = await new Promise<{ status: number; json: any }>((resolve, reject) => {
      const req = request(`${base}${C}`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        let text = ''
        res.on('data', (c) => (text += c))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }))
      })
      req.on('error', reject)
      req.write('{"prompt": "')
      req.end('y'.repeat(6000) + '"}')
    })
    expect(r.status).toBe(413)
    expect(r.json.error.code).toBe('body_too_large')
  })

  it('unknown routes 404 and wrong methods 405, as JSON', async () => {
    const missing = await get(base, '/v1/embeddings')
    expect(missing.status).toBe(404)
    expect(missing.json.error.code).toBe('not_found')
    const wrong = await get(base, C)
    expect(wrong.status).toBe(405)
    expect(wrong.headers.allow).toBe('POST')
    expect(wrong.json.error.code).toBe('method_not_allowed')
    const wrong2 = await send(base, 'POST', '/v1/models', {})
    expect(wrong2.status).toBe(405)
  })

  it('keeps serving after all of them', async () => {
    const r = await post(base, C, { prompt: 'Solve: 2+2\n', max_tokens: 30, temperature: 0 })
    expect(r.status).toBe(200)
    expect(r.json.choices[0].text).toContain('<answer>4</answer>')
  })
})

describe('client disconnect', () => {
  // With ignore_eos, a random tiny model generates exactly max_tokens tokens: 16 × 1000 take
  // seconds unless aborted.
  let root: string
  let slow: Model
  let slowServer: OpenAIServer
  let slowBase: string
  const results: Completion[][][] = []

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'ad-serve-'))
    const tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 4, hiddenSize: 128, intermediate: 512, layers: 4 })
    slow = await loadModel(tiny.dir, { threads: 1 })
    // record what the engine returns to the server
    const generate = slow.generate.bind(slow)
    slow.generate = async (...args: Parameters<Model['generate']>) => {
      const r = await generate(...args)
      results.push(r)
      return r
    }
    slowServer = createOpenAIServer({ model: slow, name: 'tiny' })
    slowBase = (await slowServer.listen(0)).url
  })
  afterAll(async () => {
    await slowServer?.close()
    slow?.dispose()
    rmSync(root, { recursive: true, force: true })
  })

  function leaveEarly(path: string, body: unknown, when: 'response' | 'inflight'): Promise<void> {
    return new Promise((resolve, reject) => {
      const req = request(`${slowBase}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`))
        res.once('data', () => {
          req.destroy()
          resolve()
        })
      })
      req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNRESET' || req.destroyed ? resolve() : reject(e)))
      req.end(JSON.stringify(body))
      if (when === 'inflight')
        until(() => slowServer.stats.inflight === 1, 10_000, 'the engine call').then(() => {
          req.destroy()
          resolve()
        }, reject)
    })
  }

  it('a non-streamed request whose client leaves aborts its engine call; the server keeps serving', async () => {
    const before = slowServer.stats.engineAborts
    const started = Date.now()
    await leaveEarly(C, { prompt: 'hello', n: 16, max_tokens: 1000, temperature: 1, seed: 1, ignore_eos: true }, 'inflight')
    await until(() => slowServer.stats.inflight === 0, 20_000, 'the aborted call to return')
    expect(slowServer.stats.engineAborts).toBe(before + 1)
    const last = results[results.length - 1].flat()
    expect(last.some((c) => c.finishReason === 'abort')).toBe(true)
    expect(last.every((c) => c.tokens.length < 1000)).toBe(true)
    expect(Date.now() - started).toBeLessThan(20_000)
    const r = await post(slowBase, C, { prompt: 'hello', max_tokens: 4 })
    expect(r.status).toBe(200)
    expect(r.json.usage.completion_tokens).toBeLessThanOrEqual(4)
  })

  it('a stream whose client leaves after the first chunk stops generating', async () => {
    const before = slowServer.stats.streamAborts
    await leaveEarly(CHAT, { messages: msgs, max_tokens: 900, temperature: 1, seed: 2, stream: true, ignore_eos: true }, 'response')
    await until(() => slowServer.stats.streams === 0, 20_000, 'the stream to end')
    expect(slowServer.stats.streamAborts).toBe(before + 1)
    const h = await get(slowBase, '/health')
    expect(h.status).toBe(200)
  })

  it('seeded requests share an engine call and each gets exactly its own solo samples', async () => {
    const batcher = new Batcher(slow, { stopTokenIds: [], windowMs: 20 })
    const sampling = { temperature: 1, topK: 0, topP: 1, minP: 0, presencePenalty: 0, frequencyPenalty: 0, repetitionPenalty: 1 }
    const prompts = [slow.encodePrompt('hello'), slow.encodePrompt('a b c')]
    const job = (seed: number | null, p: number[][]) =>
      batcher.submit({ prompts: p, n: 2, maxTokens: 8, sampling, seed, stop: [], ignoreEos: false, statsTopK: 0, signal: new AbortController().signal })
    const [a, b, c] = await Promise.all([job(11, prompts), job(12, [prompts[1]]), job(null, [prompts[0]])])
    expect(batcher.stats.batches).toBe(1)
    expect(batcher.stats.largestBatch).toBe(3)
    const solo = (seed: number, p: number[][]) => slow.generate(p, { n: 2, maxTokens: 8, temperature: 1, seed, stopTokenIds: [] })
    const tokens = (r: Completion[][]) => r.map((g) => g.map((x) => Array.from(x.tokens)))
    expect(tokens(a)).toEqual(tokens(await solo(11, prompts)))
    expect(tokens(b)).toEqual(tokens(await solo(12, [prompts[1]])))
    expect(c[0]).toHaveLength(2)
    await batcher.close()
  })

  it('a request that shares an engine call with others: its leaving does not stop theirs; the call stops when all have left', async () => {
    const batcher = new Batcher(slow, { stopTokenIds: [], windowMs: 5 })
    const sampling = { temperature: 1, topK: 0, topP: 1, minP: 0, presencePenalty: 0, frequencyPenalty: 0, repetitionPenalty: 1 }
    const job = (signal: AbortSignal, maxTokens: number) => batcher.submit({ prompts: [slow.encodePrompt('hello')], n: 2, maxTokens, sampling, seed: null, stop: [], ignoreEos: false, statsTopK: 0, signal })
    const a = new AbortController()
    const b = new AbortController()
    const gone = job(a.signal, 300)
    const stays = job(b.signal, 300)
    await until(() => batcher.stats.inflight === 1, 10_000, 'the shared call')
    expect(batcher.stats.largestBatch).toBe(2) // submitted together, one engine call
    a.abort(new Error('left'))
    await expect(gone).rejects.toThrow('left')
    const kept = await stays
    expect(kept[0]).toHaveLength(2)
    expect(kept[0].every((c) => c.tokens.length === 300 && c.finishReason === 'length')).toBe(true) // no stop ids: all 300 tokens
    expect(batcher.stats.engineAborts).toBe(0)
    // the leaver's own rows stopped when it left (the engine call returned them as aborted)
    const shared = results[results.length - 1]
    expect(shared[0].every((c) => c.finishReason === 'abort' && c.tokens.length < 300)).toBe(true)
    // both leave: the engine call is aborted
    const c = new AbortController()
    const d = new AbortController()
    const jobs = [job(c.signal, 1000), job(d.signal, 1000)].map((p) => p.catch((e: Error) => e.message))
    await until(() => batcher.stats.inflight === 1, 10_000, 'the second shared call')
    c.abort(new Error('left'))
    d.abort(new Error('left'))
    expect(await Promise.all(jobs)).toEqual(['left', 'left'])
    await until(() => batcher.stats.inflight === 0, 20_000, 'the aborted call to return')
    expect(batcher.stats.engineAborts).toBe(1)
    expect(batcher.stats.abandoned).toBe(3)
    await batcher.close()
  })

  it('close() answers a running request 503 and resolves once the engine is idle', async () => {
    const pending = post(slowBase, C, { prompt: 'hello', n: 16, max_tokens: 1000, temperature: 1, seed: 1, ignore_eos: true })
    await until(() => slowServer.stats.inflight === 1, 10_000, 'the engine call')
    await slowServer.close()
    const r = await pending
    expect(r.status).toBe(503)
    expect(r.json.error.code).toBe('server_shutting_down')
    expect(slowServer.stats.inflight).toBe(0)
    await expect(post(slowBase, C, { prompt: 'x' })).rejects.toThrow() // no longer listening
  })
})
