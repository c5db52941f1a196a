// One shared limiter enforced across worker_threads: admitted <= initial + rate x elapsed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Worker } from 'node:worker_threads'
import { Limiter } from '../index.mjs'

const WORKERS = 4
const QUOTA = '1000/s; burst=200'

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
  const bound = 200 + Math.ceil(1000 * elapsedS) + 1
  assert.ok(admitted <= bound, `admitted ${admitted} > bound ${bound}`)
  assert.ok(calls > admitted, 'the workers were over the limit')
  assert.ok(admitted >= 200, `the burst was admitted (${admitted})`)
  // The main thread sees the same bucket, drained by the workers.
  assert.ok(main.peek().remaining < 200)
})
