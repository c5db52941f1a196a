#!/usr/bin/env bash
# Node bindings (bindings-node/): build, the node:test suites, and the two ways a user installs
# the package: `npm install ./bindings-node` and the tarball `npm pack` makes, each into a
# fresh project in a temporary folder, each building the addon from source with cargo.
# Needs Rust and Node 20+ (npm), and redis-server for the Redis suites (the tests start their
# own servers on free loopback ports): Debian's package is installed with apt-get when it is
# missing and this runs as root; under CI=true the Redis suites fail, never skip, without it.
# Installs nothing else outside the repository and the temp folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
# Builds from tarballs and temp projects share the workspace's compiled dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing redis-server with apt-get"
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1 || true
  # The package starts a system service: stop it (the tests start their own servers).
  if command -v systemctl >/dev/null; then systemctl stop redis-server >/dev/null 2>&1 || true; fi
  if command -v service >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
fi
if ! command -v redis-server >/dev/null; then
  echo "redis-server is missing (apt-get install redis-server): the Redis suites $([ "${CI:-}" = true ] && echo fail || echo skip)"
fi

cd bindings-node
npm ci --ignore-scripts
# The conformance vectors through Redis need `?clock=test`, which only an addon built with the
# cargo feature redis-test-clock accepts: built first into $CARGO_TARGET_DIR/node-test-clock and
# loaded by that one test file. The published addon, built next, never has the feature.
npm run build:test-clock -- -o "$CARGO_TARGET_DIR/node-test-clock"
export SLUICEGATE_TEST_CLOCK_ADDON="$CARGO_TARGET_DIR/node-test-clock/sluicegate.node"
npm run build   # napi build: the addon, and native.js + native.d.ts (drift-checked by the tests)
node --test __test__/

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
smoke='
const { Limiter, KeyedLimiter } = require("sluicegate");
const rateLimit = require("sluicegate/express");
const sluicegateFastify = require("sluicegate/fastify");
const l = new Limiter("10/s; burst=2");
if (!l.tryAcquire().allowed || !l.allow() || l.tryAcquire().allowed) throw new Error("limiter");
if (!new KeyedLimiter("1/s").allow("k") || typeof rateLimit !== "function" || typeof sluicegateFastify !== "function") throw new Error("exports");
const store = "shm:" + process.env.SG_REGION; // a shared-memory region, in the temp folder
if (!new KeyedLimiter("1/h", { store, maxKeys: 8 }).allow("k") || new KeyedLimiter("1/h", { store }).allow("k")) throw new Error("store");
import("sluicegate").then((m) => { if (m.Limiter !== Limiter) throw new Error("esm"); console.log("install ok:", process.argv[1]) });
'

echo "==> npm install ./bindings-node (built from source) into a new project"
mkdir "$tmp/from-dir" && cd "$tmp/from-dir"
npm init -y >/dev/null
SLUICEGATE_BUILD_FROM_SOURCE=1 npm install "$repo/bindings-node"
SG_REGION="$tmp/from-dir.region" node -e "$smoke" from-dir

echo "==> npm pack, then install the tarball (built from source) into a new project"
cd "$repo/bindings-node"
tarball=$(npm pack --pack-destination "$tmp" | tail -n 1)
[ ! -e rust ] || { echo "postpack left bindings-node/rust behind"; exit 1; }
if tar -tzf "$tmp/$tarball" | grep -q '\.node$'; then echo "the tarball must not ship a binary"; exit 1; fi
mkdir "$tmp/from-tgz" && cd "$tmp/from-tgz"
npm init -y >/dev/null
npm install "$tmp/$tarball"
SG_REGION="$tmp/from-tgz.region" node -e "$smoke" from-tarball
