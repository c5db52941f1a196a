import type { Decision as Decision_, Int, Key as Key_, KeyedLimiter, OnFull, ProxyHeader, Quota } from './index'

// The CommonJS entry point (express.js): `module.exports` is the function, with `rateLimit`
// and `default` naming it too. The ESM entry point's types are express.d.mts.

type RateLimit = typeof rateLimit

/** A rate-limiting middleware: 429 with `Retry-After` when a client is over its quota. */
declare function rateLimit(options?: rateLimit.Options): rateLimit.RateLimitMiddleware

declare namespace rateLimit {
  /** The request, response and next function of Express (structural, so `express` is not a dependency). */
  export interface Request { ip?: string; [key: string]: any }
  export interface Response { status(code: number): Response; send(body?: any): any; set(fields: Record<string, string>): any; [key: string]: any }
  export type NextFunction = (err?: unknown) => void

  /** The middleware's options. An option whose value is `undefined` is absent: its default stands. */
  export interface Options {
    /**
     * The quota as a rate string or options object (overrides `limit`/`windowMs`/`burst`), or
     * several (`['10/second', '1000/hour']`): a request is admitted by all or by none (the
     * limits that admitted get the cost back when a later one rejects).
     */
    quota?: Quota | Quota[]
    /** Requests per window (default 5). */
    limit?: Int
    /** `limit`'s older name, as express-rate-limit still takes it (give one or the other). */
    max?: Int
    /** The window in milliseconds (default 60 000). */
    windowMs?: Int
    /** The bucket's capacity (default `limit`). */
    burst?: Int
    /** The client's key (default: the peer address by the core's rules, shaped by `trustedProxies` and `ipv6Subnet`); may return a promise. */
    keyGenerator?: (req: Request, res: Response) => Key | Promise<Key>
    /** Requests for which it returns true are not counted; may return a promise. */
    skip?: (req: Request, res: Response) => boolean | Promise<boolean>
    /**
     * The default key's trusted proxies, whose forwarding header is read (not with
     * `keyGenerator`): a hop count (1 to 64), or addresses, CIDR ranges and `'loopback'`,
     * `'private'`, `'linklocal'`. Default none: the peer address (`0` and `false` say none
     * too). The framework's own proxy setting (and `req.ip`) is not read.
     */
    trustedProxies?: number | false | string | string[]
    /** The header those proxies write: `'x-forwarded-for'` (default) or `'forwarded'` (any case at run time). */
    proxyHeader?: ProxyHeader
    /**
     * The default key's IPv6 prefix length (default 64: one key per /64; express-rate-limit
     * v8's default is 56, give `56` for its keys), or `false`: no subnet, the whole address is
     * the key (as express-rate-limit v8's `false`).
     */
    ipv6Subnet?: number | false
    /** Keys never limited (not counted), or a function saying so (may return a promise). */
    allowList?: Key[] | ((req: Request, key: Key) => boolean | Promise<boolean>)
    /** false: no limiter is made and every request passes (default true; `SLUICEGATE_ENABLED=0` in the environment turns every middleware made meanwhile off). */
    enabled?: boolean
    /** Successful responses give their cost back (the core's refund) once sent (default false). */
    skipSuccessfulRequests?: boolean
    /** Failed responses (and requests whose client went away first) give their cost back (default false). */
    skipFailedRequests?: boolean
    /** What a successful response is (default: a status below 400); may return a promise. */
    requestWasSuccessful?: (req: Request, res: Response) => boolean | Promise<boolean>
    /** A dry run (the core's shadow mode): every request passes, the limits decide and count as enforcement would (default false). */
    shadow?: boolean
    /** Called for each request a shadow limit would have rejected (`decision.shadowRejected`). */
    onShadowReject?: (req: Request, key: Key, decision: Decision) => void
    /** Runs when a request is over the quota (default: `statusCode` and `message`). */
    handler?: (req: Request, res: Response, next: NextFunction, options: Options) => unknown
    /** `RateLimit*` fields, by express-rate-limit's names: `'draft-6'` (default, also `true`), `'draft-7'`, `'draft-8'` (the core's `ietf`), or `false`. */
    standardHeaders?: boolean | 'draft-6' | 'draft-7' | 'draft-8'
    /**
     * `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (default true).
     * `X-RateLimit-Reset` is, as express-rate-limit sends it, the Unix time in seconds (rounded
     * up) of `req.rateLimit.resetTime`, not the seconds from now of the standard fields' reset
     * (nor of sluicegate/fastify's `x-ratelimit-reset`, as @fastify/rate-limit sends it).
     */
    legacyHeaders?: boolean
    /** Tokens a request costs (default 1), or a function of the request. */
    cost?: Int | ((req: Request, res: Response) => Int)
    /** Status of a rejected request (default 429). */
    statusCode?: number
    /**
     * Body of a rejected request (default `'Too many requests, please try again later.'`), or a
     * function called with `(req, res)` whose result is the body (by the default `handler`).
     */
    message?: unknown
    /** The policy name in draft-8 (IETF) fields (default `"default"`). */
    policy?: string
    /**
     * The most clients held at once (default 2^20): in memory, and a shared-memory region's
     * capacity. A Redis store keeps no key bound and ignores it (and `onFull`).
     */
    maxKeys?: number
    /** At the bound: `'evict'` the client nearest to full (default) or `'reject'` new clients (a 429, `Retry-After: 1`). */
    onFull?: OnFull
    /** Use this limiter (e.g. one shared between routes) instead of creating one (not with `store`). */
    limiter?: KeyedLimiter
    /**
     * Where the clients' buckets live: a sluicegate store string, `'memory'` (the default, this
     * process), `'shm:NAME[?capacity=N]'`, a shared-memory region every worker process of the
     * host shares (node:cluster, pm2), so that a limit holds host-wide, or a Redis URL
     * (`'redis://HOST:PORT/DB?prefix=api&on_error=local'`), which every host shares: the
     * middleware then awaits each decision, and the URL's `on_error` says what a slow or
     * unreachable server means (`error` passes a 503 error to `next`, the store's error its
     * `cause`, its message not naming the store). Each distinct limit gets
     * its own Redis key prefix, the configured one plus the suffix below. Not express-rate-limit's
     * `store` (a `Store` object): that is refused. The region is NAME plus `-` and the first 12
     * hex digits of the SHA-256 of the canonical quota (then, for a region, `"\n"` and its key
     * bound when given, `?capacity=N` or else `maxKeys`: a region keeps the capacity it was
     * made with), so that each distinct limit has its own (the middleware's `store` names it);
     * `maxKeys` is its capacity. A Redis prefix's suffix leaves the bound out (Redis has none).
     */
    store?: string
    /** The request property the decision (a `RateLimitInfo`) is stored in (default `"rateLimit"`). */
    requestPropertyName?: string
  }

