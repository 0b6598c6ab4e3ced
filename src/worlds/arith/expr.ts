// Integer arithmetic expressions: the grammar, a parser that never throws, exact evaluation with
// BigInt, canonical printing, the one-operation-per-step solution trace, and triviality.
//
// Grammar (whitespace allowed between tokens):
//   expr   := term (('+' | '-') term)*          left-associative
//   term   := factor ('*' factor)*              left-associative, binds tighter than + and -
//   factor := NUMBER | '(' expr ')' | REF
//   NUMBER := '0' | [1-9][0-9]*                 no leading zeros, at most MAX_LITERAL_DIGITS digits
//   REF    := '#' [1-9][0-9]*                   only with { allowRefs: true } (J-Zero subtasks)
// Parsing accepts '×' (U+00D7) for '*' and '−' (U+2212) for '-'; printing is always ASCII. There is
// no unary minus and no division: `-3+4`, `3*-4`, `6/2` are malformed. Literals are non-negative;
// intermediate values and answers may be negative.

export type Op = '+' | '-' | '*'

export type Expr =
  | { readonly kind: 'num'; readonly value: bigint }
  | { readonly kind: 'ref'; readonly index: number }
  | { readonly kind: 'bin'; readonly op: Op; readonly left: Expr; readonly right: Expr }

/** Inputs longer than this (in UTF-16 units) are malformed: no question in this world is that long. */
export const MAX_EXPR_LENGTH = 512
/** Deepest parenthesis nesting accepted (keeps the recursive-descent parser off the stack limit). */
export const MAX_PAREN_DEPTH = 48
/** Longest literal accepted. */
export const MAX_LITERAL_DIGITS = 18

export interface ParseExprOptions {
  /** Accept `#k` references to earlier sub-answers (J-Zero decomposition subtasks). Default false. */
  allowRefs?: boolean
}

type Tok =
  | { t: 'num'; v: bigint }
  | { t: 'ref'; v: number }
  | { t: 'op'; v: Op }
  | { t: '(' }
  | { t: ')' }

function isDigit(c: string): boolean {
  return c >= '0' && c <= '9'
}

function tokenize(text: string, allowRefs: boolean): Tok[] | null {
  const toks: Tok[] = []
  let i = 0
  while (i < text.length) {
    const c = text[i]
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++
    } else if (isDigit(c)) {
      let j = i
      while (j < text.length && isDigit(text[j])) j++
      const lit = text.slice(i, j)
      if (lit.length > 1 && lit[0] === '0') return null
      if (lit.length > MAX_LITERAL_DIGITS) return null
      toks.push({ t: 'num', v: BigInt(lit) })
      i = j
    } else if (c === '#') {
      if (!allowRefs) return null
      let j = i + 1
      while (j < text.length && isDigit(text[j])) j++
      const lit = text.slice(i + 1, j)
      if (lit.length === 0 || lit[0] === '0' || lit.length > 3) return null
      toks.push({ t: 'ref', v: Number(lit) })
      i = j
    } else if (c === '+') {
      toks.push({ t: 'op', v: '+' }), i++
    } else if (c === '-' || c === '\u2212') {
      toks.push({ t: 'op', v: '-' }), i++
    } else if (c === '*' || c === '\u00d7') {
      toks.push({ t: 'op', v: '*' }), i++
    } else if (c === '(') {
      toks.push({ t: '(' }), i++
    } else if (c === ')') {
      toks.push({ t: ')' }), i++
    } else {
      return null
    }
  }
  return toks
}

class Parser {
  private pos = 0
  constructor(private readonly toks: Tok[]) {}

  done(): boolean {
    return this.pos === this.toks.length
  }

  expr(depth: number): Expr | null {
    let left = this.term(depth)
    if (left === null) return null
    for (;;) {
      const tok = this.toks[this.pos]
      if (tok === undefined || tok.t !== 'op' || tok.v === '*') return left
      this.pos++
      const right = this.term(depth)
      if (right === null) return null
      left = { kind: 'bin', op: tok.v, left, right }
    }
  }

  private term(depth: number): Expr | null {
    let left = this.factor(depth)
    if (left === null) return null
    for (;;) {
      const tok = this.toks[this.pos]
      if (tok === undefined || tok.t !== 'op' || tok.v !== '*') return left
      this.pos++
      const right = this.factor(depth)
      if (right === null) return null
      left = { kind: 'bin', op: '*', left, right }
    }
  }

