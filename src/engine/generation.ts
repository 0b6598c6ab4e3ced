// Generation on the engine: batched sampling through the model's continuous-batching scheduler
// (scheduler.ts: every call's sequences share its running batch; n samples per prompt share one
// prefill; per-token statistics from the sampling pass), streaming, teacher-forced scoring with
// optional KL estimators to a reference model, and reward-model scores.
import { adapterIndices, type AdapterChoice } from './adapters.js'
import { InvalidArgumentError } from './errors.js'
import { checkContext, checkTokenIds, positiveInt, resolvePromptControls, resolveSampling, statsTopK, type PromptControl, type ResolvedSampling, type SamplingOptions } from './options.js'
import { advanceText, type FinishReason } from './stopping.js'
import type { ChatMessage, ChatTemplateOptions, Tokenizer } from './tokenizer.js'
import type { ModelConfig } from './types.js'
import { nativeAddon, type NativeKVCache, type NativeModel, type NativeStepResult } from '../native.js'
import { checkSchedulerOptions, DecodeScheduler, type DecodeSequence, type SchedulerOptions, type SchedulerStats } from './scheduler.js'

/** A prompt: raw text, a chat (rendered with the folder's template and a generation prompt), or token ids. */
export type Prompt = string | { messages: ChatMessage[]; template?: ChatTemplateOptions } | readonly number[]

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
  /** The LoRA adapter each prompt's samples apply: one name for all, or one name (null: the base alone) per prompt. Default 'default' when attached, else the base. */
  adapter?: AdapterChoice
}

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
  /** The LoRA adapter each pair is scored with: one name for all, or one name (null: the base alone) per pair. Default as generate's. */
  adapter?: AdapterChoice
  /** A second model on the same vocabulary (a Model): per-token KL estimators to it. */
  reference?: GenerationModel
}

export interface Scored extends TokenStats {
  promptTokens: number
  /** KL estimators per completion token (with `reference`): k1, k2, k3 (verl low_var_kl) and the exact KL(π‖ref). */
  kl?: { k1: Float32Array; k2: Float32Array; k3: Float32Array; exact: Float32Array }
}

/** What generation needs of a model (a Model is one). */
export interface GenerationModel {
  /** The native handle; throws once the model is disposed. */
  readonly handle: NativeModel
  readonly config: ModelConfig
  readonly tokenizer: Tokenizer
  /** Labels of the score head, 0 when there is none. */
  readonly scoreLabels: number
  /** The attached LoRA adapters by name, in attach order. */
  readonly adapters: ReadonlyMap<string, unknown>
  encodePrompt(prompt: Prompt): number[]
}

interface WaveOptions {
  sampling: ResolvedSampling
  maxTokens: number
  k: number
  stops: string[]
  stopIds: Set<number>
  signal?: AbortSignal
  onToken: ((c: StreamChunk) => void) | null
}

