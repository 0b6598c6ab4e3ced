// The model folders bundled with the package (models/), named in one place.
import { join } from 'node:path'
import { packageRoot } from '../native.js'

/** The bundled toy policy: a 1.2M-parameter Qwen3 trained on the arithmetic world (recipe.ts). */
export const BUNDLED_MODEL = join(packageRoot, 'models', 'arith-qwen3-tiny')

/** The bundled toy Judge: that backbone with a score head, J-Zero's scalar reward model (judge.ts). */
export const BUNDLED_JUDGE = join(packageRoot, 'models', 'arith-judge-tiny')
