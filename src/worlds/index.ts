// Worlds: small task domains whose answers can be checked exactly.
export * as arith from './arith/index.js'
