// A scripted fake Policy: a method's logic tested without the engine (DESIGN.md "methods testable
// with a scripted fake policy"). A script decides what each sample says; the fake turns that text
// into tokens (UTF-8 bytes, id 0 = end of sequence) with deterministic per-token statistics, and it
// has real, if tiny, parameters — one bias per token id, and named rank-1 LoRA adapters over it
// chosen per call or per sequence as the engine's are — that its trainer moves with AdamW and
// that save/load and the optimizer state round-trip through the same files the engine writes
// (model.safetensors or PEFT adapter folders, optimizer.safetensors, trainer_state.json). So
// rewards, advantages, buffers, checkpoints and exact resume all run for real; only the language
// model is scripted.
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { adapterIndices, attachAdapterName, DEFAULT_ADAPTER, resolveAdapterOptions, type AdapterChoice, type AdapterOptions } from '../../engine/adapters.js'
import { CheckpointError, InvalidArgumentError, SeveralAdaptersError } from '../../engine/errors.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors } from '../../engine/hf/safetensors.js'
import type { Completion, GenerateOptions, Prompt, ScorePair, Scored } from '../../engine/model.js'
import { adapterFolder } from '../../engine/persistence.js'
import type { StepMetrics, TrainBatch, TrainSequence } from '../../train/trainer.js'
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
  /** The LoRA adapter this sample runs through (null: the base alone). */
  adapter: string | null
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

/** One adapter of the fake: a rank-1 LoRA pair over the bias (A a scalar, B one value per token id). */
interface ScriptedLora {
  a: Float32Array
  b: Float32Array
  rank: number
  alpha: number
}

/** The engine's name of an adapter matrix ('default' unnamed, as PEFT files name it; others carry their name). */
function loraName(matrix: 'A' | 'B', adapter: string): string {
  return adapter === DEFAULT_ADAPTER ? `scripted.lora_${matrix}.weight` : `scripted.lora_${matrix}.${adapter}.weight`
}

/** The fake's parameters: one bias per token id (full fine-tuning), and named LoRA pairs over it. */
class Weights {
  bias: Float32Array = new Float32Array(VOCAB)
  /** The adapters by name, in attach order (an adapter's index in it is its engine index). */
  readonly adapters = new Map<string, ScriptedLora>()

  /** The effective bias of token `t` through `adapter` (null: the base alone). */
  at(t: number, adapter: string | null): number {
    const l = adapter === null ? undefined : this.adapters.get(adapter)
    return this.bias[t] + (l ? (l.alpha / l.rank) * l.b[t] * l.a[0] : 0)
  }

  /** The adapter each of `count` rows runs through, by the engine's rule (adapters.ts adapterIndices): unknown names are typed errors. */
  choose(choice: AdapterChoice | undefined, count: number, what = 'adapter'): (string | null)[] {
    const names = [...this.adapters.keys()]
    const indices = adapterIndices(this, choice, count, what)
    return Array.from({ length: count }, (_, i) => (indices && indices[i] >= 0 ? names[indices[i]] : null))
  }

  /** The adapter a call that names none runs through: 'default' when attached, else the base. */
  get defaultAdapter(): string | null {
    return this.adapters.has(DEFAULT_ADAPTER) ? DEFAULT_ADAPTER : null
  }
}

export class ScriptedPolicy implements Policy {
  readonly config = { architecture: 'scripted', vocabSize: VOCAB, eosTokenIds: [EOS] }
  readonly tokenizer = new ScriptedTokenizer()
  readonly scoreLabels: number
  readonly weights = new Weights()
  /** Every generate() call: its prompts, options, the adapter each prompt ran through and what it returned, for assertions. */
  readonly calls: { prompts: string[]; options: GenerateOptions; adapters: (string | null)[]; outputs: Completion[][] }[] = []
  /** Every score() call: its prompts and the adapter each pair ran through, for assertions. */
  readonly scoreCalls: { prompts: string[]; adapters: (string | null)[] }[] = []
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

