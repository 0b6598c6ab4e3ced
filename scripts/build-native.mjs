#!/usr/bin/env node
// Builds the native addon: cmake-js (CUDA when nvcc is found) with node-gyp as the CPU-only
// fallback. AUTODIDACT_CUDA=AUTO|ON|OFF and AUTODIDACT_NATIVE_ARCH=ON|OFF pass through to CMake.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
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
const jobs = String(Math.max(1, Number(process.env.AUTODIDACT_BUILD_JOBS ?? 2)))

function run(cmd, args) {
  console.error(`[autodidact] ${cmd} ${args.join(' ')}`)
  const result = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: process.env })
  return result.status === 0
}

function hasCmake() {
  return spawnSync('cmake', ['--version'], { stdio: 'ignore' }).status === 0
}

function buildWithCmakeJs() {
  const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js')
  const defines = [
    `--CDAUTODIDACT_CUDA=${process.env.AUTODIDACT_CUDA ?? 'AUTO'}`,
    `--CDAUTODIDACT_NATIVE_ARCH=${process.env.AUTODIDACT_NATIVE_ARCH ?? 'ON'}`,
  ]
  // cmake-js compile keeps a configured build's cached switches: reconfigure when they change.
  const record = join(root, 'build', 'autodidact-switches.json')
  const previous = existsSync(record) ? readFileSync(record, 'utf8') : null
  const verb = previous === JSON.stringify(defines) ? 'compile' : 'rebuild'
  const ok = run(process.execPath, [cmakeJs, verb, '--parallel', jobs, ...defines])
  if (ok) {
    mkdirSync(dirname(record), { recursive: true })
    writeFileSync(record, JSON.stringify(defines))
  }
  return ok
}

function buildWithNodeGyp() {
  const npmDir = dirname(dirname(process.env.npm_execpath ?? '/usr/lib/node_modules/npm/bin/npm-cli.js'))
  const nodeGyp = join(npmDir, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js')
  return run(process.execPath, [nodeGyp, 'rebuild', `--jobs=${jobs}`, '--nodedir=' + dirname(dirname(process.execPath))])
}

// AUTODIDACT_BUILDER=gyp forces the CPU-only node-gyp build (binding.gyp).
const forceGyp = process.env.AUTODIDACT_BUILDER === 'gyp'
let usedGyp = false
const built = (!forceGyp && hasCmake() && buildWithCmakeJs()) || ((usedGyp = true), buildWithNodeGyp())
if (!built) {
  console.error('[autodidact] native build failed: see the compiler output above.')
  process.exit(1)
}
// A CUDA plugin this build does not produce (a CPU-only rebuild over a CUDA one) is stale: remove it.
const pluginPath = join(root, PLUGIN_RELATIVE_PATH)
const marker = join(root, 'build', 'autodidact-cuda-plugin.txt')
const configuredWithPlugin = existsSync(marker) ? readFileSync(marker, 'utf8').trim() === 'ON' : null
const cpuOnly = usedGyp || configuredWithPlugin === false
if (existsSync(pluginPath) && cpuOnly) {
  rmSync(pluginPath)
  console.error(`[autodidact] removed a stale ${PLUGIN_RELATIVE_PATH} (this build has no CUDA plugin)`)
}
const plugin = pluginFingerprint(root)
const stampPath = join(root, STAMP_RELATIVE_PATH)
mkdirSync(dirname(stampPath), { recursive: true })
const stamp = { sources: nativeSourceStamp(root), addon: ADDON_RELATIVE_PATH, plugin, pluginSources: plugin ? pluginSourceStamp(root) : null }
writeFileSync(stampPath, JSON.stringify(stamp) + '\n')
console.error(`[autodidact] built ${ADDON_RELATIVE_PATH}` + (plugin ? ` and ${PLUGIN_RELATIVE_PATH}` : ' (CPU only: no CUDA plugin)'))
