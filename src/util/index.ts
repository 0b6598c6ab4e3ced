export { Rng, type Seed } from './prng.js'
export {
  assertFinite,
  clip,
  logSumExp,
  mean,
  median,
  populationVariance,
  quantileSorted,
  sampleVariance,
  std,
  sum,
  type NumericArray,
} from './math.js'
export { Registry } from './registry.js'
export { writeFileAtomic, writeJsonAtomic } from './atomic.js'
