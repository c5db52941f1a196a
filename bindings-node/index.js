'use strict'
// The JavaScript API over the native addon (native.js loads it). Conversion and error
// mapping happen in Rust; this file only shapes results into JavaScript objects, runs
// acquire()'s timers and holds each limiter's handle.

const native = require('./native.js')

const { allow, decide, peek, refund, reserveWithin, renderHeaders, headerRenderer, renderFields, keyedAllow, keyedDecide, keyedPeek, keyedRefund } = native

// Decision figures written by the native `decide` (layout: src/hot.rs, mod slot).
const F = new Float64Array(native.scratch)
const U = new BigUint64Array(native.scratch)
const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER)
const exact = (b) => (b <= MAX_SAFE_BIG ? Number(b) : b)

const release = new FinalizationRegistry((handle) => native.release(handle))
const SHARED = Symbol('sluicegate.shared')
// A suffix for the store's region name or Redis prefix (the Express middleware's per-limit
// namespace): applied natively, so a Redis URL's password never goes through a printed form.
const STORE_SUFFIX = Symbol('sluicegate.storeSuffix')
// The web adapters' answers where a keyed limiter's store refused a request (web.js).
const OVER_CAPACITY = Symbol('sluicegate.overCapacity')
const STORE_FULL = Symbol('sluicegate.storeFull')

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
  constructor(allowed, limit, remaining, retryAfterMs, resetAfterMs, retryAfterNs, resetAfterNs, windowSeconds, shadowRejected = false) {
    this.allowed = allowed
    this.limit = limit
    this.remaining = remaining
    this.retryAfterMs = retryAfterMs
    this.resetAfterMs = resetAfterMs
    this.retryAfterNs = retryAfterNs
    this.resetAfterNs = resetAfterNs
    this.windowSeconds = windowSeconds
    // Shadow mode let through a request enforcement would reject (`allowed` is true, the
    // other figures are the rejection's).
    this.shadowRejected = shadowRejected
  }

  /**
   * The HTTP response fields for this decision, as `{ name: value }` in the core's order
   * (docs/SEMANTICS.md, "HTTP fields"), rendered by the core. `Retry-After` is added to
   * every rejection. `style`: the core's names, `ietf`, `draft6`, `draft7`, `legacy`, `none`.
   */
  headers(style = 'ietf', policy = 'default') {
    if (typeof style !== 'string') throw invalidArg('style must be a string')
    if (typeof policy !== 'string') throw invalidArg('policy must be a string')
    const text = fieldText(this, style, policy)
    const f = text === null
      ? renderHeaders(this.allowed, this.limit, this.remaining, this.retryAfterNs, this.resetAfterNs, this.windowSeconds, style, policy)
      : text === '' ? [] : text.split('\n')
    const h = {}
    for (let i = 0; i < f.length; i += 2) h[f[i]] = f[i + 1]
    return h
  }
}

/**
 * `d`'s fields as one string, `name\nvalue\nname\nvalue...` (`''`: none), rendered by the core;
 * `null` when only `renderHeaders` can render them (a figure past 2^53, a policy with a line
 * break). The figures go through the scratch buffer and the fields come back as one string:
 * one crossing each way, where `renderHeaders` converts eight arguments and returns an array.
 */
function fieldText(d, style, policy) {
  const id = rendererOf(style, policy)
  if (id < 0 || !safeFigures(d)) return null
  F[R] = d.allowed ? 1 : 0
  F[R + 1] = d.limit
  F[R + 2] = d.remaining
  F[R + 3] = d.retryAfterNs
  F[R + 4] = d.resetAfterNs
  F[R + 5] = d.windowSeconds
  return renderFields(id)
}

/**
 * Calls `set(target, name, value, arg)` for each of `d`'s fields in `style` (strings the
 * adapters check once), without the object `headers()` builds: the names and values are cut
 * from the core's one rendered string.
 */
function forEachField(d, style, policy, set, target, arg) {
  const text = fieldText(d, style, policy)
  if (text === null) {
    const h = d.headers(style, policy)
    for (const name in h) set(target, name, h[name], arg)
    return
  }
  let i = 0
  while (i < text.length) {
    const a = text.indexOf('\n', i)
    let b = text.indexOf('\n', a + 1)
    if (b < 0) b = text.length
    set(target, text.slice(i, a), text.slice(a + 1, b), arg)
    i = b + 1
  }
}

const setHeader = (res, name, value) => res.setHeader(name, value)

/** Sets `d`'s fields on a Node response (`res.setHeader`; Express and plain `http`). */
function setFields(res, d, style, policy) {
  forEachField(d, style, policy, setHeader, res, undefined)
}

