// `autodidact compare RUN_A RUN_B [--replicates 100000] [--seed 0] [--alpha 0.05]`: accuracy of two
// evaluated runs per benchmark they share (the others are named and left out), their macro
// average, and the paired prompt-cluster percentile bootstrap interval of A − B (UID D.4: prompts
// resampled within each benchmark, all responses of a prompt kept together, the same prompts for
// both runs). RUN is a run folder (its latest evaluation), RUN@STEP (RUN@0: before training) or an
// eval file; any two methods' runs compare, since every method writes RUN/evals/.
import { InvalidArgumentError } from '../engine/errors.js'
import { benchmarkAccuracy, readEvalRecord, type BenchmarkRecord, type EvalRecord } from '../methods/common/evaluation.js'
import { pairedPromptBootstrap, type BenchmarkOutcomes, type BootstrapResult } from '../stats/bootstrap.js'
import { parseArgs } from './args.js'

export const COMPARE_USAGE = 'usage: autodidact compare RUN_A RUN_B [--replicates 100000] [--seed 0] [--alpha 0.05] [--json]'

/** The benchmarks both records hold (in A's order), and those only one holds. */
export function sharedBenchmarks(a: EvalRecord, b: EvalRecord): { shared: [BenchmarkRecord, BenchmarkRecord][]; onlyA: string[]; onlyB: string[] } {
  const inB = new Map(b.benchmarks.map((x) => [x.name, x]))
  const inA = new Set(a.benchmarks.map((x) => x.name))
  return {
    shared: a.benchmarks.filter((x) => inB.has(x.name)).map((x) => [x, inB.get(x.name)!]),
    onlyA: a.benchmarks.filter((x) => !inB.has(x.name)).map((x) => x.name),
    onlyB: b.benchmarks.filter((x) => !inA.has(x.name)).map((x) => x.name),
  }
}

/** The shared benchmarks paired prompt by prompt; throws when there are none, or when a shared one was evaluated on other prompts. */
export function pairRecords(shared: readonly [BenchmarkRecord, BenchmarkRecord][]): BenchmarkOutcomes[] {
  return shared.map(([ba, bb]) => {
    const ids = ba.items.map((it) => it.id)
    if (ids.join('\n') !== bb.items.map((it) => it.id).join('\n')) throw new InvalidArgumentError('runs', `benchmark ${ba.name}: the runs were evaluated on different prompts`)
    return { name: ba.name, a: ba.items.map((it) => it.correct), b: bb.items.map((it) => it.correct) }
  })
}

export interface Comparison {
  a: { path: string; step: number; accuracy: Record<string, number>; macro: number }
  b: { path: string; step: number; accuracy: Record<string, number>; macro: number }
  /** Benchmarks only one run was evaluated on (left out of the comparison). */
  leftOut: { onlyA: string[]; onlyB: string[] }
  bootstrap: BootstrapResult
}

export function compareRecords(pa: string, a: EvalRecord, pb: string, b: EvalRecord, o: { replicates?: number; seed?: number; alpha?: number } = {}): Comparison {
  const { shared, onlyA, onlyB } = sharedBenchmarks(a, b)
  if (!shared.length)
    throw new InvalidArgumentError('runs', `the runs share no benchmark: [${a.benchmarks.map((x) => x.name).join(', ')}] vs [${b.benchmarks.map((x) => x.name).join(', ')}]`)
  const paired = pairRecords(shared)
  const side = (path: string, r: EvalRecord, pick: 0 | 1) => {
    const accuracy = Object.fromEntries(shared.map((pair) => [pair[pick].name, 100 * benchmarkAccuracy(pair[pick])]))
    const vals = Object.values(accuracy)
    return { path, step: r.step, accuracy, macro: vals.reduce((s, v) => s + v, 0) / vals.length }
  }
  return { a: side(pa, a, 0), b: side(pb, b, 1), leftOut: { onlyA, onlyB }, bootstrap: pairedPromptBootstrap(paired, { replicates: o.replicates ?? 100_000, seed: o.seed ?? 0, alpha: o.alpha ?? 0.05 }) }
}

export function formatComparison(c: Comparison): string {
  const level = `${(100 * (1 - 0.05)).toFixed(0)}%`
  const f = (x: number) => x.toFixed(2)
  const sign = (x: number) => (x >= 0 ? '+' : '') + f(x)
  const w = Math.max(9, ...c.bootstrap.perBenchmark.map((p) => p.name.length))
  const lines = [
    `A = ${c.a.path} (step ${c.a.step})`,
    `B = ${c.b.path} (step ${c.b.step})`,
    `${'benchmark'.padEnd(w)}  prompts      A %      B %   A − B pp  ${level} paired bootstrap`,
    ...c.bootstrap.perBenchmark.map((p) => `${p.name.padEnd(w)}  ${String(p.prompts).padStart(7)}  ${f(c.a.accuracy[p.name]).padStart(7)}  ${f(c.b.accuracy[p.name]).padStart(7)}  ${sign(p.estimate).padStart(9)}  [${f(p.lo)}, ${f(p.hi)}]`),
    `${'macro'.padEnd(w)}  ${String(c.bootstrap.perBenchmark.reduce((s, p) => s + p.prompts, 0)).padStart(7)}  ${f(c.a.macro).padStart(7)}  ${f(c.b.macro).padStart(7)}  ${sign(c.bootstrap.macro.estimate).padStart(9)}  [${f(c.bootstrap.macro.lo)}, ${f(c.bootstrap.macro.hi)}]`,
    `prompt-weighted (secondary, UID Eq. 21): ${sign(c.bootstrap.promptWeighted.estimate)} [${f(c.bootstrap.promptWeighted.lo)}, ${f(c.bootstrap.promptWeighted.hi)}]; ${c.bootstrap.replicates} replicates`,
  ]
  if (c.leftOut.onlyA.length) lines.push(`left out (only A was evaluated on them): ${c.leftOut.onlyA.join(', ')}`)
  if (c.leftOut.onlyB.length) lines.push(`left out (only B was evaluated on them): ${c.leftOut.onlyB.join(', ')}`)
  return lines.join('\n')
}

export async function compareCommand(argv: string[]): Promise<number> {
  const { options, positional } = parseArgs(argv, { replicates: 'number', seed: 'number', alpha: 'number', json: 'boolean', help: 'boolean' })
  if (options.help) {
    console.log(COMPARE_USAGE)
    return 0
  }
  if (positional.length !== 2) throw new InvalidArgumentError('runs', `compare takes two runs, got ${positional.length}\n${COMPARE_USAGE}`)
  const replicates = (options.replicates as number | undefined) ?? 100_000
  if (!Number.isInteger(replicates) || replicates < 1) throw new InvalidArgumentError('replicates', '--replicates must be a positive integer')
  const alpha = (options.alpha as number | undefined) ?? 0.05
  const a = await readEvalRecord(positional[0])
  const b = await readEvalRecord(positional[1])
  const c = compareRecords(a.file, a.record, b.file, b.record, { replicates, seed: (options.seed as number | undefined) ?? 0, alpha })
  console.log(options.json ? JSON.stringify(c, null, 2) : formatComparison(c).replace('95%', `${(100 * (1 - alpha)).toFixed(0)}%`))
  return 0
}
