// A small strict argument parser: --key value, --key=value, --flag; unknown options are errors.
import { InvalidArgumentError } from '../engine/errors.js'

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
