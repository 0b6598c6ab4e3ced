// Math-answer normalization and equivalence, as used to vote, cluster and grade extracted answers
// (UID A.1 "normalized before aggregation", DIS §4.2 "symbolic math equivalence ... numerical
// comparison with tolerance 1e-6"). Three tiers, cheapest first:
//   1. exact match after normalization (LaTeX spacing, \text{}, \left/\right, $, degrees, units
//      after a number, "x = …", thousands separators, trailing period, case);
//   2. numeric match within 1e-6 when both sides are plain numbers: integers, decimals,
//      fractions (a/b, \frac{a}{b}), percentages, scientific notation (1e-3, 1.5\times10^{-3});
//   3. symbolic match for simple expressions: both sides are translated from LaTeX to mathjs
//      syntax, parsed with mathjs, restricted to arithmetic and a few elementary functions of at
//      most three single-letter variables, and compared at fixed sample points (a randomized
//      identity test with a deterministic point set).
// Tuples and intervals compare element-wise with identical brackets.

import { matchBrace } from './extract.js'
import { parse, type MathNode } from 'mathjs/number'

const TEXT_COMMANDS = ['text', 'textbf', 'textit', 'textrm', 'mathrm', 'mathbf', 'mathit', 'mbox', 'operatorname']

/** Replace every `\cmd{X}` (cmd in TEXT_COMMANDS) by `X`, respecting nested braces. */
function unwrapTextCommands(s: string): string {
  const re = new RegExp(`\\\\(?:${TEXT_COMMANDS.join('|')})\\s*\\{`, 'g')
  for (let guard = 0; guard < 64; guard++) {
    re.lastIndex = 0
    const m = re.exec(s)
    if (m === null) break
    const open = m.index + m[0].length - 1
    const end = matchBrace(s, open)
    if (end < 0) break
    s = s.slice(0, m.index) + s.slice(open + 1, end - 1) + s.slice(end)
  }
  return s
}


const normCache = new Map<string, string | null>()
const NORM_CACHE_MAX = 20000

/**
 * Canonical text of an answer, or null when nothing is left ("no answer"). Two answers that
 * normalize to the same string are equivalent.
 */
export function normalizeAnswer(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null
  const hit = normCache.get(raw)
  if (hit !== undefined) return hit
  const out = normalizeUncached(raw)
  if (normCache.size >= NORM_CACHE_MAX) normCache.clear()
  normCache.set(raw, out)
  return out
}

function normalizeUncached(raw: string): string | null {
  let s = raw.trim()
  if (s.length === 0) return null
  // a whole-string \boxed{…} (an answer passed before extraction)
  const boxed = /^\\boxed\s*\{/.exec(s)
  if (boxed !== null && matchBrace(s, boxed[0].length - 1) === s.length) s = s.slice(boxed[0].length, -1).trim()
  // units written as text after a number: "5\text{ cm}" → "5"
  s = s.replace(/^(.*\d)\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z\s.^]*\}$/, '$1')
  s = unwrapTextCommands(s)
  s = s
    .replace(/\\[dt]frac/g, '\\frac')
    .replace(/\\left(?![A-Za-z])/g, '')
    .replace(/\\right(?![A-Za-z])/g, '')
    .replace(/\\displaystyle/g, '')
    .replace(/\\q?quad(?![A-Za-z])/g, '')
    .replace(/\\[!,;: ]/g, '')
    .replace(/~/g, '')
    .replace(/\\\$/g, '')
    .replace(/\$/g, '')
    .replace(/\\%/g, '%')
    .replace(/\{,\}/g, ',')
    .replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°/g, '')
    // \frac12 → \frac{1}{2}, \sqrt2 → \sqrt{2} (shorthand LaTeX)
    .replace(/\\frac\s*(\d)\s*(\d)/g, '\\frac{$1}{$2}')
    .replace(/\\frac\s*(\{[^{}]*\})\s*(\d)/g, '\\frac$1{$2}')
    .replace(/\\frac\s*(\d)\s*\{/g, '\\frac{$1}{')
    .replace(/\\sqrt\s*(\d)/g, '\\sqrt{$1}')
    .trim()
  while (s.endsWith('.')) s = s.slice(0, -1).trimEnd()
  // "x = 5" → "5" (a single-letter left side and no other '=')
  const eq = /^[A-Za-z]\s*=\s*([^=]+)$/.exec(s)
  if (eq !== null) s = eq[1]
  // drop whitespace, but keep one space after a LaTeX command followed by a letter ("\pi r")
  s = s.replace(/(\\[A-Za-z]+)\s+(?=[A-Za-z])/g, '$1\u0001').replace(/\s+/g, '').replace(/\u0001/g, ' ')
  // one pair of braces around everything
  if (s.startsWith('{') && matchBrace(s, 0) === s.length) s = s.slice(1, -1)
  // thousands separators in a plain number
  if (/^[+-]?\d{1,3}(,\d{3})+(\.\d+)?%?$/.test(s)) s = s.replace(/,/g, '')
  s = s.toLowerCase()
  // integer-valued decimals and a leading '+'
  const intLike = /^([+-]?)(\d+)\.0*$/.exec(s)
  if (intLike !== null) s = (intLike[1] === '-' ? '-' : '') + intLike[2]
  if (s.startsWith('+')) s = s.slice(1)
  if (s === '-0') s = '0'
  return s.length > 0 ? s : null
}

