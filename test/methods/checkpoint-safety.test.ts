// Checkpoints and run folders under hostile input and faults (issue 23, findings 1 and 7): every
// corrupted or hostile latest.json / run_state.json / optimizer file is a typed error raised before
// anything is loaded or written; a short or NaN optimizer moment is refused naming the tensor (the
// engine repro included); interrupted checkpoints leave nothing that blocks the next one; old
// checkpoints are pruned to --keep; a torn last metrics line is repaired; latest.json is relative,
// so moved run folders resume; and at no moment is neither the old nor the new checkpoint on disk.
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { afterAll, describe, expect, it, vi } from 'vitest'
import { DEFAULT_MODEL, evolveCommand } from '../../src/cli/evolve.js'
import { AutodidactError, CheckpointError, OutputFileError } from '../../src/engine/errors.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { checkpointRun, OPTIMIZER_FILE, resumeRun, RUN_STATE_FILE } from '../../src/methods/common/checkpoint.js'
import { checkpointDir, drive } from '../../src/methods/common/driver.js'
import { LATEST_FILE, METRICS_FILE, readLatest } from '../../src/methods/common/run-folder.js'
import { scriptedPolicies, ScriptedPolicy } from '../../src/methods/common/scripted-policy.js'
import { resolveCoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { arithWorld as toyWorld } from '../../src/worlds/arith/index.js'
import { methodNamed } from '../../src/methods/index.js'
import { fileWriteError, writeFileAtomic } from '../../src/util/atomic.js'
import { arithScript } from './arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-ckpt-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const BASE = join(root, 'fake-base')
const arithWorld = toyWorld()
const open = scriptedPolicies({ script: arithScript() })
const config = resolveCoseConfig({ steps: 3, proposer: { count: 6, levels: [3], temperature: 1, maxTokens: 40 }, solver: { questions: 2, n: 2, temperature: 1, maxTokens: 64 }, eval: { every: 1, size: 4, benchmarks: [] }, checkpointEvery: 1 })
const driveTo = (outDir: string, totalSteps: number, keep?: number) => ({ outDir, method: 'cose', totalSteps, evalEvery: 1, checkpointEvery: 1, keep, series: [], describe: () => '' })

let serial = 0
/** A fresh run folder of the scripted COSE run, driven to `steps` (checkpoints at every step). */
async function runFolder(steps = 2, keep?: number): Promise<string> {
  const out = join(root, `run-${serial++}`)
  const run = await CoseRun.start(BASE, config, arithWorld, { openPolicy: open })
  await drive(run, driveTo(out, steps, keep))
  run.dispose()
  return out
}

/** Every file of a folder with its size and mtime: what "nothing was written" is checked against. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name)
      const st = statSync(p)
      if (st.isDirectory()) walk(p)
      else out[relative(dir, p)] = `${st.size}:${st.mtimeMs}`
    }
  }
  walk(dir)
  return out
}

/** Resumes the run folder's latest checkpoint as `evolve --resume` does. */
async function resumeFolder(out: string): Promise<CoseRun> {
  const latest = await readLatest(out, (n) => methodNamed(n) !== undefined)
  return CoseRun.resume(latest.checkpoint, arithWorld, { openPolicy: open })
}

/** The typed error of `p` (fails the test if `p` resolves or throws something untyped). */
async function typedError(p: Promise<unknown>): Promise<AutodidactError> {
  const e = await p.then(
    () => null,
    (x: unknown) => x,
  )
  expect(e).toBeInstanceOf(AutodidactError)
  return e as AutodidactError
}

/** Rewrites one tensor of a safetensors file. */
async function rewriteTensor(file: string, name: string, data: Float32Array): Promise<void> {
  const header = await readSafetensorsHeader(file)
  const tensors = await Promise.all(header.tensors.map(async (t) => ({ name: t.name, dtype: 'F32' as const, shape: t.name === name ? [data.length] : t.shape, data: t.name === name ? data : await readTensorFloat32(t) })))
  await writeSafetensors(file, tensors)
}

describe('optimizer moments are checked before anything is loaded (finding 1)', () => {
  it.each([
    ['a 1-element second moment', () => new Float32Array(1), /holds 1 values but its parameter/],
    ['a NaN in the second moment', () => Float32Array.from({ length: 256 }, (_, i) => (i === 7 ? NaN : 0)), /holds NaN at index 7/],
    ['an Inf in the second moment', () => Float32Array.from({ length: 256 }, (_, i) => (i === 3 ? Infinity : 0)), /holds Infinity at index 3/],
    ['a negative second moment', () => Float32Array.from({ length: 256 }, (_, i) => (i === 0 ? -1 : 0)), /< 0 at index 0/],
  ])('%s is a CheckpointError naming the tensor; no policy is opened', async (_, data, message) => {
    const out = await runFolder(1)
    const file = join(checkpointDir(out, 1), 'model-state', OPTIMIZER_FILE)
    await rewriteTensor(file, 'scripted.bias::v', data())
    const opened = open.policies.length
    const e = (await typedError(resumeFolder(out))) as CheckpointError
    expect(e).toBeInstanceOf(CheckpointError)
    expect(e.reason).toBe('moment')
    expect(e.field).toBe('scripted.bias::v')
    expect(e.message).toMatch(message)
    expect(open.policies.length).toBe(opened)
  })

  it('a moment of no parameter, a missing second moment, a moment that is not F32-named are refused', async () => {
    const out = await runFolder(1)
    const file = join(checkpointDir(out, 1), 'model-state', OPTIMIZER_FILE)
    const m = await readTensorFloat32((await readSafetensorsHeader(file)).tensors.find((t) => t.name === 'scripted.bias::m')!)
    await writeSafetensors(file, [{ name: 'scripted.bias::m', dtype: 'F32', shape: [m.length], data: m }])
    expect((await typedError(resumeFolder(out))).message).toMatch(/only its m moment/)
    await writeSafetensors(file, [{ name: 'model.embed_tokens.weight::m', dtype: 'F32', shape: [1], data: new Float32Array(1) }])
    expect((await typedError(resumeFolder(out))).message).toMatch(/belongs to no parameter/)
    await writeSafetensors(file, [{ name: 'scripted.bias', dtype: 'F32', shape: [1], data: new Float32Array(1) }])
    expect((await typedError(resumeFolder(out))).message).toMatch(/PARAMETER::m or PARAMETER::v/)
    writeFileSync(file, 'not a safetensors file')
    await typedError(resumeFolder(out))
  })

  it.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('the engine repro: evolve --method cose, a 1-element model.embed_tokens.weight::v, resume → typed error, no crash', async () => {
    const out = join(root, 'engine-run')
    const cfg = join(root, 'tiny-cose.json')
    writeFileSync(cfg, JSON.stringify({ proposer: { count: 4, levels: [3], temperature: 1, maxTokens: 32 }, solver: { questions: 2, n: 2, temperature: 1, maxTokens: 48 }, eval: { every: 1, size: 4, benchmarks: [] } }))
    const log = vi.spyOn(console, 'log').mockImplementation(() => {})
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
    try {
      expect(await evolveCommand(['--method', 'cose', '--steps', '1', '--config', cfg, '--out', out, '--threads', '1'])).toBe(0)
      const file = join(checkpointDir(out, 1), 'model-state', OPTIMIZER_FILE)
      const names = (await readSafetensorsHeader(file)).tensors.map((t) => t.name)
      expect(names).toContain('model.embed_tokens.weight::v')
      await rewriteTensor(file, 'model.embed_tokens.weight::v', new Float32Array(1))
      const before = snapshot(out)
      const e = (await typedError(evolveCommand(['--resume', out, '--steps', '2', '--threads', '1']))) as CheckpointError
      expect(e.field).toBe('model.embed_tokens.weight::v')
      expect(snapshot(out)).toEqual(before) // nothing written or truncated
    } finally {
      log.mockRestore()
      err.mockRestore()
    }
  }, 120_000)
})

describe('hostile run files are typed errors, raised before anything is written (finding 7)', () => {
  const latest = (out: string) => join(out, LATEST_FILE)
  const state = (out: string, step = 2) => join(checkpointDir(out, step), RUN_STATE_FILE)
  const edit = (file: string, f: (j: Record<string, unknown>) => unknown) => writeFileSync(file, JSON.stringify(f(JSON.parse(readFileSync(file, 'utf8')))))

  it.each<[string, (out: string) => void, RegExp]>([
    ['"method": "__proto__" in latest.json', (o) => edit(latest(o), (j) => ({ ...j, method: '__proto__' })), /unknown method "__proto__"/],
    ['"method": "toString" in latest.json', (o) => edit(latest(o), (j) => ({ ...j, method: 'toString' })), /unknown method "toString"/],
    ['latest.json not JSON', (o) => writeFileSync(latest(o), '{"method": "cose", "st'), /not valid JSON/],
    ['latest.json an array', (o) => writeFileSync(latest(o), '[1, 2]'), /expected a JSON object/],
    ['latest.json a negative step', (o) => edit(latest(o), (j) => ({ ...j, step: -3 })), /step must be an integer/],
    ['latest.json pointing outside the run folder', (o) => edit(latest(o), (j) => ({ ...j, checkpoint: '../../etc' })), /not a checkpoint folder of this run/],
    ['latest.json without a checkpoint', (o) => edit(latest(o), (j) => ({ ...j, checkpoint: 7 })), /checkpoint must be a path/],
    ['latest.json naming a missing checkpoint', (o) => edit(latest(o), (j) => ({ ...j, checkpoint: 'checkpoints/step-000099' })), /no such checkpoint folder/],
    ['run_state.json with step −3', (o) => edit(state(o), (j) => ({ ...j, step: -3 })), /step must be an integer in \[0, /],
    ['run_state.json with step 1e12', (o) => edit(state(o), (j) => ({ ...j, step: 1e12 })), /step must be an integer in \[0, /],
    ['run_state.json with step "2"', (o) => edit(state(o), (j) => ({ ...j, step: '2' })), /step must be an integer/],
    ['run_state.json of another method', (o) => edit(state(o), (j) => ({ ...j, format: 'autodidact.ttrl.run' })), /not a checkpoint of this method/],
    ['run_state.json of a future version', (o) => edit(state(o), (j) => ({ ...j, version: 9 })), /version 9/],
    ['a checkpoint of the earlier layout (version 1)', (o) => edit(state(o), (j) => ({ ...j, version: 1 })), /layout version 1; this version of autodidact reads layout 2/],
    ['run_state.json with an all-zero RNG', (o) => edit(state(o), (j) => ({ ...j, rng: [0, 0, 0, 0] })), /rng is not a generator state/],
    ['run_state.json with a bad config', (o) => edit(state(o), (j) => ({ ...j, config: { ...(j.config as object), solver: { n: 'four' } } })), /solver\.n: expected a number/],
    ['run_state.json with no base model', (o) => edit(state(o), (j) => ({ ...j, baseModel: null })), /baseModel must be a folder path/],
    ['run_state.json truncated', (o) => writeFileSync(state(o), '{"format": "autodidact.cose'), /not valid JSON/],
    ['run_state.json missing', (o) => rmSync(state(o)), /no such checkpoint folder|cannot read it/],
    ['trainer_state.json with a negative step', (o) => edit(join(checkpointDir(o, 2), 'model-state', 'trainer_state.json'), (j) => ({ ...j, step: -1 })), /step must be an integer/],
    ['trainer_state.json missing', (o) => rmSync(join(checkpointDir(o, 2), 'model-state', 'trainer_state.json')), /cannot read it/],
    ['the replay buffer corrupted', (o) => writeFileSync(join(checkpointDir(o, 2), 'replay.json'), '{"format": "autodidact.replay", "version": 1}'), /invalid replay snapshot/],
    ['the replay buffer missing', (o) => rmSync(join(checkpointDir(o, 2), 'replay.json')), /cannot read it/],
  ])('%s', async (_, corrupt, message) => {
    const out = await runFolder(2)
    corrupt(out)
    const before = snapshot(out)
    const opened = open.policies.length
    const e = await typedError(resumeFolder(out))
    expect(e.message).toMatch(message)
    expect(open.policies.length).toBe(opened) // no policy opened
    expect(snapshot(out)).toEqual(before) // nothing written, nothing truncated
  })
})

describe('run folder housekeeping (finding 7)', () => {
  it('leftover step-N.tmp-PID / .old-PID folders of dead processes are removed on the next checkpoint and on resume', async () => {
    const out = await runFolder(1)
    const ckpts = join(out, 'checkpoints')
    for (const name of ['step-000002.tmp-999999999', 'step-000001.old-999999999']) {
      mkdirSync(join(ckpts, name))
      writeFileSync(join(ckpts, name, 'junk'), 'x'.repeat(1000))
    }
    const resumed = await resumeFolder(out)
    expect(readdirSync(ckpts).sort()).toEqual(['step-000001'])
    mkdirSync(join(ckpts, 'step-000002.tmp-999999998'))
    await drive(resumed, driveTo(out, 2))
    resumed.dispose()
    expect(readdirSync(ckpts).sort()).toEqual(['step-000001', 'step-000002'])
  })

  it('checkpoints are pruned to keep N; the one latest.json names and the best evaluated one are never pruned', async () => {
    // the best evaluated checkpoint (earliest of the highest held-out accuracy) is the collapse guard's rollback target
    const withBest = (run: string, newest: string[]) => {
      const rows = readFileSync(join(run, METRICS_FILE), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { step: number; heldOutAccuracy?: number })
      const evaluated = rows.filter((r) => r.step > 0 && typeof r.heldOutAccuracy === 'number')
      const best = evaluated.reduce((b, r) => (r.heldOutAccuracy! > b.heldOutAccuracy! ? r : b), evaluated[0])
      return [...new Set([...newest, `step-${String(best.step).padStart(6, '0')}`])].sort()
    }
    const out = await runFolder(3, 2)
    expect(readdirSync(join(out, 'checkpoints')).sort()).toEqual(withBest(out, ['step-000002', 'step-000003']))
    const one = await runFolder(3, 1)
    expect(readdirSync(join(one, 'checkpoints')).sort()).toEqual(withBest(one, ['step-000003']))
    expect(JSON.parse(readFileSync(join(one, LATEST_FILE), 'utf8'))).toEqual({ method: 'cose', step: 3, checkpoint: 'checkpoints/step-000003' })
    await expect(drive({} as never, driveTo(one, 3, 0))).rejects.toThrow(/keep must be an integer ≥ 1/)
  })

  it('a torn last line of metrics.jsonl is cut back to the last whole line; a corrupt earlier line is a typed error', async () => {
    const out = await runFolder(2)
    const file = join(out, METRICS_FILE)
    const whole = readFileSync(file, 'utf8')
    writeFileSync(file, whole + '{"step": 3, "rewardSol')
    const resumed = await resumeFolder(out)
    await drive(resumed, driveTo(out, 3))
    resumed.dispose()
    const rows = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number })
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2, 3])
    const lines = readFileSync(file, 'utf8').split('\n')
    writeFileSync(file, [lines[0], '{oops', ...lines.slice(1)].join('\n'))
    const again = await resumeFolder(out)
    const e = (await typedError(drive(again, driveTo(out, 4)))) as CheckpointError
    again.dispose()
    expect(e.reason).toBe('metrics')
    expect(e.message).toMatch(/line 2 is not valid JSON/)
  })

  it('latest.json is relative: a moved or copied run folder resumes from its own checkpoints', async () => {
    const out = await runFolder(2)
    const moved = join(root, `moved-${serial++}`)
    renameSync(out, moved)
    const copy = join(root, `copy-${serial++}`)
    cpSync(moved, copy, { recursive: true })
    for (const dir of [moved, copy]) {
      const latest = await readLatest(dir, (n) => methodNamed(n) !== undefined)
      expect(latest.checkpoint).toBe(checkpointDir(dir, 2))
      const run = await resumeFolder(dir)
      await drive(run, driveTo(dir, 3))
      run.dispose()
      expect(readdirSync(join(dir, 'checkpoints'))).toContain('step-000003')
    }
    // a run folder written with an absolute path (before this version), then moved
    const old = await runFolder(1)
    writeFileSync(join(old, LATEST_FILE), JSON.stringify({ method: 'cose', step: 1, checkpoint: join('/somewhere/else', 'checkpoints', 'step-000001') }))
    expect((await readLatest(old, () => true)).checkpoint).toBe(checkpointDir(old, 1))
  })

  it('a full disk while checkpointing: a OutputFileError naming the file, the previous checkpoint intact, no temporary left', async () => {
    const out = await runFolder(1)
    const before = snapshot(join(out, 'checkpoints'))
    const failing = scriptedPolicies({ script: arithScript() })
    const run = await CoseRun.resume(checkpointDir(out, 1), arithWorld, { openPolicy: failing })
    const policy = failing.policies.find((p) => p.trainerOf)!
    vi.spyOn(policy, 'save').mockImplementation(async (dir: string) => {
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', path: join(dir, 'model.safetensors') })
    })
    const e = (await typedError(drive(run, driveTo(out, 2)))) as OutputFileError
    run.dispose()
    expect(e).toBeInstanceOf(OutputFileError)
    expect(e.errno).toBe('ENOSPC')
    expect(e.file).toMatch(/step-000002\.tmp-\d+[/\\]model[/\\]model\.safetensors$/)
    expect(e.message).toMatch(/no space left on the device \(ENOSPC\)/)
    expect(snapshot(join(out, 'checkpoints'))).toEqual(before)
    expect(JSON.parse(readFileSync(join(out, LATEST_FILE), 'utf8')).step).toBe(1)
  })

  it('system errors of a write name the file (EACCES, ENOSPC, a missing folder)', async () => {
    const eacces = fileWriteError(Object.assign(new Error('EACCES: permission denied, open'), { code: 'EACCES' }), '/x/run_state.json')
    expect(eacces).toBeInstanceOf(OutputFileError)
    expect(eacces.message).toBe('cannot write /x/run_state.json: permission denied (EACCES)')
    const e = await typedError(writeFileAtomic(join(root, 'no-such-folder', 'f.json'), '{}'))
    expect((e as OutputFileError).file).toBe(join(root, 'no-such-folder', 'f.json'))
    expect((e as OutputFileError).errno).toBe('ENOENT')
  })
})

