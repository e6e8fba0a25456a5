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
	$(PY) -m devtools.airflow_local demo --dir $(DEMO_DIR) --airflow-home $(AIRFLOW_DIR)

# The Airflow UI on http://127.0.0.1:8080 (the login is printed) with the demo store under maintenance
# (or $$KAFKALOG_LOG_DIRS). Ctrl-C stops every component.
airflow: install
	$(PY) -m devtools.airflow_local serve --dir $(DEMO_DIR) --airflow-home $(AIRFLOW_DIR) --port $(AIRFLOW_PORT)

# The whole suite, as CI runs it: the tests that start no Airflow or Spark process on every core, then
# those that do, two modules at a time (one alone leaves the cores idle about half the time, waiting on
# its engines; each module keeps its own Airflow installation on one worker). Fails if either part
# fails; both always run.
test: install
	@status=0; \
	$(PY) -m pytest -n auto -m "not airflow and not spark" || status=$$?; \
	$(PY) -m pytest -n 2 --dist loadfile -m "airflow or spark" --durations=20 || status=$$?; \
	exit $$status

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
