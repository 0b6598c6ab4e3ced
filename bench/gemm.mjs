#!/usr/bin/env node
// Our CPU GEMM (native/cpu/gemm.cpp) in GFLOP/s against two things measured in the same run:
// the machine's FMA peak (a register-only FMA loop on every thread, 1 thread and N threads:
// native/cpu/gemm_peak.cpp) and PyTorch's matmul (2.x with MKL, bench/torch-venv.mjs; its own
// process, bench/gemm_torch.py) on the same shapes and threads.
//
// Shapes: every Linear of a model, in the three layouts the engine calls, rows M = 1, 8, 128, 512
//   nt  forward       Y[M × out]  = X[M × in] · W[out × in]ᵀ
//   nn  dX = dY·W     Y[M × in]   = dY[M × out] · W[out × in]
//   tn  dW += dYᵀ·X   Y[out × in] = dY[M × out]ᵀ · X[M × in]
// for Qwen3-0.6B (hidden 1024, intermediate 3072, q 2048, kv 1024, vocab 151,936) and the small
// training shape (hidden 256, intermediate 768, q 256, kv 128). At M = 1 and 8 a product is a pass
// over W: the table also gives W's bytes per second.
//
//   npm run build && node bench/gemm.mjs [--threads N] [--models qwen3-0.6b,small] [--rows 1,8,128,512]
//                                        [--variants nt,nn,tn] [--reps 3] [--no-torch] [--no-lm-head]
//   --weights f32,bf16,f16,int8: the 'nt' rows also over W kept in those types (the loadModel
//   `weights` option: widened in registers; bytes of W per weight 4, 2, 2, 1 + 2/32); the torch
//   column stays its f32 matmul on the same shape.
// Prints a table per model and writes bench/results/gemm.json.
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { torchPeer } from './torch-venv.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const { gemm } = createRequire(import.meta.url)(join(root, 'build/Release/autodidact.node'))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const THREADS = Number(arg('threads', Math.min(2, os.availableParallelism())))
const REPS = Number(arg('reps', 3))
const ROWS = arg('rows', '1,8,128,512').split(',').map(Number)
const VARIANTS = arg('variants', 'nt,nn,tn').split(',')
const WEIGHTS = arg('weights', 'f32').split(',')
const BYTES_PER_WEIGHT = { f32: 4, bf16: 2, f16: 2, int8: 1 + 2 / 32 }
const MODELS = {
  'qwen3-0.6b': { hidden: 1024, intermediate: 3072, q: 2048, kv: 1024, vocab: 151936 },
  small: { hidden: 256, intermediate: 768, q: 256, kv: 128, vocab: 151936 },
}
const models = arg('models', Object.keys(MODELS).join(',')).split(',')

function linears(m) {
  const all = [
    { name: 'q', out: m.q, in: m.hidden },
    { name: 'k,v', out: m.kv, in: m.hidden },
    { name: 'o', out: m.hidden, in: m.q },
    { name: 'gate,up', out: m.intermediate, in: m.hidden },
    { name: 'down', out: m.hidden, in: m.intermediate },
    { name: 'lm_head', out: m.vocab, in: m.hidden },
  ]
  return process.argv.includes('--no-lm-head') ? all.filter((l) => l.name !== 'lm_head') : all
}

// The (rows, cols, depth) of a Linear's product in a layout, for M tokens.
function product(variant, l, M) {
  if (variant === 'nt') return { rows: M, cols: l.out, depth: l.in }
  if (variant === 'nn') return { rows: M, cols: l.in, depth: l.out }
  return { rows: l.out, cols: l.in, depth: M }
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0)
const span = (xs) => ({ min: Math.min(...xs), max: Math.max(...xs) })

const SHORT_PEAK = 1 << 22 // rounds of 12 FMAs per thread: ~15 ms at 3 GHz
const peakOf = (threads, iterations) => sum(gemm.fmaPeak(threads, iterations))
const fmaPeak = (iterations = 1 << 24) => ({ one: peakOf(1, iterations), all: peakOf(THREADS, iterations) })

const torch = process.argv.includes('--no-torch') ? { unavailable: '--no-torch' } : torchPeer()

function torchTimes(cases) {
  if (torch.unavailable) return null
  const job = { threads: THREADS, reps: REPS, cases: cases.map(({ variant, rows, cols, depth }) => ({ variant, rows, cols, depth })) }
  const r = spawnSync(torch.python, [join(root, 'bench', 'gemm_torch.py'), JSON.stringify(job)], { encoding: 'utf8', maxBuffer: 1 << 26 })
  if (r.status !== 0) {
    console.error(`[bench] torch failed: ${r.stderr.slice(-500)}`)
    return null
  }
  return JSON.parse(r.stdout.trim().split('\n').at(-1)).results.map((x) => x.times)
}

console.log(`GEMM: ${os.cpus()[0]?.model ?? 'cpu'}, ${THREADS} threads, kernels ${gemm.kernel}; ${REPS} timed runs per shape after a warm-up`)
console.log(`peer: ${torch.unavailable ?? `PyTorch ${torch.version} matmul (MKL ${torch.mkl}, ${torch.capability}), its own process, same threads`}`)
const peakBefore = fmaPeak()
const record = { bench: 'gemm', date: new Date().toISOString(), cpu: os.cpus()[0]?.model, threads: THREADS, kernel: gemm.kernel, reps: REPS, loadBefore: os.loadavg(), peakBefore, models: {} }
console.log(`FMA peak (register-only loop): 1 thread ${(peakBefore.one / 1e9).toFixed(1)} GFLOP/s, ${THREADS} threads ${(peakBefore.all / 1e9).toFixed(1)} GFLOP/s; load average ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`)

