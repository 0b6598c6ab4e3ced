// `autodidact serve` as a child process, as remote ensemble variants run it: it prints one
// listening line on stdout, answers on the ephemeral port, and exits 0 on SIGTERM.
// Needs the compiled CLI (dist/, built by `npx tsc -p .`; `npm ci` builds it through `prepare`).
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { listeningUrl } from '../../src/serve/server.js'
import { get, post } from './helpers.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url))
const LINE = /^autodidact serve: listening on (http:\/\/127\.0\.0\.1:(\d+))$/m

let child: ChildProcess | null = null
afterEach(() => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  child = null
})

/** Spawns the server and resolves with its URL once the listening line appears on stdout. */
function start(args: string[]): Promise<{ url: string; stdout: () => string; stderr: () => string; exited: Promise<number | null> }> {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build with \`npx tsc -p .\` first`)
  const proc = spawn(process.execPath, [MAIN, 'serve', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  child = proc
  let out = ''
  let err = ''
  proc.stderr!.on('data', (c) => (err += c))
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line after 30 s; stderr: ${err}`)), 30_000)
    proc.stdout!.on('data', (c) => {
      out += c
      const m = LINE.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve({ url: m[1], stdout: () => out, stderr: () => err, exited })
      }
    })
    exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`serve exited with ${code} before listening; stderr: ${err}`))
    })
  })
}

describe('autodidact serve (child process)', () => {
  it('prints the listening line for --port 0, serves the bundled model, and exits 0 on SIGTERM', async () => {
    const s = await start(['--port', '0', '--threads', '1', '--name', 'toy', '--max-batch', '32'])
    const port = Number(LINE.exec(s.stdout())![2])
    expect(port).toBeGreaterThan(0)
    expect(s.stdout().trim().split('\n')).toHaveLength(1) // the line is all of stdout
    expect(listeningUrl(s.stdout())).toBe(s.url)
    expect(listeningUrl('starting\n')).toBeNull()
    expect((await get(s.url, '/health')).json).toMatchObject({ status: 'ok', model: 'toy' })
    const r = await post(s.url, '/v1/completions', { model: 'toy', prompt: 'Solve: 6*7\n', max_tokens: 30, temperature: 0 })
    expect(r.status).toBe(200)
    expect(r.json.choices[0].text).toBe('<think>6*7=42</think><answer>42</answer>')
    const t = Date.now()
    child!.kill('SIGTERM')
    expect(await s.exited).toBe(0)
    expect(Date.now() - t).toBeLessThan(5_000)
    expect(s.stderr()).toContain('SIGTERM, shutting down')
  })

  it('--weights bf16 serves the model kept at 2 bytes a weight; a bad --weights is refused with the choices', async () => {
    const s = await start(['--port', '0', '--threads', '1', '--name', 'toy', '--weights', 'bf16'])
    const r = await post(s.url, '/v1/completions', { model: 'toy', prompt: 'Solve: 6*7\n', max_tokens: 30, temperature: 0 })
    expect(r.status).toBe(200)
    expect(r.json.choices[0].text).toMatch(/<answer>/)
    child!.kill('SIGTERM')
    expect(await s.exited).toBe(0)
    const proc = spawn(process.execPath, [MAIN, 'serve', '--port', '0', '--weights', 'f8'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    let err = ''
    proc.stderr.on('data', (c) => (err += c))
    expect(await new Promise<number | null>((resolve) => proc.on('exit', resolve))).toBe(2)
    expect(err).toContain('weights must be one of f32, bf16, f16, int8, checkpoint, got f8')
  })

  it('fails with a clear message and exit code 2 on a bad option', async () => {
    const proc = spawn(process.execPath, [MAIN, 'serve', '--port', '70000'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    let err = ''
    proc.stderr.on('data', (c) => (err += c))
    const code = await new Promise<number | null>((resolve) => proc.on('exit', resolve))
    expect(code).toBe(2)
    expect(err).toContain('--port must be an integer in [0, 65535]')
  })
})
