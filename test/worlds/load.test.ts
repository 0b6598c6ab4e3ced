// `--world NAME|./module.js|package` (src/worlds/load.ts): the built-in worlds, user modules (an
// object or a factory, default or `world` export), a typed WorldError naming the module and the
// member for one that does not export the task interface, and the world a checkpoint records.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { WorldError } from '../../src/worlds/errors.js'
import { checkpointWorldSpec, checkTaskWorld, loadWorld } from '../../src/worlds/load.js'
import { arithWorld } from '../../src/worlds/arith/world.js'

const root = mkdtempSync(join(tmpdir(), 'ad-load-world-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const here = process.cwd()

/** A module file in the temp folder; its text imports the package's sources by absolute path. */
function module(name: string, text: string): string {
  const f = join(root, name)
  writeFileSync(f, text.replaceAll('@SRC', join(here, 'dist')))
  return f
}

async function worldError(p: Promise<unknown>): Promise<WorldError> {
  const e = await p.then(
    () => null,
    (x: unknown) => x,
  )
  expect(e).toBeInstanceOf(WorldError)
  return e as WorldError
}

describe('built-in worlds', () => {
  it('arith (toy prompts), arith-chat (chat-model prompts), with their benchmarks by name', async () => {
    const toy = await loadWorld({ world: 'arith' })
    expect(toy.name).toBe('arith')
    expect(toy.data.benchmarks.map((b) => b.name)).toEqual(['L3'])
    expect(typeof toy.solve.solverPrompt('1+2')).toBe('string')
    const chat = await loadWorld({ world: 'arith-chat', benchmarks: ['L2', 'L4'] })
    expect(chat.name).toBe('arith-chat')
    expect(chat.data.benchmarks.map((b) => b.name)).toEqual(['L2', 'L4'])
    expect(chat.origin).toEqual({ world: 'arith-chat', benchmarks: ['L2', 'L4'] })
  })

  it('arith refuses what it does not take, by a typed error', async () => {
    expect((await worldError(loadWorld({ world: 'arith', data: 'x.jsonl' }))).member).toBe('data')
    expect((await worldError(loadWorld({ world: 'arith', thinking: true }))).member).toBe('thinking')
    expect((await worldError(loadWorld({ world: 'arith', benchmarks: ['L9'] }))).message).toMatch(/unknown arith benchmark 'L9'/)
  })

  it('an unknown name says what there is', async () => {
    const e = await worldError(loadWorld({ world: 'no-such-world-pkg' }))
    expect(e.message).toMatch(/unknown world \(built in: arith, arith-chat, math; or a module path/)
  })
})

describe('user modules', () => {
  it('a factory as the default export gets the world options, paths made absolute; the world records its origin', async () => {
    const f = module(
      'factory.mjs',
      `import { arithWorld } from '@SRC/worlds/arith/world.js'
       export default (options) => ({ ...arithWorld(), name: 'seen:' + JSON.stringify(options) })`,
    )
    const w = await loadWorld({ world: f, data: 'rel/data.jsonl', benchmarks: ['b.jsonl'], thinking: true }, root)
    expect(w.name).toBe(`seen:${JSON.stringify({ data: join(root, 'rel/data.jsonl'), benchmarks: [join(root, 'b.jsonl')], thinking: true })}`)
    expect(w.origin).toEqual({ world: f, data: join(root, 'rel/data.jsonl'), benchmarks: [join(root, 'b.jsonl')], thinking: true })
  })

  it('an object exported as `world`, loaded by a relative path', async () => {
    module('named.mjs', `import { arithWorld } from '@SRC/worlds/arith/world.js'\nexport const world = { ...arithWorld(), name: 'named' }`)
    expect((await loadWorld({ world: './named.mjs' }, root)).name).toBe('named')
  })

  it('a module that does not export the interface: a WorldError naming the module and what is missing', async () => {
    const none = module('none.mjs', 'export const something = 1')
    expect((await worldError(loadWorld({ world: none }))).message).toBe(`${none}: not a task world: the module has no default export and no export named 'world'`)
    const partial = module('partial.mjs', `import { arithWorld } from '@SRC/worlds/arith/world.js'\nconst w = arithWorld()\nexport default { ...w, jzero: { ...w.jzero, parseTask: undefined } }`)
    const e = await worldError(loadWorld({ world: partial }))
    expect(e.member).toBe('jzero.parseTask')
    expect(e.message).toMatch(new RegExp(`^${partial.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: not a task world: jzero\\.parseTask must be a function`))
    const notObject = module('string.mjs', 'export default "math"')
    expect((await worldError(loadWorld({ world: notObject }))).message).toMatch(/it exports string, not a TaskWorld object or a factory of one/)
    const unanswered = module('unanswered.mjs', `import { arithWorld } from '@SRC/worlds/arith/world.js'\nconst w = arithWorld()\nexport default { ...w, data: { ...w.data, benchmarks: [{ name: 'b', problems: [{ id: '1', question: 'q', answer: null }] }] } }`)
    const u = await worldError(loadWorld({ world: unanswered }))
    expect(u.member).toBe('data.benchmarks')
    expect(u.message).toMatch(/benchmark 'b' problem 0 has no question or no reference answer/)
  })

  it('a missing module file, a module that throws on import, and a factory that fails', async () => {
    expect((await worldError(loadWorld({ world: join(root, 'missing.mjs') }))).message).toMatch(/no such module/)
    const broken = module('broken.mjs', 'throw new Error("boom at import")')
    expect((await worldError(loadWorld({ world: broken }))).message).toMatch(/cannot load the module \(boom at import\)/)
    const failing = module('failing.mjs', 'export default () => { throw new Error("no data for you") }')
    expect((await worldError(loadWorld({ world: failing }))).message).toMatch(/the world factory failed: no data for you/)
  })

  it('checkTaskWorld accepts every built-in world', async () => {
    expect(checkTaskWorld(arithWorld(), 'arith')).toBeTruthy()
    expect(checkTaskWorld(await loadWorld({ world: 'math' }), 'math')).toBeTruthy()
  })

  it("the optional jzero.critique section may be absent, but a present one must be whole", () => {
    const w = arithWorld()
    expect(checkTaskWorld({ ...w, jzero: { ...w.jzero, critique: undefined } }, 'no-critique')).toBeTruthy()
    let caught: unknown
    try {
      checkTaskWorld({ ...w, jzero: { ...w.jzero, critique: { prompt: w.jzero.critique!.prompt } } }, 'half')
    } catch (e) {
      caught = e
    }
    expect(caught).toBeInstanceOf(WorldError)
    expect((caught as WorldError).member).toBe('jzero.critique.input')
    expect((caught as WorldError).message).toMatch(/^half: not a task world: jzero.critique is optional, but when present jzero.critique.input must be a function/)
  })
})

describe('the world of a checkpoint', () => {
  it('reads run_state.json world.spec; null for a checkpoint without one', async () => {
    const dir = join(root, 'ckpt')
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'run_state.json'), JSON.stringify({ world: { name: 'math', spec: { world: 'math', data: '/d.jsonl', benchmarks: ['/b.jsonl'], thinking: false } } }))
    expect(await checkpointWorldSpec(dir)).toEqual({ world: 'math', data: '/d.jsonl', benchmarks: ['/b.jsonl'], thinking: false })
    writeFileSync(join(dir, 'run_state.json'), JSON.stringify({ step: 1 }))
    expect(await checkpointWorldSpec(dir)).toBeNull()
  })
})
