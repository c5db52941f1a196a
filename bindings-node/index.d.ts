// Public types of the `sluicegate` package. The native layer's types are generated into
// native.d.ts by `napi build` (drift-checked by __test__/dts.test.mjs); this file describes
// the JavaScript classes index.js builds over it.

import { ManualClock, RedisStats } from './native'
export { ManualClock }
/** A Redis store's counters (`redisStats()`): every limiter on one URL in the process shares them. */
export type { RedisStats }

/** An integer that is a `number` while it is a safe integer, else a `bigint` (exact). */
export type Int = number | bigint

/**
 * A quota as an options object: `count` tokens per `periodMs` or `periodNs` (one of them), a
 * leaky queue's wait bound as `maxDelayMs` or `maxDelayNs` (at most one). The core checks
 * every value; a `refill` or `algorithm` outside its names is `ERR_SLUICEGATE_INVALID_OPTION`.
 */
export type QuotaOptions = QuotaFigures & QuotaPeriod & QuotaMaxDelay

/** The options of a quota but its period and wait bound. */
export interface QuotaFigures {
  count: Int
  /** The bucket's capacity (default: the count). */
  burst?: Int
  /** Tokens at creation (default: the burst). */
  initial?: Int
  refill?: Refill
  /** The algorithm (default `token_bucket`); see docs/SEMANTICS.md. */
  algorithm?: Algorithm
}

/** The period: in milliseconds or in nanoseconds. */
export type QuotaPeriod = { periodMs: Int; periodNs?: never } | { periodNs: Int; periodMs?: never }

/** A leaky queue's bound on a reservation's wait (default: one period): in milliseconds or in nanoseconds. */
export type QuotaMaxDelay = { maxDelayMs?: Int; maxDelayNs?: never } | { maxDelayNs?: Int; maxDelayMs?: never }

export type Algorithm = 'token_bucket' | 'gcra' | 'fixed_window' | 'sliding_window' | 'sliding_log' | 'leaky_queue'

export type Refill = 'continuous' | 'interval'

/** A rate string (`"10/s; burst=50"`, `"100 per minute"`) or a `QuotaOptions` object. */
export type Quota = string | QuotaOptions

/** The core's header styles: `ietf` (draft-08 and later), `draft6`, `draft7`, `legacy` (`X-RateLimit-*`), `none` (only `Retry-After`). */
export type HeaderStyle = 'ietf' | 'draft6' | 'draft7' | 'legacy' | 'none'

/**
 * The outcome of a request. A rejection is `allowed: false`, never an error. Made by the
 * limiters only (its constructor takes the native layer's figures).
 */
export declare class Decision {
  private constructor()
  readonly allowed: boolean
  /** The bucket's capacity. */
  readonly limit: Int
  /** Whole tokens left after this decision. */
  readonly remaining: Int
  /**
   * Milliseconds until the same request would be admitted, rounded up: 0 when allowed, except
   * a leaky queue's admission, where it is the wait until the reserved slot.
   */
  readonly retryAfterMs: number
  /** Milliseconds until the bucket is full (0 when full), rounded up. */
  readonly resetAfterMs: number
  /** The exact wait in nanoseconds (for a leaky queue's admission: the wait until its slot). */
  readonly retryAfterNs: Int
  /** The exact time to full in nanoseconds. */
  readonly resetAfterNs: Int
  /** The policy window in seconds (`w` of `RateLimit-Policy`). */
  readonly windowSeconds: number
  /**
   * Shadow mode let through a request enforcement would reject: `allowed` is true, the other
   * figures are the rejection's.
   */
  readonly shadowRejected: boolean
  /** The HTTP response fields, `{ name: value }`; `Retry-After` on every rejection. */
  headers(style?: HeaderStyle, policy?: string): Record<string, string>
}

export interface AcquireOptions {
  /** Rejects with `signal.reason` when aborted (an admitted leaky-queue slot is given back). */
  signal?: AbortSignal
  /**
   * The longest wait (absent: no deadline). When the quota cannot admit in time, `acquire`
   * resolves with the rejection `Decision` (`allowed: false`), not an error.
   */
  timeoutMs?: number
}

