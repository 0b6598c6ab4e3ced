#!/usr/bin/env node
// The `autodidact` command.
import { AutodidactError } from '../engine/errors.js'
import { configCommand } from './config.js'
import { doctorReport, formatDoctor } from './doctor.js'
import { evalCommand } from './eval.js'
import { evolveCommand } from './evolve.js'
import { exportCommand } from './export.js'
import { compareCommand } from './compare.js'
import { profileCommand } from './profile.js'
import { rebuildCommand } from './rebuild.js'
import { selectCommand } from './select.js'
import { serveCommand } from './serve.js'

const USAGE = `usage: autodidact <command> [options]

commands:
  doctor [--json]     version, compiled backends, CPU threads and SIMD level, CUDA devices or why none
  evolve --method NAME  self-evolution (cose, ttrl, dpo, wsft, rzero, jzero) or verifier-rewarded grpo on the bundled toy model or --model DIR; --help
  config --schema METHOD [--preset P]  the JSON Schema of evolve --config files for a method
  eval --world arith    held-out accuracy by difficulty (greedy, mean@k, bootstrap), Validator/Judge agreement and AUROC
  serve [--model DIR] [--port N]  OpenAI-compatible HTTP server over one model (/v1/completions, /v1/chat/completions, /v1/models, /health)
  export --format gguf|onnx --model DIR --out PATH [--dtype f32|f16]  a GGUF file for llama.cpp / Ollama, or an ONNX folder for onnxruntime / transformers.js
  select [--model DIR]  best-of-n selectors of UID A.1 (majority, SC, UID-Conj, Borda) on nested pools n ∈ {2, 4, 8}
  compare RUN_A RUN_B   per-benchmark accuracy, macro average, paired prompt-cluster bootstrap of the difference (UID D.4)
  profile [--model DIR] per-kernel table (time, bytes, FLOPs, GB/s, GFLOP/s, % of measured floor) of prefill, decode, training
  rebuild [--cuda auto|on|off]  rebuilds the native addon in the installed package (npx autodidact rebuild); --help
  help                this text`

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'doctor': {
      const report = await doctorReport()
      console.log(rest.includes('--json') ? JSON.stringify(report, null, 2) : formatDoctor(report))
      return report.native ? 0 : 1
    }
    case 'evolve':
      return evolveCommand(rest)
    case 'eval':
      return evalCommand(rest)
    case 'config':
      return configCommand(rest)
    case 'profile':
      return profileCommand(rest)
    case 'serve':
      return serveCommand(rest)
    case 'export':
      return exportCommand(rest)
    case 'select':
      return selectCommand(rest)
    case 'compare':
      return compareCommand(rest)
    case 'rebuild': return rebuildCommand(rest)
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE)
      return command === undefined ? 1 : 0
    default:
      console.error(`autodidact: unknown command '${command}'\n\n${USAGE}`)
      return 2
  }
}

main(process.argv.slice(2)).then(
  (code) => (process.exitCode = code),
  (error: Error) => {
    console.error(`autodidact: ${error.message}`)
    process.exitCode = error instanceof AutodidactError ? 2 : 1
  },
)
