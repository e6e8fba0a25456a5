"""Whole DAG runs by Airflow's own runner (``dag.test()``, in a subprocess with its own AIRFLOW_HOME):
mapped shards, the deferred wall-clock wait, the Spark job on ``local[2]`` through
``SparkSubmitOperator``, the report.

- One ``kafkalog_cleanup`` run at clock T leaves the store as ``kafkalog retention apply --now-ms T``
  + ``retention sweep`` + ``kafkalog compact --now-ms T`` leave a copy, file for file (the wall clock
  stamped into tombstone horizons pinned to the same value in both).
- ``kafkalog_compact`` compacts exactly the named partitions' cleanable ranges whatever the dirty ratio,
  the same bytes as ``kafkalog compact --topic T --partition P``, and refuses a topic that is not
  compacted.
- A dry run changes nothing and says what a real run would do.
- The Spark job runs on a standalone cluster when the ``spark_default`` connection names its master.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from helpers import dag_test, live_files, migrated_env, require_spark, run_dir
from synthetic import CHANGELOG, EVENTS, SESSIONS, build_store

from kafkalog.cycle.documents import read_json
from tests.spark.processes import standalone_cluster

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
DELAY_MS = 2000


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    require_spark()
    return migrated_env(tmp_path_factory.mktemp("airflow"))


def _clocks() -> tuple[int, int]:
    """(T, W): the cycle's clock a few minutes back, and a pinned wall clock between it and now."""
    wall = int(time.time() * 1000)
    return wall - 300_000, wall - 240_000


def test_a_cleanup_run_leaves_the_store_as_the_cli_does(env: dict[str, str], tmp_path: Path) -> None:
    now_ms, wall_ms = _clocks()
    by_dag, by_cli = tmp_path / "dag", tmp_path / "cli"
    build_store(by_dag, now_ms, file_delete_delay_ms=DELAY_MS)
    shutil.copytree(by_dag, by_cli)
    planned = json.loads(run_cli("retention", "plan", "--log-dir", str(by_cli), "--now-ms", str(now_ms), "--json").out)
    doomed = {(p["topic"], p["partition"]): [s["base_offset"] for s in p["segments"]] for p in planned["partitions"]}
    assert doomed[(EVENTS, 0)] == [0, 20, 40, 60, 80] and doomed[(SESSIONS, 0)] != []

    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(by_dag)], "wall_now_ms": wall_ms})
    assert run.state == "success", run.explain()
    assert run.tasks["compact"] == "success" and run.tasks["wait_file_delete_delay"] == "success", run.tasks
    assert {t for t in run.tasks if t.startswith("plan_retention[")} == {"plan_retention[0]"}

    assert run_cli("retention", "apply", "--log-dir", str(by_cli), "--now-ms", str(now_ms)).code == 0
    time.sleep(DELAY_MS / 1000 + 0.5)
    assert run_cli("retention", "sweep", "--log-dir", str(by_cli)).code == 0
    compacted = run_cli("compact", "--log-dir", str(by_cli), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms))
    assert compacted.code == 0, compacted.err

    assert live_files(by_dag) == live_files(by_cli)
    for (topic, partition), bases in doomed.items():  # retention's marks are deleted in both, not just hidden
        for root in (by_dag, by_cli):
            left = [p.name for p in (root / f"{topic}-{partition}").iterdir()
                    if p.name.endswith(".deleted") and int(p.name.split(".")[0]) in bases]
            assert left == [], (root.name, topic, partition)

    summary = read_json(run_dir(env, "kafkalog_cleanup", run.run_id) / "results" / "scan_partitions.json")
    assert summary["now_ms"] == now_ms and summary["partitions"] == 5
    report = read_json(run_dir(env, "kafkalog_cleanup", run.run_id) / "compaction-report.json")
    assert sorted((p["topic"], p["partition"]) for p in report["partitions"] if p["status"] == "cleaned") == \
        [(CHANGELOG, 0), (CHANGELOG, 1), (SESSIONS, 0)]
    assert "FAILED" not in run.output


