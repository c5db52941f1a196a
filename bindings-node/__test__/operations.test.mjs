// Operating a limiter (docs/OPERATIONS.md): setQuota's carry rule, shadow mode, counters, the
// rejection hook, the Prometheus text and the prom-client integration. Every figure comes from
// a known sequence of decisions on a ManualClock.
import { after, test } from 'node:test'
import { execFileSync } from 'node:child_process'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import client from 'prom-client'
import { Composite, KeyedLimiter, Limiter, ManualClock, renderPrometheus } from '../index.mjs'
import { registerLimiters } from '../prometheus.mjs'

const S = 1_000_000_000
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
/** Waits (at most 2 s) until `seen` holds `n` calls of a hook, then a little longer for extras. */
async function calls(seen, n) {
  for (let i = 0; i < 400 && seen.length < n; i++) await sleep(5)
  await sleep(20)
}

test('setQuota keeps the tokens and refills at the new rate', () => {
  const clock = new ManualClock()
  const limiter = new Limiter('10/min; burst=10', { clock, metrics: true })
  for (let i = 0; i < 8; i++) assert.ok(limiter.allow())
  limiter.setQuota('20/min; burst=20')
  assert.equal(limiter.quota, '20/m')
  // The 2 tokens left are kept (not 4, a fraction of the new burst), and not refilled.
  assert.equal(limiter.tryAcquire().remaining, 1)
  assert.equal(limiter.tryAcquire().remaining, 0)
  const d = limiter.tryAcquire()
  assert.equal(d.allowed, false)
  assert.equal(d.limit, 20)
  assert.equal(d.retryAfterNs, 3 * S) // one token per 3 s at 20/min
  clock.advance(3 * S)
  assert.ok(limiter.allow())
  assert.equal(limiter.allow(), false)
  const m = limiter.metrics()
  assert.deepEqual([m.allowed, m.rejected, m.reconfigurations], [11, 2, 1])
})

test('a keyed limiter carries every key; new keys start under the new quota', () => {
  const clock = new ManualClock()
  const keyed = new KeyedLimiter('10/min; burst=10', { clock })
  for (let i = 0; i < 8; i++) assert.ok(keyed.allow('a'))
  keyed.setQuota({ count: 20, periodMs: 60_000, burst: 20 })
  assert.equal(keyed.tryAcquire('a').remaining, 1)
  assert.equal(keyed.tryAcquire('b').remaining, 19)
  const lower = new Limiter('10/s; burst=10', { clock })
  lower.setQuota('1/s; burst=3')
  assert.deepEqual([1, 2, 3, 4].map(() => lower.allow()), [true, true, true, false])
})

