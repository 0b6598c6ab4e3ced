// A self-contained HTML report of a run: the training curves as inline SVG line charts.
type Row = Record<string, unknown>

export interface Series {
  title: string
  /** Dotted path into a metrics line, e.g. "rewardSolver.mean". */
  path: string
}

function pick(row: Row, path: string): number | null {
  let v: unknown = row
  for (const key of path.split('.')) v = v && typeof v === 'object' ? (v as Row)[key] : undefined
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)
}

function chart(rows: Row[], s: Series): string {
  const pts = rows.map((r) => [pick(r, 'step'), pick(r, s.path)] as const).filter((p): p is [number, number] => p[0] !== null && p[1] !== null)
  const W = 420, H = 200, L = 48, B = 28, T = 12, R = 12
  if (!pts.length) return `<figure><figcaption>${escapeHtml(s.title)}</figcaption><p class="empty">no data</p></figure>`
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1])
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)]
  if (x0 === x1) x1 = x0 + 1
  if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5]
  const px = (x: number) => L + ((x - x0) / (x1 - x0)) * (W - L - R)
  const py = (y: number) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T)
  const line = pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(' ')
  const dots = pts.length <= 60 ? pts.map((p) => `<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="2.5"><title>step ${p[0]}: ${p[1].toPrecision(4)}</title></circle>`).join('') : ''
  const fmt = (v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3))
  const fmtStep = (v: number) => (Number.isInteger(v) ? String(v) : fmt(v))
  return `<figure><figcaption>${escapeHtml(s.title)}</figcaption><svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img">
<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" class="axis"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" class="axis"/>
<text x="${L - 6}" y="${T + 4}" text-anchor="end">${fmt(y1)}</text><text x="${L - 6}" y="${H - B}" text-anchor="end">${fmt(y0)}</text>
<text x="${L}" y="${H - 8}">${fmtStep(x0)}</text><text x="${W - R}" y="${H - 8}" text-anchor="end">step ${fmtStep(x1)}</text>
<polyline points="${line}"/>${dots}</svg></figure>`
}

export function renderReport(title: string, rows: Row[], series: Series[], summary: Record<string, string>): string {
  const facts = Object.entries(summary).map(([k, v]) => `<tr><th>${escapeHtml(k)}</th><td>${escapeHtml(v)}</td></tr>`).join('')
  return `<!doctype html><html><head><meta charset="utf-8"><title>${escapeHtml(title)}</title><style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}table{border-collapse:collapse;margin-bottom:16px}
th,td{text-align:left;padding:2px 12px 2px 0}th{color:#555;font-weight:normal}.grid{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:8px}figcaption{font-weight:600;margin-bottom:4px}
svg text{font-size:10px;fill:#555}.axis{stroke:#999}polyline{fill:none;stroke:#2563eb;stroke-width:2}circle{fill:#2563eb}.empty{color:#999}
</style></head><body><h1>${escapeHtml(title)}</h1><table>${facts}</table><div class="grid">${series.map((s) => chart(rows, s)).join('\n')}</div></body></html>\n`
}
