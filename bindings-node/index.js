'use strict'
// The JavaScript API over the native addon (native.js loads it). Conversion and error
// mapping happen in Rust; this file only shapes results into JavaScript objects, runs
// acquire()'s timers and holds each limiter's handle.

const native = require('./native.js')

const { check, decide, refund, keyedCheck, keyedDecide, keyedPeek, keyedRefund } = native

// Decision figures written by the native `decide` (layout: src/hot.rs, mod slot).
const F = new Float64Array(native.scratch)
const U = new BigUint64Array(native.scratch)
const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER)
const exact = (b) => (b <= MAX_SAFE_BIG ? Number(b) : b)

const release = new FinalizationRegistry((handle) => native.release(handle))
const SHARED = Symbol('sluicegate.shared')

function sgError(code, message, Base = Error) {
  const err = new Base(message)
  err.code = code
  return err
}
const invalidArg = (message) => sgError('ERR_SLUICEGATE_INVALID_ARG', message, TypeError)

// ---------------------------------------------------------------------------------------
// Decision and its HTTP fields

function ceilDiv(n, d) {
  if (typeof n === 'bigint') return exact((n + BigInt(d) - 1n) / BigInt(d))
  let q = Math.floor(n / d)
  let r = n - q * d
  while (r < 0) { q -= 1; r += d }
  while (r >= d) { q += 1; r -= d }
  return r > 0 ? q + 1 : q
}

function sfString(s) {
  let out = '"'
  for (const ch of s) {
    if (ch === '"' || ch === '\\') out += '\\' + ch
    else if (ch >= ' ' && ch <= '~' && ch.length === 1) out += ch
    else out += '_'
  }
  return out + '"'
}

const STYLES = new Set(['ietf', 'draft-6', 'draft-7', 'draft-8', 'legacy', 'none'])

/** The outcome of a request: a plain object (a rejection is a value, not an error). */
class Decision {
  constructor(allowed, limit, remaining, retryAfterMs, resetAfterMs, retryAfterNs, resetAfterNs, windowSeconds) {
    this.allowed = allowed
    this.limit = limit
    this.remaining = remaining
    this.retryAfterMs = retryAfterMs
    this.resetAfterMs = resetAfterMs
    this.retryAfterNs = retryAfterNs
    this.resetAfterNs = resetAfterNs
    this.windowSeconds = windowSeconds
  }

  /**
   * The HTTP response fields for this decision, as `{ name: value }` in the core's order
   * (docs/SEMANTICS.md, "HTTP fields"). `Retry-After` is added to every rejection.
   */
  headers(style = 'ietf', policy = 'default') {
    if (!STYLES.has(style)) {
      throw invalidArg(`unknown header style ${JSON.stringify(style)} (ietf, draft-6, draft-7, draft-8, legacy, none)`)
    }
    if (typeof policy !== 'string') throw invalidArg('policy must be a string')
    const { limit, remaining, windowSeconds: w } = this
    const retry = this.allowed ? 0 : Math.max(1, ceilDiv(this.retryAfterNs, 1e9))
    const reset = this.allowed ? ceilDiv(this.resetAfterNs, 1e9) : retry
    const h = {}
    switch (style) {
      case 'ietf':
      case 'draft-8': {
        const name = sfString(policy)
        h['RateLimit-Policy'] = `${name};q=${limit};w=${w}`
        h.RateLimit = `${name};r=${remaining};t=${reset}`
        break
      }
      case 'draft-6':
        h['RateLimit-Policy'] = `${limit};w=${w}`
        h['RateLimit-Limit'] = `${limit}`
        h['RateLimit-Remaining'] = `${remaining}`
        h['RateLimit-Reset'] = `${reset}`
        break
      case 'draft-7':
        h['RateLimit-Policy'] = `${limit};w=${w}`
        h.RateLimit = `limit=${limit}, remaining=${remaining}, reset=${reset}`
        break
      case 'legacy':
        h['X-RateLimit-Limit'] = `${limit}`
        h['X-RateLimit-Remaining'] = `${remaining}`
        h['X-RateLimit-Reset'] = `${reset}`
        break
    }
    if (!this.allowed) h['Retry-After'] = `${retry}`
    return h
  }
}

/** Reads the figures the last native `decide` wrote. */
function readDecision(allowed) {
  if (F[7] === 0) return new Decision(allowed, F[0], F[1], F[4], F[5], F[2], F[3], F[6])
  return new Decision(allowed, exact(U[8]), exact(U[9]), F[4], F[5], exact(U[10]), exact(U[11]), F[6])
}

// ---------------------------------------------------------------------------------------
// Quotas

