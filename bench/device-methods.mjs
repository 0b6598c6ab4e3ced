#!/usr/bin/env node
// bench/device-methods.mjs — on a machine with a GPU: what issue 19 added to the CUDA backend,
// each part against the CPU engine in the same process, one section per run (--only NAME) so
// bench/device-check can time-box each on its own:
//   lora        tiny Llama / Qwen2 / Qwen3 (real 151,936-row vocabulary): LoRA forward logprobs,
//               adapter gradients (base frozen), the 'lora-off' reference and the merge, cpu vs cuda
//   score       the bundled score-head Judge: reward scores, one Bradley–Terry step, scores after;
//               a score head attached on both backends from one seed
//   checkpoint  on the device: gradients with gradient checkpointing equal (bit for bit) to without,
//               full fine-tuning and LoRA
//   peft        a PEFT adapter saved from the device and loaded again: tensors and scores equal
//   methods     each method command: 2 steps of evolve --device cuda, resume, 1 more → methods.json
//   memory      a Qwen3-1.7B-shaped full fine-tuning step and a Qwen3-4B-shaped LoRA step
//               (8 × 1024 tokens, random weights): measured peak device bytes and step time beside
//               the memory plan → memory.json (PyTorch peer: bench/train_memory_torch_cuda.py)
//   adapters    two named adapters on one tiny Qwen3 base, chosen per sequence: mixed-batch score and
//               decode-step logits against the CPU and against each row alone, per-adapter gradients
// Needs `npm run build`. Writes JSON to $OUT (default build/device-check/out). Prints `  ok  …` /
// `  FAIL …` per check; exit 0 all passed, 1 a failure, 2 CUDA unavailable. Without a GPU, a
// dry run of the script's own logic: AD_NODE_CHECK_DEVICE=cpu node bench/device-methods.mjs --only lora
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { deviceChecks, now } from './device-checks.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const load = (p) => import(pathToFileURL(join(root, p)).href)
const { loadModel } = await load('dist/engine/model.js')
const { nativeAddon } = await load('dist/native.js')
const { trainingMemoryPlan } = await load('dist/engine/memory-plan.js')
const { writeRandomModel, QWEN3_0_6B } = await load('bench/random-model.mjs')

const device = process.env.AD_NODE_CHECK_DEVICE ?? 'cuda'
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : null
const OUT = process.env.OUT ?? join(root, 'build/device-check/out')
mkdirSync(OUT, { recursive: true })
const addon = await nativeAddon()
if (device === 'cuda' && !addon.info().cuda.available) {
  console.log(`device-methods: CUDA is not available here (${addon.info().cuda.reason})`)
  process.exit(2)
}
const results = {}
const { check, section, failures } = deviceChecks({ only })
const onDevice = (dir) => loadModel(dir, device === 'cuda' ? { device } : { device, threads: 2 })
const onCpu = (dir) => loadModel(dir, { device: 'cpu', threads: 4 })

// Max over rows of |a − b| / max(1, |max logit|): the device rounds weights and activations to bf16.
function worstLogitError(a, b) {
  let worst = 0
  for (let s = 0; s < a.length; ++s)
    for (let i = 0; i < a[s].logprobs.length; ++i) {
      const scale = Math.max(1, Math.abs(b[s].maxLogit[i]))
      worst = Math.max(worst, Math.abs(a[s].logprobs[i] - b[s].logprobs[i]) / scale, Math.abs(a[s].entropy[i] - b[s].entropy[i]) / scale)
      if (!Number.isFinite(a[s].logprobs[i])) return Infinity
    }
  return worst
}
// ‖a − b‖ / ‖b‖ (NaN never passes: it makes the ratio NaN).
function relL2(a, b) {
  let d = 0
  let n = 0
  for (let i = 0; i < b.length; ++i) {
    d += (a[i] - b[i]) ** 2
    n += b[i] ** 2
  }
  return Math.sqrt(d) / Math.max(Math.sqrt(n), 1e-30)
}
function seeded(seed) {
  let s = seed >>> 0
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1
}
const randomArray = (n, scale, rnd) => Float32Array.from({ length: n }, () => scale * rnd())

