"""The pipeline on real Airflow: api-server, scheduler (LocalExecutor, parallelism 2), dag-processor and
triggerer on 127.0.0.1, a fresh Postgres database for the module (dropped after), Spark ``local[2]``
through a ``spark_default`` connection managed in Airflow, and an OpenLineage file transport. Every
run is triggered and watched through the REST API.

- A cycle succeeds and changes the files; its wait is ``deferred`` and, with parallelism 2, two other
  tasks run while it waits (the deferred task holds no slot).
- A backfill over three past dates marks at each date exactly what ``retention plan --now-ms <date>``
  says was due then.
- A task process SIGKILLed in the middle of ``mark_deleted``'s renames is retried by Airflow, and the
  store ends as an uninterrupted cycle leaves it.
- A corrupt partition fails ``report``, named, while the others were maintained; after ``kafkalog
  recover`` a rerun succeeds.
- A DAG scheduled on a topic's Asset runs after a cycle that compacted the topic and not after one
  that did not touch it; the OpenLineage events name the topics with the ``kafkalogMaintenance`` facet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from helpers import REPO, live_files, require_spark
from services import fresh_postgres_db
from synthetic import CHANGELOG, EVENTS, HOUR_MS, SESSIONS, build_store

from devtools.airflow_local import LocalAirflow
from kafkalog.cycle.report import summarize
from kafkalog.cycle.steps import run_dir_for
from kafkalog.log import checkpoint, names
from kafkalog.log.lock import partition_lock
from kafkalog.log.store import LogStore

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
DAY_MS = 24 * HOUR_MS
CLEANUP, COMPACT = "kafkalog_cleanup", "kafkalog_compact"
CONSUMER_DAG = '''
from __future__ import annotations
import datetime
from airflow.sdk import Asset, dag, task

ORDERS = Asset("x-kafkalog://default/orders")

@dag(dag_id="orders_consumer", schedule=[ORDERS], start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
     catchup=False, tags=["test"])
def orders_consumer() -> None:
    @task
    def consume(**context: object) -> list[dict[str, object]]:
        return [dict(e.extra) for e in context["triggering_asset_events"][ORDERS]]
    consume()

orders_consumer()
'''
# The topic assets both compactions of the deferral test emit, declared so that the DAG processor has made
# them before. Airflow makes an asset first named by an alias event in the task's success update, and of
# two tasks making the same new asset at the same moment, the one that loses the insert is set to failed
# (a unique violation on the asset's name and URI, after its work succeeded).
KNOWN_ASSETS_DAG = '''
from __future__ import annotations
from airflow.sdk import Asset, dag, task

@dag(dag_id="known_topic_assets", schedule=None, tags=["test"])
def known_topic_assets() -> None:
    @task(outlets=[Asset("x-kafkalog://default/changelog"), Asset("x-kafkalog://default/sessions")])
    def never_run() -> None:
        pass
    never_run()

known_topic_assets()
'''


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAirflow]:
    require_spark()
    base = tmp_path_factory.mktemp("e2e")
    dags = base / "dags"
    dags.mkdir()
    for dag_file in (REPO / "dags").glob("*.py"):
        shutil.copy(dag_file, dags / dag_file.name)
    (dags / "orders_consumer.py").write_text(CONSUMER_DAG)
    (dags / "known_topic_assets.py").write_text(KNOWN_ASSETS_DAG)
    (base / "idle-logs").mkdir()  # what scheduled runs (default params) maintain: nothing
    (base / "broker.properties").write_text("log.retention.check.interval.ms=86400000\n")  # daily cycles
    with fresh_postgres_db() as sql_url:
        env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_url,
               "KAFKALOG_LOG_DIRS": str(base / "idle-logs"), "KAFKALOG_CONFIG": str(base / "broker.properties"),
               "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                              "log_file_path": str(base / "openlineage.jsonl")}),
               "AIRFLOW__OPENLINEAGE__NAMESPACE": "kafkalog-e2e"}
        instance = LocalAirflow(base / "home", dags_folder=dags, parallelism=2, spark_master=None, extra_env=env)
        instance.start(dag_ids=(CLEANUP, COMPACT, "known_topic_assets"))
        try:
            instance.request("POST", "/api/v2/connections", {"connection_id": "spark_default", "conn_type": "spark",
                                                             "host": "local[2]"}, ok=(201,))
            instance.wait_for_run(CLEANUP, instance.first_run(CLEANUP), timeout_s=300)  # the scheduler's own first
            yield instance
        finally:
            instance.stop()


def _run_dir(airflow: LocalAirflow, dag_id: str, run_id: str) -> Path:
    return run_dir_for(airflow.env()["KAFKALOG_PIPELINE_DIR"], ["/unused"], dag_id, run_id)


def _wait_until(what: str, condition: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)
    return value


def test_a_cycle_defers_its_wait_and_frees_the_slot_for_other_tasks(airflow: LocalAirflow, tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    store, other = tmp_path / "store", tmp_path / "other"
    build_store(store, now_ms, file_delete_delay_ms=45_000)
    build_store(other, now_ms)
    planned = json.loads(run_cli("retention", "plan", "--log-dir", str(store), "--now-ms", str(now_ms), "--json").out)
    doomed = {(p["topic"], p["partition"], s["base_offset"]) for p in planned["partitions"] for s in p["segments"]}

    run_id = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})
    _wait_until("the wait is deferred",
                lambda: airflow.task_states(CLEANUP, run_id).get("wait_file_delete_delay") == "deferred", 180)
    other_run = airflow.trigger(COMPACT, {"log_dirs": [str(other)], "topic": CHANGELOG})
    busiest: list[str] = []
    while (states := airflow.task_states(CLEANUP, run_id)).get("wait_file_delete_delay") == "deferred":
        running = [f"{CLEANUP}.{t}" for t, s in states.items() if s == "running"]
        running += [f"{COMPACT}.{t}" for t, s in airflow.task_states(COMPACT, other_run).items() if s == "running"]
        busiest = max(busiest, running, key=len)
        time.sleep(0.5)
    assert len(busiest) == 2, busiest  # both slots in use while the third task waited, deferred

    assert airflow.wait_for_run(CLEANUP, run_id, timeout_s=300) == "success", airflow.task_states(CLEANUP, run_id)
    assert airflow.wait_for_run(COMPACT, other_run, timeout_s=300) == "success"
    states = airflow.task_states(CLEANUP, run_id)
    assert states["compact"] == "success" and states["mark_deleted[0]"] == "success", states
    assert doomed and not doomed & _segment_files(store)  # every segment retention took is gone from disk
    summary = summarize(_run_dir(airflow, CLEANUP, run_id))
    assert summary.compaction.cleaned == (f"{CHANGELOG}-0", f"{CHANGELOG}-1", f"{SESSIONS}-0")
    assert summary.failed == ()


def _segment_files(store: Path) -> set[tuple[str, int, int]]:
    """(topic, partition, base offset) of every segment file on disk, ``.deleted`` ones included."""
    out = set()
    for directory in store.iterdir():
        tp = names.parse_partition_dir_name(directory.name)
        if tp is not None:
            out |= {(tp.topic, tp.partition, names.offset_from_file_name(f.name)) for f in directory.iterdir()
                    if names.parse_segment_file_name(f.name) is not None}
    return out


def test_a_backfill_marks_at_each_date_what_was_due_then(airflow: LocalAirflow, tmp_path: Path) -> None:
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    dates = [midnight - timedelta(days=d) for d in (3, 2, 1)]
    first_ms = int(dates[0].timestamp() * 1000)
    store, reference = tmp_path / "store", tmp_path / "reference"
    log_store = LogStore([store], create_missing=True)
    log_store.create_topic(EVENTS, 1, {"retention.ms": str(DAY_MS), "file.delete.delay.ms": "1000"})
    with log_store.writable_log(log_store.locate(EVENTS, 0)) as log:
        for i in range(8):  # one segment every 12 h from two days before the first date
            log.append_records([(b"k", f"{i}/{j}".encode(), (), first_ms - 2 * DAY_MS + i * DAY_MS // 2 + j)
                                for j in range(10)], batch_records=5, now_ms=first_ms)
            log.roll()
    shutil.copytree(store, reference)
    expected = []
    for date in dates:
        now = str(int(date.timestamp() * 1000))
        plan = json.loads(run_cli("retention", "plan", "--log-dir", str(reference), "--now-ms", now, "--json").out)
        expected.append([s["base_offset"] for s in plan["partitions"][0]["segments"]])
        assert run_cli("retention", "apply", "--log-dir", str(reference), "--now-ms", now).code == 0
    assert expected == [[0, 10], [20, 30], [40, 50]]

    airflow.request("POST", "/api/v2/backfills", {
        "dag_id": CLEANUP, "from_date": dates[0].isoformat(), "to_date": dates[-1].isoformat(),
        "run_backwards": False, "dag_run_conf": {"log_dirs": [str(store)]}, "reprocess_behavior": "none",
        "max_active_runs": 1}, ok=(200,))
    run_ids = [f"backfill__{d.isoformat()}" for d in dates]
    for run_id in run_ids:
        _wait_until(f"{run_id} exists", lambda run_id=run_id: _exists(airflow, run_id), 120)
        assert airflow.wait_for_run(CLEANUP, run_id, timeout_s=300) == "success", airflow.task_states(CLEANUP, run_id)
    journal = json.loads(run_cli("journal", "--log-dir", str(store), "--json").out)["entries"]
    marked = [sorted(b for e in journal if e["action"] == "mark-deleted" and e["run_id"] == f"{CLEANUP}/{run_id}"
                     for b in e["segments"]) for run_id in run_ids]
    assert marked == expected


def _exists(airflow: LocalAirflow, run_id: str) -> bool:
    runs = airflow.request("GET", f"/api/v2/dags/{CLEANUP}/dagRuns?limit=100")["dag_runs"]
    return any(r["dag_run_id"] == run_id for r in runs)


def test_a_task_killed_mid_mark_is_retried_and_ends_as_an_uninterrupted_cycle(airflow: LocalAirflow,
                                                                               tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    store, reference = tmp_path / "store", tmp_path / "reference"
    log_store = LogStore([store], create_missing=True)
    log_store.create_topic("bulk", 60, {"retention.ms": str(HOUR_MS), "file.delete.delay.ms": "1000"})
    for partition in range(60):
        with log_store.writable_log(log_store.locate("bulk", partition)) as log:
            for i in range(25):
                log.append_records([(b"k", b"v" * 40, (), now_ms - 2 * HOUR_MS + i)] * 4, batch_records=2,
                                   now_ms=now_ms)
                log.roll()
    shutil.copytree(store, reference)

    # The task marks the partitions in order; holding bulk-30's lock stops it there (it waits up to its
    # lock timeout), so the kill lands with half the partitions marked, whatever the machine's speed.
    with partition_lock(store / "bulk-30"):
        run_id = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})
        pid = _wait_until("mark_deleted runs", lambda: _running_pid(airflow, run_id, "mark_deleted"), 180,
                          every_s=0.05)
        _wait_until("bulk-0 to bulk-29 marked", lambda: _marked(store) >= 30 * 25, 120, every_s=0.02)
        os.kill(pid, signal.SIGKILL)
    assert _marked(store) == 30 * 25  # not a rename past the held partition
    assert airflow.wait_for_run(CLEANUP, run_id, timeout_s=300) == "success", airflow.task_states(CLEANUP, run_id)
    tries = [t["try_number"] for t in airflow.task_instances(CLEANUP, run_id) if t["task_id"] == "mark_deleted"]
    assert tries == [2]  # the killed try, then Airflow's retry

    assert run_cli("retention", "apply", "--log-dir", str(reference), "--now-ms",
                   str(_cycle_clock(airflow, run_id))).code == 0
    time.sleep(1.5)
    assert run_cli("retention", "sweep", "--log-dir", str(reference)).code == 0
    assert live_files(store) == live_files(reference)
    assert not list(store.rglob("*.deleted"))


def _running_pid(airflow: LocalAirflow, run_id: str, task_id: str) -> int | None:
    for ti in airflow.task_instances(CLEANUP, run_id):
        if ti["task_id"] == task_id and ti["state"] == "running" and ti.get("pid"):
            return int(ti["pid"])
    return None


def _marked(store: Path) -> int:
    return sum(1 for _ in store.glob("*/*.log.deleted"))


def _cycle_clock(airflow: LocalAirflow, run_id: str) -> int:
    return int(json.loads((_run_dir(airflow, CLEANUP, run_id) / "cycle.json").read_text())["now_ms"])


def test_a_corrupt_partition_fails_the_report_and_a_rerun_after_recover_succeeds(airflow: LocalAirflow,
                                                                                 tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    store = tmp_path / "store"
    log_store = build_store(store, now_ms, file_delete_delay_ms=1000)
    location = log_store.locate(EVENTS, 1)
    with log_store.writable_log(location) as log:  # an unclean shutdown left a corrupt batch before good ones
        active = log.active_segment.base_offset
        log.append_records([(b"k", f"late {i}".encode(), (), now_ms) for i in range(30)], batch_records=5,
                           now_ms=now_ms)
        segment = log.active_segment.log_path
    data = bytearray(segment.read_bytes())
    data[65] ^= 0xFF
    segment.write_bytes(bytes(data))
    points = checkpoint.read_offset_checkpoint(store / names.RECOVERY_POINT_CHECKPOINT)
    points[(EVENTS, 1)] = active
    checkpoint.write_offset_checkpoint(store / names.RECOVERY_POINT_CHECKPOINT, points)

    run_id = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})
    assert airflow.wait_for_run(CLEANUP, run_id, timeout_s=300) == "failed"
    states = airflow.task_states(CLEANUP, run_id)
    assert states["report"] == "failed" and states["mark_deleted[0]"] == "success", states
    summary = summarize(_run_dir(airflow, CLEANUP, run_id))
    assert [(f.step, f.topic, f.partition) for f in summary.failed] == [("mark_deleted", EVENTS, 1)]
    assert "corrupt batch" in str(summary.failed[0].error)
    log_text = _task_log(airflow, run_id, "report")
    assert f"{EVENTS}-1" in log_text and "the other partitions were maintained" in log_text
    assert not (store / f"{EVENTS}-0" / "00000000000000000000.log").exists()  # the others were maintained
    assert (store / f"{EVENTS}-1" / "00000000000000000000.log").exists()  # the corrupt one was left alone
    assert sorted(summary.compaction.cleaned) == [f"{CHANGELOG}-0", f"{CHANGELOG}-1", f"{SESSIONS}-0"]

    assert run_cli("recover", "--log-dir", str(store)).code == 0
    again = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})
    assert airflow.wait_for_run(CLEANUP, again, timeout_s=300) == "success", airflow.task_states(CLEANUP, again)
    assert not (store / f"{EVENTS}-1" / "00000000000000000000.log").exists()


def _task_log(airflow: LocalAirflow, run_id: str, task_id: str) -> str:
    path = f"/api/v2/dags/{CLEANUP}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1?full_content=true"
    return json.dumps(airflow.request("GET", path))


def test_a_topic_asset_schedules_a_consumer_only_when_the_topic_changed(airflow: LocalAirflow,
                                                                         tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    store = tmp_path / "store"
    log_store = LogStore([store], create_missing=True)
    log_store.create_topic("orders", 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
    with log_store.writable_log(log_store.locate("orders", 0)) as log:
        log.append_records([(f"order-{i % 30}".encode(), f"status {i}".encode(), (), now_ms - 1000)
                            for i in range(600)], batch_records=10, now_ms=now_ms)

    first = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})
    assert airflow.wait_for_run(CLEANUP, first, timeout_s=300) == "success"
    consumer = _wait_until("orders_consumer runs", lambda: _runs(airflow, "orders_consumer"), 60)
    assert len(consumer) == 1
    assert airflow.wait_for_run("orders_consumer", consumer[0]["dag_run_id"], timeout_s=120) == "success"
    events = airflow.request("GET", "/api/v2/assets/events?limit=100")["asset_events"]
    [event] = [e for e in events if e["uri"] == "x-kafkalog://default/orders"]
    report = json.loads((_run_dir(airflow, CLEANUP, first) / "compaction-report.json").read_text())
    stats = report["partitions"][0]["stats"]
    assert event["source_task_id"] == "compact"
    assert event["extra"]["records_removed"] == stats["records_read"] - stats["records_written"] > 0

    second = airflow.trigger(CLEANUP, {"log_dirs": [str(store)]})  # nothing left to do to orders
    assert airflow.wait_for_run(CLEANUP, second, timeout_s=300) == "success"
    assert airflow.task_states(CLEANUP, second)["compact"] == "skipped"
    time.sleep(15)  # the scheduler would have queued an asset-triggered run by now
    assert len(_runs(airflow, "orders_consumer")) == 1

    transport = json.loads(airflow.env()["AIRFLOW__OPENLINEAGE__TRANSPORT"])
    ol = [json.loads(line) for line in Path(transport["log_file_path"]).read_text().splitlines() if line.strip()]
    completes = [e for e in ol if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{CLEANUP}.compact"
                 and any(o["name"] == "orders" for o in e.get("outputs", []))]
    assert completes, "no OpenLineage COMPLETE event of compact names the orders topic"
    [output] = [o for o in completes[-1]["outputs"] if o["name"] == "orders"]
    assert output["namespace"] == "x-kafkalog://default"
    facet = output["facets"]["kafkalogMaintenance"]
    assert facet["task"] == "compact" and facet["changes"] == {k: v for k, v in event["extra"].items() if k != "task"}
    assert {i["name"] for i in completes[-1]["inputs"]} == {"orders"}


def _runs(airflow: LocalAirflow, dag_id: str) -> list[dict[str, Any]]:
    return list(airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"])
