// A run folder's metrics.jsonl as rows, and rows without their wall-clock fields (so that a
// resumed run can be compared with a straight one).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

const WALL_CLOCK = ['seconds', 'tokensPerSecond', 'mfu', 'latencyMs', 'meanLatencyMs', 'maxLatencyMs']
export const untimed = (rows: unknown[]) => JSON.parse(JSON.stringify(rows, (k, v) => (WALL_CLOCK.includes(k) ? undefined : v)))
export const metrics = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>)
