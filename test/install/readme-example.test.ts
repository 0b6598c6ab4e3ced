// The README's "Training from the library" block runs as written (text → chat template → tokens →
// SFT steps → save → reload → generate), from a project where `autodidact` resolves to this
// checkout; so does examples/train-from-library.mjs. dist/ must be built (tsc).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { repoRoot } from './consumer.js'

const work = mkdtempSync(join(tmpdir(), 'ad-readme-'))
afterAll(() => rmSync(work, { recursive: true, force: true }))

function readmeBlock(heading: string): string {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf(`### ${heading}`))
  const block = /```js\n([\s\S]*?)```/.exec(section)
  if (!block) throw new Error(`README: no js block under "### ${heading}"`)
  return block[1]
}

describe('training from the library', () => {
  it('the README block trains, saves, reloads and answers as trained', () => {
    mkdirSync(join(work, 'node_modules'))
    symlinkSync(repoRoot, join(work, 'node_modules', 'autodidact'))
    writeFileSync(join(work, 'readme.mjs'), readmeBlock('Training from the library'))
    const r = spawnSync(process.execPath, ['readme.mjs'], { cwd: work, encoding: 'utf8' })
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout.trim()).toBe('<answer>42</answer>')
    expect(existsSync(join(work, 'my-model', 'model.safetensors'))).toBe(true)
  })

  it('examples/train-from-library.mjs: the loss falls and the reloaded folder answers as trained', () => {
    const out = join(work, 'example-model')
    const r = spawnSync(process.execPath, [join(repoRoot, 'examples', 'train-from-library.mjs'), out], { encoding: 'utf8' })
    expect(r.status, r.stderr).toBe(0)
    const result = JSON.parse(r.stdout) as { before: string; after: string; firstLoss: number; lastLoss: number; saved: string }
    expect(result.saved).toBe(out)
    expect(result.before).not.toBe('<answer>42</answer>') // it did not know the reply before training
    expect(result.lastLoss).toBeLessThan(result.firstLoss / 10)
    expect(result.after).toBe('<answer>42</answer>')
  })
})
