// `autodidact evolve --gpus N` as a user runs it (dist/, child processes), on a machine without
// NCCL (AUTODIDACT_NCCL points at nothing, so this holds wherever it runs): --gpus 1 starts its one
// rank, whose NCCL collective is refused with the typed error naming what was tried, and the command
// names the rank; past one GPU the run is refused before any rank starts (the CUDA engine cannot
// all-reduce its gradients yet); every malformed combination of the flags is a typed error.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { CLI } from './mpi.js'

const root = mkdtempSync(join(tmpdir(), 'ad-gpus-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

function evolve(args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'evolve', '--method', 'cose', '--steps', '1', ...args], {
    env: { ...process.env, AUTODIDACT_NCCL: '/nonexistent/libnccl.so.2', AUTODIDACT_DEVICE: '' },
    encoding: 'utf8',
    timeout: 60_000,
  })
  return { code: r.status, stderr: r.stderr }
}

describe('evolve --gpus', () => {
  it('--gpus 1 without NCCL: rank 0 fails with ERR_AD_COLLECTIVE_UNAVAILABLE, and the command names it', () => {
    const r = evolve(['--gpus', '1', '--out', join(root, 'one')])
    expect(r.code).toBe(2) // RankFailedError
    expect(r.stderr).toMatch(/autodidact: rank 0: \[ERR_AD_COLLECTIVE_UNAVAILABLE\] no libnccl\.so\.2 found .*; tried \/nonexistent\/libnccl\.so\.2 \(/)
    expect(r.stderr).toMatch(/autodidact: rank 0 of 1 \(pid \d+, GPU 0\) failed \(exit code 1; its error is above\)\n/)
  }, 60_000)

  it('past one GPU the run is refused before any rank starts', () => {
    for (const args of [['--gpus', '2'], ['--gpus', '1', '--nodes', '2', '--node-rank', '0', '--rendezvous', '127.0.0.1:29500']]) {
      const r = evolve(args)
      expect(r.code, args.join(' ')).toBe(2)
      expect(r.stderr).toMatch(/autodidact: --gpus\/--nodes for 2 GPUs: the CUDA engine cannot all-reduce its gradients across ranks yet .* --gpus 1 runs one rank through the NCCL collective/)
      expect(r.stderr).not.toMatch(/rank 0/)
    }
  }, 60_000)

  it('refuses malformed flag combinations with typed errors', () => {
    const cases: [string[], RegExp][] = [
      [['--gpus', '0'], /--gpus must be an integer ≥ 1/],
      [['--gpus', '1', '--device', 'cpu'], /--gpus N runs every rank on its GPU \(--device cuda\), not --device cpu/],
      [['--gpus', '1', '--ranks', '2'], /--ranks N .* and --gpus N .* are two ways to run: choose one/],
      [['--gpus', '1', '--nodes', '2'], /--nodes 2 needs --node-rank R \(0 … 1; node 0 hosts rank 0\) and --rendezvous HOST:PORT/],
      [['--gpus', '1', '--nodes', '2', '--node-rank', '2', '--rendezvous', 'node0:29500'], /--node-rank 2 is not a node of 2/],
      [['--gpus', '1', '--rendezvous', 'node0'], /--rendezvous must be HOST:PORT with a port in 1\.\.65535/],
      [['--nodes', '2'], /--nodes, --node-rank and --rendezvous go with --gpus N/],
      [['--rendezvous', 'node0:29500'], /--nodes, --node-rank and --rendezvous go with --gpus N/],
    ]
    for (const [args, message] of cases) {
      const r = evolve(args)
      expect(r.code, args.join(' ')).toBe(2)
      expect(r.stderr, args.join(' ')).toMatch(message)
    }
  }, 120_000)
})
