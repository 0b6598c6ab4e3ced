#!/usr/bin/env node
// Builds the native addon wherever the package lands: a checkout of the repository, or
// node_modules/autodidact in someone's project with its dependencies hoisted or not. cmake-js,
// node-addon-api and node-gyp are found through Node's module resolution from this file, CUDA is
// built where nvcc is found, and every decision is one line on stderr ("[autodidact] …").
//
// Switches (environment; `npx autodidact rebuild` sets them from its flags):
//   AUTODIDACT_CUDA=AUTO|ON|OFF         AUTO (default): CUDA where nvcc is found; ON: required
//   AUTODIDACT_CUDA_ARCHITECTURES=LIST  CMake's CUDA architectures (default 80-real;90-real;90-virtual)
//   AUTODIDACT_NATIVE_ARCH=ON|OFF       tune CPU kernels for this machine (-march=native; default ON)
//   AUTODIDACT_BUILDER=cmake|gyp        force a builder (gyp: node-gyp, CPU only)
//   AUTODIDACT_BUILD_JOBS=N             parallel compile jobs (default 2)
import { spawnSync } from 'node:child_process'
import { accessSync, constants, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { delimiter, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  ADDON_RELATIVE_PATH,
  PLUGIN_RELATIVE_PATH,
  STAMP_RELATIVE_PATH,
  nativeSourceStamp,
  pluginFingerprint,
  pluginSourceStamp,
} from './native-stamp.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const requireHere = createRequire(import.meta.url)
const RETRY = 'npx autodidact rebuild'

function say(line) {
  console.error(`[autodidact] ${line}`)
}

/** Ends the build with one line saying why and how to retry (never a stack trace). */
function fail(line) {
  say(`native build failed: ${line}`)
  say(`after fixing that, run \`${RETRY}\` in your project (\`npm run build:native\` in a checkout)`)
  process.exit(1)
}

function oneOf(name, fallback, allowed) {
  const value = (process.env[name] || fallback).toUpperCase()
  if (!allowed.includes(value)) fail(`${name}=${process.env[name]}: expected one of ${allowed.join(', ')}`)
  return value
}

/** Every switch, checked before anything is decided or built. */
function readSwitches() {
  const jobs = process.env.AUTODIDACT_BUILD_JOBS ?? '2'
  if (!/^[1-9]\d*$/.test(jobs)) fail(`AUTODIDACT_BUILD_JOBS=${jobs}: expected a positive integer`)
  const architectures = process.env.AUTODIDACT_CUDA_ARCHITECTURES || null
  if (architectures && !/^[0-9a-z-]+(;[0-9a-z-]+)*$/.test(architectures)) fail(`AUTODIDACT_CUDA_ARCHITECTURES=${architectures}: expected a CMake list like 80-real;90-real`)
  return {
    cuda: oneOf('AUTODIDACT_CUDA', 'AUTO', ['AUTO', 'ON', 'OFF']),
    builder: oneOf('AUTODIDACT_BUILDER', 'cmake', ['CMAKE', 'GYP']),
    nativeArch: oneOf('AUTODIDACT_NATIVE_ARCH', 'ON', ['ON', 'OFF']),
    jobs,
    architectures,
  }
}

/** A package's folder and version as Node resolves it from this script (hoisted or nested), or null. */
function resolvePackage(name) {
  try {
    const manifest = requireHere.resolve(`${name}/package.json`)
    return { dir: dirname(manifest), version: JSON.parse(readFileSync(manifest, 'utf8')).version }
  } catch {
    return null
  }
}

function isExecutable(path) {
  try {
    accessSync(path, constants.X_OK)
    return statSync(path).isFile()
  } catch {
    return false
  }
}

function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) if (dir && isExecutable(join(dir, name))) return join(dir, name)
  return null
}

