// The bundled problem set of the math world: word problems with exact answers, generated from
// templates by a seeded generator (a pure function of the seed), so that `--world math` runs
// offline. Each problem carries its arithmetic as steps (`4*12=48; 48-5=43`), from which the
// GSM8K-style solution (`… #### 43`) and the MATH-style solution (`… \boxed{43}`) are written.
//
// bundledMathSets() gives the shipped files of src/worlds/math/data (a test checks they match):
//   train.jsonl         {"problem", "answer"}                 training / unlabeled prompts
//   gsm8k-style.jsonl   {"question", "answer": "… #### N"}    GSM8K's format
//   math-style.jsonl    {"problem", "solution", "answer", "unique_id"}   MATH-500's format
//   aime-style.jsonl    {"id", "problem", "answer": N}        AIME-style integer answers
// No problem text appears in two sets.
import { Rng } from '../../util/prng.js'

export type ProblemKind = 'word' | 'fraction' | 'equation' | 'integer'

export interface GeneratedProblem {
  kind: ProblemKind
  question: string
  /** The exact answer as written (an integer, or a reduced fraction `\frac{a}{b}`). */
  answer: string
  /** The arithmetic, one operation per step. */
  steps: { expr: string; value: string }[]
}

const NAMES = ['Ava', 'Ben', 'Chloe', 'Diego', 'Elena', 'Farah', 'Gus', 'Hana', 'Ivan', 'Jada', 'Kofi', 'Lena', 'Mateo', 'Nia', 'Omar', 'Priya', 'Quinn', 'Rosa', 'Sami', 'Tess']

function int(rng: Rng, lo: number, hi: number): number {
  return lo + rng.nextInt(hi - lo + 1)
}

function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs[rng.nextInt(xs.length)]
}

function gcd(a: number, b: number): number {
  return b === 0 ? Math.abs(a) : gcd(b, a % b)
}

/** `n/d` reduced: an integer, or `\frac{n}{d}`. */
function fraction(n: number, d: number): string {
  const g = gcd(n, d)
  return d / g === 1 ? String(n / g) : `\\frac{${n / g}}{${d / g}}`
}

type Template = (rng: Rng) => GeneratedProblem

const step = (expr: string, value: number | string) => ({ expr, value: String(value) })

/** Word problems of two or three operations (GSM8K-like). */
const WORD: readonly Template[] = [
  (rng) => {
    const [n, a, b] = [pick(rng, NAMES), int(rng, 3, 9), int(rng, 6, 24)]
    const sold = int(rng, 2, a * b - 1)
    return { kind: 'word', question: `${n} bakes ${a} trays of muffins with ${b} muffins on each tray and sells ${sold} of them. How many muffins are left?`, answer: String(a * b - sold), steps: [step(`${a}*${b}`, a * b), step(`${a * b}-${sold}`, a * b - sold)] }
  },
  (rng) => {
    const [n, a, b, c] = [pick(rng, NAMES), int(rng, 5, 40), int(rng, 2, 6), int(rng, 4, 12)]
    const d = int(rng, 1, a + b * c - 1)
    const total = a + b * c
    return {
      kind: 'word',
      question: `${n} has ${a} stickers, buys ${b} packs with ${c} stickers in each pack, and then gives ${d} stickers to a friend. How many stickers does ${n} have now?`,
      answer: String(total - d),
      steps: [step(`${b}*${c}`, b * c), step(`${a}+${b * c}`, total), step(`${total}-${d}`, total - d)],
    }
  },
  (rng) => {
    const [a, b, c, d] = [int(rng, 30, 90), int(rng, 2, 5), int(rng, 20, 70), int(rng, 1, 4)]
    return {
      kind: 'word',
      question: `A train travels at ${a} km per hour for ${b} hours, then at ${c} km per hour for ${d} hours. How many kilometers does it travel in total?`,
      answer: String(a * b + c * d),
      steps: [step(`${a}*${b}`, a * b), step(`${c}*${d}`, c * d), step(`${a * b}+${c * d}`, a * b + c * d)],
    }
  },
  (rng) => {
    const [k, f, s] = [int(rng, 4, 15), int(rng, 2, 6), int(rng, 1, 3)]
    const total = k * f
    return {
      kind: 'word',
      question: `${f} friends share ${total} dollars equally. Each of them then spends ${s} dollars on a snack. How many dollars does each friend have left?`,
      answer: String(k - s),
      steps: [step(`${total}/${f}`, k), step(`${k}-${s}`, k - s)],
    }
  },
  (rng) => {
    const [a, b, n, m] = [int(rng, 2, 9), int(rng, 1, 5), int(rng, 2, 8), int(rng, 2, 9)]
    return {
      kind: 'word',
      question: `A notebook costs ${a} dollars and a pen costs ${b} dollars. How much do ${n} notebooks and ${m} pens cost together, in dollars?`,
      answer: String(n * a + m * b),
      steps: [step(`${n}*${a}`, n * a), step(`${m}*${b}`, m * b), step(`${n * a}+${m * b}`, n * a + m * b)],
    }
  },
  (rng) => {
    const [n, r, d] = [pick(rng, NAMES), int(rng, 8, 30), int(rng, 2, 9)]
    const pages = r * d + int(rng, 10, 150)
    return {
      kind: 'word',
      question: `A book has ${pages} pages. ${n} reads ${r} pages a day for ${d} days. How many pages are left to read?`,
      answer: String(pages - r * d),
      steps: [step(`${r}*${d}`, r * d), step(`${pages}-${r * d}`, pages - r * d)],
    }
  },
  (rng) => {
    const [n, a, b, c] = [pick(rng, NAMES), int(rng, 8, 40), int(rng, 2, 7), int(rng, 2, 10)]
    const other = a - b
    return {
      kind: 'word',
      question: `${n} is ${a} years old, and ${n}'s cousin is ${b} years younger. What will the sum of their ages be in ${c} years?`,
      answer: String(a + other + 2 * c),
      steps: [step(`${a}-${b}`, other), step(`${a}+${other}`, a + other), step(`${a + other}+2*${c}`, a + other + 2 * c)],
    }
  },
  (rng) => {
    const [l, w] = [int(rng, 5, 30), int(rng, 3, 20)]
    return { kind: 'word', question: `A rectangular garden is ${l} meters long and ${w} meters wide. How many meters of fence are needed to go around it?`, answer: String(2 * (l + w)), steps: [step(`${l}+${w}`, l + w), step(`2*${l + w}`, 2 * (l + w))] }
  },
  (rng) => {
    const [t, x] = [int(rng, 2, 12), pick(rng, [10, 20, 25, 50])]
    const price = 20 * t
    const off = (price * x) / 100
    return {
      kind: 'word',
      question: `A jacket costs ${price} dollars. It is on sale for ${x}% off. What is the sale price, in dollars?`,
      answer: String(price - off),
      steps: [step(`${price}*${x}/100`, off), step(`${price}-${off}`, price - off)],
    }
  },
]

