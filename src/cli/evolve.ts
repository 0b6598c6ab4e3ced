// `autodidact evolve --method NAME [--world W] [--model DIR] [--config FILE] [--out DIR] [--resume DIR] …`
import { join, resolve } from 'node:path'
import { ConfigError, InvalidArgumentError } from '../engine/errors.js'
import { defaultDevice, type Device } from '../engine/options.js'
import { COLLAPSE_ACTIONS, COLLAPSE_RULES, DEFAULT_COLLAPSE_WINDOW, type CollapseAction, type CollapseRule } from '../methods/common/collapse.js'
import type { DriveResult } from '../methods/common/driver.js'
import { DEFAULT_KEEP, readLatest } from '../methods/common/run-folder.js'
import type { BaseMethodConfig, Method, Session } from '../methods/common/method.js'
import { readConfigFile } from '../methods/common/schema.js'
import { METHODS, methodNamed } from '../methods/index.js'
import { formatSignalHelp, shellQuote } from '../report/index.js'
import { BUNDLED_MODEL } from '../toymodel/bundled.js'
import { checkpointWorldSpec, loadWorld } from '../worlds/load.js'
import { deviceOption, hasWorldOptions, parseArgs, WORLD_OPTIONS, WORLD_USAGE, worldSpecOption, type OptionSpec } from './args.js'
import { Progress, progressMode } from './progress.js'
import { isNativeError } from '../native.js'
import { endRun, followRun, leaderRun, openRank, RANK_ENV, type RankContext } from '../parallel/ranks.js'
import { launchGpuRanks, launchRanks, ParallelLaunchError, stopWithLauncher, type GpuLaunchOptions } from '../parallel/launcher.js'
import { parseRendezvous } from '../parallel/rendezvous.js'

/** The model an evolve run starts from unless --model says otherwise. */
export { BUNDLED_MODEL as DEFAULT_MODEL }

/** Data parallelism's flags (--rank-child is internal: the launcher gives it to the ranks it starts). */
const PARALLEL_OPTIONS: OptionSpec = { ranks: 'number', gpus: 'number', nodes: 'number', 'node-rank': 'number', rendezvous: 'string', 'collective-timeout': 'number', 'check-weights-every': 'number', 'rank-child': 'boolean' }

const COMMON_OPTIONS: OptionSpec = {
  method: 'string', model: 'string', config: 'string', 'config-schema': 'boolean', preset: 'string', out: 'string', steps: 'number', seed: 'number',
  resume: 'string', keep: 'number', threads: 'number', device: 'string', 'frozen-weights': 'string', help: 'boolean', json: 'boolean', 'on-collapse': 'string', 'collapse-window': 'number', 'collapse-rule': 'string',
  ...WORLD_OPTIONS,
  ...PARALLEL_OPTIONS,
}

