// Client identity: the core's ClientResolver through the binding, and the default key of the
// Express middleware and the Fastify plugin. Forged headers: a client sending X-Forwarded-For
// past no trusted proxy keeps its own key; behind a trusted proxy the right hop is used;
// the 2^16 addresses of one /64 share one bucket; IPv4-mapped IPv6 is IPv4.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import express from 'express'
import Fastify from 'fastify'
import inject from 'light-my-request'
import rateLimit from '../express.mjs'
import sluicegate from '../fastify.mjs'
import { ClientResolver } from '../index.mjs'
import { warnings } from './fixtures/warnings.mjs'

const INVALID_ARG = (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG'
const INVALID_OPTION = (e) => e.code === 'ERR_SLUICEGATE_INVALID_OPTION'

test('ClientResolver: the peer by default, proxies only when trusted, IPv6 by /64, IPv4-mapped as IPv4', () => {
  const direct = new ClientResolver()
  assert.equal(direct.trustedProxies, 'none')
  assert.equal(direct.ipv6Subnet, 64)
  assert.equal(direct.resolve('203.0.113.7', { 'x-forwarded-for': '1.2.3.4' }), '203.0.113.7', 'a forged header changes nothing')
  assert.equal(direct.resolve('::ffff:198.51.100.9'), '198.51.100.9')
  assert.equal(direct.resolve('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2::/64')
  assert.equal(direct.resolve(undefined), 'unknown')
  const one = new ClientResolver({ trustedProxies: 1 })
  assert.equal(one.resolve('10.0.0.2', { 'x-forwarded-for': '6.6.6.6, 203.0.113.7' }), '203.0.113.7', 'the hop the proxy appended')
  const ranges = new ClientResolver({ trustedProxies: ['10.0.0.0/8', 'loopback'], ipv6Subnet: 48 })
  assert.equal(ranges.resolve('127.0.0.1', { 'x-forwarded-for': ['6.6.6.6, 2001:db8:1:2::9', '10.1.1.1'] }), '2001:db8:1::/48', 'the right-most untrusted hop')
  assert.equal(ranges.resolve('192.0.2.1', { 'x-forwarded-for': '6.6.6.6' }), '192.0.2.1', 'the header of an untrusted peer is ignored')
  const fwd = new ClientResolver({ trustedProxies: 'loopback', proxyHeader: 'forwarded' })
  assert.equal(fwd.resolve('::1', { forwarded: 'for="[2001:db8::1]:4711"', 'x-forwarded-for': '6.6.6.6' }), '2001:db8::/64')
  assert.equal(fwd.keyOf({ socket: { remoteAddress: '::1' }, headers: { forwarded: 'for=192.0.2.60' } }), '192.0.2.60')
})

test('ClientResolver: header values that are not text are typed errors', () => {
  const one = new ClientResolver({ trustedProxies: 1 })
  for (const headers of [{ 'x-forwarded-for': 5 }, { forwarded: ['for=1.2.3.4', 7] }, { 'x-real-ip': {} }]) {
    assert.throws(() => one.resolve('10.0.0.2', headers), INVALID_ARG, JSON.stringify(headers))
  }
  assert.throws(() => one.resolve('10.0.0.2', null), INVALID_ARG)
  // Options: a prefix past what the addon's 32-bit integer holds does not wrap; a misspelt name is an error.
  assert.throws(() => new ClientResolver({ ipv6Subnet: 2 ** 32 + 64 }), INVALID_ARG)
  assert.throws(() => new ClientResolver({ ipv6Prefix: 48 }), (e) => INVALID_ARG(e) && e.message.includes('"ipv6Prefix"'))
  // A Unix-socket proxy (no peer address) under a hop count: its header is read.
  assert.equal(one.resolve(undefined, { 'x-forwarded-for': '6.6.6.6, 198.51.100.9' }), '198.51.100.9')
})

test('ClientResolver: 2^16 addresses of one /64 are one key; the next /64 is another', () => {
  const r = new ClientResolver()
  const keys = new Set()
  for (let i = 0; i < 65_536; i++) keys.add(r.resolve(`2001:db8:aa:bb:${(i >> 8).toString(16)}:${(i & 255).toString(16)}::1`))
  assert.deepEqual([...keys], ['2001:db8:aa:bb::/64'])
  assert.equal(r.resolve('2001:db8:aa:bc::1'), '2001:db8:aa:bc::/64')
  assert.equal(new ClientResolver({ ipv6Subnet: 128 }).resolve('2001:db8:aa:bb::1'), '2001:db8:aa:bb::1')
})

test('ClientResolver: typed errors, and a misconfiguration warned about once', async () => {
  for (const o of [{ trustedProxies: 'everyone' }, { trustedProxies: 65 }, { proxyHeader: 'x-real-ip' }, { ipv6Subnet: 129 }, { ipv6Subnet: 0 }]) {
    assert.throws(() => new ClientResolver(o), INVALID_OPTION, JSON.stringify(o))
    // The option by its Node name, as it was given (the core's messages use Rust's).
    assert.throws(() => new ClientResolver(o), (e) => e.message.startsWith(Object.keys(o)[0]) && !e.message.includes('_'), JSON.stringify(o))
  }
  // An array holds one address, range or name per item: ['2'] was a hop count, ['none'] or
  // [''] no proxy, and an item with a comma several ranges (as the text form reads them).
  for (const o of [{ trustedProxies: 1.5 }, { trustedProxies: {} }, { ipv6Subnet: '64' }, { ipv6Subnet: 1000 }, { proxyHeader: 1 },
    { trustedProxies: ['2'] }, { trustedProxies: ['none'] }, { trustedProxies: [''] }, { trustedProxies: ['10.0.0.0/8, 11.0.0.0/8'] }]) {
    assert.throws(() => new ClientResolver(o), INVALID_ARG, JSON.stringify(o))
  }
  assert.throws(() => new ClientResolver().resolve(42), INVALID_ARG)
  const r = new ClientResolver()
  const seen = await warnings(() => {
    for (let i = 0; i < 3; i++) assert.equal(r.resolve('10.0.0.5', { 'x-forwarded-for': `198.51.100.${i}` }), '10.0.0.5')
  })
  const untrusted = seen.filter((w) => w.code === 'SLUICEGATE_UNTRUSTED_PROXY')
  assert.deepEqual(untrusted.map((w) => w.name), ['SluicegateWarning'], 'once, for three requests')
  assert.match(untrusted[0].message, /no trusted proxy covers 10\.0\.0\.5/)
  assert.match(untrusted[0].message, /Set trustedProxies to/, 'the option by its Node name')
})

/** An Express app with `middleware` on 127.0.0.1 and a free port; `get(headers)` is a status. */
async function expressServer(t, middleware) {
  const app = express()
  app.use(middleware)
  app.get('/', (req, res) => res.send('ok'))
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  t.after(() => new Promise((r) => server.close(r)))
  return async (headers = {}) => (await fetch(`http://127.0.0.1:${server.address().port}/`, { headers })).status
}

/** A Fastify app with the plugin (`options`) on 127.0.0.1 and a free port; `get(headers)` is a status. */
async function fastifyServer(t, options) {
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, options)
  f.get('/', async () => 'ok')
  const base = await f.listen({ port: 0, host: '127.0.0.1' })
  return async (headers = {}) => (await fetch(base, { headers })).status
}

for (const [name, server] of [
  ['Express', (t, o) => expressServer(t, rateLimit({ limit: 2, ...o }))],
  ['Fastify', (t, o) => fastifyServer(t, { max: 2, ...o })],
]) {
  test(`${name}, real server: a forged X-Forwarded-For past no trusted proxy keeps the peer's key`, async (t) => {
    const get = await server(t, {})
    const forged = []
    for (let i = 0; i < 3; i++) forged.push(await get({ 'x-forwarded-for': `198.51.100.${i}` }))
    assert.deepEqual(forged, [200, 200, 429], 'three "clients" are the one peer')
  })

  test(`${name}, real server: behind a trusted proxy the right-most untrusted hop is the key`, async (t) => {
    // The test client is the proxy: it connects from 127.0.0.1 (trusted as `loopback`).
    const get = await server(t, { trustedProxies: 'loopback' })
    const as = (chain) => get({ 'x-forwarded-for': chain })
    // The client may write anything left of the hop the proxy appended: it keys nothing.
    assert.deepEqual([await as('1.1.1.1, 203.0.113.7'), await as('2.2.2.2, 203.0.113.7'), await as('203.0.113.7')], [200, 200, 429])
    assert.equal(await as('203.0.113.8'), 200, 'another client, its own bucket')
    assert.equal(await as('203.0.113.9, 127.0.0.5'), 200, 'trusted hops are skipped')
    assert.equal(await as('203.0.113.9'), 200)
    assert.equal(await as('203.0.113.9'), 429)
    const hops = await server(t, { trustedProxies: 1 })
    assert.deepEqual([await hops({ 'x-forwarded-for': '9.9.9.9, 198.51.100.1' }), await hops({ 'x-forwarded-for': '198.51.100.1' }), await hops({ 'x-forwarded-for': '198.51.100.1' })], [200, 200, 429])
  })
}

test('IPv6 through both adapters: addresses of one /64 share one bucket; IPv4-mapped is IPv4', async (t) => {
  const exp = express()
  // An hour's window: 256 requests on a loaded machine take long enough for a minute's
  // window to refill a token before the check that the /64 is spent.
  exp.use(rateLimit({ limit: 256, windowMs: 3_600_000 }))
  exp.get('/', (req, res) => res.send('ok'))
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, { max: 256, timeWindow: 3_600_000 })
  f.get('/', async () => 'ok')
  await f.ready()
  for (const send of [(o) => inject(exp, o), (o) => f.inject(o)]) {
    const statuses = new Set()
    for (let i = 0; i < 256; i++) {
      statuses.add((await send({ url: '/', remoteAddress: `2001:db8:5:6:${(i * 257).toString(16)}:${i.toString(16)}::${i.toString(16)}` })).statusCode)
    }
    assert.deepEqual([...statuses], [200])
    assert.equal((await send({ url: '/', remoteAddress: '2001:db8:5:6::ffff' })).statusCode, 429, 'the /64 is spent')
    assert.equal((await send({ url: '/', remoteAddress: '2001:db8:5:7::1' })).statusCode, 200, 'the next /64 is not')
    for (let i = 0; i < 255; i++) await send({ url: '/', remoteAddress: '192.0.2.44' })
    assert.equal((await send({ url: '/', remoteAddress: '::ffff:192.0.2.44' })).statusCode, 200)
    assert.equal((await send({ url: '/', remoteAddress: '::ffff:192.0.2.44' })).statusCode, 429, 'one client, however written')
  }
})

