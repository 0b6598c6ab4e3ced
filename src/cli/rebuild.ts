// `autodidact rebuild`: rebuilds the native addon inside the installed package (the same build
// `npm install` runs), from wherever the command is started: `npx autodidact rebuild` in a project
// that depends on autodidact, or `node dist/cli/main.js rebuild` in a checkout.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { packageRoot } from '../native.js'
import { parseArgs } from './args.js'
import { doctorReport, formatDoctor } from './doctor.js'

const USAGE = `usage: autodidact rebuild [--cuda auto|on|off] [--cuda-arch LIST] [--builder cmake|gyp] [--jobs N] [--no-native-arch]

Rebuilds build/Release/autodidact.node (and the CUDA plugin where nvcc is found) in
${packageRoot}, then prints what \`autodidact doctor\` sees.

  --cuda auto|on|off   auto (default): build CUDA where nvcc is found; on: fail without it
  --cuda-arch LIST     CMake CUDA architectures, e.g. 90-real (default 80-real;90-real;90-virtual)
  --builder cmake|gyp  cmake-js (default; CPU and CUDA) or node-gyp (CPU only)
  --jobs N             parallel compile jobs (default 2)
  --no-native-arch     portable CPU code (AVX2/FMA) instead of -march=native`

/** The build script's environment switches from the command's flags (scripts/build-native.mjs). */
export function rebuildEnvironment(argv: string[]): Record<string, string> {
  const { options, positional } = parseArgs(argv, { cuda: 'string', 'cuda-arch': 'string', builder: 'string', jobs: 'number', 'no-native-arch': 'boolean' })
  if (positional.length) throw new InvalidArgumentError(positional[0], `rebuild takes no positional arguments, got '${positional[0]}'`)
  const out: Record<string, string> = {}
  if (options.cuda !== undefined) {
    const cuda = String(options.cuda).toUpperCase()
    if (!['AUTO', 'ON', 'OFF'].includes(cuda)) throw new InvalidArgumentError('cuda', `--cuda must be auto, on or off, got ${options.cuda}`)
    out.AUTODIDACT_CUDA = cuda
  }
  if (options['cuda-arch'] !== undefined) {
    const arch = String(options['cuda-arch'])
    if (!/^[0-9a-z-]+([;,][0-9a-z-]+)*$/.test(arch)) throw new InvalidArgumentError('cuda-arch', `--cuda-arch must be a list like 80-real;90-real, got '${arch}'`)
    out.AUTODIDACT_CUDA_ARCHITECTURES = arch.replaceAll(',', ';')
  }
  if (options.builder !== undefined) {
    const builder = String(options.builder)
    if (builder !== 'cmake' && builder !== 'gyp') throw new InvalidArgumentError('builder', `--builder must be cmake or gyp, got ${builder}`)
    out.AUTODIDACT_BUILDER = builder
  }
  if (options.jobs !== undefined) {
    const jobs = Number(options.jobs)
    if (!Number.isInteger(jobs) || jobs < 1) throw new InvalidArgumentError('jobs', `--jobs must be a positive integer, got ${options.jobs}`)
    out.AUTODIDACT_BUILD_JOBS = String(jobs)
  }
  if (options['no-native-arch']) out.AUTODIDACT_NATIVE_ARCH = 'OFF'
  return out
}

export async function rebuildCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE)
    return 0
  }
  const switches = rebuildEnvironment(argv)
  const script = join(packageRoot, 'scripts', 'build-native.mjs')
  const result = spawnSync(process.execPath, [script], { cwd: packageRoot, stdio: 'inherit', env: { ...process.env, ...switches } })
  if (result.status !== 0) return result.status ?? 1
  const report = await doctorReport()
  console.log(formatDoctor(report))
  return report.native ? 0 : 1
}