// ---------------------------------------------------------------- tiny models of each family
const FAMILIES = {
  qwen3: { ...QWEN3_0_6B, hidden_size: 64, intermediate_size: 160, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32 },
  qwen2: { ...QWEN3_0_6B, architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', hidden_size: 64, intermediate_size: 160, num_hidden_layers: 2,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: undefined, tie_word_embeddings: false },
  llama: { ...QWEN3_0_6B, architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 64, intermediate_size: 160, num_hidden_layers: 2,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: undefined, attention_bias: false, tie_word_embeddings: false },
}
const tinyDir = (family) => writeRandomModel(join(tmpdir(), `ad-device-methods-${family}`), JSON.parse(JSON.stringify(FAMILIES[family])))

const PROMPTS = [[11, 22, 33, 44, 55], [7, 8, 9], [100, 200, 300, 360]] // ids < 368: the bundled Judge's vocabulary
const COMPLETIONS = [[66, 77, 88, 99], [10, 11, 12, 13, 14, 15], [250, 300]]
const pairs = PROMPTS.map((p, i) => ({ prompt: p, completion: COMPLETIONS[i] }))
const sequences = PROMPTS.map((p, i) => ({ prompt: p, completion: COMPLETIONS[i] }))
function trainRequest(extra = {}) {
  return {
    tokens: Int32Array.from(PROMPTS.flatMap((p, i) => [...p, ...COMPLETIONS[i]])),
    lengths: Int32Array.from(PROMPTS, (p, i) => p.length + COMPLETIONS[i].length),
    promptLengths: Int32Array.from(PROMPTS, (p) => p.length),
    ...extra,
  }
}
const ROWS = COMPLETIONS.reduce((a, c) => a + c.length, 0)
// SFT-like coefficients: dz = a·(onehot − p), a = 1/rows
const COEFFICIENTS = { a: new Float32Array(ROWS).fill(1 / ROWS), b: new Float32Array(ROWS) }

// Adapters with B ≠ 0 (the same values on both models), so the adapters change the function.
async function withLora(model, rank = 4) {
  await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 }, lora: { rank, alpha: 2 * rank, seed: 7 } })
  const rnd = seeded(11)
  const adapters = (await addon.train.exportTensors(model.handle)).filter((t) => t.name.includes('.lora_B.'))
  await addon.train.importTensors(model.handle, adapters.map((t) => ({ name: t.name, data: randomArray(t.data.length, 0.05, rnd) })))
}

async function gradients(model, request) {
  addon.train.zeroGrad(model.handle)
  await addon.train.forward(model.handle, request)
  await addon.train.backward(model.handle, COEFFICIENTS)
  const g = await addon.train.exportGradients(model.handle)
  addon.train.zeroGrad(model.handle)
  return new Map(g.map((t) => [t.name, t.data]))
}

