'use strict'
// What the web adapters (express.js, fastify.js) share: the limiter behind a middleware (its
// quota, its store and the store's per-limit namespace), header styles and filters, and the
// checks of their options. The adapters read the request and write the response; the core
// decides and renders the fields.

const { createHash } = require('node:crypto')
const { isIP } = require('node:net')
const { KeyedLimiter, ClientResolver, Decision, _internal } = require('./index.js')

const { invalidArg, native, toRate, STORE_SUFFIX, OVER_CAPACITY, STORE_FULL, setFields, forEachField } = _internal

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

/**
 * `options` less the options whose value is `undefined`: such an option is absent (as in
 * express-rate-limit), so that `{ onFull: process.env.ON_FULL }` with the variable unset
 * keeps the adapter's default rather than replacing it with `undefined`.
 */
function defined(options) {
  const out = {}
  for (const k of Object.keys(options)) if (options[k] !== undefined) out[k] = options[k]
  return out
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
 * the SHA-256 of the canonical quota (`canonicalQuota`), then, on a shared-memory store, the
 * key bound (`regionBound`), and the limit's scope when given (a Fastify route's or group's:
 * limits the memory store keeps apart are kept apart on every store). `'memory'` has none.
 * Returns the suffix and the store as printed with it (a Redis password redacted).
 */
function storeFor(store, rate, maxKeys, scope) {
  if (typeof store !== 'string') {
    throw invalidArg(
      'store must be a sluicegate store string ("memory", "shm:NAME" or "redis://..."); the Store objects of other rate-limit packages are not used here (pass `limiter` to share one limiter between routes)',
    )
  }
  const bound = regionBound(native.storeSuffixed(store, ''), maxKeys)
  let named = bound === undefined ? native.canonicalQuota(rate) : `${native.canonicalQuota(rate)}\n${bound}`
  if (scope !== undefined) named += `\nscope=${scope}`
  const suffix = `-${createHash('sha256').update(named).digest('hex').slice(0, 12)}`
  return { suffix, printed: native.storeSuffixed(store, suffix) }
}

/**
 * The key bound that names a limit's region, from its store as the core prints it (`shown`)
 * and `maxKeys`: on a shared-memory store the capacity the region is made with, the store
 * string's `?capacity=N` when given (a `maxKeys` besides it must be the same), else `maxKeys`
 * (`undefined` when neither: the core's default, or an existing region's). A region keeps the capacity it was made with, so a
 * redeploy with another bound must open another region, not the old one (a mismatch in every
 * worker). `undefined` on Redis, which keeps no key bound: another `maxKeys` must not move
 * every client's count to a new key prefix.
 */
function regionBound(shown, maxKeys) {
  if (!shown.startsWith('shm:')) return undefined
  // The core prints a region as `shm:NAME` or `shm:NAME?capacity=N` (a name has no `?`).
  const capacity = /\?capacity=(\d+)$/.exec(shown)
  return capacity === null ? maxKeys : capacity[1]
}

// The regions and prefixes of this process's unnamed limits (Express middlewares, Fastify's
// global limit and `fastify.rateLimit()` hooks), enforcing or shadow alike (a shadow limit's
// region is an enforcing one's): a second limit on one is warned of, once.
const unnamed = new Map()

/**
 * Warns once when a second limit of one store and quota is made in this process without a
 * scope: on a shared store the two count in one set of buckets, where in memory each counts
 * on its own (a user trial: one route's middleware used up another's).
 */
function sharedOnce(printed) {
  const seen = unnamed.get(printed) ?? 0
  unnamed.set(printed, seen + 1)
  if (seen !== 1) return
  process.emitWarning(
    `two limits of one quota share the buckets of ${printed} on this shared store (in memory each would count on its own): give one a store name of its own (another shm: name or Redis prefix) if they must count apart, or use one middleware (or \`limiter\`) on both routes to share without this warning`,
    { type: 'SluicegateWarning', code: 'SLUICEGATE_SHARED_LIMIT' },
  )
}

/** The option (internal) naming a limit among an app's limits on a shared store (see `storeFor`). */
const SCOPE = Symbol('sluicegate.scope')

