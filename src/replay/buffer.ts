// Confidence-prioritized replay of generated questions (COSE §3.4, Eq. 6; Appendix C: capacity
// 8K, sampled proportionally to Eq. 6).
//
// Each entry is a question with its Validator score v(q), Validator confidence c_V(q) and the
// Solver's current solve rate p(q) (COSE Eq. 1). Its priority is
//   'cose'         v·c_V·max(4p(1 − p), 0.1)       (COSE Eq. 6, default)
//   'one-minus-p'  v·c_V·max(1 − p, 0.1)            (COSE Table 5 "1 − p learnability" ablation)
//   'uniform'      1                                (COSE Table 5 "w/o priority" ablation)
// A new question has not been attempted yet; its p starts at `initialSolveRate` (0.5 by default,
// the most learnable value, so fresh questions are tried soon — the role PER's max-priority
// insertion plays).
//
// Eviction rule (when adding to a full buffer):
//   'fifo' (default)    the oldest entry goes (insertion order; updating an entry does not renew it)
//   'lowest-priority'   the entry with the smallest current priority goes, oldest first among ties
// Sampling: proportional to priority through a sum tree, O(log n) per draw, from a seeded
// xoshiro128** generator whose state is saved with the buffer, so a resumed run draws exactly
// what the uninterrupted run would have. Without replacement (default), positive-priority entries
// are drawn first; zero-priority entries are drawn uniformly only when nothing else is left.

import { readFile } from 'node:fs/promises'
import { solveRate } from '../rl/cose.js'
import { writeJsonAtomic } from '../util/atomic.js'
import { Rng, type Seed } from '../util/prng.js'
import { Registry } from '../util/registry.js'
import { MinTree, SumTree } from './sumtree.js'

export type PriorityFn = (v: number, cV: number, p: number, floor: number) => number

// COSE Eq. 6: priority(q) ∝ v(q)·c_V(q)·max(4p(q)(1 − p(q)), 0.1).
export function cosePriority(v: number, cV: number, p: number, floor = 0.1): number {
  return v * cV * Math.max(4 * p * (1 - p), floor)
}

// COSE Table 5 ablation: the learnability term 4p(1 − p) replaced by the pure difficulty 1 − p.
export function oneMinusPPriority(v: number, cV: number, p: number, floor = 0.1): number {
  return v * cV * Math.max(1 - p, floor)
}

/** Replay priority rules by name. */
export const priorityModes = new Registry<PriorityFn>('replay priority mode')
priorityModes.register('cose', cosePriority)
priorityModes.register('uniform', () => 1) // COSE Table 5 "w/o priority"
priorityModes.register('one-minus-p', oneMinusPPriority)

export type EvictionRule = 'fifo' | 'lowest-priority'

export interface ReplayConfig {
  /** Maximum number of questions (COSE Appendix C: 8K). */
  capacity: number
  /** Priority rule: 'cose' | 'one-minus-p' | 'uniform' or any name registered in `priorityModes`. */
  mode: string
  /** Floor of the learnability term (COSE Eq. 6: 0.1). */
  floor: number
  eviction: EvictionRule
  /** p(q) of a question no Solver answer has been judged for yet. */
  initialSolveRate: number
}

export const DEFAULT_REPLAY_CONFIG: Readonly<ReplayConfig> = Object.freeze({
  capacity: 8192,
  mode: 'cose',
  floor: 0.1,
  eviction: 'fifo',
  initialSolveRate: 0.5,
})

export interface ReplayEntry<T> {
  id: string
  item: T
  /** Validator score v(q) ∈ [0, 1]. */
  v: number
  /** Validator confidence c_V(q) ∈ [0, 1]. */
  cV: number
  /** Solve rate p(q) ∈ [0, 1]. */
  p: number
  /** Times p(q) was updated from judged answers. */
  updates: number
  /** Insertion sequence number (FIFO age). */
  seq: number
}

