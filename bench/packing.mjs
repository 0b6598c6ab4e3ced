#!/usr/bin/env node
// bench/packing.mjs — a ragged RL batch against a full batch of the same token count, through
// Trainer.step (forward + backward + AdamW) on one model, in the same run (issue 26: the ragged
// batch must train at ≥ 90% of the full batch's tokens/s). The ragged batch: S sequences of
// lengths uniform in [50, 1000] (a prompt of 5–20% of it, the rest the answer); the full batch: S
// sequences of one length, the same total tokens and the same prompt share. Both are one packed
// micro-batch (every GEMM over Σ len rows, attention per sequence). The sides alternate (ragged,
// full, ragged, …) so a change in the machine's load reaches both; the ratio's min–max pairs the
// worst ragged step with the best full one and the other way round.
//
// Also prints each side's MFU (src/train/mfu.ts: the step's matmul and attention FLOPs over the
// device's peak — the FMA peak of the threads on the CPU, the bf16 dense peak on CUDA). The ragged
// side computes more attention per token (Σ len² grows with the spread): its FLOPs are its own.
//
//   npm run build && node bench/packing.mjs [--device cpu|cuda] [--shape cpu-small|qwen3-0.6b]
//                                           [--sequences S] [--rounds R] [--threads N] [--json FILE]
// Writes bench/results/packing-<device>.json (or --json FILE). Exit 0 when measured (the PASS/FAIL
// line is information: on a shared CPU it is not a verdict), 2 when the device is unavailable.
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeRandomModel, QWEN3_0_6B } from './random-model.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const { loadModel } = await import(join(here, '..', 'dist', 'engine', 'model.js'))
const { nativeAddon } = await import(join(here, '..', 'dist', 'native.js'))

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const device = arg('device', 'cpu')
const SHAPES = {
  // the real vocabulary (the tokenizer's), small layers: ~30 s a step on 2 cores, most of it the LM head
  'cpu-small': { hidden_size: 256, intermediate_size: 768, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 64, sequences: 4, rounds: 2 },
  // issue 26's shape: 8 sequences of ~525 tokens ≈ its 8 × 512
  'qwen3-0.6b': { sequences: 8, rounds: 5 },
}
const shapeName = arg('shape', device === 'cuda' ? 'qwen3-0.6b' : 'cpu-small')
const shape = SHAPES[shapeName]
if (!shape) throw new Error(`unknown --shape ${shapeName} (${Object.keys(SHAPES).join(' | ')})`)
const S = Number(arg('sequences', shape.sequences))
const rounds = Number(arg('rounds', shape.rounds))
const threads = Number(arg('threads', cpus().length))
const TARGET = 0.9

if (device === 'cuda') {
  const info = (await nativeAddon()).info().cuda
  if (!info.available) {
    console.log(`packing: CUDA unavailable (${info.kind}: ${info.reason})`)
    process.exit(2)
  }
}

const { sequences: _s, rounds: _r, ...dims } = shape
const config = { ...QWEN3_0_6B, ...dims }
// the folder is reused when present: its name carries the dimensions
const dir = writeRandomModel(join(tmpdir(), `autodidact-bench-packing-${[config.vocab_size, config.hidden_size, config.intermediate_size, config.num_hidden_layers].join('-')}`), config)
const model = await loadModel(dir, { threads, device })

let seed = 12345
const next = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32
const token = () => Math.floor(next() * config.vocab_size)
const sequenceOf = (length, promptShare) => {
  const p = Math.max(1, Math.round(length * promptShare))
  return { prompt: Array.from({ length: p }, token), completion: Array.from({ length: length - p }, token) }
}
const raggedLengths = Array.from({ length: S }, () => 50 + Math.floor(next() * 951))
const total = raggedLengths.reduce((a, n) => a + n, 0)
const promptShares = raggedLengths.map(() => 0.05 + 0.15 * next())
const ragged = { sequences: raggedLengths.map((n, i) => sequenceOf(n, promptShares[i])) }
const meanShare = promptShares.reduce((a, x) => a + x, 0) / S
// the full batch: S equal lengths summing to the same tokens (the first ones one longer when S does not divide)
const fullLengths = Array.from({ length: S }, (_, i) => Math.floor(total / S) + (i < total % S ? 1 : 0))
const full = { sequences: fullLengths.map((n) => sequenceOf(n, meanShare)) }

const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-6 }, microBatchSize: S })
const load = () => loadavg().map((x) => Number(x.toFixed(2)))
const loadBefore = load()
await trainer.step(ragged) // warm-up: scratch, gradients, moments sized for the larger
await trainer.step(full)
const runs = { ragged: [], full: [] }
for (let r = 0; r < rounds; r++)
  for (const [name, batch] of [['ragged', ragged], ['full', full]]) {
    const m = await trainer.step(batch)
    const seconds = m.tokens / m.tokensPerSecond
    runs[name].push({ seconds, tokensPerSecond: total / seconds, mfu: m.mfu, flops: m.flops, loss: m.loss })
  }
model.dispose()

const span = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return { min: s[0], median: s[Math.floor(s.length / 2)], max: s.at(-1) }
}
const side = (list) => ({ tokensPerSecond: span(list.map((x) => x.tokensPerSecond)), msPerStep: span(list.map((x) => 1e3 * x.seconds)), mfu: span(list.map((x) => x.mfu ?? NaN)), flops: list[0].flops, steps: list })
const a = side(runs.ragged), b = side(runs.full)
const ratio = { min: a.tokensPerSecond.min / b.tokensPerSecond.max, median: a.tokensPerSecond.median / b.tokensPerSecond.median, max: a.tokensPerSecond.max / b.tokensPerSecond.min }
const record = {
  bench: 'packing', date: new Date().toISOString(), device, shape: shapeName, config: dims, threads, rounds, sequences: S, tokens: total,
  raggedLengths, fullLengths, loadBefore, loadAfter: load(), ragged: a, full: b, raggedRatio: ratio, target: TARGET, pass: ratio.median >= TARGET,
  mfu: b.mfu.median, msPerStep: b.msPerStep.median,
}
const file = arg('json', process.env.OUT ? join(process.env.OUT, 'packing.json') : join(here, 'results', `packing-${device}.json`))
mkdirSync(dirname(file), { recursive: true })
writeFileSync(file, JSON.stringify(record, null, 2))

const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '–')
const pct = (x) => `${f(100 * x)}%`
console.log(`packing: ${device} ${shapeName}, ${S} sequences, ${total} tokens a step, ${rounds} alternating rounds, ${threads} threads; load ${loadBefore.join(' ')} → ${record.loadAfter.join(' ')}`)
console.log(`  ragged lengths ${raggedLengths.join(' ')} vs full ${fullLengths[0]}${fullLengths.at(-1) !== fullLengths[0] ? `/${fullLengths.at(-1)}` : ''} × ${S}`)
for (const [name, s] of [['ragged', a], ['full', b]])
  console.log(`  ${name.padEnd(6)} ${f(s.tokensPerSecond.median, 0)} tok/s [${f(s.tokensPerSecond.min, 0)}–${f(s.tokensPerSecond.max, 0)}], ${f(s.msPerStep.median)} ms/step, MFU ${pct(s.mfu.median)}, ${f(s.flops / 1e9)} GFLOP/step`)
console.log(`  ragged/full tokens/s: ${f(ratio.median, 3)} [${f(ratio.min, 3)}–${f(ratio.max, 3)}] (target ≥ ${TARGET}): ${record.pass ? 'PASS' : 'FAIL'}`)
console.log(`  written: ${file}`)