describe('no moment without a complete checkpoint on disk', () => {
  it('replacing a checkpoint keeps the old one until the new one is in place; an interrupted replacement is recovered on resume', async () => {
    const out = await runFolder(1)
    const dir = checkpointDir(out, 1)
    const state = JSON.parse(readFileSync(join(dir, RUN_STATE_FILE), 'utf8'))
    const policy = new ScriptedPolicy(join(root, 'p'), { script: () => '' })
    const seen: boolean[] = []
    const spy = vi.spyOn(policy, 'save').mockImplementation(async function (this: ScriptedPolicy, d: string) {
      seen.push(existsSync(join(dir, RUN_STATE_FILE))) // the old checkpoint, complete, while the new one is written
      return ScriptedPolicy.prototype.save.call(policy, d)
    })
    await checkpointRun(dir, { state: { ...state, marker: 'new' }, roles: [{ name: 'model', policy, trainer: null }] })
    spy.mockRestore()
    expect(seen).toEqual([true])
    expect(JSON.parse(readFileSync(join(dir, RUN_STATE_FILE), 'utf8')).marker).toBe('new')
    expect(readdirSync(join(out, 'checkpoints'))).toEqual(['step-000001'])

    // killed between "old renamed aside" and "new renamed in": both complete, neither under the name
    const parent = join(out, 'checkpoints')
    cpSync(dir, join(parent, 'step-000001.old-999999999'), { recursive: true })
    writeFileSync(join(parent, 'step-000001.old-999999999', RUN_STATE_FILE), JSON.stringify({ ...state, marker: 'old' }))
    renameSync(dir, join(parent, 'step-000001.tmp-999999999'))
    const resumed = await resumeRun(dir, { format: 'autodidact.cose.run', parse: (s) => s, roles: () => [] })
    expect(resumed.state).toMatchObject({ marker: 'new' }) // the complete new one was brought back
    expect(readdirSync(parent)).toEqual(['step-000001'])
  })
})
