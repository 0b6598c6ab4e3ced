// A small strict argument parser: --key value, --key=value, --flag; unknown options are errors.
import { InvalidArgumentError } from '../engine/errors.js'
import { WEIGHT_STORAGES, type WeightStorage } from '../engine/options.js'
import { writeJsonAtomic } from '../util/atomic.js'
import type { WorldSpec } from '../worlds/types.js'

export interface OptionSpec {
  [name: string]: 'string' | 'number' | 'boolean'
}

export function parseArgs(argv: string[], spec: OptionSpec): { options: Record<string, string | number | boolean>; positional: string[] } {
  const options: Record<string, string | number | boolean> = {}
  const positional: string[] = []
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i]
    if (!arg.startsWith('--')) {
      positional.push(arg)
      continue
    }
    const [name, inline] = arg.slice(2).split(/=(.*)/s, 2)
    const kind = spec[name]
    if (!kind) throw new InvalidArgumentError(name, `unknown option --${name}`)
    if (kind === 'boolean') {
      options[name] = inline === undefined ? true : inline !== 'false'
      continue
    }
    const value = inline ?? argv[++i]
    if (value === undefined) throw new InvalidArgumentError(name, `--${name} needs a value`)
    if (kind === 'number') {
      const n = Number(value)
      if (!Number.isFinite(n)) throw new InvalidArgumentError(name, `--${name} needs a number, got '${value}'`)
      options[name] = n
    } else options[name] = value
  }
  return { options, positional }
}

/** The --device value: 'cpu' or 'cuda' (undefined when not given). */
export function deviceOption(options: Record<string, string | number | boolean>): 'cpu' | 'cuda' | undefined {
  if (options.device === undefined) return undefined
  const device = String(options.device)
  if (device !== 'cpu' && device !== 'cuda') throw new InvalidArgumentError('device', `--device must be cpu or cuda, got ${device}`)
  return device
}

/** The --weights value: how the CPU backend keeps the model's weights (undefined when not given). */
export function weightsOption(options: Record<string, string | number | boolean>): WeightStorage | undefined {
  if (options.weights === undefined) return undefined
  const weights = String(options.weights)
  if (!(WEIGHT_STORAGES as readonly string[]).includes(weights))
    throw new InvalidArgumentError('weights', `--weights must be one of ${WEIGHT_STORAGES.join(', ')}, got ${weights}`)
  return weights as WeightStorage
}

/** The help lines of --weights, the description starting at `column` (each command aligns its own). */
export function weightsUsage(column: number): string {
  const indent = ' '.repeat(column)
  return [
    `  --weights W`.padEnd(column) + `how the CPU keeps the weights in memory: f32 (default), bf16, f16, int8 (Q8_0-style`,
    `${indent}blocks of 32 with an f16 scale) or checkpoint (the file's dtype); below f32 halves or`,
    `${indent}quarters the bytes a decode step reads`,
  ].join('\n')
}

/** Writes `report` as JSON (atomically) where --out names a file, and says so; nothing without --out. */
export async function writeOutOption(options: Record<string, string | number | boolean>, report: unknown): Promise<void> {
  if (options.out === undefined) return
  const out = String(options.out)
  await writeJsonAtomic(out, report, 2)
  console.log(`wrote ${out}`)
}

/** The options that choose a task world (evolve, eval, select). */
export const WORLD_OPTIONS: OptionSpec = { world: 'string', data: 'string', benchmarks: 'string', thinking: 'boolean', 'no-thinking': 'boolean' }

export const WORLD_USAGE = `  --world NAME      the task: arith (the bundled toy world, default), arith-chat (its chat-model
                    prompts), math (the papers' prompts under the model's chat template, \\boxed{}
                    answers), a module path (./my-world.js) or an installed package exporting a TaskWorld
  --data FILE       JSONL problems: TTRL's unlabeled prompts, the training problems of grpo/dpo/wsft
                    ({"problem","answer"}, GSM8K, MATH/MATH-500, AIME-style; default: the bundled set)
  --benchmarks A,B  held-out sets: JSONL files with answers (math, user worlds), or L1..L5 (arith)
  --thinking, --no-thinking   Qwen3's enable_thinking in chat templates (default: the template's own)`

/** Whether the command line names any world option (a resumed run otherwise keeps its checkpoint's world). */
export function hasWorldOptions(options: Record<string, string | number | boolean>): boolean {
  return Object.keys(WORLD_OPTIONS).some((k) => options[k] !== undefined)
}

/** The world a command line asks for (--world, default arith; --data; --benchmarks a,b; --thinking / --no-thinking). */
export function worldSpecOption(options: Record<string, string | number | boolean>): WorldSpec {
  if (options.thinking === true && options['no-thinking'] === true) throw new InvalidArgumentError('thinking', '--thinking and --no-thinking contradict each other')
  const thinking = options['no-thinking'] === true ? false : options.thinking === undefined ? undefined : options.thinking === true
  const list = (v: unknown) => String(v).split(',').map((s) => s.trim()).filter(Boolean)
  return {
    world: String(options.world ?? 'arith'),
    ...(options.data === undefined ? {} : { data: String(options.data) }),
    ...(options.benchmarks === undefined ? {} : { benchmarks: list(options.benchmarks) }),
    ...(thinking === undefined ? {} : { thinking }),
  }
}
