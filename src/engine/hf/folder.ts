// A Hugging Face model folder as users have it: config.json, model.safetensors or a sharded
// model.safetensors.index.json, tokenizer.json (+ tokenizer_config.json chat template),
// generation_config.json. Reads headers only; tensor bytes stay on disk for the engine.

import { constants as fsConstants } from 'node:fs'
import { access, readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'

import { ConfigError, TokenizerError } from '../errors.js'
import { Tokenizer } from '../tokenizer.js'
import type { ModelConfig, TensorRef } from '../types.js'
import { parseModelConfig, parseModelHead, validateTensors, type ModelHead } from './config.js'
import { readSafetensorsHeader, readSafetensorsIndex, readSafetensorsRefs } from './safetensors.js'

/** generation_config.json, loosely typed: the fields samplers use, plus whatever else it holds. */
export interface GenerationConfig {
  eos_token_id?: number | number[]
  bos_token_id?: number
  pad_token_id?: number
  temperature?: number
  top_k?: number
  top_p?: number
  min_p?: number
  repetition_penalty?: number
  do_sample?: boolean
  max_new_tokens?: number
  [key: string]: unknown
}

export interface ModelFolder {
  dir: string
  config: ModelConfig
  configPath: string
  /** The head on the decoder (causal LM, or a sequence-classification score head). */
  head: ModelHead
  /** The weights file read: model.safetensors or model.safetensors.index.json. */
  weightsPath: string
  /** Every tensor in the checkpoint (model tensors and extras). */
  tensors: TensorRef[]
  /** Tensors present that the model does not use (sorted names). */
  extraTensors: string[]
  tokenizer: Tokenizer
  generationConfig: GenerationConfig | null
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p, fsConstants.F_OK)
    return true
  } catch {
    return false
  }
}

async function readJson(path: string, what: string): Promise<unknown> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    throw new ConfigError(
      path,
      null,
      code === 'ENOENT' ? `${path}: not found; a model folder needs ${what}` : `${path}: cannot read: ${(e as Error).message}`,
      { cause: e },
    )
  }
  try {
    return JSON.parse(text)
  } catch (e) {
    throw new ConfigError(path, null, `${path}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
}

/**
 * Read and validate a model folder. Every failure is typed: ConfigError /
 * UnsupportedArchitectureError (config.json), SafetensorsError / MissingTensorError /
 * TensorShapeError (weights), TokenizerError (tokenizer files).
 */
export async function readModelFolder(dir: string): Promise<ModelFolder> {
  let isDir = false
  try {
    isDir = (await stat(dir)).isDirectory()
  } catch (e) {
    throw new ConfigError(dir, null, `${dir}: model folder not found`, { cause: e })
  }
  if (!isDir) throw new ConfigError(dir, null, `${dir}: not a folder (pass the model folder holding config.json)`)

  const configPath = join(dir, 'config.json')
  const configJson = await readJson(configPath, 'config.json')
  const config = parseModelConfig(configJson, configPath)
  const head = parseModelHead(configJson, configPath)

  const single = join(dir, 'model.safetensors')
  const index = join(dir, 'model.safetensors.index.json')
  let weightsPath: string
  let tensors: TensorRef[]
  if (await exists(single)) {
    weightsPath = single
    tensors = (await readSafetensorsHeader(single)).tensors
  } else if (await exists(index)) {
    weightsPath = index
    tensors = (await readSafetensorsIndex(index)).tensors
  } else {
    // readSafetensorsRefs words the error (and hints at .bin / .gguf files).
    tensors = await readSafetensorsRefs(dir)
    weightsPath = single
  }
  const extraTensors = validateTensors(config, tensors, { head, source: weightsPath })

  const genPath = join(dir, 'generation_config.json')
  let generationConfig: GenerationConfig | null = null
  if (await exists(genPath)) {
    const g = await readJson(genPath, 'generation_config.json')
    if (g === null || typeof g !== 'object' || Array.isArray(g)) {
      throw new ConfigError(genPath, null, `${genPath}: expected a JSON object`)
    }
    generationConfig = g as GenerationConfig
  }

  const tokenizer = await Tokenizer.fromFolder(dir)
  if (tokenizer.vocabSize > config.vocabSize) {
    throw new TokenizerError(
      join(dir, 'tokenizer.json'),
      `${join(dir, 'tokenizer.json')}: the tokenizer has ids up to ${tokenizer.vocabSize - 1} but ${configPath} ` +
        `has vocab_size ${config.vocabSize}: tokenizer and weights do not belong together`,
    )
  }

  return { dir, config, configPath, head, weightsPath, tensors, extraTensors, tokenizer, generationConfig }
}
