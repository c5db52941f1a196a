'use strict'
// Express middleware: `rateLimit(options)`, with the options express-rate-limit users know
// where they make sense. One KeyedLimiter (bounded memory) holds every client's bucket, in
// this process, with `store: 'shm:NAME'` in a shared-memory region every process of the host
// opens, or with `store: 'redis://...'` on a Redis server every host shares (one region, or
// one key prefix, per distinct limit: the name or prefix plus a suffix derived from the quota).

const {
  draftStyle, functions, then, isThenable, known, defined, Limits, isEnabled, allowListOf, responseCounting, refunder, Held, hold, giveBackHeld, settleOnEnd, keyGeneratorOf,
  invalidArg, setFields, forEachField,
} = require('./web.js')
const { Decision } = require('./index.js')

const OPTIONS = new Set([
  'quota', 'limit', 'max', 'windowMs', 'burst', 'keyGenerator', 'skip', 'handler', 'standardHeaders',
  'legacyHeaders', 'cost', 'statusCode', 'message', 'policy', 'maxKeys', 'onFull', 'limiter',
  'requestPropertyName', 'store', 'allowList', 'enabled', 'skipSuccessfulRequests', 'skipFailedRequests',
  'requestWasSuccessful', 'trustedProxies', 'proxyHeader', 'ipv6Subnet', 'shadow', 'onShadowReject',
])
// express-rate-limit (v8) options with no counterpart here, or another name here, and what to
// give instead.
const REFUSED = {
  passOnStoreError: 'use the store URL\'s `on_error=open` (every request admitted while a Redis store fails; the default `on_error=local` limits each process by its share of the quota, `on_error=error` passes the error to `next`)',
  headers: 'express-rate-limit\'s older name for `legacyHeaders` (the `X-RateLimit-*` fields): give `legacyHeaders`, and `standardHeaders` for the `RateLimit` fields',
  identifier: 'use `policy` (a string: the name in draft-8\'s `RateLimit` and `RateLimit-Policy` fields)',
  retryAfter: 'not supported: `Retry-After` is the wait until the client\'s request would be admitted (a `handler` may set another)',
  logger: 'not supported: a failing store is reported as a process warning (`SluicegateWarning`, `process.on(\'warning\')`), and an error deciding goes to `next`',
  validate: 'not needed: the options are checked when the middleware is made (a bad one throws), and Express\'s `trust proxy` and `req.ip` are not read (give `trustedProxies`)',
  draft_polli_ratelimit_headers: 'removed in express-rate-limit v7: give `standardHeaders: \'draft-6\'`',
  onLimitReached: 'removed in express-rate-limit v7: use `handler` (called for each rejected request)',
}

/**
 * `req.rateLimit`: the decision, with express-rate-limit's `used` and `resetTime` besides its
 * `limit` and `remaining`, computed when read (getters of this one prototype: nothing more
 * per request than the copy and the time of the decision).
 */
class RateLimitInfo extends Decision {
  #at
  constructor(d, at, key) {
    super(d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs, d.retryAfterNs, d.resetAfterNs, d.windowSeconds, d.shadowRejected)
    this.#at = at
    /** The client's key (the keyGenerator's value), as express-rate-limit's `key`. */
    this.key = key
  }

  /**
   * The own fields with `used` and `resetTime` (getters, which `JSON.stringify` and
   * `Object.keys` do not see), so that `res.json(req.rateLimit)` sends what express-rate-limit's
   * does; a BigInt (a figure past 2^53, a BigInt key) as its digits in a string.
   */
  toJSON() {
    const own = { ...this, used: this.used, resetTime: this.resetTime }
    // JSON has no BigInt (a figure past 2^53, a BigInt key): its exact digits, as a string.
    for (const k in own) if (typeof own[k] === 'bigint') own[k] = own[k].toString()
    return own
  }

  /** The tokens in use: `limit - remaining` (express-rate-limit's hits in the window). */
  get used() {
    const { limit, remaining } = this
    if (typeof limit === 'number' && typeof remaining === 'number') return limit - remaining
    const u = BigInt(limit) - BigInt(remaining)
    return u <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(u) : u
  }

  /**
   * When more quota comes, as a Date: the moment the fields' reset counts down to (the core's,
   * from the time of the decision): the bucket full again when admitted, the retry wait (at
   * least a second, as `Retry-After`) when rejected.
   */
  get resetTime() {
    return new Date(RateLimitInfo.resetMs(this))
  }

