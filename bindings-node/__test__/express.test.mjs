// The Express middleware over real HTTP on 127.0.0.1.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import rateLimit from '../express.mjs'
import express from 'express'
import { Decision, KeyedLimiter, ManualClock, canonicalQuota, renderPrometheus } from '../index.mjs'
import { LaterLimiter, gate, unhandledRejections, until } from './fixtures/later.mjs'
import { serve } from './fixtures/serve.mjs'
import { sluicegateWarnings, warnings } from './fixtures/warnings.mjs'

test('429 with Retry-After once over the limit; draft-6 and legacy headers by default', async (t) => {
  const get = await serve(rateLimit({ limit: 2, windowMs: 60_000 }), t)
  const a = await get()
  assert.equal(a.status, 200)
  assert.deepEqual(await a.json(), { remaining: 1 })
  assert.equal(a.headers.get('ratelimit-limit'), '2')
  assert.equal(a.headers.get('ratelimit-remaining'), '1')
  assert.equal(a.headers.get('ratelimit-policy'), '2;w=60')
  assert.equal(a.headers.get('x-ratelimit-limit'), '2')
  assert.equal(a.headers.get('retry-after'), null)
  assert.equal((await get()).status, 200)
  const c = await get()
  assert.equal(c.status, 429)
  assert.equal(c.headers.get('retry-after'), '30')
  assert.equal(await c.text(), 'Too many requests, please try again later.')
})

test('legacy X-RateLimit-Reset is the Unix time in seconds, as express-rate-limit sends it; RateLimit-Reset the seconds from now', async (t) => {
  const get = await serve(rateLimit({ limit: 2, windowMs: 60_000 }), t)
  const resets = []
  for (const status of [200, 200, 429]) {
    const before = Date.now()
    const r = await get()
    const after = Date.now()
    assert.equal(r.status, status)
    // draft-6's RateLimit-Reset: the seconds until the bucket is full (rounded up).
    const inSeconds = Number(r.headers.get('ratelimit-reset'))
    resets.push(inSeconds)
    const reset = r.headers.get('x-ratelimit-reset')
    assert.match(reset, /^\d+$/)
    const lowest = Math.floor(before / 1000) + inSeconds - 1
    const highest = Math.ceil(after / 1000) + inSeconds
    assert.ok(Number(reset) >= lowest && Number(reset) <= highest, `X-RateLimit-Reset ${reset}: not now plus ${inSeconds} s (${lowest} to ${highest})`)
  }
  // A token every 30 s: full 30 s after the first request, 60 s after the second.
  assert.ok(resets[0] >= 29 && resets[0] <= 30 && resets[1] >= 59 && resets[1] <= 60, JSON.stringify(resets))
})

test('req.rateLimit has express-rate-limit\'s limit, used, remaining and resetTime besides the Decision', async (t) => {
  const app = express()
  const seen = []
  app.use(rateLimit({
    limit: 3,
    windowMs: 60_000,
    handler: (req, res) => { seen.push(req.rateLimit); res.status(429).json({ used: req.rateLimit.used }) },
  }))
  app.get('/', (req, res) => {
    seen.push(req.rateLimit)
    const { limit, used, remaining, resetTime } = req.rateLimit
    res.json({ limit, used, remaining, resetTime: resetTime.toISOString() })
  })
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  t.after(() => new Promise((r) => server.close(r)))
  const base = `http://127.0.0.1:${server.address().port}/`
  const before = Date.now()
  const first = await (await fetch(base)).json()
  const after = Date.now()
  assert.deepEqual([first.limit, first.used, first.remaining], [3, 1, 2])
  // 20 s a token: full again 20 s after the decision.
  const resetMs = Date.parse(first.resetTime)
  assert.ok(resetMs >= before + 20_000 && resetMs <= after + 20_000, `${first.resetTime} not 20 s after the request`)
  assert.deepEqual(await (await fetch(base)).json().then((b) => [b.used, b.remaining]), [2, 1])
  await fetch(base)
  const refused = await fetch(base)
  assert.equal(refused.status, 429)
  assert.deepEqual(await refused.json(), { used: 3 })
  const info = seen[0]
  assert.ok(info instanceof Decision, 'still a Decision')
  assert.equal(info.allowed, true)
  assert.equal(info.resetAfterMs, 20_000)
  assert.ok(info.resetTime instanceof Date)
  assert.equal(info.resetTime.getTime(), info.resetTime.getTime(), 'the time of the decision, however late it is read')
  assert.equal(seen[3].allowed, false)
  assert.equal(seen[3].headers('legacy')['X-RateLimit-Remaining'], '0')
  // express-rate-limit's key, and its fields in JSON (used and resetTime are getters).
  assert.equal(info.key, '127.0.0.1')
  const json = JSON.parse(JSON.stringify(info))
  assert.deepEqual([json.limit, json.used, json.remaining, json.key, json.allowed], [3, 1, 2, '127.0.0.1', true])
  assert.equal(json.resetTime, info.resetTime.toISOString())
  // Figures past 2^53 ns (a year's window) and a BigInt key are BigInts: sent as their digits.
  const year = express()
  year.use(rateLimit({ limit: 1, windowMs: 365 * 86_400_000, keyGenerator: () => 5n }))
  year.get('/', (req, res) => res.json(req.rateLimit))
  const ys = await new Promise((resolve) => { const s = year.listen(0, '127.0.0.1', () => resolve(s)) })
  t.after(() => new Promise((r) => ys.close(r)))
  const body = await (await fetch(`http://127.0.0.1:${ys.address().port}/`)).json()
  assert.deepEqual([body.key, body.resetAfterNs, body.used, body.allowed], ['5', String(365n * 86_400_000_000_000n), 1, true])
})

