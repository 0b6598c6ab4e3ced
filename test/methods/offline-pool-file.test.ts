// A response pool file read back from disk: anything that is not a pool this version wrote is a
// ConfigError naming the file, before any pair is drawn from it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/engine/errors.js'
import { readPool } from '../../src/methods/offline/pool.js'

const root = mkdtempSync(join(tmpdir(), 'ad-pool-file-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const prompt = { id: 'p0', question: '1+2', responses: [], wrong: [] }
const pool = (over: Record<string, unknown>) => ({ format: 'autodidact.uid-pool', version: 3, model: 'm', world: 'arith', config: {}, calibration: {}, prompts: [prompt], stats: {}, ...over })

async function read(name: string, text: string) {
  const file = join(root, name)
  writeFileSync(file, text)
  return readPool(file)
}

describe('readPool', () => {
  it('reads a version-3 pool and a version-2 one (no wrong responses)', async () => {
    expect((await read('v3.json', JSON.stringify(pool({})))).prompts[0].wrong).toEqual([])
    const { wrong: _, ...v2prompt } = prompt
    expect((await read('v2.json', JSON.stringify(pool({ version: 2, prompts: [v2prompt] })))).version).toBe(2)
  })

  it.each([
    ['not JSON', '{"format": "autodidact.uid-pool", '],
    ['another version', JSON.stringify(pool({ version: 4 }))],
    ['a version-3 prompt without its wrong responses', JSON.stringify(pool({ prompts: [{ id: 'p0', question: '1+2', responses: [] }] }))],
    ['a version-3 prompt whose wrong responses are not a list', JSON.stringify(pool({ prompts: [{ ...prompt, wrong: 'x' }] }))],
    ['a null prompt', JSON.stringify(pool({ prompts: [null] }))],
  ])('refuses %s with a ConfigError naming the file', async (what, text) => {
    const name = `${what.replace(/\W+/g, '-')}.json`
    const error = await read(name, text).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as Error).message).toContain(join(root, name))
  })
})
