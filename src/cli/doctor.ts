// `autodidact doctor`: what this installation can do, and why not where it cannot.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { nativeAddon, packageRoot, type NativeCollectiveLibrary, type NativeDeviceMemory, type NativeInfo } from '../native.js'
import { onnxRuntimeStatus, type OnnxRuntimeStatus } from '../onnx/runtime.js'

export interface DoctorReport {
  version: string
  node: string
  native: NativeInfo | null
  nativeError: string | null
  /** The install: onnxruntime-node (an optional dependency), or why the ONNX features are off. */
  onnx: OnnxRuntimeStatus
  /** Per CUDA device: free and total bytes now, and this process's peak of held bytes (null where unreadable). */
  deviceMemory?: (NativeDeviceMemory | null)[]
  /** The collectives' libraries (data parallelism): OpenMPI for --ranks on the CPU, NCCL for GPUs. */
  collectives?: { mpi: NativeCollectiveLibrary; nccl: NativeCollectiveLibrary }
}

export async function doctorReport(): Promise<DoctorReport> {
  const version = (JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version
  try {
    const addon = await nativeAddon()
    const native = addon.info()
    const deviceMemory = native.cuda.available ? native.cuda.devices.map((d) => addon.deviceMemory('cuda', d.index)) : []
    return { version, node: process.version, native, nativeError: null, onnx: onnxRuntimeStatus(), deviceMemory, collectives: addon.collective.libraries() }
  } catch (e) {
    return { version, node: process.version, native: null, nativeError: (e as Error).message, onnx: onnxRuntimeStatus() }
  }
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`
}

export function formatDoctor(r: DoctorReport): string {
  const lines = [`autodidact ${r.version} (node ${r.node})`]
  if (!r.native) {
    lines.push(`native addon: unavailable: ${r.nativeError}`)
    return [...lines, ...installLines(r)].join('\n')
  }
  const n = r.native
  lines.push(`backends compiled: ${n.backends.join(', ')}`)
  lines.push(`cpu: ${n.cpuThreads} threads, SIMD ${n.simd}, built with ${n.compiler}`)
  if (n.cuda.available) {
    lines.push(`cuda: runtime ${n.cuda.runtimeVersion}, driver ${n.cuda.driverVersion}`)
    for (const d of n.cuda.devices) {
      const m = r.deviceMemory?.[d.index]
      const memory = m ? ` (${gib(m.free)} free now; peak held by this process ${gib(m.peakAllocated)})` : ''
      lines.push(`  [${d.index}] ${d.name}: ${gib(d.totalMemory)}${memory}, compute capability ${d.computeCapability}, ${d.multiprocessors} SMs`)
    }
    lines.push(`  memory: 'autodidact profile --estimate --model DIR --batch B --seq N [--lora R]' plans a training step's peak before a run`)
    lines.push(`  GEMM: ${n.cuda.gemmPath}; loadModel(dir, { device: 'cuda' }) and evolve --device cuda run here (bench/device-check checks this GPU against the CPU)`)
  } else {
    lines.push(`cuda: unavailable (${n.cuda.kind}): ${n.cuda.reason}`)
  }
  lines.push(...formatCapabilities(n.capabilities))
  if (r.collectives) lines.push(...formatCollectives(r.collectives))
  return [...lines, ...installLines(r)].join('\n')
}

/** What a found NCCL enables today. */
const NCCL_USE = 'evolve --gpus 1 opens it (past one GPU, runs are refused: the CUDA engine does not all-reduce its gradients yet)'

/** Which collective libraries were found (MPI: `evolve --ranks N`; NCCL: the GPU path), and why not. */
export function formatCollectives(c: NonNullable<DoctorReport['collectives']>): string[] {
  const one = (name: string, lib: NativeCollectiveLibrary, use: string) => `  ${name}: ${lib.found ? `found (${lib.version || 'version unknown'}, ${lib.path}): ${use}` : `not found: ${lib.reason}`}`
  return ['collectives (data parallelism):', one('MPI', c.mpi, 'evolve --ranks N runs here'), one('NCCL', c.nccl, NCCL_USE)]
}

// ---------------------------------------------------------------- the install: ONNX, and the command that rebuilds
/** Rebuilds the native addon inside the installed package; works from the project that depends on it. */
export const REBUILD_COMMAND = 'npx autodidact rebuild'

function installLines(r: DoctorReport): string[] {
  const onnx = r.onnx.available ? `onnx: onnxruntime-node ${r.onnx.version}` : `onnx: unavailable: ${r.onnx.reason}`
  const cudaKind = r.native?.cuda.kind
  if (!r.native) return [onnx, `to build the native addon: ${REBUILD_COMMAND} (in your project; needs cmake or node-gyp and a C++17 compiler)`]
  if (cudaKind === 'not-built' || cudaKind === 'stale') return [onnx, `to build the CUDA backend: ${REBUILD_COMMAND} --cuda on (needs nvcc)`]
  return [onnx]
}

/**
 * The capability matrix, verb × backend: "yes", or "no" with the backend's reason below the table
 * (from the engine itself: native/model/engine.h's verbs, each backend's support()).
 */
export function formatCapabilities(matrix: NativeInfo['capabilities']): string[] {
  if (!matrix?.length) return []
  const backends = Object.keys(matrix[0].backends)
  const width = Math.max(...matrix.map((r) => r.verb.length))
  const reasons: string[] = []
  const rows = matrix.map((r) => {
    const cells = backends.map((b) => {
      const c = r.backends[b]
      if (c.supported) return 'yes'.padEnd(6)
      reasons.push(`  ${r.verb} on ${b}: ${c.reason}`)
      return `no [${reasons.length}]`.padEnd(6)
    })
    return `  ${r.verb.padEnd(width)}  ${cells.join('  ')}`
  })
  return [`capabilities (verb × backend):`, `  ${''.padEnd(width)}  ${backends.map((b) => b.padEnd(6)).join('  ')}`, ...rows, ...reasons.map((r, i) => r.replace(/^  /, `  [${i + 1}] `))]
}
