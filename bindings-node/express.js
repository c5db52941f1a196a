'use strict'
// Express middleware: `rateLimit(options)`, with the options express-rate-limit users know
// where they make sense. One KeyedLimiter (bounded memory) holds every client's bucket, in
// this process, with `store: 'shm:NAME'` in a shared-memory region every process of the host
// opens, or with `store: 'redis://...'` on a Redis server every host shares (one region, or
// one key prefix, per distinct limit: the name or prefix plus a suffix derived from the quota).

const { createHash } = require('node:crypto')
const { KeyedLimiter, _internal } = require('./index.js')

const { invalidArg, native, toRate, STORE_SUFFIX } = _internal
// express-rate-limit's names for `standardHeaders`, as the core's header styles.
const STYLES = { 'draft-6': 'draft6', 'draft-7': 'draft7', 'draft-8': 'ietf' }
const OPTIONS = new Set([
  'quota', 'limit', 'windowMs', 'burst', 'keyGenerator', 'skip', 'handler', 'standardHeaders',
  'legacyHeaders', 'cost', 'statusCode', 'message', 'policy', 'maxKeys', 'onFull', 'limiter',
  'requestPropertyName', 'store',
])

const defaultKey = (req) => req.ip ?? req.socket?.remoteAddress ?? ''

function defaultHandler(req, res, _next, options) {
  const { message, statusCode } = options
  res.status(statusCode)
  if (typeof message === 'function') return res.send(message(req, res))
  return res.send(message)
}

const isThenable = (v) => v !== null && typeof v === 'object' && typeof v.then === 'function'

/**
 * The namespace of the limiter for `rate` on `store`: a suffix derived from the limit, which
 * the core appends to a region's name or a Redis store's key prefix, so that middlewares with
 * different limits on one configured store get namespaces of their own (a region holds one
 * quota) and every process and host derives the same one: `-` and the first 12 hex digits of
 * the SHA-256 of the canonical quota (`canonicalQuota`). `'memory'` has none. Returns the
 * suffix and the store as printed with it (a Redis password redacted).
 */
function storeFor(store, rate) {
  if (typeof store !== 'string') {
    throw invalidArg(
      'store must be a sluicegate store string ("memory", "shm:NAME" or "redis://..."); express-rate-limit\'s Store objects are not used here (pass `limiter` to share one limiter between routes)',
    )
  }
  const suffix = `-${createHash('sha256').update(native.canonicalQuota(rate)).digest('hex').slice(0, 12)}`
  return { suffix, printed: native.storeSuffixed(store, suffix) }
}

/**
 * A rate-limiting middleware: 429 with `Retry-After` when a client is over its quota.
 * See express.d.ts for the options.
 */
function rateLimit(options = {}) {
  if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
  for (const k of Object.keys(options)) {
    if (!OPTIONS.has(k)) throw invalidArg(`unknown rateLimit option ${JSON.stringify(k)}`)
  }
  const opts = {
    limit: 5,
    windowMs: 60_000,
    keyGenerator: defaultKey,
    handler: defaultHandler,
    standardHeaders: 'draft-6',
    legacyHeaders: true,
    cost: 1,
    statusCode: 429,
    message: 'Too many requests, please try again later.',
    policy: 'default',
    onFull: 'evict',
    requestPropertyName: 'rateLimit',
    ...options,
  }
  let style = opts.standardHeaders
  if (style === true) style = STYLES['draft-6']
  else if (style === false) style = null
  else if (Object.hasOwn(STYLES, style)) style = STYLES[style]
  else throw invalidArg('standardHeaders must be true, false, "draft-6", "draft-7" or "draft-8"')
  const legacy = Boolean(opts.legacyHeaders)
  for (const f of ['keyGenerator', 'handler']) {
    if (typeof opts[f] !== 'function') throw invalidArg(`${f} must be a function`)
  }
  if (opts.skip !== undefined && typeof opts.skip !== 'function') throw invalidArg('skip must be a function')
  if (opts.limiter !== undefined && opts.store !== undefined) {
    throw invalidArg('give `store` or `limiter`, not both: a limiter passed in has its store')
  }
  let limiter = opts.limiter
  let store
  if (limiter === undefined) {
    const rate = toRate(opts.quota ?? { count: opts.limit, periodMs: opts.windowMs, ...(opts.burst === undefined ? {} : { burst: opts.burst }) })
    const { suffix, printed } = opts.store === undefined ? { printed: 'memory' } : storeFor(opts.store, rate)
    store = printed
    limiter = new KeyedLimiter(rate, { maxKeys: opts.maxKeys, onFull: opts.onFull, store: opts.store, [STORE_SUFFIX]: suffix })
  }
  // On a Redis store a decision is a Promise (the event loop never waits for the server).
  const remote = limiter.redisStats() !== null
  const { cost, policy, requestPropertyName: prop } = opts
  const costOf = typeof cost === 'function' ? cost : () => cost

  function respond(req, res, next, d) {
    req[prop] = d
    if (style !== null) res.set(d.headers(style, policy))
    if (legacy) res.set(d.headers('legacy', policy))
    if (d.allowed) return next()
    return opts.handler(req, res, next, opts)
  }

  function decide(req, res, next, key) {
    const c = costOf(req, res)
    if (remote) return limiter.tryAcquireAsync(key, c).then((d) => respond(req, res, next, d)).catch(next)
    return respond(req, res, next, limiter.tryAcquire(key, c))
  }

  function withKey(req, res, next) {
    const key = opts.keyGenerator(req, res)
    if (isThenable(key)) return key.then((k) => decide(req, res, next, k)).catch(next)
    return decide(req, res, next, key)
  }

  const middleware = function sluicegateRateLimit(req, res, next) {
    try {
      if (opts.skip !== undefined) {
        const s = opts.skip(req, res)
        if (isThenable(s)) {
          return s.then((yes) => (yes ? next() : withKey(req, res, next))).catch(next)
        }
        if (s) return next()
      }
      return withKey(req, res, next)
    } catch (err) {
      return next(err)
    }
  }
  middleware.limiter = limiter
  middleware.store = store
  middleware.resetKey = (key) => (remote ? limiter.removeAsync(key) : limiter.remove(key))
  return middleware
}

module.exports = rateLimit
module.exports.rateLimit = rateLimit
module.exports.default = rateLimit
