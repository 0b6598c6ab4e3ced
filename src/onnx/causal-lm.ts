// A causal LM run by onnxruntime-node (in a worker thread, see worker.ts) with the engine's
// surface: generate() with the same sampling controls, RNG and per-token statistics as
// Model.generate, and score() with Model.score's teacher-forced statistics (and KL estimators to
// another ONNX model). Statistics and sampling come from the ONNX logits through the engine's own
// kernels (fused logit statistics; Philox-4x32-10 keyed by (seed, sequence id, position)), so a
// frozen ONNX model of any architecture is interchangeable with an engine model in an ensemble,
// as a Judge, or as a reference.
import { existsSync, readFileSync, statSync } from 'node:fs'
import { cpus } from 'node:os'
import { basename, dirname, join } from 'node:path'

import { InvalidArgumentError, TokenizerError } from '../engine/errors.js'
import { resolvePromptControls, type Completion, type FinishReason, type GenerateOptions, type Prompt, type ScoreOptions, type ScorePair, type Scored, type TokenStats } from '../engine/model.js'
import type { ChatMessage, ChatTemplateOptions } from '../engine/tokenizer.js'
import { Tokenizer } from '../engine/tokenizer.js'
import { nativeAddon, type NativeKernels } from '../native.js'
import { OnnxModelError } from './errors.js'
import { OnnxWorker, type ExtendResult, type FeedLayout, type OpenResult, type ValueMeta } from './worker.js'
import { advanceText } from '../engine/stopping.js'

export interface OnnxOpenOptions {
  /** onnxruntime intra-op threads. Default: min(4, cores). */
  threads?: number
  /** Which export of a folder to load: onnx/model.onnx ('f32') or onnx/model_fp16.onnx ('f16'). Default: whichever exists, f32 first. */
  dtype?: 'f32' | 'f16'
}

export interface OnnxLayout extends FeedLayout {
  vocabSize: number
}

async function kernels(): Promise<NativeKernels> {
  return (await nativeAddon()).kernels
}

/** The .onnx file and the folder holding config.json / tokenizer files for `path` (a file or an export folder). */
export function resolveOnnxPath(path: string, dtype?: 'f32' | 'f16'): { file: string; folder: string } {
  if (!existsSync(path)) throw new OnnxModelError(path, 'not-found', `${path}: not found`)
  if (statSync(path).isFile()) {
    const dir = dirname(path)
    return { file: path, folder: basename(dir) === 'onnx' ? dirname(dir) : dir }
  }
  const names = dtype === 'f16' ? ['model_fp16.onnx'] : dtype === 'f32' ? ['model.onnx'] : ['model.onnx', 'model_fp16.onnx']
  for (const sub of ['onnx', '.']) for (const n of names) if (existsSync(join(path, sub, n))) return { file: join(path, sub, n), folder: path }
  throw new OnnxModelError(path, 'not-found', `${path}: no ${names.map((n) => `onnx/${n}`).join(' or ')} (export one with \`autodidact export --format onnx\`)`)
}

function readJson(file: string): Record<string, unknown> | null {
  if (!existsSync(file)) return null
  try {
    const v = JSON.parse(readFileSync(file, 'utf8')) as unknown
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null
  } catch {
    return null
  }
}

const fixed = (d: number | string | undefined): number | null => (typeof d === 'number' && d > 0 ? d : null)

/**
 * Checks that the graph is a decoder-only causal LM with a KV cache (input_ids, past_key_values.N.key/value →
 * logits, present.N.key/value) and works out how to feed it. Sizes the graph leaves symbolic come from config.json.
 */
