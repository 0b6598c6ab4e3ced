// COSE never crashes on malformed role outputs: a random model writes garbage for every role,
// every format indicator is 0, rewards are 0, weights sit at the floor, and the loop goes on.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, it } from 'vitest'
import { resolveCoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { arithWorld as toyWorld } from '../../src/worlds/arith/index.js'

const arithWorld = toyWorld()
import { writeTinyModel } from '../helpers/tiny-model.js'

const root = mkdtempSync(join(tmpdir(), 'ad-cose-bad-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

it('malformed role outputs get format indicator 0 and never crash the loop', async () => {
  const tiny = await writeTinyModel(join(root, 'm'), { family: 'qwen3', dtype: 'F32', seed: 7 })
  const config = resolveCoseConfig({
    steps: 2,
    proposer: { count: 4, levels: [3], temperature: 1, maxTokens: 12 },
    validator: { temperature: 1, maxTokens: 12, acceptThreshold: 0.5 },
    solver: { questions: 2, n: 2, temperature: 1, maxTokens: 12 },
    judge: { temperature: 1, maxTokens: 12 },
  })
  const run = await CoseRun.start(tiny.dir, config, arithWorld, { threads: 2 })
  for (let i = 0; i < 2; ++i) {
    const r = await run.runStep()
    expect(r.proposals).toBe(4)
    expect(r.proposerFormatRate).toBe(0)
    expect(r.acceptRate).toBe(0)
    expect(r.bufferSize).toBe(0)
    expect(r.rewardProposer.max).toBe(0)
    expect(r.weightProposer.min).toBe(0.1)
    expect(r.weightProposer.max).toBe(0.1)
    expect(r.train).not.toBeNull()
    expect(r.train!.skipped).toBe(false)
  }
  expect(run.step).toBe(2)
  run.dispose()
})
