// Kernel profiles of the engine, like the PyTorch profiler's table: per instrumented kernel, its
// calls, time, bytes moved and FLOPs, the rates achieved, and how close it comes to the floor
// measured on this machine in the same run (copy bandwidth for bytes, our best GEMM rate for
// FLOPs). Counters are process-wide: profile one thing at a time.
import { InvalidArgumentError } from './errors.js'
import type { Model } from './model.js'
import { nativeAddon, type NativeProfiler, type NativeSamplingColumns } from '../native.js'

export interface KernelCounter {
  name: string
  calls: number
  seconds: number
  bytes: number
  flops: number
}

export interface Floors {
  /** Bytes read + written per second by a threaded copy (on a device: a device-to-device copy, the HBM floor). */
  copyBytesPerSecond: number
  /** FLOP/s of our own GEMM on a large product (on a device: the bf16 tensor-core GEMM). */
  gemmFlopsPerSecond: number
  threads: number
  /** Where they were measured: the CPU's threads (default), or a CUDA device. */
  device?: { backend: 'cuda'; index: number }
}

export interface KernelRow extends KernelCounter {
  meanSeconds: number
  /** Share of the phase's wall time. */
  timeShare: number
  bytesPerSecond: number
  flopsPerSecond: number
  /** Time the floors allow (max of bytes/copy rate and FLOPs/GEMM rate) over the time taken, in %. */
  floorPercent: number
}

export interface PhaseProfile {
  phase: string
  /** What ran, in words (shape, tokens). */
  detail: string
  wallSeconds: number
  tokens: number
  kernels: KernelRow[]
  /** A training step's model FLOPs utilization (src/train/mfu.ts), null when the device's peak is not known. */
  mfu?: number | null
}

async function profiler(): Promise<NativeProfiler> {
  return (await nativeAddon()).profiler
}

/**
 * Measures the floors: a 256 MB copy (DRAM bandwidth) and a 512×2048×2048 GEMM on `threads`
 * threads. Kernels whose data stays in cache can pass 100% of the copy floor.
 */
export async function measureFloors(threads: number): Promise<Floors> {
  const p = await profiler()
  return { copyBytesPerSecond: p.measureCopy(256e6, threads), gemmFlopsPerSecond: p.measureGemm(512, 2048, 2048, threads), threads }
}

/** A CUDA device's floors, measured now: a 1 GiB device-to-device copy (HBM) and a bf16 8192³ GEMM (tensor cores). */
export async function measureDeviceFloors(index: number): Promise<Floors> {
  const f = (await profiler()).measureDeviceFloors('cuda', index)
  if (!f) throw new InvalidArgumentError('device', 'the cuda backend measured no floors')
  return { ...f, threads: 0, device: { backend: 'cuda', index } }
}

/** The better of two measurements of the same floors (a shared machine's share varies). */
export function betterFloors(a: Floors, b: Floors): Floors {
  return { ...a, copyBytesPerSecond: Math.max(a.copyBytesPerSecond, b.copyBytesPerSecond), gemmFlopsPerSecond: Math.max(a.gemmFlopsPerSecond, b.gemmFlopsPerSecond) }
}

/** Runs `work` with the counters on; returns its result, the counters it added and its wall time. */
export async function withProfile<T>(work: () => Promise<T>): Promise<{ result: T; counters: KernelCounter[]; wallSeconds: number }> {
  const p = await profiler()
  p.reset()
  p.enable(true)
  const started = process.hrtime.bigint()
  try {
    const result = await work()
    const wallSeconds = Number(process.hrtime.bigint() - started) / 1e9
    return { result, counters: p.snapshot(), wallSeconds }
  } finally {
    p.enable(false)
    p.reset()
  }
}