test('the default key\'s options: checked, and refused beside a keyGenerator', async (t) => {
  assert.throws(() => rateLimit({ trustedProxies: 'everyone' }), INVALID_OPTION)
  assert.throws(() => rateLimit({ trustedProxies: 1, keyGenerator: (req) => req.ip }), INVALID_ARG)
  assert.throws(() => rateLimit({ ipv6Subnet: 56, keyGenerator: (req) => req.ip }), INVALID_ARG)
  assert.equal(rateLimit({ keyGenerator: (req) => req.ip }).limiter.size, 0)
  const f = Fastify()
  t.after(() => f.close())
  await assert.rejects(async () => { await f.register(sluicegate, { ipv6Subnet: 56, keyGenerator: (req) => req.ip }) }, INVALID_ARG)
  const g = Fastify()
  t.after(() => g.close())
  await g.register(sluicegate, { trustedProxies: 1 })
  assert.throws(() => g.get('/x', { config: { rateLimit: { ipv6Subnet: 48, keyGenerator: () => 'k' } } }, async () => 'x'), INVALID_ARG)
  g.get('/y', { config: { rateLimit: { keyGenerator: () => 'k' } } }, async () => 'y') // the route's own key: fine
})

test('ipv6Subnet: false (express-rate-limit v8): no subnet, the whole address is the key, in both adapters', async (t) => {
  const whole = new ClientResolver({ ipv6Subnet: false })
  assert.equal(whole.ipv6Subnet, 128)
  assert.equal(whole.resolve('2001:db8:1:2::1'), '2001:db8:1:2::1')
  assert.equal(whole.resolve('::ffff:192.0.2.1'), '192.0.2.1')
  const exp = express()
  exp.use(rateLimit({ limit: 1, windowMs: 3_600_000, ipv6Subnet: false }))
  exp.get('/', (req, res) => res.send('ok'))
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, { max: 1, timeWindow: 3_600_000, ipv6Subnet: false })
  f.get('/', async () => 'ok')
  for (const send of [(o) => inject(exp, o), (o) => f.inject(o)]) {
    const status = async (remoteAddress) => (await send({ url: '/', remoteAddress })).statusCode
    assert.equal(await status('2001:db8:1:2::1'), 200)
    assert.equal(await status('2001:db8:1:2::2'), 200, 'another address of the /64: a key of its own')
    assert.equal(await status('2001:db8:1:2::1'), 429)
  }
  assert.throws(() => rateLimit({ ipv6Subnet: true }), INVALID_ARG)
  assert.throws(() => rateLimit({ ipv6Subnet: false, keyGenerator: (req) => req.ip }), INVALID_ARG, 'it shapes the default key')
})

