// The PyTorch peer of the CPU benchmarks: PyTorch 2.x (MKL, oneDNN) in a virtual environment the
// benches make themselves, offline, from the wheel these machines' pip is set up with
// (`python3 -m venv --system-site-packages V && V/bin/pip install --no-index --no-deps torch`;
// the system site packages give it sympy, networkx, jinja2, typing_extensions). Debian's
// python3-torch 1.13 (generic BLAS, no SDPA) is not a peer a user would pick, and is not used.
//
//   const peer = torchPeer()   // { python, version, mkl, capability } | { unavailable: reason }
//
// The venv lives in $AUTODIDACT_TORCH_VENV, else ~/.cache/autodidact/torch-venv; it is made once.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, rmSync } from 'node:fs'
import { homedir } from 'node:os'
import { dirname, join } from 'node:path'

export const TORCH_VENV = process.env.AUTODIDACT_TORCH_VENV ?? join(homedir(), '.cache', 'autodidact', 'torch-venv')
const MIN_MAJOR = 2 // scaled_dot_product_attention, fused AdamW on CPU

const PROBE = `import json, torch
print(json.dumps({"version": torch.__version__, "mkl": torch.backends.mkl.is_available(),
  "mkldnn": torch.backends.mkldnn.is_available(), "capability": torch.backends.cpu.get_cpu_capability()}))`

function probe(python) {
  if (!existsSync(python)) return null
  const r = spawnSync(python, ['-c', PROBE], { encoding: 'utf8' })
  if (r.status !== 0) return null
  const info = JSON.parse(r.stdout.trim().split('\n').at(-1))
  return Number(info.version.split('.')[0]) >= MIN_MAJOR ? { python, ...info } : null
}

function run(cmd, args) {
  console.error(`[bench] ${cmd} ${args.join(' ')}`)
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: '1' } })
  return r.status === 0
}

let cached = null

/** The venv's python with PyTorch ≥ 2 importable, made (offline) when missing; or why not. */
export function torchPeer() {
  if (cached) return cached
  const python = join(TORCH_VENV, 'bin', 'python')
  let found = probe(python)
  if (!found) {
    console.error(`[bench] installing PyTorch into ${TORCH_VENV} (offline, once)…`)
    rmSync(TORCH_VENV, { recursive: true, force: true })
    mkdirSync(dirname(TORCH_VENV), { recursive: true })
    const made = run('python3', ['-m', 'venv', '--system-site-packages', TORCH_VENV]) && run(join(TORCH_VENV, 'bin', 'pip'), ['install', '-q', '--no-index', '--no-deps', 'torch'])
    found = made ? probe(python) : null
    if (!found) return (cached = { unavailable: `PyTorch ≥ ${MIN_MAJOR} could not be installed offline into ${TORCH_VENV}` })
  }
  return (cached = found)
}
