// A model's life on disk: loading a Hugging Face folder onto a backend, saving it back (PEFT
// adapters, or the full model with the adapters merged in, or a reward model as
// *ForSequenceClassification), and attaching a PEFT adapter folder. Whole-model copies run on
// the engine's threads behind Promises.
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { DEFAULT_ADAPTER, attachAdapter, checkAdapterName, isAdapterName, type LoraInfo } from './adapters.js'
import { DeviceUnavailableError, InvalidArgumentError, MissingTensorError, SeveralAdaptersError, NativeAddonError, TensorShapeError, type DeviceUnavailableReason } from './errors.js'
import { writeFileAtomic } from '../util/atomic.js'
import { readAdapterConfig } from './hf/adapter.js'
import { readModelFolder } from './hf/folder.js'
import { readSafetensorsHeader, readTensorFloat32, writeSafetensors, writeShardedSafetensors } from './hf/safetensors.js'
import { assertFits, trainingMemoryPlan } from './memory-plan.js'
import { resolveLoad, type LoadOptions } from './options.js'
import { modelTensors, tensorName } from './tensor-table.js'
import type { Tokenizer } from './tokenizer.js'
import type { ModelConfig } from './types.js'
import { isNativeError, nativeAddon, type NativeModel, type NativeTensor } from '../native.js'

export type { LoraInfo } from './adapters.js'

export interface SaveOptions {
  /**
   * With LoRA attached: write PEFT adapter folders (default; PEFT's multi-adapter layout: the
   * 'default' adapter at the root, each other one in a sub-folder named after it) or the merged
   * full model (false; one adapter only).
   */
  adapterOnly?: boolean
  /** Shard model weights above this many bytes per file. Default 5 GB, as transformers. */
  maxShardBytes?: number
}

const FOLDER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'chat_template.json']

/** A folder loaded onto a backend: what a Model is made of. */
export interface LoadedFolder {
  config: ModelConfig
  tokenizer: Tokenizer
  generationConfig: Record<string, unknown> | null
  device: 'cpu' | 'cuda'
  native: NativeModel
  scoreLabels: number
}

/** Reads a Hugging Face model folder and loads its tensors onto the device the options name. */
export async function loadFolder(dir: string, options: LoadOptions): Promise<LoadedFolder> {
  const { device, threads, deviceIndex, weights } = resolveLoad(options)
  const addon = await nativeAddon()
  if (device === 'cuda') assertCudaAvailable(addon.info().cuda, deviceIndex)
  const folder = await readModelFolder(dir)
  const extra = new Set(folder.extraTensors)
  const scoreLabels = folder.head.kind === 'sequence-classification' ? folder.head.numLabels : 0
  const placed = device === 'cuda' ? 'cuda' : 'cpu'
  if (placed === 'cuda') {
    // The weights must fit before the first is uploaded (the memory plan, src/engine/memory-plan.ts).
    const free = addon.deviceMemory('cuda', deviceIndex)?.free
    if (free !== undefined) assertFits(trainingMemoryPlan(folder.config, { batch: 1, sequenceLength: 2 }, { scoreLabels }), 'load', free, `loading ${dir}`)
  }
  const native = await Promise.resolve()
    .then(() => addon.loadModel({ ...folder.config, scoreLabels }, folder.tensors.filter((t) => !extra.has(t.name)), threads, { device: placed, deviceIndex, weights }))
    .catch((e: Error) => {
      throw cudaUnavailable(e) ?? new NativeAddonError(`loading ${dir} on ${placed} failed: ${e.message}`, { cause: e })
    })
  return { config: folder.config, tokenizer: folder.tokenizer, generationConfig: folder.generationConfig as Record<string, unknown> | null, device: placed, native, scoreLabels }
}

/** What saving and adapters need of a model (a Model is one). */
export interface PersistentModel {
  /** The folder it was loaded from. */
  readonly dir: string
  readonly config: ModelConfig
  /** The native handle; throws once the model is disposed. */
  readonly handle: NativeModel
  /** The attached LoRA adapters by name, in attach order. */
  readonly adapters: Map<string, LoraInfo>
  readonly scoreLabels: number
}

