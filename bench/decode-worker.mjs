// One measurement of bench/decode.mjs in its own process (so each engine's memory is its own and
// runs can alternate): load the model, warm up, then time greedy generation of 1 token (prefill +
// one sampled token) and of 1 + N tokens for B prompts of P tokens; prints one JSON line.
//   prefill tok/s = B·P / t(1 token);  decode tok/s = B·N / (t(1 + N tokens) − t(1 token))
// Each time is the fastest of a few runs (t(1) of 3, t(1 + N) of 2): on a shared machine the least
// disturbed run; a disturbed t(1) would otherwise corrupt the difference.
// Usage (from bench/decode.mjs): node bench/decode-worker.mjs '{"engine":"ours"|"llama.cpp", ...}'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = fileURLToPath(new URL('.', import.meta.url))
const job = JSON.parse(process.argv[2])
const { batch: B, promptTokens: P, newTokens: N, threads, vocab } = job

/** B distinct deterministic prompts of P token ids (ids past the specials, inside the vocabulary). */
function prompts() {
  let s = 12345
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % (vocab - 64)) + 32
  return Array.from({ length: B }, () => Array.from({ length: P }, next))
}

const seconds = async (fn, runs) => {
  let best = Infinity
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9)
  }
  return best
}

async function ours() {
  const { loadModel } = await import(pathToFileURL(`${here}../dist/index.js`).href)
  const model = await loadModel(job.modelDir, { threads, weights: job.weights ?? 'f32' })
  const ps = prompts()
  const gen = (n) => model.generate(ps, { temperature: 0, maxTokens: n, stopTokenIds: [] })
  await gen(2) // warm-up
  const t1 = await seconds(() => gen(1), 3)
  const tN = await seconds(() => gen(1 + N), 2)
  const weightBytes = model.handle.describe().parameterBytes
  model.dispose()
  return { t1, tN, weightBytes }
}

async function llamaCpp() {
  const nlcPath = `${here}peers/node_modules/node-llama-cpp/dist/index.js`
  if (!existsSync(nlcPath)) return { unavailable: 'node-llama-cpp not installed (bash bench/peers/install.sh)' }
  const nlc = await import(pathToFileURL(nlcPath).href)
  const llama = await nlc.getLlama({ gpu: false, build: 'never', maxThreads: threads, logLevel: nlc.LlamaLogLevel.error, progressLogs: false })
  const model = await llama.loadModel({ modelPath: job.gguf })
  const ctx = await model.createContext({ sequences: B, contextSize: B * (P + N + 16), batchSize: Math.max(512, B * P), threads: { ideal: threads, min: threads } })
  const seqs = Array.from({ length: B }, () => ctx.getSequence())
  const ps = prompts()
  // every sequence concurrently: node-llama-cpp puts their tokens into one llama_decode batch
  const gen = (n) =>
    Promise.all(
      seqs.map(async (seq, i) => {
        await seq.clearHistory()
        let k = 0
        for await (const _ of seq.evaluate(ps[i], { temperature: 0, yieldEogToken: true })) if (++k >= n) break
      }),
    )
  await gen(2)
  const t1 = await seconds(() => gen(1), 3)
  const tN = await seconds(() => gen(1 + N), 2)
  await ctx.dispose()
  await model.dispose()
  await llama.dispose()
  return { t1, tN }
}

/** Peak resident memory of this process (VmHWM: reset by exec, unlike getrusage's maxrss, which keeps the parent's). */
function peakRssBytes() {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))
  return m ? Number(m[1]) * 1024 : process.resourceUsage().maxRSS * 1024
}

const r = job.engine === 'ours' ? await ours() : await llamaCpp()
const out = r.unavailable
  ? r
  : { ...r, prefillTokensPerSecond: (B * P) / r.t1, decodeTokensPerSecond: (B * N) / (r.tN - r.t1), peakRssBytes: peakRssBytes() }
console.log(JSON.stringify(out))