/** Problems with fraction and equation answers (MATH-like). */
const MATH: readonly Template[] = [
  (rng) => {
    const [p, q, b] = [int(rng, 1, 4), pick(rng, [3, 4, 5, 8]), int(rng, 2, 9)]
    const answer = fraction(p * b, q)
    return {
      kind: 'fraction',
      question: `A recipe uses $\\frac{${p}}{${q}}$ cup of sugar per batch. How many cups of sugar are needed for ${b} batches? Express your answer as a common fraction or an integer.`,
      answer,
      steps: [step(`${p}/${q}*${b}`, answer)],
    }
  },
  (rng) => {
    const [a, x, c] = [int(rng, 2, 9), int(rng, -12, 15), int(rng, 1, 30)]
    const rhs = a * x + c
    return { kind: 'equation', question: `If $${a}x + ${c} = ${rhs}$, what is the value of $x$?`, answer: String(x), steps: [step(`${rhs}-${c}`, rhs - c), step(`${rhs - c}/${a}`, x)] }
  },
  (rng) => {
    const [a, b] = [int(rng, 2, 9), int(rng, 2, 9)]
    const d = a * b
    const n = int(rng, 1, d - 1)
    return { kind: 'fraction', question: `What is $\\frac{${n}}{${a}} \\cdot \\frac{1}{${b}}$? Express your answer as a common fraction.`, answer: fraction(n, d), steps: [step(`${n}/(${a}*${b})`, fraction(n, d))] }
  },
  (rng) => {
    const [s, l] = [int(rng, 2, 9), int(rng, 10, 30)]
    const w = int(rng, s + 1, 20)
    return {
      kind: 'equation',
      question: `A rectangle is ${l} units long and ${w} units wide. A square of side ${s} units is cut out of it. What is the area of the remaining region, in square units?`,
      answer: String(l * w - s * s),
      steps: [step(`${l}*${w}`, l * w), step(`${s}*${s}`, s * s), step(`${l * w}-${s * s}`, l * w - s * s)],
    }
  },
]

