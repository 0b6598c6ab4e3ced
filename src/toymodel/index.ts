// The bundled toy model of the arithmetic world: its tokenizer, its from-scratch Qwen3 init, the
// SFT recipe that trains it with our engine, and the held-out evaluation its model card reports.
export * from './tokenizer.js'
export * from './init.js'
export * from './recipe.js'
export * from './eval.js'
