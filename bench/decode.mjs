// Prefill and decode tokens/s of our CPU engine against llama.cpp (node-llama-cpp 3.21.1, CPU
// prebuild) on the same weights exported to GGUF (f32 and f16), batch 1 and 8, threads pinned
// equal, each measurement in its own process, engines alternating, median and spread of the runs;
// plus the memory-bandwidth floor: weight bytes read per decode step / measured read bandwidth (a
// decode step only reads its weights; a copy's read rate, which also pays for the writes, was the
// floor before and let decode runs pass it).
//
//   npm run build && bash bench/peers/install.sh && node bench/decode.mjs [--models toy,qwen3-0.6b] [--threads 2 | 1,2] [--reps 3]
//                                                                        [--weights f32,bf16,f16,int8] [--batches 1,8] [--out decode.json]
//
// "ours" keeps the weights in f32 in memory (the default); --weights adds "ours bf16" etc., the
// loadModel `weights` option (Linear weights, LM head and embedding kept at 2 bytes, int8 at 1 + 2/32),
// whose ratio column is against llama.cpp at the same bytes per weight: f16 for bf16/f16, and for int8
// llama.cpp Q8_0 (the same layout: blocks of 32 int8 with an f16 scale). llama.cpp runs the f32, f16
// and (with int8) q8_0 GGUFs our export writes.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { writeRandomModel } from './random-model.mjs'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
// a comma list runs the whole table at each thread count (llama.cpp's spinning thread barriers make
// it collapse on an oversubscribed machine; 1 thread shows the kernels without that effect)
const threadList = String(arg('threads', String(Math.min(2, cpus().length)))).split(',').map(Number)
const reps = Number(arg('reps', 3))
const MODELS = {
  toy: { dir: () => join(here, '..', 'models', 'arith-qwen3-tiny'), promptTokens: 64, newTokens: 64, vocab: 365 },
  'qwen3-0.6b': { dir: () => writeRandomModel(join(tmpdir(), 'autodidact-bench-qwen3-0.6b')), promptTokens: 16, newTokens: 16, vocab: 151936 },
}
const wanted = String(arg('models', 'toy,qwen3-0.6b')).split(',')
const BATCHES = String(arg('batches', '1,8')).split(',').map(Number)
if (!BATCHES.every((b) => Number.isInteger(b) && b >= 1 && b <= 256)) throw new Error(`--batches takes whole numbers from 1 to 256, comma-separated; got ${arg('batches')}`)
const WEIGHTS = [...new Set(['f32', ...String(arg('weights', 'f32')).split(',')])] // ours f32 always runs: the f32 bytes per step
const oursName = (w) => (w === 'f32' ? 'ours' : `ours ${w}`)

const { exportGguf } = await import(pathToFileURL(join(here, '..', 'dist', 'export', 'gguf.js')).href)
const { nativeAddon } = await import(pathToFileURL(join(here, '..', 'dist', 'index.js')).href)
const addon = await nativeAddon()

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const spread = (xs) => [Math.min(...xs), Math.max(...xs)]

/** Read bandwidth of a parallel read of every byte (1 GiB, far past the caches), bytes/s. Median of 7. */
function readBandwidth(threads) {
  const n = 1 << 30
  const src = new Float32Array(n / 4).fill(1)
  addon.kernels.readBytes(src, threads)
  const t = []
  for (let i = 0; i < 7; i++) {
    const t0 = process.hrtime.bigint()
    addon.kernels.readBytes(src, threads)
    t.push(Number(process.hrtime.bigint() - t0) / 1e9)
  }
  return n / median(t)
}

function worker(job) {
  const r = spawnSync(process.execPath, [join(here, 'decode-worker.mjs'), JSON.stringify(job)], { encoding: 'utf8', maxBuffer: 1 << 24 })
  if (r.status !== 0) throw new Error(`decode worker (${job.engine}) failed: ${r.stderr.slice(-2000)}`)
  return JSON.parse(r.stdout.trim().split('\n').at(-1))
}

