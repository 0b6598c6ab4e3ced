// J-Zero with role adapters (issue 19): the Challenger and the Solver each their own LoRA adapter on
// one shared base of the bundled policy, one trainer with a step clock per adapter; the Judge (the
// bundled toy reward model) stays its own model. (a) each role's generate calls go through its
// adapter; (b) every Challenger-stage step moves only the Challenger's adapter and every
// Solver-stage step only the Solver's (the base never); (c) checkpoint → resume → one more
// iteration equals the straight run bit for bit, the resumed adapters being the saved ones; and
// the config refuses role adapters without a LoRA rank, or with stages one optimizer step cannot share.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { ConfigError } from '../../src/engine/errors.js'
import type { GenerateOptions, Prompt } from '../../src/engine/model.js'
import { readSafetensorsHeader } from '../../src/engine/hf/safetensors.js'
import { nativeAddon } from '../../src/native.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { EnginePolicy, openPolicy, type OpenPolicy, type PolicyTrainer, type PolicyTrainerOptions } from '../../src/methods/common/policy.js'
import { RolePolicy } from '../../src/methods/common/role-adapters.js'
import type { TrainBatch } from '../../src/train/trainer.js'
import { resolveJzeroConfig, type JzeroConfig } from '../../src/methods/jzero/config.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { jzeroFlagsToOverride, spec } from '../../src/methods/jzero/spec.js'
import { DEFAULT_TOY_JUDGE_DIR } from '../../src/toymodel/judge.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { metrics, untimed } from './run-metrics.js'

