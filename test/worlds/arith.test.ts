import fc from 'fast-check'
import { describe, expect, it } from 'vitest'

import {
  arithWorld,
  buildCorpus,
  canonical,
  checkDecomposition,
  classifyQuestion,
  decomposeExpr,
  DEFAULT_LEVEL,
  difficultyOf,
  EVAL_CAPACITY,
  evalSet,
  evalText,
  applyOp,
  evaluate,
  exprStats,
  formatIndicator,
  formatStep,
  generateExpr,
  generateQuestions,
  HEDGE_RATE,
  isEvalQuestion,
  isHedged,
  isTrivial,
  judgeStepForm,
  LEVEL_BEYOND,
  LEVELS,
  levelSpec,
  MAX_PAREN_DEPTH,
  parseDecomposition,
  parseExpr,
  parseQuestion,
  parseScore,
  parseSolution,
  parseSteps,
  printExpr,
  referenceSolution,
  Rng,
  ROLES,
  rolePrompt,
  roleChat,
  SCORE_PASS,
  writtenSteps,
  scriptedCompose,
  scriptedDecompose,
  scriptedJudge,
  scriptedPropose,
  scriptedSolve,
  scriptedSolveSubtask,
  scriptedValidate,
  SOLVER_FORMAT_ERROR_RATE,
  SOLVER_SLIP_RATE,
  solutionSteps,
  subtaskValues,
  verifyAnswer,
  type Expr,
  type ParseResult,
} from '../../src/worlds/arith/index.js'

const ev = (s: string): bigint | null => evalText(s)

describe('parser and exact evaluator', () => {
  it('evaluates hand cases with precedence, associativity and nested parentheses', () => {
    const cases: [string, bigint][] = [
      ['7', 7n],
      ['0', 0n],
      ['7+5', 12n],
      ['2+3*4', 14n],
      ['(2+3)*4', 20n],
      ['2*3-4*5', -14n],
      ['10-4-3', 3n],
      ['10-(4-3)', 9n],
      ['2*3*4', 24n],
      ['(12+7)*3-4', 53n],
      ['((1+2)*(3+4)-5)*2', 32n],
      ['(((((9)))))', 9n],
      ['3*(4-(5-(6+7)))', 36n],
      ['100-200', -100n],
      [' 1 +\t2 * 3 ', 7n],
      ['3×4−5', 7n],
      ['999999999999999999*999999999999999999', 999999999999999998000000000000000001n],
    ]
    for (const [text, value] of cases) expect(ev(text), text).toBe(value)
  })

  it('returns null, never throws, on malformed expressions', () => {
    const bad: unknown[] = [
      '',
      '   ',
      '(',
      ')',
      '()',
      '1+',
      '+1',
      '-1',
      '3*-4',
      '1++2',
      '1 2',
      '(1+2',
      '1+2)',
      ')1+2(',
      '01',
      '007+1',
      '6/2',
      '2^3',
      '1.5+2',
      'x+1',
      '1+2=3',
      '#1+2',
      '１+2', // full-width digit
      '1+2\u0000',
      '1'.repeat(19),
      '('.repeat(MAX_PAREN_DEPTH + 1) + '1' + ')'.repeat(MAX_PAREN_DEPTH + 1),
      '('.repeat(100_000) + '1',
      '1+'.repeat(400) + '1',
      null,
      undefined,
      42,
      {},
    ]
    for (const text of bad) expect(parseExpr(text), String(text).slice(0, 30)).toBeNull()
    expect(parseExpr('('.repeat(MAX_PAREN_DEPTH) + '1' + ')'.repeat(MAX_PAREN_DEPTH))).not.toBeNull()
  })

  it('accepts #k references only when asked, and evaluates them from the known values', () => {
    expect(parseExpr('#1*3')).toBeNull()
    const e = parseExpr('#1*3-#2', { allowRefs: true })!
    expect(printExpr(e)).toBe('#1*3-#2')
    expect(evaluate(e, [19n, 4n])).toBe(53n)
    expect(evaluate(e, [19n])).toBeNull()
    expect(parseExpr('#0+1', { allowRefs: true })).toBeNull()
  })

  it('prints canonically: ASCII, no spaces, only the parentheses the tree needs', () => {
    expect(canonical(' ( 12 + 7 ) × 3 − 4 ')).toBe('(12+7)*3-4')
    expect(canonical('((2+3))+4')).toBe('2+3+4')
    expect(canonical('2+(3+4)')).toBe('2+(3+4)') // a different tree, kept
    expect(canonical('2*(3*4)')).toBe('2*(3*4)')
    expect(canonical('(2*3)+4')).toBe('2*3+4')
    expect(canonical('10-(4-3)')).toBe('10-(4-3)')
    expect(canonical('1+')).toBeNull()
  })

  it('round-trips print → parse for random trees (fast-check)', () => {
    const tree: fc.Arbitrary<Expr> = fc.letrec<{ e: Expr }>((tie) => ({
      e: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.bigInt({ min: 0n, max: 10n ** 6n }).map((value): Expr => ({ kind: 'num', value })),
        fc
          .record({ op: fc.constantFrom('+' as const, '-' as const, '*' as const), left: tie('e'), right: tie('e') })
          .map((r): Expr => ({ kind: 'bin', ...r })),
      ),
    })).e
    fc.assert(
      fc.property(tree, (e) => {
        const text = printExpr(e)
        const back = parseExpr(text)
        return back !== null && printExpr(back) === text && evaluate(back) === evaluate(e)
      }),
      { numRuns: 300 },
    )
  })

  it('traces one operation per step, innermost first, left to right', () => {
    const trace = (s: string) => solutionSteps(parseExpr(s)!)!.map(formatStep).join('; ')
    expect(trace('(12+7)*3-4')).toBe('12+7=19; 19*3=57; 57-4=53')
    expect(trace('2+3*4')).toBe('3*4=12; 2+12=14')
    expect(trace('(1+2)*(3+4)')).toBe('1+2=3; 3+4=7; 3*7=21')
    expect(trace('5-(3-10)')).toBe('3-10=-7; 5-(-7)=12')
    expect(trace('(3-10)*2')).toBe('3-10=-7; (-7)*2=-14')
    expect(trace('8')).toBe('')
    expect(referenceSolution('(12+7)*3-4')).toBe('<think>12+7=19; 19*3=57; 57-4=53</think><answer>53</answer>')
  })

  it('reads and checks steps from thinking text, hedges and all', () => {
    const steps = parseSteps('maybe 12+7=19; 19*3=56, not sure; (-7)*2=-14; 5-(-7)=12')
    expect(steps.map((s) => s.right)).toEqual([true, false, true, true])
    expect(steps[1]).toMatchObject({ op: '*', a: 19n, b: 3n, claimed: 56n })
    expect(parseSteps('garbage')).toEqual([])
    expect(parseSteps(undefined)).toEqual([])
  })
})

