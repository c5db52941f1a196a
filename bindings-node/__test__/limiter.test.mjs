// The JavaScript API: decisions, headers (pinned to the core's renderer), acquire(), entry points.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { Limiter, KeyedLimiter, Composite, ManualClock, Decision, canonicalQuota } from '../index.mjs'
import sg from '../index.mjs'

const require = createRequire(import.meta.url)

test('CommonJS and ESM entry points share one module', () => {
  const cjs = require('../index.js')
  assert.equal(cjs.Limiter, Limiter)
  assert.equal(cjs.KeyedLimiter, KeyedLimiter)
  assert.equal(require('../express.js'), require('../express.js').rateLimit)
})

test('the README example: 10/s with a burst of 2', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('10/s; burst=2', { clock })
  assert.equal(l.tryAcquire().allowed, true)
  assert.equal(l.check(), true)
  const d = l.tryAcquire()
  assert.ok(d instanceof Decision)
  assert.deepEqual({ ...d }, {
    allowed: false, limit: 2, remaining: 0, retryAfterMs: 100, resetAfterMs: 200,
    retryAfterNs: 100_000_000, resetAfterNs: 200_000_000, windowSeconds: 1,
  })
  clock.advance(100_000_000n)
  assert.equal(l.check(), true)
  assert.equal(l.quota, '10/s; burst=2')
})

test('options objects mean the same as rate strings', () => {
  assert.equal(canonicalQuota({ limit: 100, windowMs: 60_000 }), '100/m')
  assert.equal(canonicalQuota({ rate: 10, periodMs: 1000, burst: 50 }), '10/s; burst=50')
  assert.equal(canonicalQuota({ rate: 5n, periodNs: 2_000_000_000n, initial: 0, refill: 'interval' }), '5/2s; initial=0; refill=interval')
  assert.equal(new Limiter({ rate: 10, periodMs: 1000 }).quota, '10/s')
})

test('peek, refund, isFull', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('1/s; burst=3', { clock })
  assert.equal(l.isFull(), true)
  l.tryAcquire(3)
  assert.equal(l.peek().remaining, 0)
  assert.equal(l.peek().allowed, true, 'a peek is allowed')
  l.refund(2)
  assert.equal(l.peek().remaining, 2)
  l.refund(10)
  assert.equal(l.isFull(), true)
})

test('figures beyond 2^53 are exact BigInts', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('1/ns; burst=9007199254740993', { clock })
  const d = l.tryAcquire(0)
  assert.equal(d.limit, 9007199254740993n)
  assert.equal(d.remaining, 9007199254740993n)
  const e = l.tryAcquire(9007199254740993n)
  assert.equal(e.allowed, true)
  assert.equal(e.resetAfterNs, 9007199254740993n)
  assert.equal(typeof e.remaining, 'number')
})

test('headers in every style equal the core renderer', () => {
  const n = sg._internal.native
  for (const style of ['ietf', 'draft-6', 'draft-7', 'draft-8', 'legacy', 'none']) {
    for (const quota of ['10/s; burst=50', '1/s; burst=2', '3/7s; burst=5; refill=interval', '1/ns; burst=9007199254740993']) {
      const clock = new ManualClock(0)
      const ours = new Limiter(quota, { clock })
      const core = n.limiterNew(quota, clock)
      for (const [cost, dt] of [[1, 0], [10, 1], [50, 123_456_789], [2, 999_999_999], [0, 1], [3, 5_000_000_001]]) {
        clock.advance(dt)
        let d, expected
        try {
          expected = n.coreHeaders(core, cost, style, 'api "v1" \\ é')
        } catch (e) {
          assert.throws(() => ours.tryAcquire(cost), (x) => x.code === e.code)
          continue
        }
        d = ours.tryAcquire(cost)
        assert.equal(d.allowed, expected[0])
        assert.deepEqual(Object.entries(d.headers(style, 'api "v1" \\ é')), expected[1], `${quota} ${style} cost ${cost}`)
      }
      n.release(core)
    }
  }
})

test('acquire waits on timers and resolves when admitted', async () => {
  const l = new Limiter('20/s; burst=1')
  assert.equal((await l.acquire()).allowed, true)
  const t0 = performance.now()
  let ticks = 0
  const iv = setInterval(() => ticks++, 5)
  const d = await l.acquire()
  clearInterval(iv)
  const waited = performance.now() - t0
  assert.equal(d.allowed, true)
  assert.ok(waited >= 40, `waited ${waited} ms`)
  assert.ok(ticks >= 2, 'the event loop kept running')
})

