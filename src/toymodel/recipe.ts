// The recipe of the bundled toy model: a from-scratch Qwen3 (init.ts) fitted with our own SFT
// objective on the arithmetic world's synthetic corpus of deliberately imperfect role transcripts
// (buildCorpus), every role, one pass over fresh items (no item is seen twice).
//
// Each corpus item becomes one training sequence: prompt = its toy role prompt, completion = the
// teacher's completion + <|im_end|>; the loss is the mean token NLL over completion tokens
// (prompt tokens are context only). A share of the items (`chat`) is chat-format instead, rendered
// with the folder's ChatML template (chat-corpus.ts): the same transcript as a ChatML
// conversation, or a math-style Solver conversation with a `\boxed{}` answer. AdamW, linear warmup then cosine decay to a floor, global
// gradient-norm clipping. Deterministic in (seed, options, threads): the corpus is a pure function
// of the seed, batches are consecutive corpus items, the init is seeded and the CPU engine is
// deterministic for a given thread count (default 2; a different count changes reduction order).

import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { loadModel, type Model } from '../engine/model.js'
import { writeJsonAtomic } from '../util/atomic.js'
import { afterThinking, extractBoxed, extractTag } from '../tasks/extract.js'
import { answersEquivalent } from '../tasks/math.js'
import { buildCorpus, parseSolution, referenceSolution, solverPrompt, type CorpusItem, type JudgeCorpusOptions, type Role } from '../worlds/arith/index.js'
import { chatSlot, mathChatItem, toyChatItem, type ChatItem } from './chat-corpus.js'
import { TOY_ARCHITECTURE, writeInitialToyModel, parameterCount, type ToyArchitecture } from './init.js'
import { TOY_IDS } from './tokenizer.js'

/** Where the bundled model lives in the package: models/arith-qwen3-tiny. */
/** The bundled toy model folder (the recipe's default output). */
export { BUNDLED_MODEL as DEFAULT_TOY_MODEL_DIR } from './bundled.js'

export interface ToyRecipeOptions {
  /** Seeds the init and the corpus. Default 1. */
  seed?: number
  /** Where the trained Hugging Face folder goes. */
  outDir: string
  /** Optimizer steps (default 3000). */
  steps?: number
  /** Sequences per step (default 32). */
  batchSize?: number
  /** Peak learning rate (default 1e-3). */
  lr?: number
  /** Linear warmup steps (default min(100, steps/10)). */
  warmupSteps?: number
  /** Cosine floor as a fraction of the peak (default 0.1). */
  minLrRatio?: number
  /** AdamW decoupled weight decay (default 0.1). */
  weightDecay?: number
  beta2?: number
  clipGradNorm?: number
  /** Sequences per forward/backward (default 16). */
  microBatchSize?: number
  arch?: ToyArchitecture
  /** Role weights (default TOY_RECIPE_DEFAULTS.mix). */
  mix?: Partial<Record<Role, number>>
  /** Weights of levels 1..5 (default TOY_RECIPE_DEFAULTS.levelWeights). */
  levelWeights?: readonly number[]
  /** Shares of chat items: ChatML transcripts, math-style Solver conversations (of which `wordShare` word problems). */
  chat?: { chatml: number; math: number; wordShare: number }
  /** The Judge items' check form, skimming rate and share of wrong inputs (buildCorpus `judge`). Default: the corpus defaults. */
  judge?: JudgeCorpusOptions
  /** Dev metrics (devMetrics; not the held-out sets) every this many steps; 0 = never. Default 250. */
  evalEvery?: number
  /** Dev questions per level (default 40). */
  devSize?: number
  /** CPU threads (default 2). The result is bit-for-bit reproducible for a given thread count (reductions split by thread). */
  threads?: number
  log?: (line: string) => void
}

export interface ToyRecipeResult {
  outDir: string
  parameters: number
  steps: number
  seconds: number
  trainTokens: number
  /** Mean training loss over each logging window. */
  curve: { step: number; loss: number; gradNorm: number; lr: number; tokensPerSecond: number; seconds: number }[]
  dev: { step: number; accuracy: Record<string, number>; refNll: Record<string, number>; chat: Record<string, number> }[]
  model: Model
}

