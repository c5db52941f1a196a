'use strict'
// Fastify plugin: `fastify.register(require('sluicegate/fastify'), options)`, with
// @fastify/rate-limit's option names where they mean the same thing (`max`, `timeWindow`,
// `global`, `hook`, `keyGenerator`, `allowList`, `skipOnError`, `onExceeding`, `onExceeded`,
// `errorResponseBuilder`, `addHeaders`, `addHeadersOnExceeding`, `enableDraftSpec`, `groupId`
// and per-route `config.rateLimit`). The core decides and renders the header fields; this
// file reads the request, adds the hooks and writes the reply.

const {
  draftStyle, functions, then, isThenable, known, defined, Limits, isEnabled, allowListOf, responseCounting, refunder, Held, hold, giveBackHeld, warn, gone, settleOnEnd,
  keyGeneratorOf, CLIENT_OPTIONS, invalidArg, forEachField, SCOPE,
} = require('./web.js')
const { canonicalQuota } = require('./index.js')

const PLUGIN = new Set([
  'global', 'max', 'timeWindow', 'quota', 'burst', 'hook', 'keyGenerator', 'allowList', 'skipOnError',
  'onExceeding', 'onExceeded', 'errorResponseBuilder', 'addHeaders', 'addHeadersOnExceeding',
  'enableDraftSpec', 'policy', 'cost', 'maxKeys', 'onFull', 'store', 'limiter', 'enabled',
  'skipSuccessfulRequests', 'skipFailedRequests', 'requestWasSuccessful', 'trustedProxies', 'proxyHeader',
  'ipv6Subnet', 'shadow', 'onShadowReject',
])
// A route's config.rateLimit: the plugin's options but `global`, and `groupId`.
const ROUTE = new Set([...PLUGIN, 'groupId'])
ROUTE.delete('global')
// @fastify/rate-limit options with no counterpart here, and why.
const REFUSED = {
  ban: 'not supported (a banned client is still limited by its quota)',
  onBanReach: 'not supported (no `ban`)',
  continueExceeding: 'not supported: a rejected request costs nothing (the core never counts it)',
  exponentialBackoff: 'not supported',
  cache: 'use `maxKeys` (the bound on clients held)',
  redis: 'use `store: "redis://HOST:PORT/DB?prefix=..."` (a URL, not a client)',
  nameSpace: 'use the `prefix` of a Redis store URL',
}
const HOOKS = new Set(['onRequest', 'preParsing', 'preValidation', 'preHandler'])
// The options that make a limit's quota. A route's config.rateLimit (or fastify.rateLimit()'s
// options) giving any of them makes its own: the plugin's `quota`, `limiter` and `burst` do
// not apply to it; the plugin's `max` and `timeWindow` fill in those the route leaves out (as
// in @fastify/rate-limit), unless the route gives `quota` or `limiter` (a whole limit).
const QUOTA_SHAPING = ['quota', 'limiter', 'max', 'timeWindow', 'burst']
const DEFAULTS = {
  global: true,
  max: 1000,
  timeWindow: 60_000,
  hook: 'onRequest',
  skipOnError: false,
  enableDraftSpec: false,
  policy: 'default',
  cost: 1,
  onFull: 'evict',
}

/** The default rejection: an error Fastify's error handler answers with its status. */
function defaultErrorResponse(_req, context) {
  const err = new Error(`Rate limit exceeded, retry in ${context.after}`)
  err.statusCode = context.statusCode
  return err
}

const UNITS = [
  [365.25 * 86_400_000, 'year'], [86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1000, 'second'],
]
/** A wait in whole seconds as words, as @fastify/rate-limit's `after` (`'1 minute'`, `'30 seconds'`). */
function after(ms) {
  const s = Math.ceil(ms / 1000) * 1000
  if (s < 1000) return `${s} ms`
  const [unit, name] = UNITS.find(([u]) => s >= u)
  const n = Math.round(s / unit)
  return `${n} ${name}${n === 1 ? '' : 's'}`
}

// No field switched off.
const NONE_OFF = Object.freeze({})

