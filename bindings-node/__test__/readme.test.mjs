// The READMEs' JavaScript, run from the READMEs' own text (fixtures/readme.mjs: 'sluicegate'
// is this package, `import` a require, top-level `await` allowed; a `// N` comment after a
// console.log is what it must print). Every code block of bindings-node/README.md is named
// below by a text only it contains: run here, with the behaviour it promises checked; run by
// another test file (which extracts it by the same text); or not run, for a stated reason. A
// block that is none of these fails the test, so a new example cannot go untested. Every js
// block of the repository README runs too (its other languages are their packages' tests').
// A shared-memory region a snippet names ('shm:/api-limits', a file in /dev/shm) is made in a
// fresh temporary folder instead; the Fastify example listens on 127.0.0.1 and a free port; the
// Express example (a middleware, no listen) is driven by light-my-request.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import inject from 'light-my-request'
import { fences, misprinted, pkg, runSnippet, snippetRequire } from './fixtures/readme.mjs'

const README = join(pkg, 'README.md')
const ROOT_README = join(pkg, '..', 'README.md')
const sg = snippetRequire()('sluicegate')

const regions = mkdtempSync(join(tmpdir(), 'sluicegate-readme-'))
after(() => rmSync(regions, { recursive: true, force: true }))
let runs = 0
/** `code` with its regions in a folder of this run's own. */
function inTemp(code) {
  const d = join(regions, String(runs++))
  mkdirSync(d)
  return code.replace(/'shm:\/([\w.-]+)'/g, (_, name) => `'shm:${d}/${name}'`)
}

/**
 * Runs `code` and checks that it prints what it says. Snippets on the system clock print
 * figures such as `retryAfterMs` that are exact only if their calls run within one millisecond,
 * which a loaded machine may not allow once: a second run must print everything. The locals
 * (`options.returns`) of the run that printed right.
 */
async function printsWhatItSays(code, options = {}) {
  let run = await runSnippet(inTemp(code), options)
  const first = misprinted(code, run.printed)
  if (first.length > 0) {
    run = await runSnippet(inTemp(code), options)
    assert.deepEqual(misprinted(code, run.printed), [], `first run: ${first.join('; ')}`)
  }
  return run.locals
}

/** A number as the README writes it (`60_000`). */
const num = (s) => Number(s.replace(/_/g, ''))

/** The figure `re` (one group) finds in `code`. */
function figure(code, re) {
  const m = re.exec(code)
  assert.ok(m, `the snippet states ${re}`)
  return num(m[1])
}

/** `sluicegate` with every limiter it makes on `clock` (unless given one): exact figures. */
function onClock(clock) {
  class Limiter extends sg.Limiter {
    constructor(quota, options = {}) { super(quota, { clock, ...options }) }
  }
  class KeyedLimiter extends sg.KeyedLimiter {
    constructor(quota, options = {}) { super(quota, { clock, ...options }) }
  }
  return { ...sg, Limiter, KeyedLimiter }
}

// bindings-node/README.md, block by block.
const BLOCKS = [
  { marker: 'npm install ./bindings-node', skip: 'a shell command: the install (ci/check.d/30-node.sh runs both install paths)' },
  { marker: "new Limiter('10/s; burst=2')", run: quickstart, name: 'Quickstart (decisions, headers, acquire)' },
  { marker: 'algorithm=leaky_queue; max_delay=250ms', run: leakyQueueAndComposite, name: 'leaky queue and Composite' },
  { marker: "new KeyedLimiter('100/minute', { maxKeys: 100_000, onFull: 'evict' })", run: keyed, name: 'KeyedLimiter' },
  { marker: 'limit: 100, windowMs: 60_000,', run: expressExample, name: 'Express middleware' },
  { marker: "from 'sluicegate/fastify'", run: fastifyExample, name: 'Fastify plugin' },
  { marker: "Limiter.shared('upstream-api', '50/s')", run: workerThreads, name: 'worker threads' },
  { marker: "store: 'shm:/api-limits', maxKeys: 100_000", run: sharedMemory, name: 'shared-memory store' },
  { marker: 'cluster.isPrimary', elsewhere: 'cluster.test.mjs' }, // 4 cluster workers of a process
  { marker: "store: 'redis://", elsewhere: 'redis.test.mjs' }, // needs a redis-server
  { marker: 'process.env.LIMITS_STORE', run: everyStore, name: 'the *Async methods on every store' },
  { marker: 'renderPrometheus({ api })', run: operating, name: 'live quota, shadow mode, metrics' },
  { marker: 'npm ci --ignore-scripts', skip: 'shell commands: the build, the tests and the CI script (this test is among them)' },
]

