// One side of bench/train-step.mjs: our engine on a random model of the given shape.
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { loadModel } from '../dist/index.js'
import { writeRandomModel, QWEN3_0_6B } from './random-model.mjs'

const s = JSON.parse(process.argv[2])
const config = {
  ...QWEN3_0_6B,
  vocab_size: s.vocab, hidden_size: s.hidden, intermediate_size: s.intermediate, num_hidden_layers: s.layers,
  num_attention_heads: s.heads, num_key_value_heads: s.kv_heads, head_dim: s.head_dim,
}
const dir = writeRandomModel(join(tmpdir(), `autodidact-bench-${s.name}`), config)
const model = await loadModel(dir, { threads: s.threads })
const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-5 }, microBatchSize: s.batch })
let seed = 1
const rand = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) % s.vocab)
const batch = { sequences: Array.from({ length: s.batch }, () => ({ prompt: [rand()], completion: Array.from({ length: s.seq }, rand) })) }
await trainer.step(batch) // warm-up
const times = []
for (let i = 0; i < s.reps; ++i) {
  const t0 = process.hrtime.bigint()
  await trainer.step(batch)
  times.push(Number(process.hrtime.bigint() - t0) / 1e9)
}
times.sort((a, b) => a - b)
const tokens = s.batch * s.seq
console.log(JSON.stringify({ tokensPerSecond: tokens / times[Math.floor(times.length / 2)], times, peakRssBytes: process.resourceUsage().maxRSS * 1024 }))
model.dispose()
