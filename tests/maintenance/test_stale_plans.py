"""A compaction plan is a request: each round is checked again against the log, under its cleaner lock,
before anything is written (issue #35, item 2). A topic that stopped being compacted, a broker that
runs no cleaner any more, or a range past what is cleanable now (an open transaction, the active
segment) is refused on every path that carries a plan out: ``compact_planned`` (the CLI's, and the
cycle's in-process path) and the Spark job's driver (``cleaning_tasks.plan_round``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

from kafkalog.cycle.compaction import compact_planned
from kafkalog.cycle.documents import CompactionPlanDocument
from kafkalog.errors import CleanerError, ConfigError
from kafkalog.format.batch import Record, build_batch
from kafkalog.log.config import BrokerConfig
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import cleaning_tasks

NOW = 1_700_000_000_000


def _store(tmp_path: Path, *, open_transaction: bool = False) -> tuple[Path, dict[str, object]]:
    """A compacted topic ``cl`` with 400 records over 40 keys in several segments, and its plan."""
    log_dir = tmp_path / "logs"
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "cl", "--config", "cleanup.policy=compact",
                   "--config", "segment.bytes=4096").code == 0
    rows = "".join(f"k{i % 40}:v{i}\n" for i in range(400))
    assert run_cli("produce", "--log-dir", str(log_dir), "--topic", "cl", "--partition", "0", "--key-separator", ":",
                   "--timestamp-ms", str(NOW - 60_000), "--batch-records", "10", stdin=rows).code == 0
    if open_transaction:  # producer 9's transaction stays open: the last stable offset stops at its start
        store = LogStore([log_dir])
        with store.writable_log(store.locate("cl", 0)) as log:
            start = log.log_end_offset
            log.append_batch(build_batch([Record(start, NOW - 1000, b"k1", b"in-txn")], producer_id=9,
                                         producer_epoch=0, base_sequence=0, is_transactional=True,
                                         partition_leader_epoch=0), now_ms=NOW)
            log.roll(now_ms=NOW)
    done = run_cli("compact", "--log-dir", str(log_dir), "--now-ms", str(NOW), "--dry-run", "--json")
    plan = json.loads(done.out)
    assert [(s["topic"], s["partition"]) for s in plan["selected"]] == [("cl", 0)], plan
    return log_dir, plan


def _unchanged(log_dir: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(log_dir).items() if not k.endswith(".lock")}


def test_a_plan_for_a_topic_no_longer_compacted_is_refused_on_every_path(tmp_path: Path) -> None:
    log_dir, plan = _store(tmp_path)
    assert run_cli("topics", "alter", "--log-dir", str(log_dir), "--topic", "cl", "--config",
                   "cleanup.policy=delete").code == 0
    before = _unchanged(log_dir)
    store = LogStore([log_dir])
    done = compact_planned(store, CompactionPlanDocument.from_json(plan), run_id="stale")
    assert done["cleaned"] == []
    [error] = done["errors"]
    assert "cleanup.policy=delete is not compacted any more; the planned round is refused" in error["error"]
    target = plan["selected"][0]  # type: ignore[index]
    location = store.locate("cl", 0)
    with cleaner_lock(location.directory, timeout_s=0), pytest.raises(CleanerError, match="not compacted any more"):
        cleaning_tasks.plan_round(store, location, target["first_dirty_offset"], target["first_uncleanable_offset"],
                                  now_ms=NOW, wall_now_ms=NOW)
    assert _unchanged(log_dir) == before


def test_a_plan_reaching_past_an_open_transaction_is_refused(tmp_path: Path) -> None:
    """A hand-raised range (10^12) would clean past the last stable offset, and so into a transaction
    whose outcome is not known yet."""
    log_dir, plan = _store(tmp_path, open_transaction=True)
    target = plan["selected"][0]  # type: ignore[index]
    assert target["first_uncleanable_offset"] <= 400  # 400 records, then producer 9's open transaction
    target["first_uncleanable_offset"] = 10**12
    before = _unchanged(log_dir)
    done = compact_planned(LogStore([log_dir]), CompactionPlanDocument.from_json(plan), run_id="raised")
    [error] = done["errors"]
    assert error["error"] == (f"cl-0: the planned round [0, {10**12}) reaches past what is cleanable now, offset 400 "
                              "(a transaction open since offset 400 holds the last stable offset there); "
                              "nothing was cleaned")
    assert _unchanged(log_dir) == before


def test_a_plan_is_refused_once_the_broker_runs_no_cleaner(tmp_path: Path) -> None:
    log_dir, plan = _store(tmp_path)
    store = LogStore([log_dir], BrokerConfig.from_properties({"log.cleaner.enable": "false"}))
    location = store.locate("cl", 0)
    target = plan["selected"][0]  # type: ignore[index]
    before = _unchanged(log_dir)
    with cleaner_lock(location.directory, timeout_s=0), pytest.raises(ConfigError, match="log.cleaner.enable=false"):
        cleaning_tasks.plan_round(store, location, target["first_dirty_offset"], target["first_uncleanable_offset"],
                                  now_ms=NOW, wall_now_ms=NOW)
    assert _unchanged(log_dir) == before


def test_a_fresh_plan_still_cleans(tmp_path: Path) -> None:
    log_dir, plan = _store(tmp_path)
    done = compact_planned(LogStore([log_dir]), CompactionPlanDocument.from_json(plan), run_id="fresh",
                           wall_now_ms=NOW)
    assert done["errors"] == [] and [c["partition"] for c in done["cleaned"]] == [0]