function usage(method?: string): string {
  const methods = Object.values(METHODS).map((m) => {
    const flags = Object.entries(m.flags ?? {}).map(([name, kind]) => `--${name}${kind === 'boolean' ? '' : ` ${kind.toUpperCase()}`}`)
    return `    ${m.name.padEnd(8)} ${m.summary}${flags.length ? `\n             method flags: ${flags.join(' ')}` : ''}\n             presets: ${Object.keys(m.presets).join(' | ')} (default ${m.defaultPreset})`
  })
  return `usage: autodidact evolve --method NAME [options]

  --method NAME     one of:
${methods.join('\n')}
${WORLD_USAGE}
  --model DIR       Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --config FILE     JSON config overriding the preset (unknown keys are errors); every field with
                    its type, range and default: \`autodidact config --schema METHOD [--preset P]\`
                    (a JSON Schema, e.g. for an editor's "$schema"; the README's "Configuring a run")
  --config-schema   the same JSON Schema for --method (and --preset), then exit
  --preset NAME     the method's presets (toy is sized for the bundled model on 2 CPU cores)
  --out DIR         run folder: metrics.jsonl, checkpoints/, report.html (default runs/NAME-<time>)
  --steps N         override the number of steps (with --resume: run until step N)
  --seed N          override the seed
  --resume DIR      continue a run folder from its latest checkpoint (the method and the world are read from it)
  --keep N          checkpoints kept in the run folder (default ${DEFAULT_KEEP}; the latest is never removed)
  --threads N       CPU threads for the engine
  --frozen-weights f32|bf16|int8   how the run's frozen models keep their weights in memory
                    (the config's frozenWeights): the KL reference copy of full fine-tuning,
                    R-Zero's second ensemble model, a frozen J-Zero Judge folder (--frozen-judge)
                    and the offline methods' pool scorer. f32 (default) keeps the run's numbers; bf16
                    halves their bytes, int8 (Q8_0-style) takes about a quarter. CPU only: with
                    --device cuda anything but f32 is refused (the CUDA backend keeps f32).
                    A resumed run keeps its checkpoint's value (--resume refuses the flag)
  --device cpu|cuda where every model of the run is loaded (default cpu; AUTODIDACT_DEVICE too).
                    On cuda every method runs: full fine-tuning, LoRA adapters (TTRL's and
                    the offline methods' presets) and J-Zero's score-head Judge; a run that
                    would not fit the device's memory is refused at once with the numbers
                    ('autodidact profile --estimate' plans it beforehand)
  --ranks N         data parallelism on the CPU: N processes (started through OpenMPI's mpirun),
                    each sampling its share of every step's prompts and training its share of
                    the sequences; gradients are summed before each optimizer step, so a step
                    is the 1-rank step on the same global batch. Rank 0 writes the run folder;
                    a checkpoint resumes with any N. Needs openmpi-bin (libmpi.so.40, or
                    AUTODIDACT_MPI=path). A rank that dies stops the run with an error naming it
  --collective-timeout S   seconds any collective operation may wait for the other ranks
                    (default 600): a stuck or dead rank fails the run within it
  --check-weights-every K  debug: every K optimizer steps, all ranks' weights hashes must agree
  --gpus N          one process per GPU over NCCL (libnccl.so.2 from the CUDA install or
                    PyTorch's nvidia-nccl wheel, or AUTODIDACT_NCCL=path; \`autodidact doctor\`):
                    the command starts them, each with its rank and CUDA_VISIBLE_DEVICES set to
                    its GPU; rank 0 hands NCCL's unique id to the others over a TCP rendezvous.
                    Runs on --device cuda. Today only --gpus 1 runs (one rank, through the same
                    collective path): past one GPU the CUDA engine cannot yet all-reduce its
                    gradients, and the run is refused. The README's "More than one GPU"
  --nodes M --node-rank R --rendezvous HOST:PORT   several machines: run the same command on
                    each, R = 0 … M−1; HOST:PORT is node 0's address, where rank 0 listens
  --json            one JSON object per event on stdout (phase, step, collapse, log, result);
                    otherwise a progress line on stderr (updated in place on a terminal, one
                    line per step when stderr is a file or a pipe)
  --on-collapse warn|stop|rollback   the collapse guard (default warn): over the last
                    --collapse-window evaluations (default ${DEFAULT_COLLAPSE_WINDOW}) held-out accuracy fell by more
                    than 1.96 standard errors while the training reward's slope rose more than
                    1.96 of its own (both beyond sampling noise). warn says so on the
                    progress line and in the report; stop ends the run there; rollback ends it
                    and makes the best held-out checkpoint the final model (and what --resume
                    continues from). The best evaluated checkpoint is never pruned by --keep.
  --collapse-rule falls   the guard fires on the held-out fall alone, whatever the reward
                    does (default falls-while-reward-rises): a self-rewarded run whose reward
                    falls with held-out accuracy is failing too (J-Zero's, in the README)

Ctrl-C finishes the step, checkpoints it, writes the report and prints the --resume command;
a second Ctrl-C exits at once (checkpoints are written atomically: the last complete one stays).

The progress line (and report.html) — what the abbreviations mean:
${formatSignalHelp(method && methodNamed(method) ? method : undefined)}`
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
  try {
    return await evolve(argv)
  } catch (e) {
    // a rank's error names the rank (the launcher's own error then says how the run ended)
    const rank = process.env.OMPI_COMM_WORLD_RANK ?? process.env[RANK_ENV.rank]
    if (argv.includes('--rank-child') && rank !== undefined && e instanceof Error) e.message = `rank ${rank}: ${isNativeError(e) ? `[${e.code}] ` : ''}${e.message}`
    throw e
  }
}