export interface ParsedNumber {
  value: number
  /** Written with a trailing `%`; `value` is the number as written (50 for "50%"). */
  percent: boolean
}

const NUM = String.raw`(?:\d+(?:\.\d*)?|\.\d+)`
const RE_DECIMAL = new RegExp(String.raw`^[+-]?${NUM}(?:e[+-]?\d+)?$`)
const RE_SLASH = new RegExp(String.raw`^([+-]?)(${NUM})/(${NUM})$`)
const RE_FRAC = new RegExp(String.raw`^([+-]?)\\frac\{([+-]?${NUM})\}\{([+-]?${NUM})\}$`)
const RE_SCI = new RegExp(String.raw`^([+-]?${NUM})(?:\\times|\\cdot|\*|×|·)10\^(?:\{([+-]?\d+)\}|([+-]?\d+))$`)

/**
 * A plain number from a normalized answer: integer, decimal, scientific (1e-3 or
 * a\times10^{b}), fraction (a/b or \frac{a}{b}), optionally with a trailing %; null otherwise.
 */
export function parseNumber(normalized: string): ParsedNumber | null {
  let s = normalized
  const percent = s.endsWith('%')
  if (percent) s = s.slice(0, -1)
  let value: number
  let m: RegExpExecArray | null
  if (RE_DECIMAL.test(s)) value = Number(s)
  else if ((m = RE_SLASH.exec(s)) !== null) value = (m[1] === '-' ? -1 : 1) * (Number(m[2]) / Number(m[3]))
  else if ((m = RE_FRAC.exec(s)) !== null) value = (m[1] === '-' ? -1 : 1) * (Number(m[2]) / Number(m[3]))
  else if ((m = RE_SCI.exec(s)) !== null) value = Number(m[1]) * Math.pow(10, Number(m[2] ?? m[3]))
  else return null
  return Number.isFinite(value) ? { value, percent } : null
}

/** Absolute tolerance of numeric equivalence (DIS §4.2: ε = 1e-6). */
export const NUMERIC_TOLERANCE = 1e-6

/** |a − b| ≤ 1e-6, widened to 1e-12·max(|a|, |b|) for magnitudes where doubles cannot resolve 1e-6. */
export function numbersClose(a: number, b: number, tol = NUMERIC_TOLERANCE): boolean {
  return Math.abs(a - b) <= Math.max(tol, 1e-12 * Math.max(Math.abs(a), Math.abs(b)))
}

/**
 * Numeric equivalence of two parsed numbers. A percentage matches both its fraction and its
 * number as written ("50%" ≡ "0.5" and "50%" ≡ "50"), the lenient convention of math graders.
 */
export function numbersEquivalent(a: ParsedNumber, b: ParsedNumber): boolean {
  const ca = a.percent ? [a.value / 100, a.value] : [a.value]
  const cb = b.percent ? [b.value / 100, b.value] : [b.value]
  for (const x of ca) for (const y of cb) if (numbersClose(x, y)) return true
  return false
}

// ---------------------------------------------------------------------------------------------
// Symbolic tier: LaTeX → mathjs expression text → whitelisted parse tree → point evaluation.

const LATEX_FUNCS: Record<string, string> = {
  sin: 'sin', cos: 'cos', tan: 'tan', sec: 'sec', csc: 'csc', cot: 'cot',
  arcsin: 'asin', arccos: 'acos', arctan: 'atan', sinh: 'sinh', cosh: 'cosh', tanh: 'tanh',
  ln: 'log', log: 'log', exp: 'exp',
}
const ALLOWED_FUNCS = new Set([
  'sqrt', 'nthRoot', 'cbrt', 'exp', 'log', 'log10', 'log2', 'abs',
  'sin', 'cos', 'tan', 'sec', 'csc', 'cot', 'asin', 'acos', 'atan', 'sinh', 'cosh', 'tanh',
])
const ALLOWED_OPS = new Set(['add', 'subtract', 'multiply', 'divide', 'pow', 'unaryMinus', 'unaryPlus'])
const CONSTANTS = new Set(['pi', 'e'])
const MAX_EXPR_LENGTH = 256
const MAX_VARIABLES = 3