// ---------------------------------------------------------------- 1. LoRA, cpu vs device
await section('lora', async () => {
  const rows = {}
  for (const family of Object.keys(FAMILIES)) {
    const dir = tinyDir(family)
    const cpu = await onCpu(dir)
    const dev = await onDevice(dir)
    await withLora(cpu)
    await withLora(dev)
    const a = await cpu.score(pairs)
    const b = await dev.score(pairs)
    const fwd = worstLogitError(b, a)
    check(fwd < 1e-2, `${family}: LoRA forward logprobs and entropy within 1e-2 of the logit scale (worst ${fwd.toExponential(2)})`)
    addon.train.setLoraEnabled(cpu.handle, false)
    const base = await cpu.score(pairs)
    addon.train.setLoraEnabled(cpu.handle, true)
    check(worstLogitError(base, a) > 10 * Math.max(fwd, 1e-6), `${family}: the adapters change the function (base vs LoRA ≫ cpu vs device)`)

    const gc = await gradients(cpu, trainRequest())
    const gd = await gradients(dev, trainRequest())
    const names = [...gc.keys()].sort()
    check(names.length > 0 && names.every((n) => n.includes('.lora_')), `${family}: only adapters have gradients on the CPU (${names.length})`)
    check(JSON.stringify([...gd.keys()].sort()) === JSON.stringify(names), `${family}: the device has the same gradients (base frozen)`)
    let worst = 0
    for (const n of names) worst = Math.max(worst, gd.has(n) ? relL2(gd.get(n), gc.get(n)) : Infinity)
    check(worst < 5e-2, `${family}: adapter gradients within 5e-2 relative L2 of the CPU's (worst ${worst.toExponential(2)})`)

    const rc = await addon.train.forward(cpu.handle, trainRequest({ reference: 'lora-off' }))
    const rd = await addon.train.forward(dev.handle, trainRequest({ reference: 'lora-off' }))
    check(relL2(rd.refLogp, rc.refLogp) < 2e-2 && relL2(rd.logp, rc.logp) < 2e-2, `${family}: 'lora-off' reference logprobs match (rel ${relL2(rd.refLogp, rc.refLogp).toExponential(2)})`)
    await addon.train.backward(cpu.handle, COEFFICIENTS)
    await addon.train.backward(dev.handle, COEFFICIENTS)
    addon.train.zeroGrad(cpu.handle)
    addon.train.zeroGrad(dev.handle)

    const mc = new Map((await addon.train.exportTensors(cpu.handle, { mergeLora: true })).map((t) => [t.name, t.data]))
    const md = new Map((await addon.train.exportTensors(dev.handle, { mergeLora: true })).map((t) => [t.name, t.data]))
    let worstMerge = 0
    for (const [n, v] of mc) worstMerge = Math.max(worstMerge, md.has(n) ? relL2(md.get(n), v) : Infinity)
    check(worstMerge < 1e-5 && ![...md.keys()].some((n) => n.includes('.lora_')), `${family}: merged export equal to the CPU's in f32 (worst ${worstMerge.toExponential(2)})`)
    await dev.mergeLora()
    const merged = await dev.score(pairs)
    check(worstLogitError(merged, b) < 1e-2, `${family}: after mergeLora the device computes the same function`)
    rows[family] = { forward: fwd, gradients: worst, merge: worstMerge }
    cpu.dispose()
    dev.dispose()
  }
  results.lora = rows
})

// ---------------------------------------------------------------- 2. score heads and Bradley–Terry
await section('score', async () => {
  const judge = join(root, 'models/arith-judge-tiny')
  const cpu = await onCpu(judge)
  const dev = await onDevice(judge)
  const sc = await cpu.rewardScores(pairs)
  const sd = await dev.rewardScores(pairs)
  check(relL2(sd, sc) < 3e-2, `reward scores match (rel ${relL2(sd, sc).toExponential(2)}: ${Array.from(sd, (x) => x.toFixed(3))} vs ${Array.from(sc, (x) => x.toFixed(3))})`)
  const step = async (m) => (await m.trainer({ objective: { name: 'bradley-terry' }, optimizer: { lr: 1e-2 } })).step({ sequences, pairs: [[0, 1], [2, 1]] })
  const tc = await step(cpu)
  const td = await step(dev)
  check(Number.isFinite(td.loss) && !td.skipped && Math.abs(td.loss - tc.loss) < 1e-2 * Math.max(1, tc.loss), `Bradley–Terry loss ${td.loss.toFixed(5)} vs ${tc.loss.toFixed(5)}`)
  check(Math.abs(td.gradNorm - tc.gradNorm) <= 5e-2 * tc.gradNorm, `gradient norm ${td.gradNorm.toFixed(5)} vs ${tc.gradNorm.toFixed(5)}`)
  const ac = await cpu.rewardScores(pairs)
  const ad = await dev.rewardScores(pairs)
  check(relL2(ad, ac) < 5e-2 && relL2(ac, sc) > 1e-4, `scores after the step match (rel ${relL2(ad, ac).toExponential(2)}) and moved`)
  cpu.dispose()
  dev.dispose()
  // A score head attached to a causal LM from one seed: the same head, the same scores.
  const dir = tinyDir('qwen3')
  const c2 = await onCpu(dir)
  const d2 = await onDevice(dir)
  await c2.attachScoreHead({ seed: 5 })
  await d2.attachScoreHead({ seed: 5 })
  const hc = (await addon.train.exportTensors(c2.handle)).find((t) => t.name === 'score.weight')
  const hd = (await addon.train.exportTensors(d2.handle)).find((t) => t.name === 'score.weight')
  check(hd && relL2(hd.data, hc.data) === 0, 'attached score heads are equal (one seeded stream)')
  const x = await c2.rewardScores(pairs)
  const y = await d2.rewardScores(pairs)
  check(relL2(y, x) < 3e-2, `attached head's scores match (rel ${relL2(y, x).toExponential(2)})`)
  c2.dispose()
  d2.dispose()
  results.score = { scores: relL2(sd, sc), loss: [td.loss, tc.loss] }
})

