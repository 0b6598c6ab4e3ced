// A scripted fake Policy: a method's logic tested without the engine (DESIGN.md "methods testable
// with a scripted fake policy"). A script decides what each sample says; the fake turns that text
// into tokens (UTF-8 bytes, id 0 = end of sequence) with deterministic per-token statistics, and it
// has real, if tiny, parameters — one bias per token id — that its trainer moves with AdamW and
// that save/load and the optimizer state round-trip through the same files the engine writes
// (model.safetensors or a PEFT adapter folder, optimizer.safetensors, trainer_state.json). So
// rewards, advantages, buffers, checkpoints and exact resume all run for real; only the language
// model is scripted.
import { existsSync } from 'node:fs'
import { mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { InvalidArgumentError } from '../../engine/errors.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors } from '../../engine/hf/safetensors.js'
import type { Completion, GenerateOptions, Prompt, ScorePair, Scored } from '../../engine/model.js'
import type { StepMetrics, TrainBatch } from '../../train/trainer.js'
import { writeJsonAtomic } from '../../util/atomic.js'
import { mulberry32Step } from '../../util/prng.js'
import type { OpenPolicy, Policy, PolicyRef, PolicyTokenizer, PolicyTrainer, PolicyTrainerOptions } from './policy.js'

/** What one sample's script is told. */
export interface ScriptContext {
  /** The prompt as text (chat messages joined by newlines). */
  prompt: string
  promptIndex: number
  sampleIndex: number
  seed: number
  temperature: number
  /** Optimizer steps this policy has taken: a script may improve as it trains. */
  updates: number
  /** The folder the policy was opened from (tells roles apart when one script serves several). */
  dir: string
  /** A uniform in [0, 1) fixed by (seed, sequence id, prompt), as the engine's samples are: scripted randomness that resumes exactly. */
  uniform: number
}

/** A sample's text, or the text and how it ended. */
export type ScriptedReply = string | { text: string; finishReason: 'stop' | 'length' }

export interface ScriptedPolicyOptions {
  /** What each sample says. */
  script: (c: ScriptContext) => ScriptedReply
  /** A reward model's raw score of (prompt, completion) before the learned biases (default 0). */
  judge?: (prompt: string, completion: string) => number
  /** 1 for a scalar reward model (*ForSequenceClassification), 0 for a policy. */
  scoreLabels?: number
}

const VOCAB = 256
const EOS = 0
const PARAM = 'scripted.bias'
const LORA_A = 'scripted.lora_A.weight'
const LORA_B = 'scripted.lora_B.weight'
const MARKER = 'autodidact.scripted-policy'

function promptText(prompt: Prompt): string {
  if (typeof prompt === 'string') return prompt
  if (Array.isArray(prompt)) return Buffer.from((prompt as readonly number[]).map((t) => t & 0xff)).toString('utf8')
  return (prompt as { messages: { content: string }[] }).messages.map((m) => m.content).join('\n')
}

function utf8(text: string): number[] {
  // id 0 is the end of sequence, so a NUL byte in text becomes id 1
  return Array.from(Buffer.from(text, 'utf8'), (b) => b || 1)
}

/** Deterministic uniform in [0, 1) of a string key (FNV-1a, then one mulberry32 step). */
function hashUniform(key: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193)
  return mulberry32Step(h).output / 4294967296
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x))

/** A sequence's advantage: the value, or the mean of per-token values. */
function meanAdvantage(a: number | ArrayLike<number> | undefined): number {
  if (a === undefined) return 0
  if (typeof a === 'number') return a
  let s = 0
  for (let i = 0; i < a.length; i++) s += a[i]
  return a.length ? s / a.length : 0
}

class ScriptedTokenizer implements PolicyTokenizer {
  readonly specialTokenIds: ReadonlySet<number> = new Set([EOS])
  encode(text: string): number[] {
    return utf8(text)
  }
  tokenToId(): number | null {
    return null
  }
}

interface Adam {
  m: Float32Array
  v: Float32Array
}

/** The fake's parameters: one bias per token id (full fine-tuning), or a rank-1 LoRA pair over it. */
class Weights {
  bias: Float32Array = new Float32Array(VOCAB)
  lora: { a: Float32Array; b: Float32Array; rank: number; alpha: number } | null = null

  /** The effective bias of token `t`. */
  at(t: number): number {
    return this.bias[t] + (this.lora ? (this.lora.alpha / this.lora.rank) * this.lora.b[t] * this.lora.a[0] : 0)
  }
}