test('max, express-rate-limit\'s older name for limit, is limit', async (t) => {
  const get = await serve(rateLimit({ max: 2, windowMs: 60_000 }), t)
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await get()).status)
  assert.deepEqual(statuses, [200, 200, 429])
})

test('a message function may answer a Promise of the body (express-rate-limit awaits it)', async (t) => {
  const get = await serve(rateLimit({ limit: 1, message: async (req) => `slow down, ${req.method}` }), t)
  assert.equal((await get()).status, 200)
  const refused = await get()
  assert.equal(refused.status, 429)
  assert.equal(await refused.text(), 'slow down, GET')
})

test('standardHeaders draft-7 and draft-8, legacyHeaders off', async (t) => {
  const get7 = await serve(rateLimit({ quota: '10/s; burst=5', standardHeaders: 'draft-7', legacyHeaders: false }), t)
  const r7 = await get7()
  assert.equal(r7.headers.get('ratelimit'), 'limit=5, remaining=4, reset=1')
  assert.equal(r7.headers.get('x-ratelimit-limit'), null)
  const get8 = await serve(rateLimit({ quota: '10/s; burst=5', standardHeaders: 'draft-8', policy: 'api', legacyHeaders: false }), t)
  const r8 = await get8()
  assert.equal(r8.headers.get('ratelimit-policy'), '"api";q=5;w=1')
  assert.equal(r8.headers.get('ratelimit'), '"api";r=4;t=1')
  const none = await serve(rateLimit({ limit: 1, standardHeaders: false, legacyHeaders: false }), t)
  assert.equal((await none()).headers.get('ratelimit-limit'), null)
  // No fields at all, but a 429 still says when to come back.
  const denied = await none()
  assert.equal(denied.status, 429)
  assert.equal(denied.headers.get('retry-after'), '60')
  assert.equal(denied.headers.get('ratelimit-limit'), null)
})

test('keyGenerator, skip, cost and handler', async (t) => {
  const clock = new ManualClock(0)
  const limiter = new KeyedLimiter('1/h; burst=3', { clock })
  const get = await serve(
    rateLimit({
      limiter,
      keyGenerator: (req) => req.get('x-user') ?? 'anon',
      skip: async (req) => req.path === '/health',
      cost: (req) => Number(req.get('x-cost') ?? 1),
      handler: (req, res) => res.status(503).json({ retry: req.rateLimit.retryAfterMs }),
    }),
    t,
  )
  const as = (user, cost = 1) => get('/', { headers: { 'x-user': user, 'x-cost': String(cost) } })
  assert.equal((await as('a', 3)).status, 200)
  const denied = await as('a')
  assert.equal(denied.status, 503)
  assert.deepEqual(await denied.json(), { retry: 3_600_000 })
  assert.equal((await as('b')).status, 200, 'another key has its own bucket')
  assert.equal((await get('/health', { headers: { 'x-user': 'a' } })).status, 404, 'skipped: not counted, falls through')
  // A cost above the burst, which no wait would admit: refused (the handler, told to come back
  // once the bucket is full), not an error, and nothing taken.
  const over = await as('c', 4)
  assert.equal(over.status, 503)
  assert.deepEqual(await over.json(), { retry: 10_800_000 })
  assert.equal((await as('c', 3)).status, 200)
  clock.advance(3_600_000_000_000n)
  assert.equal((await as('a')).status, 200)
})

test('stacked middlewares are all or nothing over a request: a rejection gives back what the earlier ones took', async (t) => {
  const appWide = rateLimit({ quota: '3/minute', legacyHeaders: false })
  const tight = rateLimit({ quota: '1/minute', legacyHeaders: false, skipFailedRequests: true })
  const app = express()
  app.use(appWide)
  app.get('/tight', tight, (req, res) => res.send('tight'))
  app.get('/other', (req, res) => res.send('other'))
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  t.after(() => new Promise((r) => server.close(r)))
  const get = (path) => fetch(`http://127.0.0.1:${server.address().port}${path}`).then((r) => r.status)
  assert.deepEqual([await get('/tight'), await get('/tight'), await get('/tight')], [200, 429, 429])
  // The refused requests gave the app-wide limit its tokens back (it spent one on each before).
  assert.deepEqual([await get('/other'), await get('/other'), await get('/other')], [200, 200, 429])
  assert.equal(appWide.get('127.0.0.1').remaining, 0)
})

