#!/usr/bin/env node
// A real COSE run's report, end to end: runs `autodidact evolve --method cose` on the bundled
// model (the driver writes report.html from the run's own metrics, per-question eval files and
// checkpoint) and, with --screenshot, photographs that page in headless Chromium.
//
//   npm run report:screenshot                       # 24 steps → docs/report-cose.png
//
// Options: --steps N (default 24), --eval-every N (default 4), --out DIR (a new run folder; default
// runs/cose-N-<time>), --screenshot PNG, --render-only (photograph --out's existing report).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')

const { values } = parseArgs({
  options: { steps: { type: 'string', default: '24' }, 'eval-every': { type: 'string', default: '4' }, out: { type: 'string' }, screenshot: { type: 'string' }, 'render-only': { type: 'boolean', default: false } },
})
const steps = Number(values.steps)
const evalEvery = Number(values['eval-every'])
const out = values.out ?? join('runs', `cose-${steps}-${new Date().toISOString().replace(/[:.]/g, '-')}`)

if (!values['render-only']) {
  if (existsSync(out)) throw new Error(`${out} exists: give a new --out (or --render-only to photograph its report)`)
  const config = join(dirname(out), `cose-${steps}.config.json`)
  mkdirSync(dirname(out), { recursive: true })
  writeFileSync(config, JSON.stringify({ eval: { every: evalEvery }, checkpointEvery: evalEvery }))
  const r = spawnSync(process.execPath, [join(root, 'dist', 'cli', 'main.js'), 'evolve', '--method', 'cose', '--steps', String(steps), '--config', config, '--out', out], { stdio: ['ignore', 'inherit', 'inherit'] })
  if (r.status !== 0) throw new Error(`evolve exited ${r.status}`)
}
const page = join(out, 'report.html')
console.error(`report: ${page}`)

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