export class ScriptedPolicy implements Policy {
  readonly config = { architecture: 'scripted', vocabSize: VOCAB, eosTokenIds: [EOS] }
  readonly tokenizer = new ScriptedTokenizer()
  readonly scoreLabels: number
  readonly weights = new Weights()
  /** Every generate() call: its prompts, options and what it returned, for assertions. */
  readonly calls: { prompts: string[]; options: GenerateOptions; outputs: Completion[][] }[] = []
  private disposed = false
  trainerOf: ScriptedTrainer | null = null

  constructor(
    readonly dir: string,
    private readonly options: ScriptedPolicyOptions,
  ) {
    this.scoreLabels = options.scoreLabels ?? 0
  }

  get isDisposed(): boolean {
    return this.disposed
  }

  private live(): void {
    if (this.disposed) throw new InvalidArgumentError('model', 'this scripted policy has been disposed')
  }

  /** Statistics of one token: logprob log σ(u + bias) of a hashed logit u, an entropy, a margin. */
  private tokenStats(key: string, t: number, topK: number): { logprob: number; entropy: number; maxLogit: number; margin: number; topIds: number[]; topLogits: number[] } {
    const u = hashUniform(key)
    const z = 2 * u + this.weights.at(t)
    const logprob = Math.log(sigmoid(z))
    const topLogits = Array.from({ length: topK }, (_, j) => z - j * (0.25 + hashUniform(`${key}:${j}`)))
    return { logprob, entropy: 0.2 + 2 * hashUniform(`${key}:H`), maxLogit: z, margin: 0.25 + hashUniform(`${key}:0`), topIds: Array.from({ length: topK }, (_, j) => (t + j) % VOCAB), topLogits }
  }

  private statsOf(prefix: string, tokens: number[], topK: number): Omit<Completion, 'text' | 'finishReason' | 'promptTokens' | 'promptIndex' | 'sampleIndex'> {
    const s = tokens.map((t, i) => this.tokenStats(`${prefix}|${i}|${t}`, t, topK))
    return {
      tokens: Int32Array.from(tokens),
      logprobs: Float32Array.from(s, (x) => x.logprob),
      entropy: Float32Array.from(s, (x) => x.entropy),
      logsumexp: Float32Array.from(s, (x) => x.maxLogit - x.logprob),
      maxLogit: Float32Array.from(s, (x) => x.maxLogit),
      margin: Float32Array.from(s, (x) => x.margin),
      ...(topK > 0 ? { topK: { k: topK, ids: Int32Array.from(s.flatMap((x) => x.topIds)), logits: Float32Array.from(s.flatMap((x) => x.topLogits)) } } : {}),
    }
  }

  async generate(prompts: Prompt[], options: GenerateOptions = {}): Promise<Completion[][]> {
    this.live()
    const texts = prompts.map(promptText)
    const n = options.n ?? 1
    const maxTokens = options.maxTokens ?? 256
    const seed = options.seed ?? 0
    const topK = options.stats?.topK ?? 0
    const updates = this.trainerOf?.steps ?? 0
    const outputs = texts.map((prompt, promptIndex) =>
      Array.from({ length: n }, (_, sampleIndex): Completion => {
        const key = `${seed}|${(options.sequenceOffset ?? 0) + promptIndex * n + sampleIndex}|${prompt}` // sequence id = offset + prompt·n + sample
        const uniform = hashUniform(key)
        const reply = this.options.script({ prompt, promptIndex, sampleIndex, seed, temperature: options.temperature ?? 1, updates, dir: this.dir, uniform })
        let text = typeof reply === 'string' ? reply : reply.text
        let finishReason: 'stop' | 'length' = typeof reply === 'string' ? 'stop' : reply.finishReason
        for (const stop of options.stop ?? []) {
          const at = text.indexOf(stop)
          if (at >= 0) [text, finishReason] = [text.slice(0, at), 'stop']
        }
        let tokens = utf8(text)
        if (finishReason === 'stop') tokens.push(EOS)
        if (tokens.length > maxTokens) {
          tokens = tokens.slice(0, maxTokens)
          text = Buffer.from(tokens.filter((t) => t !== EOS)).toString('utf8')
          finishReason = 'length'
        }
        return { text, finishReason, promptTokens: utf8(prompt).length, promptIndex, sampleIndex, ...this.statsOf(key, tokens, topK) }
      }),
    )
    this.calls.push({ prompts: texts, options, outputs })
    return outputs
  }

  encodePrompt(prompt: Prompt): number[] {
    return utf8(promptText(prompt))
  }

