import type { KeyedLimiter, Limiter } from './index'

export interface RegisterOptions {
  /** A prom-client `Registry` (default: prom-client's global `register`). */
  registry?: unknown
  /** The prom-client module (default: `require('prom-client')`). */
  client?: unknown
}

/**
 * Registers limiters' counters with prom-client (an optional peer dependency): each scrape reads
 * every limiter's `metrics()`. `{ name: limiter }` (label `limiter`) or `[labels, limiter]`
 * pairs, every limiter built with `metrics: true`. Returns the prom-client metrics made.
 */
export declare function registerLimiters(
  limiters: Record<string, Limiter | KeyedLimiter> | Array<[Record<string, string>, Limiter | KeyedLimiter]>,
  options?: RegisterOptions,
): unknown[]