test('three stacked middlewares: the last one\'s rejection gives back what both earlier ones took', async (t) => {
  const first = rateLimit({ quota: '5/minute', legacyHeaders: false })
  const second = rateLimit({ quota: '4/minute', legacyHeaders: false })
  const third = rateLimit({ quota: '1/minute', legacyHeaders: false })
  const app = express()
  app.use(first, second)
  app.get('/', third, (req, res) => res.send('ok'))
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  t.after(() => new Promise((r) => server.close(r)))
  const get = () => fetch(`http://127.0.0.1:${server.address().port}/`).then((r) => r.status)
  assert.deepEqual([await get(), await get(), await get()], [200, 429, 429])
  assert.equal(first.get('127.0.0.1').remaining, 4)
  assert.equal(second.get('127.0.0.1').remaining, 3)
})

test('a fixed cost above the burst is refused when the middleware is made', () => {
  for (const cost of [3, 2n ** 64n - 1n]) {
    assert.throws(
      () => rateLimit({ quota: ['1/h; burst=2', '10/s'], cost }),
      (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG' && /cost \d+ is more than "1\/h; burst=2" can ever admit \(its burst is 2\)/.test(e.message),
    )
  }
  for (const cost of [-1, 1.5, 'x', 2n ** 64n]) {
    assert.throws(() => rateLimit({ limit: 2, cost }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG', String(cost))
  }
  assert.equal(typeof rateLimit({ quota: '1/h; burst=2', cost: 2 }), 'function')
})

test('a computed cost above the burst and a full key store are 429s, not server errors', async (t) => {
  const cost = (req) => Number(req.get('x-cost') ?? 1)
  const keyGenerator = (req) => req.get('x-user')
  const get = await serve(rateLimit({ quota: ['10/s', '1/minute; burst=2'], cost, keyGenerator, maxKeys: 1, onFull: 'reject' }), t)
  const as = (user, c = 1) => get('/', { headers: { 'x-user': user, 'x-cost': String(c) } })
  const over = await as('a', 3)
  assert.equal(over.status, 429)
  assert.equal(over.headers.get('retry-after'), '120')
  assert.equal(over.headers.get('ratelimit-remaining'), '0')
  // The first limit's tokens went back: the whole of both bursts is there.
  assert.equal((await as('a', 2)).status, 200)
  const full = await as('b')
  assert.equal(full.status, 429, 'a new key at the key bound, nothing to evict')
  assert.equal(full.headers.get('retry-after'), '1')
  // A shadow limit lets both through, marked as would-be rejections.
  const seen = []
  const shadow = await serve(
    rateLimit({ quota: '1/minute; burst=2', cost, keyGenerator, maxKeys: 1, onFull: 'reject', shadow: true, onShadowReject: (req, key, d) => seen.push([key, d.retryAfterMs]) }),
    t,
  )
  const sh = (user, c = 1) => shadow('/', { headers: { 'x-user': user, 'x-cost': String(c) } })
  assert.deepEqual([(await sh('a', 3)).status, (await sh('a')).status, (await sh('b')).status], [200, 200, 200])
  assert.deepEqual(seen, [['a', 120_000], ['b', 1_000]])
})

test('a leaky queue is refused: a middleware does not wait out what it admits', () => {
  for (const quota of ['1/s; algorithm=leaky_queue; max_delay=5s', ['10/m', '1/s; algorithm=shaper']]) {
    assert.throws(() => rateLimit({ quota }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG' && /leaky queue/.test(e.message))
  }
  assert.throws(() => rateLimit({ limiter: new KeyedLimiter('1/s; algorithm=leaky_queue') }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  rateLimit({ quota: '1/s; algorithm=gcra' })
})

test('async keyGenerator and resetKey', async (t) => {
  const mw = rateLimit({ limit: 1, keyGenerator: async () => 'same' })
  const get = await serve(mw, t)
  assert.equal((await get()).status, 200)
  assert.equal((await get()).status, 429)
  assert.equal(mw.resetKey('same'), true)
  assert.equal((await get()).status, 200)
})

// The forwarding headers a proxy writes, in turn (and none: a request of the proxy's own).
const FORWARDED = [
  (i) => ({ 'x-forwarded-for': `198.51.100.${i}` }),
  (i) => ({ forwarded: `for=198.51.100.${i}` }),
  (i) => ({ 'x-real-ip': `198.51.100.${i}` }),
  () => ({}),
]

// A proxy in front that is not trusted (the requests come from 127.0.0.1, a loopback peer, with
// forwarding headers; no trustedProxies): every client shares the proxy's key. The middleware
// says so once, as express-rate-limit's validations do, however many requests, headers and
// connections come; the key stays the peer's, not a value a client may write.
test('an untrusted proxy in front: one SLUICEGATE_UNTRUSTED_PROXY warning for many requests; the key stays the peer\'s', async (t) => {
  const limiter = new KeyedLimiter('1/h; burst=100', { clock: new ManualClock(0) })
  const mw = rateLimit({ limiter })
  const get = await serve(mw, t)
  const requests = 60
  const remaining = []
  const seen = await warnings(async () => {
    for (let i = 0; i < requests; i++) {
      // Half on a connection of their own, half on the kept-alive one.
      const headers = { ...FORWARDED[i % FORWARDED.length](i), ...(i % 2 ? { connection: 'close' } : {}) }
      const r = await get('/', { headers })
      assert.equal(r.status, 200)
      remaining.push((await r.json()).remaining)
    }
  })
  const burst = limiter.peek('127.0.0.1').limit
  assert.deepEqual(remaining, Array.from({ length: requests }, (_, i) => burst - 1 - i), 'every request counted in one bucket')
  assert.equal(limiter.size, 1)
  assert.equal(mw.get('127.0.0.1').remaining, burst - requests, "the peer's key")
  const sg = sluicegateWarnings(seen)
  assert.equal(sg.length, 1, `one warning for ${requests} requests: ${JSON.stringify(sg)}`)
  assert.equal(sg[0][0], 'SLUICEGATE_UNTRUSTED_PROXY')
  assert.match(sg[0][1], /127\.0\.0\.1/)
  // A proxy that is trusted is no misconfiguration: no warning, each client its own key.
  const trusting = rateLimit({ limiter: new KeyedLimiter('1/h; burst=100', { clock: new ManualClock(0) }), trustedProxies: 'loopback' })
  const viaProxy = await serve(trusting, t)
  const quiet = await warnings(async () => {
    for (let i = 0; i < 3; i++) assert.equal((await viaProxy('/', { headers: FORWARDED[0](i) })).status, 200)
  })
  assert.deepEqual(sluicegateWarnings(quiet), [])
  assert.equal(trusting.limiter.size, 3)
})

test('bad options throw at construction', () => {
  const bad = (o) => assert.throws(() => rateLimit(o), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
  bad({ standardHeaders: 'draft-9' })
  bad({ keyGenerator: 'ip' })
  bad({ skip: true })
  bad({ max: 5, limit: 5 }) // max is limit's older name (express-rate-limit's): one or the other
  // A status res.status cannot send failed on every rejected request, not here.
  bad({ statusCode: 429n })
  bad({ statusCode: 99 })
  bad({ statusCode: 1000 })
  bad({ statusCode: 'too many' })
  assert.equal(typeof rateLimit({ statusCode: '429' }), 'function') // Express 4 sends it
  assert.equal(typeof rateLimit({ statusCode: 429n, handler: (req, res) => res.sendStatus(503) }), 'function')
  bad({ policy: 5 })
  assert.equal(typeof rateLimit({ policy: undefined }), 'function')
  bad(null)
  // Named as express-rate-limit names them (the core's messages said count and periodMs).
  const named = (o, re) => assert.throws(() => rateLimit(o), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG' && re.test(e.message))
  named({ limit: 0 }, /^limit must be a whole number of requests, at least 1, got 0$/)
  named({ limit: 2.5 }, /^limit .* got 2\.5$/)
  named({ max: -1 }, /^limit .* got -1$/)
  named({ limit: () => 5 }, /^limit must be a number: a limit computed per request/)
  named({ windowMs: 1.5 }, /^windowMs must be a whole number of milliseconds/)
  named({ limit: '5' }, /^limit .* got "5"$/) // a string from a configuration shows as one
  assert.equal(typeof rateLimit({ limit: 5n, windowMs: 1000n }), 'function')
  // express-rate-limit's options with no counterpart here say what to give instead.
  named({ passOnStoreError: true }, /^rateLimit option "passOnStoreError": use the store URL's `on_error=open`/)
  named({ headers: false }, /^rateLimit option "headers": .*give `legacyHeaders`, and `standardHeaders`/)
  named({ identifier: 'api' }, /^rateLimit option "identifier": use `policy`/)
  named({ retryAfter: 5 }, /^rateLimit option "retryAfter": not supported/)
  named({ logger: console }, /^rateLimit option "logger": not supported: .*SluicegateWarning/)
  named({ validate: false }, /^rateLimit option "validate": not needed: .*`trustedProxies`/)
  named({ draft_polli_ratelimit_headers: true }, /standardHeaders: 'draft-6'/)
  named({ onLimitReached: () => {} }, /use `handler`/)
  named({ bogus: 1 }, /^unknown rateLimit option "bogus"$/)
})

// The store option: regions in a temporary folder, removed afterwards.
const dir = mkdtempSync(join(tmpdir(), 'sluicegate-express-'))
after(() => rmSync(dir, { recursive: true, force: true }))
/** A limit's region suffix: its canonical quota, and the region's key bound when one is given. */
const limitSuffix = (quota, bound) =>
  createHash('sha256').update(bound === undefined ? canonicalQuota(quota) : `${canonicalQuota(quota)}\n${bound}`).digest('hex').slice(0, 12)

test('store: one region per distinct limit, named from the store and the quota', async (t) => {
  const base = join(dir, 'api-limits')
  const tight = rateLimit({ quota: '2/minute', store: `shm:${base}` })
  assert.equal(tight.store, `shm:${base}-${limitSuffix('2/minute')}`)
  assert.ok(existsSync(`${base}-${limitSuffix('2/minute')}`), 'the region is a file')
  // Another limit on the same store gets a region of its own (a region holds one quota) ...
  const loose = rateLimit({ limit: 3, windowMs: 60_000, store: `shm:${base}` })
  assert.equal(loose.store, `shm:${base}-${limitSuffix({ count: 3, periodMs: 60_000 })}`)
  assert.notEqual(loose.store, tight.store)
  // ... and the same limit, however spelled, the same region: its buckets.
  const again = rateLimit({ quota: '2 per minute', store: `shm:${base}` })
  assert.equal(again.store, tight.store)
  const [getTight, getLoose, getAgain] = [await serve(tight, t), await serve(loose, t), await serve(again, t)]
  assert.equal((await getTight()).status, 200)
  assert.equal((await getAgain()).status, 200)
  assert.equal((await getTight()).status, 429, 'the two middlewares share the client\'s bucket')
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await getLoose()).status)
  assert.deepEqual(statuses, [200, 200, 200, 429])
  // A capacity in the store string stays with the region's name, and names the region as
  // maxKeys does (the region's capacity either way); maxKeys is its capacity.
  const cap = rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'cap')}?capacity=8` })
  assert.equal(cap.store, `shm:${join(dir, 'cap')}-${limitSuffix('2/minute', 8)}?capacity=8`)
  assert.equal(cap.limiter.maxKeys, 8)
  assert.equal(rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'cap')}`, maxKeys: 8 }).store, `shm:${join(dir, 'cap')}-${limitSuffix('2/minute', 8)}`)
  // A redeploy with another capacity opens another region: not the old one, which refused it
  // (ERR_SLUICEGATE_STORE_MISMATCH in every worker).
  const nine = rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'cap')}?capacity=9` })
  assert.equal(nine.limiter.maxKeys, 9)
  assert.equal(nine.store, `shm:${join(dir, 'cap')}-${limitSuffix('2/minute', 9)}?capacity=9`)
  // A maxKeys besides the capacity must say the same.
  assert.throws(() => rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'cap')}?capacity=9`, maxKeys: 4 }), { code: 'ERR_SLUICEGATE_INVALID_OPTION' })
  assert.equal(rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'mk')}`, maxKeys: 5 }).limiter.maxKeys, 5)
  // Another maxKeys, another region: a redeploy with a new bound opens no region made with
  // the old one (which refused it, a mismatch in every worker).
  const six = rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'mk')}`, maxKeys: 6 })
  assert.equal(six.limiter.maxKeys, 6)
  assert.notEqual(six.store, rateLimit({ quota: '2/minute', store: `shm:${join(dir, 'mk')}`, maxKeys: 5 }).store)
  assert.equal(rateLimit({ quota: '2/minute' }).store, 'memory')
  assert.equal(rateLimit({ quota: '2/minute', store: 'memory' }).store, 'memory')
  assert.equal(rateLimit({ limiter: new KeyedLimiter('1/s') }).store, undefined)
})

