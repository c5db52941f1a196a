// Every error path: a stable `code`, never a crash.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Limiter, KeyedLimiter, Composite, ManualClock, canonicalQuota } from '../index.mjs'
import sg from '../index.mjs'

const code = (c) => (e) => {
  assert.ok(e instanceof Error, 'an Error')
  assert.equal(e.code, c)
  return true
}
const INVALID_ARG = code('ERR_SLUICEGATE_INVALID_ARG')
const INVALID_OPTION = code('ERR_SLUICEGATE_INVALID_OPTION')

test('quota errors: parse and invalid quota', () => {
  assert.throws(() => new Limiter('10/fortnight'), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new Limiter(''), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new Limiter('0/s'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter('1/s; burst=2; initial=3'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ count: 0, periodMs: 1000 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ count: 1, periodMs: 0 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ count: 1, periodMs: 1, burst: 0 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter('1/d; burst=18446744073709551615'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => canonicalQuota('nope'), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new KeyedLimiter('0/s'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
})

test('quota options of the wrong type or value', () => {
  for (const bad of [undefined, null, 10, true, [], () => 1]) {
    assert.throws(() => new Limiter(bad), INVALID_ARG, String(bad))
  }
  assert.throws(() => new Limiter({ periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: -1, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1.5, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: NaN, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: '1000' }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: 1000, refill: 5 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: 1000, algorithm: {} }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: 1000, bust: 3 }), INVALID_ARG)
  // The names of before the core's vocabulary are unknown options now.
  assert.throws(() => new Limiter({ rate: 1, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ limit: 1, windowMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: -1n, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter('1/s', { clock: {} }), INVALID_ARG)
  assert.throws(() => new Limiter('1/s', 5), INVALID_ARG)
})

test('costs of the wrong type or value throw, on every entry point', () => {
  const l = new Limiter('10/s')
  const k = new KeyedLimiter('10/s')
  const bad = [-1, 1.5, NaN, Infinity, -Infinity, 2 ** 53, '1', null, {}, true, -1n, 2n ** 64n]
  for (const cost of bad) {
    const what = typeof cost === 'bigint' ? `${cost}n` : String(cost)
    assert.throws(() => l.allow(cost), INVALID_ARG, what)
    assert.throws(() => l.tryAcquire(cost), INVALID_ARG, what)
    assert.throws(() => l.refund(cost), INVALID_ARG, what)
    assert.throws(() => k.allow('a', cost), INVALID_ARG, what)
    assert.throws(() => k.tryAcquire('a', cost), INVALID_ARG, what)
    assert.throws(() => k.refund('a', cost), INVALID_ARG, what)
  }
  // A number written as JavaScript writes it (Rust's spelling said `got inf`).
  const said = (cost) => { try { l.tryAcquire(cost) } catch (e) { return e.message } return null }
  assert.match(said(Infinity), /got Infinity$/)
  assert.match(said(-Infinity), /got -Infinity$/)
  assert.match(said(NaN), /got NaN$/)
  assert.match(said(1.5), /got 1\.5$/)
  assert.match(said(1e300), /got 1e\+300$/)
  assert.match(said(-1), /got -1$/)
  // In range: a BigInt up to 2^64-1 is a valid cost (and then too large for the bucket).
  assert.throws(() => l.tryAcquire(2n ** 64n - 1n), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
})

test('keys of the wrong type throw', () => {
  const k = new KeyedLimiter('10/s')
  const bad = [undefined, null, 1.5, NaN, 2 ** 60, {}, [], true, () => 1, new Uint16Array(2), Symbol('k'),
    2n ** 127n, -(2n ** 127n) - 1n, 2n ** 200n] // BigInt keys are integers within 128 bits
  for (const key of bad) {
    assert.throws(() => k.allow(key), INVALID_ARG, String(key))
    assert.throws(() => k.tryAcquire(key), INVALID_ARG, String(key))
    assert.throws(() => k.peek(key), INVALID_ARG, String(key))
    assert.throws(() => k.refund(key), INVALID_ARG, String(key))
    assert.throws(() => k.remove(key), INVALID_ARG, String(key))
  }
  assert.throws(() => k.allow(), INVALID_ARG)
  assert.equal(k.size, 0, 'no bucket was created')
})

test('insufficient capacity is an error, not a rejection', () => {
  const l = new Limiter('1/s; burst=3')
  assert.throws(() => l.tryAcquire(4), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  assert.throws(() => l.allow(4), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  const k = new KeyedLimiter('1/s; burst=3')
  assert.throws(() => k.tryAcquire('a', 4), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
})

test('a clock past the horizon is an error', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('1/ns; burst=9223372036854775807', { clock })
  clock.set(2n ** 64n - 1n)
  assert.throws(() => l.tryAcquire(1), code('ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE'))
  assert.throws(() => l.refund(1), code('ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE'))
})

test('a full key store rejects new keys', () => {
  const k = new KeyedLimiter('1/h', { maxKeys: 2 })
  assert.equal(k.allow('a'), true)
  assert.equal(k.allow('b'), true)
  assert.throws(() => k.allow('c'), code('ERR_SLUICEGATE_KEY_STORE_FULL'))
  assert.equal(k.allow('a'), false, 'existing keys are untouched')
  const e = new KeyedLimiter('1/h', { maxKeys: 2, onFull: 'evict' })
  e.allow('a'); e.allow('b')
  assert.equal(e.allow('c'), true, 'evicts instead')
  assert.ok(e.size <= 2)
})

test('options of the wrong type or value', async () => {
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: 0 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: 1.5 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { onFull: 1 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { shards: 0 }), INVALID_ARG)
  // A misspelt option is an error, never a limiter built without it (in memory, default bound).
  assert.throws(() => new Limiter('1/s', { stroe: 'redis://h' }), (e) => INVALID_ARG(e) && e.message.includes('"stroe"'))
  assert.throws(() => new Limiter('1/s', { maxKeys: 5 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { maxkeys: 10 }), (e) => INVALID_ARG(e) && e.message.includes('"maxkeys"'))
  assert.throws(() => KeyedLimiter.shared('typo-shared', '1/s', { onfull: 'evict' }), INVALID_ARG)
  // The in-process registry keeps a table's bound only: no counters, shadow mode or hook.
  for (const [k, v] of [['metrics', true], ['shadow', true], ['onReject', () => {}]]) {
    assert.throws(() => KeyedLimiter.shared(`shared-${k}`, '1/s', { [k]: v }), (e) => INVALID_ARG(e) && e.message.includes(k), k)
  }
  assert.equal(KeyedLimiter.shared('shared-undefined', '1/s', { metrics: undefined, maxKeys: 8 }).maxKeys, 8)
  // Asking for none of them is fine.
  assert.equal(KeyedLimiter.shared('shared-off', '1/s', { metrics: false, shadow: false, onReject: null }).maxKeys, 1048576)
  await assert.rejects(new Limiter('1/s').acquire({ timeout: 100 }), INVALID_ARG)
  assert.throws(() => Limiter.shared(1, '1/s'), INVALID_ARG)
  assert.throws(() => new ManualClock(-1), INVALID_ARG)
  assert.throws(() => new ManualClock(1.5), INVALID_ARG)
  assert.throws(() => new ManualClock(2n ** 64n), INVALID_ARG)
  assert.throws(() => new ManualClock('0'), INVALID_ARG)
  const c = new ManualClock()
  assert.throws(() => c.set(NaN), INVALID_ARG)
  assert.throws(() => c.advance(-1n), INVALID_ARG)
  const d = new Limiter('1/s').tryAcquire()
  assert.throws(() => d.headers('ietf', 5), INVALID_ARG)
})

test('a name outside the core\'s choices is ERR_SLUICEGATE_INVALID_OPTION', () => {
  const cases = [
    ['refill', () => new Limiter({ count: 1, periodMs: 1000, refill: 'sometimes' })],
    ['algorithm', () => new Limiter({ count: 1, periodMs: 1000, algorithm: 'fastest' })],
    ['algorithm', () => canonicalQuota({ count: 1, periodMs: 1000, algorithm: 'gcrа' })], // Cyrillic а
    ['on_full', () => new KeyedLimiter('1/s', { onFull: 'drop' })],
    ['on_full', () => KeyedLimiter.shared('errors-on-full', '1/s', { onFull: 'evicted' })],
    ['style', () => new Limiter('1/s').tryAcquire().headers('draft-9')],
    ['style', () => new Limiter('1/s').tryAcquire().headers('draft-7')],
  ]
  for (const [option, make] of cases) {
    assert.throws(make, (e) => INVALID_OPTION(e) && e.message.startsWith(`${option} must be `), option)
  }
  // The core's names are accepted, in any ASCII case, aliases included.
  assert.equal(new KeyedLimiter('1/s', { onFull: 'Evict' }).size, 0)
  assert.equal(canonicalQuota({ count: 1, periodMs: 1000, algorithm: 'shaper' }), '1/s; algorithm=leaky_queue')
  assert.equal(canonicalQuota({ count: 1, periodMs: 1000, refill: 'interval' }), '1/s; refill=interval')
})

test('acquire rejects, never throws synchronously', async () => {
  const l = new Limiter('1/s; burst=1')
  await assert.rejects(l.acquire(-1), INVALID_ARG)
  await assert.rejects(l.acquire(2), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  await assert.rejects(l.acquire(1, { timeoutMs: -5 }), INVALID_ARG)
  await assert.rejects(l.acquire(1, { signal: 'no' }), INVALID_ARG)
  const k = new KeyedLimiter('1/s')
  await assert.rejects(k.acquire(undefined), INVALID_ARG)
  await assert.rejects(k.acquire(2n ** 127n), INVALID_ARG)
  await assert.rejects(k.acquire('a', 1, { timeoutMs: '5' }), INVALID_ARG)
  await assert.rejects(k.acquire('a', 1, null), INVALID_ARG)
  await assert.rejects(new Composite([l]).acquire(2), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
})

test('the low-level calls reject forged handles', () => {
  const n = sg._internal.native
  for (const h of [-1, 1e9, 'x', undefined]) {
    assert.throws(() => n.allow(h, 1), INVALID_ARG)
    assert.throws(() => n.decide(h, 1), INVALID_ARG)
    assert.throws(() => n.keyedAllow(h, 'a', 1), INVALID_ARG)
  }
  assert.throws(() => n.acquireStart(1e9, 1), INVALID_ARG, 'not a live handle')
  const l = n.limiterNew('1/s')
  const k = n.keyedNew('1/s')
  assert.throws(() => n.keyedAllow(l, 'a', 1), INVALID_ARG, 'a Limiter handle is not a KeyedLimiter')
  assert.throws(() => n.allow(k, 1), INVALID_ARG, 'and the other way round')
  assert.throws(() => n.acquireStart(k, 1), INVALID_ARG, 'a keyed acquire needs its key')
  assert.throws(() => n.acquireStart(l, 1, undefined, 'a'), INVALID_ARG, 'a Limiter takes no key')
  n.release(l)
  assert.throws(() => n.allow(l, 1), INVALID_ARG, 'released')
  n.release(k)
  assert.throws(() => n.allow(), INVALID_ARG)
})

test('a shared name with another quota is refused', () => {
  Limiter.shared('errors-test', '5/s')
  assert.throws(() => Limiter.shared('errors-test', '6/s'), INVALID_ARG)
})

// The store option: a region in a temporary folder, removed afterwards.
const dir = mkdtempSync(join(tmpdir(), 'sluicegate-errors-'))
after(() => rmSync(dir, { recursive: true, force: true }))

test('a store string outside the core\'s grammar is ERR_SLUICEGATE_INVALID_OPTION', () => {
  const bad = ['redis://localhost?bogus=1', 'postgres://localhost', 'shm:', 'shm:?capacity=5', 'shm:/x?capacity=0', 'shm:/x?capacity=-1',
    'shm:/x?capacity=5&capacity=6', 'shm:/x?size=5', 'shm/x', 'memory:x', '']
  for (const store of bad) {
    for (const make of [() => new Limiter('1/s', { store }), () => new KeyedLimiter('1/s', { store })]) {
      assert.throws(make, (e) => INVALID_OPTION(e) && e.message.startsWith('store must be '), store)
    }
  }
  // Only strings: anything else is an argument error.
  for (const store of [5, {}, null, true, ['shm:/x']]) {
    assert.throws(() => new Limiter('1/s', { store }), INVALID_ARG, String(store))
    assert.throws(() => new KeyedLimiter('1/s', { store }), INVALID_ARG, String(store))
  }
  // The in-process shared limiters have no store: a region is shared by every opener already.
  assert.throws(() => KeyedLimiter.shared('errors-store', '1/s', { store: `shm:${join(dir, 'x')}` }), INVALID_ARG)
  // The default, spelled out, in any ASCII case.
  assert.equal(new KeyedLimiter('1/s', { store: ' MEMORY' }).allow('a'), true)
})

test('a region made for another quota or capacity is ERR_SLUICEGATE_STORE_MISMATCH', () => {
  const store = `shm:${join(dir, 'mismatch')}`
  const k = new KeyedLimiter('10/minute', { store, maxKeys: 16 })
  assert.equal(k.allow('a'), true)
  const MISMATCH = code('ERR_SLUICEGATE_STORE_MISMATCH')
  assert.throws(() => new KeyedLimiter('11/minute', { store }), MISMATCH)
  assert.throws(() => new KeyedLimiter('10/minute; burst=11', { store }), MISMATCH)
  assert.throws(() => new KeyedLimiter('10/minute; algorithm=gcra', { store }), MISMATCH)
  assert.throws(() => new KeyedLimiter('10/minute', { store, maxKeys: 17 }), MISMATCH)
  assert.throws(() => new Limiter('10/minute', { store }), MISMATCH, 'a single limiter is a region of one key')
  // The same quota, spelled otherwise, opens it.
  assert.equal(new KeyedLimiter('10 per minute', { store }).peek('a').remaining, 9)
})

test('a region open to other users is ERR_SLUICEGATE_STORE_PERMISSION', () => {
  const file = join(dir, 'open-to-all')
  const store = `shm:${file}`
  new KeyedLimiter('5/s', { store, maxKeys: 4 }).allow('a')
  assert.equal(statSync(file).mode & 0o777, 0o600, 'a region is made private')
  chmodSync(file, 0o644)
  const PERMISSION = code('ERR_SLUICEGATE_STORE_PERMISSION')
  assert.throws(() => new KeyedLimiter('5/s', { store }), PERMISSION)
  assert.throws(() => new Limiter('5/s', { store }), PERMISSION)
  chmodSync(file, 0o640)
  assert.throws(() => new KeyedLimiter('5/s', { store }), PERMISSION, 'group-readable too')
})

test('a quota a region cannot keep is ERR_SLUICEGATE_STORE_UNSUPPORTED', () => {
  const UNSUPPORTED = code('ERR_SLUICEGATE_STORE_UNSUPPORTED')
  const store = `shm:${join(dir, 'log')}`
  assert.throws(() => new KeyedLimiter('10/s; algorithm=sliding_log', { store }), UNSUPPORTED)
  assert.throws(() => new Limiter('10/s; algorithm=sliding_log', { store }), UNSUPPORTED)
})

test('a region whose folder is missing is ERR_SLUICEGATE_STORE_UNAVAILABLE', () => {
  const store = `shm:${join(dir, 'no-such-folder', 'r')}`
  assert.throws(() => new KeyedLimiter('1/s', { store }), code('ERR_SLUICEGATE_STORE_UNAVAILABLE'))
})
