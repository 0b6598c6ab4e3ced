// Seeded fuzzing of everything a model folder hands the loader (issue 23): safetensors headers and
// framing, config.json fields, adapter_config.json, chat templates, tokenizer.json /
// tokenizer_config.json. Each case runs in a child process (child.mjs, against the compiled dist/),
// so an abort, a V8 fatal error or a hang is caught and counted, never taken for a pass: every case
// must end as an accepted well-formed file or a typed AutodidactError — 0 crashes, 0 hangs, 0
// untyped errors. The children run with a 512 MiB heap, so a runaway allocation aborts them at once.
// Needs the compiled library (dist/, built by `npx tsc -p .`).
//
// FUZZ_SEED and FUZZ_SCALE (a multiplier of the case counts) widen a run by hand. Checkpoint files
// (optimizer state, latest.json, metrics.jsonl) are the method kit's: a target added to child.mjs's
// TARGETS and to FUZZ_TARGETS below runs under the same harness.
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { writeTinyModel } from '../helpers/tiny-model.js'

const CHILD = fileURLToPath(new URL('./child.mjs', import.meta.url))
const DIST = fileURLToPath(new URL('../../dist/engine/hf/template.js', import.meta.url))
const SEED = Number(process.env.FUZZ_SEED ?? 20231)
const SCALE = Number(process.env.FUZZ_SCALE ?? 1)
/** A case that prints nothing for this long is a hang (every budget in the code under test is ≤ 1 s). */
const HANG_MS = 15_000
/** Before its first line a child is starting Node and importing the library: on a loaded machine that alone can take seconds. */
const STARTUP_MS = 30_000

/** Cases per target: sized so that the file takes about a minute on 2 busy cores. */
const FUZZ_TARGETS: Array<[string, number]> = [
  ['safetensors', 2000],
  ['config', 600],
  ['adapter', 1500],
  ['template', 800],
  ['tokenizer', 600],
]

interface Tally {
  accepted: number
  typed: number
  bad: string[]
  crashes: string[]
  hangs: string[]
  ms: number
}

/** Runs cases [0, count) of `target` in child processes, restarting one after any case that killed or hung it. */
async function fuzz(target: string, count: number, baseDir: string, hangMs = HANG_MS): Promise<Tally> {
  const tally: Tally = { accepted: 0, typed: 0, bad: [], crashes: [], hangs: [], ms: 0 }
  const t0 = performance.now()
  let next = 0
  while (next < count) {
    const from = next
    const { lastStarted, finished, exit } = await runChild(target, from, count, baseDir, tally, hangMs)
    if (finished) break
    // the child died or hung in case lastStarted: count it and go on after it
    const where = `${target} case ${lastStarted} (seed ${SEED}): ${exit}`
    if (exit.startsWith('hang')) tally.hangs.push(where)
    else tally.crashes.push(where)
    next = Math.max(lastStarted, from) + 1
  }
  tally.ms = performance.now() - t0
  return tally
}

function runChild(target: string, from: number, to: number, baseDir: string, tally: Tally, hangMs: number): Promise<{ lastStarted: number; finished: boolean; exit: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--max-old-space-size=512', CHILD, target, String(SEED), String(from), String(to), baseDir], { stdio: ['ignore', 'pipe', 'pipe'] })
    let lastStarted = from
    let lastDone = from - 1
    let buffer = ''
    let stderr = ''
    let hung = false
    let timer = setTimeout(onHang, Math.max(hangMs, STARTUP_MS))
    function onHang() {
      hung = true
      child.kill('SIGKILL')
    }
    child.stderr.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-2000)))
    child.stdout.on('data', (c: Buffer) => {
      buffer += c.toString()
      let nl: number
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl)
        buffer = buffer.slice(nl + 1)
        const m = JSON.parse(line) as { start?: number; done?: number; outcome?: string; bad?: number; error?: string }
        clearTimeout(timer)
        timer = setTimeout(onHang, hangMs)
        if (m.start !== undefined) lastStarted = m.start
        else if (m.bad !== undefined) {
          lastDone = m.bad
          tally.bad.push(`${target} case ${m.bad} (seed ${SEED}): ${m.error}`)
        } else if (m.done !== undefined) {
          lastDone = m.done
          if (m.outcome === 'accepted') tally.accepted++
          else tally.typed++
        }
      }
    })
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      const finished = !hung && code === 0 && lastDone === to - 1
      const exit = hung ? `hang (no progress for ${hangMs} ms)` : `exit code ${code}, signal ${signal}: ${stderr.trim().split('\n').slice(-3).join(' / ')}`
      resolve({ lastStarted, finished, exit })
    })
  })
}

let root: string
let baseDir: string
beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: build with \`npx tsc -p .\` first`)
  root = mkdtempSync(join(tmpdir(), 'ad-fuzz-'))
  baseDir = (await writeTinyModel(join(root, 'base'), { family: 'qwen3', dtype: 'F32', seed: 11, layers: 2 })).dir
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('the fuzz harness', () => {
  it('counts an abort, a hang and an untyped error as failures, naming the case, and runs the cases after each', async () => {
    const abort = await fuzz('harness-abort', 6, baseDir)
    expect(abort.crashes).toHaveLength(1)
    expect(abort.crashes[0]).toContain('harness-abort case 3')
    expect(abort.crashes[0]).toContain('SIGABRT')
    expect(abort.accepted).toBe(5)
    const hang = await fuzz('harness-hang', 6, baseDir, 1_500)
    expect(hang.hangs).toEqual([`harness-hang case 3 (seed ${SEED}): hang (no progress for 1500 ms)`])
    expect(hang.accepted).toBe(5)
    const untyped = await fuzz('harness-untyped', 6, baseDir)
    expect(untyped.bad).toHaveLength(1)
    expect(untyped.bad[0]).toContain('TypeError: not one of ours')
    expect(untyped.accepted).toBe(5)
  })
})

describe('fuzz: hostile model folders end in a typed error or a well-formed load, never a crash or a hang', () => {
  const results: Array<[string, Tally]> = []
  afterAll(() => {
    const rows = results.map(([t, r]) => `${t.padEnd(12)} ${String(r.accepted + r.typed + r.bad.length + r.crashes.length + r.hangs.length).padStart(5)} cases  ${String(r.accepted).padStart(5)} accepted  ${String(r.typed).padStart(5)} typed  ${r.bad.length} untyped  ${r.crashes.length} crashes  ${r.hangs.length} hangs  ${(r.ms / 1000).toFixed(1)} s`)
    console.log(`fuzz (seed ${SEED}, scale ${SCALE}):\n${rows.join('\n')}`)
  })

  it.each(FUZZ_TARGETS)('%s', async (target, cases) => {
    const r = await fuzz(target, Math.round(cases * SCALE), baseDir)
    results.push([target, r])
    expect(r.crashes).toEqual([])
    expect(r.hangs).toEqual([])
    expect(r.bad).toEqual([])
    // the generators reach both sides: files that load and files that are refused
    expect(r.typed).toBeGreaterThan(0)
    if (target !== 'template') expect(r.accepted).toBeGreaterThan(0)
  }, 300_000)
})
