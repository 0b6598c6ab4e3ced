// Loads the native addon once, refusing a missing or stale build with one clear instruction.
import { existsSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { NativeAddonError } from './engine/errors.js'
import type { SamplingOptions } from './engine/options.js'

export const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..')
const ADDON_PATH = join(packageRoot, 'build', 'Release', 'autodidact.node')
const STAMP_PATH = join(packageRoot, 'build', 'Release', 'autodidact.stamp.json')
const PLUGIN_PATH = join(packageRoot, 'build', 'Release', 'autodidact_cuda.so')
const REBUILD = 'run `npx autodidact rebuild` in your project (needs cmake or node-gyp and a C++17 compiler)'

export interface NativeInfo {
  abiVersion: number
  backends: string[]
  cpuThreads: number
  simd: string
  compiler: string
  cuda: {
    /** The CUDA plugin (build/Release/autodidact_cuda.so) is present and loaded. */
    compiled: boolean
    available: boolean
    /** 'ok', or why not: 'not-built' | 'stale' | 'load-failed' | 'abi-mismatch' | 'no-driver' | 'no-device' | 'probe-failed' */
    kind: string
    reason: string
    /** Where the plugin was looked for. */
    pluginPath: string
    /** Which GEMM the plugin runs ('' when no device). */
    gemmPath: string
    runtimeVersion: number
    driverVersion: number
    devices: { index: number; name: string; totalMemory: number; computeCapability: string; multiprocessors: number }[]
  }
  /** The capability matrix: every engine verb, and for each backend whether it has it (and why not). */
  capabilities: { verb: string; backends: Record<string, { supported: boolean; reason: string }> }[]
}

/**
 * What every native call throws or rejects with on bad input (the addon's one exception wrapper,
 * native/addon/guard.h): a TypeError / RangeError / Error whose `code` says which case.
 */
export type NativeErrorCode =
  | 'ERR_AD_INVALID_ARGUMENT'
  | 'ERR_AD_OUT_OF_RANGE'
  | 'ERR_AD_OUT_OF_MEMORY'
  | 'ERR_AD_UNSUPPORTED'
  | 'ERR_AD_DEVICE_UNAVAILABLE'
  | 'ERR_AD_COLLECTIVE_TIMEOUT'
  | 'ERR_AD_COLLECTIVE'
  | 'ERR_AD_COLLECTIVE_UNAVAILABLE'
  | 'ERR_AD_NON_FINITE'
  | 'ERR_AD_NATIVE'

export interface NativeError extends Error {
  code: NativeErrorCode
  /** ERR_AD_UNSUPPORTED, ERR_AD_DEVICE_UNAVAILABLE: the backend concerned. */
  backend?: string
  /** ERR_AD_UNSUPPORTED: the verb of the capability matrix. */
  verb?: string
  /** ERR_AD_DEVICE_UNAVAILABLE, ERR_AD_COLLECTIVE_UNAVAILABLE: why ('not-built', 'no-driver', 'no-library', …). */
  kind?: string
  /** ERR_AD_COLLECTIVE*: the rank that raised it. */
  rank?: number
  /** ERR_AD_COLLECTIVE_TIMEOUT: the operation ('all-reduce', 'broadcast', 'all-gather', 'barrier') and its timeout. */
  operation?: string
  timeoutMs?: number
  /** ERR_AD_NON_FINITE: the safetensors file and tensor, the first NaN/±Inf element's flat index, the tensor's element count and that value. */
  file?: string
  tensor?: string
  index?: number
  numel?: number
  value?: number
}

/** Whether `e` came from the addon's exception wrapper (and which case). */
export function isNativeError(e: unknown, code?: NativeErrorCode): e is NativeError {
  return e instanceof Error && typeof (e as NativeError).code === 'string' && (e as NativeError).code.startsWith('ERR_AD_') && (code === undefined || (e as NativeError).code === code)
}

export interface NativeStepResult {
  rows: number
  tokens: Int32Array
  chosenLogprob: Float32Array
  logsumexp: Float32Array
  entropy: Float32Array
  maxLogit: Float32Array
  margin: Float32Array
  topK: number
  topkIds: Int32Array
  topkLogits: Float32Array
  k1?: Float32Array
  k2?: Float32Array
  k3?: Float32Array
  klExact?: Float32Array
  logits?: Float32Array
}

export interface NativeSamplingColumns {
  temperature: Float32Array
  topK: Int32Array
  topP: Float32Array
  minP: Float32Array
  repetitionPenalty: Float32Array
  presencePenalty: Float32Array
  frequencyPenalty: Float32Array
  seed: Float64Array
  stream: Float64Array
  promptLength: Int32Array
}

export interface NativeStepRequest {
  slots: Int32Array
  counts: Int32Array
  /** 0: no output, 1: the last new token's row, 2: every new token's row */
  outModes: Uint8Array
  /** One LoRA adapter index (attach order) per entry, −1 = the base alone; absent: adapter 0 (the default). */
  adapters?: Int32Array
  tokens: Int32Array
  targets?: Int32Array
  sampling?: NativeSamplingColumns
  topK?: number
  returnLogits?: boolean
  reference?: { model: NativeModel; cache: NativeKVCache }
}

export interface NativeKVCache {
  copyPrefix(src: number, dst: number, length: number): void
  length(slot: number): number
  truncate(slot: number, length: number): void
  /** bytes: the whole allocation; the page counters describe a paged cache (the slot layout: one page per slot). */
  describe(): NativeCacheDescription
  dispose(): void
}

export interface NativeCacheDescription {
  slots: number
  capacity: number
  bytes: number
  pageSize: number
  pages: number
  freePages: number
  pageBytes: number
  /** Memory prefix sharing saves now (pages held by several slots, counted once per extra holder). */
  sharedBytes: number
  /** Bytes copyPrefix shared instead of copying since the cache was created. */
  sharedBytesTotal: number
}

/** A paged KV cache: `pages` pages of `pageSize` positions that every slot draws from (the `step.pagedCache` verb). */
export interface NativeCacheLayout {
  pageSize: number
  pages: number
}

export interface NativeModel {
  createCache(slots: number, capacity: number, layout?: NativeCacheLayout): NativeKVCache
  step(cache: NativeKVCache, request: NativeStepRequest): Promise<NativeStepResult>
  /** weights: the type the Linear weights are kept in ('f32', 'bf16', 'f16', 'int8'). */
  describe(): { parameterBytes: number; threads: number; backend: string; deviceIndex?: number; weights?: string }
  dispose(): void
}

export interface NativeTensor {
  name: string
  shape: number[]
  data: Float32Array
}

export interface NativeTrain {
  /** Taped forward of whole sequences; rows are completion tokens, in sequence order. */
  forward(
    model: NativeModel,
    request: { tokens: Int32Array; lengths: Int32Array; promptLengths: Int32Array; adapters?: Int32Array; reference?: 'lora-off' | NativeModel; checkpoint?: boolean },
  ): Promise<{ logp: Float32Array; entropy: Float32Array; refLogp?: Float32Array }>
  /** Back-propagates dz = a·(onehot − p) + b·(−p(log p + H)) per completion row of the taped forward. */
  backward(model: NativeModel, request: { a: Float32Array; b: Float32Array }): Promise<void>
  optimizerStep(
    model: NativeModel,
    o: { step: number; lr: number; beta1: number; beta2: number; eps: number; weightDecay: number; clipGradNorm: number },
  ): Promise<{ gradNorm: number; skipped: boolean; parameters: number }>
  /** Scores of whole sequences from the score head on each last token ([sequences × labels]); taped unless tape: false. */
  scoreForward(model: NativeModel, request: { tokens: Int32Array; lengths: Int32Array; adapters?: Int32Array; tape?: boolean }): Promise<Float32Array>
  scoreBackward(model: NativeModel, request: { dScores: Float32Array }): Promise<void>
  attachScoreHead(model: NativeModel, o: { labels: number; std: number; seed: number }): void
  /** Attaches adapter `name` ('default' when absent) and returns its index (the `adapters` entries of step, forward, scoreForward). */
  attachLora(model: NativeModel, o: { rank: number; alpha: number; targets: string[]; seed: number; name?: string }): number
  /** With `lora`, the adapters listed by index train (absent: every adapter); the rest get no gradient. */
  setTrainable(model: NativeModel, base: boolean, lora: boolean, adapters?: Int32Array): void
  setLoraEnabled(model: NativeModel, on: boolean): void
  zeroGrad(model: NativeModel): void
  /** W += α/r·B·A for every adapter, then B = 0 (on the engine's threads). */
  mergeLora(model: NativeModel): Promise<void>
  /** Every parameter by name (base tensors sorted, then LoRA A and B), as f32 copies; `mergeLora`: base tensors with the adapters folded in. */
  exportTensors(model: NativeModel, options?: { mergeLora?: boolean }): Promise<NativeTensor[]>
  /** Overwrites parameters in place; every name and size is checked before the first write. The arrays must not be transferred while it runs. */
  importTensors(model: NativeModel, tensors: { name: string; data: Float32Array }[]): Promise<void>
  exportGradients(model: NativeModel): Promise<{ name: string; data: Float32Array }[]>
  exportOptimizerState(model: NativeModel): Promise<{ name: string; m: Float32Array; v: Float32Array }[]>
  /** Replaces the AdamW moments; names, sizes and values (finite, v ≥ 0) are checked before the state changes. */
  importOptimizerState(model: NativeModel, state: { name: string; m: Float32Array; v: Float32Array }[]): Promise<void>
  /** Data parallelism: every gradient ← its sum over the collective's ranks (between the last backward and optimizerStep). */
  reduceGradients(model: NativeModel, collective: NativeCollective): Promise<void>
}

/** One process's handle on a collective (native/collective/collective.h): every operation waits on every rank. */
export interface NativeCollective {
  describe(): { backend: 'mpi' | 'nccl' | 'single'; rank: number; worldSize: number; timeoutMs: number }
  /** A new array: the element-wise sum (or mean) of every rank's `data`. */
  allReduce(data: Float32Array, op: 'sum' | 'avg'): Promise<Float32Array>
  /** Root's bytes on every rank (any length; the others' `data` is ignored). */
  broadcast(data: Uint8Array, root: number): Promise<Uint8Array>
  /** Every rank's bytes (any lengths), in rank order. */
  allGather(data: Uint8Array): Promise<Uint8Array[]>
  barrier(): Promise<void>
  /** Closes it (MPI: MPI_Finalize, on every rank) once in-flight operations finish. */
  close(): void
}

/** Where a collective's library was found, or why not. */
export interface NativeCollectiveLibrary {
  found: boolean
  path?: string
  version?: string
  reason?: string
}

export interface NativeCollectives {
  /** nccl: `uniqueId` is rank 0's ncclUniqueId(), the same on every rank (src/parallel/rendezvous.ts hands it out). */
  open(options: { backend: 'mpi' | 'nccl' | 'single'; timeoutMs: number; rank?: number; worldSize?: number; uniqueId?: Uint8Array }): Promise<NativeCollective>
  /** Loads each library once (nothing is initialized). */
  libraries(): { mpi: NativeCollectiveLibrary; nccl: NativeCollectiveLibrary }
  /** Throws ERR_AD_COLLECTIVE_UNAVAILABLE (kind 'no-library') unless the backend's library was found. */
  requireLibrary(backend: 'mpi' | 'nccl' | 'single'): void
  /** Rank 0's NCCL unique id (128 bytes); NCCL's bootstrap root starts listening in this process. */
  ncclUniqueId(): Uint8Array
}

export interface NativeDeviceMemory {
  free: number
  total: number
  allocated: number
  peakAllocated: number
}

/** Per-kernel counters of the CPU backend (native/cpu/profiler.h); process-wide. */
export interface NativeProfiler {
  enable(on?: boolean): void
  reset(): void
  snapshot(): { name: string; calls: number; seconds: number; bytes: number; flops: number }[]
  /** Bytes read + written per second by a threaded memcpy of `bytes`. */
  measureCopy(bytes: number, threads?: number): number
  /** FLOP/s of our gemm_nt on an m×n×k product. */
  measureGemm(m: number, n: number, k: number, threads?: number): number
  /** A device's floors measured now (a 1 GiB device copy, a bf16 8192³ GEMM); null for the CPU backend; ERR_AD_DEVICE_UNAVAILABLE where the device cannot run. */
  measureDeviceFloors(backend: 'cpu' | 'cuda', index: number): { copyBytesPerSecond: number; gemmFlopsPerSecond: number } | null
}

export interface LogitStatsResult {
  maxLogit: Float32Array
  logsumexp: Float32Array
  entropy: Float32Array
  margin: Float32Array
  chosenLogprob: Float32Array | null
  topkIds: Int32Array
  topkLogits: Float32Array
  k1: Float32Array | null
  k2: Float32Array | null
  k3: Float32Array | null
  klExact: Float32Array | null
}

export interface LogitStatsOptions {
  targets?: Int32Array
  topK?: number
  ref?: Float32Array
  threads?: number
  scalar?: boolean
}

/** The sampling options as the addon takes them: the seed (and the stream) may be bigints. */
export interface SamplingParamsJs extends Omit<SamplingOptions, 'seed'> {
  seed?: number | bigint
  stream?: number | bigint
}

/** The addon's sampling and statistics kernels, exposed for tests, benches and non-engine decoders (ONNX members). */
export interface NativeKernels {
  logitStats(logits: Float32Array, rows: number, vocab: number, opts?: LogitStatsOptions): LogitStatsResult
  naiveLogitStats(logits: Float32Array, rows: number, vocab: number, opts?: LogitStatsOptions): LogitStatsResult
  sampleToken(logits: Float32Array, params: SamplingParamsJs, position: number | bigint, history?: Int32Array, generated?: Int32Array): number
  sampleTokens(
    logits: Float32Array,
    params: SamplingParamsJs,
    firstPosition: number | bigint,
    count: number,
    history?: Int32Array,
    generated?: Int32Array,
  ): Int32Array
  /** The split-row GPU sampler's chunked procedure on the host (native/kernels/sampling_split.h): T > 0, no top-k, no penalties. */
  sampleTokensSplit(logits: Float32Array, params: SamplingParamsJs, firstPosition: number | bigint, count: number, chunks: number): Int32Array
  philox(counter: ArrayLike<number>, key: ArrayLike<number>): Uint32Array
  uniform01(seed: number | bigint, stream: number | bigint, position: number | bigint): number
  copyBytes(src: ArrayBufferView, dst: ArrayBufferView, threads?: number): void
  /** Reads every byte of src on `threads` threads (a read-only bandwidth floor); the XOR of its 32-bit little-endian words. */
  readBytes(src: ArrayBufferView, threads?: number): number
  expf(x: Float32Array): Float32Array
  maxTopK: number
  // The layer kernel pairs of native/kernels/, one row at a time as the CPU backend calls them.
  /** RMSNorm of rows × n (the accumulator of the row sums: 'f64' as the CPU, 'f32' as the device). */
  rmsnorm(x: Float32Array, w: Float32Array, rows: number, n: number, eps: number, opts?: { accumulator?: 'f64' | 'f32' }): Float32Array
  rmsnormBackward(x: Float32Array, w: Float32Array, dy: Float32Array, rows: number, n: number, eps: number, opts?: { accumulator?: 'f64' | 'f32' }): { dx: Float32Array; dw: Float32Array }
  /** RoPE of rows × headDim with per-row cos/sin tables of headDim/2. */
  rope(x: Float32Array, cos: Float32Array, sin: Float32Array, rows: number, headDim: number): Float32Array
  /** The inverse rotation: undoes rope, and is its backward. */
  ropeInverse(g: Float32Array, cos: Float32Array, sin: Float32Array, rows: number, headDim: number): Float32Array
  swiglu(gate: Float32Array, up: Float32Array): Float32Array
  swigluBackward(gate: Float32Array, up: Float32Array, dh: Float32Array): { dgate: Float32Array; dup: Float32Array }
  /** W + scale·B·A (W [out × in], A [rank × in], B [out × rank]): kernels/lora.h's merge, the CUDA backend's arithmetic. */
  loraMerge(W: Float32Array, A: Float32Array, B: Float32Array, out: number, inFeatures: number, rank: number, scale: number): Float32Array
  /** Attention of one query over nKeys keys and values of `stride` floats each (two-pass, or one pass with `online`). */
  attentionRow(q: Float32Array, keys: Float32Array, values: Float32Array, stride: number, nKeys: number, headDim: number, scale: number, opts?: { online?: boolean }): Float32Array
  /** dq [headDim]; dk and dv [nKeys × stride]. */
  attentionRowBackward(
    q: Float32Array,
    keys: Float32Array,
    values: Float32Array,
    stride: number,
    nKeys: number,
    headDim: number,
    scale: number,
    dout: Float32Array,
  ): { dq: Float32Array; dk: Float32Array; dv: Float32Array }
}

export interface NativeAddon {
  info(): NativeInfo
  /** A device's memory in bytes (driver free/total; what this process's engines hold now and at most since resetDevicePeak), or null where the backend has none or cannot run. */
  deviceMemory(backend: 'cpu' | 'cuda', index: number): NativeDeviceMemory | null
  resetDevicePeak(backend: 'cpu' | 'cuda'): void
  profiler: NativeProfiler
  loadModel(config: object, tensors: object[], threads: number, options?: { device: 'cpu' | 'cuda'; deviceIndex?: number; weights?: string }): Promise<NativeModel>
  kernels: NativeKernels
  train: NativeTrain
  collective: NativeCollectives
  /** The CPU GEMM's measurements; fmaPeak: FMA flops per second of each of `threads` threads running at once (native/cpu/gemm_peak.cpp). */
  gemm: { fmaPeak(threads: number, iterations?: number): Float64Array }
}

let cached: NativeAddon | null = null

interface StampModule {
  nativeSourceStamp(root: string): string | null
  pluginSourceStamp(root: string): string | null
}

function stampModule(): Promise<StampModule> {
  return import(join(packageRoot, 'scripts', 'native-stamp.mjs')) as Promise<StampModule>
}

interface BuildStamp {
  sources?: string
  plugin?: { bytes: number; mtimeMs: number } | null
  pluginSources?: string | null
}

function checkFresh(current: string | null): BuildStamp | null {
  if (current === null) return null // sources not shipped: nothing to compare against
  if (!existsSync(STAMP_PATH)) throw new NativeAddonError(`the native addon at ${ADDON_PATH} has no build stamp; ${REBUILD}`)
  const built = JSON.parse(readFileSync(STAMP_PATH, 'utf8')) as BuildStamp
  if (built.sources !== current)
    throw new NativeAddonError(`the native addon is stale: native/ sources changed since it was built; ${REBUILD}`)
  return built
}

/** Why the CUDA plugin beside the addon must not be used (stale or foreign), or null when it may. */
function pluginProblem(built: BuildStamp | null, stamps: StampModule): string | null {
  if (process.env.AUTODIDACT_CUDA_PLUGIN || built === null || !existsSync(PLUGIN_PATH)) return null
  const st = statSync(PLUGIN_PATH)
  const recorded = built.plugin ?? null
  if (!recorded || recorded.bytes !== st.size || recorded.mtimeMs !== Math.floor(st.mtimeMs))
    return `the CUDA plugin at ${PLUGIN_PATH} does not belong to this build of the addon; ${REBUILD}`
  if (built.pluginSources !== stamps.pluginSourceStamp(packageRoot))
    return `the CUDA plugin is stale: native/ sources changed since it was built; ${REBUILD}`
  return null
}

/** The addon, loaded and checked once per process. A stale CUDA plugin does not stop the CPU
 * addon: info() then reports CUDA unavailable with kind 'stale' and the reason. */
export async function nativeAddon(): Promise<NativeAddon> {
  if (cached) return cached
  if (!existsSync(ADDON_PATH)) throw new NativeAddonError(`the native addon is not built (no ${ADDON_PATH}); ${REBUILD}`)
  const stamps = await stampModule()
  const built = checkFresh(stamps.nativeSourceStamp(packageRoot))
  const problem = pluginProblem(built, stamps)
  let addon: NativeAddon
  try {
    addon = createRequire(import.meta.url)(ADDON_PATH) as NativeAddon
  } catch (error) {
    throw new NativeAddonError(`the native addon at ${ADDON_PATH} failed to load (${(error as Error).message}); ${REBUILD}`)
  }
  if (problem) {
    const info = addon.info.bind(addon)
    addon = Object.assign(Object.create(addon) as NativeAddon, {
      info: (): NativeInfo => {
        const i = info()
        return { ...i, backends: i.backends.filter((b) => b !== 'cuda'), cuda: { ...i.cuda, available: false, kind: 'stale', reason: problem, devices: [] } }
      },
      deviceMemory: () => null,
    })
  }
  cached = addon
  return cached
}