test('Fastify: a route\'s default-key options make its key, over the plugin\'s keyGenerator', async (t) => {
  const f = Fastify()
  t.after(() => f.close())
  await f.register(sluicegate, { max: 1, timeWindow: 3_600_000, keyGenerator: () => 'everyone' })
  f.get('/proxied', { config: { rateLimit: { trustedProxies: 'loopback' } } }, async () => 'p')
  f.get('/forwarded', { config: { rateLimit: { trustedProxies: 'loopback', proxyHeader: 'forwarded' } } }, async () => 'f')
  f.get('/v6', { config: { rateLimit: { ipv6Subnet: 48 } } }, async () => 'v6')
  f.get('/plain', async () => 'plain')
  await f.ready()
  const status = async (url, headers, remoteAddress = '127.0.0.1') => (await f.inject({ url, headers, remoteAddress })).statusCode
  // The test client is the trusted proxy (127.0.0.1): each client behind it has its own key.
  assert.deepEqual([
    await status('/proxied', { 'x-forwarded-for': '203.0.113.1' }),
    await status('/proxied', { 'x-forwarded-for': '203.0.113.2' }),
    await status('/proxied', { 'x-forwarded-for': '203.0.113.1' }),
  ], [200, 200, 429])
  assert.deepEqual([
    await status('/forwarded', { forwarded: 'for=203.0.113.1' }),
    await status('/forwarded', { forwarded: 'for=203.0.113.2' }),
  ], [200, 200])
  assert.deepEqual([
    await status('/v6', {}, '2001:db8:1:2::1'),
    await status('/v6', {}, '2001:db8:1:3::1'),
    await status('/v6', {}, '2001:db8:2::1'),
  ], [200, 429, 200], 'one key per /48')
  // The global limit (all but the route on the plugin's hook) keeps the plugin's key, one for all.
  assert.deepEqual([await status('/plain', {}, '192.0.2.1'), await status('/plain', {}, '192.0.2.2')], [200, 429])
  // A fastify.rateLimit() hook's options too.
  const g = Fastify()
  t.after(() => g.close())
  await g.register(sluicegate, { global: false, max: 1, timeWindow: 3_600_000, keyGenerator: () => 'everyone' })
  g.get('/hooked', { onRequest: g.rateLimit({ ipv6Subnet: false }) }, async () => 'h')
  const hooked = async (remoteAddress) => (await g.inject({ url: '/hooked', remoteAddress })).statusCode
  assert.deepEqual([await hooked('2001:db8::1'), await hooked('2001:db8::2'), await hooked('2001:db8::1')], [200, 200, 429])
})

