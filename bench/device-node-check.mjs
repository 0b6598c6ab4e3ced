#!/usr/bin/env node
// bench/device-node-check.mjs — on a machine with a GPU: the library path end to end (Node →
// addon → CUDA plugin → device), next to the CPU engine in the same process.
//   1. the addon's CUDA report (plugin kind, devices);
//   2. the bundled model on 'cpu' and 'cuda': greedy tokens, seeded sampled tokens, teacher-forced
//      logprobs/entropy, one SFT training step (loss, gradient norm) and the scores after it;
//   3. a Qwen3-0.6B-shaped random bf16 model through the public API: generate() decode tokens/s
//      (batch 8, 512-token prompts) and Trainer.step() tokens/s and MFU (8 × 512 tokens);
//   4. the main job: `autodidact evolve --method cose --device cuda` for 2 steps on the bundled
//      model, next to the same run on the CPU (wall time per step, metrics written).
// Needs `npm run build` (dist/ and build/Release). Node only; no test runner. Writes JSON to
// $OUT/node-check.json when OUT is set. Exit 0 when every parity check passed, 1 on a failure, 2
// when CUDA is unavailable. A dry run of the script's own logic without a GPU:
// AD_NODE_CHECK_DEVICE=cpu AD_NODE_CHECK_SKIP_LARGE=1 (the "device" side is then a second CPU model).
import { mkdirSync, copyFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { deviceChecks, now } from './device-checks.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const { loadModel } = await import(join(root, 'dist/engine/model.js'))
const { Trainer } = await import(join(root, 'dist/train/trainer.js'))
const { writeSafetensors } = await import(join(root, 'dist/engine/hf/safetensors.js'))
const { expectedTensors, parseModelConfig } = await import(join(root, 'dist/engine/hf/config.js'))
const { nativeAddon } = await import(join(root, 'dist/native.js'))

const device = process.env.AD_NODE_CHECK_DEVICE ?? 'cuda'
const results = {}
const { check, section, failures } = deviceChecks()
function record(key, value) {
  results[key] = value
}
const rel = (a, b) => Math.abs(a - b) / Math.max(1, Math.abs(b))
// The device rounds f32 checkpoints' weights to bf16 (relative 2^-9): a token's logprob and
// entropy then move by up to ~1% of its logit scale, so errors are measured against max(1, |max logit|).
const logitRel = (a, b, maxLogit) => Math.abs(a - b) / Math.max(1, Math.abs(maxLogit))

// ---------------------------------------------------------------- 1. the addon's report
const addon = await nativeAddon()
const cudaInfo = addon.info().cuda
console.log('cuda:', JSON.stringify(cudaInfo))
record('cuda', cudaInfo)
if (!cudaInfo.available && device === 'cuda') {
  console.log('device-node-check: CUDA is not available here; nothing more to check')
  finish(2)
}

// ---------------------------------------------------------------- 2. bundled model, CPU vs CUDA
const bundled = join(root, 'models/arith-qwen3-tiny')
await section('bundled model: cpu vs cuda', async () => {
  const cpu = await loadModel(bundled, { device: 'cpu', threads: 4 })
  const gpu = await loadModel(bundled, device === 'cuda' ? { device } : { device, threads: 2 })
  check(gpu.device === device, `model.device is ${gpu.device}`)
  const prompts = ['12+7=', '3*(4+5)=', '100-58=', '(6+2)*3='].map((t) => cpu.tokenizer.encode(t))
  const opts = { temperature: 0, maxTokens: 32, stopTokenIds: [] }
  const a = await cpu.generate(prompts, opts)
  const b = await gpu.generate(prompts, opts)
  let equal = 0
  let total = 0
  let worstLp = 0
  for (let p = 0; p < prompts.length; ++p) {
    const x = a[p][0]
    const y = b[p][0]
    for (let i = 0; i < x.tokens.length; ++i) {
      total++
      if (x.tokens[i] !== y.tokens[i]) {
        // A divergence is allowed only at a near-tie of the CPU's top two logits (bf16 weights).
        check(x.margin[i] < 6e-2 * Math.max(1, Math.abs(x.maxLogit[i])), `prompt ${p}: tokens diverge at ${i} with margin ${x.margin[i].toFixed(4)}`)
        break
      }
      equal++
      worstLp = Math.max(worstLp, logitRel(y.logprobs[i], x.logprobs[i], x.maxLogit[i]))
    }
  }
  console.log(`  greedy: ${equal}/${total} tokens equal before any divergence; worst |Δ logprob| / max(1, |max logit|) ${worstLp.toExponential(2)}`)
  check(worstLp < 1e-2, 'greedy logprobs within 1e-2 of the logit scale')
  record('bundled.greedy_equal', equal)
  record('bundled.greedy_total', total)
  record('bundled.greedy_logprob_worst_rel', worstLp)

  // Seeded sampling: the device sampler keys Philox like the CPU, so tokens agree until a bf16 near-tie.
  const sopts = { temperature: 0.9, topK: 40, topP: 0.95, maxTokens: 24, n: 4, seed: 1234, stopTokenIds: [] }
  const sa = await cpu.generate(prompts, sopts)
  const sb = await gpu.generate(prompts, sopts)
  let sEqual = 0
  let sTotal = 0
  for (let p = 0; p < prompts.length; ++p)
    for (let s = 0; s < 4; ++s) {
      const x = sa[p][s].tokens
      const y = sb[p][s].tokens
      let i = 0
      while (i < x.length && i < y.length && x[i] === y[i]) i++
      sEqual += i
      sTotal += x.length
    }
  console.log(`  seeded sampling: ${sEqual}/${sTotal} tokens equal before the first divergence`)
  check(sEqual >= 0.8 * sTotal, 'seeded sampled tokens mostly equal (≥ 80% before divergence)')
  record('bundled.sampled_equal', sEqual)
  record('bundled.sampled_total', sTotal)

  // Teacher-forced scores of the CPU's greedy completions.
  const pairs = prompts.map((p, i) => ({ prompt: p, completion: Array.from(a[i][0].tokens) }))
  const scoreWorst = async () => {
    const sc = await cpu.score(pairs)
    const sg = await gpu.score(pairs)
    let lp = 0
    let en = 0
    for (let i = 0; i < sc.length; ++i)
      for (let j = 0; j < sc[i].logprobs.length; ++j) {
        lp = Math.max(lp, logitRel(sg[i].logprobs[j], sc[i].logprobs[j], sc[i].maxLogit[j]))
        en = Math.max(en, logitRel(sg[i].entropy[j], sc[i].entropy[j], sc[i].maxLogit[j]))
      }
    return { lp, en }
  }
  const before = await scoreWorst()
  console.log(`  score: worst |Δ| / max(1, |max logit|): logprob ${before.lp.toExponential(2)}, entropy ${before.en.toExponential(2)}`)
  check(before.lp < 1e-2 && before.en < 1e-2, 'teacher-forced logprobs and entropy within 1e-2 of the logit scale')
  record('bundled.score_logprob_worst_rel', before.lp)
  record('bundled.score_entropy_worst_rel', before.en)

  // One SFT step on both from the same weights and batch. A small lr: Adam's first update is
  // ±lr wherever |g| ≫ ε, so a weight whose tiny gradient differs in sign between f32 and bf16
  // compute moves 2·lr apart — with lr 1e-3 that alone shifts the scores by ~0.1.
  const batch = { sequences: pairs.map((p) => ({ prompt: p.prompt, completion: p.completion })) }
  const options = { objective: { name: 'sft' }, optimizer: { lr: 1e-5 }, clipGradNorm: 1, microBatchSize: 8 }
  const tc = await Trainer.create(cpu, options)
  const tg = await Trainer.create(gpu, options)
  const mc = await tc.step(batch)
  const mg = await tg.step(batch)
  console.log(`  sft step: loss cpu ${mc.loss.toFixed(5)} cuda ${mg.loss.toFixed(5)}; grad norm cpu ${mc.gradNorm.toFixed(4)} cuda ${mg.gradNorm.toFixed(4)}`)
  check(rel(mg.loss, mc.loss) < 1e-2, 'training loss within 1e-2')
  check(Math.abs(mg.gradNorm - mc.gradNorm) <= 3e-2 * mc.gradNorm, 'gradient norm within 3%')
  const after = await scoreWorst()
  console.log(`  after the step: worst |Δ| / max(1, |max logit|): logprob ${after.lp.toExponential(2)}, entropy ${after.en.toExponential(2)}`)
  check(after.lp < 1.5e-2 && after.en < 1.5e-2, 'scores after the step within 1.5e-2 of the logit scale')
  record('bundled.train_loss', [mc.loss, mg.loss])
  record('bundled.train_grad_norm', [mc.gradNorm, mg.gradNorm])
  record('bundled.after_step_logprob_worst_rel', after.lp)
  cpu.dispose()
  gpu.dispose()
})

// ---------------------------------------------------------------- 3. Qwen3-0.6B shape through the API
function qwen3Config() {
  return {
    architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', vocab_size: Number(process.env.AD_NODE_CHECK_VOCAB ?? 151936),
    hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: Number(process.env.AD_NODE_CHECK_LAYERS ?? 28), num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, rms_norm_eps: 1e-6, rope_theta: 1e6,
    max_position_embeddings: 40960, tie_word_embeddings: true, attention_bias: false, hidden_act: 'silu', torch_dtype: 'bfloat16',
    bos_token_id: 0, eos_token_id: 2, pad_token_id: 0,
  }
}

// Random bf16 weights (uniform ±a/√fan_in for matrices, 1 for norms), from a fixed xorshift stream.
function randomTensors(c) {
  let s = 0x9e3779b9 >>> 0
  const f32 = new Float32Array(1)
  const u32 = new Uint32Array(f32.buffer)
  const fill = (n, scale) => {
    const out = new Uint16Array(n)
    for (let i = 0; i < n; ++i) {
      s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0
      f32[0] = ((s / 4294967296) * 2 - 1) * scale
      out[i] = u32[0] >>> 16
    }
    return out
  }
  const ones = (n) => new Uint16Array(n).fill(0x3f80)
  // The tensors of the config from the engine's one tensor table: matrices random, vectors ones.
  return expectedTensors(parseModelConfig(c, 'config.json')).map(({ name, shape }) => ({
    name,
    dtype: 'BF16',
    shape,
    data: shape.length === 2 ? fill(shape[0] * shape[1], 1.7 / Math.sqrt(shape[1])) : ones(shape[0]),
  }))
}

if (!process.env.AD_NODE_CHECK_SKIP_LARGE) await section('Qwen3-0.6B shape through the library API (cuda)', async () => {
  const dir = join(process.env.AD_NODE_CHECK_DIR ?? tmpdir(), 'ad-qwen3-0.6b-shape')
  mkdirSync(dir, { recursive: true })
  const c = qwen3Config()
  let t0 = now()
  const tensors = randomTensors(c)
  const params = tensors.reduce((n, t) => n + t.data.length, 0)
  await writeSafetensors(join(dir, 'model.safetensors'), tensors)
  writeFileSync(join(dir, 'config.json'), JSON.stringify(c))
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(bundled, f), join(dir, f))
  console.log(`  wrote ${(params / 1e9).toFixed(3)} B parameters in ${(now() - t0).toFixed(1)} s`)
  t0 = now()
  const gpu = await loadModel(dir, device === 'cuda' ? { device } : { device, threads: 2 })
  console.log(`  loaded on ${device} in ${(now() - t0).toFixed(1)} s`)
  record('qwen3_06b.params', params)

  // Decode: 8 prompts of 512 random ids, 64 greedy tokens each.
  let s = 7
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) % c.vocab_size)
  const prompts = Array.from({ length: 8 }, () => Array.from({ length: 512 }, rnd))
  await gpu.generate(prompts.map((p) => p.slice(0, 64)), { temperature: 0, maxTokens: 4, stopTokenIds: [] })  // warm-up
  // Decode rate from the difference of 65-token and 1-token calls (best of two each).
  const timed = async (maxTokens) => {
    const t = now()
    const out = await gpu.generate(prompts, { temperature: 0, maxTokens, stopTokenIds: [] })
    return { s: now() - t, tokens: out.reduce((n, c) => n + c[0].tokens.length, 0) }
  }
  let tPrefill = Infinity
  let tAll = Infinity
  let generated = 0
  for (let r = 0; r < 2; ++r) {
    tPrefill = Math.min(tPrefill, (await timed(1)).s)
    const x = await timed(65)
    tAll = Math.min(tAll, x.s)
    generated = x.tokens
  }
  const decodeTps = (generated - 8) / Math.max(1e-9, tAll - tPrefill)
  console.log(`  generate 8 × 512-token prompts: prefill ${(tPrefill * 1e3).toFixed(0)} ms (${((8 * 512) / tPrefill).toFixed(0)} tokens/s); ` +
    `decode ${decodeTps.toFixed(0)} tokens/s (${generated} tokens in ${tAll.toFixed(2)} s incl. prefill)`)
  record('qwen3_06b.prefill_tokens_per_s', (8 * 512) / tPrefill)
  record('qwen3_06b.decode_tokens_per_s', decodeTps)

  // Training: SFT on 8 × 512 tokens (32-token prompts), full fine-tune, AdamW.
  const trainer = await Trainer.create(gpu, { objective: { name: 'sft' }, optimizer: { lr: 1e-5 }, clipGradNorm: 1, microBatchSize: 8 })
  const batch = { sequences: prompts.map((p) => ({ prompt: p.slice(0, 32), completion: p.slice(32) })) }
  await trainer.step(batch)  // warm-up
  const steps = 3
  t0 = now()
  let m
  for (let i = 0; i < steps; ++i) m = await trainer.step(batch)
  const tStep = (now() - t0) / steps
  const tokens = 8 * 511
  const mfu = (6 * params * tokens) / tStep / 989e12
  console.log(`  Trainer.step 8 × 512: ${(tStep * 1e3).toFixed(0)} ms/step, ${(tokens / tStep).toFixed(0)} tokens/s, MFU ${(100 * mfu).toFixed(1)}% ` +
    `of 989 TFLOP/s; loss ${m.loss.toFixed(3)}, grad norm ${m.gradNorm.toFixed(3)}`)
  check(Number.isFinite(m.loss) && Number.isFinite(m.gradNorm), '0.6B training step finite')
  record('qwen3_06b.train_ms_per_step', tStep * 1e3)
  record('qwen3_06b.train_tokens_per_s', tokens / tStep)
  record('qwen3_06b.train_mfu', mfu)
  gpu.dispose()
})

