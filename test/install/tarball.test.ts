// autodidact as a dependency: `npm pack`, then `npm i --offline <tarball>` into a fresh project
// (the npm cache holds every dependency after `npm ci`). The install must build the addon with
// cmake-js found through module resolution (npm hoists it), build CUDA where nvcc is on PATH,
// survive onnxruntime-node's postinstall failing offline (an optional dependency: only ONNX is
// lost, and doctor says why), and leave a package whose library, subpaths, types, CLI and README
// example work from that project.
//
// With nvcc on PATH the CUDA plugin is built for one architecture only to keep the suite short:
// AUTODIDACT_TEST_CUDA_ARCH (default 80-real) picks it; the sm_90a GEMM file is built as always.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { installOffline, nodeJson, packTarball, repoRoot, writeConsumerProject } from './consumer.js'

const hasNvcc = spawnSync('nvcc', ['--version'], { stdio: 'ignore' }).status === 0
const hasCmake = spawnSync('cmake', ['--version'], { stdio: 'ignore' }).status === 0
const cudaArch = process.env.AUTODIDACT_TEST_CUDA_ARCH ?? '80-real'
// Generous: on a shared 2-core machine under load the install has taken 17 minutes (5 when alone).
const INSTALL_TIMEOUT_MS = 40 * 60_000
const STEP_TIMEOUT_MS = 5 * 60_000

const work = mkdtempSync(join(tmpdir(), 'ad-tarball-'))
const project = join(work, 'consumer')
const installed = join(project, 'node_modules', 'autodidact')
let tarball = ''
let installLog = ''
let installStatus: number | null = null
let installSeconds = 0

beforeAll(() => {
  mkdirSync(project)
  tarball = packTarball(work)
  writeConsumerProject(project, tarball)
  const started = performance.now()
  const r = installOffline(project, tarball, { AUTODIDACT_CUDA_ARCHITECTURES: cudaArch })
  installSeconds = (performance.now() - started) / 1000
  installLog = `${r.stdout}\n${r.stderr}`
  installStatus = r.status
  console.log(`npm i --offline of the tarball: ${installSeconds.toFixed(0)} s (CUDA ${hasNvcc ? `built for ${cudaArch}` : 'off: no nvcc'})`)
}, INSTALL_TIMEOUT_MS)

afterAll(() => rmSync(work, { recursive: true, force: true }))

/** The build script's decision lines from the install log. */
function decisions(): string[] {
  return installLog.split('\n').filter((l) => l.startsWith('[autodidact] '))
}

function doctor(): { text: string; json: { native: { backends: string[]; cuda: { compiled: boolean; kind: string } } | null; onnx: { available: boolean } } } {
  const bin = join(project, 'node_modules', '.bin', 'autodidact')
  const text = spawnSync(bin, ['doctor'], { cwd: project, encoding: 'utf8' })
  const json = spawnSync(bin, ['doctor', '--json'], { cwd: project, encoding: 'utf8' })
  expect(text.status, text.stderr).toBe(0)
  return { text: text.stdout, json: JSON.parse(json.stdout) }
}