// ---------------------------------------------------------------- 3. gradient checkpointing, bit for bit
await section('checkpoint', async () => {
  const dir = tinyDir('qwen3')
  const rows = {}
  for (const mode of ['full', 'lora']) {
    const m = await onDevice(dir)
    if (mode === 'lora') await withLora(m)
    else await m.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })
    const plain = await gradients(m, trainRequest())
    const again = await gradients(m, trainRequest())
    const ckpt = await gradients(m, trainRequest({ checkpoint: true }))
    const differ = (x, y) => [...x.keys()].filter((n) => !y.has(n) || x.get(n).length !== y.get(n).length || x.get(n).some((v, i) => !Object.is(v, y.get(n)[i])))
    const base = differ(plain, again)
    check(base.length === 0, `${mode}: two plain backwards are bit-equal (${plain.size} gradients)${base.length ? `; differ: ${base.slice(0, 3)}` : ''}`)
    const d = differ(plain, ckpt)
    check(d.length === 0 && ckpt.size === plain.size, `${mode}: checkpointed gradients bit-equal to plain${d.length ? `; differ: ${d.slice(0, 3)}` : ''}`)
    rows[mode] = { gradients: plain.size, differing: d.length }
    m.dispose()
  }
  results.checkpoint = rows
})

// ---------------------------------------------------------------- 4. PEFT adapter save and reload
await section('peft', async () => {
  const dir = tinyDir('llama')
  const m = await onDevice(dir)
  await withLora(m)
  const out = mkdtempSync(join(tmpdir(), 'ad-peft-'))
  await m.save(out)
  const before = await m.score(pairs)
  const adapters = (await addon.train.exportTensors(m.handle)).filter((t) => t.name.includes('.lora_'))
  const fresh = await onDevice(dir)
  await fresh.loadAdapter(out)
  const after = (await addon.train.exportTensors(fresh.handle)).filter((t) => t.name.includes('.lora_'))
  const equal = adapters.length === after.length && adapters.every((t, i) => t.name === after[i].name && t.data.every((v, j) => Object.is(v, after[i].data[j])))
  check(equal, `reloaded adapter tensors bit-equal (${adapters.length} tensors)`)
  const reloaded = await fresh.score(pairs)
  check(worstLogitError(reloaded, before) === 0, 'scores with the reloaded adapter equal')
  m.dispose()
  fresh.dispose()
})

