// The fingerprint of the native sources a build was made from. The build writes it beside the
// addon; the loader recomputes it and refuses a stale addon with a clear instruction.
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

const NATIVE_INPUTS = ['native', 'CMakeLists.txt', 'binding.gyp']

function listFiles(root, path, out) {
  if (!existsSync(path)) return out
  if (statSync(path).isDirectory()) {
    for (const entry of readdirSync(path).sort()) listFiles(root, join(path, entry), out)
  } else {
    out.push(relative(root, path))
  }
  return out
}

/** sha256 over the native source tree, or null when the sources are not shipped. */
export function nativeSourceStamp(packageRoot) {
  if (!existsSync(join(packageRoot, 'native'))) return null
  const hash = createHash('sha256')
  for (const input of NATIVE_INPUTS) {
    for (const file of listFiles(packageRoot, join(packageRoot, input), [])) {
      hash.update(file.replaceAll('\\', '/'))
      hash.update('\0')
      hash.update(readFileSync(join(packageRoot, file)))
      hash.update('\0')
    }
  }
  return hash.digest('hex')
}

export const ADDON_RELATIVE_PATH = 'build/Release/autodidact.node'
export const STAMP_RELATIVE_PATH = 'build/Release/autodidact.stamp.json'
