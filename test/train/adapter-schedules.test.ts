// A trainer's per-adapter schedules and step clocks (adapterSchedules): roles that train in turns
// on one base (R-Zero's phases, J-Zero's stages). Each step trains one adapter at its own clock's
// lr and AdamW bias correction; the other adapters' clocks, weights and moments stay; the clocks
// are saved in trainer_state.json and a resumed trainer continues each one.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CheckpointError, InvalidArgumentError, loadModel, type Model } from '../../src/index.js'
import { nativeAddon, type NativeTrain } from '../../src/native.js'
import { createSchedule, type ScheduleOptions } from '../../src/train/schedule.js'
import { randomTokens } from '../helpers/random-tokens.js'
import { writeTinyModel, type TinyModel } from '../helpers/tiny-model.js'

let root: string
let tiny: TinyModel
let train: NativeTrain
beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-clocks-'))
  tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 71, hiddenSize: 16, intermediate: 24, headDim: 8 })
  train = (await nativeAddon()).train
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

const SCHEDULES: Record<string, ScheduleOptions> = { challenger: { kind: 'cosine', warmupSteps: 1, totalSteps: 4 }, solver: { kind: 'cosine', warmupSteps: 0, totalSteps: 3 } }
const LR = 1e-2
const options = { objective: { name: 'policy' as const, klCoef: 0.05 }, optimizer: { lr: LR }, adapter: ['challenger', 'solver'], adapterSchedules: SCHEDULES }

const seqOf = (i: number, adapter: string) => ({
  prompt: randomTokens(3, 50 + i, tiny.config.vocabSize),
  completion: randomTokens(4, 60 + i, tiny.config.vocabSize),
  adapter,
  advantages: i % 2 ? 1 : -0.5,
  oldLogprobs: new Float32Array(4).fill(-5),
})
const batchOf = (k: number, adapter: string) => ({ sequences: [seqOf(k, adapter), seqOf(k + 1, adapter)] })

async function twoRoles(): Promise<Model> {
  const m = await loadModel(tiny.dir, { threads: 2 })
  await m.addAdapter('challenger', { rank: 2, alpha: 4, seed: 1 })
  await m.addAdapter('solver', { rank: 2, alpha: 4, seed: 2 })
  return m
}

/** The model's tensors of one adapter (engine names "….lora_A.<adapter>.weight"), by name. */
async function adapterTensors(m: Model, adapter: string): Promise<Map<string, number[]>> {
  return new Map((await train.exportTensors(m.handle)).filter((t) => t.name.includes(`.${adapter}.weight`)).map((t) => [t.name, Array.from(t.data)]))
}

