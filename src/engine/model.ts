// The typed facade over the native engine: load a Hugging Face folder, generate (batched, n
// samples per prompt sharing one prefill, per-token statistics from the sampling pass), stream,
// and teacher-forced scoring with optional KL to a reference model.
import { existsSync } from 'node:fs'
import { mkdir, readFile } from 'node:fs/promises'
import { cpus } from 'node:os'
import { join } from 'node:path'
import { ConfigError, DeviceUnavailableError, InvalidArgumentError, NativeAddonError, type DeviceUnavailableReason } from './errors.js'
import { writeFileAtomic } from './hf/atomic.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors, writeShardedSafetensors } from './hf/safetensors.js'
import { Trainer, type TrainerOptions } from '../train/trainer.js'
import { readModelFolder } from './hf/folder.js'
import type { ChatMessage, ChatTemplateOptions, Tokenizer } from './tokenizer.js'
import type { ModelConfig } from './types.js'
import { isNativeError, nativeAddon, type NativeKVCache, type NativeModel, type NativeStepResult, type NativeTensor } from '../native.js'
import { advanceText } from './stopping.js'
import { MAX_LORA_RANK, MAX_SCORE_LABELS, MAX_THREADS } from './options.js'
export { MAX_LORA_RANK, MAX_SCORE_LABELS, MAX_THREADS } from './options.js'

export type Device = 'auto' | 'cpu' | 'cuda'


/**
 * The device a load without `device` uses: AUTODIDACT_DEVICE (cpu | cuda | auto) when set — how
 * `autodidact evolve --device cuda` reaches every model a method loads — else 'auto'.
 */
export function defaultDevice(): Device {
  const env = process.env.AUTODIDACT_DEVICE
  if (env === undefined || env === '') return 'auto'
  if (env !== 'auto' && env !== 'cpu' && env !== 'cuda')
    throw new InvalidArgumentError('AUTODIDACT_DEVICE', `AUTODIDACT_DEVICE must be 'auto', 'cpu' or 'cuda', got ${env}`)
  return env
}

export interface LoadOptions {
  /** 'cpu' (and 'auto', for now) run on the CPU engine; 'cuda' on the CUDA plugin, or a DeviceUnavailableError says why not. Default: defaultDevice(). */
  device?: Device
  /** CUDA device ordinal (default 0). */
  deviceIndex?: number
  /** CPU threads for the model's kernels; default: all cores. */
  threads?: number
}

/** A prompt: raw text, a chat (rendered with the folder's template and a generation prompt), or token ids. */
export type Prompt = string | { messages: ChatMessage[]; template?: ChatTemplateOptions } | readonly number[]

export interface SamplingOptions {
  /** 0 = greedy. Default 1. */
  temperature?: number
  /** 0 = off. */
  topK?: number
  /** 1 = off. */
  topP?: number
  /** 0 = off. */
  minP?: number
  repetitionPenalty?: number
  presencePenalty?: number
  frequencyPenalty?: number
  /** Seed of the counter-based RNG: a sample depends on (seed, sequence id, position) only. Default 0. */
  seed?: number
}

export interface GenerateOptions extends SamplingOptions {
  /** Samples per prompt; they share the prompt's prefill. Default 1. */
  n?: number
  /** Default 256. */
  maxTokens?: number
  /** Generation ends before any of these strings (not included in `text`). */
  stop?: string[]
  /** Generation ends at these token ids; default: the model's end-of-sequence ids. */
  stopTokenIds?: number[]
  /** Per-token statistics; topK > 0 returns the K largest raw logits and their ids (K ≤ 64). */
  stats?: { topK?: number }
  signal?: AbortSignal
  /** Sequence ids start here (sequence id = offset + prompt index · n + sample index). */
  sequenceOffset?: number
  /** How many sequences decode together; default: all of them. */
  maxBatch?: number
  /** Controls of single prompts, aligned with the prompts (one entry each). */
  perPrompt?: readonly PromptControl[]
}

/**
 * One prompt's own seed, sequence ids and abort signal inside a larger generate() call. Since a
 * sample depends only on (seed, sequence id, position), a prompt given its own seed and
 * `sequenceOffset: j·n` samples exactly what it would as prompt j of a call of its own — how a
 * server merges seeded requests into one batch.
 */
export interface PromptControl {
  /** Default: the call's `seed`. */
  seed?: number
  /** First sequence id of this prompt's samples; default: the call's sequenceOffset + prompt index · n. */
  sequenceOffset?: number
  /** Ends this prompt's samples (finishReason 'abort'); the other prompts decode on. */
  signal?: AbortSignal
}

