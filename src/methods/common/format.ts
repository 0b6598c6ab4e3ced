// Number formatting of the progress line and the report.

/** `x` with `digits` decimals, or '–' when it is not a finite number. */
export function fmt(x: unknown, digits = 2): string {
  return typeof x === 'number' && Number.isFinite(x) ? x.toFixed(digits) : '–'
}
