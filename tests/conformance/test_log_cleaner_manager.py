"""Kafka's ``LogCleanerManagerTest`` (core/src/test/scala/unit/kafka/log), scenario by scenario.

Kafka's manager chooses, in memory, the one filthiest compacted log and keeps each partition's
state (in progress, paused, uncleanable) for its cleaner threads. kafkalog's manager is the
compaction plan: ``kafkalog compact --dry-run --json`` ranks every eligible log (``selected``,
filthiest first: Kafka's ``grabFilthiestCompactedLog`` run to exhaustion), says why it leaves the
rest (``not_selected``) and lists the cleaner checkpoints Kafka rewrites while choosing
(``checkpoint_resets``); ``kafkalog compact --json`` carries the plan out. Without ``--topic`` the
manager decides, as Kafka's cleaner thread does; ``cleanableOffsets`` (a pure function in Kafka) is
``kafkalog.policy.compaction.cleanable_range``, run here over snapshots of the files the scenario
wrote.

Where Kafka marks a partition uncleanable after an exception, kafkalog reports the failing
partition in that run's ``errors`` and cleans the others; where Kafka skips a partition another
cleaner thread has in progress, kafkalog finds it under another process's cleaner lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kafka_log import HOUR, T0, ScenarioLog

from kafkalog.format.batch import Record, build_batch
from kafkalog.log import checkpoint, names
from kafkalog.log.local_log import LocalLog
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.snapshot import LogSnapshot, snapshot_for_compaction
from kafkalog.policy.compaction import CleanableRange, cleanable_range

NOW = T0 + HOUR  # the clock of the manager's rounds: any time after the appends
LAG = HOUR  # the compactionLag of Kafka's min.compaction.lag scenarios

# Kafka's createLowRetentionLogConfig (segment.bytes given per test)
LOW_RETENTION: dict[str, str | int | float] = {"cleanup_policy": "compact", "retention_ms": 1,
                                               "min_cleanable_dirty_ratio": 0.05}


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """These scenarios are about what is written, not its durability: skip the fsyncs (slow here)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)

# --- the partitions, as Kafka's test builds them ----------------------------------------------------------


def partitions(log_dir: Path, topic: str, count: int, **configs: str | int | float) -> list[ScenarioLog]:
    base = ScenarioLog(log_dir, topic, partitions=count, **configs)  # type: ignore[arg-type]
    return [base.other_partition(p) for p in range(count)]


def _put_checkpoint(path: Path, key: tuple[str, int], offset: int) -> None:
    entries = checkpoint.read_offset_checkpoint(path)
    entries[key] = offset
    checkpoint.write_offset_checkpoint(path, entries)


def set_log_start_offset(log: ScenarioLog, offset: int) -> None:
    """Kafka's ``maybeIncrementLogStartOffset(offset, ClientRecordDeletion)``: the checkpointed log start
    offset (segments stay until retention removes those wholly below it)."""
    _put_checkpoint(log.log_dir / names.LOG_START_OFFSET_CHECKPOINT, (log.topic, log.partition), offset)


def set_high_watermark(log: ScenarioLog, offset: int) -> None:
    """Kafka's ``updateHighWatermark(offset)``: kafkalog's high watermark is the log end, capped by a
    broker's ``replication-offset-checkpoint``."""
    _put_checkpoint(log.log_dir / names.REPLICATION_OFFSET_CHECKPOINT, (log.topic, log.partition), offset)


def _append(log: ScenarioLog, local: LocalLog, rows: Sequence[tuple[str, str]], timestamp: int | None,
            leader_epoch: int = 0) -> None:
    ts = log.clock_ms if timestamp is None else timestamp
    if timestamp is None:
        log.clock_ms += 1
    base = local.log_end_offset
    records = [Record(base + i, ts, k.encode(), v.encode()) for i, (k, v) in enumerate(rows)]
    local.append_batch(build_batch(records, partition_leader_epoch=leader_epoch), now_ms=ts)