export function causalLayout(file: string, inputs: ValueMeta[], outputs: ValueMeta[], config: Record<string, unknown> | null): OnnxLayout {
  const inNames = new Set(inputs.map((i) => i.name))
  const outNames = new Set(outputs.map((o) => o.name))
  const layers = inputs.filter((i) => /^past_key_values\.\d+\.key$/.test(i.name)).length
  const missing: string[] = []
  if (!inNames.has('input_ids')) missing.push('input input_ids')
  if (!outNames.has('logits')) missing.push('output logits')
  if (layers === 0) missing.push('inputs past_key_values.N.key/value')
  for (let l = 0; l < layers; l++)
    for (const k of ['key', 'value']) {
      if (!inNames.has(`past_key_values.${l}.${k}`)) missing.push(`input past_key_values.${l}.${k}`)
      if (!outNames.has(`present.${l}.${k}`)) missing.push(`output present.${l}.${k}`)
    }
  if (missing.length)
    throw new OnnxModelError(file, 'layout', `${file}: not a causal LM graph with a KV cache in the transformers.js layout; missing ${missing.join(', ')} (has inputs ${[...inNames].join(', ')}; outputs ${[...outNames].join(', ')})`)

  const num = (k: string): number | null => (typeof config?.[k] === 'number' ? (config[k] as number) : null)
  const past = inputs.find((i) => i.name === 'past_key_values.0.key')!
  const logits = outputs.find((o) => o.name === 'logits')!
  const heads = num('num_attention_heads')
  const kvHeads = fixed(past.shape[1]) ?? num('num_key_value_heads') ?? heads
  const headDim = fixed(past.shape[3]) ?? num('head_dim') ?? (heads && num('hidden_size') ? num('hidden_size')! / heads : null)
  const vocabSize = fixed(logits.shape[logits.shape.length - 1]) ?? num('vocab_size')
  if (!kvHeads || !headDim || !vocabSize)
    throw new OnnxModelError(file, 'mismatch', `${file}: the graph leaves the KV heads, head size or vocabulary symbolic and config.json does not give them (num_key_value_heads, head_dim, vocab_size)`)
  const cfgLayers = num('num_hidden_layers')
  if (cfgLayers !== null && cfgLayers !== layers)
    throw new OnnxModelError(file, 'mismatch', `${file}: the graph has ${layers} layers of past key/values but config.json has num_hidden_layers ${cfgLayers}: they do not belong together`)
  for (const [what, fromGraph, fromCfg] of [['num_key_value_heads', fixed(past.shape[1]), num('num_key_value_heads')], ['vocab_size', fixed(logits.shape[logits.shape.length - 1]), num('vocab_size')]] as const)
    if (fromGraph !== null && fromCfg !== null && fromGraph !== fromCfg)
      throw new OnnxModelError(file, 'mismatch', `${file}: the graph's ${what} is ${fromGraph} but config.json says ${fromCfg}: they do not belong together`)
  if (past.type !== 'float32' && past.type !== 'float16')
    throw new OnnxModelError(file, 'layout', `${file}: past key/values of type ${past.type} are not supported (float32 or float16)`)
  return {
    layers,
    kvHeads,
    headDim,
    kvType: past.type,
    vocabSize,
    attentionMask: inNames.has('attention_mask'),
    positionIds: inNames.has('position_ids'),
    useCacheBranch: inNames.has('use_cache_branch'),
  }
}

/** One batch of sequences of equal length, with its KV cache in the worker. */
export class OnnxKVCache {
  rows = 1
  length = 0
  private freed = false

  constructor(
    private readonly worker: OnnxWorker,
    readonly id: number,
    readonly vocabSize: number,
  ) {}

  /**
   * Appends `count` tokens to every row (`tokens` is rows × count, row-major) and returns the
   * logits of positions from..count−1 of each row: rows × (count − from) × vocab.
   */
  async extend(tokens: ArrayLike<number>, count: number, from = count - 1): Promise<Float32Array> {
    if (this.freed) throw new InvalidArgumentError('cache', 'this KV cache has been disposed')
    if (!Number.isInteger(count) || count < 1 || tokens.length !== this.rows * count)
      throw new InvalidArgumentError('tokens', `extend needs rows × count = ${this.rows} × ${count} token ids, got ${tokens.length}`)
    if (!Number.isInteger(from) || from < 0 || from > count) throw new InvalidArgumentError('from', `from must be an integer in [0, ${count}], got ${from}`)
    const ids = Int32Array.from(tokens)
    for (const id of ids) if (id < 0 || id >= this.vocabSize) throw new InvalidArgumentError('tokens', `token id ${id} is outside the vocabulary [0, ${this.vocabSize})`)
    const r = await this.worker.call<ExtendResult>({ op: 'extend', cache: this.id, tokens: ids, rows: this.rows, count, from }, [ids.buffer as ArrayBuffer])
    this.length += count
    return r.logits
  }

