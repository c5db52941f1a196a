// The Fastify plugin, through fastify.inject() and a real server on 127.0.0.1 (a free port,
// closed after each test), on the memory, shared-memory and Redis stores.
import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import sluicegate from '../fastify.mjs'
import { KeyedLimiter, ManualClock, renderPrometheus } from '../index.mjs'
import { LaterLimiter, gate, unhandledRejections, until } from './fixtures/later.mjs'
import { needsRedis, serverPerSuite } from './fixtures/redis.mjs'
import { sluicegateWarnings, warnings } from './fixtures/warnings.mjs'

const INVALID_ARG = (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG'

/** A Fastify app with the plugin (`options`) and routes `/` and `/other`, closed after `t`. */
async function app(t, options, routes = (f) => f.get('/other', async () => 'other')) {
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, options)
  f.get('/', async (req) => ({ remaining: req.rateLimit?.remaining ?? null }))
  routes(f)
  await f.ready()
  return f
}

/** The statuses of `n` injected GETs of `url` (with `headers`). */
async function statuses(f, n, url = '/', headers = {}) {
  const out = []
  for (let i = 0; i < n; i++) out.push((await f.inject({ url, headers })).statusCode)
  return out
}

test('429 once over `max`, with x-ratelimit-* and Retry-After, and @fastify/rate-limit\'s error body', async (t) => {
  const f = await app(t, { max: 2, timeWindow: 60_000 })
  const a = await f.inject('/')
  assert.equal(a.statusCode, 200)
  assert.deepEqual(a.json(), { remaining: 1 })
  assert.equal(a.headers['x-ratelimit-limit'], '2')
  assert.equal(a.headers['x-ratelimit-remaining'], '1')
  assert.equal(a.headers['x-ratelimit-reset'], '30')
  assert.equal(a.headers['retry-after'], undefined)
  assert.equal((await f.inject('/')).statusCode, 200)
  const c = await f.inject('/')
  assert.equal(c.statusCode, 429)
  assert.equal(c.headers['retry-after'], '30')
  assert.equal(c.headers['x-ratelimit-remaining'], '0')
  assert.deepEqual(c.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 30 seconds' })
  assert.equal((await f.inject('/other')).statusCode, 429, 'routes without a config share the global limit')
})

test('timeWindow as text, quota, enableDraftSpec and addHeaders', async (t) => {
  const text = await app(t, { max: 3, timeWindow: '1 minute' })
  assert.equal(text.inject ? (await text.inject('/')).headers['x-ratelimit-limit'] : null, '3')
  // @fastify/rate-limit's durations (its `ms` grammar): fractions, short units, bare milliseconds.
  const durations = [
    ['1.5 minutes', '2/90s'], ['10 secs', '2/10s'], ['1w', '2/7d'], ['2 wks', '2/14d'], ['90000', '2/90s'],
    ['4.1 minutes', '2/246s'], ['1.1 hours', '2/66m'], // not whole in binary floating point
  ]
  for (const [w, quota] of durations) {
    const f = await app(t, { max: 2, timeWindow: w })
    assert.equal(f.rateLimits.limiters()[0][0].quota, quota, w)
  }
  await assert.rejects(app(t, { max: 2, timeWindow: '1.5ms' }), (e) => INVALID_ARG(e) && e.message.includes('"1.5ms"'))
  // Bad values named as @fastify/rate-limit names them (the core's said count and periodMs).
  const named = (o, re) => assert.rejects(app(t, o), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG' && re.test(e.message))
  await named({ max: 0 }, /^max must be a whole number of requests, at least 1, got 0$/)
  await named({ max: '5x' }, /^max .* got "5x"$/)
  // A string of digits (from the environment) is that number.
  assert.equal((await app(t, { max: '5', timeWindow: 'minute' })).rateLimits.limiters()[0][0].quota, '5/m')
  assert.equal((await app(t, { max: '5', timeWindow: 60_000 })).rateLimits.limiters()[0][0].quota, '5/m')
  await named({ timeWindow: -5 }, /^timeWindow must be a whole number of milliseconds, at least 1, or a duration \('1 minute'\), got -5$/)
  await assert.rejects(
    app(t, { max: 2, timeWindow: '1 minut' }),
    (e) => e.code === 'ERR_SLUICEGATE_PARSE' && e.message.startsWith('timeWindow "1 minut" is not a duration') && e.cause?.code === 'ERR_SLUICEGATE_PARSE',
  )
  // A period of the rate syntax still reads.
  assert.equal((await app(t, { max: 2, timeWindow: 'minute' })).rateLimits.limiters()[0][0].quota, '2/m')
  const draft6 = await app(t, { quota: '10/s; burst=5', enableDraftSpec: true })
  const r6 = await draft6.inject('/')
  assert.equal(r6.headers['ratelimit-limit'], '5')
  assert.equal(r6.headers['ratelimit-policy'], '5;w=1')
  assert.equal(r6.headers['x-ratelimit-limit'], undefined)
  const draft8 = await app(t, { quota: '10/s; burst=5', enableDraftSpec: 'draft-8', policy: 'api' })
  assert.equal((await draft8.inject('/')).headers.ratelimit, '"api";r=4;t=1')
  const quiet = await app(t, {
    max: 1,
    addHeaders: { 'retry-after': false, 'X-RateLimit-Reset': false },
    addHeadersOnExceeding: { 'x-ratelimit-remaining': false },
  })
  const ok = await quiet.inject('/')
  assert.equal(ok.headers['x-ratelimit-remaining'], undefined)
  assert.equal(ok.headers['x-ratelimit-limit'], '1')
  const no = await quiet.inject('/')
  assert.equal(no.statusCode, 429)
  assert.equal(no.headers['retry-after'], undefined)
  assert.equal(no.headers['x-ratelimit-reset'], undefined)
  assert.equal(no.headers['x-ratelimit-remaining'], '0')
})

test('a route\'s own limit is one for GET and the HEAD route Fastify adds', async (t) => {
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, { max: 100, timeWindow: 60_000 })
  let work = 0
  const cfg = { rateLimit: { max: 2, timeWindow: 60_000 } }
  f.get('/r', { config: cfg }, async () => {
    work++
    return 'ok'
  })
  f.get('/other', { config: cfg }, async () => 'other')
  const codes = []
  for (const method of ['GET', 'HEAD', 'GET', 'HEAD']) codes.push((await f.inject({ method, url: '/r' })).statusCode)
  assert.deepEqual(codes, [200, 200, 429, 429])
  assert.equal(work, 2)
  // Another route given the same config object counts apart.
  assert.equal((await f.inject({ method: 'GET', url: '/other' })).statusCode, 200)
})

test('a leaky queue is refused, globally and per route', async (t) => {
  const f = Fastify()
  t.after(() => f.close())
  await assert.rejects(f.register(sluicegate, { quota: '1/s; algorithm=leaky_queue' }).ready(), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  const g = Fastify()
  t.after(() => g.close())
  await g.register(sluicegate, { global: false })
  assert.throws(
    () => g.get('/q', { config: { rateLimit: { quota: '1/s; algorithm=leaky_queue' } } }, async () => 'q'),
    { code: 'ERR_SLUICEGATE_INVALID_ARG' },
  )
})

test('per-route config.rateLimit, config.rateLimit: false, global: false and groupId', async (t) => {
  const f = await app(t, { max: 1 }, (f) => {
    f.get('/loose', { config: { rateLimit: { max: 3 } } }, async () => 'loose')
    f.get('/free', { config: { rateLimit: false } }, async () => 'free')
  })
  assert.deepEqual(await statuses(f, 2), [200, 429])
  assert.deepEqual(await statuses(f, 4, '/loose'), [200, 200, 200, 429], 'its own limit and bucket')
  assert.deepEqual(await statuses(f, 3, '/free'), [200, 200, 200])

  const g = await app(t, { global: false, max: 2 }, (f) => {
    f.get('/a', { config: { rateLimit: { groupId: 'ab' } } }, async () => 'a')
    f.get('/b', { config: { rateLimit: { groupId: 'ab' } } }, async () => 'b')
    f.get('/c', { config: { rateLimit: {} } }, async () => 'c')
  })
  assert.deepEqual(await statuses(g, 3), [200, 200, 200], 'global: false limits only configured routes')
  assert.deepEqual([...await statuses(g, 1, '/a'), ...await statuses(g, 2, '/b')], [200, 200, 429], 'one group, one bucket')
  assert.deepEqual(await statuses(g, 3, '/c'), [200, 200, 429], 'a route config of its own')
  await assert.rejects(
    app(t, { global: false }, (f) => {
      f.get('/x', { config: { rateLimit: { groupId: 'g', max: 2 } } }, async () => 'x')
      f.get('/y', { config: { rateLimit: { groupId: 'g', max: 3 } } }, async () => 'y')
    }),
    INVALID_ARG,
  )
})

test('keyGenerator (async), allowList (array and function), cost, onExceeding and onExceeded', async (t) => {
  const clock = new ManualClock(0)
  const limiter = new KeyedLimiter('1/h; burst=3', { clock })
  const seen = []
  const f = await app(t, {
    limiter,
    keyGenerator: async (req) => req.headers['x-user'] ?? 'anon',
    allowList: ['admin'],
    cost: (req) => Number(req.headers['x-cost'] ?? 1),
    onExceeding: (req, key) => seen.push(`ok ${key}`),
    onExceeded: (req, key) => seen.push(`no ${key}`),
  })
  const as = (user, cost = 1) => f.inject({ url: '/', headers: { 'x-user': user, 'x-cost': String(cost) } })
  assert.equal((await as('a', 3)).statusCode, 200)
  assert.equal((await as('a')).statusCode, 429)
  assert.equal((await as('b')).statusCode, 200, 'another key, another bucket')
  assert.deepEqual(await statuses(f, 5, '/', { 'x-user': 'admin' }), [200, 200, 200, 200, 200])
  assert.equal(limiter.peek('admin').remaining, 3, 'allow-listed keys are not counted')
  assert.deepEqual(seen, ['ok a', 'no a', 'ok b'])
  clock.advance(3_600_000_000_000n)
  assert.equal((await as('a')).statusCode, 200)

  const byFn = await app(t, { max: 1, allowList: async (req, key) => req.url === '/other' || key === 'never' })
  assert.deepEqual(await statuses(byFn, 3, '/other'), [200, 200, 200])
  assert.deepEqual(await statuses(byFn, 2), [200, 429])
})

test('the plugin\'s limit and a route\'s own rateLimit() hook are all or nothing over a request', async (t) => {
  // The plugin's limit per user, the route's own hook one bucket for everyone.
  const perUser = (req) => req.headers['x-user']
  const f = await app(t, { max: 1, timeWindow: 60_000, keyGenerator: perUser }, (f) => {
    f.get('/tight', { onRequest: f.rateLimit({ max: 3, timeWindow: 60_000, keyGenerator: () => 'everyone' }) }, async () => 'tight')
  })
  const as = async (user) => (await f.inject({ url: '/tight', headers: { 'x-user': user } })).statusCode
  assert.deepEqual([await as('a'), await as('a'), await as('a')], [200, 429, 429])
  // The refused requests gave the route hook's limit its tokens back: two left for b and c.
  assert.deepEqual([await as('b'), await as('c'), await as('d')], [200, 200, 429])
})

test('a cost above the burst: an error when fixed, a 429 when computed; a full key store is a 429', async (t) => {
  await assert.rejects(
    app(t, { max: 2, timeWindow: 60_000, cost: 3 }),
    (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG' && /cost 3 is more than "2\/m" can ever admit/.test(e.message),
  )
  const f = await app(t, {
    max: 2,
    timeWindow: 60_000,
    keyGenerator: (req) => req.headers['x-user'],
    cost: (req) => Number(req.headers['x-cost'] ?? 1),
    maxKeys: 1,
    onFull: 'reject',
  })
  const as = (user, cost = 1) => f.inject({ url: '/', headers: { 'x-user': user, 'x-cost': String(cost) } })
  const over = await as('a', 3)
  assert.equal(over.statusCode, 429)
  assert.equal(over.headers['retry-after'], '60')
  assert.equal((await as('a', 2)).statusCode, 200, 'the refusal took nothing')
  const full = await as('b')
  assert.equal(full.statusCode, 429)
  assert.equal(full.headers['retry-after'], '1')
})

test('errorResponseBuilder, hooks and fastify.rateLimit() on a route\'s own hooks', async (t) => {
  const f = await app(t, {
    global: false,
    max: 1,
    hook: 'preHandler',
    errorResponseBuilder: (req, ctx) => ({ statusCode: ctx.statusCode, code: 'SLOW_DOWN', after: ctx.after, max: ctx.max }),
  }, (f) => {
    f.get('/built', { config: { rateLimit: {} } }, async () => 'ok')
    f.post('/parsed', { config: { rateLimit: { hook: 'preParsing' } } }, async (req) => req.body)
    f.get('/own', { onRequest: f.rateLimit({ max: 2 }) }, async () => 'own')
  })
  assert.equal((await f.inject('/built')).statusCode, 200)
  const no = await f.inject('/built')
  assert.equal(no.statusCode, 429)
  assert.deepEqual(no.json(), { statusCode: 429, code: 'SLOW_DOWN', after: '1 minute', max: 1 })
  const post = () => f.inject({ method: 'POST', url: '/parsed', payload: { a: 1 } })
  const p = await post()
  assert.equal(p.statusCode, 200)
  assert.deepEqual(p.json(), { a: 1 }, 'preParsing hands the payload on')
  assert.equal((await post()).statusCode, 429)
  assert.deepEqual(await statuses(f, 3, '/own'), [200, 200, 429])
})

test('a group\'s hooks are each of the hook point asked for: one limit, a preParsing hook takes the payload', async (t) => {
  const f = await app(t, { global: false }, (f) => {
    f.get('/q', { config: { rateLimit: { max: 3, groupId: 'g' } } }, async () => 'q')
    // The group's first options made an onRequest hook; this one is asked as preParsing.
    f.post('/p', { preParsing: f.rateLimit({ max: 3, groupId: 'g', hook: 'preParsing' }) }, async (req) => req.body)
  })
  assert.equal((await f.inject('/q')).statusCode, 200)
  const post = () => f.inject({ method: 'POST', url: '/p', payload: { a: 1 } })
  const p = await post()
  assert.equal(p.statusCode, 200)
  assert.deepEqual(p.json(), { a: 1 })
  assert.equal((await post()).statusCode, 200)
  assert.equal((await post()).statusCode, 429, 'one limit: the group\'s three requests')
  assert.equal((await f.inject('/q')).statusCode, 429)
})

test('the routes of a group share its limit, each with its own error response, fields and counting', async (t) => {
  const f = await app(t, { global: false, keyGenerator: () => 'k' }, (f) => {
    f.get('/a', { config: { rateLimit: { max: 2, groupId: 'g', errorResponseBuilder: () => ({ statusCode: 429, who: 'a' }) } } }, async () => 'a')
    f.get('/b', {
      config: {
        rateLimit: {
          max: 2, groupId: 'g', enableDraftSpec: 'draft-7', skipFailedRequests: true,
          errorResponseBuilder: () => ({ statusCode: 429, who: 'b' }),
        },
      },
    }, async (req, reply) => reply.code(500).send('no'))
  })
  const b = await f.inject('/b')
  assert.equal(b.statusCode, 500)
  assert.equal(b.headers['ratelimit-limit'], undefined, 'draft-7: one RateLimit field')
  assert.match(b.headers.ratelimit, /limit=2/)
  assert.equal(b.headers['x-ratelimit-limit'], undefined)
  // /b's failure was given back: the group still has both tokens.
  assert.deepEqual(await statuses(f, 2, '/a'), [200, 200])
  assert.equal((await f.inject('/a')).json().who, 'a')
  assert.equal((await f.inject('/b')).json().who, 'b', 'the route\'s own error response (it answered /a\'s)')
  await assert.rejects(
    app(t, { global: false }, (f) => {
      f.get('/x', { config: { rateLimit: { groupId: 'h', max: 2 } } }, async () => 'x')
      f.get('/y', { config: { rateLimit: { groupId: 'h', max: 2, shadow: true } } }, async () => 'y')
    }),
    INVALID_ARG,
  )
})

test('skipOnError: a limiter error is a 500, or lets the request through', async (t) => {
  // A clock read past the limiter's horizon: an error of the limiter, not a refusal.
  const broken = () => {
    const clock = new ManualClock(0)
    const limiter = new KeyedLimiter('1/h', { clock })
    return { limiter, spoil: () => clock.advance(2n ** 64n - 2n) }
  }
  const s = broken()
  const strict = await app(t, { limiter: s.limiter })
  assert.equal((await strict.inject('/')).statusCode, 200)
  s.spoil()
  const err = await strict.inject('/')
  assert.equal(err.statusCode, 500)
  assert.equal(err.json().code, 'ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE')
  const l = broken()
  const lenient = await app(t, { limiter: l.limiter, skipOnError: true })
  l.spoil()
  assert.deepEqual(await statuses(lenient, 2), [200, 200])
})

test('a key with a lone surrogate is a 500 with ERR_SLUICEGATE_INVALID_ARG, not the bucket of U+FFFD', async (t) => {
  const limiter = new KeyedLimiter('1/h', { clock: new ManualClock(0) })
  const f = await app(t, { limiter, keyGenerator: async (req) => (req.headers['x-lone'] ? 'user-\uD800' : 'user-\uFFFD') })
  for (let i = 0; i < 2; i++) {
    const r = await f.inject({ url: '/', headers: { 'x-lone': '1' } })
    assert.equal(r.statusCode, 500)
    assert.equal(r.json().code, 'ERR_SLUICEGATE_INVALID_ARG')
  }
  assert.deepEqual(await statuses(f, 2), [200, 429], 'U+FFFD itself is a key, its own')
  assert.equal(limiter.size, 1)
})

test('a real server on 127.0.0.1: the peer\'s bucket, headers on the wire', async (t) => {
  const f = Fastify()
  t.after(() => f.close())
  // A token every 30 s: the three fetches need not fit the 500 ms of '1 second' (a loaded
  // machine's stalls let the third be admitted); Retry-After is '30', or '29' past a second.
  await f.register(sluicegate, { max: 2, timeWindow: '1 minute' })
  f.get('/', async () => 'hello')
  const base = await f.listen({ port: 0, host: '127.0.0.1' })
  const r = []
  for (let i = 0; i < 3; i++) r.push(await fetch(base))
  assert.deepEqual(r.map((x) => x.status), [200, 200, 429])
  assert.equal(await r[0].text(), 'hello')
  assert.ok(['29', '30'].includes(r[2].headers.get('retry-after')), r[2].headers.get('retry-after'))
  assert.equal(r[2].headers.get('content-type'), 'application/json; charset=utf-8')
})

// A proxy in front that is not trusted (inject's requests come from 127.0.0.1, a loopback peer,
// here with forwarding headers; no trustedProxies): every client shares the proxy's key. The
// plugin says so once, as express-rate-limit's validations do, however many requests, headers
// and routes of the global limit come; the key stays the peer's.
test('an untrusted proxy in front: one SLUICEGATE_UNTRUSTED_PROXY warning for many requests; the key stays the peer\'s', async (t) => {
  const limiter = new KeyedLimiter('1/h; burst=100', { clock: new ManualClock(0) })
  const f = await app(t, { limiter })
  const forwarded = [
    (i) => ({ 'x-forwarded-for': `198.51.100.${i}` }),
    (i) => ({ forwarded: `for=198.51.100.${i}` }),
    (i) => ({ 'x-real-ip': `198.51.100.${i}` }),
    () => ({}),
  ]
  const requests = 60
  const seen = await warnings(async () => {
    for (let i = 0; i < requests; i++) {
      const r = await f.inject({ url: i % 3 ? '/' : '/other', headers: forwarded[i % forwarded.length](i) })
      assert.equal(r.statusCode, 200)
    }
  })
  const burst = limiter.peek('127.0.0.1').limit
  assert.equal(limiter.size, 1, 'one key for every "client"')
  assert.equal(f.rateLimits.get('127.0.0.1').remaining, burst - requests, "the peer's key, every request counted")
  const sg = sluicegateWarnings(seen)
  assert.equal(sg.length, 1, `one warning for ${requests} requests: ${JSON.stringify(sg)}`)
  assert.equal(sg[0][0], 'SLUICEGATE_UNTRUSTED_PROXY')
  assert.match(sg[0][1], /127\.0\.0\.1/)
  // A proxy that is trusted is no misconfiguration: no warning, each client its own key.
  const trusting = new KeyedLimiter('1/h; burst=100', { clock: new ManualClock(0) })
  const g = await app(t, { limiter: trusting, trustedProxies: 'loopback' })
  const quiet = await warnings(async () => {
    for (let i = 0; i < 3; i++) assert.equal((await g.inject({ url: '/', headers: forwarded[0](i) })).statusCode, 200)
  })
  assert.deepEqual(sluicegateWarnings(quiet), [])
  assert.equal(trusting.size, 3)
})

test('bad options fail at registration or at the route', async (t) => {
  const register = async (o) => {
    const f = Fastify()
    t.after(() => f.close())
    await f.register(sluicegate, o)
    await f.ready()
  }
  for (const o of [
    { limit: 5 }, { ban: 2 }, { redis: {} }, { hook: 'onSend' }, { max: () => 3 }, { skipOnError: 'yes' },
    { allowList: 'admin' }, { addHeaders: { 'retry-after': 1 } }, { enableDraftSpec: 'draft-9' },
    { keyGenerator: 'ip' }, { global: 'no' }, { store: {} },
    { store: 'memory', limiter: new KeyedLimiter('1/s') },
  ]) {
    await assert.rejects(register(o), INVALID_ARG, JSON.stringify(o))
  }
  await assert.rejects(register({ max: 0 }), INVALID_ARG) // as Express's limit: 0
  await assert.rejects(register({ timeWindow: 'fortnightly' }), (e) => e.code === 'ERR_SLUICEGATE_PARSE')
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, {})
  assert.throws(() => f.get('/x', { config: { rateLimit: 5 } }, async () => 'x'), INVALID_ARG)
  assert.throws(() => f.get('/y', { config: { rateLimit: { global: false } } }, async () => 'y'), INVALID_ARG)
})

test('allowList by function, enabled: false and SLUICEGATE_ENABLED=0 turn limits off', async (t) => {
  const off = await app(t, { max: 1, enabled: false })
  assert.deepEqual(await statuses(off, 3), [200, 200, 200])
  assert.equal(off.rateLimits.get('127.0.0.1'), null)
  process.env.SLUICEGATE_ENABLED = '0'
  let envOff
  try {
    envOff = await app(t, { max: 1 })
  } finally {
    delete process.env.SLUICEGATE_ENABLED
  }
  assert.deepEqual(await statuses(envOff, 3), [200, 200, 200])
  assert.deepEqual(await statuses(await app(t, { max: 1 }), 2), [200, 429])
})

test('allowList addresses match as the default key keys them: IPv6 by its prefix, IPv4-mapped as IPv4', async (t) => {
  const f = await app(t, { max: 1, allowList: ['::1', '::ffff:10.0.0.9', '2001:db8:1::5'] })
  const from = async (remoteAddress, n) => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await f.inject({ url: '/', remoteAddress })).statusCode)
    return out
  }
  assert.deepEqual(await from('::1', 3), [200, 200, 200], 'a literal ::1 never matched the key ::/64')
  assert.deepEqual(await from('10.0.0.9', 3), [200, 200, 200])
  assert.deepEqual(await from('2001:db8:1::77', 2), [200, 200], 'the listed address\'s /64 is one client')
  assert.deepEqual(await from('2001:db8:2::5', 2), [200, 429])
  // With a keyGenerator of one's own, entries are keys as given.
  const own = await app(t, { max: 1, keyGenerator: (req) => req.ip, allowList: ['::1'] })
  assert.deepEqual((await Promise.all([1, 2].map(() => own.inject({ url: '/', remoteAddress: '::1' })))).map((r) => r.statusCode), [200, 200])
})

