"""``log.cleaner.enable=false`` (or ``log.cleaner.threads=0``) in the broker file, as every driver sees it.

Kafka's LogManager starts no cleaner then: nothing is compacted, and compacted topics (``compact`` and
``compact,delete``) get no retention either, since theirs runs in the cleaner (spec §8.1). The CLI, a
cycle's steps, the Spark job and the Log store page all get this from the same policy functions; each
names the key, and explicit compaction is refused with nothing changed. Neither Airflow nor Spark is
started here (``test_cleaner_disabled_dags.py`` runs the DAGs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, tree_digest
from helpers import NO_COMPACTION, NO_RETENTION, OFF, REFUSED, REPO, airflow_env
from synthetic import CHANGELOG, EVENTS, SESSIONS, build_store

from kafkalog.airflow import log_store_detail
from kafkalog.airflow.log_store_inventory import SnapshotMemo, build_inventory
from kafkalog.cycle import report, steps
from kafkalog.cycle.steps import CycleSettings
from kafkalog.errors import ConfigError
from kafkalog.log.config import BrokerConfig
from kafkalog.log.store import LogStore
from kafkalog.tools.status import status_rows

COMPACTED = [(CHANGELOG, 0), (CHANGELOG, 1), (SESSIONS, 0)]


class Store:
    def __init__(self, tmp_path: Path, broker_text: str = f"{OFF}\n") -> None:
        self.now_ms = int(time.time() * 1000) - 60_000
        self.log_dir = tmp_path / "logs"
        build_store(self.log_dir, self.now_ms, file_delete_delay_ms=0)
        self.broker = tmp_path / "server.properties"
        self.broker.write_text(broker_text)
        self.tmp = tmp_path

    def cli(self, *args: str, broker: bool = True) -> Any:
        config = ["--config-file", str(self.broker)] if broker else []
        return run_cli(*args, "--log-dir", str(self.log_dir), *config)

    def dirs(self, *partitions: tuple[str, int]) -> dict[str, str]:
        return {f"{t}-{p}/{k}": v for t, p in partitions for k, v in tree_digest(self.log_dir / f"{t}-{p}").items()}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path)


def _by_partition(entries: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(e["topic"], e["partition"]): e for e in entries}


# --- the CLI ----------------------------------------------------------------------------------------------
def test_compact_cleans_nothing_and_the_plan_says_why(store: Store) -> None:
    before = tree_digest(store.log_dir)
    enabled = json.loads(store.cli("compact", "--dry-run", "--json", "--now-ms", str(store.now_ms), broker=False).out)
    assert [(s["topic"], s["partition"]) for s in enabled["selected"]] == COMPACTED
    done = store.cli("compact", "--json", "--now-ms", str(store.now_ms))
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert doc["selected"] == [] and doc["cleaned"] == [] and doc["checkpoint_resets"] == []
    assert [(n["topic"], n["partition"], n["kind"], n["reason"]) for n in doc["not_selected"]] == [
        (CHANGELOG, 0, "cleaner-disabled", NO_COMPACTION), (CHANGELOG, 1, "cleaner-disabled", NO_COMPACTION),
        (EVENTS, 0, "policy", "policy: cleanup.policy=delete does not include compact"),
        (EVENTS, 1, "policy", "policy: cleanup.policy=delete does not include compact"),
        (SESSIONS, 0, "cleaner-disabled", NO_COMPACTION)]
    text = store.cli("compact", "--now-ms", str(store.now_ms))
    assert (text.code, text.out) == (0, f"3 compacted partitions not cleaned: {NO_COMPACTION}\n"
                                        "0 partitions cleaned, 0 failed\n")
    assert tree_digest(store.log_dir) == before


@pytest.mark.parametrize(("broker_text", "message"), [
    (f"{OFF}\n", REFUSED),
    ("log.cleaner.threads=0\n", "log.cleaner.threads=0 in the broker config: no log cleaner runs, so nothing is "
                                "compacted; set log.cleaner.threads to at least 1 to compact")])
@pytest.mark.parametrize("extra", [[], ["--partition", "0"], ["--dry-run"]])
def test_compacting_a_named_topic_is_refused_naming_the_key(tmp_path: Path, broker_text: str, message: str,
                                                             extra: list[str]) -> None:
    store = Store(tmp_path, broker_text)
    before = tree_digest(store.log_dir)
    refused = store.cli("compact", "--topic", CHANGELOG, *extra)
    assert (refused.code, refused.out, refused.err) == (1, "", f"kafkalog: error: {message}\n")
    assert tree_digest(store.log_dir) == before


def test_retention_leaves_compacted_topics_alone_and_says_why(store: Store) -> None:
    now = str(store.now_ms)
    enabled = _by_partition(json.loads(store.cli("retention", "plan", "--json", "--now-ms", now,
                                                 broker=False).out)["partitions"])
    assert len(enabled[(SESSIONS, 0)]["segments"]) > 0  # compact,delete: its retention.ms passes
    reviewed = store.tmp / "plan.json"
    reviewed.write_text(store.cli("retention", "plan", "--json", "--now-ms", now, broker=False).out)
    planned = _by_partition(json.loads(store.cli("retention", "plan", "--json", "--now-ms", now).out)["partitions"])
    for tp in COMPACTED:
        assert (planned[tp]["segments"], planned[tp]["blocked_by"]) == ([], [NO_RETENTION])
    for tp in [(EVENTS, 0), (EVENTS, 1)]:
        assert planned[tp] == enabled[tp]
    text = store.cli("retention", "plan", "--now-ms", now)
    assert text.code == 0, text.err
    assert text.out.splitlines()[-2:] == [f"{CHANGELOG}: no retention: {NO_RETENTION}",
                                          f"{SESSIONS}: no retention: {NO_RETENTION}"]

    compacted = store.dirs(*COMPACTED)
    applied = store.cli("retention", "apply", "--plan", str(reviewed), "--json")  # planned with the cleaner on
    assert applied.code == 0, applied.err
    marked = {(a["topic"], a["partition"]): a["segments"] for a in json.loads(applied.out)["applied"]}
    assert marked == {(EVENTS, 0): [0, 20, 40, 60, 80], (EVENTS, 1): [0, 20, 40, 60, 80], (SESSIONS, 0): []}
    applied = store.cli("retention", "apply", "--json", "--now-ms", now)
    assert json.loads(applied.out)["applied"] == []  # events' segments are already marked
    assert store.dirs(*COMPACTED) == compacted


def test_status_names_the_key(store: Store) -> None:
    done = store.cli("status", "--json", "--now-ms", str(store.now_ms))
    assert done.code == 0, done.err
    rows = _by_partition(json.loads(done.out)["partitions"])
    for tp in COMPACTED:
        assert rows[tp]["blocked_by"][0] == NO_RETENTION
        assert rows[tp]["blocked_by"][-1] == f"compaction {NO_COMPACTION}"
    assert all(OFF not in b for tp in [(EVENTS, 0), (EVENTS, 1)] for b in rows[tp]["blocked_by"])
    text = store.cli("status", "--now-ms", str(store.now_ms))
    assert f"{SESSIONS}\t0\tcompact,delete\t" in text.out
    assert f"{NO_RETENTION}; compaction {NO_COMPACTION}\n" in text.out


# --- a cycle's steps (what the DAGs' tasks run) ------------------------------------------------------------
def test_a_cycle_neither_compacts_nor_retains_compacted_topics(store: Store) -> None:
    run_dir = store.tmp / "run"
    settings = CycleSettings("kafkalog_cleanup/test", store.now_ms, (str(store.log_dir),), str(store.broker))
    compacted = store.dirs(*COMPACTED)
    scan = steps.scan_partitions(run_dir, settings)
    marks = [steps.mark_shard(run_dir, steps.plan_retention_shard(run_dir, s["path"])["plan"]) for s in scan["shards"]]
    assert sorted(t for m in marks for t in m["topics"]) == [EVENTS]
    selected = steps.select_logs_to_clean(run_dir)
    assert (selected["selected"], selected["checkpoint_resets"], selected["errors"]) == (0, 0, 0)
    summary = report.summarize(run_dir)
    assert summary.compaction.selected == ()
    assert {p: r for p, r in summary.waiting.items() if p != f"{EVENTS}-0" and p != f"{EVENTS}-1"} == {
        f"{t}-{p}": (f"retention {NO_RETENTION}", f"compaction {NO_COMPACTION}") for t, p in COMPACTED}
    assert f"waiting {SESSIONS}-0: retention {NO_RETENTION}; compaction {NO_COMPACTION}" in \
        report.format_report(summary)
    assert store.dirs(*COMPACTED) == compacted

    compact_run = store.tmp / "compact-run"  # the kafkalog_compact DAG's plan_compaction step
    steps.start_cycle(compact_run, settings)
    with pytest.raises(ConfigError) as refused:
        steps.select_logs_to_clean(compact_run, topic=CHANGELOG, partitions=[0])
    assert str(refused.value) == REFUSED
    assert not (compact_run / "compaction-plan.json").exists()


# --- the Spark job, refused (or with nothing to do) before Spark starts ------------------------------------
JOB = REPO / "spark_jobs" / "compact_logs.py"


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("how", ["plan", "topic"])
def test_the_spark_job_refuses_explicit_compaction(store: Store, how: str) -> None:
    plan = store.tmp / "plan.json"
    plan.write_text(store.cli("compact", "--dry-run", "--json", "--now-ms", str(store.now_ms), broker=False).out)
    assert json.loads(plan.read_text())["selected"] != []
    before = tree_digest(store.log_dir)
    report = store.tmp / "report.json"
    which = ["--plan", str(plan)] if how == "plan" else ["--topic", CHANGELOG, "--now-ms", str(store.now_ms)]
    done = _job("--log-dir", str(store.log_dir), "--config-file", str(store.broker), *which, "--report", str(report))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"compact_logs: error: {REFUSED}\n" in done.stderr
    doc = json.loads(report.read_text())
    assert (doc["status"], doc["error"], doc["partitions"]) == ("refused", REFUSED, [])
    assert "spark" not in doc
    assert tree_digest(store.log_dir) == before


def test_the_spark_job_selects_nothing_by_itself(store: Store) -> None:
    before = tree_digest(store.log_dir)
    report = store.tmp / "report.json"
    done = _job("--log-dir", str(store.log_dir), "--config-file", str(store.broker), "--now-ms", str(store.now_ms),
                "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text())
    assert (doc["status"], doc["partitions"], doc["plan"]["targets"]) == ("ok", [], [])
    assert "spark" not in doc
    assert tree_digest(store.log_dir) == before


# --- the Log store page ----------------------------------------------------------------------------------
def test_the_log_store_page_names_the_key(store: Store) -> None:
    opened = LogStore([store.log_dir], BrokerConfig.load(store.broker))
    inventory = build_inventory(opened, store.now_ms, SnapshotMemo(), {})
    rows = _by_partition(inventory.rows)
    assert [r["blocked_by"] for r in inventory.rows] == [r["blocked_by"] for r in status_rows(opened, store.now_ms)]
    assert rows[(SESSIONS, 0)]["blocked_kinds"] == ["cleaner-disabled", "compaction cleaner-disabled"]
    view = log_store_detail.partition_view(opened, SESSIONS, 0, store.now_ms)
    assert view["retention"]["blocked_by"] == [NO_RETENTION] and view["retention"]["deletable_segments"] == 0
    assert not any(s["deletable_now"] for s in view["segments"])
    assert view["row"]["blocked_by"] == [NO_RETENTION, f"compaction {NO_COMPACTION}"]


COMPACT_NOW = r'''
import json, sys
from kafkalog.airflow import ui_plugin as ui
from airflow.api_fastapi.core_api.security import get_user
from fastapi.testclient import TestClient
ui.app.dependency_overrides[get_user] = lambda: None
response = TestClient(ui.app).post(sys.argv[2], json={})
print("RESULT " + json.dumps([response.status_code, response.json()]))
'''


@pytest.mark.airflow
def test_compact_now_is_refused_naming_the_key(store: Store) -> None:
    env = airflow_env(store.tmp / "airflow", KAFKALOG_LOG_DIRS=str(store.log_dir), KAFKALOG_CONFIG=str(store.broker),
                      KAFKALOG_UI_AIRFLOW_URL="http://127.0.0.1:9")  # nothing listens: a trigger would fail
    before = tree_digest(store.log_dir)
    done = subprocess.run([sys.executable, "-c", COMPACT_NOW, "",
                           f"/api/partitions/{CHANGELOG}/0/compact"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=store.tmp)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT "):]) == [409, {"detail": REFUSED}]
    assert tree_digest(store.log_dir) == before
