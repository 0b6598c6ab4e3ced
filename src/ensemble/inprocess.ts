// An in-process ensemble variant (DIS §4.2): a model sampled directly — the engine's Model, or any
// policy with the same generate(). The current Solver at two temperatures is two of these over one
// policy; it keeps training between phases and the sampler always samples its current weights.
import type { Completion, GenerateOptions, Prompt } from '../engine/model.js'
import type { VariantSample, VariantSampleOptions, VariantSampler } from './types.js'

export interface InProcessSamplerOptions {
  /** Name in metrics (default `inprocess:<model folder name>`). */
  name?: string
  /** Dispose the model with the sampler (default false: the caller owns it). */
  owns?: boolean
}

/** What the sampler needs of a model: generate, the folder that names it, dispose. */
export interface SampledModel {
  readonly dir: string
  generate(prompts: Prompt[], options?: GenerateOptions): Promise<Completion[][]>
  dispose(): void
}

export class InProcessSampler implements VariantSampler {
  readonly name: string
  private readonly owns: boolean

  constructor(
    readonly model: SampledModel,
    options: InProcessSamplerOptions = {},
  ) {
    this.name = options.name ?? `inprocess:${model.dir.split(/[\\/]/).filter(Boolean).pop() ?? 'model'}`
    this.owns = options.owns ?? false
  }

  async sample(prompts: Prompt[], o: VariantSampleOptions): Promise<VariantSample[][]> {
    if (prompts.length === 0) return []
    return this.model.generate(prompts, {
      n: o.n,
      temperature: o.temperature,
      topK: o.topK,
      topP: o.topP,
      minP: o.minP,
      maxTokens: o.maxTokens,
      stop: o.stop,
      seed: o.seed,
      signal: o.signal,
      stats: o.stats,
    })
  }

  dispose(): void {
    if (this.owns) this.model.dispose()
  }
}
