# kvtier: every target sets itself up (venv, pip, npm) on a fresh machine and reuses what is there.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# jsii and the CDK CLI use the Node release pinned in package.json (Node 20 is end-of-life for jsii).
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# LMCache's config parser, for the test that checks the settings we emit (tooling.md: no torch needed).
LMCACHE_VERSION := 0.4.3

.PHONY: help setup synth test lint pytest bench-synth bench-sim crds clean promtool

help:
	@echo "make synth        set up, then synthesize the default environment into cdk.out/ and dist/"
	@echo "make test         set up, then run the linters and the whole test suite (lint + pytest)"
	@echo "make setup        create .venv/ and node_modules/ (every other target does this first)"
	@echo "make lint         ruff check, ruff format --check, mypy --strict"
	@echo "make pytest       the test suite"
	@echo "make bench-synth  time the synth against a minimal CDK app, write docs/benchmarks.md"
	@echo "make bench-sim    time the simulator on the shipped sample trace, write docs/benchmarks.md"
	@echo "make crds         fetch the pinned upstream CRDs into .crds/ (needs network)"
	@echo "make promtool     install promtool (Debian prometheus) where missing, for the rule tests"
	@echo "make clean        remove cdk.out/, dist/ and the tool caches"
	@echo "make help         this list"

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PIP) install --quiet --disable-pip-version-check --no-deps lmcache==$(LMCACHE_VERSION)
	$(PIP) install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed

# promtool (Debian's `prometheus` package) checks and unit-tests the alert and recording rules; installed only where
# it is missing (tests skip without it outside CI and fail without it under CI).
promtool:
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus >/dev/null) || \
		echo "promtool could not be installed: the rule tests will skip (outside CI)"

# With several stacks the CDK CLI ends `synth --quiet` with an info line "Supply a stack id (...) to display its
# template" (aws-cdk 2.1148.1 lib/cli/cdk-toolkit.js `synth`): not useful here, so it is dropped; cdk's exit code stays.
synth: setup
	set -o pipefail; cdk synth --quiet 2>&1 | { grep -v '^Supply a stack id' || true; }
	@echo "kvtier CLI: run 'source $(VENV)/bin/activate' in this shell, then 'kvtier --help'"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

pytest: setup promtool
	$(PY) -m pytest

test: lint pytest

bench-synth: setup
	$(PY) -m kvtier.benchsynth

bench-sim: setup
	$(PY) -m kvtier.simulate.bench --repeat 5 --output docs/benchmarks.md

crds:
	bash scripts/fetch-crds.sh

clean:
	rm -rf cdk.out dist .pytest_cache .mypy_cache .ruff_cache