/** Translate a normalized LaTeX answer to mathjs syntax; null when it uses anything unsupported. */
export function latexToMathjs(s: string): string | null {
  if (s.length > MAX_EXPR_LENGTH) return null
  let i = 0
  const out: string[] = []
  const group = (): string | null => {
    // one argument of \frac or \sqrt: a {group} or a single character
    if (i >= s.length) return null
    if (s[i] === '{') {
      const end = matchBrace(s, i)
      if (end < 0) return null
      const inner = latexToMathjs(s.slice(i + 1, end - 1))
      i = end
      return inner === null ? null : `(${inner})`
    }
    if (s[i] === '\\') return null
    return `(${s[i++]})`
  }
  while (i < s.length) {
    const c = s[i]
    if (c === '\\') {
      const m = /^\\([A-Za-z]+)/.exec(s.slice(i))
      if (m === null) return null
      const name = m[1]
      i += m[0].length
      if (name === 'frac') {
        const a = group()
        const b = group()
        if (a === null || b === null) return null
        out.push(`(${a}/${b})`)
      } else if (name === 'sqrt') {
        let index: string | null = null
        if (s[i] === '[') {
          const close = s.indexOf(']', i)
          if (close < 0) return null
          index = latexToMathjs(s.slice(i + 1, close))
          if (index === null) return null
          i = close + 1
        }
        const a = group()
        if (a === null) return null
        out.push(index === null ? `sqrt(${a})` : `nthRoot(${a},(${index}))`)
      } else if (name === 'cdot' || name === 'times') out.push('*')
      else if (name === 'div') out.push('/')
      else if (name === 'pi') out.push(' pi ')
      else if (name in LATEX_FUNCS) {
        if (s[i] !== '(' && s[i] !== '{') return null
        out.push(LATEX_FUNCS[name])
        if (s[i] === '{') {
          const a = group()
          if (a === null) return null
          out.push(a)
        }
      } else return null
    } else if (c === '{') {
      const end = matchBrace(s, i)
      if (end < 0) return null
      const inner = latexToMathjs(s.slice(i + 1, end - 1))
      if (inner === null) return null
      out.push(`(${inner})`)
      i = end
    } else if (c === 'π') {
      out.push(' pi ')
      i++
    } else if (c === '×' || c === '·') {
      out.push('*')
      i++
    } else if (/[0-9a-z.+\-*/^() ]/.test(c)) {
      out.push(c)
      i++
    } else return null
  }
  return out.join('')
}

interface CompiledExpr {
  evaluate(scope: Record<string, number>): unknown
  variables: string[]
}

const exprCache = new Map<string, CompiledExpr | null>()

function compileExpression(normalized: string): CompiledExpr | null {
  const hit = exprCache.get(normalized)
  if (hit !== undefined) return hit
  let out: CompiledExpr | null = null
  const text = latexToMathjs(normalized)
  if (text !== null && text.length > 0) {
    try {
      const node = parse(text)
      const vars = new Set<string>()
      let ok = true
      node.traverse((n: MathNode, path: string, parent: MathNode | null) => {
        if (!ok) return
        switch (n.type) {
          case 'OperatorNode':
            if (!ALLOWED_OPS.has((n as unknown as { fn: string }).fn)) ok = false
            break
          case 'ParenthesisNode':
            break
          case 'ConstantNode':
            if (typeof (n as unknown as { value: unknown }).value !== 'number') ok = false
            break
          case 'FunctionNode': {
            const fn = (n as unknown as { fn: { type: string; name?: string } }).fn
            if (fn.type !== 'SymbolNode' || !ALLOWED_FUNCS.has(fn.name ?? '')) ok = false
            break
          }
          case 'SymbolNode': {
            const name = (n as unknown as { name: string }).name
            if (path === 'fn' && parent?.type === 'FunctionNode') break
            if (CONSTANTS.has(name)) break
            if (/^[a-z]$/.test(name)) vars.add(name)
            else ok = false
            break
          }
          default:
            ok = false
        }
      })
      if (ok && vars.size <= MAX_VARIABLES) {
        const code = node.compile()
        out = { evaluate: (scope) => code.evaluate(scope), variables: [...vars].sort() }
      }
    } catch {
      out = null
    }
  }
  if (exprCache.size >= NORM_CACHE_MAX) exprCache.clear()
  exprCache.set(normalized, out)
  return out
}

