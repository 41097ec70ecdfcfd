# siltlake developer entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11+ and Java 17+.
# The first interpreter that runs and is 3.11 or newer (pyenv shims may exist for missing versions).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
READERS_VENV := .venv-readers
PYTEST_ARGS ?=

.PHONY: demo cluster-demo test test-fast readers-venv bench lint prereqs clean chaos soak fuzz browser deploy-tools logrotate install-check wheel dashboard-screenshot

prereqs:
	@test -n "$(PYTHON)" && $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "siltlake needs Python 3.11 or newer (python3 is: $$(python3 --version 2>&1 || echo missing))."; \
	  echo "Install it (e.g. apt install python3.11 python3.11-venv) or run: make PYTHON=/path/to/python3.11"; \
	  exit 1; }
	@command -v java >/dev/null 2>&1 || { \
	  echo "siltlake runs on Apache Spark, which needs Java 17 or newer: no 'java' on PATH."; \
	  echo "Install a JDK (e.g. apt install openjdk-17-jdk-headless) or set JAVA_HOME and PATH."; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	    echo "siltlake needs Java 17 or newer for Spark 4; found: $$(java -version 2>&1 | head -1)."; \
	    echo "Install a JDK 17 or 21 and put it first on PATH (or set JAVA_HOME)."; exit 1; fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The demo runs the pipeline: the spark extra (a plain `pip install siltlake-*.whl` only reads tables).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[spark]"
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[spark,dev,bench]"
	@touch $@ $(VENV)/.installed

# S3=1: the demo's roots in a bucket of a local S3 endpoint (moto's server on 127.0.0.1, a dev dependency).
S3 ?=
demo: prereqs $(VENV)/.installed $(if $(S3),$(VENV)/.installed-dev)
	SILTLAKE_DEMO_S3=$(S3) $(BIN)/python -m siltlake.demo $(if $(PARTITION_BY),--partition-by '$(PARTITION_BY)')

# A Spark standalone master and two workers on 127.0.0.1 and PostgreSQL catalogs (CLUSTER_DEMO_PG: the
# server's admin URL, default postgresql+psycopg://postgres@127.0.0.1:5432/postgres).
cluster-demo: prereqs $(VENV)/.installed
	$(BIN)/python -m siltlake.demo.cluster

# Two pytest workers (pytest-xdist): most of the suite's wall time is spent waiting on daemons, subprocesses and
# JVM start-ups, so two test processes keep both cores busy. A module's tests stay on one worker (its module
# fixtures are made once); each worker has its own SparkSession. TEST_WORKERS=0 runs in one process.
# The lint runs first: CI fails on a lint error as on a failed test.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)
test: prereqs $(VENV)/.installed-dev readers-venv browser deploy-tools logrotate lint
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The tests that need no Java and no PostgreSQL server, in about two minutes (docs/development.md). Not `slow`
# either. SILT_TEST_FAST=1 makes it honest (tests/conftest.py): JAVA_HOME names no Java, so anything that starts
# Spark fails, and a test that asks for Spark or PostgreSQL, or connects to the tests' server, fails naming the
# marker it lacks. No prereqs: it runs on a machine without Java.
FAST_MARKERS = not spark and not postgres and not slow and not install
test-fast: $(VENV)/.installed-dev
	SILT_TEST_FAST=1 $(BIN)/python -m pytest $(XDIST) -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

# The reader matrix's DuckDB (tests/test_iceberg_readers.py, through tests/duckdb_iceberg_runner.py): its iceberg,
# avro and httpfs extensions are wheels on the package registry for DuckDB 1.5 only, so that DuckDB gets a venv of
# its own (about 20 s and 340 MB). Where it cannot be made those tests are skipped (failed under CI).
readers-venv: $(READERS_VENV)/.installed
$(READERS_VENV)/.installed: tests/readers-requirements.txt
	@test -x $(READERS_VENV)/bin/python || $(PYTHON) -m venv $(READERS_VENV)
	@$(READERS_VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/readers-requirements.txt && touch $@ || \
	  echo "could not install tests/readers-requirements.txt into $(READERS_VENV): the DuckDB iceberg readers will be skipped"

# deploy/'s checks (tests/test_deploy.py): systemd-analyze for the units and promtool for the alert rules, from
# Debian's packages when missing and running as root; otherwise those two tests are skipped (failed under CI).
deploy-tools:
	@missing=""; command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	  command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "installing$$missing (apt-get) for deploy/'s checks"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	    else echo "missing$$missing: deploy/'s unit or rules check will be skipped (apt-get install$$missing)"; fi; fi

# The rotation test (tests/test_logrotate.py) runs Debian's logrotate over files a writer appends to: installed
# with apt-get when missing and running as root; otherwise that test is skipped (failed under CI).
logrotate:
	@command -v logrotate >/dev/null 2>&1 || test -x /usr/sbin/logrotate || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing logrotate (apt-get) for the rotation test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends logrotate >/dev/null; \
	  else echo "no logrotate: the rotation test will be skipped (apt-get install logrotate)"; fi; }

# The wheel in dist/ (README: installing from a built wheel).
wheel: $(BIN)/python
	rm -rf dist && $(BIN)/pip wheel --quiet --no-deps -w dist .

# A fresh venv installs the built wheel without extras (deploy/install.sh, the image's install step) and reads a
# table; `silt stream` there names the spark extra. Downloads the read-only dependencies (about 600 MB installed,
# two minutes with a warm pip cache), so it is not part of `make test`.
install-check: prereqs $(VENV)/.installed-dev
	$(BIN)/python -m pytest tests/test_install.py -m install -p no:cacheprovider $(PYTEST_ARGS)

# The dashboard's browser test (tests/test_dashboard_browser.py) drives the system's Chromium through Playwright
# (the dev extra): installed with apt-get when missing and running as root; otherwise that test is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the dashboard's browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "no chromium on PATH: the dashboard's browser test will be skipped (apt-get install chromium)"; fi; }

# The picture of the dashboard in docs/operations.md, taken by its browser test.
dashboard-screenshot: prereqs $(VENV)/.installed-dev browser
	SILTLAKE_DASHBOARD_SCREENSHOT=$(CURDIR)/bench/results/dashboard.png $(BIN)/python -m pytest -q \
	  tests/test_dashboard_browser.py

bench: prereqs $(VENV)/.installed-dev
	$(BIN)/python bench/stream_bench.py
	$(BIN)/python bench/stream_bench.py --peers spark --spark-infer-schema --out bench/results/stream_infer.json
	$(BIN)/python bench/stream_bench.py --big-object-mb 500
	$(BIN)/python bench/small_objects_bench.py
	$(BIN)/python bench/merge_bench.py all
	$(BIN)/python bench/merge_layout_bench.py
	$(BIN)/python bench/publish_bench.py
	$(BIN)/python bench/publish_partitions_bench.py
	$(BIN)/python bench/read_bench.py
	$(BIN)/python bench/inspect_bench.py
	$(BIN)/python bench/reap_bench.py
	$(BIN)/python bench/load_bench.py
	$(BIN)/python bench/cli_startup_bench.py
	$(BIN)/python bench/cold_start_bench.py
	$(BIN)/python bench/freshness_bench.py
	$(BIN)/python bench/derived_bench.py
	$(BIN)/python bench/keyed_bench.py read
	$(BIN)/python bench/keyed_bench.py upsert
	$(BIN)/python bench/history_bench.py --new 100
	$(BIN)/python bench/year_bench.py
	$(BIN)/python bench/changes_bench.py --days 30 --day-rows 100000 --append-rows 10000
	$(BIN)/python bench/changes_bench.py --days 30 --day-rows 400000 --append-rows 10000 --tag _400k
	$(BIN)/python bench/interactive_bench.py
	$(BIN)/python bench/s3_history_bench.py

# The hostile-input properties with many more generated cases than CI's; prints the counts per property.
FUZZ_EXAMPLES ?= 2000
# Random rotation sequences searched afresh each run (tests/test_rotation_property.py; the suite runs a fixed 40).
# One test runs them all: no per-test timeout (2,000 sequences take about 15 minutes).
ROTATION_EXAMPLES ?= 500
fuzz: prereqs $(VENV)/.installed-dev
	SILTLAKE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/test_fuzz_parsers.py tests/test_fuzz_parsers_corrupt.py tests/test_fuzz_parsers_load.py tests/test_fuzz_ingest.py \
	  -p no:cacheprovider --hypothesis-show-statistics -m "not spark" $(PYTEST_ARGS)
	SILTLAKE_ROTATION_SEARCH=1 SILTLAKE_ROTATION_EXAMPLES=$(ROTATION_EXAMPLES) $(BIN)/python -m pytest \
	  tests/test_rotation_property.py -p no:cacheprovider --hypothesis-show-statistics --timeout=0 $(PYTEST_ARGS)

# Hundreds of SIGKILLs of stream, merge, publish and reap processes (tests/chaos.py); CHAOS_SEED repeats a run.
CHAOS_KILLS ?= 300
chaos: prereqs $(VENV)/.installed-dev
	CHAOS_KILLS=$(CHAOS_KILLS) $(BIN)/python -m pytest tests/test_chaos.py tests/test_spark_source.py -s -p no:cacheprovider \
	  -o timeout=7200

# Ten minutes of steady load on the daemons (tests/soak.py); samples and summary in bench/results/soak.*.
SOAK_SECONDS ?= 600
soak: prereqs $(VENV)/.installed-dev
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_SUMMARY=bench/results/soak.json \
	  $(BIN)/python -m pytest tests/test_soak.py -s -p no:cacheprovider -o timeout=3600

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check siltlake tests bench
	$(BIN)/ruff format --check siltlake tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(READERS_VENV) build .siltlake .pytest_cache .hypothesis