test('keyOf keeps a peer\'s key on its socket only while no forwarding header comes', async () => {
  const socket = { remoteAddress: '2001:db8::1' }
  const direct = new ClientResolver()
  const wide = new ClientResolver({ ipv6Subnet: 32, trustedProxies: 'private' })
  assert.equal(direct.keyOf({ socket, headers: {} }), '2001:db8::/64')
  assert.equal(wide.keyOf({ socket, headers: {} }), '2001:db8::/32', 'each resolver its own key for the socket')
  assert.equal(direct.keyOf({ socket, headers: {} }), '2001:db8::/64')
  const proxy = { remoteAddress: '10.0.0.9' }
  assert.equal(wide.keyOf({ socket: proxy, headers: {} }), '10.0.0.9')
  assert.equal(wide.keyOf({ socket: proxy, headers: { 'x-forwarded-for': '203.0.113.7' } }), '203.0.113.7', 'headers are read on every request')
  assert.equal(wide.keyOf({ socket: proxy, headers: { 'x-forwarded-for': '203.0.113.8' } }), '203.0.113.8')
  assert.equal(direct.keyOf({ headers: {} }), 'unknown')
})

test('keyOf on new connections: a known peer\'s key is the one resolve gives, past the peers a resolver keeps', () => {
  const wide = new ClientResolver({ ipv6Subnet: 48, trustedProxies: 'private' })
  const peers = Array.from({ length: 5000 }, (_, i) => (i % 2 ? `2001:db8:${i.toString(16)}::${i}` : `198.51.${i >> 8}.${i & 255}`))
  for (let round = 0; round < 2; round++) {
    for (const p of peers) {
      // A fresh socket object each time (a new connection), from a peer seen before.
      assert.equal(wide.keyOf({ socket: { remoteAddress: p }, headers: {} }), wide.resolve(p, {}), p)
    }
  }
  // A forwarding header on a new connection from a kept peer is still read.
  assert.equal(wide.keyOf({ socket: { remoteAddress: '10.0.0.9' }, headers: {} }), '10.0.0.9')
  assert.equal(wide.keyOf({ socket: { remoteAddress: '10.0.0.9' }, headers: { 'x-forwarded-for': '203.0.113.9' } }), '203.0.113.9')
})
