// Proof that the bundled model can be moved by RL (issue 5): a short GRPO run with the world's
// verifier as the reward (the easiest case: ground truth, no self-generated feedback), then
// held-out greedy accuracy before and after with a paired bootstrap interval of the difference.
// Usage: npm run build && node bench/grpo-verifier.mjs [--steps 30] [--lr 3e-5] [--level 3] [--size 500]
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { loadModel } from '../dist/index.js'
import { computeAdvantages } from '../dist/rl/index.js'
import { pairedPromptBootstrap } from '../dist/stats/index.js'
import { evalSet, generateQuestions, isEvalQuestion, solverPrompt, verifyAnswer } from '../dist/worlds/arith/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const steps = Number(arg('steps', 30))
const lr = Number(arg('lr', 3e-5))
const level = Number(arg('level', 3))
const size = Number(arg('size', 500))
const perStep = 16
const n = 8

const model = await loadModel(DEFAULT_MODEL)
const heldOut = evalSet(level, size)
const evaluate = async () => {
  const out = await model.generate(heldOut.map((q) => solverPrompt(q.question)), { temperature: 0, maxTokens: 64 })
  return out.map((g, i) => (verifyAnswer(heldOut[i].question, g[0].text) === true ? 1 : 0))
}
// mean@k: per held-out question, k samples at temperature 1 (the policy RL optimizes)
const evaluateSampled = async (k = 4) => {
  const out = await model.generate(heldOut.map((q) => solverPrompt(q.question)), { n: k, temperature: 1, maxTokens: 64, seed: 777 })
  return out.map((g, i) => g.map((c) => (verifyAnswer(heldOut[i].question, c.text) === true ? 1 : 0)))
}
const started = Date.now()
const before = await evaluate()
const beforeSampled = await evaluateSampled()
const trainer = await model.trainer({ objective: { name: 'policy' }, optimizer: { lr }, schedule: { kind: 'cosine', warmupSteps: 2, totalSteps: steps, minLrRatio: 0.1 }, microBatchSize: 32 })
const questions = generateQuestions('grpo-verifier-train', level, steps * perStep, { exclude: isEvalQuestion })
const log = []
for (let s = 0; s < steps; ++s) {
  const batch = questions.slice(s * perStep, (s + 1) * perStep)
  const prompts = batch.map((q) => solverPrompt(q))
  const groups = await model.generate(prompts, { n, temperature: 1, maxTokens: 64, seed: 1000 + s })
  const rewards = groups.flatMap((g, qi) => g.map((c) => (verifyAnswer(batch[qi], c.text) === true ? 1 : 0)))
  const advantages = computeAdvantages('grpo', rewards, groups.flatMap((g, qi) => g.map(() => qi)))
  const sequences = groups.flatMap((g, qi) => g.map((c, k) => ({ prompt: model.encodePrompt(prompts[qi]), completion: Array.from(c.tokens), oldLogprobs: c.logprobs, advantages: advantages[qi * n + k] })))
  const m = await trainer.step({ sequences })
  log.push({ step: s + 1, reward: rewards.reduce((a, b) => a + b, 0) / rewards.length, gradNorm: m.gradNorm })
  process.stderr.write(`step ${s + 1}/${steps} reward ${log.at(-1).reward.toFixed(3)}\n`)
}
const after = await evaluate()
const afterSampled = await evaluateSampled()
const boot = pairedPromptBootstrap([{ name: `arith L${level}`, a: after.map((x) => [x]), b: before.map((x) => [x]) }], { replicates: 20_000, seed: 1 })
const bootSampled = pairedPromptBootstrap([{ name: `arith L${level}`, a: afterSampled, b: beforeSampled }], { replicates: 20_000, seed: 1 })
const acc = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
const meanK = (xss) => acc(xss.map(acc))
const result = {
  date: new Date().toISOString(), steps, lr, level, size, perStep, n,
  greedy: { before: acc(before), after: acc(after), difference: boot.macro },
  meanAt4: { before: meanK(beforeSampled), after: meanK(afterSampled), difference: bootSampled.macro },
  log, seconds: (Date.now() - started) / 1000,
}
mkdirSync(join(here, 'results'), { recursive: true })
writeFileSync(join(here, 'results', 'grpo-verifier.json'), JSON.stringify(result, null, 2))
console.log(`verifier-rewarded GRPO, level ${level}, ${steps} steps × ${perStep} questions × ${n} samples, lr ${lr}`)
for (const [name, r] of [['greedy', result.greedy], ['mean@4 (T=1)', result.meanAt4]])
  console.log(`held-out ${name} (${size} questions): ${(100 * r.before).toFixed(1)}% → ${(100 * r.after).toFixed(1)}%, difference ${r.difference.estimate.toFixed(1)} pp, paired bootstrap 95% [${r.difference.lo.toFixed(1)}, ${r.difference.hi.toFixed(1)}]`)
console.log(`${result.seconds.toFixed(0)} s`)
model.dispose()
