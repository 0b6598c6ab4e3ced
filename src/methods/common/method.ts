// What `autodidact evolve --method NAME` needs of a method, and defineMethod, which turns a typed
// MethodSpec<Config, Record> into the registry's Method without a cast: the config and record
// types stay inside the closures that use them.
import { InvalidArgumentError } from '../../engine/errors.js'
import type { TaskWorld } from '../../worlds/types.js'
import type { OpenPolicy } from './policy.js'
import type { ReportSeries as Series } from '../../report/index.js'
import { configJsonSchema, resolveWith, type z } from './schema.js'
import { drive, type DriveOptions, type DriveResult } from './driver.js'
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from './run.js'

export type { BaseMethodConfig, BaseStepRecord, MethodRun } from './run.js'

export interface StartOptions {
  /** Model folder the run starts from. */
  model: string
  /** The task the run is on (src/worlds: the bundled toy world, the math world, a user's module). */
  world: TaskWorld
  /** The run folder: files a method builds for itself (a response pool, a Judge's initial head) go inside it. */
  outDir?: string
  threads?: number
  /** How policies are opened (default: the engine's openPolicy; tests pass a scripted fake). */
  openPolicy?: OpenPolicy
  /** Progress lines of slow set-up work (e.g. building an ensemble variant). */
  log?: (line: string) => void
}

export type ResumeOptions = Omit<StartOptions, 'model'>

export type FlagValues = Record<string, string | number | boolean | undefined>

export interface MethodSpec<C extends BaseMethodConfig, R extends BaseStepRecord> {
  name: string
  /** One line for `evolve --help`. */
  summary: string
  /** The config schema (built when called, so that enum choices come from the registries as they are). */
  schema(): z.ZodType<C>
  presets: Record<string, C>
  defaultPreset: string
  /** Rules that depend on the preset the override was merged onto (throw ConfigError). */
  check?(config: C, base: C, file: string): void
  start(config: C, options: StartOptions): Promise<MethodRun<C, R>>
  /** Resumes from a checkpoint folder written by run.checkpoint(). */
  resume(checkpointDir: string, options: ResumeOptions): Promise<MethodRun<C, R>>
  /** Charts of the report. */
  series: Series[]
  /** The progress line's summary of a step. */
  describe(record: R): string
  /** Extra command-line flags (name → type). */
  flags?: Record<string, 'string' | 'number' | 'boolean'>
  /** Maps method flags onto a config override (e.g. --beta 0 → { reward: { beta: 0 } }). */
  flagsToOverride?(flags: FlagValues): unknown
}

/** The driver options a session takes from its caller (the rest come from the method and its config). */
export type SessionDriveOptions = Pick<DriveOptions<BaseStepRecord>, 'outDir' | 'totalSteps' | 'progress' | 'stopRequested' | 'keep' | 'onEvent' | 'onCollapse' | 'collapseWindow' | 'collapseRule' | 'resumeCommand'> & {
  /** The run as the driver sees it (data parallelism: rank 0's run tells the other ranks each step, src/parallel/ranks.ts). */
  wrapRun?: <C extends BaseMethodConfig, R extends BaseStepRecord>(run: MethodRun<C, R>) => MethodRun<C, R>
}

/** A started or resumed run, its types erased. */
export interface Session {
  readonly config: BaseMethodConfig
  readonly step: number
  /** The run itself (the other ranks of a data-parallel run follow rank 0's steps on it, src/parallel/ranks.ts). */
  readonly run: MethodRun<BaseMethodConfig, BaseStepRecord>
  drive(options: SessionDriveOptions): Promise<DriveResult>
  dispose(): void
}

export interface ConfigureOptions {
  /** Preset name (default: the method's default). */
  preset?: string
  /** A config file's contents, and its name for messages. */
  override?: unknown
  file?: string
  flags?: FlagValues
  steps?: number
  seed?: number
  /** --frozen-weights (the config's frozenWeights). */
  frozenWeights?: string
}

