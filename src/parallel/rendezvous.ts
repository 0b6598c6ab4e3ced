// The TCP rendezvous of `evolve --gpus N [--nodes M --rendezvous HOST:PORT]`: how rank 0's NCCL
// unique id reaches every other rank before ncclCommInitRank (llm.c's sequence: ncclGetUniqueId on
// rank 0 → broadcast → ncclCommInitRank; NCCL then does all tensor traffic itself).
//
// Rank 0 listens on HOST:PORT. Every other rank connects (retrying while rank 0 is not up yet) and
// says who it is: { rank, worldSize }, one JSON line. Rank 0 checks it (a rank of this world, said
// once, the same world size), waits for all N, then sends each its answer: { id, worldSize }. A
// wrong world size or a rank said twice fails the whole rendezvous on every rank present (the launch
// is misconfigured); a rank that has not joined when the timeout passes fails it too, named.
import { createServer, connect, type Server, type Socket } from 'node:net'
import { AutodidactError, InvalidArgumentError } from '../engine/errors.js'

export type RendezvousFailure =
  | 'timeout' // a rank did not join (rank 0), or rank 0 did not answer (the others), in time
  | 'world-size' // a rank said another world size than rank 0's
  | 'duplicate-rank' // two processes said the same rank
  | 'bad-rank' // a rank outside [1, N)
  | 'address' // rank 0 cannot listen on HOST:PORT, or another rank cannot connect to it (not a retried error)
  | 'closed' // rank 0 closed the connection without an answer

/** The ranks could not meet: `kind` says why, `missing` names the ranks that did not join (rank 0's view). */
export class RendezvousError extends AutodidactError {
  constructor(
    readonly kind: RendezvousFailure,
    message: string,
    readonly missing: readonly number[] = [],
  ) {
    super('RENDEZVOUS', message)
  }
}

export interface RendezvousAddress {
  host: string
  port: number
}

/** HOST:PORT (an IPv6 host in brackets: [::1]:29500) → its parts, or InvalidArgumentError. */
export function parseRendezvous(text: string): RendezvousAddress {
  const m = /^(?:\[([^\]]+)\]|([^:\s]+)):(\d+)$/.exec(text)
  const port = m ? Number(m[3]) : NaN
  if (!m || !Number.isInteger(port) || port < 1 || port > 65535)
    throw new InvalidArgumentError('rendezvous', `--rendezvous must be HOST:PORT with a port in 1..65535 (node 0's address, reachable from every node), got '${text}'`)
  return { host: m[1] ?? m[2], port }
}

export interface RendezvousOptions {
  address: RendezvousAddress
  rank: number
  worldSize: number
  /** How long rank 0 waits for every rank, and each rank for rank 0's answer. */
  timeoutMs: number
  /** Rank 0: the bytes to hand out (its NCCL unique id). Ignored on the other ranks. */
  id?: Uint8Array
  /** The other ranks: how often a refused connection is retried while rank 0 is not up yet. */
  retryMs?: number
}

export interface RendezvousResult {
  /** Rank 0's id, on every rank. */
  id: Uint8Array
  worldSize: number
}

/** Rank 0 hands out its id; every other rank receives it. Every rank returns the same id and world size, or throws RendezvousError. */
export function rendezvous(o: RendezvousOptions): Promise<RendezvousResult> {
  if (!Number.isInteger(o.worldSize) || o.worldSize < 1) throw new InvalidArgumentError('worldSize', `the world size must be an integer ≥ 1, got ${o.worldSize}`)
  if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.worldSize) throw new InvalidArgumentError('rank', `rank ${o.rank} is not a rank of a ${o.worldSize}-rank world`)
  if (o.rank === 0) {
    if (!o.id) throw new InvalidArgumentError('id', 'rank 0 hands out an id: pass it')
    return o.worldSize === 1 ? Promise.resolve({ id: o.id, worldSize: 1 }) : serve(o, o.id)
  }
  return join(o)
}

