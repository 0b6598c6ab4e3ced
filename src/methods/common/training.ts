// What every loop does around its trainers: sampling seeds that make a resumed run sample what the
// original did, the learning-rate schedule of a run's updates, LoRA or full fine-tuning with the
// right KL reference, and opening a trained role from the base model or from its checkpoint.
import type { Completion } from '../../engine/model.js'
import type { FrozenWeights } from '../../engine/options.js'
import type { LoraOptions, OptimizerOptions, TrainSequence } from '../../train/trainer.js'
import type { ScheduleOptions } from '../../train/schedule.js'
import type { ObjectiveSpec, PolicyObjectiveConfig } from '../../train/objectives.js'
import { openPolicy, PolicySet, type OpenPolicy, type Policy, type PolicyTrainer, type PolicyTrainerOptions } from './policy.js'

/**
 * The sampling seed of call `call` at step `step`: deterministic, so a resumed run samples what
 * the original did. `stride` spaces the steps (room for the calls of one step), `modulus` bounds
 * the seed (R-Zero's remote endpoints take 31-bit seeds).
 */
export function samplingSeed(runSeed: number, step: number, call: number, o: { stride?: number; modulus?: number } = {}): number {
  return (runSeed * 1_000_003 + step * (o.stride ?? 8) + call) % (o.modulus ?? Number.MAX_SAFE_INTEGER)
}

/**
 * A run's learning-rate schedule over `updates` optimizer steps: linear warmup (given in steps or
 * as a fraction of the updates, never all of them), then cosine to `minLrRatio`·lr. One update or
 * none: constant (a cosine over one step would sit at its floor).
 */
export function learningRateSchedule(updates: number, o: { warmupSteps?: number; warmupRatio?: number; minLrRatio?: number }): ScheduleOptions {
  if (updates <= 1) return { kind: 'constant' }
  const warmup = o.warmupSteps ?? Math.round((o.warmupRatio ?? 0) * updates)
  return { kind: 'cosine', warmupSteps: Math.min(warmup, updates - 1), totalSteps: updates, minLrRatio: o.minLrRatio ?? 0 }
}

/** LoRA adapters of rank `rank` (alpha 0: 2 × rank), or null for full fine-tuning (rank 0). */
export function loraOf(rank: number, alpha: number): LoraOptions | null {
  return rank > 0 ? { rank, alpha: alpha || 2 * rank } : null
}

/** How one role trains. */
export interface TrainingPlan {
  objective: ObjectiveSpec
  optimizer: OptimizerOptions
  schedule: ScheduleOptions
  /** Default: the trainer's (1). */
  clipGradNorm?: number
  /** Default: the trainer's (8). */
  microBatchSize?: number
  lora: LoraOptions | null
  /** A reward model's score head alone, the backbone frozen (TrainerOptions.scoreHeadOnly). */
  scoreHeadOnly?: boolean
}

/**
 * The trainer options of a plan. KL (and DPO) need a reference: with LoRA the base weights
 * (adapters switched off), in full fine-tuning a frozen copy of the base (`reference`).
 */
export function trainerOptions(plan: TrainingPlan, reference: Policy | null): PolicyTrainerOptions {
  return { ...plan, reference: reference ?? (plan.lora ? 'lora-off' : undefined) }
}

/** A config's `ppo` block: the shared optimizer, policy-loss, schedule and LoRA fields (schema.ts). */
export interface PpoBlock {
  lr: number
  clipGradNorm: number
  microBatchSize: number
  clip: number
  klCoef: number
  entropyCoef?: number
  warmupSteps?: number
  warmupRatio?: number
  minLrRatio?: number
  loraRank?: number
  loraAlpha?: number
}