// ---------------------------------------------------------------- 5. every method command on the device
await section('methods', async () => {
  const { evolveCommand } = await load('dist/cli/evolve.js')
  const { METHODS } = await load('dist/methods/index.js')
  const table = {}
  const budget = Number(process.env.AD_METHODS_SECONDS ?? 40) // per method, both runs
  for (const name of Object.keys(METHODS)) {
    const out = mkdtempSync(join(tmpdir(), `ad-methods-${name}-`))
    const t0 = now()
    const row = { ran: false, resumed: false, seconds: 0 }
    try {
      const rc = await evolveCommand(['--method', name, '--device', device, '--steps', '2', '--out', out, '--seed', '3', '--threads', '2'])
      const lines = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n')
      row.ran = rc === 0 && JSON.parse(lines.at(-1)).step === 2
      if (row.ran && now() - t0 < budget) {
        const rc2 = await evolveCommand(['--resume', out, '--steps', '3', '--device', device, '--threads', '2'])
        const after = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n')
        row.resumed = rc2 === 0 && JSON.parse(after.at(-1)).step === 3
      }
    } catch (e) {
      row.error = String(e?.message ?? e).slice(0, 400)
    }
    row.seconds = Number((now() - t0).toFixed(2))
    delete process.env.AUTODIDACT_DEVICE
    table[name] = row
    writeFileSync(join(OUT, 'methods.json'), JSON.stringify(table, null, 1)) // after each: a watchdog kill keeps what ran
    check(row.ran && row.resumed, `${name}: 2 steps on ${device}, checkpoint, resume, step 3 (${row.seconds} s)${row.error ? `: ${row.error}` : ''}`)
  }
  writeFileSync(join(OUT, 'methods.json'), JSON.stringify(table, null, 1))
  results.methods = table
})

// ---------------------------------------------------------------- 6. memory and step time at real shapes
const SHAPES = {
  'qwen3-1.7b-full': { config: { ...QWEN3_0_6B, hidden_size: 2048, intermediate_size: 6144, num_hidden_layers: 28, num_attention_heads: 16, num_key_value_heads: 8 }, lora: null },
  'qwen3-4b-lora': {
    config: { ...QWEN3_0_6B, hidden_size: 2560, intermediate_size: 9728, num_hidden_layers: 36, num_attention_heads: 32, num_key_value_heads: 8 },
    lora: { rank: 16, alpha: 32 },
  },
}
await section('memory', async () => {
  if (device !== 'cuda') {
    console.log('  (skipped: needs the device)')
    return
  }
  const B = Number(process.env.AD_MEMORY_BATCH ?? 8), T = Number(process.env.AD_MEMORY_SEQ ?? 1024)
  const table = {}
  const pick = process.env.AD_MEMORY_SHAPES ? process.env.AD_MEMORY_SHAPES.split(',') : Object.keys(SHAPES)
  for (const name of pick) {
    const { config, lora } = SHAPES[name]
    const dir = writeRandomModel(join(tmpdir(), `ad-memory-${name}`), config)
    addon.resetDevicePeak('cuda')
    const before = addon.deviceMemory('cuda', 0)
    const m = await loadModel(dir, { device: 'cuda' })
    const checkpointing = process.env.AD_MEMORY_CHECKPOINTING === '1'
    const trainer = await m.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-5 }, microBatchSize: B, clipGradNorm: 1, lora, gradientCheckpointing: checkpointing })
    const rnd = seeded(3)
    const batch = { sequences: Array.from({ length: B }, () => {
      const ids = Array.from({ length: T }, () => Math.floor((rnd() + 1) / 2 * 150000))
      return { prompt: ids.slice(0, 32), completion: ids.slice(32) }
    }) }
    await trainer.step(batch) // warm-up: gradients, moments, scratch
    const times = []
    for (let i = 0; i < 2; ++i) {
      const t0 = now()
      await trainer.step(batch)
      times.push(now() - t0)
    }
    const mem = addon.deviceMemory('cuda', 0)
    const plan = trainingMemoryPlan(m.config, { batch: B, sequenceLength: T, completionLength: T - 32 }, { lora, gradientCheckpointing: checkpointing })
    const row = {
      batch: B, tokens: T, lora, checkpointing,
      peak_device_bytes: mem.peakAllocated,
      driver_used_bytes: mem.total - mem.free,
      free_before_load_bytes: before.free,
      planned_peak_bytes: plan.peakBytes,
      planned_over_measured: plan.peakBytes / mem.peakAllocated,
      seconds_per_step: Math.min(...times),
      tokens_per_second: (B * (T - 1)) / Math.min(...times),
      plan: plan.items.map((i) => ({ name: i.name, bytes: i.bytes })),
    }
    table[name] = row
    writeFileSync(join(OUT, 'memory.json'), JSON.stringify(table, null, 1))
    console.log(`  ${name}: peak ${(row.peak_device_bytes / 2 ** 30).toFixed(2)} GiB measured, ${(plan.peakBytes / 2 ** 30).toFixed(2)} GiB planned, ${row.seconds_per_step.toFixed(3)} s/step`)
    // The plan must not promise less than is used (a refusal that lets a run fail later), and stay within 25% above.
    check(plan.peakBytes >= mem.peakAllocated && plan.peakBytes <= 1.25 * mem.peakAllocated, `${name}: the memory plan bounds the measured peak within 25% (${row.planned_over_measured.toFixed(3)}×)`)
    m.dispose()
  }
  writeFileSync(join(OUT, 'memory.json'), JSON.stringify(table, null, 1))
  results.memory = table
})