/** `{ name (lower case): boolean }`, checked. */
function switches(v, what) {
  if (v === undefined) return NONE_OFF
  if (v === null || typeof v !== 'object') throw invalidArg(`${what} must be an object of header names and booleans`)
  const out = {}
  for (const [k, on] of Object.entries(v)) {
    if (typeof on !== 'boolean') throw invalidArg(`${what}[${JSON.stringify(k)}] must be a boolean`)
    out[k.toLowerCase()] = on
  }
  return out
}

/** One field onto a reply, unless `off` switches it off. */
function replyField(reply, name, value, off) {
  if (off === NONE_OFF || off[name.toLowerCase()] !== false) reply.header(name, value)
}

/** The decision's fields in `style` onto the reply, less those switched off. */
function setReplyFields(reply, d, style, policy, off) {
  forEachField(d, style, policy, replyField, reply, off)
}

// A duration as @fastify/rate-limit reads `timeWindow` (the `ms` grammar: a number, possibly
// fractional, then an optional unit; a bare number is milliseconds).
const DURATION = /^(\d*\.?\d+) *(milliseconds?|msecs?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|wks?|w|years?|yrs?|y)?$/i
const UNIT_MS = { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 604800e3, y: 31557600e3 }

/**
 * `timeWindow` in milliseconds when it is a string of that grammar (`'1 minute'`, `'1.5
 * minutes'`, `'10 secs'`, `'1w'`, `'90000'`), else as given (a number, or a string the core's
 * rate syntax reads). A duration that is no whole number of milliseconds is refused, naming
 * what was given.
 */
function windowMs(w) {
  if (typeof w !== 'string') return w
  const m = DURATION.exec(w.trim())
  if (m === null) return w
  const unit = (m[2] ?? 'ms').toLowerCase()
  const key = /^(ms|msecs?|milliseconds?)$/.test(unit) ? 'ms' : unit[0]
  // '4.1 minutes' is 245999.99999999997 in binary floating point: a whole number within a
  // millionth of a millisecond is that number.
  const exact = Number(m[1]) * UNIT_MS[key]
  const ms = Math.round(exact)
  if (Math.abs(exact - ms) > 1e-6 || !Number.isSafeInteger(ms) || ms <= 0) {
    throw invalidArg(`timeWindow ${JSON.stringify(w)} must be a whole number of milliseconds above 0`)
  }
  return ms
}

/** The checked settings of one limit: the plugin's options merged with a route's. */
function settings(o, raws) {
  functions(o, ['onExceeding', 'onExceeded', 'errorResponseBuilder', 'onShadowReject'])
  if (typeof o.max === 'function' || typeof o.timeWindow === 'function') {
    throw invalidArg('max and timeWindow must be values (one quota per limit; give a route its own config.rateLimit)')
  }
  if (!HOOKS.has(o.hook)) throw invalidArg(`hook must be one of ${[...HOOKS].join(', ')}`)
  if (typeof o.skipOnError !== 'boolean') throw invalidArg('skipOnError must be a boolean')
  if (typeof o.policy !== 'string') throw invalidArg('policy must be a string')
  if (o.groupId !== undefined && typeof o.groupId !== 'string') throw invalidArg('groupId must be a string')
  let quota = o.quota
  if (quota === undefined) {
    const { timeWindow: given, burst } = o
    // A string of digits (from the environment) is that number, as the rate string read it.
    const count = typeof o.max === 'string' && /^\d+$/.test(o.max) ? (Number.isSafeInteger(Number(o.max)) ? Number(o.max) : BigInt(o.max)) : o.max
    // Checked under @fastify/rate-limit's names (the core's would say count and periodMs).
    const whole = (v) => (typeof v === 'bigint' ? v >= 1n : Number.isSafeInteger(v) && v >= 1)
    const shown = (v) => (typeof v === 'string' ? JSON.stringify(v) : String(v))
    if (!whole(count)) throw invalidArg(`max must be a whole number of requests, at least 1, got ${shown(count)}`)
    const w = windowMs(given)
    if (typeof w === 'string') {
      quota = `${count}/${w}${burst === undefined ? '' : `; burst=${burst}`}`
      // A string no duration reads is a period of the rate syntax ('minute', '5m'), or neither.
      try {
        canonicalQuota(`${count}/${w}`)
      } catch (err) {
        if (err?.code !== 'ERR_SLUICEGATE_PARSE' && err?.code !== 'ERR_SLUICEGATE_INVALID_ARG') throw err
        const named = new err.constructor(
          `timeWindow ${JSON.stringify(given)} is not a duration ('1 minute', '10s', a number of milliseconds) nor a period of the rate syntax ('minute', '5m'): ${err.message}`,
          { cause: err },
        )
        named.code = err.code
        throw named
      }
    } else {
      if (!whole(w)) throw invalidArg(`timeWindow must be a whole number of milliseconds, at least 1, or a duration ('1 minute'), got ${shown(w)}`)
      quota = { count, periodMs: w, burst }
      if (burst === undefined) delete quota.burst
    }
  }
  const keyGenerator = keyGeneratorOf(o, raws)
  return {
    ...o,
    quota,
    style: o.enableDraftSpec === false ? 'legacy' : draftStyle(o.enableDraftSpec, 'enableDraftSpec'),
    addHeaders: switches(o.addHeaders, 'addHeaders'),
    // Fields on an admitted request; Retry-After is the core's on rejections only.
    addHeadersOnExceeding: switches(o.addHeadersOnExceeding, 'addHeadersOnExceeding'),
    keyGenerator,
    allowed: allowListOf(o.allowList, keyGenerator),
    counting: responseCounting(o),
    errorResponseBuilder: o.errorResponseBuilder ?? defaultErrorResponse,
    costOf: typeof o.cost === 'function' ? o.cost : () => o.cost,
  }
}