  /**
   * What the middleware puts on the request (`req.rateLimit`, or `requestPropertyName`): the
   * `Decision`, with express-rate-limit's `limit`, `used`, `remaining` and `resetTime`.
   */
  export interface RateLimitInfo extends Decision_ {
    /** The tokens in use, `limit - remaining` (express-rate-limit's hits in the window; `limit` on a rejection). */
    readonly used: Int
    /**
     * When more quota comes (a new Date each read): the moment the fields' reset counts down
     * to, from the time of the decision: plus `resetAfterMs` (the bucket full again) when
     * admitted, plus the retry wait (`Retry-After`, at least a second) when rejected.
     */
    readonly resetTime: Date
    /** The client's key, as the key generator gave it (express-rate-limit's `key`). */
    readonly key: Key
    /** The own fields with `used` and `resetTime`: what `res.json(req.rateLimit)` sends. */
    toJSON(): Record<string, unknown>
  }

  export interface RateLimitMiddleware {
    (req: Request, res: Response, next: NextFunction): void
    /** The limiter holding every client's bucket (the first quota's; `null` when turned off). */
    readonly limiter: KeyedLimiter | null
    /** One limiter per quota, in order (none when turned off). */
    readonly limiters: KeyedLimiter[]
    /** The store of that limiter, with its region's full name (`undefined` when `limiter` was given or turned off; with several quotas, the first's). */
    readonly store: string | undefined
    /** A client's state, changing nothing: the limit with the least remaining (a Promise on a Redis store; `null` when turned off). */
    get(key: Key): Decision | Promise<Decision> | null
    /** Forgets a client's buckets; whether one existed (a Promise on a Redis store). */
    reset(key: Key): boolean | Promise<boolean>
    /** express-rate-limit's name for `get`. */
    getKey(key: Key): Decision | Promise<Decision> | null
    /** express-rate-limit's name for `reset`. */
    resetKey(key: Key): boolean | Promise<boolean>
  }

  export type Decision = Decision_
  export type Key = Key_
  /** The same function. */
  export const rateLimit: RateLimit
  export { rateLimit as default }
}

export = rateLimit
