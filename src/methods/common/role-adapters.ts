// Role adapters (issue 19): a method's prompt roles each run through their own LoRA adapter on one
// shared base in one process, and each role's update reaches only its adapter — the one-process
// form of roles the papers keep as separate models (R-Zero's and J-Zero's Challenger and Solver)
// or as one backbone (COSE). Here once for every method: the config field and its rule, the
// `--role-adapters R` flag, opening the base with its adapters and their one trainer, a role's
// view of the base, and the checkpoint role that holds the adapters.
import { CheckpointError, InvalidArgumentError } from '../../engine/errors.js'
import type { Completion, GenerateOptions, Prompt, SaveOptions, ScoreOptions, ScorePair, Scored } from '../../engine/model.js'
import type { AdapterOptions } from '../../engine/adapters.js'
import type { ScheduleOptions } from '../../train/schedule.js'
import type { FlagValues } from './method.js'
import { openPolicy, PolicySet, type OpenPolicy, type Policy, type PolicyTrainer, type PolicyTrainerOptions } from './policy.js'
import { z } from './schema.js'
import { trainerOptions, type TrainingPlan } from './training.js'

/** A role's own LoRA adapter on a shared base: its adapter name, and whether the run trains it. */
export interface RoleAdapter {
  name: string
  trained: boolean
  /**
   * Its own learning-rate schedule and step clock, for roles that train in turns (R-Zero's
   * phases, J-Zero's stages): with any trained role's given, each trained adapter keeps its own
   * clock (the trainer's adapterSchedules; a role without one takes the plan's). Absent on every
   * role: one schedule and one clock, every step training the roles together (COSE).
   */
  schedule?: ScheduleOptions
  /** A PEFT adapter folder a fresh run starts this role's adapter from (its own rank), in place of a fresh one (A seeded, B = 0); a resumed run takes the checkpoint's. */
  from?: string
}

/** The checkpoint role that holds the shared base's adapters (one sub-folder each) and their one optimizer state. */
export const ROLE_ADAPTERS_ROLE = 'model'

/** What resumeRun expects of a role-adapter checkpoint: the one role, trained, with an adapter folder per role. */
export function roleAdaptersCheckpointRole(roles: readonly RoleAdapter[]): { name: string; trained: boolean; adapters: string[] } {
  return { name: ROLE_ADAPTERS_ROLE, trained: true, adapters: roles.map((r) => r.name) }
}

/** The `roleAdapters` config field, described by the method (which roles, which adapters; its rule: roleAdaptersNeedRank). */
export const roleAdaptersField = (description: string) => z.boolean().describe(description)

/** The rule of a config with `roleAdapters`: they are LoRA adapters of rank `<block>.loraRank`, which must be > 0. */
export function roleAdaptersNeedRank(block: string): [(c: { roleAdapters: boolean }) => boolean, { error: string; path: PropertyKey[] }] {
  return [
    (c) => !c.roleAdapters || (((c as unknown as Record<string, unknown>)[block] as { loraRank?: number } | undefined)?.loraRank ?? 0) > 0,
    { error: `role adapters are LoRA adapters: set ${block}.loraRank > 0`, path: ['roleAdapters'] },
  ]
}

/** `--role-adapters R`: each role its own LoRA adapter of rank R on one base. */
export const ROLE_ADAPTERS_FLAG = { 'role-adapters': 'number' } as const

/** `--role-adapters R` → `{ roleAdapters: true, <block>: { loraRank: R } }`, or undefined without the flag. */
export function roleAdaptersOverride(flags: FlagValues, block: string): Record<string, unknown> | undefined {
  const rank = flags['role-adapters']
  return rank === undefined ? undefined : { roleAdapters: true, [block]: { loraRank: rank } }
}

/**
 * One base model with a LoRA adapter per role (each role's generate/score calls and training
 * sequences name its adapter) and one trainer over the trained roles' adapters: the base and the
 * untrained adapters get no gradient and no optimizer state, and the KL reference is the base with
 * the adapters off (no second copy). Fresh: each adapter attached from `seed` (A seeded, B = 0), or
 * from its role's `from` folder;
 * from a checkpoint: the role folder's adapters (save's multi-adapter layout) and the optimizer
 * state, which must name exactly `roles` (a CheckpointError otherwise). Adapters are attached in
 * name order either way, so a resumed model is the one that was saved.
 */
