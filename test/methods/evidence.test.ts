// bench/evidence.mjs --quick on the scripted policy (a Solver that gets better as it trains): every
// method's cells run, the JSON has the shape issue 27 asks for, each interval contains its delta,
// and a second run resumes from the saved cells instead of training again.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { scriptedPolicies, type ScriptContext } from '../../src/methods/common/scripted-policy.js'
import { difficultyOf, evalSet } from '../../src/worlds/arith/index.js'
import { arithScript, scriptedAnswer } from './arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-evidence-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
// @ts-expect-error: a plain ES module of bench/ without type declarations
const bench = (await import('../../bench/evidence.mjs')) as { runEvidence: (o: Record<string, unknown>) => Promise<any>; table: (r: unknown) => string; SIZES: Record<string, any>; modelTag: (base: string) => string }

/** Right with probability 0.4 + 0.15 per optimizer step taken (up to 0.85): training visibly helps. */
const improving = (c: ScriptContext) => arithScript({ solveRate: Math.min(0.85, 0.4 + 0.15 * c.updates), malformedRate: 0.1 })(c)

describe('bench/evidence.mjs --quick', () => {
  it('writes each method command\'s Δ mean@4 and greedy with 95% intervals that contain them, the ablation rows, and resumes', async () => {
    const out = join(root, 'evidence.json')
    const cellsDir = join(root, 'cells')
    const run = () => bench.runEvidence({ size: 'quick', out, cellsDir, base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script: improving }), log: () => {} })
    const r = await run()
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(JSON.parse(JSON.stringify(r)))
    expect(Object.keys(r.methods)).toEqual(['cose', 'ttrl', 'rzero', 'jzero', 'grpo', 'dpo', 'wsft'])
    const inside = (x: number, [lo, hi]: number[]) => lo - 1e-9 <= x && x <= hi + 1e-9
    for (const [name, m] of Object.entries<any>(r.methods)) {
      for (const k of ['mean4Delta', 'greedyDelta']) expect(Number.isFinite(m[k]), `${name}.${k}`).toBe(true)
      expect(inside(m.mean4Delta, m.ci95), name).toBe(true)
      expect(inside(m.greedyDelta, m.greedyCi95), name).toBe(true)
      expect(m.seeds).toBe(3)
      expect(m.testItems).toBe(8)
      expect(m.tuning.split).toBe('dev')
      for (const a of m.ablations) {
        expect(inside(a.mean4Delta, a.ci95), `${name}: ${a.name}`).toBe(true)
        expect(inside(a.greedyDelta, a.greedyCi95), `${name}: ${a.name}`).toBe(true)
      }
      // the headline row is the headline arm against the base
      expect(m.mean4Delta).toBeCloseTo(100 * (m.arms[m.headline].mean4 - m.base.mean4), 9)
    }
    expect(r.methods.cose.ablations.map((a: any) => a.name)).toEqual(['full vs w/o weighting', 'full vs w/o priority', 'w/o priority vs w/o weighting', 'verifier Judge vs full'])
    expect(r.methods.ttrl.ablations.map((a: any) => a.name)).toEqual(['uid-conj vs ttrl', 'uid-conj vs permuted-uid', 'reference-label vs ttrl'])
    expect(r.methods.rzero.ablations.map((a: any) => a.name)).toEqual(['+disagreement vs R-Zero'])
    expect(r.methods.jzero.ablations.map((a: any) => a.name)).toEqual(['J-Zero vs frozen Judge', 'verifier Judge vs J-Zero'])
    expect(r.methods.dpo.ablations.map((a: any) => a.name)).toEqual(['uid-conj vs random', 'sc vs random', 'right-vs-wrong vs uid-conj', 'right-vs-wrong-all vs uid-conj'])
    expect(r.methods.wsft.ablations.map((a: any) => a.name)).toEqual(['uid-conj vs uniform', 'sc vs uniform'])
    expect(r.methods.ttrl.adaptedToTestSplit).toBe(true) // TTRL §3, UID §5.1: it adapts to the split it is scored on
    expect(r.notRun).toEqual([])
    expect(r.model).toBe(join(root, 'no-such-base')) // a base other than the bundled model is named in the result
    expect(r.pending).toEqual([])
    expect(r.methods.grpo.mean4Delta).toBeGreaterThan(0) // the improving script's trained Solver beats its base
    expect(bench.table(r)).toContain(`| cose | 1, ${r.methods.cose.tuning.chosenLr.toExponential(0)} | full (headline) |`) // steps, the chosen lr
    expect(bench.table(r)).toContain(`| wsft | 1 epochs, ${r.methods.wsft.tuning.chosenLr.toExponential(0)} | uid-conj (headline) |`) // the offline methods count epochs over their pool
    // resumable: a rerun finds every cell and trains nothing
    const cells = readdirSync(cellsDir).sort()
    const opened = scriptedPolicies({ script: improving })
    const again = await bench.runEvidence({ size: 'quick', out, cellsDir, base: join(root, 'no-such-base'), openPolicy: opened, log: () => {} })
    expect(opened.policies).toHaveLength(0)
    expect(readdirSync(cellsDir).sort()).toEqual(cells)
    expect(again.methods).toEqual(r.methods)
  }, 60_000)

  it('--level 2 asks every self-play method for level-2 tasks and reports on level 2\'s splits; TTRL adapts to the split it is scored on, the others never train on it; the offline methods keep their level-3 pool', async () => {
    /** What the prompts of one method's run asked for: the levels the Proposer/Challenger was asked for, the difficulties of the questions the Solver was given, and the questions it was trained on (sampled at T 1; evaluation samples at 0.6 and 0). */
    const asked = async (method: string) => {
      const proposed = new Set<number>()
      const solved = new Set<number | null>()
      const trainedOn = new Set<string>()
      const script = (c: ScriptContext) => {
        const propose = /^Propose a level (\d+) problem/.exec(c.prompt)
        if (propose) proposed.add(Number(propose[1]))
        const solve = /^Solve: (.*)/.exec(c.prompt)
        if (solve) solved.add(difficultyOf(solve[1]))
        if (solve && c.temperature === 1) trainedOn.add(solve[1].trim())
        return improving(c)
      }
      const dir = join(root, `level2-${method}`)
      const r = await bench.runEvidence({ size: 'quick', level: 2, methods: [method], out: join(dir, 'evidence.json'), cellsDir: join(dir, 'cells'), base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script }), log: () => {} })
      return { r, proposed: [...proposed].sort(), solved: [...solved].sort(), trainedOn: [...trainedOn] }
    }
    const level2 = evalSet(2, 1000).map((e) => e.question)
    const dev = new Set(level2.slice(0, 8))
    const test = new Set(level2.slice(400, 408))
    const rzero = await asked('rzero')
    expect(rzero.r.level).toBe(2)
    expect(rzero.r.splits).toEqual({ dev: 'L2 held-out items [0, 8)', test: 'L2 held-out items [400, 408)' })
    expect(rzero.proposed).toEqual([2])
    expect((await asked('jzero')).proposed).toEqual([2])
    expect((await asked('cose')).proposed).toEqual([1, 2, 3]) // the toy preset's band of three levels, around 2
    // GRPO's training questions and every evaluation are level 2; so are TTRL's test-time prompts, level 2's reserve from item 900
    const grpo = await asked('grpo')
    expect(grpo.solved).toEqual([2])
    expect(grpo.trainedOn.length).toBeGreaterThan(0)
    expect(grpo.trainedOn.filter((q) => dev.has(q) || test.has(q))).toEqual([])
    const ttrl = await asked('ttrl')
    expect(ttrl.solved).toEqual([2])
    expect(ttrl.r.methods.ttrl.testItems).toBe(8)
    // its test-time prompts are the splits' questions: dev cells trained on dev items, test cells on test items
    expect(ttrl.trainedOn.filter((q) => !dev.has(q) && !test.has(q))).toEqual([])
    expect(ttrl.trainedOn.some((q) => dev.has(q))).toBe(true)
    expect(ttrl.trainedOn.some((q) => test.has(q))).toBe(true)
    // the offline methods sample their pool from the world's labeled training problems at the toy preset's level 3, never a split's
    for (const method of ['dpo', 'wsft']) {
      const offline = await asked(method)
      expect(offline.trainedOn.length, method).toBeGreaterThan(0)
      expect(offline.trainedOn.map((q) => difficultyOf(q)).every((l) => l === 3), method).toBe(true)
      expect(offline.trainedOn.filter((q) => dev.has(q) || test.has(q)), method).toEqual([])
    }
  }, 60_000)

  it('several sizes: each method is tuned over every size\'s step count × lr scale on dev, and only the chosen one runs on test', async () => {
    bench.SIZES['quick-x2'] = { ...bench.SIZES.quick, label: 'twice the quick steps', steps: Object.fromEntries(Object.entries(bench.SIZES.quick.steps).map(([k, v]) => [k, 2 * (v as number)])), tune: [1, 3] }
    try {
      const dir = join(root, 'sizes')
      const r = await bench.runEvidence({ sizes: ['quick', 'quick-x2'], methods: ['grpo', 'ttrl'], out: join(dir, 'evidence.json'), cellsDir: join(dir, 'cells'), base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script: improving }), log: () => {} })
      expect(r.size).toBe('quick+quick-x2')
      for (const name of ['grpo', 'ttrl']) {
        const m = r.methods[name]
        expect(m.tuning.candidates.map((c: any) => [c.size, c.steps, c.lrScale])).toEqual([
          ['quick', bench.SIZES.quick.steps[name], 1],
          ['quick-x2', 2 * bench.SIZES.quick.steps[name], 1],
          ['quick-x2', 2 * bench.SIZES.quick.steps[name], 3],
        ])
        const best = Math.max(...m.tuning.candidates.map((c: any) => c.devMean4))
        const chosen = m.tuning.candidates.find((c: any) => c.devMean4 === best)
        expect([m.size, m.steps, m.tuning.chosenLrScale]).toEqual([chosen.size, chosen.steps, chosen.lrScale])
        // the test cells exist for the chosen size alone
        const testCells = (z: string) => readdirSync(join(dir, 'cells', z)).filter((f) => f.startsWith(name) && f.endsWith('test.json'))
        expect(testCells(m.size).length).toBe(Object.keys(m.arms).length * 3)
        expect(testCells(m.size === 'quick' ? 'quick-x2' : 'quick')).toEqual([])
      }
      // sizes with different splits cannot be compared on one development split
      await expect(bench.runEvidence({ sizes: ['quick', 'reduced'], log: () => {} })).rejects.toThrow(/dev and test sizes must be equal/)
      // --model: a folder that holds no model is refused before any training
      await expect(bench.runEvidence({ sizes: ['quick'], base: join(dir, 'no-model-here'), log: () => {} })).rejects.toThrow(/not a model folder/)
      // --config: overrides are by method; an unknown one is refused before any training
      await expect(bench.runEvidence({ sizes: ['quick'], config: { nope: {} }, log: () => {} })).rejects.toThrow(/--config: unknown method 'nope'/)
      await expect(bench.runEvidence({ sizes: ['quick'], config: { cose: { judge: { maxTokenz: 1 } } }, log: () => {} })).rejects.toThrow(/--config cose: .*unknown key 'judge.maxTokenz'/)
    } finally {
      delete bench.SIZES['quick-x2']
    }
  }, 60_000)

  it('--tune-seeds N: each dev candidate pools N tuning seeds (100, 101, …), and the tuning seeds never double as test seeds', async () => {
    const dir = join(root, 'tune-seeds')
    const cellsDir = join(dir, 'cells')
    // seed 101's cell saved beforehand (a finished cell is read back, not trained): a Solver wrong on every dev item
    mkdirSync(cellsDir, { recursive: true })
    const wrong = { key: 'grpo|verifier GRPO|seed 101|lr×1|dev', mean4: Array.from({ length: 8 }, () => [0, 0, 0, 0]), greedy: Array(8).fill(0), lr: 3e-5, diagnostics: {}, seconds: 0, load: 0 }
    writeFileSync(join(cellsDir, 'grpo_verifier_GRPO_seed_101_lr_1_dev.json'), JSON.stringify(wrong))
    const r = await bench.runEvidence({ size: 'quick', methods: ['grpo'], tuneSeeds: 2, tuneOnly: true, out: join(dir, 'evidence.json'), cellsDir, base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script: improving }), log: () => {} })
    const t = r.methods.grpo.tuning
    expect(t.seeds).toEqual([100, 101])
    const trained = JSON.parse(readFileSync(join(cellsDir, 'grpo_verifier_GRPO_seed_100_lr_1_dev.json'), 'utf8'))
    const share = (xs: number[][]) => xs.reduce((a, q) => a + q.reduce((s, x) => s + x, 0) / q.length, 0) / xs.length
    expect(share(trained.mean4)).toBeGreaterThan(0)
    // the candidate is the two seeds pooled: half of seed 100's accuracy, since seed 101 got nothing right
    expect(t.candidates[0].devMean4).toBeCloseTo(share(trained.mean4) / 2, 12)
    expect(t.candidates[0].devGreedy).toBeCloseTo(share(trained.greedy.map((x: number) => [x])) / 2, 12)
    await expect(bench.runEvidence({ size: 'quick', tuneSeeds: 0, log: () => {} })).rejects.toThrow(/--tune-seeds 0/)
    await expect(bench.runEvidence({ size: 'quick', tuneSeeds: 1.5, log: () => {} })).rejects.toThrow(/--tune-seeds 1.5/)
    await expect(bench.runEvidence({ size: 'quick', tuneSeeds: 2, seeds: [1, 2, 101], log: () => {} })).rejects.toThrow(/must differ from the tuning seeds 100,101/)
  }, 60_000)

  it('--items DEV,TEST sets the split sizes in place of the size\'s, and is refused when the splits would overlap or run into the TTRL prompts', async () => {
    const dir = join(root, 'items')
    const r = await bench.runEvidence({ size: 'quick', methods: ['grpo'], items: [6, 5], out: join(dir, 'evidence.json'), cellsDir: join(dir, 'cells'), base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script: improving }), log: () => {} })
    expect(r.splits).toEqual({ dev: 'L3 held-out items [0, 6)', test: 'L3 held-out items [400, 405)' })
    expect(r.methods.grpo.tuning.devItems).toBe(6)
    expect(r.methods.grpo.testItems).toBe(5)
    const cell = JSON.parse(readFileSync(join(dir, 'cells', 'base_test.json'), 'utf8'))
    expect(cell.mean4).toHaveLength(5)
    for (const bad of [[401, 5], [6, 501], [0, 5], [6], [6, 2.5]]) {
      await expect(bench.runEvidence({ size: 'quick', items: bad, log: () => {} })).rejects.toThrow(/--items .*DEV 1 to 400 .*TEST 1 to 500/)
    }
  }, 60_000)

  it('--arms: one method\'s named arms alone (its headline among them), ablations only between arms that ran; other lists refused', async () => {
    const dir = join(root, 'arms')
    const r = await bench.runEvidence({ size: 'quick', methods: ['rzero'], arms: ['+disagreement'], out: join(dir, 'evidence.json'), cellsDir: join(dir, 'cells'), base: join(root, 'no-such-base'), openPolicy: scriptedPolicies({ script: improving }), log: () => {} })
    expect(Object.keys(r.methods.rzero.arms)).toEqual(['+disagreement'])
    expect(r.methods.rzero.ablations).toEqual([])
    expect(r.armsRun).toEqual(['+disagreement'])
    expect(readdirSync(join(dir, 'cells')).filter((f) => f.includes('+disagreement_')).length).toBeGreaterThan(0)
    expect(readdirSync(join(dir, 'cells')).filter((f) => f.includes('R-Zero'))).toEqual([])
    await expect(bench.runEvidence({ size: 'quick', methods: ['rzero', 'grpo'], arms: ['+disagreement'], log: () => {} })).rejects.toThrow(/--arms: names arms of one method/)
    await expect(bench.runEvidence({ size: 'quick', methods: ['rzero'], arms: ['+disagreement', 'nope'], log: () => {} })).rejects.toThrow(/--arms: 'nope' is not an arm of rzero \(\+disagreement, R-Zero\)/)
    await expect(bench.runEvidence({ size: 'quick', methods: ['rzero'], arms: ['R-Zero'], log: () => {} })).rejects.toThrow(/must include its headline '\+disagreement'/)
  }, 60_000)

  it('--on-collapse rollback: each cell runs through the driver with its probe on dev items; a collapsing run is evaluated on its best probed checkpoint, and the run folder goes', async () => {
    // sampled (training) answers right more often with every update, greedy (held-out) answers less often: self-play's collapse
    const collapsing = (c: ScriptContext) => {
      const question = c.prompt.slice('Solve: '.length).split('\n')[0].trim()
      const rate = c.temperature === 0 ? Math.max(0, 0.9 - 0.3 * c.updates) : Math.min(1, 0.3 * c.updates)
      return scriptedAnswer(question, c.uniform < rate, c.uniform)
    }
    bench.SIZES['quick-guard'] = { ...bench.SIZES.quick, label: 'five grpo steps', steps: { ...bench.SIZES.quick.steps, grpo: 5 }, over: { grpo: { questions: { perStep: 8 }, rollout: { n: 8 } } } }
    try {
      const dir = join(root, 'guard')
      const opened = scriptedPolicies({ script: collapsing })
      const run = (guard?: string) => bench.runEvidence({ size: 'quick-guard', methods: ['grpo'], guard, out: join(dir, `${guard}.json`), cellsDir: join(dir, `cells-${guard}`), base: join(root, 'no-such-base'), openPolicy: opened, log: () => {} })
      const guarded = await run('rollback')
      expect(guarded.guard).toEqual({ onCollapse: 'rollback', rule: 'falls-while-reward-rises', probe: 'L3 held-out items [0, 100), 8 evaluations a run', window: 3 })
      const cell = JSON.parse(readFileSync(join(dir, 'cells-rollback', 'grpo_verifier_GRPO_seed_1_lr_1_test.json'), 'utf8'))
      // the probe at every step (5 steps / 8 probes rounds to every step), the base's at step 0; the guard fires on steps 1-3
      expect(cell.guard.probe.map((p: { step: number }) => p.step)).toEqual([0, 1, 2, 3])
      expect(cell.guard).toMatchObject({ action: 'rollback', rule: 'falls-while-reward-rises', fired: true, firedAt: 3, stepsRun: 3, rolledBackTo: 1 })
      expect(cell.guard.message).toMatch(/^collapse: training reward rising/)
      // each window the guard judged, with the numbers behind its verdict: here the one window, steps 1-3
      expect(cell.guard.checks).toHaveLength(1)
      expect(cell.guard.checks[0]).toMatchObject({ collapsed: true, from: 1, to: 3 })
      expect(cell.guard.checks[0].drop).toBeGreaterThan(1.96 * cell.guard.checks[0].standardError)
      expect(cell.guard.checks[0].rewardSlope).toBeGreaterThan(1.96 * cell.guard.checks[0].rewardSlopeError)
      // evaluated on step 1's checkpoint, opened from its folder (a fresh policy: the script sees no updates)
      expect(opened.policies.some((p) => /checkpoints/.test((p as unknown as { dir: string }).dir))).toBe(true)
      expect(guarded.methods.grpo.arms['verifier GRPO'].guard).toEqual({ fired: 3, rolledBack: 3, firedAt: [3, 3, 3] })
      expect(readdirSync(join(dir, 'cells-rollback', 'runs'))).toEqual([])
      // unguarded, the same cells end on the collapsed model: the rollback's greedy accuracy is higher
      const plain = await run(undefined)
      expect(guarded.methods.grpo.arms['verifier GRPO'].greedy).toBeGreaterThan(plain.methods.grpo.arms['verifier GRPO'].greedy + 0.2)
      await expect(bench.runEvidence({ size: 'quick', methods: ['grpo', 'dpo'], guard: 'rollback', log: () => {} })).rejects.toThrow(/--on-collapse: dpo train on no reward of their own/)
      await expect(bench.runEvidence({ size: 'quick', methods: ['grpo'], guard: 'undo', log: () => {} })).rejects.toThrow(/--on-collapse undo: one of warn, stop, rollback/)
      await expect(bench.runEvidence({ size: 'quick', methods: ['grpo'], guard: 'rollback', collapseRule: 'sinks', log: () => {} })).rejects.toThrow(/--collapse-rule sinks: one of falls-while-reward-rises, falls/)
      await expect(bench.runEvidence({ size: 'quick', methods: ['grpo'], collapseRule: 'falls', log: () => {} })).rejects.toThrow(/--collapse-rule: the rule of the collapse guard, which --on-collapse turns on/)
    } finally {
      delete bench.SIZES['quick-guard']
    }
  }, 120_000)
  it('another base model\'s cells are named by its folder and a digest of its weights: two fine-tunes in folders of the same name never share cells', () => {
    const weights = (dir: string, bytes: number[]) => {
      mkdirSync(dir, { recursive: true })
      writeFileSync(join(dir, 'model.safetensors'), Buffer.from(bytes))
      return dir
    }
    const a = weights(join(root, 'tag-a', 'nines'), [1, 2, 3])
    const b = weights(join(root, 'tag-b', 'nines'), [1, 2, 4])
    const c = weights(join(root, 'tag-c', 'nines'), [1, 2, 3])
    expect(bench.modelTag(a)).toMatch(/^-nines-w[0-9a-f]{8}$/)
    expect(bench.modelTag(b)).not.toBe(bench.modelTag(a))
    expect(bench.modelTag(c)).toBe(bench.modelTag(a))
    expect(bench.modelTag(join(import.meta.dirname, '..', '..', 'models', 'arith-qwen3-tiny'))).toBe('')
  })
})