/** PPO's clipped surrogate with KL to the reference over `updates` optimizer steps, from a `ppo` block (and objective extras). */
export function ppoPlan(ppo: PpoBlock, updates: number, objective: Omit<PolicyObjectiveConfig, 'clip' | 'klCoef' | 'entropyCoef'> = {}): TrainingPlan {
  return {
    objective: { name: 'policy', clip: ppo.clip, klCoef: ppo.klCoef, entropyCoef: ppo.entropyCoef ?? 0, ...objective },
    optimizer: { lr: ppo.lr },
    schedule: learningRateSchedule(updates, ppo),
    clipGradNorm: ppo.clipGradNorm,
    microBatchSize: ppo.microBatchSize,
    lora: loraOf(ppo.loraRank ?? 0, ppo.loraAlpha ?? 0),
  }
}

/** Does a full fine-tuning plan need a frozen reference copy (a KL term, or DPO)? */
export function needsFrozenReference(plan: TrainingPlan): boolean {
  const o = plan.objective
  const kl = o.name === 'dpo' || (o.name === 'policy' && (o.klCoef ?? 0) > 0)
  return kl && !plan.lora
}

/**
 * Opens a trained role: its policy (the base model, or the checkpoint's model folder — with LoRA
 * the base plus the checkpoint's adapter) and its trainer (with the checkpoint's optimizer state).
 */
export async function openTrainee(
  set: PolicySet,
  o: { base: string; checkpoint?: { model: string; trainer: string }; threads?: number; plan: TrainingPlan; reference: Policy | null },
): Promise<{ policy: Policy; trainer: PolicyTrainer }> {
  const ref = !o.checkpoint ? { model: o.base } : o.plan.lora ? { model: o.base, adapter: o.checkpoint.model } : { model: o.checkpoint.model }
  const policy = await set.open({ ...ref, threads: o.threads })
  const trainer = await policy.trainer(trainerOptions(o.plan, o.reference))
  if (o.checkpoint) await trainer.loadState(o.checkpoint.trainer)
  return { policy, trainer }
}

/**
 * The frozen reference copy of `o.base` that full fine-tuning plans need (one copy for all; one
 * thread: it only scores), its weights kept as `o.weights` (a run's frozenWeights), else null.
 */
export async function openReference(set: PolicySet, o: { base: string; weights?: FrozenWeights }, ...plans: TrainingPlan[]): Promise<Policy | null> {
  return plans.some(needsFrozenReference) ? set.open({ model: o.base, threads: 1, weights: o.weights }) : null
}

/** A sampled completion and the prompt's token ids it continues. */
export interface Sample {
  prompt: number[]
  completion: Completion
}

/**
 * A sampled completion as a policy-gradient training sequence (old logprobs from the sampling
 * pass), through the LoRA adapter `adapter` when a role has its own (absent: the trainer's).
 */
export function sampledSequence(prompt: readonly number[], c: Completion, advantage: number, weight?: number, adapter?: string): TrainSequence {
  return { prompt, completion: Array.from(c.tokens), oldLogprobs: c.logprobs, advantages: advantage, ...(weight === undefined ? {} : { weight }), ...(adapter === undefined ? {} : { adapter }) }
}

/**
 * The one trained policy of a run, and the frozen reference its plan needs, in a PolicySet the run
 * disposes (on failure everything opened is disposed). From the base model, or a checkpoint's role.
 */
export async function openTrainedPolicy(o: {
  openPolicy?: OpenPolicy
  base: string
  checkpoint?: { model: string; trainer: string }
  threads?: number
  plan: TrainingPlan
  /** The reference's weights (the run's frozenWeights). */
  frozenWeights?: FrozenWeights
}): Promise<{ policies: PolicySet; policy: Policy; trainer: PolicyTrainer }> {
  const set = new PolicySet(o.openPolicy ?? openPolicy)
  return set.build(async () => {
    const reference = await openReference(set, { base: o.base, weights: o.frozenWeights }, o.plan)
    return { policies: set, ...(await openTrainee(set, { ...o, reference })) }
  })
}
