// The UID table on the toy world (paper 001, Tables 3, 4, 6): held-out mean@k accuracy of the
// bundled model before training and after TTRL with each reward arm (original TTRL, SC, UID-Conj,
// UID-Mix, random, permuted UID), DPO with UID-Conj / SC pairs vs random pairs from the shared
// warm start, and weighted SFT (UID-Conj, SC) vs uniform on the same pool; every difference with
// the paired prompt-cluster bootstrap of D.4 (benchmark macro, 100,000 replicates).
// Usage: npm run build && node bench/uid-table.mjs [--seeds 0] [--jobs 1 (per group: online, offline)] [--threads 2] [--steps N] [--pool-prompts N] [--epochs N] [--pool-threads N]
//        [--online-seeds S] [--offline-seeds S] [--arms ttrl,sc,uid-conj,uid-mix,random,permuted-uid]
//        [--online true] [--offline true] [--replicates 100000] [--out DIR]
// (AUTODIDACT_DIST=path/to/dist runs against another build of the package.)
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = fileURLToPath(new URL('.', import.meta.url))
const dist = resolve(process.env.AUTODIDACT_DIST ?? join(here, '..', 'dist'))
const load = (p) => import(pathToFileURL(join(dist, p)).href)
const { loadModel } = await load('engine/model.js')
const { drive } = await load('methods/common/driver.js')
const { TOY_PRESET: TTRL_TOY, resolveTtrlConfig } = await load('methods/ttrl/config.js')
const { TtrlRun } = await load('methods/ttrl/loop.js')
const { TOY_PRESET: WSFT_TOY, DPO_TOY_PRESET, resolveOfflineConfig } = await load('methods/offline/config.js')
const { OfflineRun } = await load('methods/offline/loop.js')
const { ensurePool, dpoPairs, wsftExamples, pairTraceDiagnostics, weightTraceDiagnostics } = await load('methods/offline/pool.js')
const { evaluateBenchmarks, selectBenchmarks, writeEvalRecord, readEvalRecord } = await load('methods/common/evaluation.js')
const { arithWorld } = await load('worlds/arith/index.js')
// the toy presets' held-out levels, as this table has always reported them
const world = arithWorld({ benchmarks: ['L3', 'L2', 'L4'] })
const { compareRecords } = await load('cli/compare.js')

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const MODEL = resolve(arg('model', join(here, '..', 'models', 'arith-qwen3-tiny')))
const seeds = String(arg('seeds', '0')).split(',').map(Number)
const onlineSeeds = String(arg('online-seeds', seeds.join(','))).split(',').map(Number)
const offlineSeeds = String(arg('offline-seeds', seeds.join(','))).split(',').map(Number)
const allSeeds = [...new Set([...onlineSeeds, ...offlineSeeds])]
const jobs = Number(arg('jobs', 1))
const threads = Number(arg('threads', 2))
const arms = String(arg('arms', 'ttrl,sc,uid-conj,uid-mix,random,permuted-uid')).split(',')
const offline = arg('offline', 'true') !== 'false'
const online = arg('online', 'true') !== 'false'
const stepsOverride = arg('steps', undefined)
const out = resolve(arg('out', join(here, 'results', 'uid-table')))
const replicates = Number(arg('replicates', 100000))
const poolPrompts = arg('pool-prompts', undefined)
const offlineEpochs = arg('epochs', undefined)
const poolThreads = Number(arg('pool-threads', Math.max(threads, 2)))
mkdirSync(out, { recursive: true })
const started = Date.now()
const log = (s) => process.stderr.write(`[${((Date.now() - started) / 1000).toFixed(0)}s] ${s}\n`)

async function pool(tasks, limit = jobs) {
  const results = new Array(tasks.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]()
    }
  }))
  return results
}

async function runMethod(Run, config, dir, name) {
  const run = await Run.start(MODEL, config, world, { threads })
  const t0 = Date.now()
  const r = await drive(run, { outDir: dir, method: name, totalSteps: run.config.steps, evalEvery: run.config.eval.every, checkpointEvery: run.config.checkpointEvery, series: [], describe: () => '' })
  run.dispose()
  log(`${name} done in ${((Date.now() - t0) / 1000).toFixed(0)} s: ${r.accuracyBefore?.toFixed(3)} → ${r.accuracyAfter?.toFixed(3)}`)
  return dir
}

