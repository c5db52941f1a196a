'use strict'
// What the web adapters (express.js, fastify.js) share: the limiter behind a middleware (its
// quota, its store and the store's per-limit namespace), header styles and filters, and the
// checks of their options. The adapters read the request and write the response; the core
// decides and renders the fields.

const { createHash } = require('node:crypto')
const { KeyedLimiter, _internal } = require('./index.js')

const { invalidArg, native, toRate, STORE_SUFFIX } = _internal

// express-rate-limit's names for the standard header drafts, as the core's header styles.
const STYLES = { 'draft-6': 'draft6', 'draft-7': 'draft7', 'draft-8': 'ietf' }

/** The core's style for a draft name (`'draft-6'`, `'draft-7'`, `'draft-8'`; `true`: draft-6). */
function draftStyle(v, what) {
  if (v === true) return STYLES['draft-6']
  if (typeof v === 'string' && Object.hasOwn(STYLES, v)) return STYLES[v]
  throw invalidArg(`${what} must be true, false, "draft-6", "draft-7" or "draft-8"`)
}

const isThenable = (v) => v !== null && typeof v === 'object' && typeof v.then === 'function'

/** Throws unless each named option is absent or a function. */
function functions(opts, names) {
  for (const f of names) {
    if (opts[f] !== undefined && typeof opts[f] !== 'function') throw invalidArg(`${f} must be a function`)
  }
}

/** Throws on an option outside `known`, with `hints[name]` as the reason where one is given. */
function known(options, allowed, adapter, hints = {}) {
  if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
  for (const k of Object.keys(options)) {
    if (Object.hasOwn(hints, k)) throw invalidArg(`${adapter} option ${JSON.stringify(k)}: ${hints[k]}`)
    if (!allowed.has(k)) throw invalidArg(`unknown ${adapter} option ${JSON.stringify(k)}`)
  }
}

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
      'store must be a sluicegate store string ("memory", "shm:NAME" or "redis://..."); the Store objects of other rate-limit packages are not used here (pass `limiter` to share one limiter between routes)',
    )
  }
  const suffix = `-${createHash('sha256').update(native.canonicalQuota(rate)).digest('hex').slice(0, 12)}`
  return { suffix, printed: native.storeSuffixed(store, suffix) }
}

/**
 * The keyed limiter a middleware decides with: `limiter` as given, or a new one of `quota`
 * (a rate string or options object) on `store`, bounded by `maxKeys`/`onFull`. Returns it,
 * its store as printed (`undefined` for a limiter passed in), and whether it is remote
 * (Redis: every decision a Promise, so that the event loop never waits for the server).
 */
function limiterFor({ limiter, quota, store, maxKeys, onFull }) {
  if (limiter !== undefined && store !== undefined) {
    throw invalidArg('give `store` or `limiter`, not both: a limiter passed in has its store')
  }
  let printed
  if (limiter === undefined) {
    const rate = toRate(quota)
    const ns = store === undefined ? { printed: 'memory' } : storeFor(store, rate)
    printed = ns.printed
    limiter = new KeyedLimiter(rate, { maxKeys, onFull, store, [STORE_SUFFIX]: ns.suffix })
  } else if (!(limiter instanceof KeyedLimiter)) {
    throw invalidArg('limiter must be a sluicegate KeyedLimiter')
  }
  return { limiter, store: printed, remote: limiter.redisStats() !== null }
}

module.exports = { STYLES, draftStyle, isThenable, functions, known, limiterFor, invalidArg }
