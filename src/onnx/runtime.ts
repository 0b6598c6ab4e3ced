// Where onnxruntime-node is, or why it is not. It is an optional dependency: npm drops it when its
// postinstall (a download of CUDA providers) fails, e.g. offline, and then only the ONNX features
// (OnnxCausalLM, ONNX ensemble members) are unavailable. Nothing here loads it: the worker does,
// when an ONNX model is opened.
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'

import { OnnxModelError } from './errors.js'

export const ONNX_RUNTIME_PACKAGE = 'onnxruntime-node'
export const ONNX_RUNTIME_VERSION = '1.30.0'
/** Installs it offline too: ONNXRUNTIME_NODE_INSTALL=skip stops its postinstall's download (CPU binaries ship inside it). */
export const ONNX_RUNTIME_INSTALL = `ONNXRUNTIME_NODE_INSTALL=skip npm i ${ONNX_RUNTIME_PACKAGE}@${ONNX_RUNTIME_VERSION}`

export type OnnxRuntimeStatus =
  | { available: true; version: string; entry: string }
  | { available: false; reason: string }

/** Resolves onnxruntime-node from this package (hoisted or nested) and checks its native binding is there. */
export function onnxRuntimeStatus(): OnnxRuntimeStatus {
  let entry: string
  try {
    entry = createRequire(import.meta.url).resolve(ONNX_RUNTIME_PACKAGE)
  } catch {
    return { available: false, reason: `${ONNX_RUNTIME_PACKAGE} is not installed (an optional dependency: npm skips it when its install script fails, e.g. offline); to add it: ${ONNX_RUNTIME_INSTALL}` }
  }
  const root = dirname(dirname(entry)) // <root>/dist/index.js
  const binding = join(root, 'bin', 'napi-v6', process.platform, process.arch, 'onnxruntime_binding.node')
  if (!existsSync(binding)) return { available: false, reason: `${ONNX_RUNTIME_PACKAGE} at ${root} has no native binding for ${process.platform}/${process.arch} (${binding})` }
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version
  return { available: true, version, entry }
}

/** The module path the worker requires; a typed error saying why when onnxruntime-node is unavailable. */
export function onnxRuntimeEntry(label: string): string {
  const status = onnxRuntimeStatus()
  if (!status.available) throw new OnnxModelError(label, 'runtime', `${label}: ONNX models need ${ONNX_RUNTIME_PACKAGE}: ${status.reason}`)
  return status.entry
}