  async score(pairs: ScorePair[]): Promise<Scored[]> {
    this.live()
    return pairs.map((p) => {
      const completion = typeof p.completion === 'string' ? utf8(p.completion) : [...p.completion]
      return { promptTokens: this.encodePrompt(p.prompt).length, ...this.statsOf(`score|${promptText(p.prompt)}`, completion, 0) }
    })
  }

  /** A reward model's raw score: the script's judge plus the mean learned bias of the completion's tokens. */
  async rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    this.live()
    if (!this.scoreLabels) throw new InvalidArgumentError('model', 'this scripted policy has no score head')
    return Float32Array.from(pairs, (p) => {
      const text = typeof p.completion === 'string' ? p.completion : Buffer.from(p.completion.map((t) => t & 0xff)).toString('utf8')
      const tokens = utf8(text)
      const learned = tokens.length ? tokens.reduce((a, t) => a + this.weights.at(t), 0) / tokens.length : 0
      return (this.options.judge?.(promptText(p.prompt), text) ?? 0) + learned
    })
  }

  async trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer> {
    this.live()
    if (options.lora && !this.weights.lora) this.weights.lora = { a: new Float32Array([1]), b: new Float32Array(VOCAB), rank: options.lora.rank, alpha: options.lora.alpha }
    this.trainerOf = new ScriptedTrainer(this, options)
    return this.trainerOf
  }

  /** model.safetensors + config.json, or with LoRA a PEFT adapter folder (as the engine saves). */
  async save(dir: string, options: { adapterOnly?: boolean } = {}): Promise<void> {
    this.live()
    await mkdir(dir, { recursive: true })
    const lora = this.weights.lora
    if (lora && options.adapterOnly !== false) {
      await writeSafetensors(join(dir, 'adapter_model.safetensors'), [
        { name: `base_model.model.${LORA_A}`, dtype: 'F32', shape: [1, 1], data: lora.a },
        { name: `base_model.model.${LORA_B}`, dtype: 'F32', shape: [VOCAB, 1], data: lora.b },
      ])
      await writeJsonAtomic(join(dir, 'adapter_config.json'), { peft_type: 'LORA', r: lora.rank, lora_alpha: lora.alpha, target_modules: ['scripted'], base_model_name_or_path: this.dir }, 2)
      return
    }
    const bias = Float32Array.from({ length: VOCAB }, (_, t) => this.weights.at(t))
    await writeSafetensors(join(dir, 'model.safetensors'), [{ name: PARAM, dtype: 'F32', shape: [VOCAB], data: bias }])
    await writeJsonAtomic(join(dir, 'config.json'), { model_type: MARKER, vocab_size: VOCAB, num_labels: this.scoreLabels }, 2)
  }

  /** Restores weights a save() wrote (model folder) and attaches an adapter folder. */
  async load(ref: PolicyRef): Promise<void> {
    const config = join(ref.model, 'config.json')
    if (existsSync(config) && (JSON.parse(await readFile(config, 'utf8')) as { model_type?: string }).model_type === MARKER) {
      const [t] = (await readSafetensorsHeader(join(ref.model, 'model.safetensors'))).tensors
      this.weights.bias = await readTensorFloat32(t)
    }
    if (ref.adapter) {
      const cfg = JSON.parse(await readFile(join(ref.adapter, 'adapter_config.json'), 'utf8')) as { r: number; lora_alpha: number }
      const tensors = (await readSafetensorsHeader(join(ref.adapter, 'adapter_model.safetensors'))).tensors
      const byName = new Map(tensors.map((t) => [t.name.replace(/^base_model\.model\./, ''), t]))
      this.weights.lora = { a: await readTensorFloat32(byName.get(LORA_A)!), b: await readTensorFloat32(byName.get(LORA_B)!), rank: cfg.r, alpha: cfg.lora_alpha }
    }
  }

  dispose(): void {
    this.disposed = true
  }
}

/**
 * The fake's optimizer: each sequence pushes the bias of its completion tokens along
 * advantage × weight (policy), +1 (sft), ±1 (dpo chosen/rejected) or ±1 (Bradley–Terry), with
 * AdamW moments, so what a method feeds its trainer visibly changes the policy.
 */
export class ScriptedTrainer implements PolicyTrainer {
  private stepCount = 0
  private lossBefore = 0
  private readonly adam = new Map<string, Adam>()
  /** Every batch given to step(), for assertions. */
  readonly batches: TrainBatch[] = []

  constructor(
    private readonly policy: ScriptedPolicy,
    readonly options: PolicyTrainerOptions,
  ) {}

  get steps(): number {
    return this.stepCount
  }

  private params(): [string, Float32Array][] {
    const lora = this.policy.weights.lora
    return this.options.lora && lora ? [[LORA_B, lora.b]] : [[PARAM, this.policy.weights.bias]] // LoRA: A stays fixed
  }

