// The shape of a method's run, as the driver sees it.
import type { FrozenWeights } from '../../engine/options.js'

/** Every method config carries these (the driver's conventions). */
export interface BaseMethodConfig {
  seed: number
  steps: number
  eval: { every: number }
  checkpointEvery: number
  /** How the run's frozen models keep their weights in memory (default 'f32'). */
  frozenWeights?: FrozenWeights
}

/** What the driver reads of every metrics line. */
export interface BaseStepRecord {
  step: number
  seconds: number
  generatedTokens: number
  /** Set by the driver on evaluated steps. */
  heldOutAccuracy?: number
  /** Set by the driver on steps that trained: model FLOPs utilization of the step's training (src/train/mfu.ts). */
  mfu?: number
}

/** A run of a method: one step at a time, evaluated and checkpointed by the driver. */
export interface MethodRun<C extends BaseMethodConfig, R extends BaseStepRecord> {
  readonly config: C
  readonly step: number
  runStep(): Promise<R>
  /** Held-out accuracy of the current policy. */
  evaluate(): Promise<number>
  /** Writes a complete checkpoint folder (checkpointRun). */
  checkpoint(dir: string): Promise<void>
  dispose(): void
}