// Per request: the refunds its admitted limits wait for (response-dependent counting).
const PENDING = Symbol('sluicegate.pending')

/** The response's end: each admitted limit that counts by the response gets its outcome. */
function onResponse(req, reply, done) {
  for (const [p, outcome] of req[PENDING] ?? []) {
    try {
      then(p.counting.wasSuccessful(req, reply), outcome, warn)
    } catch (err) {
      warn(err)
    }
  }
  done()
}

/** The client went away before the response: a failed request. */
function onRequestAbort(req, done) {
  for (const [, outcome] of req[PENDING] ?? []) outcome(false)
  done()
}

/**
 * The hook deciding for one limit: `(req, reply, next)`, where `next(err?)` goes on. Exposes
 * the limits as properties. `ownRefunds`: the refunds of response-dependent counting are
 * settled by the response's own events (a `fastify.rateLimit()` hook, which may be on any
 * route's or scope's hooks), else by the response hooks `limitRoute` adds to its routes.
 *
 * Every path ends in `next` once, also when a function of the options throws after an
 * asynchronous step (a Promise of a key, an allow list or a decision): no request hangs, no
 * rejection goes unobserved. `skipOnError` covers the decision's failures only (a store's, a
 * limiter's): a throw of keyGenerator, cost or a hook, or a key or cost that is none
 * (`ERR_SLUICEGATE_INVALID_ARG`), is the request's error, and a rejected request stays refused.
 */