test('acquire with a manual clock resolves after the clock moves', async () => {
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/s; burst=1', { clock })
  k.check('a')
  const p = k.acquire('a', { timeoutMs: 5000 })
  setTimeout(() => clock.advance(1_000_000_000), 20)
  assert.equal((await p).allowed, true)
})

test('acquire honours timeoutMs and AbortSignal', async () => {
  const l = new Limiter('1/h; burst=1')
  l.check()
  await assert.rejects(l.acquire({ timeoutMs: 50 }), (e) => e.code === 'ERR_SLUICEGATE_TIMEOUT' && e.decision.allowed === false)
  const ac = new AbortController()
  const p = new Limiter('1/s; burst=1')
  p.check()
  const waiting = p.acquire(1, { signal: ac.signal })
  setTimeout(() => ac.abort(new Error('stop')), 10)
  await assert.rejects(waiting, /stop/)
  await assert.rejects(p.acquire({ signal: AbortSignal.abort() }), (e) => e.name === 'AbortError')
})

test('keyed: string, Buffer and number keys; peek creates nothing', () => {
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/s; burst=2', { clock })
  assert.equal(k.check('alice', 2), true)
  assert.equal(k.check(Buffer.from('alice')), false, 'a Buffer is keyed by its bytes')
  assert.equal(k.check(new TextEncoder().encode('alice')), false, 'so is a Uint8Array')
  assert.equal(k.check(42, 2), true)
  assert.equal(k.check('42'), false, 'numbers are keyed by their decimal digits')
  assert.equal(k.check('x'.repeat(1000), 2), true, 'long keys')
  assert.equal(k.check('x'.repeat(1000)), false)
  assert.equal(k.size, 3)
  assert.equal(k.peek('nobody').remaining, 2)
  assert.equal(k.size, 3)
  k.refund('alice', 1)
  assert.equal(k.peek('alice').remaining, 1)
  assert.equal(k.remove('alice'), true)
  assert.equal(k.remove('alice'), false)
  clock.advance(10_000_000_000)
  assert.equal(k.sweep(), 2)
  assert.equal(k.size, 0)
  k.check('z')
  k.clear()
  assert.equal(k.size, 0)
  assert.equal(k.maxKeys, 1 << 20)
})

test('shared limiters are one bucket per name', () => {
  const a = Limiter.shared('limiter-test', '1/h; burst=3')
  const b = Limiter.shared('limiter-test', { rate: 1, periodMs: 3_600_000, burst: 3 })
  assert.equal(a.check(2), true)
  assert.equal(b.check(1), true)
  assert.equal(a.check(1), false)
})

