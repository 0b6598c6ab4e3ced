#!/usr/bin/env node
// Writes the math world's bundled problem set (src/worlds/math/data/*.jsonl) from its seeded
// generator (src/worlds/math/generate.ts). Needs `dist/` (npx tsc -p tsconfig.json). The files are
// a pure function of the generator: a test checks that the shipped ones match it.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const dist = new URL('../dist/', import.meta.url)
const { bundledMathSets, BUNDLED_MATH_DIR } = await import(new URL('worlds/math/index.js', dist))
mkdirSync(BUNDLED_MATH_DIR, { recursive: true })
for (const [name, rows] of Object.entries(bundledMathSets())) {
  const file = join(BUNDLED_MATH_DIR, `${name}.jsonl`)
  writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n')
  console.log(`wrote ${file} (${rows.length} problems)`)
}