test('skipFailedRequests and skipSuccessfulRequests: the response decides whether the request counts', async (t) => {
  const routes = (f) => {
    f.get('/fail', async (req, reply) => reply.code(500).send('no'))
    f.get('/boom', async () => { throw new Error('boom') })
  }
  const failed = await app(t, { max: 2, skipFailedRequests: true }, routes)
  assert.deepEqual([...await statuses(failed, 3, '/fail'), ...await statuses(failed, 2, '/boom')], [500, 500, 500, 500, 500])
  assert.deepEqual(await statuses(failed, 3), [200, 200, 429])
  const ok = await app(t, { max: 2, skipSuccessfulRequests: true }, routes)
  assert.deepEqual(await statuses(ok, 4), [200, 200, 200, 200])
  assert.deepEqual(await statuses(ok, 3, '/fail'), [500, 500, 429])
  const custom = await app(t, { max: 1, skipFailedRequests: true, requestWasSuccessful: (req, reply) => reply.statusCode !== 503 }, (f) => {
    f.get('/busy', async (req, reply) => reply.code(503).send('busy'))
  })
  assert.deepEqual(await statuses(custom, 3, '/busy'), [503, 503, 503])
  assert.deepEqual(await statuses(custom, 2), [200, 429])
})

test('several limits on a route (all or nothing); rateLimits.get/reset for the global limit and a group', async (t) => {
  const f = await app(t, { max: 5, keyGenerator: () => 'k' }, (f) => {
    f.get('/two', { config: { rateLimit: { quota: ['2/minute', '3/hour'] } } }, async () => 'two')
    f.get('/g', { config: { rateLimit: { max: 1, groupId: 'g' } } }, async () => 'g')
  })
  assert.deepEqual(await statuses(f, 3, '/two'), [200, 200, 429])
  assert.deepEqual(await statuses(f, 2, '/g'), [200, 429])
  assert.deepEqual(await statuses(f, 2), [200, 200])
  assert.equal(f.rateLimits.get('k').remaining, 3)
  assert.equal(f.rateLimits.reset('k'), true)
  assert.equal(f.rateLimits.get('k').remaining, 5)
  assert.equal(f.rateLimits.get('k', 'g').remaining, 0)
  assert.equal(f.rateLimits.reset('k', 'g'), true)
  assert.deepEqual(await statuses(f, 1, '/g'), [200])
  assert.throws(() => f.rateLimits.get('k', 'nope'), INVALID_ARG)
  // No global limit to read (it made one, unused, and answered a full bucket).
  const off = await app(t, { global: false, max: 2 })
  assert.throws(() => off.rateLimits.get('k'), INVALID_ARG)
  assert.deepEqual(off.rateLimits.limiters(), [])
  const hook = f.rateLimit({ quota: ['1/minute', '5/hour'] })
  assert.equal(hook.limiters.length, 2)
  assert.equal(hook.get('k').remaining, 1)
})

