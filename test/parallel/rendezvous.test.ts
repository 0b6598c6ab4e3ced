// The TCP rendezvous (src/parallel/rendezvous.ts, from dist/) with each rank a process of its own:
// 3 ranks exchange a random 128-byte id (the others started before rank 0, so they retry); a rank
// that never joins makes rank 0 and the joined ranks fail within the timeout, naming it; a rank said
// twice and a wrong world size are refused at once on every rank present; a stray connection is
// dropped; a rank without rank 0
// fails within its timeout; HOST:PORT is parsed or refused with a typed error.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { connect, createServer } from 'node:net'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseRendezvous } from '../../src/parallel/rendezvous.js'

const FIXTURE = join(import.meta.dirname, 'fixtures', 'rendezvous-rank.mjs')

interface Outcome {
  rank: number
  worldSize?: number
  id?: string
  error?: { code: string; kind: string; message: string; missing: number[] }
  seconds: number
}

/** A port free now on 127.0.0.1. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

function rank(args: (string | number)[], delayMs = 0): Promise<Outcome> {
  return new Promise((resolve, reject) =>
    setTimeout(() => {
      const child = spawn(process.execPath, [FIXTURE, ...args.map(String)], { stdio: ['ignore', 'pipe', 'pipe'] })
      let out = ''
      let err = ''
      child.stdout.on('data', (d: Buffer) => (out += d.toString()))
      child.stderr.on('data', (d: Buffer) => (err += d.toString()))
      child.on('error', reject)
      child.on('close', (code) => {
        if (code !== 0 || !out.trim()) return reject(new Error(`rank ${args[0]} exited ${code}: ${err}`))
        resolve(JSON.parse(out.trim()) as Outcome)
      })
    }, delayMs),
  )
}

describe('the TCP rendezvous', () => {
  it('3 ranks: every rank gets rank 0\'s random 128-byte id and the world size, the others started first', async () => {
    const port = await freePort()
    const id = randomBytes(128).toString('hex')
    const results = await Promise.all([rank([0, 3, port, 20_000, id], 600), rank([1, 3, port, 20_000]), rank([2, 3, port, 20_000])])
    for (const [r, res] of results.entries()) {
      expect(res.error, JSON.stringify(res.error)).toBeUndefined()
      expect(res).toMatchObject({ rank: r, worldSize: 3, id })
    }
    expect(id).toHaveLength(256)
  }, 60_000)

  it('a stray connection that is not a rank (not JSON, JSON null, no rank) is dropped: the ranks still meet', async () => {
    const port = await freePort()
    const id = randomBytes(128).toString('hex')
    const r0 = rank([0, 2, port, 20_000, id])
    for (const text of ['not json\n', 'null\n', '[1]\n', '{"hello":1}\n']) {
      await new Promise<void>((resolve) => {
        const tryOnce = () => {
          const s = connect(port, '127.0.0.1')
          s.on('connect', () => s.write(text))
          s.on('close', () => resolve()) // rank 0 hangs up on it
          s.on('error', () => setTimeout(tryOnce, 50)) // rank 0 not listening yet
        }
        tryOnce()
      })
    }
    const [a, b] = await Promise.all([r0, rank([1, 2, port, 20_000])])
    expect(a).toMatchObject({ rank: 0, worldSize: 2, id })
    expect(b).toMatchObject({ rank: 1, worldSize: 2, id })
  }, 60_000)

  it('a rank that never joins: rank 0 and the joined rank fail within the timeout, naming it', async () => {
    const port = await freePort()
    const timeoutMs = 1500
    const [r0, r1] = await Promise.all([rank([0, 3, port, timeoutMs, randomBytes(128).toString('hex')]), rank([1, 3, port, 20_000])])
    expect(r0.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'timeout', missing: [2] })
    expect(r0.error!.message).toMatch(new RegExp(`rendezvous at 127\\.0\\.0\\.1:${port}: rank 2 of 3 did not join within 1500 ms`))
    expect(r0.seconds).toBeGreaterThanOrEqual(timeoutMs / 1000 - 0.05)
    expect(r0.seconds).toBeLessThan(timeoutMs / 1000 + 3)
    // rank 1 is told by rank 0 (its own timeout is far longer)
    expect(r1.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'timeout', missing: [2] })
    expect(r1.seconds).toBeLessThan(10)
  }, 60_000)

  it('a rank said twice is refused at once, on every rank present', async () => {
    const port = await freePort()
    const results = await Promise.all([rank([0, 3, port, 20_000, randomBytes(128).toString('hex')]), rank([1, 3, port, 20_000]), rank([1, 3, port, 20_000], 300)])
    for (const res of results) {
      expect(res.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'duplicate-rank' })
      expect(res.error!.message).toMatch(/two processes say they are rank 1 of 3/)
      expect(res.seconds).toBeLessThan(10) // not the 20 s timeout
    }
  }, 60_000)

  it('a wrong world size is refused on both sides', async () => {
    const port = await freePort()
    const [r0, r1] = await Promise.all([rank([0, 2, port, 20_000, randomBytes(128).toString('hex')]), rank([1, 3, port, 20_000])])
    for (const res of [r0, r1]) {
      expect(res.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'world-size' })
      expect(res.error!.message).toMatch(/rank 1 says the world has 3 ranks, rank 0 says 2/)
      expect(res.seconds).toBeLessThan(10)
    }
  }, 60_000)

  it('without rank 0, a rank fails within its timeout naming the address', async () => {
    const port = await freePort()
    const r1 = await rank([1, 2, port, 1000])
    expect(r1.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'timeout' })
    expect(r1.error!.message).toMatch(new RegExp(`rank 1 of 2: rank 0 did not answer at 127\\.0\\.0\\.1:${port} within 1000 ms \\(last try: ECONNREFUSED\\)`))
    expect(r1.seconds).toBeGreaterThanOrEqual(0.95)
    expect(r1.seconds).toBeLessThan(4)
  }, 60_000)

  it('rank 0 on a port that is taken fails at once with the address', async () => {
    const busy = createServer()
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r))
    const port = (busy.address() as { port: number }).port
    try {
      const r0 = await rank([0, 2, port, 20_000, randomBytes(128).toString('hex')])
      expect(r0.error).toMatchObject({ code: 'RENDEZVOUS', kind: 'address' })
      expect(r0.error!.message).toMatch(/EADDRINUSE/)
    } finally {
      busy.close()
    }
  }, 60_000)
})

describe('parseRendezvous', () => {
  it('reads HOST:PORT, [IPv6]:PORT, and refuses anything else with a typed error', () => {
    expect(parseRendezvous('10.0.0.1:29500')).toEqual({ host: '10.0.0.1', port: 29500 })
    expect(parseRendezvous('node0.cluster:1')).toEqual({ host: 'node0.cluster', port: 1 })
    expect(parseRendezvous('[::1]:65535')).toEqual({ host: '::1', port: 65535 })
    for (const bad of ['', 'host', 'host:', ':29500', 'host:0', 'host:65536', 'host:29500x', '::1:29500', 'a b:1'])
      expect(() => parseRendezvous(bad), bad).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', argument: 'rendezvous' }))
  })
})
