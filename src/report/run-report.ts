// The run report: one self-contained HTML page from a run's data. A summary on top (what ran, on
// which model and world, how long, held-out accuracy before and after with n and 95% intervals,
// where the trained model is and the commands that serve or export it), then the curves: held-out
// accuracy on 0–1 with the base model as a reference line, the trainer's loss, learning rate,
// gradient norm, KL and entropy where the rows carry them, and each method signal with its
// one-line explanation. Pure: data in, a string out (no I/O, no script, no network).
import { pairedPromptBootstrap, type Interval } from '../stats/bootstrap.js'
import { bootstrapMean, wilsonInterval } from '../stats/summary.js'
import { explainSignals, METRICS, type MetricInfo } from './signals.js'
import { escapeHtml, lineChart, type Point, type ReferenceLine } from './svg.js'

/** One line of metrics.jsonl: `step`, and on training steps `seconds`, `generatedTokens`, method signals; `heldOutAccuracy` on evaluated steps. */
export type MetricsRow = { step: number } & Record<string, unknown>

/** A held-out evaluation question by question. Evaluations of one run use the same questions in the same order (or say so through `ids`), which makes before/after paired. */
export interface EvaluationDetail {
  step: number
  /** Per question: answered right (true / 1) or not, or the fraction of its sampled responses that were right (mean@k). */
  correct: readonly (boolean | number)[]
  /** Question ids, when known: pairing before/after is checked on them. */
  ids?: readonly string[]
  /** Per question, its benchmark: with several, accuracy is their macro average and the bootstrap resamples within each. */
  benchmarks?: readonly string[]
}

/** How the held-out accuracy is measured: what makes two runs' numbers comparable. */
export interface EvaluationProtocol {
  /** e.g. "greedy decoding, 1 response per question" or "mean@5 of sampled responses (temperature 0.6, top-p 0.95)". */
  protocol: string
  benchmarks: readonly { name: string; n: number }[]
}

/** The base model's accuracy from outside the run (e.g. its model card), drawn as a reference line. */
export interface BaseAccuracy {
  accuracy: number
  /** Questions it was measured on. */
  n?: number
  /** Its 95% interval, when the source gives one. */
  interval?: { lo: number; hi: number }
  /** Where it comes from and under which protocol, one line (e.g. "model card eval.json: greedy, level 3"). */
  source: string
}

export interface ReportSeries {
  title: string
  /** Dotted path into a metrics row, e.g. "rewardSolver.mean"; arrays on the way are averaged. */
  path: string
  /** One line saying what it is; default from METRICS. */
  explain?: string
  /** Y axis title with its unit; default from METRICS. */
  unit?: string
  /** Fixed y range; default from METRICS (e.g. [0, 1] for rates), else one that includes 0. */
  range?: readonly [number, number]
}

export interface RunReportInput {
  method: string
  /** One line about the method (its spec's summary). */
  summary?: string
  /** Page title; default "autodidact evolve --method NAME". */
  title?: string
  /** The model folder the run started from. */
  model: string
  world: string
  config: unknown
  seed: number
  startedAt: Date | string | number
  finishedAt: Date | string | number
  /** The rows as written to metrics.jsonl. */
  rows: readonly MetricsRow[]
  evaluations?: readonly EvaluationDetail[]
  baseAccuracy?: BaseAccuracy | null
  /** The method's charts (its spec's series). */
  series: readonly ReportSeries[]
  /** The folder of the trained model (a Hugging Face folder, or a PEFT adapter folder). */
  trainedModel?: string | null
  /** 'adapter': trainedModel is a PEFT LoRA adapter over `model` (serve and export take full folders); default 'model'. */
  trainedModelKind?: 'model' | 'adapter'
  /** The step whose model is the trained model, when not the last evaluated one (a rollback to the best checkpoint). */
  finalStep?: number
  /** Steps the run was configured for (default: the last row's step). */
  plannedSteps?: number
  /** e.g. "stopped early; resume with: autodidact evolve --resume DIR". */
  notes?: readonly string[]
  /** Warnings shown on top of the page (e.g. the collapse guard's). */
  alerts?: readonly string[]
  /** The evaluation protocol and its benchmarks. */
  evaluation?: EvaluationProtocol | null
  /** Questions per evaluation when known without per-question data (a Wilson interval is drawn then). */
  heldOutSize?: number | null
}

