// The methods `autodidact evolve --method NAME` can run.
import type { BaseMethodConfig, MethodSpec } from './common/spec.js'
import { spec as cose } from './cose/spec.js'
import { spec as jzero } from './jzero/spec.js'
import { dpoSpec, wsftSpec } from './offline/spec.js'
import { spec as rzero } from './rzero/spec.js'
import { spec as ttrl } from './ttrl/spec.js'

export const METHODS: Record<string, MethodSpec<BaseMethodConfig>> = {
  cose: cose as unknown as MethodSpec<BaseMethodConfig>,
  rzero: rzero as unknown as MethodSpec<BaseMethodConfig>,
  ttrl: ttrl as unknown as MethodSpec<BaseMethodConfig>,
  dpo: dpoSpec as unknown as MethodSpec<BaseMethodConfig>,
  wsft: wsftSpec as unknown as MethodSpec<BaseMethodConfig>,
  jzero: jzero as unknown as MethodSpec<BaseMethodConfig>,
}
