// Decisions per second and latency (p50, p99) on one redis-server, side by side in one run:
// sluicegate's KeyedLimiter on a Redis store (`tryAcquireAsync`, and `tryAcquireMany` batches)
// next to rate-limiter-flexible's RateLimiterRedis over ioredis (its default, and with
// ioredis's auto-pipelining), at 1 and 50 concurrent callers. Writes bench/REDIS.md (a
// Markdown fragment for BENCHMARKS.md).
//
//   node bench/redis.mjs            (QUICK=1 for a short smoke run)
//
// Each caller awaits its decision before asking again; a latency is one await, measured
// with performance.now(). The limit admits everything (10^6 per second a key, as in the
// Rust benchmark), over 10,000 keys in the same order for every limiter, so each decision is
// a full script call (no negative cache, no rejected short path). (10^9 per second, 1000
// tokens a microsecond, would measure the scripts' slower limb arithmetic instead of their
// fast path: core/src/store/redis/SCRIPTS.md, the sizes paragraph.) The variants run in turn, ROUNDS times, and the table shows
// the median round of each (and the spread of decisions/s across rounds).
import { createRequire } from 'node:module'
import { writeFileSync } from 'node:fs'
import os from 'node:os'
import { KeyedLimiter } from '../index.mjs'
import { command, startRedis } from '../__test__/fixtures/redis.mjs'

const require = createRequire(import.meta.url)
const { RateLimiterRedis } = require('rate-limiter-flexible')
const Redis = require('ioredis')

const QUICK = process.env.QUICK === '1'
const ROUNDS = QUICK ? 2 : 5
const CALLS = QUICK ? 2_000 : 20_000
const KEYS = 10_000
const keys = Array.from({ length: KEYS }, (_, i) => `client-${(i * 7919) % KEYS}`)

/**
 * `ops` calls of `decide(i)` by `callers` concurrent callers, each call deciding `size`
 * requests: decisions/s and the calls' latencies (ms).
 */
async function run(decide, callers, ops, size = 1) {
  const lat = new Float64Array(ops)
  let next = 0
  const lane = async () => {
    for (;;) {
      const i = next++
      if (i >= ops) return
      const t = performance.now()
      await decide(i)
      lat[i] = performance.now() - t
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: callers }, lane))
  const seconds = (performance.now() - t0) / 1000
  lat.sort()
  const q = (p) => lat[Math.min(ops - 1, Math.floor(p * ops))]
  return { perSec: (ops * size) / seconds, p50: q(0.5), p99: q(0.99) }
}

const BATCH = 50
const one = (decide) => (i) => decide(keys[i % KEYS])
const batchOf = (i) => Array.from({ length: BATCH }, (_, j) => keys[(i * BATCH + j) % KEYS])

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

async function main() {
  const srv = await startRedis()
  const plain = new Redis({ port: srv.port, host: '127.0.0.1', lazyConnect: false })
  const piped = new Redis({ port: srv.port, host: '127.0.0.1', enableAutoPipelining: true })
  try {
    await plain.ping()
    await piped.ping()
    const sg = new KeyedLimiter('1000000/s', { store: `${srv.url}?prefix=bench-sg&on_error=error&timeout=1s` })
    const rlf = new RateLimiterRedis({ storeClient: plain, points: 1e6, duration: 1, keyPrefix: 'bench-rlf' })
    const rlfPiped = new RateLimiterRedis({ storeClient: piped, points: 1e6, duration: 1, keyPrefix: 'bench-rlfp' })
    const variants = [
      ['sluicegate `tryAcquireAsync`', one((key) => sg.tryAcquireAsync(key))],
      ['rate-limiter-flexible `RateLimiterRedis` (ioredis)', one((key) => rlf.consume(key, 1))],
      ['rate-limiter-flexible `RateLimiterRedis` (ioredis, autopipelining)', one((key) => rlfPiped.consume(key, 1))],
    ]
    const results = new Map()
    const add = (name, callers, r) => {
      const id = `${name}|${callers}`
      if (!results.has(id)) results.set(id, { name, callers, rounds: [] })
      results.get(id).rounds.push(r)
    }
    // Warm-up: scripts loaded, connections open, JIT warm.
    for (const [, decide] of variants) await run(decide, 50, Math.min(CALLS, 2_000))
    for (let round = 0; round < ROUNDS; round++) {
      for (const callers of [1, 50]) {
        const n = callers === 1 ? CALLS / 4 : CALLS
        for (const [name, decide] of variants) add(name, callers, await run(decide, callers, n))
        add(`sluicegate \`tryAcquireMany\` (batches of ${BATCH})`, callers, await run((i) => sg.tryAcquireMany(batchOf(i)), callers, n / BATCH, BATCH))
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS}\n`)
    }
    const stats = sg.redisStats()
    // The server's own time per script call (INFO commandstats): sluicegate's FCALL, the
    // other's EVALSHA.
    const info = await command(srv.port, 'INFO', 'commandstats')
    const perCall = (cmd) => info.match(new RegExp(`cmdstat_${cmd}:calls=(\\d+),usec=\\d+,usec_per_call=([\\d.]+)`))
    const server = ['fcall', 'evalsha']
      .map((c) => [c, perCall(c)])
      .filter(([, m]) => m)
      .map(([c, m]) => `${c.toUpperCase()} ${m[2]} µs a call (${Number(m[1]).toLocaleString('en-US')} calls)`)
      .join(', ')
    const rows = [...results.values()].map(({ name, callers, rounds }) => {
      const per = rounds.map((r) => r.perSec)
      const mid = rounds.find((r) => r.perSec === median(per))
      return { name, callers, perSec: mid.perSec, lo: Math.min(...per), hi: Math.max(...per), p50: mid.p50, p99: mid.p99 }
    })
    rows.sort((a, b) => a.callers - b.callers)
    const fmt = (x) => Math.round(x).toLocaleString('en-US')
    const ms = (x) => (x * 1000).toFixed(0)
    const lines = [
      `Node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} (${os.cpus().length} cores), redis-server on loopback, ${ROUNDS} rounds of ${CALLS} decisions (${CALLS / 4} at 1 caller); the median round, and the range of decisions/s over the rounds. A batch's latency is the whole batch's.`,
      '',
      '| limiter | callers | decisions/s | range | p50 µs | p99 µs |',
      '|---|---:|---:|---:|---:|---:|',
      ...rows.map((r) => `| ${r.name} | ${r.callers} | ${fmt(r.perSec)} | ${fmt(r.lo)}–${fmt(r.hi)} | ${ms(r.p50)} | ${ms(r.p99)} |`),
      '',
      `sluicegate's counters after the run: ${stats.decided.toLocaleString('en-US')} decided, ${stats.timeouts} timeouts, ${stats.failedError} errors, ${stats.connects} connection(s). The server's time per script call (INFO commandstats): ${server}.`,
      '',
    ]
    const text = lines.join('\n')
    process.stdout.write(text)
    if (!QUICK) writeFileSync(new URL('./REDIS.md', import.meta.url), text)
  } finally {
    plain.disconnect()
    piped.disconnect()
    await srv.stop()
  }
}

await main()