def append_batches(log: ScenarioLog, batches: Sequence[Sequence[tuple[str, str]]], *,
                   timestamp: int | None = None) -> None:
    """Each element a batch of ``(key, value)`` rows at the log end (``appendAsLeader``), in one open."""
    with log.writable() as local:
        for rows in batches:
            _append(log, local, rows, timestamp)


def _kafka_records(local: LocalLog, num_records: int) -> list[tuple[str, str]]:
    start = local.log_end_offset
    return [(f"key-{o}", f"value-{o}") for o in range(start, start + num_records)]


def append_records(log: ScenarioLog, num_records: int) -> None:
    """Kafka's ``appendRecords``: one batch of ``key-N``/``value-N`` records, N their offsets."""
    with log.writable() as local:
        _append(log, local, _kafka_records(local, num_records), None, leader_epoch=1)


def write_records(log: ScenarioLog, num_batches: int, records_per_batch: int, batches_per_segment: int) -> None:
    """Kafka's ``writeRecords``: ``appendRecords`` batches, a roll after batches 0, n, 2n, … and one at
    the end."""
    with log.writable() as local:
        for i in range(num_batches):
            _append(log, local, _kafka_records(local, records_per_batch), None, leader_epoch=1)
            if i % batches_per_segment == 0:
                local.roll(now_ms=log.clock_ms)
        local.roll(now_ms=log.clock_ms)


def increasingly_filthy(log_dir: Path, topic: str, count: int, start_batches: int = 20,
                        increment: int = 5) -> list[ScenarioLog]:
    """Kafka's ``setupIncreasinglyFilthyLogs``: partition i gets ``start + i * increment`` one-record
    batches, five to a segment, in 2048-byte segments of a low-retention compacted topic."""
    logs = partitions(log_dir, topic, count, segment_bytes=2048, **LOW_RETENTION)
    for i, log in enumerate(logs):
        write_records(log, start_batches + i * increment, 1, 5)
    return logs


def fill_segments(log: ScenarioLog, segments: int, *, timestamp: int | None = None) -> None:
    """``while (numberOfSegments < n) appendAsLeader(records(LEO, LEO, ts))``: one-record batches whose
    key and value are their offset."""
    with log.writable() as local:
        while len(local.segments) < segments:
            offset = local.log_end_offset
            ts = log.clock_ms if timestamp is None else timestamp
            batch = build_batch([Record(offset, ts, str(offset).encode(), str(offset).encode())])
            local.append_batch(batch, now_ms=ts)


# --- the surfaces ---------------------------------------------------------------------------------------


