// The shared-memory store: limiters of this process and child processes (child_process.fork)
// sharing a region's buckets. Regions live in a temporary folder, removed afterwards.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { fork } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { KeyedLimiter, Limiter, ManualClock } from '../index.mjs'
import { killAll, within } from './fixtures/within.mjs'

const dir = mkdtempSync(join(tmpdir(), 'sluicegate-shm-'))
after(() => rmSync(dir, { recursive: true, force: true }))
const region = (name) => `shm:${join(dir, name)}`

test('two keyed limiters on one region share its buckets', () => {
  const store = region('share')
  const a = new KeyedLimiter('10/minute', { store, maxKeys: 1000 })
  const b = new KeyedLimiter('10/minute', { store })
  let admitted = 0
  for (let i = 0; i < 30; i++) admitted += (i % 2 ? a : b).allow('alice')
  assert.equal(admitted, 10)
  assert.equal(b.maxKeys, 1000, 'an opener that gives no maxKeys takes the region\'s')
  // The key rule is the same in every process: 42, 42n and '42' are one bucket.
  assert.equal(a.tryAcquire(42, 4).remaining, 6)
  assert.equal(b.peek('42').remaining, 6)
  assert.equal(b.tryAcquire(42n).remaining, 5)
  assert.equal(a.size, 2)
  b.refund('42', 2)
  assert.equal(a.peek(42).remaining, 7)
  assert.equal(a.remove('42'), true)
  assert.equal(b.peek(42).remaining, 10)
  b.clear()
  assert.equal(a.size, 0)
  assert.equal(a.peek('alice').remaining, 10)
})

test('a region\'s capacity: maxKeys, or ?capacity=N in the store string', () => {
  const k = new KeyedLimiter('1/h', { store: `${region('cap')}?capacity=3`, onFull: 'reject' })
  assert.equal(k.maxKeys, 3)
  for (const key of ['a', 'b', 'c']) assert.equal(k.allow(key), true)
  assert.throws(() => k.allow('d'), (e) => e.code === 'ERR_SLUICEGATE_KEY_STORE_FULL')
  assert.equal(new KeyedLimiter('1/h', { store: region('cap') }).maxKeys, 3)
})

test('a single limiter on a region: one bucket for every opener', () => {
  const store = region('single')
  const [a, b] = [new Limiter('5/h', { store }), new Limiter('5/h', { store })]
  assert.equal(a.tryAcquire(3).remaining, 2)
  assert.equal(b.peek().remaining, 2)
  assert.equal(b.allow(2), true)
  assert.equal(a.allow(), false)
  assert.equal(a.isFull(), false)
  assert.equal(statSync(join(dir, 'single')).mode & 0o777, 0o600)
})

test('a manual clock is used as given', () => {
  const clock = new ManualClock(1_000_000_000n)
  const k = new KeyedLimiter('2/s', { store: region('manual'), maxKeys: 4, clock })
  assert.equal(k.allow('a', 2), true)
  assert.equal(k.tryAcquire('a').retryAfterMs, 500)
  clock.advance(500_000_000)
  assert.equal(k.allow('a'), true)
})

test('acquire waits for a region\'s bucket on timers', async () => {
  // A token a second: the acquire below must take the refill, so the next token is a second
  // after its admission, and the last check holds through any stall of under a second (at
  // 50/s, one of 20 ms let it be admitted).
  const k = new KeyedLimiter('1/s; burst=1', { store: region('acquire'), maxKeys: 4 })
  // Timed from before the token is taken: the refill is 1 s after that, however long a
  // loaded machine takes between the two calls.
  const t0 = performance.now()
  assert.equal(k.allow('a'), true)
  const d = await k.acquire('a', 1, { timeoutMs: 5000 })
  assert.equal(d.allowed, true)
  assert.ok(performance.now() - t0 >= 900, 'it waited for the refill (1 s)')
  assert.equal((await k.acquire('a', 1, { timeoutMs: 0 })).allowed, false, 'the admission took the refill')
})

const INDEX = fileURLToPath(new URL('../index.js', import.meta.url))
const CHILD = fileURLToPath(new URL('./fixtures/shm-child.cjs', import.meta.url))

/**
 * Forks `n` children that open the region `store` (racing to make it) for `quota`, then,
 * once all are ready, has all ask for one token at a time for 300 ms; the tokens each
 * admitted.
 */
async function children(n, kind, quota, store) {
  const procs = []
  try {
    const ready = Array.from({ length: n }, () => {
      const p = fork(CHILD, [INDEX, kind, quota, store], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
      procs.push(p)
      return new Promise((resolve, reject) => {
        p.once('message', resolve)
        p.once('error', reject)
        p.once('exit', (code, signal) => reject(new Error(`child exited (${code ?? signal}) before it was ready`)))
      })
    })
    await within(Promise.all(ready), 30_000, 'the children opening the region')
    const done = procs.map((p) => new Promise((resolve) => p.once('message', resolve)))
    for (const p of procs) p.send({ ms: 300 })
    const results = await within(Promise.all(done), 30_000, 'the children asking')
    for (const r of results) assert.ok(r.tries > 25, `every child asked more than the burst (${r.tries})`)
    return results.map((r) => r.admitted)
  } finally {
    await killAll(procs)
  }
}

test('forked processes sharing a KeyedLimiter region admit exactly its burst in total', async () => {
  const store = region('forked-keyed')
  const admitted = await children(6, 'keyed', '1/h; burst=25', store)
  assert.equal(admitted.reduce((a, b) => a + b, 0), 25, `admitted per child: ${admitted}`)
  // This process sees the bucket they drained.
  assert.equal(new KeyedLimiter('1/h; burst=25', { store }).peek('client-42').remaining, 0)
  assert.ok(existsSync(join(dir, 'forked-keyed')))
})

test('forked processes sharing a Limiter region admit exactly its burst in total', async () => {
  const store = region('forked-single')
  const admitted = await children(6, 'single', '1/h; burst=25', store)
  assert.equal(admitted.reduce((a, b) => a + b, 0), 25, `admitted per child: ${admitted}`)
  assert.equal(new Limiter('1/h; burst=25', { store }).peek().remaining, 0)
})