/**
 * The bundled model's recipe. Measured on 500-step runs (dev reference-solution NLL at level 3):
 * lr 1e-3 beats 2e-3 beats 5e-3 (the higher rates sit longer on the plateau where the format is
 * learned and the arithmetic is not), and a mix weighted to arithmetic-bearing roles (Solver,
 * subtask, Judge) and to levels 2–4 beats the world's default mix (0.43 vs 0.65 at lr 2e-3).
 */
export const TOY_RECIPE_DEFAULTS = {
  steps: 3000,
  lr: 1e-3,
  mix: { proposer: 0.05, solver: 0.5, validator: 0.1, judge: 0.2, decompose: 0.03, subtask: 0.09, compose: 0.03 } as Partial<Record<Role, number>>,
  levelWeights: [1, 2, 3, 2, 1] as readonly number[],
  /** One item in ten is a ChatML transcript, one in ten a math-style Solver conversation (half of them word problems). */
  chat: { chatml: 0.1, math: 0.1, wordShare: 0.5 },
}

/** The recipe's resolved options (what recipe.json records). */
export function resolveRecipe(o: ToyRecipeOptions) {
  const steps = o.steps ?? TOY_RECIPE_DEFAULTS.steps
  return {
    seed: o.seed ?? 1,
    steps,
    batchSize: o.batchSize ?? 32,
    lr: o.lr ?? TOY_RECIPE_DEFAULTS.lr,
    warmupSteps: o.warmupSteps ?? Math.max(1, Math.min(100, Math.floor(steps / 10))),
    minLrRatio: o.minLrRatio ?? 0.1,
    weightDecay: o.weightDecay ?? 0.1,
    beta2: o.beta2 ?? 0.99,
    clipGradNorm: o.clipGradNorm ?? 1,
    microBatchSize: o.microBatchSize ?? 16,
    arch: o.arch ?? TOY_ARCHITECTURE,
    mix: o.mix ?? TOY_RECIPE_DEFAULTS.mix,
    levelWeights: o.levelWeights ?? TOY_RECIPE_DEFAULTS.levelWeights,
    chat: o.chat ?? TOY_RECIPE_DEFAULTS.chat,
    evalEvery: o.evalEvery ?? 250,
    devSize: o.devSize ?? 40,
    ...(o.judge ? { judge: o.judge } : {}),  // recorded only when set: the default recipe's recipe.json is unchanged
  }
}

function toSequence(model: Model, it: CorpusItem | ChatItem) {
  return {
    prompt: 'messages' in it && 'kind' in it ? model.encodePrompt({ messages: it.messages }) : model.tokenizer.encode((it as CorpusItem).prompt, { addSpecialTokens: false }),
    completion: [...model.tokenizer.encode(it.completion, { addSpecialTokens: false }), TOY_IDS.imEnd],
  }
}

/** The training item at index `i`: the toy transcript, or (by chatSlot) its ChatML form or a math-style chat item. */
function recipeItem(r: ReturnType<typeof resolveRecipe>, corpus: readonly CorpusItem[], i: number): CorpusItem | ChatItem {
  const slot = chatSlot(r.seed, i, r.chat)
  if (slot === 'chatml') return toyChatItem(corpus[i])
  if (slot === 'math') return mathChatItem(r.seed, i, { levelWeights: r.levelWeights, wordShare: r.chat.wordShare })
  return corpus[i]
}

/** The answer a chat reply states (`\boxed{}` or `<answer>`, after any thinking). */
function chatAnswer(text: string): string | null {
  const after = afterThinking(text)
  return extractBoxed(after, { afterThink: false }) ?? extractTag(after, 'answer', { afterThink: false })
}

