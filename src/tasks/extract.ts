// Answer and field extraction from generated text (COSE Appendix G formats, UID A.1 / C.4 boxed
// answers, R-Zero / J-Zero <question> tags). A missing or malformed field is `null` — "no
// answer" — never the string "None", never one character of a string, never an exception.

/** Closing delimiters of a thinking block; text before the last one is never searched. */
export const THINK_CLOSE_TAGS: readonly string[] = ['</think>', '</thinking>']

/** The text after the last closing thinking delimiter, or the whole text when there is none. */
export function afterThinking(text: string, closeTags: readonly string[] = THINK_CLOSE_TAGS): string {
  let cut = -1
  for (const tag of closeTags) {
    const i = text.lastIndexOf(tag)
    if (i >= 0 && i + tag.length > cut) cut = i + tag.length
  }
  return cut < 0 ? text : text.slice(cut)
}

export interface ExtractOptions {
  /** Search only after the last closing thinking delimiter (default true). */
  afterThink?: boolean
  closeTags?: readonly string[]
}

function searchable(text: string, opts: ExtractOptions): string {
  return opts.afterThink === false ? text : afterThinking(text, opts.closeTags)
}

/**
 * Index just past the brace that closes the group opened at `open` (text[open] === '{'), or −1
 * when the group never closes. Escaped braces (`\{`, `\}`) are literal and do not count.
 */
export function matchBrace(text: string, open: number): number {
  let depth = 0
  for (let i = open; i < text.length; i++) {
    const c = text[i]
    if (c === '\\') {
      i++ // skip the escaped character
      continue
    }
    if (c === '{') depth++
    else if (c === '}') {
      depth--
      if (depth === 0) return i + 1
    }
  }
  return -1
}

const BOXED = /\\boxed\s*\{/g

/**
 * Content of the last balanced `\boxed{…}` (UID A.1, C.4): occurrences are tried from last to
 * first and the first one whose braces balance wins, so a truncated trailing `\boxed{` does not
 * hide a complete one before it. Nested braces are kept (`\boxed{\frac{1}{2}}` → `\frac{1}{2}`).
 * An empty box, or no box, is `null`.
 */
export function extractBoxed(text: string, opts: ExtractOptions = {}): string | null {
  const s = searchable(text, opts)
  const starts: number[] = []
  for (const m of s.matchAll(BOXED)) starts.push(m.index + m[0].length - 1)
  for (let k = starts.length - 1; k >= 0; k--) {
    const end = matchBrace(s, starts[k])
    if (end < 0) continue
    const content = s.slice(starts[k] + 1, end - 1).trim()
    return content.length > 0 ? content : null
  }
  return null
}

/** Content of the last complete `<tag>…</tag>`, trimmed; empty or absent → null. */
export function extractTag(text: string, tag: string, opts: ExtractOptions = {}): string | null {
  const s = searchable(text, opts)
  const close = `</${tag}>`
  const open = `<${tag}>`
  const end = s.lastIndexOf(close)
  if (end < 0) return null
  const start = s.lastIndexOf(open, end)
  if (start < 0) return null
  const content = s.slice(start + open.length, end).trim()
  return content.length > 0 ? content : null
}

/** Solver answer in `<answer>…</answer>` (COSE G.3). */
export function extractAnswerTag(text: string, opts: ExtractOptions = {}): string | null {
  return extractTag(text, 'answer', opts)
}

/** Proposer / Challenger task in `<question>…</question>` (COSE G.1, JZ Eq. 6 format check). */
export function extractQuestion(text: string, opts: ExtractOptions = {}): string | null {
  return extractTag(text, 'question', opts)
}

export interface ScoreOptions extends ExtractOptions {
  /** Smallest valid integer score (default 1). */
  min?: number
  /** Largest valid integer score (default 10). */
  max?: number
}

export interface ExtractedScore {
  /** The integer as written. */
  raw: number
  /** Linearly normalized to [0, 1]: (raw − min)/(max − min) (COSE §3, Notation). */
  normalized: number
}

/**
 * Validator / Judge integer score in the last `<score>…</score>` (COSE G.2, G.4), normalized
 * linearly so that the lowest score maps to 0 and the highest to 1. Non-integers, out-of-range
 * values and missing tags are `null`.
 */
export function extractScore(text: string, opts: ScoreOptions = {}): ExtractedScore | null {
  const min = opts.min ?? 1
  const max = opts.max ?? 10
  if (!(Number.isInteger(min) && Number.isInteger(max) && max > min)) {
    throw new RangeError(`score range must be integers with max > min, got [${min}, ${max}]`)
  }
  const body = extractTag(text, 'score', opts)
  if (body === null || !/^[+-]?\d+$/.test(body)) return null
  const raw = Number(body)
  if (raw < min || raw > max) return null
  return { raw, normalized: (raw - min) / (max - min) }
}

/**
 * COSE f_P(q) ∈ {0, 1}: the Proposer output holds a non-empty `<question>` block. With `strict`,
 * nothing but that one block may follow the thinking part (the J-Zero prompt's "output nothing
 * else" rule).
 */
export function proposerFormat(text: string, opts: ExtractOptions & { strict?: boolean } = {}): 0 | 1 {
  const q = extractQuestion(text, opts)
  if (q === null) return 0
  if (opts.strict) {
    const s = searchable(text, opts).trim()
    if (!/^<question>[\s\S]*<\/question>$/.test(s)) return 0
    if (s.indexOf('<question>', 1) >= 0) return 0
  }
  return 1
}

/**
 * COSE f_S(a) ∈ {0, 1}: the Solver output holds its final answer in the required form —
 * `<answer>` tags (COSE G.3, default) or a balanced `\boxed{}` (math prompts).
 */
export function solverFormat(text: string, opts: ExtractOptions & { format?: 'answer-tag' | 'boxed' } = {}): 0 | 1 {
  const a = opts.format === 'boxed' ? extractBoxed(text, opts) : extractAnswerTag(text, opts)
  return a === null ? 0 : 1
}