await section(`autodidact profile --device ${device} (bundled model)`, async () => {
  const { profileCommand } = await import(join(root, 'dist/cli/profile.js'))
  const printed = []
  const log = console.log
  console.log = (...a) => printed.push(a.join(' '))
  let rc
  try {
    rc = await profileCommand(['--device', device, '--batch', '4', '--prompt-tokens', '64', '--decode-tokens', '8', '--json'])
  } finally {
    console.log = log
  }
  const report = JSON.parse(printed.join('\n'))
  for (const ph of report.phases) {
    const rows = ph.kernels.filter((k) => k.name.startsWith(device === 'cuda' ? 'cuda:' : ''))
    const covered = rows.reduce((t, k) => t + k.seconds, 0)
    const top = [...rows].sort((a, b) => b.seconds - a.seconds).slice(0, 3).map((k) => `${k.name} ${(k.seconds * 1e3).toFixed(2)} ms`)
    console.log(`  ${ph.phase}: ${(ph.wallSeconds * 1e3).toFixed(1)} ms wall, ${rows.length} rows covering ${((100 * covered) / ph.wallSeconds).toFixed(0)}%; top: ${top.join(', ')}`)
    check(rc === 0 && rows.length > 0 && covered <= ph.wallSeconds * 1.05, `profile ${ph.phase} has device rows within its wall time`)
  }
})

