// The Redis store through Promises, against a real redis-server started here (free loopback
// port, no persistence, stopped in the `after` hooks): decisions, batches, composites, the
// synchronous methods refusing, the error codes, every fail policy with a killed server, a
// paused server (SIGSTOP) while the event loop keeps turning, bad URLs, and the Express
// middleware (its own key prefix per limit, the fail policy, the README's example).
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import express from 'express'
import rateLimit from '../express.mjs'
import { Composite, KeyedLimiter, Limiter, canonicalQuota } from '../index.mjs'
import { command, needsRedis, serverPerSuite, startRedis } from './fixtures/redis.mjs'
import { within } from './fixtures/within.mjs'
import { serve } from './fixtures/serve.mjs'
import { sluicegateWarnings, warnings } from './fixtures/warnings.mjs'

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..')
const UNSUPPORTED = 'ERR_SLUICEGATE_STORE_UNSUPPORTED'
const rejectsWith = (p, code) => assert.rejects(p, (e) => e instanceof Error && e.code === code, code)

/**
 * The first decision of `k` (an `on_error=error` limiter) on `key` once its server answers
 * again, asked every 50 ms for at most 10 s (the reconnection backoff is at most 1 s); `null`
 * if none came.
 */
async function decidedAgain(k, key) {
  const deadline = Date.now() + 10_000
  let d = null
  while (d === null && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    d = await k.tryAcquireAsync(key).catch(() => null)
  }
  return d
}

let n = 0
/**
 * A URL on `srv` with a prefix of its own and `options`, and a timeout of 1 s unless they name
 * one (the default 50 ms is short for a first call, which loads the scripts, on a loaded
 * machine).
 */
const at = (srv, options = '') =>
  `${srv.url}?prefix=t${n++}${options ? `&${options}` : ''}${options.includes('timeout=') ? '' : '&timeout=1s'}`

