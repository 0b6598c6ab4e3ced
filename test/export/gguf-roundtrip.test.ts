// GGUF round trip through llama.cpp (node-llama-cpp 3.21.1 from the bench-only package in
// bench/peers): export a model folder, load the file in llama.cpp, and compare with our engine on
// the same prompts: the prompt's tokenization (llama.cpp's tokenizer from the GGUF metadata vs our
// tokenizer.json) and the greedy tokens. Skips, saying why, when bench/peers is not installed.
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { loadModel, type Model } from '../../src/index.js'
import { exportGguf, ggufTensorName, readGguf, readGgufTensor } from '../../src/export/gguf.js'
import { writeSafetensors } from '../../src/engine/hf/safetensors.js'
import { readModelFolder } from '../../src/engine/hf/folder.js'
import { evalSet } from '../../src/worlds/arith/evalset.js'
import { judgePrompt, solverPrompt, validatorPrompt } from '../../src/worlds/arith/formats.js'
import { writeTinyModel } from '../helpers/tiny-model.js'
import { cpSync } from 'node:fs'

const NLC = resolve('bench/peers/node_modules/node-llama-cpp/dist/index.js')
const available = existsSync(NLC)
const SKIP_REASON = 'node-llama-cpp is not installed: run `bash bench/peers/install.sh` (about 85 MB, 15 s) to enable the llama.cpp round trip'
if (!available) console.warn(`[gguf round trip] SKIPPED: ${SKIP_REASON}`)

