// The model folders bundled with the package (models/), named in one place.
import { join, resolve } from 'node:path'
import { packageRoot } from '../native.js'

/** The bundled toy policy: a 1.2M-parameter Qwen3 trained on the arithmetic world (recipe.ts). */
export const BUNDLED_MODEL = join(packageRoot, 'models', 'arith-qwen3-tiny')

/** The bundled toy Judge: that backbone with a score head, J-Zero's scalar reward model (judge.ts). */
export const BUNDLED_JUDGE = join(packageRoot, 'models', 'arith-judge-tiny')

/** J-Zero's default Judge on `model`: the bundled toy Judge when `model` is the bundled toy policy, else null (a fresh score head on the model). */
export function toyJudge(model: string): string | null {
  return resolve(model) === resolve(BUNDLED_MODEL) ? BUNDLED_JUDGE : null
}
