// `--world NAME|./module.js|package`: the built-in worlds (arith, arith-chat, math) by name, or a
// user's module that exports the task interface — a TaskWorld object, or a factory that makes one
// from the command line's world options (`--data`, `--benchmarks`, `--thinking`), as the default
// export or as `world`. A module's export is checked member by member before any model loads: a
// missing role or parser is a WorldError naming the module and the member.
//
// The loaded world records how it was made (`origin`, a WorldSpec with absolute paths), so a
// resumed run loads the same world again from its checkpoint.
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { isAbsolute, join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { readJsonObject } from '../methods/common/run-folder.js'
import { arithWorld } from './arith/world.js'
import { WorldError } from './errors.js'
import { loadMathWorld } from './math/world.js'
import type { TaskWorld, WorldSpec } from './types.js'

/** The worlds `--world` knows by name. */
export const BUILTIN_WORLDS = ['arith', 'arith-chat', 'math'] as const

/** What a world module's factory is given: the command line's world options, paths made absolute. */
export interface WorldOptions {
  data?: string
  benchmarks?: string[]
  thinking?: boolean
}

/** A world module's export: the world, or a factory of it. */
export type WorldFactory = (options: WorldOptions) => TaskWorld | Promise<TaskWorld>

/** The members every TaskWorld has (a module's export is checked against them). */
const REQUIRED_MEMBERS: Record<string, readonly string[]> = {
  cose: ['proposerPrompt', 'parseProposal', 'validatorPrompt', 'parseScore', 'solverPrompt', 'solverFormat', 'judgePrompt'],
  rzero: ['challengerPrompt', 'parseQuestion', 'solverPrompt'],
  jzero: ['challengerPrompt', 'parseTask', 'solverPrompt', 'decomposePrompt', 'parseDecomposition', 'subtaskPrompt', 'parseSubtaskAnswer', 'composePrompt', 'amplifiedResponse', 'judgeInput'],
  solve: ['solverPrompt', 'poolPrompt'],
  answers: ['parse', 'answer', 'equivalent', 'repetitionText'],
  verifier: ['verify', 'referenceAnswer'],
  data: ['unlabeledPrompts', 'trainingProblems'],
}

/** The members of the optional jzero.critique section (a critiquing Judge's roles). */
const OPTIONAL_CRITIQUE_MEMBERS = ['prompt', 'input'] as const

function isModulePath(name: string): boolean {
  return name.startsWith('.') || isAbsolute(name) || /\.(m?js|cjs)$/.test(name)
}

/**
 * Checks that `x` implements the task interface; throws a WorldError naming `source` and the
 * first missing or mistyped member.
 */
export function checkTaskWorld(x: unknown, source: string): TaskWorld {
  const fail = (member: string | null, why: string): never => {
    throw new WorldError(source, member, `${source}: not a task world: ${why} (see the TaskWorld type in src/worlds/types.ts)`)
  }
  if (x === null || typeof x !== 'object') fail(null, `it exports ${x === null ? 'null' : typeof x}, not a TaskWorld object or a factory of one`)
  const w = x as Record<string, unknown>
  if (typeof w.name !== 'string' || !w.name) fail('name', 'name must be a non-empty string')
  for (const [section, members] of Object.entries(REQUIRED_MEMBERS)) {
    const part = w[section]
    if (part === null || typeof part !== 'object') fail(section, `it has no '${section}' section`)
    for (const m of members) if (typeof (part as Record<string, unknown>)[m] !== 'function') fail(`${section}.${m}`, `${section}.${m} must be a function`)
  }
  const critique = (w.jzero as Record<string, unknown>).critique as Record<string, unknown> | null | undefined
  if (critique !== undefined)
    for (const m of OPTIONAL_CRITIQUE_MEMBERS) if (typeof critique?.[m] !== 'function') fail(`jzero.critique.${m}`, `jzero.critique is optional, but when present jzero.critique.${m} must be a function`)
  const data = w.data as Record<string, unknown>
  if (!Array.isArray(data.levels) || !data.levels.every((l) => Number.isInteger(l))) fail('data.levels', 'data.levels must be an array of integer levels ([] for none)')
  const benchmarks = data.benchmarks
  if (!Array.isArray(benchmarks)) fail('data.benchmarks', 'data.benchmarks must be an array of { name, problems }')
  for (const b of benchmarks as unknown[]) {
    const bb = b as { name?: unknown; problems?: unknown } | null
    if (typeof bb?.name !== 'string' || !Array.isArray(bb.problems)) fail('data.benchmarks', 'each benchmark needs a name and a problems array')
    const unanswered = (bb!.problems as { answer?: unknown; question?: unknown }[]).findIndex((p) => typeof p?.question !== 'string' || typeof p?.answer !== 'string')
    if (unanswered >= 0) fail('data.benchmarks', `benchmark '${bb!.name as string}' problem ${unanswered} has no question or no reference answer (a benchmark needs answers)`)
  }
  return x as TaskWorld
}

/** Imports a module by path or package name (resolved from the working directory, then from this package). */
async function importWorldModule(name: string, cwd: string): Promise<Record<string, unknown>> {
  let url: string
  if (isModulePath(name)) {
    const file = resolve(cwd, name)
    if (!existsSync(file)) throw new WorldError(name, null, `--world ${name}: no such module (${file})`)
    url = pathToFileURL(file).href
  } else {
    try {
      url = pathToFileURL(createRequire(join(cwd, 'package.json')).resolve(name)).href
    } catch {
      url = name // an ES-only package: let import() resolve it from here
    }
  }
  try {
    return (await import(url)) as Record<string, unknown>
  } catch (e) {
    const unknownName = !isModulePath(name) && (e as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND'
    const why = unknownName ? `unknown world (built in: ${BUILTIN_WORLDS.join(', ')}; or a module path like ./my-world.js, or an installed package)` : `cannot load the module (${(e as Error).message})`
    throw new WorldError(name, null, `--world ${name}: ${why}`, { cause: e })
  }
}

/** The world a module exports: `default` or `world`, an object or a factory called with the world options. */
async function moduleWorld(name: string, spec: WorldSpec, cwd: string): Promise<TaskWorld> {
  const mod = await importWorldModule(name, cwd)
  const exported = mod.default ?? mod.world
  if (exported === undefined) throw new WorldError(name, null, `${name}: not a task world: the module has no default export and no export named 'world'`)
  let made: unknown = exported
  if (typeof exported === 'function') {
    try {
      made = await (exported as WorldFactory)({ data: spec.data, benchmarks: spec.benchmarks, thinking: spec.thinking })
    } catch (e) {
      if (e instanceof Error && 'code' in e) throw e // a typed error of the world's own (a DataError naming a file)
      throw new WorldError(name, null, `${name}: the world factory failed: ${(e as Error).message}`, { cause: e })
    }
  }
  return checkTaskWorld(made, name)
}

/** `spec` with its file paths absolute (how a run records its world). */
export function absoluteSpec(spec: WorldSpec, cwd = process.cwd()): WorldSpec {
  const arith = spec.world === 'arith' || spec.world === 'arith-chat'
  return {
    world: isModulePath(spec.world) ? resolve(cwd, spec.world) : spec.world,
    ...(spec.data === undefined ? {} : { data: resolve(cwd, spec.data) }),
    ...(spec.benchmarks === undefined ? {} : { benchmarks: arith ? spec.benchmarks : spec.benchmarks.map((b) => resolve(cwd, b)) }),
    ...(spec.thinking === undefined ? {} : { thinking: spec.thinking }),
  }
}

/** Loads the world a spec names (see the file comment); the result's `origin` is the absolute spec. */
export async function loadWorld(spec: WorldSpec, cwd = process.cwd()): Promise<TaskWorld> {
  const s = absoluteSpec(spec, cwd)
  let world: TaskWorld
  if (s.world === 'arith' || s.world === 'arith-chat') {
    if (s.data !== undefined) throw new WorldError(s.world, 'data', `--world ${s.world} generates its own problems: --data is for the math world and user worlds`)
    if (s.thinking !== undefined) throw new WorldError(s.world, 'thinking', `--world ${s.world}: --thinking switches a chat template's thinking mode (the math world and user worlds)`)
    try {
      world = arithWorld({ style: s.world === 'arith' ? 'toy' : 'chat', benchmarks: s.benchmarks })
    } catch (e) {
      throw new WorldError(s.world, 'benchmarks', `--world ${s.world}: ${(e as Error).message}`, { cause: e })
    }
  } else if (s.world === 'math') world = await loadMathWorld({ data: s.data, benchmarks: s.benchmarks, thinking: s.thinking })
  else world = await moduleWorld(s.world, s, cwd)
  // the world as made, with its origin (prototype-linked, so a class instance keeps its members)
  return Object.assign(Object.create(world) as TaskWorld, { origin: s })
}

/** The world spec a checkpoint recorded (null: a world built in code, or a checkpoint from before worlds were plug-ins). */
export async function checkpointWorldSpec(checkpointDir: string): Promise<WorldSpec | null> {
  const file = join(checkpointDir, 'run_state.json')
  if (!existsSync(file)) return null
  const spec = ((await readJsonObject(file)).world as { spec?: unknown } | undefined)?.spec
  if (spec === null || spec === undefined || typeof spec !== 'object') return null
  const s = spec as Record<string, unknown>
  if (typeof s.world !== 'string') return null
  return {
    world: s.world,
    ...(typeof s.data === 'string' ? { data: s.data } : {}),
    ...(Array.isArray(s.benchmarks) && s.benchmarks.every((b) => typeof b === 'string') ? { benchmarks: s.benchmarks as string[] } : {}),
    ...(typeof s.thinking === 'boolean' ? { thinking: s.thinking } : {}),
  }
}
