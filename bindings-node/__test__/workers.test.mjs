// Shared limiters enforced across worker_threads: admitted <= burst + rate x elapsed, for one
// bucket and for every key of a shared keyed limiter.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Worker } from 'node:worker_threads'
import { Limiter, KeyedLimiter } from '../index.mjs'

const WORKERS = 4
// The burst refills in 2 s: the main thread's peek, after the workers' messages, still finds
// the bucket drained through any stall of under 2 s (at 1000/s it refilled in 200 ms).
const QUOTA = '100/s; burst=200'

const body = `
const { parentPort, workerData } = require('node:worker_threads')
const { Limiter } = require(workerData.index)
const l = Limiter.shared(workerData.name, workerData.quota)
let admitted = 0, calls = 0
const end = Date.now() + workerData.ms
while (Date.now() < end) {
  for (let i = 0; i < 256; i++) { calls++; if (l.tryAcquire(1).allowed) admitted++ }
}
parentPort.postMessage({ admitted, calls })
`

test(`${WORKERS} workers share one bucket: admitted <= burst + rate x elapsed`, async () => {
  const name = `workers-${process.pid}`
  const ms = 300
  const main = Limiter.shared(name, QUOTA) // created before the workers start: t0 is now
  const t0 = performance.now()
  const results = await Promise.all(
    Array.from({ length: WORKERS }, () => new Promise((resolve, reject) => {
      const w = new Worker(body, { eval: true, workerData: { index: new URL('../index.js', import.meta.url).pathname, name, quota: QUOTA, ms } })
      w.once('message', resolve)
      w.once('error', reject)
    })),
  )
  const elapsedS = (performance.now() - t0) / 1000
  const admitted = results.reduce((s, r) => s + r.admitted, 0)
  const calls = results.reduce((s, r) => s + r.calls, 0)
  const bound = 200 + Math.ceil(100 * elapsedS) + 1
  assert.ok(admitted <= bound, `admitted ${admitted} > bound ${bound}`)
  assert.ok(calls > admitted, 'the workers were over the limit')
  assert.ok(admitted >= 200, `the burst was admitted (${admitted})`)
  // The main thread sees the same bucket, drained by the workers.
  assert.ok(main.peek().remaining < 200)
})

const keyedBody = `
const { parentPort, workerData } = require('node:worker_threads')
const { KeyedLimiter } = require(workerData.index)
const l = KeyedLimiter.shared(workerData.name, workerData.quota, { maxKeys: 64 })
const keys = Array.from({ length: workerData.keys }, (_, i) => 'k' + i)
const admitted = new Array(keys.length).fill(0)
let calls = 0
const end = Date.now() + workerData.ms
while (Date.now() < end) {
  for (let i = 0; i < 256; i++) {
    const k = (calls++ * 7 + workerData.id) % keys.length
    if (l.allow(keys[k])) admitted[k]++
  }
}
parentPort.postMessage({ admitted, calls })
`

test(`${WORKERS} workers share one keyed limiter: per key admitted <= burst + rate x elapsed`, async () => {
  const name = `keyed-workers-${process.pid}`
  const quota = '25/s; burst=50' // refilled in 2 s (at 500/s, in 100 ms): as above, for the peek
  const keys = 8
  const ms = 300
  const main = KeyedLimiter.shared(name, quota, { maxKeys: 64 })
  const t0 = performance.now()
  const results = await Promise.all(
    Array.from({ length: WORKERS }, (_, id) => new Promise((resolve, reject) => {
      const w = new Worker(keyedBody, { eval: true, workerData: { index: new URL('../index.js', import.meta.url).pathname, name, quota, ms, keys, id } })
      w.once('message', resolve)
      w.once('error', reject)
    })),
  )
  const elapsedS = (performance.now() - t0) / 1000
  const bound = 50 + Math.ceil(25 * elapsedS) + 1
  for (let k = 0; k < keys; k++) {
    const admitted = results.reduce((s, r) => s + r.admitted[k], 0)
    assert.ok(admitted <= bound, `key k${k}: admitted ${admitted} > bound ${bound}`)
    assert.ok(admitted >= 50, `key k${k}: the burst was admitted (${admitted})`)
  }
  assert.ok(results.reduce((s, r) => s + r.calls, 0) > keys * bound, 'the workers were over the limit')
  // The main thread sees the same table, its keys drained by the workers.
  assert.equal(main.size, keys)
  assert.ok(main.peek('k0').remaining < 50)
})