async function baseEval(config, file) {
  const model = await loadModel(MODEL, { threads })
  const adapt = config.prompts ? [{ name: 'adapt', problems: world.data.unlabeledPrompts().slice(config.prompts.offset, config.prompts.offset + config.prompts.size) }] : []
  const benchmarks = [...adapt, ...selectBenchmarks(world, config.eval.benchmarks, config.eval.size)]
  const rec = await evaluateBenchmarks(model, benchmarks, { prompt: (q) => world.solve.solverPrompt(q), verifier: world.verifier }, config.eval.protocol, 0)
  model.dispose()
  await writeEvalRecord(file, rec)
  return file
}

const onlineTasks = []
const offlineTasks = []
const rows = [] // { group, label, seed, path }
const traceDiagnostics = {}
if (online) {
  for (const seed of onlineSeeds) {
    const tag = `s${seed}`
    const base = resolveTtrlConfig({ seed, ...(stepsOverride ? { steps: Number(stepsOverride) } : {}), eval: { ...TTRL_TOY.eval, every: 1000 } }, TTRL_TOY)
    const baseFile = join(out, `base-online-${tag}.json`)
    onlineTasks.push(() => baseEval(base, baseFile))
    rows.push({ group: 'online', label: 'base', seed, path: baseFile })
    for (const arm of arms) {
      const c = resolveTtrlConfig({ reward: { ...base.reward, arm } }, base)
      const dir = join(out, `ttrl-${arm}-${tag}`)
      onlineTasks.push(() => runMethod(TtrlRun, c, dir, `ttrl/${arm}/${tag}`))
      rows.push({ group: 'online', label: arm === 'ttrl' ? 'TTRL' : `TTRL+${arm}`, seed, path: dir })
    }
  }
}
async function runOffline() {
  // one pool for every offline arm, built once before the arms run in parallel
  const shared = { pool: { ...WSFT_TOY.pool, dir: join(out, 'pool'), ...(poolPrompts ? { prompts: Number(poolPrompts) } : {}) }, ...(offlineEpochs ? { epochs: Number(offlineEpochs) } : {}) }
  const cfg0 = resolveOfflineConfig(shared, WSFT_TOY)
  const scorer = await loadModel(MODEL, { threads: poolThreads })
  const t0 = Date.now()
  const { pool: P } = await ensurePool(cfg0, scorer, world, cfg0.pool.dir)
  scorer.dispose()
  const dpoCount = dpoPairs(P, 'random', DPO_TOY_PRESET.pairs, 0).length
  log(`pool: ${JSON.stringify(P.stats)}; ${P.prompts.filter((p) => p.responses.length >= 2).length} prompts with ≥ 2 distinct correct; ${dpoCount} DPO pairs; ${wsftExamples(P, 'uniform', 2).length} SFT examples (${((Date.now() - t0) / 1000).toFixed(0)} s)`)
  // trace-validity diagnostics (every written step right), the toy analogue of UID §3.3
  for (const arm of ['random', 'sc', 'uid-conj']) traceDiagnostics[`DPO ${arm}`] = pairTraceDiagnostics(P, dpoPairs(P, arm, DPO_TOY_PRESET.pairs, 0))
  for (const arm of ['uniform', 'sc', 'uid-conj', 'uid-mix']) traceDiagnostics[`WSFT ${arm}`] = weightTraceDiagnostics(P, wsftExamples(P, arm, WSFT_TOY.train.alpha))
  log(`trace validity: ${JSON.stringify(traceDiagnostics)}`)
  for (const seed of offlineSeeds) {
    const tag = `s${seed}`
    const baseFile = join(out, `base-offline-${tag}.json`)
    offlineTasks.push(() => baseEval(cfg0, baseFile))
    rows.push({ group: 'offline', label: 'base', seed, path: baseFile })
    for (const arm of ['random', 'uid-conj', 'sc']) {
      const c = resolveOfflineConfig({ ...shared, seed, arm }, DPO_TOY_PRESET)
      const dir = join(out, `dpo-${arm}-${tag}`)
      offlineTasks.push(() => runMethod(OfflineRun, c, dir, `dpo/${arm}/${tag}`))
      rows.push({ group: 'offline', label: `DPO ${arm}`, seed, path: dir })
    }
    for (const arm of ['uniform', 'uid-conj', 'sc']) {
      const c = resolveOfflineConfig({ ...shared, seed, arm }, WSFT_TOY)
      const dir = join(out, `wsft-${arm}-${tag}`)
      offlineTasks.push(() => runMethod(OfflineRun, c, dir, `wsft/${arm}/${tag}`))
      rows.push({ group: 'offline', label: `WSFT ${arm}`, seed, path: dir })
    }
  }
  // the warm start lives in the shared pool folder, keyed by seed: build each seed's before the parallel runs
  const firsts = offlineTasks.map((_, i) => i).filter((i) => rows.filter((r) => r.group === 'offline')[i]?.label === 'DPO random')
  await Promise.all(firsts.map((i) => offlineTasks[i]()))
  await pool(offlineTasks.filter((_, i) => !firsts.includes(i)))
}
await Promise.all([pool(onlineTasks), offline ? runOffline() : null])