/**
 * The keyed limiter of one limit: `limiter` as given, or a new one of `quota` (a rate string
 * or options object) on `store`, bounded by `maxKeys`/`onFull`. Returns it, its store as
 * printed (`undefined` for a limiter passed in), and whether it is remote (Redis: every
 * decision a Promise, so that the event loop never waits for the server).
 */
function limiterFor({ limiter, quota, store, maxKeys, onFull, shadow, [SCOPE]: scope }) {
  let printed
  if (limiter === undefined) {
    const rate = toRate(quota)
    const ns = store === undefined ? { printed: 'memory' } : storeFor(store, rate, maxKeys, scope)
    printed = ns.printed
    if (scope === undefined && printed !== 'memory') sharedOnce(printed)
    // Every limit an adapter makes counts its decisions (`metrics`: a thread's own slot, a
    // load and a store a decision), for `registerLimiters` / `renderPrometheus`.
    limiter = new KeyedLimiter(rate, {
      maxKeys, onFull, store, shadow: shadow === true, metrics: true, [STORE_SUFFIX]: ns.suffix,
    })
  } else if (!(limiter instanceof KeyedLimiter)) {
    throw invalidArg('limiter must be a sluicegate KeyedLimiter')
  }
  const stats = limiter.redisStats()
  // A Redis store's (`remote`: every decision a Promise) watch; null for other stores.
  const watch = stats === null ? null : watchOf(limiter, printed, stats, store)
  return { limiter, store: printed, watch }
}

// The Redis stores this process's limits use, each watched for outages (one watch per
// configured store: every limit of a store shares its connection and counters; two store
// strings for one server, with another prefix or on_error, share the counters too, and each
// watch reports what it sees of them).
const watches = new Map()

/** How often a store's counters are looked at (ms), by the requests of its limits. */
const WATCH = { everyMs: 1000 }

/**
 * The watch of `limiter`'s Redis store (made once per store and process; `given`, the store
 * string as configured). A store whose
 * first connection failed (a wrong host or port, a server down) is reported at once: its
 * limits are decided by the URL's `on_error` policy in this process until it connects
 * (`local`, the default: each process alone), which nothing else would say; later outages
 * when they begin (`Watch`).
 */
function watchOf(limiter, printed, stats, given) {
  // One watch for every limit of a store (a limiter passed in: its own, its store unnamed).
  const base = printed === undefined ? limiter : printed.replace(/-[0-9a-f]{12}(?=[?&]|$)/, '')
  // The policy as the store string given says it (the printed one leaves out defaults).
  const policy = printed === undefined ? '' : ` (${policySaid(given)})`
  printed ??= 'a Redis store'
  let watch = watches.get(base)
  if (watch !== undefined) return watch
  const down = stats.connects === 0
  watch = new Watch(limiter, printed, stats, down, policy)
  watches.set(base, watch)
  if (down) {
    process.emitWarning(
      `cannot reach the Redis store ${printed}: its limits are decided by its on_error policy in this process${policy} until it connects`,
      { type: 'SluicegateWarning', code: 'SLUICEGATE_STORE_UNREACHABLE' },
    )
  }
  return watch
}

// What each `on_error` policy does to a request while the server does not answer.
const POLICIES = {
  local: 'by each process alone, with its share of the quota',
  open: 'every request admitted',
  closed: 'every request refused',
  error: 'every request an error',
}

/** The `on_error` policy of a Redis store string and what it does (`local` when the URL names none). */
function policySaid(store) {
  let policy = 'local'
  let given = false
  const q = store.indexOf('?')
  for (const pair of q < 0 ? [] : store.slice(q + 1).split('&')) {
    const eq = pair.indexOf('=')
    // The value in any case, as the core reads it.
    if (eq >= 0 && pair.slice(0, eq) === 'on_error') [policy, given] = [pair.slice(eq + 1).toLowerCase(), true]
  }
  return `on_error=${policy}${given ? '' : ', the default'}: ${Object.hasOwn(POLICIES, policy) ? POLICIES[policy] : 'as the URL says'}`
}

