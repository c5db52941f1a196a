'use strict'
// Express middleware: `rateLimit(options)`, with the options express-rate-limit users know
// where they make sense. One KeyedLimiter (bounded memory) holds every client's bucket, in
// this process, with `store: 'shm:NAME'` in a shared-memory region every process of the host
// opens, or with `store: 'redis://...'` on a Redis server every host shares (one region, or
// one key prefix, per distinct limit: the name or prefix plus a suffix derived from the quota).

const { draftStyle, functions, isThenable, known, limiterFor, invalidArg } = require('./web.js')

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

/**
 * A rate-limiting middleware: 429 with `Retry-After` when a client is over its quota.
 * See express.d.ts for the options.
 */
function rateLimit(options = {}) {
  known(options, OPTIONS, 'rateLimit')
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
  const style = opts.standardHeaders === false ? null : draftStyle(opts.standardHeaders, 'standardHeaders')
  const legacy = Boolean(opts.legacyHeaders)
  for (const f of ['keyGenerator', 'handler']) {
    if (typeof opts[f] !== 'function') throw invalidArg(`${f} must be a function`)
  }
  functions(opts, ['skip'])
  const quota = opts.quota ?? { count: opts.limit, periodMs: opts.windowMs, ...(opts.burst === undefined ? {} : { burst: opts.burst }) }
  // On a Redis store a decision is a Promise (the event loop never waits for the server).
  const { limiter, store, remote } = limiterFor({ ...opts, quota })
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
