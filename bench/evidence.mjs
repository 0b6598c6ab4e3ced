// Issue 27's evidence: does each method move the bundled model? One command runs each method's
// headline comparison and its paper's ablation over several seeds, and writes
// bench/results/evidence.json (and the table it prints, for the README).
//   1. Tuning: per method, the headline arm at each candidate learning-rate scale (and step count,
//      when several sizes are named), on separate tuning seeds (100, 101, …: --tune-seeds N, default 1),
//      evaluated on the DEVELOPMENT split (held-out items [0, dev) of the level); the best candidate by
//      dev mean@4 pooled over the tuning seeds is kept. One seed's dev mean@4 on 100 items moves about
//      2 pp from seed to seed, as much as the gains it is asked to pick between.
//   2. Report: every arm × seed at the chosen candidate, evaluated once on the TEST split (held-out
//      items [400, 400 + test) of the level), which the tuning never saw; the base model on the same items.
//   --level N (default 3) sets the difficulty throughout: the splits, the tasks each method's
//   Proposer/Challenger is asked for (COSE N-1..N+1 as its toy preset does around 3). Level 2 is where
//   the bundled Solver's majority answer is right far more often than one sample (TTRL's and R-Zero's premise).
//   TTRL adapts to the split it is scored on, as TTRL and UID §5.1 do: its unlabeled test-time prompts
//   are that split's questions (dev cells adapt on dev, test cells on test), their answers read by
//   diagnostics only. The other methods never see the split's questions. The offline methods (dpo,
//   wsft) learn from verified responses to the world's labeled training problems (UID §4.3), never a
//   split's; their size counts epochs over that pool.
//   mean@4: 4 samples per question at T 0.6, top-p 0.95 (UID C.4's protocol, 4 samples); greedy
//   beside it. Δ in percentage points with a 95% paired prompt bootstrap (UID D.4): per prompt,
//   all seeds' samples of an arm against the base's (or another arm's).
// Each (method, arm, seed, scale, split) cell is saved under the cells folder as it finishes, and a
// rerun skips finished cells (resumable). Sizes: --quick (a smoke test), --reduced (default: minutes
// on 2 quiet cores), --full (the presets' step counts), --long (four times those);
// several size flags (--full --long) tune each method over those sizes' step counts as well.
// Usage: npm run build && nice node bench/evidence.mjs [--quick|--reduced|--full|--long ...] [--device cuda]
//          [--level 2..5] [--methods cose,ttrl,rzero,jzero,grpo,dpo,wsft] [--seeds 1,2,3] [--tune 1,3] [--out FILE]
//          [--tune-seeds N] [--items DEV,TEST] [--tune-only] [--table] [--note TEXT] [--model DIR] [--config JSON]
//          [--on-collapse warn|stop|rollback] [--collapse-rule falls] [--arms A,B (with one method: only those arms, the headline among them)]
//   --items DEV,TEST sets the split sizes (dev items [0, DEV), DEV ≤ 400; test items [400, 400 + TEST),
//   TEST ≤ 500) in place of the size's 100 and 200; its cells and result file are tagged -itemsDEVxTEST.
//   --model DIR runs on another base model folder (a retrained toy model, say); its cells and result
//   file are named with the folder's name, so they never mix with the bundled model's.
//   --config JSON overrides a method's preset, by method ('{"cose":{"judge":{"maxTokens":200}}}'); the
//   cells and result file carry a hash of it.
//   --tune-only runs the development split's cells alone (explore settings without a look at the test split).
//   --on-collapse warn|stop|rollback runs every cell as `evolve --on-collapse` would: through the run
//   driver, its held-out probe (items [0, 100) of the level: inside the dev split at its default size
//   and larger, never the test split) evaluated 8 times over the run and checkpointed there, the collapse guard watching. The
//   cell records whether the guard fired and where, and with rollback is evaluated on the best probed
//   checkpoint. Only the self-rewarding methods (cose, ttrl, rzero, jzero, grpo) are guarded; the cells
//   and result file are tagged -guard-<action>. --collapse-rule falls: the guard fires on the held-out
//   fall alone, whatever the reward does (tagged -guard-<action>-falls).
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { basename, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { DEFAULT_MODEL } from '../dist/cli/evolve.js'
import { COLLAPSE_ACTIONS, COLLAPSE_RULES, DEFAULT_COLLAPSE_RULE, DEFAULT_COLLAPSE_WINDOW, TRAINING_REWARD } from '../dist/methods/common/collapse.js'
import { drive, runCollapseChecks } from '../dist/methods/common/driver.js'
import { evaluateBenchmarks, greedyProtocol } from '../dist/methods/common/evaluation.js'
import { readMetrics } from '../dist/methods/common/run-folder.js'
import { resolveCoseConfig } from '../dist/methods/cose/config.js'
import { CoseRun } from '../dist/methods/cose/loop.js'
import { resolveGrpoConfig } from '../dist/methods/grpo/config.js'
import { GrpoRun } from '../dist/methods/grpo/loop.js'
import { resolveJzeroConfig } from '../dist/methods/jzero/config.js'
import { JzeroRun } from '../dist/methods/jzero/loop.js'
import { DPO_TOY_PRESET, resolveOfflineConfig, TOY_PRESET as WSFT_TOY_PRESET } from '../dist/methods/offline/config.js'
import { OfflineRun } from '../dist/methods/offline/loop.js'
import { resolveRzeroConfig } from '../dist/methods/rzero/config.js'
import { RzeroRun } from '../dist/methods/rzero/loop.js'
import { resolveTtrlConfig } from '../dist/methods/ttrl/config.js'
import { TtrlRun } from '../dist/methods/ttrl/loop.js'
import { pairedPromptBootstrap } from '../dist/stats/index.js'
import { toyJudge } from '../dist/toymodel/bundled.js'
import { arithWorld, DEFAULT_LEVEL, UNLABELED_OFFSET } from '../dist/worlds/arith/index.js'

const here = fileURLToPath(new URL('.', import.meta.url))
/** UID C.4's sampled protocol with 4 samples (mean@4), as the TTRL toy preset evaluates. */
const MEAN4 = { samples: 4, temperature: 0.6, topP: 0.95, maxTokens: 64, seed: 7 }
const TEST_OFFSET = 400
/** The splits end where the world's unlabeled prompts (evolve's TTRL) begin in each level's reserve. */
const SPLITS_END = UNLABELED_OFFSET
const TUNING_SEED = 100
/** A guarded cell's held-out probe: the level's first PROBE_ITEMS items (the dev split's at --items 100 and more; always below TEST_OFFSET), evaluated PROBES times over the run. */
const PROBE_ITEMS = 100
const PROBES = 8

const FULL = {
  label: 'full size: the toy presets\' step counts',
  // dpo and wsft count epochs over their pool (their toy presets' 3 and 2), the others optimizer steps or iterations
  steps: { cose: 20, ttrl: 16, rzero: 20, jzero: 8, grpo: 30, dpo: 3, wsft: 2 },
  dev: 100,
  test: 200,
  tune: [0.1, 0.3, 1, 3],
  over: {},
}

/** Run sizes: step counts per method, split sizes, learning-rate scales tried on the dev split, per-method config overrides. */
export const SIZES = {
  quick: {
    label: 'quick smoke size: 1 step per method, tiny batches; says nothing about the methods',
    steps: { cose: 1, ttrl: 1, rzero: 2, jzero: 1, grpo: 1, dpo: 1, wsft: 1 },
    dev: 8,
    test: 8,
    tune: [1],
    over: {
      cose: { proposer: { count: 4 }, solver: { questions: 2, n: 2 } },
      ttrl: { prompts: { offset: 0, size: 4 }, promptsPerStep: 4, rollout: { n: 3 } },
      rzero: { phases: { challengerSteps: 1, solverSteps: 1 }, challenger: { batch: 4 }, ensemble: { k: 2, second: { model: 'none', temperature: 0.7, healSteps: 0 } }, solver: { candidates: 4, questions: 2, n: 2 } },
      jzero: { challenger: { steps: 1, batch: 3, solverSamples: 2 }, selection: { pool: 4, keep: 2, samples: 2 }, solver: { steps: 1, batch: 2, miniBatch: 2, rollouts: 2 }, judge: { steps: 1, batch: 2, tasks: 3 }, eval: { judgePairs: 3 } },
      grpo: { questions: { perStep: 2 }, rollout: { n: 2 } },
      dpo: { pool: { prompts: 16, calibrationPrompts: 4, k: 8 }, pairs: { minGap: 0 }, warmStart: { batchSize: 8 }, train: { batchSize: 4 } },
      wsft: { pool: { prompts: 16, calibrationPrompts: 4, k: 8 }, train: { batchSize: 4 } },
    },
  },
  reduced: {
    label: 'reduced size (2 CPU cores shared with other jobs): half the toy presets\' step counts (J-Zero 2 of 8 iterations), 2 lr scales tuned',
    steps: { cose: 10, ttrl: 8, rzero: 10, jzero: 2, grpo: 15, dpo: 1, wsft: 1 },
    dev: 50,
    test: 100,
    tune: [1, 3],
    over: {},
  },
  full: FULL,
  // the same splits and scales as full, so the two can be tuned against each other on one dev split
  long: { ...FULL, label: 'long size: four times the toy presets\' step counts', steps: Object.fromEntries(Object.entries(FULL.steps).map(([m, n]) => [m, 4 * n])) },
}

const lrOf = (path) => (c) => path.reduce((o, k) => o[k], c)
const withLr = (path, lr) => path.reduceRight((inner, k) => ({ [k]: inner }), lr)
/** What a policy's evaluation needs, per method: how to start it, which policy is its Solver, where its learning rate lives, its arms and its ablation rows. */
export const METHOD_TABLE = {
  cose: {
    command: 'autodidact evolve --method cose',
    resolve: resolveCoseConfig,
    start: (base, c, world, o) => CoseRun.start(base, c, world, o),
    solver: (run) => run.solver,
    lr: ['ppo', 'lr'],
    // the toy preset proposes levels 2-4 around the default 3: the same band around any level
    atLevel: (level) => ({ proposer: { levels: [level - 1, level, level + 1].filter((l) => l >= 1 && l <= 5) } }),
    // verifier Judge: a control outside the paper (as TTRL's reference-label): the same loop with every p(q, a) right, so the gap to full is what the Judge's errors cost
    // (judge.model null: a run whose --config names a frozen Judge model keeps this arm the verifier's)
    arms: { full: {}, 'w/o weighting': { switches: { weighting: false, priority: 'cose' } }, 'w/o priority': { switches: { weighting: true, priority: 'uniform' } }, 'verifier Judge': { switches: { judge: 'verifier' }, judge: { model: null } } },
    headline: 'full',
    ablations: [['full', 'w/o weighting'], ['full', 'w/o priority'], ['w/o priority', 'w/o weighting'], ['verifier Judge', 'full']],
    paper: 'COSE Table 5: full > w/o priority > w/o weighting',
    diagnostics: ['diagnostics.validatorAcceptPrecision', 'diagnostics.proposalGoodRate', 'diagnostics.judgeVerifierAgreement', 'diagnostics.solveRateError', 'diagnostics.solveRateCorrelation', 'confidenceJudge.std', 'confidenceValidator.std', 'rewardSolver.mean'],
  },
  ttrl: {
    command: 'autodidact evolve --method ttrl',
    resolve: resolveTtrlConfig,
    start: (base, c, world, o) => TtrlRun.start(base, c, world, o),
    solver: (run) => run.model,
    lr: ['ppo', 'lr'],
    atLevel: () => ({}), // its prompts are the split's questions, of the split's level
    // the guard's probe is the dev items alone, not the adapted-to prompts (a test cell's are the test split)
    probe: { eval: { adaptation: false } },
    // reference-label: the control with true labels (not a paper arm): what the same prompts, steps and updates reach when no label is wrong
    arms: { 'uid-conj': { reward: { arm: 'uid-conj' } }, ttrl: { reward: { arm: 'ttrl' } }, 'permuted-uid': { reward: { arm: 'permuted-uid' } }, 'reference-label': { reward: { arm: 'reference-label' } } },
    headline: 'uid-conj',
    adaptsToSplit: true,
    ablations: [['uid-conj', 'ttrl'], ['uid-conj', 'permuted-uid'], ['reference-label', 'ttrl']],
    paper: 'UID §5.1: UID-Conj > TTRL, and > its permutation control',
    diagnostics: ['labelAccuracy', 'rolloutAccuracy', 'agreeRate', 'kl'],
  },
  rzero: {
    command: 'autodidact evolve --method rzero',
    resolve: resolveRzeroConfig,
    start: (base, c, world, o) => RzeroRun.start(base, c, world, o),
    solver: (run) => run.solver,
    lr: ['grpo', 'lr'],
    atLevel: (level) => ({ challenger: { levels: [level] } }),
    arms: { '+disagreement': { reward: { beta: 1 } }, 'R-Zero': { reward: { beta: 0 } } },
    headline: '+disagreement',
    ablations: [['+disagreement', 'R-Zero']],
    paper: 'DIS: R-Zero + disagreement > R-Zero',
    diagnostics: ['solverTrueAccuracy.mean', 'disagreementAccuracyCorrelation', 'pHatAccuracyCorrelation', 'pseudoLabelAccuracy', 'rolloutAccuracy'],
  },
  jzero: {
    command: 'autodidact evolve --method jzero',
    resolve: resolveJzeroConfig,
    start: (base, c, world, o) => JzeroRun.start(base, c.judge.model ?? toyJudge(base), c, world, o),
    solver: (run) => run.solver,
    lr: ['solver', 'lr'],
    atLevel: (level) => ({ challenger: { level } }),
    // verifier Judge: a control outside the paper (as COSE's): the same loop with every reward right, so the gap to J-Zero is what the Judge's errors cost
    // verifier Judge, p wrong: the same control wrong on a fixed share p of inputs (pairwise accuracy 1 − p), how right the Judge must be
    arms: {
      'J-Zero': {},
      'frozen Judge': { switches: { trainJudge: false } },
      'verifier Judge': { switches: { judge: 'verifier', trainJudge: false } },
      'verifier Judge, 15% wrong': { switches: { judge: 'verifier', trainJudge: false }, judge: { verifierFlip: 0.15 } },
      'verifier Judge, 30% wrong': { switches: { judge: 'verifier', trainJudge: false }, judge: { verifierFlip: 0.3 } },
    },
    headline: 'J-Zero',
    ablations: [['J-Zero', 'frozen Judge'], ['verifier Judge', 'J-Zero']],
    paper: 'JZ Table 3: a co-evolving Judge beats a frozen one (Solver and Judge)',
    diagnostics: ['judgeAccuracy', 'solver.judgePairAccuracy', 'solver.verifierAccuracy', 'solver.reward.mean'],
  },
  grpo: {
    command: 'autodidact evolve --method grpo',
    resolve: resolveGrpoConfig,
    start: (base, c, world, o) => GrpoRun.start(base, c, world, o),
    solver: (run) => run.model,
    lr: ['ppo', 'lr'],
    atLevel: (level) => ({ questions: { level } }),
    arms: { 'verifier GRPO': {} },
    headline: 'verifier GRPO',
    ablations: [],
    paper: 'positive control: the verifier as reward (not self-evolution)',
    diagnostics: ['reward.mean'],
  },
  dpo: offlineMethod('dpo', DPO_TOY_PRESET, {
    // random: UID's control, pairs drawn at random from the same verified responses and warm start;
    // right-vs-wrong: a control outside the paper (as TTRL's reference-label), a verified response over a wrong one on the same prompts and warm start;
    // right-vs-wrong-all: the same on every pool prompt with both (the data a verifier gives DPO)
    arms: { 'uid-conj': { arm: 'uid-conj' }, sc: { arm: 'sc' }, random: { arm: 'random' }, 'right-vs-wrong': { arm: 'right-vs-wrong' }, 'right-vs-wrong-all': { arm: 'right-vs-wrong-all' } },
    headline: 'uid-conj',
    ablations: [['uid-conj', 'random'], ['sc', 'random'], ['right-vs-wrong', 'uid-conj'], ['right-vs-wrong-all', 'uid-conj']],
    paper: 'UID Table 6: DPO on UID-Conj max-vs-min pairs > random pairs (one pool, one warm start)',
    diagnostics: ['loss', 'train.objective.rewardMargin', 'train.objective.accuracy', 'train.objective.rewardChosen', 'train.objective.rewardRejected', 'train.objective.chosenNll', 'train.objective.chosenBelowReference'],
  }),
  wsft: offlineMethod('wsft', WSFT_TOY_PRESET, {
    arms: { 'uid-conj': { arm: 'uid-conj' }, sc: { arm: 'sc' }, uniform: { arm: 'uniform' } },
    headline: 'uid-conj',
    ablations: [['uid-conj', 'uniform'], ['sc', 'uniform']],
    paper: 'UID Table 6: weighted SFT w = m·softmax(2q) on UID-Conj scores > uniform weights (one pool)',
    diagnostics: ['loss', 'train.objective.nll', 'train.objective.meanWeight'],
  }),
}

/**
 * An offline method (UID §4.3): a pool of verified responses to the world's labeled training
 * problems, sampled and scored once by the frozen base and shared by every arm and seed
 * (with DPO's warm start), in the cells folder; its size counts epochs over the arm's data.
 */
function offlineMethod(name, preset, spec) {
  return {
    command: `autodidact evolve --method ${name}`,
    resolve: (over) => resolveOfflineConfig(over, preset),
    start: (base, c, world, o) => OfflineRun.start(base, c, world, { ...o, outDir: o.cellsDir }),
    solver: (run) => run.model,
    lr: ['train', 'lr'],
    // the toy preset's level-3 pool at every evidence level: level 2's verified traces are one string per problem, which gives DPO no pair and weighted SFT nothing to weigh
    atLevel: () => ({}),
    stepsOf: (epochs) => ({ steps: 0, epochs }),
    stepUnit: 'epochs',
    ...spec,
  }
}

/** The value at a dotted path of a record (undefined when absent). */
function at(record, path) {
  return path.split('.').reduce((o, k) => (o === undefined || o === null ? undefined : o[k]), record)
}

/** Mean over the steps of each diagnostic path (finite values only; null when none), and its first and last value. */
function summarizeDiagnostics(records, paths) {
  const out = {}
  for (const p of paths) {
    const xs = records.map((r) => at(r, p)).filter((x) => typeof x === 'number' && Number.isFinite(x))
    out[p] = xs.length ? { mean: xs.reduce((a, b) => a + b, 0) / xs.length, first: xs[0], last: xs.at(-1), steps: xs.length } : null
  }
  return out
}

/** A level's development and test splits: disjoint item ranges of its reserved held-out stream, below SPLITS_END. */
export function splits(world, size, level = DEFAULT_LEVEL) {
  const stream = world.data.benchmarks.find((b) => b.name === `L${level}`)
  if (!stream) throw new RangeError(`the world has no benchmark L${level}`)
  if (TEST_OFFSET + size.test > SPLITS_END || size.dev > TEST_OFFSET) throw new RangeError(`the dev and test splits must stay disjoint and below item ${SPLITS_END}`)
  return { dev: { name: `L${level}-dev`, problems: stream.problems.slice(0, size.dev) }, test: { name: `L${level}-test`, problems: stream.problems.slice(TEST_OFFSET, TEST_OFFSET + size.test) } }
}

/** Per item: mean@4 samples and the greedy answer, 0/1 each. */
export async function evaluate(policy, world, benchmark) {
  const solver = { prompt: (q) => world.solve.solverPrompt(q), verifier: world.verifier }
  const sampled = await evaluateBenchmarks(policy, [benchmark], solver, MEAN4, 0)
  const greedy = await evaluateBenchmarks(policy, [benchmark], solver, greedyProtocol(MEAN4.maxTokens), 0)
  return { mean4: sampled.benchmarks[0].items.map((it) => it.correct), greedy: greedy.benchmarks[0].items.map((it) => it.correct[0]) }
}

const accuracy = (perPrompt) => perPrompt.reduce((a, xs) => a + xs.reduce((s, x) => s + x, 0) / xs.length, 0) / perPrompt.length
/** A cell's mean@4 and greedy accuracy (each prompt's greedy answer a pool of one). */
const accuracies = (c) => ({ mean4: accuracy(c.mean4), greedy: accuracy(c.greedy.map((x) => [x])) })
/** The base's answers once per seed: the shape of an arm's seeds pooled, to compare prompt by prompt. */
export const baseAsSeeds = (base, seeds) => ({ mean4: base.mean4, greedy: base.greedy.map((x) => Array(seeds).fill(x)) })

/** Writes JSON atomically (a temporary file renamed into place): an interrupted run leaves no half-written cell. */
function writeJson(file, value) {
  writeFileSync(`${file}.tmp`, JSON.stringify(value, null, 2))
  renameSync(`${file}.tmp`, file)
}

/** One cell, or its saved result when a previous run finished it. */
/** A trained cell's key: method, arm, seed, learning-rate scale and split. A method that adapts to its split names it so (TTRL's earlier cells, adapted to other prompts, never mix in). */
export function cellKey(name, arm, seed, scale, split) {
  return `${name}|${arm}|seed ${seed}|lr×${scale}|${METHOD_TABLE[name].adaptsToSplit ? `adapted|${split}` : split}`
}

/** Where a cell's result is saved in a cells folder. */
export function cellFile(cellsDir, key) {
  return join(cellsDir, `${key.replace(/[^A-Za-z0-9.+-]+/g, '_')}.json`)
}

async function cell(o, key, compute) {
  const file = cellFile(o.cellsDir, key)
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8'))
  const started = Date.now()
  const value = { key, ...(await compute()), seconds: (Date.now() - started) / 1000, load: loadavg()[0] }
  writeJson(file, value)
  const acc = accuracies(value)
  const g = value.guard
  const guarded = g ? `, ${g.fired ? `collapse at step ${g.firedAt}${g.rolledBackTo !== null ? `, rolled back to step ${g.rolledBackTo}` : ''}` : 'no collapse'}` : ''
  o.log(`${key}: mean@4 ${acc.mean4.toFixed(3)} greedy ${acc.greedy.toFixed(3)}${guarded} (${value.seconds.toFixed(0)} s, load ${value.load.toFixed(1)})`)
  return value
}

/** A method's overrides of its preset in this run: the size's, then --config's. */
function overridesOf(o, name) {
  return deepMerge(o.size.over[name] ?? {}, o.config?.[name] ?? {})
}

/** The world with `benchmark`'s questions as its unlabeled test-time prompts (TTRL §3, UID §5.1: adapt on the test set, labels unseen). */
function adaptingTo(world, benchmark) {
  return { ...world, data: { ...world.data, unlabeledPrompts: () => benchmark.problems } }
}

/** Trains one arm of a method for its steps and evaluates its Solver on `benchmark`. */
async function trainAndEvaluate(o, name, arm, seed, scale, benchmark) {
  const m = METHOD_TABLE[name]
  const preset = m.resolve(overridesOf(o, name))
  const adapting = m.adaptsToSplit ? { prompts: { offset: 0, size: benchmark.problems.length } } : {}
  const length = (m.stepsOf ?? ((steps) => ({ steps })))(o.size.steps[name])
  const settings = [m.atLevel(o.level), overridesOf(o, name), adapting, m.arms[arm], { ...length, seed, ...withLr(m.lr, lrOf(m.lr)(preset) * scale) }]
  let config = m.resolve(settings.reduce(deepMerge))
  if (o.guard) config = m.resolve(deepMerge(config, probeSettings(m, config.steps)))
  const run = await m.start(o.base, config, m.adaptsToSplit ? adaptingTo(o.world, benchmark) : o.world, { openPolicy: o.openPolicy, threads: o.threads, cellsDir: o.cellsDir })
  try {
    if (o.guard) return { ...(await guardedRun(o, m, name, run, join(o.cellsDir, 'runs', `${name}-${arm}-seed${seed}-lr${scale}-${benchmark.name}`.replace(/[^A-Za-z0-9.+-]+/g, '_')), benchmark)), lr: lrOf(m.lr)(config) }
    const records = []
    // the run's own step count: an offline run resolves its epochs into steps once its pool is known
    for (let s = 0; s < run.config.steps; s++) records.push(await run.runStep())
    return { ...(await evaluate(m.solver(run), o.world, benchmark)), lr: lrOf(m.lr)(config), diagnostics: summarizeDiagnostics(records, m.diagnostics) }
  } finally {
    run.dispose()
  }
}

/** A guarded run's evaluations and checkpoints: the probe items, PROBES times over `steps`. */
function probeSettings(m, steps) {
  const every = Math.max(1, Math.round(steps / PROBES))
  return deepMerge({ eval: { every, size: PROBE_ITEMS, benchmarks: [] }, checkpointEvery: every }, m.probe ?? {})
}

/**
 * A cell as `evolve --on-collapse` runs it: the driver evaluates the probe, checkpoints and applies
 * the collapse guard; the cell is evaluated on the model the run ends with (with rollback, the best
 * probed checkpoint when the guard fired). The run folder goes once the cell is saved.
 */
async function guardedRun(o, m, name, run, dir, benchmark) {
  rmSync(dir, { recursive: true, force: true }) // an interrupted cell starts over
  const r = await drive(run, { outDir: dir, method: name, totalSteps: run.config.steps, evalEvery: run.config.eval.every, checkpointEvery: run.config.checkpointEvery, series: [], describe: () => '', onCollapse: o.guard, collapseRule: o.collapseRule, keep: 1 })
  const rows = (await readMetrics(join(dir, 'metrics.jsonl'))).rows
  let final = null
  if (r.rolledBackTo !== null) final = await o.openPolicy(r.trainedModel.kind === 'model' ? { model: r.trainedModel.dir, threads: o.threads } : { model: o.base, adapter: r.trainedModel.dir, threads: o.threads })
  try {
    const guard = {
      action: o.guard,
      rule: o.collapseRule,
      fired: r.collapse !== null,
      firedAt: r.collapse?.to ?? null,
      message: r.collapse?.message ?? null,
      stepsRun: run.step,
      rolledBackTo: r.rolledBackTo,
      probe: rows.filter((x) => typeof x.heldOutAccuracy === 'number').map((x) => ({ step: x.step, accuracy: x.heldOutAccuracy })),
      // every window the guard judged: the held-out drop and the reward's slope, each with its standard error
      checks: (await runCollapseChecks(dir, rows, name, DEFAULT_COLLAPSE_WINDOW, o.collapseRule)).map(({ message, ...check }) => check),
    }
    // step 0's row is the base model's probe alone
    return { ...(await evaluate(final ?? m.solver(run), o.world, benchmark)), diagnostics: summarizeDiagnostics(rows.filter((x) => x.step > 0), m.diagnostics), guard }
  } finally {
    final?.dispose()
    rmSync(dir, { recursive: true, force: true })
  }
}

function deepMerge(a, b) {
  if (typeof a !== 'object' || a === null || Array.isArray(a) || typeof b !== 'object' || b === null || Array.isArray(b)) return b
  const out = { ...a }
  for (const [k, v] of Object.entries(b)) out[k] = k in a ? deepMerge(a[k], v) : v
  return out
}

/** The base model on a split. */
async function baseCell(o, split, benchmark) {
  return cell(o, `base|${split}`, async () => {
    const policy = await o.openPolicy({ model: o.base, threads: o.threads })
    try {
      return await evaluate(policy, o.world, benchmark)
    } finally {
      policy.dispose()
    }
  })
}

/** A − B in pp with its 95% paired prompt bootstrap interval, on mean@4 and greedy. */
export function compare(a, b) {
  const interval = (x, y) => {
    const r = pairedPromptBootstrap([{ name: 'test', a: x, b: y }], { replicates: 10_000, seed: 1 }).macro
    return { delta: r.estimate, ci95: [r.lo, r.hi] }
  }
  const m = interval(a.mean4, b.mean4)
  const g = interval(a.greedy, b.greedy)
  return { mean4Delta: m.delta, ci95: m.ci95, greedyDelta: g.delta, greedyCi95: g.ci95 }
}

/** Pools seeds: per prompt, every seed's samples (mean@4) and every seed's greedy answer. */
export function pool(cells) {
  return { mean4: cells[0].mean4.map((_, q) => cells.flatMap((c) => c.mean4[q])), greedy: cells[0].greedy.map((_, q) => cells.map((c) => c.greedy[q])) }
}

/**
 * One method: tuning on dev over every stage's (size's) step count × learning-rate scale, then every
 * arm × seed on test at the chosen one; the headline row and the ablation rows. `o.stages` holds one
 * run state per size (its steps, scales, overrides and cells folder).
 */
async function runMethod(o, name, sp) {
  const m = METHOD_TABLE[name]
  const devBase = await baseCell(o.stages[0], 'dev', sp.dev)
  const tuning = []
  for (const st of o.stages) {
    for (const scale of st.size.tune) {
      const cells = []
      for (const seed of o.tuningSeeds) cells.push(await cell(st, cellKey(name, m.headline, seed, scale, 'dev'), () => trainAndEvaluate(st, name, m.headline, seed, scale, sp.dev)))
      const pooled = pool(cells)
      // diagnostics: the first tuning seed's run
      tuning.push({ size: st.sizeName, steps: st.size.steps[name], lrScale: scale, lr: cells[0].lr, devMean4: accuracy(pooled.mean4), devMean4Delta: 100 * (accuracy(pooled.mean4) - accuracy(devBase.mean4)), devGreedy: accuracy(pooled.greedy), diagnostics: cells[0].diagnostics })
    }
  }
  const chosen = tuning.reduce((best, t) => (t.devMean4 > best.devMean4 ? t : best), tuning[0])
  const tuningRecord = { split: 'dev', devItems: sp.dev.problems.length, seeds: o.tuningSeeds, base: accuracies(devBase), candidates: tuning, chosenSize: chosen.size, chosenSteps: chosen.steps, chosenLrScale: chosen.lrScale, chosenLr: chosen.lr }
  // --tune-only: the development split alone, so settings can be explored without a look at the test split
  if (o.tuneOnly) return { command: m.command, ...(m.stepUnit ? { stepUnit: m.stepUnit } : {}), tuning: tuningRecord }
  o = o.stages.find((st) => st.sizeName === chosen.size)
  const base = await baseCell(o, 'test', sp.test)
  const arms = {}
  for (const arm of o.arms ?? Object.keys(m.arms)) {
    const cells = []
    for (const seed of o.seeds) cells.push(await cell(o, cellKey(name, arm, seed, chosen.lrScale, 'test'), () => trainAndEvaluate(o, name, arm, seed, chosen.lrScale, sp.test)))
    const pooled = pool(cells)
    arms[arm] = {
      mean4: accuracy(pooled.mean4),
      greedy: accuracy(pooled.greedy),
      perSeed: cells.map((c) => accuracies(c)),
      vsBase: compare(pooled, baseAsSeeds(base, o.seeds.length)),
      diagnostics: Object.fromEntries(m.diagnostics.map((p) => [p, meanOverSeeds(cells, p)])),
      ...(o.guard ? { guard: { fired: cells.filter((c) => c.guard.fired).length, rolledBack: cells.filter((c) => c.guard.rolledBackTo !== null).length, firedAt: cells.map((c) => c.guard.firedAt) } } : {}),
      pooled,
    }
  }
  const head = arms[m.headline]
  const ablations = m.ablations.filter(([a, b]) => arms[a] && arms[b]).map(([a, b]) => ({ name: `${a} vs ${b}`, ...compare(arms[a].pooled, arms[b].pooled) }))
  for (const a of Object.values(arms)) delete a.pooled
  return {
    command: m.command,
    headline: m.headline,
    ...head.vsBase,
    seeds: o.seeds.length,
    testItems: sp.test.problems.length,
    base: accuracies(base),
    size: chosen.size,
    steps: chosen.steps,
    ...(m.stepUnit ? { stepUnit: m.stepUnit } : {}),
    tuning: tuningRecord,
    arms,
    ablations,
    ...(m.adaptsToSplit ? { adaptedToTestSplit: true } : {}),
    paper: m.paper,
  }
}

function meanOverSeeds(cells, path) {
  const xs = cells.map((c) => c.diagnostics[path]?.mean).filter((x) => typeof x === 'number')
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null
}

/** The default level keeps its historical file and folder names (its saved cells still resume); another level is tagged -L<N>. */
const levelTag = (level) => (level === DEFAULT_LEVEL ? '' : `-L${level}`)

/** Where a run's result goes unless --out says: evidence.json for the reduced size at the default level, else tagged -<sizes>, -L<N>, -tuning (--tune-only). */
/**
 * '' for the bundled model, else `-<folder name>-w<digest of its weights>`: what names another base's
 * cells and result file. The digest keeps two models in folders of the same name (two fine-tunes each
 * kept as DIR/nines) from sharing cells.
 */
export function modelTag(base, digest = weightsDigest(base)) {
  if (resolve(base) === resolve(DEFAULT_MODEL)) return ''
  return `-${basename(resolve(base))}${digest ? `-w${digest}` : ''}`
}

/** The first 8 hex digits of a SHA-256 over the folder's *.safetensors files in name order; null without any (a scripted policy's stand-in base). */
function weightsDigest(dir) {
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.safetensors')).sort() : []
  if (!files.length) return null
  const hash = createHash('sha256')
  for (const f of files) hash.update(readFileSync(join(dir, f)))
  return hash.digest('hex').slice(0, 8)
}

/** '' at the sizes' own split sizes, else `-items<dev>x<test>`: cells evaluated on other splits never mix. */
function itemsTag(items) {
  return items ? `-items${items[0]}x${items[1]}` : ''
}

/** '' without preset overrides, else `-cfg<hash>`: cells and results of another configuration never mix. */
function configTag(config) {
  return config ? `-cfg${createHash('sha256').update(JSON.stringify(config)).digest('hex').slice(0, 8)}` : ''
}

/** '' unguarded, else `-guard-<action>` (and `-falls` under that rule): guarded cells ran another loop (probes, checkpoints, perhaps a rollback). */
function guardTag(guard, rule = DEFAULT_COLLAPSE_RULE) {
  return guard ? `-guard-${guard}${rule === DEFAULT_COLLAPSE_RULE ? '' : `-${rule}`}` : ''
}

/** '' for every arm, else `-arms-<names>`: a run of some arms never overwrites the result of all of them. */
function armsTag(arms) {
  return arms ? `-arms-${arms.map((a) => a.replace(/[^A-Za-z0-9.+-]+/g, '_')).join('+')}` : ''
}

function defaultOut(sizes, level, tuneOnly, base = DEFAULT_MODEL, config, items, guard, rule, arms) {
  const sizeTag = sizes.join('+')
  return join(here, 'results', `evidence${sizeTag === 'reduced' ? '' : `-${sizeTag}`}${levelTag(level)}${modelTag(base)}${configTag(config)}${itemsTag(items)}${guardTag(guard, rule)}${armsTag(arms)}${tuneOnly ? '-tuning' : ''}.json`)
}

/** Runs the evidence at a size; writes `out` and returns it. `openPolicy` and `base` let a test run it on the scripted policy. */
export async function runEvidence({ note, size = 'reduced', sizes = [size], level = DEFAULT_LEVEL, methods = Object.keys(METHOD_TABLE), arms, seeds = [1, 2, 3], tune, tuneSeeds = 1, items, tuneOnly = false, out, cellsDir, base = DEFAULT_MODEL, config, guard, collapseRule = DEFAULT_COLLAPSE_RULE, openPolicy, threads = 2, device, log = (l) => process.stderr.write(`${l}\n`) } = {}) {
  for (const z of sizes) if (!SIZES[z]) throw new RangeError(`unknown size '${z}' (${Object.keys(SIZES).join(', ')})`)
  if (sizes.length === 0 || new Set(sizes.map((z) => `${SIZES[z].dev}/${SIZES[z].test}`)).size > 1) throw new RangeError(`sizes ${sizes.join(', ')}: tuning across sizes compares them on one development split, so their dev and test sizes must be equal`)
  if (seeds.length < 3) throw new RangeError('the evidence needs at least 3 seeds')
  if (!seeds.every((x) => Number.isSafeInteger(x) && x >= 0)) throw new RangeError(`--seeds ${seeds.join(',')}: seeds are whole numbers ≥ 0`)
  if (!(Number.isSafeInteger(tuneSeeds) && tuneSeeds >= 1 && tuneSeeds <= 10)) throw new RangeError(`--tune-seeds ${tuneSeeds}: a whole number of tuning seeds, 1 to 10`)
  const tuningSeeds = Array.from({ length: tuneSeeds }, (_, i) => TUNING_SEED + i)
  if (seeds.some((x) => tuningSeeds.includes(x))) throw new RangeError(`--seeds ${seeds.join(',')}: the test seeds must differ from the tuning seeds ${tuningSeeds.join(',')}`)
  if (items && !(items.length === 2 && items.every((x) => Number.isSafeInteger(x) && x >= 1) && items[0] <= TEST_OFFSET && TEST_OFFSET + items[1] <= SPLITS_END)) throw new RangeError(`--items ${items.join(',')}: DEV,TEST item counts, DEV 1 to ${TEST_OFFSET} (items [0, DEV)) and TEST 1 to ${SPLITS_END - TEST_OFFSET} (items [${TEST_OFFSET}, ${TEST_OFFSET} + TEST))`)
  if (tune && !(tune.length > 0 && tune.every((x) => Number.isFinite(x) && x > 0))) throw new RangeError(`--tune ${tune.join(',')}: learning-rate scales are numbers > 0`)
  for (const m of methods) if (!METHOD_TABLE[m]) throw new RangeError(`unknown method '${m}' (${Object.keys(METHOD_TABLE).join(', ')})`)
  if (arms) {
    // a subset of one method's arms (cells are per arm, so they resume and pool as in a full run); the headline is what tuning runs
    if (methods.length !== 1) throw new RangeError(`--arms: names arms of one method; give --methods one method (not ${methods.join(',')})`)
    const m = METHOD_TABLE[methods[0]]
    const unknownArm = arms.find((a) => !m.arms[a])
    if (unknownArm !== undefined) throw new RangeError(`--arms: '${unknownArm}' is not an arm of ${methods[0]} (${Object.keys(m.arms).join(', ')})`)
    if (!arms.includes(m.headline)) throw new RangeError(`--arms: ${methods[0]}'s arms must include its headline '${m.headline}' (the arm the development split tunes)`)
  }
  for (const [m, over] of Object.entries(config ?? {})) {
    if (!METHOD_TABLE[m]) throw new RangeError(`--config: unknown method '${m}' (${Object.keys(METHOD_TABLE).join(', ')})`)
    // a bad key or value is refused now, not at the first training cell
    try {
      METHOD_TABLE[m].resolve(over)
    } catch (e) {
      throw new RangeError(`--config ${m}: ${e.message}`)
    }
  }
  if (guard !== undefined && !COLLAPSE_ACTIONS.includes(guard)) throw new RangeError(`--on-collapse ${guard}: one of ${COLLAPSE_ACTIONS.join(', ')}`)
  if (!COLLAPSE_RULES.includes(collapseRule)) throw new RangeError(`--collapse-rule ${collapseRule}: one of ${COLLAPSE_RULES.join(', ')}`)
  if (collapseRule !== DEFAULT_COLLAPSE_RULE && !guard) throw new RangeError('--collapse-rule: the rule of the collapse guard, which --on-collapse turns on')
  const unguarded = guard ? methods.filter((m) => !TRAINING_REWARD[m]) : []
  if (unguarded.length) throw new RangeError(`--on-collapse: ${unguarded.join(', ')} train on no reward of their own for the collapse guard to watch; guard ${Object.keys(TRAINING_REWARD).filter((m) => METHOD_TABLE[m]).join(', ')}`)
  if (!(Number.isInteger(level) && level >= 2 && level <= 5)) throw new RangeError(`--level ${level}: the evidence runs at level 2, 3, 4 or 5 (level 1's 100 held-out items hold no test split at item ${TEST_OFFSET})`)
  if (!openPolicy && !existsSync(join(base, 'config.json'))) throw new RangeError(`--model ${base}: not a model folder (no config.json)`)
  if (device) process.env.AUTODIDACT_DEVICE = device
  const outFile = out ?? defaultOut(sizes, level, tuneOnly, base, config, items, guard, collapseRule, arms)
  const world = arithWorld({ benchmarks: [`L${level}`] })
  const baseWeights = weightsDigest(base) // the base's weights read once, for every name below
  const baseTag = modelTag(base, baseWeights)
  const shared = { level, arms, tuneOnly, seeds, tuningSeeds, base: resolve(base), config, guard, collapseRule, world, openPolicy: openPolicy ?? (await import('../dist/methods/common/policy.js')).openPolicy, threads, log }
  // one run state per size; a size's cells live in its own folder (the cell keys do not name the step count)
  const stages = sizes.map((z) => ({
    ...shared,
    sizeName: z,
    size: { ...SIZES[z], ...(tune ? { tune } : {}), ...(items ? { dev: items[0], test: items[1] } : {}) },
    cellsDir: cellsDir ? (sizes.length === 1 ? cellsDir : join(cellsDir, z)) : join(here, 'results', `evidence-cells-${z}${levelTag(level)}${baseTag}${configTag(config)}${itemsTag(items)}${guardTag(guard, collapseRule)}${device ? `-${device}` : ''}`),
  }))
  for (const st of stages) mkdirSync(st.cellsDir, { recursive: true })
  const o = { ...shared, stages }
  const s = stages[0].size
  const sp = splits(world, s, level)
  const started = Date.now()
  const label = sizes.length === 1 ? s.label : `each method at the size (${sizes.join(', ')}) and learning-rate scale best on the development split: ${stages.map((st) => st.size.label).join('; ')}`
  const result = { format: 'autodidact.evidence', version: 1, size: sizes.join('+'), label, ...(note ? { note } : {}), ...(config ? { config } : {}), ...(guard ? { guard: { onCollapse: guard, rule: collapseRule, probe: `L${level} held-out items [0, ${PROBE_ITEMS}), ${PROBES} evaluations a run`, window: DEFAULT_COLLAPSE_WINDOW } } : {}), device: device ?? 'cpu', ...(tuneOnly ? { tuneOnly: true } : {}), seeds, world: `arith (toy), level ${level}`, level, model: baseTag ? resolve(base) : 'bundled', ...(baseWeights ? { modelWeights: baseWeights } : {}), notRun: Object.keys(METHOD_TABLE).filter((m) => !methods.includes(m)), ...(arms ? { armsRun: arms } : {}), protocol: { mean4: MEAN4, greedy: 'T 0' }, splits: { dev: `L${level} held-out items [0, ${s.dev})`, test: `L${level} held-out items [${TEST_OFFSET}, ${TEST_OFFSET + s.test})` }, methods: {} }
  for (const [i, name] of methods.entries()) {
    result.methods[name] = await runMethod(o, name, sp)
    // a partial file says which methods are still to come
    writeJson(outFile, { ...result, pending: methods.slice(i + 1), seconds: (Date.now() - started) / 1000, loadAverage: loadavg(), date: new Date().toISOString() })
  }
  const final = { ...result, pending: [], seconds: (Date.now() - started) / 1000, loadAverage: loadavg(), date: new Date().toISOString() }
  mkdirSync(join(outFile, '..'), { recursive: true })
  writeJson(outFile, final)
  return final
}

/** A --tune-only result: each method's learning-rate candidates on the development split. */
function tuningTable(r) {
  const lines = ['| method | steps | lr × | lr | dev mean@4 | Δ pp vs base | dev greedy |', '| --- | --- | --- | --- | --- | --- | --- |']
  for (const [name, m] of Object.entries(r.methods)) {
    for (const t of m.tuning.candidates) lines.push(`| ${name} | ${t.steps}${m.stepUnit ? ` ${m.stepUnit}` : ''} | ${t.lrScale} | ${t.lr.toExponential(1)} | ${(100 * t.devMean4).toFixed(1)}% | ${(t.devMean4Delta >= 0 ? '+' : '') + t.devMean4Delta.toFixed(1)} | ${(100 * t.devGreedy).toFixed(1)}% |`)
  }
  return lines.join('\n')
}

/** The README table of a result. */
export function table(r) {
  if (r.tuneOnly) return tuningTable(r)
  const f = (x) => (x >= 0 ? '+' : '') + x.toFixed(1)
  const ci = (c) => `[${f(c[0])}, ${f(c[1])}]`
  // a comparison d (mean4Delta, ci95, greedyDelta, greedyCi95) as a row
  const lines = [`| method | steps, lr | arm | mean@4 Δ pp [95% CI] | greedy Δ pp [95% CI] | seeds | test items |`, '| --- | --- | --- | --- | --- | --- | --- |']
  for (const [name, m] of Object.entries(r.methods)) {
    const setting = `${m.steps}${m.stepUnit ? ` ${m.stepUnit}` : ''}, ${m.tuning.chosenLr.toExponential(0)}`
    const row = (name, label, d, seeds, items) => `| ${name} | ${setting} | ${label} | ${f(d.mean4Delta)} ${ci(d.ci95)} | ${f(d.greedyDelta)} ${ci(d.greedyCi95)} | ${seeds} | ${items} |`
    for (const [arm, a] of Object.entries(m.arms)) lines.push(row(name, `${arm}${arm === m.headline ? ' (headline)' : ''}`, a.vsBase, m.seeds, m.testItems))
    for (const ab of m.ablations) lines.push(row(name, ab.name, ab, m.seeds, m.testItems))
  }
  return lines.join('\n')
}

/** --config's JSON ({ method: preset overrides }), or undefined; anything else is a one-line error. */
function parseConfig(text) {
  if (text === undefined) return undefined
  let parsed
  try {
    parsed = JSON.parse(text)
  } catch {
    console.error(`evidence: --config is not JSON: ${text}`)
    process.exit(2)
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    console.error('evidence: --config must be an object of method presets, e.g. {"cose":{"judge":{"maxTokens":200}}}')
    process.exit(2)
  }
  return parsed
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const argv = process.argv.slice(2)
  const arg = (name) => {
    const i = argv.indexOf(`--${name}`)
    return i >= 0 ? argv[i + 1] : undefined
  }
  const withValue = ['--level', '--device', '--methods', '--arms', '--seeds', '--tune', '--tune-seeds', '--items', '--out', '--note', '--model', '--config', '--on-collapse', '--collapse-rule']
  const known = ['--quick', '--reduced', '--full', '--long', '--table', '--tune-only', ...withValue]
  const unknown = argv.filter((a, i) => a.startsWith('--') && !known.includes(a) && !withValue.includes(argv[i - 1]))
  if (argv.includes('--help') || argv.includes('-h') || unknown.length > 0) {
    // an unknown flag must not start a run of hours: print the usage (this file's header) instead
    const usage = readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).map((l) => l.slice(3))
    if (unknown.length > 0 && !argv.includes('--help')) console.error(`unknown option ${unknown.join(', ')}`)
    console.log(usage.join('\n'))
    process.exit(argv.includes('--help') || argv.includes('-h') ? 0 : 2)
  }
  // several size flags: each method is tuned across those sizes' step counts too
  const flagged = Object.keys(SIZES).filter((z) => argv.includes(`--${z}`))
  const sizes = flagged.length ? flagged : ['reduced']
  const level = arg('level') === undefined ? DEFAULT_LEVEL : Number(arg('level'))
  if (argv.includes('--table')) {
    // the table of a finished (or partly finished) result file, for the README
    console.log(table(JSON.parse(readFileSync(arg('out') ?? defaultOut(sizes, level, argv.includes('--tune-only'), arg('model'), parseConfig(arg('config')), arg('items')?.split(',').map(Number), arg('on-collapse'), arg('collapse-rule'), arg('arms')?.split(',')), 'utf8'))))
    process.exit(0)
  }
  const r = await runEvidence({
    sizes,
    level,
    methods: arg('methods')?.split(','),
    arms: arg('arms')?.split(','),
    seeds: arg('seeds')?.split(',').map(Number),
    tune: arg('tune')?.split(',').map(Number),
    tuneSeeds: arg('tune-seeds') === undefined ? undefined : Number(arg('tune-seeds')),
    items: arg('items')?.split(',').map(Number),
    tuneOnly: argv.includes('--tune-only'),
    out: arg('out'),
    device: arg('device'),
    note: arg('note'),
    base: arg('model'),
    config: parseConfig(arg('config')),
    guard: arg('on-collapse'),
    collapseRule: arg('collapse-rule'),
  }).catch((e) => {
    // a bad option (level, method, seeds) is refused before any training, in one line
    if (!(e instanceof RangeError)) throw e
    console.error(`evidence: ${e.message}`)
    process.exit(2)
  })
  console.log(`${r.label}; seeds ${r.seeds.join(',')}; ${r.splits.test}; ${r.seconds.toFixed(0)} s\n`)
  console.log(table(r))
}
