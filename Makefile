# ZEPS — the two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN_STAMP  := $(VENV)/.zeps-installed-run
TEST_STAMP := $(VENV)/.zeps-installed-test
ENDPOINT ?= tcp://127.0.0.1:7470
DATA_DIR ?= ./zeps-data
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test java bench bench-peers clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

# `make run` needs only the runtime; `make test` adds pytest, hypothesis, pyspark and pyarrow.
$(RUN_STAMP): $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(TEST_STAMP): $(PY) setup.cfg pyproject.toml
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

run: $(RUN_STAMP)
	@echo "ZEPS broker on $(ENDPOINT), data in $(DATA_DIR). In another shell:"
	@echo "  $(VENV)/bin/zeps subscribe --endpoint $(ENDPOINT) orders          # live + history, Ctrl-C to stop"
	@echo "  $(VENV)/bin/zeps publish   --endpoint $(ENDPOINT) orders eu.fr 'hello'"
	@echo "  $(VENV)/bin/zeps stats     --endpoint $(ENDPOINT)"
	$(VENV)/bin/zeps broker --endpoint $(ENDPOINT) --data-dir $(DATA_DIR)

test: $(TEST_STAMP) java
	$(VENV)/bin/ruff check zeps tests bench examples
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest

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

bench: $(TEST_STAMP) java bench-peers
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m bench.run_all

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
