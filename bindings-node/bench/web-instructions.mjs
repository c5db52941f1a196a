// The web adapters' overhead per request in instructions: each app of bench/web-apps.mjs
// served on 127.0.0.1 by a Node process under callgrind, loaded by `wrk` (one connection),
// and the server's user-space instructions (V8's generated code and Node's and the addon's
// native code; not the kernel's) divided by the requests it answered. On a shared machine the
// CPU time per request moves by more than a limiter's whole overhead from round to round
// (bench/WEB.md); an instruction count does not move with the machine's load.
//
// Only the server's main thread is counted (callgrind's `--separate-threads`): the request's
// own work, the young-generation GC included. V8 compiles optimised code and does much of its
// old-generation GC on threads of its own, whose share in a window of requests depends on the
// machine's timing (under valgrind, a TurboFan recompilation every few seconds is half of a
// window's instructions). The server warms up uninstrumented for `--warm` seconds first.
//
// `node bench/web-instructions.mjs [--rounds 3] [--secs 8] [--warm 20] [--only express] [--variants sluicegate]`
// writes bench/WEB_INSTRUCTIONS.md; valgrind (callgrind_control) and wrk on the PATH.
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { VARIANTS } from './web-apps.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`)
  return i < 0 ? dflt : process.argv[i + 1]
}
const ROUNDS = Number(arg('rounds', 3))
const SECS = Number(arg('secs', 8))
const WARM = Number(arg('warm', 20))
const ONLY = arg('only', null)
// `--variants a,b`: only these (with the framework alone and the peer, which the table needs).
const PICK = arg('variants', null)?.split(',')
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

for (const tool of ['valgrind', 'callgrind_control', 'wrk']) {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' })
  } catch {
    console.error(`${tool} is not on the PATH (Debian: apt-get install valgrind wrk)`)
    process.exit(2)
  }
}

const freePort = () => new Promise((resolve) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address()
    s.close(() => resolve(port))
  })
})

const listening = (port) => new Promise((resolve) => {
  const c = net.connect(port, '127.0.0.1', () => { c.destroy(); resolve(true) })
  c.on('error', () => resolve(false))
})

/** `wrk` for `secs` on one connection: the requests answered (every one a 200). */
function wrk(port, secs) {
  const out = execFileSync('wrk', ['-t1', '-c1', `-d${secs}s`, `http://127.0.0.1:${port}/`], { encoding: 'utf8', timeout: (secs + 120) * 1000 })
  const m = /(\d+) requests in/.exec(out)
  if (!m || out.includes('Non-2xx') || out.includes('Socket errors')) throw new Error(`a failed load:\n${out}`)
  return Number(m[1])
}

/** One server of `name` under callgrind: its instructions per request. */
async function instructions(name) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'web-cg-'))
  const port = await freePort()
  const child = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', '--smc-check=all', '--quiet',
    '--separate-threads=yes', `--callgrind-out-file=${dir}/cg.%p`, process.execPath,
    path.join(here, 'web-apps.mjs'), name, 'serve', String(port)], { stdio: ['ignore', 'ignore', 'inherit'] })
  try {
    const deadline = Date.now() + 300_000
    while (!(await listening(port))) {
      if (child.exitCode !== null) throw new Error(`${name}: the server exited (${child.exitCode})`)
      if (Date.now() > deadline) throw new Error(`${name}: the server did not listen within 300 s`)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    const ctl = (...a) => execFileSync('callgrind_control', a, { stdio: 'ignore', timeout: 120_000 })
    // Warmed up uninstrumented (several times faster under valgrind), then for a second
    // instrumented, before the count.
    wrk(port, WARM)
    ctl('-i', 'on', String(child.pid))
    wrk(port, 1)
    ctl('-z', String(child.pid))
    const n = wrk(port, SECS)
    ctl('-d', String(child.pid))
    let total = 0
    // The main thread's (`-01`): the request's own work; V8's compiler and its concurrent GC
    // work run on threads of their own.
    for (const f of readdirSync(dir).filter((f) => f.endsWith('-01'))) {
      const m = /^(?:totals|summary): (\d+)/m.exec(readFileSync(path.join(dir, f), 'utf8'))
      if (m) total += Number(m[1])
    }
    if (process.env.WEB_CG_VERBOSE) console.error(name, n, 'requests', Math.round(total / n), 'instructions each')
    return total / n
  } finally {
    child.kill('SIGKILL')
    await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)))
    rmSync(dir, { recursive: true, force: true })
  }
}

const frameworks = Object.entries(VARIANTS).filter(([fw]) => ONLY === null || fw === ONLY)
const counts = {}
for (let r = 0; r < ROUNDS; r++) {
  for (const [fw, variants] of frameworks) {
    for (const v of variants) {
      if (PICK !== undefined && v !== 'none' && v !== variants.at(-1) && !PICK.includes(v)) continue
      ;(counts[`${fw}:${v}`] ??= []).push(await instructions(`${fw}:${v}`))
    }
  }
  console.error(`round ${r + 1}/${ROUNDS} done`)
}

const fmt = (x) => Math.round(x).toLocaleString('en-US')
const lines = [
  '<!-- generated by bindings-node/bench/web-instructions.mjs; do not edit by hand -->',
  `Node ${process.version}, ${os.arch()}; ${new Date().toISOString().slice(0, 10)}. Each app served on 127.0.0.1 by Node under callgrind, warmed up for ${WARM} s, then counted over ${SECS} s of \`wrk -t1 -c1\` requests: the user-space instructions of the server's main thread (V8's code, Node's and the addon's, the young-generation GC; not V8's compiler and GC threads, not the kernel) per request. ${ROUNDS} servers of each; median (range). Overhead: less the framework's with no limiter.`,
]
for (const [fw, variants] of frameworks) {
  const base = median(counts[`${fw}:none`])
  const peer = median(counts[`${fw}:${variants.at(-1)}`]) - base
  lines.push('', `| ${fw[0].toUpperCase() + fw.slice(1)} | instructions per request | overhead | overhead / the peer's |`, '|---|---:|---:|---:|')
  for (const v of variants.filter((v) => counts[`${fw}:${v}`] !== undefined)) {
    const xs = counts[`${fw}:${v}`]
    const med = median(xs)
    const cell = `${fmt(med)} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))})`
    lines.push(v === 'none'
      ? `| no rate limiter | ${cell} | | |`
      : `| ${v} | ${cell} | ${med - base >= 0 ? '+' : ''}${fmt(med - base)} | ${((med - base) / peer).toFixed(2)}× |`)
  }
}
const text = lines.join('\n') + '\n'
writeFileSync(arg('out', path.join(here, 'WEB_INSTRUCTIONS.md')), text)
console.log(text)