  /** d(score)/d(bias[t]) summed over a batch: what each sequence asks for. */
  private direction(batch: TrainBatch): Float64Array {
    const g = new Float64Array(VOCAB)
    const seqs = batch.sequences ?? []
    const objective = this.options.objective.name
    const sign = new Float64Array(seqs.length).fill(1)
    for (const [chosen, rejected] of batch.pairs ?? []) [sign[chosen], sign[rejected]] = [1, -1]
    seqs.forEach((s, i) => {
      const w = (s.weight ?? 1) * (objective === 'policy' ? meanAdvantage(s.advantages) : sign[i])
      for (const t of s.completion) g[t] += w / Math.max(1, s.completion.length) / seqs.length
    })
    return g
  }

  async step(batch: TrainBatch): Promise<StepMetrics> {
    const seqs = batch.sequences ?? []
    if (!seqs.length) throw new InvalidArgumentError('batch.sequences', 'a training batch needs at least one sequence')
    this.batches.push(batch)
    const g = this.direction(batch)
    const gradNorm = Math.sqrt(g.reduce((a, x) => a + x * x, 0))
    const lr = this.options.optimizer.lr
    if (!Number.isFinite(gradNorm)) return { step: this.stepCount, loss: NaN, lr, gradNorm, skipped: true, skipReason: 'non-finite gradient', tokens: 0, tokensPerSecond: 0, flops: 0, mfu: null, objective: {} }
    this.lossBefore = -g.reduce((a, x, t) => a + x * this.policy.weights.at(t), 0) + [...this.adam.values()].reduce((a, m) => a + m.v.reduce((b, x) => b + x, 0), 0)
    this.stepCount++
    for (const [name, p] of this.params()) {
      const a = this.adam.get(name) ?? { m: new Float32Array(p.length), v: new Float32Array(p.length) }
      this.adam.set(name, a)
      for (let j = 0; j < p.length; j++) {
        a.m[j] = 0.9 * a.m[j] + 0.1 * g[j]
        a.v[j] = 0.999 * a.v[j] + 0.001 * g[j] * g[j]
        p[j] += (lr * a.m[j]) / (Math.sqrt(a.v[j]) + 1e-8) // ascent on the batch's score
      }
    }
    const tokens = seqs.reduce((a, s) => a + s.completion.length, 0)
    // the loss reads the weights and moments before this update, so a resume that restored either wrongly shows in the metrics
    return { step: this.stepCount, loss: this.lossBefore, lr, gradNorm, skipped: false, tokens, tokensPerSecond: 0, flops: 0, mfu: null, objective: { kl: 0, entropy: 1, clipFrac: 0 } }
  }

  async saveState(dir: string): Promise<void> {
    const tensors = [...this.adam].flatMap(([name, a]) => [
      { name: `${name}::m`, dtype: 'F32' as const, shape: [a.m.length], data: a.m },
      { name: `${name}::v`, dtype: 'F32' as const, shape: [a.v.length], data: a.v },
    ])
    await writeSafetensors(join(dir, 'optimizer.safetensors'), tensors)
    await writeJsonAtomic(join(dir, 'trainer_state.json'), { step: this.stepCount, format: 1 }, 2)
  }

  async loadState(dir: string): Promise<void> {
    const meta = JSON.parse(await readFile(join(dir, 'trainer_state.json'), 'utf8')) as { step: number }
    this.adam.clear()
    for (const ref of (await readSafetensorsHeader(join(dir, 'optimizer.safetensors'))).tensors) {
      const [name, part] = ref.name.split('::')
      const a = this.adam.get(name) ?? { m: new Float32Array(0), v: new Float32Array(0) }
      a[part as 'm' | 'v'] = await readTensorFloat32(ref)
      this.adam.set(name, a)
    }
    this.stepCount = meta.step
  }
}

/** An OpenPolicy over scripted fakes: `policies` lists every one opened (in order), for assertions. */
export function scriptedPolicies(options: ScriptedPolicyOptions | ((ref: PolicyRef) => ScriptedPolicyOptions)): OpenPolicy & { policies: ScriptedPolicy[] } {
  const policies: ScriptedPolicy[] = []
  const open = async (ref: PolicyRef) => {
    const o = typeof options === 'function' ? options(ref) : options
    const p = new ScriptedPolicy(ref.model, ref.scoreHead ? { ...o, scoreLabels: 1 } : o)
    await p.load(ref)
    policies.push(p)
    return p
  }
  return Object.assign(open, { policies })
}
