// Hostile inputs (issue 9), one test each: every one gets a thrown Error with a stable `code`
// or a correct decision, and nothing aborts the process (these run in the test's own process).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Limiter, KeyedLimiter, Composite, ManualClock, canonicalQuota } from '../index.mjs'

const code = (...codes) => (e) => {
  assert.ok(e instanceof Error, `an Error, got ${e}`)
  assert.ok(codes.includes(e.code), `code ${e.code}, expected ${codes.join(' or ')}: ${String(e.message).slice(0, 200)}`)
  return true
}
const INVALID_ARG = code('ERR_SLUICEGATE_INVALID_ARG')
const INVALID_QUOTA = code('ERR_SLUICEGATE_INVALID_QUOTA')
const PARSE = code('ERR_SLUICEGATE_PARSE')
const ALGORITHMS = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window', 'sliding_log', 'leaky_queue']
const show = (v) => (typeof v === 'bigint' ? `${v}n` : typeof v === 'string' ? JSON.stringify(v.slice(0, 40)) : String(v))

test('zero, negative, NaN, infinite and huge rates', () => {
  // As rate strings.
  assert.throws(() => new Limiter('0/s'), INVALID_QUOTA)
  assert.throws(() => new Limiter('10/0s'), INVALID_QUOTA)
  assert.throws(() => new Limiter('10/s; burst=0'), INVALID_QUOTA)
  for (const q of ['-1/s', 'NaN/s', 'Infinity/s', '1e3/s', '0x10/s', '10/-1s', '10/s; burst=-1', '99999999999999999999999/s', '10/s; burst=18446744073709551616']) {
    assert.throws(() => new Limiter(q), PARSE, q)
  }
  // Huge but well-formed: refused where exact arithmetic would overflow, never wrapped.
  for (const q of ['18446744073709551615/ns', '18446744073709551615/d', '1/18446744073709551615ns', '10/s; algorithm=leaky_queue; max_delay=18446744073709551615ns']) {
    assert.throws(() => new Limiter(q), INVALID_QUOTA, q)
  }
  // As options objects.
  for (const rate of [0, 0n]) assert.throws(() => new Limiter({ count: rate, periodMs: 1000 }), INVALID_QUOTA)
  for (const rate of [-1, -1n, NaN, Infinity, -Infinity, 1e300, 2 ** 53, '10', null]) {
    assert.throws(() => new Limiter({ count: rate, periodMs: 1000 }), INVALID_ARG, show(rate))
    assert.throws(() => new Limiter({ count: 1, periodMs: rate }), INVALID_ARG, show(rate))
  }
  assert.throws(() => new Limiter({ count: 2n ** 64n - 1n, periodNs: 1 }), INVALID_QUOTA)
  assert.throws(() => new Limiter({ count: 1, periodMs: 2n ** 64n }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: 18446744073710n }), INVALID_ARG, 'beyond 2^64-1 ns')
  assert.throws(() => new Limiter({ count: 2n ** 64n, periodMs: 1 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodNs: 2n ** 64n }), INVALID_ARG)
  // Both spellings of one figure: refused (one was taken silently, a million-fold apart).
  assert.throws(() => new Limiter({ count: 1, periodMs: 1000, periodNs: 5 }), INVALID_ARG)
  assert.throws(() => new Limiter({ count: 1, periodMs: 1000, algorithm: 'leaky_queue', maxDelayMs: 1, maxDelayNs: 5n }), INVALID_ARG)
  // Every algorithm refuses a zero rate the same way.
  for (const a of ALGORITHMS) assert.throws(() => new Limiter(`0/s; algorithm=${a}`), INVALID_QUOTA, a)
})

