// The shared conformance vectors (../conformance/vectors.json) and every algorithm's cases
// (../conformance/algorithms.json: cases and composite_cases) through the manual clock, in
// memory and in a shared-memory region.
import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Limiter, KeyedLimiter, Composite, ManualClock } from '../index.mjs'

import { algorithms, big, CODES, expected, figures, vectors } from './fixtures/vectors.mjs'

// A region's single bucket is made by its first request, a memory Limiter's at construction
// (the cases' start_ns): a request of cost 0 at construction makes them the same.
function limiterIn(quota, clock, store) {
  const l = new Limiter(quota, { clock, store })
  if (store !== undefined) l.tryAcquire(0)
  return l
}

// A case's limiter on its manual clock, in `store` (default memory; a keyed region of 64 keys).
const limiterFor = (c, clock, store) =>
  c.keyed
    ? new KeyedLimiter(c.quota, { clock, store, maxKeys: store === undefined ? undefined : 64 })
    : limiterIn(c.quota, clock, store)

// A region's words cover at least ten years of readings from its creation (a memory limiter's,
// a century): a reading beyond is ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE.
const REGION_SPAN_NS = 315_576_000_000_000_000n

/**
 * Runs case `c` through a limiter in `store` (default memory): 'ran', or for a region,
 * 'refused' (it refuses the quota) or 'span' (a step reads beyond the region's span).
 */
function runCase(c, store) {
  if (c.quota_error !== undefined) {
    assert.throws(() => new Limiter(c.quota, { store }), (e) => e.code === CODES[c.quota_error])
    assert.throws(() => new KeyedLimiter(c.quota, { store }), (e) => e.code === CODES[c.quota_error])
    return 'ran'
  }
  const clock = new ManualClock(big(c.start_ns))
  let limiter
  try {
    limiter = limiterFor(c, clock, store)
  } catch (e) {
    if (store !== undefined && e.code === 'ERR_SLUICEGATE_STORE_UNSUPPORTED') return 'refused'
    throw e
  }
  for (const [i, s] of c.steps.entries()) {
    clock.set(big(s.t_ns))
    const args = c.keyed ? [s.key, s.cost] : [s.cost]
    const where = `${c.name} step ${i}`
    if (s.op === 'refund') {
      limiter.refund(...args)
      continue
    }
    if (s.expect.error !== undefined) {
      assert.throws(() => limiter.tryAcquire(...args), (e) => e.code === CODES[s.expect.error], where)
      continue
    }
    let d
    try {
      d = limiter.tryAcquire(...args)
    } catch (e) {
      const beyond = big(s.t_ns) - big(c.start_ns) >= REGION_SPAN_NS
      if (store !== undefined && beyond && e.code === 'ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE') return 'span'
      throw e
    }
    assert.deepEqual(figures(d), expected(s.expect), where)
    // The boolean fast path agrees (a peek, so the state is unchanged).
    if (s.cost === 0) assert.equal(limiter.allow(...args), s.expect.allowed, where)
  }
  return 'ran'
}

/** Runs a composite case over parts made by `part(quota, clock)`. */
function runComposite(c, part) {
  const clock = new ManualClock(big(c.start_ns))
  const all = new Composite(c.quotas.map((q) => part(q, clock)))
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
}

const cases = [...vectors.cases.map((c) => ['vector', c]), ...algorithms.cases.map((c) => ['algorithm', c])]

for (const [file, c] of cases) {
  test(`${file} ${c.name}`, () => assert.equal(runCase(c), 'ran'))
}

// Composite limits: the parts share one manual clock; a step is consumed all-or-nothing.
for (const c of algorithms.composite_cases) {
  test(`composite ${c.name}`, () => runComposite(c, (q, clock) => new Limiter(q, { clock })))
}

// The same cases through the shared-memory store, each on fresh regions (in a temporary
// folder, removed afterwards), with the same decisions. A case whose quota a region refuses
// (ERR_SLUICEGATE_STORE_UNSUPPORTED: the sliding log, states beyond 64 bits) or that reads
// beyond a region's span is counted, not run.
describe('through a shared-memory region', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluicegate-conformance-'))
  after(() => rmSync(dir, { recursive: true, force: true }))
  let n = 0
  const region = () => `shm:${join(dir, `case-${n++}`)}`
  const outcomes = { ran: [], refused: [], span: [] }
  for (const [file, c] of cases) {
    test(`${file} ${c.name}`, () => outcomes[runCase(c, region())].push(c.name))
  }
  for (const c of algorithms.composite_cases) {
    test(`composite ${c.name}`, () => {
      try {
        runComposite(c, (q, clock) => limiterIn(q, clock, region()))
      } catch (e) {
        if (e.code !== 'ERR_SLUICEGATE_STORE_UNSUPPORTED') throw e
        return outcomes.refused.push(c.name)
      }
      outcomes.ran.push(c.name)
    })
  }
  test('more than 80% of the cases with a valid quota ran through regions', (t) => {
    const all = cases.length + algorithms.composite_cases.length
    const quotaErrors = cases.filter(([, c]) => c.quota_error !== undefined).length
    const { ran, refused, span } = outcomes
    t.diagnostic(`ran ${ran.length} of ${all} cases (${ran.length - quotaErrors} of the ${all - quotaErrors} with a valid quota)`)
    t.diagnostic(`refused by a region (${refused.length}): ${refused.join(', ')}`)
    t.diagnostic(`beyond a region's span (${span.length}): ${span.join(', ')}`)
    assert.equal(ran.length + refused.length + span.length, all, 'every case has an outcome')
    assert.ok(ran.length - quotaErrors > 0.8 * (all - quotaErrors), 'too few cases ran')
  })
})
