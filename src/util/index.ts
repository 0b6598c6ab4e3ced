export { mulberry32, mulberry32Step, Rng, type Seed } from './prng.js'
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
export { FileWriteError } from '../engine/errors.js'
export { commitTemps, discardTemps, fileWriteError, fsyncDir, writeAll, writeAtomic, writeFileAtomic, writeJsonAtomic, writeTemp } from './atomic.js'