def plan(log: ScenarioLog, now_ms: int = NOW, *, ok: bool = True) -> dict[str, Any]:
    """``kafkalog compact --dry-run --json``: the manager's choice over every log of the log dir."""
    result = log.cli("compact", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--dry-run", "--json", ok=ok)
    return json.loads(result.out)


def cleaner_round(log: ScenarioLog, now_ms: int = NOW, *, ok: bool = True) -> dict[str, Any]:
    """``kafkalog compact --json`` without a topic: one round of what the manager chooses."""
    result = log.cli("compact", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--wall-now-ms",
                     str(now_ms), "--json", ok=ok)
    doc = json.loads(result.out)
    doc["exit_code"] = result.code
    return doc


def status(log: ScenarioLog, now_ms: int = NOW) -> list[dict[str, Any]]:
    """``kafkalog status --json``: a row per partition, with its first dirty offset and dirty ratio."""
    out = log.cli("status", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--processes", "1", "--json").out
    return json.loads(out)["partitions"]


def chosen(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return [(s["topic"], s["partition"]) for s in doc["selected"]]


def ranges(doc: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    return {(s["topic"], s["partition"]): (s["first_dirty_offset"], s["first_uncleanable_offset"])
            for s in doc["selected"]}


def reasons(doc: dict[str, Any]) -> dict[tuple[str, int], str]:
    return {(n["topic"], n["partition"]): n["kind"] for n in doc["not_selected"]}


def resets(doc: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(r["topic"], r["partition"], r["offset"]) for r in doc["checkpoint_resets"]]


def cleaned(doc: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return [(c["topic"], c["partition"], c["first_dirty_offset"], c["end_offset"]) for c in doc["cleaned"]]


def failed(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return [(e["topic"], e["partition"]) for e in doc["errors"]]


def snapshot(log: ScenarioLog) -> LogSnapshot:
    """What the manager reads of the partition's files (log start offset, high watermark, last stable
    offset, cleaner checkpoint, each segment's timestamps and size)."""
    return snapshot_for_compaction(log.log_dir, log.topic, log.partition, log.store.log_config(log.topic))


def cleanable_offsets(log: ScenarioLog, now_ms: int) -> CleanableRange:
    """Kafka's ``LogCleanerManager.cleanableOffsets(log, checkpoint, now)`` over the files."""
    return cleanable_range(snapshot(log), now_ms)


def segment_files(log: ScenarioLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.glob("*.log"))}


def corrupt_record(log: ScenarioLog, segment: int) -> None:
    """Flip a byte inside the last record of a segment: its batch no longer matches its CRC, which the
    cleaner checks, so cleaning this partition fails (Kafka marks such a partition uncleanable)."""
    path = names.log_file(log.directory, segment)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))


@contextmanager
def cleaning_elsewhere(log: ScenarioLog) -> Iterator[None]:
    """Another cleaner (a process, where Kafka has a thread) is cleaning the partition: it holds the
    partition's cleaner lock (Kafka's ``LogCleaningInProgress``)."""
    with cleaner_lock(log.directory, timeout_s=0):
        yield


WELL = "wishing-well"


# --- grabFilthiestCompactedLog --------------------------------------------------------------------------


def _broken_first_batch_log(tmp_path: Path, size: int) -> ScenarioLog:
    """Kafka's scenario: partition A-1, 4 batches of 10 records, 2 batches a segment, cleaner
    checkpoint 1; the first batch of the dirty segment 10 then declares ``size`` bytes, below the 14 of
    the smallest record, so reading the segment's first batch timestamp fails (where Kafka's test has
    ``getFirstBatchTimestampForSegments`` throw)."""
    single_record = len(build_batch([Record(0, T0, None, b"test")]))
    log = partitions(tmp_path, "A", 2, segment_bytes=single_record * 10, **LOW_RETENTION)[1]
    write_records(log, 4, 10, 2)
    assert log.segment_bases() == [0, 10, 30, 40]
    log.set_first_dirty(1)
    path = names.log_file(log.directory, 10)
    data = bytearray(path.read_bytes())
    data[8:12] = size.to_bytes(4, "big")  # the first batch's length field
    path.write_bytes(bytes(data))
    return log


def test_grab_filthiest_compacted_log_throws_exception(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogThrowsException: a failure while taking the
    filthiest log surfaces as an error naming that log, and the log is left as it was."""
    log = _broken_first_batch_log(tmp_path, 13)
    before = segment_files(log)
    doc = plan(log, ok=False)
    assert failed(doc) == [("A", 1)] and chosen(doc) == []
    doc = cleaner_round(log, ok=False)
    assert doc["exit_code"] == 1
    assert failed(doc) == [("A", 1)]
    assert "smaller than the minimum record overhead" in doc["errors"][0]["error"]
    assert doc["cleaned"] == []
    assert log.cleaner_checkpoint() == 1
    assert segment_files(log) == before


def test_grab_filthiest_compacted_log_throws_exception_tiny_batch_size(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogThrowsException, with a first batch that
    declares 5 bytes: Kafka's FileLogInputStream throws there too, so the choice fails naming the log."""
    log = _broken_first_batch_log(tmp_path, 5)
    doc = plan(log, ok=False)
    assert failed(doc) == [("A", 1)]
    assert chosen(doc) == []


def test_grab_filthiest_compacted_log_returns_log_with_dirtiest_ratio(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogReturnsLogWithDirtiestRatio."""
    logs = increasingly_filthy(tmp_path, WELL, 3)
    for log in logs:
        log.set_first_dirty(20)
    doc = plan(logs[0])
    # cleanable ranges [20, 20], [20, 25], [20, 30]: partition 2 first, then 1; 0 has nothing dirty
    assert chosen(doc)[0] == (WELL, 2)
    assert chosen(doc) == [(WELL, 2), (WELL, 1)]
    assert ranges(doc) == {(WELL, 2): (20, 30), (WELL, 1): (20, 25)}
    assert reasons(doc) == {(WELL, 0): "nothing-to-clean"}
    assert [d["dirty_ratio"] for d in doc["selected"]] == sorted((d["dirty_ratio"] for d in doc["selected"]),
                                                               reverse=True)


def test_grab_filthiest_compacted_log_ignores_uncleanable_partitions(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogIgnoresUncleanablePartitions: the partition
    that cannot be cleaned (a corrupt batch in its dirty range) is passed over and the next filthiest
    is cleaned."""
    logs = increasingly_filthy(tmp_path, WELL, 3)
    for log in logs:
        log.set_first_dirty(20)
    corrupt_record(logs[2], 21)
    before = segment_files(logs[2])
    doc = cleaner_round(logs[0], ok=False)
    assert cleaned(doc) == [(WELL, 1, 20, 25)]
    assert failed(doc) == [(WELL, 2)]
    assert [log.cleaner_checkpoint() for log in logs] == [20, 25, 20]
    assert segment_files(logs[2]) == before


def test_grab_filthiest_compacted_log_ignores_in_progress_partitions(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogIgnoresInProgressPartitions: the partition
    another cleaner is cleaning is left to it and the next filthiest is cleaned."""
    logs = increasingly_filthy(tmp_path, WELL, 3)
    for log in logs:
        log.set_first_dirty(20)
    before = segment_files(logs[2])
    with cleaning_elsewhere(logs[2]):
        doc = cleaner_round(logs[0], ok=False)
    assert cleaned(doc) == [(WELL, 1, 20, 25)]
    assert [log.cleaner_checkpoint() for log in logs] == [20, 25, 20]
    assert segment_files(logs[2]) == before


def test_grab_filthiest_compacted_log_ignores_both_in_progress_partitions_and_uncleanable_partitions(
        tmp_path: Path) -> None:
    """LogCleanerManagerTest.testGrabFilthiestCompactedLogIgnoresBothInProgressPartitionsAndUncleanablePartitions:
    with the filthiest in progress elsewhere and the next uncleanable, nothing is cleaned (the third
    has nothing dirty)."""
    logs = increasingly_filthy(tmp_path, WELL, 3)
    for log in logs:
        log.set_first_dirty(20)
    corrupt_record(logs[1], 21)
    before = [segment_files(log) for log in logs]
    with cleaning_elsewhere(logs[2]):
        doc = cleaner_round(logs[0], ok=False)
    assert doc["cleaned"] == []
    assert [log.cleaner_checkpoint() for log in logs] == [20, 20, 20]
    assert [segment_files(log) for log in logs] == before


def test_dirty_offset_reset_if_larger_than_end_offset(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testDirtyOffsetResetIfLargerThanEndOffset: a checkpoint past the log end
    restarts cleaning at the log start offset (0)."""
    [log] = increasingly_filthy(tmp_path, "foo", 1)
    log.set_first_dirty(200)
    doc = plan(log)
    assert chosen(doc) == [("foo", 0)]
    assert doc["selected"][0]["first_dirty_offset"] == 0
    assert resets(doc) == [("foo", 0, 0)]


def test_dirty_offset_reset_if_smaller_than_start_offset(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testDirtyOffsetResetIfSmallerThanStartOffset: a checkpoint below the log
    start offset restarts cleaning there (10)."""
    [log] = increasingly_filthy(tmp_path, "foo", 1)
    set_log_start_offset(log, 10)
    log.set_first_dirty(0)
    doc = plan(log)
    assert chosen(doc) == [("foo", 0)]
    assert doc["selected"][0]["first_dirty_offset"] == 10
    assert resets(doc) == [("foo", 0, 10)]


def test_log_start_offset_larger_than_active_segment_base_offset(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogStartOffsetLargerThanActiveSegmentBaseOffset: a log that is all
    active segment is not filthy, wherever its log start offset."""
    [log] = partitions(tmp_path, "foo", 1, segment_bytes=2048, **LOW_RETENTION)
    for _ in range(3):
        append_records(log, 3)
    assert log.segment_bases() == [0]
    set_log_start_offset(log, 2)
    log.set_first_dirty(0)
    doc = plan(log)
    assert chosen(doc) == []
    assert reasons(doc) == {("foo", 0): "active-segment"}


def test_dirty_offset_larger_than_active_segment_base_offset(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testDirtyOffsetLargerThanActiveSegmentBaseOffset: a checkpoint inside the
    active segment (after an unclean leader election) leaves nothing cleanable."""
    [log] = partitions(tmp_path, "foo", 1, segment_bytes=2048, **LOW_RETENTION)
    append_records(log, 3)
    append_records(log, 3)
    assert log.segment_bases() == [0]
    log.set_first_dirty(3)
    doc = plan(log)
    assert chosen(doc) == []
    assert reasons(doc) == {("foo", 0): "active-segment"}
    assert resets(doc) == []  # 3 is within the log: a valid checkpoint


# --- deletableLogs: retention of compacted logs -----------------------------------------------------------
# Kafka's cleaner runs retention for the compacted logs (``deletableLogs``) and its LogManager for the
# others. kafkalog has one retention path for every log, ``kafkalog retention``; these scenarios check
# that each policy gets the retention Kafka gives it, and that the cleaner leaves non-compacted logs out.

def retention_plan(log: ScenarioLog, now_ms: int = NOW) -> dict[str, Any]:
    result = log.cli("retention", "plan", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--json", ok=False)
    return json.loads(result.out)


def single_record_segments(log_dir: Path, policy: str, records: int) -> ScenarioLog:
    """Kafka's ``createLog(singletonRecords("test", key = "test").sizeInBytes * 5, policy)`` with
    ``records`` such records appended: five to a segment."""
    size = len(build_batch([Record(0, T0, b"test", b"test")]))
    [log] = partitions(log_dir, "log", 1, segment_bytes=size * 5,
                       **{**LOW_RETENTION, "cleanup_policy": policy})
    with log.writable() as local:
        for _ in range(records):
            offset = local.log_end_offset
            local.append_batch(build_batch([Record(offset, T0, b"test", b"test")]), now_ms=T0)
    return log


def test_logs_with_segments_to_delete_should_not_consider_cleanup_policy_delete_logs(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogsWithSegmentsToDeleteShouldNotConsiderCleanupPolicyDeleteLogs: the
    cleaner leaves a ``delete`` log alone (its retention is the log manager's)."""
    log = single_record_segments(tmp_path, "delete", 12)
    doc = plan(log)
    assert chosen(doc) == [] and reasons(doc) == {("log", 0): "policy"}
    refused = log.cli("compact", "--log-dir", str(tmp_path), "--topic", "log", "--now-ms", str(NOW), ok=False)
    assert refused.code == 1 and "only a compacted topic" in refused.err
    # Its retention is the time- and size-based one of a delete log (retention.ms=1).
    [planned] = retention_plan(log)["partitions"]
    assert [(s["base_offset"], s["reason"]) for s in planned["segments"]] == \
        [(0, "retention.ms"), (5, "retention.ms"), (10, "retention.ms")]


def test_logs_with_segments_to_delete_should_consider_cleanup_policy_compact_delete_logs(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogsWithSegmentsToDeleteShouldConsiderCleanupPolicyCompactDeleteLogs:
    a ``compact,delete`` log gets retention, time-based included (retention.ms=1)."""
    log = single_record_segments(tmp_path, "compact,delete", 12)
    doc = retention_plan(log)
    assert doc["errors"] == []
    [planned] = doc["partitions"]
    assert (planned["topic"], planned["partition"]) == ("log", 0)
    assert [(s["base_offset"], s["reason"]) for s in planned["segments"]] == \
        [(0, "retention.ms"), (5, "retention.ms"), (10, "retention.ms")]
    assert planned["roll_first"] is True


def test_logs_with_segments_to_delete_should_consider_cleanup_policy_compact_logs(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogsWithSegmentsToDeleteShouldConsiderCleanupPolicyCompactLogs: a
    ``compact`` log gets retention too, for the segments before its log start offset only."""
    log = single_record_segments(tmp_path, "compact", 12)
    set_log_start_offset(log, 7)
    doc = retention_plan(log)
    assert doc["errors"] == []
    [planned] = doc["partitions"]
    assert [(s["base_offset"], s["reason"]) for s in planned["segments"]] == [(0, "log-start-offset")]
    assert planned["log_start_offset_after"] == 7
    assert any(b.startswith("policy:") for b in planned["blocked_by"])  # retention.ms=1 does not apply


def test_logs_under_cleanup_ineligible_for_compaction(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogsUnderCleanupIneligibleForCompaction: a log switched from ``delete``
    to ``compact`` becomes a candidate for the cleaner, and stops being one when switched back."""
    log = single_record_segments(tmp_path, "delete", 1)
    log.roll()
    with log.writable() as local:
        local.append_batch(build_batch([Record(1, T0, b"test", b"test")]), now_ms=T0)
    assert reasons(plan(log)) == {("log", 0): "policy"}
    log.cli("topics", "alter", "--log-dir", str(tmp_path), "--topic", "log", "--config", "cleanup.policy=compact",
            "--config", "min.cleanable.dirty.ratio=0")
    doc = plan(log)
    assert chosen(doc) == [("log", 0)] and ranges(doc) == {("log", 0): (0, 1)}
    log.cli("topics", "alter", "--log-dir", str(tmp_path), "--topic", "log", "--config", "cleanup.policy=delete")
    doc = plan(log)
    assert chosen(doc) == [] and reasons(doc) == {("log", 0): "policy"}


# --- the cleaner checkpoint file ---------------------------------------------------------------------------

def test_update_checkpoints_should_add_offset_to_partition(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testUpdateCheckpointsShouldAddOffsetToPartition: a round records its end
    offset (999) for its partition in the log dir's cleaner-offset-checkpoint, other entries kept."""
    log, other = partitions(tmp_path, "log", 2, segment_bytes=4096, **LOW_RETENTION)
    append_batches(log, [[(str(o % 7), str(o)) for o in range(b * 9, b * 9 + 9)] for b in range(111)])
    log.roll()
    assert log.active_base() == 999
    other.set_first_dirty(5)  # another partition's entry (its log is empty: a reset to 0 is due)
    assert log.cleaner_checkpoint() is None
    log.compact(NOW)
    assert log.cleaner_checkpoint() == 999
    assert checkpoint.read_offset_checkpoint(tmp_path / names.CLEANER_OFFSET_CHECKPOINT) == \
        {("log", 0): 999, ("log", 1): 0}


def test_update_checkpoints_should_remove_partition_data(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testUpdateCheckpointsShouldRemovePartitionData: deleting a partition
    removes its entry from the cleaner-offset-checkpoint (Kafka's ``asyncDelete``)."""
    [log] = partitions(tmp_path, "log", 1, segment_bytes=1024, **LOW_RETENTION)
    [keep] = partitions(tmp_path, "kept", 1, segment_bytes=1024, **LOW_RETENTION)
    fill_segments(log, 3)
    log.compact(NOW)
    keep.set_first_dirty(0)
    assert log.cleaner_checkpoint() == log.active_base()
    log.cli("topics", "delete", "--log-dir", str(tmp_path), "--topic", "log")
    assert checkpoint.read_offset_checkpoint(tmp_path / names.CLEANER_OFFSET_CHECKPOINT) == {("kept", 0): 0}


def test_logs_with_segments_to_delete_should_not_consider_uncleanable_partitions(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testLogsWithSegmentsToDeleteShouldNotConsiderUncleanablePartitions: a
    compacted partition kafkalog cannot read (a segment that is not a regular file) is left out of
    retention as of cleaning, and reported."""
    log = single_record_segments(tmp_path, "compact", 12)
    set_log_start_offset(log, 7)
    segment = names.log_file(log.directory, 5)
    moved = tmp_path / "elsewhere.log"
    segment.rename(moved)
    os.symlink(moved, segment)
    doc = retention_plan(log)
    assert doc["partitions"] == [] and failed(doc) == [("log", 0)]
    doc = plan(log, ok=False)
    assert chosen(doc) == [] and failed(doc) == [("log", 0)]


# --- cleanableOffsets ---------------------------------------------------------------------------------------

def kafka_log(log_dir: Path, **overrides: str | int | float) -> ScenarioLog:
    """Kafka's ``makeLog`` with this test's ``logConfig`` (1024-byte segments and index, compact)."""
    configs: dict[str, str | int | float] = {"segment_bytes": 1024, "segment_index_bytes": 1024,
                                             "cleanup_policy": "compact", **overrides}
    return partitions(log_dir, "log", 1, **configs)[0]


def segment_holding(log: ScenarioLog, offset: int) -> int:
    return max(b for b in log.segment_bases() if b <= offset)


def test_cleanable_offsets_for_none(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCleanableOffsetsForNone: with no transactions the last stable offset
    is the high watermark (50), which bounds the cleanable range."""
    log = kafka_log(tmp_path)
    fill_segments(log, 8)
    set_high_watermark(log, 50)
    view = snapshot(log)
    assert view.high_watermark == view.last_stable_offset == 50
    offsets = cleanable_offsets(log, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, 50)
    assert offsets.limited_by == "high-watermark"
    # The round itself stops at the segment holding offset 50 (LogToClean's segment-aligned bound).
    doc = plan(log)
    assert ranges(doc) == {("log", 0): (0, segment_holding(log, 50))}


def test_cleanable_offsets_active_segment(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCleanableOffsetsActiveSegment: with the high watermark at the log end
    the active segment bounds the cleanable range."""
    log = kafka_log(tmp_path)
    fill_segments(log, 8)
    offsets = cleanable_offsets(log, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, log.active_base())
    assert offsets.limited_by == "active-segment"
    assert ranges(plan(log)) == {("log", 0): (0, log.active_base())}


def test_cleanable_offsets_for_time(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCleanableOffsetsForTime: segments with records newer than
    min.compaction.lag.ms are not cleanable; the first is the one active when the lag started."""
    log = kafka_log(tmp_path, min_compaction_lag_ms=LAG)
    t0 = T0
    fill_segments(log, 4, timestamp=t0)
    active_at_t0 = log.active_base()
    t1 = t0 + LAG + 1
    fill_segments(log, 8, timestamp=t1)
    offsets = cleanable_offsets(log, t1)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, active_at_t0)
    assert offsets.limited_by == "min-compaction-lag"
    assert ranges(plan(log, t1)) == {("log", 0): (0, active_at_t0)}


def test_cleanable_offsets_for_short_time(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCleanableOffsetsForShortTime: once every record is older than
    min.compaction.lag.ms only the active segment bounds the range."""
    log = kafka_log(tmp_path, min_compaction_lag_ms=LAG)
    t0 = T0
    fill_segments(log, 8, timestamp=t0)
    now = t0 + LAG + 1
    offsets = cleanable_offsets(log, now)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, log.active_base())
    assert ranges(plan(log, now)) == {("log", 0): (0, log.active_base())}


def test_cleanable_offsets_needs_checkpoint_reset(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCleanableOffsetsNeedsCheckpointReset: a checkpoint inside the log is
    kept; one below the log start offset or past the log end must be rewritten."""
    [log] = increasingly_filthy(tmp_path, "foo", 1)
    set_log_start_offset(log, 10)
    log.set_first_dirty(15)
    assert cleanable_offsets(log, NOW).checkpoint_reset is False
    assert resets(plan(log)) == []
    set_log_start_offset(log, 20)
    assert cleanable_offsets(log, NOW).checkpoint_reset is True
    assert resets(plan(log)) == [("foo", 0, 20)]
    log.set_first_dirty(25)
    assert cleanable_offsets(log, NOW).checkpoint_reset is True
    assert resets(plan(log)) == [("foo", 0, 20)]


def test_undecided_transactional_data_not_cleanable(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testUndecidedTransactionalDataNotCleanable: an open transaction holds the
    range at its first offset whatever the lag; once aborted, its segment is cleanable at once and
    the marker's segment after min.compaction.lag.ms."""
    log = kafka_log(tmp_path, min_compaction_lag_ms=LAG)
    t = T0
    log.txn(15, [("1", "a"), ("2", "b")], sequence=0, timestamp=t)
    log.txn(15, [("3", "c")], sequence=2, timestamp=t)
    log.roll()
    now = t + LAG + 1
    offsets = cleanable_offsets(log, now)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, 0)
    assert offsets.limited_by == "open-transaction"
    assert chosen(plan(log, now)) == []
    log.abort(15, coordinator_epoch=15, timestamp=now)
    log.roll()
    offsets = cleanable_offsets(log, now)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, 3)
    assert ranges(plan(log, now)) == {("log", 0): (0, 3)}
    later = now + LAG + 1
    offsets = cleanable_offsets(log, later)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_offset) == (0, 4)
    assert ranges(plan(log, later)) == {("log", 0): (0, 4)}


def test_done_cleaning(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testDoneCleaning: a finished round writes its end offset as the
    partition's checkpoint, where the next round starts."""
    log = kafka_log(tmp_path)
    fill_segments(log, 8)
    assert log.cleaner_checkpoint() is None
    doc = cleaner_round(log)
    end = log.active_base()
    assert cleaned(doc) == [("log", 0, 0, end)]
    assert log.cleaner_checkpoint() == end
    doc = plan(log)
    assert chosen(doc) == [] and reasons(doc) == {("log", 0): "active-segment"}  # only its records are dirty
    [row] = status(log)
    assert (row["first_dirty_offset"], row["cleanable_bytes"]) == (end, 0)


def test_checkpoint_updated_for_invalid_offset_no_cleaning(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCheckpointUpdatedForInvalidOffsetNoCleaning: a checkpoint below the
    log start offset is rewritten (to 20) even though the log is not cleaned."""
    [log] = increasingly_filthy(tmp_path, "foo", 1)
    set_log_start_offset(log, 20)
    log.set_first_dirty(15)
    doc = cleaner_round(log)
    assert doc["cleaned"] == [] and chosen(doc) == []
    assert log.cleaner_checkpoint() == 20


def test_checkpoint_updated_for_invalid_offset_not_selected(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testCheckpointUpdatedForInvalidOffsetNotSelected: the dirtier log is
    chosen first, and the other log's invalid checkpoint is rewritten (to 15) all the same."""
    logs = increasingly_filthy(tmp_path, "foo", 2)
    set_log_start_offset(logs[0], 15)
    logs[0].set_first_dirty(10)
    logs[1].set_first_dirty(5)
    doc = plan(logs[0])
    assert chosen(doc)[0] == ("foo", 1)
    assert resets(doc) == [("foo", 0, 15)]