const records = new Map()
for (const r of rows) records.set(r.path, (await readEvalRecord(r.path)).record)
const find = (group, label, seed) => rows.find((r) => r.group === group && r.label === label && r.seed === seed)
const cmp = (x, y) => {
  const c = compareRecords(x.path, records.get(x.path), y.path, records.get(y.path), { replicates, seed: 1 })
  return { estimate: c.bootstrap.macro.estimate, lo: c.bootstrap.macro.lo, hi: c.bootstrap.macro.hi }
}
const f = (x) => x.toFixed(1)
const ci = (d) => `${d.estimate >= 0 ? '+' : ''}${d.estimate.toFixed(1)} [${d.lo.toFixed(1)}, ${d.hi.toFixed(1)}]`
const table = []
const lines = []
for (const group of ['online', 'offline']) {
  for (const seed of allSeeds) {
    const groupRows = rows.filter((r) => r.group === group && r.seed === seed)
    if (!groupRows.length) continue
    const names = records.get(groupRows[0].path).benchmarks.map((b) => b.name)
    lines.push(`\n${group} (seed ${seed}) — mean@${records.get(groupRows[0].path).protocol.samples} held-out accuracy %, Δ = paired prompt-cluster bootstrap 95% CI (macro, pp)`)
    const control = (label) => (group === 'online' ? (label === 'base' ? null : label === 'TTRL' ? 'base' : 'TTRL') : label.startsWith('DPO') ? (label === 'DPO random' ? 'base' : 'DPO random') : label.startsWith('WSFT') ? (label === 'WSFT uniform' ? 'base' : 'WSFT uniform') : null)
    lines.push(`${'method'.padEnd(22)}${names.map((n) => n.padStart(10)).join('')}${'macro'.padStart(8)}   Δ vs base              Δ vs control`)
    for (const r of groupRows) {
      const rec = records.get(r.path)
      const accs = rec.benchmarks.map((b) => 100 * b.items.reduce((s, it) => s + it.correct.reduce((a, x) => a + x, 0) / it.correct.length, 0) / b.items.length)
      const macro = accs.reduce((a, b) => a + b, 0) / accs.length
      const base = find(group, 'base', seed)
      const vsBase = r.label === 'base' ? null : cmp(r, base)
      const ctrlLabel = control(r.label)
      const vsCtrl = ctrlLabel && ctrlLabel !== 'base' ? cmp(r, find(group, ctrlLabel, seed)) : null
      table.push({ group, seed, method: r.label, accuracy: Object.fromEntries(names.map((n, i) => [n, accs[i]])), macro, vsBase, control: ctrlLabel, vsControl: vsCtrl, path: r.path })
      lines.push(`${r.label.padEnd(22)}${accs.map((a) => f(a).padStart(10)).join('')}${f(macro).padStart(8)}   ${(vsBase ? ci(vsBase) : '').padEnd(22)} ${vsCtrl ? `${ci(vsCtrl)} vs ${ctrlLabel}` : ''}`)
    }
  }
}
// the two extra online controls of D.3: UID-Conj vs random and vs permuted
for (const seed of onlineSeeds) {
  const u = find('online', 'TTRL+uid-conj', seed)
  for (const other of ['TTRL+random', 'TTRL+permuted-uid', 'TTRL+sc']) {
    const o = find('online', other, seed)
    if (u && o) lines.push(`seed ${seed}: TTRL+uid-conj − ${other}: ${ci(cmp(u, o))}`)
  }
}
console.log(lines.join('\n'))
const result = { date: new Date().toISOString(), onlineSeeds, offlineSeeds, replicates, seconds: (Date.now() - started) / 1000, traceDiagnostics, table }
writeFileSync(join(out, 'table.json'), JSON.stringify(result, null, 2) + '\n')
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(join(here, 'results', 'uid-table.json'), JSON.stringify(result, null, 2) + '\n')
log(`wrote ${join(out, 'table.json')}`)