test('two middlewares of one quota on one shared store: a warning, once, that they share buckets', async () => {
  const store = `shm:${join(dir, 'shared-warned')}`
  const seen = await warnings(() => {
    rateLimit({ quota: '7/minute', store })
    rateLimit({ quota: '8/minute', store }) // another quota: another region
    rateLimit({ quota: '7/minute' }) // in memory: each counts on its own
    rateLimit({ quota: '7/minute', store })
    rateLimit({ quota: '7/minute', store })
  })
  // A shadow limit shares an enforcing one's region too.
  const shadowStore = `shm:${join(dir, 'shared-shadow')}`
  const shadowSeen = await warnings(() => {
    rateLimit({ quota: '7/minute', store: shadowStore })
    rateLimit({ quota: '7/minute', store: shadowStore, shadow: true })
  })
  assert.equal(sluicegateWarnings(shadowSeen).filter(([code]) => code === 'SLUICEGATE_SHARED_LIMIT').length, 1)
  const got = sluicegateWarnings(seen).filter(([code]) => code === 'SLUICEGATE_SHARED_LIMIT')
  assert.equal(got.length, 1, JSON.stringify(got))
  assert.ok(got[0][1].includes(`${store}-${limitSuffix('7/minute')}`), got[0][1])
})

test('store: bad values throw at construction', () => {
  const INVALID_ARG = (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG'
  // express-rate-limit's `store` is a Store object: not this option.
  const ersStore = { increment: async () => ({ totalHits: 1 }), decrement() {}, resetKey() {} }
  assert.throws(() => rateLimit({ store: ersStore }), (e) => INVALID_ARG(e) && /Store objects/.test(e.message))
  assert.throws(() => rateLimit({ store: 5 }), INVALID_ARG)
  assert.throws(() => rateLimit({ store: 'shm:/x', limiter: new KeyedLimiter('1/s') }), INVALID_ARG)
  assert.throws(() => rateLimit({ store: 'redis://localhost?bogus=1' }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_OPTION')
  assert.throws(() => rateLimit({ quota: '1/s; algorithm=sliding_log', store: `shm:${join(dir, 'log')}` }),
    (e) => e.code === 'ERR_SLUICEGATE_STORE_UNSUPPORTED')
})

/** An app with `middleware` on `/ok` (200), `/fail` (500) and `/also` (200), on 127.0.0.1. */
async function routes(t, middleware) {
  const app = express()
  app.get('/ok', middleware, (req, res) => res.send('ok'))
  app.get('/fail', middleware, (req, res) => res.status(500).send('no'))
  app.get('/also', middleware, (req, res) => res.send('also'))
  // A second end after the response finished: an 'error' on the response, not a failure.
  app.get('/twice', middleware, (req, res) => {
    res.on('error', () => {})
    res.end('a')
    res.end('b')
  })
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  t.after(() => new Promise((r) => server.close(r)))
  const base = `http://127.0.0.1:${server.address().port}`
  return async (path, n = 1) => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await fetch(base + path)).status)
    return out
  }
}

