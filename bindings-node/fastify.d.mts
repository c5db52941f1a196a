// The ESM entry point (fastify.mjs): `sluicegateFastify`, also the default export. The types
// (and the augmentation of Fastify's own) are those of the CommonJS entry point (fastify.d.ts).
import { sluicegateFastify } from './fastify.js'

export type {
  Admin, Decision, ErrorResponseBuilderContext, Key, PluginOptions, RateLimitHook, RateLimitHookProps,
  RateLimitOptions, RateLimitPreParsingHook, RouteRateLimitOptions,
} from './fastify.js'
export { sluicegateFastify }
export default sluicegateFastify
