// `autodidact config --schema METHOD`: the JSON Schema of evolve --config files, with the preset's
// values as defaults; typed errors for an unknown method or a missing --schema. And a wording
// check of issue 21: no message anywhere says "a integer".
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { configCommand } from '../../src/cli/config.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import { METHODS } from '../../src/methods/index.js'

async function printed(argv: string[]): Promise<{ code: number; text: string }> {
  const lines: string[] = []
  const log = vi.spyOn(console, 'log').mockImplementation((s: string) => void lines.push(s))
  try {
    return { code: await configCommand(argv), text: lines.join('\n') }
  } finally {
    log.mockRestore()
  }
}

describe('autodidact config --schema', () => {
  it('prints each method\'s JSON Schema, defaults from its preset', async () => {
    for (const m of Object.values(METHODS)) {
      const { code, text } = await printed(['--schema', m.name])
      expect(code).toBe(0)
      const schema = JSON.parse(text) as { $schema: string; properties: Record<string, { default?: unknown }> }
      expect(schema.$schema).toMatch(/json-schema\.org/)
      expect(schema.properties.steps.default).toBe(m.presets[m.defaultPreset].steps)
      expect(schema).toEqual(m.configSchema())
    }
    const paper = JSON.parse((await printed(['--schema', 'cose', '--preset', 'paper'])).text) as { properties: { steps: { default: number } } }
    expect(paper.properties.steps.default).toBe(METHODS.cose.presets.paper.steps)
  })

  it('unknown method, missing --schema, stray arguments: typed errors naming what is available', async () => {
    await expect(configCommand(['--schema', 'nope'])).rejects.toThrow(/unknown method 'nope'; available: .*cose/)
    await expect(configCommand([])).rejects.toThrow(InvalidArgumentError)
    await expect(configCommand(['cose'])).rejects.toThrow(/unexpected argument 'cose'/)
    await expect(configCommand(['--schema', 'cose', '--preset', 'nope'])).rejects.toThrow(/unknown preset 'nope'/)
  })
})

describe('wording', () => {
  const sources = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []))

  it('no message says "a integer" (issue 21)', () => {
    const root = join(import.meta.dirname, '..', '..', 'src')
    const offenders = sources(root).filter((f) => /\ba integer\b/i.test(readFileSync(f, 'utf8')))
    expect(offenders).toEqual([])
  })
})
