// How `autodidact evolve` starts the ranks of a data-parallel run.
//
// `autodidact evolve … --ranks N`: the command starts its N rank processes itself, by running
// `mpirun -np N --oversubscribe node <cli> evolve … --rank-child` (OpenMPI's launcher wires the
// ranks together; the MPI collective opens in each). Rank 0's output is the command's output; the
// other ranks print only their errors. When a rank dies or fails, mpirun stops the others and the
// command fails with RankFailedError naming the rank (mpirun's own multi-line notice is folded into
// that one line). A Ctrl-C or SIGTERM stops every rank at once, and the command exits 130 or 143.
//
// `autodidact evolve … --gpus N [--nodes M --node-rank R --rendezvous HOST:PORT]`: the command
// starts this node's N rank processes itself (no mpirun), each `node <cli> evolve … --rank-child`
// with its global rank, CUDA_VISIBLE_DEVICES set to its one GPU and the rendezvous address in its
// environment (RANK_ENV); the NCCL collective opens in each (src/parallel/rendezvous.ts hands out
// rank 0's unique id). A rank that fails or dies stops the others, and RankFailedError names it;
// the ranks stop by themselves when the launcher is killed outright (stopWithLauncher).
import { spawn } from 'node:child_process'
import { writeSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { AutodidactError } from '../engine/errors.js'
import { signalExitCode } from '../util/signals.js'
import { collectiveLibraries } from './collective.js'
import { RANK_ENV } from './ranks.js'

/** A rank of a data-parallel run failed or died; the other ranks were stopped. */
export class RankFailedError extends AutodidactError {
  constructor(
    message: string,
    /** The failed rank, when the launcher could tell. */
    readonly rank: number | null,
    readonly exitCode: number | null,
    readonly signal: string | null,
  ) {
    super('RANK_FAILED', message)
  }
}

/** The ranks could not be started at all (no mpirun, no MPI library). */
export class ParallelLaunchError extends AutodidactError {
  constructor(message: string) {
    super('PARALLEL_LAUNCH', message)
  }
}

export interface LaunchOptions {
  ranks: number
  /** The evolve arguments every rank runs (the launcher's own flags removed). */
  args: readonly string[]
  /** Each collective operation's timeout (a rank that stops makes the others fail within it). */
  timeoutMs?: number
  /** Debug: compare every rank's weights hash every K optimizer steps. */
  checkWeightsEvery?: number
  stdout?: NodeJS.WritableStream
  stderr?: NodeJS.WritableStream
  /** Default: $AUTODIDACT_MPIRUN or mpirun on the PATH. */
  mpirun?: string
}

/** This package's CLI entry (dist/cli/main.js). */
const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url))

/** mpirun's arguments for N ranks of `node <cli> evolve …args --rank-child` on this machine. */
export function mpirunArgs(o: Pick<LaunchOptions, 'ranks' | 'args'>): string[] {
  // --oversubscribe: more ranks than cores is allowed (2 cores here); --bind-to none: each rank's
  // engine threads are its own to place.
  return ['-np', String(o.ranks), '--oversubscribe', '--bind-to', 'none', process.execPath, CLI, 'evolve', ...o.args, '--rank-child']
}

/**
 * Starts the ranks under mpirun and waits for them. Returns the command's exit code: 0, or 128 +
 * the signal when a Ctrl-C or SIGTERM stopped every rank (mpirun stops them at once; the last whole
 * checkpoint stays). A rank that fails or dies is a RankFailedError.
 */
