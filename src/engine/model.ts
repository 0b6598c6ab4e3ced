// The typed facade over the native engine: a Model is a Hugging Face folder loaded onto a backend,
// with generation (generation.ts), persistence (persistence.ts), option checks (options.ts) and
// the trainer (src/train/trainer.ts) behind its methods. Every name this file exported before
// the split is still exported from here.
import { DEFAULT_ADAPTER, attachAdapter, type AdapterOptions } from './adapters.js'
import { InvalidArgumentError } from './errors.js'
import type { SchedulerOptions, SchedulerStats } from './scheduler.js'
import { Generation, type Completion, type GenerateOptions, type Prompt, type ScoreOptions, type ScorePair, type Scored, type StreamChunk } from './generation.js'
import { MAX_SCORE_LABELS, checkTokenIds, type LoadOptions } from './options.js'
import { loadAdapter, loadAdapters, loadFolder, mergeLora, saveModel, type LoraInfo, type SaveOptions } from './persistence.js'
import type { ChatMessage, ChatTemplateOptions, Tokenizer } from './tokenizer.js'
import type { ModelConfig } from './types.js'
import { nativeAddon, type NativeModel } from '../native.js'
import { Trainer, type TrainerOptions } from '../train/trainer.js'

export { defaultDevice, resolvePromptControls, MAX_LORA_RANK, MAX_SCORE_LABELS, MAX_THREADS } from './options.js'
export type { Device, LoadOptions, PromptControl, SamplingOptions, WeightStorage } from './options.js'
export type { Completion, GenerateOptions, GenerationModel, Prompt, ScoreOptions, ScorePair, Scored, StreamChunk, TokenStats } from './generation.js'
export type { LoraInfo, SaveOptions } from './persistence.js'
export { DEFAULT_ADAPTER, LORA_TARGETS } from './adapters.js'
export type { AdapterChoice, AdapterOptions } from './adapters.js'
export type { FinishReason } from './stopping.js'

export class Model {
  private disposed = false
  /** The LoRA adapters attached to this model (by addAdapter, a trainer or loadAdapter), by name in attach order. */
  readonly adapters = new Map<string, LoraInfo>()
  /** The adapter named 'default' (the single-adapter calls' one), if attached. */
  get lora(): LoraInfo | null {
    return this.adapters.get(DEFAULT_ADAPTER) ?? null
  }
  set lora(info: LoraInfo | null) {
    if (info) this.adapters.set(DEFAULT_ADAPTER, info)
    else this.adapters.delete(DEFAULT_ADAPTER)
  }
  /** Labels of the score head (a *ForSequenceClassification reward model), 0 when there is none. */
  scoreLabels = 0
  private readonly generation = new Generation(this)

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    readonly generationConfig: Record<string, unknown> | null,
    readonly device: 'cpu' | 'cuda',
    private readonly native: NativeModel,
  ) {}

  static async load(dir: string, options: LoadOptions = {}): Promise<Model> {
    const f = await loadFolder(dir, options)
    const model = new Model(dir, f.config, f.tokenizer, f.generationConfig, f.device, f.native)
    model.scoreLabels = f.scoreLabels
    return model
  }

  /** The native handle (for the trainer and benchmarks); throws once the model is disposed. */
  get handle(): NativeModel {
    if (this.disposed) throw new InvalidArgumentError('model', 'this model has been disposed')
    return this.native
  }

  dispose(): void {
    if (this.disposed) return
    this.disposed = true
    this.native.dispose()
  }

  /** Token ids of a prompt. */
  encodePrompt(prompt: Prompt): number[] {
    if (typeof prompt === 'string') return this.tokenizer.encode(prompt, { addSpecialTokens: true })
    if (Array.isArray(prompt)) return checkTokenIds(prompt as readonly number[], this.config.vocabSize, 'prompt')
    const chat = prompt as { messages: ChatMessage[]; template?: ChatTemplateOptions }
    if (!chat || !Array.isArray(chat.messages)) throw new InvalidArgumentError('prompt', 'a prompt is a string, token ids, or { messages }')
    return this.tokenizer.encodeChat(chat.messages, { addGenerationPrompt: true, ...chat.template })
  }

  /** Samples `n` completions for each prompt. Results are grouped per prompt. */
  generate(prompts: Prompt | Prompt[], options: GenerateOptions = {}): Promise<Completion[][]> {
    return this.generation.generate(prompts, options)
  }

  /** Streams one completion token by token; the generator's return value is the full Completion. */
  stream(prompt: Prompt, options: Omit<GenerateOptions, 'n'> = {}): AsyncGenerator<StreamChunk, Completion, void> {
    return this.generation.stream(prompt, options)
  }

  /** How this model's decode scheduler sizes its batch and KV cache (src/engine/scheduler.ts); applies from its next idle start. */
  configureScheduler(options: SchedulerOptions): void {
    this.generation.configureScheduler(options)
  }

  /** The decode scheduler's counters: steps, admissions, steps shared by several calls, prefix memory saved; null before any generate. */
  schedulerStats(): SchedulerStats | null {
    return this.generation.schedulerStats()
  }

  /** Teacher-forced per-token statistics of each completion given its prompt. */
  score(pairs: ScorePair[], options: ScoreOptions = {}): Promise<Scored[]> {
    return this.generation.score(pairs, options)
  }

  /** Reward-model scores of whole sequences (prompt then completion), from the score head on the last token. */
  rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    return this.generation.rewardScores(pairs)
  }

  /** A trainer over this model (see src/train/trainer.ts). */
  async trainer(options: TrainerOptions): Promise<Trainer> {
    this.handle
    return Trainer.create(this, options)
  }

  /** Adds a score head (HF `score.weight`, N(0, 0.02²) as transformers initializes it) to make a reward model. */
  async attachScoreHead(options: { labels?: number; seed?: number } = {}): Promise<void> {
    const labels = options.labels ?? 1
    if (!Number.isInteger(labels) || labels < 1 || labels > MAX_SCORE_LABELS)
      throw new InvalidArgumentError('labels', `labels must be an integer in [1, ${MAX_SCORE_LABELS}], got ${labels}`)
    ;(await nativeAddon()).train.attachScoreHead(this.handle, { labels, std: 0.02, seed: options.seed ?? 0 })
    this.scoreLabels = labels
  }

  /**
   * Attaches a LoRA adapter named `name` beside any others on the same base (A from `seed`, B = 0:
   * a no-op until trained); generate/score/train choose it per sequence with `adapter`.
   */
  async addAdapter(name: string, options: AdapterOptions): Promise<LoraInfo> {
    return attachAdapter(this, name, options)
  }

  /** Folds the LoRA adapter into the base weights (W += α/r·B·A, on the engine) and zeroes B; a model with several is a SeveralAdaptersError naming them (merge one by attaching it alone). */
  mergeLora(): Promise<void> {
    return mergeLora(this)
  }

  save(dir: string, options: SaveOptions = {}): Promise<void> {
    return saveModel(this, dir, options)
  }

  /** Attaches a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) as adapter `name` (default 'default'). */
  loadAdapter(dir: string, options: { name?: string } = {}): Promise<void> {
    return loadAdapter(this, dir, options)
  }

  /** Attaches every adapter of a folder `save` wrote: the root's as 'default', each sub-folder's under its name. */
  loadAdapters(dir: string): Promise<string[]> {
    return loadAdapters(this, dir)
  }
}

/** Loads a Hugging Face model folder (Llama, Qwen2, Qwen3) onto the engine. */
export function loadModel(dir: string, options: LoadOptions = {}): Promise<Model> {
  return Model.load(dir, options)
}
