#!/usr/bin/env node
// Trains the bundled toy Judge into models/arith-judge-tiny (src/toymodel/judge.ts: the bundled
// policy's backbone with a score head, Bradley–Terry on noisy synthetic preferences). Needs
// `dist/` (npx tsc -p tsconfig.json).
//
//   node scripts/build-toy-judge.mjs [--out DIR] [--base MODEL_DIR] [--policy MODEL_DIR] [--critique-tokens N] [--score-head-only] [--steps N] [--lr X] [--noise P] [--seed S] [--threads T] [--eval-per-level N]
//   node scripts/build-toy-judge.mjs --measure [--out DIR] [--policy POLICY_DIR] [--critique-tokens N]   (held-out and on-policy pairwise accuracy, no training;
//     --base POLICY_DIR is the older spelling of --policy here)
// --policy: whose Solver samples make the on-policy pairs (default the backbone, --base). --critique-tokens N:
// a critiquing Judge, which writes its check of each response before its score head reads (J-Zero's judge.critiqueTokens).
// --score-head-only: Bradley–Terry trains the score head alone, the backbone frozen (J-Zero's judge.scoreHeadOnly).
import { resolve } from 'node:path'
import { parseArgs } from 'node:util'

const dist = new URL('../dist/', import.meta.url)
const { BUNDLED_JUDGE } = await import(new URL('toymodel/bundled.js', dist))
const { buildToyJudge, measureToyJudge, TOY_JUDGE_DEFAULTS } = await import(new URL('toymodel/judge.js', dist))

const { values } = parseArgs({
  options: {
    out: { type: 'string' },
    base: { type: 'string' },
    policy: { type: 'string' },
    'critique-tokens': { type: 'string' },
    'score-head-only': { type: 'boolean' },
    'on-policy-share': { type: 'string' },
    steps: { type: 'string' },
    lr: { type: 'string' },
    noise: { type: 'string' },
    seed: { type: 'string' },
    threads: { type: 'string' },
    'eval-per-level': { type: 'string' },
    measure: { type: 'boolean' },
  },
})
const num = (v) => (v === undefined ? undefined : Number(v))
const outDir = values.out ? resolve(values.out) : BUNDLED_JUDGE
if (values.measure) {
  const view = { critiqueTokens: num(values['critique-tokens']) ?? 0 }
  const policy = values.policy ?? values.base
  const perLevel = num(values['eval-per-level']) ?? TOY_JUDGE_DEFAULTS.evalPerLevel
  console.log(JSON.stringify(await measureToyJudge(outDir, { perLevel, threads: num(values.threads), policy: policy ? resolve(policy) : undefined, view }), null, 2))
} else {
  const result = await buildToyJudge({
    outDir,
    base: values.base ? resolve(values.base) : undefined,
    policy: values.policy ? resolve(values.policy) : undefined,
    critiqueTokens: num(values['critique-tokens']),
    scoreHeadOnly: values['score-head-only'],
    onPolicyShare: num(values['on-policy-share']),
    steps: num(values.steps),
    lr: num(values.lr),
    noise: num(values.noise),
    seed: num(values.seed),
    threads: num(values.threads),
    evalPerLevel: num(values['eval-per-level']),
    log: (l) => console.log(l),
  })
  console.log(`held-out pairwise accuracy ${result.before.accuracy.toFixed(3)} → ${result.after.accuracy.toFixed(3)} (plain split ${result.before.plainAccuracy.toFixed(3)} → ${result.after.plainAccuracy.toFixed(3)}); wrote ${outDir} in ${result.seconds.toFixed(0)} s`)
}
