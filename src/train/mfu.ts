// Model FLOPs utilization (MFU, PaLM App. B; llm.c prints it per step): the FLOPs a training
// step's real shapes need, over what the device could do in the step's time at its peak.
//
// FLOPs of one step, counted as what it computes (model FLOPs: no recompute — gradient
// checkpointing or LoRA's x·Aᵀ again in backward — is counted):
//   linears     2·N·T forward, 2·N·T for dx, 2·N·T for dW when the base trains
//               (6·N·T in full fine-tuning, 4·N·T with a frozen base), N = the layers' matmul
//               weights (q, k, v, o, gate, up, down), T = tokens fed
//   LoRA        2·r·(in + out)·T per adapted linear forward, as much for its share of dx, and
//               as much for dA and dB when the adapters train (6·r·(in + out)·T; 4· frozen)
//   attention   12·layers·heads·headDim·P, P = Σ len·(len + 1)/2 causal (query, key) pairs:
//               Q·Kᵀ and P·V forward (4·hd each pair), twice that backward (dQ, dK, dV, dP)
//   head        2·W·H·R forward, 2·W·H·R for dx, 2·W·H·R for dW when the base trains; R = rows
//               the head computes (completion tokens; one per sequence for a score head), W =
//               the vocabulary or the score labels
//   reference   its forward over the same tokens (KL, DPO): 2·N·T + 4·layers·heads·hd·P + 2·V·H·R
// Norms, RoPE, SwiGLU, softmax and the optimizer are not matmuls and are not counted.
import type { ModelConfig } from '../engine/types.js'
import { nativeAddon } from '../native.js'

export interface TrainingStepShape {
  /** Tokens each sequence feeds the model (its forward rows). */
  lengths: readonly number[]
  /** Rows the head computes: completion tokens (LM head), or one per sequence (score head). */
  headRows: number
  /** Outputs of the head per row: the vocabulary, or the score head's labels. */
  headWidth: number
  /** The base weights receive gradients (full fine-tuning); false with LoRA (frozen base). */
  trainBase: boolean
  /** Adapters attached to the linears `targets`: trained (LoRA), or frozen beside a training base. */
  lora: { rank: number; targets: readonly string[]; trained: boolean } | null
  /** A reference forward over the same tokens (the KL term, DPO). */
  referenceForward?: boolean
}

/** (in, out) features of each linear of a layer, by PEFT target name. */
export function linearShapes(c: ModelConfig): Record<string, [number, number]> {
  const q = c.numHeads * c.headDim, kv = c.numKvHeads * c.headDim
  return {
    q_proj: [c.hiddenSize, q],
    k_proj: [c.hiddenSize, kv],
    v_proj: [c.hiddenSize, kv],
    o_proj: [q, c.hiddenSize],
    gate_proj: [c.hiddenSize, c.intermediateSize],
    up_proj: [c.hiddenSize, c.intermediateSize],
    down_proj: [c.intermediateSize, c.hiddenSize],
  }
}

/** The matmul weights of the decoder layers (N of 6·N·T; the embedding and head excluded). */
export function layerMatmulParameters(c: ModelConfig): number {
  return c.numLayers * Object.values(linearShapes(c)).reduce((s, [i, o]) => s + i * o, 0)
}

/** Forward + backward FLOPs of one training micro-batch of these shapes (the formula above). */
export function trainingStepFlops(c: ModelConfig, s: TrainingStepShape): number {
  const T = s.lengths.reduce((a, n) => a + n, 0)
  const pairs = s.lengths.reduce((a, n) => a + (n * (n + 1)) / 2, 0)
  const N = layerMatmulParameters(c)
  const passes = s.trainBase ? 3 : 2 // forward, dx, and dW when the base trains
  let flops = passes * 2 * N * T
  flops += 12 * c.numLayers * c.numHeads * c.headDim * pairs
  flops += passes * 2 * s.headWidth * c.hiddenSize * s.headRows
  if (s.lora) {
    const shapes = linearShapes(c)
    const lora = s.lora
    const perToken = lora.trained ? 6 : 4
    for (const t of lora.targets) flops += c.numLayers * perToken * lora.rank * (shapes[t][0] + shapes[t][1]) * T
  }
  if (s.referenceForward) flops += 2 * N * T + 4 * c.numLayers * c.numHeads * c.headDim * pairs + 2 * c.vocabSize * c.hiddenSize * s.headRows
  return flops
}

