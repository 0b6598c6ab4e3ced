// Forward+backward+AdamW tokens/s and peak memory of our engine against PyTorch eager (Debian's
// python3-torch) on the same shapes, f32, same threads, in the same run. Each side runs in its
// own process so peak memory is its own.
// Usage: npm run build && node bench/train-step.mjs [--only small] [--threads N]
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const threads = Number(arg('threads', cpus().length))
const SHAPES = {
  small: { hidden: 256, intermediate: 768, layers: 4, heads: 4, kv_heads: 2, head_dim: 64, vocab: 151936, batch: 4, seq: 128, reps: 3 },
  'qwen3-0.6b': { hidden: 1024, intermediate: 3072, layers: 28, heads: 16, kv_heads: 8, head_dim: 128, vocab: 151936, batch: 1, seq: 128, reps: 2 },
}

function ours(name, s) {
  const r = spawnSync(process.execPath, [join(here, 'train-step-ours.mjs'), JSON.stringify({ ...s, name, threads })], { encoding: 'utf8', maxBuffer: 1 << 24 })
  if (r.status !== 0) throw new Error(`our train step failed: ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').at(-1))
}

function torch(s) {
  const probe = spawnSync('/usr/bin/python3', ['-c', 'import torch'], { encoding: 'utf8' })
  if (probe.status !== 0) {
    console.error('[bench] installing python3-torch from Debian (once)…')
    const inst = spawnSync('apt-get', ['install', '-y', '-q', 'python3-torch'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
    if (inst.status !== 0) return { unavailable: 'python3-torch could not be installed' }
  }
  const out = execFileSync('/usr/bin/python3', [join(here, 'train_step_torch.py'), JSON.stringify({ ...s, threads })], { encoding: 'utf8', maxBuffer: 1 << 24 })
  return JSON.parse(out.trim().split('\n').at(-1))
}

const only = arg('only', null)
const results = []
for (const [name, s] of Object.entries(SHAPES)) {
  if (only && only !== name) continue
  const a = ours(name, s)
  const b = torch(s)
  results.push({ shape: name, ...s, threads, ours: a, torch: b, ratio: b.tokens_per_second ? a.tokensPerSecond / b.tokens_per_second : null })
}
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(join(here, 'results', 'train-step.json'), JSON.stringify({ date: new Date().toISOString(), results }, null, 2))
const tps = (r, times) => (times ? times.map((t) => (r.batch * r.seq) / t).sort((a, b) => a - b) : [])
const span = (xs) => (xs.length ? `[${xs[0].toFixed(1)}–${xs.at(-1).toFixed(1)}]` : '')
console.log(`train step (forward + backward + AdamW, f32, ${threads} threads): tokens/s median [min–max over reps], peak RSS of each process`)
console.log('shape        ours tok/s            torch tok/s           ratio   ours peak   torch peak')
for (const r of results)
  console.log(
    `${r.shape.padEnd(12)} ${(r.ours.tokensPerSecond.toFixed(1) + ' ' + span(tps(r, r.ours.times))).padEnd(21)} ${String(r.torch.tokens_per_second ? r.torch.tokens_per_second.toFixed(1) + ' ' + span(tps(r, r.torch.times)) : r.torch.unavailable).padEnd(21)} ${r.ratio ? r.ratio.toFixed(2).padStart(6) + '×' : '      –'} ${(r.ours.peakRssBytes / 2 ** 30).toFixed(2).padStart(8)} GiB ${r.torch.peak_rss_bytes ? (r.torch.peak_rss_bytes / 2 ** 30).toFixed(2).padStart(8) + ' GiB' : ''}`,
  )
console.log('peak RSS: the whole process (model, optimizer state, activations, runtime); same shapes, same data sizes.')
