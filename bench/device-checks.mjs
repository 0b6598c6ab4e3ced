// bench/device-checks.mjs — the PASS/FAIL bookkeeping the device scripts (bench/device-*.mjs) share:
// a check prints one line and counts a failure; a section prints its name and time and counts a
// throw inside it as a failure, so one broken section does not stop the others.

/** Seconds on a monotonic clock. */
export const now = () => Number(process.hrtime.bigint()) / 1e9

/**
 * `only`: run just the section of that name (the others return at once);
 * `afterSection`: called after every section that ran (a script that saves its results as it goes).
 */
export function deviceChecks({ only = null, afterSection = () => {} } = {}) {
  let failures = 0
  function check(ok, what) {
    console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}`)
    if (!ok) failures++
    return ok
  }
  async function section(name, fn) {
    if (only && only !== name) return
    console.log(`── ${name}`)
    const t0 = now()
    try {
      await fn()
    } catch (e) {
      failures++
      console.log(`  FAIL ${name}: ${e?.stack ?? e}`)
    }
    console.log(`   (${(now() - t0).toFixed(1)} s)`)
    afterSection()
  }
  return { check, section, failures: () => failures }
}