test('allowList and the off switches (enabled: false, SLUICEGATE_ENABLED=0)', async (t) => {
  const listed = await routes(t, rateLimit({ limit: 1, keyGenerator: (req) => (req.path === '/also' ? 'ops' : 'anon'), allowList: ['ops'] }))
  assert.deepEqual(await listed('/also', 3), [200, 200, 200])
  assert.deepEqual(await listed('/ok', 2), [200, 429])
  const off = rateLimit({ limit: 1, enabled: false })
  const getOff = await serve((req, res, next) => off(req, res, () => { req.rateLimit = { remaining: 'off' }; next() }), t)
  for (let i = 0; i < 3; i++) assert.equal((await getOff()).status, 200)
  assert.equal(off.limiter, null)
  assert.equal(off.get('127.0.0.1'), null)
  process.env.SLUICEGATE_ENABLED = '0'
  let envOff
  try {
    envOff = rateLimit({ limit: 1 })
  } finally {
    delete process.env.SLUICEGATE_ENABLED
  }
  assert.equal(envOff.limiter, null, 'the environment turns every middleware made meanwhile off')
  assert.notEqual(rateLimit({ limit: 1 }).limiter, null)
})

test('skipFailedRequests, skipSuccessfulRequests, requestWasSuccessful: the core refunds', async (t) => {
  const failed = rateLimit({ limit: 2, skipFailedRequests: true })
  const get = await routes(t, failed)
  assert.deepEqual(await get('/fail', 4), [500, 500, 500, 500], 'failed responses give their token back')
  assert.deepEqual(await get('/ok', 3), [200, 200, 429])
  // A response that finished, then emitted 'error' (a second end), was refunded as failed.
  const twice = rateLimit({ limit: 2, skipFailedRequests: true })
  const getTwice = await routes(t, twice)
  assert.deepEqual(await getTwice('/twice', 3), [200, 200, 429])
  const ok = rateLimit({ limit: 2, skipSuccessfulRequests: true })
  const get2 = await routes(t, ok)
  assert.deepEqual(await get2('/ok', 4), [200, 200, 200, 200])
  assert.deepEqual(await get2('/fail', 3), [500, 500, 429])
  const custom = rateLimit({ limit: 2, skipSuccessfulRequests: true, requestWasSuccessful: async (req) => req.path === '/also' })
  const get3 = await routes(t, custom)
  assert.deepEqual(await get3('/also', 3), [200, 200, 200])
  assert.deepEqual(await get3('/ok', 3), [200, 200, 429])
  // The refund comes after the response: wait for the last one before reading the bucket.
  await new Promise((r) => setTimeout(r, 20))
  assert.equal(custom.get('127.0.0.1').remaining, 0)
})