test('rateLimits.limiters(): every limit the plugin made, labelled, counting for Prometheus', async (t) => {
  const f = await app(t, { max: 2, keyGenerator: () => 'k' }, (f) => {
    f.get('/two', { config: { rateLimit: { quota: ['2/minute', '3/hour'] } } }, async () => 'two')
    f.get('/a', { config: { rateLimit: { max: 1, groupId: 'ab' } } }, async () => 'a')
    f.get('/b', { config: { rateLimit: { max: 1, groupId: 'ab' } } }, async () => 'b')
    f.get('/free', { config: { rateLimit: false } }, async () => 'free')
  })
  const hook = f.rateLimit({ quota: '1/minute' })
  assert.deepEqual(await statuses(f, 3, '/two'), [200, 200, 429])
  assert.deepEqual([...await statuses(f, 1, '/a'), ...await statuses(f, 1, '/b')], [200, 429])
  assert.deepEqual(await statuses(f, 3), [200, 200, 429])
  const series = f.rateLimits.limiters()
  const byLabel = Object.fromEntries(series.map(([labels, l]) => [`${labels.limit} ${labels.quota}`, l.metrics()]))
  assert.deepEqual(Object.keys(byLabel), [
    'global 2/m', 'route:GET /two 2/m', 'route:GET /two 3/h', 'group:ab 1/m', 'hook#1 1/m',
  ])
  const counts = (k) => [byLabel[k].allowed, byLabel[k].rejected]
  assert.deepEqual(counts('global 2/m'), [2, 1], '/ and the HEAD route Fastify adds: one limit')
  // The minute's limit refused the third request first: the hour's was not asked.
  assert.deepEqual(counts('route:GET /two 2/m'), [2, 1])
  assert.deepEqual(counts('route:GET /two 3/h'), [2, 0])
  assert.deepEqual(counts('group:ab 1/m'), [1, 1], 'one group, one limiter')
  assert.equal(series.at(-1)[1], hook.limiter)
  assert.match(renderPrometheus(series), /sluicegate_decisions_total\{limit="group:ab",quota="1\/m",outcome="rejected"\} 1/)
})

