// Regression tests of issue 23 for `autodidact serve`: finding 6 (one client can take the server:
// reply size, admission of streamed and unstreamed requests, a slow template or a huge prompt
// blocking the event loop, slow-header and slow-body clients) and finding 8 (the surface: API key,
// content type, Host allow-list and bind warnings, malformed percent-encoding, huge headers, roles).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/engine/model.js'
import { bindWarnings, createOpenAIServer, defaultAllowedHosts, hostName, isLoopback, type OpenAIServer } from '../../src/serve/server.js'
import { writeTinyModel } from '../helpers/tiny-model.js'
import { get, post, send, until, type Reply } from './helpers.js'

const MODEL_DIR = fileURLToPath(new URL('../../models/arith-qwen3-tiny', import.meta.url))
const C = '/v1/completions'
const CHAT = '/v1/chat/completions'

function expectJsonError(r: Reply, status: number, code: string): void {
  expect(r.status).toBe(status)
  expect(r.headers['content-type']).toMatch(/^application\/json/)
  expect(r.json?.error?.code).toBe(code)
  expect(typeof r.json.error.message).toBe('string')
}

/** A raw HTTP exchange: writes `chunks` (then stalls, keeping the socket open) and resolves with what came back once the server closes. */
function raw(base: string, chunks: string[]): Promise<{ text: string; ms: number }> {
  const { hostname, port } = new URL(base)
  const t0 = performance.now()
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let text = ''
    socket.on('data', (c) => (text += c))
    socket.on('error', reject)
    socket.on('close', () => resolve({ text, ms: performance.now() - t0 }))
    for (const c of chunks) socket.write(c)
  })
}

function statusOf(text: string): number {
  return Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0)
}

function jsonOf(text: string): any {
  return JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))
}

let model: Model
beforeAll(async () => {
  model = await loadModel(MODEL_DIR, { threads: 1 })
})
afterAll(() => model?.dispose())

describe('finding 6: one client cannot take the server', () => {
  let server: OpenAIServer
  let base: string
  let impatient: OpenAIServer
  let impatientBase: string
  beforeAll(async () => {
    server = createOpenAIServer({ model, maxBodyBytes: 4 << 20, admission: { maxSequences: 4, maxQueue: 2, queueTimeoutMs: 30_000 } })
    base = (await server.listen(0)).url
    impatient = createOpenAIServer({ model, headersTimeoutMs: 400, requestTimeoutMs: 800 })
    impatientBase = (await impatient.listen(0)).url
  })
  afterAll(async () => {
    await server?.close()
    await impatient?.close()
  })

  it('a request whose reply would pass the cap (n 128, 500 tokens, top-20, 4 prompts) is refused before it runs', async () => {
    const before = server.stats.requests
    const r = await post(base, C, { prompt: ['a', 'b', 'c', 'd'], n: 128, max_tokens: 500, logprobs: 20 })
    expectJsonError(r, 400, 'response_too_large')
    expect(r.json.error.param).toBe('logprobs')
    expect(r.json.error.message).toContain('MiB')
    expect(server.stats.requests).toBe(before) // nothing reached the engine
    const stream = await post(base, CHAT, { messages: [{ role: 'user', content: 'x' }], n: 64, max_tokens: 4000, stream: true })
    expectJsonError(stream, 400, 'response_too_large')
  })

  it('streamed and unstreamed requests share one admission gate: queued past the cap, 429 past the queue', async () => {
    const slow = { max_tokens: 120, temperature: 1, ignore_eos: true }
    // two streams of 2 sequences each fill the 4-sequence cap
    const streams = [0, 1].map((i) => post(base, C, { prompt: 'Solve: 1+1\n', n: 2, stream: true, seed: i, ...slow }))
    await until(() => server.stats.admission.activeSequences === 4, 10_000, 'the streams to be admitted')
    // an unstreamed request and a stream wait in the queue (2 places)
    const queued = [post(base, C, { prompt: 'Solve: 2+2\n', n: 1, ...slow }), post(base, C, { prompt: 'Solve: 3+3\n', stream: true, ...slow })]
    await until(() => server.stats.admission.waiting === 2, 10_000, 'two requests queued')
    await until(() => server.stats.streams === 2, 10_000, 'the admitted streams to run')
    // the queue is full: refused at once, streamed or not
    expectJsonError(await post(base, C, { prompt: 'x', max_tokens: 2 }), 429, 'too_many_requests')
    const refused = await post(base, C, { prompt: 'x', max_tokens: 2, stream: true })
    expectJsonError(refused, 429, 'too_many_requests')
    expect(refused.headers['retry-after']).toBe('1')
    expect(refused.json.error.type).toBe('rate_limit_error')
    for (const r of await Promise.all([...streams, ...queued])) expect(r.status).toBe(200)
    expect(server.stats.admission.refusedQueueFull).toBe(2)
    expect(server.stats.admission.activeSequences).toBe(0)
  })

  it('a huge text prompt is refused from its length alone, before it is tokenized', async () => {
    const huge = 'word '.repeat(200_000) // 1 MB
    const t0 = performance.now()
    const r = await post(base, C, { prompt: huge, max_tokens: 4 })
    expectJsonError(r, 400, 'context_length_exceeded')
    expect(r.json.error.message).toContain('at least') // the bound's answer, not the exact count's: nothing was tokenized
    expect(performance.now() - t0).toBeLessThan(10_000)
    const sample = huge.slice(0, 20_000)
    expect(model.tokenizer.minTokens(sample)).toBeGreaterThan(0)
    expect(model.tokenizer.minTokens(sample)).toBeLessThanOrEqual(model.tokenizer.encode(sample).length) // the bound is a bound
  })

  it('a client that sends its headers too slowly is cut off with a 408 JSON error', async () => {
    const { text, ms } = await raw(impatientBase, ['POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'])
    expect(statusOf(text)).toBe(408)
    expect(jsonOf(text).error.code).toBe('request_timeout')
    expect(ms).toBeLessThan(5_000)
  })

  it('a client that sends its body too slowly is cut off with a 408 JSON error', async () => {
    const { text, ms } = await raw(impatientBase, ['POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"prompt":'])
    expect(statusOf(text)).toBe(408)
    expect(jsonOf(text).error.code).toBe('request_timeout')
    expect(ms).toBeLessThan(5_000)
    expect((await get(impatientBase, '/health')).status).toBe(200)
  })
})