export async function launchRanks(o: LaunchOptions): Promise<number> {
  const stdout = o.stdout ?? process.stdout
  const stderr = o.stderr ?? process.stderr
  const mpi = (await collectiveLibraries()).mpi
  if (!mpi.found) throw new ParallelLaunchError(`--ranks needs OpenMPI: ${mpi.reason}`)
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    [RANK_ENV.backend]: 'mpi',
    ...(o.timeoutMs !== undefined ? { [RANK_ENV.timeoutMs]: String(o.timeoutMs) } : {}),
    ...(o.checkWeightsEvery ? { [RANK_ENV.checkWeightsEvery]: String(o.checkWeightsEvery) } : {}),
    // OpenMPI refuses to run as root unless told twice (containers, CI)
    ...(process.getuid?.() === 0 ? { OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' } : {}),
  }
  const command = o.mpirun ?? process.env.AUTODIDACT_MPIRUN ?? 'mpirun'
  // detached: mpirun in a process group of its own. When a rank dies, mpirun signals the others'
  // process groups (kill(-pid), seen with strace) and it reports pid 0 for a rank killed from
  // outside; a kill(-0) is the sender's own group, which must not be the user's job or a test runner.
  const child = spawn(command, mpirunArgs(o), { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  child.stdout.pipe(stdout, { end: false })
  const notices = new MpirunNotices(stderr)
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => notices.push(chunk))
  // Ctrl-C or a kill of the command stops every rank (mpirun takes them down with it). mpirun is
  // outside the terminal's foreground group, so the launcher passes these on; a launcher killed
  // outright closes mpirun's stdout and stderr, and mpirun goes at its next write.
  let stoppedBy: NodeJS.Signals | null = null
  const forward = (signal: NodeJS.Signals) => () => {
    stoppedBy ??= signal
    child.kill(signal)
  }
  const onInt = forward('SIGINT')
  const onTerm = forward('SIGTERM')
  process.on('SIGINT', onInt)
  process.on('SIGTERM', onTerm)
  try {
    const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
      child.on('error', (e: NodeJS.ErrnoException) =>
        reject(e.code === 'ENOENT' ? new ParallelLaunchError(`--ranks starts its ranks with mpirun, which was not found (${command}): install openmpi-bin, or set AUTODIDACT_MPIRUN`) : e),
      )
      child.on('close', (code, signal) => resolve({ code, signal }))
    })
    notices.flush()
    if (code === 0) return 0
    if (stoppedBy) {
      stderr.write(`autodidact: ${stoppedBy === 'SIGINT' ? 'Ctrl-C' : stoppedBy}: every rank was stopped; the last whole checkpoint is in the run folder (autodidact evolve --resume DIR)\n`)
      return signalExitCode(stoppedBy)
    }
    throw notices.failure(o.ranks, code, signal)
  } finally {
    process.off('SIGINT', onInt)
    process.off('SIGTERM', onTerm)
  }
}

/**
 * mpirun's stderr: the ranks' own lines pass through; mpirun's boxed notices (between lines of
 * dashes) are held back and read for which rank failed and how.
 */
class MpirunNotices {
  private partial = ''
  private inBox = false
  private readonly boxes: string[] = []

  constructor(private readonly out: NodeJS.WritableStream) {}

  push(chunk: string): void {
    const lines = (this.partial + chunk).split('\n')
    this.partial = lines.pop() ?? ''
    for (const line of lines) this.line(line)
  }

  flush(): void {
    if (this.partial) this.line(this.partial)
    this.partial = ''
  }

  private line(line: string): void {
    if (/^-{20,}$/.test(line.trim())) {
      this.inBox = !this.inBox
      return
    }
    if (this.inBox || /^\s*(mpirun|Primary job|\[[\w.-]+:\d+\])/.test(line)) this.boxes.push(line)
    else this.out.write(line + '\n')
  }

  failure(ranks: number, code: number | null, signal: NodeJS.Signals | null): RankFailedError {
    const text = this.boxes.join('\n')
    const killed = /process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]+)\))?/.exec(text)
    if (killed) {
      const [, rank, pid, node, sig, name] = killed
      return new RankFailedError(
        // mpirun reports pid 0 for a rank killed from outside: then only the node is named
        `rank ${rank} of ${ranks} (${pid !== '0' ? `pid ${pid} ` : ''}on ${node}) died from signal ${sig}${name ? ` (${name})` : ''}; the other ranks were stopped`,
        Number(rank),
        code,
        name ?? `signal ${sig}`,
      )
    }
    const failed = /Process name: \[\[\d+,\d+\],(\d+)\][\s\S]*?Exit code:\s*(\d+)/.exec(text)
    if (failed) {
      const [, rank, exit] = failed
      return new RankFailedError(`rank ${rank} of ${ranks} failed (exit code ${exit}; its error is above); the other ranks were stopped`, Number(rank), Number(exit), null)
    }
    const improper = /process rank (\d+) with PID \d+ on\s+node \S+ exiting improperly/.exec(text)
    if (improper)
      return new RankFailedError(`rank ${improper[1]} of ${ranks} exited without closing its collective (its error is above); the other ranks were stopped`, Number(improper[1]), code, null)
    return new RankFailedError(`the ${ranks}-rank run failed (mpirun exited with ${signal ?? `code ${code}`})${text ? `:\n${text}` : ''}`, null, code, signal)
  }
}

// ---------------------------------------------------------------- evolve --gpus N: one process per GPU, NCCL

