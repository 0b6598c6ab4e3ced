// The process table, read from /proc, for the tests that watch rank processes start, stop and die.
import { readdirSync, readFileSync } from 'node:fs'

export interface ProcessRow {
  pid: number
  ppid: number
  pgid: number
  /** proc(5)'s state letter: 'Z' is a zombie, stopped but not yet reaped. */
  state: string
  argv: string[]
}

/** One process's row, or null when it has ended (or ends while we look). */
export function processRow(pid: number): ProcessRow | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const [state, ppid, pgid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ') // fields 3, 4, 5 of proc(5)
    return { pid, ppid: Number(ppid), pgid: Number(pgid), state, argv: readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0') }
  } catch {
    return null
  }
}

/** Every process's row. */
export function processes(): ProcessRow[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .map((p) => processRow(Number(p)))
    .filter((r): r is ProcessRow => r !== null)
}

/** Whether the process runs (a zombie has stopped). */
export const alive = (pid: number) => (processRow(pid)?.state ?? 'Z') !== 'Z'

/** The pids of the --rank-child processes writing `outDir`. */
export function rankChildPids(outDir: string): number[] {
  return processes()
    .filter((p) => p.argv.includes('--rank-child') && p.argv.includes(outDir))
    .map((p) => p.pid)
}

/** The pid of MPI rank `rank` of the run writing `outDir` (its OMPI_COMM_WORLD_RANK), or 0. */
export function rankPid(rank: number, outDir: string): number {
  for (const pid of rankChildPids(outDir)) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return pid
    } catch {
      // it ended while we looked
    }
  }
  return 0
}
