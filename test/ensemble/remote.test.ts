// The OpenAI-compatible HTTP variant against a small fake server on loopback: the request it
// sends, choices put back in index order, logprobs, the model id from /v1/models, and every way a
// request can fail (timeout, abort, 4xx, malformed body, refused) as a typed RemoteVariantError;
// inside an ensemble a hung endpoint is dropped and the others still count.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { queryEnsemble } from '../../src/ensemble/ensemble.js'
import { RemoteSampler, RemoteVariantError } from '../../src/ensemble/remote.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'

type Handler = (body: Record<string, unknown>, req: IncomingMessage, res: ServerResponse) => void
let server: Server
let base = ''
let handler: Handler = () => {}
const seen: Record<string, unknown>[] = []
const paths: string[] = []

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(typeof body === 'string' ? body : JSON.stringify(body))
}

/** An OpenAI completion: n choices, returned in reverse index order to check reordering. */
const answer = (body: Record<string, unknown>, res: ServerResponse) => {
  const n = (body.n as number) ?? 1
  const choices = Array.from({ length: n }, (_, i) => ({ index: i, text: `${body.prompt as string}#${i}`, finish_reason: i % 2 ? 'length' : 'stop', logprobs: body.logprobs === 0 ? { tokens: ['a', 'b'], token_logprobs: [-0.5, -1.25], top_logprobs: null, text_offset: [0, 1] } : null }))
  json(res, 200, { id: 'cmpl-1', object: 'text_completion', created: 0, model: 'toy', choices: choices.reverse(), usage: { prompt_tokens: 1, completion_tokens: n, total_tokens: n + 1 } })
}

beforeAll(async () => {
  server = createServer((req, res) => {
    paths.push(`${req.method} ${req.url}`)
    if (req.method === 'GET' && req.url === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: 'toy', object: 'model' }] })
    let raw = ''
    req.on('data', (c) => (raw += c))
    req.on('end', () => {
      const body = JSON.parse(raw || '{}') as Record<string, unknown>
      seen.push(body)
      handler(body, req, res)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()) }))

