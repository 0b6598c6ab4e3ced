// `serve` requests join the model's running batch (src/engine/scheduler.ts): a streamed and an
// unstreamed request that arrive while a long request decodes share its engine steps, and each
// still gets exactly the samples it gets alone.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Model } from '../../src/engine/model.js'
import { createOpenAIServer } from '../../src/serve/server.js'
import { parseSse, post, serveBundledModel, type ServedModel, stopServing, until } from './helpers.js'

let served: ServedModel | undefined
let model: Model
let base: string

beforeAll(async () => {
  served = await serveBundledModel({ maxBodyBytes: 4096, limits: { maxN: 16 } })
  ;({ model, base } = served)
})
afterAll(() => stopServing(served))

const C = '/v1/completions'

describe('serve on the continuous-batching engine', () => {
  it('a streamed and an unstreamed request join a running request’s steps and get their solo samples', async () => {
    const short = { prompt: 'Solve: 3+4\n', max_tokens: 12, temperature: 1, seed: 5, ignore_eos: true, logprobs: 2 }
    const soloPlain = await post(base, C, short)
    const soloStream = await post(base, C, { ...short, seed: 6, stream: true })
    expect(soloPlain.status).toBe(200)

    const stepsBefore = model.schedulerStats()!.steps
    const sharedBefore = model.schedulerStats()!.sharedSteps
    const long = post(base, C, { prompt: 'Solve: 1+1\n', n: 8, max_tokens: 400, temperature: 1, seed: 1, ignore_eos: true })
    await until(() => model.schedulerStats()!.steps > stepsBefore + 3, 10_000, 'the long request to decode')
    const [plain, streamed] = await Promise.all([post(base, C, short), post(base, C, { ...short, seed: 6, stream: true })])
    const longReply = await long
    expect([plain.status, streamed.status, longReply.status]).toEqual([200, 200, 200])
    // both joined the long request's steps instead of waiting for it
    expect(model.schedulerStats()!.sharedSteps - sharedBefore).toBeGreaterThanOrEqual(12)
    expect(plain.json.choices[0].text).toBe(soloPlain.json.choices[0].text)
    expect(plain.json.choices[0].logprobs).toEqual(soloPlain.json.choices[0].logprobs)
    const text = (body: string) => parseSse(body).events.map((e) => e.choices[0].text ?? '').join('')
    expect(parseSse(streamed.body).done).toBe(true)
    expect(text(streamed.body)).toBe(text(soloStream.body))
    expect(longReply.json.choices).toHaveLength(8)
  })

  it('8 concurrent requests, 2 streamed and 6 not, are served by one running batch, each exactly as it is served alone', async () => {
    // A window long enough that all 8 arrive inside it: they enter the engine in the same tick.
    const joined = createOpenAIServer({ model, maxBodyBytes: 4096, batch: { windowMs: 300 } })
    const url = (await joined.listen(0)).url
    try {
      // Different max_tokens keep the unstreamed ones in separate engine calls: 8 calls in all (more
      // than the 4 concurrent calls the batcher used to allow).
      const bodies = Array.from({ length: 8 }, (_, i) => ({ prompt: `Solve: ${i + 2}+${i}\n`, max_tokens: 40 + i, temperature: 1, seed: 20 + i, ignore_eos: true, logprobs: 1, stream: i % 4 === 3 }))
      const alone = []
      for (const b of bodies) alone.push(await post(url, C, b))
      const largestBefore = model.schedulerStats()!.largestStepCalls
      expect(largestBefore).toBeLessThan(8)
      expect(joined.stats.peakRunning).toBe(1)

      const together = await Promise.all(bodies.map((b) => post(url, C, b)))
      expect(together.map((r) => r.status)).toEqual(Array(8).fill(200))
      expect(joined.stats.peakRunning).toBe(8)
      expect(model.schedulerStats()!.largestStepCalls).toBe(8) // one step carried rows of all 8
      expect(joined.stats.running).toBe(0)
      expect(joined.stats.streamed).toBe(4)
      expect(joined.stats.requests).toBe(12)
      const streamed = (body: string) => {
        const events = parseSse(body).events
        return { text: events.map((e) => e.choices[0].text).join(''), logprobs: events.map((e) => e.choices[0].logprobs), finish: events.at(-1).choices[0].finish_reason }
      }
      bodies.forEach((b, i) => {
        if (b.stream) {
          const got = streamed(together[i].body)
          expect(got).toEqual(streamed(alone[i].body))
          expect(got.text.length).toBeGreaterThan(0)
          expect(got.finish).toBe('length')
        } else {
          expect(together[i].json.choices).toEqual(alone[i].json.choices)
          expect(together[i].json.usage.completion_tokens).toBe(b.max_tokens)
        }
      })
    } finally {
      await joined.close()
    }
  })
})
