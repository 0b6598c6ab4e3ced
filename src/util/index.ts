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
export { OutputFileError } from '../engine/errors.js'
export { checkOutputTarget, commitTemps, discardTemps, fileWriteError, fsyncDir, removeLiveTempsSync, removeStaleTemps, writeAll, writeAtomic, writeFileAtomic, writeJsonAtomic, writeTemp } from './atomic.js'