describe('on a running server', needsRedis(), () => {
  const srv = serverPerSuite()

  test('a KeyedLimiter decides on the server: the burst, then rejections with retryAfter', async () => {
    const k = new KeyedLimiter('3/minute', { store: at(srv, 'on_error=error') })
    const got = []
    for (let i = 0; i < 5; i++) got.push(await k.tryAcquireAsync('alice'))
    assert.deepEqual(got.map((d) => [d.allowed, d.limit, d.remaining]), [
      [true, 3, 2], [true, 3, 1], [true, 3, 0], [false, 3, 0], [false, 3, 0],
    ])
    // A token every 20 s, less the time since the first request: (15, 20] s leaves five seconds
    // for the four round trips on a loaded machine, and is still no window's 60 s, nor 0.
    assert.ok(got[3].retryAfterMs > 15_000 && got[3].retryAfterMs <= 20_000, String(got[3].retryAfterMs))
    assert.equal(typeof got[3].retryAfterNs, 'number')
    assert.equal((await k.tryAcquireAsync('bob')).remaining, 2, 'keys have their own buckets')
    // 42, 42n and '42' are one key (the core's key rule), as in memory.
    await k.tryAcquireAsync(42)
    await k.tryAcquireAsync(42n)
    assert.equal((await k.peekAsync('42')).remaining, 1)
    await k.refundAsync('42', 1)
    assert.equal((await k.peekAsync('42')).remaining, 2)
    const s = k.redisStats()
    assert.ok(s.decided >= 8, JSON.stringify(s))
    assert.equal(s.cachedRejections, 1, 'the 5th request was rejected from the negative cache')
    assert.equal(s.failedError, 0)
    assert.equal(s.redirects, 0, 'one server: nothing is redirected')
  })

  test('the synchronous methods of a Redis-backed limiter throw instead of blocking', () => {
    const k = new KeyedLimiter('3/minute', { store: at(srv) })
    const l = new Limiter('3/minute', { store: at(srv) })
    const c = new Composite([l])
    for (const call of [
      () => k.tryAcquire('a'), () => k.allow('a'), () => k.peek('a'), () => k.refund('a'),
      () => k.remove('a'), () => k.size, () => k.clear(),
      () => l.tryAcquire(), () => l.allow(), () => l.peek(), () => l.refund(), () => l.isFull(),
      () => l.reserve(), () => c.tryAcquire(), () => c.allow(),
    ]) {
      assert.throws(call, (e) => e.code === UNSUPPORTED, String(call))
    }
    return Promise.all([
      rejectsWith(l.acquire(1), UNSUPPORTED),
      rejectsWith(k.acquire('a'), UNSUPPORTED),
    ])
  })

  test('argument errors reject the Promise; a cost above the capacity is the core error', async () => {
    const k = new KeyedLimiter('3/minute', { store: at(srv) })
    await rejectsWith(k.tryAcquireAsync({}), 'ERR_SLUICEGATE_INVALID_ARG')
    await rejectsWith(k.tryAcquireAsync('a', -1), 'ERR_SLUICEGATE_INVALID_ARG')
    await rejectsWith(k.tryAcquireAsync('a', 4), 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
    await rejectsWith(k.tryAcquireMany('a'), 'ERR_SLUICEGATE_INVALID_ARG')
    await rejectsWith(new Limiter('3/minute', { store: at(srv) }).tryAcquireAsync(4), 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
  })

  test('tryAcquireMany: one decision per request, in order; a failed request rejects with every result', async () => {
    const k = new KeyedLimiter('2/minute', { store: at(srv) })
    const ds = await k.tryAcquireMany(['a', ['b', 2], 'a', 'a', ['c', 0]])
    assert.deepEqual(ds.map((d) => [d.allowed, d.remaining]), [[true, 1], [true, 0], [true, 0], [false, 0], [true, 2]])
    const err = await k.tryAcquireMany(['d', ['e', 3], 'd']).then(() => null, (e) => e)
    assert.equal(err.code, 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
    assert.equal(err.results.length, 3)
    assert.deepEqual([err.results[0].remaining, err.results[2].remaining], [1, 0], 'the others were decided')
    assert.equal(err.results[1], err)
    assert.deepEqual(await k.tryAcquireMany([]), [])
  })

  test('a Composite of Redis limiters is all-or-nothing on the server', async () => {
    const perUser = new Limiter('2/minute', { store: at(srv) })
    const global = new Limiter('5/minute', { store: at(srv) })
    const both = new Composite([perUser, global])
    assert.equal((await both.tryAcquireAsync()).remaining, 1)
    assert.equal((await both.tryAcquireAsync()).remaining, 0)
    const d = await both.tryAcquireAsync()
    assert.equal(d.allowed, false)
    assert.equal((await global.peekAsync()).remaining, 3, 'the rejection took nothing from the global part')
    await both.refundAsync(2)
    assert.equal((await perUser.peekAsync()).remaining, 2)
    assert.equal((await both.peekAsync()).remaining, 2)
  })

  test('removeAsync and clearAsync on the server; every key expires by itself', async () => {
    const prefix = `clear${n++}`
    // Slow enough that no bucket is full (and its key gone) before it is removed.
    const k = new KeyedLimiter('2/minute', { store: `${srv.url}?prefix=${prefix}&timeout=1s` })
    await k.tryAcquireMany(['x', 'y', 'z'])
    const keys = async () => (await command(srv.port, 'KEYS', `${prefix}:*`)).split('\r\n').filter((l) => l.startsWith(prefix))
    assert.equal((await keys()).length, 3)
    assert.equal(await k.removeAsync('x'), true)
    assert.equal(await k.removeAsync('x'), false)
    await k.clearAsync()
    assert.deepEqual(await keys(), [])
    // A bucket that is full again is gone: 2 tokens at 100/s refill in 20 ms, and the key
    // expires then (polled for up to 3 s: a loaded machine may delay this side, not Redis).
    const fast = new KeyedLimiter('100/s; burst=2', { store: `${srv.url}?prefix=${prefix}&timeout=1s` })
    await fast.tryAcquireAsync('w', 2)
    const until = Date.now() + 3000
    let left = await keys()
    while (left.length > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20))
      left = await keys()
    }
    assert.deepEqual(left, [], 'the key expired once its bucket was full')
  })

  test('the *Async methods answer at once on the memory store, and reject as the sync ones throw', async () => {
    const k = new KeyedLimiter('2/minute')
    assert.equal(k.redisStats(), null)
    assert.equal((await k.tryAcquireAsync('a')).remaining, 1)
    assert.deepEqual((await k.tryAcquireMany(['a', 'a'])).map((d) => d.allowed), [true, false])
    await rejectsWith(k.tryAcquireAsync('a', 3), 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY')
    const l = new Limiter('2/minute')
    assert.equal((await l.tryAcquireAsync()).remaining, 1)
    assert.equal((await new Composite([l]).tryAcquireAsync()).remaining, 0)
  })

  test('concurrent callers are pipelined: 200 requests in flight admit exactly the burst', async () => {
    const k = new KeyedLimiter('50/h', { store: at(srv, 'negative_cache=off') })
    const all = await Promise.all(Array.from({ length: 200 }, () => k.tryAcquireAsync('hot')))
    assert.equal(all.filter((d) => d.allowed).length, 50)
  })
})

test('an unreachable Redis store is a SluicegateWarning, once per store, the password not shown', async () => {
  const seen = await warnings(() => {
    rateLimit({ quota: '5/s', store: 'redis://u:s3cret@127.0.0.1:1/0?timeout=100ms&prefix=unreach' })
    rateLimit({ quota: '6/s', store: 'redis://u:s3cret@127.0.0.1:1/0?timeout=100ms&prefix=unreach' })
  })
  const got = sluicegateWarnings(seen).filter(([code]) => code === 'SLUICEGATE_STORE_UNREACHABLE')
  assert.equal(got.length, 1, JSON.stringify(got))
  assert.ok(/127\.0\.0\.1:1/.test(got[0][1]) && !got[0][1].includes('s3cret'), got[0][1])
  assert.ok(got[0][1].includes('(on_error=local, the default: by each process alone'), got[0][1])
  // The warning names the URL's own policy (it said local whatever the URL said).
  const closed = await warnings(() => {
    // (The policy's name in any case, as the core reads it.)
    rateLimit({ quota: '5/s', store: 'redis://127.0.0.1:1/0?timeout=100ms&prefix=unreach-closed&on_error=CLOSED' })
  })
  const said = sluicegateWarnings(closed).filter(([code]) => code === 'SLUICEGATE_STORE_UNREACHABLE')
  assert.equal(said.length, 1, JSON.stringify(said))
  assert.ok(said[0][1].includes('(on_error=closed: every request refused)'), said[0][1])
  // `on_error=local` given: not "the default" (the printed URL leaves out defaults).
  const local = await warnings(() => {
    rateLimit({ quota: '5/s', store: 'redis://127.0.0.1:1/0?timeout=100ms&prefix=unreach-local&on_error=local' })
  })
  const named = sluicegateWarnings(local).filter(([code]) => code === 'SLUICEGATE_STORE_UNREACHABLE')
  assert.ok(named[0][1].includes('(on_error=local: by each process alone'), named[0][1])
})

test('an outage after the first connection is a SluicegateWarning when it begins, and another when it ends', needsRedis(), async (t) => {
  const { WATCH } = createRequire(import.meta.url)('../web.js')
  const every = WATCH.everyMs
  WATCH.everyMs = 0 // the counters looked at every request
  const srv = await startRedis()
  t.after(async () => {
    WATCH.everyMs = every
    await srv.stop()
  })
  const seen = []
  const on = (w) => seen.push(w)
  process.on('warning', on)
  t.after(() => process.off('warning', on))
  const codes = () => sluicegateWarnings(seen).map(([code]) => code)
  const get = await serve(rateLimit({ quota: '100/minute', store: `${srv.url}?prefix=watch&timeout=1s` }), t)
  const statuses = async (n) => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await get('/')).status)
    return out
  }
  assert.deepEqual(await statuses(3), [200, 200, 200])
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(codes(), [], 'nothing while the server answers')
  await srv.kill()
  assert.deepEqual(await statuses(3), [200, 200, 200], 'on_error=local decides')
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(codes(), ['SLUICEGATE_STORE_FAILING'])
  assert.ok(sluicegateWarnings(seen)[0][1].includes('on_error policy in this process (on_error=local, the default: by each process alone'))
  await srv.restart()
  const deadline = Date.now() + 20_000 // the reconnection backs off up to a second
  while (!codes().includes('SLUICEGATE_STORE_RECOVERED')) {
    assert.ok(Date.now() < deadline, JSON.stringify(codes()))
    assert.equal((await get('/')).status, 200)
    await new Promise((r) => setTimeout(r, 50))
  }
  assert.deepEqual(codes(), ['SLUICEGATE_STORE_FAILING', 'SLUICEGATE_STORE_RECOVERED'])
  // The next outage is reported again.
  await srv.kill()
  assert.deepEqual(await statuses(3), [200, 200, 200])
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(codes(), ['SLUICEGATE_STORE_FAILING', 'SLUICEGATE_STORE_RECOVERED', 'SLUICEGATE_STORE_FAILING'])
})