function handlerFor(p, limits, ownRefunds) {
  /** Owes what `held` holds back by the response (if it does not count): queued, or settled by its end. */
  function owe(req, reply, held) {
    const outcome = refunder(p.counting, held)
    if (ownRefunds) return settleOnEnd(reply.raw, outcome, p.counting, req, reply)
    // The client went away while the decision was pending: onRequestAbort has been.
    if (gone(reply.raw)) return outcome(false)
    ;(req[PENDING] ??= []).push([p, outcome])
    return undefined
  }

  /** The decision onto the request and reply; the error to go on with (`undefined`: admitted). */
  function respond(req, reply, key, c, d) {
    req.rateLimit = d
    if (d.allowed) {
      setReplyFields(reply, d, p.style, p.policy, p.addHeadersOnExceeding)
      if (d.shadowRejected) {
        p.onShadowReject?.(req, key, d)
      } else {
        // A shadow rejection took nothing: nothing to give back or refund for it.
        const held = new Held(limits, key, c)
        hold(req.raw, held)
        if (p.counting !== null) owe(req, reply, held)
      }
      p.onExceeding?.(req, key)
      return undefined
    }
    // All or nothing over the request: the rate-limit hooks before this one (the plugin's,
    // a `fastify.rateLimit()` hook of a scope) give back what they took.
    giveBackHeld(req.raw)
    setReplyFields(reply, d, p.style, p.policy, p.addHeaders)
    p.onExceeded?.(req, key)
    const context = { statusCode: 429, ban: false, max: d.limit, ttl: d.retryAfterMs, after: after(d.retryAfterMs) }
    // A builder answering nothing must not admit the request.
    return p.errorResponseBuilder(req, context) ?? defaultErrorResponse(req, context)
  }

  /** `respond`, then on: a throw of a hook is the request's error (skipOnError or not). */
  function settle(req, reply, next, key, c, d) {
    let err
    try {
      err = respond(req, reply, key, c, d)
    } catch (e) {
      err = e ?? new Error(`a rate-limit hook threw ${e}`)
    }
    return next(err)
  }

  // A bad argument (a key or cost the options' functions gave that is none) is the request's
  // error, never skipped: skipOnError is for a store or limiter that could not decide.
  const failed = (next, err) => (p.skipOnError && err?.code !== 'ERR_SLUICEGATE_INVALID_ARG' ? next() : next(err))

  // On a Redis store a decision is a Promise (the event loop never waits for the server).
  // Synchronous values go on directly: no callback is made for them.
  function decide(req, reply, next, key) {
    let c
    try {
      c = p.costOf(req)
    } catch (err) {
      return next(err)
    }
    let d
    try {
      d = limits.decide(key, c)
    } catch (err) {
      return failed(next, err)
    }
    if (isThenable(d)) return d.then((v) => settle(req, reply, next, key, c, v), (err) => failed(next, err))
    return settle(req, reply, next, key, c, d)
  }

  function withKey(req, reply, next, key) {
    const { allowed } = p
    if (allowed === undefined) return decide(req, reply, next, key)
    let yes
    try {
      yes = allowed(req, key)
    } catch (err) {
      return next(err)
    }
    return then(yes, (y) => (y ? next() : decide(req, reply, next, key)), next)
  }

  function run(req, reply, next) {
    let key
    try {
      key = p.keyGenerator(req)
    } catch (err) {
      return next(err)
    }
    if (isThenable(key)) return key.then((k) => withKey(req, reply, next, k), next)
    return withKey(req, reply, next, key)
  }

  // Turned off (`enabled: false`, SLUICEGATE_ENABLED=0): every request passes.
  const go = limits === null ? (_req, _reply, next) => next() : run
  // preParsing hooks take the payload and hand it on.
  return p.hook === 'preParsing'
    ? function sluicegateRateLimit(req, reply, payload, done) { go(req, reply, (err) => done(err ?? null, payload)) }
    : function sluicegateRateLimit(req, reply, done) { go(req, reply, done) }
}

/** `handler` added to the route's `hook` hooks, after those it has (once: a limit counts a request once). */
function addHook(route, hook, handler) {
  const have = route[hook] === undefined ? [] : [route[hook]].flat()
  if (!have.includes(handler)) route[hook] = [...have, handler]
}

/** `handler` on the route, with the response hooks when its limit counts by the response. */
function limitRoute(route, handler) {
  addHook(route, handler.hook, handler)
  if (handler.countsResponse) {
    addHook(route, 'onResponse', onResponse)
    addHook(route, 'onRequestAbort', onRequestAbort)
  }
}

/**
 * The plugin: decorates `fastify.rateLimit(options)` (a hook for a route's own hooks) and
 * adds a limit to every route registered after it (with `global: false`, to those whose
 * `config.rateLimit` is an object; `config.rateLimit: false` exempts a route).
 */
function sluicegateFastify(fastify, options, done) {
  try {
    register(fastify, options)
  } catch (err) {
    return done(err)
  }
  return done()
}

