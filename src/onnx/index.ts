// ONNX: onnxruntime-node causal LMs as frozen ensemble members, Judges and reference scorers.
export { OnnxCausalLM, OnnxKVCache, causalLayout, resolveOnnxPath } from './causal-lm.js'
export type { OnnxLayout, OnnxOpenOptions } from './causal-lm.js'
export { OnnxVariant } from './variant.js'
export { OnnxModelError } from './errors.js'
export type { OnnxErrorReason } from './errors.js'
export { ONNX_RUNTIME_INSTALL, onnxRuntimeStatus } from './runtime.js'
export type { OnnxRuntimeStatus } from './runtime.js'
