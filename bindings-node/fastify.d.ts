import type {
  FastifyPluginCallback, FastifyReply, FastifyRequest,
  onRequestHookHandler, preHandlerHookHandler, preParsingHookHandler, preValidationHookHandler,
} from 'fastify'
import type { Decision as Decision_, Int, Key as Key_, KeyedLimiter, OnFull, ProxyHeader, Quota } from './index'

// The CommonJS entry point (fastify.js): `module.exports` is the plugin, with
// `sluicegateFastify` and `default` naming it too. The ESM entry point's types are
// fastify.d.mts.

type SluicegateFastify = FastifyPluginCallback<sluicegateFastify.PluginOptions>

/** The plugin (`fastify.register(sluicegateFastify, options)`). */
declare function sluicegateFastify(...params: Parameters<SluicegateFastify>): ReturnType<SluicegateFastify>

declare namespace sluicegateFastify {
  /** What `errorResponseBuilder` gets, as in @fastify/rate-limit. */
  export interface ErrorResponseBuilderContext {
    /** 429. */
    statusCode: number
    /** Always false (no `ban` here). */
    ban: boolean
    /** The wait in words, `'30 seconds'`, `'1 minute'`. */
    after: string
    /** The limit (the bucket's capacity; a bigint past 2^53). */
    max: Int
    /** The wait in milliseconds (rounded up). */
    ttl: number
  }

  /**
   * A hook of one limit, for a route's own hooks (`onRequest: fastify.rateLimit({ max: 5 })`,
   * also `preValidation` or `preHandler`) or a scope's (`addHook`). With
   * `skipSuccessfulRequests` / `skipFailedRequests` it settles its refunds by the response's end.
   */
  export type RateLimitHook = onRequestHookHandler & preValidationHookHandler & preHandlerHookHandler & RateLimitHookProps

  /**
   * A hook of one limit made with `hook: 'preParsing'`, for `preParsing` hooks: Fastify's form
   * with the payload, which it hands on.
   */
  export type RateLimitPreParsingHook = preParsingHookHandler & RateLimitHookProps

  export interface RateLimitHookProps extends Admin {
    /** The limiter holding every client's bucket of this limit (the first quota's; `null` when turned off). */
    readonly limiter: KeyedLimiter | null
    /** One limiter per quota, in order (none when turned off). */
    readonly limiters: KeyedLimiter[]
    /** Its store, with the region's or prefix's full name (`undefined` when `limiter` was given or turned off; with several quotas, the first's). */
    readonly store: string | undefined
  }

  /** A limit's admin calls, by client key. */
  export interface Admin {
    /** The client's state, changing nothing: the limit with the least remaining (a Promise on a Redis store; `null` when turned off). */
    get(key: Key): Decision | Promise<Decision> | null
    /** Forgets the client's buckets; whether one existed (a Promise on a Redis store). */
    reset(key: Key): boolean | Promise<boolean>
  }