/** GGUF of the folder at a dtype, exported once and reused (the bench measures decoding, not export). */
async function gguf(name, dir, dtype) {
  const file = join(tmpdir(), `autodidact-bench-${name}-${dtype}.gguf`)
  if (!existsSync(file)) {
    const r = await exportGguf(dir, file, { dtype })
    console.error(`[decode] exported ${file} (${(r.bytes / 2 ** 20).toFixed(0)} MiB, ${r.seconds.toFixed(1)} s)`)
  }
  return file
}

const rows = []
const bandwidth = {}
for (const threads of threadList) {
const bw = readBandwidth(threads)
bandwidth[threads] = bw / 1e9
for (const name of wanted) {
  const m = MODELS[name]
  if (!m) throw new Error(`unknown model ${name} (have ${Object.keys(MODELS).join(', ')})`)
  const dir = m.dir()
  const files = { f32: await gguf(name, dir, 'f32'), f16: await gguf(name, dir, 'f16'), ...(WEIGHTS.includes('int8') ? { q8_0: await gguf(name, dir, 'q8_0') } : {}) }
  for (const batch of BATCHES) {
    const base = { modelDir: dir, batch, promptTokens: m.promptTokens, newTokens: m.newTokens, threads, vocab: m.vocab }
    const contenders = {
      ...Object.fromEntries(WEIGHTS.map((w) => [oursName(w), { ...base, engine: 'ours', weights: w }])),
      'llama.cpp f32': { ...base, engine: 'llama.cpp', gguf: files.f32 },
      'llama.cpp f16': { ...base, engine: 'llama.cpp', gguf: files.f16 },
      ...(files.q8_0 ? { 'llama.cpp q8_0': { ...base, engine: 'llama.cpp', gguf: files.q8_0 } } : {}),
    }
    const names = Object.keys(contenders)
    const runs = Object.fromEntries(names.map((k) => [k, []]))
    for (let rep = 0; rep < reps; rep++) {
      for (let j = 0; j < names.length; j++) {
        const k = names[(rep + j) % names.length] // rotate the order every round
        const r = worker(contenders[k])
        runs[k].push(r)
        console.error(`[decode] ${name} b${batch} ${k} rep ${rep + 1}: ${r.unavailable ?? `prefill ${r.prefillTokensPerSecond.toFixed(1)}, decode ${r.decodeTokensPerSecond.toFixed(2)} tok/s`}`)
      }
    }
    const weightBytes = runs.ours[0].weightBytes
    // Bytes of weights one decode step reads (once per step, shared by the batch): all matrices,
    // as our engine reports them stored; llama.cpp's f16 file holds the matrices at 2 bytes (norms stay f32, negligible).
    // The q8_0 file's size stands for its matrices' bytes (its metadata is small beside them).
    const bytesPerStep = { 'llama.cpp f32': weightBytes, 'llama.cpp f16': weightBytes / 2, ...(files.q8_0 ? { 'llama.cpp q8_0': statSync(files.q8_0).size } : {}) }
    for (const w of WEIGHTS) bytesPerStep[oursName(w)] = runs[oursName(w)][0].weightBytes
    for (const k of names) {
      const rs = runs[k]
      if (rs[0].unavailable) {
        rows.push({ model: name, threads, batch, engine: k, unavailable: rs[0].unavailable })
        continue
      }
      const prefill = rs.map((r) => r.prefillTokensPerSecond)
      const decode = rs.map((r) => r.decodeTokensPerSecond)
      const floor = (bw / bytesPerStep[k]) * batch
      rows.push({
        model: name,
        threads,
        batch,
        engine: k,
        promptTokens: m.promptTokens,
        newTokens: m.newTokens,
        prefill: { median: median(prefill), spread: spread(prefill), runs: prefill },
        decode: { median: median(decode), spread: spread(decode), runs: decode },
        peakRssBytes: median(rs.map((r) => r.peakRssBytes)),
        bandwidthFloorTokensPerSecond: floor,
        fractionOfFloor: median(decode) / floor,
      })
    }
    const same = (r) => r.model === name && r.threads === threads && r.batch === batch
    for (const ours of rows.filter((r) => same(r) && r.engine.startsWith('ours') && !r.unavailable))
      for (const r of rows.filter((r) => same(r) && !r.engine.startsWith('ours') && !r.unavailable)) {
        ours[`decodeRatioTo ${r.engine}`] = ours.decode.median / r.decode.median
        // each round's own ratio: the two runs a minute apart, so a bandwidth that drifts over the bench cancels
        ours[`roundDecodeRatiosTo ${r.engine}`] = ours.decode.runs.map((x, i) => x / r.decode.runs[i])
        ours[`prefillRatioTo ${r.engine}`] = ours.prefill.median / r.prefill.median
      }
  }
}
}