async function evolve(argv: string[]): Promise<number> {
  const peeked = peekMethod(argv)
  const methodFlagSpec = (peeked && methodNamed(peeked)?.flags) || {}
  const { options } = parseArgs(argv, { ...COMMON_OPTIONS, ...methodFlagSpec })
  if (options.help) {
    console.log(usage(peeked))
    return 0
  }
  if (options['config-schema']) {
    console.log(JSON.stringify(methodOf(String(options.method ?? 'cose')).configSchema(options.preset === undefined ? undefined : String(options.preset)), null, 2))
    return 0
  }
  const ranks = positiveInt('ranks', options.ranks) ?? 1
  const collectiveTimeout = options['collective-timeout'] === undefined ? undefined : positiveNumber('collective-timeout', options['collective-timeout'])
  const checkWeightsEvery = positiveInt('check-weights-every', options['check-weights-every'])
  const gpuLaunch = gpuLaunchOptions(options)
  if (gpuLaunch && !options['rank-child']) {
    if (options.ranks !== undefined) throw new InvalidArgumentError('ranks', '--ranks N (CPU processes over MPI) and --gpus N (one process per GPU over NCCL) are two ways to run: choose one')
    refuseUnbuiltGpuWorld(gpuLaunch.gpus * (gpuLaunch.nodes ?? 1))
    return await launchGpuRanks({
      ...gpuLaunch,
      args: rankArgs(argv, options),
      timeoutMs: collectiveTimeout === undefined ? undefined : Math.round(collectiveTimeout * 1000),
      checkWeightsEvery,
    })
  }
  if (ranks > 1 && !options['rank-child']) {
    return await launchRanks({
      ranks,
      args: rankArgs(argv, options),
      timeoutMs: collectiveTimeout === undefined ? undefined : Math.round(collectiveTimeout * 1000),
      checkWeightsEvery,
    })
  }
  if (options['rank-child']) stopWithLauncher(process.env[RANK_ENV.rank] ?? process.env.OMPI_COMM_WORLD_RANK ?? '?')
  const rank: RankContext | null = options['rank-child'] ? await openRank() : null
  const follower = rank !== null && rank.collective.rank !== 0
  const threads = options.threads as number | undefined
  const keep = positiveInt('keep', options.keep)
  const device = deviceOption(options)
  if (device) process.env.AUTODIDACT_DEVICE = device // every model of the run without an explicit device
  const flags = Object.fromEntries(Object.keys(methodFlagSpec).map((k) => [k, options[k]]))
  const onCollapse = choiceOption<CollapseAction>('on-collapse', COLLAPSE_ACTIONS, options['on-collapse'])
  const collapseWindow = options['collapse-window'] === undefined ? undefined : collapseWindowOption(options['collapse-window'])
  const collapseRule = choiceOption<CollapseRule>('collapse-rule', COLLAPSE_RULES, options['collapse-rule'])
  const json = options.json === true
  const mode = progressMode(json, process.stderr)
  // the method is known once the run folder or --method is read; until then progress is labelled with what was asked
  // ranks other than 0 show nothing (rank 0's output is the run's); their errors still reach stderr
  const err = follower ? SILENT : process.stderr
  const out = follower ? SILENT : STDOUT
  let progress = new Progress(mode, String(options.method ?? (options.resume ? 'resume' : 'cose')), err, out)
  const log = (line: string) => progress.log(line)
  let method: Method
  let session: Session
  let outDir: string
  if (options.resume) {
    if (options['frozen-weights'] !== undefined)
      throw new InvalidArgumentError('frozen-weights', '--frozen-weights starts a run: a resumed run keeps the frozenWeights of its checkpoint\'s config')
    outDir = resolve(String(options.resume))
    const latest = await readLatest(outDir, (name) => methodNamed(name) !== undefined)
    method = methodOf(latest.method)
    if (options.method && options.method !== method.name) throw new InvalidArgumentError('method', `${outDir} is a ${method.name} run, not ${options.method}`)
    progress = new Progress(mode, method.name, err, out)
    progress.setup(`loading the step-${latest.step} checkpoint of ${outDir}`)
    // the checkpoint's world unless the command line names one (then the checkpoint must be on it)
    const spec = hasWorldOptions(options) ? worldSpecOption(options) : ((await checkpointWorldSpec(latest.checkpoint)) ?? { world: 'arith' })
    session = await method.resume(latest.checkpoint, { world: await loadWorld(spec), outDir, threads, log, openPolicy: rank?.openPolicy })
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
      frozenWeights: options['frozen-weights'] === undefined ? undefined : String(options['frozen-weights']),
    })
    checkFrozenWeightsDevice(configured.config, device ?? defaultDevice(), file ?? '(preset)')
    outDir = options.out === undefined ? defaultOutDir(method.name) : resolve(String(options.out))
    progress = new Progress(mode, method.name, err, out)
    progress.setup(`loading the world and the model ${String(options.model ?? BUNDLED_MODEL)}`)
    const world = await loadWorld(worldSpecOption(options))
    session = await configured.start({ model: resolve(String(options.model ?? BUNDLED_MODEL)), world, outDir, threads, log, openPolicy: rank?.openPolicy })
  }
  // On resume, --steps extends (or shortens) the run; a fresh run has it in its config already.
  const totalSteps = (options.steps as number | undefined) ?? session.config.steps
  const resumeCommand = [
    'autodidact evolve --resume', shellQuote(outDir),
    ...(totalSteps !== session.config.steps ? [`--steps ${totalSteps}`] : []),
    ...(device ? [`--device ${device}`] : []),
    ...(threads !== undefined ? [`--threads ${threads}`] : []),
  ].join(' ')
  let stop = false
  const onSigint = () => {
    if (stop) process.exit(130) // checkpoints are renamed into place whole: the last complete one stays
    stop = true
    progress.message(`[${method.name}] Ctrl-C: finishing this step, then checkpointing and writing the report (Ctrl-C again to exit at once)`)
  }
  process.on('SIGINT', onSigint)
  try {
    if (follower) {
      await followRun(session.run, rank.collective)
      await rank.collective.close()
      return 0
    }
    const result = await session.drive({
      outDir,
      totalSteps,
      keep,
      onEvent: (e) => progress.event(e),
      stopRequested: () => stop,
      onCollapse,
      collapseWindow,
      collapseRule,
      resumeCommand,
      ...(rank ? { wrapRun: (run) => leaderRun(run, rank.collective) } : {}),
    })
    if (rank) {
      await endRun(rank.collective)
      await rank.collective.close()
    }
    progress.result({ ...resultFields(result), outDir, ...(result.stopReason === 'requested' ? { resumeCommand } : {}) }, resultLines(result, resumeCommand))
    return result.stopReason === 'requested' ? 130 : 0
  } finally {
    progress.close()
    process.off('SIGINT', onSigint)
    session.dispose()
  }
}

