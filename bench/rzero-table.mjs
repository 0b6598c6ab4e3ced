// R-Zero vs R-Zero + disagreement (DIS) on the toy world: several seeds, held-out accuracy of the
// final Solver with paired prompt-bootstrap intervals (against the base model and between the
// arms), and the per-batch r_dis / r_unc / r_rep trajectories of the Challenger steps (DIS Table 2).
// Arms: 'rzero' (β = 0, the Solver alone, m = 8), 'rzero+dis' (β = 1, the Solver at T 0.7 and 1.0
// plus the Llama-architecture variant, k = 4 each) and, with --ablation, 'β=0 pooled' (the same
// ensemble for p̂ and labels, r_dis measured but not rewarded).
// Usage: npx tsc -p . && node bench/rzero-table.mjs [--steps 20] [--seeds 1,2,3] [--size 200] [--ablation]
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { resolveRzeroConfig, TOY_PRESET } from '../dist/methods/rzero/config.js'
import { RzeroRun } from '../dist/methods/rzero/loop.js'
import { arithWorld, evalSet, verifyAnswer } from '../dist/worlds/arith/index.js'

const arithRzeroWorld = arithWorld()
import { pairedPromptBootstrap } from '../dist/stats/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const steps = Number(arg('steps', TOY_PRESET.steps))
const seeds = String(arg('seeds', '1,2,3')).split(',').map(Number)
const size = Number(arg('size', 200))
const level = 3
const samples = 4 // mean@4 at temperature 1, next to greedy
const ARMS = {
  rzero: { reward: { beta: 0 } },
  'rzero+dis': { reward: { beta: 1 } },
  ...(process.argv.includes('--ablation') ? { 'β=0 pooled': { reward: { beta: 0 }, ensemble: { mode: 'ensemble' } } } : {}),
}

/** Greedy correctness and mean@4 (T = 1) per held-out question. */
async function evaluate(run) {
  const items = evalSet(level, size)
  const prompts = items.map((i) => arithRzeroWorld.rzero.solverPrompt(i.question))
  const greedy = await run.solver.generate(prompts, { temperature: 0, maxTokens: 64 })
  const sampled = await run.solver.generate(prompts, { temperature: 1, n: samples, maxTokens: 64, seed: 12345 })
  return {
    greedy: greedy.map((g, i) => (verifyAnswer(items[i].question, g[0].text) === true ? 1 : 0)),
    mean4: sampled.map((g, i) => g.filter((c) => verifyAnswer(items[i].question, c.text) === true).length / samples),
  }
}

const pct = (x) => (100 * x).toFixed(1)
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
const started = Date.now()
const log = (s) => process.stderr.write(s + '\n')

const baseRun = await RzeroRun.start(DEFAULT_MODEL, resolveRzeroConfig({ steps, reward: { beta: 0 } }), arithRzeroWorld, { threads: 2 })
const base = await evaluate(baseRun)
baseRun.dispose()
log(`base: greedy ${pct(mean(base.greedy))}%, mean@4 ${pct(mean(base.mean4))}%`)

const arms = {}
for (const [name, over] of Object.entries(ARMS)) {
  const perSeed = []
  for (const seed of seeds) {
    const t0 = Date.now()
    const run = await RzeroRun.start(DEFAULT_MODEL, resolveRzeroConfig({ ...over, steps, seed }), arithRzeroWorld, { threads: 2, log })
    const records = []
    for (let s = 0; s < steps; s++) records.push(await run.runStep())
    const ev = await evaluate(run)
    run.dispose()
    const seconds = (Date.now() - t0) / 1000
    perSeed.push({ seed, ...ev, records, seconds })
    log(`${name} seed ${seed}: greedy ${pct(mean(ev.greedy))}%, mean@4 ${pct(mean(ev.mean4))}% (${seconds.toFixed(0)} s)`)
  }
  arms[name] = perSeed
}

