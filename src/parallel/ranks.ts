// One rank of a data-parallel `evolve` (a process the launcher started with --rank-child): its
// collective, the policies of its run (ParallelPolicy), and its part in the driver's loop.
//
// Every rank runs the method's loop; rank 0 drives it (metrics, evaluation schedule, checkpoints,
// the report, the collapse guard and Ctrl-C: everything that decides or writes) and tells the other
// ranks, before each, whether the next thing is a step, an evaluation or the end. The others follow
// (followRun) and write nothing, so the run folder is rank 0's alone and the loop's decisions are
// one rank's.
import type { BaseMethodConfig, BaseStepRecord, MethodRun } from '../methods/common/run.js'
import { openPolicy, type OpenPolicy } from '../methods/common/policy.js'
import { openCollective, type Collective, type CollectiveBackend } from './collective.js'
import { parallelOpenPolicy } from './policy.js'

/** What the launcher tells each rank through its environment. */
export const RANK_ENV = {
  backend: 'AUTODIDACT_COLLECTIVE',
  timeoutMs: 'AUTODIDACT_COLLECTIVE_TIMEOUT_MS',
  checkWeightsEvery: 'AUTODIDACT_CHECK_WEIGHTS_EVERY',
  rank: 'AUTODIDACT_RANK',
  worldSize: 'AUTODIDACT_WORLD_SIZE',
  rendezvous: 'AUTODIDACT_RENDEZVOUS',
} as const

/** The next thing rank 0's driver does, as the other ranks hear it. */
type Next = 'step' | 'evaluate' | 'done'

export interface RankContext {
  collective: Collective
  /** Every policy of the run, opened as a ParallelPolicy. */
  openPolicy: OpenPolicy
}

function intFrom(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const v = env[name]
  if (v === undefined || v === '') return fallback
  const n = Number(v)
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${name} must be a non-negative integer, got '${v}'`)
  return n
}

/** This rank's collective (from the launcher's environment) and its policy opener. */
export async function openRank(env: NodeJS.ProcessEnv = process.env): Promise<RankContext> {
  const backend = (env[RANK_ENV.backend] ?? 'mpi') as CollectiveBackend
  const collective = await openCollective({
    backend,
    timeoutMs: intFrom(env, RANK_ENV.timeoutMs, 0) || undefined,
    ...(backend === 'nccl' ? { rank: intFrom(env, RANK_ENV.rank, 0), worldSize: intFrom(env, RANK_ENV.worldSize, 1), rendezvous: env[RANK_ENV.rendezvous] } : {}),
  })
  return { collective, openPolicy: parallelOpenPolicy(openPolicy, collective, intFrom(env, RANK_ENV.checkWeightsEvery, 0)) }
}

/** Rank 0's run: before each step and each evaluation, the other ranks are told to do the same. */
export function leaderRun<C extends BaseMethodConfig, R extends BaseStepRecord>(run: MethodRun<C, R>, collective: Collective): MethodRun<C, R> {
  const tell = (next: Next) => collective.broadcastJson<Next>(next, 0)
  return {
    get config() {
      return run.config
    },
    get step() {
      return run.step
    },
    runStep: async () => (await tell('step'), run.runStep()),
    evaluate: async () => (await tell('evaluate'), run.evaluate()),
    checkpoint: (dir) => run.checkpoint(dir),
    dispose: () => run.dispose(),
  }
}

/** Rank 0's driver is done: the other ranks' followRun returns. */
export async function endRun(collective: Collective): Promise<void> {
  await collective.broadcastJson<Next>('done', 0)
}

/** A rank other than 0: does what rank 0 says, step by step, until it says done; returns the steps run. */
export async function followRun(run: MethodRun<BaseMethodConfig, BaseStepRecord>, collective: Collective): Promise<number> {
  let steps = 0
  for (;;) {
    const next = await collective.broadcastJson<Next | null>(null, 0)
    if (next === 'done') return steps
    if (next === 'step') {
      await run.runStep()
      steps++
    } else if (next === 'evaluate') await run.evaluate()
    else throw new Error(`rank ${collective.rank}: rank 0 sent an unknown instruction ${JSON.stringify(next)}`)
  }
}
