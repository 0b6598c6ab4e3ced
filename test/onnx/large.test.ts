// Export at a real model's size: a random Qwen3-0.6B-shaped model (bench/random-model.mjs: bf16
// weights, the real Qwen3 tokenizer, 151,936-token vocabulary) exported f16 (inline, 1.2 GB) and
// f32 (over the 1.8 GB threshold: external data), each run by onnxruntime against the engine.
// Minutes of work and ~6 GB of memory, so it runs only on request:
//
//   AUTODIDACT_ONNX_LARGE=1 npx vitest run test/onnx/large.test.ts
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

import { exportOnnx } from '../../src/export/onnx.js'
import { loadModel } from '../../src/index.js'
import { OnnxCausalLM } from '../../src/onnx/index.js'
// @ts-expect-error — a plain .mjs bench helper without type declarations
import { writeRandomModel } from '../../bench/random-model.mjs'
import { maxRelError } from './compare.js'

const run = process.env.AUTODIDACT_ONNX_LARGE === '1'

describe.skipIf(!run)('ONNX export of a Qwen3-0.6B-shaped model', () => {
  const root = run ? mkdtempSync(join(tmpdir(), 'ad-onnx-large-')) : ''
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true })
  })

  it('f16 inline and f32 external data match the engine', { timeout: 900_000 }, async () => {
    const src = writeRandomModel(join(tmpdir(), 'autodidact-bench-qwen3-0.6b')) as string
    const tokens = [9707, 11, 1879, 374, 264, 1273, 315, 279, 3681, 13, 576, 4226, 374, 220, 19, 17]
    const engine = await loadModel(src, { threads: 2 })
    const cache = engine.handle.createCache(1, tokens.length)
    const want = (await engine.handle.step(cache, { slots: Int32Array.of(0), counts: Int32Array.of(tokens.length), outModes: Uint8Array.of(2), tokens: Int32Array.from(tokens), returnLogits: true })).logits!
    cache.dispose()
    engine.dispose()
    for (const dtype of ['f16', 'f32'] as const) {
      const out = join(root, dtype)
      const r = await exportOnnx(src, out, { dtype })
      expect(existsSync(join(out, 'onnx', 'model.onnx_data'))).toBe(dtype === 'f32')
      const t0 = performance.now()
      const lm = await OnnxCausalLM.open(out, { threads: 2, dtype })
      const opened = (performance.now() - t0) / 1000
      const got = await lm.logits(tokens)
      await lm.dispose()
      const err = maxRelError(got, want)
      console.log(`qwen3-0.6b-shape ${dtype}: ${r.bytes} bytes, export ${r.seconds.toFixed(1)} s, onnxruntime load ${opened.toFixed(1)} s, max rel logit error ${err.toExponential(2)}`)
      // bf16 source weights are exact in f16 only when in f16's range; these (2^-6 … 2^-5) are
      expect(err).toBeLessThanOrEqual(1e-4)
      rmSync(out, { recursive: true, force: true })
    }
  })
})
