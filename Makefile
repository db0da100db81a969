# ZEPS — the two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN_STAMP  := $(VENV)/.zeps-installed-run
TEST_STAMP := $(VENV)/.zeps-installed-test
ENDPOINT ?= tcp://127.0.0.1:7470
DATA_DIR ?= ./zeps-data
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Python writes its bytecode caches (__pycache__, gitignored) under make, even where the
# environment sets PYTHONDONTWRITEBYTECODE: without them every broker and CLI process a test starts
# compiles zeps from source again (tests/test_cli.py alone: 185 s without, 59 s with), and pytest
# rewrites every test module again in each run and worker (12.7 s a worker on 2 cores).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test check soak java chromium bench bench-peers bench-smoke clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

# `make run` needs only the runtime; `make test` adds pytest, hypothesis, pyspark and pyarrow.
$(RUN_STAMP): $(PY) setup.cfg setup.py pyproject.toml zeps/protocol/_batchc.c zeps/journal/_journalc.c \
		zeps/broker/_sockc.c
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(TEST_STAMP): $(PY) setup.cfg setup.py pyproject.toml zeps/protocol/_batchc.c zeps/journal/_journalc.c \
		zeps/broker/_sockc.c
	$(PY) -m pip install -q -e '.[test]'
	touch $(TEST_STAMP) $(RUN_STAMP)

# pyspark 4 needs Java 17+. Install it only through the system's packages, only if absent.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "Java 17+ not found: installing it from the system's packages"; \
	  $(SUDO) apt-get update -q && \
	  ( $(SUDO) apt-get install -y -q openjdk-17-jre-headless || $(SUDO) apt-get install -y -q default-jre-headless ); \
	fi

# The dashboard's browser test runs headless Chromium: from the system's packages, only if
# absent. If it cannot be installed, that one test is skipped (and says why), the rest runs.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
	  echo "Chromium not found: installing it from the system's packages"; \
	  ( $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium ) || \
	  echo "Chromium could not be installed: the dashboard's browser test will be skipped"; \
	fi

MONITOR ?= 127.0.0.1:7471

run: $(RUN_STAMP)
	@echo "ZEPS broker on $(ENDPOINT), data in $(DATA_DIR), dashboard on http://$(MONITOR)/. In another shell:"
	@echo "  $(VENV)/bin/zeps publish   --endpoint $(ENDPOINT) orders eu.fr 'hello'   # creates the stream"
	@echo "  $(VENV)/bin/zeps subscribe --endpoint $(ENDPOINT) orders --all           # history, then live; Ctrl-C to stop"
	@echo "  $(VENV)/bin/zeps stats     --endpoint $(ENDPOINT)"
	@echo "  $(VENV)/bin/zeps top       --monitor http://$(MONITOR)"
	$(VENV)/bin/zeps broker --endpoint $(ENDPOINT) --data-dir $(DATA_DIR) --monitor $(MONITOR)

# Its report lists the 20 slowest tests (`--durations`): where the suite's time goes.
test: $(TEST_STAMP) java chromium bench-peers
	$(VENV)/bin/ruff check zeps tests bench examples
	$(VENV)/bin/lint-imports
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest --durations=20

# `make check`: the fast loop: lint, the import contract (.importlinter) and every unit and
# in-process test (no process, fault, Spark or benchmark test: tests/conftest.py applies those
# markers), in seconds: spread over the machine's cores (pytest-xdist, `-n auto`), each property
# test drawing a quarter of its examples, at least 10 (ZEPS_EXAMPLES, tests/property_examples.py;
# `make test` draws them all).
CHECK_MARKERS := not process and not fault and not spark and not suite and not soak
check: $(TEST_STAMP)
	$(VENV)/bin/ruff check zeps tests bench examples
	$(VENV)/bin/lint-imports
	ZEPS_EXAMPLES=0.25 $(PY) -m pytest -q -n auto -m "$(CHECK_MARKERS)"

# `make soak`: the fault tests that have a soak variant (pytest marker `soak`), at soak scale:
# 100 SIGKILL/restart cycles, 10^6 hostile frames (tests/soak.py). Not part of `make test`.
soak: $(TEST_STAMP)
	ZEPS_SOAK=1 $(PY) -m pytest -m soak -s

# The peers `make bench` measures ZEPS beside: Debian's redis-server, redis-tools (redis-benchmark)
# and nats-server, PyPI's redis + hiredis and nats-py (the `bench` extra). Installed only if absent;
# one that cannot be installed is reported as such by the suite, it does not stop it.
BENCH_PEERS := redis-server:redis-server redis-benchmark:redis-tools nats-server:nats-server
bench-peers: $(TEST_STAMP)
	@missing=""; for p in $(BENCH_PEERS); do \
	  command -v $${p%%:*} >/dev/null 2>&1 || missing="$$missing $${p##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing from the system's packages"; \
	  ( $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $$missing ) \
	    || echo "could not install$$missing: the suite reports those peers as not installed"; \
	fi
	@$(PY) -c 'import redis, hiredis, nats' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]' \
	  || echo "could not install the bench extra (redis, hiredis, nats-py): reported as not installed"

# `make bench`: the benchmarks (bench/run_all.py), each beside its baseline in the same run.
bench: $(TEST_STAMP) java bench-peers
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m bench.run_all

# Smoke runs of every scenario of the benchmark suite (tiny counts, about a minute); `make test`
# runs them too.
bench-smoke: $(TEST_STAMP)
	$(PY) -m pytest -m suite tests/test_bench_smoke.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
	find zeps tests bench examples -name __pycache__ -prune -exec rm -rf {} +
