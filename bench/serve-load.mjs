// `autodidact serve` under a hostile load (issue 23), from a second process, on loopback only.
//   npx tsc -p . && node bench/serve-load.mjs [--seconds 40] [--small-clients 4] [--threads 1]
// Starts `autodidact serve` on 127.0.0.1 (an ephemeral port) with the bundled toy model; small
// requests (max_tokens 8) are measured from closed-loop clients through four phases of --seconds/4:
//   1. idle: nothing else runs;
//   2. large requests run without pause (n 32 × 200 tokens unstreamed, and 8-sequence streams);
//   3. the same, with abusive requests mixed in every 100 ms: a reply past the size cap, a text/plain
//      body, a foreign Host, a malformed percent-encoding, a 32 KB header, slow-header and slow-body
//      clients, a 1 MiB prompt, malformed JSON, a wrong role, a client that leaves mid-stream;
//   4. the same, and every 4 s a burst of 64 in-limits requests at once, more than the queue holds.
// It stops by itself (the phases' time, and at most --max-requests requests), then reports: p50/p99
// of the small requests in each phase against the idle p99, the server's peak RSS (sampled from
// /proc every 100 ms) against its RSS after warm-up, lost requests (no response, or a connection
// error the client did not cause: must be 0), and every refusal's status and whether it was a JSON
// error of 4xx/429/503 (anything else — a 500, an empty 408, a dropped connection — is counted as
// non-conforming: must be 0). Prints a table; writes bench/results/serve-load.json.
import { spawn } from 'node:child_process'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { connect } from 'node:net'
import { fileURLToPath } from 'node:url'

const MAIN = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url))
const RESULTS = fileURLToPath(new URL('./results/', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}
const SECONDS = arg('seconds', 40)
const SMALL_CLIENTS = arg('small-clients', 4)
const THREADS = arg('threads', 1)
const MAX_REQUESTS = arg('max-requests', 20_000)
const HOST = '127.0.0.1' // loopback only, by design
const SERVER_FLAGS = ['--host', HOST, '--port', '0', '--threads', String(THREADS), '--max-sequences', '128', '--max-queue', '32', '--max-response-mb', '8', '--request-timeout-ms', '3000']

// ---------------------------------------------------------------------------------------------
// The server

function startServer() {
  const proc = spawn(process.execPath, [MAIN, 'serve', ...SERVER_FLAGS], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  proc.stderr.on('data', (c) => (stderr += c))
  return new Promise((resolve, reject) => {
    let out = ''
    proc.stdout.on('data', (c) => {
      out += c
      const m = /listening on (http:\/\/127\.0\.0\.1:(\d+))/.exec(out)
      if (m) resolve({ url: m[1], port: Number(m[2]), proc, stderr: () => stderr })
    })
    proc.on('exit', (code) => reject(new Error(`serve exited ${code}: ${stderr}`)))
  })
}

function rssMiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m ? Number(m[1]) / 1024 : NaN
}

// ---------------------------------------------------------------------------------------------
// Requests, and what is checked of every answer

const agent = new Agent({ keepAlive: true, maxSockets: 256 })
const stats = { sent: 0, lost: [], refusals: new Map(), nonConforming: [], served: 0, clientAborts: 0 }

/** Records an answer: a refusal must be a JSON error with a 4xx or 503 status. */
function record(kind, status, headers, body) {
  if (status < 400) {
    stats.served++
    return
  }
  const key = `${status} ${kind}`
  stats.refusals.set(key, (stats.refusals.get(key) ?? 0) + 1)
  let code = null
  try {
    code = JSON.parse(body).error?.code ?? null
  } catch {
    code = null
  }
  const okStatus = (status >= 400 && status < 500) || status === 503
  if (!okStatus || !/^application\/json/.test(headers['content-type'] ?? '') || typeof code !== 'string') stats.nonConforming.push(`${kind}: ${status} ${String(body).slice(0, 120)}`)
}

/** One HTTP request; resolves {status, ms, body}; a connection error or no answer within 60 s is a lost request. */
function send(kind, method, path, { body, headers = {}, abortAfterFirstChunk = false } = {}) {
  stats.sent++
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body)
  const t0 = performance.now()
  return new Promise((resolve) => {
    let settled = false
    const settle = (v) => {
      if (!settled) {
        settled = true
        clearTimeout(timer)
        resolve(v)
      }
    }
    const req = request({ host: HOST, port: PORT, method, path, agent, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const chunks = []
      res.on('data', (c) => {
        chunks.push(c)
        if (abortAfterFirstChunk && res.statusCode === 200) {
          stats.clientAborts++
          req.destroy()
          settle({ status: res.statusCode, ms: performance.now() - t0, aborted: true })
        }
      })
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        record(kind, res.statusCode, res.headers, text)
        settle({ status: res.statusCode, ms: performance.now() - t0, body: text })
      })
      res.on('error', (e) => {
        if (!settled) stats.lost.push(`${kind}: response error ${e.message}`)
        settle({ status: 0 })
      })
    })
    const timer = setTimeout(() => {
      stats.lost.push(`${kind}: no answer within 60 s`)
      req.destroy()
      settle({ status: 0 })
    }, 60_000)
    req.on('error', (e) => {
      if (!settled) stats.lost.push(`${kind}: ${e.message}`)
      settle({ status: 0 })
    })
    req.end(payload)
  })
}