export interface GpuLaunchOptions {
  /** Rank processes on this node, one per GPU. */
  gpus: number
  /** Nodes in the run (default 1); each runs this command with its --node-rank. */
  nodes?: number
  /** This node's place (default 0): its ranks are nodeRank·gpus … nodeRank·gpus + gpus − 1; node 0 hosts rank 0. */
  nodeRank?: number
  /** HOST:PORT where rank 0 hands out NCCL's unique id (default on one node: 127.0.0.1 and a free port). */
  rendezvous?: string
  /** The evolve arguments every rank runs (the launcher's own flags removed). */
  args: readonly string[]
  timeoutMs?: number
  checkWeightsEvery?: number
  stdout?: NodeJS.WritableStream
  stderr?: NodeJS.WritableStream
  /** What each rank runs, before `evolve …args --rank-child` (default: this Node and this package's CLI). */
  command?: readonly string[]
  /** How long the other ranks have after SIGTERM, once one failed, before SIGKILL (default 10 s). */
  graceMs?: number
  /** The launcher's environment (default process.env): CUDA_VISIBLE_DEVICES there is the GPUs to use. */
  env?: NodeJS.ProcessEnv
}

/** One rank process as the launcher starts it. */
export interface RankProcess {
  rank: number
  /** The GPU it sees (its CUDA_VISIBLE_DEVICES): the launcher's device `localRank`. */
  device: string
  command: string
  args: string[]
  env: NodeJS.ProcessEnv
}

/** The GPUs this node's ranks take, in local-rank order: the launcher's CUDA_VISIBLE_DEVICES list (when set), else 0 … gpus − 1. */
export function gpuDevices(gpus: number, env: NodeJS.ProcessEnv): string[] {
  const visible = env.CUDA_VISIBLE_DEVICES?.split(',').map((d) => d.trim()).filter((d) => d !== '')
  if (!visible) return Array.from({ length: gpus }, (_, i) => String(i))
  if (visible.length < gpus) throw new ParallelLaunchError(`--gpus ${gpus}: CUDA_VISIBLE_DEVICES=${env.CUDA_VISIBLE_DEVICES} names only ${visible.length} GPU${visible.length === 1 ? '' : 's'}`)
  return visible.slice(0, gpus)
}

/** This node's rank processes: each with its global rank, its one GPU, the rendezvous and the same evolve arguments. */
export function gpuRankProcesses(o: GpuLaunchOptions & { rendezvous: string }): RankProcess[] {
  const nodes = o.nodes ?? 1
  const nodeRank = o.nodeRank ?? 0
  const worldSize = o.gpus * nodes
  const env = o.env ?? process.env
  const [command, ...prefix] = o.command ?? [process.execPath, CLI]
  return gpuDevices(o.gpus, env).map((device, localRank) => {
    const rank = nodeRank * o.gpus + localRank
    return {
      rank,
      device,
      command,
      args: [...prefix, 'evolve', ...o.args, '--rank-child'],
      env: {
        ...env,
        [RANK_ENV.backend]: 'nccl',
        [RANK_ENV.rank]: String(rank),
        [RANK_ENV.worldSize]: String(worldSize),
        [RANK_ENV.rendezvous]: o.rendezvous,
        CUDA_VISIBLE_DEVICES: device,
        ...(o.timeoutMs !== undefined ? { [RANK_ENV.timeoutMs]: String(o.timeoutMs) } : {}),
        ...(o.checkWeightsEvery ? { [RANK_ENV.checkWeightsEvery]: String(o.checkWeightsEvery) } : {}),
      },
    }
  })
}

/** In a rank the --gpus launcher started: exit when the launcher is gone (its IPC channel closes), instead of running on orphaned. */
export function stopWithLauncher(rank: string): void {
  if (!process.channel) return // not started by launchGpuRanks (mpirun's ranks have no channel)
  process.channel.unref() // the channel alone keeps no rank alive
  process.on('disconnect', () => {
    try {
      writeSync(2, `autodidact: rank ${rank}: the launcher is gone (its channel closed); stopping\n`)
    } catch {
      // its stderr went with it (EPIPE): nothing to tell
    }
    // not process.exit: it waits for the worker threads, and one may be inside a collective that
    // now waits for its timeout (checkpoints are renamed into place whole: none is left half-written)
    process.kill(process.pid, 'SIGKILL')
  })
}

