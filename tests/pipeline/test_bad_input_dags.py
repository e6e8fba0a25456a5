"""Issue #35, items 8-11, through Airflow: each DAG run by Airflow's own runner (``dag.test()`` in a
subprocess with its own AIRFLOW_HOME, retries and deferrals included), and the trigger form's schema.

- Bad input (a broker file, a partition that does not exist) fails its task at once, without a retry;
  the tasks that need the scan are skipped; ``report`` names the cause and says nothing was maintained.
- A topic's day-long ``file.delete.delay.ms`` does not hold the cycle open: the run ends within its
  interval and the report says when the rest falls due.
- A dry run over a CRC-corrupt compacted partition fails naming it, as the real run does.
- A partition another cleaner holds is skipped by ``kafkalog_compact``, which says so (Spark).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import tree_digest
from helpers import dag_test, migrated_env, require_spark, run_dir
from synthetic import CHANGELOG, build_store, corrupt_compacted_store, delete_topic

from kafkalog.cycle import compaction
from kafkalog.cycle.documents import read_json
from kafkalog.cycle.steps import format_ms
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
FAST_S = 120  # a run that fails fast, or waits for no long delay, ends well within this (retries take minutes)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return migrated_env(tmp_path_factory.mktemp("airflow"))


def test_a_bad_broker_file_fails_the_scan_at_once_and_the_report_names_it(env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 300_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    broker = tmp_path / "server.properties"
    broker.write_text("log.retention.hours=abc\n")
    before = tree_digest(log_dir)
    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(log_dir)], "config_file": str(broker)},
                   timeout_s=600)
    assert run.state == "failed", run.explain()
    assert run.tasks == {"scan_partitions": "failed", "plan_retention": "upstream_failed",
                         "mark_deleted": "upstream_failed", "wait_file_delete_delay": "skipped",
                         "delete_marked": "skipped", "select_dirtiest_logs": "skipped", "compact": "skipped",
                         "report": "failed"}, run.tasks
    assert run.tries["scan_partitions"] == 1 and run.seconds < FAST_S, (run.tries, run.seconds)
    assert f"nothing was maintained: scan_partitions failed: {broker}: log.retention.hours=abc: must be a 32-bit " \
           "integer" in run.output
    assert "the other partitions were maintained" not in run.output
    assert tree_digest(log_dir) == before


def test_compacting_a_partition_that_does_not_exist_fails_at_once(env: dict[str, str], tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 300_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    before = tree_digest(log_dir)
    run = dag_test(env, "kafkalog_compact", now_ms, {"log_dirs": [str(log_dir)], "topic": CHANGELOG,
                                                     "partitions": [7]}, timeout_s=600)
    assert run.state == "failed", run.explain()
    assert run.tasks == {"plan_compaction": "failed", "compact": "upstream_failed", "report": "failed"}, run.tasks
    assert run.tries["plan_compaction"] == 1 and run.seconds < FAST_S, (run.tries, run.seconds)
    assert f"nothing was maintained: plan_compaction failed: topic '{CHANGELOG}' has 2 partitions; no partition 7" \
        in run.output
    assert tree_digest(log_dir) == before


def test_a_day_long_file_delete_delay_does_not_hold_the_cycle_open(env: dict[str, str], tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    store = LogStore([log_dir], create_missing=True)
    delete_topic(store, "quick", 1000)
    delete_topic(store, "slow", 86_400_000)
    broker = tmp_path / "server.properties"
    broker.write_text("log.retention.check.interval.ms=30000\n")
    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(log_dir)], "config_file": str(broker)},
                   timeout_s=240)
    assert run.state == "success", run.explain()
    assert run.tasks["wait_file_delete_delay"] == "success" and run.tasks["compact"] == "skipped", run.tasks
    assert run.seconds < FAST_S, run.seconds
    assert not list((log_dir / "quick-0").glob("*.deleted"))  # waited for: its delay is within the interval
    waiting = sorted((log_dir / "slow-0").glob("*.deleted"))
    assert len(waiting) == 7  # two segments' .log, .index, .timeindex and a snapshot
    deleted = read_json(run_dir(env, "kafkalog_cleanup", run.run_id) / "results" / "delete_marked.json")
    marked_ms = min(p.stat().st_mtime_ns // 1_000_000 for p in waiting)
    assert deleted["next_due_ms"] == marked_ms + 86_400_000
    assert f"7 files wait for file.delete.delay.ms, the first due at {format_ms(deleted['next_due_ms'])}: a later " \
           "cycle deletes them" in run.output


def test_a_dry_run_fails_where_the_real_run_fails(env: dict[str, str], tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir, copy = tmp_path / "logs", tmp_path / "copy"
    corrupt_compacted_store(log_dir, now_ms)
    shutil.copytree(log_dir, copy)
    real = compaction.compact_planned(LogStore([copy]), compaction.plan_compaction(LogStore([copy]), now_ms=now_ms),
                                 run_id="real")
    expected = real["errors"][0]["error"].replace(str(copy), str(log_dir))
    before = tree_digest(log_dir)
    run = dag_test(env, "kafkalog_cleanup", now_ms, {"log_dirs": [str(log_dir)], "dry_run": True})
    assert run.state == "failed", run.explain()
    assert run.tasks["select_dirtiest_logs"] == "success" and run.tasks["compact"] == "skipped", run.tasks
    assert run.tasks["report"] == "failed", run.tasks
    assert f"FAILED cl-0 in compact (dry run): the compaction would fail: {expected}" in run.output
    assert "the cycle failed in partitions cl-0 and tasks - (a dry run: nothing was changed): cl-0 in compact (dry " \
           f"run): the compaction would fail: {expected}" in run.output
    assert tree_digest(log_dir) == before


@pytest.mark.spark
def test_a_partition_another_cleaner_holds_is_skipped_and_said_so(env: dict[str, str], tmp_path: Path) -> None:
    require_spark()
    now_ms = int(time.time() * 1000) - 300_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    held, other = log_dir / f"{CHANGELOG}-0", log_dir / f"{CHANGELOG}-1"
    with cleaner_lock(held, timeout_s=0):  # another cleaner at work on it
        before, other_before = tree_digest(held), tree_digest(other)
        run = dag_test(env, "kafkalog_compact", now_ms, {"log_dirs": [str(log_dir)], "topic": CHANGELOG})
        assert tree_digest(held) == before
    assert run.state == "success", run.explain()
    assert run.tasks == {"plan_compaction": "success", "compact": "success", "report": "success"}, run.tasks
    assert f"SKIPPED {CHANGELOG}-0 in compact: {held}: locked by another kafkalog process (waited 0 s); a later " \
           "cycle does it" in run.output
    assert f"cleaned {CHANGELOG}-1" in run.output and tree_digest(other) != other_before


FORM = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamsDict
bag = DagBag(dag_folder=sys.argv[1])
out = []
for dag_id, conf in json.loads(sys.argv[2]):
    params = ParamsDict(bag.dags[dag_id].params)
    try:
        for name, value in conf.items():
            params[name] = value
        params.validate()
        out.append(None)
    except Exception as exc:
        out.append(type(exc).__name__)
print("RESULT " + json.dumps(out))
'''


def test_the_trigger_form_refuses_what_its_schema_can(env: dict[str, str]) -> None:
    checks: list[tuple[str, dict[str, Any], str | None]] = [
        ("kafkalog_cleanup", {"log_dirs": ["/data/a", "/data/a"]}, "ParamValidationError"),
        ("kafkalog_cleanup", {"log_dirs": ["/"]}, "ParamValidationError"),
        ("kafkalog_cleanup", {"log_dirs": ["//"]}, "ParamValidationError"),
        ("kafkalog_cleanup", {"log_dirs": ["/data/a/"]}, None),
        ("kafkalog_cleanup", {"config_file": "server.properties"}, "ParamValidationError"),
        ("kafkalog_cleanup", {"config_file": "/etc/kafka/server.properties"}, None),
        ("kafkalog_cleanup", {"topics": ["orders", "orders"]}, "ParamValidationError"),
        ("kafkalog_cleanup", {"wall_now_ms": 5}, "ParamValidationError"),
        ("kafkalog_cleanup", {"wall_now_ms": 1_764_000_000}, "ParamValidationError"),  # seconds, not ms
        ("kafkalog_cleanup", {"wall_now_ms": 1_764_000_000_000_000}, "ParamValidationError"),  # microseconds
        ("kafkalog_cleanup", {"wall_now_ms": 1_764_000_000_000}, None),
        ("kafkalog_compact", {"topic": CHANGELOG, "partitions": [0, 0]}, "ParamValidationError"),
        ("kafkalog_compact", {"topic": CHANGELOG, "partitions": [-1]}, "ParamValidationError"),
        ("kafkalog_compact", {"topic": CHANGELOG, "partitions": [0, 1]}, None),
    ]
    done = subprocess.run([sys.executable, "-c", FORM, env["AIRFLOW__CORE__DAGS_FOLDER"],
                           json.dumps([[d, c] for d, c, _ in checks])], env=env, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    assert dict(zip([json.dumps(c) for _, c, _ in checks], json.loads(lines[-1][len("RESULT "):]), strict=True)) == \
        {json.dumps(c): refused for _, c, refused in checks}