/** A raw exchange for what an HTTP client library will not send; resolves with the status line's code. */
function raw(kind, chunks) {
  stats.sent++
  return new Promise((resolve) => {
    const socket = connect(PORT, HOST)
    let text = ''
    socket.on('data', (c) => (text += c))
    socket.on('error', () => undefined)
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0)
      if (status === 0) stats.lost.push(`${kind}: connection closed without an answer`)
      else {
        const headers = {}
        for (const line of text.slice(0, text.indexOf('\r\n\r\n')).split('\r\n').slice(1)) {
          const i = line.indexOf(':')
          headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim()
        }
        record(kind, status, headers, text.slice(text.indexOf('\r\n\r\n') + 4))
      }
      resolve(status)
    })
    for (const c of chunks) socket.write(c)
  })
}

const small = (i) => ({ prompt: `Solve: ${2 + (i % 50)}+${i % 7}\n`, max_tokens: 8, temperature: 0 })
const LARGE = { prompt: 'Solve: 12*3-5\n', n: 32, max_tokens: 200, temperature: 1, ignore_eos: true }
const LARGE_STREAM = { prompt: 'Solve: 7*7\n', n: 8, max_tokens: 200, temperature: 1, ignore_eos: true, stream: true }

/** 64 requests at once, more than the queue holds: some must be refused 429 (run every BURST_EVERY_MS). */
const burst = () => Promise.all(Array.from({ length: 64 }, (_, i) => send('burst past the queue', 'POST', '/v1/completions', { body: { ...LARGE, n: 4, max_tokens: 16 + i } })))
const BURST_EVERY_MS = arg("burst-every-ms", 4_000)

const ABUSE = [
  () => send('reply past the cap', 'POST', '/v1/completions', { body: { prompt: ['a', 'b', 'c', 'd'], n: 128, max_tokens: 500, logprobs: 20 } }),
  () => send('text/plain body', 'POST', '/v1/completions', { body: JSON.stringify(small(1)), headers: { 'content-type': 'text/plain' } }),
  () => send('foreign Host', 'GET', '/v1/models', { headers: { host: `evil.example:${PORT}` } }),
  () => send('bad percent-encoding', 'GET', '/v1/models/%E0%A4%A'),
  () => raw('32 KB header', [`GET /health HTTP/1.1\r\nHost: ${HOST}\r\nx-big: ${'a'.repeat(32 << 10)}\r\n\r\n`]),
  () => raw('slow headers', [`POST /v1/completions HTTP/1.1\r\nHost: ${HOST}\r\n`]),
  () => raw('slow body', [`POST /v1/completions HTTP/1.1\r\nHost: ${HOST}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"prompt": "`]),
  () => send('1 MiB prompt', 'POST', '/v1/completions', { body: { prompt: 'word '.repeat(209_000), max_tokens: 4 } }),
  () => send('malformed JSON', 'POST', '/v1/completions', { body: '{"prompt": "x",' }),
  () => send('role wizard', 'POST', '/v1/chat/completions', { body: { messages: [{ role: 'wizard', content: 'hi' }] } }),
  () => send('leaves mid-stream', 'POST', '/v1/completions', { body: { ...LARGE_STREAM, n: 2 }, abortAfterFirstChunk: true }),
]

// ---------------------------------------------------------------------------------------------

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN
}

/** Closed-loop small-request clients until `until()` is false; returns their latencies (only 200s). */
async function smallClients(until, offset) {
  const latencies = []
  await Promise.all(
    Array.from({ length: SMALL_CLIENTS }, async (_, c) => {
      for (let i = c; until() && stats.sent < MAX_REQUESTS; i += SMALL_CLIENTS) {
        const r = await send('small', 'POST', '/v1/completions', { body: small(offset + i) })
        if (r.status === 200) latencies.push(r.ms)
        else if (r.status === 429 || r.status === 503) await new Promise((w) => setTimeout(w, 50)) // a polite client backs off
      }
    }),
  )
  return latencies
}

const server = await startServer()
const PORT = server.port
// the server goes when this process goes, however it goes
process.on('exit', () => server.proc.kill('SIGKILL'))
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => process.exit(130))
let peakRss = 0
const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssMiB(server.proc.pid))), 100)
const phaseSeconds = SECONDS / 4

