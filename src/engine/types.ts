// Shared shapes of the engine layer: the normalized model configuration every family maps to,
// and a reference to one tensor's bytes inside a safetensors file.

export type Architecture = 'llama' | 'qwen2' | 'qwen3'

/** Llama 3 frequency-dependent RoPE scaling (`rope_scaling.rope_type == "llama3"`). */
export interface Llama3RopeScaling {
  type: 'llama3'
  factor: number
  lowFreqFactor: number
  highFreqFactor: number
  originalMaxPositionEmbeddings: number
}

/** One decoder-only transformer, whatever family it came from. */
export interface ModelConfig {
  architecture: Architecture
  /** As written in config.json, e.g. "Qwen3ForCausalLM". */
  hfArchitecture: string
  vocabSize: number
  hiddenSize: number
  intermediateSize: number
  numLayers: number
  numHeads: number
  numKvHeads: number
  headDim: number
  rmsNormEps: number
  ropeTheta: number
  ropeScaling: Llama3RopeScaling | null
  maxPositionEmbeddings: number
  tieWordEmbeddings: boolean
  /** Bias on q_proj, k_proj, v_proj (Qwen2 always; Llama when attention_bias). */
  qkvBias: boolean
  /** Bias on o_proj (Llama when attention_bias). */
  oBias: boolean
  /** Per-head RMSNorm on q and k before RoPE (Qwen3). */
  qkNorm: boolean
  bosTokenId: number | null
  eosTokenIds: number[]
  torchDtype: string | null
}

export type TensorDtype = 'F32' | 'BF16' | 'F16'

/** Where one tensor's bytes live: absolute byte offset inside `file`. */
export interface TensorRef {
  name: string
  dtype: TensorDtype
  shape: number[]
  file: string
  offset: number
  nbytes: number
}
