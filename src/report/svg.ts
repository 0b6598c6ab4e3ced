// Line charts as inline SVG: titled axes, "nice" ticks on honest scales (a fixed range such as
// accuracy's 0–1, otherwise one that includes zero), dashed reference lines, and interval
// whiskers. Pure string building; no script, no network.

export interface Point {
  x: number
  y: number
  /** A 95% interval of y, drawn as a whisker. */
  lo?: number
  hi?: number
}

export interface ReferenceLine {
  y: number
  label: string
}

export interface ChartSpec {
  /** Width in SVG units (default 480; the height stays 250). */
  width?: number
  /** Stable identifier (the metric's path), written as data-metric. */
  id: string
  points: readonly Point[]
  xLabel: string
  yLabel: string
  /** A fixed y range (e.g. [0, 1] for accuracy); otherwise the data's range widened to include 0. */
  yRange?: readonly [number, number]
  references?: readonly ReferenceLine[]
}

const H = 250
const M = { left: 62, right: 16, top: 14, bottom: 46 }

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!)
}

/** Ticks at 1, 2 or 5 × 10^k covering [lo, hi] with about `count` intervals; the range snapped to them. */
export function niceTicks(lo: number, hi: number, count = 5): { lo: number; hi: number; ticks: number[] } {
  if (!(hi > lo)) {
    const pad = lo === 0 ? 1 : Math.abs(lo) / 2
    return niceTicks(lo - pad, hi + pad, count)
  }
  const raw = (hi - lo) / count
  const magnitude = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw)!
  const round = (v: number) => Number(v.toPrecision(12)) // 3 × 1e-5 is 3e-5, not 2.9999999999999997e-5
  const first = Math.floor(lo / step + 1e-9)
  const last = Math.ceil(hi / step - 1e-9)
  const ticks: number[] = []
  for (let k = first; k <= last; k++) ticks.push(round(k * step))
  return { lo: ticks[0], hi: ticks.at(-1)!, ticks }
}

/** Labels of one axis's ticks in one style: decimals to the step's precision, or exponents for tiny or huge values. */
export function formatTicks(ticks: readonly number[]): string[] {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : Math.abs(ticks[0]) || 1
  const largest = Math.max(...ticks.map(Math.abs))
  if (largest >= 1e5 || (largest > 0 && largest < 1e-3)) {
    const digits = Math.max(0, Math.floor(Math.log10(largest)) - Math.floor(Math.log10(step)))
    return ticks.map((t) => (t === 0 ? '0' : t.toExponential(digits).replace('e+', 'e')))
  }
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9))
  return ticks.map((t) => t.toFixed(decimals))
}

function yDomain(spec: ChartSpec): { lo: number; hi: number; ticks: number[] } {
  if (spec.yRange) {
    const [lo, hi] = spec.yRange
    return { lo, hi, ticks: niceTicks(lo, hi, 5).ticks.filter((t) => t >= lo - 1e-12 && t <= hi + 1e-12) }
  }
  const ys = spec.points.flatMap((p) => [p.y, p.lo ?? p.y, p.hi ?? p.y]).concat((spec.references ?? []).map((r) => r.y))
  return niceTicks(Math.min(0, ...ys), Math.max(0, ...ys), 5)
}

function xDomain(points: readonly Point[]): { lo: number; hi: number; ticks: number[] } {
  const xs = points.map((p) => p.x)
  const d = niceTicks(Math.min(...xs), Math.max(...xs), 6)
  // steps are integers: no fractional ticks on a short run
  const ticks = d.ticks.filter((t) => Number.isInteger(t))
  return { lo: d.lo, hi: d.hi, ticks: ticks.length >= 2 ? ticks : d.ticks }
}

const f1 = (v: number) => v.toFixed(1)

/** One chart: axes with titles and ticks, grid, the series as a polyline with a marker per point. */
export function lineChart(spec: ChartSpec): string {
  if (!spec.points.length) return `<p class="empty" data-metric="${escapeHtml(spec.id)}">no data in this run</p>`
  const W = spec.width ?? 480
  const x = xDomain(spec.points)
  const y = yDomain(spec)
  const px = (v: number) => M.left + ((v - x.lo) / (x.hi - x.lo || 1)) * (W - M.left - M.right)
  const py = (v: number) => H - M.bottom - ((v - y.lo) / (y.hi - y.lo || 1)) * (H - M.top - M.bottom)
  const clampY = (v: number) => py(Math.min(y.hi, Math.max(y.lo, v)))
  const grid = y.ticks.map((t) => `<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${f1(py(t))}" y2="${f1(py(t))}"/>`).join('')
  const yLabels = formatTicks(y.ticks)
  const xLabels = formatTicks(x.ticks)
  const yTicks = y.ticks.map((t, i) => `<text class="tick y" x="${M.left - 6}" y="${f1(py(t) + 3.5)}" text-anchor="end">${yLabels[i]}</text>`).join('')
  const xTicks = x.ticks.map((t, i) => `<text class="tick x" x="${f1(px(t))}" y="${H - M.bottom + 16}" text-anchor="middle">${xLabels[i]}</text>`).join('')
  const references = (spec.references ?? [])
    .map((r) => `<g class="reference"><line x1="${M.left}" x2="${W - M.right}" y1="${f1(clampY(r.y))}" y2="${f1(clampY(r.y))}"/><text x="${W - M.right - 4}" y="${f1(clampY(r.y) + 13)}" text-anchor="end">${escapeHtml(r.label)}</text></g>`)
    .join('')
  const whiskers = spec.points
    .filter((p) => p.lo !== undefined && p.hi !== undefined)
    .map((p) => {
      const [cx, lo, hi] = [px(p.x), clampY(p.lo!), clampY(p.hi!)]
      const cap = (y: number) => `M${f1(cx - 3)},${f1(y)}H${f1(cx + 3)}`
      return `<path class="interval" d="M${f1(cx)},${f1(lo)}V${f1(hi)}${cap(lo)}${cap(hi)}"><title>step ${p.x}: 95% interval ${p.lo!.toFixed(3)}–${p.hi!.toFixed(3)}</title></path>`
    })
    .join('')
  const line = spec.points.map((p) => `${f1(px(p.x))},${f1(clampY(p.y))}`).join(' ')
  const markers = spec.points.map((p) => `<circle class="point" cx="${f1(px(p.x))}" cy="${f1(clampY(p.y))}" r="3"><title>step ${p.x}: ${Number(p.y.toPrecision(4))}</title></circle>`).join('')
  const plotBottom = H - M.bottom
  return `<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${escapeHtml(`${spec.yLabel} by ${spec.xLabel}`)}" data-metric="${escapeHtml(spec.id)}" data-points="${spec.points.length}" data-y-min="${y.lo}" data-y-max="${y.hi}">
<g class="grid">${grid}</g>
<line class="axis" x1="${M.left}" y1="${M.top}" x2="${M.left}" y2="${plotBottom}"/><line class="axis" x1="${M.left}" y1="${plotBottom}" x2="${W - M.right}" y2="${plotBottom}"/>
${yTicks}${xTicks}
<text class="axis-label x" x="${f1((M.left + W - M.right) / 2)}" y="${H - 8}" text-anchor="middle">${escapeHtml(spec.xLabel)}</text>
<text class="axis-label y" transform="translate(14 ${f1((M.top + plotBottom) / 2)}) rotate(-90)" text-anchor="middle">${escapeHtml(spec.yLabel)}</text>
${references}${whiskers}<polyline class="series" points="${line}"/>${markers}
</svg>`
}