/** Problems whose answer is an integer in 0..999 (AIME-style). */
const INTEGER: readonly Template[] = [
  (rng) => {
    const [a, b, c, m] = [int(rng, 12, 99), int(rng, 12, 99), int(rng, 1, 99), pick(rng, [7, 9, 11, 13, 100, 1000])]
    const v = a * b + c
    return { kind: 'integer', question: `Find the remainder when $${a} \\cdot ${b} + ${c}$ is divided by ${m}.`, answer: String(v % m), steps: [step(`${a}*${b}`, a * b), step(`${a * b}+${c}`, v), step(`${v} mod ${m}`, v % m)] }
  },
  (rng) => {
    const [k, n] = [int(rng, 2, 9), int(rng, 4, 14)]
    const tri = (n * (n + 1)) / 2
    return { kind: 'integer', question: `What is the sum of the first ${n} positive multiples of ${k}?`, answer: String(k * tri), steps: [step(`${n}*${n + 1}/2`, tri), step(`${k}*${tri}`, k * tri)] }
  },
  (rng) => {
    const [a, b] = [int(rng, 2, 9), int(rng, 2, 9)]
    const lo = int(rng, 1, 50)
    const hi = lo + int(rng, 60, 400)
    const l = (a * b) / gcd(a, b)
    const count = Math.floor(hi / l) - Math.floor((lo - 1) / l)
    return {
      kind: 'integer',
      question: `How many integers from ${lo} to ${hi}, inclusive, are divisible by both ${a} and ${b}?`,
      answer: String(count),
      steps: [step(`lcm(${a},${b})`, l), step(`floor(${hi}/${l})-floor(${lo - 1}/${l})`, count)],
    }
  },
]

const TEMPLATES: Record<ProblemKind | 'any', readonly Template[]> = { word: WORD, fraction: MATH, equation: MATH, integer: INTEGER, any: [...WORD, ...MATH, ...INTEGER] }

/**
 * `count` distinct problems from the templates of `kinds`, drawn by the stream `seed`; texts in
 * `exclude` are skipped. A pure function of its arguments.
 */
export function generateProblems(seed: string, count: number, o: { kinds?: 'word' | 'math' | 'integer' | 'any'; exclude?: ReadonlySet<string> } = {}): GeneratedProblem[] {
  const templates = o.kinds === 'math' ? MATH : TEMPLATES[o.kinds ?? 'any']
  const rng = new Rng(`math-problems-${seed}`)
  const seen = new Set(o.exclude ?? [])
  const out: GeneratedProblem[] = []
  for (let guard = 0; out.length < count && guard < count * 50; guard++) {
    const p = pick(rng, templates)(rng)
    if (seen.has(p.question)) continue
    seen.add(p.question)
    out.push(p)
  }
  return out
}

/** The steps as the bundled toy model writes its working: `4*12=48; 48-5=43`. */
export function traceOf(p: GeneratedProblem): string {
  return p.steps.map((s) => `${s.expr}=${s.value}`).join('; ')
}

/** GSM8K's answer field: the steps in words, then `#### N`. */
export function gsm8kAnswer(p: GeneratedProblem): string {
  return `${p.steps.map((s) => `${s.expr.replace(/\*/g, ' * ').replace(/\//g, ' / ')} = ${s.value}`).join('\n')}\n#### ${p.answer}`
}

/** MATH's solution field: the steps, then the answer in `\boxed{}`. */
export function mathSolution(p: GeneratedProblem): string {
  return `${p.steps.map((s) => `$${s.expr.replace(/\*/g, ' \\cdot ')} = ${s.value}$.`).join(' ')} The answer is $\\boxed{${p.answer}}$.`
}

/** The shipped files' records (see the file comment). */
export function bundledMathSets(): Record<'train' | 'gsm8k-style' | 'math-style' | 'aime-style', Record<string, unknown>[]> {
  const gsm = generateProblems('bundled-gsm8k-v1', 100, { kinds: 'word' })
  const taken = new Set(gsm.map((p) => p.question))
  const math = generateProblems('bundled-math-v1', 100, { kinds: 'math', exclude: taken })
  for (const p of math) taken.add(p.question)
  const aime = generateProblems('bundled-aime-v1', 60, { kinds: 'integer', exclude: taken })
  for (const p of aime) taken.add(p.question)
  const train = generateProblems('bundled-train-v1', 300, { kinds: 'any', exclude: taken })
  return {
    train: train.map((p) => ({ problem: p.question, answer: p.answer })),
    'gsm8k-style': gsm.map((p) => ({ question: p.question, answer: gsm8kAnswer(p) })),
    'math-style': math.map((p, i) => ({ problem: p.question, solution: mathSolution(p), answer: p.answer, unique_id: `generated/math-style/${i}` })),
    'aime-style': aime.map((p, i) => ({ id: `generated-aime-${i + 1}`, problem: p.question, answer: Number(p.answer) })),
  }
}

/** The texts of every bundled problem (the toy model's chat corpus excludes them). */
export function bundledMathQuestions(): Set<string> {
  const sets = bundledMathSets()
  return new Set(Object.values(sets).flatMap((rows) => rows.map((r) => String(r.problem ?? r.question))))
}
