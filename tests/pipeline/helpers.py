"""Helpers shared by the pipeline tests: Airflow's environment, ``dag.test()`` in a subprocess,
comparing log dirs file by file, and what every driver says when the broker file disables the cleaner."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import names
from tests.spark.processes import spark_missing

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("dag_test_runner.py")
# Not part of a log's content: locks, the journal (who ran when), and files marked for deletion, which
# no reader sees and which the sweep removes on its own clock.
NOT_COMPARED = {names.JOURNAL_FILE, names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE}
# What every driver says with the cleaner disabled (log.cleaner.enable=false in the broker file).
OFF = "log.cleaner.enable=false"
NO_COMPACTION = f"cleaner-disabled: {OFF}: no log cleaner runs, so no log is compacted"
NO_RETENTION = (f"cleaner-disabled: {OFF}: no log cleaner runs, and a compacted topic's retention runs in the "
                "log cleaner")
REFUSED = (f"{OFF} in the broker config: no log cleaner runs, so nothing is compacted; set log.cleaner.enable=true "
           "to compact")


def require_spark() -> None:
    reason = spark_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the pipeline tests")
        pytest.skip(reason)


def live_files(log_dir: Path) -> dict[str, str]:
    """Relative path → sha256 of every file of the store that a reader sees (nothing ``.deleted``)."""
    out = {}
    for path in sorted(log_dir.rglob("*")):
        if path.is_file() and path.name not in NOT_COMPARED and not path.name.endswith(names.DELETED_SUFFIX):
            out[str(path.relative_to(log_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "KAFKALOG_PIPELINE_DIR": str(home / "runs"),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    env.update(extra)
    return env


def migrated_env(home: Path) -> dict[str, str]:
    """An Airflow home of its own (``airflow_env``) with its metadata DB migrated."""
    env = airflow_env(home)
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return env


@dataclass
class DagRun:
    state: str
    run_id: str
    tasks: dict[str, str]
    output: str
    tries: dict[str, int] = field(default_factory=dict)  # attempts each task made (0: it never ran)
    seconds: float = 0.0  # how long the run took, the runner's start included

    def explain(self) -> str:
        return f"{self.state} {self.tasks}\n{self.output[-8000:]}"


def dag_test(env: dict[str, str], dag_id: str, logical_ms: int, conf: dict[str, Any], *,
             timeout_s: float = 600) -> DagRun:
    """One run of ``dag_id`` by ``dag.test()`` at ``logical_ms`` with ``conf``."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(RUNNER), dag_id, str(logical_ms), json.dumps(conf)], env=env,
                          capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    output = done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode} after {time.monotonic() - started:.0f} s\n" \
                                           f"{output[-8000:]}"
    doc = json.loads(lines[-1][len("RESULT "):])
    return DagRun(doc["state"], doc["run_id"], doc["tasks"], output, doc.get("tries", {}), time.monotonic() - started)


def run_dir(env: dict[str, str], dag_id: str, run_id: str) -> Path:
    from kafkalog.cycle.steps import run_dir_for

    return run_dir_for(env["KAFKALOG_PIPELINE_DIR"], ["/unused"], dag_id, run_id)
