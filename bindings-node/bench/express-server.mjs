// One Express server for bench.mjs: argv[2] picks the rate limiter; reports its port over IPC.
import express from 'express'
import { rateLimit as erl } from 'express-rate-limit'
import rateLimit from '../express.mjs'

const app = express()
const variant = process.argv[2]
// Admitting quotas: the benchmark measures the cost of a decision, not of a 429.
if (variant === 'sluicegate') app.use(rateLimit({ limit: 1e9, windowMs: 1000, legacyHeaders: false }))
if (variant === 'express-rate-limit') app.use(erl({ limit: 1e9, windowMs: 1000, standardHeaders: 'draft-6', legacyHeaders: false }))
app.get('/', (_req, res) => res.send('ok'))
const server = app.listen(0, '127.0.0.1', () => process.send(server.address().port))