// Sample points for the identity test: positive, non-integer, pairwise distinct per variable.
const SAMPLE_POINTS: readonly (readonly number[])[] = [
  [0.6180339887, 1.3247179572, 2.2360679775],
  [1.4142135624, 0.7071067812, 1.7320508076],
  [2.7182818285, 1.1892071150, 0.5772156649],
  [0.3678794412, 2.6457513111, 1.6180339887],
  [1.9129311828, 0.4142135624, 2.0943951024],
  [1.2599210499, 1.8392867552, 0.8660254038],
]

function realValue(v: unknown): number {
  return typeof v === 'number' ? v : NaN
}

/** Symbolic equivalence of two normalized answers by evaluation at fixed points; false if unsupported. */
export function symbolicallyEquivalent(a: string, b: string): boolean {
  const ea = compileExpression(a)
  const eb = compileExpression(b)
  if (ea === null || eb === null) return false
  const vars = [...new Set([...ea.variables, ...eb.variables])].sort()
  if (vars.length > MAX_VARIABLES) return false
  const trials = vars.length === 0 ? 1 : SAMPLE_POINTS.length
  let compared = 0
  for (let t = 0; t < trials; t++) {
    const scope: Record<string, number> = {}
    vars.forEach((v, j) => (scope[v] = SAMPLE_POINTS[t][j]))
    let x: number
    let y: number
    try {
      x = realValue(ea.evaluate(scope))
      y = realValue(eb.evaluate(scope))
    } catch {
      return false
    }
    const fx = Number.isFinite(x)
    const fy = Number.isFinite(y)
    if (fx !== fy) return false
    if (!fx) continue
    const ok =
      vars.length === 0
        ? numbersClose(x, y)
        : Math.abs(x - y) <= 1e-9 * Math.max(1, Math.abs(x), Math.abs(y))
    if (!ok) return false
    compared++
  }
  return vars.length === 0 ? compared === 1 : compared >= 2
}

// ---------------------------------------------------------------------------------------------

interface TupleParts {
  open: string
  close: string
  elems: string[]
}

/** Split "(a,b)", "[a,b)", "{a,b}" or "a,b" at top-level commas; null for a single element. */
function splitTuple(s: string): TupleParts | null {
  let open = ''
  let close = ''
  let body = s
  if (s.length >= 2 && '([{'.includes(s[0]) && ')]}'.includes(s[s.length - 1])) {
    // the outer brackets must enclose everything (depth never returns to 0 before the end)
    let depth = 0
    let enclosing = true
    for (let i = 0; i < s.length; i++) {
      if ('([{'.includes(s[i])) depth++
      else if (')]}'.includes(s[i])) depth--
      if (depth === 0 && i < s.length - 1) {
        enclosing = false
        break
      }
    }
    if (enclosing) {
      open = s[0]
      close = s[s.length - 1]
      body = s.slice(1, -1)
    }
  }
  const elems: string[] = []
  let depth = 0
  let start = 0
  for (let i = 0; i < body.length; i++) {
    const c = body[i]
    if ('([{'.includes(c)) depth++
    else if (')]}'.includes(c)) depth--
    else if (c === ',' && depth === 0) {
      elems.push(body.slice(start, i))
      start = i + 1
    }
  }
  elems.push(body.slice(start))
  return elems.length >= 2 ? { open, close, elems } : null
}

function scalarEquivalent(a: string, b: string): boolean {
  if (a === b) return true
  const na = parseNumber(a)
  const nb = parseNumber(b)
  if (na !== null && nb !== null) return numbersEquivalent(na, nb)
  return symbolicallyEquivalent(a, b)
}

/** Equivalence of two already-normalized answers (see the file comment for the tiers). */
export function normalizedEquivalent(a: string, b: string): boolean {
  if (a === b) return true
  const ta = splitTuple(a)
  const tb = splitTuple(b)
  if (ta !== null || tb !== null) {
    if (ta === null || tb === null) return false
    if (ta.open !== tb.open || ta.close !== tb.close || ta.elems.length !== tb.elems.length) return false
    return ta.elems.every((x, i) => x.length > 0 && scalarEquivalent(x, tb.elems[i]))
  }
  return scalarEquivalent(a, b)
}

/**
 * Are two extracted answers the same answer? `null` (no answer) is equivalent to nothing, not
 * even another `null`. Symmetric; reflexive on non-null answers.
 */
export function answersEquivalent(a: string | null | undefined, b: string | null | undefined): boolean {
  const na = normalizeAnswer(a)
  const nb = normalizeAnswer(b)
  if (na === null || nb === null) return false
  return normalizedEquivalent(na, nb)
}
