// One atomic routine for every method's checkpoint, and one for its resume.
//
// A checkpoint folder holds run_state.json (the method's state: step, RNG, config, …) and, per
// role of the run (a policy and, when it trains, its optimizer):
//   <role>/        the policy's folder (model weights, or PEFT adapters with LoRA: 'default' at
//                  the root, each other named adapter — a role's own on a shared base — in a sub-folder)
//   <role>-state/  optimizer.safetensors (AdamW moments NAME::m, NAME::v) and trainer_state.json
// plus whatever files the method adds (a replay buffer, …).
//
// checkpointRun writes everything into `step-N.tmp-PID`, run_state.json last, then renames it to
// `step-N`. When `step-N` already exists it is first renamed aside to `step-N.old-PID` and removed
// only after the new folder is in place, so at every moment the old or the new checkpoint is
// complete on disk; resumeRun finds one left under a transient name (recoverCheckpoint). Leftovers
// of interrupted checkpoints are removed on the next checkpoint and on resume.
//
// resumeRun checks everything before anything is loaded or written: run_state.json's format and
// counts (no negative or absurd step), every trainer_state.json, and every optimizer moment
// against the parameter it belongs to in the stored weights (same element count, finite values,
// both moments present). A short or NaN moment is a CheckpointError naming the tensor, never a
// buffer overrun in the native optimizer.
import { existsSync } from 'node:fs'
import { mkdir, readdir, rename, rm } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { DEFAULT_ADAPTER, isAdapterName } from '../../engine/adapters.js'
import { AutodidactError, CheckpointError } from '../../engine/errors.js'
import { readSafetensorsHeader, readSafetensorsRefs, readTensorFloat32 } from '../../engine/hf/safetensors.js'
import type { TensorRef } from '../../engine/types.js'
import { fileWriteError, fsyncDir, writeJsonAtomic } from '../../util/atomic.js'
import { Rng } from '../../util/prng.js'
import type { Policy, PolicyTrainer } from './policy.js'
import { checkedStep, readJsonObject, recoverCheckpoint, removeStaleTransients } from './run-folder.js'
import type { WorldRecord } from './world.js'
import type { TaskWorld } from '../../worlds/types.js'

export const RUN_STATE_FILE = 'run_state.json'
export const OPTIMIZER_FILE = 'optimizer.safetensors'
export const TRAINER_STATE_FILE = 'trainer_state.json'
const ADAPTER_WEIGHTS = 'adapter_model.safetensors'

/** The checkpoint layout this version writes and reads (2: every role in `<role>/` and `<role>-state/`). */
export const RUN_STATE_VERSION = 2

/** What every method's run_state.json holds, besides its own fields. */
export interface BaseRunState {
  /** `autodidact.<method>.run`. */
  format: string
  version: typeof RUN_STATE_VERSION
  step: number
  /** The task world the run is on (absent in checkpoints written before worlds were plug-ins). */
  world?: WorldRecord
}

/** One policy of a run and its optimizer (null: frozen, e.g. a Judge that does not train). */
export interface CheckpointRole {
  name: string
  policy: Policy
  trainer: PolicyTrainer | null
}

/** Where a role's files lie in a checkpoint folder. */
export function rolePaths(dir: string, role: string): { model: string; trainer: string } {
  return { model: join(dir, role), trainer: join(dir, `${role}-state`) }
}

function isComplete(dir: string): boolean {
  return existsSync(join(dir, RUN_STATE_FILE))
}

/**
 * Writes a complete checkpoint to `dir`: every role's policy and optimizer, `extra` files, then
 * run_state.json, all in a temporary sibling renamed into place. A failure (a full disk, no
 * permission) leaves any earlier checkpoint as it was and throws a OutputFileError naming the file.
 */
export async function checkpointRun(dir: string, o: { state: BaseRunState; roles: readonly CheckpointRole[]; extra?: (tmp: string) => Promise<void> }): Promise<void> {
  const parent = dirname(dir)
  await mkdir(parent, { recursive: true }).catch((e) => {
    throw fileWriteError(e, parent)
  })
  await removeStaleTransients(parent)
  const tmp = `${dir}.tmp-${process.pid}`
  try {
    await mkdir(tmp, { recursive: true })
    for (const role of o.roles) {
      const paths = rolePaths(tmp, role.name)
      await role.policy.save(paths.model)
      if (role.trainer) {
        await mkdir(paths.trainer, { recursive: true })
        await role.trainer.saveState(paths.trainer)
      }
    }
    await o.extra?.(tmp)
    await writeJsonAtomic(join(tmp, RUN_STATE_FILE), o.state, 2) // last: its presence marks the folder complete
    await fsyncDir(tmp)
  } catch (e) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined)
    throw e instanceof AutodidactError ? e : fileWriteError(e, typeof (e as { path?: unknown }).path === 'string' ? (e as { path: string }).path : tmp)
  }
  const aside = `${dir}.old-${process.pid}`
  try {
    if (existsSync(dir)) await rename(dir, aside)
    await rename(tmp, dir)
    await fsyncDir(parent)
  } catch (e) {
    throw fileWriteError(e, dir)
  }
  await rm(aside, { recursive: true, force: true })
}

