// The math world: the papers' prompts rendered by the real Qwen3 chat template (enable_thinking as
// a switch), answers from the last \boxed{} after </think> compared by src/tasks' equivalence, the
// role parsers, the bundled problem set (exactly what its generator writes), and typed errors for
// bad data files.
import { readFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ChatMessage } from '../../src/engine/tokenizer.js'
import { Tokenizer } from '../../src/engine/tokenizer.js'
import { ConfigError } from '../../src/engine/errors.js'
import { resolveTtrlConfig } from '../../src/methods/ttrl/config.js'
import { testTimePrompts } from '../../src/methods/ttrl/loop.js'
import { DataError } from '../../src/worlds/errors.js'
import { readProblems } from '../../src/worlds/jsonl.js'
import { loadWorld } from '../../src/worlds/load.js'
import { bundledMathSets } from '../../src/worlds/math/generate.js'
import { COSE_PROPOSER, JZERO_CHALLENGER, RZERO_CHALLENGER_SYSTEM, SOLVER_SYSTEM } from '../../src/worlds/math/prompts.js'
import { BUNDLED_MATH_BENCHMARKS, BUNDLED_MATH_DIR, BUNDLED_MATH_TRAIN, chatWorld, MATH_ANSWERS, numberedList } from '../../src/worlds/math/world.js'
import type { TaskWorld } from '../../src/worlds/types.js'
import { qwen3TokenizerDir } from '../helpers/qwen3-tiny.js'