/** Per prompt: the arm's outcomes over seeds (the responses of the bootstrap's prompt clusters). */
const byPrompt = (perSeed, key) => base[key].map((_, q) => perSeed.map((r) => r[key][q]))
const vsBase = (perSeed, key) => pairedPromptBootstrap([{ name: key, a: byPrompt(perSeed, key), b: base[key].map((x) => [x]) }], { replicates: 20000, seed: 7 }).macro
const table = []
for (const [name, perSeed] of Object.entries(arms)) {
  const row = { arm: name }
  for (const key of ['greedy', 'mean4']) {
    row[key] = mean(perSeed.map((r) => mean(r[key])))
    row[`${key}PerSeed`] = perSeed.map((r) => mean(r[key]))
    row[`${key}VsBase`] = vsBase(perSeed, key)
  }
  const challenger = perSeed.flatMap((r) => r.records.filter((x) => x.phase === 'challenger'))
  const solver = perSeed.flatMap((r) => r.records.filter((x) => x.phase === 'solver'))
  row.parseRate = mean(challenger.map((x) => x.parseRate))
  row.keptPerStep = mean(solver.map((x) => x.kept))
  row.pseudoLabelAccuracy = mean(solver.filter((x) => x.kept).map((x) => x.pseudoLabelAccuracy))
  row.timeouts = [...challenger, ...solver].reduce((a, x) => a + x.ensemble.timeouts + x.ensemble.errors, 0)
  row.secondsPerRun = mean(perSeed.map((r) => r.seconds))
  table.push(row)
}
const names = Object.keys(arms)
const between = names.length > 1
  ? Object.fromEntries(['greedy', 'mean4'].map((key) => [key, pairedPromptBootstrap([{ name: key, a: byPrompt(arms['rzero+dis'], key), b: byPrompt(arms.rzero, key) }], { replicates: 20000, seed: 7 }).macro]))
  : null

// DIS Table 2: per Challenger batch (in order), mean over seeds of the batch mean and std
const trajectories = {}
for (const [name, perSeed] of Object.entries(arms)) {
  const batches = perSeed.map((r) => r.records.filter((x) => x.phase === 'challenger'))
  trajectories[name] = batches[0].map((_, b) => {
    const at = batches.map((bs) => bs[b])
    const m = (k, f) => mean(at.map((x) => x[k][f]).filter(Number.isFinite))
    return { batch: b + 1, step: at[0].step, rDis: [m('rDis', 'mean'), m('rDis', 'std')], rUnc: [m('rUnc', 'mean'), m('rUnc', 'std')], rRep: [m('rRep', 'mean'), m('rRep', 'std')], parseRate: mean(at.map((x) => x.parseRate)) }
  })
}

const ci = (i) => `${i.estimate >= 0 ? '+' : ''}${i.estimate.toFixed(1)} [${i.lo.toFixed(1)}, ${i.hi.toFixed(1)}]`
console.log(`\nR-Zero vs R-Zero + disagreement, toy world level ${level}, ${steps} steps, seeds ${seeds.join(',')}, ${size} held-out questions`)
console.log(`base model: greedy ${pct(mean(base.greedy))}%, mean@4 ${pct(mean(base.mean4))}%\n`)
console.log('| arm | greedy % (per seed) | Δ greedy vs base, pp [95% CI] | mean@4 % | Δ mean@4 vs base | parse rate | kept/step | label acc. | variant failures | s/run |')
console.log('|---|---|---|---|---|---|---|---|---|---|')
for (const r of table)
  console.log(`| ${r.arm} | ${pct(r.greedy)} (${r.greedyPerSeed.map(pct).join(', ')}) | ${ci(r.greedyVsBase)} | ${pct(r.mean4)} | ${ci(r.mean4VsBase)} | ${r.parseRate.toFixed(2)} | ${r.keptPerStep.toFixed(1)} | ${pct(r.pseudoLabelAccuracy)}% | ${r.timeouts} | ${r.secondsPerRun.toFixed(0)} |`)
if (between) console.log(`\nrzero+dis − rzero: greedy ${ci(between.greedy)} pp, mean@4 ${ci(between.mean4)} pp (paired prompt bootstrap, seeds pooled per prompt)`)
for (const [name, rows] of Object.entries(trajectories)) {
  console.log(`\n${name}: Challenger batches (mean ± std within batch, averaged over seeds)`)
  console.log('| batch | step | r_dis | r_unc | r_rep | parse |')
  console.log('|---|---|---|---|---|---|')
  for (const t of rows) console.log(`| ${t.batch} | ${t.step} | ${t.rDis[0].toFixed(3)} ± ${t.rDis[1].toFixed(3)} | ${t.rUnc[0].toFixed(3)} ± ${t.rUnc[1].toFixed(3)} | ${t.rRep[0].toFixed(3)} ± ${t.rRep[1].toFixed(3)} | ${t.parseRate.toFixed(2)} |`)
}
console.log(`\n${((Date.now() - started) / 1000).toFixed(0)} s in all`)
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(
  join(here, 'results', 'rzero-table.json'),
  JSON.stringify({ steps, seeds, size, level, base: { greedy: mean(base.greedy), mean4: mean(base.mean4) }, table, between, trajectories, date: new Date().toISOString() }, null, 2) + '\n',
)
