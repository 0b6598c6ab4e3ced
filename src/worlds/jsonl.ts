// Problem sets from the JSONL files users already have, one record a line:
//   {"problem", "answer"}                                 plain (answer a string or a number)
//   {"question", "answer": "… #### 42"}                   GSM8K: the answer after the last ####, the text before it the solution
//   {"problem", "solution": "… \boxed{…} …", "answer"?}   MATH / MATH-500: `answer`, else the solution's last \boxed{}
//   {"problem", "answer": 204} or {"Problem", "Answer"}   AIME-style integer answers
// The question is `problem` or `question` (either case); the id `id`, `ID` or `unique_id`, else
// `<file>:<line>`. A record without any answer is an unlabeled prompt (TTRL's test-time prompts);
// where answers are required (benchmarks, training problems) its absence is an error.
//
// Files are streamed: never read into memory whole (a 10 GB file is read chunk by chunk), a line
// longer than `maxLineBytes` is refused as soon as it is that long, and at most `maxRecords`
// records are kept. Every malformed record is a DataError naming the file, the line and the field.
import { createReadStream } from 'node:fs'
import { basename } from 'node:path'
import { extractBoxed } from '../tasks/extract.js'
import { DataError } from './errors.js'
import type { LabeledProblem, Problem } from './types.js'

export interface ReadProblemsOptions {
  /** Every record must carry a reference answer (benchmarks, training problems). Default false. */
  requireAnswers?: boolean
  /** Longest line accepted, in bytes (default 1 MiB). */
  maxLineBytes?: number
  /** Most records kept (default 1,000,000). */
  maxRecords?: number
}

export const DEFAULT_MAX_LINE_BYTES = 1 << 20
export const DEFAULT_MAX_RECORDS = 1_000_000

const QUESTION_FIELDS = ['problem', 'question', 'Problem', 'Question'] as const
const ANSWER_FIELDS = ['answer', 'Answer'] as const
const ID_FIELDS = ['id', 'ID', 'unique_id'] as const
const GSM8K_MARK = '####'

type Json = Record<string, unknown>

function firstPresent(r: Json, fields: readonly string[]): { field: string; value: unknown } | null {
  for (const field of fields) if (Object.hasOwn(r, field) && r[field] !== null && r[field] !== undefined) return { field, value: r[field] }
  return null
}

/**
 * One record as a Problem. `at` names the file and line in errors. Throws a DataError for a record
 * that is not an object, has no question, or an answer of the wrong type.
 */
export function problemOfRecord(record: unknown, at: { file: string; line: number }, o: { requireAnswer?: boolean } = {}): Problem {
  const where = `${at.file}: line ${at.line}`
  const fail = (field: string | null, why: string): never => {
    throw new DataError(at.file, at.line, field, `${where}: ${why}`)
  }
  if (record === null || typeof record !== 'object' || Array.isArray(record)) return fail(null, 'a record must be a JSON object')
  const r = record as Json
  const q = firstPresent(r, QUESTION_FIELDS)
  if (!q) return fail('problem', `no question: expected a "problem" or "question" field`)
  if (typeof q.value !== 'string' || !q.value.trim()) return fail(q.field, `"${q.field}" must be a non-empty string`)
  const idField = firstPresent(r, ID_FIELDS)
  if (idField && typeof idField.value !== 'string' && typeof idField.value !== 'number') fail(idField.field, `"${idField.field}" must be a string or a number`)
  const id = idField ? String(idField.value) : `${basename(at.file)}:${at.line}`
  let answer: string | null = null
  let solution: string | undefined
  const a = firstPresent(r, ANSWER_FIELDS)
  if (a) {
    if (typeof a.value === 'number') {
      if (!Number.isFinite(a.value)) fail(a.field, `"${a.field}" must be a finite number`)
      answer = String(a.value)
    } else if (typeof a.value === 'string') {
      const mark = a.value.lastIndexOf(GSM8K_MARK)
      if (mark >= 0) {
        // GSM8K: the reasoning, then "#### 42"
        answer = a.value.slice(mark + GSM8K_MARK.length).trim()
        solution = a.value.slice(0, mark).trim()
      } else answer = a.value.trim()
      if (!answer) fail(a.field, `"${a.field}" is empty${mark >= 0 ? ' after ####' : ''}`)
    } else fail(a.field, `"${a.field}" must be a string or a number, got ${Array.isArray(a.value) ? 'an array' : typeof a.value}`)
  }
  const sol = firstPresent(r, ['solution'])
  if (sol) {
    if (typeof sol.value !== 'string') fail('solution', '"solution" must be a string')
    solution = sol.value as string
    if (answer === null) {
      answer = extractBoxed(solution, { afterThink: false })
      if (answer === null) fail('solution', '"solution" has no \\boxed{…} answer (and there is no "answer" field)')
    }
  }
  if (answer === null && o.requireAnswer)
    fail('answer', 'no reference answer: expected "answer" (a string, a number, or GSM8K\'s "… #### N") or a "solution" with a \\boxed{} answer')
  return { id, question: q.value as string, answer, ...(solution === undefined ? {} : { solution }) }
}

