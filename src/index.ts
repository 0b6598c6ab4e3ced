// autodidact: sample from, train and self-evolve small LLMs in one Node process.
export { loadModel, Model } from './engine/model.js'
export type {
  Completion,
  Device,
  FinishReason,
  GenerateOptions,
  LoadOptions,
  Prompt,
  SamplingOptions,
  ScoreOptions,
  ScorePair,
  Scored,
  StreamChunk,
  TokenStats,
} from './engine/model.js'
export type { Trainer, TrainerOptions, TrainSequence, TrainBatch, StepMetrics, LoraOptions, OptimizerOptions } from './train/trainer.js'
export { Tokenizer } from './engine/tokenizer.js'
export type { ChatMessage, ChatTemplateOptions } from './engine/tokenizer.js'
export type { Architecture, ModelConfig, TensorRef } from './engine/types.js'
export * from './engine/errors.js'
export { nativeAddon } from './native.js'
export { DEFAULT_TOY_MODEL_DIR } from './toymodel/recipe.js'
export { doctorReport } from './cli/doctor.js'
export { formatProfile, measureFloors, profileModel, withProfile } from './engine/profiler.js'
export type { Floors, KernelRow, PhaseProfile, ProfileOptions } from './engine/profiler.js'
export { createOpenAIServer, OpenAIServer, listeningUrl, LISTENING_PREFIX, ServeRequestError } from './serve/index.js'
export type { ServeOptions, ServeStats } from './serve/index.js'
export { exportOnnx } from './export/onnx.js'
export type { OnnxExportOptions, OnnxExportResult, OnnxDtype } from './export/onnx.js'
export * from './onnx/index.js'
export * from './ensemble/index.js'
export { exportGguf, readGguf } from './export/gguf.js'
// Task worlds (bring your own task): the interface a user world implements, the loader of
// `--world`, the math world's builders, the JSONL readers.
export type {
  AnswerRules,
  Benchmark,
  CoseRoles,
  HeldOutPreference,
  JzeroRoles,
  LabeledProblem,
  PosedTask,
  PreferencePair,
  Problem,
  RzeroRoles,
  SolveRoles,
  TaskWorld,
  Verifier,
  WorldData,
  WorldSpec,
  WrittenAnswer,
} from './worlds/types.js'
export { BUILTIN_WORLDS, checkTaskWorld, loadWorld } from './worlds/load.js'
export type { WorldFactory, WorldOptions } from './worlds/load.js'
export { chatWorld, loadMathWorld, MATH_ANSWERS, readBenchmark, readBoxedAnswer } from './worlds/math/world.js'
export type { ChatWorldSpec, MathWorldOptions } from './worlds/math/world.js'
export { problemOfRecord, readProblems } from './worlds/jsonl.js'
export type { ReadProblemsOptions } from './worlds/jsonl.js'
export { arithWorld } from './worlds/arith/world.js'
export { DataError, WorldError } from './worlds/errors.js'