test('several limits on one route (all or nothing), one limit shared by routes, get and reset', async (t) => {
  const mw = rateLimit({ quota: ['3/minute', '4/hour'], keyGenerator: () => 'k' })
  assert.equal(mw.limiters.length, 2)
  const get = await routes(t, mw)
  assert.deepEqual([...await get('/ok', 2), ...await get('/also', 2)], [200, 200, 200, 429], 'one bucket for both routes')
  assert.equal(mw.limiters[1].peek('k').remaining, 1, 'the rejected request took nothing from the hourly limit')
  assert.equal(mw.get('k').remaining, 0)
  assert.equal(mw.reset('k'), true)
  assert.equal(mw.get('k').remaining, 3)
  assert.deepEqual(await get('/ok', 4), [200, 200, 200, 429])
  assert.equal(mw.limiters[1].peek('k').remaining, 1)
  mw.limiters[0].remove('k')
  const last = await get('/ok', 2)
  assert.deepEqual(last, [200, 429], 'the hourly limit rejects now; the minute limit got its token back')
  assert.equal(mw.limiters[0].peek('k').remaining, 2)
  assert.throws(() => rateLimit({ quota: [] }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
})

test('every limit counts its decisions, for registerLimiters and renderPrometheus', async (t) => {
  const mw = rateLimit({ quota: ['2/minute', '5/hour'], keyGenerator: () => 'k' })
  const get = await routes(t, mw)
  assert.deepEqual(await get('/ok', 3), [200, 200, 429])
  const [minute, hour] = mw.limiters.map((l) => l.metrics())
  assert.deepEqual([minute.allowed, minute.rejected, minute.keys], [2, 1, 1])
  assert.deepEqual([hour.allowed, hour.rejected], [2, 0], 'not asked once the minute refused')
  const text = renderPrometheus([[{ limit: 'api' }, mw.limiter], [{ limit: 'api-hourly' }, mw.limiters[1]]])
  assert.match(text, /sluicegate_decisions_total\{limit="api",outcome="rejected"\} 1\n/)
  assert.match(text, /sluicegate_keys\{limit="api-hourly"\} 1\n/)
})

test('shadow: a dry run decides and counts, never rejects; would-be rejections reach onShadowReject', async (t) => {
  const seen = []
  const mw = rateLimit({
    quota: ['2/minute', '3/hour'],
    keyGenerator: () => 'k',
    shadow: true,
    onShadowReject: (_req, key, d) => seen.push([key, d.remaining, d.shadowRejected]),
    skipFailedRequests: true,
  })
  const get = await routes(t, mw)
  assert.deepEqual(await get('/ok', 4), [200, 200, 200, 200], 'nothing rejected')
  assert.deepEqual(seen, [['k', 0, true], ['k', 0, true]], 'requests 3 and 4 would have been rejected')
  // As enforcement would: each limit took 2; the would-be rejections took nothing (the minute
  // limit would have rejected them, so the hourly one was not asked).
  assert.equal(mw.limiters[0].peek('k').remaining, 0)
  assert.equal(mw.limiters[1].peek('k').remaining, 1)
  // A failed request that shadow would have rejected is owed no refund.
  assert.deepEqual(await get('/fail', 1), [500])
  await new Promise((r) => setTimeout(r, 20))
  assert.equal(mw.limiters[0].peek('k').remaining, 0)
  assert.equal(mw.limiters[1].peek('k').remaining, 1)
  assert.throws(() => rateLimit({ shadow: 'yes' }), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG')
})

test('the fields the middleware sets are the ones Decision#headers renders, in every style', async () => {
  const { createRequire } = await import('node:module')
  const { Decision, _internal } = createRequire(import.meta.url)('../index.js')
  const recorder = () => {
    const set = {}
    return { set, setHeader: (name, value) => { set[name] = value } }
  }
  const limiter = new KeyedLimiter({ count: 3, periodMs: 60_000 })
  const decisions = [limiter.tryAcquire('a'), limiter.tryAcquire('a', 3)] // admitted, rejected
  // Figures past 2^53 (BigInt) take the other rendering path.
  decisions.push(new Decision(true, 2n ** 60n, 2n ** 60n - 1n, 0, 1000, 0, 1_000_000_000, 1))
  for (const d of decisions) {
    for (const style of ['draft6', 'draft7', 'ietf', 'legacy', 'none']) {
      for (const policy of ['default', 'per-user']) {
        const r = recorder()
        _internal.setFields(r, d, style, policy)
        assert.deepEqual(r.set, d.headers(style, policy), `${style} ${policy}`)
      }
    }
  }
})

/**
 * Calls `middleware` as Express 4 does (its returned Promise unread) with a bare request and
 * response: resolves with what it passed to `next` (`null`: nothing), or rejects after 2 s
 * when it never calls `next`.
 */
function nextOf(middleware, res = {}) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('next was never called')), 2_000)
    const response = { headersSent: false, setHeader() {}, on() {}, status() { return this }, send() {}, ...res }
    middleware({ headers: {}, socket: { remoteAddress: '127.0.0.1' } }, response, (err) => {
      clearTimeout(timer)
      resolve(err ?? null)
    })
  })
}

