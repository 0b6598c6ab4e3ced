// What `autodidact evolve --method NAME` needs from a method: its presets, a config resolver,
// how to start and resume a run, and the charts and progress line of its report. Each method
// exports one MethodSpec from src/methods/<name>/spec.ts; src/methods/index.ts lists them.
import type { MethodRun } from './driver.js'
import type { Series } from './report.js'

/** Every method config carries these (the driver's conventions). */
export interface BaseMethodConfig {
  seed: number
  steps: number
  eval: { every: number }
  checkpointEvery: number
}

export type StepRecord = { step: number; seconds: number; generatedTokens: number } & Record<string, unknown>

export interface MethodRunHandle extends MethodRun<StepRecord> {
  readonly config: BaseMethodConfig
  dispose(): void
}

export interface StartOptions {
  /** Model folder (default: the bundled model). */
  model: string
  threads?: number
  /** Method-specific extra folders or values from the command line (e.g. `judge` for J-Zero). */
  extra: Record<string, string | number | boolean | undefined>
}

export interface MethodSpec<C extends BaseMethodConfig = BaseMethodConfig> {
  name: string
  /** One line for `evolve --help`. */
  summary: string
  presets: Record<string, C>
  defaultPreset: string
  /** Validates and merges an override (from a file or flags) onto a base config; throws ConfigError. */
  resolveConfig(override: unknown, base: C, file: string): C
  start(config: C, options: StartOptions): Promise<MethodRunHandle>
  /** Resumes from a checkpoint folder written by run.checkpoint(). */
  resume(checkpointDir: string, options: Omit<StartOptions, 'model'>): Promise<MethodRunHandle>
  series: Series[]
  describe(record: Record<string, unknown>): string
  /** Extra command-line flags this method accepts (name → type), passed through in options.extra. */
  flags?: Record<string, 'string' | 'number' | 'boolean'>
  /** Maps method flags onto a config override (e.g. --beta 0 → { reward: { beta: 0 } }). */
  flagsToOverride?(flags: Record<string, string | number | boolean | undefined>): unknown
}
