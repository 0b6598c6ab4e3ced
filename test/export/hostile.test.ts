// Regression tests of issue 23, finding 9: exports write temporaries beside their targets and
// rename them all at the end (a write failing partway — here a file-size limit, as a full disk —
// leaves the folder as it was); a FIFO, device node or symbolic link as the target is refused, never
// replaced; a killed export leaves no hidden temporary (SIGTERM: removed at once; kill -9: removed by
// the next export); every error names the file in words, never a bare errno.
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { OutputFileError } from '../../src/engine/errors.js'
import { removeStaleTemps, tempPathFor } from '../../src/util/atomic.js'
import { exportGguf } from '../../src/export/gguf.js'
import { exportOnnx } from '../../src/export/onnx.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url))
const BUNDLED = fileURLToPath(new URL('../../models/arith-qwen3-tiny', import.meta.url))

let root: string
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'ad-export-hostile-'))
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

async function rejection(p: Promise<unknown>): Promise<Error> {
  return p.then(
    () => {
      throw new Error('expected a rejection')
    },
    (e: unknown) => e as Error,
  )
}

/** Hidden temporaries (tempPathFor's `.name.pid.tag.tmp`) anywhere under `dir`. */
function temps(dir: string): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((n) => /(^|\/)\..*\.\d+\.[0-9a-f]{12}\.tmp$/.test(n))
}

/** Runs the CLI with a file-size limit of `kib` KiB (writes past it fail with EFBIG, as on a full disk). */
function cliWithFileLimit(kib: number, args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync('bash', ['-c', `ulimit -f ${kib}; exec "${process.execPath}" "${MAIN}" "$@"`, 'autodidact', ...args], { cwd: ROOT, encoding: 'utf8' })
  return { status: r.status, stderr: r.stderr }
}

function expectNotRegular(e: Error, path: string): void {
  expect(e).toBeInstanceOf(OutputFileError)
  expect((e as OutputFileError).reason).toBe('not-regular')
  expect(e.message).toContain(path)
}

describe('finding 9: targets that are not regular files are refused, never replaced', () => {
  it('GGUF --out a FIFO, a symbolic link, a folder', async () => {
    const fifo = join(root, 'fifo.gguf')
    execFileSync('mkfifo', [fifo])
    expectNotRegular(await rejection(exportGguf(BUNDLED, fifo, { dtype: 'f32' })), fifo)
    expect(lstatSync(fifo).isFIFO()).toBe(true)

    const target = join(root, 'real.txt')
    writeFileSync(target, 'keep me')
    const link = join(root, 'link.gguf')
    symlinkSync(target, link)
    expectNotRegular(await rejection(exportGguf(BUNDLED, link, { dtype: 'f32' })), link)
    expect(lstatSync(link).isSymbolicLink()).toBe(true)
    expect(readFileSync(target, 'utf8')).toBe('keep me')

    const folder = join(root, 'folder.gguf')
    mkdirSync(folder)
    expectNotRegular(await rejection(exportGguf(BUNDLED, folder, { dtype: 'f32' })), folder)
    expect(temps(root)).toEqual([])
  })

  it('GGUF --out a device node (as root, renaming over it would replace the device)', async () => {
    const dev = join(root, 'null')
    try {
      execFileSync('mknod', [dev, 'c', '1', '3'], { stdio: 'ignore' })
    } catch {
      return // no CAP_MKNOD here; the FIFO case covers the same check
    }
    const e = await rejection(exportGguf(BUNDLED, dev, { dtype: 'f32' }))
    expectNotRegular(e, dev)
    expect(e.message).toContain('character device')
    expect(lstatSync(dev).isCharacterDevice()).toBe(true)
  })

  it('ONNX --out a FIFO, or a folder whose model file is a symbolic link', async () => {
    const fifo = join(root, 'onnx-fifo')
    execFileSync('mkfifo', [fifo])
    expectNotRegular(await rejection(exportOnnx(BUNDLED, fifo, { dtype: 'f32' })), fifo)
    const out = join(root, 'onnx-link')
    mkdirSync(join(out, 'onnx'), { recursive: true })
    const elsewhere = join(root, 'elsewhere.onnx')
    writeFileSync(elsewhere, 'not yours')
    symlinkSync(elsewhere, join(out, 'onnx', 'model.onnx'))
    expectNotRegular(await rejection(exportOnnx(BUNDLED, out, { dtype: 'f32' })), join(out, 'onnx', 'model.onnx'))
    expect(readFileSync(elsewhere, 'utf8')).toBe('not yours')
    expect(readdirSync(out).sort()).toEqual(['onnx']) // nothing else written
  })
})

