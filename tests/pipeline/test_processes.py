"""A retention plan or a status made on several processes is what one process makes: the same partitions
in the same order, the same errors, nothing lost or doubled across the split."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.cycle import retention
from kafkalog.log import shares
from kafkalog.log.store import LogStore
from kafkalog.tools.status import status_rows

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


def build_store(log_dir: Path, partitions: int) -> LogStore:
    """Partition p holds p + 1 one-hour segments (retention.ms = 2 h), so each plans differently."""
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("t", partitions, {"retention.ms": str(2 * HOUR_MS)})
    for p in range(partitions):
        with store.writable_log(store.locate("t", p)) as log:
            for hour in range(p + 1):
                log.append_records([(b"k", b"v", (), T0 + hour * HOUR_MS)], now_ms=T0)
                log.roll()
    return store


def test_a_plan_split_across_processes_is_the_plan_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = build_store(tmp_path, 7)
    broken = tmp_path / "t-4" / "00000000000000000002.log"
    broken.unlink()
    os.mkfifo(broken)  # this partition's plan fails: its error must come back from whichever process had it
    locations = store.partitions()
    now_ms = T0 + 5 * HOUR_MS
    one = retention.plan_retention(store, locations, now_ms)
    monkeypatch.setattr(shares, "MIN_PARTITIONS_PER_PROCESS", 2)
    split = retention.plan_retention(store, locations, now_ms, processes=3)
    assert split == one
    assert [(p.partition, len(p.segments)) for p in one.partitions] == \
        [(0, 1), (1, 2), (2, 3), (3, 3), (5, 3), (6, 3)]  # hours 0-2 are over 2 h old at T0 + 5 h
    assert [(e.partition, "not a regular file" in e.error) for e in one.errors] == [(4, True)]
    monkeypatch.setattr(shares, "MIN_PARTITIONS_PER_PROCESS", 4)  # 7 partitions: one process, whatever is asked
    assert retention.plan_retention(store, locations, now_ms, processes=3) == one


def test_marks_split_across_processes_are_the_marks_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each share marks its partitions under their locks and writes its checkpoints and journal at its
    end: the store ends as one process leaves it, the checkpoints holding every share's entries."""
    import shutil

    from kafkalog.maintenance import journal
    from tests.pipeline.helpers import live_files

    one_dir, split_dir = tmp_path / "one", tmp_path / "split"
    build_store(one_dir, 7)
    shutil.copytree(one_dir, split_dir)
    now_ms = T0 + 5 * HOUR_MS

    def apply(log_dir: Path, processes: int) -> list[tuple[object, ...]]:
        store = LogStore([log_dir])
        plan = retention.plan_retention(store, store.partitions(), now_ms)
        done = retention.apply_retention_plan(store, plan, run_id="r", processes=processes)
        assert done.errors == ()
        return [(a.partition, a.segments, a.log_start_offset_after, a.marked_files) for a in done.applied]

    one = apply(one_dir, 1)
    monkeypatch.setattr(shares, "MIN_PARTITIONS_PER_PROCESS", 2)
    assert apply(split_dir, 3) == one
    assert [(p, len(segments), start) for p, segments, start, _ in one] == \
        [(0, 1, 1), (1, 2, 2), (2, 3, 3), (3, 3, 3), (4, 3, 3), (5, 3, 3), (6, 3, 3)]
    assert live_files(split_dir) == live_files(one_dir)

    def marks(log_dir: Path) -> list[tuple[object, ...]]:
        return sorted((e["partition"], tuple(e["segments"]), tuple(e["files"])) for e in journal.read(log_dir)
                      if e["action"] == "mark-deleted")
    assert marks(split_dir) == marks(one_dir) and len(marks(one_dir)) == 18


def test_a_status_split_across_processes_is_the_status_of_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = build_store(tmp_path, 7)
    broken = tmp_path / "t-4" / "00000000000000000002.log"
    broken.unlink()
    os.mkfifo(broken)
    now_ms = T0 + 5 * HOUR_MS
    one = status_rows(store, now_ms)
    monkeypatch.setattr(shares, "MIN_PARTITIONS_PER_PROCESS", 2)
    split = status_rows(store, now_ms, processes=3)
    assert split == one
    assert [(r["partition"], r["segment_count"], r["deletable_bytes"] > 0, r["quarantined"]) for r in one
            if r["partition"] != 4] == [(0, 2, True, False), (1, 3, True, False), (2, 4, True, False),
                                        (3, 5, True, False), (5, 7, True, False), (6, 8, True, False)]
    assert one[4]["quarantined"] and "not a regular file (a FIFO)" in one[4]["blocked_by"][0]
    done = run_cli("status", "--log-dir", str(tmp_path), "--processes", "3", "--json", "--now-ms", str(now_ms))
    assert done.code == 0, done.err
    assert json.loads(done.out)["partitions"] == json.loads(json.dumps(one))


def test_processes_must_be_a_positive_number(tmp_path: Path) -> None:
    build_store(tmp_path, 1)
    for command in (("retention", "plan"), ("status",)):
        for bad in ("0", "-2", "two"):
            done = run_cli(*command, "--log-dir", str(tmp_path), "--processes", bad, "--json")
            assert done.code == 2 and "--processes" in done.err, (command, done.err)
    done = run_cli("retention", "plan", "--log-dir", str(tmp_path), "--processes", "3", "--json",
                   "--now-ms", str(T0 + 5 * HOUR_MS))
    assert done.code == 0, done.err
    assert [p["partition"] for p in json.loads(done.out)["partitions"]] == [0]
