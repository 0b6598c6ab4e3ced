// `autodidact doctor`'s collectives lines: OpenMPI found here (CI installs it) or not, with the
// reason (AUTODIDACT_MPI pointed at nothing), and NCCL's absence on a machine without it.
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { formatCollectives } from '../../src/cli/doctor.js'
import { CLI, mpiUnavailable } from './mpi.js'

const unavailable = await mpiUnavailable()

function doctor(env: NodeJS.ProcessEnv): string {
  const r = spawnSync(process.execPath, [CLI, 'doctor'], { env: { ...process.env, ...env }, encoding: 'utf8' })
  expect(r.status, r.stderr).toBe(0)
  return r.stdout
}

describe('doctor: collectives', () => {
  it.skipIf(unavailable !== null)('names the OpenMPI library found and what it enables', () => {
    expect(doctor({})).toMatch(/collectives \(data parallelism\):\n {2}MPI: found \(Open MPI v\d+\.\d+\.\d+, \S*libmpi\.so\.40\): evolve --ranks N runs here\n {2}NCCL: /)
  })

  it('says why MPI is not found, naming what it tried', () => {
    expect(doctor({ AUTODIDACT_MPI: '/nonexistent/libmpi.so.40' })).toMatch(/ {2}MPI: not found: no OpenMPI library found \(install openmpi-bin libopenmpi3, or set AUTODIDACT_MPI to a libmpi\.so\.40\); tried \/nonexistent\/libmpi\.so\.40 \(/)
  })

  it('says why NCCL is not found, naming what it tried (AUTODIDACT_NCCL: that one or nothing)', () => {
    expect(doctor({ AUTODIDACT_NCCL: '/nonexistent/libnccl.so.2' })).toMatch(
      / {2}NCCL: not found: no libnccl\.so\.2 found \(install NCCL with the CUDA toolkit or PyTorch's nvidia-nccl wheel, or set AUTODIDACT_NCCL to the library\); tried \/nonexistent\/libnccl\.so\.2 \([^)]*\)\n/,
    )
  })

  it('formats a found NCCL and a missing one', () => {
    const lines = formatCollectives({ mpi: { found: false, reason: 'none here' }, nccl: { found: true, path: '/x/libnccl.so.2', version: '2.21.5' } })
    expect(lines).toEqual(['collectives (data parallelism):', '  MPI: not found: none here', '  NCCL: found (2.21.5, /x/libnccl.so.2): evolve --gpus 1 opens it (past one GPU, runs are refused: the CUDA engine does not all-reduce its gradients yet)'])
  })
})