/** Parameters by name: base tensors (the adapters folded in, on the engine, when `merge`), adapters apart. */
async function exportWeights(m: PersistentModel, merge: boolean): Promise<{ base: NativeTensor[]; adapters: NativeTensor[] }> {
  const all = await (await nativeAddon()).train.exportTensors(m.handle, { mergeLora: merge && m.adapters.size > 0 })
  return { base: all.filter((t) => !t.name.includes('.lora_')), adapters: all.filter((t) => t.name.includes('.lora_')) }
}

/** The engine's name of an adapter matrix as a PEFT file names it: "….lora_A.<adapter>.weight" → "….lora_A.weight". */
function peftTensorName(engineName: string, adapter: string): string {
  return adapter === DEFAULT_ADAPTER ? engineName : engineName.replace(`.lora_A.${adapter}.weight`, '.lora_A.weight').replace(`.lora_B.${adapter}.weight`, '.lora_B.weight')
}

/** The engine's name of a PEFT file's adapter matrix for adapter `adapter` (the inverse of peftTensorName). */
function engineTensorName(peftName: string, adapter: string): string {
  const plain = peftName.replace(/^base_model\.model\./, '').replace(/\.lora_([AB])\.[A-Za-z0-9_-]+\.weight$/, '.lora_$1.weight')
  return adapter === DEFAULT_ADAPTER ? plain : plain.replace(/\.lora_([AB])\.weight$/, `.lora_$1.${adapter}.weight`)
}

/** Whether an engine tensor name belongs to adapter `adapter`. */
function ofAdapter(engineName: string, adapter: string): boolean {
  return adapter === DEFAULT_ADAPTER ? /\.lora_[AB]\.weight$/.test(engineName) : engineName.endsWith(`.${adapter}.weight`) && /\.lora_[AB]\./.test(engineName)
}

/** Where adapter `name` lives in a saved folder: the root for 'default', else the sub-folder `name` (PEFT's save_pretrained). */
export function adapterFolder(dir: string, name: string): string {
  return name === DEFAULT_ADAPTER ? dir : join(dir, name)
}

async function saveAdapters(m: PersistentModel, dir: string): Promise<void> {
  const { adapters } = await exportWeights(m, false)
  for (const [name, info] of m.adapters) {
    const folder = adapterFolder(dir, name)
    await mkdir(folder, { recursive: true })
    await writeSafetensors(
      join(folder, 'adapter_model.safetensors'),
      adapters.filter((t) => ofAdapter(t.name, name)).map((t) => ({ name: `base_model.model.${peftTensorName(t.name, name)}`, dtype: 'F32' as const, shape: t.shape, data: t.data })),
    )
    const adapterConfig = {
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      base_model_name_or_path: m.dir,
      r: info.rank,
      lora_alpha: info.alpha,
      lora_dropout: 0,
      target_modules: info.targets,
      bias: 'none',
      fan_in_fan_out: false,
      inference_mode: true,
    }
    await writeFileAtomic(join(folder, 'adapter_config.json'), JSON.stringify(adapterConfig, null, 2) + '\n')
  }
}