describe('triviality and difficulty', () => {
  it('isTrivial', () => {
    for (const t of ['57', '(8)', '9*1', '1*9', '6+0', '0+6', '7-7', '(3+4)-(3+4)', '5*1+0', '0*123'])
      expect(isTrivial(t), t).toBe(true)
    for (const t of ['7+5', '(3+4)*1', '7-0+2', '2*3', '0-7']) expect(isTrivial(t), t).toBe(false)
    expect(isTrivial('1+')).toBeNull()
  })

  it('difficultyOf is the smallest level covering (ops, digits, maxAbs)', () => {
    expect(difficultyOf('7+5')).toBe(1)
    expect(difficultyOf('7')).toBe(1)
    expect(difficultyOf('(3+8)*4')).toBe(2)
    expect(difficultyOf('12+7')).toBe(3)
    expect(difficultyOf('(12+7)*3')).toBe(3)
    expect(difficultyOf('(12+7)*3-45')).toBe(4)
    expect(difficultyOf('4*(125-37)+6*19')).toBe(5)
    expect(difficultyOf('99*99')).toBe(4) // 9801 > level 3's maxAbs
    expect(difficultyOf('1+2+3+4+5+6')).toBe(LEVEL_BEYOND)
    expect(difficultyOf('1234+1')).toBe(LEVEL_BEYOND)
    expect(difficultyOf('1+(')).toBeNull()
    expect(classifyQuestion('1+(')).toBe('malformed')
    expect(classifyQuestion('9*1')).toBe('trivial')
    expect(classifyQuestion('1+2+3+4+5+6')).toBe('too-hard')
    expect(classifyQuestion('(12+7)*3')).toBe('good')
  })

  it('levels are monotone and the default is documented', () => {
    expect(DEFAULT_LEVEL).toBe(3)
    for (let i = 1; i < LEVELS.length; i++) {
      expect(LEVELS[i].ops).toBeGreaterThanOrEqual(LEVELS[i - 1].ops)
      expect(LEVELS[i].digits).toBeGreaterThanOrEqual(LEVELS[i - 1].digits)
      expect(LEVELS[i].maxAbs).toBeGreaterThanOrEqual(LEVELS[i - 1].maxAbs)
    }
    expect(() => levelSpec(0)).toThrow(RangeError)
    expect(() => levelSpec(2.5)).toThrow(RangeError)
  })
})

describe('seeded generator', () => {
  it('is deterministic by seed and differs across seeds', () => {
    for (const level of [1, 3, 5]) {
      expect(generateQuestions(42, level, 50)).toEqual(generateQuestions(42, level, 50))
      expect(generateQuestions('abc', level, 50)).toEqual(generateQuestions('abc', level, 50))
      expect(generateQuestions(42, level, 50)).not.toEqual(generateQuestions(43, level, 50))
    }
  })

  it('produces exactly the level: ops, digits, maxAbs, non-trivial', () => {
    for (const spec of LEVELS) {
      const rng = new Rng(`levels-${spec.level}`)
      const shapes = new Set<string>()
      for (let i = 0; i < 300; i++) {
        const e = generateExpr(rng, spec.level)
        const s = exprStats(e)
        expect(s.ops).toBe(spec.ops)
        expect(s.maxDigits).toBe(spec.digits)
        expect(s.maxAbs! <= BigInt(spec.maxAbs)).toBe(true)
        expect(isTrivial(e)).toBe(false)
        expect(difficultyOf(e)).toBe(spec.level)
        const text = printExpr(e)
        expect(canonical(text)).toBe(text)
        shapes.add(text.replace(/\d+/g, 'n'))
      }
      if (spec.ops >= 2) expect([...shapes].some((s) => s.includes('('))).toBe(true)
    }
  })

  it('honours an exclusion predicate', () => {
    const rng = new Rng(1)
    for (let i = 0; i < 200; i++) expect(printExpr(generateExpr(rng, 1, { exclude: (s) => s.includes('+') }))).not.toContain('+')
  })
})

// ---------------------------------------------------------------------------------------------

const isWellTyped = (r: ParseResult<unknown>): boolean =>
  typeof r.ok === 'boolean' && (r.ok ? r.value !== null : r.value === null && typeof r.formatError === 'string')

const parsers: Record<string, (s: unknown) => ParseResult<unknown>> = {
  question: (s) => parseQuestion(s),
  questionLenient: (s) => parseQuestion(s, { mode: 'lenient' }),
  questionRequireExpr: (s) => parseQuestion(s, { requireExpr: true }),
  solution: (s) => parseSolution(s),
  solutionLenient: (s) => parseSolution(s, { mode: 'lenient' }),
  solutionInteger: (s) => parseSolution(s, { requireInteger: true }),
  score: (s) => parseScore(s),
  scoreLenient: (s) => parseScore(s, { mode: 'lenient' }),
  decomposition: (s) => parseDecomposition(s),
  decompositionLenient: (s) => parseDecomposition(s, { mode: 'lenient' }),
}

const FRAGMENTS = [
  '<think>', '</think>', '<answer>', '</answer>', '<score>', '</score>', '<question>', '</question>',
  '<thinking>', '</thinking>', '<ANSWER>', '\\boxed{', '{', '}', '\\', '1. ', '2) ', '#1', '#2', '\n',
  ' ', '0', '1', '7', '10', '53', '-', '+', '*', '(', ')', '×', '−', '=', ';', 'maybe', 'x', '<', '>',
  '/', '😀', '\u0000', '\ud800', 'é', '٣',
]
const tagSoup = fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 24 }).map((a) => a.join(''))