export interface LimiterOptions {
  /** Read this clock instead of the system's monotonic clock. */
  clock?: ManualClock
  /**
   * Where the bucket (or a keyed limiter's buckets) lives, as the core spells it in every
   * language: `'memory'` (the default, this process) or `'shm:NAME[?capacity=N]'`, a
   * shared-memory region that every process of the host opening it shares (`shm:/api-limits`
   * is `/dev/shm/api-limits`; a name with more slashes is a path). A region holds one quota:
   * another is `ERR_SLUICEGATE_STORE_MISMATCH`. The system clock then reads the region's
   * timeline; a `ManualClock` is used as given. Or a Redis/Valkey URL,
   * `'redis://HOST:PORT/DB?prefix=..&timeout=50ms&on_error=local|open|closed|error'` (also
   * `rediss://`, `redis+unix://`, `redis+cluster://`, `redis+sentinel://`): every host shares
   * the buckets, and only the Promise methods (`tryAcquireAsync`, ...) decide; the synchronous
   * ones throw `ERR_SLUICEGATE_STORE_UNSUPPORTED` instead of blocking the event loop.
   */
  store?: string
  /** Count decisions (`metrics()`); off by default. */
  metrics?: boolean
  /** Start in shadow (dry-run) mode: every request goes through, `shadowRejected` marks would-be rejections. */
  shadow?: boolean
  /**
   * Called after each rejection (shadow ones included), on this thread once the decision has
   * returned; what it throws is an uncaught exception.
   */
  onReject?: (rejection: Rejection) => void
}

/** A rejection, as `onReject` sees it. */
export interface Rejection {
  /** The key's bytes (the core's key rule), or `null` for a one-bucket `Limiter`. */
  key: Uint8Array | null
  cost: Int
  decision: Decision
}

/** A snapshot of a limiter's counters (docs/OPERATIONS.md, "Metrics"). */
export interface Metrics {
  /** Requests admitted. */
  allowed: Int
  /** Requests rejected (enforced). */
  rejected: Int
  /** Requests enforcement would have rejected, let through by shadow mode. */
  shadowRejected: Int
  /** Keys evicted (full buckets, or the fullest at the key bound). */
  keysEvicted: Int
  /** New keys refused at the key bound. */
  keyStoreFull: Int
  /** Calls that failed with a store's error. */
  storeErrors: Int
  /** Quotas set by `setQuota`. */
  reconfigurations: Int
  /** Keys held (a keyed limiter in memory or a region), else `null`. */
  keys: Int | null
  /** Whether the limiter is in shadow mode. */
  shadow: boolean
}

/**
 * A failed request of `tryAcquireMany`: the first error, with every request's outcome.
 */
export interface BatchError extends Error {
  code: ErrorCode
  /** One per request, in order: its `Decision`, or its `Error`. */
  results: Array<Decision | Error>
}

/** A request of `tryAcquireMany`: a key (cost 1) or a `[key, cost]` pair. */
export type BatchRequest = Key | [Key] | [Key, Int]

export interface ReserveOptions {
  /** A leaky queue admits only if the wait until the slot is at most this. */
  maxWaitMs?: number
}

/** One lock-free bucket (any algorithm). */
export declare class Limiter {
  constructor(quota: Quota, options?: LimiterOptions)
  /** The limiter named `name` in this process: the same bucket in every worker thread. */
  static shared(name: string, quota: Quota): Limiter
  /** The fast path: admitted or not, no figures. */
  allow(cost?: Int): boolean
  tryAcquire(cost?: Int): Decision
  /** The state now, changing nothing (not counted by `metrics()`). */
  peek(): Decision
  refund(cost?: Int): void
  /**
   * Reserves `cost` now; a leaky queue's admission may carry a wait (`retryAfterMs`) until its
   * slot. Other algorithms decide as `tryAcquire`.
   */
  reserve(cost?: Int, options?: ReserveOptions): Decision
  /** Gives a reservation back (the same as `refund`). */
  cancel(cost?: Int): void
  /**
   * Waits on timers (never blocks the event loop) until admitted, a leaky queue's slot
   * included: resolves with the admitting `Decision`, or with the rejection once `timeoutMs`
   * cannot be met. On a Redis store it rejects with `ERR_SLUICEGATE_STORE_UNSUPPORTED`.
   */
  acquire(options?: AcquireOptions): Promise<Decision>
  acquire(cost?: Int, options?: AcquireOptions): Promise<Decision>
  /**
   * `tryAcquire` as a Promise, on every store: on Redis the server decides (the event loop
   * never waits); elsewhere it resolves at once. Rejects with the error `tryAcquire` would
   * throw, and on Redis under `on_error=error` with `ERR_SLUICEGATE_STORE_UNAVAILABLE` or
   * `ERR_SLUICEGATE_STORE_TIMEOUT` (the other policies resolve with their decision).
   */
  tryAcquireAsync(cost?: Int): Promise<Decision>
  /**
   * `peek` as a Promise (not counted). On Redis, a server that does not answer rejects it
   * with a store error under every `on_error` policy: a peek is not an admission.
   */
  peekAsync(): Promise<Decision>
  refundAsync(cost?: Int): Promise<void>
  /** The Redis store's counters, or `null` on another store. */
  redisStats(): RedisStats | null
  isFull(): boolean
  /** The canonical rate string. */
  readonly quota: string
  /**
   * Changes the quota live (same algorithm): buckets keep their tokens, clamped to the new
   * burst, and refill at the new rate. A shared-memory or Redis store throws
   * `ERR_SLUICEGATE_STORE_UNSUPPORTED`.
   */
  setQuota(quota: Quota): void
  /** Shadow (dry-run) mode, settable at runtime. */
  shadow: boolean
  /** A snapshot of the counters, or `null` when built without `metrics: true`. */
  metrics(): Metrics | null
}

