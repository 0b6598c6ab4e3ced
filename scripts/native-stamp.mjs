// The fingerprints of the native sources a build was made from. The build writes them beside the
// addon; the loader recomputes them and refuses a stale addon with a clear instruction.
//
// Two fingerprints: the CPU addon's sources (everything under native/ except the CUDA backend's
// own files, which the addon never compiles: it only includes native/cuda/plugin_abi.h) and the
// CUDA plugin's (all of native/). A stale plugin then disables device 'cuda' with a reason while
// the CPU path keeps working.
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

const NATIVE_INPUTS = ['native', 'CMakeLists.txt', 'binding.gyp']
const CUDA_DIR = 'native/cuda/'
const ADDON_CUDA_FILES = new Set(['native/cuda/plugin_abi.h'])

function listFiles(root, path, out) {
  if (!existsSync(path)) return out
  if (statSync(path).isDirectory()) {
    for (const entry of readdirSync(path).sort()) listFiles(root, join(path, entry), out)
  } else {
    out.push(relative(root, path).replaceAll('\\', '/'))
  }
  return out
}

function stampOf(packageRoot, keep) {
  if (!existsSync(join(packageRoot, 'native'))) return null
  const hash = createHash('sha256')
  for (const input of NATIVE_INPUTS) {
    for (const file of listFiles(packageRoot, join(packageRoot, input), [])) {
      if (!keep(file)) continue
      hash.update(file)
      hash.update('\0')
      hash.update(readFileSync(join(packageRoot, file)))
      hash.update('\0')
    }
  }
  return hash.digest('hex')
}

/** sha256 over the sources of the CPU addon, or null when the sources are not shipped. */
export function nativeSourceStamp(packageRoot) {
  return stampOf(packageRoot, (f) => !f.startsWith(CUDA_DIR) || ADDON_CUDA_FILES.has(f))
}

/** sha256 over the sources of the CUDA plugin (the whole native tree), or null when not shipped. */
export function pluginSourceStamp(packageRoot) {
  return stampOf(packageRoot, () => true)
}

export const ADDON_RELATIVE_PATH = 'build/Release/autodidact.node'
export const STAMP_RELATIVE_PATH = 'build/Release/autodidact.stamp.json'
/** The CUDA plugin the addon dlopens on demand (built only when nvcc is found). */
export const PLUGIN_RELATIVE_PATH = 'build/Release/autodidact_cuda.so'

/** Size and mtime of the CUDA plugin, or null when there is none: the stamp records it so a
 * plugin left over from another build is recognised. */
export function pluginFingerprint(packageRoot) {
  const path = join(packageRoot, PLUGIN_RELATIVE_PATH)
  if (!existsSync(path)) return null
  const st = statSync(path)
  return { bytes: st.size, mtimeMs: Math.floor(st.mtimeMs) }
}