  /** Replicates a one-row cache into `copies` rows (n samples sharing one prefill). */
  async fork(copies: number): Promise<void> {
    await this.worker.call({ op: 'fork', cache: this.id, copies })
    this.rows = copies
  }

  /** Keeps only the given rows, in that order (drops finished sequences). */
  async keep(rows: number[]): Promise<void> {
    await this.worker.call({ op: 'keep', cache: this.id, rows })
    this.rows = rows.length
  }

  async dispose(): Promise<void> {
    if (this.freed) return
    this.freed = true
    await this.worker.call({ op: 'free', cache: this.id }).catch(() => undefined)
  }
}

interface Sequence {
  promptIndex: number
  sampleIndex: number
  streamId: number
  prompt: number[]
  generated: number[]
  stats: { logprobs: number[]; entropy: number[]; logsumexp: number[]; maxLogit: number[]; margin: number[]; topIds: number[]; topLogits: number[] }
  text: string
  decoder: { push(id: number): string; flush(): string }
  finish: FinishReason | null
  cutAtStopString: boolean
}

function checkedSampling(o: GenerateOptions) {
  const num = (name: string, v: number | undefined, fallback: number, lo: number, hi: number) => {
    if (v === undefined) return fallback
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi) throw new InvalidArgumentError(name, `${name} must be a number in [${lo}, ${hi}], got ${v}`)
    return v
  }
  const int = (name: string, v: number | undefined, fallback: number, lo: number, hi: number) => {
    if (v === undefined) return fallback
    if (!Number.isInteger(v) || v < lo || v > hi) throw new InvalidArgumentError(name, `${name} must be an integer in [${lo}, ${hi}], got ${v}`)
    return v
  }
  return {
    params: {
      temperature: num('temperature', o.temperature, 1, 0, 100),
      topK: int('topK', o.topK, 0, 0, 2 ** 31 - 1),
      topP: num('topP', o.topP, 1, Number.MIN_VALUE, 1),
      minP: num('minP', o.minP, 0, 0, 1),
      repetitionPenalty: num('repetitionPenalty', o.repetitionPenalty, 1, Number.MIN_VALUE, 100),
      presencePenalty: num('presencePenalty', o.presencePenalty, 0, -100, 100),
      frequencyPenalty: num('frequencyPenalty', o.frequencyPenalty, 0, -100, 100),
      seed: int('seed', o.seed, 0, 0, Number.MAX_SAFE_INTEGER),
    },
    n: int('n', o.n, 1, 1, 4096),
    maxTokens: int('maxTokens', o.maxTokens, 256, 1, 1 << 20),
    topK: int('stats.topK', o.stats?.topK, 0, 0, 64),
    offset: int('sequenceOffset', o.sequenceOffset, 0, 0, Number.MAX_SAFE_INTEGER),
  }
}

export class OnnxCausalLM {
  private closed = false

  private constructor(
    readonly file: string,
    readonly folder: string,
    readonly layout: OnnxLayout,
    readonly tokenizer: Tokenizer | null,
    private readonly worker: OnnxWorker,
    private readonly session: number,
    private readonly threads: number,
  ) {}

