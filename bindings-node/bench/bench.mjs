// Per-call cost of sluicegate next to rate-limiter-flexible, `limiter`, a pure-JS bucket and
// empty native calls of the same shapes; then requests/s through Express. One run, one
// machine; writes bench/RESULTS.md (a Markdown fragment for BENCHMARKS.md).
//
//   node bench/bench.mjs            (QUICK=1 for a short smoke run)
import { createRequire } from 'node:module'
import { writeFileSync } from 'node:fs'
import { fork } from 'node:child_process'
import http from 'node:http'
import os from 'node:os'
import { Limiter, KeyedLimiter } from '../index.mjs'
import sg from '../index.mjs'

const require = createRequire(import.meta.url)
const { RateLimiterMemory } = require('rate-limiter-flexible')
const { RateLimiter: LimiterPkg } = require('limiter')
const native = sg._internal.native
const QUICK = process.env.QUICK === '1'
const ROUNDS = QUICK ? 3 : 7

// ---------------------------------------------------------------------------------------
// Timing: the median over rounds of the best-of-batches ns/op.

function timeSync(fn, n) {
  for (let i = 0; i < Math.min(n, 20000); i++) fn(i)
  const t = process.hrtime.bigint()
  for (let i = 0; i < n; i++) fn(i)
  return Number(process.hrtime.bigint() - t) / n
}
async function timeAsync(fn, n) {
  for (let i = 0; i < Math.min(n, 5000); i++) await fn(i)
  const t = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await fn(i)
  return Number(process.hrtime.bigint() - t) / n
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

// Pure-JS lazy-refill token bucket (float tokens, Date-free: performance.now()).
class JsBucket {
  constructor(rate, periodMs, burst) { this.perMs = rate / periodMs; this.burst = burst; this.tokens = burst; this.t = performance.now() }
  take(cost = 1) {
    const now = performance.now()
    this.tokens = Math.min(this.burst, this.tokens + (now - this.t) * this.perMs)
    this.t = now
    if (this.tokens >= cost) { this.tokens -= cost; return true }
    return false
  }
}

const KEYS = 100_000
const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`)

// Each case: [name, kind ('sync'|'async'), setup(allow) -> fn]
const ALLOW = '1000000000/ms'
const REJECT = '1/h; burst=1; initial=0'
function cases(mode) {
  const allow = mode === 'allow'
  const q = allow ? ALLOW : REJECT
  const rlfOpts = allow ? { points: 1e12, duration: 1 } : { points: 1, duration: 3600 }
  const lim = () => (allow ? new LimiterPkg({ tokensPerInterval: 1e12, interval: 'sec' }) : new LimiterPkg({ tokensPerInterval: 1, interval: 'hour' }))
  const js = () => (allow ? new JsBucket(1e12, 1000, 1e12) : new JsBucket(1, 3_600_000, 1))
  const single = [
    ['sluicegate Limiter#allow (boolean)', 'sync', () => { const l = new Limiter(q); return () => l.allow(1) }],
    ['sluicegate Limiter#tryAcquire (Decision)', 'sync', () => { const l = new Limiter(q); return () => l.tryAcquire(1).allowed }],
    ['floor: empty native call, allow shape (u32, number) -> boolean', 'sync', () => { const h = native.limiterNew(q); return () => native.allowNoop(h, 1) }],
    ['floor: empty native call + Decision object, tryAcquire shape', 'sync', () => { const h = native.limiterNew(q); const rd = sg._internal.readDecision; return () => rd(native.decideNoop(h, 1)).allowed }],
    ['shape: empty #[napi] fn (u32, f64) -> bool', 'sync', () => () => native.noopNapiAllow(1, 1)],
    ['shape: empty #[napi] class method (f64) -> bool', 'sync', () => { const o = new native.NoopLimiter(); return () => o.allow(1) }],
    ['rate-limiter-flexible RateLimiterMemory#consume', 'async', () => { const r = new RateLimiterMemory(rlfOpts); return () => r.consume('k', 1).catch(() => false) }],
    ['limiter RateLimiter#tryRemoveTokens', 'sync', () => { const l = lim(); return () => l.tryRemoveTokens(1) }],
    ['pure-JS lazy-refill bucket', 'sync', () => { const b = js(); return () => b.take(1) }],
  ]
  const keyed = [
    ['sluicegate KeyedLimiter#allow (boolean)', 'sync', () => { const l = new KeyedLimiter(q, { maxKeys: 2 * KEYS }); for (const k of keys) l.allow(k, 0 + (allow ? 1 : 0)); return (i) => l.allow(keys[i % KEYS], 1) }],
    ['sluicegate KeyedLimiter#tryAcquire (Decision)', 'sync', () => { const l = new KeyedLimiter(q, { maxKeys: 2 * KEYS }); for (const k of keys) l.allow(k, allow ? 1 : 0); return (i) => l.tryAcquire(keys[i % KEYS], 1).allowed }],
    ['floor: empty native call, keyed allow shape (u32, string, number)', 'sync', () => { const h = native.keyedNew(q); return (i) => native.keyedAllowNoop(h, keys[i % KEYS], 1) }],
    ['rate-limiter-flexible RateLimiterMemory#consume', 'async', () => { const r = new RateLimiterMemory(rlfOpts); return (i) => r.consume(keys[i % KEYS], 1).catch(() => false) }],
    ['limiter: Map of RateLimiter, tryRemoveTokens', 'sync', () => { const m = new Map(); for (const k of keys) m.set(k, lim()); return (i) => { const k = keys[i % KEYS]; let l = m.get(k); if (!l) m.set(k, (l = lim())); return l.tryRemoveTokens(1) } }],
    ['pure-JS: Map of lazy-refill buckets', 'sync', () => { const m = new Map(); for (const k of keys) m.set(k, js()); return (i) => { const k = keys[i % KEYS]; let b = m.get(k); if (!b) m.set(k, (b = js())); return b.take(1) } }],
  ]
  return { single, keyed }
}

async function measure(list, nSync, nAsync) {
  const fns = list.map(([name, kind, setup]) => [name, kind, setup()])
  const samples = fns.map(() => [])
  for (let r = 0; r < ROUNDS; r++) {
    // Interleaved: every case once per round.
    for (let i = 0; i < fns.length; i++) {
      const [, kind, fn] = fns[i]
      samples[i].push(kind === 'sync' ? timeSync(fn, nSync) : await timeAsync(fn, nAsync))
    }
  }
  return fns.map(([name], i) => [name, median(samples[i])])
}

const nSync = QUICK ? 200_000 : 1_000_000
const nAsync = QUICK ? 20_000 : 100_000
const results = {}
for (const mode of ['allow', 'reject']) {
  const { single, keyed } = cases(mode)
  results[`one key, ${mode}`] = await measure(single, nSync, nAsync)
  results[`${KEYS.toLocaleString('en')} keys, ${mode}`] = await measure(keyed, nSync, nAsync)
}
const core = {
  allow: median(Array.from({ length: ROUNDS }, () => native.coreDecisionNs(1_000_000, true))),
  reject: median(Array.from({ length: ROUNDS }, () => native.coreDecisionNs(1_000_000, false))),
}

// ---------------------------------------------------------------------------------------
// Express: a server per variant in a child process, loaded from here over loopback with a
// fixed number of keep-alive connections, variants interleaved round by round.

async function load(port, ms, conns) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: conns })
  let done = 0
  const end = performance.now() + ms
  const worker = () => new Promise((resolve) => {
    const one = () => {
      if (performance.now() >= end) return resolve()
      http.get({ host: '127.0.0.1', port, path: '/', agent }, (res) => {
        res.resume()
        res.on('end', () => { if (res.statusCode === 200) done++; one() })
      }).on('error', () => resolve())
    }
    one()
  })
  const t0 = performance.now()
  await Promise.all(Array.from({ length: conns }, worker))
  const s = (performance.now() - t0) / 1000
  agent.destroy()
  return done / s
}

async function startServer(variant) {
  const child = fork(new URL('./express-server.mjs', import.meta.url), [variant], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const port = await new Promise((resolve, reject) => { child.once('message', resolve); child.once('exit', reject) })
  return { child, port }
}

const variants = ['none', 'sluicegate', 'express-rate-limit']
const servers = {}
for (const v of variants) servers[v] = await startServer(v)
const rps = Object.fromEntries(variants.map((v) => [v, []]))
const LOAD_MS = QUICK ? 500 : 1500
for (const v of variants) await load(servers[v].port, 300, 16) // warm-up
for (let r = 0; r < ROUNDS; r++) {
  for (const v of variants) rps[v].push(await load(servers[v].port, LOAD_MS, 16))
}
for (const v of variants) servers[v].child.kill()
const expressRps = Object.fromEntries(variants.map((v) => [v, median(rps[v])]))
const overheadUs = (v) => (1e6 / expressRps[v] - 1e6 / expressRps.none)

// ---------------------------------------------------------------------------------------
// Report

const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1))
let md = `<!-- generated by bindings-node/bench/bench.mjs; do not edit by hand -->\n`
md += `### Node.js binding (\`bindings-node\`)\n\n`
md += `Node ${process.version}, ${os.cpus()[0]?.model ?? 'unknown CPU'} (${os.cpus().length} cores, load average ${os.loadavg()[0].toFixed(1)} at the end), `
md += `${new Date().toISOString().slice(0, 10)}. Median of ${ROUNDS} interleaved rounds; ns per call from JavaScript.\n`
md += `"allow": an admitting quota; "reject": an exhausted bucket. Keyed rows cycle through ${KEYS.toLocaleString('en')} keys (\`user:N\` strings).\n\n`
for (const [title, rows] of Object.entries(results)) {
  md += `| ${title} | ns/call |\n|---|---:|\n`
  for (const [name, ns] of rows) md += `| ${name} | ${f(ns)} |\n`
  md += '\n'
}
md += `Rust core alone (\`try_acquire\`, system clock, in-process loop): ${f(core.allow)} ns allow, ${f(core.reject)} ns reject.\n\n`

const get = (t, n) => results[t].find(([name]) => name === n)[1]
const tgt = []
for (const mode of ['allow', 'reject']) {
  const one = `one key, ${mode}`, many = `${KEYS.toLocaleString('en')} keys, ${mode}`
  const allowNs = get(one, 'sluicegate Limiter#allow (boolean)')
  const floor = get(one, 'floor: empty native call, allow shape (u32, number) -> boolean') + core[mode]
  const decision = get(one, 'sluicegate Limiter#tryAcquire (Decision)')
  const floorD = get(one, 'floor: empty native call + Decision object, tryAcquire shape') + core[mode]
  const rlf = get(one, 'rate-limiter-flexible RateLimiterMemory#consume')
  const kallow = get(many, 'sluicegate KeyedLimiter#allow (boolean)')
  const klim = get(many, 'limiter: Map of RateLimiter, tryRemoveTokens')
  tgt.push([`allow vs floor + core (${mode})`, `${f(allowNs)} / ${f(floor)} = ${(allowNs / floor).toFixed(2)}x`, '<= 1.3x', allowNs / floor <= 1.3])
  tgt.push([`tryAcquire vs floor + core (${mode})`, `${f(decision)} / ${f(floorD)} = ${(decision / floorD).toFixed(2)}x`, '<= 1.3x', decision / floorD <= 1.3])
  tgt.push([`rate-limiter-flexible / tryAcquire (${mode})`, `${(rlf / decision).toFixed(1)}x`, '>= 5x', rlf / decision >= 5])
  tgt.push([`keyed allow vs limiter Map, 100k keys (${mode})`, `${f(kallow)} vs ${f(klim)} ns`, 'no dearer', kallow <= klim])
}
const ours = overheadUs('sluicegate'), erl = overheadUs('express-rate-limit')
tgt.push(['Express overhead vs express-rate-limit', `${ours.toFixed(1)} vs ${erl.toFixed(1)} us/request`, '< half', ours < erl / 2])

md += `| Express, 16 keep-alive connections on 127.0.0.1 | requests/s | overhead per request |\n|---|---:|---:|\n`
for (const v of variants) md += `| ${v === 'none' ? 'no rate limiter' : v} | ${expressRps[v].toFixed(0)} | ${v === 'none' ? '-' : overheadUs(v).toFixed(1) + ' us'} |\n`
md += `\n| target | measured | goal | met |\n|---|---|---|---|\n`
for (const [name, got, goal, ok] of tgt) md += `| ${name} | ${got} | ${goal} | ${ok ? 'yes' : '**no**'} |\n`
writeFileSync(new URL('./RESULTS.md', import.meta.url), md)
console.log(md)
