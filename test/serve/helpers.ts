// HTTP helpers for the serve tests: JSON requests, raw requests, and a server-sent-events reader.
import { request } from 'node:http'
import { expect } from 'vitest'

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
