// The collective as TypeScript sees it: one handle per process over native/collective/collective.h
// (MPI on the CPU, NCCL on GPUs, "single" for one process), whose operations run one at a time in
// the order they were called — every rank must issue the same collectives in the same order, so
// none may overtake another — plus JSON-valued gathers and broadcasts for host-side data
// (rollouts, metrics), typed arrays included.
import { InvalidArgumentError } from '../engine/errors.js'
import { nativeAddon, type NativeCollective, type NativeCollectiveLibrary } from '../native.js'
import { parseRendezvous, rendezvous } from './rendezvous.js'

export type CollectiveBackend = 'mpi' | 'nccl' | 'single'

/** Every collective operation's timeout unless --collective-timeout says otherwise. */
export const DEFAULT_COLLECTIVE_TIMEOUT_MS = 600_000

export interface OpenCollectiveOptions {
  backend: CollectiveBackend
  timeoutMs?: number
  /** nccl: this process's rank and the world size (MPI learns them from mpirun). */
  rank?: number
  worldSize?: number
  /** nccl: HOST:PORT where rank 0 hands out the unique id. */
  rendezvous?: string
}

export class Collective {
  readonly backend: CollectiveBackend
  readonly rank: number
  readonly worldSize: number
  readonly timeoutMs: number
  private tail: Promise<unknown> = Promise.resolve()

  constructor(readonly native: NativeCollective) {
    const d = native.describe()
    this.backend = d.backend
    this.rank = d.rank
    this.worldSize = d.worldSize
    this.timeoutMs = d.timeoutMs
  }

  /** Runs `op` after every operation issued before it (a failed one does not stop the queue: its error is its caller's). */
  serial<T>(op: () => Promise<T>): Promise<T> {
    const run = this.tail.then(op, op)
    this.tail = run.catch(() => undefined)
    return run
  }

  allReduce(data: Float32Array, op: 'sum' | 'avg' = 'sum'): Promise<Float32Array> {
    return this.serial(() => this.native.allReduce(data, op))
  }

  barrier(): Promise<void> {
    return this.serial(() => this.native.barrier())
  }

  /** Every rank's `value` (JSON, typed arrays kept), in rank order. */
  async allGatherJson<T>(value: T): Promise<T[]> {
    const parts = await this.serial(() => this.native.allGather(encodeJson(value)))
    return parts.map((p) => decodeJson<T>(p))
  }

  /** Root's `value` on every rank (the others' is ignored). */
  async broadcastJson<T>(value: T, root = 0): Promise<T> {
    return decodeJson<T>(await this.serial(() => this.native.broadcast(this.rank === root ? encodeJson(value) : new Uint8Array(0), root)))
  }

  /** Closes the collective after the operations in flight (MPI_Finalize on MPI: every rank calls it). */
  async close(): Promise<void> {
    await this.tail
    this.native.close()
  }
}

export async function openCollective(o: OpenCollectiveOptions): Promise<Collective> {
  const addon = await nativeAddon()
  const timeoutMs = o.timeoutMs ?? DEFAULT_COLLECTIVE_TIMEOUT_MS
  if (o.backend !== 'nccl') return new Collective(await addon.collective.open({ backend: o.backend, timeoutMs }))
  // NCCL: rank 0's unique id reaches every rank over the TCP rendezvous, then ncclCommInitRank
  const rank = o.rank ?? 0
  const worldSize = o.worldSize ?? 1
  addon.collective.requireLibrary('nccl') // every rank fails at once where there is no NCCL, none waits for the others
  let id: Uint8Array
  if (worldSize === 1) id = addon.collective.ncclUniqueId() // a 1-rank world meets no one
  else {
    if (o.rendezvous === undefined) throw new InvalidArgumentError('rendezvous', `the NCCL collective of ${worldSize} ranks needs a rendezvous HOST:PORT`)
    ;({ id } = await rendezvous({ address: parseRendezvous(o.rendezvous), rank, worldSize, timeoutMs, id: rank === 0 ? addon.collective.ncclUniqueId() : undefined }))
  }
  return new Collective(await addon.collective.open({ backend: 'nccl', timeoutMs, rank, worldSize, uniqueId: id }))
}

/** Where MPI and NCCL were found, or why not (`doctor`'s collectives line). */
export async function collectiveLibraries(): Promise<{ mpi: NativeCollectiveLibrary; nccl: NativeCollectiveLibrary }> {
  return (await nativeAddon()).collective.libraries()
}

/** The contiguous share [start, end) of `count` items that rank `rank` of `size` takes (the first ranks take one more when it does not divide). */
export function shareOf(count: number, rank: number, size: number): { start: number; end: number } {
  return { start: Math.floor((rank * count) / size), end: Math.floor(((rank + 1) * count) / size) }
}

// ---------------------------------------------------------------- JSON with typed arrays
// Float32 values survive JSON exactly (a float32 is a double, and JSON writes doubles round-trip).

const TYPED = { Float32Array, Int32Array, Float64Array, Uint8Array } as const
type TypedName = keyof typeof TYPED

function encodeJson(value: unknown): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify(value, function (key, v) {
      const raw = (this as Record<string, unknown>)[key] // before toJSON: the typed array itself
      for (const name of Object.keys(TYPED) as TypedName[]) if (raw instanceof TYPED[name]) return { $typed: name, values: Array.from(raw as ArrayLike<number>, nonFinite) }
      return typeof v === 'number' ? nonFinite(v) : v
    }),
  )
}

function decodeJson<T>(bytes: Uint8Array): T {
  return JSON.parse(new TextDecoder().decode(bytes), (_key, v) => {
    if (v && typeof v === 'object' && typeof v.$typed === 'string' && Array.isArray(v.values) && v.$typed in TYPED)
      return TYPED[v.$typed as TypedName].from((v.values as (number | { $number: string })[]).map(finite))
    if (typeof v === 'object' && v !== null && typeof v.$number === 'string') return finite(v)
    return v
  }) as T
}

// JSON has no NaN or ±Infinity: they travel as { $number: 'NaN' }.
function nonFinite(x: number): number | { $number: string } {
  return Number.isFinite(x) ? x : { $number: String(x) }
}

function finite(x: number | { $number: string }): number {
  return typeof x === 'number' ? x : Number(x.$number)
}
