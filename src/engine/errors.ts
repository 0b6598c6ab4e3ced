// Typed errors of the engine layer. Every error a user can cause with bad input (a corrupt file,
// an unsupported model, a wrong argument) is one of these, names the file and tensor involved,
// and carries a stable `code` so programs can branch on it without parsing messages.

/** Base class of every error autodidact throws on purpose. */
export class AutodidactError extends Error {
  /** Stable machine-readable identifier, e.g. `"SAFETENSORS_ERROR"`. */
  readonly code: string

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** The model's architecture (or one of its options) is not one autodidact implements. */
export class UnsupportedArchitectureError extends AutodidactError {
  /** The config.json that declared it, when known. */
  readonly file: string | null
  /** What is unsupported, e.g. `"MistralForCausalLM"` or `"rope_scaling.rope_type=yarn"`. */
  readonly feature: string

  constructor(feature: string, message: string, file: string | null = null, options?: { cause?: unknown }) {
    super('UNSUPPORTED_ARCHITECTURE', message, options)
    this.feature = feature
    this.file = file
  }
}

/** A configuration file (config.json, generation_config.json, …) is unreadable, or a field is missing or invalid. */
export class ConfigError extends AutodidactError {
  readonly file: string
  /** The offending field (dotted path), or null when the whole file is at fault. */
  readonly field: string | null

  constructor(file: string, field: string | null, message: string, options?: { cause?: unknown }) {
    super('CONFIG_ERROR', message, options)
    this.file = file
    this.field = field
  }
}

/** What is wrong with a safetensors file or index; lets callers and tests tell the cases apart. */
export type SafetensorsErrorReason =
  | 'not-found' // file (or shard) does not exist
  | 'io' // could not be read/written
  | 'truncated' // shorter than its header says
  | 'header' // header length or structure invalid
  | 'json' // header is not valid JSON
  | 'dtype' // unknown or unsupported dtype
  | 'shape' // invalid shape, or shape × dtype size ≠ byte range
  | 'offsets' // data_offsets invalid or outside the file
  | 'overlap' // two tensors share bytes
  | 'gap' // data bytes that belong to no tensor (before the first, or between two)
  | 'trailing' // bytes after the last tensor (a wrong header length, or an appended file)
  | 'duplicate' // the header names a key twice
  | 'non-finite' // a tensor the model uses holds NaN or ±Inf
  | 'not-regular' // a FIFO, device, socket or directory where a file belongs
  | 'index' // model.safetensors.index.json invalid

/** A .safetensors file (or its sharded index) is missing, truncated or corrupt. */
export class SafetensorsError extends AutodidactError {
  readonly file: string
  /** The tensor concerned, or null when the fault is in the file as a whole. */
  readonly tensor: string | null
  readonly reason: SafetensorsErrorReason

  constructor(
    file: string,
    tensor: string | null,
    reason: SafetensorsErrorReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super('SAFETENSORS_ERROR', message, options)
    this.file = file
    this.tensor = tensor
    this.reason = reason
  }
}

function fmtShape(shape: readonly number[] | null | undefined): string {
  return shape ? `[${shape.join(', ')}]` : 'unknown'
}

/** A tensor the model needs is not in the checkpoint (or not where the index says it is). */
export class MissingTensorError extends AutodidactError {
  /** The file where the tensor was looked for (model.safetensors, a shard, or the index). */
  readonly file: string
  readonly tensor: string
  readonly expectedShape: number[] | null

  constructor(file: string, tensor: string, expectedShape: number[] | null, message?: string) {
    super(
      'MISSING_TENSOR',
      message ??
        `${file}: tensor "${tensor}" is missing` +
          (expectedShape ? ` (expected shape ${fmtShape(expectedShape)})` : ''),
    )
    this.file = file
    this.tensor = tensor
    this.expectedShape = expectedShape
  }
}

/** A tensor has a different shape than the config implies. */
export class TensorShapeError extends AutodidactError {
  readonly file: string
  readonly tensor: string
  readonly expectedShape: number[]
  readonly actualShape: number[]

  constructor(file: string, tensor: string, expectedShape: number[], actualShape: number[], message?: string) {
    super(
      'TENSOR_SHAPE',
      message ??
        `${file}: tensor "${tensor}" has shape ${fmtShape(actualShape)}, expected ${fmtShape(expectedShape)} ` +
          `from config.json`,
    )
    this.file = file
    this.tensor = tensor
    this.expectedShape = expectedShape
    this.actualShape = actualShape
  }
}

/** tokenizer.json (or the chat template) is missing or cannot be loaded/rendered. */
export class TokenizerError extends AutodidactError {
  readonly file: string | null

  constructor(file: string | null, message: string, options?: { cause?: unknown }) {
    super('TOKENIZER_ERROR', message, options)
    this.file = file
  }
}

/** The native addon is missing, stale, or failed. (Owned by the engine core.) */
export class NativeAddonError extends AutodidactError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('NATIVE_ADDON_ERROR', message, options)
  }
}

/** A caller passed an argument that makes no sense (wrong length, bad option, …). */
export class InvalidArgumentError extends AutodidactError {
  /** Name of the argument or option, when one is to blame. */
  readonly argument: string | null

  constructor(argument: string | null, message: string, options?: { cause?: unknown }) {
    super('INVALID_ARGUMENT', message, options)
    this.argument = argument
  }
}

/**
 * Folding LoRA into the base (mergeLora, a merged save) was asked of a model holding several
 * adapters: which one is meant is not said. Names them, and says how to merge one.
 */
export class SeveralAdaptersError extends InvalidArgumentError {
  /** The adapters attached, in attach order. */
  readonly adapters: readonly string[]

