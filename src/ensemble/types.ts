// A solver-ensemble variant (DIS §4.2): something that answers prompts (text or chat) with k samples at a
// temperature. In-process engine models, remote OpenAI-compatible endpoints and frozen ONNX
// causal LMs all implement it, so the disagreement reward never cares where answers came from.
import type { Completion, GenerateOptions, Prompt } from '../engine/model.js'

/** The sampling controls every variant honours (a subset of the engine's GenerateOptions). */
export type VariantSampleOptions = Pick<GenerateOptions, 'n' | 'temperature' | 'topK' | 'topP' | 'minP' | 'maxTokens' | 'stop' | 'seed' | 'signal' | 'stats'>

/** One sample of a variant: its text, and the engine's per-token statistics where the variant can give them. */
export type VariantSample = Pick<Completion, 'text' | 'finishReason'> & Partial<Omit<Completion, 'text' | 'finishReason'>>

export interface VariantSampler {
  /** Names the variant in metrics (e.g. 'solver@0.7', 'http://127.0.0.1:8080 qwen', 'onnx:llama-tiny'). */
  readonly name: string
  /** Samples `n` completions for each prompt (raw text, chat messages or token ids): result[promptIndex][sampleIndex]. */
  sample(prompts: Prompt[], options: VariantSampleOptions): Promise<VariantSample[][]>
  dispose?(): void | Promise<void>
}

/** DIS §4.2: a variant is a (model, temperature, k) triple. */
export interface EnsembleVariant {
  sampler: VariantSampler
  temperature: number
  k: number
  /** Per-variant timeout in milliseconds; on timeout the variant is dropped from this step's reward. */
  timeoutMs?: number
}