test('rateLimits.limiters() lists a plugin registered again within, and leaves out a limiter that counts nothing', async (t) => {
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, { max: 5, keyGenerator: () => 'k' })
  f.get('/', async () => 'root')
  await f.register(async (child) => {
    await child.register(sluicegate, { max: 1, keyGenerator: () => 'k' })
    child.get('/child', async () => 'child')
  })
  await f.ready()
  assert.deepEqual(await statuses(f, 2, '/child'), [200, 429])
  const labels = f.rateLimits.limiters().map(([l, limiter]) => [l.limit, l.quota, limiter.metrics().allowed])
  // The root's limit decided both requests (it got its token back from the child's 429).
  assert.deepEqual(labels, [['global', '5/m', 2], ['global', '1/m', 1]], 'the root\'s global limit and the child\'s')
  const g = await app(t, { limiter: new KeyedLimiter('10/s') })
  assert.deepEqual(g.rateLimits.limiters(), [])
  assert.doesNotMatch(renderPrometheus(g.rateLimits.limiters()), /\{/, 'the families, no series')
})

// The shared-memory store: regions in a temporary folder, removed afterwards.
const dir = mkdtempSync(join(tmpdir(), 'sluicegate-fastify-'))
after(() => rmSync(dir, { recursive: true, force: true }))

