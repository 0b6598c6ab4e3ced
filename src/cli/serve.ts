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
import { signalExitCode } from '../util/signals.js'
import { deviceOption, parseArgs, weightsOption, weightsUsage } from './args.js'

export const SERVE_USAGE = `usage: autodidact serve [options]

  --model DIR          Hugging Face model folder (default: the bundled models/arith-qwen3-tiny)
  --name ID            the model id clients send as "model" (default: the folder's name)
  --host H             address to bind (default 127.0.0.1)
  --port N             port (default 8000; 0 = an ephemeral port, printed in the listening line)
  --threads N          CPU threads for the engine (default: all cores)
  --device cpu|cuda    where the model runs (default cpu)
${weightsUsage(23)}
  --max-batch N        most sequences decoded together / merged into one engine call (default 256)
  --batch-window-ms N  how long a request waits for others to batch with (default 2)
  --max-inflight N     unstreamed engine calls running at once (default: no cap; every request joins the running batch)
  --max-sequences N    sequences generating at once, streamed and unstreamed together; more wait (default 1024)
  --max-queue N        requests waiting for room; more are refused 429 (default 256)
  --max-response-mb N  largest reply a request may ask for (n × max_tokens × logprobs), in MiB (default 32)
  --api-key KEY        require "Authorization: Bearer KEY" (or set AUTODIDACT_API_KEY, which keeps it off the command line)
  --allowed-hosts H,H  Host header names accepted (default on a loopback bind: localhost, 127.0.0.1, ::1;
                       elsewhere any, with a warning); 'any' accepts all
  --request-timeout-ms N  time a client has to send a whole request (default 30000; headers: 10000)

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
    weights: 'string',
    'max-batch': 'number',
    'batch-window-ms': 'number',
    'max-inflight': 'number',
    'max-sequences': 'number',
    'max-queue': 'number',
    'max-response-mb': 'number',
    'api-key': 'string',
    'allowed-hosts': 'string',
    'request-timeout-ms': 'number',
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
  const maxSequences = intOption(options, 'max-sequences', 1, 1 << 20)
  const maxQueue = intOption(options, 'max-queue', 0, 1 << 20)
  const maxResponseMb = intOption(options, 'max-response-mb', 1, 1 << 16)
  const requestTimeoutMs = intOption(options, 'request-timeout-ms', 100, 3_600_000)
  const apiKey = options['api-key'] === undefined ? process.env.AUTODIDACT_API_KEY || undefined : String(options['api-key'])
  if (apiKey !== undefined && apiKey.length === 0) throw new InvalidArgumentError('api-key', '--api-key must not be empty')
  const hostsOption = options['allowed-hosts'] === undefined ? undefined : String(options['allowed-hosts'])
  const allowedHosts = hostsOption === undefined ? undefined : hostsOption.trim() === 'any' ? ('any' as const) : hostsOption.split(',').map((h) => h.trim()).filter((h) => h)
  if (Array.isArray(allowedHosts) && allowedHosts.length === 0) throw new InvalidArgumentError('allowed-hosts', "--allowed-hosts needs host names separated by commas, or 'any'")
  const host = String(options.host ?? '127.0.0.1')
  const dir = String(options.model ?? join(packageRoot, 'models', 'arith-qwen3-tiny'))
  if (options.name !== undefined && String(options.name).length === 0) throw new InvalidArgumentError('name', '--name must not be empty')

  const model = await loadModel(dir, { threads, device: deviceOption(options) ?? 'cpu', weights: weightsOption(options) })
  const server = createOpenAIServer({
    model,
    name: options.name === undefined ? undefined : String(options.name),
    batch: { maxBatch, windowMs, maxInflight },
    admission: { maxSequences, maxQueue },
    maxResponseBytes: maxResponseMb === undefined ? undefined : maxResponseMb << 20,
    requestTimeoutMs,
    apiKey,
    allowedHosts,
  })
  let info
  try {
    info = await server.listen(port, host)
  } catch (e) {
    await server.close().catch(() => undefined)
    model.dispose()
    throw new InvalidArgumentError('port', `cannot listen on ${host}:${port}: ${(e as Error).message}`, { cause: e })
  }
  process.stdout.write(`${LISTENING_PREFIX}${info.url}\n`)
  for (const w of info.warnings) process.stderr.write(`autodidact serve: warning: ${w}\n`)
  process.stderr.write(`autodidact serve: model '${server.name}' from ${dir}; POST /v1/completions, /v1/chat/completions; GET /v1/models, /health\n`)

  return new Promise<number>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', stop)
      process.off('SIGINT', stop)
      // a second signal while draining exits at once, with the shell's code for it (130 SIGINT, 143 SIGTERM)
      process.once(signal, () => process.exit(signalExitCode(signal)))
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