/** The calls a Redis store did not decide: each decided by its `on_error` policy (or thrown, under `error`). */
const failures = (s) => s.failedOpen + s.failedClosed + s.failedLocal + s.failedError

/**
 * Reports a Redis store's outages, once each, as `SluicegateWarning`s: `SLUICEGATE_STORE_FAILING`
 * when its calls begin to fail (each then decided by the URL's `on_error` policy, or thrown
 * under `on_error=error`), `SLUICEGATE_STORE_RECOVERED` when the server decides again. The
 * store's counters (`redisStats()`) are read at most every `WATCH.everyMs`, by a request of
 * one of its limits (a clock reading a request the rest of the time).
 */
class Watch {
  constructor(limiter, printed, stats, failing, policy) {
    this.limiter = limiter
    this.printed = printed
    this.policy = policy
    this.failed = failures(stats)
    this.decided = stats.decided
    this.failing = failing
    this.next = performance.now() + WATCH.everyMs
  }

  tick() {
    const now = performance.now()
    if (now < this.next) return
    this.next = now + WATCH.everyMs
    const s = this.limiter.redisStats()
    if (s === null) return
    const [failed, decided] = [failures(s), s.decided]
    if (failed > this.failed && !this.failing) {
      this.failing = true
      process.emitWarning(
        `the Redis store ${this.printed} is failing (${failed - this.failed} calls not decided by it since the last look; in all ${s.timeouts} timeouts, ${s.unavailable} unavailable, ${s.serverErrors} server errors): its limits are decided by its on_error policy in this process${this.policy} until it answers again`,
        { type: 'SluicegateWarning', code: 'SLUICEGATE_STORE_FAILING' },
      )
    } else if (this.failing && decided > this.decided && failed === this.failed) {
      this.failing = false
      process.emitWarning(`the Redis store ${this.printed} answers again: its limits are decided by it`, {
        type: 'SluicegateWarning',
        code: 'SLUICEGATE_STORE_RECOVERED',
      })
    }
    this.failed = failed
    this.decided = decided
  }
}

/**
 * What a limit answers where its store refused to decide (`err`): a request of a cost beyond
 * the burst, which no wait would admit, and a new key its store has no room for (every
 * bucket in use, none full to evict) are refusals (429s: the client's doing, or a wait of a
 * second), not server errors; a shadow limit lets them through, marked as would-be
 * rejections. A store's failure is thrown as a 503 (`storeFailure`), any other error as it is.
 */
