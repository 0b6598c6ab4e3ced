// `autodidact eval --world arith [--model DIR] [--levels 1,2,3] [--size N] [--k N] [--out FILE]`:
// held-out Solver accuracy (greedy and mean@k) by difficulty with bootstrap intervals, Validator
// and Judge agreement with the verifier and the AUROC of their confidence; prints a table, writes JSON.
import { writeJsonAtomic } from '../util/atomic.js'
import { InvalidArgumentError } from '../engine/errors.js'
import { loadModel } from '../engine/model.js'
import { evaluateToyModel, formatToyEvalTable } from '../toymodel/eval.js'
import { deviceOption, parseArgs } from './args.js'
import { BUNDLED_MODEL as DEFAULT_MODEL } from '../toymodel/bundled.js'

export const EVAL_USAGE = `usage: autodidact eval --world arith [--model DIR] [--levels 1,2,3,4,5] [--size 100] [--k 8] [--seed 1] [--out FILE] [--threads N] [--device cpu|cuda]`

export async function evalCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, { world: 'string', model: 'string', levels: 'string', size: 'number', k: 'number', seed: 'number', out: 'string', threads: 'number', device: 'string', help: 'boolean' })
  if (options.help) {
    console.log(EVAL_USAGE)
    return 0
  }
  const world = String(options.world ?? 'arith')
  if (world !== 'arith') throw new InvalidArgumentError('world', `unknown world '${world}' (available: arith)`)
  const levels = options.levels === undefined ? undefined : String(options.levels).split(',').map(Number)
  if (levels && !levels.every((l) => Number.isInteger(l) && l >= 1 && l <= 5)) throw new InvalidArgumentError('levels', '--levels takes a comma-separated list of levels 1..5')
  const model = await loadModel(String(options.model ?? DEFAULT_MODEL), { threads: options.threads as number | undefined, device: deviceOption(options) ?? 'cpu' })
  try {
    const report = await evaluateToyModel(model, {
      levels,
      size: options.size as number | undefined,
      k: options.k as number | undefined,
      seed: options.seed as number | undefined,
      log: (line) => process.stderr.write(line + '\n'),
    })
    console.log(formatToyEvalTable(report))
    const out = String(options.out ?? 'eval.json')
    await writeJsonAtomic(out, report, 2)
    console.log(`wrote ${out}`)
    return 0
  } finally {
    model.dispose()
  }
}
