// The JavaScript API: decisions, headers (pinned to the core's renderer), acquire(), entry points.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { Limiter, KeyedLimiter, Composite, ManualClock, Decision, canonicalQuota } from '../index.mjs'
import sg from '../index.mjs'
import { fence, misprinted, pkg, runSnippet, snippetRequire } from './fixtures/readme.mjs'

const require = createRequire(import.meta.url)

test('CommonJS and ESM entry points share one module', () => {
  const cjs = require('../index.js')
  assert.equal(cjs.Limiter, Limiter)
  assert.equal(cjs.KeyedLimiter, KeyedLimiter)
  assert.equal(require('../express.js'), require('../express.js').rateLimit)
})

// The README's Quickstart, its own text (fixtures/readme.mjs), on a manual clock: its figures
// exact, its acquire() admitted once the clock reaches the next token.
test('the README example: 10/s with a burst of 2', async () => {
  const code = fence(join(pkg, 'README.md'), "new Limiter('10/s; burst=2')")
  const clock = new ManualClock(0)
  class OnClock extends Limiter {
    constructor(quota, options = {}) { super(quota, { clock, ...options }) }
  }
  const sluicegate = { ...require('../index.js'), Limiter: OnClock }
  // acquire() polls on timers; the time it waits for is the manual clock's.
  const moved = setTimeout(() => clock.advance(100_000_000n), 20)
  const { printed, locals: { limiter, d, a } } = await runSnippet(code, { require: snippetRequire({ sluicegate }), returns: ['limiter', 'd', 'a'] })
  clearTimeout(moved)
  assert.deepEqual(misprinted(code, printed), [])
  assert.ok(d instanceof Decision)
  assert.deepEqual({ ...d }, {
    allowed: false, limit: 2, remaining: 0, retryAfterMs: 100, resetAfterMs: 200,
    retryAfterNs: 100_000_000, resetAfterNs: 200_000_000, windowSeconds: 1, shadowRejected: false,
  })
  assert.equal(a.allowed, true, 'acquire() took the token the clock brought')
  assert.equal(limiter.allow(), false, 'and left none')
  clock.advance(100_000_000n)
  assert.equal(limiter.allow(), true)
  assert.equal(limiter.quota, '10/s; burst=2')
})

