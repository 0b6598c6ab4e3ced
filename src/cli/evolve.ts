// `autodidact evolve --method NAME [--model DIR] [--config FILE] [--out DIR] [--resume DIR] …`
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { drive, LATEST_FILE } from '../methods/common/driver.js'
import { readConfigFile } from '../methods/common/config.js'
import type { BaseMethodConfig, MethodRunHandle, MethodSpec } from '../methods/common/spec.js'
import { METHODS } from '../methods/index.js'
import { packageRoot } from '../native.js'
import { deviceOption, parseArgs, type OptionSpec } from './args.js'

export const DEFAULT_MODEL = join(packageRoot, 'models', 'arith-qwen3-tiny')

const COMMON_OPTIONS: OptionSpec = { method: 'string', model: 'string', config: 'string', preset: 'string', out: 'string', steps: 'number', seed: 'number', resume: 'string', threads: 'number', device: 'string', help: 'boolean' }

function usage(): string {
  const methods = Object.values(METHODS).map((m) => {
    const flags = Object.entries(m.flags ?? {}).map(([name, kind]) => `--${name}${kind === 'boolean' ? '' : ` ${kind.toUpperCase()}`}`)
    return `    ${m.name.padEnd(8)} ${m.summary}${flags.length ? `\n             method flags: ${flags.join(' ')}` : ''}\n             presets: ${Object.keys(m.presets).join(' | ')} (default ${m.defaultPreset})`
  })
  return `usage: autodidact evolve --method NAME [options]

  --method NAME     one of:
${methods.join('\n')}
  --model DIR       Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --config FILE     JSON config; keys as in src/methods/NAME/config.ts (unknown keys are errors)
  --preset NAME     the method's presets (toy is sized for the bundled model on 2 CPU cores)
  --out DIR         run folder: metrics.jsonl, checkpoints/, report.html (default runs/NAME-<time>)
  --steps N         override the number of steps (with --resume: run until step N)
  --seed N          override the seed
  --resume DIR      continue a run folder from its latest checkpoint (the method is read from it)
  --threads N       CPU threads for the engine
  --device cpu|cuda where every model of the run is loaded (default cpu; AUTODIDACT_DEVICE too).
                    On cuda: full fine-tuning only (COSE, R-Zero; TTRL with ppo.loraRank 0);
                    LoRA adapters (TTRL's and the offline methods' presets) and J-Zero's
                    score-head Judge need cpu in this version (a clear error says so)`
}

/** The --method value, read before full parsing because each method adds its own flags. */
function peekMethod(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--method') return argv[i + 1]
    if (argv[i].startsWith('--method=')) return argv[i].slice('--method='.length)
  }
  return undefined
}

function methodSpec(name: string): MethodSpec<BaseMethodConfig> {
  const spec = METHODS[name]
  if (!spec) throw new InvalidArgumentError('method', `unknown method '${name}'; available: ${Object.keys(METHODS).join(', ')}`)
  return spec
}

async function readLatest(outDir: string): Promise<{ method?: string; checkpoint: string }> {
  const latestFile = join(outDir, LATEST_FILE)
  if (!existsSync(latestFile)) throw new InvalidArgumentError('resume', `${outDir} has no ${LATEST_FILE}: not a run folder with a checkpoint`)
  return JSON.parse(await readFile(latestFile, 'utf8')) as { method?: string; checkpoint: string }
}

function resolveStartConfig(spec: MethodSpec<BaseMethodConfig>, options: Record<string, string | number | boolean>, fileConfig: unknown, methodFlags: Record<string, string | number | boolean | undefined>): BaseMethodConfig {
  const presetName = String(options.preset ?? spec.defaultPreset)
  const base = spec.presets[presetName]
  if (!base) throw new InvalidArgumentError('preset', `unknown preset '${presetName}' for ${spec.name} (${Object.keys(spec.presets).join(' | ')})`)
  let config = spec.resolveConfig(fileConfig, base, options.config ? String(options.config) : '(preset)')
  const flagOverride = spec.flagsToOverride?.(methodFlags)
  if (flagOverride !== undefined) config = spec.resolveConfig(flagOverride, config, 'command line')
  if (options.steps !== undefined) config = spec.resolveConfig({ steps: options.steps }, config, '--steps')
  if (options.seed !== undefined) config = spec.resolveConfig({ seed: options.seed }, config, '--seed')
  return config
}

export async function evolveCommand(argv: string[]): Promise<number> {
  const peeked = peekMethod(argv)
  const methodFlagSpec = peeked && METHODS[peeked] ? (METHODS[peeked].flags ?? {}) : {}
  const { options } = parseArgs(argv, { ...COMMON_OPTIONS, ...methodFlagSpec })
  if (options.help) {
    console.log(usage())
    return 0
  }
  const threads = options.threads as number | undefined
  const device = deviceOption(options)
  if (device) process.env.AUTODIDACT_DEVICE = device // every loadModel of the run without an explicit device
  const methodFlags = Object.fromEntries(Object.keys(methodFlagSpec).map((k) => [k, options[k]]))
  let spec: MethodSpec<BaseMethodConfig>
  let run: MethodRunHandle
  let outDir: string
  if (options.resume) {
    outDir = String(options.resume)
    const latest = await readLatest(outDir)
    spec = methodSpec(latest.method ?? 'cose')
    if (options.method && options.method !== spec.name) throw new InvalidArgumentError('method', `${outDir} is a ${spec.name} run, not ${options.method}`)
    run = await spec.resume(latest.checkpoint, { threads, extra: methodFlags })
  } else {
    spec = methodSpec(String(options.method ?? 'cose'))
    const fileConfig = options.config ? await readConfigFile(String(options.config)) : undefined
    const config = resolveStartConfig(spec, options, fileConfig, methodFlags)
    outDir = String(options.out ?? join('runs', `${spec.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`))
    run = await spec.start(config, { model: String(options.model ?? DEFAULT_MODEL), threads, extra: methodFlags })
  }
  let stop = false
  const onSigint = () => {
    if (stop) process.exit(130)
    stop = true
    process.stderr.write(`\n[${spec.name}] Ctrl-C: finishing this step, then checkpointing (Ctrl-C again to abort)\n`)
  }
  process.on('SIGINT', onSigint)
  try {
    const c = run.config
    const result = await drive(run, {
      outDir,
      method: spec.name,
      // On resume, --steps extends (or shortens) the run; a fresh run has it in its config already.
      totalSteps: (options.steps as number | undefined) ?? c.steps,
      evalEvery: c.eval.every,
      checkpointEvery: c.checkpointEvery,
      series: spec.series,
      describe: spec.describe,
      progress: (line) => process.stderr.write(`\r${line.padEnd(120)}`),
      stopRequested: () => stop,
    })
    process.stderr.write('\n')
    const fmt = (x: number | null) => (x === null ? '–' : x.toFixed(2))
    console.log(`held-out accuracy ${fmt(result.accuracyBefore)} → ${fmt(result.accuracyAfter)}; ${result.stepsRun} steps in ${result.seconds.toFixed(0)} s; report: ${join(outDir, 'report.html')}`)
    return result.stoppedEarly ? 130 : 0
  } finally {
    process.off('SIGINT', onSigint)
    run.dispose()
  }
}