test('every code block of bindings-node/README.md is run, run elsewhere, or skipped with a reason', () => {
  const blocks = fences(README)
  for (const { code, line } of blocks) {
    const named = BLOCKS.filter((b) => code.includes(b.marker))
    assert.equal(named.length, 1, `the block at README.md:${line} is named by ${named.length} entries of BLOCKS, not one: add it (run, elsewhere or skip)`)
  }
  for (const b of BLOCKS) {
    assert.equal(blocks.filter(({ code }) => code.includes(b.marker)).length, 1, `one block contains ${JSON.stringify(b.marker)}`)
    assert.equal([b.run, b.elsewhere, b.skip].filter((v) => v !== undefined).length, 1, b.marker)
    if (b.skip !== undefined) assert.ok(b.skip.length > 0, 'a reason')
    if (b.elsewhere !== undefined) {
      // The other test finds the block by the same text.
      const other = join(pkg, '__test__', b.elsewhere)
      assert.ok(existsSync(other), b.elsewhere)
      assert.ok(readFileSync(other, 'utf8').includes(b.marker), `${b.elsewhere} extracts the block by ${JSON.stringify(b.marker)}`)
    }
  }
})

for (const b of BLOCKS.filter((b) => b.run !== undefined)) {
  test(`bindings-node README, ${b.name}: runs as written and does what it says`, async (t) => {
    const block = fences(README).find(({ code }) => code.includes(b.marker))
    assert.ok(block, b.marker)
    await b.run(block.code, t)
  })
}

/** Decisions, headers, the fast path, acquire (on the system clock, as written). */
async function quickstart(code) {
  const { d, a } = await printsWhatItSays(code, { returns: ['d', 'a'] })
  assert.equal(d.allowed, false, 'the third request is over the burst')
  assert.equal(a.allowed, true, 'the next token came within the 500 ms')
}

/** A leaky queue's reservations, and a Composite of two limiters (the previous block's `Limiter`). */
async function leakyQueueAndComposite(code) {
  const clock = new sg.ManualClock(0n)
  const perUserLimiter = new sg.Limiter('1/s; burst=3', { clock })
  const globalLimiter = new sg.Limiter('100/s; burst=50', { clock })
  const t0 = performance.now()
  const { locals: { q, r, both } } = await runSnippet(code, { scope: { Limiter: sg.Limiter, perUserLimiter, globalLimiter }, returns: ['q', 'r', 'both'] })
  const elapsed = performance.now() - t0
  assert.equal(r.allowed, true)
  assert.equal(r.retryAfterMs, 0, 'the first slot is now')
  const rate = 1000 / figure(code, /new Limiter\('(\d+)\/s; algorithm=leaky_queue/)
  // The cancelled reservation was the slot one interval on: acquire reserved it again and
  // resolved at it (timers may fire a millisecond early).
  assert.ok(elapsed >= rate - 5, `acquire resolved at its slot, ${rate} ms on: ${elapsed} ms`)
  assert.deepEqual(both.parts.map((p) => p.peek().remaining), [1, 48], 'tryAcquire(2) took 2 from every part')
}

/** One bucket per key, the key rule. */
async function keyed(code) {
  const { perUser } = await printsWhatItSays(code, { returns: ['perUser'] })
  assert.equal(perUser.peek(Buffer.from('42')).remaining, perUser.peek(42n).remaining, '42n and the bytes of "42" are the key 42')
}

/** The Express middleware: draft-7 fields, skip, cost, the 429. Driven by light-my-request. */
async function expressExample(code) {
  const { locals: { app } } = await runSnippet(code, { returns: ['app'] })
  const limit = figure(code, /limit: ([\d_]+),/)
  const windowMs = figure(code, /windowMs: ([\d_]+)/)
  const postCost = figure(code, /'POST' \? (\d+) :/)
  const t0 = performance.now()
  // No route follows the middleware: an admitted request is Express's 404.
  const first = await inject(app, { url: '/' })
  assert.equal(first.statusCode, 404)
  assert.equal(first.headers['ratelimit-policy'], `${limit};w=${windowMs / 1000}`)
  assert.match(first.headers.ratelimit, new RegExp(`^limit=${limit}, remaining=${limit - 1}, reset=\\d+$`))
  assert.equal(first.headers['x-ratelimit-limit'], undefined, 'legacyHeaders: false')
  const health = await inject(app, { url: '/health' })
  assert.equal(health.headers.ratelimit, undefined, 'skipped: not limited, not counted')
  // POSTs cost more: the rest of the limit is spent in POSTs (plus what the refill gave back
  // meanwhile, a token per windowMs / limit).
  let posts = 0
  let res
  while ((res = await inject(app, { method: 'POST', url: '/' })).statusCode !== 429) {
    assert.equal(res.statusCode, 404)
    assert.ok(++posts <= limit, 'POSTs are limited')
  }
  const refilled = Math.ceil(((performance.now() - t0) * limit) / windowMs)
  assert.ok(posts >= Math.floor((limit - 1) / postCost) && posts <= Math.floor((limit - 1 + refilled) / postCost), `${posts} POSTs admitted`)
  assert.match(res.headers['retry-after'], /^[1-9]\d*$/)
  assert.match(res.headers.ratelimit, /^limit=\d+, remaining=\d+, reset=\d+$/)
  assert.ok(res.payload.length > 0 && !/Cannot POST/.test(res.payload), `the middleware's message: ${res.payload}`)
  assert.equal((await inject(app, { url: '/health' })).statusCode, 404, 'the skipped path passes past the limit')
}

/** The Fastify plugin: a route's own limit, an exempt route; the snippet's listen on a free port. */
async function fastifyExample(code, t) {
  const listen = /await fastify\.listen\(\{ port: 3000 \}\)/
  assert.match(code, listen)
  const { locals: { fastify } } = await runSnippet(code.replace(listen, "await fastify.listen({ port: 0, host: '127.0.0.1' })"), { returns: ['fastify'] })
  t.after(() => fastify.close())
  const base = `http://127.0.0.1:${fastify.server.address().port}`
  const max = figure(code, /rateLimit: \{ max: (\d+),/)
  const statuses = async (path, n) => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await fetch(base + path)).status)
    return out
  }
  assert.deepEqual(await statuses('/', max), Array(max).fill(200))
  const over = await fetch(base)
  assert.equal(over.status, 429)
  assert.match(over.headers.get('retry-after'), /^[1-9]\d*$/)
  assert.equal(over.headers.get('x-ratelimit-limit'), String(max))
  assert.equal((await over.json()).statusCode, 429)
  assert.deepEqual(await statuses('/health', max + 1), Array(max + 1).fill(200), 'config.rateLimit: false')
}

