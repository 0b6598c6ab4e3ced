import { describe, expect, it } from 'vitest'
import {
  auxPreferencePair,
  auxSftWeights,
  disChallengerReward,
  jzChallengerReward,
  jzMeanJudgeScore,
  randomPreferencePair,
  rzeroChallengerReward,
  scoreDispersion,
  selectTopKByDispersion,
  uncertaintyReward,
} from '../../src/rl/index.js'
import { Rng } from '../../src/util/index.js'
import { bradleyTerryLoss, weightedSftLoss } from '../reference/offline-losses64.js'

describe('Challenger rewards', () => {
  it('R-Zero: r_unc − r_rep, −1 − r_rep for an unparsed question', () => {
    expect(rzeroChallengerReward({ parsed: true, pHat: 0.5, rRep: 0.25 })).toBe(0.75)
    expect(rzeroChallengerReward({ parsed: false, pHat: 0.5, rRep: 0.25 })).toBe(-1.25)
    expect(rzeroChallengerReward({ parsed: true, pHat: 0.7, rRep: 0.25 }, { form: 'dis' })).toBeCloseTo(0.05, 15)
    expect(uncertaintyReward(0.7)).toBeCloseTo(0.6, 15)
    expect(uncertaintyReward(0.7, 'dis')).toBeCloseTo(0.3, 15)
  })

  it('DIS composite: α·r_unc + β·r_dis − r_rep, −1 on parse failure', () => {
    const x = { parsed: true, rUnc: 1 / 3, rDis: 0.5793801642856950, rRep: 0.1 }
    expect(disChallengerReward(x)).toBeCloseTo(1 / 3 + 0.579380164285695 - 0.1, 15)
    expect(disChallengerReward(x, { alpha: 0.5, beta: 2 })).toBeCloseTo(1 / 6 + 2 * 0.579380164285695 - 0.1, 15)
    expect(disChallengerReward({ ...x, parsed: false })).toBe(-1)
  })

  it('J-Zero Eq. 4 and Eq. 6', () => {
    expect(jzMeanJudgeScore([0.2, 0.4, 0.3])).toBeCloseTo(0.3, 15)
    expect(jzMeanJudgeScore([])).toBeNaN()
    expect(jzChallengerReward({ formatOk: true, meanScore: 0.3, rRep: 0.2 })).toBeCloseTo(0.5, 15)
    expect(jzChallengerReward({ formatOk: true, meanScore: 0.9, rRep: 0.3 })).toBe(0)
    expect(jzChallengerReward({ formatOk: false, meanScore: 0.1, rRep: 0.25 })).toBe(-1.25)
  })

  it('J-Zero Eq. 8: score dispersion and top-K task selection', () => {
    expect(scoreDispersion([0, 1])).toBe(0.5)
    expect(scoreDispersion([0, 1], 1)).toBeCloseTo(Math.SQRT1_2, 15)
    expect(scoreDispersion([0.4], 1)).toBe(0)
    expect(scoreDispersion([0.4, 0.4, 0.4])).toBeCloseTo(0, 15)
    expect(scoreDispersion([])).toBeNaN()
    expect(selectTopKByDispersion([0.1, 0.5, 0.5, NaN, 0.3], 2)).toEqual([1, 2])
    expect(selectTopKByDispersion([0.1, 0.5], 5)).toEqual([1, 0])
    expect(selectTopKByDispersion([0.1], 0)).toEqual([])
  })
})

describe('offline auxiliary preferences (UID Eq. 6–8) and the Bradley–Terry loss (JZ Eq. 13)', () => {
  it('DPO pair: max vs min score with gap ≥ 0.05', () => {
    expect(auxPreferencePair([0.2, null, 0.9, 0.5])).toEqual({ chosen: 2, rejected: 0, gap: 0.9 - 0.2 })
    expect(auxPreferencePair([0.5, 0.54])).toBeNull()
    expect(auxPreferencePair([0.5, 0.55], { minGap: 0.05 })?.chosen).toBe(1)
    expect(auxPreferencePair([0.3, 0.3, 0.3])).toBeNull()
    expect(auxPreferencePair([0.3])).toBeNull()
    expect(auxPreferencePair([])).toBeNull()
  })

  it('random DPO control: two distinct responses, random orientation', () => {
    const rng = new Rng(1)
    const seen = new Set<string>()
    for (let k = 0; k < 200; k++) {
      const p = randomPreferencePair(3, rng)!
      expect(p.chosen).not.toBe(p.rejected)
      seen.add(`${p.chosen}>${p.rejected}`)
    }
    expect(seen.size).toBe(6)
    expect(randomPreferencePair(1, rng)).toBeNull()
  })

  it('weighted SFT: w_i = m·softmax(αq)_i with mean 1', () => {
    const w = auxSftWeights([0, Math.log(2) / 2])
    expect(w[0]).toBeCloseTo(2 / 3, 15)
    expect(w[1]).toBeCloseTo(4 / 3, 15)
    expect(Array.from(auxSftWeights([0.3, 0.3, 0.3]))).toEqual([1, 1, 1])
    expect(auxSftWeights([]).length).toBe(0)
    const big = auxSftWeights([1000, 0], 2)
    expect(big[0]).toBeCloseTo(2, 12)
    expect(Array.from(auxSftWeights([0.1, 0.9], 2)).reduce((s, x) => s + x, 0)).toBeCloseTo(2, 14)
  })

  it('weighted SFT loss, UID Eq. 8', () => {
    // −(1/2)·[(1/2)(−1 − 3) + (2/1)(−2)] = −(1/2)·(−6) = 3
    expect(weightedSftLoss([1, 2], [[-1, -3], [-2]])).toBeCloseTo(3, 15)
    expect(weightedSftLoss([], [])).toBeNaN()
    expect(weightedSftLoss([1], [[-1, -3, -100]], [[1, 1, 0]])).toBeCloseTo(2, 15)
  })

  it('Bradley–Terry loss −E log σ(J+ − J−)', () => {
    expect(bradleyTerryLoss([0], [0])).toBeCloseTo(Math.log(2), 15)
    expect(bradleyTerryLoss([2, 0], [0, 2])).toBeCloseTo((Math.log1p(Math.exp(-2)) + Math.log1p(Math.exp(2))) / 2, 14)
    expect(bradleyTerryLoss([800], [0])).toBe(0)
    expect(bradleyTerryLoss([0], [800])).toBeCloseTo(800, 10)
  })
})