describe('finding 6: the chat template runs off the main thread', () => {
  let root: string
  let slowModel: Model
  let server: OpenAIServer
  let base: string
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'ad-serve-hostile-'))
    const tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 5 })
    const cfgPath = join(tiny.dir, 'tokenizer_config.json')
    const cfg = JSON.parse(readFileSync(cfgPath, 'utf8'))
    // a template that loops for ever unless stopped: 1e10 iterations of nested ranges
    cfg.chat_template = '{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}'
    writeFileSync(cfgPath, JSON.stringify(cfg))
    slowModel = await loadModel(tiny.dir, { threads: 1 })
    server = createOpenAIServer({ model: slowModel, name: 'slow', templateLimits: { timeMs: 3_000, maxSteps: 1e12 } })
    base = (await server.listen(0)).url
  })
  afterAll(async () => {
    await server?.close()
    slowModel?.dispose()
    rmSync(root, { recursive: true, force: true })
  })

  it('a pathological template is stopped with a 400 while the server keeps answering others at once', async () => {
    const t0 = performance.now()
    const chat = post(base, CHAT, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
    const latencies: number[] = []
    let done = false
    void chat.finally(() => (done = true))
    while (!done) {
      const asked = performance.now()
      expect((await get(base, '/health')).status).toBe(200)
      latencies.push(performance.now() - asked)
      await new Promise((r) => setTimeout(r, 20))
    }
    const r = await chat
    expectJsonError(r, 400, 'prompt_too_expensive')
    expect(r.json.error.message).toContain('3000 ms')
    // the render ran its 3 s budget; on the main thread it would have held every /health that long
    expect(performance.now() - t0).toBeGreaterThan(2_900)
    expect(latencies.length).toBeGreaterThan(10)
    expect(Math.max(...latencies)).toBeLessThan(1_500)
    expect((await post(base, C, { prompt: 'hello', max_tokens: 2 })).status).toBe(200) // completions need no template
  })
})

