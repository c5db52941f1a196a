'use strict'
// prom-client integration (an optional peer dependency): counters and gauges whose `collect`
// reads each limiter's `metrics()` snapshot at scrape time. Names and help texts are the
// core's (those of `renderPrometheus`), so both expositions carry the same series.

const { renderPrometheus, _internal } = require('./index.js')

const { invalidArg } = _internal

// Family -> the snapshot field it reports (`outcome`: by outcome, the decisions family).
const COUNTERS = {
  sluicegate_keys_evicted_total: 'keysEvicted',
  sluicegate_key_store_full_total: 'keyStoreFull',
  sluicegate_store_errors_total: 'storeErrors',
  sluicegate_reconfigurations_total: 'reconfigurations',
}
const OUTCOMES = { allowed: 'allowed', rejected: 'rejected', shadow_rejected: 'shadowRejected' }

/**
 * The app's prom-client: from this package's place, else from the app's (the current folder's
 * and the main module's). `npm install ./bindings-node` links the folder, whose own lookup
 * does not reach the app's node_modules.
 */
function promClient() {
  try {
    return require('prom-client')
  } catch (err) {
    if (err?.code !== 'MODULE_NOT_FOUND') throw err
    const from = [process.cwd(), ...(require.main?.paths ?? [])]
    let found
    try {
      found = require.resolve('prom-client', { paths: from })
    } catch {
      throw err
    }
    return require(found)
  }
}

/** `[labels, limiter]` pairs of `{ name: limiter }` or of an array of pairs. */
function seriesOf(limiters) {
  if (Array.isArray(limiters)) return limiters.map((p) => (Array.isArray(p) && p.length === 2 ? [p[0], p[1]] : null))
  if (limiters === null || typeof limiters !== 'object') {
    throw invalidArg('limiters must be { name: limiter } or an array of [labels, limiter] pairs')
  }
  return Object.entries(limiters).map(([name, limiter]) => [{ limiter: name }, limiter])
}

/** The core's help text of each family (from `# HELP` lines of its rendering). */
function helpTexts(series) {
  const help = {}
  for (const line of renderPrometheus(series).split('\n')) {
    const m = /^# HELP (\S+) (.*)$/.exec(line)
    if (m) help[m[1]] = m[2]
  }
  return help
}

const toNumber = (v) => (typeof v === 'bigint' ? Number(v) : v)

/**
 * Registers the counters of `limiters` (`{ name: limiter }`, label `limiter`, or an array of
 * `[labels, limiter]` pairs; every label set with the same names; limiters built with
 * `metrics: true`) with prom-client: `sluicegate_decisions_total{outcome}`,
 * `sluicegate_keys_evicted_total`, ..., `sluicegate_keys`, `sluicegate_shadow_mode`. Each
 * scrape reads fresh snapshots. `options.registry` (default prom-client's global registry);
 * `options.client`, the prom-client module (default: `require('prom-client')`). Returns the
 * metrics made (to remove them with `registry.removeSingleMetric(name)`).
 */
function registerLimiters(limiters, options = {}) {
  if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
  const series = seriesOf(limiters)
  if (series.length === 0 || series.includes(null)) {
    throw invalidArg('limiters must be { name: limiter } or a non-empty array of [labels, limiter] pairs')
  }
  const help = helpTexts(series) // the core checks labels and that every limiter counts
  const names = Object.keys(series[0][0])
  for (const [labels] of series) {
    const these = Object.keys(labels)
    if (these.length !== names.length || these.some((n, i) => n !== names[i])) {
      throw invalidArg(`every label set must have the names ${names.join(', ')}`)
    }
  }
  const client = options.client ?? promClient()
  const registers = [options.registry ?? client.register]
  const snapshots = () => series.map(([labels, limiter]) => [labels, limiter.metrics()])
  const made = []
  made.push(new client.Counter({
    name: 'sluicegate_decisions_total',
    help: help.sluicegate_decisions_total,
    labelNames: [...names, 'outcome'],
    registers,
    collect() {
      this.reset()
      for (const [labels, m] of snapshots()) {
        for (const [outcome, field] of Object.entries(OUTCOMES)) this.inc({ ...labels, outcome }, toNumber(m[field]))
      }
    },
  }))
  // One sample per limiter: counters from a field, gauges from a function (undefined: none).
  const families = [
    ...Object.entries(COUNTERS).map(([name, field]) => [client.Counter, name, (m) => toNumber(m[field])]),
    [client.Gauge, 'sluicegate_keys', (m) => (m.keys === null ? undefined : toNumber(m.keys))],
    [client.Gauge, 'sluicegate_shadow_mode', (m) => (m.shadow ? 1 : 0)],
  ]
  for (const [Kind, name, value] of families) {
    made.push(new Kind({
      name,
      help: help[name],
      labelNames: names,
      registers,
      collect() {
        this.reset()
        for (const [labels, m] of snapshots()) {
          const v = value(m)
          if (v === undefined) continue
          if (Kind === client.Gauge) this.set(labels, v)
          else this.inc(labels, v)
        }
      },
    }))
  }
  return made
}

module.exports = { registerLimiters }
