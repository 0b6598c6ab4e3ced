// The admission gate of `autodidact serve` (src/serve/admission.ts), on its own: the sequence cap,
// backfilling and its reservation, an oversized request running alone, the full queue (429), the
// queue timeout (503), a client leaving the queue, and shutdown.
import { describe, expect, it } from 'vitest'
import { Admission } from '../../src/serve/admission.js'
import { ServeRequestError } from '../../src/serve/errors.js'

const live = () => new AbortController().signal
const tick = () => new Promise((r) => setTimeout(r, 0))

/** Resolves to 'admitted' or the refusal's status; `pending` while it waits. */
function track(p: Promise<() => void>) {
  const state: { value: 'pending' | 'admitted' | number; release: (() => void) | null } = { value: 'pending', release: null }
  p.then(
    (release) => {
      state.value = 'admitted'
      state.release = release
    },
    (e: unknown) => (state.value = e instanceof ServeRequestError ? e.status : -1),
  )
  return state
}

describe('Admission', () => {
  it('admits up to maxSequences; a waiting small request backfills past a large one that does not fit', async () => {
    const gate = new Admission({ maxSequences: 8, maxQueue: 4, reserveAfterMs: 60_000 })
    const a = track(gate.acquire(6, live()))
    await tick()
    const big = track(gate.acquire(4, live())) // 6 + 4 > 8: waits
    const smallOne = track(gate.acquire(2, live())) // 6 + 2 fits: overtakes
    await tick()
    expect([a.value, big.value, smallOne.value]).toEqual(['admitted', 'pending', 'admitted'])
    expect(gate.stats.activeSequences).toBe(8)
    a.release!()
    await tick()
    expect(big.value).toBe('admitted')
    big.release!()
    smallOne.release!()
    expect(gate.stats.activeSequences).toBe(0)
  })

  it('long requests leave a reserve to short ones; past a long-waiting head only short ones pass, inside the reserve', async () => {
    const gate = new Admission({ maxSequences: 8, maxQueue: 8, shortReserve: 0.25, shortCost: 100, reserveAfterMs: 40 })
    const longA = track(gate.acquire(6, live(), 6000))
    await tick()
    const longB = track(gate.acquire(2, live(), 2000)) // 8 ≤ 8, but long ones must leave the 2-sequence reserve
    const shortC = track(gate.acquire(2, live(), 16)) // the reserve is for it
    await tick()
    expect([longA.value, longB.value, shortC.value]).toEqual(['admitted', 'pending', 'admitted'])
    expect(gate.stats).toMatchObject({ activeSequences: 8, activeShortSequences: 2 })
    shortC.release!()
    await new Promise((r) => setTimeout(r, 60)) // longB has now waited past reserveAfterMs
    const shortD = track(gate.acquire(2, live(), 16)) // inside the reserve: passes the reserved head
    const longE = track(gate.acquire(1, live(), 500)) // long: does not
    await tick()
    expect([longB.value, shortD.value, longE.value]).toEqual(['pending', 'admitted', 'pending'])
    longA.release!()
    await tick()
    expect([longB.value, longE.value]).toEqual(['admitted', 'admitted'])
  })

  it('once the oldest has waited reserveAfterMs nothing overtakes it but inside the reserve (no starvation)', async () => {
    const gate = new Admission({ maxSequences: 8, maxQueue: 4, reserveAfterMs: 30 })
    const a = track(gate.acquire(6, live()))
    await tick()
    const big = track(gate.acquire(4, live()))
    await new Promise((r) => setTimeout(r, 50))
    const smallOne = track(gate.acquire(2, live()))
    await tick()
    expect([big.value, smallOne.value]).toEqual(['pending', 'pending'])
    a.release!()
    await tick()
    expect([big.value, smallOne.value]).toEqual(['admitted', 'admitted'])
  })

  it('a request larger than the cap runs alone', async () => {
    const gate = new Admission({ maxSequences: 4, maxQueue: 4 })
    const huge = track(gate.acquire(100, live()))
    await tick()
    expect(huge.value).toBe('admitted')
    const next = track(gate.acquire(1, live()))
    await tick()
    expect(next.value).toBe('pending')
    huge.release!()
    await tick()
    expect(next.value).toBe('admitted')
  })

  it('a full queue refuses with 429 at once; a long wait with 503; a client that leaves frees its place', async () => {
    const gate = new Admission({ maxSequences: 1, maxQueue: 2, queueTimeoutMs: 40 })
    const a = track(gate.acquire(1, live()))
    const leaving = new AbortController()
    const q1 = track(gate.acquire(1, leaving.signal))
    const q2 = track(gate.acquire(1, live()))
    const q3 = track(gate.acquire(1, live()))
    await tick()
    expect([a.value, q1.value, q2.value, q3.value]).toEqual(['admitted', 'pending', 'pending', 429])
    leaving.abort(new Error('left'))
    await tick()
    expect(q1.value).toBe(-1)
    expect(gate.stats.waiting).toBe(1)
    while (q2.value === 'pending') await new Promise((r) => setTimeout(r, 10))
    expect(q2.value).toBe(503)
    expect(gate.stats).toMatchObject({ refusedQueueFull: 1, refusedTimeout: 1, waiting: 0, activeSequences: 1 })
    a.release!()
    a.release!() // releasing twice gives back once
    expect(gate.stats.activeSequences).toBe(0)
  })

  it('close() refuses the waiting (503) and anything after', async () => {
    const gate = new Admission({ maxSequences: 1, maxQueue: 2 })
    track(gate.acquire(1, live()))
    const waiting = track(gate.acquire(1, live()))
    await tick()
    gate.close()
    await tick()
    expect(waiting.value).toBe(503)
    const late = track(gate.acquire(1, live()))
    await tick()
    expect(late.value).toBe(503)
  })
})
