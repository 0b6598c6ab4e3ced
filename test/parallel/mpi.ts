// Whether the MPI collective can run here (OpenMPI's library and mpirun), and how tests start ranks.
// Tests of several ranks skip with the reason where it cannot (a user's machine); CI installs
// openmpi-bin and libopenmpi3 (.ci/run), so there they run.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { nativeAddon } from '../../src/native.js'

export const CLI = join(import.meta.dirname, '..', '..', 'dist', 'cli', 'main.js')

/** Null when 2 MPI ranks can run here, else why not. */
export async function mpiUnavailable(): Promise<string | null> {
  const lib = (await nativeAddon()).collective.libraries().mpi
  if (!lib.found) return `OpenMPI is not installed (${lib.reason})`
  const probe = spawnSync('mpirun', ['--version'], { encoding: 'utf8' })
  if (probe.error || probe.status !== 0) return `mpirun is not on the PATH (${probe.error?.message ?? probe.stderr})`
  return null
}

/** OpenMPI as root (containers, CI) needs both variables. */
export const MPI_ENV: NodeJS.ProcessEnv = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' }
