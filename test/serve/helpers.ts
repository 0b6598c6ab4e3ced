// Helpers for the serve tests: the bundled model behind a server, JSON requests, raw requests, and a
// server-sent-events reader.
import { request } from 'node:http'
import { fileURLToPath } from 'node:url'
import { expect } from 'vitest'
import { loadModel, type Model } from '../../src/engine/model.js'
import { createOpenAIServer, type OpenAIServer, type ServeOptions } from '../../src/serve/server.js'

const BUNDLED_MODEL_DIR = fileURLToPath(new URL('../../models/arith-qwen3-tiny', import.meta.url))

export interface ServedModel {
  model: Model
  server: OpenAIServer
  base: string
}

/** The bundled model (one thread) served with `options` on a free loopback port. */
export async function serveBundledModel(options: Omit<ServeOptions, 'model'> = {}): Promise<ServedModel> {
  const model = await loadModel(BUNDLED_MODEL_DIR, { threads: 1 })
  try {
    const server = createOpenAIServer({ ...options, model })
    return { model, server, base: (await server.listen(0)).url }
  } catch (e) {
    model.dispose()
    throw e
  }
}

/** Closes the server, then frees its model; nothing to do where set-up failed before serving. */
export async function stopServing(served: ServedModel | undefined): Promise<void> {
  await served?.server.close()
  served?.model.dispose()
}

export interface Reply {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
  json: any
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** One HTTP request with an exact body (string, or JSON-encoded object). */
export function send(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body)
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, json: parse(text) })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (payload !== undefined) req.end(payload)
    else req.end()
  })
}

export const post = (base: string, path: string, body: unknown) => send(base, 'POST', path, body)
export const get = (base: string, path: string) => send(base, 'GET', path)

/** The JSON payloads of an SSE body, in order, and whether it ended with `data: [DONE]`. */
export function parseSse(body: string): { events: any[]; done: boolean } {
  const events: any[] = []
  let done = false
  for (const block of body.split('\n\n')) {
    if (!block.trim()) continue
    expect(block.startsWith('data: ')).toBe(true)
    const data = block.slice('data: '.length)
    expect(done).toBe(false) // nothing after [DONE]
    if (data === '[DONE]') done = true
    else events.push(JSON.parse(data))
  }
  return { events, done }
}

/** Polls until `check()` holds (or fails after `ms`). */
export async function until(check: () => boolean | Promise<boolean>, ms = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}
