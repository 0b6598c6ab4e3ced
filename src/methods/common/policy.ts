// The narrow interface every method is written against (DESIGN.md: "methods depend on src/engine
// through a narrow interface"): sample, score, train, save. The engine Model is one
// implementation (openPolicy); a scripted fake (scripted-policy.ts) is another, so a method's
// logic — rewards, advantages, buffers, checkpoints — is testable without the engine.
import type { AdapterOptions } from '../../engine/adapters.js'
import { InvalidArgumentError } from '../../engine/errors.js'
import { loadModel, type Completion, type GenerateOptions, type Model, type Prompt, type SaveOptions, type ScoreOptions, type ScorePair, type Scored, type WeightStorage } from '../../engine/model.js'
import type { StepMetrics, TrainBatch, TrainerOptions } from '../../train/trainer.js'

/** What a method needs of a policy's tokenizer. */
export interface PolicyTokenizer {
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[]
  tokenToId(token: string): number | null
  readonly specialTokenIds: ReadonlySet<number>
}

/** The optimizer of one policy: a step over a batch, and its state for exact resume. */
export interface PolicyTrainer {
  /** Optimizer steps taken (restored by loadState). */
  readonly steps: number
  step(batch: TrainBatch): Promise<StepMetrics>
  /** Writes optimizer.safetensors (the AdamW moments, `NAME::m` / `NAME::v`) and trainer_state.json into `dir`. */
  saveState(dir: string): Promise<void>
  loadState(dir: string): Promise<void>
}

/** Trainer options with the KL/DPO reference given as a policy. */
export type PolicyTrainerOptions = Omit<TrainerOptions, 'reference'> & { reference?: 'lora-off' | Policy }

export interface Policy {
  /** The folder it was opened from (names it in metrics). */
  readonly dir: string
  /** `tieWordEmbeddings`: the LM head is the embedding (absent: not known, as for a scripted policy). */
  readonly config: { readonly architecture: string; readonly vocabSize: number; readonly eosTokenIds: readonly number[]; readonly tieWordEmbeddings?: boolean }
  readonly tokenizer: PolicyTokenizer
  /** Labels of the score head of a reward model (*ForSequenceClassification), 0 when there is none. */
  readonly scoreLabels: number
  /** The LoRA adapters attached, by name in attach order (generate/score/train choose one with `adapter`). */
  readonly adapterNames: readonly string[]
  /**
   * Attaches a LoRA adapter named `name` beside any others on the same base (A from `seed`, B = 0:
   * a no-op until trained): several roles, each its own adapter, on one base in one process.
   */
  addAdapter(name: string, options: AdapterOptions): Promise<void>
  /** Attaches the PEFT adapter folder `dir` as the adapter `name` beside any others on the same base (a role's adapter trained elsewhere). */
  loadAdapter(dir: string, name: string): Promise<void>
  /** `n` samples per prompt, grouped per prompt, with the sampling pass's per-token statistics. */
  generate(prompts: Prompt[], options?: GenerateOptions): Promise<Completion[][]>
  encodePrompt(prompt: Prompt): number[]
  /** Teacher-forced per-token statistics of completions. */
  score(pairs: ScorePair[], options?: Omit<ScoreOptions, 'reference'>): Promise<Scored[]>
  /** Reward-model scores of whole sequences (needs a score head). */
  rewardScores(pairs: ScorePair[]): Promise<Float32Array>
  trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer>
  /** A model folder (with LoRA: PEFT adapter folders — 'default' at the root, others in sub-folders — unless `adapterOnly: false`). */
  save(dir: string, options?: SaveOptions): Promise<void>
  dispose(): void
}

/** Where a policy comes from: a model folder, and a LoRA adapter folder to attach (a LoRA checkpoint). */
export interface PolicyRef {
  model: string
  /** A PEFT adapter folder, attached as 'default'. */
  adapter?: string
  /** A folder of named adapters as save() writes them (the root's as 'default', each sub-folder's under its name), all attached. */
  adapters?: string
  threads?: number
  /** How a frozen policy keeps its weights in memory (loadModel's `weights`; default 'f32'). Only a policy that never trains takes another. */
  weights?: WeightStorage
  /** Attach a fresh one-label score head (a scalar reward model on the model's base, JZ §3.1), seeded. */
  scoreHead?: { seed: number }
}

/** Opens a policy: the engine's (openPolicy) or a test double's. */
export type OpenPolicy = (ref: PolicyRef) => Promise<Policy>

/** The engine Model as a Policy. */
export class EnginePolicy implements Policy {
  constructor(readonly model: Model) {}

  get dir(): string {
    return this.model.dir
  }
  get config(): Policy['config'] {
    return this.model.config
  }
  get tokenizer(): PolicyTokenizer {
    return this.model.tokenizer
  }
  get scoreLabels(): number {
    return this.model.scoreLabels
  }
  get adapterNames(): readonly string[] {
    return [...this.model.adapters.keys()]
  }
  async addAdapter(name: string, options: AdapterOptions): Promise<void> {
    await this.model.addAdapter(name, options)
  }
  loadAdapter(dir: string, name: string): Promise<void> {
    return this.model.loadAdapter(dir, { name })
  }
  generate(prompts: Prompt[], options?: GenerateOptions): Promise<Completion[][]> {
    return this.model.generate(prompts, options)
  }
  encodePrompt(prompt: Prompt): number[] {
    return this.model.encodePrompt(prompt)
  }
  score(pairs: ScorePair[], options?: Omit<ScoreOptions, 'reference'>): Promise<Scored[]> {
    return this.model.score(pairs, options)
  }
  rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    return this.model.rewardScores(pairs)
  }
  async trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer> {
    const { reference, ...rest } = options
    return this.model.trainer(reference === undefined || reference === 'lora-off' ? { ...rest, reference } : { ...rest, reference: engineModelOf(reference) })
  }
  save(dir: string, options?: SaveOptions): Promise<void> {
    return this.model.save(dir, options)
  }
  dispose(): void {
    this.model.dispose()
  }
}

function engineModelOf(p: Policy): Model {
  if (!(p instanceof EnginePolicy)) throw new InvalidArgumentError('reference', 'an engine policy trains against an engine reference: open both with openPolicy')
  return p.model
}

/** The engine's OpenPolicy: loads the folder (and attaches the adapter) on the default device. */
export const openPolicy: OpenPolicy = async (ref) => {
  const model = await loadModel(ref.model, { threads: ref.threads, weights: ref.weights })
  try {
    if (ref.adapter) await model.loadAdapter(ref.adapter)
    if (ref.adapters) await model.loadAdapters(ref.adapters)
    if (ref.scoreHead) await model.attachScoreHead({ seed: ref.scoreHead.seed })
  } catch (e) {
    model.dispose()
    throw e
  }
  return new EnginePolicy(model)
}

/** Policies opened together and disposed together; `open` disposes the ones already open when one fails. */
export class PolicySet {
  private readonly opened: Policy[] = []

  constructor(private readonly openWith: OpenPolicy) {}

  async open(ref: PolicyRef): Promise<Policy> {
    const p = await this.openWith(ref)
    this.opened.push(p)
    return p
  }

  /** Runs `build` with this set; on any error every policy it opened is disposed and the error rethrown. */
  async build<T>(build: (set: PolicySet) => Promise<T>): Promise<T> {
    try {
      return await build(this)
    } catch (e) {
      this.dispose()
      throw e
    }
  }

  dispose(): void {
    for (const p of this.opened.splice(0)) p.dispose()
  }
}
