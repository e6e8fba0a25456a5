"""Two stores maintained from one Airflow: ``kafkalog_default`` (the environment's store) and
``store_b`` (a ``kafkalog`` connection), each with its own cleanup DAG. Each DAG maintains its store
byte for byte as the CLI does a copy of it, leaves the other store alone, keeps its run dirs apart and
names its topics' assets ``x-kafkalog://<store>/<topic>``. Runs by ``dag.test()``, in a subprocess
with its own AIRFLOW_HOME."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from helpers import dag_test, live_files, migrated_env, require_spark
from synthetic import EVENTS, build_store

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
DELAY_MS = 2000


def _cli_cycle(log_dir: Path, now_ms: int, wall_ms: int) -> None:
    assert run_cli("retention", "apply", "--log-dir", str(log_dir), "--now-ms", str(now_ms)).code == 0
    time.sleep(DELAY_MS / 1000 + 0.5)
    assert run_cli("retention", "sweep", "--log-dir", str(log_dir)).code == 0
    done = run_cli("compact", "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms))
    assert done.code == 0, done.err


def _asset_events(home: Path) -> dict[str, list[tuple[str, str]]]:
    """Asset URI → the (DAG, task) of each event emitted for it, from the run's metadata DB."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT asset.uri, asset_event.source_dag_id, asset_event.source_task_id FROM asset_event "
                          "JOIN asset ON asset.id = asset_event.asset_id ORDER BY asset_event.id").fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for uri, dag_id, task_id in rows:
        out.setdefault(uri, []).append((dag_id, task_id))
    return out


def test_each_store_has_its_own_cycle_and_only_it_changes(tmp_path: Path) -> None:
    require_spark()
    wall = int(time.time() * 1000)
    now_ms, wall_ms = wall - 300_000, wall - 240_000
    store_a, store_b = tmp_path / "store-a", tmp_path / "store-b"
    build_store(store_a, now_ms, file_delete_delay_ms=DELAY_MS)
    build_store(store_b, now_ms, file_delete_delay_ms=DELAY_MS, event_hours=6)
    by_cli_a, by_cli_b = tmp_path / "cli-a", tmp_path / "cli-b"
    shutil.copytree(store_a, by_cli_a)
    shutil.copytree(store_b, by_cli_b)

    home = tmp_path / "airflow"
    env = migrated_env(home)
    env.update({"AIRFLOW__KAFKALOG__STORES": "kafkalog_default,store_b", "KAFKALOG_LOG_DIRS": str(store_a),
                "AIRFLOW_CONN_STORE_B": json.dumps({"conn_type": "kafkalog", "extra": {"log_dirs": str(store_b)}})})
    env.pop("KAFKALOG_CONFIG", None)

    a_before = tree_digest(store_a)
    run_b = dag_test(env, "kafkalog_cleanup__store_b", now_ms, {"wall_now_ms": wall_ms})
    assert run_b.state == "success", run_b.explain()
    assert run_b.tasks["compact"] == "success", run_b.tasks
    assert tree_digest(store_a) == a_before  # store_b's cycle never touched kafkalog_default's store
    _cli_cycle(by_cli_b, now_ms, wall_ms)
    assert live_files(store_b) == live_files(by_cli_b)

    b_after = tree_digest(store_b)
    run_a = dag_test(env, "kafkalog_cleanup", now_ms, {"wall_now_ms": wall_ms})
    assert run_a.state == "success", run_a.explain()
    assert tree_digest(store_b) == b_after
    _cli_cycle(by_cli_a, now_ms, wall_ms)
    assert live_files(store_a) == live_files(by_cli_a)

    runs = Path(env["KAFKALOG_PIPELINE_DIR"])
    assert sorted(p.name for p in runs.iterdir()) == ["kafkalog_cleanup", "kafkalog_cleanup__store_b"]
    events = _asset_events(home)
    # One event per topic for the run's retention, from delete_marked (the mark shards announce none).
    assert events[f"x-kafkalog://store_b/{EVENTS}"] == [("kafkalog_cleanup__store_b", "delete_marked")]
    assert events[f"x-kafkalog://default/{EVENTS}"] == [("kafkalog_cleanup", "delete_marked")]
