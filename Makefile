# Two commands on a fresh machine: `make demo` (installs everything, runs the embedded demo job) and
# `make test` (installs if needed, runs the test suite). Versions come from pyproject.toml pins and
# constraints.txt (the full resolved set, like Airflow's constraints files).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYSPARK_VERSION := 4.3.0
DEMO_DIR ?= demo-logs
AIRFLOW_DIR ?= .airflow
AIRFLOW_PORT ?= 8080
# The Spark jobs' numba cache for this installation (spark_jobs/compact_logs.py's $KAFKALOG_NUMBA_CACHE_DIR):
# filled by `make install`, so that the demo's and `make airflow`'s jobs load the kernels, not compile them.
JOB_NUMBA_CACHE := $(abspath $(VENV))/numba-cache
JOB_ENV := KAFKALOG_NUMBA_CACHE_DIR="$${KAFKALOG_NUMBA_CACHE_DIR:-$(JOB_NUMBA_CACHE)}"

.PHONY: install system-packages demo airflow test test-fast bench lint clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip==26.3"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,pipeline]"
	# The Spark provider pulls in pyspark-client, which overwrites pyspark's Python files with an
	# older version; put pyspark's own files back.
	$(PY) -m pip install --quiet --no-deps --force-reinstall "pyspark==$(PYSPARK_VERSION)"
	# Every kafkalog command is a fresh process: byte-compile the package (PYTHONDONTWRITEBYTECODE, set on
	# some machines, would otherwise have each command compile it again) and fill numba's kernel cache.
	$(PY) -m compileall -q kafkalog
	$(PY) -c 'from kafkalog.maintenance.warmup import warm; warm()'
	NUMBA_CACHE_DIR=$(JOB_NUMBA_CACHE) $(PY) -c 'from kafkalog.maintenance.warmup import warm; warm()'
	touch $(STAMP)

# Debian packages the tests use: chromium (the UI tests' browser, driven by Playwright) and
# docker-compose (validates docker-compose.yaml offline). Installed when missing, if run as root.
system-packages:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "Debian packages missing:$$missing (sudo apt-get install$$missing)"; fi; \
	fi

install: system-packages $(STAMP)

# The demo store, then one whole kafkalog_cleanup cycle run by Airflow (SQLite, LocalExecutor, Spark
# local[2]) on it, with the cycle's report printed.
demo: install
	$(JOB_ENV) $(PY) -m devtools.airflow_local demo --dir $(DEMO_DIR) --airflow-home $(AIRFLOW_DIR)

# The Airflow UI on http://127.0.0.1:8080 (the login is printed) with the demo store under maintenance
# (or $$KAFKALOG_LOG_DIRS). Ctrl-C stops every component.
airflow: install
	$(JOB_ENV) $(PY) -m devtools.airflow_local serve --dir $(DEMO_DIR) --airflow-home $(AIRFLOW_DIR) --port $(AIRFLOW_PORT)

# The whole suite, as CI runs it, in one run of three workers, each taking a whole module at a time (a
# module keeps its own Airflow installation on one worker): the modules that start Airflow or Spark
# first (tests/conftest.py orders them), the others filling in. The engines' modules wait much of the
# time (deferrals, retries, delete delays, services starting), so a worker more than the cores keeps
# them busy.
test: install
	$(PY) -m pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=20

# Everything that starts no Airflow or Spark process (tests/conftest.py refuses one in an unmarked test),
# on every core: the inner loop.
test-fast: install
	$(PY) -m pytest -q -n auto -m "not airflow and not spark"

bench: install
	$(PY) -m benchmarks.bench_decode

lint: install
	$(VENV)/bin/ruff check kafkalog tests benchmarks spark_jobs dags devtools
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) demo-logs demo-logs.properties .airflow .kafkalog-pipeline