test('a throw after an asynchronous step goes to next(err): no request hangs, no rejection is unhandled (Express 4 too)', { timeout: 10_000 }, async (t) => {
  const boom = () => { throw Object.assign(new Error('hook'), { code: 'HOOK' }) }
  const thenable = (v) => ({ then: (ok) => ok(v) })
  const seen = await unhandledRejections(async () => {
    // A key that is no key, from an async function, a thenable, after skip or an allow list.
    for (const o of [
      { keyGenerator: async () => undefined },
      { keyGenerator: () => thenable(undefined) },
      { keyGenerator: async () => undefined, skip: async () => false },
      { keyGenerator: async () => undefined, allowList: ['ops'] },
      { keyGenerator: async () => 'k', allowList: boom },
      { keyGenerator: () => 'k', skip: async () => false, allowList: boom },
      { keyGenerator: async () => 'k', cost: boom },
      { keyGenerator: () => thenable('k'), limiter: new LaterLimiter('1/h'), cost: boom },
    ]) {
      const err = await nextOf(rateLimit(o))
      assert.ok(err instanceof Error, JSON.stringify(Object.keys(o)))
    }
    // A handler or onShadowReject that throws, on a decision that is a Promise.
    const handler = rateLimit({ limiter: new LaterLimiter('1/h; burst=1', { clock: new ManualClock(0) }), keyGenerator: () => 'k', handler: boom })
    assert.equal(await nextOf(handler), null)
    assert.equal((await nextOf(handler)).code, 'HOOK')
    // An async handler that rejects, on a decision made at once and on a Promise (Express 4
    // does not catch a middleware's Promise: the request hung, the rejection unhandled).
    const rejecting = async () => boom()
    for (const o of [{ limit: 1 }, { limiter: new LaterLimiter('1/h; burst=1', { clock: new ManualClock(0) }) }]) {
      const asyncHandler = rateLimit({ ...o, keyGenerator: () => 'k', handler: rejecting })
      assert.equal(await nextOf(asyncHandler), null)
      assert.equal((await nextOf(asyncHandler)).code, 'HOOK', JSON.stringify(Object.keys(o)))
    }
    const shadow = rateLimit({ quota: '1/h', store: undefined, shadow: true, keyGenerator: async () => 'k', onShadowReject: boom })
    assert.equal(await nextOf(shadow), null)
    assert.equal((await nextOf(shadow)).code, 'HOOK')
    // Over HTTP (Express 5), the error handler answers.
    const get = await serve(rateLimit({ keyGenerator: async () => undefined }), t)
    const r = await get()
    assert.equal(r.status, 500)
    assert.match((await r.json()).code, /^ERR_SLUICEGATE_/)
  })
  assert.deepEqual(seen, [])
})

