// Every method's loop against the scripted fake policy (src/methods/common/scripted-policy.ts): no
// engine, so each test recomputes from the scripted outputs what the method must have made of them
// — format indicators, rewards, pseudo-labels, replay contents, the advantages and weights handed
// to the trainer — and checks that a run stopped at its mid-run checkpoint and resumed reproduces
// the straight run (the fake's loss reads its weights and moments, so a bad restore shows).
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { checkpointDir, drive } from '../../src/methods/common/driver.js'
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from '../../src/methods/common/method.js'
import { scriptedPolicies, type ScriptContext, type ScriptedPolicy, type ScriptedPolicyOptions, type ScriptedTrainer } from '../../src/methods/common/scripted-policy.js'
import { resolveCoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { resolveGrpoConfig } from '../../src/methods/grpo/config.js'
import { GrpoRun } from '../../src/methods/grpo/loop.js'
import { resolveJzeroConfig } from '../../src/methods/jzero/config.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { challengerBatchRewards } from '../../src/methods/jzero/rewards.js'
import { DPO_TOY_PRESET, resolveOfflineConfig, TOY_PRESET, type OfflineConfig } from '../../src/methods/offline/config.js'
import { OfflineRun } from '../../src/methods/offline/loop.js'
import { resolveRzeroConfig } from '../../src/methods/rzero/config.js'
import { RzeroRun, type ChallengerRecord, type SolverRecord } from '../../src/methods/rzero/loop.js'
import { resolveTtrlConfig } from '../../src/methods/ttrl/config.js'
import { TtrlRun } from '../../src/methods/ttrl/loop.js'
import { computeAdvantages } from '../../src/rl/advantages.js'
import { sequenceConfidence } from '../../src/signals/confidence.js'
import { repetitionPenalty } from '../../src/tasks/cluster.js'
import { coseSolverReward, coseSolverWeight } from '../../src/rl/cose.js'
import type { TrainSequence } from '../../src/train/trainer.js'
import { answerOf, arithWorld as toyWorld, verifyAnswer } from '../../src/worlds/arith/index.js'
import { verifierScore } from '../../src/methods/common/world.js'
import { arithScript, scriptedAnswer, scriptedJudge, scriptedJudgeScore, scriptedValidatorScore } from './arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-scripted-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const BASE = join(root, 'no-such-base-model')
/** The toy world every method runs on here (its prompts are what the scripted actor reads). */
const arithWorld = toyWorld()
const arithRzeroWorld = arithWorld
const arithJzeroWorld = arithWorld // the fake starts from zero weights wherever it is pointed

/** Text of token ids as the fake encodes it (UTF-8 bytes; 0 = end of sequence). */
const text = (ids: readonly number[]) => Buffer.from(ids.filter((t) => t !== 0)).toString('utf8')
const trainerOf = (p: ScriptedPolicy) => p.trainerOf as ScriptedTrainer
const metrics = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>)
const WALL_CLOCK = ['seconds', 'tokensPerSecond', 'latencyMs', 'meanLatencyMs', 'maxLatencyMs']
const untimed = (rows: unknown[]) => JSON.parse(JSON.stringify(rows, (k, v) => (WALL_CLOCK.includes(k) ? undefined : v)))