// `renderFields`' input: the scratch slots from `hot::slot::RENDER_ALLOWED` on.
const R = 16
const isSafe = (x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0
/** Whether every figure `renderFields` takes fits its f64 slot exactly. */
const safeFigures = (d) => isSafe(d.limit) && isSafe(d.remaining) && isSafe(d.retryAfterNs) && isSafe(d.resetAfterNs) && isSafe(d.windowSeconds)

// style -> policy -> renderer id, for the pairs the native side holds (at most 256).
const RENDERERS = new Map()
/** The native renderer of `style` and `policy`; -1 for `renderHeaders` (a policy with a line break, or too many pairs). */
function rendererOf(style, policy) {
  const id = RENDERERS.get(style)?.get(policy)
  if (id !== undefined) return id
  if (policy.includes('\n')) return -1
  const made = headerRenderer(style, policy) // throws on an unknown style
  if (made >= 0) {
    if (!RENDERERS.has(style)) RENDERERS.set(style, new Map())
    RENDERERS.get(style).set(policy, made)
  }
  return made
}

/** Reads the figures the last native `decide` wrote. */
function readDecision(allowed) {
  if (F[7] === 0) return new Decision(allowed, F[0], F[1], F[4], F[5], F[2], F[3], F[6], F[12] === 1)
  return new Decision(allowed, exact(U[8]), exact(U[9]), F[4], F[5], exact(U[10]), exact(U[11]), F[6], F[12] === 1)
}

// ---------------------------------------------------------------------------------------
// Quotas

const QUOTA_KEYS = new Set(['count', 'periodMs', 'periodNs', 'burst', 'initial', 'refill', 'algorithm', 'maxDelayMs', 'maxDelayNs'])
const U64_MAX = 2n ** 64n - 1n

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

/** Milliseconds as nanoseconds (a BigInt within u64). */
function msToNs(v, what) {
  const ns = uint(v, what) * 1000000n
  if (ns > U64_MAX) throw invalidArg(`${what} must be at most ${U64_MAX / 1000000n}`)
  return ns
}

function optString(v, what) {
  if (v !== undefined && typeof v !== 'string') throw invalidArg(`${what} must be a string`)
  return v
}

/**
 * A rate string for a quota given as a string or an options object (the core builds the
 * quota from the options and checks every value: `refill` and `algorithm` by its names).
 */
function toRate(quota) {
  if (typeof quota === 'string') return quota
  if (quota === null || typeof quota !== 'object') {
    throw invalidArg('quota must be a rate string ("10/s; burst=50") or an options object')
  }
  for (const k of Object.keys(quota)) {
    if (!QUOTA_KEYS.has(k)) throw invalidArg(`unknown quota option ${JSON.stringify(k)}`)
  }
  if (quota.count === undefined) throw invalidArg('quota needs `count`')
  // Both spellings of one figure would be a million-fold apart if taken one for the other.
  if (quota.periodNs !== undefined && quota.periodMs !== undefined) throw invalidArg('give periodMs or periodNs, not both')
  if (quota.maxDelayNs !== undefined && quota.maxDelayMs !== undefined) throw invalidArg('give maxDelayMs or maxDelayNs, not both')
  let periodNs
  if (quota.periodNs !== undefined) periodNs = uint(quota.periodNs, 'periodNs')
  else if (quota.periodMs !== undefined) periodNs = msToNs(quota.periodMs, 'periodMs')
  else throw invalidArg('quota needs `periodMs` (or `periodNs`)')
  const opt = (v, what) => (v === undefined ? undefined : uint(v, what))
  let maxDelayNs = opt(quota.maxDelayNs, 'maxDelayNs')
  if (maxDelayNs === undefined && quota.maxDelayMs !== undefined) maxDelayNs = msToNs(quota.maxDelayMs, 'maxDelayMs')
  return native.quotaFromOptions(
    uint(quota.count, 'count'), periodNs, opt(quota.burst, 'burst'), opt(quota.initial, 'initial'),
    optString(quota.refill, 'refill'), optString(quota.algorithm, 'algorithm'), maxDelayNs,
  )
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

/**
 * The `store` option: a string the core parses (`'memory'`, `'shm:NAME[?capacity=N]'`,
 * `'redis://HOST:PORT/DB?prefix=..&timeout=..&on_error=..'`).
 */
function storeOf(options) {
  return optString(options?.store, 'store')
}

const LIMITER_OPTIONS = new Set(['clock', 'store', 'metrics', 'shadow', 'onReject'])
const KEYED_OPTIONS = new Set([...LIMITER_OPTIONS, 'maxKeys', 'onFull', 'shards'])
// `KeyedLimiter.shared`'s: the table's bound (the registry keeps no counters or hook).
const SHARED_KEYED_OPTIONS = new Set(['maxKeys', 'onFull', 'shards'])
const ACQUIRE_OPTIONS = new Set(['signal', 'timeoutMs'])

/**
 * Throws on an option name outside `known` (`what`'s): a misspelt option (`stroe`, `maxkeys`)
 * would otherwise be ignored, and the limiter built without it (in memory, with the default
 * bound). Symbol keys (this module's own) are not names.
 */
function knownOptions(options, known, what) {
  if (options === undefined) return
  if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
  for (const k of Object.keys(options)) {
    if (!known.has(k)) throw invalidArg(`unknown ${what} option ${JSON.stringify(k)} (known: ${[...known].join(', ')})`)
  }
}

// ---------------------------------------------------------------------------------------
// Operating a limiter (docs/OPERATIONS.md): counters, shadow mode, the rejection hook

function optBool(v, what) {
  if (v !== undefined && typeof v !== 'boolean') throw invalidArg(`${what} must be a boolean`)
  return v
}

/**
 * `[[metrics, shadow, hook], held]` of the options `{ metrics?, shadow?, onReject? }`. The
 * native hook is queued after each rejection (a threadsafe function: it runs on this thread
 * once the decision has returned) with `[key's bytes (null for one bucket), cost, decision's
 * figures]`; `onReject` gets `{ key, cost, decision }`. What it throws is an uncaught
 * exception, as in a timer.
 *
 * The threadsafe function is a strong reference the garbage collector cannot see through, so
 * the hook reaches `onReject` only through a WeakRef to `held`, which the limiter keeps: an
 * `onReject` that refers to its own limiter (`() => log(limiter.metrics())`) would otherwise
 * keep the limiter, and its native state, alive for ever. A rejection whose limiter has been
 * collected before its hook ran calls nothing.
 */
function observeOf(options) {
  const onReject = options?.onReject
  if (onReject !== undefined && typeof onReject !== 'function') throw invalidArg('onReject must be a function')
  const held = onReject && { onReject }
  const weak = held && new WeakRef(held)
  const hook =
    weak &&
    (([key, cost, figures]) => {
      const h = weak.deref()
      if (h !== undefined) h.onReject({ key, cost, decision: fromFigures(figures) })
    })
  return [[optBool(options?.metrics, 'metrics'), optBool(options?.shadow, 'shadow'), hook], held]
}

/** A counters snapshot (src/ops.rs, `metricsOf`) as an object, or `null` when counting is off. */
function metricsOf(h) {
  const m = native.metricsOf(h)
  if (m === null) return null
  const [allowed, rejected, shadowRejected, keysEvicted, keyStoreFull, storeErrors, reconfigurations, keys, shadow] = m
  return { allowed, rejected, shadowRejected, keysEvicted, keyStoreFull, storeErrors, reconfigurations, keys, shadow }
}

/** Changes a limiter's quota live (a rate string or options object). */
function setQuota(h, quota) {
  native.setQuota(h, toRate(quota))
}

function setShadow(h, on) {
  if (typeof on !== 'boolean') throw invalidArg('shadow must be a boolean')
  native.setShadow(h, on)
}

// ---------------------------------------------------------------------------------------
// Promises: the calls on a Redis store (src/remote.rs), and the same calls answered at once
// for the other stores, so that code written with them runs on every store

const ACQUIRE_OP = 0 // and 1: peek, 2: refund (src/remote.rs)
const PEEK_OP = 1
const REFUND_OP = 2

/** A decision's figures from src/remote.rs, or the error it resolved with (thrown). */
function fromFigures(v) {
  if (v instanceof Error) throw v
  return new Decision(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8])
}

/** A refund's (or a clear's, or a remove's) answer, or the error it resolved with (thrown). */
function fromValue(v) {
  if (v instanceof Error) throw v
  return v
}

/** `f()`'s result as a Promise (what it throws, as a rejection). */
function settled(f) {
  try {
    return Promise.resolve(f())
  } catch (e) {
    return Promise.reject(e)
  }
}

/** A native call that returns a Promise, its answer shaped by `then` (a throw: a rejection). */
function remote(call, then) {
  try {
    return call().then(then)
  } catch (e) {
    return Promise.reject(e)
  }
}

/**
 * A one-bucket handle's (a Limiter's or a Composite's) request `op` of `cost` as a Promise:
 * on a Redis store the native call; elsewhere `sync()`, answered at once.
 */
function bucketAsync(h, isRemote, op, cost, sync) {
  if (isRemote) return remote(() => native.remoteCall(h, op, cost), op === REFUND_OP ? fromValue : fromFigures)
  return settled(sync)
}

/**
 * A batch's outcome: the decisions, or, when a request failed, a rejection with the first
 * error, whose `results` holds every request's `Decision` or `Error` (in order).
 */
function batch(results) {
  const err = results.find((r) => r instanceof Error)
  if (err === undefined) return results
  err.results = results
  throw err
}

// ---------------------------------------------------------------------------------------
// acquire(): the core's plan, polled from timers (never blocks the event loop)

const ADMIT = 0 // and 1: rejected (the outcome), 2: not yet (src/acquire.rs)
const REJECT = 1
const MAX_TIMER_MS = 2 ** 31 - 1 // setTimeout's longest delay

/** A wait in milliseconds as whole nanoseconds; `undefined` (absent or infinite): no bound. */
function waitNs(ms, what) {
  if (ms === undefined || ms === Infinity) return undefined
  if (!(typeof ms === 'number' && ms >= 0)) throw invalidArg(`${what} must be a non-negative number`)
  return Math.min(Number.MAX_SAFE_INTEGER, Math.floor(ms * 1e6))
}

/** `[cost, maxWaitNs (undefined: no deadline), signal]` of `acquire(cost?, options?)`. */
function acquireArgs(cost, options) {
  if (cost !== null && typeof cost === 'object' && options === undefined) [cost, options] = [1, cost]
  if (cost === undefined) cost = 1
  if (options === undefined) options = {}
  knownOptions(options, ACQUIRE_OPTIONS, 'acquire')
  const { signal } = options
  const maxWaitNs = waitNs(options.timeoutMs, 'timeoutMs')
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidArg('signal must be an AbortSignal')
  signal?.throwIfAborted()
  return [cost, maxWaitNs, signal]
}

/**
 * Runs the native acquire `plan` to its outcome: the core decides each round (admit, reject,
 * or poll again after `retryAfter`); this only sleeps on timers and, on an abort, gives an
 * admitted slot back (`plan.cancel()`) before rejecting with the signal's reason.
 */
function drive(plan, signal) {
  return new Promise((resolve, reject) => {
    let timer
    let admitted = false // waiting for an admitted slot: an abort gives it back
    const settle = (fn, v) => {
      signal?.removeEventListener('abort', onAbort)
      fn(v)
    }
    const sleep = (ms, then) => {
      timer = ms > MAX_TIMER_MS ? setTimeout(() => sleep(ms - MAX_TIMER_MS, then), MAX_TIMER_MS) : setTimeout(then, ms)
    }
    const onAbort = () => {
      clearTimeout(timer)
      try {
        if (admitted) plan.cancel()
      } catch (e) {
        return reject(e)
      }
      reject(signal.reason)
    }
    const step = () => {
      let kind, d
      try {
        kind = plan.poll()
        d = readDecision(kind === ADMIT)
      } catch (e) {
        return settle(reject, e)
      }
      // An admission goes ahead at once unless it carries a wait (a leaky queue's slot); one
      // that shadow mode let through carries the rejection's figures, took nothing, and never
      // waits (the core's `Next::wait`).
      if (kind === REJECT || (kind === ADMIT && (d.retryAfterNs === 0 || d.shadowRejected))) return settle(resolve, d)
      admitted = kind === ADMIT
      sleep(d.retryAfterMs, admitted ? () => settle(resolve, d) : step)
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    step()
  })
}

// ---------------------------------------------------------------------------------------
// Limiter

let handleOf // (limiter) => its handle, for Composite
let limiterHandle // (limiter) => its handle, for renderPrometheus
let keyedHandle // (keyed limiter) => its handle, for renderPrometheus

/**
 * One bucket (any algorithm). Every method is a single lock-free native call, except on a
 * Redis store, where a request is a round trip: there only the `*Async` methods decide (they
 * return Promises, the event loop never waits) and the synchronous ones throw
 * `ERR_SLUICEGATE_STORE_UNSUPPORTED`. The `*Async` methods work on every store.
 */
class Limiter {
  #h
  #remote
  /** What the rejection hook reaches `onReject` through (`observeOf`). */
  #held

  static {
    handleOf = (l) => l.#h
    limiterHandle = (l) => l.#h
  }

  /**
   * @param quota a rate string ("10/s; burst=50") or `{ count, periodMs | periodNs, burst?,
   *   initial?, refill?, algorithm?, maxDelayMs? | maxDelayNs? }`
   * @param options `{ clock?: ManualClock, store?: 'memory' | 'shm:NAME', metrics?, shadow?,
   *   onReject? }`: with a shared-memory store, every process of the host that opens the
   *   region shares the bucket; `metrics: true` counts decisions (`metrics()`), `shadow: true`
   *   lets every request through, marking `shadowRejected` what enforcement would refuse, and
   *   `onReject({ key, cost, decision })` is called after each rejection
   */
  constructor(quota, options) {
    knownOptions(options, LIMITER_OPTIONS, 'Limiter')
    const name = options?.[SHARED]
    if (name !== undefined) {
      this.#h = native.limiterShared(name, toRate(quota))
    } else {
      const [observe, held] = observeOf(options)
      this.#h = native.limiterNew(toRate(quota), clockOf(options), storeOf(options), ...observe)
      this.#held = held
    }
    this.#remote = native.isRemote(this.#h)
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
  allow(cost = 1) {
    return allow(this.#h, cost)
  }

  /** Asks for `cost` tokens now: a `Decision` (a rejection is `allowed: false`, not an error). */
  tryAcquire(cost = 1) {
    return readDecision(decide(this.#h, cost))
  }

  /** The current state, changing nothing (the core's `peek`: not counted by `metrics()`). */
  peek() {
    return readDecision(peek(this.#h))
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
    if (options !== undefined && (options === null || typeof options !== 'object')) throw invalidArg('options must be an object')
    const maxWaitNs = waitNs(options?.maxWaitMs, 'maxWaitMs') ?? U64_MAX
    return readDecision(reserveWithin(this.#h, cost, maxWaitNs))
  }

  /** Gives a reservation (or admitted cost) back: the same as `refund(cost)`. */
  cancel(cost = 1) {
    refund(this.#h, cost)
  }

  /**
   * Acquires `cost` tokens, waiting on timers (never blocking the event loop) for at most
   * `timeoutMs` (absent: no deadline): resolves with the admitting `Decision`, or with the
   * rejection when the quota cannot admit in time (a value, not an error). A leaky queue
   * reserves a slot within the timeout and resolves when the slot comes; an abort while
   * waiting for it gives the slot back. The policy is the core's acquire plan.
   * `acquire(cost?, { signal?, timeoutMs? })` or `acquire({ signal?, timeoutMs? })`.
   */
  acquire(cost, options) {
    try {
      const [c, maxWaitNs, signal] = acquireArgs(cost, options)
      return drive(native.acquireStart(this.#h, c, maxWaitNs), signal)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /**
   * Asks for `cost` tokens now: a Promise of the `Decision`. On a Redis store the server
   * decides (one round trip, pipelined with every concurrent caller's); on the others it is
   * `tryAcquire`, answered at once. Errors (and a Redis failure under `on_error=error`) reject.
   */
  tryAcquireAsync(cost = 1) {
    return bucketAsync(this.#h, this.#remote, ACQUIRE_OP, cost, () => this.tryAcquire(cost))
  }

  /**
   * `peek()` as a Promise (on a Redis store, a round trip that changes nothing; a server that
   * does not answer rejects it with a store error whatever `on_error` says).
   */
  peekAsync() {
    return bucketAsync(this.#h, this.#remote, PEEK_OP, 0, () => this.peek())
  }

  /** `refund(cost)` as a Promise. */
  refundAsync(cost = 1) {
    return bucketAsync(this.#h, this.#remote, REFUND_OP, cost, () => this.refund(cost))
  }

  /**
   * The Redis store's counters (`{ decided, cachedRejections, failedOpen, failedClosed,
   * failedLocal, failedError, timeouts, unavailable, serverErrors, connects, scriptLoads,
   * redirects }`, shared by every limiter on the URL in this process), or `null` on another
   * store.
   */
  redisStats() {
    return native.redisStats(this.#h)
  }

  /** Whether the bucket is full now. */
  isFull() {
    return native.isFull(this.#h)
  }

  /** The canonical rate string of this limiter's quota. */
  get quota() {
    return native.quotaOf(this.#h)
  }

  /**
   * Changes the quota live (a rate string or options object, same algorithm): the buckets keep
   * their tokens, clamped to the new burst, and refill at the new rate (docs/OPERATIONS.md,
   * "The carry rule"). A shared-memory or Redis store throws ERR_SLUICEGATE_STORE_UNSUPPORTED.
   */
  setQuota(quota) {
    setQuota(this.#h, quota)
  }

  /** Shadow (dry-run) mode: every request goes through; `shadowRejected` marks would-be rejections. */
  get shadow() {
    return native.isShadow(this.#h)
  }

  set shadow(on) {
    setShadow(this.#h, on)
  }

  /**
   * A snapshot of the counters (`{ allowed, rejected, shadowRejected, keysEvicted,
   * keyStoreFull, storeErrors, reconfigurations, keys, shadow }`, counts as numbers, BigInts
   * past 2^53), or `null` when built without `metrics: true`.
   */
  metrics() {
    return metricsOf(this.#h)
  }
}

// ---------------------------------------------------------------------------------------
// KeyedLimiter

/**
 * One bucket per key, in the core's lock-free sharded table, with a bound on the keys held.
 * Keys by the core's rule: strings (UTF-8 bytes), Buffers and Uint8Arrays (bytes), integers
 * (safe-integer numbers and BigInts: decimal digits, so `42`, `42n` and `"42"` share a bucket).
 */
class KeyedLimiter {
  #h
  #remote
  /** What the rejection hook reaches `onReject` through (`observeOf`). */
  #held

  static {
    keyedHandle = (l) => l.#h
  }

  /**
   * @param quota a rate string or options object, as for `Limiter`
   * @param options `{ clock?, maxKeys? (default 2^20), onFull?: 'reject' | 'evict', shards?,
   *   store?: 'memory' | 'shm:NAME' | 'redis://...' }`: with a shared-memory store, every
   *   process of the host that opens the region shares its buckets, and `maxKeys` is the
   *   region's capacity; with a Redis store every host does, and requests are made with the
   *   `*Async` methods and `tryAcquireMany` (Promises) only. `metrics`, `shadow` and
   *   `onReject` (its `key` a Buffer of the key's bytes) as for `Limiter`
   */
  constructor(quota, options = {}) {
    knownOptions(options, KEYED_OPTIONS, 'KeyedLimiter')
    const name = options?.[SHARED]
    const clock = name === undefined ? clockOf(options) : undefined
    const store = storeOf(options)
    const { maxKeys, onFull, shards } = options
    if (maxKeys !== undefined && !(Number.isInteger(maxKeys) && maxKeys >= 1 && maxKeys <= 0xffffffff)) {
      throw invalidArg('maxKeys must be an integer between 1 and 2^32-1')
    }
    optString(onFull, 'onFull')
    if (shards !== undefined && !(Number.isInteger(shards) && shards >= 1 && shards <= 4096)) {
      throw invalidArg('shards must be an integer between 1 and 4096')
    }
    if (name === undefined) {
      const [observe, held] = observeOf(options)
      this.#h = native.keyedNew(toRate(quota), clock, maxKeys, onFull, shards, store, options[STORE_SUFFIX], ...observe)
      this.#held = held
    } else {
      this.#h = native.keyedShared(name, toRate(quota), maxKeys, onFull, shards)
    }
    this.#remote = native.isRemote(this.#h)
    release.register(this, this.#h)
  }

  /**
   * The keyed limiter named `name` in this process, created with `quota` and `options`
   * (`{ maxKeys?, onFull?, shards? }`, system clock) on first use. Every worker thread gets the
   * same table; asking again with another quota or other options throws. `metrics`, `shadow`
   * and `onReject` are refused (options of `new KeyedLimiter` only).
   */
  static shared(name, quota, options = {}) {
    if (typeof name !== 'string') throw invalidArg('name must be a string')
    if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
    if (options.clock !== undefined) throw invalidArg('a shared KeyedLimiter reads the system clock')
    if (options.store !== undefined) {
      throw invalidArg('shared() keeps its table in this process: for a store every process shares, use new KeyedLimiter(quota, { store })')
    }
    // An option of `new KeyedLimiter` given as `undefined` is absent.
    for (const k of Object.keys(options)) {
      // (`metrics: false`, `shadow: false`, `onReject: null`: asked for nothing it lacks.)
      if (SHARED_KEYED_OPTIONS.has(k) || (KEYED_OPTIONS.has(k) && !options[k])) continue
      throw invalidArg(
        KEYED_OPTIONS.has(k)
          ? `a shared KeyedLimiter takes no ${k} option (new KeyedLimiter does)`
          : `unknown KeyedLimiter.shared option ${JSON.stringify(k)} (known: ${[...SHARED_KEYED_OPTIONS].join(', ')})`,
      )
    }
    return new KeyedLimiter(quota, { ...options, [SHARED]: name })
  }

  /**
   * For a web limit: `null` when the burst holds `cost`, else the refusal a web adapter
   * answers such a request with, which no wait would admit (throws for a cost that is not a
   * whole number of tokens, as `tryAcquire`).
   */
  [OVER_CAPACITY](cost) {
    const v = native.overCapacity(this.#h, cost)
    return v === null ? null : fromFigures(v)
  }

  /** For a web limit: the refusal of a new key its store has no room for. */
  [STORE_FULL]() {
    return fromFigures(native.storeFullRefusal(this.#h))
  }

  /** Admits `cost` tokens of `key`'s bucket now? The fast path: a boolean. */
  allow(key, cost = 1) {
    return keyedAllow(this.#h, key, cost)
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

  /** As `Limiter#acquire`, for `key`: `acquire(key, cost?, { signal?, timeoutMs? })`. */
  acquire(key, cost, options) {
    try {
      const [c, maxWaitNs, signal] = acquireArgs(cost, options)
      return drive(native.acquireStart(this.#h, c, maxWaitNs, key), signal)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /**
   * Asks for `cost` tokens of `key`'s bucket now: a Promise of the `Decision`. On a Redis
   * store the server decides (one round trip, pipelined with every concurrent caller's, or
   * none when the negative cache holds the key's rejection); on the others it is
   * `tryAcquire`, answered at once. Errors (and a Redis failure under `on_error=error`) reject;
   * the other fail policies (`open`, `closed`, `local`) resolve with their decision.
   */
  tryAcquireAsync(key, cost = 1) {
    if (this.#remote) return remote(() => native.remoteCall(this.#h, ACQUIRE_OP, cost, key), fromFigures)
    return settled(() => this.tryAcquire(key, cost))
  }

  /** `peek(key)` as a Promise. */
  peekAsync(key) {
    if (this.#remote) return remote(() => native.remoteCall(this.#h, PEEK_OP, 0, key), fromFigures)
    return settled(() => this.peek(key))
  }

  /** `refund(key, cost)` as a Promise. */
  refundAsync(key, cost = 1) {
    if (this.#remote) return remote(() => native.remoteCall(this.#h, REFUND_OP, cost, key), fromValue)
    return settled(() => this.refund(key, cost))
  }

  /**
   * Asks for many keys at once: `requests` is an array of keys (cost 1) or `[key, cost]`
   * pairs. A Promise of one `Decision` per request, in order. On a Redis store every request
   * is sent before any reply is read (one round trip for the batch). When a request fails
   * (a cost above the capacity; a Redis failure under `on_error=error`) the Promise rejects
   * with the first error, whose `results` holds every request's `Decision` or `Error`.
   */
  tryAcquireMany(requests) {
    try {
      if (!Array.isArray(requests)) throw invalidArg('requests must be an array of keys or [key, cost] pairs')
      const keys = new Array(requests.length)
      const costs = new Array(requests.length)
      requests.forEach((r, i) => {
        if (Array.isArray(r)) {
          if (r.length < 1 || r.length > 2) throw invalidArg('a request is a key or a [key, cost] pair')
          ;[keys[i], costs[i]] = [r[0], r[1] ?? 1]
        } else {
          ;[keys[i], costs[i]] = [r, 1]
        }
      })
      if (this.#remote) {
        return native.remoteMany(this.#h, keys, costs).then((all) => batch(all.map((v) => (v instanceof Error ? v : fromFigures(v)))))
      }
      return Promise.resolve(batch(keys.map((k, i) => {
        try {
          return this.tryAcquire(k, costs[i])
        } catch (e) {
          return e
        }
      })))
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /** `remove(key)` as a Promise (whether the key's bucket existed). */
  removeAsync(key) {
    if (this.#remote) return remote(() => native.remoteKeys(this.#h, 0, key), fromValue)
    return settled(() => this.remove(key))
  }

  /** `clear()` as a Promise (on a Redis store: every key of this limiter's quota and prefix). */
  clearAsync() {
    if (this.#remote) return remote(() => native.remoteKeys(this.#h, 1), fromValue)
    return settled(() => this.clear())
  }

  /** As `Limiter#redisStats`: the Redis store's counters, or `null` on another store. */
  redisStats() {
    return native.redisStats(this.#h)
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

  /**
   * Changes the quota live (a rate string or options object, same algorithm): the buckets keep
   * their tokens, clamped to the new burst, and refill at the new rate (docs/OPERATIONS.md,
   * "The carry rule"). A shared-memory or Redis store throws ERR_SLUICEGATE_STORE_UNSUPPORTED.
   */
  setQuota(quota) {
    setQuota(this.#h, quota)
  }

  /** Shadow (dry-run) mode: every request goes through; `shadowRejected` marks would-be rejections. */
  get shadow() {
    return native.isShadow(this.#h)
  }

  set shadow(on) {
    setShadow(this.#h, on)
  }

  /**
   * A snapshot of the counters (`{ allowed, rejected, shadowRejected, keysEvicted,
   * keyStoreFull, storeErrors, reconfigurations, keys, shadow }`, counts as numbers, BigInts
   * past 2^53), or `null` when built without `metrics: true`.
   */
  metrics() {
    return metricsOf(this.#h)
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
  #remote

  /** @param parts the `Limiter`s, in order (put the most likely to reject first) */
  constructor(parts) {
    if (!Array.isArray(parts) || parts.length === 0) throw invalidArg('parts must be a non-empty array of Limiters')
    for (const p of parts) {
      if (!(p instanceof Limiter)) throw invalidArg('every part must be a Limiter')
    }
    this.#parts = Object.freeze([...parts])
    this.#h = native.compositeNew(this.#parts.map(handleOf))
    this.#remote = native.isRemote(this.#h)
    release.register(this, this.#h)
  }

  /**
   * Asks every part for `cost` now, all-or-nothing: a Promise of the `Decision`. With parts
   * on one Redis deployment, one script call decides them all on the server (off the event
   * loop); with every part elsewhere, it is `tryAcquire`, answered at once.
   */
  tryAcquireAsync(cost = 1) {
    return bucketAsync(this.#h, this.#remote, ACQUIRE_OP, cost, () => this.tryAcquire(cost))
  }

  /** `peek()` as a Promise. */
  peekAsync() {
    return bucketAsync(this.#h, this.#remote, PEEK_OP, 0, () => this.peek())
  }

  /** `refund(cost)` as a Promise. */
  refundAsync(cost = 1) {
    return bucketAsync(this.#h, this.#remote, REFUND_OP, cost, () => this.refund(cost))
  }

  /** Admits `cost` from every part now? The fast path: a boolean. */
  allow(cost = 1) {
    return allow(this.#h, cost)
  }

  /** Asks every part for `cost` now, all-or-nothing: a `Decision` (the tightest part's). */
  tryAcquire(cost = 1) {
    return readDecision(decide(this.#h, cost))
  }

  /** The combined state, changing nothing (each part's `peek`: not counted by `metrics()`). */
  peek() {
    return readDecision(peek(this.#h))
  }

  /** Gives `cost` back to every part. */
  refund(cost = 1) {
    refund(this.#h, cost)
  }

  /** As `Limiter#acquire`, all-or-nothing over the parts. */
  acquire(cost, options) {
    try {
      const [c, maxWaitNs, signal] = acquireArgs(cost, options)
      return drive(native.acquireStart(this.#h, c, maxWaitNs), signal)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /** The parts, in order. */
  get parts() {
    return this.#parts
  }
}

// ---------------------------------------------------------------------------------------
// Prometheus

/** A Limiter's or KeyedLimiter's handle (a TypeError for anything else). */
function counted(limiter) {
  if (limiter instanceof Limiter) return limiterHandle(limiter)
  if (limiter instanceof KeyedLimiter) return keyedHandle(limiter)
  throw invalidArg('renderPrometheus takes Limiter and KeyedLimiter objects built with { metrics: true }')
}

/**
 * The Prometheus text (format 0.0.4) of limiters' counters, rendered by the core:
 * `series` is `{ name: limiter }` (label `limiter="name"`) or an array of
 * `[labels, limiter]` pairs, `labels` an object of strings.
 */
function renderPrometheus(series) {
  const labels = []
  const handles = []
  if (Array.isArray(series)) {
    for (const pair of series) {
      if (!Array.isArray(pair) || pair.length !== 2 || pair[0] === null || typeof pair[0] !== 'object') {
        throw invalidArg('renderPrometheus takes { name: limiter } or an array of [labels, limiter] pairs')
      }
      const flat = []
      for (const [k, v] of Object.entries(pair[0])) {
        if (typeof v !== 'string') throw invalidArg(`label ${k} must be a string`)
        flat.push(k, v)
      }
      labels.push(flat)
      handles.push(counted(pair[1]))
    }
  } else if (series !== null && typeof series === 'object') {
    for (const [name, limiter] of Object.entries(series)) {
      labels.push(['limiter', name])
      handles.push(counted(limiter))
    }
  } else {
    throw invalidArg('renderPrometheus takes { name: limiter } or an array of [labels, limiter] pairs')
  }
  return native.renderPrometheus(labels, handles)
}

module.exports = {
  Limiter,
  KeyedLimiter,
  Composite,
  Decision,
  ManualClock: native.ManualClock,
  canonicalQuota: (quota) => native.canonicalQuota(toRate(quota)),
  renderPrometheus,
  ClientResolver: require('./client.js').ClientResolver,
  // internal, for the Express middleware and the benchmarks
  _internal: { native, toRate, invalidArg, readDecision, STORE_SUFFIX, OVER_CAPACITY, STORE_FULL, setFields, forEachField },
}