describe('role output parsers', () => {
  it('accept the toy formats', () => {
    const q = parseQuestion('<question>(12+7)*3-4</question>')
    expect(q.ok && q.value.canonical).toBe('(12+7)*3-4')
    const q2 = parseQuestion('  <question> ( 12+7 ) × 3 </question>\n')
    expect(q2.ok && q2.value.canonical).toBe('(12+7)*3')
    const q3 = parseQuestion('<question>make me a sandwich</question>')
    expect(q3.ok && q3.value.expr).toBeNull() // tags decide f; the Validator judges the content
    expect(parseQuestion('<question>make me a sandwich</question>', { requireExpr: true }).ok).toBe(false)

    const s = parseSolution('<think>12+7=19; 19*3=57; 57-4=53</think><answer>53</answer>')
    expect(s.ok && s.value).toMatchObject({ answer: 53n, answerText: '53', via: 'answer', think: '12+7=19; 19*3=57; 57-4=53' })
    const b = parseSolution('<think>12+7=19</think>\n\\boxed{19}')
    expect(b.ok && b.value).toMatchObject({ answer: 19n, via: 'boxed' })
    expect(parseSolution('<answer>-53</answer>').ok).toBe(true)
    expect(parseSolution('<answer>fifty</answer>').ok).toBe(true)
    expect(parseSolution('<answer>fifty</answer>', { requireInteger: true }).ok).toBe(false)

    const v = parseScore('<think>ok; 3 ops; not trivial</think><score>9</score>')
    expect(v.ok && v.value).toMatchObject({ score: 9, normalized: 8 / 9 })
    expect(parseScore('<score>1</score>').ok && parseScore('<score>10</score>').ok).toBe(true)

    const d = parseDecomposition('1. 12+7\n2. #1*3\n3. #2-4')
    expect(d.ok && d.value.subtasks.map((x) => x.text)).toEqual(['12+7', '#1*3', '#2-4'])
  })

  it('give f = 0 on malformed outputs', () => {
    const badSolutions = [
      '', '   ', 'garbage', '53', '<answer>53', '<answer>53</answe', '<answer>53</answer', '<think>12+7=19',
      '<think>12+7=19</think>', '<think>x</think><answer></answer>', '<answer> </answer>',
      '<think><think>x</think></think><answer>1</answer>', '<think>a<answer>1</answer></think><answer>1</answer>',
      '<answer>1</answer><answer>2</answer>', '<answer><answer>1</answer></answer>', 'so <answer>1</answer>',
      '<answer>1</answer> done', '\\boxed{12', '\\boxed{}', '<think>a</think>\\boxed{1} x', '😀<answer>1</answer>',
      '<answer>1</answer>😀', '<ANSWER>1</ANSWER>', '</think><answer>1</answer>',
    ]
    for (const s of badSolutions) expect(formatIndicator(parseSolution(s)), JSON.stringify(s)).toBe(0)

    const badScores = [
      '', '<score>9', '<score>9</scor', '<think>x</think>', '<think>x<score>9</score>', '<score>0</score>',
      '<score>11</score>', '<score>09</score>', '<score>5.5</score>', '<score>ten</score>', '<score>-3</score>',
      '<score>9/10</score>', '<score></score>', '<score><score>9</score></score>', '<score>9</score><score>8</score>',
      'score: 9', '<think>ok</think><score>9</score> thanks', '<think>ok</think>٩<score>9</score>', '<score>٩</score>',
    ]
    for (const s of badScores) expect(formatIndicator(parseScore(s)), JSON.stringify(s)).toBe(0)

    const badQuestions = [
      '', '<question>', '<question>1+2', '1+2</question>', '<question></question>', '<question>  </question>',
      '<question><question>1+2</question></question>', '<question>1+2</question></question>',
      '<question>1+2</question><question>3+4</question>', 'Here: <question>1+2</question>', 'question: 1+2',
      '<think>hmm<question>1+2</question>',
    ]
    for (const s of badQuestions) expect(formatIndicator(parseQuestion(s)), JSON.stringify(s)).toBe(0)

    const badDecompositions = [
      '', '1.', '1. ', '2. 1+2', '1. 1+2\n3. #1*2', '1. 1+2\n1. 3+4', '1. #1+2', '1. 1+2\n2. #3*2', 'first 1+2',
      '1. 1+2\nthen #1*3', '1. 1\n2. 2\n3. 3\n4. 4\n5. 5\n6. 6', '1. add 1 and 2', '<think>x</think>',
      '1. <answer>1</answer>',
    ]
    for (const s of badDecompositions) expect(formatIndicator(parseDecomposition(s)), JSON.stringify(s)).toBe(0)
    expect(parseDecomposition('1. 1+2\n2. #1*3', { minSubtasks: 3 }).ok).toBe(false)
  })

  it('lenient mode reads chat-model prose but still needs a complete block', () => {
    expect(parseSolution('Let me see.\n<think>hmm</think>So the answer is <answer>12</answer>. Done.', { mode: 'lenient' }).ok).toBe(true)
    expect(parseSolution('<think>maybe <answer>1</answer></think> final \\boxed{2}', { mode: 'lenient' })).toMatchObject({ ok: true, value: { answer: 2n } })
    expect(parseSolution('<think>I think <answer>1</answer></think> no answer here', { mode: 'lenient' }).ok).toBe(false)
    expect(parseScore('<think>ok</think> I give it <score>7</score>.', { mode: 'lenient' })).toMatchObject({ ok: true, value: { score: 7 } })
    expect(parseQuestion('Sure! <question>1+2*3</question>', { mode: 'lenient' }).ok).toBe(true)
    expect(parseDecomposition('Plan:\n1. 12+7\n2. #1*3\nThat is all.', { mode: 'lenient' }).ok).toBe(true)
  })

  it('never throw and always return a well-typed result (fast-check)', () => {
    const inputs = fc.oneof(tagSoup, fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ unit: 'grapheme', maxLength: 60 }))
    fc.assert(
      fc.property(inputs, (s) => {
        for (const parse of Object.values(parsers)) {
          const r = parse(s)
          if (!isWellTyped(r)) return false
        }
        parseExpr(s)
        parseExpr(s, { allowRefs: true })
        parseSteps(s)
        verifyAnswer(s, s)
        classifyQuestion(s)
        return true
      }),
      { numRuns: 1500 },
    )
    for (const parse of Object.values(parsers)) {
      for (const x of [undefined, null, 0, {}, [], Symbol('x')]) expect(parse(x).ok).toBe(false)
    }
    // adversarially long and deep inputs
    const huge = '<think>' + '('.repeat(200_000) + '</think><answer>' + '9'.repeat(10_000) + '</answer>'
    for (const parse of Object.values(parsers)) expect(isWellTyped(parse(huge))).toBe(true)
  })

  it('any truncation of a valid tagged output is malformed (fast-check)', () => {
    const outputs = [
      ['solution', '<think>12+7=19; 19*3=57; 57-4=53</think><answer>53</answer>'],
      ['solution', '<think>x</think>\\boxed{53}'],
      ['score', '<think>ok; 3 ops; not trivial</think><score>9</score>'],
      ['question', '<question>(12+7)*3-4</question>'],
    ] as const
    fc.assert(
      fc.property(fc.constantFrom(...outputs), fc.nat(), ([kind, text], n) => {
        const cut = text.slice(0, n % text.length)
        return parsers[kind](cut).ok === false && parsers[kind](text).ok === true
      }),
      { numRuns: 400 },
    )
  })
})