test('reserve and cancel on a leaky queue (the core doc example)', () => {
  const clock = new ManualClock(0)
  const q = new Limiter('10/s; algorithm=leaky_queue; max_delay=250ms', { clock })
  assert.deepEqual([0, 1, 2].map(() => q.reserve(1).retryAfterMs), [0, 100, 200])
  const full = q.reserve(1)
  assert.equal(full.allowed, false)
  q.cancel(1) // the last reservation is given back
  assert.equal(q.reserve(1).retryAfterMs, 200)
  q.cancel(1)
  const within = q.reserve(1, { maxWaitMs: 150 })
  assert.equal(within.allowed, false, 'the slot is 200 ms away')
  assert.equal(within.retryAfterNs, 50_000_000)
  assert.equal(q.reserve(1, { maxWaitMs: 200 }).retryAfterMs, 200)
  // Other algorithms reserve as tryAcquire.
  const b = new Limiter('1/s; burst=1', { clock })
  assert.equal(b.reserve().allowed, true)
  assert.equal(b.reserve().allowed, false)
  b.cancel()
  assert.equal(b.reserve().allowed, true)
  assert.throws(() => q.reserve(1, { maxWaitMs: -1 }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
})

test('acquire on a leaky queue waits for its slot on a timer', async () => {
  const q = new Limiter('20/s; algorithm=leaky_queue; max_delay=1s')
  const t0 = performance.now()
  let ticks = 0
  const iv = setInterval(() => ticks++, 5)
  const waits = await Promise.all([0, 1, 2, 3].map(() => q.acquire()))
  clearInterval(iv)
  const elapsed = performance.now() - t0
  assert.ok(waits.every((d) => d.allowed))
  assert.ok(elapsed >= 140, `four slots 50 ms apart took ${elapsed} ms`)
  assert.ok(ticks >= 5, 'the event loop kept running')
})

test('acquire on a leaky queue: a slot beyond the timeout is not reserved', async () => {
  const clock = new ManualClock(0)
  const q = new Limiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  for (let i = 0; i < 3; i++) q.reserve(1) // slots at 0, 100 and 200 ms: the next is at 300
  await assert.rejects(q.acquire(1, { timeoutMs: 100 }), (e) => e.code === 'ERR_SLUICEGATE_TIMEOUT')
  assert.equal(q.reserve(1).retryAfterMs, 300, 'the timed-out acquire left no reservation')
  // Keyed: reserved, then cancelled at once when the slot is past the deadline.
  const k = new KeyedLimiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  for (let i = 0; i < 3; i++) k.reserve('a')
  await assert.rejects(k.acquire('a', 1, { timeoutMs: 100 }), (e) => e.code === 'ERR_SLUICEGATE_TIMEOUT')
  assert.equal(k.reserve('a').retryAfterMs, 300)
  k.cancel('a')
  assert.equal(k.reserve('a').retryAfterMs, 300)
})

test('an abort while waiting for a queue slot cancels the reservation', async () => {
  const clock = new ManualClock(0)
  const q = new Limiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  q.reserve(1)
  const ac = new AbortController()
  const waiting = q.acquire(1, { signal: ac.signal }) // slot at 100 ms
  setTimeout(() => ac.abort(new Error('gone')), 10)
  await assert.rejects(waiting, /gone/)
  assert.equal(q.reserve(1).retryAfterMs, 100, 'the aborted slot was given back')
})

test('composite: all-or-nothing over limiters of any algorithm', () => {
  const clock = new ManualClock(0)
  const perUser = new Limiter('2/s', { clock })
  const global = new Limiter('3/s; algorithm=fixed_window', { clock })
  const both = new Composite([perUser, global])
  assert.deepEqual(both.parts, [perUser, global])
  assert.equal(both.tryAcquire().remaining, 1, 'the tighter of 1 and 2')
  assert.equal(both.check(), true)
  const d = both.tryAcquire()
  assert.equal(d.allowed, false)
  assert.equal(global.peek().remaining, 1, 'the global window was refunded')
  both.refund(1)
  assert.equal(perUser.peek().remaining, 1)
  assert.equal(global.peek().remaining, 2)
  assert.throws(() => both.tryAcquire(3), (e) => e.code === 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
  assert.equal(global.peek().remaining, 2, 'an impossible cost consumed nothing')
  assert.equal(d.headers('draft-7')['Retry-After'], '1')
  for (const bad of [[], [new KeyedLimiter('1/s')], 'x', undefined, [perUser, {}]]) {
    assert.throws(() => new Composite(bad), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  }
})

test('options objects choose the algorithm', () => {
  assert.equal(canonicalQuota({ limit: 5, windowMs: 1000, algorithm: 'sliding_window' }), '5/s; algorithm=sliding_window')
  assert.equal(canonicalQuota({ rate: 10, periodMs: 1000, algorithm: 'leaky_queue', maxDelayMs: 250 }), '10/s; algorithm=leaky_queue; max_delay=250ms')
  assert.throws(() => canonicalQuota({ rate: 1, periodMs: 1, algorithm: 'fastest' }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => canonicalQuota({ rate: 1, periodMs: 1, maxDelayMs: 5 }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_QUOTA')
})

test('shared keyed limiters are one table per name', () => {
  const a = KeyedLimiter.shared('keyed-test', '1/h; burst=2', { maxKeys: 100 })
  const b = KeyedLimiter.shared('keyed-test', { rate: 1, periodMs: 3_600_000, burst: 2 }, { maxKeys: 100 })
  assert.equal(a.check('k', 2), true)
  assert.equal(b.check('k'), false)
  assert.equal(b.size, 1)
  assert.throws(() => KeyedLimiter.shared('keyed-test', '1/h; burst=2', { maxKeys: 99 }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => KeyedLimiter.shared('keyed-test', '2/h'), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => KeyedLimiter.shared('keyed-test-2', '1/s', { clock: new ManualClock() }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  // A Limiter and a KeyedLimiter may share a name: separate namespaces.
  assert.equal(Limiter.shared('keyed-test', '1/s').check(), true)
})
