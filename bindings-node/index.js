'use strict'
// The JavaScript API over the native addon (native.js loads it). Conversion and error
// mapping happen in Rust; this file only shapes results into JavaScript objects, runs
// acquire()'s timers and holds each limiter's handle.

const native = require('./native.js')

const { check, decide, refund, reserveWithin, renderHeaders, keyedCheck, keyedDecide, keyedPeek, keyedRefund } = native

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
   * (docs/SEMANTICS.md, "HTTP fields"), rendered by the core. `Retry-After` is added to
   * every rejection.
   */
  headers(style = 'ietf', policy = 'default') {
    if (typeof style !== 'string') throw invalidArg('style must be a string')
    if (typeof policy !== 'string') throw invalidArg('policy must be a string')
    const f = renderHeaders(this.allowed, this.limit, this.remaining, this.retryAfterNs, this.resetAfterNs, this.windowSeconds, style, policy)
    const h = {}
    for (let i = 0; i < f.length; i += 2) h[f[i]] = f[i + 1]
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

const QUOTA_KEYS = new Set(['rate', 'limit', 'periodMs', 'windowMs', 'periodNs', 'burst', 'initial', 'refill', 'algorithm', 'maxDelayMs', 'maxDelayNs'])
const ALGORITHMS = new Set(['token_bucket', 'gcra', 'fixed_window', 'sliding_window', 'sliding_log', 'leaky_queue'])

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
  if (quota.algorithm !== undefined) {
    if (!ALGORITHMS.has(quota.algorithm)) throw invalidArg(`algorithm must be one of ${[...ALGORITHMS].join(', ')}`)
    rate += `; algorithm=${quota.algorithm}`
  }
  if (quota.maxDelayNs !== undefined) rate += `; max_delay=${uint(quota.maxDelayNs, 'maxDelayNs')}ns`
  else if (quota.maxDelayMs !== undefined) rate += `; max_delay=${uint(quota.maxDelayMs, 'maxDelayMs')}ms`
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

const U64_MAX = 2n ** 64n - 1n

function timeoutError(timeoutMs, d) {
  const err = sgError('ERR_SLUICEGATE_TIMEOUT', `not admitted within ${timeoutMs} ms`)
  err.name = 'TimeoutError'
  err.decision = d
  return err
}

/**
 * acquire()'s loop on timers. `attempt(maxWaitNs)` asks once (a leaky queue reserves a slot
 * at most `maxWaitNs` away where the core can bound it); `cancel()` gives an admission back;
 * `delayNs` is the queue bound of a leaky queue (else null). An admission that carries a
 * wait (a queue's slot) resolves once the wait has passed; a rejection is retried after its
 * `retryAfter` while that can still end within `timeoutMs`.
 */
function waitFor(attempt, cancel, delayNs, { signal, timeoutMs } = {}) {
  if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && timeoutMs >= 0)) {
    throw invalidArg('timeoutMs must be a non-negative number')
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidArg('signal must be an AbortSignal')
  signal?.throwIfAborted()
  const deadline = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs
  const leftNs = () => {
    if (deadline === Infinity) return U64_MAX
    return Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.floor((deadline - performance.now()) * 1e6)))
  }
  const first = attempt(leftNs())
  if (first.allowed && first.retryAfterNs === 0) return Promise.resolve(first)
  return new Promise((resolve, reject) => {
    let timer
    let holding = false // admitted, waiting for the slot: an abort gives it back
    const onAbort = () => {
      clearTimeout(timer)
      if (holding) {
        try { cancel() } catch {}
      }
      reject(signal.reason)
    }
    const done = (fn, v) => {
      signal?.removeEventListener('abort', onAbort)
      fn(v)
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    const step = (d) => {
      const left = deadline - performance.now()
      if (d.allowed) {
        if (d.retryAfterNs === 0) return done(resolve, d)
        if (d.retryAfterMs > left) {
          // A slot further away than the deadline (where the core could not bound it).
          try { cancel() } catch (e) { return done(reject, e) }
          return done(reject, timeoutError(timeoutMs, d))
        }
        holding = true
        timer = setTimeout(() => done(resolve, d), d.retryAfterMs)
        return
      }
      let retry = d.retryAfterMs <= left
      if (delayNs !== null && left !== Infinity) {
        // A queue refused the slot within min(bound, left): it only fits later if the slot
        // lies within the deadline, i.e. the refusal came from the bound, not the deadline.
        const l = left * 1e6
        retry = Number(d.retryAfterNs) <= l - Math.min(delayNs, l)
      }
      if (!retry) return done(reject, timeoutError(timeoutMs, d))
      timer = setTimeout(() => {
        let next
        try {
          next = attempt(leftNs())
        } catch (e) {
          return done(reject, e)
        }
        step(next)
      }, Math.max(1, d.retryAfterMs))
    }
    step(first)
  })
}