describe('prompt builders', () => {
  it('build the short toy prompts', () => {
    expect(rolePrompt({ role: 'proposer', level: 3 })).toBe('Propose a level 3 problem.\n')
    expect(rolePrompt({ role: 'proposer' })).toBe(`Propose a level ${DEFAULT_LEVEL} problem.\n`)
    expect(rolePrompt({ role: 'solver', question: '(12+7)*3-4' })).toBe('Solve: (12+7)*3-4\n')
    expect(rolePrompt({ role: 'validator', question: '1+\n2' })).toBe('Rate problem: 1+ 2\n')
    expect(rolePrompt({ role: 'judge', question: '7+5', response: '<think>7+5=12</think>\n<answer>12</answer>' })).toBe(
      'Judge: 7+5\nResponse: <think>7+5=12</think> <answer>12</answer>\n',
    )
    expect(rolePrompt({ role: 'decompose', question: '(12+7)*3-4' })).toBe('Decompose: (12+7)*3-4\n')
    expect(rolePrompt({ role: 'subtask', question: '(12+7)*3-4', index: 2, subtask: '#1*3', known: [19n] })).toBe(
      'Task: (12+7)*3-4\nKnown: #1=19\nSolve #2: #1*3\n',
    )
    expect(rolePrompt({ role: 'subtask', question: '12+7', index: 1, subtask: '12+7', known: [] })).toBe('Task: 12+7\nSolve #1: 12+7\n')
    expect(rolePrompt({ role: 'compose', question: '(12+7)*3-4', answers: [19n, 57n, '53'] })).toBe(
      'Compose: (12+7)*3-4\nSolved: #1=19; #2=57; #3=53\n',
    )
  })

  it('build ChatML messages in toy and paper styles', () => {
    for (const role of ROLES) {
      const input =
        role === 'proposer'
          ? { role, level: 2 }
          : role === 'judge'
            ? { role, question: '7+5', response: '<answer>12</answer>' }
            : role === 'subtask'
              ? { role, question: '7+5', index: 1, subtask: '7+5', known: [] }
              : role === 'compose'
                ? { role, question: '7+5', answers: ['12'] }
                : { role, question: '7+5' }
      const toy = roleChat(input as never)
      expect(toy).toEqual([{ role: 'user', content: rolePrompt(input as never).trimEnd() }])
      const paper = roleChat(input as never, { style: 'paper' })
      expect(paper.map((m) => m.role)).toEqual(['system', 'user'])
      expect(paper[0].content.length).toBeGreaterThan(50)
    }
    expect(roleChat({ role: 'validator', question: 'x' }, { style: 'paper' })[0].content).toContain('<score>')
    expect(roleChat({ role: 'proposer', level: 4 }, { style: 'paper' })[1].content).toContain('exactly 3 operations')
  })
})

// ---------------------------------------------------------------------------------------------

const corr = (xs: number[], ys: number[]): number => {
  const n = xs.length
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let sxy = 0, sxx = 0, syy = 0
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my)
    sxx += (xs[i] - mx) ** 2
    syy += (ys[i] - my) ** 2
  }
  return sxy / Math.sqrt(sxx * syy)
}

