// `autodidact evolve --method NAME [--world W] [--model DIR] [--config FILE] [--out DIR] [--resume DIR] …`
import { join, resolve } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { DEFAULT_KEEP, readLatest } from '../methods/common/run-folder.js'
import type { Method, Session } from '../methods/common/method.js'
import { readConfigFile } from '../methods/common/schema.js'
import { METHODS, methodNamed } from '../methods/index.js'
import { BUNDLED_MODEL } from '../toymodel/bundled.js'
import { checkpointWorldSpec, loadWorld } from '../worlds/load.js'
import { deviceOption, hasWorldOptions, parseArgs, WORLD_OPTIONS, WORLD_USAGE, worldSpecOption, type OptionSpec } from './args.js'

/** The model an evolve run starts from unless --model says otherwise. */
export { BUNDLED_MODEL as DEFAULT_MODEL }

const COMMON_OPTIONS: OptionSpec = {
  method: 'string', model: 'string', config: 'string', 'config-schema': 'boolean', preset: 'string', out: 'string', steps: 'number', seed: 'number',
  resume: 'string', keep: 'number', threads: 'number', device: 'string', help: 'boolean', ...WORLD_OPTIONS,
}

function usage(): string {
  const methods = Object.values(METHODS).map((m) => {
    const flags = Object.entries(m.flags ?? {}).map(([name, kind]) => `--${name}${kind === 'boolean' ? '' : ` ${kind.toUpperCase()}`}`)
    return `    ${m.name.padEnd(8)} ${m.summary}${flags.length ? `\n             method flags: ${flags.join(' ')}` : ''}\n             presets: ${Object.keys(m.presets).join(' | ')} (default ${m.defaultPreset})`
  })
  return `usage: autodidact evolve --method NAME [options]

  --method NAME     one of:
${methods.join('\n')}
${WORLD_USAGE}
  --model DIR       Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --config FILE     JSON config overriding the preset (unknown keys are errors)
  --config-schema   print the JSON Schema of --config files for the method (and --preset), then exit
  --preset NAME     the method's presets (toy is sized for the bundled model on 2 CPU cores)
  --out DIR         run folder: metrics.jsonl, checkpoints/, report.html (default runs/NAME-<time>)
  --steps N         override the number of steps (with --resume: run until step N)
  --seed N          override the seed
  --resume DIR      continue a run folder from its latest checkpoint (the method and the world are read from it)
  --keep N          checkpoints kept in the run folder (default ${DEFAULT_KEEP}; the latest is never removed)
  --threads N       CPU threads for the engine
  --device cpu|cuda where every model of the run is loaded (default cpu; AUTODIDACT_DEVICE too).
                    On cuda every method runs: full fine-tuning, LoRA adapters (TTRL's and
                    the offline methods' presets) and J-Zero's score-head Judge; a run that
                    would not fit the device's memory is refused at once with the numbers
                    ('autodidact profile --estimate' plans it beforehand)`
}

/** The --method value, read before full parsing because each method adds its own flags. */
function peekMethod(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--method') return argv[i + 1]
    if (argv[i].startsWith('--method=')) return argv[i].slice('--method='.length)
  }
  return undefined
}

function methodOf(name: string): Method {
  const m = methodNamed(name)
  if (!m) throw new InvalidArgumentError('method', `unknown method '${name}'; available: ${Object.keys(METHODS).join(', ')}`)
  return m
}

function positiveInt(name: string, v: unknown): number | undefined {
  if (v === undefined) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new InvalidArgumentError(name, `--${name} must be an integer ≥ 1`)
  return v
}

export async function evolveCommand(argv: string[]): Promise<number> {
  const peeked = peekMethod(argv)
  const methodFlagSpec = (peeked && methodNamed(peeked)?.flags) || {}
  const { options } = parseArgs(argv, { ...COMMON_OPTIONS, ...methodFlagSpec })
  if (options.help) {
    console.log(usage())
    return 0
  }
  if (options['config-schema']) {
    console.log(JSON.stringify(methodOf(String(options.method ?? 'cose')).configSchema(options.preset === undefined ? undefined : String(options.preset)), null, 2))
    return 0
  }
  const threads = options.threads as number | undefined
  const keep = positiveInt('keep', options.keep)
  const device = deviceOption(options)
  if (device) process.env.AUTODIDACT_DEVICE = device // every model of the run without an explicit device
  const flags = Object.fromEntries(Object.keys(methodFlagSpec).map((k) => [k, options[k]]))
  const log = (line: string) => process.stderr.write(line + '\n')
  let method: Method
  let session: Session
  let outDir: string
  if (options.resume) {
    outDir = resolve(String(options.resume))
    const latest = await readLatest(outDir, (name) => methodNamed(name) !== undefined)
    method = methodOf(latest.method)
    if (options.method && options.method !== method.name) throw new InvalidArgumentError('method', `${outDir} is a ${method.name} run, not ${options.method}`)
    // the checkpoint's world unless the command line names one (then the checkpoint must be on it)
    const spec = hasWorldOptions(options) ? worldSpecOption(options) : ((await checkpointWorldSpec(latest.checkpoint)) ?? { world: 'arith' })
    session = await method.resume(latest.checkpoint, { world: await loadWorld(spec), outDir, threads, log })
  } else {
    method = methodOf(String(options.method ?? 'cose'))
    const file = options.config ? String(options.config) : undefined
    const configured = method.configure({
      preset: options.preset === undefined ? undefined : String(options.preset),
      override: file ? await readConfigFile(file) : undefined,
      file,
      flags,
      steps: options.steps as number | undefined,
      seed: options.seed as number | undefined,
    })
    outDir = resolve(String(options.out ?? join('runs', `${method.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`)))
    const world = await loadWorld(worldSpecOption(options))
    session = await configured.start({ model: resolve(String(options.model ?? BUNDLED_MODEL)), world, outDir, threads, log })
  }
  let stop = false
  const onSigint = () => {
    if (stop) process.exit(130)
    stop = true
    process.stderr.write(`\n[${method.name}] Ctrl-C: finishing this step, then checkpointing (Ctrl-C again to abort)\n`)
  }
  process.on('SIGINT', onSigint)
  try {
    const result = await session.drive({
      outDir,
      // On resume, --steps extends (or shortens) the run; a fresh run has it in its config already.
      totalSteps: (options.steps as number | undefined) ?? session.config.steps,
      keep,
      progress: (line) => process.stderr.write(`\r${line.padEnd(120)}`),
      stopRequested: () => stop,
    })
    process.stderr.write('\n')
    const fmt = (x: number | null) => (x === null ? '–' : x.toFixed(2))
    console.log(`held-out accuracy ${fmt(result.accuracyBefore)} → ${fmt(result.accuracyAfter)}; ${result.stepsRun} steps in ${result.seconds.toFixed(0)} s; report: ${join(outDir, 'report.html')}`)
    return result.stoppedEarly ? 130 : 0
  } finally {
    process.off('SIGINT', onSigint)
    session.dispose()
  }
}
