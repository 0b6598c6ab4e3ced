// Two runs of the same method compared as the data-parallel tests do (evolve.test.ts: --ranks 2 vs
// 1 rank; nccl-fake.test.ts: 2 ranks over the NCCL collective path vs 1 rank): the metrics of every
// step and every tensor of a checkpoint within TOLERANCE, and the small configs they run.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { expect } from 'vitest'
import { readSafetensorsRefs, readTensorFloat32 } from '../../src/engine/hf/safetensors.js'

/** |a − b| ≤ 1e-4·max(|a|, |b|) + 1e-7 (float32 sums in another order: the ranks' partial gradients). */
export const TOLERANCE = { relative: 1e-4, absolute: 1e-7 }
export const close = (a: number, b: number) => (Number.isNaN(a) && Number.isNaN(b)) || Math.abs(a - b) <= TOLERANCE.relative * Math.max(Math.abs(a), Math.abs(b)) + TOLERANCE.absolute

// 4 proposals + 4 questions × 3 answers = 16 sequences in micro-batches of 4
export const COSE_CONFIG = {
  proposer: { count: 4, levels: [2, 3], temperature: 1, maxTokens: 32 },
  solver: { questions: 4, freshFirst: 2, n: 3, temperature: 1, maxTokens: 48 },
  ppo: { microBatchSize: 4 },
  eval: { every: 2, size: 8, benchmarks: [] },
  checkpointEvery: 1,
}
// 4 prompts × 4 rollouts, 2 updates of 2 prompts (8 sequences) in micro-batches of 4
export const TTRL_CONFIG = {
  prompts: { offset: 0, size: 8 },
  promptsPerStep: 4,
  rollout: { n: 4, maxTokens: 32 },
  ppo: { miniBatchPrompts: 2, microBatchSize: 4 },
  eval: { every: 2, size: 8, protocol: { samples: 2, maxTokens: 32 } },
  checkpointEvery: 1,
}

export const metrics = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)

/** Every leaf of two metrics rows that differs beyond TOLERANCE (timings aside). */
export function differences(a: unknown, b: unknown, path = ''): string[] {
  if (/\.(seconds|tokensPerSecond|mfu)$/.test(path)) return [] // wall-clock fields
  if (typeof a === 'number' && typeof b === 'number') return close(a, b) ? [] : [`${path}: ${a} vs ${b}`]
  if (a && typeof a === 'object' && b && typeof b === 'object') {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)])
    return [...keys].flatMap((k) => differences((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`))
  }
  return a === b ? [] : [`${path}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`]
}

/** The largest |Δ| beyond TOLERANCE over every tensor of every safetensors file under two checkpoint folders (names and shapes must match). */
export async function tensorDifferences(a: string, b: string): Promise<{ compared: number; failures: string[] }> {
  const failures: string[] = []
  let compared = 0
  for (const sub of ['model', 'model-state']) {
    const files = readdirSync(join(a, sub)).filter((f) => f.endsWith('.safetensors'))
    expect(files.length).toBeGreaterThan(0)
    for (const f of files) {
      const refsA = await readSafetensorsRefs(join(a, sub, f)).catch(async () => (await import('../../src/engine/hf/safetensors.js')).readSafetensorsHeader(join(a, sub, f)).then((h) => h.tensors))
      const refsB = await readSafetensorsRefs(join(b, sub, f)).catch(async () => (await import('../../src/engine/hf/safetensors.js')).readSafetensorsHeader(join(b, sub, f)).then((h) => h.tensors))
      expect(refsB.map((r) => r.name).sort()).toEqual(refsA.map((r) => r.name).sort())
      for (const ra of refsA) {
        const rb = refsB.find((r) => r.name === ra.name)!
        expect(rb.shape).toEqual(ra.shape)
        const [x, y] = [await readTensorFloat32(ra), await readTensorFloat32(rb)]
        for (let i = 0; i < x.length; i++) {
          compared++
          if (!close(x[i], y[i])) {
            failures.push(`${sub}/${ra.name}[${i}]: ${x[i]} vs ${y[i]}`)
            break
          }
        }
      }
    }
  }
  return { compared, failures }
}

export const step = (n: number) => `step-${String(n).padStart(6, '0')}`