/**
 * A string (its UTF-8 bytes), a Buffer/Uint8Array (its bytes), or an integer, a safe-integer
 * number or a BigInt within 128 bits (its decimal digits: `42`, `42n` and `'42'` are one key).
 */
export type Key = string | Uint8Array | number | bigint

export interface KeyedLimiterOptions extends LimiterOptions {
  /**
   * The most keys held at once (default 2^20). With a shared-memory `store`, the region's
   * capacity: a new region is made with it, an existing one must have it
   * (`ERR_SLUICEGATE_STORE_MISMATCH`); left out, an opener takes the region's. A Redis store
   * keeps no key bound (the server expires full buckets): there it does nothing.
   */
  maxKeys?: number
  /** At the bound with no full bucket: `'reject'` new keys (default) or `'evict'` the nearest to full. */
  onFull?: OnFull
  /** Shards of the table (1-4096, default 64). */
  shards?: number
}

export type OnFull = 'reject' | 'evict'

/** One bucket per key, bounded, lock-free on lookups. */
export declare class KeyedLimiter {
  constructor(quota: Quota, options?: KeyedLimiterOptions)
  /**
   * The keyed limiter named `name` in this process: the same table in every worker thread.
   * Its options are the table's bound (no `metrics`, `shadow` or `onReject`: those throw).
   */
  static shared(name: string, quota: Quota, options?: Pick<KeyedLimiterOptions, 'maxKeys' | 'onFull' | 'shards'>): KeyedLimiter
  /** The fast path: admitted or not, no figures. */
  allow(key: Key, cost?: Int): boolean
  tryAcquire(key: Key, cost?: Int): Decision
  /** The key's state, changing nothing and creating no bucket. */
  peek(key: Key): Decision
  refund(key: Key, cost?: Int): void
  /** `tryAcquire`; a leaky queue's admission may carry a wait until its slot. */
  reserve(key: Key, cost?: Int): Decision
  /** Gives a reservation back (the same as `refund`). */
  cancel(key: Key, cost?: Int): void
  /** As `Limiter#acquire`, for `key` (on a Redis store it rejects with `ERR_SLUICEGATE_STORE_UNSUPPORTED`). */
  acquire(key: Key, options?: AcquireOptions): Promise<Decision>
  acquire(key: Key, cost?: Int, options?: AcquireOptions): Promise<Decision>
  /** As `Limiter#tryAcquireAsync`, for `key`. */
  tryAcquireAsync(key: Key, cost?: Int): Promise<Decision>
  peekAsync(key: Key): Promise<Decision>
  refundAsync(key: Key, cost?: Int): Promise<void>
  /**
   * Many requests at once, one `Decision` each, in order; on Redis one round trip for the
   * batch. A failed request rejects the Promise with a `BatchError` (the first error, with
   * every request's outcome in `results`).
   */
  tryAcquireMany(requests: BatchRequest[]): Promise<Decision[]>
  /** `remove` as a Promise: whether the key's bucket existed. */
  removeAsync(key: Key): Promise<boolean>
  /** `clear` as a Promise (on Redis: every key of this limiter's prefix and quota). */
  clearAsync(): Promise<void>
  /** The Redis store's counters, or `null` on another store. */
  redisStats(): RedisStats | null
  remove(key: Key): boolean
  /** Evicts every bucket that is full now; how many. */
  sweep(): number
  clear(): void
  /** Keys held now (as a `Map`'s `size`); on a Redis store it throws `ERR_SLUICEGATE_STORE_UNSUPPORTED`. */
  readonly size: number
  /** The bound on keys held at once; on a Redis store it throws `ERR_SLUICEGATE_STORE_UNSUPPORTED`. */
  readonly maxKeys: number
  readonly quota: string
  /**
   * Changes the quota live (same algorithm): buckets keep their tokens, clamped to the new
   * burst, and refill at the new rate. A shared-memory or Redis store throws
   * `ERR_SLUICEGATE_STORE_UNSUPPORTED`.
   */
  setQuota(quota: Quota): void
  /** Shadow (dry-run) mode, settable at runtime. */
  shadow: boolean
  /** A snapshot of the counters, or `null` when built without `metrics: true`. */
  metrics(): Metrics | null
}