const root = mkdtempSync(join(tmpdir(), 'ad-math-world-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const messagesOf = (p: unknown) => (p as { messages: ChatMessage[]; template?: { enableThinking?: boolean } })

describe('the bundled problem set', () => {
  it('is exactly what its generator writes, in the four formats, each problem in one set only', async () => {
    const sets = bundledMathSets()
    for (const [name, rows] of Object.entries(sets)) expect(readFileSync(join(BUNDLED_MATH_DIR, `${name}.jsonl`), 'utf8')).toBe(rows.map((r) => JSON.stringify(r)).join('\n') + '\n')
    const train = await readProblems(BUNDLED_MATH_TRAIN, { requireAnswers: true })
    const benches = await Promise.all(BUNDLED_MATH_BENCHMARKS.map((f) => readProblems(f, { requireAnswers: true })))
    expect([train.length, ...benches.map((b) => b.length)]).toEqual([300, 100, 100, 60])
    const all = [train, ...benches].flat().map((p) => p.question)
    expect(new Set(all).size).toBe(all.length)
    // the readers recover each generator answer from its format: GSM8K's ####, MATH's answer, AIME's integer
    expect(benches[0].map((p) => p.answer)).toEqual(sets['gsm8k-style'].map((r) => String(r.answer).split('#### ')[1]))
    expect(benches[1].every((p) => p.solution!.includes(`\\boxed{${p.answer}}`))).toBe(true)
    expect(benches[2].every((p) => /^\d+$/.test(p.answer) && Number(p.answer) < 1000)).toBe(true)
  })

  it('--world math without --data or --benchmarks uses it, offline', async () => {
    const w = await loadWorld({ world: 'math' })
    expect(w.name).toBe('math')
    expect(w.data.benchmarks.map((b) => [b.name, b.problems.length])).toEqual([['gsm8k-style', 100], ['math-style', 100], ['aime-style', 60]])
    expect(w.data.unlabeledPrompts()).toHaveLength(300)
    expect(w.data.levels).toEqual([])
    const training = w.data.trainingProblems({ seed: 's', count: 5 })
    expect(training).toHaveLength(5)
    expect(w.data.trainingProblems({ seed: 's', count: 5 })).toEqual(training) // a pure function of the seed
  })
})

describe.skipIf(!qwen3TokenizerDir())('the papers\' prompts under the real Qwen3 chat template', () => {
  let tok: Tokenizer
  let world: TaskWorld
  beforeAll(async () => {
    tok = await Tokenizer.fromFolder(qwen3TokenizerDir()!)
    world = await loadWorld({ world: 'math', thinking: false })
  })
  const render = (p: unknown) => tok.applyChatTemplate(messagesOf(p).messages, { addGenerationPrompt: true, ...messagesOf(p).template })

  it('UID Table 16: one user message, the problem then the boxed-answer instruction; enable_thinking false closes the think block', () => {
    const text = render(world.solve.solverPrompt('What is 2+2?'))
    expect(text).toBe('<|im_start|>user\nWhat is 2+2?\n\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n')
    expect(render(world.solve.poolPrompt('What is 2+2?'))).toContain('What is 2+2? Let’s think step by step and output the final answer within \\boxed{}.')
  })

  it('thinking on by default: the generation prompt leaves the think block to the model', async () => {
    const w = await loadWorld({ world: 'math' })
    expect(messagesOf(w.solve.solverPrompt('q')).template).toBeUndefined()
    expect(render(w.solve.solverPrompt('q')).endsWith('<|im_start|>assistant\n')).toBe(true)
  })

  it('COSE App. G, R-Zero, J-Zero App. C: each role its paper\'s prompt, system and user as the paper sets them', () => {
    expect(messagesOf(world.cose.proposerPrompt(3)).messages).toEqual([{ role: 'user', content: COSE_PROPOSER }])
    expect(COSE_PROPOSER).toMatch(/^Task: Create a challenging and self-contained reasoning task suitable for evaluating general intelligence or instruction following\./)
    expect(messagesOf(world.cose.judgePrompt('Q', 'R')).messages[0].content).toMatch(/Any factual, logical, arithmetic, or commonsense error results in a score in \[1,3\]/)
    expect(messagesOf(world.rzero.challengerPrompt(3)).messages.map((m) => m.role)).toEqual(['system', 'user'])
    expect(RZERO_CHALLENGER_SYSTEM).toContain('fewer than 30 % of advanced high-school students could solve it')
    expect(messagesOf(world.rzero.solverPrompt('Q')).messages).toEqual([{ role: 'system', content: SOLVER_SYSTEM }, { role: 'user', content: 'Q' }])
    expect(messagesOf(world.jzero.challengerPrompt(3)).messages).toEqual([{ role: 'user', content: JZERO_CHALLENGER }]) // "We do not set a system prompt for problem generation"
    expect(JZERO_CHALLENGER.endsWith('Now produce one new request of your own:')).toBe(true)
    const compose = messagesOf(world.jzero.composePrompt('T', [{ subtask: 'first', answer: 'A1' }, { subtask: 'second', answer: 'A2' }])).messages
    expect(compose[0].content).toMatch(/If the task has a closed-form answer, put it within \\boxed\{\}\.$/)
    expect(compose[1].content).toBe('Original task: T\n\nSolved subtasks:\n1. first\nA1\n\n2. second\nA2\n\nCombine these into the single best final answer to the original task. Output ONLY the final answer.')
    for (const p of [world.cose.validatorPrompt('Q'), world.jzero.decomposePrompt('T'), world.jzero.subtaskPrompt('T', 1, 'S', [])]) expect(render(p)).toMatch(/^<\|im_start\|>system\n/)
  })
})

describe('answers and parsers', () => {
  const w = chatWorld({ name: 'math', problems: [], benchmarks: [] })
  const p = (answer: string) => ({ id: 'x', question: 'q', answer })

  it('the last \\boxed{} after </think>; <answer> (COSE G.3) when there is none; nothing in the thinking counts', () => {
    expect(MATH_ANSWERS.parse('<think>maybe \\boxed{1}</think>So \\boxed{2} or rather \\boxed{\\frac{1}{2}}.')).toEqual({ think: 'maybe \\boxed{1}', answer: '\\frac{1}{2}' })
    expect(MATH_ANSWERS.parse('<think>a</think><answer>\n42\n</answer>')).toEqual({ think: 'a', answer: '42' })
    expect(MATH_ANSWERS.parse('<think>\\boxed{7}</think> no answer here')).toBeNull()
    expect(MATH_ANSWERS.parse('truncated \\boxed{12')).toBeNull()
    expect(MATH_ANSWERS.answer('\\boxed{ 1,000 }')).toBe(MATH_ANSWERS.answer('\\boxed{1000}'))
  })

  it('the verifier compares by src/tasks equivalence (numeric, fractions, spacing)', () => {
    expect(w.verifier.verify(p('0.5'), '\\boxed{\\frac{1}{2}}')).toBe(true)
    expect(w.verifier.verify(p('1000'), 'It is \\boxed{1,000}.')).toBe(true)
    expect(w.verifier.verify(p('\\frac{15}{4}'), '\\boxed{3.75}')).toBe(true)
    expect(w.verifier.verify(p('7'), '\\boxed{8}')).toBe(false)
    expect(w.verifier.verify(p('7'), 'no box: 7')).toBe(false)
    expect(w.verifier.referenceAnswer('a task the model posed')).toBeNull()
  })

  it('R-Zero questions need the <question> block and the \\boxed{} answer after it; COSE and J-Zero tasks the block', () => {
    expect(w.rzero.parseQuestion('<think>plan</think><question>\nFind x if 2x = 6.\n</question>\n\n\\boxed{3}')).toEqual({ question: 'Find x if 2x = 6.', key: 'find x if 2x = 6.' })
    expect(w.rzero.parseQuestion('<question>Find x if 2x = 6.</question>')).toBeNull()
    expect(w.rzero.parseQuestion('\\boxed{3} <question>Find x.</question>')).toBeNull()
    expect(w.jzero.parseTask('<question>Write a haiku.</question>')).toEqual({ question: 'Write a haiku.', key: 'write a haiku.' })
    expect(w.cose.parseProposal('no tags')).toBeNull()
    expect(w.cose.parseScore('<think>clear</think><score>8</score>')).toBeCloseTo(7 / 9, 15)
    expect(w.cose.parseScore('<score>11</score>')).toBeNull()
    expect(w.cose.solverFormat('<answer>x</answer>')).toBe(true)
    expect(w.cose.solverFormat('x')).toBe(false)
  })

  it('J-Zero decompositions: a numbered list of 3–5 subtasks (prose around it skipped); subtask answers are their text', () => {
    expect(numberedList('Here:\n1. Find a.\n2) Find b.\n**3.** Add them.\nDone.', 3, 5)).toEqual(['Find a.', 'Find b.', 'Add them.'])
    expect(numberedList('1. a\n3. b\n4. c', 1, 5)).toBeNull()
    expect(numberedList('1. a\n2. b', 3, 5)).toBeNull()
    expect(numberedList(Array.from({ length: 6 }, (_, i) => `${i + 1}. s`).join('\n'), 3, 5)).toBeNull()
    expect(w.jzero.parseSubtaskAnswer('<think>hmm</think>  It is 12. ')).toEqual({ think: 'hmm', answer: 'It is 12.' })
    expect(w.jzero.parseSubtaskAnswer('<think>only thinking</think>')).toBeNull()
  })

  it('the held-out preference pairs: the reference solution over the same with a wrong answer, verifier-ordered', () => {
    const world = chatWorld({ name: 'm', problems: [], benchmarks: [{ name: 'b', problems: [{ id: '1', question: 'q1', answer: '12', solution: '$3 \\cdot 4 = 12$. The answer is $\\boxed{12}$.' }, { id: '2', question: 'q2', answer: '\\frac{1}{2}' }] }] })
    const pairs = world.data.heldOutPreferences!(5)
    expect(pairs).toHaveLength(2)
    expect(pairs[0]).toEqual({ question: 'q1', chosen: '$3 \\cdot 4 = 12$. The answer is $\\boxed{12}$.', rejected: '$3 \\cdot 4 = 12$. The answer is $\\boxed{13}$.', group: 'b', plain: true })
    expect(pairs[1].chosen).toBe('The final answer is \\boxed{\\frac{1}{2}}.')
    for (const pr of pairs) {
      const problem = world.data.benchmarks[0].problems.find((x) => x.question === pr.question)!
      expect([world.verifier.verify(problem, pr.chosen), world.verifier.verify(problem, pr.rejected)]).toEqual([true, false])
    }
  })
})

describe('data files: typed errors', () => {
  const write = (name: string, lines: object[]) => {
    const f = join(root, name)
    writeFileSync(f, lines.map((l) => JSON.stringify(l)).join('\n') + '\n')
    return f
  }

  it('a benchmark without answers is a DataError naming the file, the line and the field', async () => {
    const data = write('train.jsonl', [{ problem: 'a', answer: '1' }])
    const bench = write('bench.jsonl', [{ problem: 'b', answer: '2' }, { problem: 'no answer here' }])
    const e = await loadWorld({ world: 'math', data, benchmarks: [bench] }).catch((x: unknown) => x)
    expect(e).toBeInstanceOf(DataError)
    expect([(e as DataError).file, (e as DataError).line, (e as DataError).field]).toEqual([bench, 2, 'answer'])
  })

  it('a missing file, and two benchmarks of one name', async () => {
    await expect(loadWorld({ world: 'math', data: join(root, 'nope.jsonl') })).rejects.toThrow(/nope\.jsonl: no such file/)
    const a = write('dup.jsonl', [{ problem: 'x', answer: '1' }])
    const sub = join(root, 'sub')
    const { mkdirSync } = await import('node:fs')
    mkdirSync(sub, { recursive: true })
    const b = join(sub, 'dup.jsonl')
    writeFileSync(b, readFileSync(a))
    await expect(loadWorld({ world: 'math', benchmarks: [a, b] })).rejects.toThrow(/two benchmark files are named 'dup'/)
  })

  it('unlabeled --data is fine for TTRL, and a typed error where a method needs training answers', async () => {
    const data = write('unlabeled.jsonl', [{ problem: 'a' }, { problem: 'b' }])
    const w = await loadWorld({ world: 'math', data })
    expect(w.data.unlabeledPrompts().map((p) => p.answer)).toEqual([null, null])
    expect(() => w.data.trainingProblems({ seed: 's', count: 2 })).toThrow(DataError)
    expect(() => w.data.trainingProblems({ seed: 's', count: 2 })).toThrow(/needs labeled --data/)
    // TTRL's reference-label control needs the answers too: a ConfigError naming the field, before any model loads
    const reference = resolveTtrlConfig({ prompts: { offset: 0, size: 2 }, reward: { arm: 'reference-label' } })
    expect(() => testTimePrompts(w, reference)).toThrow(ConfigError)
    expect(() => testTimePrompts(w, reference)).toThrow(/reward\.arm: 'reference-label'.*prompt 0 of world/)
    expect(testTimePrompts(w, resolveTtrlConfig({ prompts: { offset: 0, size: 2 } }))).toHaveLength(2)
  })

  it('training problems leave out every benchmark problem', async () => {
    const data = write('overlap.jsonl', [{ problem: 'shared one', answer: '1' }, { problem: 'train only', answer: '2' }])
    const bench = write('overlap-bench.jsonl', [{ problem: 'Shared  one', answer: '1' }])
    const w = await loadWorld({ world: 'math', data, benchmarks: [bench] })
    expect(w.data.trainingProblems({ seed: 's', count: 5 }).map((p) => p.question)).toEqual(['train only'])
  })
})