// ---------------------------------------------------------------- 10. several adapters, chosen per sequence (issue 19)
// Two named adapters on one tiny Qwen3 base (the same A and B on both backends), rows of one ragged
// batch through different adapters (and the base alone): the device against the CPU, and each
// device row in the mixed batch against the same row alone (bf16: not bit for bit, the products'
// shapes differ); per-adapter gradients with only the adapters in the batch written.
await section('adapters', async () => {
  const dir = tinyDir('qwen3')
  const cpu = await onCpu(dir)
  const dev = await onDevice(dir)
  for (const m of [cpu, dev]) {
    await m.addAdapter('default', { rank: 4, alpha: 8, seed: 7 })
    await m.addAdapter('solver', { rank: 2, alpha: 4, targets: ['q_proj', 'v_proj', 'o_proj', 'down_proj'], seed: 8 })
  }
  const rnd = seeded(19)
  const Bs = (await addon.train.exportTensors(cpu.handle)).filter((t) => t.name.includes('.lora_B'))
  const values = Bs.map((t) => ({ name: t.name, data: randomArray(t.data.length, 0.05, rnd) }))
  for (const m of [cpu, dev]) await addon.train.importTensors(m.handle, values)
  const choice = ['solver', 'default', null]
  const rows = {}

  // teacher-forced statistics of a mixed batch
  const a = await cpu.score(pairs, { adapter: choice })
  const b = await dev.score(pairs, { adapter: choice })
  rows.score = worstLogitError(b, a)
  check(rows.score < 1e-2, `mixed-adapter score: device logprobs and entropy within 1e-2 of the logit scale of the CPU's (worst ${rows.score.toExponential(2)})`)
  const base = await cpu.score(pairs, { adapter: null })
  check(worstLogitError(base.slice(0, 2), a.slice(0, 2)) > 10 * Math.max(rows.score, 1e-6), 'the adapters change the function (base vs adapter ≫ cpu vs device)')
  let alone = 0
  for (let i = 0; i < pairs.length; ++i) alone = Math.max(alone, worstLogitError([b[i]], await dev.score([pairs[i]], { adapter: choice[i] })))
  rows.aloneVsMixed = alone
  check(alone < 1e-2, `device: each row in the mixed batch equals the row alone within 1e-2 (worst ${alone.toExponential(2)})`)

  // a decode-shaped step's full logits: one new token per entry, entries through different adapters
  const stepLogits = async (m) => {
    const cache = m.handle.createCache(PROMPTS.length, 16)
    try {
      await m.handle.step(cache, {
        slots: Int32Array.from(PROMPTS, (_, i) => i), counts: Int32Array.from(PROMPTS, (p) => p.length - 1), outModes: new Uint8Array(PROMPTS.length),
        adapters: Int32Array.of(1, 0, -1), tokens: Int32Array.from(PROMPTS.flatMap((p) => p.slice(0, -1))),
      })
      const r = await m.handle.step(cache, {
        slots: Int32Array.from(PROMPTS, (_, i) => i), counts: new Int32Array(PROMPTS.length).fill(1), outModes: new Uint8Array(PROMPTS.length).fill(1),
        adapters: Int32Array.of(1, 0, -1), tokens: Int32Array.from(PROMPTS, (p) => p[p.length - 1]), returnLogits: true,
      })
      return r.logits
    } finally {
      cache.dispose()
    }
  }
  rows.generateLogits = relL2(await stepLogits(dev), await stepLogits(cpu))
  check(rows.generateLogits < 2e-2, `mixed-adapter decode step: device logits within 2e-2 relative L2 of the CPU's (${rows.generateLogits.toExponential(2)})`)

  // per-adapter gradients: sequences through 'solver', 'default', the base; then 'solver' only
  const grads = async (m, adapters) => {
    addon.train.setTrainable(m.handle, false, true, Int32Array.of(0, 1))
    return gradients(m, trainRequest({ adapters: Int32Array.from(adapters) }))
  }
  for (const adapters of [[1, 0, -1], [1, 1, -1]]) {
    const gc = await grads(cpu, adapters)
    const gd = await grads(dev, adapters)
    const names = [...gc.keys()].sort()
    const want = (n) => (adapters.includes(0) || n.includes('.solver.')) && n.includes('.lora_')
    check(names.length > 0 && names.every(want) && (adapters.includes(0) || !names.some((n) => !n.includes('.solver.'))),
      `adapters [${adapters}]: CPU gradients for exactly the adapters in the batch (${names.length})`)
    const devNames = [...gd.keys()].sort()
    // the device lists a gradient buffer once allocated; one never written since set_trainable is absent
    check(JSON.stringify(devNames) === JSON.stringify(names), `adapters [${adapters}]: the device has the same gradients (${devNames.length})`)
    let worst = 0
    for (const n of names) worst = Math.max(worst, gd.has(n) ? relL2(gd.get(n), gc.get(n)) : Infinity)
    rows[`gradients ${adapters}`] = worst
    check(worst < 5e-2, `adapters [${adapters}]: per-adapter gradients within 5e-2 relative L2 of the CPU's (worst ${worst.toExponential(2)})`)
  }
  // AdamW on the device: moments for the adapter the batch used, none for the other or the base
  addon.train.setTrainable(dev.handle, false, true, Int32Array.of(0, 1))
  await addon.train.forward(dev.handle, trainRequest({ adapters: Int32Array.of(1, 1, -1) }))
  await addon.train.backward(dev.handle, COEFFICIENTS)
  await addon.train.optimizerStep(dev.handle, { step: 1, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, clipGradNorm: 1 })
  const moments = (await addon.train.exportOptimizerState(dev.handle)).map((s) => s.name)
  check(moments.length > 0 && moments.every((n) => n.includes('.lora_') && n.includes('.solver.')), `device AdamW: moments only for the adapter in the batch (${moments.length})`)
  results.adapters = rows
  cpu.dispose()
  dev.dispose()
})

writeFileSync(join(OUT, `device-methods${only ? `-${only}` : ''}.json`), JSON.stringify({ device, failures: failures(), ...results }, null, 1))
console.log(`device-methods${only ? ` ${only}` : ''}: ${failures() === 0 ? 'PASS' : `${failures()} FAILURE(S)`}`)
process.exit(failures() === 0 ? 0 : 1)