/** The CUDA backend keeps f32 weights: a run whose frozen models would be kept below f32 there is refused before anything loads. */
function checkFrozenWeightsDevice(config: BaseMethodConfig, device: Device, file: string): void {
  const weights = config.frozenWeights ?? 'f32'
  if (device === 'cuda' && weights !== 'f32')
    throw new ConfigError(file, 'frozenWeights', `${file}: frozenWeights: '${weights}' is kept in memory by the CPU backend only; on --device cuda frozen models keep f32 (leave frozenWeights out, or 'f32')`)
}

/** The output of a rank other than 0. */
const SILENT = { write: () => true }

/** --gpus N [--nodes M --node-rank R --rendezvous HOST:PORT], checked; null without --gpus. */
function gpuLaunchOptions(options: Record<string, string | number | boolean>): Pick<GpuLaunchOptions, 'gpus' | 'nodes' | 'nodeRank' | 'rendezvous'> | null {
  const gpus = positiveInt('gpus', options.gpus)
  const nodes = positiveInt('nodes', options.nodes)
  const nodeRank = options['node-rank'] === undefined ? undefined : nonNegativeInt('node-rank', options['node-rank'])
  const rendezvous = options.rendezvous === undefined ? undefined : String(options.rendezvous)
  if (gpus === undefined) {
    if (nodes !== undefined || nodeRank !== undefined || rendezvous !== undefined) throw new InvalidArgumentError('gpus', '--nodes, --node-rank and --rendezvous go with --gpus N')
    return null
  }
  const device = options.device ?? (process.env.AUTODIDACT_DEVICE || undefined)
  if (device !== undefined && device !== 'cuda') throw new InvalidArgumentError('device', `--gpus N runs every rank on its GPU (--device cuda), not --device ${String(device)}; --ranks N runs on the CPU`)
  if (rendezvous !== undefined) parseRendezvous(rendezvous)
  if ((nodes ?? 1) > 1 && (rendezvous === undefined || nodeRank === undefined))
    throw new InvalidArgumentError('nodes', `--nodes ${nodes} needs --node-rank R (0 … ${nodes! - 1}; node 0 hosts rank 0) and --rendezvous HOST:PORT (node 0's address, the same on every node)`)
  if (nodeRank !== undefined && nodeRank >= (nodes ?? 1)) throw new InvalidArgumentError('node-rank', `--node-rank ${nodeRank} is not a node of ${nodes ?? 1} (0 … ${(nodes ?? 1) - 1})`)
  return { gpus, nodes, nodeRank, rendezvous }
}