/** The first line of `cmd --version` that matches `pattern`, as its first capture group. */
function versionOf(cmd, pattern) {
  const r = spawnSync(cmd, ['--version'], { encoding: 'utf8' })
  return r.status === 0 ? (pattern.exec(r.stdout)?.[1] ?? '?') : null
}

/** nvcc where CMake would look for it: $CUDACXX, PATH, $CUDA_PATH / $CUDA_HOME, /usr/local/cuda. */
function findNvcc() {
  const candidates = [
    process.env.CUDACXX,
    onPath('nvcc'),
    ...['CUDA_PATH', 'CUDA_HOME'].map((v) => process.env[v] && join(process.env[v], 'bin', 'nvcc')),
    '/usr/local/cuda/bin/nvcc',
  ]
  return candidates.find((p) => p && isExecutable(p)) ?? null
}

function decideBuilder() {
  const forced = switches.builder
  const cmakeJs = resolvePackage('cmake-js')
  const cmake = onPath('cmake')
  if (forced === 'CMAKE' && cmake && cmakeJs)
    return { kind: 'cmake-js', line: `builder: cmake-js ${cmakeJs.version} (${cmakeJs.dir}) with cmake ${versionOf(cmake, /version (\S+)/)}`, cmakeJs }
  const why = forced === 'GYP' ? 'AUTODIDACT_BUILDER=gyp' : !cmake ? 'cmake is not on PATH' : 'cmake-js does not resolve from this package'
  return { kind: 'node-gyp', line: `builder: node-gyp, CPU only (${why})`, why }
}

/** node-gyp: the one npm runs scripts with ($npm_config_node_gyp), a resolvable one, or npm's own. */
function findNodeGyp() {
  const npmCli = process.env.npm_execpath ?? join(dirname(dirname(process.execPath)), 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js')
  const candidates = [process.env.npm_config_node_gyp, resolvePackage('node-gyp') && join(resolvePackage('node-gyp').dir, 'bin', 'node-gyp.js'), join(dirname(dirname(npmCli)), 'node_modules', 'node-gyp', 'bin', 'node-gyp.js')]
  return candidates.find((p) => p && existsSync(p)) ?? null
}

function decideCuda(builder) {
  const mode = switches.cuda
  if (mode === 'OFF') return { on: false, line: 'CUDA: no (AUTODIDACT_CUDA=OFF)' }
  const nvcc = findNvcc()
  const notHere = nvcc ? null : 'nvcc not found on PATH, $CUDACXX, $CUDA_PATH, $CUDA_HOME or /usr/local/cuda/bin'
  if (mode === 'ON' && (notHere || builder.kind !== 'cmake-js')) fail(`AUTODIDACT_CUDA=ON but ${notHere ?? `the CUDA build needs cmake-js (${builder.why})`}`)
  if (notHere) return { on: false, line: `CUDA: no (${notHere})` }
  if (builder.kind !== 'cmake-js') return { on: false, line: `CUDA: no (nvcc is at ${nvcc}, but only the cmake-js build compiles CUDA: ${builder.why})` }
  const architectures = switches.architectures
  return {
    on: true,
    nvcc,
    architectures,
    line: `CUDA: yes (nvcc ${versionOf(nvcc, /release (\d+\.\d+)/)} at ${nvcc}; architectures ${architectures ?? '80-real;90-real;90-virtual'} and sm_90a for the Hopper GEMM)`,
  }
}

function run(cmd, args) {
  return spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: process.env }).status === 0
}