  private factor(depth: number): Expr | null {
    const tok = this.toks[this.pos]
    if (tok === undefined) return null
    if (tok.t === 'num') {
      this.pos++
      return { kind: 'num', value: tok.v }
    }
    if (tok.t === 'ref') {
      this.pos++
      return { kind: 'ref', index: tok.v }
    }
    if (tok.t === '(') {
      if (depth >= MAX_PAREN_DEPTH) return null
      this.pos++
      const inner = this.expr(depth + 1)
      if (inner === null) return null
      if (this.toks[this.pos]?.t !== ')') return null
      this.pos++
      return inner
    }
    return null
  }
}

/**
 * Parse an expression; `null` for anything malformed (never throws, whatever the input — a
 * non-string included). Redundant parentheses are accepted and dropped: `((3))` parses as `3`.
 */
export function parseExpr(text: unknown, opts: ParseExprOptions = {}): Expr | null {
  if (typeof text !== 'string' || text.length > MAX_EXPR_LENGTH) return null
  const toks = tokenize(text, opts.allowRefs === true)
  if (toks === null || toks.length === 0) return null
  const p = new Parser(toks)
  const e = p.expr(0)
  return e !== null && p.done() ? e : null
}

const PREC: Record<Op, number> = { '+': 1, '-': 1, '*': 2 }

function precOf(e: Expr): number {
  return e.kind === 'bin' ? PREC[e.op] : 3
}

/**
 * Canonical text: ASCII operators, no spaces, the fewest parentheses that keep the tree. A child
 * is parenthesized when it binds more loosely than its parent, or when it is a right operand of
 * equal precedence (all operators are left-associative), so `parseExpr(printExpr(e))` rebuilds `e`
 * exactly: `(12+7)*3-4`, `10-(4-3)`, `2*(3*4)`.
 */
export function printExpr(e: Expr): string {
  switch (e.kind) {
    case 'num':
      return e.value.toString()
    case 'ref':
      return `#${e.index}`
    case 'bin': {
      const p = PREC[e.op]
      const l = printExpr(e.left)
      const r = printExpr(e.right)
      const lp = precOf(e.left) < p ? `(${l})` : l
      const rp = precOf(e.right) <= p ? `(${r})` : r
      return `${lp}${e.op}${rp}`
    }
  }
}

/** Canonical text of a string expression, or `null` when it is malformed. */
export function canonical(text: unknown): string | null {
  const e = parseExpr(text)
  return e === null ? null : printExpr(e)
}

/** The value of `a op b`. */
export function applyOp(op: Op, a: bigint, b: bigint): bigint {
  return op === '+' ? a + b : op === '-' ? a - b : a * b
}

/**
 * Exact value. `refs[k - 1]` is the value of `#k`; an expression whose reference is missing
 * evaluates to `null`. Plain expressions (no references) always have a value.
 */
export function evaluate(e: Expr, refs: readonly bigint[] = []): bigint | null {
  switch (e.kind) {
    case 'num':
      return e.value
    case 'ref':
      return e.index >= 1 && e.index <= refs.length ? refs[e.index - 1] : null
    case 'bin': {
      const a = evaluate(e.left, refs)
      if (a === null) return null
      const b = evaluate(e.right, refs)
      if (b === null) return null
      return applyOp(e.op, a, b)
    }
  }
}

/** Parse and evaluate; `null` when malformed. */
export function evalText(text: unknown): bigint | null {
  const e = parseExpr(text)
  return e === null ? null : evaluate(e)
}

/** One operation of a solution: `a op b = result`. */
export interface Step {
  readonly op: Op
  readonly a: bigint
  readonly b: bigint
  readonly result: bigint
}

/**
 * The solution trace: one step per operation, innermost first and left to right (post-order, left
 * subtree before right), each step on the values the earlier steps produced. `(12+7)*3-4` gives
 * 12+7=19, 19*3=57, 57-4=53; `2+3*4` gives 3*4=12, 2+12=14. `null` if a reference is missing.
 */
export function solutionSteps(e: Expr, refs: readonly bigint[] = []): Step[] | null {
  const steps: Step[] = []
  const walk = (n: Expr): bigint | null => {
    if (n.kind === 'num') return n.value
    if (n.kind === 'ref') return n.index >= 1 && n.index <= refs.length ? refs[n.index - 1] : null
    const a = walk(n.left)
    if (a === null) return null
    const b = walk(n.right)
    if (b === null) return null
    const result = applyOp(n.op, a, b)
    steps.push({ op: n.op, a, b, result })
    return result
  }
  return walk(e) === null ? null : steps
}

