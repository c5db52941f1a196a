# Every check as a documented target; `make check` is what CI runs (via .ci/run).
.PHONY: help check test loom simulate conformance fmt clippy python node c fuzz bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

check: ## the whole suite, as CI runs it
	bash ci/check.sh

test: ## cargo test on the default members
	cargo test

loom: ## loom models of every atomic protocol
	bash ci/loom.sh

conformance: ## regenerate conformance/vectors.json and algorithms.json from their reference
	python3 conformance/generate.py

simulate: ## the README's first command
	cargo run --release -p sluicegate-cli -- simulate --quota "10/s; burst=50" --traffic "60/s for 3s"

fmt: ## format everything
	cargo fmt --all

clippy: ## lint everything
	cargo clippy --workspace --all-targets -- -D warnings

python: ## the Python bindings' suite (own venv under target/)
	bash ci/check.d/20-python.sh

node: ## the Node bindings' suite and install checks
	bash ci/check.d/30-node.sh

c: ## the C bindings: header drift, tests plain/ASan/UBSan/valgrind, LuaJIT
	bash ci/check.d/40-c.sh

fuzz: ## every fuzz target for FUZZ_SECONDS (default 20) each
	bash ci/check.d/50-fuzz.sh

bench: ## regenerate BENCHMARKS.md (criterion + bindings)
	bash ci/bench.sh