// ---------------------------------------------------------------------------------------
// Limiter

let handleOf // (limiter) => its handle, for Composite

/** One bucket (any algorithm). Every method is a single lock-free native call. */
class Limiter {
  #h
  #delayNs // the leaky queue's bound in ns, null for other algorithms (read on first acquire)

  static {
    handleOf = (l) => l.#h
  }

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
   * Reserves `cost` now (the core's `reserve`/`reserve_within`). A leaky queue may admit with
   * a wait: `retryAfterMs` is the delay until the reserved slot, which the caller lets pass
   * before going ahead, or gives back with `cancel(cost)`. With `maxWaitMs` a queue admits only
   * if that wait is at most `maxWaitMs`. Other algorithms decide as `tryAcquire`.
   */
  reserve(cost = 1, options) {
    let maxWait = U64_MAX
    if (options !== undefined) {
      if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
      const { maxWaitMs } = options
      if (maxWaitMs !== undefined) {
        if (!(typeof maxWaitMs === 'number' && maxWaitMs >= 0)) throw invalidArg('maxWaitMs must be a non-negative number')
        maxWait = maxWaitMs === Infinity ? U64_MAX : Math.min(Number.MAX_SAFE_INTEGER, Math.floor(maxWaitMs * 1e6))
      }
    }
    return readDecision(reserveWithin(this.#h, cost, maxWait))
  }

  /** Gives a reservation (or admitted cost) back: the same as `refund(cost)`. */
  cancel(cost = 1) {
    refund(this.#h, cost)
  }

  /**
   * Resolves with the `Decision` once `cost` tokens are admitted, waiting on timers (never
   * blocking the event loop). A leaky queue reserves a slot within the timeout and resolves
   * when the slot comes; an abort while waiting for it cancels the reservation.
   * `acquire(cost?, { signal?, timeoutMs? })` or `acquire({ signal?, timeoutMs? })`.
   */
  acquire(cost, options) {
    try {
      const [c, opts] = acquireOptions(cost, options)
      if (this.#delayNs === undefined) this.#delayNs = native.maxDelayNs(this.#h)
      const h = this.#h
      return waitFor((maxWaitNs) => readDecision(reserveWithin(h, c, maxWaitNs)), () => refund(h, c), this.#delayNs, opts)
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
  #delayNs

  constructor(quota, options = {}) {
    const name = options?.[SHARED]
    const clock = name === undefined ? clockOf(options) : undefined
    const { maxKeys, onFull, shards } = options
    if (maxKeys !== undefined && !(Number.isInteger(maxKeys) && maxKeys >= 1 && maxKeys <= 0xffffffff)) {
      throw invalidArg('maxKeys must be an integer between 1 and 2^32-1')
    }
    if (onFull !== undefined && !ON_FULL.has(onFull)) throw invalidArg('onFull must be "reject" or "evict"')
    if (shards !== undefined && !(Number.isInteger(shards) && shards >= 1 && shards <= 4096)) {
      throw invalidArg('shards must be an integer between 1 and 4096')
    }
    this.#h = name === undefined
      ? native.keyedNew(toRate(quota), clock, maxKeys, onFull, shards)
      : native.keyedShared(name, toRate(quota), maxKeys, onFull, shards)
    release.register(this, this.#h)
  }

  /**
   * The keyed limiter named `name` in this process, created with `quota` and `options`
   * (`{ maxKeys?, onFull?, shards? }`, system clock) on first use. Every worker thread gets the
   * same table; asking again with another quota or other options throws.
   */
  static shared(name, quota, options = {}) {
    if (typeof name !== 'string') throw invalidArg('name must be a string')
    if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
    if (options.clock !== undefined) throw invalidArg('a shared KeyedLimiter reads the system clock')
    return new KeyedLimiter(quota, { ...options, [SHARED]: name })
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

  /**
   * Reserves `cost` of `key`'s bucket now: `tryAcquire` (a leaky queue's admission may carry a
   * wait, `retryAfterMs`, until its slot); give it back with `cancel(key, cost)`.
   */
  reserve(key, cost = 1) {
    return this.tryAcquire(key, cost)
  }

  /** Gives a reservation (or admitted cost) of `key` back: the same as `refund(key, cost)`. */
  cancel(key, cost = 1) {
    keyedRefund(this.#h, key, cost)
  }

  /**
   * As `Limiter#acquire`, for `key`: `acquire(key, cost?, { signal?, timeoutMs? })`. A leaky
   * queue's slot beyond the timeout is cancelled at once (the keyed store cannot bound it).
   */
  acquire(key, cost, options) {
    try {
      const [c, opts] = acquireOptions(cost, options)
      if (this.#delayNs === undefined) this.#delayNs = native.maxDelayNs(this.#h)
      const h = this.#h
      return waitFor(() => readDecision(keyedDecide(h, key, c)), () => keyedRefund(h, key, c), this.#delayNs, opts)
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

// ---------------------------------------------------------------------------------------
// Composite

/**
 * Several limiters consumed all-or-nothing (per user, per tenant, global): a request is
 * admitted by every part or by none (docs/SEMANTICS.md, "Composite limits"). The decision
 * reports the tightest part. Parts stay usable on their own; the composite reads the first
 * part's clock.
 */
class Composite {
  #h
  #parts

  /** @param parts the `Limiter`s, in order (put the most likely to reject first) */
  constructor(parts) {
    if (!Array.isArray(parts) || parts.length === 0) throw invalidArg('parts must be a non-empty array of Limiters')
    for (const p of parts) {
      if (!(p instanceof Limiter)) throw invalidArg('every part must be a Limiter')
    }
    this.#parts = Object.freeze([...parts])
    this.#h = native.compositeNew(this.#parts.map(handleOf))
    release.register(this, this.#h)
  }

  /** Admits `cost` from every part now? The fast path: a boolean. */
  check(cost = 1) {
    return check(this.#h, cost)
  }

  /** Asks every part for `cost` now, all-or-nothing: a `Decision` (the tightest part's). */
  tryAcquire(cost = 1) {
    return readDecision(decide(this.#h, cost))
  }

  /** The combined state, changing nothing. */
  peek() {
    return readDecision(decide(this.#h, 0))
  }

  /** Gives `cost` back to every part. */
  refund(cost = 1) {
    refund(this.#h, cost)
  }

  /** As `Limiter#acquire`, all-or-nothing over the parts. */
  acquire(cost, options) {
    try {
      const [c, opts] = acquireOptions(cost, options)
      const h = this.#h
      return waitFor(() => readDecision(decide(h, c)), () => refund(h, c), null, opts)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /** The parts, in order. */
  get parts() {
    return this.#parts
  }
}

module.exports = {
  Limiter,
  KeyedLimiter,
  Composite,
  Decision,
  ManualClock: native.ManualClock,
  canonicalQuota: (quota) => native.canonicalQuota(toRate(quota)),
  // internal, for the Express middleware and the benchmarks
  _internal: { native, toRate, invalidArg, readDecision, waitFor, acquireOptions },
}
