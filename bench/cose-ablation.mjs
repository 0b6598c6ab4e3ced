// COSE ablations on the toy world (like COSE Table 5): full COSE, w/o weighting, w/o priority,
// 1 − p learnability, and the base model; several seeds; held-out greedy accuracy at the eval
// level with a paired prompt bootstrap interval of each variant's difference to the base.
// Usage: npm run build && node bench/cose-ablation.mjs [--steps 20] [--seeds 1,2,3] [--size 100]
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { resolveCoseConfig, TOY_PRESET } from '../dist/methods/cose/config.js'
import { CoseRun } from '../dist/methods/cose/loop.js'
import { evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../dist/methods/common/evaluation.js'
import { arithWorld as toyWorld } from '../dist/worlds/arith/index.js'
import { pairedPromptBootstrap } from '../dist/stats/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const steps = Number(arg('steps', TOY_PRESET.steps))
const seeds = String(arg('seeds', '1,2,3')).split(',').map(Number)
const size = Number(arg('size', 100))
const VARIANTS = {
  'COSE (full)': {},
  'w/o weighting': { switches: { weighting: false, priority: 'cose' } },
  'w/o priority': { switches: { weighting: true, priority: 'uniform' } },
  '1 − p learnability': { switches: { weighting: true, priority: 'one-minus-p' } },
}

const arithWorld = toyWorld()
const level = 3
/** Per held-out question of level 3: is the greedy Solver right? */
async function evaluateItems(run) {
  const [b] = selectBenchmarks(arithWorld, [`L${level}`], size)
  const r = await evaluateBenchmarks(run.model, [b], { prompt: (q) => arithWorld.cose.solverPrompt(q), verifier: arithWorld.verifier }, greedyProtocol(run.config.solver.maxTokens), run.step)
  return r.benchmarks[0].items.map((it) => it.correct[0] === 1)
}
const started = Date.now()
const baseRun = await CoseRun.start(DEFAULT_MODEL, resolveCoseConfig({ steps }), arithWorld)
const base = await evaluateItems(baseRun)
baseRun.dispose()
const rows = [{ variant: 'base model', accuracy: base.filter(Boolean).length / size, perSeed: [] }]
for (const [name, over] of Object.entries(VARIANTS)) {
  const perPrompt = base.map(() => [])
  const perSeed = []
  for (const seed of seeds) {
    const run = await CoseRun.start(DEFAULT_MODEL, resolveCoseConfig({ ...over, steps, seed }), arithWorld)
    for (let s = 0; s < steps; ++s) await run.runStep()
    const correct = await evaluateItems(run)
    run.dispose()
    correct.forEach((c, q) => perPrompt[q].push(c ? 1 : 0))
    perSeed.push(correct.filter(Boolean).length / size)
    process.stderr.write(`${name} seed ${seed}: ${perSeed.at(-1).toFixed(3)}\n`)
  }
  const boot = pairedPromptBootstrap([{ name: 'arith', a: perPrompt, b: base.map((c) => Array(seeds.length).fill(c ? 1 : 0)) }], { replicates: 10_000, seed: 1 })
  rows.push({ variant: name, accuracy: perSeed.reduce((a, b) => a + b, 0) / perSeed.length, perSeed, diff: boot.macro })
}
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(join(here, 'results', 'cose-ablation.json'), JSON.stringify({ date: new Date().toISOString(), steps, seeds, size, rows, seconds: (Date.now() - started) / 1000 }, null, 2))
console.log(`COSE ablation, toy world level ${level}, ${size} held-out questions, ${steps} steps, seeds ${seeds.join(',')}`)
console.log('variant               accuracy   Δ vs base (pp) [95% CI]      per seed')
for (const r of rows)
  console.log(`${r.variant.padEnd(20)} ${r.accuracy.toFixed(3).padStart(8)}   ${r.diff ? `${r.diff.estimate.toFixed(1).padStart(6)} [${r.diff.lo.toFixed(1)}, ${r.diff.hi.toFixed(1)}]`.padEnd(26) : ''.padEnd(26)} ${r.perSeed.map((x) => x.toFixed(2)).join(' ')}`)
