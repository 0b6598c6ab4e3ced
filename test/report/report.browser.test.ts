// The run report in a real browser: headless Debian Chromium (driven by playwright-core) opens
// the page rendered from a real COSE run's data and every chart must be drawn with its data: one
// polyline and one marker per point, inside the plot, on the axis the data says (accuracy on
// 0–1), with titled axes, and nothing in the console. Skips with the reason where Chromium is
// missing; in CI (.ci/run installs it) its absence is a failure.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { metricAt, renderRunReport, TRAINING_SERIES } from '../../src/report/index.js'
// a plain .mjs helper, shared with scripts/report-demo.mjs
import { chromiumMissing, launchChromium } from '../../scripts/chromium.mjs'
import { loadFixture } from './fixture.js'

const missing: string | null = chromiumMissing()

if (missing && process.env.CI) it('CI has Chromium for the report test', () => expect.fail(missing))

interface ChartOnPage {
  id: string
  dataPoints: number
  polylines: number
  polylinePoints: number
  markers: number
  yMin: number
  yMax: number
  xLabel: string
  yLabel: string
  yTicks: string[]
  width: number
  markersInside: boolean
  firstMarkerY: number
  plot: { top: number; bottom: number }
}

describe.skipIf(missing !== null)(`the report in headless Chromium${missing ? ` (skipped: ${missing})` : ''}`, () => {
  const input = loadFixture()
  const dir = mkdtempSync(join(tmpdir(), 'ad-report-browser-'))
  let browser: { context: import('playwright-core').BrowserContext; close(): Promise<void> }
  const problems: string[] = []
  const requests: string[] = []
  let charts: ChartOnPage[] = []
  let summary = ''

  beforeAll(async () => {
    const page = join(dir, 'report.html')
    writeFileSync(page, renderRunReport(input))
    browser = await launchChromium()
    const tab = await browser.context.newPage()
    tab.on('console', (m) => void (m.type() === 'error' || m.type() === 'warning' ? problems.push(`${m.type()}: ${m.text()}`) : undefined))
    tab.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`))
    tab.on('request', (r) => void (r.url().startsWith('file:') ? undefined : requests.push(r.url())))
    await tab.setViewportSize({ width: 1440, height: 900 })
    await tab.goto(pathToFileURL(page).href, { waitUntil: 'load' })
    summary = await tab.locator('[data-card="accuracy"]').innerText()
    charts = await tab.$$eval('svg.chart', (svgs) =>
      svgs.map((svg) => {
        const axes = [...svg.querySelectorAll('line.axis')].map((l) => l.getBoundingClientRect())
        const plot = { top: Math.min(...axes.map((r) => r.top)), bottom: Math.max(...axes.map((r) => r.bottom)), left: Math.min(...axes.map((r) => r.left)), right: Math.max(...axes.map((r) => r.right)) }
        const markers = [...svg.querySelectorAll('circle.point')].map((c) => c.getBoundingClientRect())
        const centre = (r: DOMRect) => ({ x: r.left + r.width / 2, y: r.top + r.height / 2 })
        const polyline = svg.querySelector('polyline.series') as SVGPolylineElement | null
        return {
          id: svg.dataset.metric ?? '',
          dataPoints: Number(svg.dataset.points),
          polylines: svg.querySelectorAll('polyline.series').length,
          polylinePoints: polyline ? polyline.points.numberOfItems : 0,
          markers: markers.length,
          yMin: Number(svg.dataset.yMin),
          yMax: Number(svg.dataset.yMax),
          xLabel: svg.querySelector('.axis-label.x')?.textContent ?? '',
          yLabel: svg.querySelector('.axis-label.y')?.textContent ?? '',
          yTicks: [...svg.querySelectorAll('text.tick.y')].map((t) => t.textContent ?? ''),
          width: svg.getBoundingClientRect().width,
          markersInside: markers.every((r) => {
            const c = centre(r)
            return c.x >= plot.left - 1 && c.x <= plot.right + 1 && c.y >= plot.top - 1 && c.y <= plot.bottom + 1
          }),
          firstMarkerY: markers.length ? centre(markers[0]).y : NaN,
          plot: { top: plot.top, bottom: plot.bottom },
        }
      }),
    )
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it('renders every chart of the run, each with its data as a polyline and one marker per point, inside the plot', () => {
    const paths = new Set([...TRAINING_SERIES, ...input.series].map((s) => s.path).filter((p) => p !== 'heldOutAccuracy'))
    const expected = [...paths].map((id) => ({ id, points: input.rows.filter((r) => metricAt(r, id) !== null).length }))
    expect(charts.map((c) => c.id).sort()).toEqual(['heldOutAccuracy', ...expected.map((e) => e.id)].sort())
    for (const { id, points } of expected) {
      const c = charts.find((x) => x.id === id)!
      expect(c, id).toMatchObject({ dataPoints: points, polylines: 1, polylinePoints: points, markers: points, markersInside: true })
      expect(c.width, id).toBeGreaterThan(300) // laid out, not collapsed
    }
  })

  it('labels every axis, and draws accuracy on 0–1 where the data puts it', () => {
    for (const c of charts) {
      expect(c.xLabel, c.id).toBe('step')
      expect(c.yLabel.length, c.id).toBeGreaterThan(2)
      expect(c.yTicks.length, c.id).toBeGreaterThanOrEqual(3)
    }
    const accuracy = charts.find((c) => c.id === 'heldOutAccuracy')!
    const evaluated = input.rows.filter((r) => typeof r.heldOutAccuracy === 'number')
    expect(accuracy).toMatchObject({ yMin: 0, yMax: 1, polylinePoints: evaluated.length, markers: evaluated.length, yLabel: 'accuracy (fraction right)' })
    expect(accuracy.yTicks[0]).toBe('0.0')
    expect(accuracy.yTicks.at(-1)).toBe('1.0')
    // the first marker sits at its value on the 0–1 scale (bottom of the plot = 0, top = 1)
    const value = evaluated[0].heldOutAccuracy as number
    const expectedY = accuracy.plot.bottom - value * (accuracy.plot.bottom - accuracy.plot.top)
    expect(Math.abs(accuracy.firstMarkerY - expectedY)).toBeLessThan(1.5)
  })

  it('shows n and the interval in the summary, with no console errors and no network requests', () => {
    expect(summary).toMatch(/step 0: n = 50 questions, 95% CI \d\.\d{3}–\d\.\d{3}/)
    expect(summary).toMatch(/step 3: n = 50 questions, 95% CI/)
    expect(problems).toEqual([])
    expect(requests).toEqual([])
  })
})
