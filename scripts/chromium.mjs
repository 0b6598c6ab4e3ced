// Headless Debian Chromium driven by playwright-core (never `npx playwright install`: it downloads
// a browser). The flags keep it off the network this machine does not have and let it run as root.
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const CHROMIUM_PATH = process.env.AUTODIDACT_CHROMIUM ?? '/usr/bin/chromium'

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

/** Why a browser test cannot run here, or null when it can. */
export function chromiumMissing() {
  return existsSync(CHROMIUM_PATH) ? null : `no Chromium at ${CHROMIUM_PATH} (apt-get install -y chromium; .ci/run installs it)`
}

/** A fresh browser with its own empty profile; close() ends it and removes the profile. */
export async function launchChromium() {
  const { chromium } = await import('playwright-core')
  const profile = mkdtempSync(join(tmpdir(), 'ad-chromium-'))
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM_PATH, headless: true, args: FLAGS })
  return {
    context,
    async close() {
      await context.close()
      rmSync(profile, { recursive: true, force: true })
    },
  }
}
