// `autodidact export --format gguf|onnx --model DIR --out PATH [--dtype f32|f16|q8_0]`: write a model
// folder for other runtimes. gguf: one file for llama.cpp / Ollama / node-llama-cpp
// (src/export/gguf.ts). onnx: a folder for onnxruntime / transformers.js (src/export/onnx.ts).

import { InvalidArgumentError } from '../engine/errors.js'
import { removeLiveTempsSync } from '../util/atomic.js'
import { signalExitCode } from '../util/signals.js'
import { exportGguf } from '../export/gguf.js'
import { exportOnnx } from '../export/onnx.js'
import { parseArgs } from './args.js'

export const EXPORT_USAGE = `usage: autodidact export --format gguf|onnx --model DIR --out PATH [--dtype f32|f16|q8_0]

  --format gguf   one GGUF v3 file (PATH) that llama.cpp, Ollama and node-llama-cpp load
  --format onnx   an ONNX causal-LM folder (PATH) for onnxruntime and transformers.js
  --dtype         f32 (default), f16, or (gguf only) q8_0 for the weight matrices: llama.cpp's 8-bit
                  blocks of 32 with an f16 scale, f16 for a matrix whose rows are not whole blocks;
                  norms and biases stay f32 in GGUF`

export async function exportCommand(argv: string[]): Promise<number> {
  const { options, positional } = parseArgs(argv, { format: 'string', model: 'string', out: 'string', dtype: 'string', help: 'boolean' })
  if (options.help) {
    console.log(EXPORT_USAGE)
    return 0
  }
  if (positional.length > 0) throw new InvalidArgumentError(null, `unexpected argument '${positional[0]}'\n${EXPORT_USAGE}`)
  const format = options.format
  const model = options.model
  const out = options.out
  const dtype = String(options.dtype ?? 'f32')
  if (format !== 'gguf' && format !== 'onnx') throw new InvalidArgumentError('format', `--format must be gguf or onnx, got ${format === undefined ? 'nothing' : `'${String(format)}'`}\n${EXPORT_USAGE}`)
  if (typeof model !== 'string') throw new InvalidArgumentError('model', `--model DIR is required\n${EXPORT_USAGE}`)
  if (typeof out !== 'string') throw new InvalidArgumentError('out', `--out PATH is required\n${EXPORT_USAGE}`)
  if (dtype !== 'f32' && dtype !== 'f16' && dtype !== 'q8_0') throw new InvalidArgumentError('dtype', `--dtype must be f32, f16 or q8_0, got '${dtype}'`)
  return withTempCleanupOnSignals(() => runExport(format, model, out, dtype))
}

const STOP_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']

/** Runs `work`; a signal meanwhile removes the temporaries being written (no hidden file is left) and exits 128 + signal. */
async function withTempCleanupOnSignals<T>(work: () => Promise<T>): Promise<T> {
  const stop = (signal: NodeJS.Signals) => {
    removeLiveTempsSync()
    process.stderr.write(`autodidact export: ${signal}: stopped; the partial output was removed\n`)
    process.exit(signalExitCode(signal))
  }
  for (const s of STOP_SIGNALS) process.on(s, stop)
  try {
    return await work()
  } finally {
    for (const s of STOP_SIGNALS) process.off(s, stop)
  }
}

async function runExport(format: 'gguf' | 'onnx', model: string, out: string, dtype: 'f32' | 'f16' | 'q8_0'): Promise<number> {
  if (format === 'gguf') {
    const r = await exportGguf(model, out, { dtype })
    console.log(`wrote ${out}: ${r.tensors} tensors, ${(r.bytes / 2 ** 20).toFixed(1)} MiB, ${dtype}, ${r.seconds.toFixed(1)} s`)
    return 0
  }
  // onnx (src/export/onnx.ts, issue 12): PATH is a folder
  if (dtype === 'q8_0') throw new InvalidArgumentError('dtype', '--dtype q8_0 is a GGUF type; --format onnx writes f32 or f16')
  const r = await exportOnnx(model, out, { dtype })
  console.log(`wrote ${out}/: ${r.files.length} files, ${(r.bytes / 2 ** 20).toFixed(1)} MiB, ${dtype}, ${r.seconds.toFixed(1)} s`)
  return 0
}
