// ESM entry point: the same objects as the CommonJS one (one native addon per process).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const sg = require('./index.js')

export const { Limiter, KeyedLimiter, Composite, Decision, ManualClock, canonicalQuota, renderPrometheus, ClientResolver } = sg
export default sg
