// Load time of a model folder (loadModel, CPU, median of several warm loads: the file in the page
// cache) and, apart, what the JavaScript NaN/Inf scan of its tensors (checkFiniteTensors) takes on
// its own. Folders: the bundled model and a random Qwen3-0.6B-shaped bf16 folder (bench/random-model.mjs).
//   node bench/load-time.mjs [--runs N] [--threads N] [--weights f32,bf16] [--layers N] [--cache DIR]
// (--layers: the Qwen3-0.6B shape with N layers instead of 28)
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { QWEN3_0_6B, writeRandomModel } from './random-model.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const dist = (p) => import(pathToFileURL(join(root, 'dist', p)).href)
const { loadModel } = await dist('index.js')
const { readModelFolder } = await dist('engine/hf/folder.js')
const { checkFiniteTensors } = await dist('engine/hf/safetensors.js')

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, threads: { type: 'string', default: '2' }, weights: { type: 'string', default: 'f32,bf16' }, layers: { type: 'string', default: '28' }, cache: { type: 'string', default: join(tmpdir(), 'autodidact-bench') } } })
const runs = Number(values.runs)
const threads = Number(values.threads)
const folders = [
  ['arith-qwen3-tiny (f32 file, 2.9 MB)', join(root, 'models', 'arith-qwen3-tiny')],
  values.layers === '28'
    ? ['Qwen3-0.6B shape, random (bf16 file, 1.2 GB)', writeRandomModel(join(values.cache, 'qwen3-0.6b-random'))]
    : [`Qwen3-0.6B shape with ${values.layers} layers, random (bf16)`, writeRandomModel(join(values.cache, `qwen3-0.6b-${values.layers}layers`), { ...QWEN3_0_6B, num_hidden_layers: Number(values.layers) })],
]

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]
async function timed(f) {
  const t0 = process.hrtime.bigint()
  await f()
  return Number(process.hrtime.bigint() - t0) / 1e6
}

for (const [label, dir] of folders) {
  const folder = await readModelFolder(dir, { checkFinite: false, warnUnused: false })
  const scan = []
  for (let i = 0; i <= runs; i++) scan.push(await timed(() => checkFiniteTensors(folder.tensors)))
  console.log(`${label}: JS scan alone ${median(scan.slice(1)).toFixed(1)} ms`)
  for (const weights of values.weights.split(',')) {
    const load = []
    for (let i = 0; i <= runs; i++) load.push(await timed(async () => (await loadModel(dir, { threads, weights })).dispose()))
    console.log(`  loadModel weights=${weights} threads=${threads}: median ${median(load.slice(1)).toFixed(1)} ms (runs ${load.slice(1).map((x) => x.toFixed(0)).join(' ')})`)
  }
}