export async function saveModel(m: PersistentModel, dir: string, options: SaveOptions = {}): Promise<void> {
  m.handle // a disposed model throws here, before anything is written
  const adapterOnly = options.adapterOnly ?? m.adapters.size > 0
  if (adapterOnly && !m.adapters.size) throw new InvalidArgumentError('adapterOnly', 'adapterOnly needs LoRA adapters attached')
  if (!adapterOnly && m.adapters.size > 1)
    throw new SeveralAdaptersError('adapterOnly', 'a merged save (adapterOnly: false)', [...m.adapters.keys()])
  await mkdir(dir, { recursive: true })
  if (adapterOnly) return saveAdapters(m, dir)
  const { base: all } = await exportWeights(m, true)
  const lmHead = tensorName('kLmHead')
  const base = m.scoreLabels ? all.filter((t) => t.name !== lmHead) : all
  await writeShardedSafetensors(
    dir,
    base.map((t) => ({ name: t.name, dtype: 'F32' as const, shape: t.shape, data: t.data })),
    { maxShardBytes: options.maxShardBytes ?? 5e9 },
  )
  const config = JSON.parse(await readFile(join(m.dir, 'config.json'), 'utf8')) as Record<string, unknown>
  config.torch_dtype = 'float32'
  if (m.scoreLabels) {
    // a reward model saves as transformers' *ForSequenceClassification, score head, no LM head
    const family = { llama: 'Llama', qwen2: 'Qwen2', qwen3: 'Qwen3' }[m.config.architecture]
    config.architectures = [`${family}ForSequenceClassification`]
    config.num_labels = m.scoreLabels
    delete config.id2label
    delete config.label2id
  }
  await writeFileAtomic(join(dir, 'config.json'), JSON.stringify(config, null, 2) + '\n')
  for (const f of FOLDER_FILES) {
    const src = join(m.dir, f)
    if (existsSync(src) && join(dir, f) !== src) await writeFileAtomic(join(dir, f), await readFile(src))
  }
}

/** An adapter folder read and checked against the model, not yet attached. */
interface AdapterFolder {
  name: string
  info: LoraInfo
  tensors: { name: string; data: Float32Array }[]
}

async function readAdapterFolder(m: PersistentModel, dir: string, name: string): Promise<AdapterFolder> {
  if (m.adapters.has(name)) throw new InvalidArgumentError('adapter', `this model already has an adapter named '${name}'`)
  const { rank, alpha, targets } = await readAdapterConfig(dir)
  const file = join(dir, 'adapter_model.safetensors')
  const header = await readSafetensorsHeader(file)
  // PEFT saves without the adapter name ("….lora_A.weight"); in-memory names carry it ("….lora_A.default.weight").
  const refs = header.tensors.map((ref) => ({ ref, name: engineTensorName(ref.name, DEFAULT_ADAPTER) }))
  checkAdapterTensors(m.config, rank, targets, refs.map(({ name, ref }) => ({ name, shape: ref.shape })), file)
  const tensors = await Promise.all(refs.map(async ({ ref }) => ({ name: engineTensorName(ref.name, name), data: await readTensorFloat32(ref) })))
  return { name, info: { rank, alpha, targets }, tensors }
}

async function attachFolders(m: PersistentModel, folders: AdapterFolder[]): Promise<void> {
  const train = (await nativeAddon()).train
  for (const f of folders) {
    await attachAdapter(m, f.name, f.info, 'adapter_config.json')
    await train.importTensors(m.handle, f.tensors)
  }
}

/**
 * Attaches a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) as the
 * adapter `name` (default 'default'); everything is read and checked before the model changes.
 */
export async function loadAdapter(m: PersistentModel, dir: string, options: { name?: string } = {}): Promise<void> {
  m.handle
  const name = checkAdapterName(options.name ?? DEFAULT_ADAPTER, 'name')
  await attachFolders(m, [await readAdapterFolder(m, dir, name)])
}

/**
 * Attaches every adapter of a folder saveModel wrote (PEFT's multi-adapter layout): the root's
 * as 'default' when it has one, then each sub-folder holding adapter_config.json under its
 * name, in name order; all are read and checked before the first is attached. Returns the names.
 */
export async function loadAdapters(m: PersistentModel, dir: string): Promise<string[]> {
  m.handle
  const names: string[] = []
  if (existsSync(join(dir, 'adapter_config.json'))) names.push(DEFAULT_ADAPTER)
  const entries = await readdir(dir, { withFileTypes: true }).catch((e: Error) => {
    throw new InvalidArgumentError('dir', `cannot read the adapter folder ${dir}: ${e.message}`)
  })
  for (const e of entries.filter((e) => e.isDirectory()).map((e) => e.name).sort())
    if (e !== DEFAULT_ADAPTER && isAdapterName(e) && existsSync(join(dir, e, 'adapter_config.json'))) names.push(e)
  if (!names.length) throw new InvalidArgumentError('dir', `${dir} holds no PEFT adapter (adapter_config.json at its root or in a sub-folder)`)
  const folders: AdapterFolder[] = []
  for (const name of names) folders.push(await readAdapterFolder(m, adapterFolder(dir, name), name))
  await attachFolders(m, folders)
  return names
}