export type FinishReason = 'stop' | 'length' | 'abort'

/** Per-token statistics of a trajectory, from the raw (pre-temperature) logits of each step. */
export interface TokenStats {
  tokens: Int32Array
  /** log π(token) under the raw logits. */
  logprobs: Float32Array
  /** Full-vocabulary entropy in nats. */
  entropy: Float32Array
  logsumexp: Float32Array
  maxLogit: Float32Array
  /** Largest minus second-largest logit. */
  margin: Float32Array
  topK?: { k: number; ids: Int32Array; logits: Float32Array }
}

export interface Completion extends TokenStats {
  text: string
  finishReason: FinishReason
  promptTokens: number
  /** Which prompt and sample this is. */
  promptIndex: number
  sampleIndex: number
}

export interface StreamChunk {
  /** Text completed by this token ('' while a multi-byte character is still partial). */
  text: string
  token: number
  logprob: number
  entropy: number
  /** log Σ exp of the step's raw logits: a raw logit z becomes the logprob z − logsumexp. */
  logsumexp: number
  /** The step's K largest raw logits and their ids when `stats.topK` > 0, else null. */
  topK: { ids: Int32Array; logits: Float32Array } | null
  finishReason: FinishReason | null
}

export interface ScorePair {
  prompt: Prompt
  /** Text (encoded without special tokens) or token ids. */
  completion: string | readonly number[]
}

export interface ScoreOptions {
  stats?: { topK?: number }
  /** A second model on the same vocabulary: per-token KL estimators to it. */
  reference?: Model
}

export interface Scored extends TokenStats {
  promptTokens: number
  /** KL estimators per completion token (with `reference`): k1, k2, k3 (verl low_var_kl) and the exact KL(π‖ref). */
  kl?: { k1: Float32Array; k2: Float32Array; k3: Float32Array; exact: Float32Array }
}

function positiveInt(name: string, v: number | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined) return fallback
  if (!Number.isInteger(v) || v < 1 || v > max) throw new InvalidArgumentError(name, `${name} must be an integer in [1, ${max}], got ${v}`)
  return v
}

function nonNegativeInt(name: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback
  if (!Number.isInteger(v) || v < 0 || v > 1024) throw new InvalidArgumentError(name, `${name} must be an integer in [0, 1024], got ${v}`)
  return v
}

function finiteIn(name: string, v: number | undefined, fallback: number, lo: number, hi: number): number {
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi)
    throw new InvalidArgumentError(name, `${name} must be a number in [${lo}, ${hi}], got ${v}`)
  return v
}

interface ResolvedSampling {
  temperature: number
  topK: number
  topP: number
  minP: number
  repetitionPenalty: number
  presencePenalty: number
  frequencyPenalty: number
  seed: number
}

