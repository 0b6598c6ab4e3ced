// Objectives by name (verl's POLICY_LOSS_REGISTRY) and the trainer's `objective` option.

import { InvalidArgumentError } from '../../engine/errors.js'
import { type BradleyTerryObjective, bradleyTerryObjective, type BradleyTerryObjectiveConfig } from './bradley-terry.js'
import { type DpoObjective, dpoObjective, type DpoObjectiveConfig } from './dpo.js'
import { type PolicyObjective, policyObjective, type PolicyObjectiveConfig } from './policy.js'
import { type SftObjective, sftObjective, type SftObjectiveConfig } from './sft.js'
import { isRecord } from './validation.js'

export type Objective = PolicyObjective | SftObjective | DpoObjective | BradleyTerryObjective

/** Objective factories by name, as verl's POLICY_LOSS_REGISTRY. */
export const OBJECTIVES = Object.freeze({
  policy: policyObjective,
  sft: sftObjective,
  dpo: dpoObjective,
  'bradley-terry': bradleyTerryObjective,
})

export type ObjectiveName = keyof typeof OBJECTIVES
export const OBJECTIVE_NAMES = Object.keys(OBJECTIVES) as ObjectiveName[]

/** The factory registered as `name`; throws InvalidArgumentError('name') for an unknown one. */
export function getObjective<N extends ObjectiveName>(name: N): (typeof OBJECTIVES)[N] {
  if (typeof name !== 'string' || !Object.prototype.hasOwnProperty.call(OBJECTIVES, name)) {
    throw new InvalidArgumentError('name', `unknown objective name "${String(name)}"; known: ${OBJECTIVE_NAMES.join(', ')}`)
  }
  return OBJECTIVES[name]
}

/** A trainer's `objective` option: the name plus that objective's config. */
export type ObjectiveSpec =
  | ({ name: 'policy' } & PolicyObjectiveConfig)
  | { name: 'sft' }
  | ({ name: 'dpo' } & DpoObjectiveConfig)
  | { name: 'bradley-terry' }

/** Build (and validate) an objective from `{ name, ...config }`. */
export function createObjective(spec: ObjectiveSpec): Objective {
  if (!isRecord(spec)) throw new InvalidArgumentError('objective', 'objective spec must be an object with a name')
  const { name, ...config } = spec as { name: unknown } & Record<string, unknown>
  getObjective(name as ObjectiveName) // validates the name
  switch (name as ObjectiveName) {
    case 'policy':
      return policyObjective(config as PolicyObjectiveConfig)
    case 'sft':
      return sftObjective(config as SftObjectiveConfig)
    case 'dpo':
      return dpoObjective(config as DpoObjectiveConfig)
    case 'bradley-terry':
      return bradleyTerryObjective(config as BradleyTerryObjectiveConfig)
  }
}
