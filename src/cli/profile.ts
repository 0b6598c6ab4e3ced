// `autodidact profile [--model DIR] …`: the per-kernel table of a prefill, decode steps and a training step.
import { loadModel } from '../engine/model.js'
import { formatProfile, kernelRows, measureFloors, profileModel } from '../engine/profiler.js'
import { DEFAULT_MODEL } from './evolve.js'
import { deviceOption, parseArgs } from './args.js'
import { availableParallelism } from 'node:os'

export const PROFILE_USAGE = `usage: autodidact profile [--model DIR] [options]

  --model DIR           Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --prompt-tokens N     tokens per sequence for prefill and training (default 128)
  --batch B             sequences per prefill, decode step and training step (default 1)
  --decode-tokens D     decode steps profiled (default 16)
  --threads N           CPU threads (default: all cores)
  --device cpu|cuda     where the model runs (default cpu). On cuda the rows are the device time
                        of each phase of the step (CUDA events: 'cuda:fwd.attention', …), with no
                        byte or FLOP counts; what the rows leave of the wall time is host time.
  --no-train            skip the training step
  --json                print the profile as JSON

Each kernel row: calls, total and mean time, bytes moved and FLOPs (counted from the shapes),
achieved GB/s and GFLOP/s, and % floor = the time the measured floors allow (copy bandwidth for
bytes, our best GEMM rate for FLOPs, both measured in the same run) over the time taken.`

export async function profileCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, { model: 'string', 'prompt-tokens': 'number', batch: 'number', 'decode-tokens': 'number', threads: 'number', device: 'string', 'no-train': 'boolean', json: 'boolean', help: 'boolean' })
  if (options.help) {
    console.log(PROFILE_USAGE)
    return 0
  }
  const threads = (options.threads as number | undefined) ?? availableParallelism()
  const modelDir = String(options.model ?? DEFAULT_MODEL)
  const device = deviceOption(options) ?? 'cpu'
  const model = await loadModel(modelDir, { threads, device })
  try {
    // Floors measured before and after the phases; the better of each is kept (this machine may be shared).
    const before = await measureFloors(threads)
    const phases = await profileModel(model, before, {
      promptTokens: options['prompt-tokens'] as number | undefined,
      batch: options.batch as number | undefined,
      decodeTokens: options['decode-tokens'] as number | undefined,
      train: !options['no-train'],
    })
    const after = await measureFloors(threads)
    const floors = { threads, copyBytesPerSecond: Math.max(before.copyBytesPerSecond, after.copyBytesPerSecond), gemmFlopsPerSecond: Math.max(before.gemmFlopsPerSecond, after.gemmFlopsPerSecond) }
    for (const ph of phases) ph.kernels = kernelRows(ph.kernels, floors, ph.wallSeconds)
    if (options.json) console.log(JSON.stringify({ model: modelDir, device, floors, phases }, null, 2))
    else console.log(`model ${modelDir} on ${device}\n${formatProfile(phases, floors)}`)
    return 0
  } finally {
    model.dispose()
  }
}