export async function openRoleAdapters(o: {
  openPolicy?: OpenPolicy
  base: string
  checkpoint?: { model: string; trainer: string }
  threads?: number
  plan: TrainingPlan
  roles: readonly RoleAdapter[]
  seed: number
}): Promise<{ policies: PolicySet; policy: Policy; trainer: PolicyTrainer }> {
  const set = new PolicySet(o.openPolicy ?? openPolicy)
  return set.build(async () => ({ policies: set, ...(await openRoleTrainee(set, o)) }))
}

/** openRoleAdapters in a PolicySet the caller builds and disposes (beside the run's other models). */
export async function openRoleTrainee(
  set: PolicySet,
  o: { base: string; checkpoint?: { model: string; trainer: string }; threads?: number; plan: TrainingPlan; roles: readonly RoleAdapter[]; seed: number },
): Promise<{ policy: Policy; trainer: PolicyTrainer }> {
  const lora = o.plan.lora
  if (!lora) throw new InvalidArgumentError('lora', 'role adapters are LoRA adapters: the plan needs a LoRA rank > 0')
  const names = o.roles.map((r) => r.name).sort()
  const policy = await set.open({ model: o.base, threads: o.threads, ...(o.checkpoint ? { adapters: o.checkpoint.model } : {}) })
  if (o.checkpoint) {
    const found = [...policy.adapterNames].sort()
    if (found.join() !== names.join())
      throw new CheckpointError(o.checkpoint.model, null, 'field', `${o.checkpoint.model}: the checkpoint holds adapters ${found.map((n) => `'${n}'`).join(', ') || 'none'}, expected one per role (${names.map((n) => `'${n}'`).join(', ')})`)
  } else
    for (const [i, name] of names.entries()) {
      const from = o.roles.find((r) => r.name === name)?.from
      if (from === undefined) await policy.addAdapter(name, { ...lora, seed: o.seed + i })
      else await policy.loadAdapter(from, name)
    }
  const trainer = await policy.trainer(roleTrainerOptions(o.plan, o.roles.filter((r) => r.trained)))
  if (o.checkpoint) await trainer.loadState(o.checkpoint.trainer)
  return { policy, trainer }
}

// The one trainer of the trained roles' adapters (in name order), KL against the base with the adapters off.
function roleTrainerOptions(plan: TrainingPlan, trained: readonly RoleAdapter[]): PolicyTrainerOptions {
  const adapter = trained.map((r) => r.name).sort()
  const ownClocks = trained.some((r) => r.schedule)
  const adapterSchedules = ownClocks ? Object.fromEntries(trained.map((r) => [r.name, r.schedule ?? plan.schedule])) : undefined
  return { ...trainerOptions({ ...plan, lora: null }, null), adapter, reference: 'lora-off', ...(adapterSchedules ? { adapterSchedules } : {}) }
}

/**
 * A role's view of the shared base: every generate and score call runs through the role's adapter
 * (an InProcessSampler or an evaluation over it samples the role). Training, saving and disposing
 * stay with the base (the run's one trainer and checkpoint role).
 */
export class RolePolicy implements Policy {
  constructor(
    readonly base: Policy,
    readonly adapter: string,
  ) {}

  get dir(): string {
    return this.base.dir
  }
  get config(): Policy['config'] {
    return this.base.config
  }
  get tokenizer(): Policy['tokenizer'] {
    return this.base.tokenizer
  }
  get scoreLabels(): number {
    return this.base.scoreLabels
  }
  get adapterNames(): readonly string[] {
    return this.base.adapterNames
  }
  addAdapter(name: string, options: AdapterOptions): Promise<void> {
    return this.base.addAdapter(name, options)
  }
  loadAdapter(dir: string, name: string): Promise<void> {
    return this.base.loadAdapter(dir, name)
  }
  generate(prompts: Prompt[], options?: GenerateOptions): Promise<Completion[][]> {
    return this.base.generate(prompts, { ...options, adapter: this.adapter })
  }
  encodePrompt(prompt: Prompt): number[] {
    return this.base.encodePrompt(prompt)
  }
  score(pairs: ScorePair[], options?: Omit<ScoreOptions, 'reference'>): Promise<Scored[]> {
    return this.base.score(pairs, { ...options, adapter: this.adapter })
  }
  rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    return this.base.rewardScores(pairs)
  }
  async trainer(): Promise<PolicyTrainer> {
    throw new InvalidArgumentError('trainer', `role '${this.adapter}' trains through the shared base's one trainer (openRoleAdapters)`)
  }
  save(dir: string, options?: SaveOptions): Promise<void> {
    return this.base.save(dir, options)
  }
  /** The base is the run's PolicySet's to dispose. */
  dispose(): void {}
}
