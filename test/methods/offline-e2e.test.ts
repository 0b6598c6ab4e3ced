// Offline extensions on the bundled model (UID §4.3, B.3): a small scored pool (calibration on its
// own unlabeled split, deduplicated verifier-correct responses), DPO pairs on a common prompt set
// with the random control, the shared warm start, one DPO and one weighted-SFT run (with an exact
// resume), and weights of mean one per prompt.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { DPO_TOY_PRESET, resolveOfflineConfig, TOY_PRESET, type OfflineConfig } from '../../src/methods/offline/config.js'
import { OfflineRun } from '../../src/methods/offline/loop.js'
import { dpoPairs, ensurePool, pairResponses, pairTraceDiagnostics, warmStartExamples, weightTraceDiagnostics, WRONG_KEPT, wsftExamples } from '../../src/methods/offline/pool.js'
import { dpoSpec, wsftSpec } from '../../src/methods/offline/spec.js'
import { loadModel } from '../../src/engine/model.js'
import { answerOf, arithWorld } from '../../src/worlds/arith/index.js'

const root = mkdtempSync(join(tmpdir(), 'ad-offline-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const poolDir = join(root, 'pool')
const world = arithWorld()

const small = (base: OfflineConfig, over: object = {}): OfflineConfig =>
  resolveOfflineConfig(
    {
      pool: { ...base.pool, dir: poolDir, prompts: 40, calibrationPrompts: 10, k: 16, maxTokens: 48 },
      warmStart: { lr: 5e-4, batchSize: 16, epochs: 1 },
      train: { ...base.train, batchSize: 8 },
      eval: { every: 1, size: 6, benchmarks: ['L3'], protocol: { samples: 2, temperature: 0.6, topP: 0.95, maxTokens: 48, seed: 7 } },
      checkpointEvery: 1,
      ...over,
    },
    base,
  )

const driveOptions = (outDir: string, c: OfflineConfig, stop = false): DriveOptions => ({
  outDir, method: c.objective, totalSteps: c.steps, evalEvery: c.eval.every, checkpointEvery: c.checkpointEvery, series: [], describe: () => '', stopRequested: stop ? () => true : undefined,
})
const metrics = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
const untimed = (row: unknown) => JSON.parse(JSON.stringify(row, (k, v) => (k === 'seconds' || k === 'tokensPerSecond' || k === 'mfu' ? undefined : v)))

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('offline DPO and weighted SFT on the bundled model', () => {
  it('builds a scored pool of distinct verified responses and derives pairs and weights from it', async () => {
    const c = small(DPO_TOY_PRESET)
    const model = await loadModel(DEFAULT_MODEL, { threads: 2 })
    const { pool } = await ensurePool(c, model, world, poolDir)
    model.dispose()
    expect(pool.stats.sampled).toBe(40 * 16)
    expect(pool.calibration.count).toBeGreaterThan(50)
    for (const p of pool.prompts) {
      expect(new Set(p.responses.map((r) => r.text)).size).toBe(p.responses.length)
      for (const r of p.responses) {
        expect(world.verifier.verify({ id: p.id, question: p.question, answer: String(answerOf(p.question)) }, r.text)).toBe(true)
        for (const q of Object.values(r.scores)) expect(q >= 0 && q <= 1).toBe(true)
        expect(r.valid).toBe(world.verifier.traceValid!(r.text))
      }
    }
    expect(c.pairs.commonMethods).toEqual(['sc', 'uid-conj'])
    expect(() => dpoPairs(pool, 'uid-mix', c.pairs, c.seed)).toThrow(RangeError) // not in the common set
    const sets = ['sc', 'uid-conj', 'random'].map((arm) => dpoPairs(pool, arm, c.pairs, c.seed))
    expect(sets[0].length).toBeGreaterThan(0)
    for (const s of sets) expect(s.map((p) => p.prompt)).toEqual(sets[0].map((p) => p.prompt)) // the common prompt set (B.3)
    sets[1].forEach((p) => {
      const r = pool.prompts[p.prompt].responses
      expect(r[p.chosen].scores['uid-conj'] - r[p.rejected].scores['uid-conj']).toBeGreaterThanOrEqual(0.05)
    })
    sets[2].forEach((p) => expect(p.chosen).not.toBe(p.rejected))
    expect(warmStartExamples(pool, ['sc', 'random'], c.pairs, c.seed).length).toBeLessThanOrEqual(4 * sets[0].length)
    // the right-vs-wrong control (outside the paper): on the common prompts that have a wrong response, a correct one over a wrong one
    expect(pool.version).toBe(3)
    const truth = (p: { id: string; question: string }) => ({ id: p.id, question: p.question, answer: String(answerOf(p.question)) })
    for (const p of pool.prompts) {
      expect(p.wrong!.length).toBeLessThanOrEqual(WRONG_KEPT)
      expect(new Set(p.wrong!.map((r) => r.text)).size).toBe(p.wrong!.length)
      for (const r of p.wrong!) expect(world.verifier.verify(truth(p), r.text)).toBe(false)
    }
    const control = dpoPairs(pool, 'right-vs-wrong', c.pairs, c.seed)
    expect(control.length).toBeGreaterThan(0)
    expect(control.map((p) => p.prompt)).toEqual(sets[0].map((p) => p.prompt).filter((pi) => pool.prompts[pi].wrong!.length > 0))
    for (const pair of control) {
      const { chosen, rejected } = pairResponses(pool, pair)
      expect(world.verifier.verify(truth(pool.prompts[pair.prompt]), chosen.text)).toBe(true)
      expect(world.verifier.verify(truth(pool.prompts[pair.prompt]), rejected.text)).toBe(false)
    }
    // the same pairs on every prompt with a verified and a wrong response, common or not
    const all = dpoPairs(pool, 'right-vs-wrong-all', c.pairs, c.seed)
    expect(all.map((p) => p.prompt)).toEqual(pool.prompts.flatMap((p, pi) => (p.responses.length && p.wrong!.length ? [pi] : [])))
    expect(all.length).toBeGreaterThan(control.length)
    expect(all.filter((p) => control.some((q) => q.prompt === p.prompt))).toEqual(control)
    expect(() => dpoPairs({ ...pool, version: 2 }, 'right-vs-wrong', c.pairs, c.seed)).toThrow(/keeps wrong responses \(version 3\)/)
    const diag = pairTraceDiagnostics(pool, sets[1])
    expect(diag.count).toBe(sets[1].length)
    expect(diag.chosenValid! >= 0 && diag.chosenValid! <= 1).toBe(true)
    const w = wsftExamples(pool, 'uid-conj', 2)
    const u = wsftExamples(pool, 'uniform', 2)
    expect(w.map((e) => [e.prompt, e.response])).toEqual(u.map((e) => [e.prompt, e.response])) // same responses
    expect(u.every((e) => e.weight === 1)).toBe(true)
    const uv = weightTraceDiagnostics(pool, u).weightedValid!
    const known = pool.prompts.flatMap((p) => p.responses).filter((r) => r.valid !== null)
    expect(uv).toBeCloseTo(known.filter((r) => r.valid).length / known.length, 12)
    for (const pi of new Set(w.map((e) => e.prompt))) {
      const ws = w.filter((e) => e.prompt === pi).map((e) => e.weight)
      expect(ws.reduce((a, b) => a + b, 0) / ws.length).toBeCloseTo(1, 12) // UID Eq. 7: mean one
    }
  })

  it('DPO from the shared warm start: pairs train, the policy moves away from its reference', async () => {
    const c = small(DPO_TOY_PRESET, { steps: 2, arm: 'uid-conj' })
    const run = await OfflineRun.start(DEFAULT_MODEL, c, world, { threads: 2 })
    expect(run.modelDir).toMatch(/warmstart-/)
    const r1 = await run.runStep()
    const r2 = await run.runStep()
    run.dispose()
    for (const r of [r1, r2]) {
      expect(r.train.skipped).toBe(false)
      expect(Number.isFinite(r.loss)).toBe(true)
    }
    expect(r1.loss).toBeCloseTo(Math.log(2), 6) // LoRA B = 0: the policy equals the reference at step 1
    expect(r2.train.objective.rewardMargin).not.toBe(0)
    expect(dpoSpec.presets.toy.objective).toBe('dpo')
  })

  it('weighted SFT runs, writes eval files and resumes exactly', async () => {
    const c = small(TOY_PRESET, { steps: 2, arm: 'uid-conj' })
    expect(wsftSpec.resolveConfig({ arm: 'sc' }, c, 'x').arm).toBe('sc')
    expect(() => wsftSpec.resolveConfig({ arm: 'random' }, c, 'x')).toThrow(/arm/)
    const straight = join(root, 'wsft-straight')
    const run = await OfflineRun.start(DEFAULT_MODEL, c, world, { threads: 2 })
    const lines: string[] = []
    await drive(run, { ...driveOptions(straight, c), progress: (line) => lines.push(line) })
    run.dispose()
    const rows = metrics(straight)
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    expect(rows[1].train.objective.meanWeight).toBeGreaterThan(0)
    // every trained step's record carries the MFU of its training, and its progress line shows it
    expect(rows[0].mfu).toBeUndefined()
    for (const r of rows.slice(1)) expect(r.mfu > 0 && r.mfu < 1 && r.train.flops > 0, `step ${r.step}: mfu ${r.mfu}, flops ${r.train.flops}`).toBe(true)
    expect(lines).toHaveLength(2)
    lines.forEach((l, i) => expect(l).toContain(`MFU ${(100 * rows[i + 1].mfu).toFixed(1)}%`))
    expect(existsSync(join(straight, 'evals', 'step-000002.json'))).toBe(true)
    const split = join(root, 'wsft-split')
    const first = await OfflineRun.start(DEFAULT_MODEL, c, world, { threads: 2 })
    await drive(first, driveOptions(split, c, true))
    first.dispose()
    const resumed = await OfflineRun.resume(checkpointDir(split, 1), world, { threads: 2 })
    await drive(resumed, driveOptions(split, c))
    resumed.dispose()
    expect(metrics(split).map(untimed)).toEqual(rows.map(untimed))
  })
})