export function kernelRows(counters: KernelCounter[], floors: Floors, wallSeconds: number): KernelRow[] {
  return counters
    .map((c) => {
      const seconds = Math.max(c.seconds, 1e-12)
      // A row that counts no bytes or FLOPs (a scope around other scopes) has no floor.
      const floorSeconds = c.bytes > 0 || c.flops > 0 ? Math.max(c.bytes / floors.copyBytesPerSecond, c.flops / floors.gemmFlopsPerSecond) : NaN
      return {
        ...c,
        meanSeconds: c.seconds / c.calls,
        timeShare: c.seconds / wallSeconds,
        bytesPerSecond: c.bytes / seconds,
        flopsPerSecond: c.flops / seconds,
        floorPercent: (100 * floorSeconds) / seconds,
      }
    })
    .sort((x, y) => y.seconds - x.seconds)
}

export interface ProfileOptions {
  /** Prompt tokens per sequence (prefill and training). Default 128. */
  promptTokens?: number
  /** Sequences decoded together and trained together. Default 1. */
  batch?: number
  /** Decode steps profiled. Default 16. */
  decodeTokens?: number
  /** Also profile one SFT training step (forward + backward + AdamW). Default true. */
  train?: boolean
  seed?: number
}

function randomPrompts(model: Model, batch: number, length: number, seed: number): number[][] {
  let state = seed >>> 0 || 1
  const next = () => ((state = (Math.imul(state, 1664525) + 1013904223) >>> 0) / 2 ** 32)
  // Any ids will do for timing (stop tokens are off); the kernels' work does not depend on them.
  return Array.from({ length: batch }, () => Array.from({ length }, () => Math.floor(next() * model.config.vocabSize)))
}

function positive(name: string, v: number | undefined, fallback: number, max: number): number {
  const x = v ?? fallback
  if (!Number.isInteger(x) || x < 1 || x > max) throw new InvalidArgumentError(name, `${name} must be an integer in [1, ${max}], got ${v}`)
  return x
}

function greedyColumns(B: number, promptLength: number): NativeSamplingColumns {
  return {
    temperature: new Float32Array(B),
    topK: new Int32Array(B),
    topP: new Float32Array(B).fill(1),
    minP: new Float32Array(B),
    repetitionPenalty: new Float32Array(B).fill(1),
    presencePenalty: new Float32Array(B),
    frequencyPenalty: new Float32Array(B),
    seed: new Float64Array(B),
    stream: Float64Array.from({ length: B }, (_, i) => i),
    promptLength: new Int32Array(B).fill(promptLength),
  }
}

/** Greedy decoding straight on the native model, so prefill and decode steps are profiled apart. */
async function profileGeneration(model: Model, floors: Floors, prompts: number[][], D: number): Promise<PhaseProfile[]> {
  const native = model.handle
  const B = prompts.length
  const P = prompts[0].length
  const slots = Int32Array.from({ length: B }, (_, i) => i)
  const sampling = greedyColumns(B, P)
  const run = async (profileDecode: boolean) => {
    const cache = native.createCache(B, P + D + 1)
    try {
      const prefillStep = () => native.step(cache, { slots, counts: new Int32Array(B).fill(P), outModes: new Uint8Array(B).fill(1), tokens: Int32Array.from(prompts.flat()), sampling, topK: 0 })
      const prefill = profileDecode ? { result: await prefillStep(), counters: [], wallSeconds: 0 } : await withProfile(prefillStep)
      let tokens = prefill.result.tokens
      const decodeSteps = async () => {
        for (let d = 0; d < D; ++d) tokens = (await native.step(cache, { slots, counts: new Int32Array(B).fill(1), outModes: new Uint8Array(B).fill(1), tokens, sampling, topK: 0 })).tokens
      }
      return profileDecode ? await withProfile(decodeSteps) : prefill
    } finally {
      cache.dispose()
    }
  }
  await run(false) // warm-up: scratch buffers sized before timing
  const prefill = await run(false)
  const decode = await run(true)
  return [
    { phase: 'prefill', detail: `${B}×${P} prompt tokens and the first sampled token`, wallSeconds: prefill.wallSeconds, tokens: B * P, kernels: kernelRows(prefill.counters, floors, prefill.wallSeconds) },
    { phase: 'decode', detail: `${D} greedy steps of batch ${B} after a ${P}-token prompt`, wallSeconds: decode.wallSeconds, tokens: B * D, kernels: kernelRows(decode.counters, floors, decode.wallSeconds) },
  ]
}