describe('scripted teachers', () => {
  it('the Solver errs more often as difficulty grows, near the documented rates', () => {
    const N = 400
    const rates: number[] = []
    for (const { level } of LEVELS) {
      const rng = new Rng(`solver-rate-${level}`)
      let wrong = 0, slipped = 0, hidden = 0
      for (let i = 0; i < N; i++) {
        const e = generateExpr(rng, level)
        const out = scriptedSolve(rng, e)!
        const ok = verifyAnswer(printExpr(e), out.completion) === true && parseSolution(out.completion).ok
        if (!ok) wrong++
        // errors propagate: a slipped step makes the final answer wrong (unless a later ×0 hides it)
        if (out.slipStep >= 0 && !out.malformed) (slipped++, (hidden += +(out.given === out.truth)))
      }
      expect(hidden).toBeLessThanOrEqual(Math.ceil(slipped * 0.02))
      rates.push(wrong / N)
      const designed = SOLVER_SLIP_RATE[level] + SOLVER_FORMAT_ERROR_RATE
      expect(Math.abs(wrong / N - designed), `level ${level}: ${wrong / N} vs ${designed}`).toBeLessThan(0.07)
    }
    for (let i = 1; i < rates.length; i++) expect(rates[i]).toBeGreaterThan(rates[i - 1])
  })

  it('the Solver hedges more when wrong', () => {
    const rng = new Rng('solver-hedge')
    let hr = 0, nr = 0, hw = 0, nw = 0
    for (let i = 0; i < 600; i++) {
      const out = scriptedSolve(rng, generateExpr(rng, 5))!
      expect(isHedged(out.completion)).toBe(out.hedged)
      if (out.given === out.truth) (nr++, (hr += +out.hedged))
      else (nw++, (hw += +out.hedged))
    }
    expect(hw / nw - hr / nr).toBeGreaterThan(0.3)
  })

  it('the Proposer mostly proposes good questions, sometimes malformed, trivial or broken', () => {
    const rng = new Rng('proposer')
    const kinds: Record<string, number> = {}
    for (let i = 0; i < 1000; i++) {
      const p = scriptedPropose(rng, 3)
      kinds[p.kind] = (kinds[p.kind] ?? 0) + 1
      const r = parseQuestion(p.completion)
      expect(r.ok).toBe(p.kind !== 'tag-error')
      if (p.kind === 'good') expect(difficultyOf(p.question)).toBe(3)
      if (p.kind === 'malformed') expect(p.cls).toBe('malformed')
      if (p.kind === 'trivial') expect(p.cls).toBe('trivial')
      if (p.kind === 'too-hard') expect(p.cls).toBe('too-hard')
    }
    expect(kinds.good).toBeGreaterThan(650)
    for (const k of ['malformed', 'trivial', 'tag-error', 'off-level', 'too-hard']) expect(kinds[k] ?? 0, k).toBeGreaterThan(0)
  })

  it('Validator scores are noisy but correlated with the truth, hedged more when wrong', () => {
    const rng = new Rng('validator')
    const truth: number[] = [], score: number[] = []
    let right = 0, hr = 0, nr = 0, hw = 0, nw = 0
    const byClass: Record<string, number[]> = {}
    for (let i = 0; i < 1200; i++) {
      const p = scriptedPropose(rng, rng.int(1, 5), { rates: { malformed: 0.2, trivial: 0.2, tooHard: 0.1, tagError: 0 } })
      const v = scriptedValidate(rng, p.question)
      const r = parseScore(v.completion)
      expect(r.ok && r.value.score).toBe(v.score)
      expect(v.verdictCorrect).toBe((v.score >= SCORE_PASS) === (p.cls === 'good'))
      truth.push(p.cls === 'good' ? 1 : 0)
      score.push(v.score)
      ;(byClass[p.cls] ??= []).push(v.score)
      right += +v.verdictCorrect
      if (v.verdictCorrect) (nr++, (hr += +v.hedged))
      else (nw++, (hw += +v.hedged))
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
    expect(corr(truth, score)).toBeGreaterThan(0.6)
    expect(right / truth.length).toBeGreaterThan(0.8)
    expect(right / truth.length).toBeLessThan(0.97) // noisy, not perfect
    expect(mean(byClass.good)).toBeGreaterThan(mean(byClass.malformed) + 4)
    expect(mean(byClass.good)).toBeGreaterThan(mean(byClass.trivial) + 3)
    expect(hw / nw - hr / nr).toBeGreaterThan(0.3)
  })

  it('Judge scores are noisy but correlated with correctness, hedged more when wrong', () => {
    const rng = new Rng('judge')
    const truth: number[] = [], score: number[] = []
    let right = 0, hr = 0, nr = 0, hw = 0, nw = 0
    for (let i = 0; i < 1200; i++) {
      const e = generateExpr(rng, rng.int(1, 5))
      const response = scriptedSolve(rng, e, { slipRate: 0.5, formatErrorRate: 0.05 })!.completion
      const j = scriptedJudge(rng, e, response)
      const correct = verifyAnswer(printExpr(e), response) === true && parseSolution(response).ok
      expect(j.candidateCorrect).toBe(correct)
      expect(j.verdictCorrect).toBe((j.score >= SCORE_PASS) === correct)
      expect(parseScore(j.completion).ok).toBe(true)
      truth.push(+correct)
      score.push(j.score)
      right += +j.verdictCorrect
      if (j.verdictCorrect) (nr++, (hr += +j.hedged))
      else (nw++, (hw += +j.hedged))
    }
    expect(corr(truth, score)).toBeGreaterThan(0.6)
    expect(right / truth.length).toBeGreaterThan(0.8)
    expect(right / truth.length).toBeLessThan(0.97)
    expect(hw / nw - hr / nr).toBeGreaterThan(0.3)
  })

  it("Judge's own working: every step recomputed from the question's values in its own form, never the response's characters, verdict = verifier when it neither skims nor slips", () => {
    const operand = String.raw`(\(-\d+\)|-?\d+)`
    const line = new RegExp(`^${operand}(?:([+*])${operand}|\\^2)=(-?\\d+)(?: (ok|not (-?\\d+)))?$`)
    const num = (t: string) => BigInt(t.replace(/[()]/g, ''))
    /** The Judge's worked lines, parsed: operands x op y (y = x for `x^2`), the value it wrote, and the result it says the response wrote when it disagrees. */
    const worked = (think: string) =>
      think.split('. got ')[0].split('; ').map((part) => {
        const m = line.exec(part)
        expect(m, part).not.toBeNull()
        const [x, op, y] = m![2] === undefined ? [num(m![1]), '*', num(m![1])] : [num(m![1]), m![2], num(m![3])]
        return { x, op, y, value: num(m![4]), text: part.slice(0, part.indexOf('=') + 1), disagrees: m![6] === undefined ? null : num(m![6]) }
      })
    const rng = new Rng('judge-own-working')
    let checkedWrongSteps = 0
    let checkedSteps = 0
    for (let i = 0; i < 1500; i++) {
      const e = generateExpr(rng, rng.int(1, 5))
      const solved = scriptedSolve(rng, e, { slipRate: 0.5, formatErrorRate: 0.05 })!
      const j = scriptedJudge(rng, e, solved.completion, { lazyRate: 0, slipRate: 0 })
      const correct = verifyAnswer(printExpr(e), solved.completion) === true && parseSolution(solved.completion).ok
      if (solved.given === null) continue // no readable answer: score 1, no working
      expect(j.score >= SCORE_PASS, solved.completion).toBe(correct)
      expect(j.verdictCorrect).toBe(true)
      const unhedged = (t: string) => t.replace(/\bmaybe\b|\bI think\b|, not sure/g, '').trim()
      const think = unhedged(/<think>([\s\S]*)<\/think>/.exec(j.completion)![1])
      const truth = solutionSteps(e)!
      const response = /<think>([\s\S]*?)<\/think>/.exec(solved.completion)?.[1].split('; ') ?? []
      worked(think).forEach((w, k) => {
        const t = truth[k]
        checkedSteps++
        // the operands are the question's own values at step k, in the Judge's order: b op a, a−b as (−b)+a
        if (t.op === '-') expect([w.op, w.x, w.y]).toEqual(['+', -t.b, t.a])
        else if (t.a === t.b) expect([w.op, w.x, w.y]).toEqual(t.op === '+' ? ['*', 2n, t.a] : ['*', t.a, t.a])
        else expect([w.op, w.x, w.y]).toEqual([t.op, t.b, t.a])
        expect(w.value).toBe(t.result)
        if (k < response.length && response[k].includes('=')) {
          const written = unhedged(response[k])
          expect(w.text).not.toBe(written.slice(0, written.indexOf('=') + 1))
          const writtenResult = BigInt(written.slice(written.indexOf('=') + 1))
          expect(w.disagrees).toBe(writtenResult === t.result ? null : writtenResult)
          if (w.disagrees !== null) checkedWrongSteps++
        }
      })
    }
    expect(checkedWrongSteps).toBeGreaterThan(300) // slipped steps were met, and recomputed, not copied
    expect(checkedSteps).toBeGreaterThan(2500)
    // the written form on its own: same value, never the step's own text, for any operands
    fc.assert(
      fc.property(fc.constantFrom<'+' | '-' | '*'>('+', '-', '*'), fc.bigInt(-999n, 999n), fc.bigInt(-999n, 999n), fc.boolean(), (op, a, b0, same) => {
        const b = same ? a : b0
        const form = judgeStepForm({ op, a, b })
        const exact = op === '+' ? a + b : op === '-' ? a - b : a * b
        expect(form).not.toBe(formatStep({ op, a, b, result: 0n }).slice(0, -2))
        const [x, o, y] = worked(`${form}=${exact}`).map((w) => [w.x, w.op, w.y] as const)[0]
        expect(o === '+' ? x + y : x * y).toBe(exact)
      }),
    )
  })

  it('units and nines checks: the residues of the written values, the verdict they imply, and only the slips that change a residue caught', () => {
    const unhedged = (t: string) => t.replace(/\bmaybe\b|\bI think\b|, not sure/g, '').trim()
    const thinkOf = (completion: string) => unhedged(/<think>([\s\S]*)<\/think>/.exec(completion)![1])
    const exact = { lazyRate: 0, slipRate: 0 }
    const q = parseExpr('17+68')!
    const wrong = '<think>17+68=84</think><answer>84</answer>'
    expect(thinkOf(scriptedJudge(new Rng(1), q, wrong, { ...exact, check: 'units' }).completion)).toBe('7+8:5 84:4 not. got 84: wrong')
    expect(thinkOf(scriptedJudge(new Rng(1), q, wrong, { ...exact, check: 'nines' }).completion)).toBe('17:8 68:5 8+5:4 84:3 not. got 84: wrong')
    // a slip of 10 keeps the units digit (units misses it), not the digit sum (nines catches it)
    const tens = '<think>17+68=75</think><answer>75</answer>'
    expect(thinkOf(scriptedJudge(new Rng(1), q, tens, { ...exact, check: 'units' }).completion)).toBe('7+8:5 75:5 ok. got 75: right')
    expect(thinkOf(scriptedJudge(new Rng(1), q, tens, { ...exact, check: 'nines' }).completion)).toBe('17:8 68:5 8+5:4 75:3 not. got 75: wrong')
    const rng = new Rng('judge-residue-checks')
    for (const check of ['units', 'nines'] as const) {
      const m = check === 'units' ? 10n : 9n
      const res = (v: bigint) => ((v % m) + m) % m
      let caught = 0
      let missed = 0
      let negative = 0
      for (let i = 0; i < 1500; i++) {
        const e = generateExpr(rng, rng.int(1, 5))
        const solved = scriptedSolve(rng, e, { slipRate: 0.5, formatErrorRate: 0.05 })!
        const steps = writtenSteps(solved.completion)
        if (solved.given === null || steps.length === 0) continue
        const j = scriptedJudge(rng, e, solved.completion, { ...exact, check })
        const lines = thinkOf(j.completion).split('. got ')[0].split('; ')
        const first = steps.findIndex((s) => res(applyOp(s.op, res(s.a), res(s.b))) !== res(s.result))
        expect(lines).toHaveLength(first < 0 ? steps.length : first + 1)
        lines.forEach((line, k) => {
          const s = steps[k]
          const [ra, rb, rr] = [res(s.a), res(s.b), res(s.result)]
          const own = res(applyOp(s.op, ra, rb))
          if (s.a < 0n || s.b < 0n || s.result < 0n) negative++
          expect(line).toBe(`${check === 'nines' ? `${s.a}:${ra} ${s.b}:${rb} ` : ''}${ra}${s.op}${rb}:${own} ${s.result}:${rr} ${own === rr ? 'ok' : 'not'}`)
        })
        const saysRight = j.score >= SCORE_PASS
        expect(saysRight).toBe(first < 0 && steps[steps.length - 1].result === solved.given)
        if (solved.given !== evaluate(e)) saysRight ? missed++ : caught++
      }
      expect(negative).toBeGreaterThan(50) // residues of negative values were checked
      expect(caught).toBeGreaterThan(200)
      expect(missed).toBeGreaterThan(check === 'units' ? 100 : 0) // units misses the slips that keep the units digit
      if (check === 'nines') expect(caught / (caught + missed)).toBeGreaterThan(0.85)
    }
    // the Judge's own slip: a wrong residue, so a right response is called wrong
    const right = '<think>17+68=85</think><answer>85</answer>'
    expect(thinkOf(scriptedJudge(new Rng(3), q, right, { lazyRate: 0, slipRate: 1, check: 'units' }).completion)).toMatch(/^7\+8:[0-46-9] 85:5 not\. got 85: wrong$/)
  })

  it('decompose → solve subtasks → compose beats one-shot solving on hard problems', () => {
    expect(decomposeExpr(parseExpr('(12+7)*3-4')!)).toEqual(['12+7', '#1*3', '#2-4'])
    expect(decomposeExpr(parseExpr('(1+2)*(3+4)')!)).toEqual(['1+2', '3+4', '#1*#2'])
    const six = parseExpr('1+2+3+4+5+6+7')!
    const d6 = decomposeExpr(six)
    expect(d6).toHaveLength(5)
    expect(checkDecomposition('1+2+3+4+5+6+7', d6)).toBe(true)
    expect(subtaskValues(['12+7', '#1*3', '#2-4'])).toEqual([19n, 57n, 53n])
    expect(checkDecomposition('(12+7)*3-4', ['12+7', '#1*3', '#2-5'])).toBe(false)
    expect(checkDecomposition('(12+7)*3-4', ['#2+7', '#1*3'])).toBe(false)
    expect(checkDecomposition('1+', ['1'])).toBeNull()

    for (const level of [4, 5]) {
      const rng = new Rng(`amplify-${level}`)
      let composed = 0, oneShot = 0, faithful = 0
      const N = 300
      for (let i = 0; i < N; i++) {
        const e = generateExpr(rng, level)
        const q = printExpr(e)
        const d = scriptedDecompose(rng, e)
        const pd = parseDecomposition(d.completion)
        expect(pd.ok).toBe(true)
        expect(checkDecomposition(q, d.subtasks)).toBe(d.faithful)
        faithful += +d.faithful
        const known: bigint[] = []
        for (const s of d.subtasks) {
          const out = scriptedSolveSubtask(rng, parseExpr(s, { allowRefs: true })!, known, level)!
          known.push(out.given ?? 0n)
        }
        const c = scriptedCompose(rng, known)
        if (verifyAnswer(q, c.completion) === true) composed++
        if (verifyAnswer(q, scriptedSolve(rng, e)!.completion) === true) oneShot++
      }
      expect(faithful / N).toBeGreaterThan(0.8)
      expect(faithful / N).toBeLessThan(1)
      expect(composed / N, `level ${level}`).toBeGreaterThan(oneShot / N + 0.05)
    }
  })
})

// ---------------------------------------------------------------------------------------------

describe('held-out evaluation sets', () => {
  it('are fixed by seed (pinned), distinct, correct and prefix-stable', () => {
    const pinned: Record<number, string[]> = {
      1: ['4+4', '9+5', '9-4'],
      2: ['6-2*7', '6-6+2', '(2+7)*4'],
      3: ['17+(31+37)', '41*(54-47)', '74+9+63'],
      4: ['9*9-4-69', '2-(3+15*8)', '74-(4-16)-69'],
      5: ['721-25-5*(5+533)', '337*3+(9*8-2)', '46-(58*9-(321+63))'],
    }
    for (const { level } of LEVELS) {
      const set = evalSet(level)
      expect(set).toHaveLength(100)
      expect(set.slice(0, 3).map((x) => x.question)).toEqual(pinned[level])
      expect(new Set(set.map((x) => x.question)).size).toBe(100)
      for (const it of set) {
        expect(it.level).toBe(level)
        expect(difficultyOf(it.question)).toBe(level)
        expect(verifyAnswer(it.question, it.answer)).toBe(true)
      }
      expect(evalSet(level, 40)).toEqual(set.slice(0, 40))
      expect(evalSet(level)).toEqual(set) // same on every call; callers get copies
      set[0].question = 'mutated'
      expect(evalSet(level)[0].question).toBe(pinned[level][0])
    }
    expect(evalSet(1, 0)).toEqual([])
    expect(() => evalSet(1, EVAL_CAPACITY[1] + 1)).toThrow(RangeError)
    expect(() => evalSet(6)).toThrow(RangeError)
    expect(evalSet(3, 1000)).toHaveLength(1000)
  })

  it('are disjoint from the corpus', () => {
    const corpus = buildCorpus({ seed: 'disjoint', size: 3000 })
    let checked = 0
    for (const item of corpus) {
      const c = canonical(item.meta.question)
      if (c === null) continue
      checked++
      expect(isEvalQuestion(c), c).toBe(false)
    }
    expect(checked).toBeGreaterThan(2500)
    // level 1 is small (184 non-trivial questions): the corpus still covers the rest of it
    const l1 = buildCorpus({ seed: 5, size: 400, mix: { solver: 1 }, levelWeights: [1, 0, 0, 0, 0] })
    const distinct = new Set(l1.map((x) => x.meta.question))
    expect(distinct.size).toBeGreaterThan(60)
    for (const q of distinct) expect(isEvalQuestion(q)).toBe(false)
  })
})

describe('arithWorld data', () => {
  it("TTRL's unlabeled prompts are the tail (items 900 on) of the chosen level's reserve, disjoint from its benchmark's first 900", () => {
    for (const level of [2, 3, 4, 5]) {
      const w = arithWorld({ benchmarks: [`L${level}`], unlabeledLevel: level })
      const prompts = w.data.unlabeledPrompts()
      expect(prompts.map((p) => p.question)).toEqual(evalSet(level, 1000).slice(900).map((e) => e.question))
      for (const p of prompts) expect(difficultyOf(p.question)).toBe(level)
      const benchmark = new Set(w.data.benchmarks[0].problems.slice(0, 900).map((p) => p.question))
      for (const p of prompts) expect(benchmark.has(p.question)).toBe(false)
    }
    // the default is level 3's tail
    expect(arithWorld().data.unlabeledPrompts()).toEqual(arithWorld({ unlabeledLevel: 3 }).data.unlabeledPrompts())
    // level 1's reserve is 100 items: it has no tail, and an unknown level is refused at once
    for (const bad of [1, 0, 6, 2.5]) expect(() => arithWorld({ unlabeledLevel: bad }), String(bad)).toThrow(/unlabeledLevel/)
  })
})

describe('corpus', () => {
  const corpus = buildCorpus({ seed: 7, size: 2000, chat: true })

  it('is deterministic by seed and prefix-stable in size', () => {
    expect(buildCorpus({ seed: 7, size: 2000, chat: true })).toEqual(corpus)
    expect(buildCorpus({ seed: 7, size: 50, chat: true })).toEqual(corpus.slice(0, 50))
    expect(buildCorpus({ seed: 8, size: 50 })).not.toEqual(buildCorpus({ seed: 7, size: 50 }))
    expect(buildCorpus({ seed: 7, size: 0 })).toEqual([])
  })

  it('covers every role and level; meta agrees with the parsers and the verifier', () => {
    const roles = new Set(corpus.map((x) => x.role))
    expect([...roles].sort()).toEqual([...ROLES].sort())
    expect(new Set(corpus.map((x) => x.meta.level)).size).toBe(5)
    for (const item of corpus) {
      expect(item.prompt.endsWith('\n')).toBe(true)
      expect(item.messages?.at(-1)).toEqual({ role: 'assistant', content: item.completion })
      expect(item.messages?.[0].content).toBe(item.prompt.trimEnd())
      const parse =
        item.role === 'proposer'
          ? parseQuestion
          : item.role === 'validator' || item.role === 'judge'
            ? parseScore
            : item.role === 'decompose'
              ? parseDecomposition
              : parseSolution
      expect(parse(item.completion).ok, item.completion).toBe(item.meta.formatOk)
      expect(isHedged(item.completion)).toBe(item.meta.hedged)
      if (item.role === 'solver') {
        expect(item.meta.correct).toBe(item.meta.formatOk && verifyAnswer(item.meta.question, item.completion) === true)
      }
      if (item.role === 'compose') expect(item.meta.correct).toBe(verifyAnswer(item.meta.question, item.completion) === true)
      if (item.role === 'decompose') {
        const d = parseDecomposition(item.completion)
        expect(d.ok && checkDecomposition(item.meta.question, d.value.subtasks)).toBe(item.meta.correct)
      }
    }
  })

  it('respects the mix and level weights', () => {
    const only = buildCorpus({ seed: 1, size: 200, mix: { judge: 1 }, levelWeights: [0, 0, 1, 0, 0] })
    expect(only.every((x) => x.role === 'judge' && x.meta.level === 3)).toBe(true)
    expect(only.filter((x) => x.meta.candidateCorrect).length).toBeGreaterThan(60)
    expect(only.filter((x) => !x.meta.candidateCorrect).length).toBeGreaterThan(60)
    expect(() => buildCorpus({ seed: 1, size: 1, levelWeights: [1] })).toThrow(RangeError)
  })

  it('writes the Judge items in the check form, skimming rate and share of wrong inputs it is given', () => {
    const judged = buildCorpus({ seed: 1, size: 400, mix: { judge: 1 }, levelWeights: [0, 0, 1, 0, 0], judge: { check: 'units', lazyRate: 0, inputWrongRate: 0.7 } })
    expect(judged.some((x) => x.meta.lazy)).toBe(false)
    const wrongShare = judged.filter((x) => !x.meta.candidateCorrect).length / judged.length
    expect(wrongShare).toBeGreaterThan(0.6)
    const withSteps = judged.filter((x) => x.completion.includes('</think>') && !x.completion.includes('no answer'))
    expect(withSteps.length).toBeGreaterThan(300)
    for (const x of withSteps) expect(x.completion, x.completion).toMatch(/<think>(maybe |I think )?\d[+\-*]\d:\d -?\d+:\d (ok|not)[;. ]/)
    // the defaults are the corpus's own: the same items as without the option
    expect(buildCorpus({ seed: 1, size: 300, judge: {} })).toEqual(buildCorpus({ seed: 1, size: 300 }))
    // options that may come from a recipe's JSON are refused before any item is drawn
    expect(() => buildCorpus({ seed: 1, size: 1, judge: { check: 'tens' as never } })).toThrow(/judge.check must be one of recompute, units, nines/)
    expect(() => buildCorpus({ seed: 1, size: 1, judge: { inputWrongRate: 1.5 } })).toThrow(RangeError)
    expect(() => buildCorpus({ seed: 1, size: 1, judge: { lazyRate: Number.NaN } })).toThrow(/judge.lazyRate must be a probability/)
  })

  it('has malformed examples only where they are meant to be, at small rates', () => {
    const by = (role: string) => corpus.filter((x) => x.role === role)
    for (const role of ['validator', 'judge', 'decompose', 'compose']) expect(by(role).every((x) => x.meta.formatOk), role).toBe(true)
    for (const role of ['solver', 'proposer']) {
      const bad = by(role).filter((x) => !x.meta.formatOk).length / by(role).length
      expect(bad, role).toBeGreaterThan(0)
      expect(bad, role).toBeLessThan(0.06)
    }
  })
})

describe('verifier helpers', () => {
  it('verifyAnswer reads bare integers and whole Solver outputs', () => {
    expect(verifyAnswer('(12+7)*3-4', '53')).toBe(true)
    expect(verifyAnswer('(12+7)*3-4', ' +53 ')).toBe(true)
    expect(verifyAnswer('(12+7)*3-4', '54')).toBe(false)
    expect(verifyAnswer('3-10', '-7')).toBe(true)
    expect(verifyAnswer('3-10', '−7')).toBe(true)
    expect(verifyAnswer('(12+7)*3-4', '<think>…</think><answer>53</answer>')).toBe(true)
    expect(verifyAnswer('(12+7)*3-4', 'so \\boxed{53}')).toBe(true)
    expect(verifyAnswer('(12+7)*3-4', '<answer>52</answer>')).toBe(false)
    expect(verifyAnswer('(12+7)*3-4', 'fifty-three')).toBeNull()
    expect(verifyAnswer('(12+7)*3-', '53')).toBeNull()
    expect(verifyAnswer(undefined, undefined)).toBeNull()
  })

  it('HEDGE_RATE documents a real gap', () => {
    expect(HEDGE_RATE.wrong).toBeGreaterThan(HEDGE_RATE.right * 4)
  })
})
