#!/usr/bin/env node
'use strict'
// `npm pack` hooks. `prepare` copies what a from-source install needs into rust/: the
// workspace manifest and lockfile, the core crate, the reference model crate (a path
// dev-dependency of the core, whose manifest cargo reads even to build the core alone) and
// this binding crate, in the repository's own layout (so no manifest is rewritten but the
// root's member list).
// `clean` removes rust/ again. rust/ is git-ignored and listed in package.json "files".

const fs = require('node:fs')
const path = require('node:path')

const pkg = path.join(__dirname, '..')
const repo = path.join(pkg, '..')
const out = path.join(pkg, 'rust')

function copy(from, to) {
  fs.cpSync(from, to, { recursive: true, filter: (src) => !/[/\\](target|node_modules)$/.test(src) })
}

if (process.argv[2] === 'prepare') {
  fs.rmSync(out, { recursive: true, force: true })
  fs.mkdirSync(path.join(out, 'bindings-node'), { recursive: true })
  let manifest = fs.readFileSync(path.join(repo, 'Cargo.toml'), 'utf8')
  const members = 'members = ["core", "model", "bindings-node"]'
  manifest = manifest
    .replace(/^members = \[.*\]$/m, members)
    .replace(/^default-members = \[.*\]$/m, 'default-members = ["bindings-node"]')
    .replace(/^exclude = \[.*\]\n/m, '')
  if (!manifest.includes(members)) throw new Error('pack.js: could not rewrite the workspace members')
  fs.writeFileSync(path.join(out, 'Cargo.toml'), manifest)
  fs.copyFileSync(path.join(repo, 'Cargo.lock'), path.join(out, 'Cargo.lock'))
  for (const crate of ['core', 'model']) {
    fs.mkdirSync(path.join(out, crate))
    // Only src/ is copied: the manifest's explicit test, example and bench targets (whose
    // files cargo would look for) are dropped.
    const own = fs.readFileSync(path.join(repo, crate, 'Cargo.toml'), 'utf8')
    fs.writeFileSync(path.join(out, crate, 'Cargo.toml'), own.replace(/^\[\[(test|example|bench)\]\]\n(?:[^[\n].*\n)*/gm, ''))
    copy(path.join(repo, crate, 'src'), path.join(out, crate, 'src'))
  }
  for (const f of ['Cargo.toml', 'build.rs']) {
    fs.copyFileSync(path.join(pkg, f), path.join(out, 'bindings-node', f))
  }
  copy(path.join(pkg, 'src'), path.join(out, 'bindings-node', 'src'))
} else if (process.argv[2] === 'clean') {
  fs.rmSync(out, { recursive: true, force: true })
} else {
  console.error('usage: pack.js prepare|clean')
  process.exit(2)
}
