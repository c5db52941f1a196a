// Every conformance case (vectors.json, algorithms.json: single, keyed and composite) through
// a real redis-server on the test clock: the same decisions as in memory, field for field,
// through the Promise API.
//
// `?clock=test` makes the scripts read the limiter's ManualClock instead of the server's TIME.
// Only an addon built with the cargo feature `redis-test-clock` accepts it (the published one
// refuses it: redis.test.mjs checks that), so this file loads the test build that
// ci/check.d/30-node.sh makes (`npm run build:test-clock`) from $SLUICEGATE_TEST_CLOCK_ADDON
// (default: ../target/node-test-clock/sluicegate.node), through napi's loader override. Each
// test file runs in a process of its own, so the other files keep the published addon.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { algorithms, big, CODES, expected, figures, vectors } from './fixtures/vectors.mjs'
import { needsRedis, startRedis } from './fixtures/redis.mjs'

const addon = process.env.SLUICEGATE_TEST_CLOCK_ADDON ??
  fileURLToPath(new URL('../../target/node-test-clock/sluicegate.node', import.meta.url))

function options() {
  const redis = needsRedis()
  if (redis.skip) return redis
  if (existsSync(addon) || process.env.CI === 'true') return {}
  return { skip: `no test-clock addon at ${addon} (npm run build:test-clock)` }
}

test('conformance vectors through Redis on the test clock, bit for bit', options(), async (t) => {
  process.env.NAPI_RS_NATIVE_LIBRARY_PATH = addon
  const { Composite, KeyedLimiter, Limiter, ManualClock } = await import('../index.mjs')
  const srv = await startRedis()
  t.after(() => srv.stop())
  let n = 0
  const store = () => `${srv.url}?clock=test&negative_cache=off&on_error=error&timeout=1s&prefix=c${n++}`
  const failures = []
  let cases = 0
  let steps = 0
  const check = async (where, s, call) => {
    steps++
    if (s.expect.error !== undefined) {
      const e = await call().then(() => null, (x) => x)
      if (e?.code !== CODES[s.expect.error]) failures.push(`${where}: expected ${s.expect.error}, got ${e?.code ?? 'a decision'}`)
      return
    }
    try {
      assert.deepEqual(figures(await call()), expected(s.expect))
    } catch (e) {
      failures.push(`${where}: ${e.message.split('\n').slice(0, 12).join(' ')}`)
    }
  }
  // A single limiter's (or a part's) bucket is made at start_ns by a request of cost 0, as a
  // memory limiter's is at construction (conformance/README.md); a keyed bucket at its key's
  // first request.
  const single = async (quota, clock) => {
    const l = new Limiter(quota, { clock, store: store() })
    await l.tryAcquireAsync(0)
    return l
  }
  const all = [...vectors.cases, ...algorithms.cases]
  for (const c of all) {
    if (c.quota_error !== undefined) continue
    cases++
    const clock = new ManualClock(big(c.start_ns))
    const limiter = c.keyed ? new KeyedLimiter(c.quota, { clock, store: store() }) : await single(c.quota, clock)
    for (const [i, s] of c.steps.entries()) {
      clock.set(big(s.t_ns))
      const args = c.keyed ? [s.key, s.cost] : [s.cost]
      if (s.op === 'refund') await limiter.refundAsync(...args)
      else await check(`${c.name} step ${i}`, s, () => limiter.tryAcquireAsync(...args))
    }
  }
  for (const c of algorithms.composite_cases) {
    cases++
    const clock = new ManualClock(big(c.start_ns))
    const parts = []
    for (const q of c.quotas) parts.push(await single(q, clock))
    const both = new Composite(parts)
    for (const [i, s] of c.steps.entries()) {
      clock.set(big(s.t_ns))
      if (s.op === 'refund') await both.refundAsync(s.cost)
      else await check(`${c.name} step ${i}`, s, () => both.tryAcquireAsync(s.cost))
    }
  }
  t.diagnostic(`${cases} cases, ${steps} decisions compared through Redis`)
  assert.ok(cases >= 190 && steps >= 2600, `only ${cases} cases, ${steps} steps`)
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} of ${steps} decisions differ`)
})
