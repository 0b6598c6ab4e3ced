// The methods `autodidact evolve --method NAME` can run.
import type { Method } from './common/method.js'
import { spec as cose } from './cose/spec.js'
import { spec as grpo } from './grpo/spec.js'
import { spec as jzero } from './jzero/spec.js'
import { dpoSpec, wsftSpec } from './offline/spec.js'
import { spec as rzero } from './rzero/spec.js'
import { spec as ttrl } from './ttrl/spec.js'

export const METHODS: Readonly<Record<string, Method>> = Object.freeze({ cose, rzero, ttrl, dpo: dpoSpec, wsft: wsftSpec, jzero, grpo })

/** The registered method called `name` (own entries only: `__proto__` or `toString` are not methods). */
export function methodNamed(name: string): Method | undefined {
  return Object.hasOwn(METHODS, name) ? METHODS[name] : undefined
}
