// A from-scratch Qwen3 model for the arithmetic world: config.json (Qwen3ForCausalLM, tied
// embeddings), GPT-2-style initial weights and the toy tokenizer, written as a Hugging Face folder
// that `loadModel` reads and our trainer then fits.
//
// Initialisation (GPT-2, Radford et al. 2019, as in nanoGPT / llm.c): every matrix N(0, 0.02²);
// the two projections that write into the residual stream (o_proj, down_proj) scaled by
// 1/sqrt(2·layers) so the stream's variance does not grow with depth; every RMSNorm weight
// (input, post-attention, q_norm, k_norm, final) 1. Deterministic in the seed.

import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'

import { expectedTensors, parseModelConfig } from '../engine/hf/config.js'
import { writeSafetensors, type TensorToWrite } from '../engine/hf/safetensors.js'
import { writeJsonAtomic } from '../util/atomic.js'
import { Rng } from '../util/prng.js'
import { TOY_IDS, TOY_VOCAB_SIZE, toyTokenizerFiles } from './tokenizer.js'

export interface ToyArchitecture {
  hiddenSize: number
  layers: number
  heads: number
  kvHeads: number
  headDim: number
  intermediateSize: number
  maxPositionEmbeddings: number
  ropeTheta: number
}

/** The bundled model's shape: 1,197,280 parameters (4.8 MB in F32), 4 layers, GQA 4:2, SwiGLU 432. */
export const TOY_ARCHITECTURE: Readonly<ToyArchitecture> = {
  hiddenSize: 160,
  layers: 4,
  heads: 4,
  kvHeads: 2,
  headDim: 40,
  intermediateSize: 432,
  maxPositionEmbeddings: 512,
  ropeTheta: 10000,
}

export const INIT_STD = 0.02

export function toyConfigJson(arch: ToyArchitecture = TOY_ARCHITECTURE): Record<string, unknown> {
  const cfg: Record<string, unknown> = {
    architectures: ['Qwen3ForCausalLM'],
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: TOY_IDS.endoftext,
    eos_token_id: TOY_IDS.imEnd,
    head_dim: arch.headDim,
    hidden_act: 'silu',
    hidden_size: arch.hiddenSize,
    initializer_range: INIT_STD,
    intermediate_size: arch.intermediateSize,
    max_position_embeddings: arch.maxPositionEmbeddings,
    max_window_layers: arch.layers,
    model_type: 'qwen3',
    num_attention_heads: arch.heads,
    num_hidden_layers: arch.layers,
    num_key_value_heads: arch.kvHeads,
    pad_token_id: TOY_IDS.endoftext,
    rms_norm_eps: 1e-6,
    rope_scaling: null,
    rope_theta: arch.ropeTheta,
    sliding_window: null,
    tie_word_embeddings: true,
    torch_dtype: 'float32',
    transformers_version: '4.51.0',
    use_cache: true,
    use_sliding_window: false,
    vocab_size: TOY_VOCAB_SIZE,
  }
  return cfg
}

export const TOY_GENERATION_CONFIG = {
  bos_token_id: TOY_IDS.endoftext,
  eos_token_id: [TOY_IDS.imEnd, TOY_IDS.endoftext],
  pad_token_id: TOY_IDS.endoftext,
  do_sample: true,
  temperature: 1.0,
  top_p: 1.0,
  transformers_version: '4.51.0',
}

/** Standard normals from a seeded Rng (Box–Muller, both outputs used). */
function normals(rng: Rng): () => number {
  let spare: number | null = null
  return () => {
    if (spare !== null) {
      const s = spare
      spare = null
      return s
    }
    let u1 = rng.nextFloat()
    while (u1 <= 1e-300) u1 = rng.nextFloat()
    const r = Math.sqrt(-2 * Math.log(u1))
    const th = 2 * Math.PI * rng.nextFloat()
    spare = r * Math.sin(th)
    return r * Math.cos(th)
  }
}

/** The initial tensors, in expectedTensors order. */
export function initToyWeights(seed: number, arch: ToyArchitecture = TOY_ARCHITECTURE): TensorToWrite[] {
  const config = parseModelConfig(toyConfigJson(arch), 'config.json')
  const normal = normals(new Rng(`toymodel-init:${seed}`))
  const residualScale = 1 / Math.sqrt(2 * arch.layers)
  return expectedTensors(config).map(({ name, shape }) => {
    const n = shape.reduce((a, b) => a * b, 1)
    const data = new Float32Array(n)
    if (name.endsWith('norm.weight')) data.fill(1)
    else {
      const std = INIT_STD * (name.endsWith('o_proj.weight') || name.endsWith('down_proj.weight') ? residualScale : 1)
      for (let i = 0; i < n; i++) data[i] = std * normal()
    }
    return { name, dtype: 'F32' as const, shape: shape.slice(), data }
  })
}

export async function writeToyTokenizer(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true })
  const tok = toyTokenizerFiles()
  await writeJsonAtomic(join(dir, 'tokenizer.json'), tok.tokenizerJson, 2)
  await writeJsonAtomic(join(dir, 'tokenizer_config.json'), tok.tokenizerConfig, 2)
}

/** Writes a freshly initialised model folder (config, weights, tokenizer, generation config). */
export async function writeInitialToyModel(dir: string, seed: number, arch: ToyArchitecture = TOY_ARCHITECTURE): Promise<void> {
  await mkdir(dir, { recursive: true })
  await writeSafetensors(join(dir, 'model.safetensors'), initToyWeights(seed, arch))
  await writeJsonAtomic(join(dir, 'config.json'), toyConfigJson(arch), 2)
  await writeJsonAtomic(join(dir, 'generation_config.json'), TOY_GENERATION_CONFIG, 2)
  await writeToyTokenizer(dir)
}

export function parameterCount(arch: ToyArchitecture = TOY_ARCHITECTURE): number {
  const config = parseModelConfig(toyConfigJson(arch), 'config.json')
  return expectedTensors(config).reduce((s, t) => s + t.shape.reduce((a, b) => a * b, 1), 0)
}