describe('npm i --offline of the packed tarball', { timeout: STEP_TIMEOUT_MS }, () => {
  it('installs, building the addon with cmake-js resolved from the hoisted node_modules, one line per decision', () => {
    expect(installStatus, installLog.slice(-4000)).toBe(0)
    const lines = decisions()
    if (hasCmake) expect(lines).toContainEqual(expect.stringMatching(/^\[autodidact\] builder: cmake-js 8\.0\.0 \(.*consumer\/node_modules\/cmake-js\)/))
    else expect(lines).toContainEqual(expect.stringMatching(/^\[autodidact\] builder: node-gyp, CPU only \(cmake is not on PATH\)/))
    const cuda = hasNvcc && hasCmake ? `[autodidact] CUDA: yes (nvcc ` : '[autodidact] CUDA: no ('
    expect(lines.filter((l) => l.startsWith(cuda))).toHaveLength(1)
    if (hasNvcc && hasCmake) expect(lines.find((l) => l.startsWith(cuda))).toContain(`architectures ${cudaArch} and sm_90a`)
    expect(lines.at(-1)).toBe(`[autodidact] outputs: ${join(installed, 'build/Release/autodidact.node')}` + (hasNvcc && hasCmake ? ` and ${join(installed, 'build/Release/autodidact_cuda.so')} (CUDA plugin)` : ' (CPU only: no CUDA plugin)'))
    expect(installLog).not.toMatch(/Cannot find module|node:internal\/modules/)
    expect(existsSync(join(installed, 'build', 'Release', 'autodidact.node'))).toBe(true)
  })

  it.skipIf(!hasNvcc)('with nvcc on PATH, builds the CUDA plugin and doctor reports it compiled', () => {
    expect(existsSync(join(installed, 'build', 'Release', 'autodidact_cuda.so'))).toBe(true)
    const { json } = doctor()
    expect(json.native?.cuda.compiled).toBe(true)
    expect(json.native?.cuda.kind).not.toBe('not-built')
    console.log(`CUDA plugin built in the consumer's install (architecture ${cudaArch}); cuda kind here: ${json.native?.cuda.kind}`)
  })

  it("survives onnxruntime-node's offline postinstall: only ONNX is lost, and doctor says why and how to add it", () => {
    const { text, json } = doctor()
    const ortInstalled = existsSync(join(project, 'node_modules', 'onnxruntime-node', 'package.json'))
    expect(json.onnx.available).toBe(ortInstalled)
    if (ortInstalled) expect(text).toMatch(/^onnx: onnxruntime-node 1\.30\.0$/m)
    else {
      expect(installLog).toMatch(/onnxruntime-node@1\.30\.0 postinstall/) // it ran, failed offline, and npm dropped it
      expect(text).toMatch(/^onnx: unavailable: onnxruntime-node is not installed .*ONNXRUNTIME_NODE_INSTALL=skip npm i onnxruntime-node@1\.30\.0$/m)
    }
    expect(text).toMatch(/^backends compiled: cpu/m)
  })

  it('runs generate, score and SFT steps through import("autodidact") on the bundled model', () => {
    writeFileSync(
      join(project, 'library.mjs'),
      `import { DEFAULT_TOY_MODEL_DIR, loadModel } from 'autodidact'
const model = await loadModel(DEFAULT_TOY_MODEL_DIR, { threads: 1 })
const prompt = 'Solve: 2+3\\n'
const [[greedy]] = await model.generate(prompt, { temperature: 0, maxTokens: 20 })
const completion = [...model.tokenizer.encode('<answer>5</answer>', { addSpecialTokens: false }), model.tokenizer.eosTokenIds[0]]
const pair = { prompt, completion }
const logp = async () => (await model.score([pair]))[0].logprobs.reduce((a, b) => a + b, 0)
const before = await logp()
const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 } })
const steps = []
for (let i = 0; i < 3; i++) steps.push(await trainer.step({ sequences: [{ prompt: model.encodePrompt(prompt), completion }] }))
const after = await logp()
console.log(JSON.stringify({ dir: model.dir, greedy: greedy.text, tokens: greedy.tokens.length, finish: greedy.finishReason, before, after, steps: steps.map((s) => ({ loss: s.loss, gradNorm: s.gradNorm, skipped: s.skipped })) }))
`,
    )
    const r = nodeJson<{ dir: string; greedy: string; tokens: number; finish: string; before: number; after: number; steps: { loss: number; gradNorm: number; skipped: boolean }[] }>(project, ['library.mjs'])
    expect(r.dir).toBe(join(installed, 'models', 'arith-qwen3-tiny'))
    expect(r.tokens).toBeGreaterThan(0)
    expect(r.greedy.length).toBeGreaterThan(0)
    expect(Number.isFinite(r.before) && r.before < 0).toBe(true)
    for (const s of r.steps) {
      expect(s.skipped).toBe(false)
      expect(Number.isFinite(s.loss) && Number.isFinite(s.gradNorm) && s.gradNorm > 0).toBe(true)
    }
    // SFT on the completion raises its log-likelihood: the steps really trained the model.
    expect(r.after).toBeGreaterThan(r.before)
    expect(r.steps[2].loss).toBeLessThan(r.steps[0].loss)
  })

  it('imports each subpath (autodidact/rl, /signals, /tasks, /train) from the installed package', () => {
    writeFileSync(
      join(project, 'subpaths.mjs'),
      `import { grpoAdvantages } from 'autodidact/rl'
import { maskedMean } from 'autodidact/signals'
import { majorityVote } from 'autodidact/tasks'
import { Trainer, createSchedule, LORA_TARGETS } from 'autodidact/train'
import { createRequire } from 'node:module'
const resolve = (s) => createRequire(import.meta.url).resolve(s)
console.log(JSON.stringify({
  grpo: [...grpoAdvantages([1, 0, 1, 0], [0, 0, 0, 0])],
  masked: maskedMean([1, 2, 3, 4], [1, 0, 1, 0]),
  vote: majorityVote(['2', '3', '2']).answer,
  trainer: typeof Trainer.create,
  cosineMid: createSchedule({ kind: 'cosine', totalSteps: 4 })(2),
  loraTargets: LORA_TARGETS.length,
  version: JSON.parse(await import('node:fs').then((fs) => fs.readFileSync(resolve('autodidact/package.json'), 'utf8'))).version,
}))
`,
    )
    const r = nodeJson<{ grpo: number[]; masked: number; vote: string; trainer: string; cosineMid: number; loraTargets: number; version: string }>(project, ['subpaths.mjs'])
    const sd = Math.sqrt((4 * 0.25) / 3) // sample std of [1, 0, 1, 0]
    r.grpo.forEach((a, i) => expect(a).toBeCloseTo((i % 2 === 0 ? 0.5 : -0.5) / (sd + 1e-6), 9))
    expect(r.masked).toBe(2)
    expect(r.vote).toBe('2')
    expect(r.trainer).toBe('function')
    expect(r.cosineMid).toBeCloseTo(0.5, 12) // (1 + cos(π/2)) / 2
    expect(r.loraTargets).toBe(7)
    expect(r.version).toBe(JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')).version)
  })

  it("a consumer's tsc without skipLibCheck compiles against the published declarations", () => {
    writeFileSync(
      join(project, 'consumer.ts'),
      `import { DEFAULT_TOY_MODEL_DIR, loadModel, Tokenizer, type Completion, type ChatMessage } from 'autodidact'
import { grpoAdvantages } from 'autodidact/rl'
import { maskedMean } from 'autodidact/signals'
import { majorityVote } from 'autodidact/tasks'
import { Trainer, type StepMetrics, type TrainerOptions, type TrainSequence } from 'autodidact/train'
export async function sftOnce(messages: ChatMessage[], reply: string): Promise<{ metrics: StepMetrics; out: Completion[][] }> {
  const model = await loadModel(DEFAULT_TOY_MODEL_DIR)
  const tokenizer: Tokenizer = model.tokenizer
  const options: TrainerOptions = { objective: { name: 'sft' }, optimizer: { lr: 1e-3 } }
  const trainer: Trainer = await model.trainer(options)
  const sequence: TrainSequence = { prompt: tokenizer.encodeChat(messages, { addGenerationPrompt: true }), completion: tokenizer.encode(reply) }
  const metrics = await trainer.step({ sequences: [sequence] })
  void grpoAdvantages([1, 0], [0, 0]), maskedMean([1]), majorityVote(['1'])
  return { metrics, out: await model.generate({ messages }) }
}
`,
    )
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, types: ['node'], skipLibCheck: false }, files: ['consumer.ts'] }),
    )
    const tsc = join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc')
    const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: project, encoding: 'utf8' })
    expect(r.stdout + r.stderr).toBe('')
    expect(r.status).toBe(0)
  })

  it('ships LICENSE (Apache-2.0) and source maps whose sources are in the package', () => {
    const license = readFileSync(join(installed, 'LICENSE'), 'utf8')
    expect(license).toContain('Apache License')
    expect(license).toContain('Version 2.0, January 2004')
    expect(license).toContain('END OF TERMS AND CONDITIONS')
    const maps = listFiles(join(installed, 'dist')).filter((f) => f.endsWith('.map'))
    expect(maps.length).toBeGreaterThan(50)
    const missing = maps.flatMap((map) => (JSON.parse(readFileSync(map, 'utf8')) as { sources: string[] }).sources.map((s) => join(dirname(map), s)).filter((s) => !existsSync(s)))
    expect(missing).toEqual([])
  })

  it('runs the README example (examples/train-from-library.mjs) from the installed package', () => {
    const out = join(work, 'sft-model')
    const r = nodeJson<{ before: string; after: string; firstLoss: number; lastLoss: number; saved: string }>(project, [join(installed, 'examples', 'train-from-library.mjs'), out])
    expect(r.saved).toBe(out)
    expect(existsSync(join(out, 'model.safetensors')) && existsSync(join(out, 'tokenizer.json'))).toBe(true)
    expect(r.lastLoss).toBeLessThan(r.firstLoss / 10)
    expect(r.after).toBe('<answer>42</answer>') // the reloaded folder answers as trained
  })

  it("doctor's advice works from the project: npx autodidact rebuild rebuilds the installed addon with the same decisions", () => {
    const bin = join(project, 'node_modules', '.bin', 'autodidact')
    // Same switches as the install: cmake-js brings the build up to date instead of starting over.
    const r = spawnSync(bin, ['rebuild'], { cwd: project, encoding: 'utf8', env: { ...process.env, AUTODIDACT_CUDA_ARCHITECTURES: cudaArch } })
    expect(r.status, r.stderr.slice(-3000)).toBe(0)
    const rebuilt = r.stderr.split('\n').filter((l) => l.startsWith('[autodidact] '))
    expect(rebuilt).toEqual(decisions())
    // then it prints doctor's report: the backends built, and the command for what is missing
    expect(r.stdout).toMatch(hasNvcc && hasCmake ? /^backends compiled: cpu, cuda$/m : /^backends compiled: cpu$/m)
    if (!hasNvcc || !hasCmake) expect(r.stdout).toMatch(/^to build the CUDA backend: npx autodidact rebuild --cuda on/m)
    const help = spawnSync(bin, ['rebuild', '--help'], { cwd: project, encoding: 'utf8' })
    expect(help.stdout).toContain(installed) // it rebuilds the installed package, wherever that is
  })
})

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? listFiles(join(dir, e.name)) : [join(dir, e.name)]))
}