function buildWithCmakeJs(builder, cuda) {
  const napi = resolvePackage('node-addon-api')
  if (!napi) fail('node-addon-api does not resolve from this package (it is a dependency: reinstall autodidact)')
  const defines = [
    `--CDAUTODIDACT_CUDA=${cuda.on ? 'ON' : 'OFF'}`,
    `--CDAUTODIDACT_NATIVE_ARCH=${switches.nativeArch}`,
    `--CDAUTODIDACT_NODE_ADDON_API_DIR=${napi.dir}`,
    ...(cuda.on ? [`--CDCMAKE_CUDA_COMPILER=${cuda.nvcc}`] : []),
    ...(cuda.architectures ? [`--CDCMAKE_CUDA_ARCHITECTURES=${cuda.architectures}`] : []),
  ]
  // cmake-js compile keeps a configured build's cached switches: reconfigure when they change.
  const record = join(root, 'build', 'autodidact-switches.json')
  const previous = existsSync(record) ? readFileSync(record, 'utf8') : null
  const verb = previous === JSON.stringify(defines) ? 'compile' : 'rebuild'
  const ok = run(process.execPath, [join(builder.cmakeJs.dir, 'bin', 'cmake-js'), verb, '--parallel', switches.jobs, ...defines])
  if (ok) {
    mkdirSync(dirname(record), { recursive: true })
    writeFileSync(record, JSON.stringify(defines))
  } else if (existsSync(record)) rmSync(record) // a failed configure must not be taken for a good one
  return ok
}

function buildWithNodeGyp() {
  const nodeGyp = findNodeGyp()
  if (!nodeGyp) fail('node-gyp not found ($npm_config_node_gyp, module resolution, npm\'s own); install cmake, or node-gyp')
  say(`node-gyp: ${nodeGyp}`)
  return run(process.execPath, [nodeGyp, 'rebuild', `--jobs=${switches.jobs}`, '--nodedir=' + dirname(dirname(process.execPath))])
}

/** Builds with the chosen builder; an AUTO CUDA build that fails is retried CPU-only, saying so. */
function build(builder, cuda) {
  if (builder.kind === 'node-gyp') return buildWithNodeGyp() ? cuda : null
  if (buildWithCmakeJs(builder, cuda)) return cuda
  if (cuda.on && switches.cuda === 'AUTO') {
    say('the CUDA build failed (compiler output above): building CPU only; CUDA stays off until a rebuild succeeds')
    const cpu = { on: false, line: 'CUDA: no (the CUDA build failed; see above)' }
    if (buildWithCmakeJs(builder, cpu)) return cpu
  }
  say('cmake-js failed (output above): trying node-gyp, CPU only')
  return buildWithNodeGyp() ? { on: false, line: 'CUDA: no (cmake-js failed; node-gyp builds CPU only)' } : null
}

/** A CUDA plugin this build did not produce (a CPU-only rebuild over a CUDA one) is stale: remove it. */
function removeStalePlugin(cudaBuilt) {
  const pluginPath = join(root, PLUGIN_RELATIVE_PATH)
  if (!cudaBuilt && existsSync(pluginPath)) {
    rmSync(pluginPath)
    say(`removed a stale ${pluginPath} (this build has no CUDA plugin)`)
  }
}

function writeStamp() {
  const plugin = pluginFingerprint(root)
  const stampPath = join(root, STAMP_RELATIVE_PATH)
  mkdirSync(dirname(stampPath), { recursive: true })
  const stamp = { sources: nativeSourceStamp(root), addon: ADDON_RELATIVE_PATH, plugin, pluginSources: plugin ? pluginSourceStamp(root) : null }
  writeFileSync(stampPath, JSON.stringify(stamp) + '\n')
}

const switches = readSwitches()
const builder = decideBuilder()
say(builder.line)
const planned = decideCuda(builder)
say(planned.line)
const cuda = build(builder, planned)
if (!cuda) fail('the compiler output above says why (the build needs a C++17 compiler)')
if (cuda !== planned) say(cuda.line)
const pluginPath = join(root, PLUGIN_RELATIVE_PATH)
if (cuda.on && !existsSync(pluginPath)) fail(`CMake built without the CUDA plugin although nvcc was found (no ${pluginPath})`)
removeStalePlugin(cuda.on)
writeStamp()
say(`outputs: ${join(root, ADDON_RELATIVE_PATH)}` + (cuda.on ? ` and ${pluginPath} (CUDA plugin)` : ' (CPU only: no CUDA plugin)'))
