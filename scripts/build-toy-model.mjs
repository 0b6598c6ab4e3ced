#!/usr/bin/env node
// Trains the bundled toy model into models/arith-qwen3-tiny (src/toymodel/recipe.ts), then
// evaluates the saved folder on the held-out sets and writes eval.json beside it. Needs `dist/`
// (npx tsc -p tsconfig.json).
//
//   node scripts/build-toy-model.mjs [--out DIR] [--steps N] [--seed S] [--threads T] [--lr X]
//                                    [--recipe JSON] [--no-eval] [--size N] [--k K]
//   (--recipe: more ToyRecipeOptions as JSON, e.g. '{"batchSize":16}')
//   node scripts/build-toy-model.mjs --eval-only [--out DIR] [--size N] [--k K]
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'

const dist = new URL('../dist/', import.meta.url)
const { loadModel } = await import(new URL('engine/model.js', dist))
const { writeJsonAtomic } = await import(new URL('util/atomic.js', dist))
const { BUNDLED_MODEL } = await import(new URL('toymodel/bundled.js', dist))
const { buildToyModel, evaluateToyModel, formatToyEvalTable } = await import(new URL('toymodel/index.js', dist))

const { values } = parseArgs({
  options: {
    out: { type: 'string' },
    steps: { type: 'string' },
    seed: { type: 'string' },
    threads: { type: 'string' },
    lr: { type: 'string' },
    'no-eval': { type: 'boolean' },
    'eval-only': { type: 'boolean' },
    size: { type: 'string' },
    k: { type: 'string' },
    recipe: { type: 'string' },
  },
})
const num = (v) => (v === undefined ? undefined : Number(v))
const outDir = values.out ? resolve(values.out) : BUNDLED_MODEL
const threads = num(values.threads)
const log = (line) => console.log(line)
const started = Date.now()
if (!values['eval-only']) {
  const extra = values.recipe ? JSON.parse(values.recipe) : {}
  const result = await buildToyModel({ ...extra, outDir, steps: num(values.steps) ?? extra.steps, seed: num(values.seed) ?? extra.seed, lr: num(values.lr) ?? extra.lr, threads, log })
  result.model.dispose()
  log(`training: ${result.steps} steps, ${result.trainTokens} completion tokens, ${result.seconds.toFixed(0)} s`)
}
if (!values['no-eval']) {
  const model = await loadModel(outDir, { threads })
  try {
    const report = await evaluateToyModel(model, { size: num(values.size), k: num(values.k), log })
    await writeJsonAtomic(join(outDir, 'eval.json'), report, 2)
    console.log('\n' + formatToyEvalTable(report))
    console.log(`\nwrote ${join(outDir, 'eval.json')}; total ${((Date.now() - started) / 1000).toFixed(0)} s`)
  } finally {
    model.dispose()
  }
}