/**
 * Past one GPU a step needs its gradients summed over the ranks on the device, and the CUDA
 * plugin's C ABI does not hand out its gradient buffers yet (CudaEngine::do_reduce_gradients):
 * such a run would sample its first step and then fail, so it is refused before any rank starts.
 */
function refuseUnbuiltGpuWorld(worldSize: number): void {
  if (worldSize > 1)
    throw new ParallelLaunchError(
      `--gpus/--nodes for ${worldSize} GPUs: the CUDA engine cannot all-reduce its gradients across ranks yet (the CUDA plugin does not expose its gradient buffers to NCCL), so a ${worldSize}-GPU run is refused; --gpus 1 runs one rank through the NCCL collective, --ranks N runs data parallelism on the CPU`,
    )
}

function nonNegativeInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new InvalidArgumentError(name, `--${name} must be an integer ≥ 0`)
  return v
}

/** The evolve arguments every rank runs: the launcher's own flags removed, and a fixed run folder (each rank's clock would name its own). */
function rankArgs(argv: readonly string[], options: Record<string, string | number | boolean>): string[] {
  const launcherOnly = new Set(['ranks', 'gpus', 'nodes', 'node-rank', 'rendezvous', 'collective-timeout', 'check-weights-every'])
  const args: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].startsWith('--') ? argv[i].slice(2).split('=')[0] : null
    if (name !== null && launcherOnly.has(name)) {
      if (!argv[i].includes('=')) i++ // its value
      continue
    }
    args.push(argv[i])
  }
  if (!options.resume && options.out === undefined) args.push('--out', defaultOutDir(String(options.method ?? 'cose')))
  if (options.gpus !== undefined && options.device === undefined) args.push('--device', 'cuda') // each rank on its one GPU
  return args
}

function defaultOutDir(method: string): string {
  return resolve(join('runs', `${method}-${new Date().toISOString().replace(/[:.]/g, '-')}`))
}

function positiveNumber(name: string, v: unknown): number {
  if (typeof v !== 'number' || !(v > 0)) throw new InvalidArgumentError(name, `--${name} must be a number > 0`)
  return v
}

/** Stdout through console.log, line by line (what code embedding evolveCommand captures). */
const STDOUT = { write: (text: string) => text.split('\n').slice(0, -1).forEach((line) => console.log(line)) }

/** `--name`'s value, one of `choices` (undefined when not given); anything else is a typed error listing them. */
function choiceOption<T extends string>(name: string, choices: readonly T[], v: unknown): T | undefined {
  if (v === undefined) return undefined
  if (!(choices as readonly unknown[]).includes(v)) throw new InvalidArgumentError(name, `--${name} must be ${choices.slice(0, -1).join(', ')} or ${choices.at(-1)}; got '${String(v)}'`)
  return v as T
}

function collapseWindowOption(v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 2) throw new InvalidArgumentError('collapse-window', `--collapse-window must be an integer ≥ 2, got ${String(v)}`)
  return v
}

function resultFields(r: DriveResult): object {
  const { stepsRun, stoppedEarly, stopReason, accuracyBefore, accuracyAfter, seconds, rolledBackTo, checkpoint, trainedModel, report, collapse } = r
  return { stepsRun, stoppedEarly, stopReason, accuracyBefore, accuracyAfter, seconds, rolledBackTo, checkpoint, trainedModel, report, collapse }
}

function resultLines(r: DriveResult, resumeCommand: string): string[] {
  const fmt = (x: number | null) => (x === null ? '–' : x.toFixed(3))
  return [
    `held-out accuracy ${fmt(r.accuracyBefore)} → ${fmt(r.accuracyAfter)}; ${r.stepsRun} steps in ${r.seconds.toFixed(0)} s; report: ${r.report}`,
    ...(r.trainedModel ? [`trained model${r.rolledBackTo !== null ? ` (rolled back to step ${r.rolledBackTo})` : ''}: ${r.trainedModel.dir}${r.trainedModel.kind === 'adapter' ? ' (a LoRA adapter over the base model)' : ''}`] : []),
    ...(r.stopReason === 'collapse' ? [`stopped by the collapse guard: ${r.collapse!.message}`] : []),
    ...(r.stopReason === 'requested' ? [`resume with: ${resumeCommand}`] : []),
  ]
}