const BUNDLED = 'models/arith-qwen3-tiny'
const TOKENS = 40
// Tolerances on llama.cpp's probabilities and entropies vs ours (both float32 passes; llama.cpp's f16
// matmuls also round activations to f16).
// llama.cpp keeps its KV cache in f16 by default; f32 makes the comparison like for like.
const KV_F32 = { experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32', flashAttention: false }
const F32_TOL = { p: 5e-3, entropy: 1e-2 }
const F16_TOL = { p: 1e-2, entropy: 2.5e-2 }
// measured on the bundled model (llama.cpp's Q8_0 activations): max |Δp| 4.0e-2 on the previous weights, 5.4e-2 on these
const Q8_TOL = { p: 8e-2, entropy: 1.5e-1 }

/* eslint-disable @typescript-eslint/no-explicit-any */
type Nlc = any
let nlc: Nlc
let llama: Nlc
let root: string

beforeAll(async () => {
  if (!available) return
  root = mkdtempSync(join(tmpdir(), 'ad-gguf-rt-'))
  nlc = await import(pathToFileURL(NLC).href)
  llama = await nlc.getLlama({ gpu: false, build: 'never', logLevel: nlc.LlamaLogLevel.error, progressLogs: false })
})
afterAll(async () => {
  await llama?.dispose()
  if (root) rmSync(root, { recursive: true, force: true })
})

/** Greedy tokens from llama.cpp, past end-of-generation tokens, exactly `n` of them. */
async function llamaGreedy(model: Nlc, prompts: number[][], n: number): Promise<number[][]> {
  const out: number[][] = []
  for (const prompt of prompts) {
    const ctx = await model.createContext({ contextSize: 512, threads: 1, batchSize: 512, ...KV_F32 })
    try {
      const seq = ctx.getSequence()
      const toks: number[] = []
      for await (const t of seq.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
        toks.push(t)
        if (toks.length >= n) break
      }
      out.push(toks)
    } finally {
      await ctx.dispose()
    }
  }
  return out
}

/** Per step of our greedy path: llama.cpp's full next-token distribution, with our token fed back. */
interface Step {
  argmax: number
  /** llama.cpp's probability of our greedy token. */
  p: number
  /** llama.cpp's probability of its own argmax. */
  pArgmax: number
  /** Entropy (nats) of llama.cpp's distribution. */
  entropy: number
}

async function llamaAlong(model: Nlc, prompt: number[], path: readonly number[]): Promise<Step[]> {
  const ctx = await model.createContext({ contextSize: 512, threads: 1, batchSize: 512 })
  try {
    const seq = ctx.getSequence()
    // temperature 1, no top-k/top-p/min-p: the probabilities are softmax of the raw logits
    const gen = seq.evaluateWithMetadata(prompt, { probabilities: true }, { temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1, yieldEogToken: true })
    const steps: Step[] = []
    let r = await gen.next()
    for (let i = 0; i < path.length && !r.done; i++) {
      const probs: Map<number, number> = r.value.probabilities
      let argmax = -1
      let best = -1
      let entropy = 0
      for (const [tok, p] of probs) {
        if (p > best) [best, argmax] = [p, tok]
        if (p > 0) entropy -= p * Math.log(p)
      }
      steps.push({ argmax, p: probs.get(path[i]) ?? 0, pArgmax: best, entropy })
      r = await gen.next(path[i])
    }
    await gen.return(undefined)
    return steps
  } finally {
    await ctx.dispose()
  }
}

/**
 * Our greedy completions, checked step by step against llama.cpp along the same tokens: same
 * argmax (so llama.cpp's own greedy decoding gives the same tokens), probability of the token and
 * entropy within `tol` (absolute; the reference is our float32 pass over the raw logits).
 */
async function compareAlongGreedy(ours: Model, lm: Nlc, prompts: number[][], n: number, tol: { p: number; entropy: number }): Promise<{ maxDp: number; maxDh: number }> {
  const res = await ours.generate(prompts, { temperature: 0, maxTokens: n, stopTokenIds: [] })
  let maxDp = 0
  let maxDh = 0
  for (let i = 0; i < prompts.length; i++) {
    const c = res[i][0]
    const path = Array.from(c.tokens)
    const steps = await llamaAlong(lm, prompts[i], path)
    expect(steps.length).toBe(n)
    // Same argmax, except at a near-tie the stated tolerance cannot order (llama.cpp's probability
    // of our token within tol.p of its own top one: seen after <|im_end|>, where the path is off-distribution).
    const ordered = steps.map((s, t) => (s.argmax === path[t] || s.pArgmax - s.p <= tol.p ? path[t] : s.argmax))
    expect(ordered, `prompt ${i}: llama.cpp argmax along our greedy path`).toEqual(path)
    steps.forEach((s, t) => {
      maxDp = Math.max(maxDp, Math.abs(s.p - Math.exp(c.logprobs[t])))
      maxDh = Math.max(maxDh, Math.abs(s.entropy - c.entropy[t]))
    })
  }
  expect(maxDp).toBeLessThanOrEqual(tol.p)
  expect(maxDh).toBeLessThanOrEqual(tol.entropy)
  return { maxDp, maxDh }
}

async function ourGreedy(model: Model, prompts: number[][], n: number): Promise<number[][]> {
  const res = await model.generate(prompts, { temperature: 0, maxTokens: n, stopTokenIds: [] })
  return res.map(([c]) => Array.from(c.tokens))
}

/** An HF folder whose weights are what a GGUF file decodes to (f32), for a like-for-like comparison with a quantized file. */
async function ggufWeightsFolder(src: string, ggufFile: string, dst: string): Promise<string> {
  cpSync(src, dst, { recursive: true })
  const folder = await readModelFolder(src)
  const g = await readGguf(ggufFile)
  const tensors = []
  for (const t of folder.tensors) tensors.push({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: await readGgufTensor(g, ggufTensorName(t.name)) })
  await writeSafetensors(join(dst, 'model.safetensors'), tensors)
  return dst
}

/** llama.cpp on the bundled model's GGUF at `dtype` against our engine on the weights that file decodes to (f16: the f16-rounded weights). */
async function bundledRoundTrip(dtype: 'f16' | 'q8_0', tol: { p: number; entropy: number }): Promise<void> {
  const gguf = join(root, `toy-${dtype}.gguf`)
  await exportGguf(BUNDLED, gguf, { dtype })
  const ours = await loadModel(await ggufWeightsFolder(BUNDLED, gguf, join(root, `toy-${dtype}`)), { threads: 1 })
  const lm = await llama.loadModel({ modelPath: gguf })
  try {
    const d = await compareAlongGreedy(ours, lm, arithPrompts(ours).ids, TOKENS, tol)
    console.log(`[gguf round trip] bundled ${dtype}: max |Δp| ${d.maxDp.toExponential(2)}, max |ΔH| ${d.maxDh.toExponential(2)} nats`)
  } finally {
    ours.dispose()
    await lm.dispose()
  }
}

function arithPrompts(model: Model): { texts: string[]; ids: number[][] } {
  const items = evalSet(3, 3)
  const user = [
    ...items.map((it) => solverPrompt(it.question)),
    validatorPrompt(items[0].question),
    judgePrompt(items[1].question, `<think>…</think><answer>${items[1].answer}</answer> é ∑ 日本`),
  ]
  const texts = user.map((u) => model.tokenizer.applyChatTemplate([{ role: 'user', content: u }], { addGenerationPrompt: true }))
  return { texts, ids: texts.map((t) => model.tokenizer.encode(t, { addSpecialTokens: false })) }
}

describe.skipIf(!available)(`GGUF round trip through llama.cpp (node-llama-cpp 3.21.1)${available ? '' : ` — skipped: ${SKIP_REASON}`}`, () => {
  it('bundled model, f32: llama.cpp tokenizes the prompts as we do and its greedy tokens equal ours', async () => {
    const gguf = join(root, 'toy-f32.gguf')
    await exportGguf(BUNDLED, gguf, { dtype: 'f32' })
    const ours = await loadModel(BUNDLED, { threads: 1 })
    const lm = await llama.loadModel({ modelPath: gguf })
    try {
      const { texts, ids } = arithPrompts(ours)
      for (let i = 0; i < texts.length; i++) {
        expect(Array.from(lm.tokenize(texts[i], true)), `prompt ${i} tokenization`).toEqual(ids[i])
        expect(lm.detokenize(ids[i], true)).toBe(texts[i])
      }
      const a = await ourGreedy(ours, ids, TOKENS)
      const b = await llamaGreedy(lm, ids, TOKENS)
      expect(b).toEqual(a)
      // the completions are the model's real work: they decode to role outputs, not noise
      expect(a.some((t) => ours.tokenizer.decode(t).includes('<answer>'))).toBe(true)
      const d = await compareAlongGreedy(ours, lm, ids, TOKENS, F32_TOL)
      console.log(`[gguf round trip] bundled f32: max |Δp| ${d.maxDp.toExponential(2)}, max |ΔH| ${d.maxDh.toExponential(2)} nats`)
    } finally {
      ours.dispose()
      await lm.dispose()
    }
  })

  it('bundled model, f16: llama.cpp on the f16 file vs our engine on the same f16-rounded weights', async () => {
    await bundledRoundTrip('f16', F16_TOL)
  })

  it('bundled model, q8_0: llama.cpp on the Q8_0 file vs our engine on the weights that file decodes to', async () => {
    // llama.cpp also rounds the activations to Q8_0 blocks before its Q8_0 dot products: a wider tolerance than f16's
    await bundledRoundTrip('q8_0', Q8_TOL)
  })

  it.each([
    ['llama (Llama 3 rope scaling, q/k/v/o biases, untied head)', { family: 'llama', dtype: 'BF16', ropeScaling: true, attentionBias: true, seed: 11 }],
    ['qwen2 (q/k/v biases)', { family: 'qwen2', dtype: 'F16', seed: 12 }],
    ['qwen3 (head_dim ≠ hidden/heads, tied embeddings)', { family: 'qwen3', dtype: 'F32', tied: true, seed: 14 }],
  ] as const)('tiny %s with a byte-level BPE tokenizer: same tokenization and greedy tokens', async (_label, opts) => {
    const tiny = await writeTinyModel(join(root, opts.family), { layers: 2, ...opts })
    const gguf = join(root, `${opts.family}.gguf`)
    await exportGguf(tiny.dir, gguf, { dtype: 'f32' })
    const ours = await loadModel(tiny.dir, { threads: 1 })
    const lm = await llama.loadModel({ modelPath: gguf })
    try {
      const texts = [
        ours.tokenizer.applyChatTemplate([{ role: 'user', content: 'Hello world, is the answer 42?' }], { addGenerationPrompt: true }),
        "<think>\nthe and  it's\n\n</think> Über 3.14 — 日本語 🙂 tabs\there",
      ]
      const ids = texts.map((t) => ours.tokenizer.encode(t, { addSpecialTokens: false }))
      for (let i = 0; i < texts.length; i++) {
        expect(Array.from(lm.tokenize(texts[i], true)), `text ${i}`).toEqual(ids[i])
        expect(lm.detokenize(ids[i], true)).toBe(texts[i])
      }
      const d = await compareAlongGreedy(ours, lm, ids, 16, F32_TOL)
      console.log(`[gguf round trip] tiny ${opts.family} f32: max |Δp| ${d.maxDp.toExponential(2)}, max |ΔH| ${d.maxDh.toExponential(2)} nats`)
    } finally {
      ours.dispose()
      await lm.dispose()
    }
  })
})