/** Accuracy at one evaluated step: the estimate, and n with a 95% interval when per-question data exist. */
export interface AccuracyAt {
  step: number
  accuracy: number
  n: number | null
  interval: Interval | null
  /** Which interval: a bootstrap over the questions, or Wilson's from n alone. */
  intervalKind: 'bootstrap' | 'wilson' | null
}

/** The trainer's curves, drawn whenever the rows carry them (first path found). */
export const TRAINING_SERIES: readonly ReportSeries[] = [
  { title: 'training loss', path: 'train.loss' },
  { title: 'learning rate', path: 'train.lr' },
  { title: 'gradient norm (before clipping)', path: 'train.gradNorm' },
  { title: 'KL to reference', path: 'train.objective.kl' },
  { title: 'policy entropy', path: 'train.objective.entropy' },
]

const BOOTSTRAP = { replicates: 4000, seed: 'autodidact-report' }

/** The number at a dotted path; arrays on the way are averaged over their elements' values. */
export function metricAt(row: unknown, path: string): number | null {
  const at = (v: unknown, keys: string[]): number[] => {
    if (Array.isArray(v)) return v.flatMap((e) => at(e, keys))
    if (!keys.length) return typeof v === 'number' && Number.isFinite(v) ? [v] : []
    return v && typeof v === 'object' ? at((v as Record<string, unknown>)[keys[0]], keys.slice(1)) : []
  }
  const values = at(row, path.split('.'))
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null
}

function points(rows: readonly MetricsRow[], path: string): Point[] {
  return rows.flatMap((r) => {
    const y = metricAt(r, path)
    return y === null || !Number.isFinite(r.step) ? [] : [{ x: r.step, y }]
  })
}

const asNumbers = (correct: readonly (boolean | number)[]) => Float64Array.from(correct, (c) => (typeof c === 'number' ? c : c ? 1 : 0))

/** A detail's per-question values split by benchmark (one group "held-out" when it names none). */
function byBenchmark(d: EvaluationDetail): { name: string; values: number[] }[] {
  const values = asNumbers(d.correct)
  const groups = new Map<string, number[]>()
  values.forEach((v, i) => {
    const name = d.benchmarks?.[i] ?? 'held-out'
    groups.set(name, [...(groups.get(name) ?? []), v])
  })
  return [...groups].map(([name, vs]) => ({ name, values: vs }))
}

/** Macro accuracy over the benchmarks with a bootstrap over questions within each (the paired bootstrap against zero); one benchmark: the plain bootstrap of the mean. */
function accuracyInterval(d: EvaluationDetail): Interval {
  const groups = byBenchmark(d)
  if (groups.length === 1) return bootstrapMean(groups[0].values, BOOTSTRAP)
  return pairedPromptBootstrap(groups.map((g) => ({ name: g.name, a: g.values.map((v) => [v]), b: g.values.map(() => [0]) })), { ...BOOTSTRAP, scale: 1 }).macro
}

/** Held-out accuracy at each evaluated step, with n and a 95% interval: a bootstrap over the questions where they are known, else Wilson's from `heldOutSize`. */
export function accuracyTrajectory(rows: readonly MetricsRow[], evaluations: readonly EvaluationDetail[] = [], heldOutSize: number | null = null): AccuracyAt[] {
  const byStep = new Map(evaluations.map((e) => [e.step, e]))
  return points(rows, 'heldOutAccuracy').map(({ x: step, y: accuracy }) => {
    const detail = byStep.get(step)
    if (detail && detail.correct.length) return { step, accuracy, n: detail.correct.length, interval: accuracyInterval(detail), intervalKind: 'bootstrap' }
    if (heldOutSize) return { step, accuracy, n: heldOutSize, interval: wilsonInterval(accuracy, heldOutSize), intervalKind: 'wilson' }
    return { step, accuracy, n: null, interval: null, intervalKind: null }
  })
}

