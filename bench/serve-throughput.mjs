// Throughput of `autodidact serve` on the bundled toy model: 64 completions requests sent one at a
// time, concurrently without merging (seeded requests run alone; their engine calls interleave),
// and concurrently with batching (unseeded identical-option requests share engine calls).
//   npx tsc -p . && node bench/serve-throughput.mjs [--requests 64] [--repeats 3] [--threads 1]
// Each configuration runs in a fresh `autodidact serve` child process; prints a table of the median
// wall time, requests/s and completion tokens/s over the repeats, the server's CPU seconds per run
// (Linux /proc; the fairer number on a shared machine), and the engine calls per run.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}
const REQUESTS = arg('requests', 64)
const REPEATS = arg('repeats', 3)
const THREADS = arg('threads', 1)

function startServer(flags) {
  const proc = spawn(process.execPath, [MAIN, 'serve', '--port', '0', '--threads', String(THREADS), ...flags], { stdio: ['ignore', 'pipe', 'ignore'] })
  return new Promise((resolve, reject) => {
    let out = ''
    proc.stdout.on('data', (c) => {
      out += c
      const m = /listening on (\S+)/.exec(out)
      if (m) resolve({ url: m[1], proc })
    })
    proc.on('exit', (code) => reject(new Error(`serve exited ${code}`)))
  })
}

async function complete(url, body) {
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const json = await r.json()
  if (r.status !== 200) throw new Error(JSON.stringify(json))
  return json.usage.completion_tokens
}

const body = (i, seeded) => ({ prompt: `Solve: ${i + 2}+${(i * 7) % 30}*${(i % 9) + 1}\n`, max_tokens: 32, temperature: 0.7, ...(seeded ? { seed: i } : {}) })

const CONFIGS = [
  { name: 'one at a time (serial client)', flags: [], run: async (url) => { let t = 0; for (let i = 0; i < REQUESTS; ++i) t += await complete(url, body(i, false)); return t } },
  { name: 'concurrent, unmerged (seeded), --max-inflight 1', flags: ['--max-inflight', '1'], run: (url) => all(url, true) },
  { name: 'concurrent, unmerged (seeded), --max-inflight 64', flags: ['--max-inflight', '64'], run: (url) => all(url, true) },
  { name: 'concurrent, batched, --max-inflight 1', flags: ['--max-inflight', '1'], run: (url) => all(url, false) },
  { name: 'concurrent, batched (defaults: --batch-window-ms 2, no --max-inflight cap)', flags: [], run: (url) => all(url, false) },
  { name: 'concurrent, batched, --batch-window-ms 10', flags: ['--batch-window-ms', '10'], run: (url) => all(url, false) },
]

async function all(url, seeded) {
  const tokens = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => complete(url, body(i, seeded))))
  return tokens.reduce((a, b) => a + b, 0)
}

/** CPU seconds (user + system, all threads) the server process has used: robust to other load on the machine. */
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100 // utime, stime in clock ticks (USER_HZ = 100)
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
console.log(`${REQUESTS} requests (max_tokens 32, temperature 0.7), server --threads ${THREADS}, median of ${REPEATS}`)
console.log('| configuration | wall s | requests/s | completion tokens/s | server CPU s | engine calls per run |')
console.log('|---|---|---|---|---|---|')
for (const c of CONFIGS) {
  const { url, proc } = await startServer(c.flags)
  await c.run(url) // warm-up
  const calls0 = (await (await fetch(`${url}/health`)).json()).batches
  const runs = []
  for (let r = 0; r < REPEATS; ++r) {
    const t = performance.now()
    const cpu = cpuSeconds(proc.pid)
    const tokens = await c.run(url)
    runs.push({ s: (performance.now() - t) / 1000, cpu: cpuSeconds(proc.pid) - cpu, tokens })
  }
  const calls = ((await (await fetch(`${url}/health`)).json()).batches - calls0) / REPEATS
  proc.kill('SIGTERM')
  await new Promise((r) => proc.on('exit', r))
  const s = median(runs.map((x) => x.s))
  const tokens = median(runs.map((x) => x.tokens))
  const cpu = median(runs.map((x) => x.cpu))
  console.log(`| ${c.name} | ${s.toFixed(2)} | ${(REQUESTS / s).toFixed(1)} | ${(tokens / s).toFixed(0)} | ${cpu.toFixed(2)} | ${calls.toFixed(1)} |`)
}
