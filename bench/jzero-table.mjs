// J-Zero vs its Table 3 ablations on the toy world (issue 9): the full loop, a frozen Judge
// ("− Judge"), without amplification pairs, without role pairs — same seed, same toy preset,
// several iterations each. Per iteration: held-out Solver accuracy (greedy and mean@4 at T = 1,
// verifier-checked), the Judge's pairwise accuracy on the verifier-ordered held-out preference set
// (all pairs and the no-hedge split), and the verifier win rate of each pair type's chosen side.
// Usage: npm run build && node bench/jzero-table.mjs [--iterations 6] [--seed 0] [--size 100]
//        [--variants jzero,frozen,no-amp,no-role] [--config '{"judge":{"lr":3e-5}}'] [--out jzero-table.json]
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { resolveJzeroConfig } from '../dist/methods/jzero/config.js'
import { JzeroRun } from '../dist/methods/jzero/loop.js'
import { arithWorld, evalSet, verifyAnswer } from '../dist/worlds/arith/index.js'
import { evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../dist/methods/common/evaluation.js'

const world = arithWorld()
import { DEFAULT_TOY_JUDGE_DIR } from '../dist/toymodel/judge.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const iterations = Number(arg('iterations', 6))
const seed = Number(arg('seed', 0))
const size = Number(arg('size', 100))
const extra = JSON.parse(arg('config', '{}'))
const outFile = arg('out', 'jzero-table.json')
const VARIANTS = {
  jzero: { label: 'J-Zero', switches: { trainJudge: true, rolePairs: true, ampPairs: true } },
  frozen: { label: '− Judge (frozen)', switches: { trainJudge: false, rolePairs: true, ampPairs: true } },
  'no-amp': { label: 'w/o D_amp', switches: { trainJudge: true, rolePairs: true, ampPairs: false } },
  'no-role': { label: 'w/o D_role', switches: { trainJudge: true, rolePairs: false, ampPairs: true } },
}
const names = arg('variants', Object.keys(VARIANTS).join(',')).split(',')
const level = 3
const heldOut = evalSet(level, size)

async function solverAccuracy(run) {
  const solver = { prompt: (q) => world.jzero.solverPrompt(q), verifier: world.verifier }
  const greedyRecord = await evaluateBenchmarks(run.solver, selectBenchmarks(world, [`L${level}`], size), solver, greedyProtocol(run.config.solver.maxTokens), run.step)
  const greedy = greedyRecord.benchmarks[0].items.filter((it) => it.correct[0] === 1).length / size
  const out = await run.solver.generate(heldOut.map((q) => world.jzero.solverPrompt(q.question)), { n: 4, temperature: 1, maxTokens: run.config.solver.maxTokens, seed: 777 })
  const right = out.flatMap((g, i) => g.map((c) => (verifyAnswer(heldOut[i].question, c.text) === true ? 1 : 0)))
  return { greedy, meanAt4: right.reduce((a, b) => a + b, 0) / right.length }
}

const results = {}
const started = Date.now()
for (const name of names) {
  const v = VARIANTS[name]
  if (!v) throw new Error(`unknown variant '${name}' (${Object.keys(VARIANTS).join(', ')})`)
  const config = resolveJzeroConfig({ ...extra, seed, steps: iterations, switches: v.switches })
  const t0 = Date.now()
  const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, config, world, { threads: 2 })
  const judge0 = await run.judgeHeldOut()
  const rows = [{ iteration: 0, solver: await solverAccuracy(run), judge: judge0 }]
  for (let i = 1; i <= iterations; i++) {
    const r = await run.runStep()
    rows.push({
      iteration: i,
      solver: await solverAccuracy(run),
      judge: { accuracy: r.judge.heldOut.after, plain: r.judge.heldOut.plainAfter },
      winRate: { role: r.judge.winRate.role, amp: r.judge.winRate.amp },
      trainPairs: r.judge.trainPairs,
      trainPairAccuracy: r.judge.trainPairAccuracy,
      challengerReward: r.challenger.reward.mean,
      solverReward: r.solver.reward.mean,
      solverSampleAccuracy: r.solver.verifierAccuracy,
      seconds: r.seconds,
    })
    const last = rows.at(-1)
    process.stderr.write(`${name} it ${i}/${iterations}: greedy ${last.solver.greedy.toFixed(3)} mean@4 ${last.solver.meanAt4.toFixed(3)} judge ${last.judge.accuracy.toFixed(3)} (plain ${last.judge.plain.toFixed(3)}) win role ${r.judge.winRate.role.rate.toFixed(2)} amp ${r.judge.winRate.amp.rate.toFixed(2)} ${r.seconds.toFixed(0)} s\n`)
  }
  run.dispose()
  results[name] = { label: v.label, config, rows, seconds: (Date.now() - t0) / 1000 }
}

const pct = (x) => (Number.isFinite(x) ? (100 * x).toFixed(1) : '–')
console.log(`J-Zero ablations, toy preset${Object.keys(extra).length ? ` + ${JSON.stringify(extra)}` : ''}, seed ${seed}, ${iterations} iterations; Solver: ${size} held-out level-${level} questions; Judge: the verifier-ordered held-out preference pairs`)
for (const [metric, pick] of [
  ['Solver greedy accuracy %', (r) => r.solver.greedy],
  ['Solver mean@4 (T=1) %', (r) => r.solver.meanAt4],
  ['Judge held-out pairwise accuracy %', (r) => r.judge.accuracy],
  ['Judge accuracy, no-hedge split %', (r) => r.judge.plain],
  ['role pairs: chosen wins (verifier) %', (r) => r.winRate?.role.rate],
  ['amp pairs: chosen wins (verifier) %', (r) => r.winRate?.amp.rate],
]) {
  console.log(`\n${metric}`)
  console.log(`| variant | ${Array.from({ length: iterations + 1 }, (_, i) => `it ${i}`).join(' | ')} |`)
  console.log(`|---|${'---|'.repeat(iterations + 1)}`)
  for (const name of names) console.log(`| ${results[name].label} | ${results[name].rows.map((r) => pct(pick(r))).join(' | ')} |`)
}
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(join(here, 'results', outFile), JSON.stringify({ date: new Date().toISOString(), seed, iterations, size, level, config: extra, results, seconds: (Date.now() - started) / 1000 }, null, 2))
console.log(`\n${((Date.now() - started) / 1000).toFixed(0)} s; wrote bench/results/${outFile}`)
