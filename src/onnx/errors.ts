// Typed errors of the ONNX runtime layer (a sibling of src/engine/errors.ts's AutodidactError family).
import { AutodidactError } from '../engine/errors.js'

/** What went wrong with an ONNX model; lets callers and tests tell the cases apart. */
export type OnnxErrorReason =
  | 'not-found' // no .onnx file where one was expected
  | 'load' // onnxruntime could not load the file (not ONNX, corrupt, unsupported op)
  | 'layout' // a valid ONNX graph, but not a causal LM with past key/values in the expected layout
  | 'mismatch' // the graph disagrees with config.json or the tokenizer
  | 'run' // onnxruntime failed while running the graph
  | 'worker' // the worker thread died or was closed
  | 'runtime' // onnxruntime-node (an optional dependency) is not installed or has no binding here

export class OnnxModelError extends AutodidactError {
  /** The .onnx file (or folder) concerned. */
  readonly file: string
  readonly reason: OnnxErrorReason

  constructor(file: string, reason: OnnxErrorReason, message: string, options?: { cause?: unknown }) {
    super('ONNX_MODEL_ERROR', message, options)
    this.file = file
    this.reason = reason
  }
}