test('setQuota refuses another algorithm, a bad quota and a wrong type', () => {
  const limiter = new Limiter('10/s')
  assert.throws(() => limiter.setQuota('10/s; algorithm=gcra'), { code: 'ERR_SLUICEGATE_INVALID_OPTION' })
  assert.equal(limiter.quota, '10/s')
  assert.throws(() => limiter.setQuota('0/s'), { code: 'ERR_SLUICEGATE_INVALID_QUOTA' })
  assert.throws(() => limiter.setQuota(10), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => new Limiter('1/s', { metrics: 'yes' }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => new Limiter('1/s', { onReject: 3 }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => { limiter.shadow = 1 }, { code: 'ERR_SLUICEGATE_INVALID_ARG' })
})

for (const keyed of [false, true]) {
  test(`shadow mode never rejects and flags what enforcement would (${keyed ? 'keyed' : 'single'})`, () => {
    const clock = new ManualClock()
    const make = (shadow) => keyed
      ? new KeyedLimiter('3/s; burst=3', { clock, shadow, metrics: true })
      : new Limiter('3/s; burst=3', { clock, shadow, metrics: true })
    const enforcing = make(false)
    const shadow = make(true)
    assert.equal(shadow.shadow, true)
    assert.equal(enforcing.shadow, false)
    const costs = [1, 2, 1, 1, 3, 1, 2, 1, 1, 1, 3, 1]
    costs.forEach((cost, i) => {
      if (i % 4 === 3) clock.advance(Math.floor(S / 3))
      const e = keyed ? enforcing.tryAcquire('k', cost) : enforcing.tryAcquire(cost)
      const s = keyed ? shadow.tryAcquire('k', cost) : shadow.tryAcquire(cost)
      assert.equal(s.allowed, true)
      assert.equal(s.shadowRejected, !e.allowed)
      assert.equal(e.shadowRejected, false)
      assert.deepEqual([s.remaining, s.retryAfterNs], [e.remaining, e.retryAfterNs])
    })
    const em = enforcing.metrics()
    const sm = shadow.metrics()
    assert.ok(em.rejected > 0)
    assert.deepEqual([sm.allowed, sm.rejected, sm.shadowRejected], [em.allowed, 0, em.rejected])
    assert.deepEqual([sm.shadow, em.shadow], [true, false])
    shadow.shadow = false
    assert.equal(shadow.metrics().shadow, false)
  })
}

test('counters are off by default and count each outcome', () => {
  assert.equal(new Limiter('1/s').metrics(), null)
  assert.equal(new KeyedLimiter('1/s').metrics(), null)
  const clock = new ManualClock()
  const keyed = new KeyedLimiter('2/s; burst=2', { clock, metrics: true, maxKeys: 2 })
  for (const key of ['a', 'a', 'a', Buffer.from('b'), 7, 7, 7, 7]) {
    try {
      keyed.tryAcquire(key)
    } catch (e) {
      assert.equal(e.code, 'ERR_SLUICEGATE_KEY_STORE_FULL')
    }
  }
  keyed.peek('a')
  keyed.refund('a')
  assert.deepEqual(keyed.metrics(), {
    allowed: 3, rejected: 1, shadowRejected: 0, keysEvicted: 0, keyStoreFull: 4, storeErrors: 0, reconfigurations: 0, keys: 2, shadow: false,
  })
  const single = new Limiter('1/s', { clock, metrics: true })
  assert.equal(single.metrics().keys, null)
  const evicting = new KeyedLimiter('2/s', { clock, metrics: true, maxKeys: 1, onFull: 'evict' })
  evicting.tryAcquire('a', 0)
  evicting.tryAcquire('b', 0)
  assert.equal(evicting.metrics().keysEvicted, 1)
})

test('a peek is not counted, sync or async (the core\'s peek, as in Python)', async () => {
  const l = new Limiter('5/s', { clock: new ManualClock(), metrics: true })
  l.peek()
  l.peek()
  assert.equal((await l.peekAsync()).remaining, 5)
  assert.deepEqual([l.metrics().allowed, l.metrics().rejected], [0, 0])
  for (let i = 0; i < 6; i++) l.tryAcquire()
  assert.equal(l.peek().remaining, 0)
  await l.peekAsync()
  assert.deepEqual([l.metrics().allowed, l.metrics().rejected], [5, 1], 'the requests only')
  const seen = []
  const hooked = new Limiter('1/h', { clock: new ManualClock(), onReject: (r) => seen.push(r) })
  hooked.tryAcquire()
  hooked.peek()
  await hooked.peekAsync()
  await calls(seen, 0)
  assert.equal(seen.length, 0, 'a peek is no rejection')
})

test('a Composite\'s peek is its parts\' peeks: the figures of a request of cost 0, nothing counted', async () => {
  const clock = new ManualClock()
  const a = new Limiter('1/s; burst=3', { clock, metrics: true })
  const b = new Limiter('5/s', { clock, metrics: true })
  const both = new Composite([a, b])
  assert.equal(both.tryAcquire(2).remaining, 1)
  const d = both.peek()
  assert.deepEqual([d.allowed, d.remaining, d.limit], [true, 1, 3])
  assert.equal((await both.peekAsync()).remaining, 1)
  for (const p of [a, b]) assert.deepEqual([p.metrics().allowed, p.metrics().rejected], [0, 0])
  assert.equal(a.peek().remaining, 1)
})

test('the hook is called once per rejection, with the key, after the decision', async () => {
  const clock = new ManualClock()
  const seen = []
  const keyed = new KeyedLimiter('1/s; burst=1', { clock, onReject: (r) => seen.push(r) })
  for (const key of ['a', 'a', 42, '42', Buffer.from('b'), 'a']) keyed.tryAcquire(key)
  assert.equal(seen.length, 0, 'queued: it runs once the decision has returned')
  await calls(seen, 3)
  assert.deepEqual(seen.map((r) => [r.key.toString(), r.cost, r.decision.allowed]), [['a', 1, false], ['42', 1, false], ['a', 1, false]])
  assert.ok(Buffer.isBuffer(seen[0].key))
  keyed.shadow = true
  keyed.allow('a')
  await calls(seen, 4)
  assert.equal(seen.length, 4)
  assert.deepEqual([seen[3].decision.allowed, seen[3].decision.shadowRejected], [true, true])
  const single = []
  const limiter = new Limiter('1/s; burst=1', { clock, onReject: (r) => single.push(r) })
  limiter.allow()
  limiter.allow(1)
  await calls(single, 1)
  assert.deepEqual(single.map((r) => [r.key, r.cost]), [[null, 1]])
})

test('the hook may reconfigure the limiter', async () => {
  const clock = new ManualClock()
  const seen = []
  const limiter = new Limiter('1/s; burst=1', { clock, onReject: (r) => seen.push(limiter.setQuota('2/s; burst=2')) })
  assert.ok(limiter.allow())
  assert.equal(limiter.allow(), false)
  await calls(seen, 1)
  assert.equal(limiter.quota, '2/s')
})

test('a limiter whose hook refers to it is still collected', () => {
  // The hook's threadsafe function is a strong reference outside the garbage collector's
  // view: an onReject closing over its own limiter kept the limiter, and its native state,
  // alive for ever. Run with --expose-gc in a process of its own.
  const code = `
    const { KeyedLimiter, Limiter } = require(${JSON.stringify(new URL('../index.js', import.meta.url).pathname)})
    let collected = 0
    let hooks = 0
    const registry = new FinalizationRegistry(() => collected++)
    function make(i) {
      const single = new Limiter('1/minute', { onReject: () => { hooks++; single.metrics() } })
      const keyed = new KeyedLimiter('1/minute', { onReject: () => { hooks++; keyed.size } })
      registry.register(single, i)
      registry.register(keyed, i)
      single.allow(); single.allow()
      keyed.allow('a'); keyed.allow('a')
    }
    const tick = () => new Promise((r) => setTimeout(r, 5))
    ;(async () => {
      for (let i = 0; i < 20; i++) make(i)
      for (let i = 0; i < 50 && hooks < 40; i++) await tick()
      for (let i = 0; i < 50 && collected < 40; i++) { globalThis.gc(); await tick() }
      console.log(JSON.stringify({ hooks, collected }))
    })()
  `
  const out = execFileSync(process.execPath, ['--expose-gc', '-e', code], { encoding: 'utf8' })
  assert.deepEqual(JSON.parse(out), { hooks: 40, collected: 40 })
})

test('counters are exact on worker threads deciding at once', async () => {
  // Each worker decides on a limiter of its own environment, all at the same time (the
  // counters' per-thread slots are process-wide). Shared limiters (`Limiter.shared`) take no
  // options, so one limiter counted from several threads is tested in the core and Python.
  const code = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Limiter } = require(workerData.index)
    const l = new Limiter('1000/h; burst=1000', { metrics: true })
    let admitted = 0
    for (let i = 0; i < 1500; i++) admitted += l.allow()
    const m = l.metrics()
    parentPort.postMessage([admitted, m.allowed, m.rejected])
  `
  const index = new URL('../index.js', import.meta.url).pathname
  const runs = await Promise.all([0, 1, 2, 3].map(() => new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { index } })
    w.once('message', resolve)
    w.once('error', reject)
  })))
  for (const r of runs) assert.deepEqual(r, [1000, 1000, 500])
})

/** `name{labels} value` lines of a text exposition, as a Map (label order normalised). */
function samples(text) {
  const out = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    assert.ok(m, `not a sample line: ${line}`)
    const labels = m[2] ? m[2].match(/[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"/g).sort().join(',') : ''
    const key = `${m[1]}{${labels}}`
    assert.ok(!out.has(key), `repeated series ${key}`)
    out.set(key, Number(m[3]))
  }
  return out
}

function scenario() {
  const clock = new ManualClock()
  const api = new Limiter('2/s; burst=2', { clock, metrics: true, shadow: true })
  const users = new KeyedLimiter('1/s; burst=1', { clock, metrics: true })
  for (let i = 0; i < 5; i++) api.allow()
  for (const key of ['a', 'a', 'b', 'b', 'a']) users.allow(key)
  return { api, users }
}

test('renderPrometheus renders the core text', () => {
  const { api, users } = scenario()
  const text = renderPrometheus({ api, users })
  const s = samples(text)
  assert.equal(s.get('sluicegate_decisions_total{limiter="api",outcome="shadow_rejected"}'), 3)
  assert.equal(s.get('sluicegate_decisions_total{limiter="api",outcome="allowed"}'), 2)
  assert.equal(s.get('sluicegate_decisions_total{limiter="users",outcome="rejected"}'), 3)
  assert.equal(s.get('sluicegate_keys{limiter="users"}'), 2)
  assert.equal(s.get('sluicegate_shadow_mode{limiter="api"}'), 1)
  assert.equal(s.has('sluicegate_keys{limiter="api"}'), false)
  assert.match(text, /^# HELP sluicegate_decisions_total .+\n# TYPE sluicegate_decisions_total counter\n/)
  const escaped = renderPrometheus([[{ app: 'a"b\\c\nd' }, api]])
  assert.ok(escaped.includes('sluicegate_keys_evicted_total{app="a\\"b\\\\c\\nd"} 0'))
  assert.throws(() => renderPrometheus([[{ outcome: 'x' }, api]]), { code: 'ERR_SLUICEGATE_INVALID_OPTION' })
  assert.throws(() => renderPrometheus([[{ a: '1' }, api], [{ a: '1' }, users]]), { code: 'ERR_SLUICEGATE_INVALID_OPTION' })
  assert.throws(() => renderPrometheus({ off: new Limiter('1/s') }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => renderPrometheus({ x: 3 }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => renderPrometheus([[{ a: 1 }, api]]), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
})

test('prom-client exposes the same series as renderPrometheus, fresh at each scrape', async () => {
  const { api, users } = scenario()
  const registry = new client.Registry()
  const made = registerLimiters({ api, users }, { registry, client })
  assert.equal(made.length, 7)
  const exposed = await registry.metrics()
  assert.deepEqual(samples(exposed), samples(renderPrometheus({ api, users })))
  users.allow('c')
  assert.equal(samples(await registry.metrics()).get('sluicegate_decisions_total{limiter="users",outcome="allowed"}'), 3)
  // The help texts are the core's.
  const help = (text) => text.split('\n').filter((l) => l.startsWith('# HELP')).sort()
  assert.deepEqual(help(exposed), help(renderPrometheus({ api, users })))
  assert.throws(() => registerLimiters({ off: new Limiter('1/s') }, { registry: new client.Registry(), client }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
  assert.throws(() => registerLimiters([[{ a: '1' }, api], [{ b: '1' }, users]], { registry: new client.Registry(), client }), { code: 'ERR_SLUICEGATE_INVALID_ARG' })
})

const dir = mkdtempSync(join(tmpdir(), 'sluicegate-ops-'))
after(() => rmSync(dir, { recursive: true, force: true }))

test('shared-memory stores refuse setQuota', () => {
  const keyed = new KeyedLimiter('10/s', { store: `shm:${join(dir, 'k')}`, maxKeys: 16, metrics: true })
  assert.throws(() => keyed.setQuota('20/s'), { code: 'ERR_SLUICEGATE_STORE_UNSUPPORTED' })
  assert.equal(keyed.quota, '10/s')
  const single = new Limiter('10/s', { store: `shm:${join(dir, 's')}` })
  assert.throws(() => single.setQuota('20/s'), { code: 'ERR_SLUICEGATE_STORE_UNSUPPORTED' })
})