  /** Opens an ONNX causal LM: an export folder (onnx/model.onnx + config.json + tokenizer) or a .onnx file. */
  static async open(path: string, options: OnnxOpenOptions = {}): Promise<OnnxCausalLM> {
    const threads = options.threads ?? Math.min(4, cpus().length)
    if (!Number.isInteger(threads) || threads < 1 || threads > 1024) throw new InvalidArgumentError('threads', `threads must be an integer in [1, 1024], got ${threads}`)
    const { file, folder } = resolveOnnxPath(path, options.dtype)
    const worker = new OnnxWorker(file)
    try {
      const opened = await worker.call<OpenResult>({ op: 'open', path: file, threads }).catch((e: Error) => {
        throw new OnnxModelError(file, 'load', `${file}: onnxruntime cannot load it as an ONNX model (${e.message.replace(/^.*?failed: /, '')})`, { cause: e })
      })
      const config = readJson(join(folder, 'config.json'))
      const layout = causalLayout(file, opened.inputs, opened.outputs, config)
      let tokenizer: Tokenizer | null = null
      if (existsSync(join(folder, 'tokenizer.json'))) {
        tokenizer = await Tokenizer.fromFolder(folder)
        if (tokenizer.vocabSize > layout.vocabSize)
          throw new OnnxModelError(file, 'mismatch', `${join(folder, 'tokenizer.json')}: the tokenizer has ids up to ${tokenizer.vocabSize - 1} but the graph's logits have ${layout.vocabSize}: they do not belong together`)
      }
      return new OnnxCausalLM(file, folder, layout, tokenizer, worker, opened.session, threads)
    } catch (e) {
      await worker.terminate()
      throw e
    }
  }

  get vocabSize(): number {
    return this.layout.vocabSize
  }

  /** End-of-sequence ids (generation_config.json, config.json, tokenizer_config.json), the default stop ids. */
  get eosTokenIds(): readonly number[] {
    return this.tokenizer?.eosTokenIds ?? []
  }

  private assertOpen(): void {
    if (this.closed) throw new InvalidArgumentError('model', 'this ONNX model has been disposed')
  }

  async createCache(): Promise<OnnxKVCache> {
    this.assertOpen()
    const { vocabSize: _v, ...feed } = this.layout
    const id = await this.worker.call<number>({ op: 'newCache', session: this.session, layout: feed })
    return new OnnxKVCache(this.worker, id, this.layout.vocabSize)
  }

  /** Logits of every position of one token sequence (prefill of a fresh cache): tokens.length × vocab. */
  async logits(tokens: readonly number[]): Promise<Float32Array> {
    const cache = await this.createCache()
    try {
      return await cache.extend(tokens, tokens.length, 0)
    } finally {
      await cache.dispose()
    }
  }

  /** Token ids of a prompt, as Model.encodePrompt: text with special tokens, a chat with its template, or ids. */
  encodePrompt(prompt: Prompt): number[] {
    if (Array.isArray(prompt)) {
      for (const id of prompt as readonly number[])
        if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new InvalidArgumentError('prompt', `prompt holds token id ${id}, outside the vocabulary [0, ${this.vocabSize})`)
      return [...(prompt as readonly number[])]
    }
    const tok = this.tokenizer
    if (!tok) throw new TokenizerError(join(this.folder, 'tokenizer.json'), `${this.folder}: no tokenizer.json next to the ONNX model; pass token ids`)
    if (typeof prompt === 'string') return tok.encode(prompt, { addSpecialTokens: true })
    const chat = prompt as { messages: ChatMessage[]; template?: ChatTemplateOptions }
    if (!chat || !Array.isArray(chat.messages)) throw new InvalidArgumentError('prompt', 'a prompt is a string, token ids, or { messages }')
    return tok.encodeChat(chat.messages, { addGenerationPrompt: true, ...chat.template })
  }

  private encodeCompletion(c: string | readonly number[]): number[] {
    if (typeof c !== 'string') return this.encodePrompt(c as readonly number[])
    if (!this.tokenizer) throw new TokenizerError(join(this.folder, 'tokenizer.json'), `${this.folder}: no tokenizer.json next to the ONNX model; pass token ids`)
    return this.tokenizer.encode(c, { addSpecialTokens: false })
  }

