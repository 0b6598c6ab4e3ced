#!/usr/bin/env node
// A real COSE run's report, end to end: runs `autodidact evolve --method cose` on the bundled
// model, re-evaluates the base model and each evaluated checkpoint question by question (greedy,
// so the accuracies must equal the run's own, which is checked), renders the run report
// (src/report) and, with --screenshot, photographs it in headless Chromium.
//
//   npm run report:screenshot                       # 24 steps → docs/report-cose.png
//   node scripts/report-demo.mjs --steps 3 --fixture test/report/fixtures/cose-3-steps
//
// Options: --steps N (default 24), --eval-every N (default 4), --out DIR (a new run folder; default
// runs/cose-N-<time>), --screenshot PNG, --fixture DIR (writes the report's inputs: metrics.jsonl as the
// run wrote it, and run.json with everything else), --render-only (re-render --out's run from the
// run.json an earlier call left there).
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const dist = (p) => import(pathToFileURL(join(root, 'dist', p)).href)

const { values } = parseArgs({
  options: { steps: { type: 'string', default: '24' }, 'eval-every': { type: 'string', default: '4' }, out: { type: 'string' }, screenshot: { type: 'string' }, fixture: { type: 'string' }, 'render-only': { type: 'boolean', default: false } },
})
const steps = Number(values.steps)
const evalEvery = Number(values['eval-every'])
const out = values.out ?? join('runs', `cose-${steps}-${new Date().toISOString().replace(/[:.]/g, '-')}`)

function evolve() {
  if (existsSync(out)) throw new Error(`${out} exists: give a new --out (or --render-only to re-render it)`)
  const config = join(dirname(out), `cose-${steps}.config.json`)
  mkdirSync(dirname(out), { recursive: true })
  writeFileSync(config, JSON.stringify({ eval: { every: evalEvery }, checkpointEvery: evalEvery }))
  const startedAt = new Date()
  const r = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'main.js'), 'evolve', '--method', 'cose', '--steps', String(steps), '--config', config, '--out', out], { stdio: ['ignore', 'inherit', 'inherit'] })
  if (r.status !== 0) throw new Error(`evolve exited ${r.status}`)
  return { startedAt, finishedAt: new Date() }
}

/** Per-question greedy correctness of the base model and of every evaluated step that has a checkpoint. */
async function evaluations(rows, config, baseModel) {
  const { CoseRun } = await dist('methods/cose/loop.js')
  const { arithWorld } = await dist('methods/cose/world.js')
  const { checkpointDir } = await dist('methods/common/driver.js')
  const ids = arithWorld.evalSet(config.eval.level, config.eval.size).map((q) => q.id)
  const details = []
  for (const row of rows.filter((r) => typeof r.heldOutAccuracy === 'number')) {
    const dir = checkpointDir(out, row.step)
    if (row.step > 0 && !existsSync(dir)) continue
    const run = row.step === 0 ? await CoseRun.start(baseModel, config, arithWorld) : await CoseRun.resume(dir, arithWorld)
    const correct = await run.evaluateItems()
    run.dispose()
    const accuracy = correct.filter(Boolean).length / correct.length
    if (accuracy !== row.heldOutAccuracy) throw new Error(`step ${row.step}: re-evaluated accuracy ${accuracy} ≠ the run's ${row.heldOutAccuracy}`)
    details.push({ step: row.step, correct, ids })
  }
  return details
}

/** The bundled model's own evaluation (its model card's eval.json) at the run's level. */
function baseAccuracy(model, level) {
  const card = JSON.parse(readFileSync(join(model, 'eval.json'), 'utf8'))
  const row = card.solver.find((s) => s.level === level)
  return { accuracy: row.greedy.estimate, n: row.questions, interval: { lo: row.greedy.lo, hi: row.greedy.hi }, source: `model card eval.json: greedy Solver, level ${level}, its own ${row.questions} questions` }
}

async function runAndEvaluate() {
  const times = evolve()
  const rows = readMetrics()
  const latest = JSON.parse(readFileSync(join(out, 'latest.json'), 'utf8'))
  const state = JSON.parse(readFileSync(join(latest.checkpoint, 'run_state.json'), 'utf8'))
  const { spec } = await dist('methods/cose/spec.js')
  const run = {
    method: 'cose',
    summary: spec.summary,
    model: state.baseModel,
    world: 'arith',
    config: state.config,
    seed: state.config.seed,
    startedAt: times.startedAt.toISOString(),
    finishedAt: times.finishedAt.toISOString(),
    evaluations: await evaluations(rows, state.config, state.baseModel),
    baseAccuracy: baseAccuracy(state.baseModel, state.config.eval.level),
    series: spec.series,
    trainedModel: join(latest.checkpoint, 'model'),
    plannedSteps: steps,
  }
  writeFileSync(join(out, 'run.json'), JSON.stringify(run, null, 1) + '\n')
  return run
}

const readMetrics = () => readFileSync(join(out, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
const run = values['render-only'] ? JSON.parse(readFileSync(join(out, 'run.json'), 'utf8')) : await runAndEvaluate()
const rows = readMetrics()
const { renderRunReport } = await dist('report/index.js')
const page = join(out, 'run-report.html')
writeFileSync(page, renderRunReport({ ...run, rows }))
console.error(`report: ${page}`)

if (values.fixture) {
  mkdirSync(values.fixture, { recursive: true })
  copyFileSync(join(out, 'metrics.jsonl'), join(values.fixture, 'metrics.jsonl'))
  copyFileSync(join(out, 'run.json'), join(values.fixture, 'run.json'))
  console.error(`fixture: ${values.fixture}`)
}

if (values.screenshot) {
  const { launchChromium } = await import('./chromium.mjs')
  const browser = await launchChromium()
  try {
    const tab = await browser.context.newPage()
    await tab.setViewportSize({ width: 1440, height: 900 })
    await tab.goto(pathToFileURL(page).href)
    await tab.screenshot({ path: values.screenshot, fullPage: true })
  } finally {
    await browser.close()
  }
  console.error(`screenshot: ${values.screenshot}`)
}