/** An operand as written in a step: negative values in parentheses, `(-7)*2=-14`. */
export function formatOperand(v: bigint): string {
  return v < 0n ? `(${v})` : v.toString()
}

/** `a op b=result`, e.g. `19*3=57`, `5-(-7)=12`. */
export function formatStep(s: { op: Op; a: bigint; b: bigint; result: bigint }): string {
  return `${formatOperand(s.a)}${s.op}${formatOperand(s.b)}=${s.result}`
}

/** Structural facts about an expression. */
export interface ExprStats {
  /** Number of binary operations. */
  ops: number
  /** Most digits in any literal (0 when there are no literals). */
  maxDigits: number
  /** Number of literals. */
  literals: number
  /** Number of references (`#k`). */
  refs: number
  /** Largest |value| of any literal or intermediate result (needs no references; else null). */
  maxAbs: bigint | null
}

export function exprStats(e: Expr): ExprStats {
  let ops = 0
  let maxDigits = 0
  let literals = 0
  let refs = 0
  let maxAbs: bigint | null = 0n
  const abs = (v: bigint): bigint => (v < 0n ? -v : v)
  const walk = (n: Expr): bigint | null => {
    if (n.kind === 'num') {
      literals++
      maxDigits = Math.max(maxDigits, n.value.toString().length)
      if (maxAbs !== null && abs(n.value) > maxAbs) maxAbs = abs(n.value)
      return n.value
    }
    if (n.kind === 'ref') {
      refs++
      return null
    }
    ops++
    const a = walk(n.left)
    const b = walk(n.right)
    if (a === null || b === null) return null
    const v = applyOp(n.op, a, b)
    if (maxAbs !== null && abs(v) > maxAbs) maxAbs = abs(v)
    return v
  }
  walk(e)
  return { ops, maxDigits, literals, refs, maxAbs: refs > 0 ? null : maxAbs }
}

/** Structural equality. */
export function exprEquals(a: Expr, b: Expr): boolean {
  if (a.kind !== b.kind) return false
  if (a.kind === 'num') return a.value === (b as typeof a).value
  if (a.kind === 'ref') return a.index === (b as typeof a).index
  const o = b as typeof a
  return a.op === o.op && exprEquals(a.left, o.left) && exprEquals(a.right, o.right)
}

function isLit(e: Expr, v: bigint): boolean {
  return e.kind === 'num' && e.value === v
}

/**
 * An expression is trivial when its value can be read off without any real arithmetic: a bare
 * number, or operations whose result does not need computing — adding 0, taking 0 away,
 * multiplying by 1 (the value is the other side's), multiplying by 0 or subtracting a
 * subexpression from an identical one (the value is 0 whatever the other side is). `57`, `(8)`,
 * `9*1`, `6+0`, `7-7`, `5*1+0`, `0*(12+34)`, `(3+4)-(3+4)` are trivial; `(3+4)*1`, `7-0+2` are not.
 */
export function isTrivialExpr(e: Expr): boolean {
  const needsWork = (n: Expr): boolean => {
    if (n.kind !== 'bin') return false
    const { op, left: l, right: r } = n
    if (op === '+') {
      if (isLit(l, 0n)) return needsWork(r)
      if (isLit(r, 0n)) return needsWork(l)
      return true
    }
    if (op === '-') {
      if (exprEquals(l, r)) return false
      if (isLit(r, 0n)) return needsWork(l)
      return true
    }
    if (isLit(l, 0n) || isLit(r, 0n)) return false
    if (isLit(l, 1n)) return needsWork(r)
    if (isLit(r, 1n)) return needsWork(l)
    return true
  }
  return !needsWork(e)
}

/** Integer answer text → value: optional sign (`-`, `−`, `+`), digits, surrounding spaces; else null. */
export function parseInteger(text: unknown): bigint | null {
  if (typeof text !== 'string') return null
  const m = /^\s*([+\-\u2212]?)\s*(\d{1,40})\s*$/.exec(text)
  if (m === null) return null
  const v = BigInt(m[2])
  return m[1] === '-' || m[1] === '\u2212' ? -v : v
}