describe('per-adapter schedules and step clocks', () => {
  it("each step runs at its adapter's own clock: lr from its schedule, only its clock advances, the other adapter stays", async () => {
    const m = await twoRoles()
    const t = await m.trainer(options)
    const at = (name: string, step: number) => LR * createSchedule(SCHEDULES[name])(step)
    const solverBefore = await adapterTensors(m, 'solver')
    const c1 = await t.step(batchOf(0, 'challenger'))
    const c2 = await t.step(batchOf(2, 'challenger'))
    expect([c1.skipped, c2.skipped]).toEqual([false, false])
    expect(c1.lr).toBeCloseTo(at('challenger', 1), 12) // warmup 1: the full lr at step 1
    expect(c2.lr).toBeCloseTo(at('challenger', 2), 12)
    expect(await adapterTensors(m, 'solver')).toEqual(solverBefore) // a Challenger phase leaves the Solver's adapter as it was
    const challengerBefore = await adapterTensors(m, 'challenger')
    const s1 = await t.step(batchOf(4, 'solver'))
    expect(s1.lr).toBeCloseTo(at('solver', 1), 12) // the Solver's first step, not the trainer's third
    expect(await adapterTensors(m, 'challenger')).toEqual(challengerBefore)
    expect([t.steps, t.adapterSteps('challenger'), t.adapterSteps('solver')]).toEqual([3, 2, 1])
    const c3 = await t.step(batchOf(6, 'challenger'))
    expect(c3.lr).toBeCloseTo(at('challenger', 3), 12)

    // the Solver's first step after two Challenger steps is the Solver's first step on a fresh trainer, bit for bit
    // (AdamW's bias correction at step 1): on one shared clock it would be corrected as step 3
    const fresh = await twoRoles()
    const tf = await fresh.trainer(options)
    await tf.step(batchOf(4, 'solver'))
    const m2 = await twoRoles()
    const t2 = await m2.trainer(options)
    await t2.step(batchOf(0, 'challenger'))
    await t2.step(batchOf(2, 'challenger'))
    await t2.step(batchOf(4, 'solver'))
    expect(await adapterTensors(m2, 'solver')).toEqual(await adapterTensors(fresh, 'solver'))
    const shared = await twoRoles()
    const ts = await shared.trainer({ ...options, adapterSchedules: undefined, schedule: SCHEDULES.solver })
    await ts.step(batchOf(0, 'challenger'))
    await ts.step(batchOf(2, 'challenger'))
    await ts.step(batchOf(4, 'solver'))
    expect(await adapterTensors(shared, 'solver')).not.toEqual(await adapterTensors(fresh, 'solver')) // what the clocks are for
    for (const x of [m, fresh, m2, shared]) x.dispose()
  }, 120_000)

  it('refuses a step that trains both adapters, and schedules that do not name exactly the trained adapters', async () => {
    const m = await twoRoles()
    const t = await m.trainer(options)
    const mixed = { sequences: [seqOf(0, 'challenger'), seqOf(1, 'solver')] }
    await expect(t.step(mixed)).rejects.toThrow(InvalidArgumentError)
    await expect(t.step(mixed)).rejects.toThrow(/a step trains exactly one of challenger, solver, this batch trains challenger, solver/)
    expect(t.steps).toBe(0)
    await expect(m.trainer({ ...options, adapterSchedules: { challenger: SCHEDULES.challenger } })).rejects.toThrow(/must name exactly the trained adapters/)
    await expect(m.trainer({ ...options, adapterSchedules: { ...SCHEDULES, judge: {} } })).rejects.toThrow(InvalidArgumentError)
    m.dispose()
  })

  it('saves each clock in trainer_state.json; a resumed trainer continues every clock bit for bit; a state without them is a CheckpointError', async () => {
    const dir = join(root, 'ckpt')
    const a = await twoRoles()
    const ta = await a.trainer(options)
    await ta.step(batchOf(0, 'challenger'))
    await ta.step(batchOf(2, 'challenger'))
    await ta.step(batchOf(4, 'solver'))
    await a.save(dir)
    await ta.saveState(dir)
    const meta = JSON.parse(readFileSync(join(dir, 'trainer_state.json'), 'utf8'))
    expect(meta).toMatchObject({ step: 3, adapterSteps: { challenger: 2, solver: 1 } })
    const sa = await ta.step(batchOf(6, 'solver'))
    const continued = await train.exportTensors(a.handle)

    const b = await loadModel(tiny.dir, { threads: 2 })
    expect(await b.loadAdapters(dir)).toEqual(['challenger', 'solver'])
    const tb = await b.trainer(options)
    await tb.loadState(dir)
    expect([tb.steps, tb.adapterSteps('challenger'), tb.adapterSteps('solver')]).toEqual([3, 2, 1])
    const sb = await tb.step(batchOf(6, 'solver'))
    expect(sb.lr).toBe(sa.lr)
    const resumed = await train.exportTensors(b.handle)
    resumed.forEach((t, i) => expect(Array.from(t.data), t.name).toEqual(Array.from(continued[i].data)))

    writeFileSync(join(dir, 'trainer_state.json'), JSON.stringify({ step: 3, format: 1 }))
    const c = await b.trainer(options)
    const refused = await c.loadState(dir).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(CheckpointError)
    expect((refused as CheckpointError).field).toBe('adapterSteps')
    writeFileSync(join(dir, 'trainer_state.json'), JSON.stringify({ step: 3, format: 1, adapterSteps: { challenger: 2, solver: -1 } }))
    await expect(c.loadState(dir)).rejects.toThrow(/'solver' is -1/)
    a.dispose()
    b.dispose()
  }, 120_000)
})