describe('RemoteSampler', () => {
  it('posts one OpenAI completions request per prompt and puts the choices back in index order', async () => {
    handler = (b, _r, res) => answer(b, res)
    seen.length = 0
    const s = new RemoteSampler({ baseUrl: `${base}/v1/`, model: 'toy', logprobs: true })
    const out = await s.sample(['Solve: 1+1\n', 'Solve: 2+2\n'], { n: 3, temperature: 0.7, topP: 0.9, maxTokens: 32, stop: ['</answer>'], seed: 11 })
    expect(out.map((g) => g.map((x) => x.text))).toEqual([
      ['Solve: 1+1\n#0', 'Solve: 1+1\n#1', 'Solve: 1+1\n#2'],
      ['Solve: 2+2\n#0', 'Solve: 2+2\n#1', 'Solve: 2+2\n#2'],
    ])
    expect(out[0].map((x) => x.finishReason)).toEqual(['stop', 'length', 'stop'])
    expect(Array.from(out[0][0].logprobs!)).toEqual([-0.5, -1.25])
    const byPrompt = seen.slice().sort((a, b) => String(a.prompt).localeCompare(String(b.prompt)))
    expect(byPrompt[0]).toEqual({ model: 'toy', prompt: 'Solve: 1+1\n', n: 3, temperature: 0.7, top_p: 0.9, max_tokens: 32, stop: ['</answer>'], seed: 11, logprobs: 0 })
    expect(s.name).toBe(`remote:${base} toy`)
  })

  it('asks /v1/models once for the model id when none is configured', async () => {
    handler = (b, _r, res) => answer(b, res)
    seen.length = 0
    paths.length = 0
    const s = new RemoteSampler({ baseUrl: base })
    await s.sample(['a', 'b'], { n: 1 })
    await s.sample(['c'], { n: 1 })
    expect(seen.every((b) => b.model === 'toy')).toBe(true)
    expect(paths.filter((p) => p === 'GET /v1/models')).toHaveLength(1)
  })

  it('times out a request that takes too long', async () => {
    handler = (body, _req, res) => setTimeout(() => answer(body, res), 2000)
    const s = new RemoteSampler({ baseUrl: base, model: 'toy', requestTimeoutMs: 80 })
    const t0 = performance.now()
    const e = await s.sample(['p'], { n: 1 }).catch((x) => x)
    expect(e).toBeInstanceOf(RemoteVariantError)
    expect(e.reason).toBe('timeout')
    expect(performance.now() - t0).toBeLessThan(1500)
  })

  it('stops when the caller aborts', async () => {
    handler = (body, _req, res) => setTimeout(() => answer(body, res), 2000)
    const s = new RemoteSampler({ baseUrl: base, model: 'toy' })
    const ac = new AbortController()
    setTimeout(() => ac.abort(), 30)
    const e = await s.sample(['p'], { n: 1, signal: ac.signal }).catch((x) => x)
    expect(e).toBeInstanceOf(RemoteVariantError)
    expect(e.reason).toBe('aborted')
  })

  it('turns an OpenAI error body into an http-status error carrying its message', async () => {
    handler = (_b, _r, res) => json(res, 400, { error: { message: 'n must be ≥ 1', type: 'invalid_request_error', param: 'n', code: 'invalid_value' } })
    const e = await new RemoteSampler({ baseUrl: base, model: 'toy' }).sample(['p'], { n: 1 }).catch((x) => x)
    expect(e).toMatchObject({ reason: 'http-status', status: 400, code: 'REMOTE_VARIANT_ERROR' })
    expect(e.message).toContain('n must be ≥ 1')
  })

  it('rejects malformed bodies: not JSON, wrong number of choices, duplicate index, missing text', async () => {
    const s = new RemoteSampler({ baseUrl: base, model: 'toy' })
    const bodies: unknown[] = [
      'not json',
      { choices: [{ index: 0, text: 'a' }] },
      { choices: [{ index: 0, text: 'a' }, { index: 0, text: 'b' }] },
      { choices: [{ index: 0, text: 'a' }, { index: 1 }] },
      { nothing: true },
    ]
    for (const b of bodies) {
      handler = (_b, _r, res) => json(res, 200, b)
      const e = await s.sample(['p'], { n: 2 }).catch((x) => x)
      expect(e, JSON.stringify(b)).toBeInstanceOf(RemoteVariantError)
      expect(e.reason).toBe('bad-response')
    }
  })

  it('reports a refused connection as a network error, and a bad URL as an InvalidArgumentError', async () => {
    const closed = createServer()
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
    const port = (closed.address() as AddressInfo).port
    await new Promise<void>((r) => closed.close(() => r()))
    const e = await new RemoteSampler({ baseUrl: `http://127.0.0.1:${port}`, model: 'toy' }).sample(['p'], { n: 1 }).catch((x) => x)
    expect(e).toMatchObject({ reason: 'network' })
    expect(() => new RemoteSampler({ baseUrl: 'ftp://x' })).toThrow(InvalidArgumentError)
    expect(() => new RemoteSampler({ baseUrl: 'nope' })).toThrow(InvalidArgumentError)
  })

  it('in an ensemble, a hung endpoint is dropped at its timeout and the answering one still counts', async () => {
    handler = (body, _req, res) => (body.temperature === 0.1 ? setTimeout(() => answer(body, res), 3000) : json(res, 200, { choices: Array.from({ length: body.n as number }, (_, i) => ({ index: i, text: '<answer>42</answer>', finish_reason: 'stop' })) }))
    const ok = new RemoteSampler({ baseUrl: base, model: 'toy', name: 'fast' })
    const slow = new RemoteSampler({ baseUrl: base, model: 'toy', name: 'slow' })
    const ens = await queryEnsemble(
      [{ sampler: ok, temperature: 1, k: 4 }, { sampler: slow, temperature: 0.1, k: 4, timeoutMs: 100 }],
      ['p1', 'p2'],
      { extract: (t) => (t.match(/<answer>(.*)<\/answer>/)?.[1] ?? null), maxTokens: 8, seed: 0 },
    )
    expect(ens.variants.map((v) => v.status)).toEqual(['ok', 'timeout'])
    expect(ens.questions.map((q) => [q.responding, q.pHat, q.vote.answer])).toEqual([[1, 1, '42'], [1, 1, '42']])
  })
})