test('zero, negative, NaN, infinite and huge costs', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('10/s', { clock })
  const k = new KeyedLimiter('10/s', { clock })
  const c = new Composite([l])
  assert.equal(l.tryAcquire(0).allowed, true, 'cost 0 is a peek')
  assert.equal(l.tryAcquire(0).remaining, 10)
  for (const cost of [-1, -0.5, NaN, Infinity, -Infinity, 1e300, Number.MAX_VALUE, -(2 ** 53)]) {
    for (const call of [() => l.allow(cost), () => l.tryAcquire(cost), () => l.refund(cost), () => l.reserve(cost),
      () => k.allow('a', cost), () => k.tryAcquire('a', cost), () => k.refund('a', cost), () => c.tryAcquire(cost)]) {
      assert.throws(call, INVALID_ARG, show(cost))
    }
  }
  // Huge but representable: more than the bucket can ever hold.
  for (const cost of [11, 2 ** 53 - 1, 2n ** 63n, 2n ** 64n - 1n]) {
    assert.throws(() => l.tryAcquire(cost), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'), show(cost))
    assert.throws(() => k.tryAcquire('a', cost), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'), show(cost))
  }
  assert.equal(l.peek().remaining, 10, 'nothing was consumed')
  l.refund(2n ** 64n - 1n) // a huge refund is capped at the burst
  assert.equal(l.peek().remaining, 10)
})

test('fractional costs are refused, not rounded', () => {
  const l = new Limiter('10/s')
  const k = new KeyedLimiter('10/s')
  for (const cost of [0.5, 1.5, 1 + Number.EPSILON, 9.999999, 1e-300]) {
    assert.throws(() => l.tryAcquire(cost), INVALID_ARG, String(cost))
    assert.throws(() => k.tryAcquire('a', cost), INVALID_ARG, String(cost))
  }
  assert.equal(l.peek().remaining, 10)
  assert.equal(k.size, 0, 'no bucket was created by a refused request')
})

test('BigInt out of range', () => {
  const l = new Limiter('10/s')
  for (const v of [-1n, -(2n ** 64n), 2n ** 64n, 2n ** 128n, 2n ** 1000n]) {
    assert.throws(() => l.tryAcquire(v), INVALID_ARG, show(v))
    assert.throws(() => new ManualClock(v), INVALID_ARG, show(v))
    assert.throws(() => new ManualClock().set(v), INVALID_ARG, show(v))
    assert.throws(() => new ManualClock().advance(v), INVALID_ARG, show(v))
    assert.throws(() => l.reserve(1, { maxWaitMs: v }), INVALID_ARG, show(v))
  }
  const k = new KeyedLimiter('1/s')
  for (const v of [2n ** 127n, -(2n ** 127n) - 1n, 2n ** 1000n, -(2n ** 1000n)]) {
    assert.throws(() => k.allow(v), INVALID_ARG, `${show(v)} is beyond a key's 128 bits`)
  }
  assert.equal(k.size, 0)
})

test('empty string and Buffer keys are one valid key', () => {
  const k = new KeyedLimiter('1/h; burst=2', { clock: new ManualClock(0) })
  assert.equal(k.tryAcquire('').remaining, 1)
  assert.equal(k.tryAcquire(Buffer.alloc(0)).remaining, 0, 'the same (empty) bytes')
  assert.equal(k.allow(new Uint8Array(0)), false)
  assert.equal(k.allow(new Uint8Array(new ArrayBuffer(8), 8, 0)), false, 'an empty view at the end of its buffer')
  assert.equal(k.size, 1)
  assert.equal(k.remove(''), true)
})

test('enormous (1 MiB) string and Buffer keys', () => {
  const k = new KeyedLimiter('1/h; burst=1', { clock: new ManualClock(0) })
  const s = 'k'.repeat(1 << 20)
  const b = Buffer.alloc(1 << 20, 0x6b) // the same bytes as s
  assert.equal(k.allow(s), true)
  assert.equal(k.allow(b), false, 'a Buffer of the same bytes is the same key')
  const other = Buffer.from(b)
  other[other.length - 1] = 0x6c
  assert.equal(k.allow(other), true, 'a key differing in its last byte is another key')
  const multiByte = 'é'.repeat(1 << 19) // 1 MiB of UTF-8
  assert.equal(k.allow(multiByte), true)
  assert.equal(k.allow(Buffer.from(multiByte)), false)
  assert.equal(k.peek(s).remaining, 0)
  assert.equal(k.size, 3)
  // Long keys of multi-byte characters are whole keys (not cut where a stack buffer ends).
  for (const ch of ['é', '€', '😀']) {
    for (let n = 60; n < 140; n++) assert.equal(k.allow(ch.repeat(n)), true, `${ch} x ${n}`)
  }
  assert.equal(k.remove(b), true)
})

test('non-UTF-8 Buffer keys are keyed by their bytes', () => {
  const k = new KeyedLimiter('1/h; burst=1', { clock: new ManualClock(0) })
  const bad = [[0xff], [0xfe, 0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x80, 0x80, 0x80], [0x00], [0xf8, 0x88, 0x80, 0x80, 0x80]]
  for (const bytes of bad) {
    assert.equal(k.allow(Buffer.from(bytes)), true, bytes.join(','))
    assert.equal(k.allow(Uint8Array.from(bytes)), false, `${bytes.join(',')} again`)
  }
  assert.equal(k.size, bad.length, 'every byte string is its own key')
  assert.equal(k.allow('\uFFFD'), true, 'the replacement character is not 0xff')
  assert.equal(k.allow('a\u0000b'), true, 'NUL inside a string key')
  assert.equal(k.allow('a'), true, 'is not a terminator')
})

test('a string key with a lone surrogate is refused, not keyed as U+FFFD', () => {
  const k = new KeyedLimiter('1/h; burst=1', { clock: new ManualClock(0) })
  const lone = ['\uD800', '\uDBFF', '\uDC00', '\uDFFF', 'a\uD800', '\uD800b', 'x\uDC00\uD800y', '\uFFFD\uD800', '😀\uD83D', 'é'.repeat(300) + '\uDBFF']
  for (const key of lone) {
    for (const call of [() => k.allow(key), () => k.tryAcquire(key), () => k.peek(key), () => k.refund(key), () => k.remove(key)]) {
      assert.throws(call, INVALID_ARG, show(key))
    }
  }
  assert.equal(k.size, 0, 'no bucket was made')
  // Well-formed strings holding U+FFFD or surrogate pairs are keys as before, each its own.
  const good = ['\uFFFD', 'a\uFFFDb', '\uD83D\uDE00', '𝄞', '\uD7FF', '\uE000', '한국어', 'é'.repeat(300) + '\uFFFD', '\uFFFD'.repeat(100)]
  for (const key of good) assert.equal(k.allow(key), true, show(key))
  for (const key of good) assert.equal(k.allow(key), false, `${show(key)} again`)
  assert.equal(k.size, good.length)
  assert.equal(k.allow(Buffer.from('\uFFFD')), false, 'U+FFFD as a string is its UTF-8 bytes')
  if (typeof ''.isWellFormed === 'function') for (const key of lone) assert.equal(key.isWellFormed(), false)
})

test('a key in a SharedArrayBuffer is copied, and names the bucket of the same bytes', () => {
  const k = new KeyedLimiter('1/h; burst=2', { clock: new ManualClock(0) })
  for (const n of [0, 1, 7, 255, 256, 257, 4096]) {
    const shared = new Uint8Array(new SharedArrayBuffer(n + 3), 3, n)
    shared.fill(0x61 + (n % 20))
    const same = Buffer.from(shared)
    assert.equal(k.tryAcquire(shared).remaining, 1, `${n} bytes`)
    assert.equal(k.tryAcquire(same).remaining, 0, `${n} bytes: the same bucket as a Buffer of them`)
    assert.equal(k.peek(shared).remaining, 0)
    k.refund(shared)
    assert.equal(k.peek(same).remaining, 1)
    if (n > 0) {
      shared[n - 1] ^= 1
      assert.equal(k.peek(shared).remaining, 2, 'a changed byte is another key')
    }
  }
  // A Buffer over shared memory (Buffer.from(sab)), as a worker would hand one over.
  const sab = new SharedArrayBuffer(5)
  Buffer.from(sab).write('alice')
  assert.equal(k.allow(Buffer.from(sab)), true)
  assert.equal(k.peek('alice').remaining, 1)
})

test('a shared key another thread keeps writing: each call decides on one copy of its bytes', { timeout: 20_000 }, async () => {
  const { Worker } = await import('node:worker_threads')
  const sab = new SharedArrayBuffer(8)
  const key = new Uint8Array(sab, 0, 2)
  key.set([0x61, 0x62])
  const state = new Int32Array(sab, 4, 1) // 0: starting, 1: writing, 2: stop
  const w = new Worker(`
    const { workerData } = require('node:worker_threads')
    const b = new Uint8Array(workerData, 0, 2)
    const s = new Int32Array(workerData, 4, 1)
    Atomics.store(s, 0, 1)
    while (Atomics.load(s, 0) === 1) { b[0] ^= 1; b[1] ^= 2 }
  `, { eval: true, workerData: sab })
  const exited = new Promise((resolve) => w.once('exit', resolve))
  for (let i = 0; i < 2_000 && Atomics.load(state, 0) === 0; i++) await new Promise((r) => setTimeout(r, 5))
  const k = new KeyedLimiter('1000/h', { clock: new ManualClock(0) })
  for (let i = 0; i < 20_000; i++) k.allow(key)
  Atomics.store(state, 0, 2)
  await exited
  // Each byte is one of two values: at most four keys, whatever the interleaving.
  assert.ok(k.size >= 1 && k.size <= 4, `${k.size} keys`)
})

test('rate strings with junk', () => {
  const junk = [
    '10/s\u0000', '\u0000', '10\u0000/s', '\u001b[31m10/s', '10/s\u0007', '10/s;\u0008burst=5', '10/s; burst=5\u007f',
    '١٠/s', '१०/s', '１０/s', '10/ｓ', '10/s; burst=５', '10/s; burst=٥', '10/s; algorithm=gcrа', // Cyrillic а
    '\uD800/s', '10/s; \uFEFFburst=5', '10/s;;', '10/s; burst', '10/s; burst=', '10/s; =5', '10/s; burst=5; burst=6',
    'x'.repeat(100 * 1024), '1'.repeat(100 * 1024) + '/s', '10/s; burst=' + '9'.repeat(100 * 1024),
    '10/s' + '; burst=5'.repeat(12 * 1024), '10/' + 's'.repeat(100 * 1024),
  ]
  for (const q of junk) {
    assert.throws(() => new Limiter(q), code('ERR_SLUICEGATE_PARSE', 'ERR_SLUICEGATE_INVALID_QUOTA'), show(q))
    assert.throws(() => canonicalQuota(q), code('ERR_SLUICEGATE_PARSE', 'ERR_SLUICEGATE_INVALID_QUOTA'), show(q))
  }
  // Whitespace (newlines and tabs included) is free in the grammar.
  assert.equal(canonicalQuota('10 /\ts\n;\r\nburst = 5 '), '10/s; burst=5')
  assert.throws(() => new Limiter(Buffer.from('10/s')), INVALID_ARG, 'a Buffer is not a rate string')
})

test('10^6 distinct keys against a bounded KeyedLimiter', () => {
  const bound = 10_000
  const clock = new ManualClock(0)
  const k = new KeyedLimiter('1/h; burst=5', { clock, maxKeys: bound, onFull: 'evict' })
  const rss0 = process.memoryUsage().rss
  const keys = Buffer.alloc(8)
  let admitted = 0
  for (let i = 0; i < 1_000_000; i++) {
    keys.writeUInt32LE(i, 0)
    keys.writeUInt32LE(i * 2654435761 >>> 0, 4)
    if (k.allow(keys)) admitted++
    if ((i & 0xffff) === 0) assert.ok(k.size <= bound, `size ${k.size} at ${i}`)
  }
  assert.equal(admitted, 1_000_000, 'every new key starts with its burst')
  assert.ok(k.size <= bound, `size ${k.size}`)
  assert.ok(k.size >= bound / 2, `the table is used (${k.size})`)
  const grown = (process.memoryUsage().rss - rss0) / 2 ** 20
  assert.ok(grown < 256, `rss grew by ${grown.toFixed(0)} MiB`)
  // With the default policy new keys are refused at the bound, existing ones still decide.
  const r = new KeyedLimiter('1/h', { clock, maxKeys: 1000 })
  let refused = 0
  for (let i = 0; i < 20_000; i++) {
    try {
      r.allow(i)
    } catch (e) {
      assert.equal(e.code, 'ERR_SLUICEGATE_KEY_STORE_FULL')
      refused++
    }
  }
  assert.equal(refused, 19_000)
  assert.equal(r.size, 1000)
  assert.equal(r.allow(0), false, 'an existing key is decided as before')
})

test('manual clock jumps backwards never admit more', () => {
  for (const a of ALGORITHMS) {
    const clock = new ManualClock(10_000_000_000n)
    const l = new Limiter(`2/s; algorithm=${a}`, { clock })
    while (l.allow()) {}
    const drained = l.peek()
    for (const t of [9_999_999_999n, 5_000_000_000n, 1n, 0n]) {
      clock.set(t)
      const d = l.tryAcquire()
      assert.equal(d.allowed, false, `${a} at ${t}: no admission from the past`)
      assert.ok(Number(d.remaining) <= Number(drained.remaining), `${a} at ${t}`)
    }
    clock.set(10_000_000_000n + 3_600_000_000_000n)
    assert.equal(l.allow(), true, `${a}: admitted again an hour later`)
  }
  const kc = new ManualClock(10_000_000_000n)
  const k = new KeyedLimiter('2/s; burst=2', { clock: kc })
  k.allow('a', 2)
  kc.set(0)
  assert.equal(k.allow('a'), false, 'keyed: no admission from the past either')
})

test('manual clock jumps far forwards: ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE past the horizon', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('10/s', { clock })
  const k = new KeyedLimiter('10/s', { clock })
  const c = new Composite([l, new Limiter('5/s', { clock })])
  clock.set(2n ** 63n)
  assert.equal(l.tryAcquire().allowed, true, 'far, but within the horizon')
  assert.equal(k.tryAcquire('a').allowed, true)
  clock.set(2n ** 64n - 1n)
  const OUT = code('ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE')
  for (const call of [() => l.allow(), () => l.tryAcquire(), () => l.peek(), () => l.refund(), () => l.reserve(),
    () => k.allow('a'), () => k.tryAcquire('b'), () => k.refund('a'), () => c.tryAcquire(), () => c.refund()]) {
    assert.throws(call, OUT)
  }
  clock.advance(2n ** 64n - 1n) // saturates: still past the horizon, still an error
  assert.throws(() => l.allow(), OUT)
  // Every algorithm: a decision or that error at the far end, and decisions again after.
  for (const a of ALGORITHMS) {
    const mc = new ManualClock(0)
    const m = new Limiter(`10/s; algorithm=${a}`, { clock: mc })
    for (const t of [2n ** 62n, 2n ** 63n, 2n ** 64n - 2n, 2n ** 64n - 1n]) {
      mc.set(t)
      try {
        const d = m.tryAcquire()
        assert.equal(typeof d.allowed, 'boolean')
      } catch (e) {
        OUT(e)
      }
    }
  }
  clock.set(2n ** 63n + 1_000_000_000n)
  assert.equal(typeof l.tryAcquire().allowed, 'boolean', 'the limiter still decides afterwards')
})

