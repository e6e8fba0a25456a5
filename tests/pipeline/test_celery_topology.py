"""The production topology without containers: Airflow with the CeleryExecutor on this machine's Redis
(the broker, an empty Redis DB and a queue of the test's own) and Postgres (the metadata DB and Celery's
result backend, a database created for the test and dropped after), one Celery worker, and a Spark
standalone master with two one-core workers, everything on 127.0.0.1.

A ``kafkalog_cleanup`` run triggered through the REST API succeeds, every task on the Celery worker,
its compaction on the cluster, and leaves the store as ``kafkalog retention apply`` + ``retention
sweep`` + ``kafkalog compact`` at the cycle's clock leave a copy; nothing listens beyond loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import run_cli
from helpers import live_files, require_spark
from services import HOST, postgres_db, redis_broker  # noqa: F401 - fixtures, used by name
from synthetic import CHANGELOG, SESSIONS, build_store

from devtools.airflow_local import LocalAirflow
from kafkalog.cycle.documents import read_json
from kafkalog.cycle.steps import run_dir_for
from kafkalog.log import names
from tests.spark.processes import descendants, listening_addresses, standalone_cluster

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
CLEANUP = "kafkalog_cleanup"
DELAY_MS = 2000


def test_a_cycle_runs_on_the_celery_worker_and_compacts_on_the_spark_cluster(
        postgres_db: str, redis_broker: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811 - fixtures
    require_spark()
    broker_url, queue = redis_broker
    # The cycle's clock T (the run's logical date) and the wall clock W pinned for tombstone horizons.
    now_ms = int(time.time() * 1000) - 120_000
    wall_ms = now_ms + 60_000
    store, reference = tmp_path / "store", tmp_path / "reference"
    build_store(store, now_ms, file_delete_delay_ms=DELAY_MS)
    shutil.copytree(store, reference)
    planned = json.loads(run_cli("retention", "plan", "--log-dir", str(store), "--now-ms", str(now_ms), "--json").out)
    doomed = {(p["topic"], p["partition"], s["base_offset"]) for p in planned["partitions"] for s in p["segments"]}
    assert doomed
    (tmp_path / "idle-logs").mkdir()  # what the scheduler's own runs (default params) maintain: nothing
    (tmp_path / "broker.properties").write_text("log.retention.check.interval.ms=86400000\n")
    spark_env = {**os.environ, "SPARK_LOCAL_IP": HOST,  # the master's and workers' web UIs bind to it
                 "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}

    with standalone_cluster(spark_env, tmp_path / "cluster") as (master_url, cluster_pids):
        host, port = master_url.removeprefix("spark://").split(":")
        airflow = LocalAirflow(
            tmp_path / "home", executor="CeleryExecutor", broker_url=broker_url, queue=queue, spark_master=None,
            extra_env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_db, "SPARK_LOCAL_IP": HOST,
                       "KAFKALOG_LOG_DIRS": str(tmp_path / "idle-logs"),
                       "KAFKALOG_CONFIG": str(tmp_path / "broker.properties"),
                       "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": f"spark://{host}",
                                                                 "port": int(port)})})
        started = time.monotonic()
        airflow.start(timeout_s=300)
        try:
            print(f"\nAirflow (CeleryExecutor, queue {queue}) healthy in {time.monotonic() - started:.0f} s")
            worker = airflow.processes["celery-worker"]
            roots = [p.pid for p in airflow.processes.values()] + cluster_pids
            run_id = airflow.trigger(CLEANUP, {"log_dirs": [str(store)], "wall_now_ms": wall_ms},
                                     logical_date=datetime.fromtimestamp(now_ms / 1000, UTC).isoformat())
            started = time.monotonic()
            addresses, task_pids = _watch(airflow, run_id, roots, worker.pid, timeout_s=600)
            print(f"{CLEANUP} {run_id}: {airflow.run_state(CLEANUP, run_id)} in {time.monotonic() - started:.0f} s; "
                  f"task processes seen running: {sorted(t for t, _ in task_pids.values())}")
            tis = airflow.task_instances(CLEANUP, run_id)
            # A task's process reports its state to the API server before the worker's Celery task that ran it
            # ends: the run can be a success while the result backend still says STARTED for a few seconds.
            deadline = time.monotonic() + 120
            while {"STARTED", "PENDING", None} & set((executed := _celery_tasks(postgres_db, run_id)).values()):
                if time.monotonic() > deadline:
                    break
                time.sleep(1)
            addresses |= listening_addresses(roots)
            tree = [d for p in airflow.processes.values() for d in descendants(p.pid)]
        finally:
            airflow.stop()
        deadline = time.monotonic() + 30
        while (left := [pid for pid in tree if _alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == [], "processes outlived the Airflow components"

    assert {_name(t): t["state"] for t in tis} == {_name(t): "success" for t in tis}
    assert {t["queue"] for t in tis} == {queue}
    # Each task instance's last try went to Celery, whose result backend says that task succeeded ...
    assert executed == {(t["task_id"], t["map_index"]): "SUCCESS" for t in tis}
    # ... and the task processes seen running were the Celery worker's children.
    assert task_pids and all(on_worker for _, on_worker in task_pids.values()), task_pids
    assert addresses == {HOST}

    run_dir = run_dir_for(airflow.env()["KAFKALOG_PIPELINE_DIR"], ["/unused"], CLEANUP, run_id)
    report = read_json(run_dir / "compaction-report.json")
    assert report["spark"]["master"] == master_url and len(report["spark"]["executors_seen"]) == 2, report["spark"]
    assert sorted(f"{p['topic']}-{p['partition']}" for p in report["partitions"] if p["status"] == "cleaned") == \
        [f"{CHANGELOG}-0", f"{CHANGELOG}-1", f"{SESSIONS}-0"]

    cycle_ms = str(read_json(run_dir / "cycle.json")["now_ms"])
    assert cycle_ms == str(now_ms)
    assert run_cli("retention", "apply", "--log-dir", str(reference), "--now-ms", cycle_ms).code == 0
    time.sleep(DELAY_MS / 1000 + 0.5)
    assert run_cli("retention", "sweep", "--log-dir", str(reference)).code == 0
    compacted = run_cli("compact", "--log-dir", str(reference), "--now-ms", cycle_ms, "--wall-now-ms", str(wall_ms))
    assert compacted.code == 0, compacted.err
    assert live_files(store) == live_files(reference)
    # Retention's marks were deleted after their delay, not just hidden (compaction's replaced segments wait
    # for the next cycle: compaction never waits for the delay).
    marked = {(tp.topic, tp.partition, names.offset_from_file_name(f.name)) for f in store.glob("*/*.deleted")
              if (tp := names.parse_partition_dir_name(f.parent.name)) is not None}
    assert not doomed & marked, doomed & marked


def _watch(airflow: LocalAirflow, run_id: str, roots: list[int], worker_pid: int, *,
           timeout_s: float) -> tuple[set[str], dict[int, tuple[str, bool]]]:
    """Wait for the run to finish; what the processes listened on meanwhile, and each task process seen
    running: pid → (task id, whether it descends from the Celery worker)."""
    deadline, addresses, task_pids = time.monotonic() + timeout_s, listening_addresses(roots), {}
    while (state := airflow.run_state(CLEANUP, run_id)) not in ("success", "failed"):
        assert time.monotonic() < deadline, f"{run_id} still {state}: {airflow.task_states(CLEANUP, run_id)}"
        tis = airflow.task_instances(CLEANUP, run_id)
        # Every task here is deterministic: a retry means something is broken. Say what now, not after the
        # DAG's retry delays.
        assert not (bad := [t for t in tis if t["state"] in ("up_for_retry", "failed")]), _explain(airflow, bad)
        running = [t for t in tis if t["state"] == "running" and t["pid"]]
        under_worker = set(descendants(worker_pid))
        for ti in running:  # a process that has already exited says nothing
            if ti["pid"] not in task_pids and (ti["pid"] in under_worker or _alive(ti["pid"])):
                task_pids[ti["pid"]] = (ti["task_id"], ti["pid"] in under_worker)
        addresses |= listening_addresses(roots)
        time.sleep(1)
    return addresses, task_pids


def _explain(airflow: LocalAirflow, tis: list[dict[str, Any]]) -> str:
    out = []
    for ti in tis:
        path = (f"/api/v2/dags/{CLEANUP}/dagRuns/{quote(ti['dag_run_id'], safe='')}/taskInstances/{ti['task_id']}"
                f"/logs/{ti['try_number']}?full_content=true&map_index={ti['map_index']}")
        log = json.dumps(airflow.request("GET", path))
        out.append(f"{_name(ti)} {ti['state']} (try {ti['try_number']}): {log[-3000:]}")
    return "\n".join(out)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _name(ti: dict[str, Any]) -> str:
    return ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"


def _celery_tasks(sql_url: str, run_id: str) -> dict[tuple[str, int], str | None]:
    """(task id, map index) → the Celery state in the result backend of the task's ``external_executor_id``."""
    import psycopg2

    with psycopg2.connect(sql_url.replace("postgresql+psycopg2", "postgresql")) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT ti.task_id, ti.map_index, m.status FROM task_instance ti LEFT JOIN celery_taskmeta m"
                       " ON m.task_id = ti.external_executor_id WHERE ti.dag_id = %s AND ti.run_id = %s",
                       (CLEANUP, run_id))
        rows = cursor.fetchall()
    conn.close()
    return {(task, index): status for task, index, status in rows}
