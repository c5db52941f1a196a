// Every error path: a stable `code`, never a crash.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Limiter, KeyedLimiter, ManualClock, canonicalQuota } from '../index.mjs'
import sg from '../index.mjs'

const code = (c) => (e) => {
  assert.ok(e instanceof Error, 'an Error')
  assert.equal(e.code, c)
  return true
}
const INVALID_ARG = code('ERR_SLUICEGATE_INVALID_ARG')

test('quota errors: parse and invalid quota', () => {
  assert.throws(() => new Limiter('10/fortnight'), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new Limiter(''), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new Limiter('0/s'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter('1/s; burst=2; initial=3'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ rate: 0, periodMs: 1000 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ rate: 1, periodMs: 0 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter({ rate: 1, periodMs: 1, burst: 0 }), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => new Limiter('1/d; burst=18446744073709551615'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
  assert.throws(() => canonicalQuota('nope'), code('ERR_SLUICEGATE_PARSE'))
  assert.throws(() => new KeyedLimiter('0/s'), code('ERR_SLUICEGATE_INVALID_QUOTA'))
})

test('quota options of the wrong type or value', () => {
  for (const bad of [undefined, null, 10, true, [], () => 1]) {
    assert.throws(() => new Limiter(bad), INVALID_ARG, String(bad))
  }
  assert.throws(() => new Limiter({ periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: 1 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: -1, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: 1.5, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: NaN, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: 1, periodMs: '1000' }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: 1, periodMs: 1000, refill: 'sometimes' }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: 1, periodMs: 1000, bust: 3 }), INVALID_ARG)
  assert.throws(() => new Limiter({ rate: -1n, periodMs: 1000 }), INVALID_ARG)
  assert.throws(() => new Limiter('1/s', { clock: {} }), INVALID_ARG)
  assert.throws(() => new Limiter('1/s', 5), INVALID_ARG)
})

test('costs of the wrong type or value throw, on every entry point', () => {
  const l = new Limiter('10/s')
  const k = new KeyedLimiter('10/s')
  const bad = [-1, 1.5, NaN, Infinity, -Infinity, 2 ** 53, '1', null, {}, true, -1n, 2n ** 64n]
  for (const cost of bad) {
    const what = typeof cost === 'bigint' ? `${cost}n` : String(cost)
    assert.throws(() => l.check(cost), INVALID_ARG, what)
    assert.throws(() => l.tryAcquire(cost), INVALID_ARG, what)
    assert.throws(() => l.refund(cost), INVALID_ARG, what)
    assert.throws(() => k.check('a', cost), INVALID_ARG, what)
    assert.throws(() => k.tryAcquire('a', cost), INVALID_ARG, what)
    assert.throws(() => k.refund('a', cost), INVALID_ARG, what)
  }
  // In range: a BigInt up to 2^64-1 is a valid cost (and then too large for the bucket).
  assert.throws(() => l.tryAcquire(2n ** 64n - 1n), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
})

test('keys of the wrong type throw', () => {
  const k = new KeyedLimiter('10/s')
  for (const key of [undefined, null, 1.5, NaN, 2 ** 60, {}, [], 1n, true, () => 1, new Uint16Array(2)]) {
    assert.throws(() => k.check(key), INVALID_ARG, String(key))
    assert.throws(() => k.tryAcquire(key), INVALID_ARG, String(key))
    assert.throws(() => k.peek(key), INVALID_ARG, String(key))
    assert.throws(() => k.refund(key), INVALID_ARG, String(key))
    assert.throws(() => k.remove(key), INVALID_ARG, String(key))
  }
  assert.throws(() => k.check(), INVALID_ARG)
})

test('insufficient capacity is an error, not a rejection', () => {
  const l = new Limiter('1/s; burst=3')
  assert.throws(() => l.tryAcquire(4), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  assert.throws(() => l.check(4), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
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
  assert.equal(k.check('a'), true)
  assert.equal(k.check('b'), true)
  assert.throws(() => k.check('c'), code('ERR_SLUICEGATE_KEY_STORE_FULL'))
  assert.equal(k.check('a'), false, 'existing keys are untouched')
  const e = new KeyedLimiter('1/h', { maxKeys: 2, onFull: 'evict' })
  e.check('a'); e.check('b')
  assert.equal(e.check('c'), true, 'evicts instead')
  assert.ok(e.size <= 2)
})

test('options of the wrong type or value', () => {
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: 0 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: 1.5 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { onFull: 'drop' }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { shards: 0 }), INVALID_ARG)
  assert.throws(() => Limiter.shared(1, '1/s'), INVALID_ARG)
  assert.throws(() => new ManualClock(-1), INVALID_ARG)
  assert.throws(() => new ManualClock(1.5), INVALID_ARG)
  assert.throws(() => new ManualClock(2n ** 64n), INVALID_ARG)
  assert.throws(() => new ManualClock('0'), INVALID_ARG)
  const c = new ManualClock()
  assert.throws(() => c.set(NaN), INVALID_ARG)
  assert.throws(() => c.advance(-1n), INVALID_ARG)
  const d = new Limiter('1/s').tryAcquire()
  assert.throws(() => d.headers('draft-9'), INVALID_ARG)
  assert.throws(() => d.headers('ietf', 5), INVALID_ARG)
})

test('acquire rejects, never throws synchronously', async () => {
  const l = new Limiter('1/s; burst=1')
  await assert.rejects(l.acquire(-1), INVALID_ARG)
  await assert.rejects(l.acquire(2), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  await assert.rejects(l.acquire(1, { timeoutMs: -5 }), INVALID_ARG)
  await assert.rejects(l.acquire(1, { signal: 'no' }), INVALID_ARG)
  const k = new KeyedLimiter('1/s')
  await assert.rejects(k.acquire(undefined), INVALID_ARG)
})

test('the low-level calls reject forged handles', () => {
  const n = sg._internal.native
  for (const h of [-1, 1e9, 'x', undefined]) {
    assert.throws(() => n.check(h, 1), INVALID_ARG)
    assert.throws(() => n.decide(h, 1), INVALID_ARG)
    assert.throws(() => n.keyedCheck(h, 'a', 1), INVALID_ARG)
  }
  const l = n.limiterNew('1/s')
  const k = n.keyedNew('1/s')
  assert.throws(() => n.keyedCheck(l, 'a', 1), INVALID_ARG, 'a Limiter handle is not a KeyedLimiter')
  assert.throws(() => n.check(k, 1), INVALID_ARG, 'and the other way round')
  n.release(l)
  assert.throws(() => n.check(l, 1), INVALID_ARG, 'released')
  n.release(k)
  assert.throws(() => n.check(), INVALID_ARG)
})

test('a shared name with another quota is refused', () => {
  Limiter.shared('errors-test', '5/s')
  assert.throws(() => Limiter.shared('errors-test', '6/s'), INVALID_ARG)
})