const where = (a: RendezvousAddress) => (a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`)

const line = (value: object) => JSON.stringify(value) + '\n'

/** A line's JSON object, or null when it is not one. */
function parseObject(text: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(text)
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null
  } catch {
    return null
  }
}

/** Calls `onLine` with each complete line a socket receives. */
function readLines(socket: Socket, onLine: (text: string) => void): void {
  let buffered = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk: string) => {
    buffered += chunk
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const text = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      onLine(text)
    }
    if (buffered.length > 64 * 1024) socket.destroy() // not one of our ranks
  })
}

// ---------------------------------------------------------------- rank 0

function serve(o: RendezvousOptions, id: Uint8Array): Promise<RendezvousResult> {
  const answer = line({ id: Buffer.from(id).toString('base64'), worldSize: o.worldSize })
  return new Promise((resolve, reject) => {
    const joined = new Map<number, Socket>()
    const pending = new Set<Socket>()
    let settled = false
    const server: Server = createServer((socket) => {
      pending.add(socket)
      socket.on('error', () => undefined) // a rank that went away: it is missing, or it failed the rendezvous itself
      socket.on('close', () => {
        pending.delete(socket)
        for (const [rank, s] of joined) if (s === socket && !settled) joined.delete(rank) // it may come back
      })
      readLines(socket, (text) => hello(socket, text))
    })
    const timer = setTimeout(() => {
      const missing = Array.from({ length: o.worldSize - 1 }, (_, i) => i + 1).filter((r) => !joined.has(r))
      fail(new RendezvousError('timeout', `rendezvous at ${where(o.address)}: ${missing.length === 1 ? 'rank' : 'ranks'} ${missing.join(', ')} of ${o.worldSize} did not join within ${o.timeoutMs} ms`, missing))
    }, o.timeoutMs)

    function hello(socket: Socket, text: string): void {
      const m = parseObject(text) as { rank?: unknown; worldSize?: unknown } | null
      if (!m) return void socket.destroy() // not one of our ranks
      const rank = m.rank
      if (typeof rank !== 'number' || !Number.isInteger(rank) || typeof m.worldSize !== 'number') return void socket.destroy()
      if (m.worldSize !== o.worldSize)
        return fail(new RendezvousError('world-size', `rendezvous at ${where(o.address)}: rank ${rank} says the world has ${m.worldSize} ranks, rank 0 says ${o.worldSize}`), socket)
      if (rank < 1 || rank >= o.worldSize) return fail(new RendezvousError('bad-rank', `rendezvous at ${where(o.address)}: rank ${rank} is not a rank of this ${o.worldSize}-rank world`), socket)
      if (joined.has(rank)) return fail(new RendezvousError('duplicate-rank', `rendezvous at ${where(o.address)}: two processes say they are rank ${rank} of ${o.worldSize}`), socket)
      joined.set(rank, socket)
      if (joined.size === o.worldSize - 1) succeed()
    }

    function finish(): void {
      settled = true
      clearTimeout(timer)
      server.close()
    }

    function succeed(): void {
      finish()
      for (const s of joined.values()) s.end(answer)
      for (const s of pending) if (![...joined.values()].includes(s)) s.destroy()
      resolve({ id: Uint8Array.from(id), worldSize: o.worldSize })
    }

    // Every rank present hears why (the offending one too), then rank 0 fails.
    function fail(error: RendezvousError, offender?: Socket): void {
      if (settled) return
      finish()
      const told = line({ error: error.message, kind: error.kind, missing: error.missing })
      for (const s of new Set([...pending, ...(offender ? [offender] : [])])) s.end(told)
      reject(error)
    }

    server.on('error', (e: NodeJS.ErrnoException) =>
      fail(new RendezvousError('address', `rank 0 cannot listen for the rendezvous at ${where(o.address)}: ${e.code ?? e.message}${e.code === 'EADDRINUSE' ? ' (the port is taken: choose another with --rendezvous HOST:PORT)' : ''}`)),
    )
    server.listen(o.address.port, o.address.host)
  })
}

// ---------------------------------------------------------------- the other ranks

/** Connection errors of a rank 0 not up yet (or a name not resolvable yet): tried again until the timeout. */
const RETRIED = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT']

function join(o: RendezvousOptions): Promise<RendezvousResult> {
  const retryMs = o.retryMs ?? 200
  return new Promise((resolve, reject) => {
    let settled = false
    let socket: Socket | null = null
    let lastError = ''
    const timer = setTimeout(
      () =>
        settle(
          new RendezvousError('timeout', `rank ${o.rank} of ${o.worldSize}: rank 0 did not answer at ${where(o.address)} within ${o.timeoutMs} ms${lastError ? ` (last try: ${lastError})` : ''}; is it running, and is the address node 0's?`),
        ),
      o.timeoutMs,
    )

    function settle(outcome: RendezvousResult | RendezvousError): void {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket?.destroy()
      if (outcome instanceof RendezvousError) reject(outcome)
      else resolve(outcome)
    }

    function attempt(): void {
      if (settled) return
      let answered = false
      const s = connect(o.address.port, o.address.host)
      socket = s
      s.on('connect', () => s.write(line({ rank: o.rank, worldSize: o.worldSize })))
      readLines(s, (text) => {
        answered = true
        const m = parseObject(text) as { id?: unknown; worldSize?: unknown; error?: unknown; kind?: unknown; missing?: unknown } | null
        if (!m) return settle(new RendezvousError('closed', `rank ${o.rank}: the rendezvous at ${where(o.address)} answered something that is not rank 0's: ${text.slice(0, 80)}`))
        if (typeof m.error === 'string') return settle(new RendezvousError((m.kind as RendezvousFailure) ?? 'closed', m.error, Array.isArray(m.missing) ? (m.missing as number[]) : []))
        if (typeof m.id !== 'string' || m.worldSize !== o.worldSize)
          return settle(new RendezvousError('world-size', `rank ${o.rank}: rank 0 answered for a world of ${String(m.worldSize)} ranks, this rank was started for ${o.worldSize}`))
        settle({ id: new Uint8Array(Buffer.from(m.id, 'base64')), worldSize: o.worldSize })
      })
      s.on('error', (e: NodeJS.ErrnoException) => {
        lastError = e.code ?? e.message
        // rank 0 not listening yet (or its host not resolvable yet): 'close' tries again, until the timeout
        if (!answered && !RETRIED.includes(e.code ?? '')) settle(new RendezvousError('address', `rank ${o.rank} of ${o.worldSize} cannot reach rank 0 at ${where(o.address)}: ${lastError}`))
      })
      s.on('close', () => {
        if (settled || answered) return
        setTimeout(attempt, retryMs) // refused, or rank 0 closed before answering (it restarts its wait): again
      })
    }
    attempt()
  })
}
