// `autodidact evolve --method cose [--model DIR] [--config FILE] [--out DIR] [--resume DIR] …`
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { drive, LATEST_FILE } from '../methods/common/driver.js'
import { readConfigFile } from '../methods/common/config.js'
import { PRESETS, resolveCoseConfig } from '../methods/cose/config.js'
import { CoseRun } from '../methods/cose/loop.js'
import { arithWorld } from '../methods/cose/world.js'
import { packageRoot } from '../native.js'
import { parseArgs } from './args.js'

export const DEFAULT_MODEL = join(packageRoot, 'models', 'arith-qwen3-tiny')

export const EVOLVE_USAGE = `usage: autodidact evolve --method cose [options]

  --method NAME     cose (ttrl, dpo, wsft, rzero and jzero are not implemented yet)
  --model DIR       Hugging Face model folder (default: the bundled ${'models/arith-qwen3-tiny'})
  --config FILE     JSON config; keys as in src/methods/cose/config.ts (unknown keys are errors)
  --preset NAME     toy (default) | paper (COSE Appendix C)
  --out DIR         run folder: metrics.jsonl, checkpoints/, report.html (default runs/cose-<time>)
  --steps N         override the number of steps
  --seed N          override the seed
  --resume DIR      continue a run folder from its latest checkpoint
  --threads N       CPU threads for the engine`

const fmt = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(2) : '–')

export async function evolveCommand(argv: string[]): Promise<number> {
  const { options } = parseArgs(argv, { method: 'string', model: 'string', config: 'string', preset: 'string', out: 'string', steps: 'number', seed: 'number', resume: 'string', threads: 'number', help: 'boolean' })
  if (options.help) {
    console.log(EVOLVE_USAGE)
    return 0
  }
  const method = String(options.method ?? 'cose')
  if (method !== 'cose') throw new InvalidArgumentError('method', `--method ${method} is not implemented yet; available: cose`)
  const threads = options.threads as number | undefined
  let run: CoseRun
  let outDir: string
  if (options.resume) {
    outDir = String(options.resume)
    const latestFile = join(outDir, LATEST_FILE)
    if (!existsSync(latestFile)) throw new InvalidArgumentError('resume', `${outDir} has no ${LATEST_FILE}: not a run folder with a checkpoint`)
    const latest = JSON.parse(await readFile(latestFile, 'utf8')) as { checkpoint: string }
    run = await CoseRun.resume(latest.checkpoint, arithWorld, threads)
  } else {
    const presetName = String(options.preset ?? 'toy')
    if (!(presetName in PRESETS)) throw new InvalidArgumentError('preset', `unknown preset '${presetName}' (toy | paper)`)
    const base = PRESETS[presetName as keyof typeof PRESETS]
    const fileConfig = options.config ? await readConfigFile(String(options.config)) : undefined
    const config = resolveCoseConfig(fileConfig, base, options.config ? String(options.config) : '(preset)')
    if (options.steps !== undefined) config.steps = resolveCoseConfig({ steps: options.steps }, config, '--steps').steps
    if (options.seed !== undefined) config.seed = resolveCoseConfig({ seed: options.seed }, config, '--seed').seed
    const model = String(options.model ?? DEFAULT_MODEL)
    outDir = String(options.out ?? join('runs', `cose-${new Date().toISOString().replace(/[:.]/g, '-')}`))
    run = await CoseRun.start(model, config, arithWorld, threads)
  }
  let stop = false
  const onSigint = () => {
    if (stop) process.exit(130)
    stop = true
    process.stderr.write('\n[cose] Ctrl-C: finishing this step, then checkpointing (Ctrl-C again to abort)\n')
  }
  process.on('SIGINT', onSigint)
  try {
    const c = run.config
    const result = await drive(run, {
      outDir,
      method: 'cose',
      totalSteps: c.steps,
      evalEvery: c.eval.every,
      checkpointEvery: c.checkpointEvery,
      series: [
        { title: 'held-out accuracy (greedy)', path: 'heldOutAccuracy' },
        { title: 'Solver reward r_S (Eq. 7)', path: 'rewardSolver.mean' },
        { title: 'Proposer reward r_P (Eq. 8)', path: 'rewardProposer.mean' },
        { title: 'Validator confidence c_V', path: 'confidenceValidator.mean' },
        { title: 'Judge confidence c_J', path: 'confidenceJudge.mean' },
        { title: 'Solver weight w_S (Eq. 5)', path: 'weightSolver.mean' },
        { title: 'accept rate', path: 'acceptRate' },
        { title: 'replay buffer size', path: 'bufferSize' },
        { title: 'KL to reference', path: 'train.objective.kl' },
        { title: 'policy entropy', path: 'train.objective.entropy' },
      ],
      describe: (r) => `r_S ${fmt((r.rewardSolver as { mean: number }).mean)} r_P ${fmt((r.rewardProposer as { mean: number }).mean)} accept ${fmt(r.acceptRate)}`,
      progress: (line) => process.stderr.write(`\r${line.padEnd(120)}`),
      stopRequested: () => stop,
    })
    process.stderr.write('\n')
    console.log(`held-out accuracy ${fmt(result.accuracyBefore)} → ${fmt(result.accuracyAfter)}; ${result.stepsRun} steps in ${result.seconds.toFixed(0)} s; report: ${join(outDir, 'report.html')}`)
    return result.stoppedEarly ? 130 : 0
  } finally {
    process.off('SIGINT', onSigint)
    run.dispose()
  }
}
