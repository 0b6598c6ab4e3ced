// The methods `autodidact evolve --method NAME` can run.
import type { BaseMethodConfig, MethodSpec } from './common/spec.js'
import { spec as cose } from './cose/spec.js'
import { spec as rzero } from './rzero/spec.js'

export const METHODS: Record<string, MethodSpec<BaseMethodConfig>> = {
  cose: cose as unknown as MethodSpec<BaseMethodConfig>,
  rzero: rzero as unknown as MethodSpec<BaseMethodConfig>,
}