/** After minus before on the same questions (paired bootstrap over questions within each benchmark, UID D.4), or null when they are not the same questions. */
export function accuracyChange(before: EvaluationDetail | undefined, after: EvaluationDetail | undefined): Interval | null {
  if (!before || !after || before === after || !before.correct.length || before.correct.length !== after.correct.length) return null
  if (before.ids && after.ids && before.ids.some((id, i) => id !== after.ids![i])) return null
  const [a, b] = [byBenchmark(after), byBenchmark(before)]
  if (a.length !== b.length || a.some((g, i) => g.name !== b[i].name || g.values.length !== b[i].values.length)) return null
  return pairedPromptBootstrap(a.map((g, i) => ({ name: g.name, a: g.values.map((v) => [v]), b: b[i].values.map((v) => [v]) })), { ...BOOTSTRAP, scale: 1 }).macro
}

function info(s: ReportSeries): MetricInfo {
  const known = METRICS[s.path]
  return { explain: s.explain ?? known?.explain ?? '', unit: s.unit ?? known?.unit ?? s.title, range: s.range ?? known?.range }
}

function toDate(t: Date | string | number): Date {
  return t instanceof Date ? t : new Date(t)
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?'
  const h = Math.floor(seconds / 3600)
  const m = Math.floor((seconds % 3600) / 60)
  const s = Math.round(seconds % 60)
  return h ? `${h} h ${String(m).padStart(2, '0')} min` : m ? `${m} min ${String(s).padStart(2, '0')} s` : `${(seconds < 10 ? seconds.toFixed(1) : String(s))} s`
}

const acc = (v: number) => v.toFixed(3)
const signed = (v: number) => (v > 0 ? '+' : v < 0 ? '−' : '±') + Math.abs(v).toFixed(3)
const ci = (i: { lo: number; hi: number }) => `95% CI ${acc(i.lo)}–${acc(i.hi)}`

function accuracyFacts(a: AccuracyAt): string {
  if (a.n === null) return `n unknown (no per-question data): no interval`
  return `n = ${a.n} questions, ${ci(a.interval!)} (${a.intervalKind === 'wilson' ? 'Wilson score interval: no per-question data' : 'bootstrap over questions'})`
}

/** What the accuracy is measured on, so that runs (and methods) compare like with like. */
function protocolFacts(e: EvaluationProtocol | null | undefined): string {
  if (!e) return ''
  const sets = e.benchmarks.map((b) => `${escapeHtml(b.name)} (n = ${b.n})`).join(', ')
  return `<p class="protocol" data-value="protocol">measured on ${sets}; ${escapeHtml(e.protocol)}${e.benchmarks.length > 1 ? '; accuracy is the macro average over these benchmarks' : ''}. Methods differ here (COSE, R-Zero, J-Zero and GRPO: greedy; TTRL, DPO and WSFT: mean@k of sampled responses): compare accuracies only under the same protocol and questions.</p>`
}

function changeVerdict(change: Interval): string {
  if (change.lo > 0) return 'an improvement beyond sampling noise'
  if (change.hi < 0) return 'a drop beyond sampling noise'
  return 'not distinguishable from sampling noise on these questions'
}

