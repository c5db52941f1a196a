// The ESM entry point (prometheus.mjs): `registerLimiters` alone, no default export. The types
// are those of the CommonJS entry point (prometheus.d.ts).
export { registerLimiters } from './prometheus.js'
export type { RegisterOptions } from './prometheus.js'
