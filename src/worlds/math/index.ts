// The math world: the papers' prompts under the model's chat template, `\boxed{}` answers, JSONL
// problem sets, and a bundled generated problem set.
export * from './prompts.js'
export * from './world.js'
export * from './generate.js'
