#!/usr/bin/env node
// bench/nccl-one-rank.mjs — on a machine with a GPU and NCCL (issue 24's "when lent a GPU"):
//   1. the NCCL collective with 1 rank through the code path `evolve --gpus 1` uses
//      (src/parallel/collective.ts → native/collective/nccl_collective.cpp): open (ncclGetUniqueId,
//      ncclCommInitRank, the first all-reduce), all-reduce sum and avg of 2^20 random floats (a
//      1-rank sum is the input itself: checked bit for bit), broadcast, all-gather, barrier, close —
//      each timed;
//   2. the step-time overhead of the collective path at 1 rank: `evolve --method cose` for --steps S
//      on --device D plainly, then as the one rank of `evolve --gpus 1` (the launcher, the NCCL
//      collective, the ParallelPolicy), same config and seed; the median step seconds of each
//      (steps 2…S, the first warms up), their ratio against the issue's ≤ 1.03, and whether the
//      two runs' metrics agree.
//   node bench/nccl-one-rank.mjs [--device cuda] [--steps 6]     OUT=dir: JSON to $OUT/nccl-one-rank.json
// Needs `npm run build` (dist/, build/Release). Exit 0: every check passed (the overhead's PASS/FAIL
// is reported, not an exit status); 1: a check failed; 2: no NCCL (or no CUDA driver) here.
// A dry run of the script's own logic without a GPU, against the stand-in library of the tests:
//   cc -shared -fPIC -O1 -o /tmp/fake/fake.so test/parallel/fixtures/fake-nccl.c && ln -s fake.so /tmp/fake/libcuda.so.1
//   AUTODIDACT_NCCL=/tmp/fake/fake.so LD_LIBRARY_PATH=/tmp/fake FAKE_NCCL_DIR=$(mktemp -d) node bench/nccl-one-rank.mjs --device cpu --steps 3
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const { openCollective, collectiveLibraries } = await import(join(root, 'dist/parallel/collective.js'))
const { launchGpuRanks } = await import(join(root, 'dist/parallel/launcher.js'))
const CLI = join(root, 'dist/cli/main.js')

const argv = process.argv.slice(2)
const flag = (name, fallback) => {
  const i = argv.indexOf(`--${name}`)
  return i >= 0 ? argv[i + 1] : fallback
}
const device = flag('device', 'cuda')
const steps = Number(flag('steps', '6'))
const results = { device, steps }
let failures = 0
const now = () => Number(process.hrtime.bigint()) / 1e9
const fail = (what) => (failures++, console.log(`  FAIL ${what}`))

const nccl = (await collectiveLibraries()).nccl
results.library = nccl
console.log(`nccl: ${nccl.found ? `found ${nccl.version} at ${nccl.path}` : `not found: ${nccl.reason}`}`)
if (!nccl.found) process.exit(2)

// ---------------------------------------------------------------- 1. the collective at 1 rank
let c
const t0 = now()
try {
  c = await openCollective({ backend: 'nccl', timeoutMs: 60_000, rank: 0, worldSize: 1 })
} catch (e) {
  console.log(`nccl open: ${e.code ?? ''} ${e.message}`)
  process.exit(e.code === 'ERR_AD_COLLECTIVE_UNAVAILABLE' ? 2 : 1)
}
const ops = { openSeconds: now() - t0 }
const n = 1 << 20
const data = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898) * 43758.5453 % 1)
for (const op of ['sum', 'avg']) {
  const t = now()
  const out = await c.allReduce(data, op)
  ops[`allReduce_${op}_seconds`] = now() - t
  let bad = out.length === n ? 0 : n
  for (let i = 0; i < n && !bad; i++) if (!Object.is(out[i], data[i])) bad = i + 1
  if (bad) fail(`all-reduce ${op} of ${n} floats at 1 rank is not the input (first difference at ${bad - 1})`)
}
{
  const bytes = Uint8Array.from({ length: 4099 }, (_, i) => (i * 31) & 255)
  let t = now()
  const b = await c.native.broadcast(bytes, 0)
  ops.broadcastSeconds = now() - t
  if (b.length !== bytes.length || b.some((x, i) => x !== bytes[i])) fail('broadcast of 4099 bytes is not the input')
  t = now()
  const g = await c.native.allGather(bytes.subarray(0, 101))
  ops.allGatherSeconds = now() - t
  if (g.length !== 1 || g[0].length !== 101 || g[0].some((x, i) => x !== bytes[i])) fail('all-gather of 101 bytes is not the input')
  t = now()
  await c.barrier()
  ops.barrierSeconds = now() - t
  t = now()
  await c.close()
  ops.closeSeconds = now() - t
}
results.collective = ops
console.log(`collective at 1 rank: open ${ops.openSeconds.toFixed(3)} s, all-reduce 4 MiB ${(ops.allReduce_sum_seconds * 1e3).toFixed(2)} ms, barrier ${(ops.barrierSeconds * 1e3).toFixed(2)} ms`)

