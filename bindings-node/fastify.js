'use strict'
// Fastify plugin: `fastify.register(require('sluicegate/fastify'), options)`, with
// @fastify/rate-limit's option names where they mean the same thing (`max`, `timeWindow`,
// `global`, `hook`, `keyGenerator`, `allowList`, `skipOnError`, `onExceeding`, `onExceeded`,
// `errorResponseBuilder`, `addHeaders`, `addHeadersOnExceeding`, `enableDraftSpec`, `groupId`
// and per-route `config.rateLimit`). The core decides and renders the header fields; this
// file reads the request, adds the hooks and writes the reply.

const { draftStyle, functions, isThenable, known, limiterFor, invalidArg } = require('./web.js')

const PLUGIN = new Set([
  'global', 'max', 'timeWindow', 'quota', 'burst', 'hook', 'keyGenerator', 'allowList', 'skipOnError',
  'onExceeding', 'onExceeded', 'errorResponseBuilder', 'addHeaders', 'addHeadersOnExceeding',
  'enableDraftSpec', 'policy', 'cost', 'maxKeys', 'onFull', 'store', 'limiter',
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
  ipv6Subnet: 'not supported yet',
}
const HOOKS = new Set(['onRequest', 'preParsing', 'preValidation', 'preHandler'])
const DEFAULTS = {
  global: true,
  max: 1000,
  timeWindow: 60_000,
  hook: 'onRequest',
  keyGenerator: (req) => req.ip,
  skipOnError: false,
  enableDraftSpec: false,
  policy: 'default',
  cost: 1,
  onFull: 'evict',
}
// Which request (by symbol) a handler has decided for: once per request, as a hook added
// twice (by the plugin and through `fastify.rateLimit()`) must not count twice.
let handlers = 0

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

/** `{ name (lower case): boolean }`, checked. */
function switches(v, what) {
  if (v === undefined) return {}
  if (v === null || typeof v !== 'object') throw invalidArg(`${what} must be an object of header names and booleans`)
  const out = {}
  for (const [k, on] of Object.entries(v)) {
    if (typeof on !== 'boolean') throw invalidArg(`${what}[${JSON.stringify(k)}] must be a boolean`)
    out[k.toLowerCase()] = on
  }
  return out
}

/** The decision's fields in `style`, less those switched off. */
function fields(d, style, policy, off) {
  const h = d.headers(style, policy)
  for (const name of Object.keys(h)) {
    if (off[name.toLowerCase()] === false) delete h[name]
  }
  return h
}

/** The checked settings of one limit: the plugin's options merged with a route's. */
function settings(o) {
  functions(o, ['keyGenerator', 'onExceeding', 'onExceeded', 'errorResponseBuilder'])
  if (typeof o.max === 'function' || typeof o.timeWindow === 'function') {
    throw invalidArg('max and timeWindow must be values (one quota per limit; give a route its own config.rateLimit)')
  }
  if (!HOOKS.has(o.hook)) throw invalidArg(`hook must be one of ${[...HOOKS].join(', ')}`)
  if (typeof o.skipOnError !== 'boolean') throw invalidArg('skipOnError must be a boolean')
  const { allowList } = o
  if (allowList !== undefined && typeof allowList !== 'function' && !Array.isArray(allowList)) {
    throw invalidArg('allowList must be an array of keys or a function (req, key) => boolean')
  }
  if (o.groupId !== undefined && typeof o.groupId !== 'string') throw invalidArg('groupId must be a string')
  let quota = o.quota
  if (quota === undefined) {
    const { max: count, timeWindow: w, burst } = o
    quota = typeof w === 'string' ? `${count}/${w}${burst === undefined ? '' : `; burst=${burst}`}` : { count, periodMs: w, burst }
    if (typeof w !== 'string' && burst === undefined) delete quota.burst
  }
  return {
    ...o,
    quota,
    style: o.enableDraftSpec === false ? 'legacy' : draftStyle(o.enableDraftSpec, 'enableDraftSpec'),
    addHeaders: switches(o.addHeaders, 'addHeaders'),
    // Fields on an admitted request; Retry-After is the core's on rejections only.
    addHeadersOnExceeding: switches(o.addHeadersOnExceeding, 'addHeadersOnExceeding'),
    allowed: Array.isArray(allowList) ? new Set(allowList) : allowList,
    errorResponseBuilder: o.errorResponseBuilder ?? defaultErrorResponse,
    costOf: typeof o.cost === 'function' ? o.cost : () => o.cost,
  }
}

/**
 * The hook deciding for one limit: `(req, reply, next)`, where `next(err?)` goes on. Exposes
 * the limiter and its store as properties.
 */
function handlerFor(p, limiter, remote) {
  const ran = Symbol(`sluicegate.ran.${handlers++}`)

  function respond(req, reply, next, key, d) {
    req.rateLimit = d
    if (d.allowed) {
      reply.headers(fields(d, p.style, p.policy, p.addHeadersOnExceeding))
      p.onExceeding?.(req, key)
      return next()
    }
    reply.headers(fields(d, p.style, p.policy, p.addHeaders))
    p.onExceeded?.(req, key)
    const context = { statusCode: 429, ban: false, max: d.limit, ttl: d.retryAfterMs, after: after(d.retryAfterMs) }
    return next(p.errorResponseBuilder(req, context))
  }

  const failed = (next, err) => (p.skipOnError ? next() : next(err))

  function decide(req, reply, next, key) {
    let c
    try {
      c = p.costOf(req)
      if (remote) {
        return limiter.tryAcquireAsync(key, c).then((d) => respond(req, reply, next, key, d), (err) => failed(next, err))
      }
      return respond(req, reply, next, key, limiter.tryAcquire(key, c))
    } catch (err) {
      return failed(next, err)
    }
  }

  function withKey(req, reply, next, key) {
    const { allowed } = p
    if (allowed === undefined) return decide(req, reply, next, key)
    if (typeof allowed !== 'function') return allowed.has(key) ? next() : decide(req, reply, next, key)
    const yes = allowed(req, key)
    if (isThenable(yes)) return yes.then((y) => (y ? next() : decide(req, reply, next, key)), next)
    return yes ? next() : decide(req, reply, next, key)
  }

  function run(req, reply, next) {
    if (req[ran]) return next()
    req[ran] = true
    try {
      const key = p.keyGenerator(req)
      if (isThenable(key)) return key.then((k) => withKey(req, reply, next, k), next)
      return withKey(req, reply, next, key)
    } catch (err) {
      return next(err)
    }
  }

  // preParsing hooks take the payload and hand it on.
  const hook = p.hook === 'preParsing'
    ? function sluicegateRateLimit(req, reply, payload, done) { run(req, reply, (err) => done(err ?? null, payload)) }
    : function sluicegateRateLimit(req, reply, done) { run(req, reply, done) }
  return hook
}

/** `handler` added to the route's `hook` hooks, after those it has. */
function addHook(route, hook, handler) {
  const have = route[hook]
  route[hook] = have === undefined ? [handler] : [...(Array.isArray(have) ? have : [have]), handler]
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
  const base = { ...DEFAULTS, ...options }
  if (typeof base.global !== 'boolean') throw invalidArg('global must be a boolean')
  const groups = new Map() // groupId -> [quota, handler]

  const make = (route) => {
    const p = settings({ ...base, ...route })
    if (p.groupId !== undefined) {
      const canonical = JSON.stringify([p.quota, p.store ?? null])
      const g = groups.get(p.groupId)
      if (g !== undefined) {
        if (g[0] !== canonical) throw invalidArg(`groupId ${JSON.stringify(p.groupId)} is already a group with another quota or store`)
        return g[1]
      }
      const h = build(p)
      groups.set(p.groupId, [canonical, h])
      return h
    }
    return build(p)
  }
  const build = (p) => {
    const { limiter, store, remote } = limiterFor(p)
    const h = handlerFor(p, limiter, remote)
    h.limiter = limiter
    h.store = store
    h.hook = p.hook
    return h
  }
  let global // made on the first route that uses it
  const globalHandler = () => (global ??= make({}))
  if (base.global) globalHandler() // bad options throw at registration

  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null)
  if (!fastify.hasDecorator('rateLimit')) {
    fastify.decorate('rateLimit', (route = {}) => {
      known(route, ROUTE, 'rateLimit', REFUSED)
      return make(route)
    })
  }
  fastify.addHook('onRoute', (route) => {
    const cfg = route.config?.rateLimit
    if (cfg === false) return
    if (cfg === undefined || cfg === null) {
      if (base.global) addHook(route, base.hook, globalHandler())
      return
    }
    if (typeof cfg !== 'object') throw invalidArg('config.rateLimit must be an object or false')
    known(cfg, ROUTE, 'config.rateLimit', REFUSED)
    const h = make(cfg)
    addHook(route, h.hook, h)
  })
}

// What fastify-plugin sets: the hooks and decorators reach the registering scope.
sluicegateFastify[Symbol.for('skip-override')] = true
sluicegateFastify[Symbol.for('fastify.display-name')] = 'sluicegate'
sluicegateFastify[Symbol.for('plugin-meta')] = { name: 'sluicegate', fastify: '5.x' }

module.exports = sluicegateFastify
module.exports.sluicegateFastify = sluicegateFastify
module.exports.default = sluicegateFastify
