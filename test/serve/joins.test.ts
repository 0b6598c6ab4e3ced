// `serve` requests join the model's running batch (src/engine/scheduler.ts): a streamed and an
// unstreamed request that arrive while a long request decodes share its engine steps, and each
// still gets exactly the samples it gets alone.
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadModel, type Model } from '../../src/engine/model.js'
import { createOpenAIServer, type OpenAIServer } from '../../src/serve/server.js'
import { parseSse, post, until } from './helpers.js'

const MODEL_DIR = fileURLToPath(new URL('../../models/arith-qwen3-tiny', import.meta.url))

let model: Model
let server: OpenAIServer
let base: string

beforeAll(async () => {
  model = await loadModel(MODEL_DIR, { threads: 1 })
  server = createOpenAIServer({ model, maxBodyBytes: 4096, limits: { maxN: 16 } })
  base = (await server.listen(0)).url
})
afterAll(async () => {
  await server?.close()
  model?.dispose()
})

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
})
