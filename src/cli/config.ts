// `autodidact config --schema METHOD [--preset NAME]`: the JSON Schema of an `evolve --config`
// file for a method (every field with its type, range and the preset's value as its default).
import { InvalidArgumentError } from '../engine/errors.js'
import { METHODS, methodNamed } from '../methods/index.js'
import { parseArgs } from './args.js'

const USAGE = `usage: autodidact config --schema METHOD [--preset NAME]

  --schema METHOD   print the JSON Schema of \`evolve --method METHOD --config FILE\` files
                    (methods: ${Object.keys(METHODS).join(', ')})
  --preset NAME     defaults from this preset (default: the method's default preset)`

export async function configCommand(argv: string[]): Promise<number> {
  const { options, positional } = parseArgs(argv, { schema: 'string', preset: 'string', help: 'boolean' })
  if (options.help) {
    console.log(USAGE)
    return 0
  }
  if (positional.length) throw new InvalidArgumentError('config', `unexpected argument '${positional[0]}'\n\n${USAGE}`)
  if (options.schema === undefined) throw new InvalidArgumentError('schema', `config needs --schema METHOD\n\n${USAGE}`)
  const name = String(options.schema)
  const method = methodNamed(name)
  if (!method) throw new InvalidArgumentError('schema', `unknown method '${name}'; available: ${Object.keys(METHODS).join(', ')}`)
  console.log(JSON.stringify(method.configSchema(options.preset === undefined ? undefined : String(options.preset)), null, 2))
  return 0
}
