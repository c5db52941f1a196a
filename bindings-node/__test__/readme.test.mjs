// Runs every ```js block of the repository README and of bindings-node/README.md that uses
// only the package (no Express server, no top-level await): each in a fresh function scope,
// with `require` resolving 'sluicegate' to this package. A `// N` comment after a
// console.log states what it must print. A shared-memory region a snippet names
// ('shm:/api-limits', a file in /dev/shm) is made in a fresh temporary folder instead.
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { fileURLToPath } from 'node:url'
import { dirname, join } from 'node:path'

const here = dirname(fileURLToPath(import.meta.url))
const pkg = join(here, '..')
const require = createRequire(join(pkg, 'package.json'))
const self = require(pkg)
const sub = { sluicegate: self }
const req = (name) => (name in sub ? sub[name] : require(name))

const blocks = (file) =>
  [...readFileSync(file, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1])

const runnable = (code) =>
  !/\bawait\b|express|listen\(|worker_threads|import /.test(code)

const regions = mkdtempSync(join(tmpdir(), 'sluicegate-readme-'))
after(() => rmSync(regions, { recursive: true, force: true }))
let runs = 0
/** `code` with its regions in a folder of this run's own. */
function inTemp(code) {
  const d = join(regions, String(runs++))
  mkdirSync(d)
  return code.replace(/'shm:\/([\w.-]+)'/g, (_, name) => `'shm:${d}/${name}'`)
}

for (const [name, file] of [
  ['root README', join(pkg, '..', 'README.md')],
  ['bindings-node README', join(pkg, 'README.md')],
]) {
  const all = blocks(file)
  test(`${name} has js snippets`, () => assert.ok(all.length >= 1))
  all.filter(runnable).forEach((code, i) => {
    test(`${name} snippet ${i} runs and prints what it says`, () => {
      const expected = [...code.matchAll(/console\.log\(.*\)\s*\/\/\s*(.+)$/gm)]
        .map((m) => m[1].trim())
        .filter((e) => /^[\w.\- ]+$/.test(e)) // plain values only, not prose
      const run = () => {
        const out = []
        const console = { log: (...a) => out.push(a.map(String).join(' ')) }
        new Function('require', 'console', inTemp(code))(req, console)
        return expected.filter((e) => !out.some((l) => l.includes(e))).map((e) => `${e} in ${out}`)
      }
      // The snippets read the system clock: a figure such as `retryAfterMs` is exact only if
      // their calls run within the same millisecond, which a loaded machine may not allow
      // once. A second run must print everything.
      const missing = run()
      if (missing.length > 0) assert.deepEqual(run(), [], `first run: ${missing.join('; ')}`)
    })
  })
}

// The Fastify example (ES module syntax, top-level await), its imports as requires and its
// `listen` replaced by handing the app back: requests through fastify.inject() meet the limits
// it states.
test('bindings-node README Fastify example limits as it says', async (t) => {
  let code = blocks(join(pkg, 'README.md')).find((b) => b.includes("from 'sluicegate/fastify'"))
  assert.ok(code, 'a Fastify example')
  const listen = /await fastify\.listen\([^)]*\)\)?/
  assert.match(code, listen)
  code = code.replace(listen, 'return fastify').replace(/^import (\w+) from ('[^']+')/gm, 'const $1 = require($2)')
  const fastifyReq = (name) => (name === 'sluicegate/fastify' ? require(join(pkg, 'fastify.js')) : req(name))
  const AsyncFunction = (async () => {}).constructor
  const app = await new AsyncFunction('require', code)(fastifyReq)
  t.after(() => app.close())
  const statuses = async (url, n) => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await app.inject(url)).statusCode)
    return out
  }
  assert.deepEqual(await statuses('/', 6), [200, 200, 200, 200, 200, 429])
  assert.deepEqual(await statuses('/health', 6), [200, 200, 200, 200, 200, 200])
})