  /**
   * The options of one limit: the plugin's, and a route's `config.rateLimit` (merged over them).
   * An option whose value is `undefined` is absent (its default, or the plugin's, stands). A
   * route giving any of `quota`, `limiter`, `max`, `timeWindow`, `burst` has a quota of its own:
   * the plugin's `quota`, `limiter` and `burst` do not apply to it; the plugin's `max` and
   * `timeWindow` fill in those it leaves out, unless it gives `quota` or `limiter`. A route
   * giving `keyGenerator`, or any of `trustedProxies`, `proxyHeader`, `ipv6Subnet`, has a key
   * of its own: its `keyGenerator` leaves out the plugin's default-key options, and its
   * default-key options the plugin's `keyGenerator` (the default key, shaped by them, keys it).
   */
  export interface RateLimitOptions {
    /** Requests per `timeWindow` (default 1000); the bucket's capacity unless `burst` is given. */
    max?: Int
    /** The window: milliseconds (default 60 000), or a duration the core parses (`'1 minute'`, `'10s'`). */
    timeWindow?: Int | string
    /**
     * The quota as a rate string or options object (instead of `max`/`timeWindow`/`burst`), or
     * several (`['10/second', '1000/hour']`): a request is admitted by all or by none.
     */
    quota?: Quota | Quota[]
    /** The bucket's capacity (default `max`). */
    burst?: Int
    /** The hook that decides (default `'onRequest'`). */
    hook?: 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
    /** The client's key (default: the peer address by the core's rules, shaped by `trustedProxies` and `ipv6Subnet`); may return a promise. */
    keyGenerator?: (req: FastifyRequest) => Key | Promise<Key>
    /**
     * The default key's trusted proxies, whose forwarding header is read (not with
     * `keyGenerator`): a hop count (1 to 64), or addresses, CIDR ranges and `'loopback'`,
     * `'private'`, `'linklocal'`. Default none: the peer address (`0` and `false` say none
     * too). The framework's own proxy setting (and `req.ip`) is not read.
     */
    trustedProxies?: number | false | string | string[]
    /** The header those proxies write: `'x-forwarded-for'` (default) or `'forwarded'` (any case at run time). */
    proxyHeader?: ProxyHeader
    /** The default key's IPv6 prefix length (default 64: one key per /64), or `false`: no subnet, the whole address is the key. */
    ipv6Subnet?: number | false
    /** Keys never limited (not counted), or a function saying so (may return a promise). */
    allowList?: Key[] | ((req: FastifyRequest, key: Key) => boolean | Promise<boolean>)
    /**
     * A limiter or store error (the decision failing) lets the request through instead of
     * failing it (a 503; default false). A Redis store fails so only under its URL's
     * `on_error=error` (a region, on its rare lock timeout): under the default
     * `on_error=local` it falls back to limiting in each process, and `open` / `closed` decide. Never a rejected request: a throw of `onExceeded` or
     * `errorResponseBuilder`, like one of `keyGenerator` or `cost`, is the request's error, and
     * so is a key or cost they give that is none (`ERR_SLUICEGATE_INVALID_ARG`, a 500 by
     * Fastify's error handler).
     */
    skipOnError?: boolean
    /** Runs on each admitted request. */
    onExceeding?: (req: FastifyRequest, key: Key) => void
    /** Runs on each rejected request. */
    onExceeded?: (req: FastifyRequest, key: Key) => void
    /** The error (or object with `statusCode`) a rejection answers with (default: 429, "Rate limit exceeded, retry in ..."). */
    errorResponseBuilder?: (req: FastifyRequest, context: ErrorResponseBuilderContext) => unknown
    /** Header fields on rejections, by lower-case name, `false` to leave one out (default: all). */
    addHeaders?: Record<string, boolean>
    /** Header fields on admitted requests, by lower-case name, `false` to leave one out (default: all). */
    addHeadersOnExceeding?: Record<string, boolean>
    /**
     * `false` (default): `x-ratelimit-limit`, `-remaining` and `-reset`, the last in seconds
     * from now as @fastify/rate-limit sends it (not the Unix time of sluicegate/express's
     * legacy `X-RateLimit-Reset`); `true` or `'draft-6'`: `ratelimit-*`; `'draft-7'`,
     * `'draft-8'`: those drafts' fields.
     */
    enableDraftSpec?: boolean | 'draft-6' | 'draft-7' | 'draft-8'
    /** The policy name in draft-8 fields (default `"default"`). */
    policy?: string
    /** Tokens a request costs (default 1), or a function of the request. */
    cost?: Int | ((req: FastifyRequest) => Int)
    /**
     * The most clients held at once (default 2^20): in memory, and a shared-memory region's
     * capacity. A Redis store keeps no key bound and ignores it (and `onFull`).
     */
    maxKeys?: number
    /** At the bound: `'evict'` (default) or `'reject'` new clients (a 429, `Retry-After: 1`). */
    onFull?: OnFull
    /**
     * `'memory'` (default), `'shm:NAME'` (every process of the host) or `'redis://...'` (every
     * host), as in `sluicegate/express`; the suffix of a route's `config.rateLimit` limit
     * hashes its methods and path too, and a group's its `groupId`, so that limits of one quota
     * count apart as they do in memory.
     */
    store?: string
    /** Use this limiter instead of creating one (not with `store`). */
    limiter?: KeyedLimiter
    /** false: no limiter is made and every request passes (default true; `SLUICEGATE_ENABLED=0` in the environment turns every limit made meanwhile off). */
    enabled?: boolean
    /** Successful responses give their cost back (the core's refund) once sent (default false); also for a `fastify.rateLimit()` hook, on a route's or a scope's hooks. */
    skipSuccessfulRequests?: boolean
    /** Failed responses (and aborted requests, also aborted while a Redis decision was pending) give their cost back (default false). */
    skipFailedRequests?: boolean
    /** What a successful response is (default: a status below 400); may return a promise. */
    requestWasSuccessful?: (req: FastifyRequest, reply: FastifyReply) => boolean | Promise<boolean>
    /** A dry run (the core's shadow mode): every request passes, the limits decide and count as enforcement would (default false). */
    shadow?: boolean
    /** Called for each request a shadow limit would have rejected (`decision.shadowRejected`). */
    onShadowReject?: (req: FastifyRequest, key: Key, decision: Decision) => void
  }