function register(fastify, options) {
  known(options, PLUGIN, 'sluicegate/fastify', REFUSED)
  // An option given as `undefined` is absent: it keeps its default (or the plugin's).
  const base = { ...DEFAULTS, ...defined(options) }
  if (typeof base.global !== 'boolean') throw invalidArg('global must be a boolean')
  // groupId -> { canonical, p, limits, hooks: Map(kind of refunds and hook -> the hook) }
  const groups = new Map()

  /**
   * A route's options over the plugin's (QUOTA_SHAPING: a route's quota is its own). A route
   * saying how its key is made has a key of its own: its `keyGenerator` drops the plugin's
   * default-key options, and its default-key options (CLIENT_OPTIONS) the plugin's
   * `keyGenerator` (which would make them do nothing).
   */
  const merged = (route) => {
    const own = defined(route)
    const o = { ...base, ...own }
    if ('keyGenerator' in own) {
      for (const k of CLIENT_OPTIONS) if (!(k in own)) delete o[k]
    } else if (CLIENT_OPTIONS.some((k) => k in own)) {
      delete o.keyGenerator
    }
    if (!QUOTA_SHAPING.some((k) => k in own)) return o
    for (const k of ['quota', 'limiter', 'burst']) if (!(k in own)) delete o[k]
    if ('quota' in own || 'limiter' in own) {
      o.max = own.max ?? DEFAULTS.max
      o.timeWindow = own.timeWindow ?? DEFAULTS.timeWindow
    }
    return o
  }
  // `scope` names a limit on a shared store as the memory store tells it apart (a route's
  // config, a group): limits of one quota on one store share a region or key prefix only
  // when they are one limit here. The global limit and `fastify.rateLimit()` hooks have none.
  // Every limit made, with the name `rateLimits.limiters()` labels it by: one list for a
  // root instance and the plugins that register this plugin again within it (they inherit
  // its `rateLimits`).
  const made = fastify.hasDecorator('rateLimits') ? fastify.rateLimits[MADE] ?? [] : []
  const limitsOf = (p, scope, label = scope) => {
    if (!isEnabled(p.enabled)) return null
    const limits = new Limits({ ...p, [SCOPE]: scope })
    made.push([label, limits])
    return limits
  }
  /** The hook of a route's limit; `ownRefunds` for fastify.rateLimit()'s (see handlerFor). */
  const make = (route, ownRefunds, scope, label) => {
    const p = settings(merged(route), [options, route])
    if (p.groupId === undefined) return build(p, limitsOf(p, scope, label), ownRefunds)
    // What makes the group's limit (its limiter): the same for every route of the group.
    const canonical = JSON.stringify([p.quota, p.store ?? null, p.shadow ?? false, p.maxKeys ?? null, p.onFull ?? null])
    let g = groups.get(p.groupId)
    if (g === undefined) {
      g = { canonical, p, limiter: p.limiter, limits: limitsOf(p, `group:${p.groupId}`), hooks: new Map() }
      groups.set(p.groupId, g)
    } else if (g.canonical !== canonical || g.limiter !== p.limiter) {
      throw invalidArg(
        `groupId ${JSON.stringify(p.groupId)} is already a group with another quota, store, limiter, shadow, maxKeys or onFull`,
      )
    }
    // One limit for the group; each route's hook with the route's own settings (its hook
    // point, error response, fields, counting by the response), as @fastify/rate-limit's
    // routes of one group share only the counter.
    const h = build(p, g.limits, ownRefunds)
    if (!g.hooks.has(ownRefunds)) g.hooks.set(ownRefunds, h) // for rateLimits.get/reset
    return h
  }
  const build = (p, limits, ownRefunds) => {
    const h = handlerFor(p, limits, ownRefunds)
    h.limiter = limits === null ? null : limits.limiters[0]
    h.limiters = limits === null ? [] : limits.limiters
    h.store = limits?.store
    h.hook = p.hook
    h.countsResponse = p.counting !== null
    /** `key`'s state (the limit with the least remaining), changing nothing; `null` when turned off. */
    h.get = (key) => (limits === null ? null : limits.get(key))
    /** Forgets `key`'s buckets; whether one existed. */
    h.reset = (key) => (limits === null ? false : limits.reset(key))
    return h
  }
  let global // made on the first route that uses it
  const globalHandler = () => (global ??= make({}, false, undefined, 'global'))
  if (base.global) globalHandler() // bad options throw at registration

  // Declared on the request (Fastify's advice: a property added per request changes its shape).
  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null)
  if (!fastify.hasRequestDecorator(PENDING)) fastify.decorateRequest(PENDING, null)
  if (!fastify.hasDecorator('rateLimits')) {
    // Admin: the global limit's (or a group's) state and reset, by key.
    const limitOf = (groupId) => {
      if (groupId === undefined && !base.global) {
        throw invalidArg('no global limit (global: false): pass a groupId, or ask a route hook (fastify.rateLimit()) itself')
      }
      const g = groups.get(groupId)
      const h = groupId === undefined ? globalHandler() : g?.hooks.values().next().value
      if (h === undefined) throw invalidArg(`no rate-limit group ${JSON.stringify(groupId)}`)
      return h
    }
    fastify.decorate('rateLimits', {
      get: (key, groupId) => limitOf(groupId).get(key),
      reset: (key, groupId) => limitOf(groupId).reset(key),
      limiters: () => series(made),
      [MADE]: made,
    })
  }
  let hooks = 0 // fastify.rateLimit() hooks made, for their labels
  if (!fastify.hasDecorator('rateLimit')) {
    fastify.decorate('rateLimit', (route = {}) => {
      known(route, ROUTE, 'rateLimit', REFUSED)
      hooks += 1
      return make(route, true, undefined, `hook#${hooks}`)
    })
  }
  const routeHandlers = new WeakMap()
  fastify.addHook('onRoute', (route) => {
    const cfg = route.config?.rateLimit
    if (cfg === false) return
    if (cfg === undefined || cfg === null) {
      if (base.global) limitRoute(route, globalHandler())
      return
    }
    if (typeof cfg !== 'object') throw invalidArg('config.rateLimit must be an object or false')
    known(cfg, ROUTE, 'config.rateLimit', REFUSED)
    // One limit per route config and path: the HEAD route Fastify adds for a GET route comes
    // with the same config and path, and runs the same handler (a limit of its own doubled
    // the route's). Two routes given one config object still count apart.
    let byPath = routeHandlers.get(cfg)
    if (byPath === undefined) {
      byPath = new Map()
      routeHandlers.set(cfg, byPath)
    }
    let handler = byPath.get(route.url)
    if (handler === undefined) {
      handler = make(cfg, false, `route:${[route.method].flat().join(',')} ${route.url}`)
      byPath.set(route.url, handler)
    }
    limitRoute(route, handler)
  })
}

