#!/usr/bin/env node
// The fused one-pass logit statistics against the naive multi-pass version and against a plain
// parallel copy of the same bytes (the memory-bandwidth floor), on 32k and 152k vocabularies.
// Timings alternate between the three and report medians; every speed is also a ratio measured in
// the same run. PyTorch 2.x with MKL (bench/torch-venv.mjs installs it offline, once) computes the
// same statistics op by op, as a user would, in its own process right after each case
// (bench/logit_stats_torch.py).
// Prints a table and writes bench/results/logit-stats.json.
//
//   node bench/logit-stats.mjs [--rows 64] [--threads N] [--reps 15] [--topk 25] [--no-torch]
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { torchPeer } from './torch-venv.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const addon = createRequire(import.meta.url)(join(root, 'build/Release/autodidact.node'))
const { kernels } = addon

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}

const ROWS = option('rows', 64)
const THREADS = option('threads', os.availableParallelism())
const REPS = option('reps', 15)
const TOPK = option('topk', 25)
const VOCABS = [32000, 151936]

// Deterministic logits shaped like a language model's: mostly N(0, 2), a few large outliers.
function randomLogits(n, seed) {
  let s = seed >>> 0
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) + 0.5) / 4294967296
  const out = new Float32Array(n)
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(next()))
    const t = 2 * Math.PI * next()
    out[i] = 2 * r * Math.cos(t)
    if (i + 1 < n) out[i + 1] = 2 * r * Math.sin(t)
  }
  for (let i = 0; i < n; i += 997) out[i] += 12 * next()
  return out
}

/** PyTorch ≥ 2 from the benches' own venv (bench/torch-venv.mjs, installed offline once); a reason when unavailable. */
function torchAvailable() {
  if (process.argv.includes('--no-torch')) return { unavailable: '--no-torch' }
  return torchPeer()
}
const TORCH = torchAvailable()

function torchCase(vocab, topK, withRef) {
  if (TORCH.unavailable) return { unavailable: TORCH.unavailable }
  const job = { rows: ROWS, vocab, topK, ref: withRef, threads: THREADS, reps: Math.min(REPS, 5) }
  const r = spawnSync(TORCH.python, [join(root, 'bench', 'logit_stats_torch.py'), JSON.stringify(job)], { encoding: 'utf8' })
  if (r.status !== 0) return { unavailable: `torch run failed: ${r.stderr.slice(-500)}` }
  return JSON.parse(r.stdout.trim().split('\n').at(-1))
}

function seconds(fn) {
  const t0 = process.hrtime.bigint()
  fn()
  return Number(process.hrtime.bigint() - t0) / 1e9
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]
}

// Runs the contenders in rotating order, `REPS` rounds after one warm-up; returns every round's
// times. Ratios are taken within a round (same load on the machine), then their median.
function race(contenders) {
  const names = Object.keys(contenders)
  for (const name of names) contenders[name]()
  const rounds = []
  for (let rep = 0; rep < REPS; rep++) {
    const round = {}
    for (let j = 0; j < names.length; j++) {
      const name = names[(rep + j) % names.length]
      round[name] = seconds(contenders[name])
    }
    rounds.push(round)
  }
  return rounds
}

