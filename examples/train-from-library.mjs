// Training from the library: text → chat template → tokens → SFT steps → save → reload → generate.
// Teaches the bundled toy model one chat reply, saves it as a Hugging Face folder, loads that
// folder back and asks again. Run: node examples/train-from-library.mjs [OUT_DIR]
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DEFAULT_TOY_MODEL_DIR, loadModel } from 'autodidact'

const outDir = process.argv[2] ?? join(await mkdtemp(join(tmpdir(), 'autodidact-sft-')), 'model')
const chat = [{ role: 'user', content: 'What is 12+30?' }]
const reply = '<answer>42</answer>'
const greedy = { temperature: 0, maxTokens: 24 }

const model = await loadModel(DEFAULT_TOY_MODEL_DIR)
const before = (await model.generate({ messages: chat }, greedy))[0][0].text

// The prompt is the chat rendered by the folder's template up to the assistant's turn; the
// completion is the reply's tokens and the end-of-turn token (the loss covers the completion only).
const { tokenizer } = model
const prompt = tokenizer.encodeChat(chat, { addGenerationPrompt: true })
const completion = [...tokenizer.encode(reply, { addSpecialTokens: false }), tokenizer.eosTokenIds[0]]

const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 3e-3 }, clipGradNorm: 1 })
const losses = []
for (let step = 1; step <= 30; step++) {
  const metrics = await trainer.step({ sequences: [{ prompt, completion }] })
  losses.push(metrics.loss)
}
await model.save(outDir)
model.dispose()

const trained = await loadModel(outDir)
const after = (await trained.generate({ messages: chat }, greedy))[0][0].text
trained.dispose()

console.log(JSON.stringify({ before, after, firstLoss: losses[0], lastLoss: losses.at(-1), saved: outDir }))