// ---------------------------------------------------------------- 2. evolve plainly vs as the one rank of --gpus 1
const dir = mkdtempSync(join(tmpdir(), 'ad-nccl-one-rank-'))
const base = ['--method', 'cose', '--steps', String(steps), '--seed', '7', '--device', device]
const stepSeconds = (out) =>
  readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((r) => r.step >= 2).map((r) => r.seconds).filter((s) => typeof s === 'number')
const discard = () => new Writable({ write: (_chunk, _enc, done) => done() })
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const plain = join(dir, 'plain')
let t = now()
const p = spawnSync(process.execPath, [CLI, 'evolve', ...base, '--out', plain], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] })
const plainWall = now() - t
if (p.status !== 0) fail(`plain evolve exited ${p.status}: ${p.stderr.slice(-500)}`)

const ranked = join(dir, 'gpus-1')
t = now()
let code = null
try {
  code = await launchGpuRanks({ gpus: 1, command: [process.execPath, CLI], args: [...base, '--out', ranked], stderr: discard(), stdout: discard() })
} catch (e) {
  fail(`evolve --gpus 1 failed: ${e.message}`)
}
const rankedWall = now() - t
if (code !== 0 && code !== null) fail(`evolve --gpus 1 exited ${code}`)

if (!failures) {
  const [a, b] = [stepSeconds(plain), stepSeconds(ranked)]
  if (!a.length || a.length !== b.length) fail(`step seconds: ${a.length} plain vs ${b.length} ranked (metrics.jsonl rows with a seconds field from step 2)`)
  else {
    const ratio = median(b) / median(a)
    results.overhead = { plainMedianStepSeconds: median(a), rankedMedianStepSeconds: median(b), ratio, target: 1.03, pass: ratio <= 1.03, plainWallSeconds: plainWall, rankedWallSeconds: rankedWall }
    console.log(`step time, --gpus 1 / plain: ${ratio.toFixed(3)} (median ${median(b).toFixed(3)} s vs ${median(a).toFixed(3)} s over steps 2…${steps}) — target ≤ 1.03: ${ratio <= 1.03 ? 'PASS' : 'FAIL'}`)
    // the same run: the collective path at 1 rank changes no number (timings aside)
    const rows = (out) => readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.stringify(JSON.parse(l), (k, v) => (/seconds|tokensPerSecond|mfu|time/i.test(k) ? undefined : v)))
    const [ra, rb] = [rows(plain), rows(ranked)]
    results.sameMetrics = ra.length === rb.length && ra.every((r, i) => r === rb[i])
    console.log(`metrics (timings aside) identical: ${results.sameMetrics}`)
    if (!results.sameMetrics) fail('the --gpus 1 run wrote different metrics from the plain run')
  }
}

if (process.env.OUT) writeFileSync(join(process.env.OUT, 'nccl-one-rank.json'), JSON.stringify(results, null, 2))
console.log(failures ? `nccl-one-rank: ${failures} failure(s)` : 'nccl-one-rank: ok')
process.exit(failures ? 1 : 0)