function summaryCards(input: RunReportInput, trajectory: AccuracyAt[], change: Interval | null): string {
  const first = trajectory[0]
  const last = finalEvaluation(input, trajectory)
  const seconds = (toDate(input.finishedAt).getTime() - toDate(input.startedAt).getTime()) / 1000
  const stepRows = input.rows.filter((r) => r.step > 0 && typeof r.seconds === 'number')
  const stepsDone = Math.max(0, ...input.rows.map((r) => r.step))
  const planned = input.plannedSteps ?? stepsDone
  const tokens = stepRows.reduce((s, r) => s + (metricAt(r, 'generatedTokens') ?? 0), 0)
  const stepSeconds = stepRows.reduce((s, r) => s + (metricAt(r, 'seconds') ?? 0), 0)
  const accuracyCard = first && last
    ? `<div class="card accuracy" data-card="accuracy"><h2>Held-out accuracy</h2>
<p class="big"><span data-value="before">${acc(first.accuracy)}</span> → <span data-value="after">${acc(last.accuracy)}</span></p>
<p>step ${first.step}: ${accuracyFacts(first)}</p><p>step ${last.step}: ${accuracyFacts(last)}</p>
${protocolFacts(input.evaluation)}
${change ? `<p class="verdict">change ${signed(change.estimate)} (paired over the same ${first.n} questions, 95% CI ${signed(change.lo)} to ${signed(change.hi)}): ${changeVerdict(change)}</p>` : first === last ? '<p>evaluated once</p>' : '<p>no paired interval: the two evaluations are not known to share their questions</p>'}
${input.baseAccuracy ? `<p class="base">base model, from outside this run: ${acc(input.baseAccuracy.accuracy)}${input.baseAccuracy.n ? `, n = ${input.baseAccuracy.n}` : ''}${input.baseAccuracy.interval ? `, ${ci(input.baseAccuracy.interval)}` : ''} (${escapeHtml(input.baseAccuracy.source)}). Step 0 above is this run's own evaluation of the same weights on its own questions, so the two differ by sampling noise.</p>` : ''}</div>`
    : '<div class="card accuracy" data-card="accuracy"><h2>Held-out accuracy</h2><p>not evaluated in this run</p></div>'
  const model = input.trainedModel
  const modelCard = `<div class="card" data-card="trained-model"><h2>Trained model</h2>${model && input.trainedModelKind === 'adapter'
    ? `<p><code class="path">${escapeHtml(model)}</code></p>
<p>a PEFT LoRA adapter over the base model <code class="path">${escapeHtml(input.model)}</code>. <code>serve</code> and <code>export</code> take full model folders; attach it in the library:</p>
<pre class="cmd">const m = await loadModel(${escapeHtml(JSON.stringify(input.model))})
await m.loadAdapter(${escapeHtml(JSON.stringify(model))})</pre>`
    : model
    ? `<p><code class="path">${escapeHtml(model)}</code></p>
<p>serve it (OpenAI-compatible HTTP):</p><pre class="cmd">npx autodidact serve --model ${escapeHtml(shellQuote(model))}</pre>
<p>export it for llama.cpp / Ollama (or <code>--format onnx --out model-onnx</code>):</p><pre class="cmd">npx autodidact export --format gguf --model ${escapeHtml(shellQuote(model))} --out model.gguf</pre>`
    : '<p>none: this run saved no model</p>'}</div>`
  const runCard = `<div class="card" data-card="run"><h2>Run</h2>
<p class="big">${stepsDone} of ${planned} steps</p><p>${formatDuration(seconds)} wall time${stepRows.length ? `, ${formatDuration(stepSeconds / stepRows.length)} per step` : ''}</p>
<p>${tokens.toLocaleString('en-US')} tokens generated${stepSeconds > 0 && tokens > 0 ? ` (${Math.round(tokens / stepSeconds).toLocaleString('en-US')} tok/s while stepping)` : ''}</p></div>`
  return `<section class="cards">${accuracyCard}${runCard}${modelCard}</section>`
}

/** The evaluation of the trained model: the last one, or the one at `finalStep`. */
function finalEvaluation(input: RunReportInput, trajectory: AccuracyAt[]): AccuracyAt | undefined {
  return (input.finalStep === undefined ? undefined : trajectory.find((a) => a.step === input.finalStep)) ?? trajectory.at(-1)
}