function refusal(limiter, cost, err) {
  let d
  if (err?.code === 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY') d = limiter[OVER_CAPACITY](cost)
  else if (err?.code === 'ERR_SLUICEGATE_KEY_STORE_FULL') d = limiter[STORE_FULL]()
  if (d === undefined || d === null) throw storeFailure(err)
  if (!limiter.shadow) return d
  return new Decision(true, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs, d.retryAfterNs, d.resetAfterNs, d.windowSeconds, true)
}

/**
 * What an adapter passes on when a limit's store failed to decide (a Redis store under
 * `on_error=error`, a region's lock timeout): a 503 (`statusCode` and `status`, read by
 * Fastify's and Express's error handlers) whose message leaves out the store's address (a
 * Redis URL's user, host and port; a region's path), which the framework may send to the
 * client; the store's error is its `cause` (Fastify's logger prints a cause's message and
 * stack with the error's), its `code` the store's. Any other error is returned as it is.
 */
function storeFailure(err) {
  if (typeof err?.code !== 'string' || !err.code.startsWith('ERR_SLUICEGATE_STORE')) return err
  const e = new Error('rate limiting is unavailable: its store did not decide (the cause says why)', { cause: err })
  e.code = err.code
  e.statusCode = 503
  e.status = 503
  return e
}

/** `f(v)` now, or once `v` settles when it is a Promise (its rejection, `err`'s). */
const then = (v, f, err) => (isThenable(v) ? v.then(f, err) : f(v))

/**
 * The limits of one middleware or route, decided together for a key: one limiter per quota
 * (`quota` may be an array: `['10/second', '1000/hour']`), or the `limiter` given. A request
 * is admitted by every limit or by none: when one rejects, the limits that admitted before it
 * get the cost back (the core's refund). The decision reported is the rejecting limit's, or
 * the admitting one with the least remaining. On a Redis store each call returns a Promise.
 *
 * With `shadow: true` (a dry run: the core's shadow mode) every limit decides and counts but
 * lets the request through; a would-be rejection (`decision.shadowRejected`) ends the request's
 * decisions as a rejection would, the earlier limits getting the cost back, so that the counts
 * are what enforcement would have left.
 */
class Limits {
  constructor(opts) {
    if (opts.shadow !== undefined && typeof opts.shadow !== 'boolean') throw invalidArg('shadow must be a boolean')
    if (opts.limiter !== undefined && opts.shadow === true) {
      throw invalidArg('give `shadow` or `limiter`, not both: a limiter passed in has its own shadow mode')
    }
    if (opts.limiter !== undefined && opts.store !== undefined) {
      throw invalidArg('give `store` or `limiter`, not both: a limiter passed in has its store')
    }
    const quotas = opts.limiter === undefined && Array.isArray(opts.quota) ? opts.quota : [opts.quota]
    if (quotas.length === 0) throw invalidArg('quota must not be an empty array')
    this.parts = quotas.map((quota) => limiterFor({ ...opts, quota }))
    this.limiters = this.parts.map((p) => p.limiter)
    for (const l of this.limiters) {
      // A leaky queue admits with a wait the caller must let pass first (a shaper): a
      // middleware that went on at once would serve a burst the queue spreads out.
      if (/algorithm=leaky_queue/.test(l.quota)) {
        throw invalidArg(
          `a web limit cannot use ${JSON.stringify(l.quota)}: a leaky queue delays what it admits, which a middleware does not; use algorithm=gcra for the same rate and burst refused at once, or Limiter#acquire to shape`,
        )
      }
    }
    if (opts.cost !== undefined && typeof opts.cost !== 'function') {
      // A fixed cost above a burst would refuse every request: an error where the limit is
      // made, not a 429 for each.
      for (const l of this.limiters) {
        const over = l[OVER_CAPACITY](opts.cost)
        if (over !== null) {
          throw invalidArg(
            `cost ${opts.cost} is more than ${JSON.stringify(l.quota)} can ever admit (its burst is ${over.limit}): every request would be refused`,
          )
        }
      }
    }
    // Every quota is on the one store (`limiter` passed in: one quota), so one watch.
    this.watch = this.parts[0].watch
    this.remote = this.watch !== null
    this.store = this.parts[0].store // each quota's namespace: the same store, its own suffix
  }

  /** Asks every limit for `cost` of `key`'s bucket: a Decision (a Promise on Redis). */
  decide(key, cost) {
    const ls = this.limiters
    if (this.remote) return this.#decideAsync(key, cost)
    if (ls.length === 1) {
      try {
        return ls[0].tryAcquire(key, cost)
      } catch (err) {
        return refusal(ls[0], cost, err)
      }
    }
    let best
    for (let i = 0; i < ls.length; i++) {
      let d
      try {
        d = ls[i].tryAcquire(key, cost)
      } catch (err) {
        try {
          d = refusal(ls[i], cost, err)
        } catch (thrown) {
          this.#giveBack(i, key, cost)
          throw thrown
        }
      }
      if (!d.allowed || d.shadowRejected) {
        this.#giveBack(i, key, cost)
        return d
      }
      if (best === undefined || d.remaining < best.remaining) best = d
    }
    return best
  }

  async #decideAsync(key, cost) {
    this.watch.tick()
    const ls = this.limiters
    let best
    for (let i = 0; i < ls.length; i++) {
      let d
      try {
        d = await ls[i].tryAcquireAsync(key, cost)
      } catch (err) {
        try {
          d = refusal(ls[i], cost, err)
        } catch (thrown) {
          await this.#giveBackAsync(i, key, cost)
          throw thrown
        }
      }
      if (!d.allowed || d.shadowRejected) {
        await this.#giveBackAsync(i, key, cost)
        return d
      }
      if (best === undefined || d.remaining < best.remaining) best = d
    }
    return best
  }

  #giveBack(upTo, key, cost) {
    for (let j = 0; j < upTo; j++) this.limiters[j].refund(key, cost)
  }

  async #giveBackAsync(upTo, key, cost) {
    for (let j = 0; j < upTo; j++) await this.limiters[j].refundAsync(key, cost)
  }

  /** Gives `cost` back to every limit of `key` (a Promise on Redis). */
  refund(key, cost) {
    if (this.remote) return Promise.all(this.limiters.map((l) => l.refundAsync(key, cost))).then(() => undefined)
    for (const l of this.limiters) l.refund(key, cost)
    return undefined
  }

  /** `key`'s state, changing nothing: the limit with the least remaining (a Promise on Redis). */
  get(key) {
    const tightest = (ds) => ds.reduce((a, d) => (d.remaining < a.remaining ? d : a))
    if (this.remote) return Promise.all(this.limiters.map((l) => l.peekAsync(key))).then(tightest)
    return tightest(this.limiters.map((l) => l.peek(key)))
  }

  /** Forgets `key`'s buckets; whether one existed (a Promise on Redis). */
  reset(key) {
    const any = (bs) => bs.some(Boolean)
    if (this.remote) return Promise.all(this.limiters.map((l) => l.removeAsync(key))).then(any)
    return any(this.limiters.map((l) => l.remove(key)))
  }
}

