// COSE's Solver batch: up to solver.freshFirst of this step's accepted proposals first, the rest
// drawn from the replay by priority (Eq. 6). With freshFirst ≥ questions (the old rule) the fresh
// proposals filled the toy batch every step and the priority switch ('w/o priority') never acted.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { scriptedPolicies } from '../../src/methods/common/scripted-policy.js'
import { resolveCoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { arithScript, scriptedValidatorScore } from './arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-cose-fresh-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const world = arithWorld()

/** The Solver's questions of each step, and each step's accepted proposals in order. */
async function solverBatches(freshFirst: number, priority: 'cose' | 'uniform') {
  const config = resolveCoseConfig({ steps: 3, proposer: { count: 10, levels: [3], temperature: 1, maxTokens: 40 }, solver: { questions: 4, freshFirst, n: 2, temperature: 1, maxTokens: 64 }, switches: { weighting: true, priority } })
  const open = scriptedPolicies({ script: arithScript({ solveRate: 0.5, malformedRate: 0 }) })
  const run = await CoseRun.start(join(root, 'base'), config, world, { openPolicy: open })
  for (let s = 0; s < 3; s++) await run.runStep()
  const policy = open.policies.find((p) => p.trainerOf)!
  const steps = [0, 1, 2].map((s) => policy.calls.slice(4 * s, 4 * s + 4))
  run.dispose()
  return steps.map(([proposed, , solved]) => ({
    accepted: [...new Set(proposed.outputs.map((g) => /<question>(.*)<\/question>/.exec(g[0].text)![1]).filter((q) => (scriptedValidatorScore(q) - 1) / 9 >= 0.5))],
    solved: solved.prompts.map((p) => p.slice('Solve: '.length).trim()),
  }))
}

describe('COSE solver.freshFirst', () => {
  it('solves up to freshFirst of the step\'s accepted proposals first, then draws the rest of the batch from the replay', async () => {
    for (const { accepted, solved } of await solverBatches(1, 'cose')) {
      expect(accepted.length).toBeGreaterThan(1)
      expect(solved[0]).toBe(accepted[0])
      expect(solved.length).toBe(Math.min(4, new Set(solved).size))
    }
    // the old rule: the batch is the first `questions` accepted proposals, whatever the priority
    const all = await solverBatches(4, 'cose')
    for (const { accepted, solved } of all) expect(solved.slice(0, Math.min(4, accepted.length))).toEqual(accepted.slice(0, 4))
    expect(await solverBatches(4, 'uniform')).toEqual(all)
  })
})
