// Learning-rate schedules: constant, linear warmup then constant, and warmup then cosine decay
// to a minimum ratio of the peak.
import { InvalidArgumentError } from '../engine/errors.js'

export interface ScheduleOptions {
  kind?: 'constant' | 'warmup' | 'cosine'
  /** Linear warmup from 0 over this many steps (warmup, cosine). */
  warmupSteps?: number
  /** Steps until the cosine reaches its floor (cosine). */
  totalSteps?: number
  /** The cosine's floor as a fraction of the peak learning rate. Default 0. */
  minLrRatio?: number
}

export type Schedule = (step: number) => number

/** Multiplier of the peak learning rate at optimizer step `step` (1-based). */
export function createSchedule(o: ScheduleOptions = {}): Schedule {
  const kind = o.kind ?? 'constant'
  const warmup = o.warmupSteps ?? 0
  const total = o.totalSteps ?? 0
  const floor = o.minLrRatio ?? 0
  if (!['constant', 'warmup', 'cosine'].includes(kind)) throw new InvalidArgumentError('schedule.kind', `unknown schedule '${kind}'`)
  if (!Number.isInteger(warmup) || warmup < 0) throw new InvalidArgumentError('schedule.warmupSteps', 'warmupSteps must be a non-negative integer')
  if (!(floor >= 0 && floor <= 1)) throw new InvalidArgumentError('schedule.minLrRatio', 'minLrRatio must be in [0, 1]')
  if (kind === 'cosine' && (!Number.isInteger(total) || total <= warmup))
    throw new InvalidArgumentError('schedule.totalSteps', 'a cosine schedule needs integer totalSteps > warmupSteps')
  const ramp = (step: number) => (warmup > 0 && step <= warmup ? step / warmup : 1)
  if (kind === 'constant') return () => 1
  if (kind === 'warmup') return ramp
  return (step) => {
    if (warmup > 0 && step <= warmup) return ramp(step)
    const progress = Math.min(1, (step - warmup) / (total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + Math.cos(Math.PI * progress))
  }
}
