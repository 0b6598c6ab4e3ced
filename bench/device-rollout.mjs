#!/usr/bin/env node
// bench/device-rollout.mjs — issue 20's device section (bench/device-check calls it; it also runs
// alone): rollouts through Model.generate on the GPU with the continuous-batching scheduler.
//   1. parity on the bundled model: seeded samples of a prompt alone vs inside a 256-row batch that
//      other calls join (PASS: identical tokens), continuous vs the old waves, greedy cuda vs cpu
//      (equal up to bf16 near-ties: a differing token must follow a CPU top-2 margin < 0.05);
//   2. Qwen3-0.6B shape (random bf16, bench/random-model.mjs), PROMPTS × N sequences, up to
//      MAX_NEW new tokens: generated tokens/s, continuous and waves;
//   3. batch-8 decode: ms per engine step (median), and the weight-bandwidth floor (bf16 weight
//      bytes / device copy bandwidth, from $OUT/bench.json or torch);
//   4. peers on the same shapes: HF transformers generate (bench/rollout_peer.py), vLLM if it imports.
// Writes $OUT/rollout.json (generatedTokensPerSecond, decodeStepMsBatch8, floorMsBatch8, peers)
// after every section, so a watchdog stop keeps what was measured. Exit 0 all parity passed, 1 a
// parity failure, 2 no CUDA, 3 the watchdog fired. Dry run without a GPU (the script's own logic on
// small shapes): AD_ROLLOUT_DEVICE=cpu AD_ROLLOUT_SMALL=1 node bench/device-rollout.mjs
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeRandomModel } from './random-model.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const { loadModel } = await import(join(root, 'dist/engine/model.js'))
const { nativeAddon } = await import(join(root, 'dist/native.js'))

const device = process.env.AD_ROLLOUT_DEVICE ?? 'cuda'
const small = process.env.AD_ROLLOUT_SMALL === '1'
const OUT = process.env.OUT ?? join(root, 'build', 'device-check', 'out')
const budgetS = Number(process.env.AD_ROLLOUT_BUDGET_S ?? 300)
const PROMPTS = small ? 4 : 256
const N = small ? 2 : 8
const MAX_NEW = small ? 8 : 512
const STOP_EVERY = 128 // 1/128 of the vocabulary ends a sequence: lengths ~geometric, mean ~128, capped at MAX_NEW
const results = { device, shape: { prompts: PROMPTS, n: N, maxNewTokens: MAX_NEW, stopEvery: STOP_EVERY }, parity: {}, peers: {} }
let failures = 0
const now = () => Number(process.hrtime.bigint()) / 1e9
const save = () => writeFileSync(join(OUT, 'rollout.json'), JSON.stringify(results, null, 2) + '\n')
const watchdog = setTimeout(() => {
  results.watchdog = `stopped after ${budgetS} s`
  save()
  console.log(`  FAIL watchdog: ${budgetS} s budget spent`)
  process.exit(3)
}, budgetS * 1000)

