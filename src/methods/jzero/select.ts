// J-Zero task selection for the Solver (JZ §3.1): the Solver answers each candidate task M times,
// the Judge scores the answers, and the K tasks of largest score dispersion s_i = std_j r^S_{i,j}
// (Eq. 8) — those at the Solver's capability frontier — are kept.
import { scoreDispersion, selectTopKByDispersion } from '../../rl/challenger.js'

export interface DispersionSelection {
  /** Indices of the kept tasks, largest s_i first (ties: lower index first). */
  kept: number[]
  /** s_i of every candidate (population std, ddof 0). */
  dispersions: number[]
}

// JZ Eq. 8: s_i = std({r^S_{i,j}}_{j=1..M}); keep the top-K by s_i.
export function selectByDispersion(scores: ReadonlyArray<ArrayLike<number>>, K: number): DispersionSelection {
  if (!Number.isInteger(K) || K < 0) throw new RangeError(`K must be a non-negative integer, got ${K}`)
  const dispersions = scores.map((s) => scoreDispersion(s))
  return { kept: selectTopKByDispersion(dispersions, K), dispersions }
}