  get adapterNames(): readonly string[] {
    return [...this.weights.adapters.keys()]
  }

  /** Attaches a named rank-1 adapter: A from `seed` (in [0.5, 1.5)), B = 0, so a no-op until trained (as the engine's). */
  async addAdapter(name: string, options: AdapterOptions): Promise<void> {
    this.live()
    attachAdapterName(this.weights, name)
    const { rank, alpha, seed } = resolveAdapterOptions(options)
    this.weights.adapters.set(name, { a: new Float32Array([0.5 + hashUniform(`A|${seed}`)]), b: new Float32Array(VOCAB), rank, alpha })
  }

  /** Statistics of one token: logprob log σ(u + bias) of a hashed logit u, an entropy, a margin. */
  private tokenStats(key: string, t: number, topK: number, adapter: string | null): { logprob: number; entropy: number; maxLogit: number; margin: number; topIds: number[]; topLogits: number[] } {
    const u = hashUniform(key)
    const z = 2 * u + this.weights.at(t, adapter)
    const logprob = Math.log(sigmoid(z))
    const topLogits = Array.from({ length: topK }, (_, j) => z - j * (0.25 + hashUniform(`${key}:${j}`)))
    return { logprob, entropy: 0.2 + 2 * hashUniform(`${key}:H`), maxLogit: z, margin: 0.25 + hashUniform(`${key}:0`), topIds: Array.from({ length: topK }, (_, j) => (t + j) % VOCAB), topLogits }
  }

  private statsOf(prefix: string, tokens: number[], topK: number, adapter: string | null): Omit<Completion, 'text' | 'finishReason' | 'promptTokens' | 'promptIndex' | 'sampleIndex'> {
    const s = tokens.map((t, i) => this.tokenStats(`${prefix}|${i}|${t}`, t, topK, adapter))
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
    const adapters = this.weights.choose(options.adapter, prompts.length)
    const outputs = texts.map((prompt, promptIndex) =>
      Array.from({ length: n }, (_, sampleIndex): Completion => {
        const key = `${seed}|${(options.sequenceOffset ?? 0) + promptIndex * n + sampleIndex}|${prompt}` // sequence id = offset + prompt·n + sample
        const uniform = hashUniform(key)
        const adapter = adapters[promptIndex]
        const reply = this.options.script({ prompt, promptIndex, sampleIndex, seed, temperature: options.temperature ?? 1, updates, dir: this.dir, uniform, adapter })
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
        return { text, finishReason, promptTokens: utf8(prompt).length, promptIndex, sampleIndex, ...this.statsOf(key, tokens, topK, adapter) }
      }),
    )
    this.calls.push({ prompts: texts, options, adapters, outputs })
    return outputs
  }

  encodePrompt(prompt: Prompt): number[] {
    return utf8(promptText(prompt))
  }

  async score(pairs: ScorePair[], options: { adapter?: AdapterChoice } = {}): Promise<Scored[]> {
    this.live()
    const adapters = this.weights.choose(options.adapter, pairs.length)
    this.scoreCalls.push({ prompts: pairs.map((p) => promptText(p.prompt)), adapters })
    return pairs.map((p, i) => {
      const completion = typeof p.completion === 'string' ? utf8(p.completion) : [...p.completion]
      return { promptTokens: this.encodePrompt(p.prompt).length, ...this.statsOf(`score|${promptText(p.prompt)}`, completion, 0, adapters[i]) }
    })
  }