export function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`
}

function factsTable(input: RunReportInput): string {
  const facts: [string, string][] = [
    ['method', input.method],
    ['world', input.world],
    ['base model', input.model],
    ['seed', String(input.seed)],
    ['started', toDate(input.startedAt).toISOString()],
    ['finished', toDate(input.finishedAt).toISOString()],
    ...(input.notes ?? []).map((n): [string, string] => ['note', n]),
  ]
  return `<table class="facts">${facts.map(([k, v]) => `<tr><th>${escapeHtml(k)}</th><td>${escapeHtml(v)}</td></tr>`).join('')}</table>`
}

function figure(title: string, explain: string, chart: string, wide = false): string {
  return `<figure${wide ? ' class="wide"' : ''}><figcaption><span class="title">${escapeHtml(title)}</span>${explain ? `<span class="explain">${escapeHtml(explain)}</span>` : ''}</figcaption>${chart}</figure>`
}

function accuracyFigure(input: RunReportInput, trajectory: AccuracyAt[]): string {
  const pts: Point[] = trajectory.map((a) => ({ x: a.step, y: a.accuracy, ...(a.interval ? { lo: a.interval.lo, hi: a.interval.hi } : {}) }))
  const base = trajectory[0]?.step === 0 ? trajectory[0] : undefined
  const references: ReferenceLine[] = input.baseAccuracy
    ? [{ y: input.baseAccuracy.accuracy, label: `base model ${acc(input.baseAccuracy.accuracy)}` }]
    : base
      ? [{ y: base.accuracy, label: `base model (step 0) ${acc(base.accuracy)}` }]
      : []
  const kinds = new Set(trajectory.map((a) => a.intervalKind).filter((k) => k !== null))
  const bars = kinds.size ? `; bars: 95% intervals (${[...kinds].map((k) => (k === 'wilson' ? 'Wilson' : 'bootstrap over questions')).join(', ')})` : ''
  const dashed = input.baseAccuracy ? '; dashed: the base model from outside the run' : base ? "; dashed: the base model, this run's step-0 evaluation" : ''
  const explain = `${METRICS.heldOutAccuracy.explain}${bars}${dashed}`
  return figure('held-out accuracy', explain, lineChart({ id: 'heldOutAccuracy', points: pts, xLabel: 'step', yLabel: 'accuracy (fraction right)', yRange: [0, 1], references, width: 976 }), true)
}

function seriesFigure(rows: readonly MetricsRow[], s: ReportSeries): string {
  const i = info(s)
  return figure(s.title, i.explain, lineChart({ id: s.path, points: points(rows, s.path), xLabel: 'step', yLabel: i.unit, yRange: i.range }))
}

function glossary(method: string): string {
  const rows = explainSignals(method).map((s) => `<tr><th><code>${escapeHtml(s.name)}</code></th><td>${escapeHtml(s.meaning)}</td></tr>`).join('')
  return `<section><h2>What the progress line says</h2><table class="glossary">${rows}</table></section>`
}

const STYLE = `
:root{--ink:#1f2933;--muted:#616e7c;--line:#d9e2ec;--accent:#2563eb;--ref:#d97706;--bg:#f7f9fb}
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:var(--ink);background:var(--bg)}
main{max-width:1540px;margin:0 auto;padding:24px 28px 40px}header h1{font-size:22px;margin:0 0 2px}header p{margin:0;color:var(--muted)}
h2{font-size:15px;margin:0 0 8px}section{margin-top:22px}
.cards{display:grid;grid-template-columns:1.3fr 1fr 1.3fr;gap:16px}.card{background:#fff;border:1px solid var(--line);border-radius:10px;padding:14px 16px}
.card p{margin:4px 0}.card .big{font-size:26px;font-weight:650;margin:2px 0 6px;font-variant-numeric:tabular-nums}.card .verdict{font-weight:600}.card .base{color:var(--muted);font-size:13px}
.card .protocol{color:var(--muted);font-size:13px}.alert{background:#fff4e5;border:1px solid #f0b429;border-left:5px solid #d97706;border-radius:8px;padding:10px 14px;margin:14px 0 0;font-weight:600}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eef2f7;border-radius:4px;padding:1px 5px}code.path{word-break:break-all}
table{border-collapse:collapse}.facts th,.glossary th{text-align:left;font-weight:500;color:var(--muted);padding:3px 18px 3px 0;vertical-align:top;white-space:nowrap}.facts td,.glossary td{padding:3px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:16px}
figure{margin:0;background:#fff;border:1px solid var(--line);border-radius:10px;padding:12px 14px 6px}figcaption .title{display:block;font-weight:650}figcaption .explain{display:block;color:var(--muted);font-size:12.5px;min-height:2.9em}
svg.chart{width:100%;height:auto;display:block}svg .grid line{stroke:#edf1f5}svg .axis{stroke:#9aa5b1}svg text{font-size:11px;fill:var(--muted)}svg .axis-label{font-size:11.5px;fill:var(--ink)}
svg .series{fill:none;stroke:var(--accent);stroke-width:2.2;stroke-linejoin:round}svg .point{fill:var(--accent);stroke:#fff;stroke-width:1}svg .interval{stroke:var(--accent);stroke-width:1.4;opacity:.55}
svg .reference line{stroke:var(--ref);stroke-width:1.5;stroke-dasharray:5 4}svg .reference text{fill:var(--ref);font-size:11px;paint-order:stroke;stroke:#fff;stroke-width:3px}
.empty{color:var(--muted)}figure.wide{grid-column:span 2}pre.cmd{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eef2f7;border-radius:6px;padding:6px 8px;margin:2px 0 8px;white-space:pre-wrap;word-break:break-all}details pre{background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px;overflow:auto;font-size:12px}
@media (max-width:1000px){.cards{grid-template-columns:1fr}figure.wide{grid-column:auto}}`

/** The page. Each chart's svg carries data-metric, data-points and data-y-min/-max for tests and tools. */
export function renderRunReport(input: RunReportInput): string {
  const trajectory = accuracyTrajectory(input.rows, input.evaluations, input.heldOutSize ?? null)
  const byStep = new Map((input.evaluations ?? []).map((e) => [e.step, e]))
  const change = trajectory.length >= 2 ? accuracyChange(byStep.get(trajectory[0].step), byStep.get(finalEvaluation(input, trajectory)!.step)) : null
  const drawn = new Set(['heldOutAccuracy'])
  const methodSeries = input.series.filter((s) => !drawn.has(s.path) && (drawn.add(s.path), true))
  const training = TRAINING_SERIES.filter((s) => !drawn.has(s.path) && points(input.rows, s.path).length > 0)
  const title = input.title ?? `autodidact evolve --method ${input.method}`
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head>
<body><main>
<header><h1>${escapeHtml(title)}</h1><p>${escapeHtml(input.summary ?? input.method)} · world ${escapeHtml(input.world)} · model ${escapeHtml(input.model)}</p></header>
${(input.alerts ?? []).map((a) => `<p class="alert" data-alert>${escapeHtml(a)}</p>`).join('')}
${summaryCards(input, trajectory, change)}
<section>${factsTable(input)}</section>
<section><h2>Held-out accuracy and training</h2><div class="grid">${accuracyFigure(input, trajectory)}${training.map((s) => seriesFigure(input.rows, s)).join('')}</div></section>
<section><h2>Method signals</h2><div class="grid">${methodSeries.map((s) => seriesFigure(input.rows, s)).join('')}</div></section>
${glossary(input.method)}
<section><details><summary>configuration (resolved)</summary><pre>${escapeHtml(JSON.stringify(input.config, null, 2))}</pre></details></section>
</main></body></html>
`
}
