# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, run the demo on a file:// store in a temp dir
#   make test   - create .venv, install everything (emulators too), lint, type-check, run
#                 the whole test suite; the tests start and stop every emulator they need,
#                 and tests/core/test_packaging.py builds the wheel and installs it in a fresh venv
#   make wheel-check - only that packaging check (about half a minute)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every install here, pip's own included, is constrained by constraints/ci.txt: the exact
# versions CI was last green with, torch's CPU wheel among them (an unpinned torch pulls a
# multi-GB CUDA build). The package itself only sets floors (torch>=2.13 and so on).
CONSTRAINTS := constraints/ci.txt
AZURITE := azurite@3.35.0
# pytest worker processes (pytest-xdist). Each worker starts the emulators its tests use, on
# free ports of its own. Most tests wait on emulators, leases and subprocesses, so more
# workers than cores pays; `make test WORKERS=0` runs everything in one process.
WORKERS ?= 6
PYTEST_PARALLEL := -n $(WORKERS) --dist worksteal
# The tests' temporary files (file:// stores, emulator data, venvs) go to a fresh directory
# on tmpfs where the machine has one, removed afterwards: on CI's ext4 every fsync costs
# kernel time, a third of a file:// conformance run's CPU. The code paths are the same.
TEST_TMP_ROOT ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo $${TMPDIR:-/tmp})
# Installs compile bytecode up front: with --no-compile the install took 22 s less, but the
# suite 145 s more, its spawned learners each compiling torch on first import at once.
PIP_INSTALL := $(BIN)/python -m pip install --quiet -c $(CONSTRAINTS)

.PHONY: demo test test-fast stress wheel-check lint bench mutants clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) --upgrade pip

$(VENV)/.demo-installed: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP_INSTALL) -e ".[torch,plot]"
	touch $@

$(VENV)/.test-installed: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP_INSTALL) -e ".[dev]"
	touch $@

.emulators/node_modules/.bin/azurite-blob:
	mkdir -p .emulators
	npm install --silent --no-audit --no-fund --prefix .emulators $(AZURITE)

demo: $(VENV)/.demo-installed
	$(BIN)/python examples/demo.py

lint: $(VENV)/.test-installed
	$(BIN)/ruff check src tests conformance examples benchmarks scripts
	$(BIN)/ruff format --check src tests conformance examples benchmarks scripts
	$(BIN)/mypy

# pip and npm install side by side (-j2), then lint, then the suite.
test:
	$(MAKE) -j2 $(VENV)/.test-installed .emulators/node_modules/.bin/azurite-blob
	$(MAKE) lint
	tmp=$$(mktemp -d $(TEST_TMP_ROOT)/gradientmail-tests.XXXXXX) && \
	TMPDIR=$$tmp $(BIN)/python -m pytest $(PYTEST_PARALLEL) --basetemp=$$tmp/pytest \
		--durations=15; rc=$$?; rm -rf $$tmp; exit $$rc

test-fast: $(VENV)/.test-installed .emulators/node_modules/.bin/azurite-blob
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not slow"

# The stress tests (marked slow) at their full size: CI runs them at a smaller one
# (tests/support/stress.py says how each shrinks, and where its power is shown anyway).
stress: $(VENV)/.test-installed .emulators/node_modules/.bin/azurite-blob
	GM_STRESS=full $(BIN)/python -m pytest $(PYTEST_PARALLEL) -m slow

wheel-check: $(VENV)/.test-installed
	$(BIN)/python -m pytest tests/core/test_packaging.py

bench: $(VENV)/.test-installed
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Not part of `test` (CI stays fast): applies each deliberate bug in scripts/mutants.py to a
# copy of the tree and checks that its fast tests fail (about two minutes).
mutants: $(VENV)/.test-installed
	$(BIN)/python scripts/mutants.py

clean:
	rm -rf $(VENV) .emulators .pytest_cache .mypy_cache .ruff_cache src/gradientmail.egg-info
