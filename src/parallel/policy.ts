// A Policy on N ranks that a method cannot tell from the 1-rank one: every rank runs the method's
// loop in step, with the same data; only the model work is split.
//
// - generate / score / rewardScores: each rank takes its contiguous share of the prompts (or
//   pairs), and the results are all-gathered, so every rank holds the step's whole rollout and
//   computes the same rewards, group statistics, advantages and replay buffer as one rank would
//   (a prompt's group is sampled whole by one rank). Sequence ids stay global (the share's
//   sequenceOffset), and samples are keyed by (seed, sequence id, position): a sample does not
//   depend on which rank drew it.
// - trainer: the Trainer with the collective (src/train/trainer.ts): each rank trains its share of
//   the micro-batches, the loss normalized over the whole batch; gradients are summed over the
//   ranks before the optimizer step, so weights stay identical (checked every K steps in debug mode).
// - save: rank 0 only (checkpoints are written once).
import { createHash } from 'node:crypto'
import type { AdapterOptions } from '../engine/adapters.js'
import { AutodidactError } from '../engine/errors.js'
import type { Completion, GenerateOptions, Prompt, SaveOptions, ScoreOptions, ScorePair, Scored } from '../engine/model.js'
import { nativeAddon } from '../native.js'
import { EnginePolicy, type OpenPolicy, type Policy, type PolicyTokenizer, type PolicyTrainer, type PolicyTrainerOptions } from '../methods/common/policy.js'
import type { StepMetrics, TrainBatch } from '../train/trainer.js'
import { shareOf, type Collective } from './collective.js'

/** The ranks' weights differ after a step (the debug check of --check-weights-every). */
export class RankDivergenceError extends AutodidactError {
  constructor(
    readonly step: number,
    readonly hashes: readonly string[],
  ) {
    super('RANK_DIVERGENCE', `after optimizer step ${step} the ranks' weights differ: ${hashes.map((h, r) => `rank ${r} ${h.slice(0, 12)}`).join(', ')}`)
  }
}

/** Each rank runs `run` on its share of `items`; every rank gets every result, in item order. */
export async function splitAndGather<T, R>(collective: Collective, items: readonly T[], run: (share: T[], start: number) => Promise<R[]>): Promise<R[]> {
  const { start, end } = shareOf(items.length, collective.rank, collective.worldSize)
  const mine = end > start ? await run(items.slice(start, end), start) : []
  return (await collective.allGatherJson(mine)).flat()
}

export class ParallelPolicy implements Policy {
  constructor(
    readonly inner: Policy,
    readonly collective: Collective,
    private readonly checkWeightsEvery = 0,
  ) {}

  get dir(): string {
    return this.inner.dir
  }
  get config(): Policy['config'] {
    return this.inner.config
  }
  get tokenizer(): PolicyTokenizer {
    return this.inner.tokenizer
  }
  get scoreLabels(): number {
    return this.inner.scoreLabels
  }
  get adapterNames(): readonly string[] {
    return this.inner.adapterNames
  }
  /** Every rank attaches the same adapter (same seed: the same A). */
  addAdapter(name: string, options: AdapterOptions): Promise<void> {
    return this.inner.addAdapter(name, options)
  }
  /** Every rank attaches the same folder. */
  loadAdapter(dir: string, name: string): Promise<void> {
    return this.inner.loadAdapter(dir, name)
  }
  encodePrompt(prompt: Prompt): number[] {
    return this.inner.encodePrompt(prompt)
  }

  generate(prompts: Prompt[], options: GenerateOptions = {}): Promise<Completion[][]> {
    const n = options.n ?? 1
    const { signal, ...shared } = options // an AbortSignal is this rank's own
    return splitAndGather(this.collective, prompts, async (share, start) => {
      const groups = await this.inner.generate(share, {
        ...shared,
        signal,
        sequenceOffset: (options.sequenceOffset ?? 0) + start * n, // global sequence ids
        ...(options.perPrompt ? { perPrompt: options.perPrompt.slice(start, start + share.length) } : {}),
      })
      return groups.map((group) => group.map((c) => ({ ...c, promptIndex: c.promptIndex + start })))
    })
  }

  score(pairs: ScorePair[], options?: Omit<ScoreOptions, 'reference'>): Promise<Scored[]> {
    return splitAndGather(this.collective, pairs, (share) => this.inner.score(share, options))
  }

  async rewardScores(pairs: ScorePair[]): Promise<Float32Array> {
    const perPair = this.inner.scoreLabels || 1
    const rows = await splitAndGather(this.collective, pairs, async (share) => {
      const flat = await this.inner.rewardScores(share)
      return share.map((_, i) => flat.slice(i * perPair, (i + 1) * perPair))
    })
    const out = new Float32Array(rows.length * perPair)
    rows.forEach((r, i) => out.set(r, i * perPair))
    return out
  }

  async trainer(options: PolicyTrainerOptions): Promise<PolicyTrainer> {
    const reference = options.reference instanceof ParallelPolicy ? options.reference.inner : options.reference
    return new ParallelTrainer(await this.inner.trainer({ ...options, reference, collective: this.collective }), this, this.checkWeightsEvery)
  }

  /** Rank 0 writes; the other ranks write nothing (their weights are rank 0's). */
  async save(dir: string, options?: SaveOptions): Promise<void> {
    if (this.collective.rank === 0) await this.inner.save(dir, options)
  }

  dispose(): void {
    this.inner.dispose()
  }

  /** A SHA-256 of every parameter's bytes (the engine's export order: sorted by name). */
  async weightsHash(): Promise<string> {
    if (!(this.inner instanceof EnginePolicy)) throw new TypeError('weightsHash needs an engine policy')
    const hash = createHash('sha256')
    for (const t of await (await nativeAddon()).train.exportTensors(this.inner.model.handle)) {
      hash.update(t.name)
      hash.update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength))
    }
    return hash.digest('hex')
  }
}

/** Rank 0 writes the optimizer state; with `every` > 0, after every every-th optimizer step each rank's weights hash must be the same (else RankDivergenceError). */
class ParallelTrainer implements PolicyTrainer {
  constructor(
    private readonly inner: PolicyTrainer,
    private readonly policy: ParallelPolicy,
    private readonly every: number,
  ) {}
  get steps(): number {
    return this.inner.steps
  }
  async step(batch: TrainBatch): Promise<StepMetrics> {
    const metrics = await this.inner.step(batch)
    if (this.every > 0 && this.inner.steps % this.every === 0) {
      const hashes = await this.policy.collective.allGatherJson(await this.policy.weightsHash())
      if (hashes.some((h) => h !== hashes[0])) throw new RankDivergenceError(this.inner.steps, hashes)
    }
    return metrics
  }
  saveState(dir: string): Promise<void> {
    return this.policy.collective.rank === 0 ? this.inner.saveState(dir) : Promise.resolve()
  }
  loadState(dir: string): Promise<void> {
    return this.inner.loadState(dir)
  }
}

/** Opens every policy of a run through `open` and makes it a ParallelPolicy on `collective`. */
export function parallelOpenPolicy(open: OpenPolicy, collective: Collective, checkWeightsEvery = 0): OpenPolicy {
  return async (ref) => new ParallelPolicy(await open(ref), collective, checkWeightsEvery)
}
