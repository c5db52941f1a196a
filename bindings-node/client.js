'use strict'
// Client identity: which key a web request is limited by, decided by the core's
// `sluicegate::client::ClientResolver` (docs/CLIENT-IDENTITY.md). This file converts the
// options and the request, and turns the core's warnings into process warnings.

const native = require('./native.js')

// index.js requires this file: its helpers are read when first needed, once it has loaded.
const invalidArg = (message) => require('./index.js')._internal.invalidArg(message)

// On a socket: each resolver's key of its peer (a WeakMap keyed by resolver).
const PEER_KEYS = Symbol('sluicegate.peerKeys')
// The peers' keys a resolver keeps (`ClientResolver#keyOf`).
const PEERS_KEPT = 4096

// The core names the resolver's options as Rust and Python spell them; Node's are these.
const NODE_NAMES = [['trusted_proxies', 'trustedProxies'], ['ipv6_prefix', 'ipv6Subnet'], ['ipv4_prefix', 'ipv4Subnet'], ['proxy_header', 'proxyHeader']]
/** A core message about the resolver's options, with Node's option names. */
const nodeNames = (text) => NODE_NAMES.reduce((t, [core, node]) => t.replaceAll(core, node), text)

/**
 * A header value as one line (Node joins repeated lines with `, `; an array is joined so too);
 * anything but a string or an array of strings is `ERR_SLUICEGATE_INVALID_ARG`.
 */
function line(v, name) {
  if (v === undefined || typeof v === 'string') return v
  if (Array.isArray(v) && v.every((s) => typeof s === 'string')) return v.join(', ')
  throw invalidArg(`headers[${JSON.stringify(name)}] must be a string or an array of strings`)
}

/** `trustedProxies` in the core's text form: a hop count, or addresses, ranges and names. */
function trustText(v) {
  if (v === undefined || v === false) return undefined
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) throw invalidArg(`trustedProxies must be a whole hop count, got ${v}`)
    return String(v)
  }
  if (typeof v === 'string') return v
  if (Array.isArray(v) && v.every((s) => typeof s === 'string')) {
    // Each item is one address, range or name, as the core's list of ranges reads it: joined
    // into the text form, `['2']` would be a hop count, `['none']` no proxy, and an item with
    // a comma several ranges.
    for (const s of v) {
      if (s.includes(',') || /^\s*(\d*|none)\s*$/i.test(s)) {
        throw invalidArg(`trustedProxies: ${JSON.stringify(s)} is not an address, a CIDR range or one of loopback, private, linklocal (an array holds one per item; a hop count is a number)`)
      }
    }
    return v.length === 0 ? 'none' : v.join(',')
  }
  throw invalidArg('trustedProxies must be a hop count, or addresses and CIDR ranges (an array or a comma-separated string)')
}

/**
 * A prefix length option (its range checked by the core), or `undefined`; `false` (as
 * express-rate-limit v8's `ipv6Subnet: false`) is no subnet: the whole address, `whole` bits.
 */
function prefix(v, what, whole) {
  if (v === undefined) return undefined
  if (v === false && whole !== undefined) return whole
  // At most 255 here: the addon reads a 32-bit integer, which would wrap 2^32 + 64 to 64.
  if (!Number.isInteger(v) || v < 0 || v > 255) {
    throw invalidArg(`${what} must be a prefix length (a whole number of bits)${whole === undefined ? '' : ', or false (the whole address)'}`)
  }
  return v
}

const RESOLVER_OPTIONS = new Set(['trustedProxies', 'proxyHeader', 'ipv6Subnet', 'ipv4Subnet'])

