// Argument checks shared by the objectives: config fields, batch shapes, masks, weights, pairs.
// A bad config or batch is an InvalidArgumentError naming the field; a non-finite input or output
// is a NonFiniteError.

import { InvalidArgumentError } from '../../engine/errors.js'
import { type BatchNormalizer, NonFiniteError, type PairIndex, type TokenMask, type TokenValues } from './types.js'

export function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x)
}

export function checkKeys(config: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(config)) {
    if (!allowed.includes(k)) {
      throw new InvalidArgumentError(k, `unknown ${what} option "${k}"; known: ${allowed.join(', ')}`)
    }
  }
}

export interface NumberRule {
  min?: number
  minExclusive?: boolean
  max?: number
  maxExclusive?: boolean
}

export function numberField(config: Record<string, unknown>, key: string, fallback: number, rule: NumberRule): number {
  const v = config[key]
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new InvalidArgumentError(key, `${key} must be a finite number, got ${String(v)}`)
  }
  if (rule.min !== undefined && (rule.minExclusive ? v <= rule.min : v < rule.min)) {
    throw new InvalidArgumentError(key, `${key} must be ${rule.minExclusive ? '>' : '≥'} ${rule.min}, got ${v}`)
  }
  if (rule.max !== undefined && (rule.maxExclusive ? v >= rule.max : v > rule.max)) {
    throw new InvalidArgumentError(key, `${key} must be ${rule.maxExclusive ? '<' : '≤'} ${rule.max}, got ${v}`)
  }
  return v
}

export function enumField<T extends string>(config: Record<string, unknown>, key: string, allowed: readonly T[], fallback: T): T {
  const v = config[key]
  if (v === undefined) return fallback
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
    throw new InvalidArgumentError(key, `${key} must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`)
  }
  return v as T
}

export function asConfig(config: unknown, what: string): Record<string, unknown> {
  if (config === undefined) return {}
  if (!isRecord(config)) throw new InvalidArgumentError('config', `${what} config must be an object`)
  return config
}

export function inputFinite(x: number, field: () => string): void {
  if (!Number.isFinite(x)) throw new NonFiniteError('input', field(), x)
}

export function checkOutputs(loss: number, a: readonly Float64Array[], b: readonly Float64Array[]): void {
  if (!Number.isFinite(loss)) throw new NonFiniteError('output', 'loss', loss)
  for (let i = 0; i < a.length; i++) {
    const ai = a[i]
    const bi = b[i]
    for (let t = 0; t < ai.length; t++) {
      if (!Number.isFinite(ai[t])) throw new NonFiniteError('output', `a[${i}][${t}]`, ai[t])
      if (!Number.isFinite(bi[t])) throw new NonFiniteError('output', `b[${i}][${t}]`, bi[t])
    }
  }
}

export function checkArray(x: unknown, field: string): asserts x is ArrayLike<number> {
  if (x === null || typeof x !== 'object' || typeof (x as { length?: unknown }).length !== 'number') {
    throw new InvalidArgumentError(field, `${field} must be an array of numbers`)
  }
}

/** Sequence `i` of a batch, checked to be an object with a `logp` array, and its field name (`sequences[i]`). */
export function checkedSequence<S extends { logp: TokenValues }>(seqs: readonly S[], i: number): { s: S; f: string } {
  const s = seqs[i]
  const f = `sequences[${i}]`
  if (!isRecord(s)) throw new InvalidArgumentError(f, `${f} must be an object`)
  checkArray(s.logp, `${f}.logp`)
  return { s, f }
}

export function checkSameLength(x: ArrayLike<unknown>, n: number, field: string): void {
  if (x.length !== n) throw new InvalidArgumentError(field, `${field} has length ${x.length}, expected ${n} (one per completion token)`)
}

export function sequencesOf<S>(batch: { sequences: readonly S[] } | undefined, what: string): readonly S[] {
  if (!isRecord(batch) || !Array.isArray(batch.sequences)) {
    throw new InvalidArgumentError('sequences', `${what} batch must have a sequences array`)
  }
  return batch.sequences as readonly S[]
}

/** Unmasked token count of a sequence (validates the mask's length). */
export function unmaskedCount(logp: TokenValues, mask: TokenMask | undefined, field: string): number {
  if (mask === undefined) return logp.length
  checkArray(mask, `${field}.mask`)
  checkSameLength(mask, logp.length, `${field}.mask`)
  let n = 0
  for (let t = 0; t < mask.length; t++) if (mask[t]) n++
  return n
}

export function sampleWeight(w: number | undefined, field: string): number {
  if (w === undefined) return 1
  if (typeof w !== 'number') throw new InvalidArgumentError(`${field}.weight`, `${field}.weight must be a number`)
  if (!Number.isFinite(w)) throw new NonFiniteError('input', `${field}.weight`, w)
  if (w < 0) throw new InvalidArgumentError(`${field}.weight`, `${field}.weight must be ≥ 0, got ${w}`)
  return w
}

export function normalizerField(norm: BatchNormalizer | undefined, key: keyof BatchNormalizer, local: number): number {
  const v = norm?.[key]
  if (v === undefined) return local
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new InvalidArgumentError(`normalizer.${key}`, `normalizer.${key} must be a finite number ≥ 0, got ${String(v)}`)
  }
  return v
}

export function checkPairs(pairs: unknown, count: number, countName: string): readonly PairIndex[] {
  if (!Array.isArray(pairs)) throw new InvalidArgumentError('pairs', 'pairs must be an array of [chosen, rejected] index pairs')
  for (let p = 0; p < pairs.length; p++) {
    const pair: unknown = pairs[p]
    if (!Array.isArray(pair) || pair.length !== 2) {
      throw new InvalidArgumentError(`pairs[${p}]`, `pairs[${p}] must be a [chosen, rejected] index pair`)
    }
    for (const k of [0, 1]) {
      const i: unknown = pair[k]
      if (typeof i !== 'number' || !Number.isInteger(i) || i < 0 || i >= count) {
        throw new InvalidArgumentError(`pairs[${p}][${k}]`, `pairs[${p}][${k}] = ${String(i)} is not an index into ${count} ${countName}`)
      }
    }
    if (pair[0] === pair[1]) throw new InvalidArgumentError(`pairs[${p}]`, `pairs[${p}] pairs ${countName} ${String(pair[0])} with itself`)
  }
  return pairs as readonly PairIndex[]
}