if (!process.env.AD_NODE_CHECK_SKIP_EVOLVE) await section('evolve --method cose: cuda vs cpu, 2 steps', async () => {
  const { evolveCommand } = await import(join(root, 'dist/cli/evolve.js'))
  const { readFileSync, mkdtempSync } = await import('node:fs')
  const perStep = {}
  for (const dev of device === 'cuda' ? ['cuda', 'cpu'] : ['cpu']) {
    const out = mkdtempSync(join(tmpdir(), `ad-evolve-${dev}-`))
    const t0 = now()
    const rc = await evolveCommand(['--method', 'cose', '--device', dev, '--steps', '2', '--out', out, '--seed', '3'])
    perStep[dev] = (now() - t0) / 2
    const lines = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n')
    const last = JSON.parse(lines.at(-1))
    console.log(`  ${dev}: exit ${rc}, ${lines.length} metric lines, ${perStep[dev].toFixed(2)} s/step (incl. load), last step ${JSON.stringify(last).slice(0, 160)}`)
    check(rc === 0 && last.step === 2, `evolve on ${dev} ran 2 steps`)
    record(`evolve.${dev}.seconds_per_step`, perStep[dev])
    if (dev === device) {
      // The checkpoint (weights, AdamW moments, buffers) resumes on the same device for a 3rd step.
      const rc2 = await evolveCommand(['--resume', out, '--steps', '3', '--device', dev])
      const after = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n')
      const step3 = JSON.parse(after.at(-1))
      console.log(`  ${dev}: resumed from the step-2 checkpoint: exit ${rc2}, last step ${step3.step}`)
      check(rc2 === 0 && step3.step === 3, `evolve on ${dev} resumed from its checkpoint and ran step 3`)
    }
  }
  delete process.env.AUTODIDACT_DEVICE
})

finish()

function finish(code) {
  record('failures', failures())
  if (process.env.OUT) writeFileSync(join(process.env.OUT, 'node-check.json'), JSON.stringify(results, null, 1))
  console.log(`device-node-check: ${failures() === 0 ? 'PASS' : `${failures()} FAILURE(S)`}`)
  process.exit(code ?? (failures() === 0 ? 0 : 1))
}