test('options objects mean the same as rate strings', () => {
  assert.equal(canonicalQuota({ count: 100, periodMs: 60_000 }), '100/m')
  assert.equal(canonicalQuota({ count: 10, periodMs: 1000, burst: 50 }), '10/s; burst=50')
  assert.equal(canonicalQuota({ count: 5n, periodNs: 2_000_000_000n, initial: 0, refill: 'interval' }), '5/2s; initial=0; refill=interval')
  assert.equal(new Limiter({ count: 10, periodMs: 1000 }).quota, '10/s')
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
  for (const style of ['ietf', 'draft6', 'draft7', 'legacy', 'none']) {
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

test('headers: beyond the native renderers held, and with any policy, the fields stay the core\'s', () => {
  const n = sg._internal.native
  const clock = new ManualClock(0)
  const ours = new Limiter('5/s; burst=3', { clock })
  const core = n.limiterNew('5/s; burst=3', clock)
  // 300 distinct policies: past the 256 (style, policy) pairs an environment registers, and
  // a policy with a line break, which never goes through the one-string path.
  const policies = [...Array.from({ length: 300 }, (_, i) => `p${i}`), 'two\nlines']
  for (const [i, policy] of policies.entries()) {
    const style = ['ietf', 'draft6', 'legacy'][i % 3]
    const expected = n.coreHeaders(core, 1, style, policy)
    const d = ours.tryAcquire(1)
    assert.equal(d.allowed, expected[0])
    assert.deepEqual(Object.entries(d.headers(style, policy)), expected[1], policy)
    clock.advance(100_000_000)
  }
  n.release(core)
  // The native renderer checks what it reads: figures that are not safe integers, an unknown id.
  const F = new Float64Array(n.scratch)
  const id = n.headerRenderer('legacy', 'p2') // registered above (before the table filled)
  assert.ok(id >= 0)
  assert.equal(n.headerRenderer('legacy', 'a pair too many'), -1)
  for (const bad of [-1, 0.5, NaN, 2 ** 60]) {
    F.set([1, 10, bad, 0, 0, 1], 16)
    assert.throws(() => n.renderFields(id), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG', String(bad))
  }
  F.set([1, 10, 9, 0, 100_000_000, 1], 16)
  assert.equal(n.renderFields(id), 'X-RateLimit-Limit\n10\nX-RateLimit-Remaining\n9\nX-RateLimit-Reset\n1')
  assert.throws(() => n.renderFields(100_000), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => n.headerRenderer('bogus', 'p'), (e) => e.code === 'ERR_SLUICEGATE_INVALID_OPTION')
})

test('acquire waits on timers and resolves when admitted', async () => {
  // One a second: the second acquire must find no token and wait on a timer however long a
  // loaded machine stalls between the two (up to the second); at 20/s a 50 ms stall would
  // admit it at once, with no timer for the ticker to beat.
  const l = new Limiter('1/s; burst=1')
  // Timed from before the first token is taken: the next is 1 s after that.
  const t0 = performance.now()
  assert.equal((await l.acquire()).allowed, true)
  let ticks = 0
  const iv = setInterval(() => ticks++, 5)
  const d = await l.acquire()
  clearInterval(iv)
  const waited = performance.now() - t0
  assert.equal(d.allowed, true)
  assert.ok(waited >= 900, `waited ${waited} ms`)
  assert.ok(ticks >= 1, 'the event loop kept running (its 5 ms timer fired before the 1 s wait ended)')
})

test('acquire with a manual clock resolves after the clock moves', async () => {
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/s; burst=1', { clock })
  k.allow('a')
  const p = k.acquire('a', { timeoutMs: 5000 })
  setTimeout(() => clock.advance(1_000_000_000), 20)
  assert.equal((await p).allowed, true)
})

test('acquire: when time runs out, the outcome is the rejection Decision, not an error', async () => {
  const l = new Limiter('1/h; burst=1')
  l.allow()
  let waited = false
  setTimeout(() => (waited = true), 0)
  const d = await l.acquire({ timeoutMs: 50 })
  assert.ok(d instanceof Decision)
  assert.equal(d.allowed, false)
  assert.ok(d.retryAfterMs > 3_500_000, 'the figures of the rejection')
  assert.equal(waited, false, 'an hour away does not fit 50 ms: resolved without a timer')
  // A wait that fits is waited, then the retry decides.
  const f = new Limiter('20/s; burst=1')
  f.allow()
  assert.equal((await f.acquire({ timeoutMs: 200 })).allowed, true)
  // A wait that does not fit is the rejection, on a limiter a second from its next token: at
  // 20/s a stall of 40 ms after the take would bring the token within the 10 ms.
  const s = new Limiter('1/s; burst=1')
  s.allow()
  const r = await s.acquire({ timeoutMs: 10 })
  assert.equal(r.allowed, false, '1 s away does not fit 10 ms')
  // Keyed and composite alike.
  const k = new KeyedLimiter('1/h; burst=1')
  k.allow('a')
  assert.equal((await k.acquire('a', { timeoutMs: 20 })).allowed, false)
  const c = new Composite([new Limiter('1/h; burst=1'), new Limiter('10/s')])
  c.allow()
  assert.equal((await c.acquire(1, { timeoutMs: 20 })).allowed, false)
  assert.equal(c.parts[1].peek().remaining, 9, 'the composite\'s rejection consumed nothing')
})

test('acquire honours AbortSignal', async () => {
  const ac = new AbortController()
  const p = new Limiter('1/s; burst=1')
  p.allow()
  const waiting = p.acquire(1, { signal: ac.signal })
  setTimeout(() => ac.abort(new Error('stop')), 10)
  await assert.rejects(waiting, /stop/)
  await assert.rejects(p.acquire({ signal: AbortSignal.abort() }), (e) => e.name === 'AbortError')
})

test('the key rule: 42, 42n, "42" and the bytes of "42" are one key', () => {
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/h; burst=4', { clock, maxKeys: 1 })
  assert.equal(k.tryAcquire(42).remaining, 3)
  assert.equal(k.tryAcquire(42n).remaining, 2, 'a BigInt is its decimal digits')
  assert.equal(k.tryAcquire('42').remaining, 1, 'a string is its UTF-8 bytes')
  assert.equal(k.tryAcquire(Buffer.from('42')).remaining, 0, 'a Buffer is its bytes')
  assert.equal(k.size, 1, 'one bucket, one unit of maxKeys')
  assert.throws(() => k.allow(43), (e) => e.code === 'ERR_SLUICEGATE_KEY_STORE_FULL', 'another key is refused')
  const n = new KeyedLimiter('1/h; burst=2', { clock })
  for (const [big, text] of [[-7n, '-7'], [0n, '0'], [-0, '0'], [2n ** 127n - 1n, String(2n ** 127n - 1n)], [-(2n ** 127n), String(-(2n ** 127n))], [2n ** 64n, '18446744073709551616']]) {
    n.clear()
    assert.equal(n.allow(big, 2), true, String(big))
    assert.equal(n.allow(text), false, `${big} and ${JSON.stringify(text)} share a bucket`)
    assert.equal(n.size, 1)
  }
  assert.equal(n.remove(String(2n ** 64n)), true)
  n.allow(12n)
  assert.equal(n.remove(12), true, 'remove follows the rule too')
})

test('keyed: string, Buffer and number keys; peek creates nothing', () => {
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/s; burst=2', { clock })
  assert.equal(k.allow('alice', 2), true)
  assert.equal(k.allow(Buffer.from('alice')), false, 'a Buffer is keyed by its bytes')
  assert.equal(k.allow(new TextEncoder().encode('alice')), false, 'so is a Uint8Array')
  assert.equal(k.allow(42, 2), true)
  assert.equal(k.allow('42'), false, 'numbers are keyed by their decimal digits')
  assert.equal(k.allow('x'.repeat(1000), 2), true, 'long keys')
  assert.equal(k.allow('x'.repeat(1000)), false)
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
  k.allow('z')
  k.clear()
  assert.equal(k.size, 0)
  assert.equal(k.maxKeys, 1 << 20)
})

test('shared limiters are one bucket per name', () => {
  const a = Limiter.shared('limiter-test', '1/h; burst=3')
  const b = Limiter.shared('limiter-test', { count: 1, periodMs: 3_600_000, burst: 3 })
  assert.equal(a.allow(2), true)
  assert.equal(b.allow(1), true)
  assert.equal(a.allow(1), false)
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
  // Slots a third of a second apart: the last is 1 s after the first, so a stall while the
  // four are queued cannot leave them all due at once, with no timer for the ticker to beat.
  const q = new Limiter('3/s; algorithm=leaky_queue; max_delay=2s')
  const t0 = performance.now()
  let ticks = 0
  const iv = setInterval(() => ticks++, 5)
  const waits = await Promise.all([0, 1, 2, 3].map(() => q.acquire()))
  clearInterval(iv)
  const elapsed = performance.now() - t0
  assert.ok(waits.every((d) => d.allowed))
  assert.ok(elapsed >= 900, `four slots 1/3 s apart took ${elapsed} ms`)
  assert.ok(ticks >= 1, 'the event loop kept running')
})

test('acquire on a leaky queue: a slot beyond the timeout is not reserved', async () => {
  const clock = new ManualClock(0)
  const q = new Limiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  for (let i = 0; i < 3; i++) q.reserve(1) // slots at 0, 100 and 200 ms: the next is at 300
  const d = await q.acquire(1, { timeoutMs: 100 })
  assert.equal(d.allowed, false, 'the rejection is the outcome')
  assert.equal(q.reserve(1).retryAfterMs, 300, 'the timed-out acquire left no reservation')
  // Keyed: the same (the core bounds a keyed queue's reservation too).
  const k = new KeyedLimiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  for (let i = 0; i < 3; i++) k.reserve('a')
  assert.equal((await k.acquire('a', 1, { timeoutMs: 100 })).allowed, false)
  assert.equal(k.reserve('a').retryAfterMs, 300, 'no reservation left behind')
})

test('acquire on a leaky queue: a slot within the timeout is admitted with its wait', async () => {
  // Slots 1 s apart: the second still has a wait after any stall of under a second between
  // the two acquires (at 20/s, one of 50 ms made it due at once).
  const q = new Limiter('1/s; algorithm=leaky_queue; max_delay=2s')
  assert.equal((await q.acquire()).retryAfterMs, 0)
  const t0 = performance.now()
  const d = await q.acquire(1, { timeoutMs: 2000 })
  const waited = performance.now() - t0
  assert.equal(d.allowed, true)
  assert.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 1000, `the slot's wait: ${d.retryAfterMs} ms`)
  assert.ok(waited >= d.retryAfterMs - 2, `resolved at the slot, after ${waited} ms`)
  // The key rule, on a manual clock (not about real time): the second slot is exactly 50 ms on.
  const k = new KeyedLimiter('20/s; algorithm=leaky_queue; max_delay=1s', { clock: new ManualClock(0) })
  await k.acquire(7)
  const kd = await k.acquire('7', 1, { timeoutMs: 500 })
  assert.ok(kd.allowed, 'admitted with its wait')
  assert.equal(kd.retryAfterMs, 50, '7 and "7" queue in one bucket')
})

test('acquire with a clock that does not move gives the rejection after one wait', async () => {
  const clock = new ManualClock(0)
  const l = new Limiter('1000/s; burst=1', { clock })
  l.allow()
  const t0 = performance.now()
  const d = await l.acquire() // no deadline: retries after 1 ms, finds the same reading
  assert.equal(d.allowed, false)
  assert.ok(performance.now() - t0 < 1000)
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
  // Keyed and composite: the same.
  const k = new KeyedLimiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  k.reserve(5)
  const kc = new AbortController()
  const kw = k.acquire(5n, 1, { signal: kc.signal })
  setTimeout(() => kc.abort(), 10)
  await assert.rejects(kw, (e) => e.name === 'AbortError')
  assert.equal(k.reserve('5').retryAfterMs, 100, 'the keyed slot was given back')
  const part = new Limiter('10/s; algorithm=leaky_queue; max_delay=1s', { clock })
  const other = new Limiter('10/s', { clock })
  part.reserve(1)
  const c = new Composite([part, other])
  const cc = new AbortController()
  const cw = c.acquire(1, { signal: cc.signal })
  setTimeout(() => cc.abort(), 10)
  await assert.rejects(cw, (e) => e.name === 'AbortError')
  assert.equal(part.reserve(1).retryAfterMs, 100, 'the composite gave its slot back')
  assert.equal(other.peek().remaining, 10, 'to every part')
})

test('composite acquire waits for every part', async () => {
  const a = new Limiter('20/s; burst=1')
  // Per minute (a token every 6 s): no refill between the admissions and the peek below,
  // however long the wait for the first part's timer takes on a loaded machine.
  const b = new Limiter('10/minute')
  const c = new Composite([a, b])
  const t0 = performance.now() // before the first admission: the first part refills 50 ms after it
  assert.equal((await c.acquire()).allowed, true)
  const d = await c.acquire(1, { timeoutMs: 1000 })
  assert.equal(d.allowed, true)
  assert.ok(performance.now() - t0 >= 20, 'waited for the first part')
  assert.equal(b.peek().remaining, 8, 'both admissions reached the second part')
})

test('composite: all-or-nothing over limiters of any algorithm', () => {
  const clock = new ManualClock(0)
  const perUser = new Limiter('2/s', { clock })
  const global = new Limiter('3/s; algorithm=fixed_window', { clock })
  const both = new Composite([perUser, global])
  assert.deepEqual(both.parts, [perUser, global])
  assert.equal(both.tryAcquire().remaining, 1, 'the tighter of 1 and 2')
  assert.equal(both.allow(), true)
  const d = both.tryAcquire()
  assert.equal(d.allowed, false)
  assert.equal(global.peek().remaining, 1, 'the global window was refunded')
  both.refund(1)
  assert.equal(perUser.peek().remaining, 1)
  assert.equal(global.peek().remaining, 2)
  assert.throws(() => both.tryAcquire(3), (e) => e.code === 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
  assert.equal(global.peek().remaining, 2, 'an impossible cost consumed nothing')
  assert.equal(d.headers('draft7')['Retry-After'], '1')
  for (const bad of [[], [new KeyedLimiter('1/s')], 'x', undefined, [perUser, {}]]) {
    assert.throws(() => new Composite(bad), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  }
})

test('options objects choose the algorithm', () => {
  assert.equal(canonicalQuota({ count: 5, periodMs: 1000, algorithm: 'sliding_window' }), '5/s; algorithm=sliding_window')
  assert.equal(canonicalQuota({ count: 10, periodMs: 1000, algorithm: 'leaky_queue', maxDelayMs: 250 }), '10/s; algorithm=leaky_queue; max_delay=250ms')
  assert.throws(() => canonicalQuota({ count: 1, periodMs: 1, algorithm: 'fastest' }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_OPTION')
  assert.throws(() => canonicalQuota({ count: 1, periodMs: 1, maxDelayMs: 5 }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_QUOTA')
})

test('shared keyed limiters are one table per name', () => {
  const a = KeyedLimiter.shared('keyed-test', '1/h; burst=2', { maxKeys: 100 })
  const b = KeyedLimiter.shared('keyed-test', { count: 1, periodMs: 3_600_000, burst: 2 }, { maxKeys: 100 })
  assert.equal(a.allow('k', 2), true)
  assert.equal(b.allow('k'), false)
  assert.equal(b.size, 1)
  assert.throws(() => KeyedLimiter.shared('keyed-test', '1/h; burst=2', { maxKeys: 99 }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => KeyedLimiter.shared('keyed-test', '2/h'), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  assert.throws(() => KeyedLimiter.shared('keyed-test-2', '1/s', { clock: new ManualClock() }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  // A Limiter and a KeyedLimiter may share a name: separate namespaces.
  assert.equal(Limiter.shared('keyed-test', '1/s').allow(), true)
})
