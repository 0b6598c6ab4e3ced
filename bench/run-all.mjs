// `npm run bench`: every peer benchmark in one run, each in its own process, one after the other
// (they would disturb each other's timings); their progress streams to stderr, and all tables are
// printed together at the end. Each bench writes its bench/results/*.json; this script adds
// bench/results/run-all.json (date, machine, commands, exit codes, the printed tables).
//
//   npm run build && node bench/run-all.mjs [--threads 2] [--quick]
//
// --quick: the small shapes only (bundled model decode, small train step, the small model's GEMMs
// without the LM head), for a smoke run.
// The llama.cpp peer comes from the bench-only package in bench/peers (installed here when missing);
// the PyTorch peer (2.x with MKL) from the venv bench/torch-venv.mjs makes offline (here, once).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { torchPeer } from './torch-venv.mjs'

const here = fileURLToPath(new URL('.', import.meta.url))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const threads = String(arg('threads', Math.min(2, cpus().length)))
const quick = process.argv.includes('--quick')

if (!existsSync(join(here, 'peers', 'node_modules', 'node-llama-cpp'))) {
  console.error('[bench] installing the bench-only peers (node-llama-cpp 3.21.1, linux-x64 CPU prebuild)…')
  const r = spawnSync('bash', [join(here, 'peers', 'install.sh')], { stdio: 'inherit' })
  if (r.status !== 0) console.error('[bench] bench/peers could not be installed: the llama.cpp rows will say so')
}

const torch = torchPeer()
if (torch.unavailable) console.error(`[bench] ${torch.unavailable}: the PyTorch columns will say so`)

const BENCHES = [
  { name: 'gemm', args: ['gemm.mjs', '--threads', threads, ...(quick ? ['--models', 'small', '--no-lm-head'] : [])] },
  { name: 'logit-stats', args: ['logit-stats.mjs', '--threads', threads] },
  { name: 'decode', args: ['decode.mjs', '--threads', threads, '--models', quick ? 'toy' : 'toy,qwen3-0.6b'] },
  { name: 'train-step', args: ['train-step.mjs', '--threads', threads, ...(quick ? ['--only', 'small'] : [])] },
]

const runs = []
for (const b of BENCHES) {
  const command = `node bench/${b.args.join(' ')}`
  console.error(`\n[bench] ${command}`)
  const t0 = Date.now()
  // stdout (the table) is captured, stderr (progress) streams through
  const r = spawnSync(process.execPath, b.args.map((a, i) => (i === 0 ? join(here, a) : a)), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 })
  runs.push({ bench: b.name, command, exitCode: r.status, seconds: (Date.now() - t0) / 1000, table: r.stdout ?? '' })
}

mkdirSync(join(here, 'results'), { recursive: true })
const record = {
  bench: 'run-all',
  date: new Date().toISOString(),
  machine: { cpu: cpus()[0]?.model, cores: cpus().length, memoryGiB: totalmem() / 2 ** 30, loadAverage: loadavg(), node: process.version },
  torch: torch.unavailable ? torch : { version: torch.version, mkl: torch.mkl, capability: torch.capability },
  threads: Number(threads),
  runs,
}
writeFileSync(join(here, 'results', 'run-all.json'), JSON.stringify(record, null, 2) + '\n')

console.log(`\n=== autodidact benchmarks, ${record.date}, ${record.machine.cpu} × ${record.machine.cores}, ${threads} threads, load average ${loadavg().map((x) => x.toFixed(1)).join(' ')} ===`)
for (const r of runs) {
  console.log(`\n--- ${r.bench}: \`${r.command}\` (${r.seconds.toFixed(0)} s${r.exitCode === 0 ? '' : `, FAILED with exit code ${r.exitCode}`}) ---`)
  console.log(r.table.trimEnd())
}
console.log('\nresults: bench/results/*.json')
process.exitCode = runs.every((r) => r.exitCode === 0) ? 0 : 1
