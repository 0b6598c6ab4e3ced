// Forward + backward + AdamW tokens/s and peak memory of our engine against PyTorch 2.x with MKL
// (bench/torch-venv.mjs installs it offline; the peer is bench/train_step_torch.py: SDPA, fused
// AdamW), f32, the same shapes and threads, in the same run. Each side runs in its own process,
// so its peak RSS is its own; the sides alternate (ours, torch, ours, torch…) so a change in the
// machine's load reaches both. tokens/s: min–max over every timed step of every round.
// Writes bench/results/train-step.json.
// Usage: npm run build && node bench/train-step.mjs [--only small] [--threads N] [--rounds 2]
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { torchPeer } from './torch-venv.mjs'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const threads = Number(arg('threads', cpus().length))
const rounds = Number(arg('rounds', 2))
const SHAPES = {
  small: { hidden: 256, intermediate: 768, layers: 4, heads: 4, kv_heads: 2, head_dim: 64, vocab: 151936, batch: 4, seq: 128, reps: 3 },
  'qwen3-0.6b': { hidden: 1024, intermediate: 3072, layers: 28, heads: 16, kv_heads: 8, head_dim: 128, vocab: 151936, batch: 1, seq: 128, reps: 2 },
}

const load = () => loadavg().map((x) => Number(x.toFixed(2)))

function ours(name, s) {
  const r = spawnSync(process.execPath, [join(here, 'train-step-ours.mjs'), JSON.stringify({ ...s, name, threads })], { encoding: 'utf8', maxBuffer: 1 << 24 })
  if (r.status !== 0) throw new Error(`our train step failed: ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').at(-1))
}

function torch(s, peer) {
  if (peer.unavailable) return { unavailable: peer.unavailable }
  const r = spawnSync(peer.python, [join(here, 'train_step_torch.py'), JSON.stringify({ ...s, threads })], { encoding: 'utf8', maxBuffer: 1 << 24 })
  if (r.status !== 0) return { unavailable: `torch run failed: ${r.stderr.slice(-400)}` }
  const out = JSON.parse(r.stdout.trim().split('\n').at(-1))
  return { times: out.times, peakRssBytes: out.peak_rss_bytes, torch: out.torch, optimizer: out.optimizer, capability: out.capability, mkl: out.mkl }
}

const span = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return { min: s[0], median: s[Math.floor(s.length / 2)], max: s.at(-1) }
}

const peer = torchPeer()
const only = arg('only', null)
const results = []
for (const [name, s] of Object.entries(SHAPES)) {
  if (only && only !== name) continue
  const runs = { ours: [], torch: [] }
  for (let r = 0; r < rounds; r++) {
    runs.ours.push({ loadBefore: load(), ...ours(name, s) })
    runs.torch.push({ loadBefore: load(), ...torch(s, peer) })
  }
  const tokens = s.batch * s.seq
  const side = (list, rss) => {
    if (list.some((x) => x.unavailable)) return { unavailable: list.find((x) => x.unavailable).unavailable }
    const tps = span(list.flatMap((x) => x.times.map((t) => tokens / t)))
    return { tokensPerSecond: tps, peakRssBytes: Math.max(...list.map(rss)), runs: list }
  }
  const a = side(runs.ours, (x) => x.peakRssBytes), b = side(runs.torch, (x) => x.peakRssBytes)
  const ratio = b.unavailable ? null : { min: a.tokensPerSecond.min / b.tokensPerSecond.max, median: a.tokensPerSecond.median / b.tokensPerSecond.median, max: a.tokensPerSecond.max / b.tokensPerSecond.min }
  results.push({ shape: name, ...s, threads, ours: a, torch: b, ratio })
}
mkdirSync(join(here, 'results'), { recursive: true })
const record = { bench: 'train-step', date: new Date().toISOString(), cpu: cpus()[0]?.model, threads, rounds, peer: peer.unavailable ? peer : { torch: peer.version, mkl: peer.mkl, capability: peer.capability }, loadAfter: load(), results }
writeFileSync(join(here, 'results', 'train-step.json'), JSON.stringify(record, null, 2))

const f1 = (x) => x.toFixed(1)
const gib = (b) => `${(b / 2 ** 30).toFixed(2)} GiB`
console.log(`train step (forward + backward + AdamW, f32, ${threads} threads, ${rounds} alternating rounds): tokens/s median [min–max over steps]`)
console.log(`peer: ${peer.unavailable ? peer.unavailable : `PyTorch ${peer.version} (MKL ${peer.mkl}, ${peer.capability}), SDPA attention, ${results[0]?.torch.runs?.[0]?.optimizer ?? 'AdamW'}`}`)
console.log('shape        ours tok/s             torch tok/s            ours/torch (median [worst–best])  ours peak   torch peak')
for (const r of results) {
  const t = (x) => (x.unavailable ? x.unavailable : `${f1(x.tokensPerSecond.median)} [${f1(x.tokensPerSecond.min)}–${f1(x.tokensPerSecond.max)}]`)
  const q = r.ratio ? `${r.ratio.median.toFixed(2)}× [${r.ratio.min.toFixed(2)}–${r.ratio.max.toFixed(2)}]` : '–'
  console.log(`${r.shape.padEnd(12)} ${t(r.ours).padEnd(22)} ${t(r.torch).padEnd(22)} ${q.padEnd(33)} ${gib(r.ours.peakRssBytes).padStart(9)} ${r.torch.peakRssBytes ? gib(r.torch.peakRssBytes).padStart(10) : ''}`)
}
const loads = results.flatMap((r) => [...r.ours.runs, ...(r.torch.runs ?? [])].map((x) => x.loadBefore[0]))
console.log(`load average (1 min) before each run: ${loads.map((x) => x.toFixed(1)).join(', ')}; after: ${load().join(' ')}`)
console.log('peak RSS: the whole process (model, optimizer state, activations, runtime); same shapes, same data sizes.')
