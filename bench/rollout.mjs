// Rollout throughput through Model.generate at RL-like shapes (P prompts × n samples, prompts of
// mixed lengths, sequences that end at different lengths): the continuous-batching scheduler
// against the decode loop it replaced (AUTODIDACT_SCHEDULER=waves: waves of maxBatch sequences,
// a finished row idle until its wave ends), same model, same sampling, same row budget, modes
// alternating, min–max over repeats, the machine's load recorded (these machines are shared).
//
//   npm run build && node bench/rollout.mjs [--models toy,qwen3-0.6b] [--device cpu|cuda] [--threads 2] [--reps 3] [--out rollout.json]
//
// Sequences end at a stop token: the toy model's own EOS, or, on the random 0.6B-shaped model
// (bench/random-model.mjs), any of a fixed 1/STOP_EVERY of the vocabulary, which makes lengths
// roughly geometric with mean STOP_EVERY (capped at maxTokens), like RL answers of mixed lengths.
// The two modes sample the same tokens (test/engine/generate-batching.test.ts), checked here too.
import { writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { writeRandomModel } from './random-model.mjs'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const device = arg('device', 'cpu')
const threads = Number(arg('threads', String(Math.min(2, cpus().length))))
const reps = Number(arg('reps', 3))
const STOP_EVERY = 24

// Shapes: RL-like on the toy model; scaled down on the 0.6B shape so a CPU run ends in minutes.
const SHAPES = {
  cpu: {
    toy: { prompts: 64, n: 8, maxTokens: 64, maxBatch: 128, promptTokens: [8, 48] },
    'qwen3-0.6b': { prompts: 8, n: 4, maxTokens: 48, maxBatch: 16, promptTokens: [8, 64] },
  },
  cuda: {
    toy: { prompts: 256, n: 8, maxTokens: 128, maxBatch: 2048, promptTokens: [8, 48] },
    'qwen3-0.6b': { prompts: 256, n: 8, maxTokens: 512, maxBatch: 2048, promptTokens: [16, 256] },
  },
}[device]
const MODELS = {
  toy: { dir: () => join(here, '..', 'models', 'arith-qwen3-tiny'), ownStops: true },
  'qwen3-0.6b': { dir: () => writeRandomModel(join(tmpdir(), 'autodidact-bench-qwen3-0.6b')), ownStops: false },
}
const wanted = String(arg('models', 'toy,qwen3-0.6b')).split(',')

const { loadModel } = await import(pathToFileURL(join(here, '..', 'dist', 'index.js')).href)

function lcg(seed) {
  let x = seed >>> 0
  return () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32
}

/** P prompts of token ids, lengths uniform in [lo, hi]. */
function promptSet(P, [lo, hi], vocab, seed) {
  const r = lcg(seed)
  return Array.from({ length: P }, () => Array.from({ length: lo + Math.floor(r() * (hi - lo + 1)) }, () => Math.floor(r() * Math.min(vocab, 32000))))
}

async function runOnce(model, prompts, options, mode) {
  process.env.AUTODIDACT_SCHEDULER = mode
  const t0 = process.hrtime.bigint()
  const out = await model.generate(prompts, options)
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const generated = out.flat().reduce((a, c) => a + c.tokens.length, 0)
  return { seconds, generated, tokensPerSecond: generated / seconds, out }
}

const rows = []
const loadBefore = loadavg()
for (const name of wanted) {
  const spec = MODELS[name]
  const shape = SHAPES[name]
  const model = await loadModel(spec.dir(), { device, threads })
  const vocab = model.config.vocabSize
  const stopTokenIds = spec.ownStops ? undefined : Array.from({ length: Math.floor(vocab / STOP_EVERY) }, (_, i) => i * STOP_EVERY)
  const prompts = promptSet(shape.prompts, shape.promptTokens, vocab, 7)
  const options = { n: shape.n, temperature: 1, seed: 1, maxTokens: shape.maxTokens, maxBatch: shape.maxBatch, stopTokenIds }
  const byMode = { continuous: [], waves: [] }
  let same = true
  let reference = null
  await runOnce(model, prompts.slice(0, 2), { ...options, maxTokens: 4 }, 'continuous') // warm-up
  for (let r = 0; r < reps; ++r) {
    for (const mode of r % 2 ? ['waves', 'continuous'] : ['continuous', 'waves']) {
      const m = await runOnce(model, prompts, options, mode)
      const tokens = m.out.map((g) => g.map((c) => Array.from(c.tokens).join(',')).join('|')).join('/')
      if (reference === null) reference = tokens
      else same &&= tokens === reference
      byMode[mode].push(m)
      console.error(`[rollout] ${name} ${mode} rep ${r}: ${m.generated} tokens in ${m.seconds.toFixed(2)} s = ${m.tokensPerSecond.toFixed(0)} tok/s`)
    }
  }
  delete process.env.AUTODIDACT_SCHEDULER
  const stats = model.schedulerStats()
  const lengths = byMode.continuous[0].out.flat().map((c) => c.tokens.length)
  const tps = (ms) => ms.map((m) => m.tokensPerSecond)
  const range = (xs) => [Math.min(...xs), Math.max(...xs)]
  rows.push({
    model: name,
    device,
    threads,
    shape: { ...shape, sequences: shape.prompts * shape.n, meanLength: lengths.reduce((a, b) => a + b, 0) / lengths.length, maxLength: Math.max(...lengths) },
    continuousTokensPerSecond: range(tps(byMode.continuous)),
    wavesTokensPerSecond: range(tps(byMode.waves)),
    // worst continuous over best waves, and best over worst: the ratio's range across repeats
    speedup: [Math.min(...tps(byMode.continuous)) / Math.max(...tps(byMode.waves)), Math.max(...tps(byMode.continuous)) / Math.min(...tps(byMode.waves))],
    sameSamples: same,
    scheduler: { steps: stats.steps, largestStep: stats.largestStep, peakSharedBytes: stats.peakSharedBytes, sharedBytesTotal: stats.sharedBytesTotal },
  })
  model.dispose()
}
const loadAfter = loadavg()

console.log(`rollout throughput (${device}, ${threads} threads, ${reps} repeats, min–max; load average ${loadBefore[0].toFixed(1)} → ${loadAfter[0].toFixed(1)} on ${cpus().length} cores)`)
console.log('model        sequences  mean len  continuous tok/s   waves tok/s        speedup       same samples  prefix KV shared (peak)')
for (const r of rows)
  console.log(
    `${r.model.padEnd(12)} ${String(r.shape.sequences).padStart(9)}  ${r.shape.meanLength.toFixed(1).padStart(8)}  ${r.continuousTokensPerSecond.map((x) => x.toFixed(0)).join('–').padStart(15)}  ${r.wavesTokensPerSecond.map((x) => x.toFixed(0)).join('–').padStart(15)}  ${r.speedup.map((x) => x.toFixed(2)).join('–').padStart(11)}×  ${String(r.sameSamples).padStart(12)}  ${(r.scheduler.peakSharedBytes / 2 ** 20).toFixed(1)} MiB`,
  )
const out = arg('out', null)
if (out) writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), loadAverage: { before: loadBefore, after: loadAfter }, cores: cpus().length, rows }, null, 2) + '\n')
