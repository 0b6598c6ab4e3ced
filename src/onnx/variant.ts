// A frozen ONNX causal LM as a solver-ensemble member (DIS §4.2 variant: model, temperature, k).
// It answers raw text prompts through OnnxCausalLM.generate, so its samples carry the engine's
// per-token statistics (logprob, entropy, logsumexp, max logit, margin, top-K) computed by the
// engine's kernels from the ONNX logits, and its onnxruntime work runs off the main thread.
import { basename } from 'node:path'

import type { Prompt } from '../engine/model.js'
import type { VariantSample, VariantSampleOptions, VariantSampler } from '../ensemble/types.js'
import { OnnxCausalLM, type OnnxOpenOptions } from './causal-lm.js'

export class OnnxVariant implements VariantSampler {
  readonly name: string

  constructor(
    readonly model: OnnxCausalLM,
    name?: string,
  ) {
    this.name = name ?? `onnx:${basename(model.folder)}`
  }

  /** Opens an exported folder (or a .onnx file next to config.json and tokenizer.json) as a variant. */
  static async open(path: string, options: OnnxOpenOptions & { name?: string } = {}): Promise<OnnxVariant> {
    return new OnnxVariant(await OnnxCausalLM.open(path, options), options.name)
  }

  async sample(prompts: Prompt[], options: VariantSampleOptions): Promise<VariantSample[][]> {
    const { n, temperature, topK, topP, minP, maxTokens, stop, seed, signal, stats } = options
    return this.model.generate(prompts, { n, temperature, topK, topP, minP, maxTokens, stop, seed, signal, stats })
  }

  dispose(): Promise<void> {
    return this.model.dispose()
  }
}