const record = {
  bench: 'decode',
  date: new Date().toISOString(),
  machine: { cpu: cpus()[0]?.model, cores: cpus().length, simd: addon.info().simd, loadAverage: loadavg() },
  threads: threadList,
  reps,
  readBandwidthGBs: bandwidth,
  peer: 'llama.cpp via node-llama-cpp 3.21.1 (CPU prebuild, default f16 KV cache)',
  rows,
}
mkdirSync(join(here, 'results'), { recursive: true })
const outName = String(arg('out', 'decode.json'))
writeFileSync(join(here, 'results', outName), JSON.stringify(record, null, 2) + '\n')

console.log(`decode: greedy, threads pinned equal per row, ${reps} alternating runs per cell (median [min–max]); read bandwidth ${Object.entries(bandwidth).map(([t, b]) => `${b.toFixed(1)} GB/s at ${t} thr`).join(', ')}; load average ${loadavg()[0].toFixed(1)}`)
console.log('model        thr batch engine          prefill tok/s          decode tok/s           ours/peer  of floor  peak RSS')
for (const r of rows) {
  if (r.unavailable) {
    console.log(`${r.model.padEnd(12)} ${String(r.threads).padStart(3)} ${String(r.batch).padStart(5)} ${r.engine.padEnd(15)} ${r.unavailable}`)
    continue
  }
  // llama.cpp rows: ours (f32) over them; our bf16/f16 rows: over llama.cpp f16; int8: over llama.cpp q8_0
  const peerOf = (engine) => rows.find((o) => o.model === r.model && o.threads === r.threads && o.batch === r.batch && o.engine === engine)
  const ours = peerOf('ours')
  const sameBytes = r.engine === 'ours int8' ? 'q8_0' : 'f16'
  const peer = peerOf(`llama.cpp ${sameBytes}`)
  const ratio = !r.engine.startsWith('ours') ? (ours.decode.median / r.decode.median).toFixed(2) + '×'
    : r.engine !== 'ours' && peer && !peer.unavailable ? (r.decode.median / peer.decode.median).toFixed(2) + `× ${sameBytes}` : ''
  const cell = (x) => `${x.median.toFixed(1)} [${x.spread[0].toFixed(1)}–${x.spread[1].toFixed(1)}]`
  console.log(
    `${r.model.padEnd(12)} ${String(r.threads).padStart(3)} ${String(r.batch).padStart(5)} ${r.engine.padEnd(15)} ${cell(r.prefill).padEnd(22)} ${cell(r.decode).padEnd(22)} ${ratio.padStart(9)} ${(r.fractionOfFloor.toFixed(2) + '×').padStart(9)} ${(r.peakRssBytes / 2 ** 30).toFixed(2).padStart(6)} GiB`,
  )
}
console.log('ours/peer: our decode tok/s over the peer\'s (ours bf16/f16: over llama.cpp f16; ours int8: over llama.cpp q8_0); of floor: decode tok/s over (read bandwidth / weight bytes per step × batch).')
for (const r of rows.filter((r) => r.engine.startsWith('ours ') && !r.unavailable)) {
  const peer = r.engine === 'ours int8' ? 'llama.cpp q8_0' : 'llama.cpp f16'
  const ratios = r[`roundDecodeRatiosTo ${peer}`]
  if (ratios) console.log(`${r.model} b${r.batch} ${r.engine} / ${peer}, round by round: median ${median(ratios).toFixed(2)}× [${spread(ratios)[0].toFixed(2)}–${spread(ratios)[1].toFixed(2)}] over ${ratios.length} rounds`)
}
console.log(`wrote bench/results/${outName}`)