/** Dev greedy accuracy of the chat formats: ChatML-wrapped level-3 Solver prompts, math-style expressions and word problems. */
async function chatDevMetrics(model: Model, seed: number, size: number, levelWeights: readonly number[]): Promise<Record<string, number>> {
  const items: ChatItem[] = [
    ...buildCorpus({ seed: `toymodel-dev-${seed}`, size, mix: { solver: 1 }, levelWeights: [0, 0, 1, 0, 0] }).map((it) => ({ kind: 'toy-chatml' as const, messages: [{ role: 'user', content: solverPrompt(it.meta.question).trimEnd() }], completion: '', truth: it.meta.truth! })),
    ...Array.from({ length: 4 * size }, (_, i) => mathChatItem(`toymodel-dev-${seed}`, i, { levelWeights, wordShare: 0.5 })),
  ]
  const gen = await model.generate(items.map((it) => ({ messages: it.messages })), { n: 1, temperature: 0, maxTokens: 160 })
  const out: Record<string, number> = {}
  for (const kind of ['toy-chatml', 'math-expression', 'math-word'] as const) {
    const idx = items.map((it, i) => (it.kind === kind ? i : -1)).filter((i) => i >= 0).slice(0, size)
    out[kind] = idx.filter((i) => answersEquivalent(chatAnswer(gen[i][0].text), items[i].truth)).length / idx.length
  }
  return out
}

/**
 * Dev metrics per level on questions drawn from a seed apart from the corpus and the held-out
 * sets: greedy Solver accuracy, and the mean token NLL of the reference (slip-free) solution.
 */
export async function devMetrics(model: Model, seed: number, size: number, levelWeights: readonly number[] = TOY_RECIPE_DEFAULTS.levelWeights): Promise<{ accuracy: Record<string, number>; refNll: Record<string, number>; chat: Record<string, number> }> {
  const accuracy: Record<string, number> = {}
  const refNll: Record<string, number> = {}
  const items: { level: number; question: string; truth: string }[] = []
  for (let level = 1; level <= 5; level++) {
    const c = buildCorpus({ seed: `toymodel-dev-${seed}`, size, mix: { solver: 1 }, levelWeights: [1, 2, 3, 4, 5].map((l) => (l === level ? 1 : 0)) })
    for (const it of c) items.push({ level, question: it.meta.question, truth: it.meta.truth! })
  }
  const prompts = items.map((it) => solverPrompt(it.question))
  const gen = await model.generate(prompts, { n: 1, temperature: 0, maxTokens: 160 })
  const scored = await model.score(items.map((it, i) => ({ prompt: prompts[i], completion: [...model.tokenizer.encode(referenceSolution(it.question)!, { addSpecialTokens: false }), TOY_IDS.imEnd] })))
  for (let level = 1; level <= 5; level++) {
    const idx = items.map((it, i) => (it.level === level ? i : -1)).filter((i) => i >= 0)
    const ok = idx.filter((i) => {
      const r = parseSolution(gen[i][0].text)
      return r.ok && r.value.answer !== null && r.value.answer.toString() === items[i].truth
    }).length
    accuracy[`L${level}`] = ok / idx.length
    let nll = 0
    let n = 0
    for (const i of idx) for (const lp of scored[i].logprobs) (nll -= lp), n++
    refNll[`L${level}`] = nll / n
  }
  return { accuracy, refNll, chat: await chatDevMetrics(model, seed, size, levelWeights) }
}

/**
 * Builds the toy model: init, SFT, save to `outDir` (config.json, model.safetensors,
 * tokenizer.json, tokenizer_config.json, generation_config.json, recipe.json). Returns the
 * trained model, still loaded (the caller disposes it).
 */
