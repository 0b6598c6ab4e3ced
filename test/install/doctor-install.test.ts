// doctor's install lines: whether ONNX has onnxruntime-node (and why not, with the command that
// adds it), and the command that builds what is missing, runnable from a consumer's project.
import { describe, expect, it } from 'vitest'
import { formatDoctor, REBUILD_COMMAND, type DoctorReport } from '../../src/cli/doctor.js'
import type { NativeInfo } from '../../src/native.js'
import { ONNX_RUNTIME_INSTALL, onnxRuntimeStatus } from '../../src/onnx/index.js'

const cpuOnly = (kind: string): NativeInfo => ({
  abiVersion: 1,
  backends: ['cpu'],
  cpuThreads: 2,
  simd: 'avx2+fma',
  compiler: 'g++ 12',
  cuda: { compiled: false, available: false, kind, reason: 'why', pluginPath: '/x/autodidact_cuda.so', gemmPath: '', runtimeVersion: 0, driverVersion: 0, devices: [] },
})
const noOnnx = { available: false as const, reason: `onnxruntime-node is not installed (…); to add it: ${ONNX_RUNTIME_INSTALL}` }

describe('doctor, the install lines', () => {
  it('finds onnxruntime-node where this checkout has it (its binding included)', () => {
    const status = onnxRuntimeStatus()
    expect(status).toMatchObject({ available: true, version: '1.30.0' })
    if (status.available) expect(status.entry).toMatch(/onnxruntime-node[/\\]dist[/\\]index\.js$/)
  })

  it('without the addon: the reason, then the command that builds it from the project', () => {
    const r: DoctorReport = { version: '0.1.0', node: 'v20', native: null, nativeError: 'the native addon is not built', onnx: noOnnx }
    const lines = formatDoctor(r).split('\n')
    expect(lines).toContain('native addon: unavailable: the native addon is not built')
    expect(lines).toContain(`onnx: unavailable: ${noOnnx.reason}`)
    expect(lines.at(-1)).toMatch(new RegExp(`^to build the native addon: ${REBUILD_COMMAND} \\(in your project`))
    expect(REBUILD_COMMAND).toBe('npx autodidact rebuild')
  })

  it('with a CPU-only build: the CUDA advice only where the plugin is missing or stale, never for a missing driver', () => {
    const onnx = { available: true as const, version: '1.30.0', entry: '/x/dist/index.js' }
    for (const kind of ['not-built', 'stale']) expect(formatDoctor({ version: '0.1.0', node: 'v20', native: cpuOnly(kind), nativeError: null, onnx }).split('\n').slice(-2)).toEqual(['onnx: onnxruntime-node 1.30.0', `to build the CUDA backend: ${REBUILD_COMMAND} --cuda on (needs nvcc)`])
    const noDriver = formatDoctor({ version: '0.1.0', node: 'v20', native: cpuOnly('no-driver'), nativeError: null, onnx })
    expect(noDriver).not.toContain('to build')
    expect(noDriver.split('\n').at(-1)).toBe('onnx: onnxruntime-node 1.30.0')
  })
})