/** A TCP port free on 127.0.0.1 now (the one-node rendezvous). */
export function freeLocalPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/**
 * Starts this node's rank processes and waits for them. Rank 0's stdout is the command's; every
 * rank's stderr passes through, line by line. When a rank fails or dies, the others are stopped
 * (SIGTERM, then SIGKILL after graceMs) and RankFailedError names it. Ctrl-C and SIGTERM reach
 * every rank once (they run in process groups of their own). Returns rank 0's exit code: 0, or 130
 * when a Ctrl-C stopped the run after a checkpoint.
 */
export async function launchGpuRanks(o: GpuLaunchOptions): Promise<number> {
  const nodes = o.nodes ?? 1
  const rendezvous = o.rendezvous ?? `127.0.0.1:${await freeLocalPort()}`
  const plan = gpuRankProcesses({ ...o, rendezvous })
  const worldSize = o.gpus * nodes
  const stdout = o.stdout ?? process.stdout
  const stderr = o.stderr ?? process.stderr
  const graceMs = o.graceMs ?? 10_000
  const exits = new Map<number, { code: number | null; signal: NodeJS.Signals | null }>()
  let failed: { rank: number; pid: number | undefined; device: string; code: number | null; signal: NodeJS.Signals | null } | null = null
  let launchError: Error | null = null
  let killTimer: NodeJS.Timeout | undefined
  // 'ipc': a channel the ranks watch, so that they stop when the launcher is killed outright (their own process groups keep them from its signals)
  const children = plan.map((p) => ({ p, child: spawn(p.command, p.args, { env: p.env, stdio: ['ignore', p.rank === 0 ? 'pipe' : 'ignore', 'pipe', 'ipc'], detached: true }) }))
  const stopOthers = () => {
    for (const { p, child } of children) if (!exits.has(p.rank) && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    killTimer ??= setTimeout(() => {
      for (const { p, child } of children) if (!exits.has(p.rank)) child.kill('SIGKILL')
    }, graceMs)
  }
  const forward = (signal: NodeJS.Signals) => () => {
    for (const { p, child } of children) if (!exits.has(p.rank)) child.kill(signal)
  }
  const onInt = forward('SIGINT')
  const onTerm = forward('SIGTERM')
  process.on('SIGINT', onInt)
  process.on('SIGTERM', onTerm)
  try {
    await Promise.all(
      children.map(
        ({ p, child }) =>
          new Promise<void>((done) => {
            child.stdout?.pipe(stdout, { end: false })
            passLines(child.stderr!, stderr)
            child.on('error', (e: NodeJS.ErrnoException) => {
              launchError ??= e.code === 'ENOENT' ? new ParallelLaunchError(`--gpus starts its ranks with ${p.command}, which was not found`) : e
              exits.set(p.rank, { code: null, signal: null })
              stopOthers()
              done()
            })
            child.on('close', (code, signal) => {
              exits.set(p.rank, { code, signal })
              // rank 0 stopped on request (Ctrl-C) exits 130 after its checkpoint: not a failure
              const ok = code === 0 || (p.rank === 0 && code === 130)
              if (!ok && !failed && !launchError) {
                failed = { rank: p.rank, pid: child.pid, device: p.device, code, signal }
                stopOthers()
              }
              done()
            })
          }),
      ),
    )
  } finally {
    clearTimeout(killTimer)
    process.off('SIGINT', onInt)
    process.off('SIGTERM', onTerm)
  }
  if (launchError) throw launchError
  const f = failed as { rank: number; pid: number | undefined; device: string; code: number | null; signal: NodeJS.Signals | null } | null
  if (f) {
    const who = `rank ${f.rank} of ${worldSize} (pid ${f.pid}, GPU ${f.device}${nodes > 1 ? `, node ${o.nodeRank ?? 0}` : ''})`
    const others = worldSize > 1 ? `; the other ranks${nodes > 1 ? ' of this node' : ''} were stopped` : ''
    throw f.signal
      ? new RankFailedError(`${who} died from signal ${f.signal}${others}`, f.rank, f.code, f.signal)
      : new RankFailedError(`${who} failed (exit code ${f.code}; its error is above)${others}`, f.rank, f.code, null)
  }
  return exits.get(plan[0].rank)?.code ?? 0
}

/** Copies a child's output to `out` in whole lines (ranks writing at once do not cut each other's lines). */
function passLines(from: NodeJS.ReadableStream, out: NodeJS.WritableStream): void {
  let partial = ''
  from.setEncoding('utf8')
  from.on('data', (chunk: string) => {
    const lines = (partial + chunk).split('\n')
    partial = lines.pop() ?? ''
    if (lines.length) out.write(lines.join('\n') + '\n')
  })
  from.on('end', () => {
    if (partial) out.write(partial + '\n')
  })
}
