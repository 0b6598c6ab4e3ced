// A real COSE run's report inputs (3 steps on the bundled model), written by an earlier
// scripts/report-demo.mjs (before the driver wrote this report itself; test/cli covers that path):
// metrics.jsonl exactly as `autodidact evolve` wrote it, run.json with the rest (config, times,
// per-question evaluations re-derived from the checkpoints, the model card's base accuracy).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { MetricsRow, RunReportInput } from '../../src/report/index.js'

const FIXTURE = join(import.meta.dirname, 'fixtures', 'cose-3-steps')

export function loadFixture(): RunReportInput {
  const rows = readFileSync(join(FIXTURE, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as MetricsRow)
  return { ...(JSON.parse(readFileSync(join(FIXTURE, 'run.json'), 'utf8')) as Omit<RunReportInput, 'rows'>), rows }
}