/**
 * Whether a middleware limits at all: `enabled` (default true), and not turned off for the
 * whole process by the environment (`SLUICEGATE_ENABLED=0` or `false`, for tests), read when
 * the middleware is made.
 */
function isEnabled(enabled) {
  if (enabled !== undefined && typeof enabled !== 'boolean') throw invalidArg('enabled must be a boolean')
  const env = process.env.SLUICEGATE_ENABLED
  return enabled !== false && env !== '0' && env !== 'false'
}

/** `allowList` (keys, or a function `(req, key) => boolean`) as a predicate, or `undefined`. */
function allowListOf(list, keyGenerator) {
  if (list === undefined || typeof list === 'function') return list
  if (!Array.isArray(list)) throw invalidArg('allowList must be an array of keys or a function (req, key) => boolean')
  const keys = new Set(list.map(String))
  // With the default key, an address is listed as that key keys it: an IPv6 address by its
  // prefix (`::1` is the key `::/64`), an IPv4-mapped one as IPv4 (a literal '::1' never
  // matched a key).
  const resolver = keyGenerator?.[RESOLVER]
  if (resolver !== undefined) {
    for (const entry of list) if (typeof entry === 'string' && isIP(entry) !== 0) keys.add(resolver.resolve(entry))
  }
  return (_req, key) => keys.has(String(key))
}

/** The response-dependent counting options, checked: `null` when every request counts. */
function responseCounting(opts) {
  const { skipSuccessfulRequests: ok = false, skipFailedRequests: failed = false, requestWasSuccessful } = opts
  if (typeof ok !== 'boolean') throw invalidArg('skipSuccessfulRequests must be a boolean')
  if (typeof failed !== 'boolean') throw invalidArg('skipFailedRequests must be a boolean')
  functions(opts, ['requestWasSuccessful'])
  if (!ok && !failed) return null
  return { ok, failed, wasSuccessful: requestWasSuccessful ?? ((_req, res) => res.statusCode < 400) }
}

/** A failure where no caller waits (a refund after the response): a process warning. */
const warn = (err) => process.emitWarning(err instanceof Error ? err : new Error(String(err)))

/**
 * What to do when an admitted request's response ends: `outcome(success)` gives back what
 * `held` holds when `counting` says such a response does not count (once, however often
 * called, and not after `held`'s give-back to a later middleware's rejection).
 */
function refunder(counting, held) {
  return (success) => {
    if (success ? counting.ok : counting.failed) held.giveBack()
  }
}

/** What one middleware took for a request, to give back once: by a later middleware that
 * rejects the request, or by the response (`refunder`). One object a request (a class: no
 * closure's context and function besides). */
