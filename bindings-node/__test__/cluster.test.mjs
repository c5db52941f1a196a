// The README's node:cluster server, run for real: its worker code (the README block, as
// written) in 4 cluster workers of this process on 127.0.0.1 and a free port, 200 requests
// from here with keep-alive off so that the cluster spreads the connections over the workers.
// With the shared-memory store the host admits exactly the quota, 10, and so it does with a
// Redis store (a redis-server started here); with the memory store each worker admits its own
// 10: 40.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import cluster from 'node:cluster'
import http from 'node:http'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { killAll, within } from './fixtures/within.mjs'
import { needsRedis, startRedis } from './fixtures/redis.mjs'

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..')
const WORKERS = 4
const REQUESTS = 200
const README_STORE = "'shm:/api-limits'"

// The README's block, in a folder whose node_modules resolve 'sluicegate' to this package and
// 'express' to its dev dependency; the region is made in that folder.
const dir = mkdtempSync(join(tmpdir(), 'sluicegate-cluster-'))
after(() => rmSync(dir, { recursive: true, force: true }))
mkdirSync(join(dir, 'node_modules'))
symlinkSync(pkg, join(dir, 'node_modules', 'sluicegate'), 'dir')
symlinkSync(join(pkg, 'node_modules', 'express'), join(dir, 'node_modules', 'express'), 'dir')
const readme = readFileSync(join(pkg, 'README.md'), 'utf8')
const server = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('cluster.isPrimary'))

/** The README's server with `store` in place of its store; its path. */
function serverWith(store, name) {
  assert.ok(server?.includes(README_STORE), `the README has a cluster server with store ${README_STORE}`)
  const file = join(dir, `${name}.js`)
  writeFileSync(file, server.replace(README_STORE, `'${store}'`))
  return file
}

/**
 * Starts the server at `file` in `WORKERS` cluster workers (this process is the primary, and
 * hands each new connection to the next worker in turn) on 127.0.0.1; the port once all listen.
 */
async function start(file, workers) {
  cluster.schedulingPolicy = cluster.SCHED_RR
  cluster.setupPrimary({ exec: file, silent: false })
  let port
  const listening = Array.from({ length: WORKERS }, () => {
    const w = cluster.fork({ PORT: '0', HOST: '127.0.0.1' })
    workers.push(w)
    return new Promise((resolve, reject) => {
      w.once('listening', (address) => resolve(address.port))
      w.once('exit', (code, signal) => reject(new Error(`worker exited (${code ?? signal}) before listening`)))
    })
  })
  for (const p of await within(Promise.all(listening), 30_000, 'the workers listening')) {
    assert.ok(port === undefined || port === p, 'the workers share one port')
    port = p
  }
  return port
}

/** One GET on a new connection (keep-alive off): its status. */
function get(port) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode))
    })
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out')))
    req.on('error', reject)
  })
}

/** `REQUESTS` requests, 4 at a time: how many were admitted (200) and rejected (429). */
async function hammer(port) {
  const counts = { 200: 0, 429: 0 }
  let sent = 0
  const lane = async () => {
    while (sent < REQUESTS) {
      sent++
      const status = await get(port)
      counts[status] = (counts[status] ?? 0) + 1
    }
  }
  await within(Promise.all(Array.from({ length: 4 }, lane)), 60_000, `${REQUESTS} requests`)
  return counts
}

test(`${WORKERS} cluster workers on the shm store admit exactly 10 of ${REQUESTS}`, async () => {
  const workers = []
  try {
    const port = await start(serverWith(`shm:${join(dir, 'api-limits')}`, 'shm'), workers)
    const t0 = performance.now()
    const counts = await hammer(port)
    const seconds = ((performance.now() - t0) / 1000).toFixed(1)
    // 10/minute refills one token every 6 s: the requests take far less.
    assert.deepEqual(counts, { 200: 10, 429: REQUESTS - 10 }, `in ${seconds} s`)
  } finally {
    await killAll(workers.map((w) => w.process))
  }
})

test(`${WORKERS} cluster workers on a Redis store admit exactly 10 of ${REQUESTS}`, needsRedis(), async () => {
  const srv = await startRedis()
  const workers = []
  try {
    const port = await start(serverWith(`${srv.url}?prefix=cluster&on_error=error&timeout=1s`, 'redis'), workers)
    const counts = await hammer(port)
    assert.deepEqual(counts, { 200: 10, 429: REQUESTS - 10 })
  } finally {
    await killAll(workers.map((w) => w.process))
    await srv.stop()
  }
})

test(`${WORKERS} cluster workers on the memory store admit 10 each: 40 of ${REQUESTS}`, async () => {
  // Each worker process keeps its own buckets in its own memory, and the primary hands the
  // connections to the workers in turn (50 each): every worker admits the client's first 10.
  // This is the limit a shared-memory region makes host-wide.
  const workers = []
  try {
    const port = await start(serverWith('memory', 'memory'), workers)
    const counts = await hammer(port)
    assert.deepEqual(counts, { 200: 10 * WORKERS, 429: REQUESTS - 10 * WORKERS })
  } finally {
    await killAll(workers.map((w) => w.process))
  }
})
