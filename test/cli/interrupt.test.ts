// `autodidact evolve` as a user runs it, in a child process (dist/, built by tsc): --json gives
// one JSON object per event on stdout from the first moment; without a terminal stderr has one
// line per step and no \r; Ctrl-C (SIGINT) after the first step finishes and checkpoints it,
// writes the report and prints the exact --resume command, which then completes the run; a second
// Ctrl-C exits at once and the run folder still resumes (checkpoints are renamed into place whole).
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'cli', 'main.js')
const root = mkdtempSync(join(tmpdir(), 'ad-interrupt-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const config = join(root, 'cose.json')
writeFileSync(config, JSON.stringify({ proposer: { count: 4, levels: [3], temperature: 1, maxTokens: 32 }, solver: { questions: 2, n: 2, temperature: 1, maxTokens: 48 }, eval: { every: 1, size: 4, benchmarks: [] }, checkpointEvery: 1 }))

interface Exit {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs the CLI; `onStderr` sees stderr as it grows and may signal the child. */
function evolve(args: string[], onStderr?: (text: string, signal: (s: NodeJS.Signals) => void) => void): Promise<Exit> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [CLI, 'evolve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString()
      onStderr?.(stderr, (s) => child.kill(s))
    })
    child.on('error', fail)
    child.on('close', (code) => done({ code, stdout, stderr }))
  })
}

/** A cose run of `steps` steps sent `signals` SIGINTs (50 ms apart) once its first step's line is out. */
async function interruptedAfterFirstStep(run: string, steps: number, signals: number): Promise<Exit> {
  let sent = false
  const r = await evolve(['--method', 'cose', '--config', config, '--steps', String(steps), '--out', run, '--threads', '1'], (text, signal) => {
    if (sent || !text.includes(`step 1/${steps} `)) return
    sent = true
    for (let i = 0; i < signals; i++) setTimeout(() => signal('SIGINT'), 50 * i)
  })
  expect(sent).toBe(true)
  return r
}

const latestStep = (run: string) => (JSON.parse(readFileSync(join(run, 'latest.json'), 'utf8')) as { step: number }).step

describe.skipIf(!existsSync(CLI))('evolve in a child process', () => {
  it('--json: one JSON object per event on stdout, the first a set-up phase, the last the result', async () => {
    const run = join(root, 'json')
    const r = await evolve(['--method', 'cose', '--config', config, '--steps', '1', '--out', run, '--threads', '1', '--json'])
    expect(r.code, r.stderr).toBe(0)
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { event: string; kind?: string; report?: string })
    expect(events[0]).toMatchObject({ event: 'phase', kind: 'setup' })
    expect(events.filter((e) => e.event === 'step')).toHaveLength(1)
    expect(events.at(-1)).toMatchObject({ event: 'result', stepsRun: 1, stopReason: null })
    expect(r.stderr).toBe('')
    // the report the driver wrote: n and intervals from the eval files, the protocol, the trained model that serve loads
    const report = readFileSync(events.at(-1)!.report!, 'utf8')
    const model = join(run, 'checkpoints', 'step-000001', 'model')
    expect(existsSync(join(model, 'config.json'))).toBe(true)
    expect(report).toContain(`npx autodidact serve --model ${model}`)
    expect(report).toMatch(/step 0: n = \d+ questions, 95% CI \d\.\d{3}–\d\.\d{3} \(bootstrap over questions\)/)
    expect(report).toContain('greedy decoding, 1 response per question')
    expect(report).toMatch(/change [−+±]\d\.\d{3} \(paired over the same \d+ questions/)
  }, 120_000)

  it('Ctrl-C after the first step: checkpointed, report written, the printed resume command completes the run', async () => {
    const run = join(root, 'sigint')
    const r = await interruptedAfterFirstStep(run, 3, 1)
    expect(r.code, r.stderr).toBe(130)
    expect(r.stderr).not.toContain('\r') // stderr is a pipe: plain lines
    expect(r.stderr).toContain('Ctrl-C: finishing this step')
    const stopped = latestStep(run)
    expect(stopped).toBeGreaterThanOrEqual(1)
    expect(stopped).toBeLessThan(3)
    expect(readFileSync(join(run, 'report.html'), 'utf8')).toContain(`stopped early at step ${stopped} of 3; resume with: autodidact evolve --resume ${run}`)
    const line = r.stdout.split('\n').find((l) => l.startsWith('resume with: '))
    expect(line).toBe(`resume with: autodidact evolve --resume ${run} --threads 1`) // the options the run needs again (world, config: from its checkpoint)
    const [command, ...args] = line!.slice('resume with: '.length).split(' ')
    expect(command).toBe('autodidact')
    const resumed = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' })
    expect(resumed.status, resumed.stderr).toBe(0)
    expect(latestStep(run)).toBe(3)
  }, 180_000)

  it('a second Ctrl-C exits at once; the run folder still resumes and no half-written checkpoint is left', async () => {
    const run = join(root, 'twice')
    const r = await interruptedAfterFirstStep(run, 4, 2)
    expect(r.code).toBe(130)
    expect(r.stdout).not.toContain('resume with:') // it did not wait for the step
    const resumed = spawnSync(process.execPath, [CLI, 'evolve', '--resume', run, '--threads', '1'], { encoding: 'utf8' })
    expect(resumed.status, resumed.stderr).toBe(0)
    expect(latestStep(run)).toBe(4)
    expect(readdirSync(join(run, 'checkpoints')).filter((n) => /\.(tmp|old)-/.test(n))).toEqual([])
  }, 180_000)
})
