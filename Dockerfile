# The kafkalog image of the production topology (docker-compose.yaml): every Airflow component, the Celery
# worker that is also the Spark driver, and the Spark standalone master and workers run from it.
#
#   Debian 12 (bookworm), Python 3.11, JRE 17 (openjdk-17-jre-headless), kafkalog installed from this
#   checkout with the pins of constraints.txt into /opt/kafkalog/venv, and pyspark 4.3.0's own files put
#   back over pyspark-client's afterwards, as `make install` does.
#
# One image everywhere is what the compaction job needs: the executors run the driver's Python
# (spark.pyspark.python = the Celery worker's /opt/kafkalog/venv/bin/python) with kafkalog importable,
# at the same path on every Spark worker, and the same Spark version (4.3.0) as the driver's.
#
#   docker compose build            # or: docker build -t kafkalog:0.1.0 .
# bookworm, not trixie: Debian 13 has no openjdk-17 package.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG KAFKALOG_UID=50000
ARG PYSPARK_VERSION=4.3.0
ARG PIP_VERSION=26.3

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# JRE 17 for Spark (the driver's spark-submit and the master's and workers' JVMs); tini as PID 1 (signals
# reach the component, zombies are reaped); curl for the health checks. The man1 dir: the JRE's postinst
# registers its man pages there and fails on slim images without it.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless tini curl procps; \
    rm -rf /var/lib/apt/lists/*; \
    java -version

# The user every container runs as (uid 50000, gid 0, as Airflow's own images do): the owner of what
# the Celery worker and the Spark executors write on the shared log volume.
RUN set -eux; \
    useradd --uid "${KAFKALOG_UID}" --gid 0 --create-home --home-dir /home/kafkalog --shell /bin/bash kafkalog; \
    mkdir -p /opt/kafkalog/src /opt/airflow/logs /opt/airflow/secrets /opt/spark-work \
             /var/lib/kafkalog/kafka-logs /var/lib/kafkalog/pipeline; \
    chown -R "${KAFKALOG_UID}:0" /opt/airflow /opt/spark-work /var/lib/kafkalog; \
    chmod 700 /opt/airflow/secrets

ENV VIRTUAL_ENV=/opt/kafkalog/venv \
    PATH=/opt/kafkalog/venv/bin:${PATH} \
    AIRFLOW_HOME=/opt/airflow
WORKDIR /opt/kafkalog/src

# 1. The dependencies, pinned by constraints.txt, in a layer of their own: a change to kafkalog's code
#    does not reinstall Airflow and Spark. A placeholder package stands in for kafkalog here. The Spark
#    provider pulls in pyspark-client, which overwrites pyspark's Python files with an older version:
#    pyspark's own files are put back after (the Makefile does the same).
COPY pyproject.toml constraints.txt ./
RUN set -eux; \
    python -m venv "${VIRTUAL_ENV}"; \
    pip install "pip==${PIP_VERSION}"; \
    mkdir kafkalog; touch kafkalog/__init__.py README.md; \
    pip install -c constraints.txt ".[pipeline]"; \
    pip install --no-deps --force-reinstall "pyspark==${PYSPARK_VERSION}"; \
    pip uninstall -y kafkalog; \
    rm -rf kafkalog README.md

# 2. kafkalog itself, from this checkout (its dependencies are all in place: nothing else changes).
COPY README.md ./
COPY kafkalog ./kafkalog
RUN set -eux; \
    pip install --no-deps -c constraints.txt .; \
    python -c "import kafkalog, pyspark; assert pyspark.__version__ == '${PYSPARK_VERSION}', pyspark.__version__"; \
    python -c 'from kafkalog.maintenance.warmup import warm; warm()'; \
    rm -rf build kafkalog.egg-info

# 3. The Spark job and the DAGs (the Log store page is kafkalog's provider plugin, installed with it).
#    kafkalog is installed into site-packages, so the job is not beside it: KAFKALOG_SPARK_JOB tells
#    kafkalog.cycle.spark where it is.
COPY spark_jobs ./spark_jobs
COPY dags /opt/airflow/dags
ENV KAFKALOG_SPARK_JOB=/opt/kafkalog/src/spark_jobs/compact_logs.py \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    KAFKALOG_LOG_DIRS=/var/lib/kafkalog/kafka-logs

USER ${KAFKALOG_UID}:0
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["airflow", "version"]
