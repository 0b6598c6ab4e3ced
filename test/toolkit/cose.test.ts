import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  coseProposerReward,
  coseProposerWeight,
  coseSolverReward,
  coseSolverWeight,
  learnability,
  solveRate,
} from '../../src/rl/index.js'

describe('COSE Eq. 1 solve rate and learnability', () => {
  it('averages the Judge scores of the sampled answers', () => {
    expect(solveRate([1, 0.5, 0])).toBe(0.5)
    expect(solveRate(Float32Array.from([0.25]))).toBe(0.25)
    expect(solveRate([])).toBeNaN()
  })
  it('4p(1 − p) peaks at ½', () => {
    expect(learnability(0.5)).toBe(1)
    expect(learnability(0)).toBe(0)
    expect(learnability(1)).toBe(0)
    expect(learnability(0.9)).toBeCloseTo(0.36, 15)
  })
})

describe('COSE Eq. 4–5 confidence weights', () => {
  it('w_P = clip(v·c_V, 0.1, 1)', () => {
    expect(coseProposerWeight(0.9, 0.5)).toBeCloseTo(0.45, 15)
    expect(coseProposerWeight(0.05, 1)).toBe(0.1)
    expect(coseProposerWeight(1, 1)).toBe(1)
    expect(coseProposerWeight(0, 0.7)).toBe(0.1)
  })
  it('w_S = clip(v·c_V·c_J, 0.1, 1)', () => {
    expect(coseSolverWeight(0.8, 0.5, 0.5)).toBeCloseTo(0.2, 15)
    expect(coseSolverWeight(0.8, 0.5, 0.1)).toBe(0.1)
    expect(coseSolverWeight(1, 1, 1)).toBe(1)
  })
  it('missing confidence (NaN) gets the floor; the w/o-weighting ablation gives 1', () => {
    expect(coseSolverWeight(0.9, NaN, 0.9)).toBe(0.1)
    expect(coseProposerWeight(0.2, 0.2, { enabled: false })).toBe(1)
    expect(coseSolverWeight(0.2, 0.2, 0.2, { floor: 0.05 })).toBeCloseTo(0.05, 15)
  })
  it('weights stay in [0.1, 1] for any input (property)', () => {
    const anyDouble = fc.oneof(fc.double(), fc.double({ min: 0, max: 1 }), fc.constant(NaN))
    fc.assert(
      fc.property(anyDouble, anyDouble, anyDouble, (v, cV, cJ) => {
        const wP = coseProposerWeight(v, cV)
        const wS = coseSolverWeight(v, cV, cJ)
        return wP >= 0.1 && wP <= 1 && wS >= 0.1 && wS <= 1
      }),
    )
  })
})

describe('COSE Eq. 7–8 rewards', () => {
  it('r_S = f_S·p(q, a)', () => {
    expect(coseSolverReward(1, 0.7)).toBe(0.7)
    expect(coseSolverReward(0, 0.7)).toBe(0)
    expect(coseSolverReward(0, NaN)).toBe(0)
    expect(coseSolverReward(true, 1)).toBe(1)
  })
  it('r_P = f_P·(v + 4p(1 − p))/2', () => {
    expect(coseProposerReward(1, 0.8, 0.5)).toBeCloseTo(0.9, 15)
    expect(coseProposerReward(1, 0.6, 0.9)).toBeCloseTo(0.48, 15)
    expect(coseProposerReward(1, 1, 1)).toBe(0.5)
    expect(coseProposerReward(0, 0.8, 0.5)).toBe(0)
  })
})
