// The JSONL problem readers (src/worlds/jsonl.ts): the formats users already have, a typed error
// naming file, line and field for every malformed record, and the size limits (a line is refused
// as soon as it is too long, without reading the rest of the file).
import { execFileSync } from 'node:child_process'
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DataError } from '../../src/worlds/errors.js'
import { jsonlLines, readProblems } from '../../src/worlds/jsonl.js'

const root = mkdtempSync(join(tmpdir(), 'ad-jsonl-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

let n = 0
function file(lines: readonly (string | object)[], raw = false): string {
  const f = join(root, `f${n++}.jsonl`)
  writeFileSync(f, raw ? (lines as string[]).join('') : lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n')
  return f
}

/** The DataError `p` rejects with (fails if it resolves or throws anything else). */
async function dataError(p: Promise<unknown>): Promise<DataError> {
  const e = await p.then(
    () => null,
    (x: unknown) => x,
  )
  expect(e).toBeInstanceOf(DataError)
  return e as DataError
}

describe('the formats', () => {
  it('{"problem", "answer"} with string and number answers; ids from id / ID / unique_id or file:line', async () => {
    const f = file([{ problem: 'What is 2+2?', answer: '4' }, { problem: 'Half of 9?', answer: 4.5, id: 7 }, { question: 'Q?', answer: ' x = 3 ', unique_id: 'test/algebra/1.json' }])
    expect(await readProblems(f)).toEqual([
      { id: `${f.split('/').pop()}:1`, question: 'What is 2+2?', answer: '4' },
      { id: '7', question: 'Half of 9?', answer: '4.5' },
      { id: 'test/algebra/1.json', question: 'Q?', answer: 'x = 3' },
    ])
  })

  it("GSM8K: the answer after the last ####, the reasoning before it as the solution", async () => {
    const f = file([{ question: 'Natalia sold 48 clips in April and half as many in May. How many in all?', answer: 'In May she sold 48/2 = <<48/2=24>>24.\nIn all: 48+24 = <<48+24=72>>72\n#### 72' }])
    const [p] = await readProblems(f, { requireAnswers: true })
    expect(p.answer).toBe('72')
    expect(p.solution).toBe('In May she sold 48/2 = <<48/2=24>>24.\nIn all: 48+24 = <<48+24=72>>72')
  })

  it('MATH: the solution\'s last balanced \\boxed{} (nested braces kept), or the "answer" field when there is one', async () => {
    const f = file([
      { problem: 'Simplify 2/4.', solution: 'We get $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.', level: 'Level 1', type: 'Prealgebra' },
      { problem: 'MATH-500 style', solution: 'so $\\boxed{3}$ then $\\boxed{5}$', answer: '5', unique_id: 'test/x/2.json' },
    ])
    const ps = await readProblems(f)
    expect(ps.map((p) => p.answer)).toEqual(['\\frac{1}{2}', '5'])
    expect(ps[0].solution).toContain('\\boxed{\\frac{1}{2}}')
  })

  it('AIME-style integer answers, capitalized fields too', async () => {
    const f = file([{ ID: '2024-I-1', Problem: 'Every morning Aya walks 9 km…', Answer: 204 }, { id: 'a2', problem: 'p', answer: 0 }])
    expect((await readProblems(f, { requireAnswers: true })).map((p) => [p.id, p.answer])).toEqual([['2024-I-1', '204'], ['a2', '0']])
  })

  it('unlabeled prompts (TTRL) have a null answer; blank lines, CRLF endings and a byte-order mark are fine', async () => {
    const f = file(['\uFEFF{"problem":"a"}\r\n', '\r\n', '{"problem":"b","answer":"1"}\r\n', '\n'], true)
    expect(await readProblems(f)).toEqual([
      { id: `${f.split('/').pop()}:1`, question: 'a', answer: null },
      { id: `${f.split('/').pop()}:3`, question: 'b', answer: '1' },
    ])
  })
})

describe('a malformed record: a DataError naming the file, the line and the field', () => {
  const cases: [string, (string | object)[], { line: number | null; field: string | null; message: RegExp }][] = [
    ['not JSON', [{ problem: 'a', answer: '1' }, '', '{"problem": "b", answer: 2}'], { line: 3, field: null, message: /line 3 is not valid JSON/ }],
    ['not an object', [['problem', 'a']], { line: 1, field: null, message: /must be a JSON object/ }],
    ['no question', [{ answer: '3' }], { line: 1, field: 'problem', message: /no question/ }],
    ['a question that is not a string', [{ problem: 12, answer: '3' }], { line: 1, field: 'problem', message: /"problem" must be a non-empty string/ }],
    ['an answer that is an object', [{ problem: 'p', answer: { value: 3 } }], { line: 1, field: 'answer', message: /must be a string or a number, got object/ }],
    ['an empty GSM8K answer', [{ question: 'q', answer: 'reasoning\n####   ' }], { line: 1, field: 'answer', message: /empty after ####/ }],
    ['a solution without \\boxed{}', [{ problem: 'p', solution: 'the answer is 3' }], { line: 1, field: 'solution', message: /no \\boxed\{…\} answer/ }],
    ['an id that is an object', [{ problem: 'p', answer: '1', id: {} }], { line: 1, field: 'id', message: /"id" must be a string or a number/ }],
  ]
  it.each(cases)('%s', async (_name, lines, want) => {
    const f = file(lines)
    const e = await dataError(readProblems(f))
    expect([e.file, e.line, e.field]).toEqual([f, want.line, want.field])
    expect(e.message).toMatch(want.message)
    expect(e.message.startsWith(f)).toBe(true)
  })

  it('a benchmark (answers required) with an unlabeled record names that line and the answer field', async () => {
    const f = file([{ problem: 'a', answer: '1' }, { problem: 'b' }])
    const e = await dataError(readProblems(f, { requireAnswers: true }))
    expect([e.line, e.field]).toEqual([2, 'answer'])
    expect(e.message).toMatch(/line 2: no reference answer/)
  })

  it('an empty file and a missing file', async () => {
    expect((await dataError(readProblems(file(['\n', '  \n'], true)))).message).toMatch(/no records/)
    expect((await dataError(readProblems(join(root, 'missing.jsonl')))).message).toMatch(/cannot read it \(ENOENT\)/)
  })
})

describe('size limits', () => {
  it('a line longer than the limit is refused, naming the line', async () => {
    const f = file([{ problem: 'a', answer: '1' }, { problem: 'x'.repeat(5000), answer: '2' }])
    const e = await dataError(readProblems(f, { maxLineBytes: 1000 }))
    expect(e.line).toBe(2)
    expect(e.message).toMatch(/line 2 is longer than 1000 bytes/)
  })

  it('more records than the limit are refused', async () => {
    const f = file(Array.from({ length: 5 }, (_, i) => ({ problem: `p${i}`, answer: String(i) })))
    expect((await dataError(readProblems(f, { maxRecords: 3 }))).message).toMatch(/more than 3 records/)
  })

  it.skipIf(process.platform !== 'linux')('streams: an over-long line is refused while the file is still being written (it is never read whole)', async () => {
    const fifo = join(root, 'endless.jsonl')
    execFileSync('mkfifo', [fifo])
    // the writer sends one first line, then 4 MiB without a newline, and never ends the file
    const writer = createWriteStream(fifo)
    writer.on('error', () => {}) // EPIPE once the reader has given up
    writer.write('{"problem":"a","answer":"1"}\n')
    writer.write('x'.repeat(4 << 20))
    const lines: number[] = []
    const e = await dataError(
      (async () => {
        for await (const l of jsonlLines(fifo, 1 << 20)) lines.push(l.line)
      })(),
    )
    writer.destroy()
    expect(lines).toEqual([1])
    expect(e.message).toMatch(/line 2 is longer than 1048576 bytes/)
  })
})
