// The apps bench/web.mjs measures: Express and Fastify, each with no rate limiter, with
// sluicegate's adapter and with its best-known peer (express-rate-limit, @fastify/rate-limit).
// Every limit admits everything (10^9 a second): the benchmark measures the cost of a
// decision, not of a 429. Run as a script, it serves argv[2] ('express:sluicegate', ...) on
// 127.0.0.1 and a free port, which it reports over IPC.
import express from 'express'
import Fastify from 'fastify'
import { rateLimit as erl } from 'express-rate-limit'
import fastifyRateLimit from '@fastify/rate-limit'
import rateLimit from '../express.mjs'
import sluicegateFastify from '../fastify.mjs'

export const VARIANTS = {
  // The two floors of each framework: a middleware (an onRequest hook) that does nothing, and
  // one that sets the peer's default fields to constants (express-rate-limit's four draft-6
  // fields, @fastify/rate-limit's three). Any limiter that sends those fields pays the second;
  // the decision and the key are what a limiter adds to it. Fastify's third floor sets the
  // fields from a hook that an `onRoute` hook adds to each route, as plugins with per-route
  // options (ours, @fastify/rate-limit) add theirs.
  express: ['none', 'empty middleware', 'middleware + fields', 'sluicegate', 'express-rate-limit'],
  fastify: ['none', 'empty hook', 'hook + fields', 'route hook + fields', 'sluicegate', '@fastify/rate-limit'],
}

const DRAFT6_FIELDS = Object.freeze({ 'RateLimit-Policy': '1000000000;w=1', 'RateLimit-Limit': '1000000000', 'RateLimit-Remaining': '999999999', 'RateLimit-Reset': '1' })
const CONSTANT_FIELDS = Object.freeze({ 'x-ratelimit-limit': '1000000000', 'x-ratelimit-remaining': '999999999', 'x-ratelimit-reset': '1' })

/** The Express app for `variant`: a request handler. */
export function expressApp(variant) {
  const app = express()
  if (variant === 'sluicegate') app.use(rateLimit({ limit: 1e9, windowMs: 1000, legacyHeaders: false }))
  if (variant === 'empty middleware') app.use((_req, _res, next) => next())
  if (variant === 'middleware + fields') {
    app.use((_req, res, next) => {
      for (const name in DRAFT6_FIELDS) res.setHeader(name, DRAFT6_FIELDS[name])
      next()
    })
  }
  if (variant === 'express-rate-limit') app.use(erl({ limit: 1e9, windowMs: 1000, standardHeaders: 'draft-6', legacyHeaders: false }))
  app.get('/', (_req, res) => res.send('ok'))
  return app
}

/** The Fastify app for `variant`, ready. */
export async function fastifyApp(variant) {
  const app = Fastify()
  if (variant === 'sluicegate') await app.register(sluicegateFastify, { max: 1e9, timeWindow: 1000 })
  if (variant === '@fastify/rate-limit') await app.register(fastifyRateLimit, { max: 1e9, timeWindow: 1000 })
  if (variant === 'empty hook') app.addHook('onRequest', (_req, _reply, done) => done())
  if (variant === 'hook + fields') app.addHook('onRequest', (_req, reply, done) => { reply.headers(CONSTANT_FIELDS); done() })
  if (variant === 'route hook + fields') {
    const hook = (_req, reply, done) => { reply.headers(CONSTANT_FIELDS); done() }
    app.addHook('onRoute', (route) => { route.onRequest = [...(route.onRequest === undefined ? [] : [route.onRequest].flat()), hook] })
  }
  app.get('/', async () => 'ok')
  await app.ready()
  return app
}

/** CPU time this process has used, in microseconds (user and system). */
const cpuUs = () => {
  const u = process.cpuUsage()
  return u.user + u.system
}

/**
 * Per injected request (awaited one after another), after `n / 4` to warm up: `[wall µs, CPU
 * µs]`. CPU time is what the requests cost this process, whatever else the machine runs.
 */
async function injectedUs(framework, variant, n) {
  const { default: inject } = await import('light-my-request')
  const app = framework === 'express' ? expressApp(variant) : await fastifyApp(variant)
  const call = framework === 'express' ? (o) => inject(app, o) : (o) => app.inject(o)
  const run = async (k) => {
    const t0 = process.hrtime.bigint()
    const c0 = cpuUs()
    for (let i = 0; i < k; i++) {
      const r = await call({ url: '/' })
      if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`)
    }
    return [Number(process.hrtime.bigint() - t0) / 1e3 / k, (cpuUs() - c0) / k]
  }
  await run(Math.ceil(n / 4))
  return run(n)
}

if (process.argv[3] === 'serve') {
  // `serve PORT`: the app on 127.0.0.1:PORT, no IPC (bench/web-instructions.mjs runs it under
  // callgrind).
  const [framework, variant] = process.argv[2].split(':')
  const port = Number(process.argv[4])
  if (framework === 'express') expressApp(variant).listen(port, '127.0.0.1')
  else await (await fastifyApp(variant)).listen({ port, host: '127.0.0.1' })
} else if (process.send !== undefined && process.argv[2] !== undefined) {
  const [framework, variant] = process.argv[2].split(':')
  // `inject N`: one measurement in a fresh process (injected requests are retained by the
  // process in Node 20, with or without a limiter: a long loop in one process runs out of heap)
  if (process.argv[3] === 'inject') {
    process.send(await injectedUs(framework, variant, Number(process.argv[4])))
  } else {
    // The parent asks for the CPU time used so far (around each load run).
    process.on('message', () => process.send({ cpu: cpuUs() }))
  }
  if (process.argv[3] === 'inject') {
    // measured above
  } else if (framework === 'express') {
    const server = expressApp(variant).listen(0, '127.0.0.1', () => process.send(server.address().port))
  } else {
    const app = await fastifyApp(variant)
    await app.listen({ port: 0, host: '127.0.0.1' })
    process.send(app.server.address().port)
  }
}