/** A method as the registry holds it. */
export interface Method {
  readonly name: string
  readonly summary: string
  readonly presets: Readonly<Record<string, BaseMethodConfig>>
  readonly defaultPreset: string
  readonly series: readonly Series[]
  readonly flags?: Record<string, 'string' | 'number' | 'boolean'>
  flagsToOverride?(flags: FlagValues): unknown
  /** The progress line's summary of a step record as read back from metrics.jsonl. */
  describe(record: Record<string, unknown>): string
  /** The JSON Schema of a --config file (defaults: the preset's values). */
  configSchema(preset?: string): Record<string, unknown>
  /** The run config of a preset, a config file, flags, --steps, --seed and --frozen-weights; throws ConfigError. */
  configure(o: ConfigureOptions): { config: BaseMethodConfig; start(options: StartOptions): Promise<Session> }
  resume(checkpointDir: string, options: ResumeOptions): Promise<Session>
}

/** The registry's Method of a typed spec; the spec stays available, typed. */
export interface DefinedMethod<C extends BaseMethodConfig, R extends BaseStepRecord> extends Method {
  readonly spec: MethodSpec<C, R>
  readonly presets: Readonly<Record<string, C>>
  /** `override` deep-merged onto `base` and checked; throws ConfigError naming `file` and the field. */
  resolveConfig(override: unknown, base: C, file: string): C
}

export function defineMethod<C extends BaseMethodConfig, R extends BaseStepRecord>(spec: MethodSpec<C, R>): DefinedMethod<C, R> {
  const resolveConfig = (override: unknown, base: C, file: string): C => {
    const c = resolveWith(spec.schema(), base, override, file)
    spec.check?.(c, base, file)
    return c
  }
  const presetOf = (name = spec.defaultPreset): C => {
    const p = Object.hasOwn(spec.presets, name) ? spec.presets[name] : undefined
    if (!p) throw new InvalidArgumentError('preset', `unknown preset '${name}' for ${spec.name} (${Object.keys(spec.presets).join(' | ')})`)
    return p
  }
  const session = (run: MethodRun<C, R>): Session => ({
    get config() {
      return run.config
    },
    get step() {
      return run.step
    },
    run,
    drive: (o) =>
      drive(o.wrapRun ? o.wrapRun(run) : run, { ...o, method: spec.name, summary: spec.summary, evalEvery: run.config.eval.every, checkpointEvery: run.config.checkpointEvery, series: spec.series, describe: spec.describe }),
    dispose: () => run.dispose(),
  })
  return {
    spec,
    name: spec.name,
    summary: spec.summary,
    presets: spec.presets,
    defaultPreset: spec.defaultPreset,
    series: spec.series,
    flags: spec.flags,
    flagsToOverride: spec.flagsToOverride,
    // A record read back from metrics.jsonl is the JSON of an R the run wrote.
    describe: (record) => spec.describe(record as R),
    resolveConfig,
    configSchema: (preset) => configJsonSchema(spec.schema(), presetOf(preset)),
    configure(o) {
      let config = resolveConfig(o.override, presetOf(o.preset), o.file ?? '(preset)')
      const fromFlags = o.flags && spec.flagsToOverride?.(o.flags)
      if (fromFlags !== undefined) config = resolveConfig(fromFlags, config, 'command line')
      if (o.steps !== undefined) config = resolveConfig({ steps: o.steps }, config, '--steps')
      if (o.seed !== undefined) config = resolveConfig({ seed: o.seed }, config, '--seed')
      if (o.frozenWeights !== undefined) config = resolveConfig({ frozenWeights: o.frozenWeights }, config, '--frozen-weights')
      return { config, start: async (options) => session(await spec.start(config, options)) }
    },
    resume: async (dir, options) => session(await spec.resume(dir, options)),
  }
}
