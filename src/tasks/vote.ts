// Answer agreement: clustering of equivalent answers, majority and Borda voting, per-variant
// plurality, normalized disagreement entropy and the two uncertainty forms used as Challenger
// rewards. `null` is "no answer": it never votes, never joins a cluster, never wins.

export type Answer = string | null
/** Symmetric equivalence test between two (non-null) answers. */
export type Equivalence = (a: string, b: string) => boolean

/** Identity of answer strings; the default when answers are already normalized. */
export const exactEquality: Equivalence = (a, b) => a === b

class UnionFind {
  private readonly parent: Int32Array
  constructor(n: number) {
    this.parent = Int32Array.from({ length: n }, (_, i) => i)
  }
  find(x: number): number {
    while (this.parent[x] !== x) {
      this.parent[x] = this.parent[this.parent[x]]
      x = this.parent[x]
    }
    return x
  }
  union(a: number, b: number): void {
    const ra = this.find(a)
    const rb = this.find(b)
    // keep the smaller index as root so a cluster's root is its first occurrence
    if (ra < rb) this.parent[rb] = ra
    else if (rb < ra) this.parent[ra] = rb
  }
}

/**
 * Cluster labels by union-find over pairwise equivalence (DIS §4.2): answers i and j share a
 * cluster when a chain of equivalent answers links them. Labels are 0, 1, … in order of each
 * cluster's first occurrence; `null` answers get −1. Identical strings are merged without
 * calling `equivalent`, so it runs once per pair of distinct strings.
 */
export function clusterAnswers(answers: readonly Answer[], equivalent: Equivalence = exactEquality): Int32Array {
  const n = answers.length
  const labels = new Int32Array(n).fill(-1)
  // distinct strings, in first-occurrence order
  const firstOf = new Map<string, number>()
  const distinct: number[] = []
  for (let i = 0; i < n; i++) {
    const a = answers[i]
    if (a === null) continue
    if (!firstOf.has(a)) {
      firstOf.set(a, distinct.length)
      distinct.push(i)
    }
  }
  const uf = new UnionFind(distinct.length)
  if (equivalent !== exactEquality) {
    for (let x = 0; x < distinct.length; x++) {
      for (let y = x + 1; y < distinct.length; y++) {
        if (uf.find(x) === uf.find(y)) continue
        if (equivalent(answers[distinct[x]] as string, answers[distinct[y]] as string)) uf.union(x, y)
      }
    }
  }
  const rootLabel = new Map<number, number>()
  for (let i = 0; i < n; i++) {
    const a = answers[i]
    if (a === null) continue
    const root = uf.find(firstOf.get(a) as number)
    let lab = rootLabel.get(root)
    if (lab === undefined) {
      lab = rootLabel.size
      rootLabel.set(root, lab)
    }
    labels[i] = lab
  }
  return labels
}

export interface VoteResult {
  /** The winning answer as written by its representative, or null when nobody answered. */
  answer: Answer
  /** Index of the representative (earliest supporter), −1 when abstaining. */
  index: number
  /** Number of votes for the winner. */
  count: number
  /** Number of responses, answered or not. */
  total: number
  /** Indices of the winner's supporters, ascending. */
  members: number[]
  /** Cluster label of every response (−1 = no answer). */
  labels: Int32Array
}

/**
 * Majority vote (UID A.1 "Majority Voting"; TTRL pseudo-label, UID B.2): the most frequent answer
 * cluster wins; repeated samples vote separately; ties go to the cluster that occurs first in
 * generation order; the earliest supporter is the representative. Abstains (answer null) when no
 * response has an answer.
 */
export function majorityVote(answers: readonly Answer[], opts: { equivalent?: Equivalence } = {}): VoteResult {
  const labels = clusterAnswers(answers, opts.equivalent)
  const counts: number[] = []
  for (const l of labels) if (l >= 0) counts[l] = (counts[l] ?? 0) + 1
  let best = -1
  for (let l = 0; l < counts.length; l++) if (best < 0 || counts[l] > counts[best]) best = l
  const members: number[] = []
  if (best >= 0) for (let i = 0; i < labels.length; i++) if (labels[i] === best) members.push(i)
  const index = best >= 0 ? members[0] : -1
  return {
    answer: index >= 0 ? answers[index] : null,
    index,
    count: members.length,
    total: answers.length,
    members,
    labels,
  }
}

// UID Eq. 4: g_i = 1[a(y_i) ≃ â_x], membership of response i in the winning cluster.
export function agreementMask(vote: VoteResult): Uint8Array {
  const g = new Uint8Array(vote.total)
  for (const i of vote.members) g[i] = 1
  return g
}

// R-Zero / DIS §3: p̂ = share of the sampled responses that agree with the majority pseudo-label.
// Responses without an answer count in the denominator as non-agreeing; 0 when nobody answered.
export function majorityShare(vote: VoteResult): number {
  return vote.total === 0 ? 0 : vote.count / vote.total
}

// UID A.1: Borda weight of one-based rank r among m eligible responses, √(m − r + 1).
export function bordaRankWeight(rank: number, m: number): number {
  return Math.sqrt(m - rank + 1)
}

