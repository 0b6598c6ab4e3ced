// `autodidact select [--world W] [--model DIR] [--benchmark NAME] [--size 100] [--calibration 50] [--n 8] …`:
// best-of-n selectors of UID §3 / A.1 (majority, SC, UID-Conj and their Borda variants) on nested
// pools of one benchmark of the world, calibration fitted on a disjoint unlabeled split (the world's
// training problems); prints the accuracy table, writes JSON where --out says.
import { InvalidArgumentError } from '../engine/errors.js'
import { loadModel } from '../engine/model.js'
import { EnginePolicy } from '../methods/common/policy.js'
import { DEFAULT_SELECTION, runSelection, type SelectionReport } from '../methods/solving/selection.js'
import { SELECTORS } from '../methods/solving/selectors.js'
import { loadWorld } from '../worlds/load.js'
import { deviceOption, parseArgs, weightsOption, writeOutOption, weightsUsage, WORLD_OPTIONS, WORLD_USAGE, worldSpecOption } from './args.js'
import { BUNDLED_MODEL as DEFAULT_MODEL } from '../toymodel/bundled.js'

export const SELECT_USAGE = `usage: autodidact select [--world W] [--model DIR] [--benchmark NAME] [--offset 0] [--size 100]
                         [--calibration 50] [--level 3] [--n 8] [--ns 2,4,8] [--temperature 0.7] [--top-p 0.95]
                         [--max-tokens 64] [--bins 8] [--min-tokens 8] [--seed 1] [--out FILE] [--threads N] [--device cpu|cuda]
                         [--weights f32|bf16|f16|int8|checkpoint]

${WORLD_USAGE}
  --benchmark NAME  the evaluated benchmark (default: the world's first)
  --level L         difficulty hint of the calibration problems (worlds with levels)
${weightsUsage(20)}`

function int(name: string, v: unknown, fallback: number, min: number): number {
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new InvalidArgumentError(name, `--${name} must be an integer ≥ ${min}`)
  return v
}

export function formatSelectionTable(r: SelectionReport): string {
  const t = r.table
  const head = `selector          ${t.ns.map((n) => `n=${n}`.padStart(8)).join('')}    mean`
  const rows = SELECTORS.map((s) => `${s.padEnd(18)}${t.accuracy[s].byN.map((a) => (100 * a).toFixed(1).padStart(8)).join('')}${(100 * t.accuracy[s].mean).toFixed(1).padStart(8)}`)
  return [`${t.prompts} prompts; accuracy % (eligible responses ${(100 * r.eligibleRate).toFixed(1)}%)`, head, ...rows].join('\n')
}

export async function selectCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, {
    ...WORLD_OPTIONS, model: 'string', benchmark: 'string', level: 'number', offset: 'number', size: 'number', calibration: 'number', n: 'number', ns: 'string',
    temperature: 'number', 'top-p': 'number', 'max-tokens': 'number', bins: 'number', 'min-tokens': 'number', seed: 'number', out: 'string', threads: 'number', device: 'string', weights: 'string', help: 'boolean',
  })
  if (options.help) {
    console.log(SELECT_USAGE)
    return 0
  }
  const d = DEFAULT_SELECTION
  const weights = weightsOption(options)
  const level = int('level', options.level, d.calibration.level, 1)
  const n = int('n', options.n, d.n, 1)
  const ns = options.ns === undefined ? d.ns.filter((x) => x <= n) : String(options.ns).split(',').map(Number)
  if (!ns.length || !ns.every((x) => Number.isInteger(x) && x >= 1 && x <= n)) throw new InvalidArgumentError('ns', `--ns takes pool sizes in 1..${n}, e.g. 2,4,8`)
  const bins = int('bins', options.bins, d.scoring.bins, 2)
  const o = {
    ...d,
    eval: { benchmark: options.benchmark === undefined ? d.eval.benchmark : String(options.benchmark), offset: int('offset', options.offset, d.eval.offset, 0), size: int('size', options.size, d.eval.size, 1) },
    calibration: { ...d.calibration, level, size: int('calibration', options.calibration, d.calibration.size, 1) },
    n,
    ns,
    temperature: (options.temperature as number | undefined) ?? d.temperature,
    topP: (options['top-p'] as number | undefined) ?? d.topP,
    maxTokens: int('max-tokens', options['max-tokens'], d.maxTokens, 1),
    seed: int('seed', options.seed, d.seed, 0),
    scoring: { ...d.scoring, bins, minTokens: int('min-tokens', options['min-tokens'], Math.max(bins, d.scoring.minTokens), bins) },
  }
  const world = await loadWorld(worldSpecOption(options))
  const model = await loadModel(String(options.model ?? DEFAULT_MODEL), { threads: options.threads as number | undefined, device: deviceOption(options) ?? 'cpu', weights })
  try {
    const report = await runSelection(new EnginePolicy(model), world, o)
    console.log(formatSelectionTable(report))
    await writeOutOption(options, report)
    return 0
  } finally {
    model.dispose()
  }
}
