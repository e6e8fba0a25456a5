"""How the compaction job is submitted to Spark: one place for its application path, Spark conf and
environment, used by the DAG's ``SparkSubmitOperator``, the tests and the benchmarks.

The driver binds to ``KAFKALOG_SPARK_DRIVER_HOST`` (default 127.0.0.1: nothing listens beyond
loopback); a cluster whose executors run on other hosts needs an address they can reach. Executors
run the same Python as the submitter (``spark.pyspark.python``), which must have kafkalog installed at
the same path on every worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kafkalog

LOOPBACK = "127.0.0.1"
JOB_ENV = "KAFKALOG_SPARK_JOB"  # overrides where spark_jobs/compact_logs.py is
DRIVER_HOST_ENV = "KAFKALOG_SPARK_DRIVER_HOST"


def compact_job_path() -> Path:
    """``spark_jobs/compact_logs.py`` of this checkout (or ``$KAFKALOG_SPARK_JOB``)."""
    override = os.environ.get(JOB_ENV)
    if override:
        return Path(override)
    return Path(kafkalog.__file__).resolve().parents[1] / "spark_jobs" / "compact_logs.py"


@dataclass(frozen=True)
class SparkSubmitSettings:
    application: str
    conf: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # for the spark-submit process

    def command(self, master: str, args: Sequence[str], extra_conf: Mapping[str, str] | None = None) -> list[str]:
        """The ``spark-submit`` argv (the venv's own spark-submit) for ``master`` and the job's args."""
        cmd = [str(Path(self.python).parent / "spark-submit"), "--master", master]
        for key, value in {**self.conf, **(extra_conf or {})}.items():
            cmd += ["--conf", f"{key}={value}"]
        return [*cmd, self.application, *args]

    @property
    def python(self) -> str:
        return self.conf["spark.pyspark.python"]


def submit_settings(*, python: str | None = None, driver_host: str | None = None) -> SparkSubmitSettings:
    python = python or sys.executable
    host = driver_host or os.environ.get(DRIVER_HOST_ENV) or LOOPBACK
    conf = {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.ui.enabled": "false",
    }
    bin_dir = str(Path(python).parent)
    env = {
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "SPARK_LOCAL_IP": host,  # the JVM's own default address
        # spark-submit is found on PATH (SparkSubmitOperator allows no path): the one beside this Python.
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }
    return SparkSubmitSettings(str(compact_job_path()), conf, env)