describe('finding 8: the server surface', () => {
  let server: OpenAIServer
  let base: string
  let port: number
  beforeAll(async () => {
    server = createOpenAIServer({ model, apiKey: 'sekret-key' })
    const info = await server.listen(0)
    base = info.url
    port = info.port
    expect(info.warnings).toEqual([]) // loopback
  })
  afterAll(() => server?.close())
  const auth = { authorization: 'Bearer sekret-key' }
  const body = { prompt: 'Solve: 1+1\n', max_tokens: 2 }

  it('--api-key: no key or a wrong key is a 401 JSON error; the right key passes; /health needs none', async () => {
    const none = await post(base, C, body)
    expectJsonError(none, 401, 'invalid_api_key')
    expect(none.headers['www-authenticate']).toContain('Bearer')
    expect(none.json.error.type).toBe('authentication_error')
    expectJsonError(await send(base, 'POST', C, body, { authorization: 'Bearer sekret-kex' }), 401, 'invalid_api_key')
    expectJsonError(await send(base, 'GET', '/v1/models', undefined, { authorization: 'Basic c2VrcmV0' }), 401, 'invalid_api_key')
    expect((await send(base, 'POST', C, body, auth)).status).toBe(200)
    expect((await get(base, '/health')).status).toBe(200)
  })

  it('a body that is not application/json is a 415 (no CORS-simple request reaches the model)', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const r = await send(base, 'POST', C, JSON.stringify(body), { ...auth, 'content-type': type })
      expectJsonError(r, 415, 'unsupported_media_type')
    }
    expect((await send(base, 'POST', C, body, { ...auth, 'content-type': 'application/json; charset=utf-8' })).status).toBe(200)
  })

  it('a Host that is not this server is refused 403 (DNS rebinding); loopback names pass', async () => {
    const r = await send(base, 'GET', '/v1/models', undefined, { ...auth, host: `evil.example:${port}` })
    expectJsonError(r, 403, 'host_not_allowed')
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) expect((await send(base, 'GET', '/v1/models', undefined, { ...auth, host })).status).toBe(200)
  })

  it('non-loopback binds are warned about and accept any Host unless told; loopback binds do not', () => {
    expect(isLoopback('127.0.0.1') && isLoopback('::1') && isLoopback('localhost') && isLoopback('127.5.0.1')).toBe(true)
    expect(isLoopback('0.0.0.0') || isLoopback('::') || isLoopback('192.168.1.4')).toBe(false)
    expect(defaultAllowedHosts('0.0.0.0')).toBe('any')
    expect(defaultAllowedHosts('127.0.0.1')).toEqual(['localhost', '127.0.0.1', '::1'])
    expect(defaultAllowedHosts('127.0.0.2')).toEqual(['localhost', '127.0.0.1', '::1', '127.0.0.2'])
    const [w] = bindWarnings('0.0.0.0', false, 'any')
    expect(w).toContain('not a loopback address')
    expect(w).toContain('--api-key')
    expect(bindWarnings('0.0.0.0', true, ['my.host'])[0]).not.toContain('--api-key')
    expect(bindWarnings('127.0.0.1', false, 'any')).toEqual([])
    expect(hostName('[::1]:8000')).toBe('::1')
    expect(hostName('LocalHost:80')).toBe('localhost')
  })

  it('GET /v1/models/%E0%A4%A is a 400 JSON error, not a 500', async () => {
    const r = await send(base, 'GET', '/v1/models/%E0%A4%A', undefined, auth)
    expectJsonError(r, 400, 'invalid_path')
  })

  it('a 32 KB header is a 431 JSON error', async () => {
    const { text } = await raw(base, [`GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nx-big: ${'a'.repeat(32 << 10)}\r\n\r\n`])
    expect(statusOf(text)).toBe(431)
    expect(jsonOf(text).error.code).toBe('headers_too_large')
  })

  it('chat roles are system, user, assistant or tool', async () => {
    const r = await send(base, 'POST', CHAT, { messages: [{ role: 'wizard', content: 'hi' }] }, auth)
    expectJsonError(r, 400, 'invalid_value')
    expect(r.json.error.param).toBe('messages[0].role')
    const ok = await send(base, 'POST', CHAT, { messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }], max_tokens: 2 }, auth)
    expect(ok.status).toBe(200)
  })
})