export interface ReplaySnapshot<T> {
  format: 'autodidact.replay'
  version: 1
  config: ReplayConfig
  rng: [number, number, number, number]
  nextSeq: number
  free: number[]
  entries: Array<ReplayEntry<T> & { slot: number }>
}

function checkUnit(x: number, what: string): void {
  if (!(x >= 0 && x <= 1)) throw new RangeError(`${what} must be in [0, 1], got ${x}`)
}

export class PrioritizedReplay<T = unknown> {
  readonly config: Readonly<ReplayConfig>
  private readonly priorityFn: PriorityFn
  private readonly sums: SumTree
  private readonly evict: MinTree
  private readonly slots: Array<ReplayEntry<T> | undefined>
  private readonly bySlot = new Map<string, number>()
  private free: number[]
  private rng: Rng
  private nextSeq = 0

  constructor(config: Partial<ReplayConfig> = {}, seed: Seed = 0) {
    const c: ReplayConfig = { ...DEFAULT_REPLAY_CONFIG, ...config }
    if (!Number.isInteger(c.capacity) || c.capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${c.capacity}`)
    if (!(c.floor >= 0)) throw new RangeError(`floor must be ≥ 0, got ${c.floor}`)
    checkUnit(c.initialSolveRate, 'initialSolveRate')
    if (c.eviction !== 'fifo' && c.eviction !== 'lowest-priority') throw new RangeError(`unknown eviction rule "${String(c.eviction)}"`)
    this.priorityFn = priorityModes.get(c.mode)
    this.config = Object.freeze(c)
    this.sums = new SumTree(c.capacity)
    this.evict = new MinTree(c.capacity)
    this.slots = new Array(c.capacity).fill(undefined)
    this.free = Array.from({ length: c.capacity }, (_, i) => c.capacity - 1 - i)
    this.rng = new Rng(seed)
  }

  get size(): number {
    return this.bySlot.size
  }

  get capacity(): number {
    return this.config.capacity
  }

  /** Sum of all priorities. */
  get totalPriority(): number {
    return this.sums.total
  }

  has(id: string): boolean {
    return this.bySlot.has(id)
  }

  get(id: string): ReplayEntry<T> | undefined {
    const s = this.bySlot.get(id)
    return s === undefined ? undefined : { ...(this.slots[s] as ReplayEntry<T>) }
  }

  /** Current priority of entry `id` (undefined when absent). */
  priority(id: string): number | undefined {
    const s = this.bySlot.get(id)
    return s === undefined ? undefined : this.sums.get(s)
  }

  /** Probability that one proportional draw picks `id` (0 when absent or the total is 0). */
  probability(id: string): number {
    const p = this.priority(id)
    return p === undefined || !(this.sums.total > 0) ? 0 : p / this.sums.total
  }

  /** Copies of the entries, in slot order. */
  *entries(): IterableIterator<ReplayEntry<T>> {
    for (const e of this.slots) if (e !== undefined) yield { ...e }
  }

  private computePriority(e: ReplayEntry<T>): number {
    const p = this.priorityFn(e.v, e.cV, e.p, this.config.floor)
    if (!(p >= 0) || !Number.isFinite(p)) throw new RangeError(`priority of "${e.id}" is ${p}`)
    return p
  }

  private place(slot: number, e: ReplayEntry<T>): void {
    this.slots[slot] = e
    this.bySlot.set(e.id, slot)
    this.refresh(slot)
  }

  private refresh(slot: number): void {
    const e = this.slots[slot] as ReplayEntry<T>
    const pr = this.computePriority(e)
    this.sums.set(slot, pr)
    if (this.config.eviction === 'fifo') this.evict.set(slot, e.seq, 0)
    else this.evict.set(slot, pr, e.seq)
  }

  private clearSlot(slot: number): ReplayEntry<T> {
    const e = this.slots[slot] as ReplayEntry<T>
    this.slots[slot] = undefined
    this.bySlot.delete(e.id)
    this.sums.set(slot, 0)
    this.evict.clear(slot)
    return e
  }

  /**
   * Insert question `id`, or update its item, v and c_V when it is already present (its p and
   * FIFO age are kept). Returns the entry evicted to make room, if any.
   */
  add(id: string, item: T, scores: { v: number; cV: number; p?: number }): ReplayEntry<T> | undefined {
    checkUnit(scores.v, 'v')
    checkUnit(scores.cV, 'cV')
    if (scores.p !== undefined) checkUnit(scores.p, 'p')
    const existing = this.bySlot.get(id)
    if (existing !== undefined) {
      const e = this.slots[existing] as ReplayEntry<T>
      e.item = item
      e.v = scores.v
      e.cV = scores.cV
      if (scores.p !== undefined) e.p = scores.p
      this.refresh(existing)
      return undefined
    }
    let evicted: ReplayEntry<T> | undefined
    if (this.free.length === 0) {
      const victim = this.evict.argmin()
      evicted = this.clearSlot(victim)
      this.free.push(victim)
    }
    const slot = this.free.pop() as number
    this.place(slot, {
      id,
      item,
      v: scores.v,
      cV: scores.cV,
      p: scores.p ?? this.config.initialSolveRate,
      updates: 0,
      seq: this.nextSeq++,
    })
    return evicted
  }

  /** Set p(q) of `id` and update its priority. */
  setSolveRate(id: string, p: number): void {
    checkUnit(p, 'p')
    const slot = this.bySlot.get(id)
    if (slot === undefined) throw new Error(`replay has no entry "${id}"`)
    const e = this.slots[slot] as ReplayEntry<T>
    e.p = p
    e.updates++
    this.refresh(slot)
  }

  /** Set p(q) from this round's Judge scores of the Solver answers (COSE Eq. 1). */
  recordJudgeScores(id: string, judgeScores: ArrayLike<number>): number {
    if (judgeScores.length === 0) throw new RangeError('no Judge scores to average')
    for (let i = 0; i < judgeScores.length; i++) checkUnit(judgeScores[i], `judge score [${i}]`)
    const p = solveRate(judgeScores)
    this.setSolveRate(id, p)
    return p
  }

  /** Remove `id`; returns the removed entry. */
  remove(id: string): ReplayEntry<T> | undefined {
    const slot = this.bySlot.get(id)
    if (slot === undefined) return undefined
    const e = this.clearSlot(slot)
    this.free.push(slot)
    return e
  }

  /**
   * Draw `n` entries (copies) proportionally to priority. Without replacement (default) at most `size`
   * entries come back, all distinct. With replacement, a buffer whose priorities are all zero is
   * sampled uniformly.
   */
  sample(n: number, opts: { replacement?: boolean } = {}): ReplayEntry<T>[] {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`sample size must be a non-negative integer, got ${n}`)
    const out: ReplayEntry<T>[] = []
    if (this.size === 0 || n === 0) return out
    if (opts.replacement) {
      for (let k = 0; k < n; k++) out.push({ ...(this.slots[this.drawSlot()] as ReplayEntry<T>) })
      return out
    }
    const taken: Array<[number, number]> = []
    try {
      while (out.length < n && out.length < this.size) {
        let slot: number
        if (this.sums.total > 0) {
          slot = this.sums.find(this.rng.nextFloat() * this.sums.total)
          taken.push([slot, this.sums.get(slot)])
          this.sums.set(slot, 0)
        } else {
          // only zero-priority entries remain: uniform among those not yet drawn
          const takenSet = new Set(taken.map((t) => t[0]))
          const rest: number[] = []
          for (let s = 0; s < this.slots.length; s++) if (this.slots[s] !== undefined && !takenSet.has(s)) rest.push(s)
          slot = rest[this.rng.nextInt(rest.length)]
          taken.push([slot, 0])
        }
        out.push({ ...(this.slots[slot] as ReplayEntry<T>) })
      }
    } finally {
      for (const [slot, pr] of taken) this.sums.set(slot, pr)
    }
    return out
  }

  private drawSlot(): number {
    if (this.sums.total > 0) return this.sums.find(this.rng.nextFloat() * this.sums.total)
    const live: number[] = []
    for (let s = 0; s < this.slots.length; s++) if (this.slots[s] !== undefined) live.push(s)
    return live[this.rng.nextInt(live.length)]
  }

  /** The whole state (config, entries with slots, free list, RNG state) as plain JSON data. */
  toJSON(): ReplaySnapshot<T> {
    const entries: Array<ReplayEntry<T> & { slot: number }> = []
    this.slots.forEach((e, slot) => {
      if (e !== undefined) entries.push({ ...e, slot })
    })
    return {
      format: 'autodidact.replay',
      version: 1,
      config: { ...this.config },
      rng: this.rng.state(),
      nextSeq: this.nextSeq,
      free: this.free.slice(),
      entries,
    }
  }

  /** Rebuild a buffer from `toJSON()` output, validating every field. */
  static fromJSON<T>(snap: unknown): PrioritizedReplay<T> {
    const s = snap as Partial<ReplaySnapshot<T>> | null
    const bad = (msg: string): never => {
      throw new TypeError(`invalid replay snapshot: ${msg}`)
    }
    if (s === null || typeof s !== 'object') bad('not an object')
    if (s!.format !== 'autodidact.replay') bad('format field')
    if (s!.version !== 1) bad(`unsupported version ${String(s!.version)}`)
    if (s!.config === undefined || typeof s!.config !== 'object') bad('config')
    if (!Array.isArray(s!.entries)) bad('entries')
    if (!Array.isArray(s!.free)) bad('free list')
    if (!Array.isArray(s!.rng)) bad('rng state')
    if (!Number.isInteger(s!.nextSeq) || (s!.nextSeq as number) < 0) bad('nextSeq')
    const buf = new PrioritizedReplay<T>(s!.config as ReplayConfig)
    const cap = buf.capacity
    try {
      buf.rng = Rng.fromState(s!.rng as number[])
    } catch (err) {
      bad((err as Error).message)
    }
    const used = new Set<number>()
    for (const e of s!.entries as Array<ReplayEntry<T> & { slot: number }>) {
      if (e === null || typeof e !== 'object') bad('entry is not an object')
      if (typeof e.id !== 'string') bad('entry id')
      if (!Number.isInteger(e.slot) || e.slot < 0 || e.slot >= cap || used.has(e.slot)) bad(`slot of "${e.id}"`)
      if (buf.bySlot.has(e.id)) bad(`duplicate id "${e.id}"`)
      for (const k of ['v', 'cV', 'p'] as const) {
        if (typeof e[k] !== 'number' || !(e[k] >= 0 && e[k] <= 1)) bad(`${k} of "${e.id}"`)
      }
      if (!Number.isInteger(e.seq) || e.seq < 0 || e.seq >= (s!.nextSeq as number)) bad(`seq of "${e.id}"`)
      if (!Number.isInteger(e.updates) || e.updates < 0) bad(`updates of "${e.id}"`)
      used.add(e.slot)
      buf.place(e.slot, { id: e.id, item: e.item, v: e.v, cV: e.cV, p: e.p, updates: e.updates, seq: e.seq })
    }
    const free = s!.free as number[]
    const freeSet = new Set(free)
    if (free.length + used.size !== cap || freeSet.size !== free.length) bad('free list does not match the entries')
    for (const f of free) if (!Number.isInteger(f) || f < 0 || f >= cap || used.has(f)) bad('free list slot')
    buf.free = free.slice()
    buf.nextSeq = s!.nextSeq as number
    return buf
  }

  /** Save to `path` as JSON, atomically (temp file + fsync + rename). Items must be JSON data. */
  async save(path: string): Promise<void> {
    await writeJsonAtomic(path, this.toJSON())
  }

  /** Load a buffer saved by `save`. */
  static async load<T>(path: string): Promise<PrioritizedReplay<T>> {
    const text = await readFile(path, 'utf8')
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch (err) {
      throw new TypeError(`replay file ${path} is not valid JSON: ${(err as Error).message}`)
    }
    return PrioritizedReplay.fromJSON<T>(parsed)
  }
}