test('integer edges: 2**53, 2n**64n, -1', () => {
  const clock = new ManualClock(0)
  const l = new Limiter('10/s', { clock })
  const k = new KeyedLimiter('10/s', { clock })
  // cost
  assert.throws(() => l.tryAcquire(2 ** 53), INVALID_ARG, '2**53 is not a safe integer')
  assert.throws(() => l.tryAcquire(2 ** 53 - 1), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  assert.throws(() => l.tryAcquire(2n ** 64n), INVALID_ARG)
  assert.throws(() => l.tryAcquire(2n ** 64n - 1n), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
  assert.throws(() => l.tryAcquire(-1), INVALID_ARG)
  assert.throws(() => l.tryAcquire(-1n), INVALID_ARG)
  assert.equal(l.tryAcquire(-0).allowed, true, '-0 is 0')
  // number keys
  assert.throws(() => k.allow(2 ** 53), INVALID_ARG)
  assert.equal(k.allow(2 ** 53 - 1), true)
  assert.equal(k.allow(-(2 ** 53 - 1)), true)
  assert.equal(k.allow(-1), true)
  assert.equal(k.allow('-1'), true, "'-1' is the same key as -1")
  assert.equal(k.peek(-1).remaining, 8)
  assert.equal(k.allow(-0), true, '-0 is the key "0"')
  assert.equal(k.peek('0').remaining, 9)
  // clock readings
  assert.throws(() => new ManualClock(2 ** 53), INVALID_ARG)
  assert.equal(new ManualClock(2 ** 53 - 1).now(), 2n ** 53n - 1n)
  assert.equal(new ManualClock(2n ** 64n - 1n).now(), 2n ** 64n - 1n)
  assert.throws(() => new ManualClock(2n ** 64n), INVALID_ARG)
  assert.throws(() => new ManualClock(-1), INVALID_ARG)
  // quota fields and options
  assert.throws(() => new Limiter({ count: 2 ** 53, periodMs: 1 }), INVALID_ARG)
  assert.equal(canonicalQuota({ count: 2 ** 53 - 1, periodMs: 1000, burst: 1 }), '9007199254740991/s; burst=1')
  assert.throws(() => new Limiter({ count: 2 ** 53 - 1, periodMs: 1000 }), INVALID_QUOTA, 'a refill too slow to compute exactly')
  assert.equal(new Limiter({ count: 2 ** 53 - 1, periodMs: 1000, burst: 1 }).allow(), true)
  assert.throws(() => new Limiter({ count: -1, periodMs: 1 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: 2 ** 32 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { maxKeys: -1 }), INVALID_ARG)
  assert.throws(() => new KeyedLimiter('1/s', { shards: 2 ** 53 }), INVALID_ARG)
  // figures beyond 2^53 come back as exact BigInts
  assert.throws(() => new Limiter('1/ns; burst=18446744073709551614'), INVALID_QUOTA, 'would take 584 years to fill')
  const wide = new Limiter('1/ns; burst=9223372036854775807', { clock: new ManualClock(0) })
  assert.equal(wide.peek().limit, 9223372036854775807n)
  assert.throws(() => wide.tryAcquire(2n ** 64n - 1n), code('ERR_SLUICEGATE_INSUFFICIENT_CAPACITY'))
})

test('a Composite refuses a manual clock beside the system clock', () => {
  const manual = new Limiter('100/s', { clock: new ManualClock(10n ** 18n) })
  assert.throws(() => new Composite([manual, new Limiter('2/s')]), INVALID_ARG)
  assert.throws(() => new Composite([new Limiter('2/s'), manual]), INVALID_ARG)
  const clock = new ManualClock(0)
  assert.ok(new Composite([manual, new Limiter('2/s', { clock })]).tryAcquire().allowed)
})

test('shadow mode: acquire goes ahead at once, and an abort gives back nothing it did not take', async () => {
  const l = new Limiter('1/10s', { shadow: true })
  assert.ok(l.tryAcquire().allowed)
  const t0 = Date.now()
  const d = await l.acquire(1, { timeoutMs: 20_000 })
  assert.ok(d.allowed && d.shadowRejected)
  assert.ok(Date.now() - t0 < 2_000, `waited ${Date.now() - t0} ms`)
  const two = new Limiter('2/10s', { shadow: true })
  assert.ok(two.tryAcquire(2).allowed)
  const ac = new AbortController()
  const pending = two.acquire(2, { signal: ac.signal })
  ac.abort()
  await pending.catch(() => {})
  two.shadow = false
  assert.equal(two.tryAcquire(2).allowed, false, 'the aborted shadow acquire gave back tokens it never took')
})
