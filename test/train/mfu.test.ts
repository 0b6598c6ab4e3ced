// The FLOPs of a training step (src/train/mfu.ts) against a count by hand, the device peaks, and
// the micro-batch packing (src/train/packing.ts).
import { describe, expect, it } from 'vitest'
import type { ModelConfig } from '../../src/engine/types.js'
import { cudaBf16Peak, mfuOf, trainingStepFlops } from '../../src/train/mfu.js'
import { microBatchCount, packMicroBatches } from '../../src/train/packing.js'

// hidden 4, intermediate 6, 2 layers, 2 heads of 2 dims, 1 kv head, vocabulary 10
const TINY = { hiddenSize: 4, intermediateSize: 6, numLayers: 2, numHeads: 2, numKvHeads: 1, headDim: 2, vocabSize: 10 } as ModelConfig

describe('trainingStepFlops', () => {
  // Per layer: q 4×4 = 16, k 4×2 = 8, v 8, o 16, gate 4×6 = 24, up 24, down 24 → 120; N = 240.
  // Two sequences feeding 3 and 2 tokens: T = 5, causal pairs 3·4/2 + 2·3/2 = 9; 3 head rows.
  const shape = { lengths: [3, 2], headRows: 3, headWidth: 10 }

  it('full fine-tuning: 6·N·T + 12·layers·heads·hd·pairs + 6·V·H·rows', () => {
    // 6·240·5 = 7200; 12·2·2·2·9 = 864; 6·10·4·3 = 720
    expect(trainingStepFlops(TINY, { ...shape, trainBase: true, lora: null })).toBe(7200 + 864 + 720)
  })

  it('LoRA on a frozen base: 4·N·T, the attention, 4·V·H·rows, and 6·r·(in + out)·T per adapted linear', () => {
    // 4·240·5 = 4800; 864; 4·10·4·3 = 480; q_proj rank 1 in both layers: 2·6·1·(4 + 4)·5 = 480
    expect(trainingStepFlops(TINY, { ...shape, trainBase: false, lora: { rank: 1, targets: ['q_proj'], trained: true } })).toBe(4800 + 864 + 480 + 480)
  })

  it('frozen adapters beside a training base cost their forward and dx: 4·r·(in + out)·T', () => {
    // down_proj rank 2: 2 layers · 4·2·(6 + 4)·5 = 800
    expect(trainingStepFlops(TINY, { ...shape, trainBase: true, lora: { rank: 2, targets: ['down_proj'], trained: false } })).toBe(7200 + 864 + 720 + 800)
  })

  it('a reference forward adds 2·N·T + 4·layers·heads·hd·pairs + 2·V·H·rows', () => {
    // 2400 + 288 + 240
    expect(trainingStepFlops(TINY, { ...shape, trainBase: true, lora: null, referenceForward: true })).toBe(7200 + 864 + 720 + 2928)
  })
})

describe('device peaks and MFU', () => {
  it('known parts from the datasheets, others from the per-SM rate of their family, unknown ones null', () => {
    expect(cudaBf16Peak('9.0', 132)).toBe(989.4e12)
    expect(cudaBf16Peak('8.0', 108)).toBe(312e12)
    expect(cudaBf16Peak('9.0', 66)).toBeCloseTo(989.4e12 / 2, -6)
    expect(cudaBf16Peak('7.5', 40)).toBeNull()
  })

  it('mfu = flops / (seconds · peak), null without a peak or a time', () => {
    expect(mfuOf(5e12, 2, 10e12)).toBe(0.25)
    expect(mfuOf(5e12, 2, null)).toBeNull()
    expect(mfuOf(5e12, 0, 10e12)).toBeNull()
  })
})

describe('micro-batch packing', () => {
  it('deals ragged sequences longest first into the lightest micro-batch, each in batch order', () => {
    const lengths = [1000, 50, 60, 900, 70, 80, 950, 40]
    const bins = packMicroBatches(lengths, 3)
    expect(bins.flat().sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7])
    for (const b of bins) expect(b).toEqual([...b].sort((x, y) => x - y))
    const loads = bins.map((b) => b.reduce((a, i) => a + lengths[i], 0))
    // by hand: 1000 → 0, 950 → 1, 900 → 2, 80 → 2, 70 → 1, 60 → 2, 50 → 0, 40 → 1: loads 1050 / 1060 / 1040
    // (cutting the batch in order, 3 at a time, would give 1110 / 1050 / 990)
    expect(bins).toEqual([[0, 1], [4, 6, 7], [2, 3, 5]])
    expect(loads).toEqual([1050, 1060, 1040])
  })

  it('as many micro-batches as the count asks, more when a token budget needs them, never more than items', () => {
    expect(microBatchCount(10, 5000, 4)).toBe(3)
    expect(microBatchCount(10, 5000, 4, 1000)).toBe(5)
    expect(microBatchCount(3, 5000, 4, 10)).toBe(3)
    expect(packMicroBatches([5, 5, 5], 8)).toEqual([[0], [1], [2]])
  })
})