describe('bad URLs', () => {
  for (const [store, code] of [
    ['redis://127.0.0.1:6379/0?bogus=1', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis://127.0.0.1:6379/0?on_error=sometimes', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis://127.0.0.1:6379/0?timeout=soon', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis://127.0.0.1:6379/0?prefix=a%20b', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis://', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis+sentinel://127.0.0.1:1', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['redis://127.0.0.1:99999/0', 'ERR_SLUICEGATE_INVALID_OPTION'],
    ['postgres://127.0.0.1/0', 'ERR_SLUICEGATE_INVALID_OPTION'],
  ]) {
    test(`${store}: ${code}`, () => {
      assert.throws(() => new KeyedLimiter('1/s', { store }), (e) => e.code === code)
      assert.throws(() => new Limiter('1/s', { store }), (e) => e.code === code)
    })
  }

  test('clock=test is refused by the published addon (it never sends client timestamps)', needsRedis(), async (t) => {
    if (process.env.NAPI_RS_NATIVE_LIBRARY_PATH) return t.skip('running the test-clock addon')
    const srv = await startRedis()
    try {
      assert.throws(() => new KeyedLimiter('1/s', { store: `${srv.url}?clock=test` }), (e) => e.code === UNSUPPORTED)
    } finally {
      await srv.stop()
    }
  })

  test('rediss:// is built in (rustls): a TLS store is made, and a server that is not there is unavailable', async () => {
    const k = new KeyedLimiter('1/s', { store: 'rediss://127.0.0.1:1/0?on_error=error&timeout=20ms' })
    await rejectsWith(k.tryAcquireAsync('a'), 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
  })

  test('a server that is not there: a Limiter\'s peekAsync rejects under on_error=open, closed and local too', async () => {
    for (const policy of ['open', 'closed', 'local']) {
      // Port 2, not 1: the counters are per server, and the test below counts port 1's.
      const l = new Limiter('1/s', { store: `redis://127.0.0.1:2/0?on_error=${policy}&timeout=20ms&prefix=peek-${policy}`, metrics: true })
      await rejectsWith(l.peekAsync(), 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
      assert.equal(l.metrics().allowed + l.metrics().rejected, 0, policy)
    }
  })

  test('a server that is not there: a Composite\'s peekAsync rejects under every policy, its requests do not', async () => {
    for (const policy of ['open', 'closed', 'local']) {
      const far = new Limiter('1/s', { store: `redis://127.0.0.1:2/0?on_error=${policy}&timeout=20ms&prefix=cpeek-${policy}` })
      const both = new Composite([new Limiter('5/s'), far])
      await rejectsWith(both.peekAsync(), 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
      assert.equal((await both.tryAcquireAsync()).allowed, policy !== 'closed', policy)
    }
  })

  test('a server that is not there: on_error=error rejects with ERR_SLUICEGATE_STORE_UNAVAILABLE', async () => {
    const k = new KeyedLimiter('1/s', { store: 'redis://127.0.0.1:1/0?on_error=error&timeout=20ms' })
    await rejectsWith(k.tryAcquireAsync('a'), 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
    assert.equal(k.redisStats().failedError, 1)
  })
})

describe('fail policies with a killed server', needsRedis(), () => {
  const srv = serverPerSuite()

  test('open admits, closed rejects for 1 s, local decides in process, error rejects; then the server decides again', async () => {
    const make = (policy) => new KeyedLimiter('2/minute', { store: at(srv, `on_error=${policy}&timeout=500ms`) })
    const open = make('open')
    const closed = make('closed')
    const local = make('local')
    const error = make('error')
    for (const k of [open, closed, local, error]) assert.equal((await k.tryAcquireAsync('a')).remaining, 1)
    await srv.kill()
    const many = (k) => Promise.all(Array.from({ length: 3 }, () => k.tryAcquireAsync('b')))
    assert.deepEqual((await many(open)).map((d) => d.allowed), [true, true, true])
    const c = await many(closed)
    assert.deepEqual(c.map((d) => [d.allowed, d.retryAfterMs]), [[false, 1000], [false, 1000], [false, 1000]])
    // The insurance limiter: the quota's rate and burst (hosts=1), per key, in this process.
    const l = []
    for (let i = 0; i < 3; i++) l.push(await local.tryAcquireAsync('b'))
    assert.deepEqual(l.map((d) => d.allowed), [true, true, false])
    for (let i = 0; i < 3; i++) {
      const e = await error.tryAcquireAsync('b').then(() => null, (x) => x)
      assert.ok(e?.code === 'ERR_SLUICEGATE_STORE_UNAVAILABLE' || e?.code === 'ERR_SLUICEGATE_STORE_TIMEOUT', String(e?.code))
    }
    assert.ok(open.redisStats().failedOpen >= 3)
    assert.ok(closed.redisStats().failedClosed >= 3)
    assert.ok(local.redisStats().failedLocal >= 3)
    assert.ok(error.redisStats().failedError >= 3)
    // Back: the server decides again (a fresh server: every bucket is full), within the
    // reconnection backoff (at most 1 s between attempts).
    await srv.restart()
    const d = await decidedAgain(error, 'c')
    assert.equal(d?.remaining, 1, 'the server decides again')
    assert.ok(error.redisStats().connects >= 2)
  })
})

describe('a peek with the server down', needsRedis(), () => {
  const srv = serverPerSuite()

  test('rejects with a store error under every fail policy, counted by none (a peek is not an admission)', async () => {
    const policies = ['open', 'closed', 'local', 'error']
    const made = policies.map((policy) => [policy, new Limiter('5/minute', { store: at(srv, `on_error=${policy}&timeout=500ms`) })])
    for (const [, l] of made) assert.equal((await l.peekAsync()).remaining, 5)
    await srv.kill()
    for (const [policy, l] of made) {
      const e = await l.peekAsync().then(() => null, (x) => x)
      assert.ok(e?.code === 'ERR_SLUICEGATE_STORE_UNAVAILABLE' || e?.code === 'ERR_SLUICEGATE_STORE_TIMEOUT', `${policy}: ${String(e?.code)}`)
      // No policy decided it (the failure went to the caller: the core counts it failedError).
      const s = l.redisStats()
      assert.deepEqual([s.failedOpen, s.failedClosed, s.failedLocal], [0, 0, 0], policy)
    }
    // A request, by contrast, goes to the policy.
    const [, open] = made[0]
    assert.equal((await open.tryAcquireAsync()).allowed, true)
    assert.equal(open.redisStats().failedOpen, 1)
  })
})

describe('a paused server (SIGSTOP)', needsRedis(), () => {
  const srv = serverPerSuite()

  test('the event loop keeps turning while calls wait for the timeout; then they reject (on_error=error) or resolve (open)', async () => {
    // Long enough that the bound on the widest gap below (0.8 of it: 1.2 s) is no stall of a
    // loaded machine, while a loop blocked for the timeout would still exceed it.
    const TIMEOUT_MS = 1500
    const error = new KeyedLimiter('100/s', { store: at(srv, `on_error=error&timeout=${TIMEOUT_MS}ms`) })
    const open = new KeyedLimiter('100/s', { store: at(srv, `on_error=open&timeout=${TIMEOUT_MS}ms`) })
    await error.tryAcquireAsync('warm')
    await open.tryAcquireAsync('warm')
    srv.pause()
    try {
      let ticks = 0
      let last = performance.now()
      let widest = 0
      const ticker = setInterval(() => {
        const now = performance.now()
        widest = Math.max(widest, now - last)
        last = now
        ticks++
      }, 5)
      const t0 = performance.now()
      const settled = await within(
        Promise.allSettled([
          ...Array.from({ length: 50 }, (_, i) => error.tryAcquireAsync(`k${i}`)),
          ...Array.from({ length: 10 }, (_, i) => open.tryAcquireAsync(`k${i}`)),
        ]),
        10_000,
        'calls on a paused server',
      )
      const waited = performance.now() - t0
      clearInterval(ticker)
      const rejected = settled.slice(0, 50)
      for (const r of rejected) {
        assert.equal(r.status, 'rejected')
        assert.ok(['ERR_SLUICEGATE_STORE_TIMEOUT', 'ERR_SLUICEGATE_STORE_UNAVAILABLE'].includes(r.reason.code), r.reason.code)
      }
      assert.ok(rejected.some((r) => r.reason.code === 'ERR_SLUICEGATE_STORE_TIMEOUT'), 'the calls in flight timed out')
      for (const r of settled.slice(50)) assert.equal(r.value.allowed, true, 'on_error=open admits')
      assert.ok(waited >= TIMEOUT_MS * 0.9, `the calls waited for the timeout (${waited.toFixed(0)} ms)`)
      // The ticker ran all along: no gap near the timeout, which a blocked loop would show.
      assert.ok(ticks >= 10, `${ticks} ticks in ${waited.toFixed(0)} ms`)
      assert.ok(widest < TIMEOUT_MS * 0.8, `the widest gap between ticks was ${widest.toFixed(0)} ms`)
      assert.ok(error.redisStats().timeouts >= 1)
    } finally {
      srv.resume()
    }
    const d = await decidedAgain(error, 'after')
    assert.equal(d?.allowed, true, 'after SIGCONT the server decides again')
  })
})

describe('Express on Redis', needsRedis(), () => {
  const srv = serverPerSuite()

  test('the middleware awaits the decision: 200s then a 429 with Retry-After', async (t) => {
    const get = await serve(rateLimit({ limit: 2, windowMs: 60_000, store: at(srv) }), t)
    assert.deepEqual(await (await get()).json(), { remaining: 1 })
    assert.equal((await get()).status, 200)
    const r = await get()
    assert.equal(r.status, 429)
    assert.equal(r.headers.get('retry-after'), '30')
  })

  test('each limit has its own key prefix (the shm suffix); a password reaches the server, never the printed store', async () => {
    const locked = await startRedis()
    try {
      await command(locked.port, 'CONFIG', 'SET', 'requirepass', 's3cret')
      const store = `redis://:s3cret@127.0.0.1:${locked.port}/0?prefix=api&timeout=1s`
      const a = rateLimit({ quota: '5/minute', store })
      const b = rateLimit({ quota: '7/minute', store })
      const suffix = (q) => createHash('sha256').update(canonicalQuota(q)).digest('hex').slice(0, 12)
      assert.ok(a.store.includes(`prefix=api-${suffix('5/minute')}`), a.store)
      assert.ok(b.store.includes(`prefix=api-${suffix('7/minute')}`), b.store)
      assert.ok(!a.store.includes('s3cret'), a.store)
      assert.equal((await a.limiter.tryAcquireAsync('k')).remaining, 4)
      assert.equal((await b.limiter.tryAcquireAsync('k')).remaining, 6)
      assert.equal(a.limiter.redisStats().failedLocal, 0, 'the server decided')
      assert.equal(await a.resetKey('k'), true)
      assert.equal((await a.limiter.peekAsync('k')).remaining, 5)
      assert.equal((await b.limiter.peekAsync('k')).remaining, 6, 'the other limit kept its bucket')
    } finally {
      await locked.stop()
    }
  })

  test('maxKeys does not name the key prefix: a deploy changing it keeps every client\'s count', async () => {
    // A Redis store keeps no key bound (maxKeys applies to memory and shm stores): two deploys
    // differing only in maxKeys share the limit's buckets, where they counted apart.
    const store = at(srv)
    const before = rateLimit({ quota: '3/minute', store, maxKeys: 1000 })
    const after = rateLimit({ quota: '3/minute', store, maxKeys: 2000 })
    assert.equal(after.store, before.store)
    assert.equal(rateLimit({ quota: '3/minute', store }).store, before.store)
    assert.equal((await before.limiter.tryAcquireAsync('k')).remaining, 2)
    assert.equal((await after.limiter.tryAcquireAsync('k')).remaining, 1, 'one count across the deploys')
  })

  test('on_error=error reaches the error handler (a 503, the store\'s error its cause); on_error=open admits', async (t) => {
    const dead = 'redis://127.0.0.1:1/0?timeout=20ms'
    const failing = await serve(rateLimit({ limit: 2, store: `${dead}&on_error=error` }), t)
    const r = await failing()
    assert.equal(r.status, 500) // the fixture's handler answers 500 with the code
    assert.deepEqual(await r.json(), { code: 'ERR_SLUICEGATE_STORE_UNAVAILABLE' })
    // Express's own handler answers the error's status; its message (the stack, outside
    // production) does not name the store: a user name, host and port a client must not learn.
    const seen = []
    const app = express()
    app.use(rateLimit({ limit: 2, store: 'redis://sg-operator@127.0.0.1:1/0?timeout=20ms&on_error=error' }))
    app.get('/', (_req, res) => res.send('ok'))
    app.use((err, _req, _res, next) => {
      seen.push(err)
      next(err)
    })
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s))
    })
    t.after(() => new Promise((done) => server.close(done)))
    const own = await fetch(`http://127.0.0.1:${server.address().port}/`)
    assert.equal(own.status, 503)
    const text = await own.text()
    for (const secret of ['sg-operator', '127.0.0.1', ':1/']) assert.ok(!text.includes(secret), text)
    assert.equal(seen[0].code, 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
    assert.equal(seen[0].statusCode, 503)
    assert.match(seen[0].cause.message, /127\.0\.0\.1:1/, 'the cause has the details')
    const open = await serve(rateLimit({ limit: 2, store: `${dead}&on_error=open` }), t)
    for (let i = 0; i < 3; i++) assert.equal((await open()).status, 200)
  })

  test("the README's Express example runs against the server", async (t) => {
    const readme = readFileSync(join(pkg, 'README.md'), 'utf8')
    const block = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes("store: 'redis://"))
    assert.ok(block, 'the README has an Express example on Redis')
    const code = block.replace(/redis:\/\/[^?'/]+\/0/, `redis://127.0.0.1:${srv.port}/0`).replace(/app\.listen\([^)]*\)/, 'module.exports = app')
    const require = createRequire(join(pkg, 'package.json'))
    const mod = { exports: {} }
    const sub = { sluicegate: require(pkg), 'sluicegate/express': rateLimit, express }
    new Function('require', 'module', code)((m) => (m in sub ? sub[m] : require(m)), mod)
    const server = await new Promise((resolve) => {
      const s = mod.exports.listen(0, '127.0.0.1', () => resolve(s))
    })
    t.after(() => new Promise((r) => server.close(r)))
    const statuses = []
    for (let i = 0; i < 12; i++) statuses.push((await fetch(`http://127.0.0.1:${server.address().port}/`)).status)
    assert.deepEqual(statuses, [...Array(10).fill(200), 429, 429])
  })
})
