// Progress output: a line updated in place only on a terminal, one line per step otherwise (never
// a \r in a log), one JSON object per event with --json; the driver's step line shows tok/s only
// for steps that generated tokens, and names the phases before and inside a step.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { Progress, progressMode, type TextSink } from '../../src/cli/progress.js'
import { drive, type DriveEvent } from '../../src/methods/common/driver.js'
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from '../../src/methods/common/run.js'

const root = mkdtempSync(join(tmpdir(), 'ad-progress-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

function sink(isTTY = false, columns?: number): TextSink & { text: string } {
  const s = { text: '', isTTY, columns, write: (t: string) => ((s.text += t), true) }
  return s
}

const step = (n: number, line: string): DriveEvent => ({ event: 'step', step: n, totalSteps: 2, line, etaSeconds: 1, record: { step: n, seconds: 1, generatedTokens: 0 } })
const phase = (kind: 'setup' | 'step' | 'evaluate' | 'checkpoint' | 'report', text: string): DriveEvent => ({ event: 'phase', kind, phase: text, step: 0, totalSteps: 2 })

/** A method run that counts steps; its records are what `generated` says, its accuracy fixed. */
function countingRun(generated: number): MethodRun<BaseMethodConfig, BaseStepRecord> {
  let s = 0
  return {
    config: { seed: 0, steps: 2, eval: { every: 1 }, checkpointEvery: 1 },
    get step() {
      return s
    },
    runStep: async () => ({ step: ++s, seconds: 0.5, generatedTokens: generated }),
    evaluate: async () => 0.5,
    checkpoint: async () => {},
    dispose: () => {},
  }
}

describe('progress output', () => {
  it('picks json with --json, else tty only when stderr is a terminal', () => {
    expect(progressMode(true, sink(true))).toBe('json')
    expect(progressMode(false, sink(true))).toBe('tty')
    expect(progressMode(false, sink(false))).toBe('plain')
  })

  it('plain: one line per step and per slow phase, no carriage return, the per-step phases left out', () => {
    const err = sink()
    const out = sink()
    const p = new Progress('plain', 'cose', err, out)
    for (const e of [phase('setup', 'loading the model'), phase('evaluate', 'evaluating the base model'), phase('step', 'step 1/2 running'), step(1, 'LINE1'), phase('checkpoint', 'checkpointing step 1'), step(2, 'LINE2')]) p.event(e)
    p.result({ ok: true }, ['done'])
    expect(err.text).not.toContain('\r')
    expect(err.text.split('\n')).toEqual(['[cose] loading the model…', '[cose] evaluating the base model…', 'LINE1', 'LINE2', ''])
    expect(out.text).toBe('done\n')
  })

  it('tty: the line is cleared and rewritten in place, cut to the terminal width, ended before a lasting message', () => {
    const err = sink(true, 40)
    const p = new Progress('tty', 'cose', err, sink())
    p.event(phase('step', 'step 1/2 running'))
    p.event(step(1, 'x'.repeat(100)))
    p.event(phase('step', 'step 2/2 running'))
    p.message('Ctrl-C: stopping')
    p.close()
    const writes = err.text.split('\r\x1b[2K').filter(Boolean)
    expect(writes[0]).toBe('[cose] step 1/2 running…')
    expect(writes[1]).toBe('x'.repeat(38) + '…') // 39 columns: never wraps
    expect(writes[2].startsWith('[cose] step 2/2 running… · last: ')).toBe(true) // the finished step's numbers stay in view
    expect(err.text.endsWith('\nCtrl-C: stopping\n')).toBe(true)
  })

  it('json: one object per event on stdout, stderr silent', () => {
    const err = sink()
    const out = sink()
    const p = new Progress('json', 'dpo', err, out)
    p.setup('loading the model')
    p.event(step(1, 'L'))
    p.log('pool built')
    p.result({ stepsRun: 1 }, ['not printed'])
    const events = out.text.trim().split('\n').map((l) => JSON.parse(l) as { event: string; method: string })
    expect(events.map((e) => e.event)).toEqual(['phase', 'step', 'log', 'result'])
    expect(events.every((e) => e.method === 'dpo')).toBe(true)
    expect(events[1]).toMatchObject({ step: 1, record: { step: 1, generatedTokens: 0 } })
    expect(err.text).toBe('')
  })
})

describe('the driver\'s step line and phases', () => {
  const events = async (generated: number, name: string) => {
    const seen: DriveEvent[] = []
    await drive(countingRun(generated), { outDir: join(root, name), method: name, totalSteps: 2, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => 'signals', onEvent: (e) => seen.push(e) })
    return seen
  }

  it('tok/s for a step that generated tokens; seconds per step for one that did not (dpo, wsft)', async () => {
    const sampling = (await events(100, 'sampling')).filter((e) => e.event === 'step').map((e) => (e as { line: string }).line)
    expect(sampling[0]).toMatch(/^\[sampling\] step 1\/2 █+░+ signals held-out 0\.500 200 tok\/s ETA /)
    const training = (await events(0, 'training')).filter((e) => e.event === 'step').map((e) => (e as { line: string }).line)
    expect(training[0]).toMatch(/ signals held-out 0\.500 0\.5 s\/step ETA /)
    expect(training.join('\n')).not.toContain('tok/s')
  })

  it('names each phase before it starts: the base evaluation first, then each step, its evaluation and checkpoint, then the report', async () => {
    const seen = await events(0, 'phases')
    expect(seen.map((e) => (e.event === 'phase' ? `${e.kind}: ${e.phase}` : e.event))).toEqual([
      'evaluate: evaluating the base model on the held-out questions',
      'step: step 1/2 running',
      'evaluate: evaluating step 1 on the held-out questions',
      'checkpoint: checkpointing step 1',
      'step',
      'step: step 2/2 running',
      'evaluate: evaluating step 2 on the held-out questions',
      'checkpoint: checkpointing step 2',
      'step',
      'report: writing the report',
    ])
    expect(readFileSync(join(root, 'phases', 'report.html'), 'utf8')).toContain('2 of 2 steps')
  })
})
