// Segment trees over a fixed number of slots: a sum tree for proportional sampling (Schaul et al.
// 2016, prioritized experience replay) and a min tree for choosing the slot to evict. Both update
// one leaf and its O(log n) ancestors; parents are recomputed from their children, so floating-
// point error never accumulates across updates.

function nextPow2(n: number): number {
  let p = 1
  while (p < n) p *= 2
  return p
}

/** Sum tree over `capacity` non-negative priorities; `find(u)` inverts the prefix sum. */
export class SumTree {
  readonly capacity: number
  private readonly leaves: number
  private readonly tree: Float64Array

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`)
    this.capacity = capacity
    this.leaves = nextPow2(capacity)
    this.tree = new Float64Array(2 * this.leaves)
  }

  /** Sum of all priorities. */
  get total(): number {
    return this.tree[1]
  }

  get(slot: number): number {
    return this.tree[this.leaves + slot]
  }

  set(slot: number, priority: number): void {
    if (!(slot >= 0 && slot < this.capacity && Number.isInteger(slot))) throw new RangeError(`slot ${slot} out of range`)
    if (!(priority >= 0) || !Number.isFinite(priority)) throw new RangeError(`priority must be finite and ≥ 0, got ${priority}`)
    let i = this.leaves + slot
    this.tree[i] = priority
    for (i >>= 1; i >= 1; i >>= 1) this.tree[i] = this.tree[2 * i] + this.tree[2 * i + 1]
  }

  /**
   * The slot whose cumulative-priority interval contains u, for u in [0, total): slot s is found
   * with probability priority(s)/total when u is uniform. Never returns a zero-priority slot
   * while the total is positive. O(log n).
   */
  find(u: number): number {
    if (!(this.total > 0)) throw new RangeError('cannot sample from a sum tree with zero total')
    let i = 1
    while (i < this.leaves) {
      const left = 2 * i
      const lw = this.tree[left]
      const rw = this.tree[left + 1]
      if ((u < lw && lw > 0) || rw <= 0) {
        i = left
      } else {
        u -= lw
        i = left + 1
      }
    }
    return i - this.leaves
  }
}

/**
 * Min tree over (primary, secondary) keys per slot, ties on the primary key broken by the
 * secondary and then by slot; `argmin()` is O(1), updates O(log n). Unused slots hold +∞.
 */
export class MinTree {
  readonly capacity: number
  private readonly leaves: number
  private readonly k1: Float64Array
  private readonly k2: Float64Array
  private readonly tree: Int32Array

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`)
    this.capacity = capacity
    this.leaves = nextPow2(capacity)
    this.k1 = new Float64Array(this.leaves).fill(Infinity)
    this.k2 = new Float64Array(this.leaves).fill(Infinity)
    this.tree = new Int32Array(2 * this.leaves)
    for (let s = 0; s < this.leaves; s++) this.tree[this.leaves + s] = s
    for (let i = this.leaves - 1; i >= 1; i--) this.tree[i] = this.pick(this.tree[2 * i], this.tree[2 * i + 1])
  }

  private pick(a: number, b: number): number {
    if (this.k1[a] !== this.k1[b]) return this.k1[a] < this.k1[b] ? a : b
    if (this.k2[a] !== this.k2[b]) return this.k2[a] < this.k2[b] ? a : b
    return a < b ? a : b
  }

  set(slot: number, primary: number, secondary = 0): void {
    if (!(slot >= 0 && slot < this.capacity && Number.isInteger(slot))) throw new RangeError(`slot ${slot} out of range`)
    this.k1[slot] = primary
    this.k2[slot] = secondary
    for (let i = (this.leaves + slot) >> 1; i >= 1; i >>= 1) this.tree[i] = this.pick(this.tree[2 * i], this.tree[2 * i + 1])
  }

  clear(slot: number): void {
    this.set(slot, Infinity, Infinity)
  }

  /** Slot with the smallest key, or −1 when every slot is clear. */
  argmin(): number {
    const s = this.tree[1]
    return this.k1[s] === Infinity ? -1 : s
  }
}