/** One phase: small requests measured for phaseSeconds while `background` runs (a function of the phase's `going`). */
async function phase(name, background) {
  const end = performance.now() + phaseSeconds * 1000
  const going = () => performance.now() < end && stats.sent < MAX_REQUESTS
  const sentBefore = stats.sent
  const jobs = background(going)
  const latencies = await smallClients(going, phases.length * 1_000_000)
  await Promise.all(jobs)
  phases.push({ name, count: latencies.length, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), requests: stats.sent - sentBefore })
}
const phases = []
const loop = (going, kind, body) => (async () => {
  while (going()) await send(kind, 'POST', '/v1/completions', { body })
})()
const largeLoad = (going) => [
  ...Array.from({ length: arg('large', 2) }, () => loop(going, 'large', LARGE)),
  ...Array.from({ length: arg('large-streams', 2) }, () => loop(going, 'large stream', LARGE_STREAM)),
]
/** Every abusive request in turn, one each 100 ms (all refused or cut off cheaply by design). */
const abuse = (going) => [
  (async () => {
    const pending = []
    for (let k = 0; going(); k++) {
      pending.push(ABUSE[k % ABUSE.length]())
      await new Promise((r) => setTimeout(r, 100))
    }
    await Promise.all(pending)
  })(),
]
/** A burst of 64 in-limits requests every BURST_EVERY_MS: more than the queue holds. */
const flood = (going) => [
  (async () => {
    const pending = []
    while (going()) {
      pending.push(burst())
      await new Promise((r) => setTimeout(r, BURST_EVERY_MS))
    }
    await Promise.all(pending)
  })(),
]

try {
  for (let i = 0; i < 8; i++) await send('warm-up', 'POST', '/v1/completions', { body: small(i) })
  await send('warm-up', 'POST', '/v1/completions', { body: { ...LARGE, n: 4 } })
  const warmRss = rssMiB(server.proc.pid)
  await phase('idle', () => [])
  await phase('while large requests run', largeLoad)
  await phase('while large requests run, abusive requests mixed in', (going) => [...largeLoad(going), ...abuse(going)])
  await phase('… and a burst of 64 requests every 4 s (past the queue)', (going) => [...largeLoad(going), ...abuse(going), ...flood(going)])
  clearInterval(sampler)
  const endRss = rssMiB(server.proc.pid)
  const health = await send('health', 'GET', '/health')

  const refusals = [...stats.refusals.entries()].sort()
  const result = {
    secondsPerPhase: phaseSeconds,
    smallClients: SMALL_CLIENTS,
    serverFlags: SERVER_FLAGS,
    phases,
    rssMiB: { afterWarmUp: warmRss, peak: peakRss, end: endRss },
    requests: { sent: stats.sent, served: stats.served, clientAborts: stats.clientAborts, lost: stats.lost.length, refused: refusals.reduce((a, [, n]) => a + n, 0), nonConforming: stats.nonConforming.length },
    refusals: Object.fromEntries(refusals),
    lost: stats.lost.slice(0, 20),
    nonConforming: stats.nonConforming.slice(0, 20),
    server: JSON.parse(health.body ?? '{}'),
  }
  const idleP99 = phases[0].p99
  console.log(`autodidact serve under hostile load: 4 phases of ${phaseSeconds} s on ${HOST}, ${SMALL_CLIENTS} small clients, server ${SERVER_FLAGS.join(' ')}`)
  console.log('| small requests (max_tokens 8, temperature 0) | served | p50 ms | p99 ms | p99 / idle p99 |')
  console.log('|---|---|---|---|---|')
  for (const p of phases) console.log(`| ${p.name} | ${p.count} | ${p.p50.toFixed(1)} | ${p.p99.toFixed(1)} | ${(p.p99 / idleP99).toFixed(2)}× |`)
  console.log(`server RSS: ${warmRss.toFixed(0)} MiB after warm-up, peak ${peakRss.toFixed(0)} MiB, ${endRss.toFixed(0)} MiB at the end`)
  console.log(`requests: ${stats.sent} sent, ${stats.served} served, ${stats.clientAborts} left by their client on purpose, ${result.requests.refused} refused, ${stats.lost.length} lost`)
  console.log(`refusals that were not a 4xx/429/503 JSON error: ${stats.nonConforming.length}`)
  console.log('| refusal (status, request kind) | count |')
  console.log('|---|---|')
  for (const [k, n] of refusals) console.log(`| ${k} | ${n} |`)
  for (const l of stats.lost.slice(0, 10)) console.log(`LOST: ${l}`)
  for (const l of stats.nonConforming.slice(0, 10)) console.log(`NON-CONFORMING: ${l}`)
  mkdirSync(RESULTS, { recursive: true })
  writeFileSync(`${RESULTS}serve-load.json`, JSON.stringify(result, null, 2) + '\n')
  process.exitCode = stats.lost.length === 0 && stats.nonConforming.length === 0 ? 0 : 1
} finally {
  clearInterval(sampler)
  server.proc.kill('SIGTERM')
  await new Promise((r) => server.proc.on('exit', r))
  agent.destroy()
}
