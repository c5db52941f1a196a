// The JavaScript API: decisions, headers (pinned to the core's renderer), acquire(), entry points.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { Limiter, KeyedLimiter, ManualClock, Decision, canonicalQuota } from '../index.mjs'
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
