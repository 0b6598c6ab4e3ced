// Solver ensembles (DIS §4.2, §4.5): variants in-process or over HTTP, queried concurrently.
export * from './types.js'
export { InProcessSampler, type InProcessSamplerOptions } from './inprocess.js'
export { RemoteSampler, RemoteVariantError, completionRequest, parseCompletionChoices, type RemoteFailure, type RemoteSamplerOptions } from './remote.js'
export {
  judgeQuestion,
  queryEnsemble,
  variantSeed,
  variantStats,
  type EnsembleQueryOptions,
  type EnsembleResult,
  type QuestionVerdict,
  type VariantReport,
  type VariantStats,
  type VariantStatus,
} from './ensemble.js'