/** AUTODIDACT_SCHEDULER=waves turns continuous batching off (the decode loop of before, call by call). */
function wavesOnly(): boolean {
  const v = process.env.AUTODIDACT_SCHEDULER
  if (v === undefined || v === '' || v === 'continuous') return false
  if (v === 'waves') return true
  throw new InvalidArgumentError('AUTODIDACT_SCHEDULER', `AUTODIDACT_SCHEDULER must be 'continuous' or 'waves', got ${v}`)
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
interface Sequence extends DecodeSequence {
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

/** The decoding and scoring verbs of one model. */
export class Generation {
  constructor(private readonly m: GenerationModel) {}

  /** A completion's token ids: text encoded without special tokens, or ids checked against the vocabulary. */
  encodeCompletion(completion: string | readonly number[]): number[] {
    return typeof completion === 'string' ? this.m.tokenizer.encode(completion, { addSpecialTokens: false }) : checkTokenIds(completion, this.m.config.vocabSize, 'completion')
  }

  private defaultStopIds(): number[] {
    return [...this.m.tokenizer.eosTokenIds, ...this.m.config.eosTokenIds].filter((v, i, a) => a.indexOf(v) === i)
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
    const sampling = resolveSampling(options)
    const maxTokens = positiveInt('maxTokens', options.maxTokens, 256, 1 << 20)
    const k = statsTopK(options.stats)
    const stops = (options.stop ?? []).filter((s) => s.length > 0)
    const stopIds = new Set(options.stopTokenIds ?? this.defaultStopIds())
    const offset = options.sequenceOffset ?? 0
    const encoded = prompts.map((p) => {
      const ids = this.m.encodePrompt(p)
      if (ids.length === 0) throw new InvalidArgumentError('prompt', 'a prompt must encode to at least one token')
      checkContext(ids.length, this.m.config, 'prompt')
      return ids
    })
    const controls = resolvePromptControls(options.perPrompt, prompts.length, sampling.seed, offset, n)
    const adapters = adapterIndices(this.m, options.adapter, prompts.length)
    const sequences: Sequence[] = []
    encoded.forEach((ids, p) => {
      const c = controls[p]
      const adapter = adapters ? adapters[p] : 0
      for (let s = 0; s < n; ++s)
        sequences.push({ promptIndex: p, group: p, sampleIndex: s, streamId: c.sequenceOffset + s, seed: c.seed, signal: c.signal, adapter, prompt: ids, slot: -1, buffer: new TrajectoryBuffer(), text: '', decoder: this.m.tokenizer.createStreamDecoder(), finish: null, emitted: 0, cutAtStopString: false })
    })
    const maxBatch = positiveInt('maxBatch', options.maxBatch, sequences.length, 1 << 20)
    const o = { sampling, maxTokens, k, stops, stopIds, signal: options.signal, onToken }
    if (wavesOnly()) {
      for (let w = 0; w < sequences.length; w += maxBatch) yield* this.runWave(sequences.slice(w, w + maxBatch), o)
      return
    }
    yield* this.runScheduled(sequences, maxBatch, o)
  }

  /** The model's one scheduler: every call's sequences decode in its running batch. */
  scheduler(): DecodeScheduler {
    this.decoder ??= new DecodeScheduler(() => this.m.handle, this.m.config, true, this.schedulerOptions)
    return this.decoder
  }
  private decoder: DecodeScheduler | null = null
  private schedulerOptions: SchedulerOptions = {}

  /** Sets how the model's scheduler sizes its batch and KV cache (takes effect when it next starts idle). */
  configureScheduler(options: SchedulerOptions): void {
    checkSchedulerOptions(options)
    this.schedulerOptions = { ...options }
    if (this.decoder && !this.decoder.busy()) this.decoder = null
  }

  schedulerStats(): SchedulerStats | null {
    return this.decoder?.stats() ?? null
  }

  /** Hands the sequences to the scheduler and yields each as it completes. */
  private async *runScheduled(sequences: Sequence[], maxBatch: number, o: WaveOptions): AsyncGenerator<Completion> {
    const done: Completion[] = []
    let failure: { error: unknown } | null = null
    let remaining = sequences.length
    let wake: (() => void) | null = null
    const notify = () => {
      wake?.()
      wake = null
    }
    this.scheduler().submit<Sequence>({
      sequences,
      maxLive: maxBatch,
      maxTokens: o.maxTokens,
      topK: o.k,
      sampling: o.sampling,
      signal: o.signal,
      onRow: (s, result, row) => {
        this.advance(s, result, row, o)
        return s.finish !== null
      },
      onFinish: (s, aborted) => {
        if (aborted) s.finish = 'abort'
        done.push(this.complete(s, o.k))
        remaining--
        notify()
      },
      onError: (e) => {
        failure = { error: e }
        notify()
      },
    })
    while (remaining > 0 || done.length) {
      if (done.length) {
        yield done.shift()!
        continue
      }
      if (failure) throw (failure as { error: unknown }).error
      await new Promise<void>((resolve) => (wake = resolve))
    }
  }

  /** One sampled row of a sequence: its statistics, its text and stop rules, its stream chunk. */
  private advance(s: Sequence, result: NativeStepResult, row: number, o: WaveOptions): number {
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
    return token
  }

  /** The pre-scheduler decode loop (AUTODIDACT_SCHEDULER=waves): waves of maxBatch sequences, one cache each. */
  private async *runWave(wave: Sequence[], o: WaveOptions): AsyncGenerator<Completion> {
    const capacity = Math.max(...wave.map((s) => s.prompt.length)) + o.maxTokens
    const cache = this.m.handle.createCache(wave.length, capacity)
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
        const result = await this.m.handle.step(cache, {
          slots: Int32Array.from(live, (s) => s.slot),
          counts: new Int32Array(live.length).fill(1),
          outModes: new Uint8Array(live.length).fill(1),
          adapters: Int32Array.from(live, (s) => s.adapter),
          tokens: Int32Array.from(live, (s) => pending.get(s)!),
          sampling: this.samplingColumns(live, o.sampling),
          topK: o.k,
        })
        const still: Sequence[] = []
        live.forEach((s, row) => {
          const token = this.advance(s, result, row, o)
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
      await this.m.handle.step(cache, {
        slots: Int32Array.from(prefill, (s) => s.slot),
        counts: Int32Array.from(prefill, (s) => s.prompt.length - 1),
        outModes: new Uint8Array(prefill.length),
        adapters: Int32Array.from(prefill, (s) => s.adapter),
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

  /** Reward-model scores of whole sequences (prompt then completion), from the score head on the last token. */
  async rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    if (!this.m.scoreLabels) throw new InvalidArgumentError('model', 'this model has no score head (load a *ForSequenceClassification folder or attachScoreHead())')
    if (!pairs.length) return new Float32Array(0)
    const seqs = pairs.map((p) => [...this.m.encodePrompt(p.prompt), ...this.encodeCompletion(p.completion)])
    return (await nativeAddon()).train.scoreForward(this.m.handle, { tokens: Int32Array.from(seqs.flat()), lengths: Int32Array.from(seqs, (s) => s.length), tape: false })
  }

  /** Teacher-forced per-token statistics of each completion given its prompt. */
  async score(pairs: ScorePair[], options: ScoreOptions = {}): Promise<Scored[]> {
    const native = this.m.handle
    const k = statsTopK(options.stats)
    const ref = options.reference
    if (ref) {
      if (ref.config.vocabSize !== this.m.config.vocabSize)
        throw new InvalidArgumentError('reference', `the reference model's vocabulary (${ref.config.vocabSize}) differs from this model's (${this.m.config.vocabSize})`)
    }
    const items = pairs.map((pair) => {
      const prompt = this.m.encodePrompt(pair.prompt)
      const completion = this.encodeCompletion(pair.completion)
      if (prompt.length === 0 || completion.length === 0) throw new InvalidArgumentError('pairs', 'score needs a non-empty prompt and completion')
      return { prompt, completion }
    })
    if (!items.length) return []
    const adapters = adapterIndices(this.m, options.adapter, items.length)
    const capacity = Math.max(...items.map((i) => i.prompt.length + i.completion.length))
    const cache = native.createCache(items.length, capacity)
    const refCache = ref ? ref.handle.createCache(items.length, capacity) : null
    try {
      const head = items.map((it, slot) => ({ slot, it })).filter(({ it }) => it.prompt.length > 1)
      if (head.length) {
        const req = {
          slots: Int32Array.from(head, (h) => h.slot),
          counts: Int32Array.from(head, (h) => h.it.prompt.length - 1),
          outModes: new Uint8Array(head.length),
          tokens: Int32Array.from(head.flatMap((h) => h.it.prompt.slice(0, -1))),
        }
        await native.step(cache, adapters ? { ...req, adapters: Int32Array.from(head, (h) => adapters[h.slot]) } : req)
        if (ref && refCache) await ref.handle.step(refCache, req)
      }
      // The rows of [last prompt token, completion[:-1]] predict the completion tokens.
      const result = await native.step(cache, {
        slots: Int32Array.from(items, (_, i) => i),
        counts: Int32Array.from(items, (it) => it.completion.length),
        outModes: new Uint8Array(items.length).fill(2),
        adapters,
        tokens: Int32Array.from(items.flatMap((it) => [it.prompt[it.prompt.length - 1], ...it.completion.slice(0, -1)])),
        targets: Int32Array.from(items.flatMap((it) => it.completion)),
        topK: k,
        reference: ref && refCache ? { model: ref.handle, cache: refCache } : undefined,
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