  constructor(argument: string, what: string, adapters: readonly string[]) {
    super(
      argument,
      `${what} folds one adapter into the base, but this model has ${adapters.length} (${adapters.map((a) => `'${a}'`).join(', ')}). ` +
        'To merge one: load the base model, attach only that adapter (model.loadAdapter(DIR/NAME): a multi-adapter save keeps each named adapter in its sub-folder) and merge it; ' +
        'or keep them all as adapters (save() without adapterOnly: false)',
    )
    this.adapters = [...adapters]
  }
}

/** Why a device cannot be used: the plugin is missing or broken, or the machine has no driver / GPU. */
export type DeviceUnavailableReason =
  | 'not-built' // the CUDA plugin was not built (no nvcc at build time, or AUTODIDACT_CUDA=OFF)
  | 'stale' // the plugin was built from older sources (or another build): rebuild
  | 'load-failed' // the plugin exists but the dynamic loader refused it
  | 'abi-mismatch' // the plugin was built from other sources than the addon
  | 'no-driver' // no NVIDIA driver (or one too old for the plugin's CUDA runtime)
  | 'no-device' // a driver but no visible GPU (check CUDA_VISIBLE_DEVICES)
  | 'probe-failed' // the plugin could not query the devices

/** `loadModel({ device: 'cuda' })` on a machine or build where CUDA cannot run; `reason` says which case. */
export class DeviceUnavailableError extends AutodidactError {
  readonly device: 'cuda'
  readonly reason: DeviceUnavailableReason

  constructor(reason: DeviceUnavailableReason, message: string, options?: { cause?: unknown }) {
    super('DEVICE_UNAVAILABLE', message, options)
    this.device = 'cuda'
    this.reason = reason
  }
}

/**
 * A model, trainer or training step that the memory plan (src/engine/memory-plan.ts) says will
 * not fit in the device's free memory: refused before anything is allocated, with the numbers.
 */
export class DeviceMemoryError extends AutodidactError {
  /** What was refused: loading the weights, creating the trainer, or a step of a larger shape. */
  readonly phase: 'load' | 'trainer' | 'step'
  readonly neededBytes: number
  readonly freeBytes: number

  constructor(phase: 'load' | 'trainer' | 'step', neededBytes: number, freeBytes: number, message: string) {
    super('DEVICE_MEMORY', message)
    this.phase = phase
    this.neededBytes = neededBytes
    this.freeBytes = freeBytes
  }
}

/** What is wrong with a run folder or checkpoint; lets callers and tests tell the cases apart. */
export type CheckpointErrorReason =
  | 'missing' // a file the checkpoint needs is not there
  | 'json' // not valid JSON, or not an object
  | 'field' // a field is missing, of the wrong type, or out of range (e.g. a negative step)
  | 'method' // the method named is not registered, or is not the checkpoint's
  | 'moment' // an optimizer moment does not fit its parameter, or holds NaN/Inf
  | 'metrics' // metrics.jsonl holds a line that is not a metrics record
  | 'path' // a path points outside the run folder

/** A run folder or checkpoint is missing, corrupt or hostile; nothing has been loaded or written when this is thrown. */
export class CheckpointError extends AutodidactError {
  readonly file: string
  /** The field or tensor concerned (e.g. `"step"`, `"model.embed_tokens.weight::v"`), or null for the file as a whole. */
  readonly field: string | null
  readonly reason: CheckpointErrorReason

  constructor(file: string, field: string | null, reason: CheckpointErrorReason, message: string, options?: { cause?: unknown }) {
    super('CHECKPOINT_ERROR', message, options)
    this.file = file
    this.field = field
    this.reason = reason
  }
}
/** What a resource limit bounded (see ResourceLimitError). */
export type ResourceLimit =
  | 'template-steps' // chat template: evaluation steps
  | 'template-output' // chat template: size of a string or list it builds
  | 'template-range' // chat template: range() longer than the sandbox allows
  | 'template-time' // chat template: wall-clock budget
  | 'tokenizer-time' // tokenizer (pre-tokenizer / normalizer regexes): wall-clock budget
  | 'file-size' // a file larger than its kind may be
  | 'model-size' // config.json asks for more than the checkpoint holds

/**
 * Input that is well-formed but asks for more work or memory than allowed: a chat template that
 * loops too long, a regex that backtracks, a config that asks for a billion layers.
 */
export class ResourceLimitError extends AutodidactError {
  readonly limit: ResourceLimit
  /** The file at fault, when one is. */
  readonly file: string | null

  constructor(limit: ResourceLimit, file: string | null, message: string, options?: { cause?: unknown }) {
    super('RESOURCE_LIMIT', message, options)
    this.limit = limit
    this.file = file
  }
}

/** Why a file could not be written (see OutputFileError). */
export type OutputFileReason =
  | 'not-regular' // the target is a FIFO, device, socket, symlink or directory: refused, never replaced
  | 'no-space' // ENOSPC / EDQUOT
  | 'permission' // EACCES / EPERM / EROFS
  | 'io' // any other failure

/** Writing an output file (an export, a saved model) failed; names the file, never a bare errno. */
export class OutputFileError extends AutodidactError {
  readonly file: string
  readonly reason: OutputFileReason
  /** The system error code (ENOSPC, …) when there was one. */
  readonly errno: string | null

  constructor(file: string, reason: OutputFileReason, message: string, errno: string | null = null, options?: { cause?: unknown }) {
    super('OUTPUT_FILE_ERROR', message, options)
    this.file = file
    this.reason = reason
    this.errno = errno
  }
}
