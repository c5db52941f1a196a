// The ESM entry point (express.mjs): `rateLimit`, also the default export. The types are
// those of the CommonJS entry point (express.d.ts).
import { rateLimit } from './express.js'

export type { Decision, Key, NextFunction, Options, RateLimitInfo, RateLimitMiddleware, Request, Response } from './express.js'
export { rateLimit }
export default rateLimit