export interface BordaResult {
  answer: Answer
  /** Representative: the highest-ranked response supporting the winner (−1 = abstain). */
  index: number
  /** Winner's total weight. */
  weight: number
  /** One-based rank of each response among eligible ones (0 = ineligible). */
  ranks: Int32Array
  /** Borda weight received by each response (0 when ineligible). */
  weights: Float64Array
}

/**
 * Borda voting with √-rank weights (UID A.1 "Borda-added variant"): eligible responses (finite
 * score) are ordered by decreasing score, ties by generation order; rank r of m gets √(m − r + 1);
 * weights are summed per answer cluster. Responses without an answer stay in the ranking but add
 * no weight. Tied totals go to the answer that appears first in ranked order; its highest-ranked
 * supporter is the representative.
 */
export function bordaVote(
  answers: readonly Answer[],
  scores: ReadonlyArray<number | null>,
  opts: { equivalent?: Equivalence } = {},
): BordaResult {
  const n = answers.length
  if (scores.length !== n) throw new RangeError(`${scores.length} scores for ${n} answers`)
  const eligible: number[] = []
  for (let i = 0; i < n; i++) {
    const s = scores[i]
    if (s !== null && Number.isFinite(s)) eligible.push(i)
  }
  eligible.sort((a, b) => (scores[b] as number) - (scores[a] as number) || a - b)
  const m = eligible.length
  const ranks = new Int32Array(n)
  const weights = new Float64Array(n)
  eligible.forEach((i, r) => {
    ranks[i] = r + 1
    weights[i] = bordaRankWeight(r + 1, m)
  })
  const labels = clusterAnswers(answers, opts.equivalent)
  const total = new Map<number, number>()
  const firstRanked = new Map<number, number>() // label → highest-ranked supporter
  for (const i of eligible) {
    const l = labels[i]
    if (l < 0) continue
    total.set(l, (total.get(l) ?? 0) + weights[i])
    if (!firstRanked.has(l)) firstRanked.set(l, i)
  }
  let bestLabel = -1
  let bestWeight = -Infinity
  // labels in ranked order of their first supporter, so a tie keeps the earlier one
  // (firstRanked was filled in ranked order); totals within 1e-12 relative count as tied
  for (const l of firstRanked.keys()) {
    const w = total.get(l) as number
    if (bestLabel < 0 || w > bestWeight + 1e-12 * Math.max(1, bestWeight)) {
      bestLabel = l
      bestWeight = w
    }
  }
  if (bestLabel < 0) return { answer: null, index: -1, weight: 0, ranks, weights }
  const index = firstRanked.get(bestLabel) as number
  return { answer: answers[index], index, weight: bestWeight, ranks, weights }
}

/**
 * Index of the highest-scoring eligible response, ties broken by generation order (UID A.1
 * direct selector); −1 when no score is finite.
 */
export function selectTopScored(scores: ReadonlyArray<number | null>): number {
  let best = -1
  for (let i = 0; i < scores.length; i++) {
    const s = scores[i]
    if (s === null || !Number.isFinite(s)) continue
    if (best < 0 || s > (scores[best] as number)) best = i
  }
  return best
}

// DIS §4.2: a_i = representative of the largest cluster among one variant's k answers (union-find
// over equivalence; ties → earliest cluster; representative = earliest member). Null when the
// variant produced no answer at all.
export function variantPlurality(answers: readonly Answer[], equivalent: Equivalence = exactEquality): Answer {
  return majorityVote(answers, { equivalent }).answer
}

// DIS §4.2: H(p)/log N, Shannon entropy (nats) of category proportions normalized by the log of the
// number of items N. 0 for N ≤ 1.
export function normalizedEntropy(counts: readonly number[]): number {
  let N = 0
  for (const c of counts) {
    if (!(c >= 0)) throw new RangeError(`category count must be non-negative, got ${c}`)
    N += c
  }
  if (N <= 1) return 0
  let h = 0
  for (const c of counts) if (c > 0) h -= (c / N) * Math.log(c / N)
  return h / Math.log(N)
}

// DIS §4.2: r_dis = normalized Shannon entropy over the variants' plurality answers, clustered by
// equivalence. Variants without an answer (timed out, or nothing extractable) are left out, so the
// reward degrades to the responding variants (§4.5); fewer than two answering variants give 0.
export function disagreementReward(pluralities: readonly Answer[], equivalent: Equivalence = exactEquality): number {
  const labels = clusterAnswers(pluralities, equivalent)
  const counts: number[] = []
  for (const l of labels) if (l >= 0) counts[l] = (counts[l] ?? 0) + 1
  return normalizedEntropy(counts)
}

// R-Zero (Huang et al. 2025): r_unc = 1 − 2|p̂ − ½|, maximal (1) at p̂ = ½.
export function rzeroUncertainty(pHat: number): number {
  return 1 - 2 * Math.abs(pHat - 0.5)
}

// DIS §4.4 worked example (p̂ = 0.67 → r_unc = 0.33): r_unc = min(p̂, 1 − p̂), maximal (½) at p̂ = ½.
export function disUncertainty(pHat: number): number {
  return Math.min(pHat, 1 - pHat)
}
