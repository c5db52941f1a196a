// Runs every ```js block of the repository README and of bindings-node/README.md that uses
// only the package (no Express server, no top-level await): each in a fresh function scope,
// with `require` resolving 'sluicegate' to this package. A `// N` comment after a
// console.log states what it must print.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
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
        new Function('require', 'console', code)(req, console)
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
