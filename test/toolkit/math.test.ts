import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  answersEquivalent,
  latexToMathjs,
  normalizeAnswer,
  numbersClose,
  parseNumber,
  symbolicallyEquivalent,
} from '../../src/tasks/index.js'

describe('answer normalization', () => {
  it('strips LaTeX decoration, units after numbers, "x =" and separators', () => {
    const cases: [string, string | null][] = [
      ['  \\dfrac{1}{2} ', '\\frac{1}{2}'],
      ['\\frac12', '\\frac{1}{2}'],
      ['\\text{Yes}', 'yes'],
      ['$5.00$', '5'],
      ['5\\text{ cm}', '5'],
      ['90^\\circ', '90'],
      ['90^{\\circ}', '90'],
      ['x = 5', '5'],
      ['1,000,000', '1000000'],
      ['1{,}000', '1000'],
      ['\\left( 1, 2 \\right)', '(1,2)'],
      ['{7}', '7'],
      ['12.', '12'],
      ['+3', '3'],
      ['-0', '0'],
      ['50\\%', '50%'],
      ['2\\pi r', '2\\pi r'],
      ['\\boxed{9}', '9'],
      ['', null],
      ['   ', null],
      ['$', null],
    ]
    for (const [raw, want] of cases) expect(normalizeAnswer(raw), raw).toBe(want)
    expect(normalizeAnswer(null)).toBeNull()
  })

  it('parses plain numbers: integers, decimals, fractions, percentages, scientific notation', () => {
    expect(parseNumber('-12')).toEqual({ value: -12, percent: false })
    expect(parseNumber('.5')?.value).toBe(0.5)
    expect(parseNumber('3/4')?.value).toBe(0.75)
    expect(parseNumber('-\\frac{3}{4}')?.value).toBe(-0.75)
    expect(parseNumber('50%')).toEqual({ value: 50, percent: true })
    expect(parseNumber('1.5e-3')?.value).toBeCloseTo(0.0015, 18)
    expect(parseNumber('1.5\\times10^{-3}')?.value).toBeCloseTo(0.0015, 18)
    expect(parseNumber('2\\cdot10^3')?.value).toBe(2000)
    expect(parseNumber('x')).toBeNull()
    expect(parseNumber('1/0')).toBeNull()
  })

  it('uses an absolute tolerance of 1e-6', () => {
    expect(numbersClose(10, 10 + 9e-7)).toBe(true)
    expect(numbersClose(10, 10 + 2e-6)).toBe(false)
    expect(numbersClose(123456789, 123456790)).toBe(false)
  })
})

describe('answer equivalence', () => {
  const equal: [string, string][] = [
    ['\\frac{1}{2}', '0.5'],
    ['\\dfrac12', '1/2'],
    ['50\\%', '0.5'],
    ['50%', '50'],
    ['1,000', '1000'],
    ['1.5\\times10^{-3}', '0.0015'],
    ['1.5e-3', '0.0015'],
    ['0.3333333', '\\frac{1}{3}'],
    ['x^2-1', '(x-1)(x+1)'],
    ['\\sqrt{2}/2', '\\frac{1}{\\sqrt{2}}'],
    ['2^{10}', '1024'],
    ['\\sqrt[3]{8}', '2'],
    ['(1, 2)', '(1,2)'],
    ['(\\frac{1}{2}, 3)', '(0.5, 3.0)'],
    ['\\pi', '3.14159265'],
    ['2\\pi r', '2r\\pi'],
    ['x = 5', '5'],
    ['5\\text{ cm}', '5'],
    ['\\text{Yes}', 'yes'],
    ['3+2i', '2i+3'],
    ['\\frac{x}{3}', 'x/3'],
    ['-\\frac{3}{4}', '-0.75'],
    ['$5.00', '5'],
    ['e^{2}', 'e^2'],
    ['\\frac{a+b}{2}', '\\frac{b}{2}+\\frac{a}{2}'],
  ]
  const different: [string, string][] = [
    ['[1,2)', '(1,2)'],
    ['(1,2)', '(2,1)'],
    ['(1,2)', '1'],
    ['\\pi', '3.14'],
    ['0.333x', 'x/3'],
    ['123456789', '123456790'],
    ['10', '10.00001'],
    ['a', 'b'],
    ['x+1', 'y+1'],
    ['yes', 'no'],
    ['2', '-2'],
    ['x^2', 'x^3'],
  ]
  it.each(equal)('%s ≡ %s', (a, b) => {
    expect(answersEquivalent(a, b)).toBe(true)
    expect(answersEquivalent(b, a)).toBe(true)
  })
  it.each(different)('%s ≢ %s', (a, b) => {
    expect(answersEquivalent(a, b)).toBe(false)
    expect(answersEquivalent(b, a)).toBe(false)
  })

  it('treats no answer as equivalent to nothing', () => {
    expect(answersEquivalent(null, null)).toBe(false)
    expect(answersEquivalent(null, '5')).toBe(false)
    expect(answersEquivalent('', '')).toBe(false)
    expect(answersEquivalent('None', '')).toBe(false)
  })

  it('refuses expressions it cannot evaluate safely', () => {
    expect(latexToMathjs('\\int_0^1 x dx')).toBeNull()
    expect(latexToMathjs('x'.repeat(300))).toBeNull()
    expect(symbolicallyEquivalent('f(x)=x', 'f(x)=x')).toBe(false) // assignments are not whitelisted
    expect(symbolicallyEquivalent('abcd', 'abcd')).toBe(false) // multi-letter symbols are text, not math
    expect(symbolicallyEquivalent('2^2^2^2^2^2', '2^2^2^2^2^2')).toBe(false) // both infinite: nothing compared
  })

  const pool = [
    '0.5', '1/2', '\\frac{1}{2}', '50%', '50', '2', '2.0', '-2', 'x+1', '1+x', '(1,2)', '(1, 2)', '[1,2]',
    '\\sqrt{2}', '1.4142136', 'yes', 'Yes', 'x^2-1', '(x-1)(x+1)', '\\pi', '1e-3', '0.001', '10^{-3}', 'a',
  ]
  it('is symmetric and reflexive on non-empty answers (property)', () => {
    fc.assert(
      fc.property(fc.constantFrom(...pool), fc.constantFrom(...pool), (a, b) => {
        return answersEquivalent(a, b) === answersEquivalent(b, a) && answersEquivalent(a, a)
      }),
      { numRuns: 300 },
    )
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e6, max: 1e6 }), (x) => {
        const s = String(x)
        return answersEquivalent(s, s) && answersEquivalent(s, `${s}`)
      }),
      { numRuns: 100 },
    )
  })
})
