// `autodidact eval [--world W] [--model DIR] …`: a model measured on a world's held-out sets.
//   --world arith (default): the toy evaluation of the model card — Solver accuracy by difficulty
//     (greedy and mean@k) with bootstrap intervals, Validator and Judge agreement with the verifier
//     and the AUROC of their confidence (src/toymodel/eval.ts).
//   any other world (math, arith-chat, a module): accuracy on each of its benchmarks under a protocol
//     (greedy, or mean@k of k samples), as the methods evaluate; the record `autodidact compare`
//     reads (e.g. a base model against a run).
// Prints a table; writes JSON only where --out says (nothing is written otherwise).
import { InvalidArgumentError } from '../engine/errors.js'
import { loadModel, type Model } from '../engine/model.js'
import { benchmarkAccuracy, evaluateBenchmarks, greedyProtocol, selectBenchmarks, type EvalRecord } from '../methods/common/evaluation.js'
import { evaluateToyModel, formatToyEvalTable } from '../toymodel/eval.js'
import { loadWorld } from '../worlds/load.js'
import type { TaskWorld } from '../worlds/types.js'
import { deviceOption, parseArgs, weightsOption, writeOutOption, weightsUsage, WORLD_OPTIONS, WORLD_USAGE, worldSpecOption } from './args.js'
import { BUNDLED_MODEL as DEFAULT_MODEL } from '../toymodel/bundled.js'

export const EVAL_USAGE = `usage: autodidact eval [--world arith] [--model DIR] [--levels 1,2,3,4,5] [--size 100] [--k 8] [--seed 1] [--out FILE] [--threads N] [--device cpu|cuda]
                       [--weights f32|bf16|f16|int8|checkpoint]
       autodidact eval --world math|MODULE [--data FILE] [--benchmarks A.jsonl,B.jsonl] [--model DIR] [--size N] [--k 1]
                       [--temperature 0.6] [--max-tokens 1024] [--seed 7] [--out FILE]

${WORLD_USAGE}
  --levels, --size, --k, --seed   (arith) levels, questions per level, samples for mean@k, sampling seed
  --size N          (other worlds) the first N problems of each benchmark (default: all)
  --k N             (other worlds) samples per problem: 1 = greedy (default), else mean@k at --temperature
  --out FILE        write the report (arith) or the eval record (other worlds) as JSON
${weightsUsage(20)}`

function int(name: string, v: unknown, min: number): number | undefined {
  if (v === undefined) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new InvalidArgumentError(name, `--${name} must be an integer ≥ ${min}`)
  return v
}

/** A world's benchmarks evaluated with its solver prompt (greedy, or mean@k): the record `compare` reads. */
async function evaluateWorld(model: Model, world: TaskWorld, options: Record<string, string | number | boolean>): Promise<EvalRecord> {
  const k = int('k', options.k, 1) ?? 1
  const maxTokens = int('max-tokens', options['max-tokens'], 1) ?? 1024
  const temperature = (options.temperature as number | undefined) ?? 0.6
  const protocol = k === 1 && options.temperature === undefined ? greedyProtocol(maxTokens) : { samples: k, temperature, topP: 0.95, maxTokens, seed: int('seed', options.seed, 0) ?? 7 }
  const benchmarks = selectBenchmarks(world, [], int('size', options.size, 1) ?? Number.MAX_SAFE_INTEGER, '--benchmarks')
  return evaluateBenchmarks(model, benchmarks, { prompt: (q) => world.solve.solverPrompt(q), verifier: world.verifier }, protocol, 0)
}

export async function evalCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, { ...WORLD_OPTIONS, model: 'string', levels: 'string', size: 'number', k: 'number', seed: 'number', temperature: 'number', 'max-tokens': 'number', out: 'string', threads: 'number', device: 'string', weights: 'string', help: 'boolean' })
  if (options.help) {
    console.log(EVAL_USAGE)
    return 0
  }
  const spec = worldSpecOption(options)
  const weights = weightsOption(options)
  const toy = spec.world === 'arith' && spec.benchmarks === undefined
  const levels = options.levels === undefined ? undefined : String(options.levels).split(',').map(Number)
  if (levels && !toy) throw new InvalidArgumentError('levels', '--levels is the arith toy evaluation\'s; other worlds evaluate on their --benchmarks')
  if (levels && !levels.every((l) => Number.isInteger(l) && l >= 1 && l <= 5)) throw new InvalidArgumentError('levels', '--levels takes a comma-separated list of levels 1..5')
  const world = toy ? null : await loadWorld(spec)
  const model = await loadModel(String(options.model ?? DEFAULT_MODEL), { threads: options.threads as number | undefined, device: deviceOption(options) ?? 'cpu', weights })
  try {
    let report: unknown
    if (world === null) {
      const r = await evaluateToyModel(model, { levels, size: options.size as number | undefined, k: options.k as number | undefined, seed: options.seed as number | undefined, log: (line) => process.stderr.write(line + '\n') })
      console.log(formatToyEvalTable(r))
      report = r
    } else {
      const r = await evaluateWorld(model, world, options)
      const w = Math.max(9, ...r.benchmarks.map((b) => b.name.length))
      console.log(`world ${world.name}; ${r.protocol.samples === 1 && r.protocol.temperature === 0 ? 'greedy' : `mean@${r.protocol.samples} at T = ${r.protocol.temperature}`}`)
      console.log(`${'benchmark'.padEnd(w)}  problems  accuracy %`)
      for (const b of r.benchmarks) console.log(`${b.name.padEnd(w)}  ${String(b.items.length).padStart(8)}  ${(100 * benchmarkAccuracy(b)).toFixed(2).padStart(10)}`)
      report = r
    }
    await writeOutOption(options, report)
    return 0
  } finally {
    model.dispose()
  }
}