describe('finding 9: a write that fails partway leaves the output as it was', () => {
  it('ONNX into a new folder: no half-written folder, no temporary, the error names the file in words', () => {
    const out = join(root, 'onnx-full')
    const r = cliWithFileLimit(1024, ['export', '--format', 'onnx', '--model', BUNDLED, '--out', out])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain(join(out, 'onnx', 'model.onnx'))
    expect(r.stderr).toContain('size this process may write')
    expect(r.stderr).not.toMatch(/\bEFBIG: /) // words, not the raw errno message (the code may follow them in parentheses)
    expect(existsSync(out)).toBe(false) // the folders it created are gone again
  })

  it('ONNX over an earlier export: every earlier file unchanged, no temporary', async () => {
    const out = join(root, 'onnx-again')
    await exportOnnx(BUNDLED, out, { dtype: 'f16' })
    const before = new Map(readdirSync(out, { recursive: true, encoding: 'utf8' }).filter((f) => !lstatSync(join(out, f)).isDirectory()).map((f) => [f, readFileSync(join(out, f))]))
    const r = cliWithFileLimit(1024, ['export', '--format', 'onnx', '--model', BUNDLED, '--out', out, '--dtype', 'f32'])
    expect(r.status).toBe(2)
    expect(temps(out)).toEqual([])
    const after = readdirSync(out, { recursive: true, encoding: 'utf8' }).filter((f) => !lstatSync(join(out, f)).isDirectory())
    expect(after.sort()).toEqual([...before.keys()].sort())
    for (const [f, bytes] of before) expect(readFileSync(join(out, f)).equals(bytes)).toBe(true)
  })

  it('GGUF: no partial file, no temporary', () => {
    const out = join(root, 'full.gguf')
    const r = cliWithFileLimit(1024, ['export', '--format', 'gguf', '--model', BUNDLED, '--out', out])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain(out)
    expect(existsSync(out)).toBe(false)
    expect(temps(root)).toEqual([])
  })
})

describe('finding 9: a killed export leaves no hidden temporary', () => {
  let big: string
  beforeAll(async () => {
    big = (await writeTinyModel(join(root, 'big'), { family: 'llama', dtype: 'F32', seed: 3, hiddenSize: 256, intermediate: 1024, heads: 4, kvHeads: 4, layers: 12 })).dir
  })

  it('SIGTERM mid-write removes the temporary and exits 143', async () => {
    const dir = join(root, 'sigterm')
    mkdirSync(dir)
    const out = join(dir, 'model.gguf')
    const child = spawn(process.execPath, [MAIN, 'export', '--format', 'gguf', '--model', big, '--out', out], { cwd: ROOT, stdio: 'ignore' })
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
    let seen = false
    let finished = false
    void exited.then(() => (finished = true))
    while (!finished && !seen) {
      seen = temps(dir).length > 0
      if (!seen) await new Promise((r) => setImmediate(r))
    }
    expect(seen).toBe(true) // caught it mid-write
    child.kill('SIGTERM')
    expect(await exited).toBe(143)
    expect(temps(dir)).toEqual([])
    expect(existsSync(out)).toBe(false)
  })

  it('after a kill -9, the next export removes what the dead process left (and only that)', async () => {
    const dir = join(root, 'sigkill')
    mkdirSync(dir)
    const out = join(dir, 'model.gguf')
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' })
    const deadPid = Number(dead.stdout)
    const stale = tempPathFor(out).replace(`.${process.pid}.`, `.${deadPid}.`)
    writeFileSync(stale, 'half a file')
    const mine = tempPathFor(out) // this (live) process's: not touched
    writeFileSync(mine, 'in progress')
    expect(await removeStaleTemps(out)).toEqual([stale])
    expect(existsSync(mine)).toBe(true)
    rmSync(mine)
    writeFileSync(stale, 'half a file')
    await exportGguf(BUNDLED, out, { dtype: 'f32' })
    expect(existsSync(stale)).toBe(false)
    expect(temps(dir)).toEqual([])
  })
})
