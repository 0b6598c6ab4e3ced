// COSE with role adapters (issue 19): the Proposer, the Solver (with the Validator) and the Judge
// each run through their own LoRA adapter on one shared base. On the scripted fake (no engine)
// and on the bundled model: every role's calls carry its adapter, one optimizer step moves only
// the trained roles' adapters (Proposer by r_P, Solver by r_S; the Judge's and the base stay
// bit for bit), and checkpoint → resume → more steps equals the uninterrupted run bit for bit.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { CheckpointError, ConfigError, InvalidArgumentError } from '../../src/engine/errors.js'
import type { GenerateOptions, Prompt } from '../../src/engine/model.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { nativeAddon } from '../../src/native.js'
import { checkpointDir, drive } from '../../src/methods/common/driver.js'
import { EnginePolicy, openPolicy, type OpenPolicy } from '../../src/methods/common/policy.js'
import { ScriptedPolicy, scriptedPolicies, type ScriptedTrainer } from '../../src/methods/common/scripted-policy.js'
import { resolveCoseConfig, type CoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { coseFlagsToOverride } from '../../src/methods/cose/spec.js'
import { trainedModelIn } from '../../src/methods/common/report-input.js'
import { arithWorld as toyWorld } from '../../src/worlds/arith/index.js'
import { arithScript } from './arith-script.js'
import { metrics, untimed } from './run-metrics.js'

const root = mkdtempSync(join(tmpdir(), 'ad-roles-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const arithWorld = toyWorld()
const BASE = join(root, 'no-such-base-model')

const text = (ids: readonly number[]) => Buffer.from(ids.filter((t) => t !== 0)).toString('utf8')
const driveOptions = (outDir: string, steps: number, stop = false) => ({ outDir, method: 'cose', totalSteps: steps, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', stopRequested: stop ? () => true : undefined })

/** The bytes of every adapter file of a saved role folder, by adapter: what a bit-for-bit comparison reads. */
function adapterBytes(modelDir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of ['proposer', 'solver', 'judge']) out[name] = readFileSync(join(modelDir, name, 'adapter_model.safetensors')).toString('base64')
  return out
}

describe('COSE role adapters on the scripted policy', () => {
  const config = resolveCoseConfig({
    steps: 2,
    roleAdapters: true,
    proposer: { count: 10, levels: [2, 3], temperature: 1, maxTokens: 40 },
    solver: { questions: 3, n: 4, temperature: 1, maxTokens: 64 },
    eval: { every: 1, size: 6, benchmarks: [] },
    checkpointEvery: 1,
    ppo: { loraRank: 2, loraAlpha: 4 },
  })
  const script = { script: arithScript({ solveRate: 0.5, malformedRate: 0.2 }) }

  it('refuses role adapters without a LoRA rank (a ConfigError naming the field)', () => {
    expect(() => resolveCoseConfig({ roleAdapters: true, ppo: { loraRank: 0 } })).toThrow(ConfigError)
    expect(() => resolveCoseConfig({ roleAdapters: true, ppo: { loraRank: 0 } })).toThrow(/roleAdapters.*ppo\.loraRank > 0/)
    expect(resolveCoseConfig({}).roleAdapters).toBe(false)
  })

  it("each role's calls and training sequences carry its adapter; one step moves only the Proposer's and Solver's", async () => {
    const open = scriptedPolicies(script)
    const run = await CoseRun.start(BASE, config, arithWorld, { openPolicy: open })
    expect(open.policies).toHaveLength(1) // one base for every role; KL against it with the adapters off, no frozen copy
    const [policy] = open.policies
    expect([...policy.adapterNames].sort()).toEqual(['judge', 'proposer', 'solver'])
    const trainer = policy.trainerOf as ScriptedTrainer
    expect([...trainer.trained]).toEqual(['proposer', 'solver'])
    expect(trainer.options.reference).toBe('lora-off')
    const before = new Map([...policy.weights.adapters].map(([n, a]) => [n, Float32Array.from(a.b)]))
    const bias = Float32Array.from(policy.weights.bias)

    const r = await run.runStep()
    expect(r.train?.skipped).toBe(false)
    const [proposed, verdicts, answers, judged] = policy.calls
    expect(proposed.prompts.every((p) => p.startsWith('Propose'))).toBe(true)
    expect(proposed.adapters).toEqual(proposed.prompts.map(() => 'proposer'))
    expect(verdicts.prompts.every((p) => p.startsWith('Rate problem: '))).toBe(true)
    expect(verdicts.adapters).toEqual(verdicts.prompts.map(() => 'solver')) // the Validator is the Solver's role model
    expect(answers.prompts.every((p) => p.startsWith('Solve: '))).toBe(true)
    expect(answers.adapters).toEqual(answers.prompts.map(() => 'solver'))
    expect(judged.prompts.every((p) => p.startsWith('Judge: '))).toBe(true)
    expect(judged.adapters).toEqual(judged.prompts.map(() => 'judge'))
    expect(judged.prompts.length).toBeGreaterThan(0)

    // the one batch: proposals through 'proposer' (r_P), answers through 'solver' (r_S)
    const [batch] = trainer.batches
    const seqs = batch.sequences ?? []
    const proposals = seqs.filter((s) => text(s.prompt).startsWith('Propose'))
    const solved = seqs.filter((s) => text(s.prompt).startsWith('Solve: '))
    expect(proposals.length + solved.length).toBe(seqs.length)
    expect(proposals.length).toBeGreaterThan(0)
    expect(solved.length).toBe(r.questionsSolved * 4)
    for (const s of proposals) expect(s.adapter).toBe('proposer')
    for (const s of solved) expect(s.adapter).toBe('solver')

    // only the trained roles' adapters moved; the Judge's and the base did not
    const after = policy.weights.adapters
    expect(Array.from(after.get('proposer')!.b)).not.toEqual(Array.from(before.get('proposer')!))
    expect(Array.from(after.get('solver')!.b)).not.toEqual(Array.from(before.get('solver')!))
    expect(Array.from(after.get('judge')!.b)).toEqual(Array.from(before.get('judge')!))
    expect(Array.from(policy.weights.bias)).toEqual(Array.from(bias))
    // and each moved only on its own role's tokens: a byte only Solver answers use moved the Solver's B alone
    const tokensOf = (xs: typeof seqs) => new Set(xs.flatMap((s) => s.completion))
    const onlySolver = [...tokensOf(solved)].filter((t) => !tokensOf(proposals).has(t))
    expect(onlySolver.length).toBeGreaterThan(0)
    for (const t of onlySolver) {
      expect(after.get('proposer')!.b[t]).toBe(before.get('proposer')![t])
      expect(after.get('solver')!.b[t]).not.toBe(before.get('solver')![t])
    }
    // the held-out evaluation is the Solver's: greedy answers through its adapter, as an outside evaluation of run.solver's
    const calls = policy.calls.length
    await run.evaluate()
    await run.solver.generate(['Solve: 1+1'], { n: 1 })
    const evals = policy.calls.slice(calls)
    expect(evals.length).toBeGreaterThan(1)
    for (const e of evals) {
      expect(e.prompts.every((p) => p.startsWith('Solve: '))).toBe(true)
      expect(e.adapters).toEqual(e.prompts.map(() => 'solver'))
    }
    run.dispose()
    expect(policy.isDisposed).toBe(true)
  })

  it('checkpoints every adapter and the trained ones\' moments, and resumes exactly', async () => {
    const open = scriptedPolicies(script)
    const straightDir = join(root, 'scripted-straight')
    const a = await CoseRun.start(BASE, config, arithWorld, { openPolicy: open })
    await drive(a, driveOptions(straightDir, 2))
    a.dispose()
    const splitDir = join(root, 'scripted-split')
    const b = await CoseRun.start(BASE, config, arithWorld, { openPolicy: open })
    expect((await drive(b, driveOptions(splitDir, 2, true))).stoppedEarly).toBe(true)
    b.dispose()
    const ckpt = checkpointDir(splitDir, 1)
    for (const name of ['proposer', 'solver', 'judge']) expect(existsSync(join(ckpt, 'model', name, 'adapter_config.json'))).toBe(true)
    // the run's trained model (the report's, a rollback's) is the Solver's adapter
    expect(trainedModelIn(ckpt)).toEqual({ dir: join(ckpt, 'model', 'solver'), kind: 'adapter' })
    const moments = (await readSafetensorsHeader(join(ckpt, 'model-state', 'optimizer.safetensors'))).tensors.map((t) => t.name).sort()
    expect(moments).toEqual(['scripted.lora_B.proposer.weight::m', 'scripted.lora_B.proposer.weight::v', 'scripted.lora_B.solver.weight::m', 'scripted.lora_B.solver.weight::v'])
    const c = await CoseRun.resume(ckpt, arithWorld, { openPolicy: open })
    expect(c.step).toBe(1)
    expect([...c.model.adapterNames].sort()).toEqual(['judge', 'proposer', 'solver'])
    await drive(c, driveOptions(splitDir, 2))
    c.dispose()
    expect(untimed(metrics(splitDir))).toEqual(untimed(metrics(straightDir)))
    expect(adapterBytes(join(checkpointDir(splitDir, 2), 'model'))).toEqual(adapterBytes(join(checkpointDir(straightDir, 2), 'model')))
    expect(readFileSync(join(checkpointDir(splitDir, 2), 'model-state', 'optimizer.safetensors'))).toEqual(readFileSync(join(checkpointDir(straightDir, 2), 'model-state', 'optimizer.safetensors')))
  })

  it("judge.adapter: the Judge's adapter starts from that PEFT folder (its own rank), stays as loaded, and a resume takes the checkpoint's", async () => {
    expect(() => resolveCoseConfig({ judge: { adapter: join(root, 'x') } })).toThrow(/judge\.adapter.*needs roleAdapters/)
    expect(coseFlagsToOverride({ 'role-adapters': 2, 'judge-adapter': 'J' })).toEqual({ judge: { adapter: 'J' }, roleAdapters: true, ppo: { loraRank: 2 } })
    expect(coseFlagsToOverride({ judge: 'M', 'judge-adapter': 'J' })).toEqual({ switches: { judge: 'model' }, judge: { model: 'M', adapter: 'J' } })
    // a Judge stage's adapter: rank 3, B trained away from 0
    const stage = new ScriptedPolicy(BASE, { script: () => 'x' })
    const t = await stage.trainer({ objective: { name: 'sft' }, optimizer: { lr: 0.1 }, lora: { rank: 3, alpha: 6 } })
    await t.step({ sequences: [{ prompt: [65], completion: Array.from(Buffer.from('<score>1</score>')) }] })
    const judgeDir = join(root, 'judge-stage')
    await stage.save(judgeDir)
    const trainedB = Float32Array.from(stage.weights.adapters.get('default')!.b)
    expect(trainedB.some((x) => x !== 0)).toBe(true)

    const open = scriptedPolicies(script)
    const dir = join(root, 'scripted-judge-adapter')
    const run = await CoseRun.start(BASE, { ...config, judge: { ...config.judge, adapter: judgeDir } }, arithWorld, { openPolicy: open })
    const [policy] = open.policies
    const judge = policy.weights.adapters.get('judge')!
    expect([judge.rank, judge.alpha, Array.from(judge.b)]).toEqual([3, 6, Array.from(trainedB)])
    for (const role of ['proposer', 'solver']) expect(Array.from(policy.weights.adapters.get(role)!.b).every((x) => x === 0)).toBe(true)
    expect([...(policy.trainerOf as ScriptedTrainer).trained]).toEqual(['proposer', 'solver'])
    await drive(run, { ...driveOptions(dir, 1) })
    expect(Array.from(policy.weights.adapters.get('judge')!.b)).toEqual(Array.from(trainedB))
    expect(Array.from(policy.weights.adapters.get('solver')!.b).some((x) => x !== 0)).toBe(true)
    run.dispose()
    // the checkpoint holds the loaded Judge; the resumed run opens it from there, not from judge.adapter
    await rm(judgeDir, { recursive: true })
    const resumed = await CoseRun.resume(checkpointDir(dir, 1), arithWorld, { openPolicy: open })
    expect(Array.from(open.policies.at(-1)!.weights.adapters.get('judge')!.b)).toEqual(Array.from(trainedB))
    expect(resumed.config.judge.adapter).toBe(judgeDir)
    resumed.dispose()
  })

  it('a checkpoint with a short moment of a role adapter, or missing one, is a CheckpointError before anything is opened', async () => {
    const open = scriptedPolicies(script)
    const dir = join(root, 'scripted-missing')
    const a = await CoseRun.start(BASE, { ...config, steps: 1 }, arithWorld, { openPolicy: open })
    await drive(a, driveOptions(dir, 1))
    a.dispose()
    const ckpt = checkpointDir(dir, 1)
    const opened = open.policies.length
    // a named adapter's moment that does not fit its parameter (the sub-folder's B) is caught like any other
    const optimizer = join(ckpt, 'model-state', 'optimizer.safetensors')
    const good = readFileSync(optimizer)
    const tensors = await Promise.all((await readSafetensorsHeader(optimizer)).tensors.map(async (t) => ({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: await readTensorFloat32(t) })))
    await writeSafetensors(optimizer, tensors.map((t) => (t.name === 'scripted.lora_B.solver.weight::v' ? { ...t, shape: [3], data: new Float32Array(3) } : t)))
    const short = await CoseRun.resume(ckpt, arithWorld, { openPolicy: open }).catch((e: unknown) => e)
    expect(short).toBeInstanceOf(CheckpointError)
    expect((short as CheckpointError).field).toBe('scripted.lora_B.solver.weight::v')
    expect((short as CheckpointError).reason).toBe('moment')
    await writeFile(optimizer, good)
    await rm(join(ckpt, 'model', 'judge'), { recursive: true })
    await expect(CoseRun.resume(ckpt, arithWorld, { openPolicy: open })).rejects.toThrow(CheckpointError)
    await expect(CoseRun.resume(ckpt, arithWorld, { openPolicy: open })).rejects.toThrow(/no adapter 'judge'/)
    expect(open.policies.length).toBe(opened)
  })
})

describe('the scripted fake picks and trains adapters by the engine\'s rules', () => {
  const objective = { name: 'policy' as const, clip: 0.2, klCoef: 0, entropyCoef: 0 }
  const seq = (completion: string, adapter?: string | null) => ({ prompt: [65], completion: Array.from(Buffer.from(completion)), advantages: 1, ...(adapter === undefined ? {} : { adapter }) })

  it('unknown adapter names and an unnamed sequence of a several-adapter trainer are typed errors', async () => {
    const p = new ScriptedPolicy(BASE, { script: () => 'x' })
    await p.addAdapter('a', { rank: 1, alpha: 1, seed: 1 })
    await p.addAdapter('b', { rank: 1, alpha: 1, seed: 2 })
    await expect(p.addAdapter('a', { rank: 1, alpha: 1 })).rejects.toThrow(InvalidArgumentError)
    await expect(p.generate(['q'], { adapter: 'c' })).rejects.toThrow(/unknown adapter 'c'/)
    await expect(p.trainer({ objective, optimizer: { lr: 0.1 }, schedule: { kind: 'constant' }, adapter: ['a', 'zzz'] })).rejects.toThrow(/unknown adapter 'zzz'/)
    const t = await p.trainer({ objective, optimizer: { lr: 0.1 }, schedule: { kind: 'constant' }, adapter: ['a', 'b'] })
    await expect(t.step({ sequences: [seq('hi')] })).rejects.toThrow(/each sequence names its adapter/)
    // a sequence through the base (null) moves nothing; 'a' moves only 'a'
    await t.step({ sequences: [seq('hi', 'a'), seq('yo', null)] })
    expect(p.weights.adapters.get('a')!.b['h'.charCodeAt(0)]).not.toBe(0)
    expect(p.weights.adapters.get('a')!.b['y'.charCodeAt(0)]).toBe(0)
    expect(Array.from(p.weights.adapters.get('b')!.b).every((x) => x === 0)).toBe(true)
    expect(Array.from(p.weights.bias).every((x) => x === 0)).toBe(true)
  })
})

describe("the scripted fake keeps the engine's per-adapter step clocks (adapterSchedules)", () => {
  const objective = { name: 'policy' as const, clip: 0.2, klCoef: 0, entropyCoef: 0 }
  const seq = (completion: string, adapter: string) => ({ prompt: [65], completion: Array.from(Buffer.from(completion)), advantages: 1, adapter })

  it('counts each adapter\'s steps, refuses a batch that trains both, and saves and restores the clocks', async () => {
    const p = new ScriptedPolicy(BASE, { script: () => 'x' })
    await p.addAdapter('challenger', { rank: 1, alpha: 1, seed: 1 })
    await p.addAdapter('solver', { rank: 1, alpha: 1, seed: 2 })
    const options = { objective, optimizer: { lr: 0.1 }, adapter: ['challenger', 'solver'], adapterSchedules: { challenger: {}, solver: {} } }
    const t = (await p.trainer(options)) as ScriptedTrainer
    await t.step({ sequences: [seq('hi', 'challenger')] })
    await t.step({ sequences: [seq('yo', 'challenger')] })
    await t.step({ sequences: [seq('ok', 'solver')] })
    await expect(t.step({ sequences: [seq('hi', 'challenger'), seq('ok', 'solver')] })).rejects.toThrow(/a step trains exactly one of challenger, solver/)
    expect([t.steps, ...t.adapterSteps!.values()]).toEqual([3, 2, 1])
    const dir = join(root, 'scripted-clocks')
    await p.save(dir)
    await t.saveState(dir)
    const q = new ScriptedPolicy(BASE, { script: () => 'x' })
    await q.load({ model: BASE, adapters: dir })
    const u = (await q.trainer(options)) as ScriptedTrainer
    await u.loadState(dir)
    expect(Object.fromEntries(u.adapterSteps!)).toEqual({ challenger: 2, solver: 1 })
  })
})

/** An engine OpenPolicy whose policies record each generate call's adapter choice. */
function recordingEngine(): OpenPolicy & { calls: { prompts: Prompt[]; adapter: unknown; options?: GenerateOptions; texts?: string[] }[] } {
  const calls: { prompts: Prompt[]; adapter: unknown; options?: GenerateOptions; texts?: string[] }[] = []
  class Recording extends EnginePolicy {
    override async generate(prompts: Prompt[], options?: GenerateOptions) {
      const call: (typeof calls)[number] = { prompts, adapter: options?.adapter, options }
      calls.push(call)
      const out = await super.generate(prompts, options)
      call.texts = out.flatMap((g) => g.map((c) => c.text))
      return out
    }
  }
  const open = async (ref: Parameters<OpenPolicy>[0]) => new Recording((await openPolicy(ref) as EnginePolicy).model)
  return Object.assign(open, { calls })
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('COSE role adapters on the bundled model', () => {
  const small: CoseConfig = resolveCoseConfig({
    steps: 2,
    roleAdapters: true,
    proposer: { count: 4, levels: [2, 3], temperature: 1, maxTokens: 32 },
    validator: { temperature: 1, maxTokens: 24, acceptThreshold: 0 }, // accept every well-formed proposal: the Solver has questions
    solver: { questions: 2, freshFirst: 2, n: 4, temperature: 1, maxTokens: 40 },
    judge: { temperature: 1, maxTokens: 24 },
    eval: { every: 1, size: 4, benchmarks: [] },
    checkpointEvery: 1,
    ppo: { loraRank: 4, loraAlpha: 8, lr: 1e-3, warmupSteps: 0 },
  })

  it("each role's calls carry its adapter; a step changes only the Proposer's and Solver's adapters; resume is bit for bit", async () => {
    const train = (await nativeAddon()).train
    const open = recordingEngine()
    const run = await CoseRun.start(DEFAULT_MODEL, small, arithWorld, { threads: 2, openPolicy: open })
    const handle = (run.model as EnginePolicy).model.handle
    const snapshot = async () => new Map((await train.exportTensors(handle)).map((t) => [t.name, Float32Array.from(t.data)]))
    const before = await snapshot()
    const r = await run.runStep()
    const after = await snapshot()
    expect(r.train?.skipped).toBe(false)
    expect(r.questionsSolved).toBeGreaterThan(0)
    // both trained roles have a non-zero GRPO advantage this step (rewards spread within a group), so both must move
    expect(r.rewardSolver.std).toBeGreaterThan(0)
    expect(r.rewardProposer.std).toBeGreaterThan(0)

    // (a) the four calls: Proposer, Validator, Solver, Judge, each with its adapter
    const heads = ['Propose', 'Rate problem: ', 'Solve: ', 'Judge: ']
    expect(open.calls.map((c) => c.adapter)).toEqual(['proposer', 'solver', 'solver', 'judge'])
    open.calls.forEach((c, i) => expect(c.prompts.every((p) => typeof p === 'string' && p.startsWith(heads[i]))).toBe(true))

    // (b) only the trained roles' adapters changed; the Judge's adapter and every base weight are bit for bit as before
    const kind = (name: string) => (/\.lora_[AB]\.(proposer|solver|judge)\.weight$/.exec(name)?.[1] ?? (name.includes('.lora_') ? 'other' : 'base'))
    const changed = (name: string) => Array.from(after.get(name)!).some((x, i) => !Object.is(x, before.get(name)![i]))
    expect([...after.keys()].sort()).toEqual([...before.keys()].sort())
    expect([...before.keys()].filter((n) => kind(n) === 'other')).toEqual([])
    for (const name of before.keys()) if (kind(name) === 'base' || kind(name) === 'judge') expect(changed(name), name).toBe(false)
    for (const role of ['proposer', 'solver']) {
      const Bs = [...before.keys()].filter((n) => kind(n) === role && n.includes('.lora_B.'))
      expect(Bs.length).toBeGreaterThan(0)
      expect(Bs.some(changed), role).toBe(true)
      for (const n of Bs) for (const x of after.get(n)!) expect(Number.isFinite(x)).toBe(true)
    }
    run.dispose()

    // (c) two steps straight vs. one step, checkpoint, resume, one more: metrics, adapters and moments equal bit for bit
    const straightDir = join(root, 'engine-straight')
    const a = await CoseRun.start(DEFAULT_MODEL, small, arithWorld, { threads: 2 })
    await drive(a, driveOptions(straightDir, 2))
    a.dispose()
    const splitDir = join(root, 'engine-split')
    const b = await CoseRun.start(DEFAULT_MODEL, small, arithWorld, { threads: 2 })
    expect((await drive(b, driveOptions(splitDir, 2, true))).stoppedEarly).toBe(true)
    b.dispose()
    const moments = (await readSafetensorsHeader(join(checkpointDir(splitDir, 1), 'model-state', 'optimizer.safetensors'))).tensors.map((t) => t.name)
    expect(moments.length).toBeGreaterThan(0)
    expect(moments.every((n) => /\.lora_[AB]\.(proposer|solver)\.weight::[mv]$/.test(n))).toBe(true) // no Judge or base moments
    const c = await CoseRun.resume(checkpointDir(splitDir, 1), arithWorld, { threads: 2 })
    expect(c.step).toBe(1)
    await drive(c, driveOptions(splitDir, 2))
    c.dispose()
    expect(untimed(metrics(splitDir))).toEqual(untimed(metrics(straightDir)))
    expect(adapterBytes(join(checkpointDir(splitDir, 2), 'model'))).toEqual(adapterBytes(join(checkpointDir(straightDir, 2), 'model')))
    expect(readFileSync(join(checkpointDir(splitDir, 2), 'model-state', 'optimizer.safetensors'))).toEqual(readFileSync(join(checkpointDir(straightDir, 2), 'model-state', 'optimizer.safetensors')))
  }, 600_000)

  it("judge.adapter on the engine: the Judge role runs through that folder's adapter (rank 3 beside rank-4 roles), which no step moves and the checkpoint keeps", async () => {
    const { loadModel } = await import('../../src/engine/model.js')
    // a Judge stage's adapter: rank 3, a few SFT steps on Judge transcripts so that it changes the Judge's verdicts
    const stage = await loadModel(DEFAULT_MODEL, { threads: 2 })
    const t = await stage.trainer({ objective: { name: 'sft' }, lora: { rank: 3, alpha: 6, seed: 5 }, optimizer: { lr: 3e-2 }, microBatchSize: 4 })
    const verdict = { prompt: stage.encodePrompt(arithWorld.cose.judgePrompt('2+3', 'Answer: 5')), completion: stage.tokenizer.encode('<score>0</score>', { addSpecialTokens: false }) }
    for (let i = 0; i < 5; i++) await t.step({ sequences: [verdict, verdict] })
    const judgeDir = join(root, 'engine-judge-stage')
    await stage.save(judgeDir)
    stage.dispose()

    const open = recordingEngine()
    const dir = join(root, 'engine-judge-adapter')
    const run = await CoseRun.start(DEFAULT_MODEL, { ...small, steps: 1, judge: { ...small.judge, adapter: judgeDir } }, arithWorld, { threads: 2, openPolicy: open })
    expect([...run.model.adapterNames].sort()).toEqual(['judge', 'proposer', 'solver'])
    await drive(run, driveOptions(dir, 1))
    run.dispose()
    const judged = open.calls.find((c) => c.adapter === 'judge')!
    expect(judged.prompts.length).toBeGreaterThan(0)
    // the same prompts, seed and options through the bundled model with the folder's adapter alone give the run's verdicts; the bare base does not
    const alone = await loadModel(DEFAULT_MODEL, { threads: 2 })
    const verdicts = async () => (await alone.generate(judged.prompts, { ...judged.options, adapter: undefined })).flatMap((g) => g.map((c) => c.text))
    const bare = await verdicts()
    await alone.loadAdapter(judgeDir)
    const withAdapter = await verdicts()
    alone.dispose()
    expect(withAdapter).toEqual(judged.texts)
    expect(bare).not.toEqual(judged.texts)
    // the checkpoint's Judge adapter is the folder's, tensor for tensor
    const tensors = async (file: string) => Object.fromEntries(await Promise.all((await readSafetensorsHeader(file)).tensors.map(async (x) => [x.name, Array.from(await readTensorFloat32(x))])))
    expect(await tensors(join(checkpointDir(dir, 1), 'model', 'judge', 'adapter_model.safetensors'))).toEqual(await tensors(join(judgeDir, 'adapter_model.safetensors')))
    expect(JSON.parse(readFileSync(join(checkpointDir(dir, 1), 'model', 'judge', 'adapter_config.json'), 'utf8')).r).toBe(3)
  }, 600_000)
})