/** Teacher-forced scoring of the sequences (score(): the prompts' prefill, then every completion row's statistics). */
async function profileScore(model: Model, floors: Floors, sequences: { prompt: number[]; completion: number[] }[]): Promise<PhaseProfile> {
  await model.score(sequences) // warm-up
  const scored = await withProfile(() => model.score(sequences))
  const tokens = sequences.reduce((a, s) => a + s.prompt.length + s.completion.length, 0)
  const P = sequences[0].prompt.length, C = sequences[0].completion.length
  return { phase: 'score', detail: `${sequences.length}×(${P} prompt + ${C} completion) tokens, per-token statistics`, wallSeconds: scored.wallSeconds, tokens, kernels: kernelRows(scored.counters, floors, scored.wallSeconds) }
}

/** Profiles a prefill, `decodeTokens` decode steps, a score() of the prompts and (optionally) one training step of `model`. */
export async function profileModel(model: Model, floors: Floors, options: ProfileOptions = {}): Promise<PhaseProfile[]> {
  const P = positive('promptTokens', options.promptTokens, 128, 32768)
  const B = positive('batch', options.batch, 1, 256)
  const D = positive('decodeTokens', options.decodeTokens, 16, 4096)
  const prompts = randomPrompts(model, B, P, options.seed ?? 1)
  const phases = await profileGeneration(model, floors, prompts, D)
  const half = Math.max(1, Math.floor(P / 2))
  const sequences = prompts.map((p) => ({ prompt: p.slice(0, half), completion: p.slice(half) }))
  if (P >= 2) phases.push(await profileScore(model, floors, sequences))
  if (options.train ?? true) {
    const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 0 }, microBatchSize: B, clipGradNorm: 0 })
    await trainer.step({ sequences }) // warm-up (gradient buffers, optimizer moments)
    const step = await withProfile(() => trainer.step({ sequences }))
    phases.push({ phase: 'train step', detail: `SFT forward + backward + AdamW on ${B}×${P} tokens (lr 0: weights unchanged)`, wallSeconds: step.wallSeconds, tokens: B * P, kernels: kernelRows(step.counters, floors, step.wallSeconds), mfu: step.result.mfu })
  }
  return phases
}

const num = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '–')

/** The profile as text tables, one per phase. */
export function formatProfile(phases: PhaseProfile[], floors: Floors): string {
  const lines = [
    floors.device
      ? `floors (${floors.device.backend} device ${floors.device.index}, measured now): HBM copy ${num(floors.copyBytesPerSecond / 1e9)} GB/s, bf16 tensor-core GEMM ${num(floors.gemmFlopsPerSecond / 1e12)} TFLOP/s`
      : `floors (${floors.threads} threads, measured now): copy ${num(floors.copyBytesPerSecond / 1e9)} GB/s, GEMM ${num(floors.gemmFlopsPerSecond / 1e9)} GFLOP/s`,
  ]
  for (const ph of phases) {
    const covered = ph.kernels.reduce((s, k) => s + k.seconds, 0)
    const mfu = typeof ph.mfu === 'number' ? `, MFU ${num(100 * ph.mfu)}%` : ''
    lines.push('', `${ph.phase}: ${ph.detail} — ${num(ph.wallSeconds * 1e3, 2)} ms wall, ${num(ph.tokens / ph.wallSeconds)} tok/s${mfu}, kernels cover ${num((100 * covered) / ph.wallSeconds)}%`)
    const header = ['kernel', 'calls', 'total ms', 'mean µs', '% wall', 'MB', 'GFLOP', 'GB/s', 'GFLOP/s', '% floor']
    const rows = ph.kernels.map((k) => [k.name, String(k.calls), num(k.seconds * 1e3, 2), num((k.meanSeconds * 1e6), 1), num(100 * k.timeShare), num(k.bytes / 1e6), num(k.flops / 1e9, 3), num(k.bytesPerSecond / 1e9), num(k.flopsPerSecond / 1e9), num(k.floorPercent)])
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
    const fmt = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ')
    lines.push(fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt))
  }
  return lines.join('\n')
}
