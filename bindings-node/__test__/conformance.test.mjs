// The shared conformance vectors (../conformance/vectors.json) through the manual clock.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Limiter, KeyedLimiter, ManualClock } from '../index.mjs'

// Times reach 3e18 ns, beyond a double's exact integers: every integer literal of 16 digits
// or more becomes a BigInt (strings are matched first so their digits are left alone).
function parseExact(text) {
  const marked = text.replace(/("(?:[^"\\]|\\.)*")|(-?\d{16,})/g, (m, str, big) =>
    str !== undefined ? str : `"\\u0000big:${big}"`,
  )
  return JSON.parse(marked, (_k, v) =>
    typeof v === 'string' && v.startsWith('\u0000big:') ? BigInt(v.slice(5)) : v,
  )
}

const file = parseExact(readFileSync(new URL('../../conformance/vectors.json', import.meta.url), 'utf8'))
assert.equal(file.format, 1, 'unknown vectors format')

const CODES = {
  invalid_quota: 'ERR_SLUICEGATE_INVALID_QUOTA',
  parse_error: 'ERR_SLUICEGATE_PARSE',
  insufficient_capacity: 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY',
}

const big = (x) => BigInt(x)

for (const c of file.cases) {
  test(`vector ${c.name}`, () => {
    if (c.quota_error !== undefined) {
      assert.throws(() => new Limiter(c.quota), (e) => e.code === CODES[c.quota_error])
      assert.throws(() => new KeyedLimiter(c.quota), (e) => e.code === CODES[c.quota_error])
      return
    }
    const clock = new ManualClock(big(c.start_ns))
    const limiter = c.keyed ? new KeyedLimiter(c.quota, { clock }) : new Limiter(c.quota, { clock })
    c.steps.forEach((s, i) => {
      clock.set(big(s.t_ns))
      const args = c.keyed ? [s.key, s.cost] : [s.cost]
      if (s.op === 'refund') return limiter.refund(...args)
      const where = `${c.name} step ${i}`
      if (s.expect.error !== undefined) {
        assert.throws(() => limiter.tryAcquire(...args), (e) => e.code === CODES[s.expect.error], where)
        return
      }
      const d = limiter.tryAcquire(...args)
      assert.deepEqual(
        {
          allowed: d.allowed,
          limit: big(d.limit),
          remaining: big(d.remaining),
          retry_after_ns: big(d.retryAfterNs),
          reset_after_ns: big(d.resetAfterNs),
        },
        {
          allowed: s.expect.allowed,
          limit: big(s.expect.limit),
          remaining: big(s.expect.remaining),
          retry_after_ns: big(s.expect.retry_after_ns),
          reset_after_ns: big(s.expect.reset_after_ns),
        },
        where,
      )
      // The boolean fast path agrees (a peek, so the state is unchanged).
      if (s.cost === 0) assert.equal(limiter.check(...args), s.expect.allowed, where)
    })
  })
}