test('store shm: two apps (as two processes would) share the clients\' buckets', async (t) => {
  const store = `shm:${join(dir, 'api')}`
  const one = await app(t, { max: 3, store })
  const two = await app(t, { max: 3, store })
  assert.deepEqual([...await statuses(one, 2), ...await statuses(two, 2)], [200, 200, 200, 429])
})

test('store shm: routes and groups of one quota count apart, as in memory; one route in two apps shares', async (t) => {
  for (const store of [undefined, `shm:${join(dir, 'scoped')}`]) {
    const limited = (f) => {
      for (const [url, groupId] of [['/a', undefined], ['/b', undefined], ['/s1', 'search'], ['/s2', 'search'], ['/u', 'upload']]) {
        f.get(url, { config: { rateLimit: { max: 2, timeWindow: 60_000, ...(groupId === undefined ? {} : { groupId }) } } }, async () => 'ok')
      }
    }
    // Two apps of one process stand for two worker processes: a route is one limit in both.
    const one = await app(t, { global: false, store }, limited)
    const two = await app(t, { global: false, store }, limited)
    const seen = {}
    for (const url of ['/a', '/b', '/s1', '/s2', '/u']) seen[url] = await statuses(one, 3, url)
    assert.deepEqual(seen, {
      '/a': [200, 200, 429],
      '/b': [200, 200, 429],
      '/s1': [200, 200, 429],
      '/s2': [429, 429, 429], // the group's two requests went to /s1
      '/u': [200, 200, 429],
    }, String(store))
    // The other app: its own buckets in memory, the first app's on the shared store.
    const shared = store !== undefined
    assert.deepEqual(await statuses(two, 1, '/a'), [shared ? 429 : 200], String(store))
    assert.deepEqual(await statuses(two, 1, '/u'), [shared ? 429 : 200], String(store))
  }
})