/** What a method expects of its checkpoint. */
export interface ResumeSpec<S extends BaseRunState> {
  /** run_state.json's `format` (e.g. `autodidact.cose.run`). */
  format: string
  /** Checks the method's own fields (config through its schema, RNG state, paths); throws a typed error. */
  parse(state: BaseRunState & Record<string, unknown>, file: string): S
  /** The roles the checkpoint holds, whether each has an optimizer state, and the named adapters its folder must hold (role adapters on one base). */
  roles(state: S): { name: string; trained: boolean; adapters?: readonly string[] }[]
  /** The world the run resumes on: it must be the one the checkpoint was taken on. */
  world?: TaskWorld
}

export interface ResumedCheckpoint<S> {
  dir: string
  state: S
  /** A role's model folder and trainer-state folder in the checkpoint. */
  paths(role: string): { model: string; trainer: string }
}

/**
 * Validates the checkpoint folder `dir` — run_state.json, then every role's weights and optimizer
 * state — and returns its state. Nothing is loaded into a model or optimizer, and nothing is
 * written (except bringing back a checkpoint an interrupted replacement left aside).
 */
export async function resumeRun<S extends BaseRunState>(dir: string, spec: ResumeSpec<S>): Promise<ResumedCheckpoint<S>> {
  if (!(await recoverCheckpoint(dir, isComplete))) throw new CheckpointError(dir, null, 'missing', `${dir}: no such checkpoint folder`)
  await removeStaleTransients(dirname(dir))
  const file = join(dir, RUN_STATE_FILE)
  const raw = await readJsonObject(file)
  if (raw.format !== spec.format)
    throw new CheckpointError(file, 'format', 'method', `${file}: format ${JSON.stringify(raw.format)}, expected ${JSON.stringify(spec.format)} (not a checkpoint of this method)`)
  if (raw.version !== RUN_STATE_VERSION)
    throw new CheckpointError(file, 'version', 'field', `${file}: checkpoint layout version ${JSON.stringify(raw.version)}; this version of autodidact reads layout ${RUN_STATE_VERSION} only (start the run afresh)`)
  checkedStep(raw.step, file)
  checkWorld(raw.world, spec.world, file)
  const state = spec.parse(raw as BaseRunState & Record<string, unknown>, file)
  for (const role of spec.roles(state)) {
    const paths = rolePaths(dir, role.name)
    if (!existsSync(paths.model)) throw new CheckpointError(paths.model, null, 'missing', `${dir}: the checkpoint has no ${role.name} folder`)
    for (const name of role.adapters ?? []) {
      const config = join(name === DEFAULT_ADAPTER ? paths.model : join(paths.model, name), 'adapter_config.json')
      if (!existsSync(config)) throw new CheckpointError(config, null, 'missing', `${dir}: the ${role.name} folder has no adapter '${name}' (${config} is missing)`)
    }
    if (role.trained) await checkOptimizerState(paths.trainer, await parameterSizes(paths.model))
  }
  return { dir, state, paths: (role) => rolePaths(dir, role) }
}

/** The checkpoint's world record against the world a resume was given (a mismatch is a CheckpointError). */
function checkWorld(stored: unknown, world: TaskWorld | undefined, file: string): void {
  if (stored === undefined || world === undefined) return
  const name = (stored as { name?: unknown } | null)?.name
  if (typeof name !== 'string') throw new CheckpointError(file, 'world', 'field', `${file}: world must be { name, spec }`)
  if (name !== world.name) throw new CheckpointError(file, 'world', 'field', `${file}: the run is on world '${name}', not '${world.name}' (resume it with --world ${name})`)
}

/** An RNG state stored in a checkpoint (four unsigned 32-bit words, not all zero), else a CheckpointError. */
export function checkedRngState(v: unknown, file: string, field = 'rng'): [number, number, number, number] {
  try {
    return Rng.fromState(v as number[]).state()
  } catch (e) {
    throw new CheckpointError(file, field, 'field', `${file}: ${field} is not a generator state (${(e as Error).message})`, { cause: e })
  }
}