/** Several limiters consumed all-or-nothing; the decision reports the tightest part. */
export declare class Composite {
  /** The parts in order (put the most likely to reject first); the first part's clock is read. */
  constructor(parts: Limiter[])
  allow(cost?: Int): boolean
  tryAcquire(cost?: Int): Decision
  /** The combined state, changing nothing: each part's `peek` (not counted). */
  peek(): Decision
  /** Gives `cost` back to every part. */
  refund(cost?: Int): void
  /** As `Limiter#acquire`, all-or-nothing over the parts (on a Redis store it rejects with `ERR_SLUICEGATE_STORE_UNSUPPORTED`). */
  acquire(options?: AcquireOptions): Promise<Decision>
  acquire(cost?: Int, options?: AcquireOptions): Promise<Decision>
  /** All-or-nothing as a Promise; parts on one Redis server are decided in one script call. */
  tryAcquireAsync(cost?: Int): Promise<Decision>
  /**
   * `peek` as a Promise. A part on a Redis server that does not answer rejects it with a
   * store error under every `on_error` policy, as `Limiter#peekAsync`.
   */
  peekAsync(): Promise<Decision>
  refundAsync(cost?: Int): Promise<void>
  readonly parts: readonly Limiter[]
}

/**
 * The forwarding header trusted proxies write: `'x-forwarded-for'` or `'forwarded'` (RFC
 * 7239). The runtime also takes them in any case, and `'xff'`; a string from a configuration
 * is checked there (`ERR_SLUICEGATE_INVALID_OPTION`), so type it `ProxyHeader` after a check
 * of your own, or cast it.
 */
export type ProxyHeader = 'x-forwarded-for' | 'forwarded'

/** Options of a `ClientResolver` (and of the web adapters' default key). */
export interface ClientResolverOptions {
  /**
   * Proxies whose forwarding headers are believed: a hop count (1 to 64), or addresses, CIDR
   * ranges and `'loopback'`, `'private'`, `'linklocal'` (an array, or one comma-separated
   * string). Default: none (the peer address); `0`, `false`, `'none'` and `[]` say none too.
   */
  trustedProxies?: number | false | string | string[]
  /** The header the trusted proxies write: `'x-forwarded-for'` (default) or `'forwarded'` (RFC 7239). */
  proxyHeader?: ProxyHeader
  /** Bits of an IPv6 address that make its key (1 to 128, default 64), or `false`: all of them (128). */
  ipv6Subnet?: number | false
  /** Bits of an IPv4 address that make its key (1 to 32, default 32). */
  ipv4Subnet?: number
}

/**
 * A web request's client key, by the core's rules (docs/CLIENT-IDENTITY.md): the peer address
 * unless it is a trusted proxy; then the right-most untrusted hop of the forwarding header;
 * IPv6 by prefix, IPv4-mapped IPv6 as IPv4. A misconfiguration is a process warning (once per
 * resolver and kind, codes `SLUICEGATE_UNTRUSTED_PROXY`, ...).
 */
export declare class ClientResolver {
  constructor(options?: ClientResolverOptions)
  /** The key of a request from `peer` (address text) with these headers (lower-case names). */
  resolve(peer: string | undefined | null, headers?: Record<string, string | string[] | undefined>): string
  /** The key of an HTTP request: its socket's peer address and its headers. */
  keyOf(req: { socket?: { remoteAddress?: string }; headers: Record<string, string | string[] | undefined> }): string
  /** The trusted proxies in the core's text form. */
  readonly trustedProxies: string
  /** The IPv6 prefix length of keys. */
  readonly ipv6Subnet: number
}

/** The canonical rate string of a quota (throws as `new Limiter` would). */
export declare function canonicalQuota(quota: Quota): string

/**
 * The Prometheus text (format 0.0.4) of limiters' counters, rendered by the core: `{ name:
 * limiter }` (label `limiter="name"`) or `[labels, limiter]` pairs. Every limiter must be built
 * with `metrics: true`.
 */
export declare function renderPrometheus(
  series: Record<string, Limiter | KeyedLimiter> | Array<[Record<string, string>, Limiter | KeyedLimiter]>,
): string

/** Every `code` a sluicegate error carries. */
export type ErrorCode =
  | 'ERR_SLUICEGATE_INVALID_QUOTA'
  | 'ERR_SLUICEGATE_PARSE'
  | 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'
  | 'ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE'
  | 'ERR_SLUICEGATE_INVALID_OPTION'
  | 'ERR_SLUICEGATE_KEY_STORE_FULL'
  | 'ERR_SLUICEGATE_STORE_UNAVAILABLE'
  | 'ERR_SLUICEGATE_STORE_MISMATCH'
  | 'ERR_SLUICEGATE_STORE_CORRUPT'
  | 'ERR_SLUICEGATE_STORE_PERMISSION'
  | 'ERR_SLUICEGATE_STORE_UNSUPPORTED'
  | 'ERR_SLUICEGATE_STORE_TIMEOUT'
  | 'ERR_SLUICEGATE_INVALID_ARG'