/**
 * Dense bf16 tensor-core peaks (FLOP/s, no sparsity) of the parts we know, by compute capability
 * and SM count, from NVIDIA's datasheets: A100 (SXM and PCIe, 108 SMs) 312 TFLOP/s; H100 SXM5 and
 * H200 SXM (132 SMs) 989.4 TFLOP/s (the datasheets' 1,979 is with sparsity); H100 PCIe (114 SMs)
 * 756 TFLOP/s; L40S (142 SMs) 362 TFLOP/s; A10 (72 SMs) 125 TFLOP/s.
 */
const KNOWN_PEAKS: Record<string, number> = {
  '8.0/108': 312e12,
  '9.0/132': 989.4e12,
  '9.0/114': 756e12,
  '8.9/142': 362e12,
  '8.6/72': 125e12,
}

/**
 * Other parts: dense bf16 FLOP/s per SM at the family's boost clock, from the same datasheets
 * (A100 312e12 / 108; H100 SXM 989.4e12 / 132; GA10x A10 125e12 / 72; AD10x L40S 362e12 / 142).
 */
const PER_SM_PEAK: Record<string, number> = { '8.0': 312e12 / 108, '9.0': 989.4e12 / 132, '8.6': 125e12 / 72, '8.7': 125e12 / 72, '8.9': 362e12 / 142 }

/** The dense bf16 peak of a CUDA device, or null for a compute capability the tables do not hold. */
export function cudaBf16Peak(computeCapability: string, multiprocessors: number): number | null {
  const known = KNOWN_PEAKS[`${computeCapability}/${multiprocessors}`]
  if (known) return known
  const perSm = PER_SM_PEAK[computeCapability]
  return perSm ? perSm * multiprocessors : null
}

const cpuPeaks = new Map<number, number>()

/** The FMA peak of `threads` CPU threads (a register-only FMA loop on each, native/cpu/gemm_peak.cpp), measured once per process. */
export async function cpuFmaPeak(threads: number): Promise<number> {
  const cached = cpuPeaks.get(threads)
  if (cached !== undefined) return cached
  const perThread = (await nativeAddon()).gemm.fmaPeak(threads, 1 << 22)
  const peak = perThread.reduce((a, x) => a + x, 0)
  cpuPeaks.set(threads, peak)
  return peak
}

/** The peak FLOP/s MFU is taken against for a model: its threads' FMA peak, or its device's bf16 peak. */
export async function peakFlopsOf(describe: { backend: string; threads: number; deviceIndex?: number }): Promise<number | null> {
  if (describe.backend === 'cpu') return cpuFmaPeak(Math.max(1, describe.threads))
  const device = (await nativeAddon()).info().cuda.devices.find((d) => d.index === (describe.deviceIndex ?? 0))
  return device ? cudaBf16Peak(device.computeCapability, device.multiprocessors) : null
}

/** MFU of `flops` done in `seconds` against `peak` FLOP/s (null when the peak is not known). */
export function mfuOf(flops: number, seconds: number, peak: number | null): number | null {
  return peak && seconds > 0 ? flops / (seconds * peak) : null
}

/**
 * Every trainer's steps in this process, summed: the FLOPs done and the FLOPs their devices could
 * have done in the same time (seconds × peak). A run's driver reads it around each of its steps,
 * whatever trainers the method keeps.
 */
export const trainingMeter = {
  flops: 0,
  peakFlops: 0,
  add(flops: number, seconds: number, peak: number | null): void {
    if (!peak || !(seconds > 0)) return
    this.flops += flops
    this.peakFlops += seconds * peak
  },
  /** The MFU of the steps since `since` (a copy of the meter taken before them), or null when none ran. */
  since(since: { flops: number; peakFlops: number }): number | null {
    const done = this.peakFlops - since.peakFlops
    return done > 0 ? (this.flops - since.flops) / done : null
  },
  snapshot(): { flops: number; peakFlops: number } {
    return { flops: this.flops, peakFlops: this.peakFlops }
  },
}