/** A folder path stored in a checkpoint: a non-empty string, else a CheckpointError. */
export function checkedPath(v: unknown, file: string, field: string): string {
  if (typeof v !== 'string' || !v) throw new CheckpointError(file, field, 'field', `${file}: ${field} must be a folder path`)
  return v
}

function numel(shape: readonly number[]): number {
  return shape.reduce((a, d) => a * d, 1)
}

/** The PEFT adapter files of a saved folder: the root's ('default') and each named sub-folder's. */
async function adapterFiles(modelDir: string): Promise<{ name: string; file: string }[]> {
  const out = existsSync(join(modelDir, ADAPTER_WEIGHTS)) ? [{ name: DEFAULT_ADAPTER, file: join(modelDir, ADAPTER_WEIGHTS) }] : []
  for (const e of await readdir(modelDir, { withFileTypes: true }))
    if (e.isDirectory() && e.name !== DEFAULT_ADAPTER && isAdapterName(e.name) && existsSync(join(modelDir, e.name, ADAPTER_WEIGHTS))) out.push({ name: e.name, file: join(modelDir, e.name, ADAPTER_WEIGHTS) })
  return out
}

/** A PEFT file's tensor name as the engine (and its optimizer) names it for adapter `adapter`: "….lora_A.weight", or "….lora_A.<adapter>.weight". */
function engineParameterName(peftName: string, adapter: string): string {
  const plain = peftName.replace(/^base_model\.model\./, '').replace(/\.lora_([AB])\.default\./, '.lora_$1.')
  return adapter === DEFAULT_ADAPTER ? plain : plain.replace(/\.lora_([AB])\.weight$/, `.lora_$1.${adapter}.weight`)
}

/** Element counts of the stored parameters, by the names the optimizer uses (PEFT prefix stripped; a named adapter's name put back). */
async function parameterSizes(modelDir: string): Promise<Map<string, number>> {
  const adapters = await adapterFiles(modelDir)
  if (!adapters.length) return new Map((await readSafetensorsRefs(modelDir)).map((r: TensorRef) => [engineParameterName(r.name, DEFAULT_ADAPTER), numel(r.shape)]))
  const sizes = new Map<string, number>()
  for (const { name, file } of adapters) for (const r of (await readSafetensorsHeader(file)).tensors) sizes.set(engineParameterName(r.name, name), numel(r.shape))
  return sizes
}

/** trainer_state.json and every moment of optimizer.safetensors against the parameters' sizes. */
export async function checkOptimizerState(trainerDir: string, params: ReadonlyMap<string, number>): Promise<void> {
  const stateFile = join(trainerDir, TRAINER_STATE_FILE)
  const meta = await readJsonObject(stateFile)
  checkedStep(meta.step, stateFile)
  const file = join(trainerDir, OPTIMIZER_FILE)
  if (!existsSync(file)) throw new CheckpointError(file, null, 'missing', `${file}: the optimizer state is missing`)
  const header = await readSafetensorsHeader(file)
  const parts = new Map<string, Set<string>>()
  for (const ref of header.tensors) {
    const fail = (why: string) => {
      throw new CheckpointError(file, ref.name, 'moment', `${file}: optimizer moment "${ref.name}" ${why}; the checkpoint is corrupt (nothing was loaded)`)
    }
    const m = /^(.+)::(m|v)$/.exec(ref.name)
    if (!m) fail('is not named PARAMETER::m or PARAMETER::v')
    const [, name, part] = m!
    const size = params.get(name)
    if (size === undefined) fail(`belongs to no parameter stored beside it`)
    if (ref.dtype !== 'F32') fail(`has dtype ${ref.dtype}, expected F32`)
    if (numel(ref.shape) !== size) fail(`holds ${numel(ref.shape)} values but its parameter ${name} has ${size}`)
    const data = await readTensorFloat32(ref)
    for (let i = 0; i < data.length; i++) if (!Number.isFinite(data[i])) fail(`holds ${data[i]} at index ${i}`)
    if (part === 'v') for (let i = 0; i < data.length; i++) if (data[i] < 0) fail(`(a second moment) holds ${data[i]} < 0 at index ${i}`)
    parts.set(name, (parts.get(name) ?? new Set()).add(part))
  }
  for (const [name, got] of parts)
    if (got.size !== 2) throw new CheckpointError(file, name, 'moment', `${file}: parameter ${name} has only its ${[...got][0]} moment; both ::m and ::v are needed`)
}
