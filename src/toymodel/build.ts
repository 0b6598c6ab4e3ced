#!/usr/bin/env node
// `npm run build:toy-model`: trains the bundled toy model into models/arith-qwen3-tiny, then
// evaluates the saved folder on the held-out sets and writes eval.json beside it.
//
//   node dist/toymodel/build.js [--out DIR] [--steps N] [--seed S] [--threads T] [--lr X]
//                               [--recipe JSON] [--no-eval] [--size N] [--k K]
//   (--recipe: more ToyRecipeOptions as JSON, e.g. '{"batchSize":16}')
//   node dist/toymodel/build.js --eval-only [--out DIR] [--size N] [--k K]
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

import { writeJsonAtomic } from '../engine/hf/safetensors.js'
import { loadModel } from '../engine/model.js'
import { evaluateToyModel, formatToyEvalTable } from './eval.js'
import { buildToyModel, DEFAULT_TOY_MODEL_DIR, type ToyRecipeOptions } from './recipe.js'

async function main(): Promise<void> {
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
  const num = (v: string | undefined) => (v === undefined ? undefined : Number(v))
  const outDir = values.out ? resolve(values.out) : DEFAULT_TOY_MODEL_DIR
  const threads = num(values.threads)
  const log = (line: string) => console.log(line)
  const started = Date.now()
  if (!values['eval-only']) {
    const extra = values.recipe ? (JSON.parse(values.recipe) as Partial<ToyRecipeOptions>) : {}
    const result = await buildToyModel({ ...extra, outDir, steps: num(values.steps) ?? extra.steps, seed: num(values.seed) ?? extra.seed, lr: num(values.lr) ?? extra.lr, threads, log })
    result.model.dispose()
    log(`training: ${result.steps} steps, ${result.trainTokens} completion tokens, ${result.seconds.toFixed(0)} s`)
  }
  if (values['no-eval']) return
  const model = await loadModel(outDir, { threads })
  try {
    const report = await evaluateToyModel(model, { size: num(values.size), k: num(values.k), log })
    await writeJsonAtomic(join(outDir, 'eval.json'), report)
    console.log('\n' + formatToyEvalTable(report))
    console.log(`\nwrote ${join(outDir, 'eval.json')}; total ${((Date.now() - started) / 1000).toFixed(0)} s`)
  } finally {
    model.dispose()
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : e)
    process.exit(1)
  })
}
