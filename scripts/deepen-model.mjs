#!/usr/bin/env node
// Appends N decoder layers to a Qwen3 model folder, each the identity at initialization (o_proj
// and down_proj zero, so the layer adds nothing to the residual stream; q/k/v/gate/up N(0, 0.02²),
// norms 1): the deeper model computes exactly what the source does until it is trained. Used to
// give a score-head Judge layers above the backbone's own (README, issue 27's J-Zero Judge probe).
// Checks its output: the source's and the result's logprobs of a few completions must agree.
// Needs `dist/` (npx tsc -p tsconfig.json).
//
//   node scripts/deepen-model.mjs SOURCE_DIR OUT_DIR N
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const dist = new URL('../dist/', import.meta.url)
const { readSafetensorsRefs, writeSafetensors } = await import(new URL('engine/hf/index.js', dist))
const { loadModel } = await import(new URL('engine/model.js', dist))
const { Rng } = await import(new URL('util/prng.js', dist))

const [src, out, extraArg] = process.argv.slice(2)
const extra = Number(extraArg)
if (!src || !out || !Number.isInteger(extra) || extra < 1) {
  console.error('usage: node scripts/deepen-model.mjs SOURCE_DIR OUT_DIR N   (N ≥ 1 layers to append)')
  process.exit(2)
}
const config = JSON.parse(readFileSync(join(src, 'config.json'), 'utf8'))
if (config.model_type !== 'qwen3') {
  console.error(`${src}: model_type '${config.model_type}': only qwen3 folders are deepened`)
  process.exit(2)
}
const layers = config.num_hidden_layers
const bytes = readFileSync(join(src, 'model.safetensors'))
const tensors = (await readSafetensorsRefs(src)).map((r) => {
  if (r.dtype !== 'F32') throw new Error(`${r.name}: ${r.dtype}; only F32 folders are deepened`)
  return { name: r.name, dtype: 'F32', shape: r.shape, data: new Float32Array(bytes.buffer.slice(bytes.byteOffset + r.offset, bytes.byteOffset + r.offset + r.nbytes)) }
})
const rng = new Rng(`deepen-model:${extra}`)
const normal = () => {
  let u = rng.nextFloat()
  while (u <= 1e-300) u = rng.nextFloat()
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rng.nextFloat())
}
const last = tensors.filter((t) => t.name.startsWith(`model.layers.${layers - 1}.`))
if (!(Number.isInteger(layers) && layers >= 1) || last.length === 0) {
  console.error(`${src}: config.json's num_hidden_layers (${layers}) does not name the folder's last layer`)
  process.exit(2)
}
for (let e = 0; e < extra; e++) {
  for (const t of last) {
    const name = t.name.replace(`model.layers.${layers - 1}.`, `model.layers.${layers + e}.`)
    const data = new Float32Array(t.data.length)
    if (name.endsWith('norm.weight')) data.fill(1)
    else if (!name.endsWith('o_proj.weight') && !name.endsWith('down_proj.weight')) for (let i = 0; i < data.length; i++) data[i] = 0.02 * normal()
    tensors.push({ name, dtype: 'F32', shape: t.shape.slice(), data })
  }
}
mkdirSync(out, { recursive: true })
await writeSafetensors(join(out, 'model.safetensors'), tensors)
writeFileSync(join(out, 'config.json'), JSON.stringify({ ...config, num_hidden_layers: layers + extra, max_window_layers: layers + extra }, null, 2))
for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(src, f), join(out, f))

// the identity at initialization: every completion token's logprob as the source's
const pairs = ['12+7', '(3+4)*5', '9*8-6'].map((q) => ({ prompt: `Solve: ${q}\n`, completion: '<think>3+4=7; 7*5=35</think><answer>35</answer>' }))
const [a, b] = [await loadModel(src, { threads: 1 }), await loadModel(out, { threads: 1 })]
const [sa, sb] = [await a.score(pairs), await b.score(pairs)]
a.dispose()
b.dispose()
const diff = Math.max(...sa.flatMap((s, i) => Array.from(s.logprobs, (x, t) => Math.abs(x - sb[i].logprobs[t]))))
if (!(diff <= 1e-5)) {
  console.error(`${out}: logprobs differ from the source's by ${diff}: not the identity`)
  process.exit(1)
}
console.log(`${src} (${layers} layers) → ${out} (${layers + extra}); completion logprobs equal the source's within ${diff.toExponential(1)}`)
