// Sentence BLEU as NLTK computes it (nltk.translate.bleu_score.sentence_bleu with uniform 4-gram
// weights and SmoothingFunction().method1, ε = 0.1), on whitespace tokens — the similarity behind
// the R-Zero / J-Zero repetition penalty (JZ Eq. 5, DIS §4.3).
//
//   p_n  = Σ_g min(count_hyp(g), max_ref count_ref(g)) / max(1, Σ_g count_hyp(g))   (n-grams g)
//   method1: a p_n with zero numerator becomes ε / denominator
//   BP   = 1 if c > r, 0 if c = 0, else exp(1 − r/c)  (r = closest reference length, ties → shorter)
//   BLEU = 0 if no unigram matches, else BP · exp(Σ_n w_n log p_n)

/** Python's str.split(): split on runs of whitespace, no empty tokens. */
export function whitespaceTokens(text: string): string[] {
  const t = text.trim()
  return t.length === 0 ? [] : t.split(/\s+/)
}

type NgramCounts = Map<string, number>[] // index n−1

const SEP = '\u0000'

function ngramCounts(tokens: readonly string[], maxN: number): NgramCounts {
  const out: NgramCounts = []
  for (let n = 1; n <= maxN; n++) {
    const m = new Map<string, number>()
    for (let i = 0; i + n <= tokens.length; i++) {
      const g = n === 1 ? tokens[i] : tokens.slice(i, i + n).join(SEP)
      m.set(g, (m.get(g) ?? 0) + 1)
    }
    out.push(m)
  }
  return out
}

/** Tokens plus their n-gram counts, so a sentence compared many times is counted once. */
export interface BleuSentence {
  tokens: readonly string[]
  counts: NgramCounts
}

export function prepareBleuSentence(tokensOrText: string | readonly string[], maxN = 4): BleuSentence {
  const tokens = typeof tokensOrText === 'string' ? whitespaceTokens(tokensOrText) : tokensOrText
  return { tokens, counts: ngramCounts(tokens, maxN) }
}

export interface BleuOptions {
  /** n-gram weights, default (¼, ¼, ¼, ¼). */
  weights?: readonly number[]
  /** 'method1' (default, ε added to zero-match numerators) or 'none' (NLTK method0). */
  smoothing?: 'method1' | 'none'
  /** ε of method1, default 0.1. */
  epsilon?: number
}

const DEFAULT_WEIGHTS = [0.25, 0.25, 0.25, 0.25] as const

function toSentence(x: string | readonly string[] | BleuSentence, maxN: number): BleuSentence {
  if (typeof x === 'string') return prepareBleuSentence(x, maxN)
  if (Array.isArray(x)) return prepareBleuSentence(x as readonly string[], maxN)
  const sent = x as BleuSentence
  return sent.counts.length >= maxN ? sent : prepareBleuSentence(sent.tokens, maxN)
}

/**
 * Sentence BLEU of `hypothesis` against one or more `references` (NLTK sentence_bleu semantics;
 * inputs are texts split on whitespace, token arrays, or prepared sentences).
 */
export function sentenceBleu(
  references: ReadonlyArray<string | readonly string[] | BleuSentence>,
  hypothesis: string | readonly string[] | BleuSentence,
  opts: BleuOptions = {},
): number {
  const weights = opts.weights ?? DEFAULT_WEIGHTS
  const maxN = weights.length
  const eps = opts.epsilon ?? 0.1
  const smoothing = opts.smoothing ?? 'method1'
  if (references.length === 0) throw new RangeError('sentenceBleu needs at least one reference')
  const prep = (x: string | readonly string[] | BleuSentence): BleuSentence => toSentence(x, maxN)
  const hyp = prep(hypothesis)
  const refs = references.map(prep)
  const c = hyp.tokens.length
  const num: number[] = []
  const den: number[] = []
  for (let n = 1; n <= maxN; n++) {
    const hc = hyp.counts[n - 1]
    let matched = 0
    let totalCount = 0
    for (const [g, cnt] of hc) {
      totalCount += cnt
      let maxRef = 0
      for (const r of refs) {
        const rc = r.counts[n - 1].get(g) ?? 0
        if (rc > maxRef) maxRef = rc
      }
      matched += Math.min(cnt, maxRef)
    }
    num.push(matched)
    den.push(Math.max(1, totalCount))
  }
  if (num[0] === 0) return 0
  // closest reference length, ties → the shorter one
  let r = refs[0].tokens.length
  for (const ref of refs) {
    const len = ref.tokens.length
    if (Math.abs(len - c) < Math.abs(r - c) || (Math.abs(len - c) === Math.abs(r - c) && len < r)) r = len
  }
  const bp = c > r ? 1 : c === 0 ? 0 : Math.exp(1 - r / c)
  let s = 0
  for (let k = 0; k < maxN; k++) {
    let p = num[k] / den[k]
    if (num[k] === 0) {
      if (smoothing === 'none') return 0 // log(0): NLTK method0 returns 0 for the sentence
      p = eps / den[k]
    }
    s += weights[k] * Math.log(p)
  }
  return bp * Math.exp(s)
}

// JZ Eq. 5 / R-Zero: d_pq = 1 − BLEU(x_p, x_q). BLEU is not symmetric; as in R-Zero's reference
// implementation, the pair p < q scores hypothesis x_p against reference x_q and the matrix is
// mirrored. Diagonal 0. Row-major n × n.
export function bleuDistanceMatrix(texts: ReadonlyArray<string | readonly string[]>, opts: BleuOptions = {}): Float64Array {
  const n = texts.length
  const maxN = (opts.weights ?? DEFAULT_WEIGHTS).length
  const prepared = texts.map((t) => prepareBleuSentence(t, maxN))
  const d = new Float64Array(n * n)
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const v = 1 - sentenceBleu([prepared[j]], prepared[i], opts)
      d[i * n + j] = v
      d[j * n + i] = v
    }
  }
  return d
}