  export interface RouteRateLimitOptions extends RateLimitOptions {
    /** Routes with the same `groupId` share one limit (their options must give the same quota and store). */
    groupId?: string
  }

  export interface PluginOptions extends RateLimitOptions {
    /** Limit every route (default true); with false, only routes whose `config.rateLimit` is an object. */
    global?: boolean
  }

  export type Decision = Decision_
  export type Key = Key_
  /** The same plugin. */
  export const sluicegateFastify: SluicegateFastify
  export { sluicegateFastify as default }
}

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * A hook of a limit of its own, for a route's hooks or a scope's (`addHook`); it settles its
     * own refunds. With `hook: 'preParsing'`, a `preParsing` hook (it takes the payload).
     */
    rateLimit(options: sluicegateFastify.RouteRateLimitOptions & { hook: 'preParsing' }): sluicegateFastify.RateLimitPreParsingHook
    rateLimit(options?: sluicegateFastify.RouteRateLimitOptions & { hook?: 'onRequest' | 'preValidation' | 'preHandler' }): sluicegateFastify.RateLimitHook
    // Options typed as the general RouteRateLimitOptions (hook unknown to the compiler): typed
    // as the common case, as before the preParsing overload.
    rateLimit(options?: sluicegateFastify.RouteRateLimitOptions): sluicegateFastify.RateLimitHook
    /** The global limit's admin calls, or a group's (by `groupId`). */
    rateLimits: {
      get(key: Key_, groupId?: string): Decision_ | Promise<Decision_> | null
      reset(key: Key_, groupId?: string): boolean | Promise<boolean>
      /**
       * Every limit the plugin has made, as `[labels, limiter]` pairs for `registerLimiters`
       * or `renderPrometheus`: `limit` (`global`, `route:GET /a`, `group:NAME`, `hook#1`) and
       * `quota`. Each counts its decisions in this process (a `limiter` passed in counts when
       * built with `metrics: true`, and is left out otherwise).
       */
      limiters(): Array<[{ limit: string; quota: string }, KeyedLimiter]>
    }
  }
  interface FastifyContextConfig {
    rateLimit?: sluicegateFastify.RouteRateLimitOptions | false
  }
  interface FastifyRequest {
    /** The decision of the last limit that decided for this request. */
    rateLimit: Decision_ | null
  }
}

export = sluicegateFastify