/**
 * The adapter file holds exactly the A [r × in] and B [out × r] of every targeted linear map of
 * every layer (shapes from the tensor table): checked before the model changes.
 */
function checkAdapterTensors(config: ModelConfig, rank: number, targets: string[], found: { name: string; shape: number[] }[], file: string): void {
  const linears = new Map(modelTensors(config).filter((t) => t.role === 'LINEAR').map((t) => [t.name, t.shape]))
  const want = new Map<string, number[]>()
  for (const [name, [out, inDim]] of linears) {
    const module = name.replace(/\.weight$/, '').split('.').at(-1)!
    if (!targets.includes(module)) continue
    want.set(name.replace(/\.weight$/, '.lora_A.weight'), [rank, inDim])
    want.set(name.replace(/\.weight$/, '.lora_B.weight'), [out, rank])
  }
  const unknown = targets.filter((t) => ![...linears.keys()].some((n) => n.endsWith(`.${t}.weight`)))
  if (unknown.length) throw new InvalidArgumentError('target_modules', `${file}: unknown LoRA target module ${unknown.map((t) => `'${t}'`).join(', ')}`)
  const have = new Map(found.map((t) => [t.name, t.shape]))
  for (const [name, shape] of want) {
    const got = have.get(name)
    if (!got) throw new MissingTensorError(file, name, shape)
    if (got.length !== shape.length || got.some((d, i) => d !== shape[i])) throw new TensorShapeError(file, name, shape, got, `${file}: tensor "${name}" has shape [${got.join(', ')}], expected [${shape.join(', ')}] from adapter_config.json`)
  }
  for (const name of have.keys()) if (!want.has(name)) throw new InvalidArgumentError('adapter', `${file}: tensor "${name}" is not an adapter of the modules adapter_config.json targets`)
}

/** Folds the LoRA adapters into the base weights on the engine (W += α/r·B·A) and zeroes B. */
export async function mergeLora(m: PersistentModel): Promise<void> {
  if (!m.adapters.size) throw new InvalidArgumentError('lora', 'this model has no LoRA adapters to merge')
  if (m.adapters.size > 1) throw new SeveralAdaptersError('lora', 'mergeLora()', [...m.adapters.keys()])
  await (await nativeAddon()).train.mergeLora(m.handle)
}

const DEVICE_REASONS: readonly DeviceUnavailableReason[] = ['not-built', 'stale', 'load-failed', 'abi-mismatch', 'no-driver', 'no-device', 'probe-failed']

/** Throws DeviceUnavailableError unless the CUDA plugin is loaded and sees device `index`. */
function assertCudaAvailable(cuda: { compiled: boolean; available: boolean; kind?: string; reason: string; devices: unknown[] }, index: number): void {
  if (cuda.compiled && cuda.available) {
    if (index >= cuda.devices.length)
      throw new DeviceUnavailableError('no-device', `device 'cuda' is unavailable: CUDA device ${index} does not exist (${cuda.devices.length} visible)`)
    return
  }
  const kind = (DEVICE_REASONS as readonly string[]).includes(cuda.kind ?? '') ? (cuda.kind as DeviceUnavailableReason) : cuda.compiled ? 'no-device' : 'not-built'
  throw new DeviceUnavailableError(kind, `device 'cuda' is unavailable: ${cuda.reason}`)
}

/** The addon's typed error for a backend that cannot run here, as a DeviceUnavailableError. */
function cudaUnavailable(e: Error): DeviceUnavailableError | null {
  if (!isNativeError(e, 'ERR_AD_DEVICE_UNAVAILABLE')) return null
  const kind = (DEVICE_REASONS as readonly string[]).includes(e.kind ?? '') ? (e.kind as DeviceUnavailableReason) : 'no-device'
  return new DeviceUnavailableError(kind, `device 'cuda' is unavailable: ${e.message}`, { cause: e })
}