/** Drives `start()` straight for `steps`, and again stopped after step 1 and resumed by `resume(dir)`; returns both metrics. */
async function straightAndResumed<C extends BaseMethodConfig, R extends BaseStepRecord>(
  name: string,
  steps: number,
  start: () => Promise<MethodRun<C, R>>,
  resume: (dir: string) => Promise<MethodRun<C, R>>,
): Promise<{ straight: unknown[]; resumed: unknown[]; splitDir: string }> {
  const o = (outDir: string, stop = false) => ({ outDir, method: name, totalSteps: steps, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', stopRequested: stop ? () => true : undefined })
  const straightDir = join(root, `${name}-straight`)
  const a = await start()
  await drive(a, o(straightDir))
  a.dispose()
  const splitDir = join(root, `${name}-split`)
  const b = await start()
  expect((await drive(b, o(splitDir, true))).stoppedEarly).toBe(true)
  b.dispose()
  const c = await resume(checkpointDir(splitDir, 1))
  expect(c.step).toBe(1)
  await drive(c, o(splitDir))
  c.dispose()
  return { straight: untimed(metrics(straightDir)), resumed: untimed(metrics(splitDir)), splitDir }
}

describe('COSE on the scripted policy', () => {
  const config = resolveCoseConfig({ steps: 2, proposer: { count: 10, levels: [2, 3], temperature: 1, maxTokens: 40 }, solver: { questions: 3, n: 4, temperature: 1, maxTokens: 64 }, eval: { every: 1, size: 6, benchmarks: [] }, checkpointEvery: 1 })
  const script: ScriptedPolicyOptions = { script: arithScript({ solveRate: 0.5, malformedRate: 0.2 }) }

  it('validates, fills the replay with accepted questions, rewards by Eq. 7 and trains on GRPO advantages with Eq. 5 weights', async () => {
    const open = scriptedPolicies(script)
    const run = await CoseRun.start(BASE, config, arithWorld, { openPolicy: open })
    const r = await run.runStep()
    expect(open.policies).toHaveLength(2) // the trained policy and the frozen KL reference (full fine-tuning)
    const policy = open.policies.find((p) => p.trainerOf)!
    expect(open.policies.find((p) => !p.trainerOf)!.calls).toEqual([]) // the reference only scores (in the engine)
    const [proposed, verdicts] = policy.calls
    const questions = proposed.outputs.map((g) => /<question>(.*)<\/question>/.exec(g[0].text)?.[1] ?? null)
    const wellFormed = questions.filter((q): q is string => q !== null)
    expect(r.proposals).toBe(10)
    expect(r.proposerFormatRate).toBeCloseTo(wellFormed.length / 10, 12)
    expect(verdicts.prompts).toEqual(wellFormed.map((q) => `Rate problem: ${q}\n`))
    const accepted = wellFormed.filter((q) => (scriptedValidatorScore(q) - 1) / 9 >= 0.5)
    expect(r.acceptRate).toBeCloseTo(accepted.length / 10, 12)
    expect(accepted.length).toBeGreaterThan(0)
    expect(r.bufferSize).toBe(new Set(accepted).size)
    for (const q of accepted) expect(run.replay.has(q)).toBe(true)

    // Solver/Judge: every solver sequence handed to the trainer carries r_S (Eq. 7) → GRPO advantage and w_S (Eq. 5)
    const [batch] = trainerOf(policy).batches
    const solver = (batch.sequences ?? []).filter((s) => text(s.prompt).startsWith('Solve: '))
    expect(r.questionsSolved).toBeGreaterThan(0)
    expect(solver.length).toBe(r.questionsSolved * 4)
    const question = (s: TrainSequence) => text(s.prompt).slice('Solve: '.length).trim()
    const rS = solver.map((s) => coseSolverReward(true, (scriptedJudgeScore(question(s), text(s.completion)) - 1) / 9))
    expect(r.rewardSolver.mean).toBeCloseTo(rS.reduce((a, b) => a + b, 0) / rS.length, 12)
    const expected = computeAdvantages('grpo', rS, solver.map(question))
    solver.forEach((s, i) => expect(s.advantages).toBeCloseTo(expected[i], 12))
    // w_S (Eq. 5) from the question's v, c_V and the Judge verdict's c_J (normalized entropy of its tokens)
    const judged = policy.calls[3].outputs.map((g) => sequenceConfidence('normalized-entropy', { entropy: g[0].entropy, vocabSize: 256 }))
    solver.forEach((s, i) => {
      const e = run.replay.get(question(s))!
      expect(s.weight).toBeCloseTo(coseSolverWeight(e.v, e.cV, judged[i], { enabled: true }), 12)
      expect(s.weight! >= 0.1 && s.weight! <= 1).toBe(true)
    })
    // the solve rate of each question (Eq. 1) entered the replay
    const q0 = question(solver[0])
    expect(run.replay.get(q0)!.p).toBeCloseTo(solver.filter((s) => question(s) === q0).reduce((a, s) => a + (scriptedJudgeScore(q0, text(s.completion)) - 1) / 9, 0) / 4, 12)
    expect(r.train?.skipped).toBe(false)
    run.dispose()
    expect(open.policies.every((p) => p.isDisposed)).toBe(true)
  })

  it('resumes from its checkpoint exactly (policy, optimizer, replay, RNG)', async () => {
    const open = scriptedPolicies(script)
    const { straight, resumed, splitDir } = await straightAndResumed('cose', 2, () => CoseRun.start(BASE, config, arithWorld, { openPolicy: open }), (dir) => CoseRun.resume(dir, arithWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
    for (const f of ['model', 'model-state', 'replay.json', 'run_state.json']) expect(existsSync(join(checkpointDir(splitDir, 2), f))).toBe(true)
  })

  it("switches.judge 'model': a frozen Judge model scores the Solver's answers (its verdicts, its c_J), is never trained, and is reopened on resume", async () => {
    const judgeDir = join(root, 'frozen-judge')
    // the frozen Judge says 9 ("right") of every answer; the policy's own Judge role would follow the verifier
    const open = scriptedPolicies((ref) => (ref.model === judgeDir ? { script: () => '<score>9</score>' } : script))
    const withJudge = resolveCoseConfig({ switches: { judge: 'model' }, judge: { model: judgeDir } }, config)
    const run = await CoseRun.start(BASE, withJudge, arithWorld, { openPolicy: open })
    const r = await run.runStep()
    const judge = open.policies.find((p) => p.dir === judgeDir)!
    const policy = open.policies.find((p) => p.trainerOf)!
    expect(judge.trainerOf).toBeNull()
    expect(policy.calls.some((c) => c.prompts.some((p) => p.startsWith('Judge: ')))).toBe(false)
    const [judged] = judge.calls
    expect(judged.prompts.every((p) => p.startsWith('Judge: '))).toBe(true)
    const solver = (trainerOf(policy).batches[0].sequences ?? []).filter((s) => text(s.prompt).startsWith('Solve: '))
    expect(solver.length).toBe(r.questionsSolved * 4)
    expect(judged.prompts).toHaveLength(solver.length)
    // every answer scored p = (9 − 1)/9 by the frozen Judge, whatever the verifier says
    expect(r.rewardSolver.mean).toBeCloseTo(coseSolverReward(true, 8 / 9), 12)
    expect(r.diagnostics.judgeVerifierAgreement).toBeCloseTo(r.diagnostics.trueSolveRate.mean, 12)
    expect(r.diagnostics.judgeVerifierAgreement).toBeLessThan(1)
    const cJ = judged.outputs.map((g) => sequenceConfidence('normalized-entropy', { entropy: g[0].entropy, vocabSize: 256 }))
    expect(r.confidenceJudge.mean).toBeCloseTo(cJ.reduce((a, b) => a + b, 0) / cJ.length, 12)
    expect(run.config.judge.model).toBe(judgeDir)
    run.dispose()
    expect(judge.isDisposed).toBe(true)
    const { straight, resumed } = await straightAndResumed('cose-judge-model', 2, () => CoseRun.start(BASE, withJudge, arithWorld, { openPolicy: open }), (dir) => CoseRun.resume(dir, arithWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
  })

  it("refuses a Judge model without switches.judge 'model', and 'model' without a folder", () => {
    expect(() => resolveCoseConfig({ switches: { judge: 'model' } }, config)).toThrow(/judge\.model/)
    expect(() => resolveCoseConfig({ judge: { model: '/some/judge' } }, config)).toThrow(/judge\.model names the Judge's model folder exactly when switches\.judge is 'model'/)
  })
})

describe('GRPO (the example method) on the scripted policy', () => {
  const config = resolveGrpoConfig({ steps: 2, questions: { level: 3, perStep: 5 }, rollout: { n: 4, temperature: 1, topP: 1, maxTokens: 64 }, eval: { every: 1, size: 6, benchmarks: [] }, checkpointEvery: 1 })

  it('rewards verified answers 1, trains on their GRPO advantages, counts the informative groups', async () => {
    const open = scriptedPolicies({ script: arithScript({ solveRate: 0.5 }) })
    const run = await GrpoRun.start(BASE, config, arithWorld, { openPolicy: open })
    const r = await run.runStep()
    const [policy] = open.policies
    expect(open.policies).toHaveLength(1) // no KL: no reference copy
    const [rollout] = policy.calls
    const rewards = rollout.outputs.flatMap((g, qi) => g.map((c) => (verifyAnswer(rollout.prompts[qi].slice('Solve: '.length).trim(), c.text) === true ? 1 : 0)))
    expect(r.reward.mean).toBeCloseTo(rewards.reduce((a, b) => a + b, 0) / rewards.length, 12)
    const groups = rollout.outputs.flatMap((g, qi) => g.map(() => qi))
    const advantages = computeAdvantages('grpo', rewards, groups)
    const [batch] = trainerOf(policy).batches
    batch.sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(advantages[i], 12))
    expect(r.informativeGroups).toBe(rollout.outputs.filter((g, qi) => new Set(g.map((_, k) => rewards[qi * 4 + k])).size > 1).length)
    for (const p of rollout.prompts) expect(answerOf(p.slice('Solve: '.length).trim())).not.toBeNull() // fresh, well-formed training questions
    run.dispose()
  })

  it('resumes exactly', async () => {
    const open = scriptedPolicies({ script: arithScript({ solveRate: 0.5 }) })
    const { straight, resumed } = await straightAndResumed('grpo', 2, () => GrpoRun.start(BASE, config, arithWorld, { openPolicy: open }), (dir) => GrpoRun.resume(dir, arithWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
  })
})

describe('TTRL on the scripted policy', () => {
  const config = resolveTtrlConfig({ steps: 2, prompts: { offset: 0, size: 6 }, promptsPerStep: 3, rollout: { n: 5, temperature: 1, topP: 1, maxTokens: 64 }, reward: { arm: 'ttrl' }, eval: { every: 1, size: 4, benchmarks: [], adaptation: false, protocol: { samples: 2, temperature: 0.6, topP: 0.95, maxTokens: 64, seed: 7 } }, checkpointEvery: 1 })

  it('majority-votes pseudo-labels, rewards agreement (arm ttrl), trains the LoRA policy on GRPO advantages', async () => {
    const open = scriptedPolicies({ script: arithScript({ solveRate: 0.7 }) })
    const run = await TtrlRun.start(BASE, config, arithWorld, { openPolicy: open })
    const r = await run.runStep()
    const [policy] = open.policies
    expect(open.policies).toHaveLength(1) // LoRA: the reference is the base weights, no copy
    const [rollout] = policy.calls
    expect(rollout.options.stats?.topK).toBe(config.scoring.topK) // UID B.1: statistics from the sampling pass
    const answers = rollout.outputs.map((g) => g.map((c) => /<answer>(.*)<\/answer>/.exec(c.text)![1]))
    const labels = answers.map((g) => {
      const counts = new Map<string, number>()
      for (const a of g) counts.set(a, (counts.get(a) ?? 0) + 1)
      return [...counts].reduce((best, x) => (x[1] > best[1] ? x : best))[0] // first-occurrence ties
    })
    const rewards = answers.flatMap((g, qi) => g.map((a) => (a === labels[qi] ? 1 : 0)))
    expect(r.agreeRate).toBeCloseTo(rewards.reduce((a, b) => a + b, 0) / rewards.length, 12)
    expect(r.reward.mean).toBeCloseTo(r.agreeRate, 12)
    const truth = rollout.prompts.map((p) => String(answerOf(p.slice('Solve: '.length).trim())))
    expect(r.labelAccuracy).toBeCloseTo(labels.filter((l, i) => l === truth[i]).length / labels.length, 12)
    const advantages = computeAdvantages('grpo', rewards, rewards.map((_, i) => Math.floor(i / 5)))
    const seqs = trainerOf(policy).batches.flatMap((b) => b.sequences!)
    seqs.forEach((s, i) => expect(s.advantages).toBeCloseTo(advantages[i], 9))
    expect(trainerOf(policy).batches).toHaveLength(Math.ceil(3 / config.ppo.miniBatchPrompts)) // one epoch of mini-batches
    expect(trainerOf(policy).options.lora).toEqual({ rank: 16, alpha: 32 })
    run.dispose()
  })

  it('resumes exactly from an adapter checkpoint, eval files included', async () => {
    const open = scriptedPolicies({ script: arithScript({ solveRate: 0.7 }) })
    const { straight, resumed, splitDir } = await straightAndResumed('ttrl', 2, () => TtrlRun.start(BASE, config, arithWorld, { openPolicy: open }), (dir) => TtrlRun.resume(dir, arithWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
    expect(existsSync(join(checkpointDir(splitDir, 2), 'model', 'adapter_model.safetensors'))).toBe(true)
    expect(existsSync(join(splitDir, 'evals', 'step-000002.json'))).toBe(true)
  })
})

describe('R-Zero + disagreement on the scripted policy', () => {
  // The ensemble's Solver samples (T 0.7 and 1.0) are always right, so p̂ = 1, r_unc = r_dis = 0 and a
  // parsed question's reward is −r_rep alone; the Solver's own rollouts (T 0.9) are right half the time.
  const ensembleAlwaysRight: ScriptedPolicyOptions = { script: (c) => (c.temperature === 0.9 || !c.prompt.startsWith('Solve: ') ? arithScript({ solveRate: 0.5 })(c) : arithScript({ solveRate: 1 })(c)) }
  const config = resolveRzeroConfig({
    steps: 2,
    phases: { challengerSteps: 1, solverSteps: 1 },
    challenger: { batch: 8, levels: [3], temperature: 1, maxTokens: 40 },
    ensemble: { k: 3, maxTokens: 64, second: { model: 'none', temperature: 0.7, healSteps: 0 } },
    solver: { candidates: 6, band: [0, 1], questions: 3, n: 4, temperature: 0.9, maxTokens: 64 },
    eval: { every: 1, size: 6, benchmarks: [] },
    checkpointEvery: 1,
  })
  const challengerOf = (open: ReturnType<typeof scriptedPolicies>) => open.policies.filter((p) => p.trainerOf)[0]
  const solverOf = (open: ReturnType<typeof scriptedPolicies>) => open.policies.filter((p) => p.trainerOf)[1]

  it('Challenger step: −1 for a parse failure, α·r_unc + β·r_dis − r_rep otherwise, one GRPO group', async () => {
    const open = scriptedPolicies(ensembleAlwaysRight)
    const run = await RzeroRun.start(BASE, config, arithRzeroWorld, { openPolicy: open })
    expect(run.variants.map((v) => v.sampler.name)).toEqual(['solver@0.7', 'solver@1'])
    const r = (await run.runStep()) as ChallengerRecord
    const [batchCall] = challengerOf(open).calls
    const questions = batchCall.outputs[0].map((c) => arithRzeroWorld.rzero.parseQuestion(c.text)?.question ?? null)
    expect(r.parseRate).toBeCloseTo(questions.filter((q) => q !== null).length / 8, 12)
    expect(r.pHat.min).toBe(1)
    expect(r.rDis.max).toBe(0)
    const rep = repetitionPenalty(questions.map((q) => (q === null ? null : arithRzeroWorld.answers.repetitionText(q))), config.reward.repetition)
    const rewards = questions.map((q, i) => (q === null ? -1 : -rep.penalty[i]))
    expect(r.reward.mean).toBeCloseTo(rewards.reduce((a, b) => a + b, 0) / 8, 12)
    const advantages = computeAdvantages('grpo', rewards, rewards.map(() => 0))
    trainerOf(challengerOf(open)).batches[0].sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(advantages[i], 12))
    expect(trainerOf(solverOf(open)).batches).toHaveLength(0) // the Solver is frozen in a Challenger step
    run.dispose()
  })

  it('Solver step: majority pseudo-labels of the frozen Challenger\'s questions, agreement rewards, GRPO per question', async () => {
    const open = scriptedPolicies(ensembleAlwaysRight)
    const run = await RzeroRun.start(BASE, config, arithRzeroWorld, { openPolicy: open })
    await run.runStep()
    const r = (await run.runStep()) as SolverRecord
    expect(r.phase).toBe('solver')
    expect(r.pseudoLabelAccuracy).toBe(1) // the ensemble is always right here
    const rollouts = solverOf(open).calls.find((c) => c.options.temperature === 0.9)!
    const rewards = rollouts.outputs.flatMap((g, qi) => g.map((c) => (verifyAnswer(rollouts.prompts[qi].slice('Solve: '.length).trim(), c.text) === true ? 1 : 0)))
    expect(r.kept).toBe(rollouts.prompts.length)
    expect(r.reward.mean).toBeCloseTo(rewards.reduce((a, b) => a + b, 0) / rewards.length, 12)
    const advantages = computeAdvantages('grpo', rewards, rewards.map((_, i) => Math.floor(i / 4)))
    trainerOf(solverOf(open)).batches[0].sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(advantages[i], 12))
    expect(trainerOf(challengerOf(open)).batches).toHaveLength(1) // only its own step
    run.dispose()
  })

  it('resumes exactly (both policies, both optimizers, the RNG)', async () => {
    const open = scriptedPolicies(ensembleAlwaysRight)
    const { straight, resumed } = await straightAndResumed('rzero', 2, () => RzeroRun.start(BASE, config, arithRzeroWorld, { openPolicy: open }), (dir) => RzeroRun.resume(dir, arithRzeroWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
  })
})

describe('J-Zero on the scripted policy', () => {
  const config = resolveJzeroConfig({
    steps: 2,
    challenger: { steps: 1, batch: 6, rollouts: 1, solverSamples: 3 },
    selection: { pool: 8, keep: 3, samples: 3 },
    solver: { steps: 1, batch: 3, miniBatch: 3, rollouts: 3 },
    judge: { steps: 2, batch: 4, tasks: 8, lr: 1e-2 },
    eval: { every: 1, size: 6, benchmarks: [], judgePairs: 3 },
    checkpointEvery: 1,
  })
  // the policy answers; the Judge (a reward model) scores +2 right / −2 wrong plus what it has learned
  const isJudge = (dir: string) => dir === JUDGE || basename(dir) === 'judge' // the Judge folder, or its checkpointed copy
  const options = (ref: { model: string }): ScriptedPolicyOptions => (isJudge(ref.model) ? { script: () => '', judge: scriptedJudge, scoreLabels: 1 } : { script: arithScript({ solveRate: 0.5 }) })
  const JUDGE = join(root, 'no-such-judge')

  it('rewards the Challenger by Eq. 4–6, the Solver by σ(J) (Eq. 9), trains the Judge on pairs (Eq. 13)', async () => {
    const open = scriptedPolicies(options)
    const run = await JzeroRun.start(BASE, JUDGE, config, arithJzeroWorld, { openPolicy: open })
    const r = await run.runStep()
    const [judge, challenger, solver] = [open.policies[0], ...open.policies.filter((p) => p.trainerOf && p.scoreLabels === 0)]
    expect(judge.scoreLabels).toBe(1)
    // Challenger: tasks of one instruction, M Solver answers each, r̄ of σ(J), one GRPO group
    const tasks = challenger.calls[0].outputs.flat().map((c) => arithJzeroWorld.jzero.parseTask(c.text)?.question ?? null)
    const answers = solver.calls[0]
    const sigma = (x: number) => 1 / (1 + Math.exp(-x))
    const scores = tasks.map(() => [] as number[])
    const ok = tasks.flatMap((t, i) => (t === null ? [] : [i]))
    answers.outputs.forEach((g, k) => g.forEach((c) => scores[ok[k]].push(sigma(scriptedJudge(`Judge: ${tasks[ok[k]]}\n`, c.text)))))
    const expected = challengerBatchRewards({ tasks: tasks.map((t) => (t === null ? null : arithJzeroWorld.answers.repetitionText(t))), scores, tau: 0.5, lambda: 1 })
    expect(r.challenger.reward.mean).toBeCloseTo(expected.rewards.reduce((a, b) => a + b, 0) / tasks.length, 6)
    const cAdv = computeAdvantages('grpo', expected.rewards, expected.rewards.map(() => 0))
    trainerOf(challenger).batches[0].sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(cAdv[i], 6))
    // Solver: σ(J) of each rollout, GRPO within each task
    const rollouts = solver.calls.find((c) => c.options.n === 3 && c.prompts.length === 3 && trainerOf(solver).batches.length > 0)!
    const sRewards = rollouts.outputs.flatMap((g, qi) => g.map((c) => sigma(scriptedJudge(`Judge: ${rollouts.prompts[qi].slice('Solve: '.length).trim()}\n`, c.text))))
    const sAdv = computeAdvantages('grpo', sRewards, sRewards.map((_, i) => Math.floor(i / 3)))
    trainerOf(solver).batches[0].sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(sAdv[i], 6))
    expect(r.solver.reward.min).toBeGreaterThan(0)
    // Judge: Bradley–Terry batches of [chosen, rejected] pairs
    expect(r.judge.train?.updates).toBe(2)
    for (const b of trainerOf(judge).batches) expect(b.sequences!.length).toBe(2 * b.pairs!.length)
    run.dispose()
  })

  it.each([0, 0.4])("the 'verifier' control (verifierFlip %s) rewards every answer by the verifier, 1/0, and still measures the frozen Judge", async (flip) => {
    // an inverted Judge (+2 wrong, −2 right): whatever it says must reach no reward
    const inverted = (prompt: string, completion: string) => -scriptedJudge(prompt, completion)
    const open = scriptedPolicies((ref) => (isJudge(ref.model) ? { script: () => '', judge: inverted, scoreLabels: 1 } : { script: arithScript({ solveRate: 0.5 }) }))
    const verifierConfig = resolveJzeroConfig({ ...config, switches: { judge: 'verifier', trainJudge: false }, judge: { ...config.judge, verifierFlip: flip } })
    const verdict = (q: string, text: string) => verifierScore(arithJzeroWorld, q, text, flip, String(verifierConfig.seed))
    const run = await JzeroRun.start(BASE, JUDGE, verifierConfig, arithJzeroWorld, { openPolicy: open })
    const r = await run.runStep()
    const [judge, challenger, solver] = [open.policies[0], ...open.policies.filter((p) => p.trainerOf && p.scoreLabels === 0)]
    // Challenger: r̄ is the verifier's mean over each task's M answers (Eq. 4 with the verifier in σ(J)'s place)
    const tasks = challenger.calls[0].outputs.flat().map((c) => arithJzeroWorld.jzero.parseTask(c.text)?.question ?? null)
    const ok = tasks.flatMap((t, i) => (t === null ? [] : [i]))
    const scores = tasks.map(() => [] as number[])
    solver.calls[0].outputs.forEach((g, k) => g.forEach((c) => scores[ok[k]].push(verdict(tasks[ok[k]]!, c.text))))
    const expected = challengerBatchRewards({ tasks: tasks.map((t) => (t === null ? null : arithJzeroWorld.answers.repetitionText(t))), scores, tau: 0.5, lambda: 1 })
    expect(r.challenger.reward.mean).toBeCloseTo(expected.rewards.reduce((a, b) => a + b, 0) / tasks.length, 6)
    // Solver: each rollout's reward is 1 or 0 as the verifier says (or flipped, on the inputs the flip picks), GRPO within each task
    const rollouts = solver.calls.find((c) => c.options.n === 3 && c.prompts.length === 3 && trainerOf(solver).batches.length > 0)!
    const sRewards = rollouts.outputs.flatMap((g, qi) => g.map((c) => verdict(rollouts.prompts[qi].slice('Solve: '.length).trim(), c.text)))
    expect(new Set(sRewards)).toEqual(new Set([0, 1])) // both kinds present, or the check below could not tell the Judge's reward from the verifier's
    const sAdv = computeAdvantages('grpo', sRewards, sRewards.map((_, i) => Math.floor(i / 3)))
    trainerOf(solver).batches[0].sequences!.forEach((s, i) => expect(s.advantages).toBeCloseTo(sAdv[i], 6))
    // the frozen Judge is measured on the same rollouts: inverted, it orders every (right, wrong) pair wrongly
    expect(r.solver.judgePairs).toBeGreaterThan(0)
    expect(r.solver.judgePairAccuracy).toBe(0)
    expect(judge.trainerOf).toBeFalsy()
    expect(r.judge.train).toBeNull()
    run.dispose()
  })

  it("refuses the 'verifier' control with a Judge to train", () => {
    expect(() => resolveJzeroConfig({ switches: { judge: 'verifier' } }, undefined, 'x.json')).toThrow(/switches\.trainJudge.*nothing to train it for/s)
  })

  it('resumes exactly (three policies, three optimizers)', async () => {
    const open = scriptedPolicies(options)
    const { straight, resumed, splitDir } = await straightAndResumed('jzero', 2, () => JzeroRun.start(BASE, JUDGE, config, arithJzeroWorld, { openPolicy: open }), (dir) => JzeroRun.resume(dir, arithJzeroWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
    for (const f of ['challenger', 'solver', 'judge', 'challenger-state', 'solver-state', 'judge-state']) expect(existsSync(join(checkpointDir(splitDir, 2), f))).toBe(true)
  })
})

describe('offline weighted SFT and DPO on the scripted policy', () => {
  const small = (base: OfflineConfig, poolDir: string): OfflineConfig =>
    resolveOfflineConfig(
      {
        steps: 2,
        pool: { ...base.pool, dir: poolDir, prompts: 12, calibrationPrompts: 6, k: 6, maxTokens: 64 },
        warmStart: { lr: 1e-2, batchSize: 8, epochs: 1 },
        train: { ...base.train, batchSize: 4 },
        eval: { every: 1, size: 4, benchmarks: [], protocol: { samples: 2, temperature: 0.6, topP: 0.95, maxTokens: 64, seed: 7 } },
        checkpointEvery: 1,
      },
      base,
    )
  const script: ScriptedPolicyOptions = { script: arithScript({ solveRate: 0.8 }) }

  it('weighted SFT: a pool of distinct verified responses, weights of mean one per prompt (Eq. 7), resumes exactly', async () => {
    const c = small(TOY_PRESET, join(root, 'pool-wsft'))
    const open = scriptedPolicies(script)
    const run = await OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })
    for (const p of run.pool.prompts) {
      expect(new Set(p.responses.map((x) => x.text)).size).toBe(p.responses.length)
      for (const x of p.responses) expect(verifyAnswer(p.question, x.text)).toBe(true)
    }
    const r = await run.runStep()
    const [batch] = trainerOf(open.policies.at(-1)!).batches
    expect(batch.sequences!.length).toBe(r.batch)
    const byPrompt = new Map<number, number[]>()
    for (const u of run.units) if (u.kind === 'sft') byPrompt.set(u.prompt, [...(byPrompt.get(u.prompt) ?? []), u.weight])
    for (const ws of byPrompt.values()) expect(ws.reduce((a, b) => a + b, 0) / ws.length).toBeCloseTo(1, 12)
    run.dispose()
    const { straight, resumed } = await straightAndResumed('wsft', 2, () => OfflineRun.start(BASE, c, arithWorld, { openPolicy: open }), (dir) => OfflineRun.resume(dir, arithWorld, { openPolicy: open }))
    expect(resumed).toEqual(straight)
  })

  it('DPO: the shared warm start is built once and is the reference; pairs reach the trainer', async () => {
    const c = small({ ...DPO_TOY_PRESET, pairs: { minGap: 0, commonMethods: ['sc', 'uid-conj'] } }, join(root, 'pool-dpo'))
    const open = scriptedPolicies(script)
    const run = await OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })
    expect(run.modelDir).toMatch(/warmstart-/)
    expect(existsSync(join(run.modelDir, 'model.safetensors'))).toBe(true) // merged (adapterOnly: false)
    await run.runStep()
    const trained = open.policies.at(-1)!
    const [batch] = trainerOf(trained).batches
    expect(batch.pairs!.length).toBeGreaterThan(0)
    expect(batch.sequences!.length).toBe(2 * batch.pairs!.length)
    expect(trainerOf(trained).options.reference).toBe('lora-off')
    run.dispose()
    const again = await OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })
    expect(again.modelDir).toBe(run.modelDir)
    again.dispose()
  })

  it("DPO's right-vs-wrong control: the same warm start, a verified response over a wrong one reaches the trainer", async () => {
    const c = small({ ...DPO_TOY_PRESET, pairs: { minGap: 0, commonMethods: ['sc', 'uid-conj'] } }, join(root, 'pool-dpo'))
    const open = scriptedPolicies(script)
    const paper = await OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })
    paper.dispose()
    const run = await OfflineRun.start(BASE, { ...c, arm: 'right-vs-wrong' }, arithWorld, { openPolicy: open })
    expect(run.modelDir).toBe(paper.modelDir) // the paper arms' warm start: no wrong response enters it
    await run.runStep()
    const [batch] = trainerOf(open.policies.at(-1)!).batches
    expect(batch.pairs!.length).toBeGreaterThan(0)
    const units = run.units.filter((u) => u.kind === 'dpo')
    expect(units.length).toBeGreaterThan(0)
    expect(units.every((u) => u.kind === 'dpo' && u.rejectedWrong)).toBe(true)
    // each pair: one of the prompt's verified responses over one of its wrong ones
    const same = (a: readonly number[], b: readonly number[]) => a.join() === b.join()
    for (const [ci, ri] of batch.pairs!) {
      const p = run.pool.prompts.find((q) => q.responses.some((x) => same(x.completion, batch.sequences![ci].completion)))!
      expect(p.wrong!.some((x) => same(x.completion, batch.sequences![ri].completion))).toBe(true)
      for (const x of p.wrong!) expect(verifyAnswer(p.question, x.text)).toBe(false)
    }
    run.dispose()
  })

  it("DPO with train.pairSpan 'first-difference': each pair reaches the trainer masked after the first token where its two responses differ", async () => {
    const c = small({ ...DPO_TOY_PRESET, pairs: { minGap: 0, commonMethods: ['sc', 'uid-conj'] } }, join(root, 'pool-dpo'))
    const open = scriptedPolicies(script)
    const run = await OfflineRun.start(BASE, { ...c, arm: 'right-vs-wrong-all', train: { ...c.train, pairSpan: 'first-difference' } }, arithWorld, { openPolicy: open })
    await run.runStep()
    const [batch] = trainerOf(open.policies.at(-1)!).batches
    expect(batch.pairs!.length).toBeGreaterThan(0)
    for (const [ci, ri] of batch.pairs!) {
      const [chosen, rejected] = [batch.sequences![ci], batch.sequences![ri]]
      let split = 0
      while (chosen.completion[split] === rejected.completion[split]) split++
      expect(split).toBeLessThan(Math.min(chosen.completion.length, rejected.completion.length)) // distinct responses ending in EOS split inside both
      for (const s of [chosen, rejected]) expect(Array.from(s.mask!)).toEqual(s.completion.map((_, t) => (t <= split ? 1 : 0)))
    }
    run.dispose()
  })

  it('a DPO checkpoint written before train.rpoAlpha existed resumes as plain DPO (rpoAlpha 0)', async () => {
    const c = small({ ...DPO_TOY_PRESET, pairs: { minGap: 0, commonMethods: ['sc', 'uid-conj'] } }, join(root, 'pool-dpo'))
    const open = scriptedPolicies(script)
    const run = await OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })
    const dir = join(root, 'dpo-old-checkpoint')
    await drive(run, { outDir: dir, method: 'dpo', totalSteps: 1, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '' })
    run.dispose()
    const stateFile = join(checkpointDir(dir, 1), 'run_state.json')
    const state = JSON.parse(readFileSync(stateFile, 'utf8'))
    delete state.config.train.rpoAlpha
    delete state.config.train.pairSpan
    delete state.config.train.dpopLambda
    writeFileSync(stateFile, JSON.stringify(state))
    const resumed = await OfflineRun.resume(checkpointDir(dir, 1), arithWorld, { openPolicy: open })
    expect(resumed.config.train.rpoAlpha).toBe(0)
    expect(resumed.config.train.pairSpan).toBe('whole')
    expect(resumed.config.train.dpopLambda).toBe(0)
    expect(resumed.config.train.beta).toBe(c.train.beta)
    resumed.dispose()
  })

  it('DPO on a pool with one distinct verified response per prompt is refused up front, naming the pair rule', async () => {
    const c = small(DPO_TOY_PRESET, join(root, 'pool-dpo-one-response'))
    const oneTrace = (ctx: ScriptContext) => (ctx.prompt.startsWith('Solve: ') ? scriptedAnswer(ctx.prompt.slice('Solve: '.length).split('\n')[0].trim(), true, 0) : arithScript()(ctx))
    const open = scriptedPolicies({ script: oneTrace })
    await expect(OfflineRun.start(BASE, c, arithWorld, { openPolicy: open })).rejects.toThrow(/no preference pairs \(no prompt has two distinct verified responses whose scores differ by pairs\.minGap 0\.05\)/)
    expect(open.policies.map((p) => p.trainerOf)).toEqual(open.policies.map(() => null)) // no trainer was opened: nothing trained, no warm start
  })
})