function check(ok, what) {
  console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}`)
  if (!ok) failures++
  return ok
}
async function section(name, fn) {
  console.log(`── ${name}`)
  const t0 = now()
  try {
    await fn()
  } catch (e) {
    failures++
    console.log(`  FAIL ${name}: ${e?.stack ?? e}`)
  }
  console.log(`   (${(now() - t0).toFixed(1)} s)`)
  save()
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i])

const addon = await nativeAddon()
if (device === 'cuda' && !addon.info().cuda.available) {
  console.log('cuda: unavailable:', JSON.stringify(addon.info().cuda))
  results.error = 'CUDA unavailable'
  save()
  process.exit(2)
}

// ---------------------------------------------------------------- 1. parity on the bundled model
const toyDir = join(root, 'models', 'arith-qwen3-tiny')
await section('parity: batch independence, continuous vs waves, greedy vs cpu (bundled model)', async () => {
  const gpu = await loadModel(toyDir, { device })
  const cpu = await loadModel(toyDir, { device: 'cpu' })
  try {
    const prompt = gpu.encodePrompt('Solve: 17+25\n')
    const opts = { temperature: 1, seed: 9, sequenceOffset: 500, maxTokens: 48, stopTokenIds: [] }
    const [[alone]] = await gpu.generate([prompt], opts)
    gpu.configureScheduler({ maxRows: 256 })
    const crowd = []
    for (let i = 0; i < 4; ++i)
      crowd.push(gpu.generate(Array.from({ length: 16 }, (_, j) => gpu.encodePrompt(`Solve: ${i * 16 + j}+${j * 3}\n`)), { n: 4, temperature: 1, seed: i, maxTokens: 8 + 20 * i, stopTokenIds: [] }))
    while ((gpu.schedulerStats()?.steps ?? 0) < 4) await new Promise((r) => setTimeout(r, 1))
    const joined = gpu.generate([prompt], opts)
    const [[inBatch]] = await joined
    await Promise.all(crowd)
    const st = gpu.schedulerStats()
    results.parity.batchIndependence = { equal: same(Array.from(alone.tokens), Array.from(inBatch.tokens)), largestStep: st.largestStep, sharedSteps: st.sharedSteps }
    check(results.parity.batchIndependence.equal, `seeded sample alone == inside a batch of ${st.largestStep} rows other calls join (${st.sharedSteps} shared steps)`)

    const prompts = Array.from({ length: 12 }, (_, i) => gpu.encodePrompt(`Solve: ${i * 7}+${i}\n`))
    const sopts = { n: 3, temperature: 1, seed: 4, maxTokens: 32, stopTokenIds: [], maxBatch: 8 }
    process.env.AUTODIDACT_SCHEDULER = 'waves'
    const waves = await gpu.generate(prompts, sopts)
    delete process.env.AUTODIDACT_SCHEDULER
    const cont = await gpu.generate(prompts, sopts)
    const pairs = waves.flat().map((w, i) => same(Array.from(w.tokens), Array.from(cont.flat()[i].tokens)))
    results.parity.continuousVsWaves = { equal: pairs.filter(Boolean).length, total: pairs.length }
    check(pairs.every(Boolean), `continuous == waves: ${pairs.filter(Boolean).length}/${pairs.length} sequences`)

    const g = await gpu.generate(prompts, { temperature: 0, maxTokens: 32, stopTokenIds: [], stats: { topK: 2 } })
    const c = await cpu.generate(prompts, { temperature: 0, maxTokens: 32, stopTokenIds: [], stats: { topK: 2 } })
    let equal = 0, nearTie = 0, hard = 0
    g.forEach(([a], i) => {
      const b = c[i][0]
      const k = Array.from(a.tokens).findIndex((t, j) => t !== b.tokens[j])
      if (k < 0 && a.tokens.length === b.tokens.length) return void equal++
      const at = k < 0 ? Math.min(a.tokens.length, b.tokens.length) - 1 : k
      if (b.margin[at] < 0.05) nearTie++
      else hard++
    })
    results.parity.greedyVsCpu = { equal, nearTie, differ: hard, total: g.length }
    check(hard === 0, `greedy cuda vs cpu: ${equal} equal, ${nearTie} part at a near-tie (margin < 0.05), ${hard} differ elsewhere, of ${g.length}`)
  } finally {
    gpu.dispose()
    cpu.dispose()
  }
})

// ---------------------------------------------------------------- 2–3. the 0.6B shape: rollouts and batch-8 decode
const bigDir = small ? toyDir : writeRandomModel(join(tmpdir(), 'autodidact-bench-qwen3-0.6b'))
await section(`rollouts: ${PROMPTS} prompts × n = ${N}, ≤ ${MAX_NEW} new tokens (${small ? 'bundled model, small' : 'Qwen3-0.6B shape, bf16'})`, async () => {
  const m = await loadModel(bigDir, { device })
  try {
    m.configureScheduler({ maxRows: small ? 8 : 512 })  // 512 rows × ~770 positions of bf16 KV ≈ 45 GB on the slot layout
    const V = m.config.vocabSize
    const stopTokenIds = Array.from({ length: Math.floor(V / STOP_EVERY) }, (_, i) => i * STOP_EVERY + 1)
    let x = 12345
    const rnd = () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32
    const prompts = Array.from({ length: PROMPTS }, () => Array.from({ length: 16 + Math.floor(rnd() * 240) }, () => Math.floor(rnd() * Math.min(V, 32000))))
    const opts = { n: N, temperature: 1, seed: 1, maxTokens: MAX_NEW, stopTokenIds }
    results.shape.promptTokens = prompts.map((p) => p.length)
    await m.generate(prompts.slice(0, 2), { ...opts, maxTokens: 4 }) // warm-up
    for (const mode of ['continuous', 'waves']) {
      if (mode === 'waves') process.env.AUTODIDACT_SCHEDULER = 'waves'
      const t0 = now()
      const out = await m.generate(prompts, mode === 'waves' ? { ...opts, maxBatch: small ? 8 : 512 } : opts)
      const s = now() - t0
      delete process.env.AUTODIDACT_SCHEDULER
      const generated = out.flat().reduce((a, c) => a + c.tokens.length, 0)
      results[mode === 'continuous' ? 'generatedTokensPerSecond' : 'wavesGeneratedTokensPerSecond'] = generated / s
      results[`${mode}Run`] = { seconds: s, generated, meanLength: generated / (PROMPTS * N) }
      console.log(`  ${mode}: ${generated} tokens in ${s.toFixed(1)} s = ${(generated / s).toFixed(0)} tok/s`)
      save()
      if (mode === 'continuous' && now() - t0 > budgetS / 3) break // no time for the slower baseline
    }
    results.scheduler = m.schedulerStats()

    // Batch-8 decode: one engine step of 8 decode rows, as the issue's 2.8 ms measured it.
    const cache = m.handle.createCache(8, 64 + 200)
    const slots = Int32Array.from({ length: 8 }, (_, i) => i)
    await m.handle.step(cache, { slots, counts: new Int32Array(8).fill(64), outModes: new Uint8Array(8), tokens: Int32Array.from({ length: 512 }, (_, i) => (i * 31) % V) })
    const sampling = {
      temperature: new Float32Array(8).fill(1), topK: new Int32Array(8), topP: new Float32Array(8).fill(1), minP: new Float32Array(8),
      repetitionPenalty: new Float32Array(8).fill(1), presencePenalty: new Float32Array(8), frequencyPenalty: new Float32Array(8),
      seed: new Float64Array(8), stream: Float64Array.from(slots), promptLength: new Int32Array(8).fill(64),
    }
    const ms = []
    let tok = Int32Array.from(slots)
    for (let i = 0; i < 120; ++i) {
      const t0 = now()
      const r = await m.handle.step(cache, { slots, counts: new Int32Array(8).fill(1), outModes: new Uint8Array(8).fill(1), tokens: tok, sampling })
      if (i >= 20) ms.push((now() - t0) * 1e3)
      tok = r.tokens
    }
    cache.dispose()
    ms.sort((a, b) => a - b)
    results.decodeStepMsBatch8 = ms[ms.length >> 1]
    results.decodeStepMsBatch8Range = [ms[0], ms[ms.length - 1]]
    // the bf16 file's bytes: every weight is read once per decode step (the tied embedding as the LM head)
    results.weightBytesBf16 = statSync(join(bigDir, 'model.safetensors')).size
    console.log(`  batch-8 decode step: ${results.decodeStepMsBatch8.toFixed(3)} ms median (${ms[0].toFixed(3)}–${ms[ms.length - 1].toFixed(3)})`)
  } finally {
    m.dispose()
  }
})

// ---------------------------------------------------------------- 3b. the floor, 4. peers
await section('weight-bandwidth floor and peers (HF transformers, vLLM)', async () => {
  let copyGBs = null
  const benchJson = join(OUT, 'bench.json')
  if (existsSync(benchJson)) {
    const m = /copy ([0-9.]+) GB\/s/.exec(readFileSync(benchJson, 'utf8'))
    if (m) copyGBs = Number(m[1])
  }
  if (small) return
  const r = spawnSync('python3', [join(root, 'bench', 'rollout_peer.py'), bigDir, String(PROMPTS), String(N), String(MAX_NEW), String(STOP_EVERY)], {
    encoding: 'utf8',
    timeout: Math.max(10, budgetS - 60) * 1000,
    maxBuffer: 1 << 24,
  })
  process.stdout.write((r.stdout ?? '').split('\n').map((l) => `  ${l}`).join('\n') + '\n')
  if (r.status !== 0) console.log(`  peer script: exit ${r.status ?? r.signal}: ${(r.stderr ?? '').slice(-1500)}`)
  for (const line of (r.stdout ?? '').split('\n')) {
    const j = line.startsWith('{') ? JSON.parse(line) : null
    if (!j) continue
    if (j.peer) results.peers[j.peer] = j
    if (j.copyGBs && copyGBs === null) copyGBs = j.copyGBs
  }
  results.copyGBs = copyGBs
  if (copyGBs && results.weightBytesBf16) results.floorMsBatch8 = (results.weightBytesBf16 / (copyGBs * 1e9)) * 1e3
  if (results.floorMsBatch8) console.log(`  floor: ${results.floorMsBatch8.toFixed(3)} ms per step at ${copyGBs} GB/s copy`)
})

clearTimeout(watchdog)
results.failures = failures
save()
console.log(`rollout: ${failures ? `${failures} FAILED` : 'all parity passed'}; generated ${results.generatedTokensPerSecond?.toFixed(0) ?? '?'} tok/s (waves ${results.wavesGeneratedTokensPerSecond?.toFixed(0) ?? '?'}); batch-8 step ${results.decodeStepMsBatch8?.toFixed(3) ?? '?'} ms (floor ${results.floorMsBatch8?.toFixed(3) ?? '?'}); peers ${Object.entries(results.peers).map(([k, v]) => `${k} ${v.tokensPerSecond?.toFixed(0) ?? v.error}`).join(', ') || 'none'}`)
process.exit(failures ? 1 : 0)