class Held {
  constructor(limits, key, cost) {
    this.limits = limits
    this.key = key
    this.cost = cost
    this.done = false
  }

  giveBack() {
    if (this.done) return
    this.done = true
    try {
      const r = this.limits.refund(this.key, this.cost)
      if (isThenable(r)) r.catch(warn)
    } catch (err) {
      warn(err)
    }
  }
}

// What the sluicegate middlewares that admitted a request took for it (on the request): one
// Held, or an array of them where several middlewares admitted it.
const HELD = Symbol('sluicegate.held')

/** Records what a middleware took for `req`. */
function hold(req, held) {
  const all = req[HELD]
  if (all === undefined) req[HELD] = held
  else if (all instanceof Held) req[HELD] = [all, held]
  else all.push(held)
}

/** A middleware rejects `req`: what the ones before it took goes back (all or nothing over
 * the request's limits, as over one middleware's several quotas). */
function giveBackHeld(req) {
  const all = req[HELD]
  if (all === undefined) return
  req[HELD] = undefined
  if (all instanceof Held) return all.giveBack()
  for (const h of all) h.giveBack()
  return undefined
}

/**
 * Whether the response `res` (Node's ServerResponse) closed before it finished: the client
 * went away (its 'close' has been emitted already).
 */
const gone = (res) => res.destroyed && !res.writableFinished

/**
 * Settles an owed refund (`outcome`, a `refunder`) by the end of `res` (Node's ServerResponse):
 * once it finishes, by `counting.wasSuccessful(req, response)` (`response`: the framework's
 * object); when it closes unfinished (the client went away), as a failure; at once when that
 * happened already (while an asynchronous decision was pending).
 */
function settleOnEnd(res, outcome, counting, req, response) {
  if (gone(res)) return outcome(false)
  res.on('finish', () => {
    try {
      then(counting.wasSuccessful(req, response), outcome, warn)
    } catch (err) {
      warn(err)
    }
  })
  res.on('close', () => res.writableFinished || outcome(false))
  // An error after the response finished (a second `res.end`) is not a failed request.
  res.on('error', () => res.writableFinished || outcome(false))
  return undefined
}

// The options that shape the default key (ClientResolver's).
const CLIENT_OPTIONS = ['trustedProxies', 'proxyHeader', 'ipv6Subnet']

/**
 * The key of a request: `keyGenerator` when one is given (in `opts`, the merged options),
 * else the client by the core's rules (`ClientResolver`: the peer address; forwarding headers
 * only from `trustedProxies`; IPv6 by `ipv6Subnet`). The framework's own proxy setting
 * (Express's `trust proxy`, Fastify's `trustProxy`, hence `req.ip`) is not read. An options
 * object of `raws` giving both a keyGenerator and a default-key option is refused: the latter
 * would do nothing.
 */
function keyGeneratorOf(opts, raws = [opts]) {
  for (const raw of raws) {
    const shaping = CLIENT_OPTIONS.find((k) => raw[k] !== undefined)
    if (raw.keyGenerator !== undefined && shaping !== undefined) {
      throw invalidArg(`${shaping} shapes the default key: with keyGenerator it does nothing (give one or the other)`)
    }
  }
  functions(opts, ['keyGenerator'])
  if (opts.keyGenerator !== undefined) return opts.keyGenerator
  const resolver = new ClientResolver(Object.fromEntries(CLIENT_OPTIONS.filter((k) => opts[k] !== undefined).map((k) => [k, opts[k]])))
  const keyOf = (req) => resolver.keyOf(req)
  keyOf[RESOLVER] = resolver
  return keyOf
}

// On the default key generator: its resolver (for `allowListOf`).
const RESOLVER = Symbol('sluicegate.resolver')

module.exports = {
  STYLES, WATCH, draftStyle, isThenable, then, functions, known, defined, Limits, isEnabled, allowListOf,
  responseCounting, refunder, Held, hold, giveBackHeld, warn, gone, settleOnEnd, keyGeneratorOf, CLIENT_OPTIONS, invalidArg, setFields, forEachField,
  SCOPE,
}