describe('store redis', needsRedis(), () => {
  const redis = serverPerSuite()

  test('decisions on the server, answered through Promises; on_error=error is a 503 or, with skipOnError, a pass', async (t) => {
    const f = await app(t, { max: 2, timeWindow: 60_000, store: `${redis.url}?prefix=fastify-${process.pid}` })
    const r = []
    for (let i = 0; i < 3; i++) r.push(await f.inject('/'))
    assert.deepEqual(r.map((x) => x.statusCode), [200, 200, 429])
    assert.equal(r[2].headers['retry-after'], '30')
    const dead = 'redis://127.0.0.1:1/0?timeout=20ms&on_error=error'
    const strict = await app(t, { max: 2, store: dead })
    const e = await strict.inject('/')
    assert.equal(e.statusCode, 503)
    assert.equal(e.json().code, 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
    const lenient = await app(t, { max: 2, store: dead, skipOnError: true })
    assert.equal((await lenient.inject('/')).statusCode, 200)
    // A key that is none is the request's error, not the store's: skipOnError lets it not through.
    for (const store of [dead, `${redis.url}?prefix=fastify-nokey-${process.pid}`]) {
      const noKey = await app(t, { max: 2, store, skipOnError: true, keyGenerator: () => undefined })
      const n = await noKey.inject('/')
      assert.equal(n.statusCode, 500, store)
      assert.equal(n.json().code, 'ERR_SLUICEGATE_INVALID_ARG', store)
    }
  })

  test('several limits, refunds by the response, get and reset: Promises on the server', async (t) => {
    const store = `${redis.url}?prefix=fastify-many-${process.pid}`
    const f = await app(t, { quota: ['2/minute', '3/hour'], store, skipFailedRequests: true, keyGenerator: () => 'k' }, (f) => {
      f.get('/fail', async (req, reply) => reply.code(500).send('no'))
    })
    assert.deepEqual(await statuses(f, 3, '/fail'), [500, 500, 500])
    const deadline = Date.now() + 5_000 // the refunds follow the responses
    while ((await f.rateLimits.get('k')).remaining !== 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
    assert.deepEqual(await statuses(f, 3), [200, 200, 429])
    const [minute, hour] = await Promise.all(f.rateLimit({ quota: ['2/minute', '3/hour'], store }).limiters.map((l) => l.peekAsync('k')))
    assert.equal(minute.remaining, 0)
    assert.equal(hour.remaining, 1, 'the rejected request took nothing from the hourly limit')
    assert.equal(await f.rateLimits.reset('k'), true)
    assert.equal((await f.rateLimits.get('k')).remaining, 2)
  })
})

test('on_error=error: the client gets a 503 without the store\'s address; the log has the store\'s error', async (t) => {
  const lines = []
  const f = Fastify({ logger: { level: 'info', stream: { write: (l) => lines.push(JSON.parse(l)) } } })
  t.after(() => f.close())
  // A user name, host and port a client must not learn (port 1: nothing answers).
  await f.register(sluicegate, { max: 2, store: 'redis://sg-operator@127.0.0.1:1/0?timeout=20ms&on_error=error' })
  f.get('/', async () => 'ok')
  await f.ready()
  const r = await f.inject('/')
  assert.equal(r.statusCode, 503)
  const body = r.json()
  assert.equal(body.code, 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
  assert.equal(body.error, 'Service Unavailable')
  for (const secret of ['sg-operator', '127.0.0.1', ':1/']) assert.ok(!r.body.includes(secret), r.body)
  // Fastify logs a 5xx with its error, the cause's message and stack included: the operator
  // sees which store failed and why.
  const logged = lines.find((l) => l.err?.code === 'ERR_SLUICEGATE_STORE_UNAVAILABLE')
  assert.ok(logged, JSON.stringify(lines))
  assert.equal(logged.level, 50)
  assert.match(logged.err.message, /127\.0\.0\.1:1/)
})

test('shadow: a dry run on a route lets every request through and reports would-be rejections', async (t) => {
  const seen = []
  const f = await app(t, { max: 2, timeWindow: '1 minute', shadow: true, onShadowReject: (_req, key) => seen.push(key) })
  assert.deepEqual(await statuses(f, 4), [200, 200, 200, 200])
  assert.deepEqual(seen, ['127.0.0.1', '127.0.0.1'])
  const d = (await f.inject({ url: '/' })).json()
  assert.equal(d.remaining, 0)
})

/** `limiter`'s remaining for `key` once it is `want`, or what it is after a bounded wait (refunds follow responses). */
async function settledRemaining(limiter, key, want) {
  const deadline = Date.now() + 2_000
  while (limiter.peek(key).remaining !== want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5))
  return limiter.peek(key).remaining
}

test('fastify.rateLimit() hooks with response counting are refunded, on a route\'s hooks or a scope\'s, once', async (t) => {
  const f = await app(t, { global: false }, (f) => {
    f.get('/x', { onRequest: f.rateLimit({ max: 2, skipFailedRequests: true }) }, async (req, reply) => reply.code(500).send('no'))
    f.register(async (child) => {
      child.addHook('preHandler', f.rateLimit({ max: 2, skipSuccessfulRequests: true, keyGenerator: () => 'scoped' }))
      child.get('/scoped', async () => 'ok')
    })
  })
  assert.deepEqual(await statuses(f, 4, '/x'), [500, 500, 500, 500], 'failed requests give their token back')
  assert.deepEqual(await statuses(f, 4, '/scoped'), [200, 200, 200, 200], 'on a scope\'s hooks too')

  // One group, on one route by config.rateLimit and on another (and on the first too) by
  // fastify.rateLimit(): each admitted request is refunded once, never twice.
  const limiter = new KeyedLimiter('1/h; burst=3', { clock: new ManualClock(0) })
  const group = { groupId: 'g', limiter, skipFailedRequests: true, keyGenerator: () => 'k' }
  const g = await app(t, { global: false }, (f) => {
    f.get('/ok', { config: { rateLimit: group } }, async () => 'ok')
    f.get('/both', { config: { rateLimit: group }, preHandler: f.rateLimit(group) }, async (req, reply) => reply.code(500).send('no'))
    f.get('/own', { onRequest: f.rateLimit(group) }, async (req, reply) => reply.code(500).send('no'))
  })
  assert.deepEqual(await statuses(g, 1, '/ok'), [200])
  assert.equal(limiter.peek('k').remaining, 2)
  assert.deepEqual(await statuses(g, 1, '/own'), [500])
  assert.equal(await settledRemaining(limiter, 'k', 2), 2)
  assert.deepEqual(await statuses(g, 1, '/both'), [500])
  await new Promise((r) => setTimeout(r, 20))
  assert.equal(limiter.peek('k').remaining, 2, 'two limits on the route, two refunds: each once')
})

test('a route\'s max/timeWindow is its own limit: the plugin\'s quota, limiter and burst do not override it', async (t) => {
  const f = await app(t, { quota: '100/minute' }, (f) => {
    f.get('/five', { config: { rateLimit: { max: 2 } } }, async () => 'five')
    f.get('/own', { onRequest: f.rateLimit({ max: 2 }) }, async () => 'own')
    f.get('/quota', { config: { rateLimit: { quota: '1/minute' } } }, async () => 'quota')
  })
  assert.deepEqual(await statuses(f, 3, '/five'), [200, 200, 429])
  assert.deepEqual(await statuses(f, 3, '/own'), [200, 200, 429])
  assert.deepEqual(await statuses(f, 2, '/quota'), [200, 429])
  assert.equal((await f.inject('/')).headers['x-ratelimit-limit'], '100', 'routes without a config: the plugin\'s quota')

  const byLimiter = await app(t, { limiter: new KeyedLimiter('100/minute') }, (f) => {
    f.get('/two', { config: { rateLimit: { max: 2 } } }, async () => 'two')
  })
  assert.deepEqual(await statuses(byLimiter, 3, '/two'), [200, 200, 429])
  const byBurst = await app(t, { max: 10, burst: 50 }, (f) => {
    f.get('/two', { config: { rateLimit: { max: 2 } } }, async () => 'two')
  })
  assert.deepEqual(await statuses(byBurst, 3, '/two'), [200, 200, 429], 'the plugin\'s burst is the plugin\'s max\'s')
  // max and timeWindow fill in from the plugin's, as in @fastify/rate-limit, unless the route gives a quota.
  const hourly = await app(t, { max: 5, timeWindow: '1 hour' }, (f) => {
    f.get('/two', { config: { rateLimit: { max: 2 } } }, async () => 'two')
    f.get('/q', { config: { rateLimit: { quota: '2/minute' } } }, async () => 'q')
  })
  assert.equal((await hourly.inject('/two')).headers['x-ratelimit-reset'], '1800', '2 per the plugin\'s hour')
  assert.equal((await hourly.inject('/q')).headers['x-ratelimit-reset'], '30')
})

test('a throw after an asynchronous step is the request\'s error: no request hangs, no rejection is unhandled', { timeout: 10_000 }, async (t) => {
  const boom = () => { throw Object.assign(new Error('hook'), { code: 'HOOK' }) }
  const later = () => new LaterLimiter('1/h; burst=1', { clock: new ManualClock(0) })
  const seen = await unhandledRejections(async () => {
    for (const o of [{ onExceeded: boom }, { errorResponseBuilder: boom }, { onExceeded: boom, skipOnError: true }]) {
      const f = await app(t, { limiter: later(), ...o })
      assert.deepEqual(await statuses(f, 2), [200, 500], JSON.stringify(Object.keys(o)))
      assert.equal((await f.inject('/')).json().code, 'HOOK')
    }
    const admitted = await app(t, { limiter: later(), onExceeding: boom })
    assert.equal((await admitted.inject('/')).statusCode, 500)
    // A key (a thenable, not a Promise) that is no key: the request's error (skipOnError or not).
    const thenable = (v) => ({ then: (ok) => ok(v) })
    const noKey = await app(t, { max: 5, keyGenerator: () => thenable(undefined) })
    const e = await noKey.inject('/')
    assert.equal(e.statusCode, 500)
    assert.match(e.json().code, /^ERR_SLUICEGATE_/)
    const cost = await app(t, { max: 5, keyGenerator: async () => 'k', cost: boom, skipOnError: true })
    assert.equal((await cost.inject('/')).json().code, 'HOOK', 'a throw of cost is no store failure')
    const allow = await app(t, { max: 5, keyGenerator: async () => 'k', allowList: boom })
    assert.equal((await allow.inject('/')).json().code, 'HOOK')
  })
  assert.deepEqual(seen, [])
})

test('skipOnError never admits a request whose keyGenerator or cost gave no key or cost: the request\'s error', async (t) => {
  const keys = [() => undefined, () => ({}), () => 1.5, async () => undefined, async () => ({ id: 1 })]
  for (const keyGenerator of keys) {
    const f = await app(t, { max: 5, skipOnError: true, keyGenerator })
    const r = await f.inject('/')
    assert.equal(r.statusCode, 500, String(keyGenerator))
    assert.equal(r.json().code, 'ERR_SLUICEGATE_INVALID_ARG', String(keyGenerator))
  }
  const cost = await app(t, { max: 5, skipOnError: true, cost: () => 'two' })
  const r = await cost.inject('/')
  assert.equal(r.statusCode, 500)
  assert.equal(r.json().code, 'ERR_SLUICEGATE_INVALID_ARG')
})

test('skipOnError never admits a rejected request whose onExceeded or errorResponseBuilder throws', async (t) => {
  const boom = () => { throw new Error('hook') }
  for (const o of [{ onExceeded: boom }, { errorResponseBuilder: boom }, { errorResponseBuilder: () => undefined }]) {
    const f = await app(t, { max: 1, skipOnError: true, ...o })
    const [first, second] = await statuses(f, 2)
    assert.equal(first, 200)
    assert.notEqual(second, 200, JSON.stringify(Object.keys(o)))
  }
})

test('an option given as undefined keeps its default; policy is checked', async (t) => {
  const f = await app(t, {
    max: 2, policy: undefined, onFull: undefined, hook: undefined, skipOnError: undefined, global: undefined, maxKeys: 1,
    keyGenerator: (req) => req.headers['x-user'],
  }, (f) => {
    f.get('/route', { config: { rateLimit: { max: undefined, quota: undefined } } }, async () => 'route')
  })
  const as = (user, url = '/') => f.inject({ url, headers: { 'x-user': user } })
  assert.equal((await as('a')).statusCode, 200)
  assert.equal((await as('b')).statusCode, 200, 'onFull: undefined is the default, evict')
  assert.equal((await as('c', '/route')).headers['x-ratelimit-limit'], '2', 'a route\'s max: undefined is the plugin\'s')
  const draft8 = await app(t, { enableDraftSpec: 'draft-8', policy: undefined })
  assert.equal((await draft8.inject('/')).headers.ratelimit, '"default";r=999;t=1')
  const register = async (o) => {
    const g = Fastify()
    t.after(() => g.close())
    await g.register(sluicegate, o)
    await g.ready()
  }
  await assert.rejects(register({ policy: 5 }), INVALID_ARG)
  await assert.rejects(register({ policy: null }), INVALID_ARG)
})

/**
 * A GET of `path` on `server` that the client abandons once `asked()` resolves (the server
 * deciding); resolves once the server has seen the connection close.
 */
async function abandoned(server, path, asked) {
  const closed = new Promise((resolve) => server.once('connection', (socket) => socket.once('close', resolve)))
  const r = http.get({ host: '127.0.0.1', port: server.address().port, path })
  r.on('error', () => {})
  await asked()
  r.destroy()
  await closed
  await new Promise((resolve) => setImmediate(resolve))
}

test('a client gone while the decision is pending is refunded (skipFailedRequests)', { timeout: 10_000 }, async (t) => {
  for (const own of [false, true]) {
    const held = gate()
    let asked
    const reached = new Promise((r) => { asked = r })
    const limiter = new LaterLimiter('1/h; burst=3', { clock: new ManualClock(0) }, () => { asked(); return held.wait() })
    const f = Fastify()
    t.after(() => f.close())
    const options = { limiter, skipFailedRequests: true, keyGenerator: () => 'k' }
    await f.register(sluicegate, own ? { global: false } : options)
    f.get('/', own ? { onRequest: f.rateLimit(options) } : {}, async () => 'x')
    await f.listen({ port: 0, host: '127.0.0.1' })
    await abandoned(f.server, '/', () => reached)
    held.open()
    await until(() => limiter.decided === 1)
    assert.equal(limiter.decided, 1)
    assert.equal(await settledRemaining(limiter, 'k', 3), 3, own ? 'fastify.rateLimit()' : 'the plugin\'s limit')
  }
})