const QUOTA_KEYS = new Set(['rate', 'limit', 'periodMs', 'windowMs', 'periodNs', 'burst', 'initial', 'refill'])

function uint(v, what) {
  if (typeof v === 'bigint') {
    if (v < 0n) throw invalidArg(`${what} must not be negative`)
    return v
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw invalidArg(`${what} must be a non-negative safe integer or a BigInt, got ${String(v)}`)
  }
  return BigInt(v)
}

/** A rate string for a quota given as a string or an options object. */
function toRate(quota) {
  if (typeof quota === 'string') return quota
  if (quota === null || typeof quota !== 'object') {
    throw invalidArg('quota must be a rate string ("10/s; burst=50") or an options object')
  }
  for (const k of Object.keys(quota)) {
    if (!QUOTA_KEYS.has(k)) throw invalidArg(`unknown quota option ${JSON.stringify(k)}`)
  }
  const countV = quota.rate ?? quota.limit
  if (countV === undefined) throw invalidArg('quota needs `rate` (or `limit`)')
  const count = uint(countV, 'rate')
  let periodNs
  if (quota.periodNs !== undefined) periodNs = uint(quota.periodNs, 'periodNs')
  else {
    const ms = quota.periodMs ?? quota.windowMs
    if (ms === undefined) throw invalidArg('quota needs `periodMs` (or `windowMs`, or `periodNs`)')
    periodNs = uint(ms, 'periodMs') * 1000000n
  }
  let rate = `${count}/${periodNs}ns`
  if (quota.burst !== undefined) rate += `; burst=${uint(quota.burst, 'burst')}`
  if (quota.initial !== undefined) rate += `; initial=${uint(quota.initial, 'initial')}`
  if (quota.refill !== undefined) {
    if (quota.refill !== 'continuous' && quota.refill !== 'interval') {
      throw invalidArg('refill must be "continuous" or "interval"')
    }
    rate += `; refill=${quota.refill}`
  }
  return rate
}

function clockOf(options) {
  if (options === undefined) return undefined
  if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
  const { clock } = options
  if (clock !== undefined && !(clock instanceof native.ManualClock)) {
    throw invalidArg('clock must be a sluicegate ManualClock')
  }
  return clock
}

// ---------------------------------------------------------------------------------------
// acquire(): waits on timers, never blocks the event loop

function acquireOptions(cost, options) {
  if (cost !== null && typeof cost === 'object' && options === undefined) return [1, cost]
  return [cost === undefined ? 1 : cost, options ?? {}]
}