export async function buildToyModel(options: ToyRecipeOptions): Promise<ToyRecipeResult> {
  const r = resolveRecipe(options)
  const log = options.log ?? (() => {})
  const started = Date.now()
  const initDir = await mkdtemp(join(tmpdir(), 'toymodel-init-'))
  let model: Model
  try {
    await writeInitialToyModel(initDir, r.seed, r.arch)
    model = await loadModel(initDir, { threads: options.threads ?? 2 })
  } catch (e) {
    await rm(initDir, { recursive: true, force: true })
    throw e
  }
  try {
    const parameters = parameterCount(r.arch)
    log(`toy model: ${parameters} parameters, ${r.steps} steps × ${r.batchSize} sequences, lr ${r.lr}, seed ${r.seed}`)
    const trainer = await model.trainer({
      objective: { name: 'sft' },
      optimizer: { lr: r.lr, weightDecay: r.weightDecay, beta1: 0.9, beta2: r.beta2 },
      schedule: { kind: 'cosine', warmupSteps: r.warmupSteps, totalSteps: Math.max(r.steps, r.warmupSteps + 1), minLrRatio: r.minLrRatio },
      clipGradNorm: r.clipGradNorm,
      microBatchSize: r.microBatchSize,
    })
    const corpus = buildCorpus({ seed: r.seed, size: r.steps * r.batchSize, mix: r.mix, levelWeights: r.levelWeights, chat: true, judge: r.judge })
    const curve: ToyRecipeResult['curve'] = []
    const dev: ToyRecipeResult['dev'] = []
    const window = { loss: 0, grad: 0, tokens: 0, seconds: 0, n: 0 }
    const logEvery = Math.max(1, Math.min(50, Math.floor(r.steps / 20)))
    let trainTokens = 0
    for (let step = 1; step <= r.steps; step++) {
      const batch = Array.from({ length: r.batchSize }, (_, k) => toSequence(model, recipeItem(r, corpus, (step - 1) * r.batchSize + k)))
      const t0 = process.hrtime.bigint()
      const m = await trainer.step({ sequences: batch })
      const dt = Number(process.hrtime.bigint() - t0) / 1e9
      if (m.skipped) log(`step ${step}: skipped (${m.skipReason})`)
      else {
        window.loss += m.loss
        window.grad += m.gradNorm
        window.n++
      }
      window.tokens += batch.reduce((s, q) => s + q.prompt.length + q.completion.length, 0)
      window.seconds += dt
      trainTokens += m.tokens
      if (step % logEvery === 0 || step === r.steps) {
        const point = {
          step,
          loss: window.loss / Math.max(1, window.n),
          gradNorm: window.grad / Math.max(1, window.n),
          lr: m.lr,
          tokensPerSecond: window.tokens / window.seconds,
          seconds: (Date.now() - started) / 1000,
        }
        curve.push(point)
        log(`step ${step}/${r.steps}  loss ${point.loss.toFixed(4)}  |g| ${point.gradNorm.toFixed(2)}  lr ${point.lr.toExponential(2)}  ${point.tokensPerSecond.toFixed(0)} tok/s  ${point.seconds.toFixed(0)} s`)
        Object.assign(window, { loss: 0, grad: 0, tokens: 0, seconds: 0, n: 0 })
      }
      if (r.evalEvery > 0 && (step % r.evalEvery === 0 || step === r.steps)) {
        const d = await devMetrics(model, r.seed, r.devSize, r.levelWeights)
        dev.push({ step, ...d })
        log(`  dev greedy Solver accuracy: ${Object.entries(d.accuracy).map(([k, v]) => `${k} ${(100 * v).toFixed(0)}%`).join('  ')}   reference NLL: ${Object.entries(d.refNll).map(([k, v]) => `${k} ${v.toFixed(3)}`).join('  ')}   chat: ${Object.entries(d.chat).map(([k, v]) => `${k} ${(100 * v).toFixed(0)}%`).join('  ')}`)
      }
    }
    await model.save(options.outDir)
    const seconds = (Date.now() - started) / 1000
    await writeJsonAtomic(join(options.outDir, 'recipe.json'), {
      recipe: { ...r, corpus: 'buildCorpus({ seed, size: steps * batchSize, mix, levelWeights }) from src/worlds/arith, a chat share of it replaced by chat items (src/toymodel/chat-corpus.ts)', objective: 'sft', schedule: 'linear warmup, cosine to minLrRatio' },
      parameters,
      trainTokens,
      // losses only: timings vary between runs, the weights and this file do not
      curve: curve.map(({ step, loss, gradNorm, lr }) => ({ step, loss, gradNorm, lr })),
      dev,
    }, 2)
    log(`saved ${options.outDir} after ${seconds.toFixed(0)} s`)
    return { outDir: options.outDir, parameters, steps: r.steps, seconds, trainTokens, curve, dev, model }
  } catch (e) {
    model.dispose()
    throw e
  } finally {
    await rm(initDir, { recursive: true, force: true })
  }
}
