// Repetition penalty of the R-Zero / J-Zero Challenger (JZ Eq. 5, DIS §4.3): tasks of one batch
// are clustered by BLEU distance with average-linkage agglomerative clustering cut at τ, and each
// task is penalized by the relative size of its cluster.

import { bleuDistanceMatrix, type BleuOptions } from './bleu.js'

/**
 * Average-linkage agglomerative clustering of a precomputed row-major n × n distance matrix,
 * merging while the closest pair of clusters is at distance < τ (scikit-learn's
 * `AgglomerativeClustering(distance_threshold=τ, linkage='average', metric='precomputed')`).
 * Equal distances merge the pair with the smallest (first, second) cluster index. Returns labels
 * 0, 1, … in order of each cluster's first member. O(n³) time, O(n²) memory: meant for one
 * Challenger batch (tens to a few hundred tasks).
 */
export function averageLinkageClusters(distances: ArrayLike<number>, n: number, tau = 0.5): Int32Array {
  if (distances.length !== n * n) throw new RangeError(`distance matrix has ${distances.length} entries, expected ${n * n}`)
  // working matrix of inter-cluster average distances, updated by Lance–Williams
  const D = Float64Array.from(distances)
  const size = new Int32Array(n).fill(1)
  const active = new Uint8Array(n).fill(1)
  const owner = Int32Array.from({ length: n }, (_, i) => i) // item → cluster slot
  for (let step = 0; step < n - 1; step++) {
    let bi = -1
    let bj = -1
    let best = Infinity
    for (let i = 0; i < n; i++) {
      if (!active[i]) continue
      for (let j = i + 1; j < n; j++) {
        if (!active[j]) continue
        const v = D[i * n + j]
        if (v < best) {
          best = v
          bi = i
          bj = j
        }
      }
    }
    if (bi < 0 || !(best < tau)) break
    // merge bj into bi: d(A∪B, C) = (|A| d(A,C) + |B| d(B,C)) / (|A| + |B|)
    const sa = size[bi]
    const sb = size[bj]
    for (let k = 0; k < n; k++) {
      if (!active[k] || k === bi || k === bj) continue
      const v = (sa * D[bi * n + k] + sb * D[bj * n + k]) / (sa + sb)
      D[bi * n + k] = v
      D[k * n + bi] = v
    }
    size[bi] = sa + sb
    active[bj] = 0
    for (let k = 0; k < n; k++) if (owner[k] === bj) owner[k] = bi
  }
  const labels = new Int32Array(n)
  const map = new Map<number, number>()
  for (let k = 0; k < n; k++) {
    let l = map.get(owner[k])
    if (l === undefined) {
      l = map.size
      map.set(owner[k], l)
    }
    labels[k] = l
  }
  return labels
}

// JZ Eq. 5: r_rep_i = λ·|C_k|/N for x_i ∈ C_k.
export function clusterSharePenalty(labels: ArrayLike<number>, lambda = 1): Float64Array {
  const N = labels.length
  const sizes = new Map<number, number>()
  for (let i = 0; i < N; i++) sizes.set(labels[i], (sizes.get(labels[i]) ?? 0) + 1)
  const out = new Float64Array(N)
  for (let i = 0; i < N; i++) out[i] = (lambda * (sizes.get(labels[i]) as number)) / N
  return out
}

export interface RepetitionOptions extends BleuOptions {
  /** Distance threshold τ (default 0.5). */
  tau?: number
  /** Penalty strength λ (default 1, R-Zero's setting). */
  lambda?: number
}

export interface RepetitionResult {
  /** r_rep per input; 0 for null (unparsed) tasks. */
  penalty: Float64Array
  /** Cluster label per input; −1 for null tasks. */
  labels: Int32Array
}

/**
 * BLEU repetition penalty over one batch of tasks (JZ Eq. 5). `null` entries (tasks that failed
 * to parse) are left out of the clustering and of N and get penalty 0 — DIS §4.5 clusters parsed
 * questions only. Pass the raw text instead of null to penalize unparsed outputs too.
 */
export function repetitionPenalty(tasks: ReadonlyArray<string | null>, opts: RepetitionOptions = {}): RepetitionResult {
  const idx: number[] = []
  for (let i = 0; i < tasks.length; i++) if (tasks[i] !== null) idx.push(i)
  const texts = idx.map((i) => tasks[i] as string)
  const D = bleuDistanceMatrix(texts, opts)
  const sub = averageLinkageClusters(D, texts.length, opts.tau ?? 0.5)
  const subPenalty = clusterSharePenalty(sub, opts.lambda ?? 1)
  const penalty = new Float64Array(tasks.length)
  const labels = new Int32Array(tasks.length).fill(-1)
  idx.forEach((i, k) => {
    penalty[i] = subPenalty[k]
    labels[i] = sub[k]
  })
  return { penalty, labels }
}