/** The block, run in this thread and in a worker: one bucket for both. */
async function workerThreads(code) {
  const { locals: { api } } = await runSnippet(code, { returns: ['api'] })
  const burst = api.peek().limit
  assert.equal(api.peek().remaining, burst, 'a new bucket is full')
  const worker = new Worker(`
    const { parentPort, workerData } = require('node:worker_threads')
    const { createRequire } = require('node:module')
    const pkgRequire = createRequire(workerData.pkg + '/package.json')
    const req = (name) => (name === 'sluicegate' ? pkgRequire(workerData.pkg) : pkgRequire(name))
    const api = new Function('require', workerData.code + '\\nreturn api')(req)
    parentPort.postMessage(api.tryAcquire(api.peek().remaining).allowed)
  `, { eval: true, workerData: { pkg, code } })
  // The bucket refills in a second (the README's quota): this thread peeks in the message's
  // own handler, before the worker's terminate (which a loaded machine may take long over),
  // so the second is left for the message alone.
  const [took, left] = await new Promise((resolve, reject) => {
    worker.once('message', (took) => resolve([took, api.peek().remaining]))
    worker.once('error', reject)
  })
  await worker.terminate()
  assert.equal(took, true, 'the worker took the whole bucket')
  // This thread sees the worker's take.
  assert.ok(left < burst, `the same bucket: ${left} of ${burst} left`)
  assert.throws(() => sg.Limiter.shared('upstream-api', `${burst + 1}/s`), (e) => e.code === 'ERR_SLUICEGATE_INVALID_ARG', 'another quota for the name throws')
}

/** A keyed limiter in a shared-memory region (made in a temporary folder): another opener shares it. */
async function sharedMemory(code) {
  const local = inTemp(code)
  const { printed, locals: { perClient } } = await runSnippet(local, { returns: ['perClient'] })
  assert.deepEqual(misprinted(code, printed), [])
  // Another opener of the region (another process would do the same) sees the request taken.
  const [, quota, store] = /new KeyedLimiter\('([^']+)', \{ store: '(shm:[^']+)'/.exec(local)
  const other = new sg.KeyedLimiter(quota, { store })
  const { limit, remaining } = other.peek('203.0.113.7')
  assert.equal(remaining, perClient.peek('203.0.113.7').remaining)
  assert.equal(remaining, Number(limit) - 1)
}

/** One code path for every store: `LIMITS_STORE` absent (memory) and a shared-memory region. */
async function everyStore(code) {
  const count = figure(code, /new KeyedLimiter\('(\d+)\/minute'/)
  for (const store of [undefined, `shm:${join(regions, 'every-store')}`]) {
    const clock = new sg.ManualClock(0n)
    const { locals: { handle } } = await runSnippet(code, {
      require: snippetRequire({ sluicegate: onClock(clock) }),
      scope: { process: { env: store === undefined ? {} : { LIMITS_STORE: store } } },
      returns: ['handle'],
    })
    const answers = []
    for (let i = 0; i <= count; i++) answers.push(await handle('alice'))
    assert.deepEqual(answers, [...Array(count).fill('ok'), `retry in ${60_000 / count} ms`], store ?? 'memory')
  }
}

/** Live quota, shadow mode, metrics, the Prometheus text. */
async function operating(code) {
  const { api } = await printsWhatItSays(code, { returns: ['api'] })
  assert.equal(api.quota, '20/m', 'setQuota took')
}

// The repository README: every js block runs and prints what it says.
for (const [i, { code, line }] of fences(ROOT_README).filter((f) => f.lang === 'js').entries()) {
  test(`root README js block ${i} (line ${line}) runs and prints what it says`, async () => {
    await printsWhatItSays(code)
  })
}
