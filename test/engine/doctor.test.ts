// `autodidact doctor` reports what the build contains and why CUDA is off when it is.
import { describe, expect, it } from 'vitest'
import { doctorReport } from '../../src/index.js'
import { formatDoctor } from '../../src/cli/doctor.js'

describe('doctor', () => {
  it('names the version, backends, threads, SIMD level and the CUDA state with a reason', async () => {
    const r = await doctorReport()
    expect(r.nativeError).toBeNull()
    expect(r.version).toMatch(/^\d+\.\d+\.\d+/)
    expect(r.native!.backends).toContain('cpu')
    expect(r.native!.cpuThreads).toBeGreaterThan(0)
    expect(r.native!.simd).toMatch(/avx|sse|neon|scalar/)
    const cuda = r.native!.cuda
    if (cuda.available) expect(cuda.devices.length).toBeGreaterThan(0)
    else expect(cuda.reason.length).toBeGreaterThan(10)
    const text = formatDoctor(r)
    expect(text).toContain('cpu:')
    expect(text).toContain('cuda:')
  })
})
