// A Hugging Face model folder as users have it: config.json, model.safetensors or a sharded
// model.safetensors.index.json, tokenizer.json (+ tokenizer_config.json chat template),
// generation_config.json. Reads headers only; tensor bytes stay on disk for the engine.

import { constants as fsConstants } from 'node:fs'
import { access, stat } from 'node:fs/promises'
import { join } from 'node:path'

import { ConfigError, TokenizerError } from '../errors.js'
import { Tokenizer } from '../tokenizer.js'
import type { ModelConfig, TensorRef } from '../types.js'
import { parseModelConfig, parseModelHead, validateTensors, type ModelHead } from './config.js'
import { MAX_JSON_FILE_BYTES, readRegularFile } from './files.js'
import { checkFiniteTensors, readSafetensorsHeader, readSafetensorsIndex, readSafetensorsRefs } from './safetensors.js'

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
  const bytes = await readRegularFile(path, MAX_JSON_FILE_BYTES, (problem, message, cause) =>
    new ConfigError(path, null, problem === 'not-found' ? `${path}: not found; a model folder needs ${what}` : message, { cause }),
  )
  try {
    return JSON.parse(bytes.toString('utf8'))
  } catch (e) {
    throw new ConfigError(path, null, `${path}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
}

/**
 * Checkpoint tensors a model never reads that are known to be harmless: RoPE inverse-frequency
 * buffers older transformers saved (transformers' `_keys_to_ignore_on_load_unexpected`).
 */
const HARMLESS_EXTRA = /(^|\.)rotary_emb\.inv_freq$/

/** A warning naming the checkpoint tensors the config does not use, as transformers warns on load (null: none). */
export function unusedWeightsWarning(weightsPath: string, extraTensors: readonly string[]): string | null {
  const unused = extraTensors.filter((n) => !HARMLESS_EXTRA.test(n))
  if (unused.length === 0) return null
  const shown = unused.slice(0, 8).map((n) => `"${n}"`).join(', ')
  const more = unused.length > 8 ? ` and ${unused.length - 8} more` : ''
  return `${weightsPath}: ${unused.length} tensor${unused.length === 1 ? '' : 's'} of the checkpoint ${unused.length === 1 ? 'is' : 'are'} not used by the model config.json describes: ${shown}${more}`
}

export interface ReadModelFolderOptions {
  /** Scan the tensors the model uses for NaN/Inf (a SafetensorsError 'non-finite'). Default true. */
  checkFinite?: boolean
  /** Emit a process warning naming checkpoint tensors the model does not use. Default true. */
  warnUnused?: boolean
}

/**
 * Read and validate a model folder. Every failure is typed: ConfigError /
 * UnsupportedArchitectureError (config.json), SafetensorsError / MissingTensorError /
 * TensorShapeError (weights), TokenizerError (tokenizer files).
 */
/** A model folder's config.json alone: the configuration and head (what the memory plan needs before any weight is read). */
export async function readModelConfig(dir: string): Promise<{ config: ModelConfig; head: ModelHead }> {
  let isDir = false
  try {
    isDir = (await stat(dir)).isDirectory()
  } catch (e) {
    throw new ConfigError(dir, null, `${dir}: model folder not found`, { cause: e })
  }
  if (!isDir) throw new ConfigError(dir, null, `${dir}: not a folder (pass the model folder holding config.json)`)
  const configPath = join(dir, 'config.json')
  const configJson = await readJson(configPath, 'config.json')
  return { config: parseModelConfig(configJson, configPath), head: parseModelHead(configJson, configPath) }
}

export async function readModelFolder(dir: string, options: ReadModelFolderOptions = {}): Promise<ModelFolder> {
  const { config, head } = await readModelConfig(dir)
  const configPath = join(dir, 'config.json')

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
  const extraTensors = validateTensors(config, tensors, { head, source: weightsPath, configFile: configPath })
  if (options.checkFinite ?? true) {
    const extra = new Set(extraTensors)
    await checkFiniteTensors(tensors.filter((t) => !extra.has(t.name)))
  }
  const unused = options.warnUnused === false ? null : unusedWeightsWarning(weightsPath, extraTensors)
  if (unused) process.emitWarning(unused, { type: 'AutodidactWarning', code: 'AUTODIDACT_UNUSED_WEIGHTS' })

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