// Where `rateLimits` keeps the limits made (for `limiters()`).
const MADE = Symbol('sluicegate.made')

/**
 * `[labels, limiter]` pairs of the limits `made` (`[label, Limits]`), for `registerLimiters`
 * and `renderPrometheus`: `limit` (`global`, `route:GET /a`, `group:NAME`, `hook#1` for the
 * first `fastify.rateLimit()` hook) and `quota` (canonical), each limiter once; a label pair
 * that comes again (two quotas alike in one limit) gets ` (2)`, ` (3)`, ... after its name.
 */
function series(made) {
  const out = []
  const seen = new Set()
  const labels = new Set()
  for (const [label, limits] of made) {
    for (const limiter of limits.limiters) {
      // A limiter passed in (`limiter`) built without `metrics: true` counts nothing.
      if (seen.has(limiter) || limiter.metrics() === null) continue
      seen.add(limiter)
      let limit = label
      for (let n = 2; labels.has(`${limit}\n${limiter.quota}`); n++) limit = `${label} (${n})`
      labels.add(`${limit}\n${limiter.quota}`)
      out.push([{ limit, quota: limiter.quota }, limiter])
    }
  }
  return out
}

// What fastify-plugin sets: the hooks and decorators reach the registering scope.
sluicegateFastify[Symbol.for('skip-override')] = true
sluicegateFastify[Symbol.for('fastify.display-name')] = 'sluicegate'
sluicegateFastify[Symbol.for('plugin-meta')] = { name: 'sluicegate', fastify: '5.x' }

module.exports = sluicegateFastify
module.exports.sluicegateFastify = sluicegateFastify
module.exports.default = sluicegateFastify
