// `autodidact evolve … --ranks N`: the command starts its N rank processes itself, by running
// `mpirun -np N --oversubscribe node <cli> evolve … --rank-child` (OpenMPI's launcher wires the
// ranks together; the MPI collective opens in each). Rank 0's output is the command's output; the
// other ranks print only their errors. When a rank dies or fails, mpirun stops the others and the
// command fails with RankFailedError naming the rank (mpirun's own multi-line notice is folded into
// that one line).
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { AutodidactError } from '../engine/errors.js'
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

export async function launchRanks(o: LaunchOptions): Promise<void> {
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
  const child = spawn(command, mpirunArgs(o), { env, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.pipe(stdout, { end: false })
  const notices = new MpirunNotices(stderr)
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => notices.push(chunk))
  // Ctrl-C or a kill of the command stops every rank (mpirun takes them down with it).
  const forward = (signal: NodeJS.Signals) => () => child.kill(signal)
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
    if (code === 0) return
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
