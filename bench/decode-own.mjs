// Decode tokens/s of our CPU engine on a random Qwen3-0.6B-shaped model, against the memory
// bandwidth floor measured in the same run (weight bytes read per token / copy bandwidth).
// Usage: npm run build && node bench/decode-own.mjs [--tokens 32] [--threads N]
import { writeFileSync, mkdirSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadModel, nativeAddon } from '../dist/index.js'
import { writeRandomModel } from './random-model.mjs'

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const tokens = arg('tokens', 32)
const threads = arg('threads', cpus().length)
const dir = writeRandomModel(join(tmpdir(), 'autodidact-bench-qwen3-0.6b'))

const addon = await nativeAddon()
const model = await loadModel(dir, { threads })
const weightBytes = model.handle.describe().parameterBytes
const prompt = Array.from({ length: 16 }, (_, i) => 1000 + i)

// Copy bandwidth: the floor for streaming all weights once per token. 256 MiB buffers (far past
// the caches), touched once before timing, median of 7.
const copy = () => {
  const n = 256 << 20
  const src = new Float32Array(n / 4).fill(1), dst = new Float32Array(n / 4).fill(0)
  addon.kernels.copyBytes(src, dst, threads)
  const times = []
  for (let i = 0; i < 7; ++i) {
    const t0 = process.hrtime.bigint()
    addon.kernels.copyBytes(src, dst, threads)
    times.push(Number(process.hrtime.bigint() - t0) / 1e9)
  }
  times.sort((a, b) => a - b)
  return (2 * n) / times[3] // bytes read + written per second
}

await model.generate([prompt], { temperature: 0, maxTokens: 2, stopTokenIds: [] }) // warm-up
const runs = []
for (let r = 0; r < 3; ++r) {
  const t0 = process.hrtime.bigint()
  const [[c]] = await model.generate([prompt], { temperature: 0, maxTokens: tokens, stopTokenIds: [] })
  const s = Number(process.hrtime.bigint() - t0) / 1e9
  runs.push(c.tokens.length / s)
}
runs.sort((a, b) => a - b)
const bandwidth = copy()
const floorTps = bandwidth / 2 / weightBytes // reading weights only: half the copy traffic per byte
const result = {
  date: new Date().toISOString(),
  model: 'random Qwen3-0.6B shape (f32 in memory)',
  threads,
  weightBytes,
  decodeTokensPerSecond: runs[1],
  runs,
  copyBandwidthGBs: bandwidth / 1e9,
  bandwidthFloorTokensPerSecond: floorTps,
  fractionOfFloor: runs[1] / floorTps,
}
mkdirSync(new URL('./results/', import.meta.url), { recursive: true })
writeFileSync(new URL('./results/decode-own.json', import.meta.url), JSON.stringify(result, null, 2))
console.log(`decode, batch 1, ${threads} threads, ${(weightBytes / 2 ** 30).toFixed(2)} GiB f32 weights`)
console.log(`  ours:            ${runs[1].toFixed(2)} tok/s (runs ${runs.map((x) => x.toFixed(2)).join(', ')})`)
console.log(`  bandwidth floor: ${floorTps.toFixed(2)} tok/s (copy ${(bandwidth / 1e9).toFixed(1)} GB/s)`)
console.log(`  ratio to floor:  ${(runs[1] / floorTps).toFixed(2)}`)
model.dispose()