  /** `resetTime` in Unix milliseconds (without making the Date). */
  static resetMs(info) {
    return info.#at + (info.allowed ? info.resetAfterMs : Math.max(info.retryAfterMs, 1000))
  }
}

/**
 * One legacy field onto `res`: `X-RateLimit-Reset` as express-rate-limit sends it, `reset`,
 * the Unix time in seconds (rounded up) of `resetTime`, where the core renders the seconds
 * from now (as @fastify/rate-limit sends it).
 */
function setLegacyField(res, name, value, reset) {
  res.setHeader(name, name === 'X-RateLimit-Reset' ? reset : value)
}

function defaultHandler(req, res, next, options) {
  const { message, statusCode } = options
  res.status(statusCode)
  if (typeof message !== 'function') return res.send(message)
  // A function's body may come as a Promise (as express-rate-limit awaits it); a throw of
  // res.send after it (an answer sent meanwhile) goes to next too, not an unhandled rejection.
  const body = message(req, res)
  if (!isThenable(body)) return res.send(body)
  return body.then((b) => res.send(b)).catch(next)
}

/**
 * A rate-limiting middleware: 429 with `Retry-After` when a client is over its quota.
 * See express.d.ts for the options.
 */
function rateLimit(options = {}) {
  known(options, OPTIONS, 'rateLimit', REFUSED)
  if (options.max !== undefined) {
    // express-rate-limit's older name for `limit`, which it still takes.
    if (options.limit !== undefined) throw invalidArg('give limit or max (its older name), not both')
    options = { ...options, limit: options.max }
  }
  const opts = {
    limit: 5,
    windowMs: 60_000,
    handler: defaultHandler,
    standardHeaders: 'draft-6',
    legacyHeaders: true,
    cost: 1,
    statusCode: 429,
    message: 'Too many requests, please try again later.',
    policy: 'default',
    onFull: 'evict',
    requestPropertyName: 'rateLimit',
    // An option given as `undefined` is absent: it keeps its default.
    ...defined(options),
  }
  const style = opts.standardHeaders === false ? null : draftStyle(opts.standardHeaders, 'standardHeaders')
  const legacy = Boolean(opts.legacyHeaders)
  if (typeof opts.handler !== 'function') throw invalidArg('handler must be a function')
  // The default handler sends it: a status Node cannot send failed on every rejected request.
  const status = typeof opts.statusCode === 'string' && /^\d+$/.test(opts.statusCode) ? Number(opts.statusCode) : opts.statusCode
  if (opts.handler === defaultHandler && !(Number.isInteger(status) && status >= 100 && status <= 999)) {
    throw invalidArg('statusCode must be an HTTP status, an integer from 100 to 999')
  }
  if (typeof opts.policy !== 'string') throw invalidArg('policy must be a string')
  opts.keyGenerator = keyGeneratorOf(options)
  functions(opts, ['skip', 'onShadowReject'])
  const allowed = allowListOf(opts.allowList, opts.keyGenerator)
  const counting = responseCounting(opts)
  if (opts.quota === undefined) {
    // Checked under express-rate-limit's names (the core's would say count and periodMs).
    const whole = (v) => (typeof v === 'bigint' ? v >= 1n : Number.isSafeInteger(v) && v >= 1)
    // A string (from a configuration) shows as one: `got "5"`, not `got 5`.
    const shown = (v) => (typeof v === 'string' ? JSON.stringify(v) : String(v))
    if (typeof opts.limit === 'function') {
      throw invalidArg('limit must be a number: a limit computed per request is not supported (give such routes a middleware of their own)')
    }
    if (!whole(opts.limit)) throw invalidArg(`limit must be a whole number of requests, at least 1, got ${shown(opts.limit)}`)
    if (!whole(opts.windowMs)) throw invalidArg(`windowMs must be a whole number of milliseconds, at least 1, got ${shown(opts.windowMs)}`)
  }
  const quota = opts.quota ?? { count: opts.limit, periodMs: opts.windowMs, ...(opts.burst === undefined ? {} : { burst: opts.burst }) }
  // Turned off (`enabled: false`, SLUICEGATE_ENABLED=0): no limiter is made, every request passes.
  const limits = isEnabled(opts.enabled) ? new Limits({ ...opts, quota }) : null
  const { cost, policy, requestPropertyName: prop } = opts
  const costOf = typeof cost === 'function' ? cost : () => cost

  // Every step below ends in `next()`, `next(err)` or the handler's response, also when a
  // function of the options throws after an asynchronous step: no request is left hanging, no
  // rejection unobserved (Express 4 does not read the Promise a middleware returns).

  function respond(req, res, next, key, c, d) {
    const info = new RateLimitInfo(d, Date.now(), key)
    req[prop] = info
    // Another middleware may have answered meanwhile: its header fields stand.
    if (!res.headersSent) {
      if (style !== null) setFields(res, d, style, policy)
      if (legacy) forEachField(d, 'legacy', policy, setLegacyField, res, String(Math.ceil(RateLimitInfo.resetMs(info) / 1000)))
      // Both styles off: a 429 still says when to come back (the core's 'none' style is
      // Retry-After alone).
      if (style === null && !legacy && !d.allowed) setFields(res, d, 'none', policy)
    }
    if (!d.allowed) {
      // All or nothing over the request: the sluicegate middlewares before this one (an
      // app-wide limit before a route's) give back what they took.
      giveBackHeld(req)
      // An async handler's rejection goes to next as a throw does (Express 4 does not
      // catch a middleware's Promise; express-rate-limit awaits its handler).
      const r = opts.handler(req, res, next, opts)
      return isThenable(r) ? r.then(undefined, next) : r
    }
    if (d.shadowRejected) {
      opts.onShadowReject?.(req, key, d)
      return next() // a shadow rejection took nothing: nothing to give back or refund
    }
    const held = new Held(limits, key, c)
    hold(req, held)
    // A client gone while the decision was pending is refunded at once (its 'close' has been).
    if (counting !== null) settleOnEnd(res, refunder(counting, held), counting, req, res)
    return next()
  }

  /** `respond`, its throws (the handler's, onShadowReject's) passed to `next`: after an asynchronous step. */
  function settle(req, res, next, key, c, d) {
    try {
      return respond(req, res, next, key, c, d)
    } catch (err) {
      return next(err)
    }
  }

  // On a Redis store a decision is a Promise (the event loop never waits for the server).
  function decide(req, res, next, key) {
    let c
    let d
    try {
      c = costOf(req, res)
      d = limits.decide(key, c)
    } catch (err) {
      return next(err)
    }
    if (isThenable(d)) return d.then((v) => settle(req, res, next, key, c, v), next)
    return settle(req, res, next, key, c, d)
  }

  function withKey(req, res, next, key) {
    if (allowed === undefined) return decide(req, res, next, key)
    let yes
    try {
      yes = allowed(req, key)
    } catch (err) {
      return next(err)
    }
    return then(yes, (y) => (y ? next() : decide(req, res, next, key)), next)
  }

  function keyed(req, res, next) {
    let key
    try {
      key = opts.keyGenerator(req, res)
    } catch (err) {
      return next(err)
    }
    return then(key, (k) => withKey(req, res, next, k), next)
  }

  // The common case (no skip or allow list, a key and a decision without a Promise) goes
  // straight through, with no callback made for a value already there.
  const direct = opts.skip === undefined && allowed === undefined && limits !== null && !limits.remote
  const middleware = limits === null
    ? function sluicegateRateLimit(_req, _res, next) { next() }
    : function sluicegateRateLimit(req, res, next) {
      try {
        if (direct) {
          const key = opts.keyGenerator(req, res)
          if (!isThenable(key)) {
            const c = costOf(req, res)
            return respond(req, res, next, key, c, limits.decide(key, c))
          }
          return key.then((k) => withKey(req, res, next, k), next)
        }
        if (opts.skip === undefined) return keyed(req, res, next)
        return then(opts.skip(req, res), (yes) => (yes ? next() : keyed(req, res, next)), next)
      } catch (err) {
        return next(err)
      }
    }
  middleware.limiter = limits === null ? null : limits.limiters[0]
  middleware.limiters = limits === null ? [] : limits.limiters
  middleware.store = limits?.store
  /** `key`'s state (the limit with the least remaining), changing nothing; `null` when turned off. */
  middleware.get = (key) => (limits === null ? null : limits.get(key))
  /** Forgets `key`'s buckets; whether one existed. */
  middleware.reset = (key) => (limits === null ? false : limits.reset(key))
  // express-rate-limit's names
  middleware.getKey = middleware.get
  middleware.resetKey = middleware.reset
  return middleware
}

module.exports = rateLimit
module.exports.rateLimit = rateLimit
module.exports.default = rateLimit
