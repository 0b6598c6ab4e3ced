// Uncertainty of method comparisons (UID Appendix D.4).
export {
  macroAverage,
  pairedPromptBootstrap,
  promptDifference,
  promptWeightedAverage,
  type BenchmarkOutcomes,
  type BootstrapOptions,
  type BootstrapResult,
  type Interval,
} from './bootstrap.js'
export { auroc, bootstrapMean, pearson, spread, type Spread } from './summary.js'