def test_compact_dag_compacts_the_named_partitions_whatever_their_ratio(env: dict[str, str], tmp_path: Path) -> None:
    now_ms, wall_ms = _clocks()
    by_dag, by_cli = tmp_path / "dag", tmp_path / "cli"
    store = build_store(by_dag, now_ms)
    # Compacted once, then a few more records, and a dirty-ratio threshold above what that leaves: the cleaner
    # manager would leave the changelog alone; "compact now" must still clean its new range.
    assert run_cli("compact", "--log-dir", str(by_dag), "--topic", CHANGELOG, "--now-ms", str(now_ms - 60_000),
                   "--wall-now-ms", str(wall_ms)).code == 0
    for partition in (0, 1):
        with store.writable_log(store.locate(CHANGELOG, partition)) as log:
            log.roll()
            log.append_records([(f"key-{i}".encode(), b"late", (), now_ms - 50_000) for i in range(20)],
                               batch_records=10, now_ms=now_ms)
            log.roll()
    assert run_cli("topics", "alter", "--log-dir", str(by_dag), "--topic", CHANGELOG,
                   "--config", "min.cleanable.dirty.ratio=0.9").code == 0
    shutil.copytree(by_dag, by_cli)
    dry = json.loads(run_cli("compact", "--log-dir", str(by_cli), "--now-ms", str(now_ms), "--dry-run", "--json").out)
    assert (CHANGELOG, 1) not in {(s["topic"], s["partition"]) for s in dry["selected"]}
    before = {p: tree_digest(by_dag / f"{CHANGELOG}-{p}") for p in (0, 1)}

    run = dag_test(env, "kafkalog_compact", now_ms, {"log_dirs": [str(by_dag)], "topic": CHANGELOG,
                                                     "partitions": [1], "wall_now_ms": wall_ms})
    assert run.state == "success", run.explain()
    assert run.tasks == {"plan_compaction": "success", "compact": "success", "report": "success"}
    cli = run_cli("compact", "--log-dir", str(by_cli), "--topic", CHANGELOG, "--partition", "1", "--now-ms",
                  str(now_ms), "--wall-now-ms", str(wall_ms))
    assert cli.code == 0, cli.err
    assert live_files(by_dag) == live_files(by_cli)
    assert tree_digest(by_dag / f"{CHANGELOG}-0") == before[0]  # not named: untouched
    assert tree_digest(by_dag / f"{CHANGELOG}-1") != before[1]  # named: compacted


def test_compact_dag_refuses_a_topic_that_is_not_compacted(env: dict[str, str], tmp_path: Path) -> None:
    now_ms, _ = _clocks()
    build_store(tmp_path / "logs", now_ms)
    before = tree_digest(tmp_path / "logs")
    run = dag_test(env, "kafkalog_compact", now_ms, {"log_dirs": [str(tmp_path / "logs")], "topic": EVENTS})
    assert run.state == "failed"
    assert run.tasks["plan_compaction"] == "failed" and run.tasks["compact"] == "upstream_failed", run.tasks
    assert "topic 'events' has cleanup.policy=delete: only a compacted topic" in run.output
    assert tree_digest(tmp_path / "logs") == before


def test_a_dry_run_changes_nothing_and_says_what_a_run_would_do(env: dict[str, str], tmp_path: Path) -> None:
    now_ms, _ = _clocks()
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    before = tree_digest(log_dir)
    plan = json.loads(run_cli("retention", "plan", "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--json").out)
    segments = sum(len(p["segments"]) for p in plan["partitions"])
    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(log_dir)], "dry_run": True})
    assert run.state == "success", run.explain()
    assert run.tasks["compact"] == "skipped"
    assert tree_digest(log_dir) == before
    assert f"retention: would mark {segments} segments" in run.output
    assert "compaction: selected changelog-0, changelog-1, sessions-0; cleaned -" in run.output


def test_compact_runs_on_the_standalone_cluster_spark_default_names(env: dict[str, str], tmp_path: Path) -> None:
    """The same cycle's compaction, on a master and two workers: the connection alone says where."""
    now_ms, wall_ms = _clocks()
    on_cluster, single = tmp_path / "cluster-store", tmp_path / "single"
    build_store(on_cluster, now_ms)
    shutil.copytree(on_cluster, single)
    with standalone_cluster(env, tmp_path / "cluster") as (url, _pids):
        host, port = url.removeprefix("spark://").split(":")
        cluster_env = {**env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": f"spark://{host}", "port": int(port)})}
        run = dag_test(cluster_env, "kafkalog_compact", now_ms, {"log_dirs": [str(on_cluster)], "topic": CHANGELOG,
                                                                 "wall_now_ms": wall_ms})
    assert run.state == "success", run.explain()
    report = read_json(run_dir(env, "kafkalog_compact", run.run_id) / "compaction-report.json")
    assert report["spark"]["master"] == url and len(report["spark"]["executors_seen"]) == 2
    assert run_cli("compact", "--log-dir", str(single), "--topic", CHANGELOG, "--now-ms", str(now_ms),
                   "--wall-now-ms", str(wall_ms)).code == 0
    assert live_files(on_cluster) == live_files(single)