// Per model and layout: ours on every shape, then PyTorch's process on the same shapes, so the two
// sides of a row are minutes apart at most.
for (const name of models) {
  record.models[name] = []
  for (const variant of VARIANTS) {
    const cases = []
    for (const l of linears(MODELS[name]))
      for (const M of ROWS)
        for (const weights of variant === 'nt' ? WEIGHTS : ['f32'])
          cases.push({ variant, linear: l.name, M, weights, weightBytes: BYTES_PER_WEIGHT[weights] * l.out * l.in, ...product(variant, l, M) })
    for (const c of cases) {
      // the peak just before and just after this shape's runs: the machine's share for us drifts
      const before = peakOf(THREADS, SHORT_PEAK)
      c.seconds = Array.from(gemm.time(c.variant, c.rows, c.cols, c.depth, THREADS, REPS, c.weights))
      c.peak = Math.max(before, peakOf(THREADS, SHORT_PEAK))
      process.stderr.write('.')
    }
    const theirs = torchTimes(cases)
    cases.forEach((c, i) => (c.torchSeconds = theirs ? theirs[i] : null))
    process.stderr.write(` ${name} ${variant}\n`)
    record.models[name].push(...cases)
  }
}
const peakAfter = fmaPeak()
Object.assign(record, { peakAfter, loadAfter: os.loadavg() })
const allCases = Object.values(record.models).flat()
const peak = Math.max(peakBefore.all, peakAfter.all, ...allCases.map((c) => c.peak)) // the run's best

const gflops = (c, s) => (2 * c.rows * c.cols * c.depth) / s / 1e9
for (const [name, cases] of Object.entries(record.models)) {
  console.log(`\n${name}: GFLOP/s best [worst] of ${REPS}; % of the ${THREADS}-thread FMA peak measured around that shape's runs ('% here') and of the run's best peak (${(peak / 1e9).toFixed(1)}); ours/torch on the best runs`)
  const header = ['layout', 'linear', 'W', 'M', 'rows×cols×depth', 'ours GFLOP/s', '% here', '% best', 'W GB/s', 'torch GFLOP/s', 'ours/torch']
  const lines = cases.map((c) => {
    const ours = span(c.seconds.map((s) => gflops(c, s)))
    const t = c.torchSeconds ? span(c.torchSeconds.map((s) => gflops(c, s))) : null
    c.summary = {
      ours,
      percentOfPeak: (100 * ours.max * 1e9) / c.peak,
      percentOfBestPeak: (100 * ours.max * 1e9) / peak,
      torch: t,
      torchPercentOfPeak: t ? (100 * t.max * 1e9) / c.peak : null,
      ratio: t ? ours.max / t.max : null,
    }
    return [
      c.variant,
      c.linear,
      c.weights,
      c.M,
      `${c.rows}×${c.cols}×${c.depth}`,
      `${ours.max.toFixed(1)} [${ours.min.toFixed(1)}]`,
      `${c.summary.percentOfPeak.toFixed(0)}%`,
      `${c.summary.percentOfBestPeak.toFixed(0)}%`,
      c.M <= 8 ? (c.weightBytes / Math.min(...c.seconds) / 1e9).toFixed(1) : '',
      t ? `${t.max.toFixed(1)} [${t.min.toFixed(1)}]` : (torch.unavailable ?? 'failed'),
      c.summary.ratio ? `${c.summary.ratio.toFixed(2)}×` : '–',
    ]
  })
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => String(l[i]).length)))
  const row = (cells) => cells.map((x, i) => (i < 3 ? String(x).padEnd(widths[i]) : String(x).padStart(widths[i]))).join('  ')
  console.log(row(header))
  for (const l of lines) console.log(row(l))
  // The issue's target: ≥ 70% of the measured peak on the model's shapes where the GEMM is
  // compute-bound (M ≥ 128); M = 1, 8 are passes over W (see W GB/s).
  const big = cases.filter((c) => c.M >= 128 && c.weights === 'f32')
  // 'lo–hi% (median m%)' of a list of percentages (empty: null)
  const spread = (xs) => {
    const s = xs.filter((x) => x !== null).sort((a, b) => a - b)
    return s.length ? `${s[0].toFixed(0)}–${s.at(-1).toFixed(0)}% (median ${s[Math.floor(s.length / 2)].toFixed(0)}%)` : null
  }
  for (const v of VARIANTS) {
    const mine = big.filter((c) => c.variant === v)
    if (!mine.length) continue
    const r = mine.filter((c) => c.summary.ratio).map((c) => c.summary.ratio).sort((a, b) => a - b)
    const torchHere = spread(mine.map((c) => c.summary.torchPercentOfPeak))
    console.log(
      `${v}, M ≥ 128: ${spread(mine.map((c) => c.summary.percentOfBestPeak))} of the best peak, ${spread(mine.map((c) => c.summary.percentOfPeak))} of the peak around each shape` +
        (torchHere ? `; torch ${torchHere} of the same` : '') +
        (r.length ? `; ${r[0].toFixed(2)}–${r.at(-1).toFixed(2)}× torch` : ''),
    )
  }
}
console.log(`\nFMA peak after: 1 thread ${(peakAfter.one / 1e9).toFixed(1)}, ${THREADS} threads ${(peakAfter.all / 1e9).toFixed(1)} GFLOP/s; load average ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`)
mkdirSync(join(root, 'bench/results'), { recursive: true })
writeFileSync(join(root, 'bench/results/gemm.json'), JSON.stringify(record, null, 2) + '\n')
console.log('wrote bench/results/gemm.json')
