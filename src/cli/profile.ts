// `autodidact profile [--model DIR] …`: the per-kernel table of a prefill, decode steps and a training step.
import { loadModel, type Model } from '../engine/model.js'
import { readModelConfig } from '../engine/hf/folder.js'
import { formatMemoryPlan, trainingMemoryPlan } from '../engine/memory-plan.js'
import { nativeAddon, type NativeAddon } from '../native.js'
import { betterFloors, formatProfile, kernelRows, measureDeviceFloors, measureFloors, profileModel } from '../engine/profiler.js'
import { DEFAULT_MODEL } from './evolve.js'
import { deviceOption, parseArgs, weightsOption, weightsUsage } from './args.js'
import { availableParallelism } from 'node:os'

export const PROFILE_USAGE = `usage: autodidact profile [--model DIR] [options]

The per-kernel table of a prefill, decode steps, a score() and a training step.

  --model DIR           Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --prompt-tokens N     tokens per sequence for prefill and training (default 128)
  --batch B             sequences per prefill, decode step and training step (default 1)
  --decode-tokens D     decode steps profiled (default 16)
  --threads N           CPU threads (default: all cores)
  --device cpu|cuda     where the model runs (default cpu). On cuda one row per kernel launch site
                        ('cuda:fwd.attention', 'cuda:bwd.qkv_proj', …): device time from CUDA events
                        around it, bytes and FLOPs from its shapes, against the device's floors
                        measured in the same run (HBM: a 1 GiB device copy; tensor cores: a bf16
                        8192³ GEMM); what the rows leave of the wall time is host time. Without a
                        usable GPU: an error naming why (no plugin, no driver, no device).
${weightsUsage(24)};
                        a model kept below f32 is frozen, so its profile has no training step
  --no-train            skip the training step
  --json                print the profile as JSON

  --estimate            do not run: print the memory plan of one training step on the CUDA
                        backend (peak device bytes: weights, master weights, gradients, AdamW
                        moments, activations, LM-head chunks, KV cache), from config.json alone,
                        for --batch B sequences of --seq N tokens (default 8 × 1024), and the
                        free memory of the device when one is here
  --seq N               tokens per sequence of the estimate
  --lora R              the estimate trains LoRA adapters of rank R (base frozen)
  --checkpointing       the estimate keeps only each layer's input (gradient checkpointing)

Each kernel row: calls, total and mean time, bytes moved and FLOPs (counted from the shapes),
achieved GB/s and GFLOP/s, and % floor = the time the measured floors allow (copy bandwidth for
bytes, our best GEMM rate for FLOPs, both measured in the same run) over the time taken. The
training step's line gives its MFU (its matmul FLOPs over the device's peak).`

export async function profileCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, {
    model: 'string', 'prompt-tokens': 'number', batch: 'number', 'decode-tokens': 'number', threads: 'number', device: 'string', weights: 'string',
    'no-train': 'boolean', json: 'boolean', help: 'boolean', estimate: 'boolean', seq: 'number', lora: 'number', checkpointing: 'boolean',
  })
  if (options.help) {
    console.log(PROFILE_USAGE)
    return 0
  }
  if (options.estimate) return estimateCommand(options)
  const threads = (options.threads as number | undefined) ?? availableParallelism()
  const modelDir = String(options.model ?? DEFAULT_MODEL)
  const device = deviceOption(options) ?? 'cpu'
  const weights = weightsOption(options)
  const addon = await nativeAddon()
  if (device === 'cuda') addon.resetDevicePeak('cuda')
  const model = await loadModel(modelDir, { threads, device, weights })
  try {
    // Floors measured before and after the phases; the better of each is kept (this machine may be shared).
    const index = model.handle.describe().deviceIndex ?? 0
    const floorsNow = () => (device === 'cuda' ? measureDeviceFloors(index) : measureFloors(threads))
    const before = await floorsNow()
    const phases = await profileModel(model, before, {
      promptTokens: options['prompt-tokens'] as number | undefined,
      batch: options.batch as number | undefined,
      decodeTokens: options['decode-tokens'] as number | undefined,
      train: !options['no-train'] && (weights === undefined || weights === 'f32'),
    })
    const floors = betterFloors(before, await floorsNow())
    for (const ph of phases) ph.kernels = kernelRows(ph.kernels, floors, ph.wallSeconds)
    const memory = device === 'cuda' ? measuredMemory(addon, model, options) : null
    if (options.json) console.log(JSON.stringify({ model: modelDir, device, weights: weights ?? 'f32', floors, phases, memory }, null, 2))
    else {
      console.log(`model ${modelDir} on ${device}, weights ${weights ?? 'f32'}\n${formatProfile(phases, floors)}`)
      if (memory)
        console.log(`peak device memory: ${gib(memory.peakAllocatedBytes)} held by this process's device arrays at most` +
          (memory.plannedPeakBytes === null ? '' : `; the memory plan of its training step: ${gib(memory.plannedPeakBytes)}`) +
          `; ${gib(memory.freeBytes)} of ${gib(memory.totalBytes)} free now`)
    }
    return 0
  } finally {
    model.dispose()
  }
}

// `profile --estimate`: the memory plan of a training step, and whether it fits the device here.
async function estimateCommand(options: Record<string, string | number | boolean>): Promise<number> {
  const modelDir = String(options.model ?? DEFAULT_MODEL)
  const { config, head } = await readModelConfig(modelDir)
  const shape = { batch: Number(options.batch ?? 8), sequenceLength: Number(options.seq ?? 1024) }
  const plan = trainingMemoryPlan(config, shape, {
    lora: options.lora === undefined ? null : { rank: Number(options.lora) },
    gradientCheckpointing: options.checkpointing === true,
    scoreLabels: head.kind === 'sequence-classification' ? head.numLabels : 0,
  })
  let free: number | undefined
  try {
    free = (await nativeAddon()).deviceMemory('cuda', 0)?.free
  } catch {
    free = undefined // no addon: the estimate stands alone
  }
  if (options.json) {
    console.log(JSON.stringify({ model: modelDir, shape, ...plan, freeBytes: free ?? null, fits: free === undefined ? null : plan.peakBytes <= free }, null, 2))
    return 0
  }
  const training = options.lora === undefined ? 'full fine-tuning' : `LoRA rank ${options.lora}`
  console.log(`memory plan of one training step on cuda: ${modelDir}, ${training}${options.checkpointing ? ', gradient checkpointing' : ''}, ${shape.batch} × ${shape.sequenceLength} tokens`)
  console.log(formatMemoryPlan(plan, free))
  if (free === undefined) console.log('  (no CUDA device here: free memory not known)')
  return 0
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`
}

// The device's peak since the load (every array the model, its caches and its trainer allocated)
// beside the memory plan of the profiled training step (profileModel's SFT step: B × P tokens, the
// second half of each the completion).
function measuredMemory(addon: NativeAddon, model: Model, options: Record<string, string | number | boolean>) {
  const m = addon.deviceMemory('cuda', model.handle.describe().deviceIndex ?? 0)
  if (!m) return null
  const P = Number(options['prompt-tokens'] ?? 128), B = Number(options.batch ?? 1)
  const planned = options['no-train'] || P < 2 ? null : trainingMemoryPlan(model.config, { batch: B, sequenceLength: P, completionLength: P - Math.floor(P / 2) }).peakBytes
  return { peakAllocatedBytes: m.peakAllocated, allocatedBytes: m.allocated, freeBytes: m.free, totalBytes: m.total, plannedPeakBytes: planned }
}