function waitFor(attempt, first, { signal, timeoutMs } = {}) {
  if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && timeoutMs >= 0)) {
    throw invalidArg('timeoutMs must be a non-negative number')
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidArg('signal must be an AbortSignal')
  signal?.throwIfAborted()
  const d = first()
  if (d.allowed) return Promise.resolve(d)
  const deadline = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs
  return new Promise((resolve, reject) => {
    let timer
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    const done = (fn, v) => {
      signal?.removeEventListener('abort', onAbort)
      fn(v)
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    const step = (d) => {
      if (d.allowed) return done(resolve, d)
      const wait = Math.max(1, d.retryAfterMs)
      if (performance.now() + wait > deadline) {
        const err = sgError('ERR_SLUICEGATE_TIMEOUT', `not admitted within ${timeoutMs} ms`)
        err.name = 'TimeoutError'
        err.decision = d
        return done(reject, err)
      }
      timer = setTimeout(() => {
        let next
        try {
          next = attempt()
        } catch (e) {
          return done(reject, e)
        }
        step(next)
      }, wait)
    }
    step(d)
  })
}

// ---------------------------------------------------------------------------------------
// Limiter

/** One token bucket. Every method is a single lock-free native call. */
class Limiter {
  #h

  /**
   * @param quota a rate string ("10/s; burst=50") or `{ rate | limit, periodMs | windowMs |
   *   periodNs, burst?, initial?, refill? }`
   * @param options `{ clock?: ManualClock }`
   */
  constructor(quota, options) {
    const name = options?.[SHARED]
    if (name !== undefined) {
      this.#h = native.limiterShared(name, toRate(quota))
    } else {
      this.#h = native.limiterNew(toRate(quota), clockOf(options))
    }
    release.register(this, this.#h)
  }

  /**
   * The limiter named `name` in this process, created with `quota` on first use (system
   * clock). Every worker thread gets the same bucket; asking again with another quota throws.
   */
  static shared(name, quota) {
    if (typeof name !== 'string') throw invalidArg('name must be a string')
    return new Limiter(quota, { [SHARED]: name })
  }

  /** Admits `cost` tokens now? The fast path: a boolean, no figures. */
  check(cost = 1) {
    return check(this.#h, cost)
  }

  /** Asks for `cost` tokens now: a `Decision` (a rejection is `allowed: false`, not an error). */
  tryAcquire(cost = 1) {
    return readDecision(decide(this.#h, cost))
  }

  /** The current state, changing nothing (a request of cost 0). */
  peek() {
    return readDecision(decide(this.#h, 0))
  }

  /** Gives `cost` tokens back (work admitted but not done), capped at the burst. */
  refund(cost = 1) {
    refund(this.#h, cost)
  }

  /**
   * Resolves with the `Decision` once `cost` tokens are admitted, waiting on timers.
   * `acquire(cost?, { signal?, timeoutMs? })` or `acquire({ signal?, timeoutMs? })`.
   */
  acquire(cost, options) {
    try {
      const [c, opts] = acquireOptions(cost, options)
      return waitFor(() => this.tryAcquire(c), () => this.tryAcquire(c), opts)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /** Whether the bucket is full now. */
  isFull() {
    return native.isFull(this.#h)
  }

  /** The canonical rate string of this limiter's quota. */
  get quota() {
    return native.quotaOf(this.#h)
  }
}

// ---------------------------------------------------------------------------------------
// KeyedLimiter

const ON_FULL = new Set(['reject', 'evict'])

/**
 * One bucket per key, in the core's lock-free sharded table, with a bound on the keys held.
 * Keys: strings (UTF-8 bytes), Buffers and Uint8Arrays (bytes), integer numbers (decimal
 * digits, so `42` and `"42"` share a bucket).
 */
class KeyedLimiter {
  #h

  /**
   * @param quota a rate string or options object, as for `Limiter`
   * @param options `{ clock?, maxKeys? (default 2^20), onFull?: 'reject' | 'evict', shards? }`
   */
  constructor(quota, options = {}) {
    const clock = clockOf(options)
    const { maxKeys, onFull, shards } = options
    if (maxKeys !== undefined && !(Number.isInteger(maxKeys) && maxKeys >= 1 && maxKeys <= 0xffffffff)) {
      throw invalidArg('maxKeys must be an integer between 1 and 2^32-1')
    }
    if (onFull !== undefined && !ON_FULL.has(onFull)) throw invalidArg('onFull must be "reject" or "evict"')
    if (shards !== undefined && !(Number.isInteger(shards) && shards >= 1 && shards <= 4096)) {
      throw invalidArg('shards must be an integer between 1 and 4096')
    }
    this.#h = native.keyedNew(toRate(quota), clock, maxKeys, onFull, shards)
    release.register(this, this.#h)
  }

  /** Admits `cost` tokens of `key`'s bucket now? The fast path: a boolean. */
  check(key, cost = 1) {
    return keyedCheck(this.#h, key, cost)
  }

  /** Asks for `cost` tokens of `key`'s bucket now (creating it on first use): a `Decision`. */
  tryAcquire(key, cost = 1) {
    return readDecision(keyedDecide(this.#h, key, cost))
  }

  /** `key`'s state, changing nothing and creating no bucket. */
  peek(key) {
    return readDecision(keyedPeek(this.#h, key))
  }

  /** Gives `cost` tokens back to `key`'s bucket, capped at the burst. */
  refund(key, cost = 1) {
    keyedRefund(this.#h, key, cost)
  }

  /** As `Limiter#acquire`, for `key`: `acquire(key, cost?, { signal?, timeoutMs? })`. */
  acquire(key, cost, options) {
    try {
      const [c, opts] = acquireOptions(cost, options)
      return waitFor(() => this.tryAcquire(key, c), () => this.tryAcquire(key, c), opts)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /** Forgets `key`'s bucket; whether it existed. */
  remove(key) {
    return native.keyedRemove(this.#h, key)
  }

  /** Evicts every bucket that is full now (it is indistinguishable from a new one); how many. */
  sweep() {
    return native.keyedSweep(this.#h)
  }

  /** Forgets every bucket. */
  clear() {
    native.keyedClear(this.#h)
  }

  /** Keys held now. */
  get size() {
    return native.keyedLen(this.#h)
  }

  /** The bound on keys held at once. */
  get maxKeys() {
    return native.keyedMaxKeys(this.#h)
  }

  /** The canonical rate string of this limiter's quota. */
  get quota() {
    return native.quotaOf(this.#h)
  }
}

module.exports = {
  Limiter,
  KeyedLimiter,
  Decision,
  ManualClock: native.ManualClock,
  canonicalQuota: (quota) => native.canonicalQuota(toRate(quota)),
  // internal, for the Express middleware and the benchmarks
  _internal: { native, toRate, invalidArg, readDecision, waitFor, acquireOptions },
}
