// `autodidact rebuild`'s flags become the build script's switches, bad ones are typed errors;
// the build script refuses a bad switch with one line and the command to retry, not a trace.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import { rebuildEnvironment } from '../../src/cli/rebuild.js'
import { repoRoot } from './consumer.js'

describe('autodidact rebuild', () => {
  it('maps its flags onto the build switches', () => {
    expect(rebuildEnvironment([])).toEqual({})
    expect(rebuildEnvironment(['--cuda', 'on', '--cuda-arch', '80-real,90-real', '--builder', 'gyp', '--jobs', '4', '--no-native-arch'])).toEqual({
      AUTODIDACT_CUDA: 'ON',
      AUTODIDACT_CUDA_ARCHITECTURES: '80-real;90-real',
      AUTODIDACT_BUILDER: 'gyp',
      AUTODIDACT_BUILD_JOBS: '4',
      AUTODIDACT_NATIVE_ARCH: 'OFF',
    })
  })

  it.each([
    [['--cuda', 'maybe'], 'cuda'],
    [['--cuda-arch', '80; rm -rf /'], 'cuda-arch'],
    [['--builder', 'make'], 'builder'],
    [['--jobs', '0'], 'jobs'],
    [['--jobs', '1.5'], 'jobs'],
    [['--fast'], 'fast'],
    [['now'], 'now'],
  ])('%j is a typed error naming %s', (argv, argument) => {
    expect(() => rebuildEnvironment(argv)).toThrowError(InvalidArgumentError)
    try {
      rebuildEnvironment(argv)
    } catch (e) {
      expect((e as InvalidArgumentError).argument).toBe(argument)
    }
  })
})

describe('scripts/build-native.mjs', () => {
  // every switch is checked before anything is decided or built, so these runs touch nothing
  it.each([['AUTODIDACT_CUDA', 'sometimes'], ['AUTODIDACT_BUILDER', 'bazel'], ['AUTODIDACT_NATIVE_ARCH', 'fast'], ['AUTODIDACT_BUILD_JOBS', 'many'], ['AUTODIDACT_CUDA_ARCHITECTURES', '80 90']])('%s=%s: one clear line and the retry command, exit 1', (name, value) => {
    const r = spawnSync(process.execPath, [join(repoRoot, 'scripts', 'build-native.mjs')], { encoding: 'utf8', env: { ...process.env, [name]: value } })
    expect(r.status).toBe(1)
    expect(r.stderr.split('\n')[0]).toMatch(new RegExp(`^\\[autodidact\\] native build failed: ${name}=${value}: expected `))
    expect(r.stderr).toContain('run `npx autodidact rebuild`')
    expect(r.stderr).not.toMatch(/\n\s+at /) // no stack trace
  })
})
