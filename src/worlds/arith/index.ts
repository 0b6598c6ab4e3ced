// The arithmetic toy world: integer expressions with +, −, × and parentheses at five difficulty
// levels, an exact verifier, the role formats of COSE / R-Zero / J-Zero for the bundled toy model
// (and ChatML variants for chat models), scripted imperfect teachers that write its SFT corpus,
// held-out evaluation sets fixed by seed, and the world as a TaskWorld (world.ts). Pure,
// deterministic TypeScript; no I/O.

export * from './prng.js'
export * from './expr.js'
export * from './levels.js'
export * from './formats.js'
export * from './verify.js'
export * from './teachers.js'
export * from './evalset.js'
export * from './corpus.js'
export * from './world.js'