  /** A reward model's raw score: the script's judge plus the mean learned bias of the completion's tokens. */
  async rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    this.live()
    if (!this.scoreLabels) throw new InvalidArgumentError('model', 'this scripted policy has no score head')
    return Float32Array.from(pairs, (p) => {
      const text = typeof p.completion === 'string' ? p.completion : Buffer.from(p.completion.map((t) => t & 0xff)).toString('utf8')
      const tokens = utf8(text)
      const learned = tokens.length ? tokens.reduce((a, t) => a + this.weights.at(t, this.weights.defaultAdapter), 0) / tokens.length : 0
      return (this.options.judge?.(promptText(p.prompt), text) ?? 0) + learned
    })
  }

  async trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer> {
    this.live()
    const trained = trainedAdapters(options)
    if (options.lora && trained.length !== 1) throw new InvalidArgumentError('adapter', 'lora attaches one adapter: name one in adapter')
    for (const name of trained) if (!(options.lora && name === trained[0])) this.weights.choose(name, 1, 'adapter') // unknown: a typed error naming it
    if (options.lora && !this.weights.adapters.has(trained[0])) this.weights.adapters.set(trained[0], { a: new Float32Array([1]), b: new Float32Array(VOCAB), rank: options.lora.rank, alpha: options.lora.alpha })
    this.trainerOf = new ScriptedTrainer(this, options, trained)
    return this.trainerOf
  }

  /** model.safetensors + config.json, or with LoRA PEFT adapter folders ('default' at the root, others in sub-folders, as the engine saves). */
  async save(dir: string, options: { adapterOnly?: boolean } = {}): Promise<void> {
    this.live()
    await mkdir(dir, { recursive: true })
    const adapters = this.weights.adapters
    if (adapters.size && options.adapterOnly !== false) {
      for (const [name, lora] of adapters) {
        const folder = adapterFolder(dir, name)
        await mkdir(folder, { recursive: true })
        await writeSafetensors(join(folder, 'adapter_model.safetensors'), [
          { name: `base_model.model.${loraName('A', DEFAULT_ADAPTER)}`, dtype: 'F32', shape: [1, 1], data: lora.a },
          { name: `base_model.model.${loraName('B', DEFAULT_ADAPTER)}`, dtype: 'F32', shape: [VOCAB, 1], data: lora.b },
        ])
        await writeJsonAtomic(join(folder, 'adapter_config.json'), { peft_type: 'LORA', r: lora.rank, lora_alpha: lora.alpha, target_modules: ['scripted'], base_model_name_or_path: this.dir }, 2)
      }
      return
    }
    if (adapters.size > 1) throw new SeveralAdaptersError('adapterOnly', 'a merged save (adapterOnly: false)', [...adapters.keys()])
    const bias = Float32Array.from({ length: VOCAB }, (_, t) => this.weights.at(t, this.weights.defaultAdapter))
    await writeSafetensors(join(dir, 'model.safetensors'), [{ name: PARAM, dtype: 'F32', shape: [VOCAB], data: bias }])
    await writeJsonAtomic(join(dir, 'config.json'), { model_type: MARKER, vocab_size: VOCAB, num_labels: this.scoreLabels }, 2)
  }

  /** Restores weights a save() wrote (model folder) and attaches an adapter folder, or every adapter of a multi-adapter folder (as Model.loadAdapters). */
  async load(ref: PolicyRef): Promise<void> {
    const config = join(ref.model, 'config.json')
    if (existsSync(config) && (JSON.parse(await readFile(config, 'utf8')) as { model_type?: string }).model_type === MARKER) {
      const [t] = (await readSafetensorsHeader(join(ref.model, 'model.safetensors'))).tensors
      this.weights.bias = await readTensorFloat32(t)
    }
    if (ref.adapter) await this.loadAdapter(ref.adapter, DEFAULT_ADAPTER)
    if (ref.adapters) {
      const names = [...(existsSync(join(ref.adapters, 'adapter_config.json')) ? [DEFAULT_ADAPTER] : [])]
      for (const e of (await readdir(ref.adapters, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name).sort())
        if (e !== DEFAULT_ADAPTER && existsSync(join(ref.adapters, e, 'adapter_config.json'))) names.push(e)
      if (!names.length) throw new InvalidArgumentError('dir', `${ref.adapters} holds no PEFT adapter (adapter_config.json at its root or in a sub-folder)`)
      for (const name of names) await this.loadAdapter(adapterFolder(ref.adapters, name), name)
    }
  }

  async loadAdapter(dir: string, name: string): Promise<void> {
    this.live()
    attachAdapterName(this.weights, name)
    const cfg = JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8')) as { r: number; lora_alpha: number }
    const tensors = (await readSafetensorsHeader(join(dir, 'adapter_model.safetensors'))).tensors
    const byName = new Map(tensors.map((t) => [t.name.replace(/^base_model\.model\./, ''), t]))
    const a = byName.get(loraName('A', DEFAULT_ADAPTER)), b = byName.get(loraName('B', DEFAULT_ADAPTER))
    if (!a || !b) throw new InvalidArgumentError('adapter', `${dir}: not a scripted adapter (lora_A and lora_B missing)`)
    this.weights.adapters.set(name, { a: await readTensorFloat32(a), b: await readTensorFloat32(b), rank: cfg.r, alpha: cfg.lora_alpha })
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
  /** With adapterSchedules, each trained adapter's steps (the engine's per-adapter clocks; the fake's lr has no schedule). */
  readonly adapterSteps: Map<string, number> | null
  /** Every batch given to step(), for assertions. */
  readonly batches: TrainBatch[] = []

  constructor(
    private readonly policy: ScriptedPolicy,
    readonly options: PolicyTrainerOptions,
    /** The adapters this trainer trains (empty: the bias, full fine-tuning). */
    readonly trained: readonly string[],
  ) {
    this.adapterSteps = options.adapterSchedules ? new Map(trained.map((name) => [name, 0])) : null
  }

  get steps(): number {
    return this.stepCount
  }

  /** The trained parameters by their engine names: each trained adapter's B (A stays fixed), or the bias. */
  private params(): { name: string; data: Float32Array; adapter: string | null }[] {
    const w = this.policy.weights
    if (!this.trained.length) return [{ name: PARAM, data: w.bias, adapter: w.defaultAdapter }]
    return this.trained.map((a) => ({ name: loraName('B', a), data: w.adapters.get(a)!.b, adapter: a }))
  }

  /** The adapter sequence `i` runs through, as the engine's trainer picks it (adapterOf). */
  private adapterOf(s: TrainSequence, i: number): string | null {
    const at = `batch.sequences[${i}].adapter`
    if (s.adapter !== undefined) return this.policy.weights.choose(s.adapter, 1, at)[0]
    if (this.trained.length > 1) throw new InvalidArgumentError(at, `this trainer trains ${this.trained.join(', ')}: each sequence names its adapter`)
    return this.trained[0] ?? this.policy.weights.defaultAdapter
  }

  /**
   * d(score)/d(bias[t]) summed over a batch, per trained parameter: what each sequence asks for,
   * added to the parameter its adapter trains (a sequence through an untrained adapter or the base
   * moves nothing when adapters train). Parameters no sequence reached are absent (not stepped, as the engine's).
   */
  private direction(batch: TrainBatch): Map<string, Float64Array> {
    const seqs = batch.sequences ?? []
    const objective = this.options.objective.name
    const sign = new Float64Array(seqs.length).fill(1)
    for (const [chosen, rejected] of batch.pairs ?? []) [sign[chosen], sign[rejected]] = [1, -1]
    const byAdapter = new Map(this.params().map((p) => [p.adapter, p.name]))
    const grads = new Map<string, Float64Array>()
    seqs.forEach((s, i) => {
      const adapter = this.adapterOf(s, i)
      const name = this.trained.length ? (this.trained.includes(adapter as string) ? byAdapter.get(adapter) : undefined) : PARAM
      if (name === undefined) return
      const g = grads.get(name) ?? new Float64Array(VOCAB)
      grads.set(name, g)
      const w = (s.weight ?? 1) * (objective === 'policy' ? meanAdvantage(s.advantages) : sign[i])
      for (const t of s.completion) g[t] += w / Math.max(1, s.completion.length) / seqs.length
    })
    return grads
  }

  async step(batch: TrainBatch): Promise<StepMetrics> {
    const seqs = batch.sequences ?? []
    if (!seqs.length) throw new InvalidArgumentError('batch.sequences', 'a training batch needs at least one sequence')
    const clocked = this.clockedAdapter(seqs)
    this.batches.push(batch)
    const grads = this.direction(batch)
    const gradNorm = Math.sqrt([...grads.values()].reduce((a, g) => g.reduce((b, x) => b + x * x, a), 0))
    const lr = this.options.optimizer.lr
    if (!Number.isFinite(gradNorm)) return { step: this.stepCount, loss: NaN, lr, gradNorm, skipped: true, skipReason: 'non-finite gradient', tokens: 0, tokensPerSecond: 0, flops: 0, mfu: null, objective: {} }
    const params = this.params()
    const weights = this.policy.weights
    this.lossBefore = -params.reduce((a, p) => (grads.get(p.name) ?? new Float64Array(VOCAB)).reduce((b, x, t) => b + x * weights.at(t, p.adapter), a), 0) + [...this.adam.values()].reduce((a, m) => a + m.v.reduce((b, x) => b + x, 0), 0)
    this.stepCount++
    if (clocked !== null) this.adapterSteps!.set(clocked, this.adapterSteps!.get(clocked)! + 1)
    for (const { name, data: p } of params) {
      const g = grads.get(name)
      if (!g) continue // no sequence reached it: no gradient written, no step (the engine's rule)
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

  // With per-adapter clocks a step trains exactly one adapter, as the engine's trainer refuses any other batch.
  private clockedAdapter(seqs: readonly TrainSequence[]): string | null {
    if (!this.adapterSteps) return null
    const names = new Set(seqs.map((s, i) => this.adapterOf(s, i)).filter((n): n is string => n !== null && this.adapterSteps!.has(n)))
    if (names.size !== 1)
      throw new InvalidArgumentError('batch.sequences', `this trainer keeps a step clock per adapter (adapterSchedules): a step trains exactly one of ${this.trained.join(', ')}, this batch trains ${names.size ? [...names].join(', ') : 'none'}`)
    return [...names][0]
  }

  async saveState(dir: string): Promise<void> {
    const tensors = [...this.adam].flatMap(([name, a]) => [
      { name: `${name}::m`, dtype: 'F32' as const, shape: [a.m.length], data: a.m },
      { name: `${name}::v`, dtype: 'F32' as const, shape: [a.v.length], data: a.v },
    ])
    await writeSafetensors(join(dir, 'optimizer.safetensors'), tensors)
    await writeJsonAtomic(join(dir, 'trainer_state.json'), { step: this.stepCount, format: 1, ...(this.adapterSteps ? { adapterSteps: Object.fromEntries(this.adapterSteps) } : {}) }, 2)
  }

  async loadState(dir: string): Promise<void> {
    const meta = JSON.parse(await readFile(join(dir, 'trainer_state.json'), 'utf8')) as { step: number; adapterSteps?: Record<string, number> }
    if (this.adapterSteps)
      for (const name of this.adapterSteps.keys()) {
        const n = meta.adapterSteps?.[name]
        if (!Number.isInteger(n)) throw new CheckpointError(join(dir, 'trainer_state.json'), 'adapterSteps', 'field', `${dir}: adapterSteps has no step count of '${name}'`)
        this.adapterSteps.set(name, n!)
      }
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

/** The adapters a trainer's options train: those it names, or 'default' with `lora`; none for full fine-tuning. */
function trainedAdapters(options: PolicyTrainerOptions): string[] {
  const named = options.adapter === undefined ? [] : Array.isArray(options.adapter) ? options.adapter : [options.adapter]
  const trained = named.length ? [...named] : options.lora ? [DEFAULT_ADAPTER] : []
  if (new Set(trained).size !== trained.length) throw new InvalidArgumentError('adapter', 'adapter lists a name twice')
  return trained
}