/**
 * The non-empty lines of `file`, streamed, each with its 1-based line number. A line longer than
 * `maxLineBytes` is a DataError as soon as it is seen (the rest of the file is not read).
 */
export async function* jsonlLines(file: string, maxLineBytes = DEFAULT_MAX_LINE_BYTES): AsyncGenerator<{ line: number; text: string }> {
  const stream = createReadStream(file, { highWaterMark: 1 << 16 })
  let parts: Buffer[] = []
  let held = 0
  let line = 0
  const take = (): string => {
    let text = Buffer.concat(parts).toString('utf8')
    parts = []
    held = 0
    if (line === 1 && text.charCodeAt(0) === 0xfeff) text = text.slice(1) // a byte-order mark
    return text.endsWith('\r') ? text.slice(0, -1) : text
  }
  const tooLong = () => new DataError(file, line + 1, null, `${file}: line ${line + 1} is longer than ${maxLineBytes} bytes (the reader's limit; is this a JSONL file?)`)
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      let start = 0
      for (let nl = chunk.indexOf(0x0a); nl >= 0; nl = chunk.indexOf(0x0a, start)) {
        if (held + nl - start > maxLineBytes) throw tooLong()
        parts.push(chunk.subarray(start, nl))
        line++
        const text = take()
        if (text.trim()) yield { line, text }
        start = nl + 1
      }
      held += chunk.length - start
      if (held > maxLineBytes) throw tooLong()
      if (start < chunk.length) parts.push(chunk.subarray(start))
    }
  } catch (e) {
    if (e instanceof DataError) throw e
    throw new DataError(file, null, null, `${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, { cause: e })
  } finally {
    stream.destroy()
  }
  if (held > 0) {
    line++
    const text = take()
    if (text.trim()) yield { line, text }
  }
}

/** The problems of a JSONL file (see the file comment); a DataError names the file, line and field of a bad record. */
export async function readProblems(file: string, o: ReadProblemsOptions & { requireAnswers: true }): Promise<LabeledProblem[]>
export async function readProblems(file: string, o?: ReadProblemsOptions): Promise<Problem[]>
export async function readProblems(file: string, o: ReadProblemsOptions = {}): Promise<Problem[]> {
  const maxRecords = o.maxRecords ?? DEFAULT_MAX_RECORDS
  const out: Problem[] = []
  for await (const { line, text } of jsonlLines(file, o.maxLineBytes)) {
    let record: unknown
    try {
      record = JSON.parse(text)
    } catch (e) {
      throw new DataError(file, line, null, `${file}: line ${line} is not valid JSON (${(e as Error).message})`, { cause: e })
    }
    if (out.length >= maxRecords) throw new DataError(file, line, null, `${file}: more than ${maxRecords} records (the reader's limit)`)
    out.push(problemOfRecord(record, { file, line }, { requireAnswer: o.requireAnswers }))
  }
  if (!out.length) throw new DataError(file, null, null, `${file}: no records (an empty file, or only blank lines)`)
  return out
}
