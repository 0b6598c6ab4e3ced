// `autodidact serve [--model DIR] [--host H] [--port N] …`: an OpenAI-compatible HTTP server over one
// loaded model (src/serve/server.ts). When it listens it prints exactly one line on stdout,
//   autodidact serve: listening on http://HOST:PORT
// (the port is the real one when --port 0 asks for an ephemeral port), for parent processes to read;
// everything else goes to stderr. SIGTERM or SIGINT stops it cleanly: no new connections, queued and
// running requests answered 503, connections closed, the model freed, exit code 0.
import { join } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { loadModel } from '../engine/model.js'
import { packageRoot } from '../native.js'
import { createOpenAIServer, LISTENING_PREFIX } from '../serve/server.js'
import { deviceOption, parseArgs } from './args.js'

export const SERVE_USAGE = `usage: autodidact serve [options]

  --model DIR          Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --name ID            the model id clients send as "model" (default: the folder's name)
  --host H             address to bind (default 127.0.0.1)
  --port N             port (default 8000; 0 = an ephemeral port, printed in the listening line)
  --threads N          CPU threads for the engine (default: all cores)
  --device cpu|cuda    where the model runs (default cpu)
  --max-batch N        most sequences decoded together / merged into one engine call (default 256)
  --batch-window-ms N  how long a request waits for others to batch with (default 2)
  --max-inflight N     engine calls running at once (default 4)

Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health.
On start it prints one line on stdout: "autodidact serve: listening on http://HOST:PORT".`

function intOption(options: Record<string, unknown>, name: string, lo: number, hi: number): number | undefined {
  const v = options[name]
  if (v === undefined) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) throw new InvalidArgumentError(name, `--${name} must be an integer in [${lo}, ${hi}], got ${String(v)}`)
  return v
}

export async function serveCommand(argv: string[]): Promise<number> {
  const { options, positional } = parseArgs(argv, {
    model: 'string',
    name: 'string',
    host: 'string',
    port: 'number',
    threads: 'number',
    device: 'string',
    'max-batch': 'number',
    'batch-window-ms': 'number',
    'max-inflight': 'number',
    help: 'boolean',
  })
  if (options.help) {
    console.log(SERVE_USAGE)
    return 0
  }
  if (positional.length) throw new InvalidArgumentError('serve', `unexpected argument '${positional[0]}'\n\n${SERVE_USAGE}`)
  const port = intOption(options, 'port', 0, 65535) ?? 8000
  const threads = intOption(options, 'threads', 1, 1024)
  const maxBatch = intOption(options, 'max-batch', 1, 1 << 20)
  const windowMs = intOption(options, 'batch-window-ms', 0, 60_000)
  const maxInflight = intOption(options, 'max-inflight', 1, 1024)
  const host = String(options.host ?? '127.0.0.1')
  const dir = String(options.model ?? join(packageRoot, 'models', 'arith-qwen3-tiny'))
  if (options.name !== undefined && String(options.name).length === 0) throw new InvalidArgumentError('name', '--name must not be empty')

  const model = await loadModel(dir, { threads, device: deviceOption(options) ?? 'cpu' })
  const server = createOpenAIServer({ model, name: options.name === undefined ? undefined : String(options.name), batch: { maxBatch, windowMs, maxInflight } })
  let info
  try {
    info = await server.listen(port, host)
  } catch (e) {
    model.dispose()
    throw new InvalidArgumentError('port', `cannot listen on ${host}:${port}: ${(e as Error).message}`, { cause: e })
  }
  process.stdout.write(`${LISTENING_PREFIX}${info.url}\n`)
  process.stderr.write(`autodidact serve: model '${server.name}' from ${dir}; POST /v1/completions, /v1/chat/completions; GET /v1/models, /health\n`)

  return new Promise<number>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', stop)
      process.off('SIGINT', stop)
      // a second signal while draining exits at once
      process.once(signal, () => process.exit(130))
      process.stderr.write(`autodidact serve: ${signal}, shutting down\n`)
      server
        .close()
        .then(() => {
          model.dispose()
          resolve(0)
        })
        .catch((e: Error) => {
          process.stderr.write(`autodidact serve: shutdown failed: ${e.message}\n`)
          resolve(1)
        })
    }
    process.once('SIGTERM', stop)
    process.once('SIGINT', stop)
  })
}