/** Each prompt's seed, first sequence id and signal, from `perPrompt` or the call's defaults. */
export function resolvePromptControls(
  perPrompt: readonly PromptControl[] | undefined,
  prompts: number,
  seed: number,
  offset: number,
  n: number,
): { seed: number; sequenceOffset: number; signal: AbortSignal | undefined }[] {
  if (perPrompt !== undefined && (!Array.isArray(perPrompt) || perPrompt.length !== prompts))
    throw new InvalidArgumentError('perPrompt', `perPrompt must have one entry per prompt (${prompts}), got ${Array.isArray(perPrompt) ? perPrompt.length : typeof perPrompt}`)
  return Array.from({ length: prompts }, (_, p) => {
    const c = perPrompt?.[p] ?? {}
    const own = c.seed ?? seed
    if (!Number.isSafeInteger(own) || own < 0) throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].seed must be a non-negative safe integer, got ${own}`)
    if (c.signal !== undefined && !(c.signal instanceof AbortSignal))
      throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].signal must be an AbortSignal`)
    const first = c.sequenceOffset ?? offset + p * n
    if (!Number.isSafeInteger(first) || first < 0)
      throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].sequenceOffset must be a non-negative safe integer, got ${first}`)
    return { seed: own, sequenceOffset: first, signal: c.signal }
  })
}

function resolveSampling(o: SamplingOptions): ResolvedSampling {
  const seed = o.seed ?? 0
  if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError('seed', `seed must be a non-negative safe integer, got ${seed}`)
  const topK = o.topK ?? 0
  if (!Number.isInteger(topK) || topK < 0) throw new InvalidArgumentError('topK', `topK must be a non-negative integer, got ${topK}`)
  return {
    temperature: finiteIn('temperature', o.temperature, 1, 0, 100),
    topK,
    topP: finiteIn('topP', o.topP, 1, Number.MIN_VALUE, 1),
    minP: finiteIn('minP', o.minP, 0, 0, 1),
    repetitionPenalty: finiteIn('repetitionPenalty', o.repetitionPenalty, 1, Number.MIN_VALUE, 100),
    presencePenalty: finiteIn('presencePenalty', o.presencePenalty, 0, -100, 100),
    frequencyPenalty: finiteIn('frequencyPenalty', o.frequencyPenalty, 0, -100, 100),
    seed,
  }
}

function statsTopK(stats: { topK?: number } | undefined): number {
  const k = stats?.topK ?? 0
  if (!Number.isInteger(k) || k < 0 || k > 64) throw new InvalidArgumentError('stats.topK', `stats.topK must be an integer in [0, 64], got ${k}`)
  return k
}

/** Grows per-token statistics of one sequence. */
class TrajectoryBuffer {
  tokens: number[] = []
  logprobs: number[] = []
  entropy: number[] = []
  logsumexp: number[] = []
  maxLogit: number[] = []
  margin: number[] = []
  topIds: number[] = []
  topLogits: number[] = []

  push(r: NativeStepResult, row: number, k: number): void {
    this.tokens.push(r.tokens[row])
    this.logprobs.push(r.chosenLogprob[row])
    this.entropy.push(r.entropy[row])
    this.logsumexp.push(r.logsumexp[row])
    this.maxLogit.push(r.maxLogit[row])
    this.margin.push(r.margin[row])
    for (let j = 0; j < k; ++j) {
      this.topIds.push(r.topkIds[row * k + j])
      this.topLogits.push(r.topkLogits[row * k + j])
    }
  }

  truncate(n: number, k: number): void {
    for (const a of [this.tokens, this.logprobs, this.entropy, this.logsumexp, this.maxLogit, this.margin]) a.length = n
    this.topIds.length = n * k
    this.topLogits.length = n * k
  }

  freeze(k: number): TokenStats {
    const s: TokenStats = {
      tokens: Int32Array.from(this.tokens),
      logprobs: Float32Array.from(this.logprobs),
      entropy: Float32Array.from(this.entropy),
      logsumexp: Float32Array.from(this.logsumexp),
      maxLogit: Float32Array.from(this.maxLogit),
      margin: Float32Array.from(this.margin),
    }
    if (k > 0) s.topK = { k, ids: Int32Array.from(this.topIds), logits: Float32Array.from(this.topLogits) }
    return s
  }
}

/** One sequence being generated. */
interface Sequence {
  promptIndex: number
  sampleIndex: number
  streamId: number
  seed: number
  signal: AbortSignal | undefined
  prompt: readonly number[]
  slot: number
  buffer: TrajectoryBuffer
  text: string
  decoder: { push(id: number): string; flush(): string }
  finish: FinishReason | null
  /** Characters of `text` already streamed. */
  emitted: number
  /** The text was cut at a stop string: bytes held back after it are dropped. */
  cutAtStopString: boolean
}

export interface LoraInfo {
  rank: number
  alpha: number
  targets: string[]
}

export interface SaveOptions {
  /** With LoRA attached: write a PEFT adapter folder (default) or the merged full model (false). */
  adapterOnly?: boolean
  /** Shard model weights above this many bytes per file. Default 5 GB, as transformers. */
  maxShardBytes?: number
}

const FOLDER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'chat_template.json']

export class Model {
  private disposed = false
  /** LoRA adapters attached to this model (by a trainer or loadAdapter), if any. */
  lora: LoraInfo | null = null
  /** Labels of the score head (a *ForSequenceClassification reward model), 0 when there is none. */
  scoreLabels = 0

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    readonly generationConfig: Record<string, unknown> | null,
    readonly device: 'cpu' | 'cuda',
    private readonly native: NativeModel,
  ) {}

  static async load(dir: string, options: LoadOptions = {}): Promise<Model> {
    const device = options.device ?? defaultDevice()
    if (device !== 'auto' && device !== 'cpu' && device !== 'cuda')
      throw new InvalidArgumentError('device', `device must be 'auto', 'cpu' or 'cuda', got ${String(device)}`)
    const threads = positiveInt('threads', options.threads, Math.min(cpus().length, MAX_THREADS), MAX_THREADS)
    const deviceIndex = device === 'cuda' ? nonNegativeInt('deviceIndex', options.deviceIndex, 0) : 0
    const addon = await nativeAddon()
    if (device === 'cuda') assertCudaAvailable(addon.info().cuda, deviceIndex)
    const folder = await readModelFolder(dir)
    const extra = new Set(folder.extraTensors)
    const scoreLabels = folder.head.kind === 'sequence-classification' ? folder.head.numLabels : 0
    const placed = device === 'cuda' ? 'cuda' : 'cpu'
    const native = await Promise.resolve()
      .then(() => addon.loadModel({ ...folder.config, scoreLabels }, folder.tensors.filter((t) => !extra.has(t.name)), threads, { device: placed, deviceIndex }))
      .catch((e: Error) => {
        throw cudaUnavailable(e) ?? new NativeAddonError(`loading ${dir} on ${placed} failed: ${e.message}`, { cause: e })
      })
    const model = new Model(dir, folder.config, folder.tokenizer, folder.generationConfig as Record<string, unknown> | null, placed, native)
    model.scoreLabels = scoreLabels
    return model
  }

  /** The native handle (for the trainer and benchmarks). */
  get handle(): NativeModel {
    this.assertLive()
    return this.native
  }

  dispose(): void {
    if (this.disposed) return
    this.disposed = true
    this.native.dispose()
  }

  private assertLive(): void {
    if (this.disposed) throw new InvalidArgumentError('model', 'this model has been disposed')
  }

  /** Token ids of a prompt. */
  encodePrompt(prompt: Prompt): number[] {
    if (typeof prompt === 'string') return this.tokenizer.encode(prompt, { addSpecialTokens: true })
    if (Array.isArray(prompt)) return this.checkIds(prompt as readonly number[], 'prompt')
    const chat = prompt as { messages: ChatMessage[]; template?: ChatTemplateOptions }
    if (!chat || !Array.isArray(chat.messages)) throw new InvalidArgumentError('prompt', 'a prompt is a string, token ids, or { messages }')
    return this.tokenizer.encodeChat(chat.messages, { addGenerationPrompt: true, ...chat.template })
  }

  private checkIds(ids: readonly number[], what: string): number[] {
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= this.config.vocabSize)
        throw new InvalidArgumentError(what, `${what} holds token id ${id}, outside the vocabulary [0, ${this.config.vocabSize})`)
    return [...ids]
  }

  private defaultStopIds(): number[] {
    return [...this.tokenizer.eosTokenIds, ...this.config.eosTokenIds].filter((v, i, a) => a.indexOf(v) === i)
  }

  /** Samples `n` completions for each prompt. Results are grouped per prompt. */
  async generate(prompts: Prompt | Prompt[], options: GenerateOptions = {}): Promise<Completion[][]> {
    const list = Array.isArray(prompts) && (prompts.length === 0 || typeof prompts[0] !== 'number') ? (prompts as Prompt[]) : [prompts as Prompt]
    const n = positiveInt('n', options.n, 1, 4096)
    const out: Completion[][] = list.map(() => [])
    for await (const done of this.run(list, options, n, null)) out[done.promptIndex][done.sampleIndex] = done
    return out
  }

  /** Streams one completion token by token; the generator's return value is the full Completion. */
  async *stream(prompt: Prompt, options: Omit<GenerateOptions, 'n'> = {}): AsyncGenerator<StreamChunk, Completion, void> {
    const queue: StreamChunk[] = []
    let wake: (() => void) | null = null
    let done = false
    let failure: unknown = null
    let result: Completion | null = null
    const producer = (async () => {
      for await (const c of this.run([prompt], options, 1, (chunk) => {
        queue.push(chunk)
        wake?.()
      }))
        result = c
    })()
      .catch((e) => (failure = e))
      .finally(() => {
        done = true
        wake?.()
      })
    while (true) {
      if (queue.length) {
        yield queue.shift()!
        continue
      }
      if (done) break
      await new Promise<void>((resolve) => (wake = resolve))
      wake = null
    }
    await producer
    if (failure) throw failure
    return result!
  }

  /** The decode loop: prefill every prompt once, fan out n slots per prompt, step until done. */
  private async *run(
    prompts: Prompt[],
    options: GenerateOptions,
    n: number,
    onToken: ((c: StreamChunk) => void) | null,
  ): AsyncGenerator<Completion> {
    this.assertLive()
    const sampling = resolveSampling(options)
    const maxTokens = positiveInt('maxTokens', options.maxTokens, 256, 1 << 20)
    const k = statsTopK(options.stats)
    const stops = (options.stop ?? []).filter((s) => s.length > 0)
    const stopIds = new Set(options.stopTokenIds ?? this.defaultStopIds())
    const offset = options.sequenceOffset ?? 0
    const encoded = prompts.map((p) => {
      const ids = this.encodePrompt(p)
      if (ids.length === 0) throw new InvalidArgumentError('prompt', 'a prompt must encode to at least one token')
      return ids
    })
    const controls = resolvePromptControls(options.perPrompt, prompts.length, sampling.seed, offset, n)
    const sequences: Sequence[] = []
    encoded.forEach((ids, p) => {
      const c = controls[p]
      for (let s = 0; s < n; ++s)
        sequences.push({ promptIndex: p, sampleIndex: s, streamId: c.sequenceOffset + s, seed: c.seed, signal: c.signal, prompt: ids, slot: -1, buffer: new TrajectoryBuffer(), text: '', decoder: this.tokenizer.createStreamDecoder(), finish: null, emitted: 0, cutAtStopString: false })
    })
    const maxBatch = positiveInt('maxBatch', options.maxBatch, sequences.length, 1 << 20)
    for (let w = 0; w < sequences.length; w += maxBatch) {
      yield* this.runWave(sequences.slice(w, w + maxBatch), { sampling, maxTokens, k, stops, stopIds, signal: options.signal, onToken })
    }
  }

  private async *runWave(
    wave: Sequence[],
    o: { sampling: ResolvedSampling; maxTokens: number; k: number; stops: string[]; stopIds: Set<number>; signal?: AbortSignal; onToken: ((c: StreamChunk) => void) | null },
  ): AsyncGenerator<Completion> {
    const capacity = Math.max(...wave.map((s) => s.prompt.length)) + o.maxTokens
    const cache = this.native.createCache(wave.length, capacity)
    try {
      wave.forEach((s, i) => (s.slot = i))
      await this.prefillShared(cache, wave)
      // Each step feeds every live sequence its newest token (first: the prompt's last token).
      let live = wave.slice()
      const pending = new Map<Sequence, number>(live.map((s) => [s, s.prompt[s.prompt.length - 1]]))
      while (live.length) {
        if (o.signal?.aborted) {
          for (const s of live) s.finish = 'abort'
          for (const s of live) yield this.complete(s, o.k)
          return
        }
        // A prompt whose own signal fired leaves the batch; its rows stop costing compute.
        const leaving = live.filter((s) => s.signal?.aborted)
        if (leaving.length) {
          for (const s of leaving) {
            s.finish = 'abort'
            yield this.complete(s, o.k)
          }
          live = live.filter((s) => !s.finish)
          if (!live.length) break
        }
        const result = await this.native.step(cache, {
          slots: Int32Array.from(live, (s) => s.slot),
          counts: new Int32Array(live.length).fill(1),
          outModes: new Uint8Array(live.length).fill(1),
          tokens: Int32Array.from(live, (s) => pending.get(s)!),
          sampling: this.samplingColumns(live, o.sampling),
          topK: o.k,
        })
        const still: Sequence[] = []
        live.forEach((s, row) => {
          s.buffer.push(result, row, o.k)
          const token = result.tokens[row]
          advanceText(s, token, s.buffer.tokens.length, o)
          if (o.onToken)
            o.onToken({
              text: this.releasableText(s, o.stops),
              token,
              logprob: result.chosenLogprob[row],
              entropy: result.entropy[row],
              logsumexp: result.logsumexp[row],
              topK: o.k ? { ids: result.topkIds.slice(row * o.k, (row + 1) * o.k), logits: result.topkLogits.slice(row * o.k, (row + 1) * o.k) } : null,
              finishReason: s.finish,
            })
          if (s.finish) return
          pending.set(s, token)
          still.push(s)
        })
        for (const s of live) if (s.finish) yield this.complete(s, o.k)
        live = still
      }
    } finally {
      cache.dispose()
    }
  }

  /** Prefills each distinct prompt once (all but its last token) and copies it to its n slots. */
  private async prefillShared(cache: NativeKVCache, wave: Sequence[]): Promise<void> {
    const leaders = new Map<number, Sequence>()
    for (const s of wave) if (!leaders.has(s.promptIndex)) leaders.set(s.promptIndex, s)
    const prefill = [...leaders.values()].filter((s) => s.prompt.length > 1)
    if (prefill.length) {
      await this.native.step(cache, {
        slots: Int32Array.from(prefill, (s) => s.slot),
        counts: Int32Array.from(prefill, (s) => s.prompt.length - 1),
        outModes: new Uint8Array(prefill.length),
        tokens: Int32Array.from(prefill.flatMap((s) => s.prompt.slice(0, -1))),
      })
    }
    for (const s of wave) {
      const leader = leaders.get(s.promptIndex)!
      if (leader !== s && s.prompt.length > 1) cache.copyPrefix(leader.slot, s.slot, s.prompt.length - 1)
    }
  }

  private samplingColumns(live: Sequence[], p: ResolvedSampling) {
    const B = live.length
    return {
      temperature: new Float32Array(B).fill(p.temperature),
      topK: new Int32Array(B).fill(p.topK),
      topP: new Float32Array(B).fill(p.topP),
      minP: new Float32Array(B).fill(p.minP),
      repetitionPenalty: new Float32Array(B).fill(p.repetitionPenalty),
      presencePenalty: new Float32Array(B).fill(p.presencePenalty),
      frequencyPenalty: new Float32Array(B).fill(p.frequencyPenalty),
      seed: Float64Array.from(live, (s) => s.seed),
      stream: Float64Array.from(live, (s) => s.streamId),
      promptLength: Int32Array.from(live, (s) => s.prompt.length),
    }
  }


  /** Text not yet streamed, holding back a tail that could still become a stop string. */
  private releasableText(s: Sequence, stops: string[]): string {
    let safe = s.text.length
    if (!s.finish)
      for (const stop of stops)
        for (let len = Math.min(stop.length - 1, s.text.length); len > 0; --len)
          if (s.text.endsWith(stop.slice(0, len))) {
            safe = Math.min(safe, s.text.length - len)
            break
          }
    const delta = s.text.slice(s.emitted, safe)
    s.emitted = Math.max(s.emitted, safe)
    return delta
  }

  private complete(s: Sequence, k: number): Completion {
    if (!s.cutAtStopString) s.text += s.decoder.flush()
    return { ...s.buffer.freeze(k), text: s.text, finishReason: s.finish ?? 'length', promptTokens: s.prompt.length, promptIndex: s.promptIndex, sampleIndex: s.sampleIndex }
  }

  /** A trainer over this model (see src/train/trainer.ts). */
  async trainer(options: TrainerOptions): Promise<Trainer> {
    this.assertLive()
    return Trainer.create(this, options)
  }

  /** Parameters by name: base tensors (the adapters folded in when `merge`), adapters listed apart. */
  private async exportWeights(merge: boolean): Promise<{ base: NativeTensor[]; adapters: NativeTensor[] }> {
    const all = await (await nativeAddon()).train.exportTensors(this.handle, { mergeLora: merge && this.lora !== null })
    return { base: all.filter((t) => !t.name.includes('.lora_')), adapters: all.filter((t) => t.name.includes('.lora_')) }
  }

  /** Adds a score head (HF `score.weight`, N(0, 0.02²) as transformers initializes it) to make a reward model. */
  async attachScoreHead(options: { labels?: number; seed?: number } = {}): Promise<void> {
    const labels = options.labels ?? 1
    if (!Number.isInteger(labels) || labels < 1 || labels > MAX_SCORE_LABELS)
      throw new InvalidArgumentError('labels', `labels must be an integer in [1, ${MAX_SCORE_LABELS}], got ${labels}`)
    ;(await nativeAddon()).train.attachScoreHead(this.handle, { labels, std: 0.02, seed: options.seed ?? 0 })
    this.scoreLabels = labels
  }

  /** Reward-model scores of whole sequences (prompt then completion), from the score head on the last token. */
  async rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    if (!this.scoreLabels) throw new InvalidArgumentError('model', 'this model has no score head (load a *ForSequenceClassification folder or attachScoreHead())')
    if (!pairs.length) return new Float32Array(0)
    const seqs = pairs.map((p) => [...this.encodePrompt(p.prompt), ...(typeof p.completion === 'string' ? this.tokenizer.encode(p.completion, { addSpecialTokens: false }) : this.checkIds(p.completion, 'completion'))])
    return (await nativeAddon()).train.scoreForward(this.handle, { tokens: Int32Array.from(seqs.flat()), lengths: Int32Array.from(seqs, (s) => s.length), tape: false })
  }

  /** Folds the LoRA adapters into the base weights (W += α/r·B·A) and zeroes B. */
  async mergeLora(): Promise<void> {
    if (!this.lora) throw new InvalidArgumentError('lora', 'this model has no LoRA adapters to merge')
    await (await nativeAddon()).train.mergeLora(this.handle)
  }

  async save(dir: string, options: SaveOptions = {}): Promise<void> {
    this.assertLive()
    await mkdir(dir, { recursive: true })
    const adapterOnly = options.adapterOnly ?? this.lora !== null
    if (adapterOnly) {
      if (!this.lora) throw new InvalidArgumentError('adapterOnly', 'adapterOnly needs LoRA adapters attached')
      const { adapters } = await this.exportWeights(false)
      await writeSafetensors(
        join(dir, 'adapter_model.safetensors'),
        adapters.map((t) => ({ name: `base_model.model.${t.name}`, dtype: 'F32' as const, shape: t.shape, data: t.data })),
      )
      const adapterConfig = {
        peft_type: 'LORA',
        task_type: 'CAUSAL_LM',
        base_model_name_or_path: this.dir,
        r: this.lora.rank,
        lora_alpha: this.lora.alpha,
        lora_dropout: 0,
        target_modules: this.lora.targets,
        bias: 'none',
        fan_in_fan_out: false,
        inference_mode: true,
      }
      await writeFileAtomic(join(dir, 'adapter_config.json'), JSON.stringify(adapterConfig, null, 2) + '\n')
      return
    }
    const { base: all } = await this.exportWeights(true)
    const base = this.scoreLabels ? all.filter((t) => t.name !== 'lm_head.weight') : all
    await writeShardedSafetensors(
      dir,
      base.map((t) => ({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: t.data })),
      { maxShardBytes: options.maxShardBytes ?? 5e9 },
    )
    const config = JSON.parse(await readFile(join(this.dir, 'config.json'), 'utf8')) as Record<string, unknown>
    config.torch_dtype = 'float32'
    if (this.scoreLabels) {
      // a reward model saves as transformers' *ForSequenceClassification, score head, no LM head
      const family = { llama: 'Llama', qwen2: 'Qwen2', qwen3: 'Qwen3' }[this.config.architecture]
      config.architectures = [`${family}ForSequenceClassification`]
      config.num_labels = this.scoreLabels
      delete config.id2label
      delete config.label2id
    }
    await writeFileAtomic(join(dir, 'config.json'), JSON.stringify(config, null, 2) + '\n')
    for (const f of FOLDER_FILES) {
      const src = join(this.dir, f)
      if (existsSync(src) && join(dir, f) !== src) await writeFileAtomic(join(dir, f), await readFile(src))
    }
  }

  /** Attaches a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors). */
  async loadAdapter(dir: string): Promise<void> {
    this.assertLive()
    if (this.lora) throw new InvalidArgumentError('adapter', 'this model already has LoRA adapters attached')
    const configPath = join(dir, 'adapter_config.json')
    const cfg = JSON.parse(await readFile(configPath, 'utf8').catch((e: Error) => {
      throw new ConfigError(configPath, null, `${configPath}: cannot read the adapter config (${e.message})`)
    })) as { r?: number; lora_alpha?: number; target_modules?: string[] | string }
    const targets = typeof cfg.target_modules === 'string' ? [cfg.target_modules] : cfg.target_modules
    if (!Number.isInteger(cfg.r) || cfg.r! < 1 || cfg.r! > MAX_LORA_RANK)
      throw new ConfigError(configPath, 'r', `${configPath}: r must be an integer in [1, ${MAX_LORA_RANK}], got ${JSON.stringify(cfg.r)}`)
    if (!(Number(cfg.lora_alpha) > 0) || !Number.isFinite(Number(cfg.lora_alpha)))
      throw new ConfigError(configPath, 'lora_alpha', `${configPath}: lora_alpha must be a positive number, got ${JSON.stringify(cfg.lora_alpha)}`)
    if (!Array.isArray(targets) || !targets.length || !targets.every((t) => typeof t === 'string'))
      throw new ConfigError(configPath, 'target_modules', `${configPath}: target_modules must name the adapted modules`)
    const header = await readSafetensorsHeader(join(dir, 'adapter_model.safetensors'))
    const train = (await nativeAddon()).train
    train.attachLora(this.handle, { rank: cfg.r!, alpha: Number(cfg.lora_alpha), targets, seed: 0 })
    this.lora = { rank: cfg.r!, alpha: Number(cfg.lora_alpha), targets }
    const tensors = await Promise.all(
      header.tensors.map(async (ref) => ({ name: ref.name.replace(/^base_model\.model\./, '').replace('.lora_A.default.', '.lora_A.').replace('.lora_B.default.', '.lora_B.'), data: await readTensorFloat32(ref) })),
    )
    await train.importTensors(this.handle, tensors)
  }

  /** Teacher-forced per-token statistics of each completion given its prompt. */
  async score(pairs: ScorePair[], options: ScoreOptions = {}): Promise<Scored[]> {
    this.assertLive()
    const k = statsTopK(options.stats)
    const ref = options.reference
    if (ref) {
      ref.assertLive()
      if (ref.config.vocabSize !== this.config.vocabSize)
        throw new InvalidArgumentError('reference', `the reference model's vocabulary (${ref.config.vocabSize}) differs from this model's (${this.config.vocabSize})`)
    }
    const items = pairs.map((pair) => {
      const prompt = this.encodePrompt(pair.prompt)
      const completion = typeof pair.completion === 'string' ? this.tokenizer.encode(pair.completion, { addSpecialTokens: false }) : this.checkIds(pair.completion, 'completion')
      if (prompt.length === 0 || completion.length === 0) throw new InvalidArgumentError('pairs', 'score needs a non-empty prompt and completion')
      return { prompt, completion }
    })
    if (!items.length) return []
    const capacity = Math.max(...items.map((i) => i.prompt.length + i.completion.length))
    const cache = this.native.createCache(items.length, capacity)
    const refCache = ref ? ref.native.createCache(items.length, capacity) : null
    try {
      const head = items.map((it, slot) => ({ slot, it })).filter(({ it }) => it.prompt.length > 1)
      if (head.length) {
        const req = {
          slots: Int32Array.from(head, (h) => h.slot),
          counts: Int32Array.from(head, (h) => h.it.prompt.length - 1),
          outModes: new Uint8Array(head.length),
          tokens: Int32Array.from(head.flatMap((h) => h.it.prompt.slice(0, -1))),
        }
        await this.native.step(cache, req)
        if (ref && refCache) await ref.native.step(refCache, req)
      }
      // The rows of [last prompt token, completion[:-1]] predict the completion tokens.
      const result = await this.native.step(cache, {
        slots: Int32Array.from(items, (_, i) => i),
        counts: Int32Array.from(items, (it) => it.completion.length),
        outModes: new Uint8Array(items.length).fill(2),
        tokens: Int32Array.from(items.flatMap((it) => [it.prompt[it.prompt.length - 1], ...it.completion.slice(0, -1)])),
        targets: Int32Array.from(items.flatMap((it) => it.completion)),
        topK: k,
        reference: ref && refCache ? { model: ref.native, cache: refCache } : undefined,
      })
      let row = 0
      return items.map((it) => {
        const T = it.completion.length
        const slice = <A extends Float32Array | Int32Array>(a: A, w = 1) => a.slice(row * w, (row + T) * w) as A
        const s: Scored = {
          tokens: Int32Array.from(it.completion),
          logprobs: slice(result.chosenLogprob),
          entropy: slice(result.entropy),
          logsumexp: slice(result.logsumexp),
          maxLogit: slice(result.maxLogit),
          margin: slice(result.margin),
          promptTokens: it.prompt.length,
        }
        if (k > 0) s.topK = { k, ids: slice(result.topkIds, k), logits: slice(result.topkLogits, k) }
        if (result.k1) s.kl = { k1: slice(result.k1), k2: slice(result.k2!), k3: slice(result.k3!), exact: slice(result.klExact!) }
        row += T
        return s
      })
    } finally {
      cache.dispose()
      refCache?.dispose()
    }
  }
}

/** Loads a Hugging Face model folder (Llama, Qwen2, Qwen3) onto the engine. */
export function loadModel(dir: string, options: LoadOptions = {}): Promise<Model> {
  return Model.load(dir, options)
}

const DEVICE_REASONS: readonly DeviceUnavailableReason[] = ['not-built', 'stale', 'load-failed', 'abi-mismatch', 'no-driver', 'no-device', 'probe-failed']

/** Throws DeviceUnavailableError unless the CUDA plugin is loaded and sees device `index`. */
function assertCudaAvailable(cuda: { compiled: boolean; available: boolean; kind?: string; reason: string; devices: unknown[] }, index: number): void {
  if (cuda.compiled && cuda.available) {
    if (index >= cuda.devices.length)
      throw new DeviceUnavailableError('no-device', `device 'cuda' is unavailable: CUDA device ${index} does not exist (${cuda.devices.length} visible)`)
    return
  }
  const kind = (DEVICE_REASONS as readonly string[]).includes(cuda.kind ?? '') ? (cuda.kind as DeviceUnavailableReason) : cuda.compiled ? 'no-device' : 'not-built'
  throw new DeviceUnavailableError(kind, `device 'cuda' is unavailable: ${cuda.reason}`)
}

/** The addon's typed error for a backend that cannot run here, as a DeviceUnavailableError. */
function cudaUnavailable(e: Error): DeviceUnavailableError | null {
  if (!isNativeError(e, 'ERR_AD_DEVICE_UNAVAILABLE')) return null
  const kind = (DEVICE_REASONS as readonly string[]).includes(e.kind ?? '') ? (e.kind as DeviceUnavailableReason) : 'no-device'
  return new DeviceUnavailableError(kind, `device 'cuda' is unavailable: ${e.message}`, { cause: e })
}