  /**
   * Samples `n` completions per prompt with Model.generate's semantics: each prompt's prefill is
   * shared by its n samples; sequence id = sequenceOffset + prompt·n + sample (or a prompt's own
   * seed, sequence ids and signal from `perPrompt`); the RNG position is
   * the sequence's length when the token is drawn; stop ids, stop strings and maxTokens as the engine.
   */
  async generate(prompts: Prompt | Prompt[], options: GenerateOptions = {}): Promise<Completion[][]> {
    this.assertOpen()
    const list = Array.isArray(prompts) && (prompts.length === 0 || typeof prompts[0] !== 'number') ? (prompts as Prompt[]) : [prompts as Prompt]
    const o = checkedSampling(options)
    const stops = (options.stop ?? []).filter((s) => s.length > 0)
    const stopIds = new Set(options.stopTokenIds ?? this.eosTokenIds)
    const encoded = list.map((p) => {
      const ids = this.encodePrompt(p)
      if (ids.length === 0) throw new InvalidArgumentError('prompt', 'a prompt must encode to at least one token')
      return ids
    })
    const controls = resolvePromptControls(options.perPrompt, encoded.length, o.params.seed, o.offset, o.n)
    const k = await kernels()
    const out: Completion[][] = []
    for (let p = 0; p < encoded.length; p++) {
      const c = controls[p]
      const seqs: Sequence[] = Array.from({ length: o.n }, (_, s) => ({
        promptIndex: p,
        sampleIndex: s,
        streamId: c.sequenceOffset + s,
        prompt: encoded[p],
        generated: [],
        stats: { logprobs: [], entropy: [], logsumexp: [], maxLogit: [], margin: [], topIds: [], topLogits: [] },
        text: '',
        decoder: this.tokenizer?.createStreamDecoder() ?? { push: () => '', flush: () => '' },
        finish: null,
        cutAtStopString: false,
      }))
      const signals = [options.signal, c.signal].filter((x): x is AbortSignal => x !== undefined)
      const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0]
      await this.decode(seqs, { ...o, params: { ...o.params, seed: c.seed }, stops, stopIds, signal }, k)
      out.push(seqs.map((s) => this.complete(s, o.topK)))
    }
    return out
  }

  /** The decode loop of one prompt's n samples. */
  private async decode(
    seqs: Sequence[],
    o: ReturnType<typeof checkedSampling> & { stops: string[]; stopIds: Set<number>; signal?: AbortSignal },
    k: NativeKernels,
  ): Promise<void> {
    const prompt = seqs[0].prompt
    const V = this.vocabSize
    const cache = await this.createCache()
    try {
      if (prompt.length > 1) await cache.extend(prompt.slice(0, -1), prompt.length - 1, prompt.length - 1) // prefill, no logits
      await cache.fork(seqs.length)
      let live = seqs.slice()
      let pending = live.map(() => prompt[prompt.length - 1])
      while (live.length) {
        if (o.signal?.aborted) {
          for (const s of live) s.finish = 'abort'
          return
        }
        const logits = await cache.extend(pending, 1)
        const chosen = live.map((s, row) => {
          const history = Int32Array.from([...s.prompt, ...s.generated])
          return k.sampleToken(logits.subarray(row * V, (row + 1) * V), { ...o.params, stream: s.streamId }, history.length, history, Int32Array.from(s.generated))
        })
        const stats = k.logitStats(logits, live.length, V, { targets: Int32Array.from(chosen), topK: o.topK, threads: this.threads })
        const still: number[] = []
        live.forEach((s, row) => {
          this.record(s, stats, row, o.topK, chosen[row])
          advanceText(s, chosen[row], s.generated.length, o)
          if (!s.finish) still.push(row)
        })
        if (still.length < live.length && still.length > 0) await cache.keep(still)
        live = still.map((r) => live[r])
        pending = live.map((s) => s.generated[s.generated.length - 1])
      }
    } finally {
      await cache.dispose()
    }
  }

  private record(s: Sequence, st: ReturnType<NativeKernels['logitStats']>, row: number, topK: number, token: number): void {
    s.generated.push(token)
    s.stats.logprobs.push(st.chosenLogprob![row])
    s.stats.entropy.push(st.entropy[row])
    s.stats.logsumexp.push(st.logsumexp[row])
    s.stats.maxLogit.push(st.maxLogit[row])
    s.stats.margin.push(st.margin[row])
    for (let j = 0; j < topK; j++) {
      s.stats.topIds.push(st.topkIds[row * topK + j])
      s.stats.topLogits.push(st.topkLogits[row * topK + j])
    }
  }


  private complete(s: Sequence, topK: number): Completion {
    if (!s.cutAtStopString) s.text += s.decoder.flush()
    const st = s.stats
    const stats: TokenStats = {
      tokens: Int32Array.from(s.generated),
      logprobs: Float32Array.from(st.logprobs),
      entropy: Float32Array.from(st.entropy),
      logsumexp: Float32Array.from(st.logsumexp),
      maxLogit: Float32Array.from(st.maxLogit),
      margin: Float32Array.from(st.margin),
    }
    if (topK > 0) stats.topK = { k: topK, ids: Int32Array.from(st.topIds), logits: Float32Array.from(st.topLogits) }
    return { ...stats, text: s.text, finishReason: s.finish ?? 'length', promptTokens: s.prompt.length, promptIndex: s.promptIndex, sampleIndex: s.sampleIndex }
  }

  /**
   * Teacher-forced per-token statistics of each completion given its prompt (Model.score's): the
   * completion tokens' logprobs, entropy, logsumexp, max logit, margin, top-K, and with a
   * `reference` ONNX model on the same vocabulary the KL estimators k1, k2, k3 and the exact KL.
   */
  async score(pairs: ScorePair[], options: Omit<ScoreOptions, 'reference'> & { reference?: OnnxCausalLM } = {}): Promise<Scored[]> {
    this.assertOpen()
    const topK = options.stats?.topK ?? 0
    if (!Number.isInteger(topK) || topK < 0 || topK > 64) throw new InvalidArgumentError('stats.topK', `stats.topK must be an integer in [0, 64], got ${topK}`)
    const ref = options.reference
    if (ref && ref.vocabSize !== this.vocabSize)
      throw new InvalidArgumentError('reference', `the reference model's vocabulary (${ref.vocabSize}) differs from this model's (${this.vocabSize})`)
    const k = await kernels()
    const out: Scored[] = []
    for (const pair of pairs) {
      const prompt = this.encodePrompt(pair.prompt)
      const completion = this.encodeCompletion(pair.completion)
      if (prompt.length === 0 || completion.length === 0) throw new InvalidArgumentError('pairs', 'score needs a non-empty prompt and completion')
      // Rows of [last prompt token, completion[:-1]] predict the completion tokens.
      const seq = [...prompt, ...completion.slice(0, -1)]
      const rows = (m: OnnxCausalLM) => m.logitsFrom(seq, prompt.length - 1)
      const [logits, refLogits] = await Promise.all([rows(this), ref ? rows(ref) : Promise.resolve(undefined)])
      const T = completion.length
      const st = k.logitStats(logits, T, this.vocabSize, { targets: Int32Array.from(completion), topK, ref: refLogits, threads: this.threads })
      const s: Scored = {
        tokens: Int32Array.from(completion),
        logprobs: st.chosenLogprob!,
        entropy: st.entropy,
        logsumexp: st.logsumexp,
        maxLogit: st.maxLogit,
        margin: st.margin,
        promptTokens: prompt.length,
      }
      if (topK > 0) s.topK = { k: topK, ids: st.topkIds, logits: st.topkLogits }
      if (st.k1) s.kl = { k1: st.k1, k2: st.k2!, k3: st.k3!, exact: st.klExact! }
      out.push(s)
    }
    return out
  }

  /** Logits of positions from..end of a fresh sequence. */
  private async logitsFrom(tokens: number[], from: number): Promise<Float32Array> {
    this.assertOpen()
    const cache = await this.createCache()
    try {
      return await cache.extend(tokens, tokens.length, from)
    } finally {
      await cache.dispose()
    }
  }

  /** Releases the session and stops the worker thread. */
  async dispose(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.worker.call({ op: 'close', session: this.session }).catch(() => undefined)
    await this.worker.terminate()
  }
}
