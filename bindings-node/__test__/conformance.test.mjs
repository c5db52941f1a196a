// The shared conformance vectors (../conformance/vectors.json) and every algorithm's cases
// (../conformance/algorithms.json: cases and composite_cases) through the manual clock.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Limiter, KeyedLimiter, Composite, ManualClock } from '../index.mjs'

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

const load = (name) => {
  const f = parseExact(readFileSync(new URL(`../../conformance/${name}`, import.meta.url), 'utf8'))
  assert.equal(f.format, 1, `unknown ${name} format`)
  return f
}
const vectors = load('vectors.json')
const algorithms = load('algorithms.json')

const CODES = {
  invalid_quota: 'ERR_SLUICEGATE_INVALID_QUOTA',
  parse_error: 'ERR_SLUICEGATE_PARSE',
  insufficient_capacity: 'ERR_SLUICEGATE_INSUFFICIENT_CAPACITY',
}

const big = (x) => BigInt(x)

function figures(d) {
  return {
    allowed: d.allowed,
    limit: big(d.limit),
    remaining: big(d.remaining),
    retry_after_ns: big(d.retryAfterNs),
    reset_after_ns: big(d.resetAfterNs),
  }
}

function expected(e) {
  return {
    allowed: e.allowed,
    limit: big(e.limit),
    remaining: big(e.remaining),
    retry_after_ns: big(e.retry_after_ns),
    reset_after_ns: big(e.reset_after_ns),
  }
}

for (const [file, c] of [...vectors.cases.map((c) => ['vector', c]), ...algorithms.cases.map((c) => ['algorithm', c])]) {
  test(`${file} ${c.name}`, () => {
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
      assert.deepEqual(figures(limiter.tryAcquire(...args)), expected(s.expect), where)
      // The boolean fast path agrees (a peek, so the state is unchanged).
      if (s.cost === 0) assert.equal(limiter.allow(...args), s.expect.allowed, where)
    })
  })
}

// Composite limits: the parts share one manual clock; a step is consumed all-or-nothing.
for (const c of algorithms.composite_cases) {
  test(`composite ${c.name}`, () => {
    const clock = new ManualClock(big(c.start_ns))
    const all = new Composite(c.quotas.map((q) => new Limiter(q, { clock })))
    c.steps.forEach((s, i) => {
      clock.set(big(s.t_ns))
      if (s.op === 'refund') return all.refund(s.cost)
      const where = `${c.name} step ${i}`
      if (s.expect.error !== undefined) {
        assert.throws(() => all.tryAcquire(s.cost), (e) => e.code === CODES[s.expect.error], where)
        return
      }
      assert.deepEqual(figures(all.tryAcquire(s.cost)), expected(s.expect), where)
      if (s.cost === 0) assert.equal(all.allow(0), s.expect.allowed, where)
    })
  })
}
