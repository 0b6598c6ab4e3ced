// A fresh project that depends on the packed autodidact tarball, installed offline from the npm
// cache. npm 11 resolves a lockfile-less install from full registry documents, which `npm ci`
// does not cache; so the project gets the lockfile a consumer would commit: the tarball plus our
// own locked runtime dependencies (hoisted, as npm lays them out in a consumer), whose tarballs
// the cache holds after `npm ci`.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process'
import { createHash } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'

interface LockEntry {
  dev?: boolean
  [key: string]: unknown
}

interface OurManifest {
  name: string
  version: string
  license: string
  bin: Record<string, string>
  engines: Record<string, string>
  dependencies: Record<string, string>
  optionalDependencies: Record<string, string>
}

export const repoRoot = join(import.meta.dirname, '..', '..')

/** `npm pack` of the repository as it is (dist/ must be built: .ci/run's npm ci runs tsc). */
export function packTarball(destination: string): string {
  const r = spawnSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', destination], { cwd: repoRoot, encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`npm pack failed: ${r.stderr}`)
  const [packed] = JSON.parse(r.stdout) as { filename: string; files: { path: string }[] }[]
  return join(destination, packed.filename)
}

/** package.json and package-lock.json of a project whose only dependency is the tarball. */
export function writeConsumerProject(dir: string, tarball: string): void {
  const ours = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as OurManifest
  const lock = JSON.parse(readFileSync(join(repoRoot, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> }
  const spec = `file:${relative(dir, tarball)}`
  const integrity = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`
  const packages: Record<string, unknown> = {
    '': { name: 'consumer', version: '1.0.0', dependencies: { [ours.name]: spec } },
    [`node_modules/${ours.name}`]: {
      version: ours.version,
      resolved: spec,
      integrity,
      hasInstallScript: true,
      license: ours.license,
      dependencies: ours.dependencies,
      optionalDependencies: ours.optionalDependencies,
      bin: ours.bin,
      engines: ours.engines,
    },
  }
  for (const [path, entry] of Object.entries(lock.packages)) if (path && !entry.dev) packages[path] = entry
  const manifest = { name: 'consumer', version: '1.0.0', private: true, type: 'module', dependencies: { [ours.name]: spec } }
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2) + '\n')
  writeFileSync(join(dir, 'package-lock.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', lockfileVersion: 3, requires: true, packages }, null, 2) + '\n')
}

/** `npm i --offline <tarball>` in the project, install scripts in the foreground (their output is the log). */
export function installOffline(dir: string, tarball: string, env: Record<string, string>): SpawnSyncReturns<string> {
  return spawnSync('npm', ['i', '--offline', '--no-audit', '--no-fund', '--foreground-scripts', tarball], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    maxBuffer: 256 * 2 ** 20,
  })
}

/** Runs node in the project (so `autodidact` resolves from its node_modules); stdout must be one JSON line. */
export function nodeJson<T>(dir: string, args: string[]): T {
  const r = spawnSync(process.execPath, args, { cwd: dir, encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} exited ${r.status}: ${r.stderr}`)
  return JSON.parse(r.stdout) as T
}