/**
 * Turns a request's peer address and forwarding headers into its client's key: the peer by
 * default; `X-Forwarded-For` (or `Forwarded`, with `proxyHeader: 'forwarded'`) only from the
 * proxies `trustedProxies` names (a hop count, or addresses, CIDR ranges and `loopback`,
 * `private`, `linklocal`), read from the right to the first untrusted hop; IPv6 by its
 * `ipv6Subnet` prefix (default 64; `false`: the whole address), IPv4-mapped IPv6 as IPv4. A
 * setup that makes clients share one key is reported once per resolver and kind as a process
 * warning (`SLUICEGATE_*` codes).
 */
class ClientResolver {
  #r
  // Peer address -> key, for requests without forwarding headers (a key that depends on the
  // peer alone): a new connection from a known peer skips the native call. Bounded: cleared
  // when full.
  #peers = new Map()

  constructor(options = {}) {
    if (options === null || typeof options !== 'object') throw invalidArg('options must be an object')
    for (const k of Object.keys(options)) {
      if (!RESOLVER_OPTIONS.has(k)) throw invalidArg(`unknown ClientResolver option ${JSON.stringify(k)} (known: ${[...RESOLVER_OPTIONS].join(', ')})`)
    }
    const { trustedProxies, proxyHeader, ipv6Subnet, ipv4Subnet } = options
    if (proxyHeader !== undefined && typeof proxyHeader !== 'string') throw invalidArg('proxyHeader must be a string')
    try {
      this.#r = new native.ClientResolver(
        trustText(trustedProxies), proxyHeader, prefix(ipv6Subnet, 'ipv6Subnet', 128), prefix(ipv4Subnet, 'ipv4Subnet'),
      )
    } catch (err) {
      if (typeof err?.message === 'string') err.message = nodeNames(err.message)
      throw err
    }
  }

  /**
   * The key of a request from `peer` (its address as text; `undefined`: none) with these
   * headers (Node's lower-case header object; only the forwarding ones are read).
   */
  resolve(peer, headers = {}) {
    if (peer !== undefined && peer !== null && typeof peer !== 'string') throw invalidArg('peer must be a string')
    if (headers === null || typeof headers !== 'object') throw invalidArg('headers must be an object')
    const r = this.#r.resolve(
      peer, line(headers['x-forwarded-for'], 'x-forwarded-for'), line(headers.forwarded, 'forwarded'), line(headers['x-real-ip'], 'x-real-ip'),
    )
    if (typeof r === 'string') return r
    process.emitWarning(nodeNames(r[2]), { type: 'SluicegateWarning', code: `SLUICEGATE_${r[1].toUpperCase()}` })
    return r[0]
  }

  /**
   * The key of an HTTP request (Node's, Express's or Fastify's): its socket's peer and its
   * headers. A request without forwarding headers is keyed by its peer alone, which a
   * connection never changes: that key is kept on the socket for the connection's next
   * requests (keep-alive), per resolver.
   */
  keyOf(req) {
    const { socket, headers } = req
    if (socket == null || headers['x-forwarded-for'] !== undefined || headers.forwarded !== undefined || headers['x-real-ip'] !== undefined) {
      return this.resolve(socket?.remoteAddress, headers)
    }
    let memo = socket[PEER_KEYS]
    if (memo === undefined) memo = socket[PEER_KEYS] = new WeakMap()
    let key = memo.get(this)
    if (key === undefined) {
      const peer = socket.remoteAddress
      key = typeof peer === 'string' ? this.#peers.get(peer) : undefined
      if (key === undefined) {
        key = this.resolve(peer, headers)
        if (typeof peer === 'string') {
          if (this.#peers.size >= PEERS_KEPT) this.#peers.clear()
          this.#peers.set(peer, key)
        }
      }
      memo.set(this, key)
    }
    return key
  }

  /** The trusted proxies, in the core's text form (`'none'`, a hop count, or ranges). */
  get trustedProxies() {
    return this.#r.trustedProxies
  }

  /** The IPv6 prefix length of keys. */
  get ipv6Subnet() {
    return this.#r.ipv6Prefix
  }
}

module.exports = { ClientResolver }
