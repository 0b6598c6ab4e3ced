import { describe, expect, it } from 'vitest'
import {
  afterThinking,
  extractAnswerTag,
  extractBoxed,
  extractQuestion,
  extractScore,
  proposerFormat,
  solverFormat,
} from '../../src/tasks/extract.js'

describe('last balanced \\boxed{…} (UID A.1, C.4)', () => {
  it('keeps nested braces and returns the whole content', () => {
    expect(extractBoxed('so the answer is \\boxed{\\frac{1}{2}}.')).toBe('\\frac{1}{2}')
    expect(extractBoxed('\\boxed{\\{1, 2\\}}')).toBe('\\{1, 2\\}')
    expect(extractBoxed('\\boxed{a_{n+1} = 2^{a_{n}}}')).toBe('a_{n+1} = 2^{a_{n}}')
    expect(extractBoxed('\\boxed {7}')).toBe('7')
  })

  it('returns the full answer, never one character of it (R-Zero caller_penalty bug)', () => {
    expect(extractBoxed('\\boxed{42}')).toBe('42')
    expect(extractBoxed('\\boxed{ 1024 }')).toBe('1024')
  })

  it('takes the last box, skipping a truncated one at the end', () => {
    expect(extractBoxed('first \\boxed{1} then \\boxed{2}')).toBe('2')
    expect(extractBoxed('first \\boxed{3} then \\boxed{\\frac{4}{')).toBe('3')
    expect(extractBoxed('\\boxed{x \\}')).toBeNull() // escaped brace does not close the box
  })

  it('searches only after the closing think tag', () => {
    expect(extractBoxed('<think>maybe \\boxed{5}</think> so \\boxed{6}')).toBe('6')
    expect(extractBoxed('<think>maybe \\boxed{5}</think> no box here')).toBeNull()
    expect(extractBoxed('<think>maybe \\boxed{5}</think> no box here', { afterThink: false })).toBe('5')
    expect(extractBoxed('<think>a</think> b <think>c \\boxed{1}</think> d \\boxed{2}')).toBe('2')
    expect(afterThinking('a</thinking>b')).toBe('b')
    expect(afterThinking('no tags')).toBe('no tags')
  })

  it('is null — not the string "None" — when there is no answer', () => {
    for (const text of ['', 'None', 'the answer is 5', '\\boxed{}', '\\boxed{   }', '\\boxed{5', '\\boxed']) {
      const a = extractBoxed(text)
      expect(a).toBeNull()
      expect(a).not.toBe('None')
    }
  })
})

describe('tag extraction (COSE G, JZ C.1)', () => {
  it('<answer>: last complete block after thinking, trimmed', () => {
    expect(extractAnswerTag('<think>x</think><answer>\n 12 \n</answer>')).toBe('12')
    expect(extractAnswerTag('<answer>1</answer> and <answer>2</answer>')).toBe('2')
    expect(extractAnswerTag('<answer>1</answer> and <answer>2')).toBe('1')
    expect(extractAnswerTag('<answer></answer>')).toBeNull()
    expect(extractAnswerTag('<think><answer>9</answer></think>')).toBeNull()
    expect(extractAnswerTag('no tags')).toBeNull()
  })

  it('<question>: the generated task', () => {
    expect(extractQuestion('<question>What is 2+2?</question>')).toBe('What is 2+2?')
    expect(extractQuestion('<question>unfinished')).toBeNull()
  })

  it('<score>: integer 1–10 normalized linearly to [0, 1]; anything else is null', () => {
    expect(extractScore('<think>hmm</think><score>8</score>')).toEqual({ raw: 8, normalized: 7 / 9 })
    expect(extractScore('<score>10</score>')?.normalized).toBe(1)
    expect(extractScore('<score>1</score>')?.normalized).toBe(0)
    expect(extractScore('<score> 5 </score>')?.raw).toBe(5)
    for (const bad of ['<score>11</score>', '<score>0</score>', '<score>7.5</score>', '<score>seven</score>', '<score></score>', 'no score', '<think><score>9</score></think>']) {
      expect(extractScore(bad)).toBeNull()
    }
    expect(extractScore('<score>3</score>', { min: 0, max: 5 })?.normalized).toBeCloseTo(0.6, 15)
    expect(() => extractScore('<score>3</score>', { min: 5, max: 5 })).toThrow(RangeError)
  })
})

describe('COSE format indicators f_P, f_S', () => {
  it('f_P needs a non-empty <question>; strict mode forbids anything else', () => {
    expect(proposerFormat('<think>plan</think><question>Q?</question>')).toBe(1)
    expect(proposerFormat('<question> </question>')).toBe(0)
    expect(proposerFormat('Here it is: <question>Q?</question>')).toBe(1)
    expect(proposerFormat('Here it is: <question>Q?</question>', { strict: true })).toBe(0)
    expect(proposerFormat('<think>plan</think>\n<question>Q?</question>\n', { strict: true })).toBe(1)
    expect(proposerFormat('<question>A</question><question>B</question>', { strict: true })).toBe(0)
  })

  it('f_S needs an <answer> block, or a balanced box for math prompts', () => {
    expect(solverFormat('<answer>4</answer>')).toBe(1)
    expect(solverFormat('\\boxed{4}')).toBe(0)
    expect(solverFormat('\\boxed{4}', { format: 'boxed' })).toBe(1)
    expect(solverFormat('\\boxed{4', { format: 'boxed' })).toBe(0)
  })
})
