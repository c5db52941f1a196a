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

// A case's limiter on its manual clock, in `store` (default memory; a keyed region of 64 keys).
// A region's single bucket is made with the region, as a memory Limiter's at construction.
const limiterFor = (c, clock, store) =>
  c.keyed
    ? new KeyedLimiter(c.quota, { clock, store, maxKeys: store === undefined ? undefined : 64 })
    : new Limiter(c.quota, { clock, store })

// What a region may refuse (ERR_SLUICEGATE_STORE_UNSUPPORTED), and nothing else: the sliding
// log, and the one quota of the files whose exact state outgrows a region's 95 bits.
const regionRefuses = (quota) =>
  /algorithm\s*=\s*sliding_log/.test(quota) || quota === '281474976710655/s; algorithm=sliding_window'

/**
 * Runs case `c` through a limiter in `store` (default memory): 'ran', or for a region,
 * 'refused' (it refuses the quota, which must be one that regions refuse).
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
    if (store !== undefined && e.code === 'ERR_SLUICEGATE_STORE_UNSUPPORTED' && regionRefuses(c.quota)) {
      return 'refused'
    }
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
    assert.deepEqual(figures(limiter.tryAcquire(...args)), expected(s.expect), where)
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
// folder, removed afterwards), with the same decisions, strictly: a case either runs as the
// file says or its quota is one that regions refuse (regionRefuses).
describe('through a shared-memory region', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluicegate-conformance-'))
  after(() => rmSync(dir, { recursive: true, force: true }))
  let n = 0
  const region = () => `shm:${join(dir, `case-${n++}`)}`
  const outcomes = { ran: [], refused: [] }
  for (const [file, c] of cases) {
    test(`${file} ${c.name}`, () => outcomes[runCase(c, region())].push(c.name))
  }
  for (const c of algorithms.composite_cases) {
    test(`composite ${c.name}`, () => {
      try {
        runComposite(c, (q, clock) => new Limiter(q, { clock, store: region() }))
      } catch (e) {
        if (e.code !== 'ERR_SLUICEGATE_STORE_UNSUPPORTED' || !c.quotas.some(regionRefuses)) throw e
        return outcomes.refused.push(c.name)
      }
      outcomes.ran.push(c.name)
    })
  }
  test('every case ran through regions, but the quotas regions refuse', (t) => {
    const all = cases.length + algorithms.composite_cases.length
    const quotaErrors = cases.filter(([, c]) => c.quota_error !== undefined).length
    const { ran, refused } = outcomes
    t.diagnostic(`ran ${ran.length} of ${all} cases (${ran.length - quotaErrors} of the ${all - quotaErrors} with a valid quota)`)
    t.diagnostic(`refused by a region (${refused.length}): ${refused.join(', ')}`)
    assert.equal(ran.length + refused.length, all, 'every case has an outcome')
    const mustRefuse = [
      ...cases.filter(([, c]) => c.quota_error === undefined && regionRefuses(c.quota)).map(([, c]) => c.name),
      ...algorithms.composite_cases.filter((c) => c.quotas.some(regionRefuses)).map((c) => c.name),
    ]
    assert.deepEqual([...refused].sort(), mustRefuse.sort(), 'regions refuse exactly the quotas they must')
  })
})