function benchCase(vocab, topK, withRef) {
  const n = ROWS * vocab
  const logits = randomLogits(n, 1234 + vocab)
  const ref = withRef ? randomLogits(n, 99 + vocab).map((y, i) => logits[i] + 0.25 * y) : undefined
  const targets = new Int32Array(ROWS).map((_, r) => (r * 7919) % vocab)
  const opts = { targets, topK, ref, threads: THREADS }
  const src = withRef ? new Float32Array(2 * n) : logits
  if (withRef) {
    src.set(logits)
    src.set(ref, n)
  }
  const dst = new Float32Array(src.length)
  const bytes = src.byteLength
  const rounds = race({
    fused: () => kernels.logitStats(logits, ROWS, vocab, opts),
    naive: () => kernels.naiveLogitStats(logits, ROWS, vocab, opts),
    copy: () => kernels.copyBytes(src, dst, THREADS),
  })
  const names = ['fused', 'naive', 'copy']
  const t = Object.fromEntries(names.map((k) => [k, median(rounds.map((r) => r[k]))]))
  const best = Object.fromEntries(names.map((k) => [k, Math.min(...rounds.map((r) => r[k]))]))
  const gbps = (s) => bytes / s / 1e9
  const torch = torchCase(vocab, topK, withRef)
  return {
    vocab,
    rows: ROWS,
    topK,
    ref: withRef,
    bytesRead: bytes,
    seconds: t,
    gbps: { fused: gbps(t.fused), naive: gbps(t.naive), copy: gbps(t.copy) },
    fusedOverNaive: median(rounds.map((r) => r.naive / r.fused)),
    fusedOverCopy: median(rounds.map((r) => r.copy / r.fused)),
    // PyTorch, same shapes and threads, its own process (not interleaved with the rounds)
    torch,
    fusedOverTorch: torch.seconds ? torch.seconds / t.fused : null,
    // Fastest round of each: the least disturbed estimate on a shared machine.
    best: {
      seconds: best,
      gbps: { fused: gbps(best.fused), naive: gbps(best.naive), copy: gbps(best.copy) },
      fusedOverNaive: best.naive / best.fused,
      fusedOverCopy: best.copy / best.fused,
      fusedOverTorch: torch.best ? torch.best / best.fused : null,
    },
    rounds,
  }
}

function printTable(results, pick) {
  const header = ['vocab', 'rows', 'K', 'ref', 'fused GB/s', 'naive GB/s', 'copy GB/s', 'torch GB/s', 'fused/naive', 'fused/copy', 'fused/torch']
  const rows = results.map((all) => {
    const r = pick(all)
    return [
      all.vocab,
      all.rows,
      all.topK,
      all.ref ? 'yes' : 'no',
      r.gbps.fused.toFixed(1),
      r.gbps.naive.toFixed(2),
      r.gbps.copy.toFixed(1),
      all.torch.seconds ? (all.bytesRead / (r === all ? all.torch.seconds : all.torch.best) / 1e9).toFixed(2) : '–',
      `${r.fusedOverNaive.toFixed(1)}×`,
      `${r.fusedOverCopy.toFixed(2)}×`,
      r.fusedOverTorch ? `${r.fusedOverTorch.toFixed(1)}×` : (all.torch.unavailable ?? '–'),
    ]
  })
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => String(row[i]).length)))
  const line = (cells) => cells.map((c, i) => String(c).padStart(widths[i])).join('  ')
  console.log(line(header))
  for (const row of rows) console.log(line(row))
}

const info = addon.info()
console.log(`logit statistics: ${os.cpus()[0]?.model ?? 'cpu'}, ${THREADS} threads, ${info.simd}, ${REPS} rounds`)
console.log(`load average ${os.loadavg().map((x) => x.toFixed(1)).join(' ')} (other processes share these cores)`)
console.log(`torch: ${TORCH.unavailable ?? `PyTorch ${TORCH.version} (MKL ${TORCH.mkl}, ${TORCH.capability}), its own process after each case`}`)
console.log('GB/s: bytes of logits (and ref) read per second; copy also writes them. Ratios > 1: fused faster.\n')
const results = []
// Sampling-time stats (top-K), training/scoring (K = 0), teacher-forced with a reference row.
const CASES = [
  { topK: TOPK, ref: false },
  { topK: 0, ref: false },
  { topK: TOPK, ref: true },
]
for (const c of CASES) for (const vocab of VOCABS) results.push(benchCase(vocab, c.topK, c.ref))
console.log('median of rounds (ratios: median of per-round ratios)')
printTable(results, (r) => r)
console.log('\nbest round of each (least disturbed)')
printTable(results, (r) => r.best)

const outDir = join(root, 'bench/results')
mkdirSync(outDir, { recursive: true })
const record = {
  bench: 'logit-stats',
  date: new Date().toISOString(),
  machine: { cpu: os.cpus()[0]?.model, cores: os.availableParallelism(), simd: info.simd, compiler: info.compiler },
  threads: THREADS,
  rounds: REPS,
  loadAverage: os.loadavg(),
  torch: TORCH.unavailable ? TORCH : { version: TORCH.version, mkl: TORCH.mkl, capability: TORCH.capability },
  results,
}
writeFileSync(join(outDir, 'logit-stats.json'), JSON.stringify(record, null, 2) + '\n')
console.log(`\nwrote bench/results/logit-stats.json`)