const world = arithWorld()
const root = mkdtempSync(join(tmpdir(), 'ad-jzero-roles-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const adapterBytes = (modelDir: string) => Object.fromEntries(['challenger', 'solver'].map((n) => [n, readFileSync(join(modelDir, n, 'adapter_model.safetensors')).toString('base64')]))

describe('J-Zero role adapters: config and flag', () => {
  it('refuses roleAdapters without ppo.loraRank, and with Challenger and Solver settings one trainer cannot share (ConfigErrors naming the field)', () => {
    expect(() => resolveJzeroConfig({ roleAdapters: true })).toThrow(/roleAdapters.*ppo\.loraRank > 0/)
    expect(resolveJzeroConfig({}).roleAdapters).toBe(false)
    const ok = resolveJzeroConfig({ roleAdapters: true, ppo: { loraRank: 2 } })
    expect([ok.roleAdapters, ok.ppo.loraRank]).toEqual([true, 2])
    for (const [field, value] of [['lr', 1e-4], ['klCoef', 0.02], ['clipLow', 0.1], ['clipHigh', 0.3]] as const) {
      const e = (() => {
        try {
          resolveJzeroConfig({ roleAdapters: true, ppo: { loraRank: 2 }, solver: { [field]: value } })
        } catch (err) {
          return err
        }
      })()
      expect(e, field).toBeInstanceOf(ConfigError)
      expect((e as ConfigError).field).toBe(`solver.${field}`)
      expect((e as Error).message).toMatch(new RegExp(`solver\\.${field} \\(${value}\\) must equal challenger\\.${field}`))
      // without role adapters the stages keep their own settings (two trainers)
      expect(resolveJzeroConfig({ solver: { [field]: value } }).solver[field]).toBe(value)
    }
    expect(spec.flags?.['role-adapters']).toBe('number')
    expect(jzeroFlagsToOverride({ 'role-adapters': 3, 'frozen-judge': true })).toEqual({ switches: { trainJudge: false }, roleAdapters: true, ppo: { loraRank: 3 } })
    expect(jzeroFlagsToOverride({})).toBeUndefined()
  })
})

interface StepRecord {
  /** The adapters the batch's sequences name. */
  adapters: string[]
  /** The roles whose adapter tensors the step changed ('base' for any base weight). */
  moved: string[]
}

/**
 * An engine OpenPolicy that records each generate call's adapter choice, and, on the base with the
 * role adapters, which adapters each trainer step's batch names and which tensors it changed.
 */
function recordingEngine(): OpenPolicy & { calls: { policy: EnginePolicy; prompts: Prompt[]; adapter: unknown; n: number }[]; steps: StepRecord[] } {
  const calls: { policy: EnginePolicy; prompts: Prompt[]; adapter: unknown; n: number }[] = []
  const steps: StepRecord[] = []
  class Recording extends EnginePolicy {
    override generate(prompts: Prompt[], options?: GenerateOptions) {
      calls.push({ policy: this, prompts, adapter: options?.adapter, n: options?.n ?? 1 })
      return super.generate(prompts, options)
    }
    override async trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer> {
      const inner = await super.trainer(options)
      if (!this.adapterNames.includes('challenger')) return inner
      const train = (await nativeAddon()).train
      const snapshot = async () => new Map((await train.exportTensors(this.model.handle)).map((t) => [t.name, Array.from(t.data)]))
      const roleOf = (name: string) => /\.lora_[AB]\.(challenger|solver)\.weight$/.exec(name)?.[1] ?? 'base'
      return {
        get steps() {
          return inner.steps
        },
        async step(batch: TrainBatch) {
          const before = await snapshot()
          const m = await inner.step(batch)
          const after = await snapshot()
          const moved = [...after.keys()].filter((n) => after.get(n)!.some((x, i) => !Object.is(x, before.get(n)![i]))).map(roleOf)
          steps.push({ adapters: [...new Set((batch.sequences ?? []).map((s) => String(s.adapter)))].sort(), moved: [...new Set(moved)].sort() })
          return m
        },
        saveState: (dir: string) => inner.saveState(dir),
        loadState: (dir: string) => inner.loadState(dir),
      }
    }
  }
  const open = async (ref: Parameters<OpenPolicy>[0]) => new Recording(((await openPolicy(ref)) as EnginePolicy).model)
  return Object.assign(open, { calls, steps })
}

const haveModels = existsSync(join(DEFAULT_MODEL, 'model.safetensors')) && existsSync(join(DEFAULT_TOY_JUDGE_DIR, 'model.safetensors'))

describe.skipIf(!haveModels)('J-Zero role adapters on the bundled models', () => {
  // every stage, small: 1 Challenger step of 4 tasks, a pool of 6 → 3 kept, 1 Solver step, 2 Judge steps
  const small: JzeroConfig = resolveJzeroConfig({
    steps: 2,
    challenger: { steps: 1, batch: 4, rollouts: 1, solverSamples: 3, lr: 1e-3 },
    selection: { pool: 6, keep: 3, samples: 2 },
    solver: { steps: 1, batch: 3, miniBatch: 3, rollouts: 3, lr: 1e-3 },
    judge: { steps: 2, batch: 4, tasks: 6, lr: 1e-4 },
    ppo: { loraRank: 4, loraAlpha: 8 },
    eval: { every: 1, size: 4, benchmarks: [], judgePairs: 4 },
    checkpointEvery: 1,
    roleAdapters: true,
  })
  const driveOptions = (outDir: string, stop = false): DriveOptions => ({ outDir, method: 'jzero', totalSteps: small.steps, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', stopRequested: stop ? () => true : undefined })

  it("each role samples through its adapter; each stage's steps move only its role's adapter; resume is bit for bit", async () => {
    const train = (await nativeAddon()).train
    const open = recordingEngine()
    const straightDir = join(root, 'straight')
    const a = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, small, world, { threads: 2, openPolicy: open })
    expect(a.challenger).toBeInstanceOf(RolePolicy)
    const base = (a.challenger as RolePolicy).base as EnginePolicy
    expect((a.solver as RolePolicy).base).toBe(base)
    expect([...base.adapterNames].sort()).toEqual(['challenger', 'solver'])
    expect(a.judge).not.toBe(base) // the Judge: its own reward model
    await drive(a, driveOptions(straightDir))
    a.dispose()

    // (a) every sampling call on the base names a role's adapter; the Challenger's task prompts go through its own
    const onBase = open.calls.filter((c) => c.policy === base)
    expect(onBase.length).toBe(open.calls.length) // the Judge only scores
    for (const c of onBase) expect(['challenger', 'solver']).toContain(c.adapter)
    const taskCalls = onBase.filter((c) => c.prompts.every((p) => p === world.jzero.challengerPrompt(small.challenger.level)))
    expect(taskCalls.length).toBeGreaterThan(0)
    for (const c of taskCalls) expect(c.adapter).toBe('challenger')
    const solverCalls = onBase.filter((c) => c.adapter === 'solver')
    expect(solverCalls.length).toBeGreaterThan(0)
    // the Solver answers (tasks, subtasks), never writes tasks
    for (const c of solverCalls) expect(c.prompts.some((p) => p === world.jzero.challengerPrompt(small.challenger.level))).toBe(false)
    // its M answers per task (Eq. 4, Eq. 8) and its G rollouts (Eq. 9) are its own; only the Judge stage's one-shot role pairs ask the Challenger to answer
    const [x, y] = [world.jzero.solverPrompt('1+1'), world.jzero.solverPrompt('2*3')] as string[]
    const head = x.slice(0, [...x].findIndex((ch, i) => ch !== y[i]))
    const answering = onBase.filter((c) => c.n > 1 && c.prompts.every((p) => typeof p === 'string' && p.startsWith(head)))
    expect(new Set(answering.map((c) => c.n))).toEqual(new Set([small.challenger.solverSamples, small.selection.samples, small.solver.rollouts]))
    for (const c of answering) expect(c.adapter).toBe('solver')

    // (b) per iteration: one Challenger step moving only its adapter, then one Solver step moving only the Solver's
    expect(open.steps).toEqual([
      { adapters: ['challenger'], moved: ['challenger'] },
      { adapters: ['solver'], moved: ['solver'] },
      { adapters: ['challenger'], moved: ['challenger'] },
      { adapters: ['solver'], moved: ['solver'] },
    ])

    // (c) one iteration, checkpoint, resume, one more
    const splitDir = join(root, 'split')
    const b = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, small, world, { threads: 2 })
    expect((await drive(b, driveOptions(splitDir, true))).stoppedEarly).toBe(true)
    const saved = new Map((await train.exportTensors(((b.challenger as RolePolicy).base as EnginePolicy).model.handle)).map((t) => [t.name, Array.from(t.data)]))
    b.dispose()
    const ckpt = checkpointDir(splitDir, 1)
    for (const f of ['model', 'model-state', 'judge', 'judge-state']) expect(existsSync(join(ckpt, f)), f).toBe(true)
    expect(existsSync(join(ckpt, 'challenger')) || existsSync(join(ckpt, 'solver'))).toBe(false)
    const moments = (await readSafetensorsHeader(join(ckpt, 'model-state', 'optimizer.safetensors'))).tensors.map((t) => t.name)
    expect(moments.some((n) => n.includes('.challenger.')) && moments.some((n) => n.includes('.solver.'))).toBe(true)
    expect(moments.every((n) => /\.lora_[AB]\.(challenger|solver)\.weight::[mv]$/.test(n))).toBe(true)
    expect(JSON.parse(readFileSync(join(ckpt, 'model-state', 'trainer_state.json'), 'utf8'))).toMatchObject({ step: 2, adapterSteps: { challenger: 1, solver: 1 } })
    const r = await JzeroRun.resume(ckpt, world, { threads: 2 })
    expect(r.step).toBe(1)
    const resumed = new Map((await train.exportTensors(((r.challenger as RolePolicy).base as EnginePolicy).model.handle)).map((t) => [t.name, Array.from(t.data)]))
    expect([...resumed.keys()].sort()).toEqual([...saved.keys()].sort())
    for (const [name, data] of saved) if (name.includes('.lora_')) expect(resumed.get(name), name).toEqual(data)
    await drive(r, driveOptions(splitDir))
    r.dispose()
    expect(untimed(metrics(splitDir))).toEqual(untimed(metrics(straightDir)))
    expect(adapterBytes(join(checkpointDir(splitDir, 2), 'model'))).toEqual(adapterBytes(join(checkpointDir(straightDir, 2), 'model')))
    expect(readFileSync(join(checkpointDir(splitDir, 2), 'model-state', 'optimizer.safetensors'))).toEqual(readFileSync(join(checkpointDir(straightDir, 2), 'model-state', 'optimizer.safetensors')))
  }, 600_000)
})