test('a key with a lone surrogate goes to next(err) as ERR_SLUICEGATE_INVALID_ARG, never to the bucket of U+FFFD', async () => {
  const limiter = new KeyedLimiter('1/h', { clock: new ManualClock(0) })
  for (const keyGenerator of [() => '\uD800', async () => 'user-\uDFFF', () => '\uDBFF']) {
    const err = await nextOf(rateLimit({ limiter, keyGenerator }))
    assert.equal(err?.code, 'ERR_SLUICEGATE_INVALID_ARG')
  }
  assert.equal(await nextOf(rateLimit({ limiter, keyGenerator: () => '\uFFFD' })), null, 'U+FFFD itself is a key')
  assert.equal(limiter.size, 1)
})

test('an option given as undefined keeps its default (onFull: evict); headers already sent are left alone', async (t) => {
  const mw = rateLimit({ limit: 2, onFull: undefined, maxKeys: 1, policy: undefined, keyGenerator: (req) => req.get('x-user') })
  const get = await serve(mw, t)
  assert.equal((await get('/', { headers: { 'x-user': 'a' } })).status, 200)
  assert.equal((await get('/', { headers: { 'x-user': 'b' } })).status, 200, 'evicted, not ERR_SLUICEGATE_KEY_STORE_FULL')
  assert.equal(rateLimit({ limit: undefined, windowMs: undefined, requestPropertyName: undefined }).limiter.quota, canonicalQuota({ count: 5, periodMs: 60_000 }))
  const sent = () => { throw Object.assign(new Error('headers sent'), { code: 'ERR_HTTP_HEADERS_SENT' }) }
  assert.equal(await nextOf(rateLimit({ keyGenerator: () => 'k' }), { headersSent: true, setHeader: sent }), null)
})

test('a client gone while the decision is pending is refunded (skipFailedRequests)', { timeout: 10_000 }, async (t) => {
  const held = gate()
  let asked
  const reached = new Promise((r) => { asked = r })
  const limiter = new LaterLimiter('1/h; burst=3', { clock: new ManualClock(0) }, () => { asked(); return held.wait() })
  const app = express()
  app.use(rateLimit({ limiter, skipFailedRequests: true, keyGenerator: () => 'k' }))
  app.get('/', (req, res) => res.send('x'))
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  t.after(() => new Promise((r) => server.close(r)))
  const closed = new Promise((resolve) => server.once('connection', (socket) => socket.once('close', resolve)))
  const r = http.get({ host: '127.0.0.1', port: server.address().port, path: '/' })
  r.on('error', () => {})
  await reached
  r.destroy()
  await closed // the server has seen the client go
  await new Promise((resolve) => setImmediate(resolve))
  held.open()
  await until(() => limiter.decided === 1)
  assert.equal(limiter.decided, 1)
  await until(() => limiter.peek('k').remaining === 3) // the refund follows the decision
  assert.equal(limiter.peek('k').remaining, 3)
})
