"""Kafka's ``UnifiedLogTest`` (core/src/test/scala/unit/kafka/log), part 1: retention and deletion.

``deleteOldSegments()`` is ``kafkalog retention apply --now-ms NOW`` (its mock clock is ``--now-ms``),
the scheduled file deletion is ``kafkalog retention sweep`` once ``file.delete.delay.ms`` has passed on
the wall clock (the ``.deleted`` files' mark time is moved back instead of sleeping). A high watermark
is a broker's ``replication-offset-checkpoint`` entry; without one kafkalog's high watermark is the log
end offset (everything it wrote is durable), which is what Kafka's tests set with
``updateHighWatermark(log.logEndOffset)``. ``maybeIncrementLogStartOffset`` is the partition's entry in
``log-start-offset-checkpoint``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_log import T0, ScenarioLog
from log_port_helpers import (
    SINGLETON_BYTES,
    age_deleted_files,
    append_singletons,
    consume,
    files,
    kbatch,
    leader_epochs,
    producers,
    retention,
    set_high_watermark,
    set_log_start_offset,
    snapshot_offsets,
    status,
    sweep,
)

from kafkalog.log import names


def _five_per_segment(tmp_path: Path, *, keyed: bool = False, **configs: str | int) -> ScenarioLog:
    """``segmentBytes = singletonRecords.sizeInBytes * 5``: five one-record batches a segment (of a
    record keyed ``test`` with ``keyed``)."""
    size = len(kbatch(0, b"test", b"test")) if keyed else SINGLETON_BYTES
    return ScenarioLog(tmp_path, segment_bytes=size * 5, **configs)


def _remaining_last_offsets(log: ScenarioLog) -> dict[int, int]:
    """Each live segment's last record offset (segments holding no batch are left out)."""
    out: dict[int, int] = {}
    for batch in log.batches():
        out[batch.segment] = batch.last_offset
    return out


# --- size, time and log-start-offset retention (spec §10.2) -----------------------------------------------
def test_should_delete_size_based_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldDeleteSizeBasedSegments: 3 segments of 5 records, retention.bytes of 10
    records' size: the oldest segment goes, 2 remain."""
    log = _five_per_segment(tmp_path, retention_bytes=SINGLETON_BYTES * 10)
    append_singletons(log, 15)
    assert log.segment_bases() == [0, 5, 10]
    plan = retention(log, T0)
    assert [s["base_offset"] for s in plan["segments"]] == [0]
    assert [s["reason"] for s in plan["segments"]] == ["retention.bytes"]
    assert log.segment_bases() == [5, 10]


def test_should_not_delete_size_based_segments_when_under_retention_size(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldNotDeleteSizeBasedSegmentsWhenUnderRetentionSize: retention.bytes of 15
    records' size is not exceeded by 15 records: 3 segments remain."""
    log = _five_per_segment(tmp_path, retention_bytes=SINGLETON_BYTES * 15)
    append_singletons(log, 15)
    plan = retention(log, T0)
    assert plan["applied"] == []
    assert log.segment_bases() == [0, 5, 10]
    assert any(b.startswith("retention.bytes: deleting segment 0") for b in plan["blocked_by"])


def test_should_delete_time_based_segments_ready_to_be_deleted(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldDeleteTimeBasedSegmentsReadyToBeDeleted: every record stamped 10 and
    retention.ms=10000: every segment expires, the log is rolled first and 1 (empty) segment remains."""
    log = _five_per_segment(tmp_path, retention_ms=10_000)
    append_singletons(log, 15, ts=10)
    plan = retention(log, T0)
    assert plan["roll_first"] is True
    assert plan["applied"] == [0, 5, 10]
    assert log.segment_bases() == [15]
    assert names.log_file(log.directory, 15).stat().st_size == 0
    assert status(log, T0)["log_start_offset"] == 15


def test_should_not_delete_time_based_segments_when_none_ready_to_be_deleted(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldNotDeleteTimeBasedSegmentsWhenNoneReadyToBeDeleted: records stamped now,
    retention.ms=10000000: nothing expires, 3 segments remain."""
    log = _five_per_segment(tmp_path, retention_ms=10_000_000)
    append_singletons(log, 15, ts=T0)
    assert retention(log, T0)["applied"] == []
    assert log.segment_bases() == [0, 5, 10]
    # Strictly older than retention.ms: at exactly retention.ms nothing goes, one ms later all do.
    assert retention(log, T0 + 10_000_000)["applied"] == []
    assert retention(log, T0 + 10_000_001)["applied"] == [0, 5, 10]


def test_should_not_delete_segments_when_policy_does_not_include_delete(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldNotDeleteSegmentsWhenPolicyDoesNotIncludeDelete: cleanup.policy=compact
    with every segment past retention.ms: nothing is deleted."""
    log = _five_per_segment(tmp_path, keyed=True, retention_ms=10_000, cleanup_policy="compact")
    append_singletons(log, 15, ts=10, key=b"test")
    plan = retention(log, T0)
    assert plan["applied"] == [] and log.segment_bases() == [0, 5, 10]
    assert any(b.startswith("policy:") for b in plan["blocked_by"])


def test_should_delete_segments_ready_to_be_deleted_when_cleanup_policy_is_compact_and_delete(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldDeleteSegmentsReadyToBeDeletedWhenCleanupPolicyIsCompactAndDelete:
    cleanup.policy=compact,delete honours retention.ms: 1 segment remains."""
    log = _five_per_segment(tmp_path, keyed=True, retention_ms=10_000, cleanup_policy="compact,delete")
    append_singletons(log, 15, ts=10, key=b"test")
    assert retention(log, T0)["applied"] == [0, 5, 10]
    assert log.segment_bases() == [15]


def test_should_delete_start_offset_breached_segments_when_policy_does_not_include_delete(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete: a compact
    topic still loses the segment wholly below the log start offset (5): 2 remain, the first one holds
    the log start offset and the rest lie past it."""
    log = _five_per_segment(tmp_path, keyed=True, retention_ms=10_000, cleanup_policy="compact")
    append_singletons(log, 15, ts=10, key=b"test")
    assert log.segment_bases() == [0, 5, 10]
    set_log_start_offset(log, 5)
    plan = retention(log, T0)
    assert [(s["base_offset"], s["reason"]) for s in plan["segments"]] == [(0, "log-start-offset")]
    bases = log.segment_bases()
    assert len(bases) == 2
    start = status(log, T0)["log_start_offset"]
    assert start == 5 and bases[0] <= start and all(b > start for b in bases[1:])


def test_log_deletion_after_delete_records(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogDeletionAfterDeleteRecords: log start offset 1, 6, 15 leave 3, 2, 1
    segments; the log start offset is what was asked."""
    log = _five_per_segment(tmp_path)
    append_singletons(log, 15)
    assert log.segment_bases() == [0, 5, 10] and status(log, T0)["log_start_offset"] == 0
    for start, segments in ((1, 3), (6, 2), (15, 1)):
        set_log_start_offset(log, start)
        retention(log, T0)
        assert len(log.segment_bases()) == segments, start
        assert status(log, T0)["log_start_offset"] == start
    assert log.segment_bases() == [10]  # the last segment has no successor: a log start breach never takes it


def test_retention_idempotency(tmp_path: Path) -> None:
    """UnifiedLogTest.testRetentionIdempotency: a log-start-offset breach (1) unblocks time retention
    behind it: 2 segments go in one call, and a second call deletes nothing."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, retention_bytes=-1, retention_ms=900, file_delete_delay_ms=0)
    log.append([(None, "a")], timestamp=T0 + 100)
    log.roll()
    log.append([(None, "b")], timestamp=T0)
    log.roll()
    log.append([(None, "c")], timestamp=T0 + 100)
    set_log_start_offset(log, 1)
    first = retention(log, T0 + 901)
    assert first["applied"] == [0, 1]
    assert [s["reason"] for s in first["segments"]] == ["log-start-offset", "retention.ms"]
    assert retention(log, T0 + 901)["applied"] == []
    assert log.segment_bases() == [2]


def test_that_garbage_collecting_segments_doesnt_change_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testThatGarbageCollectingSegmentsDoesntChangeOffset: with retention.ms=0 and 0, 1
    or 25 expired records, retention keeps the log end offset and one segment, a second pass deletes
    nothing, and the next append gets the log end offset."""
    for count in (0, 1, 25):
        log = ScenarioLog(tmp_path / str(count), segment_bytes=100, retention_ms=0)
        append_singletons(log, count, value=b"x", ts=T0 - 10)
        retention(log, T0)
        assert status(log, T0)["log_end_offset"] == count
        assert len(log.segment_bases()) == 1
        assert retention(log, T0)["applied"] == []
        assert status(log, T0)["log_end_offset"] == count
        assert log.append([(None, "hello")], timestamp=T0) == (count, count)


def test_async_delete(tmp_path: Path) -> None:
    """UnifiedLogTest.testAsyncDelete: deleted segments' .log and .index are renamed *.deleted and kept;
    once file.delete.delay.ms (1000) has passed they are gone. kafkalog: the delayed delete is
    ``retention sweep``, which deletes nothing before the delay."""
    log = _five_per_segment(tmp_path, segment_index_bytes=1000, index_interval_bytes=10_000, retention_ms=999,
                            file_delete_delay_ms=1000)
    append_singletons(log, 100, ts=T0 - 1000)
    old = log.segment_bases()
    assert len(old) == 20
    retention(log, T0)
    assert len(log.segment_bases()) == 1
    deleted = [names.log_file(log.directory, b, names.DELETED_SUFFIX) for b in old] + \
        [names.index_file(log.directory, b, names.DELETED_SUFFIX) for b in old]
    assert all(p.exists() for p in deleted)
    assert not any(names.log_file(log.directory, b).exists() or names.index_file(log.directory, b).exists()
                   for b in old)
    assert sweep(log)["deleted_files"] == 0
    assert all(p.exists() for p in deleted)
    age_deleted_files(log, 1001)
    sweep(log)
    assert not any(p.exists() for p in deleted)
    assert files(log, names.DELETED_SUFFIX) == []


# --- the high watermark bounds retention ----------------------------------------------------------------
def test_delete_old_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeleteOldSegments: with the high watermark at 0 nothing is deleted; with it at
    25..30 only segments wholly below it go; at the log end all do and 1 segment remains. (Kafka's
    fresh log has HW 0; kafkalog's defaults to its log end, so HW 0 is set in the checkpoint. The
    leader-epoch part, epochs assigned by a controller, is not applicable.)"""
    log = _five_per_segment(tmp_path, segment_index_bytes=1000, retention_ms=999)
    append_singletons(log, 100, ts=T0 - 1000)
    segments = log.segment_bases()
    set_high_watermark(log, 0)
    retention(log, T0)
    assert log.segment_bases() == segments
    assert status(log, T0)["log_start_offset"] == 0
    for hw in range(25, 31):
        set_high_watermark(log, hw)
        retention(log, T0)
        start = status(log, T0)["log_start_offset"]
        assert start <= hw
        assert start == hw - hw % 5
        assert all(last >= hw for last in _remaining_last_offsets(log).values())
    set_high_watermark(log, 100)
    retention(log, T0)
    assert log.segment_bases() == [100]


def test_segment_deletion_with_high_watermark_initialization(tmp_path: Path) -> None:
    """UnifiedLogTest.testSegmentDeletionWithHighWatermarkInitialization: HW 25 lets expired segments
    below it go (fewer segments) and the log start offset stays at or below 25."""
    log = ScenarioLog(tmp_path, segment_bytes=512, segment_index_bytes=1000, retention_ms=999)
    with log.writable() as local:
        for i in range(100):
            local.append_batch(kbatch(local.log_end_offset, f"test{i}".encode(), ts=T0 - 1000), now_ms=T0)
    before = len(log.segment_bases())
    set_high_watermark(log, 25)
    retention(log, T0)
    assert len(log.segment_bases()) < before
    start = status(log, T0)["log_start_offset"]
    assert 0 < start <= 25


def test_cannot_delete_segments_at_or_above_high_watermark(tmp_path: Path) -> None:
    """UnifiedLogTest.testCannotDeleteSegmentsAtOrAboveHighWatermark: for every HW from 0 to 100, the
    first remaining segment starts at or below it (and at or past the log start offset), every other
    one past it; at HW 100 the log start offset is 100 and one empty segment remains."""
    log = ScenarioLog(tmp_path, segment_bytes=512, segment_index_bytes=1000, retention_ms=999)
    with log.writable() as local:
        for i in range(100):
            local.append_batch(kbatch(local.log_end_offset, f"test{i}".encode(), ts=T0 - 1000), now_ms=T0)
    assert len(log.segment_bases()) > 5
    for hw in range(0, 101):
        set_high_watermark(log, hw)
        retention(log, T0)
        start = status(log, T0)["log_start_offset"]
        bases = log.segment_bases()
        assert start <= hw
        assert start <= bases[0] <= hw
        assert all(b > hw for b in bases[1:]), (hw, bases)
    assert status(log, T0)["log_start_offset"] == 100
    assert log.segment_bases() == [100]
    assert names.log_file(log.directory, 100).stat().st_size == 0


def test_deletable_segments_filter(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeletableSegmentsFilter: of 9 one-record segments and an empty active one, a
    predicate true for bases <= 5 (here: the log start offset at 6) gives the 6 first; an always-true
    one (here: retention.ms=0 at a later clock) every non-active segment; once the active segment holds
    a record, all 10."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024, retention_ms=0)
    for _ in range(9):
        log.append([(None, "a")], timestamp=T0)
        log.roll()
    assert len(log.segment_bases()) == 10
    set_log_start_offset(log, 6)
    plan = retention(log, T0 - 1, action="plan")  # nothing has expired yet at T0 - 1
    assert [s["base_offset"] for s in plan["segments"]] == [0, 1, 2, 3, 4, 5]
    plan = retention(log, T0 + 1, action="plan")
    assert [s["base_offset"] for s in plan["segments"]] == list(range(9))
    assert plan["roll_first"] is False
    log.append([(None, "a")], timestamp=T0)
    plan = retention(log, T0 + 1, action="plan")
    assert [s["base_offset"] for s in plan["segments"]] == list(range(10))
    assert plan["roll_first"] is True
    assert len(log.segment_bases()) == 10  # a plan changes nothing


def test_deletable_segments_iteration(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeletableSegmentsIteration: segments are offered in base-offset order, each
    with its successor's base as its end, and every non-active segment is deletable."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024, retention_ms=0)
    for _ in range(9):
        log.append([(None, "a")], timestamp=T0)
        log.roll()
    plan = retention(log, T0 + 1, action="plan")
    assert [(s["base_offset"], s["next_offset"]) for s in plan["segments"]] == [(i, i + 1) for i in range(9)]
    assert retention(log, T0 + 1)["applied"] == list(range(9))
    assert log.segment_bases() == [9]


# --- producer snapshots and producer state across retention ------------------------------------------------
@pytest.mark.parametrize("create_empty_active_segment", [True, False])
def test_retention_deletes_producer_state_snapshots(tmp_path: Path, create_empty_active_segment: bool) -> None:
    """UnifiedLogTest.testRetentionDeletesProducerStateSnapshots: retention.bytes=0 deletes every
    segment; after the (zero) file delete delay one producer snapshot remains and the log start
    offset is 3."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, retention_bytes=0, retention_ms=60_000, file_delete_delay_ms=0)
    log.idempotent(1, [(None, "a")], sequence=0)
    log.roll()
    log.idempotent(1, [(None, "b")], sequence=1)
    log.roll()
    log.idempotent(1, [(None, "c")], sequence=2)
    if create_empty_active_segment:
        log.roll()
    assert len(snapshot_offsets(log)) == (3 if create_empty_active_segment else 2)
    retention(log, T0 + 60_001)
    sweep(log)
    assert snapshot_offsets(log) == [3]
    assert status(log, T0)["log_start_offset"] == 3


def test_log_start_offset_movement_deletes_snapshots(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogStartOffsetMovementDeletesSnapshots: moving the log start offset to the
    log end - 1 deletes the first two segments and, after the delay, their snapshots: one remains."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, retention_bytes=-1, file_delete_delay_ms=0)
    log.idempotent(1, [(None, "a")], sequence=0)
    log.roll()
    log.idempotent(1, [(None, "b")], sequence=1)
    log.roll()
    log.idempotent(1, [(None, "c")], sequence=2)
    assert snapshot_offsets(log) == [1, 2]
    set_log_start_offset(log, 2)
    retention(log, T0)
    sweep(log)
    assert snapshot_offsets(log) == [2]


def test_delete_snapshots_on_increment_log_start_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeleteSnapshotsOnIncrementLogStartOffset: deleting records to offset 2 keeps
    both producers' state (pid 2's last sequence 0) but deletes the dropped segment's snapshot after
    file.delete.delay.ms."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    log.idempotent(1, [(None, "a")], sequence=0)
    log.roll()
    log.idempotent(2, [(None, "b")], sequence=0)
    log.roll()
    assert len(producers(log)) == 2 and snapshot_offsets(log) == [1, 2]
    set_log_start_offset(log, 2)
    retention(log, T0)
    age_deleted_files(log, 60_000 + 1000)
    sweep(log)
    state = producers(log)
    assert sorted(state) == [1, 2]
    assert state[2].last_sequence == 0
    assert snapshot_offsets(log) == [2]


def test_producer_id_expiration_on_segment_deletion(tmp_path: Path) -> None:
    """UnifiedLogTest.testProducerIdExpirationOnSegmentDeletion: retention.bytes drops the segment of
    producer 1's only batch, but producer state still holds producers 1 and 2."""
    size = len(kbatch(0, b"foo", producer_id=1, producer_epoch=0, sequence=0))
    log = ScenarioLog(tmp_path, segment_bytes=size, retention_bytes=size * 2)
    log.idempotent(1, [(None, "foo")], sequence=0)
    log.idempotent(2, [(None, "bar")], sequence=0)
    log.idempotent(2, [(None, "baz")], sequence=1)
    assert len(log.segment_bases()) == 3
    assert sorted(producers(log)) == [1, 2]
    assert retention(log, T0)["applied"] == [0]
    assert len(log.segment_bases()) == 2
    assert sorted(producers(log)) == [1, 2]


def test_compaction_deletes_producer_state_snapshots(tmp_path: Path) -> None:
    """UnifiedLogTest.testCompactionDeletesProducerStateSnapshots: before and after a cleaning round
    (and retention, and the zero delete delay) there is a producer snapshot at every segment base
    offset but the first."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, cleanup_policy="compact", file_delete_delay_ms=0)
    log.idempotent(1, [("a", "a")], sequence=0)
    log.roll()
    log.idempotent(1, [("a", "b")], sequence=1)
    log.roll()
    log.idempotent(1, [("a", "c")], sequence=2)
    assert snapshot_offsets(log) == log.segment_bases()[1:] == [1, 2]
    log.clean(T0)
    retention(log, T0)
    sweep(log)
    assert snapshot_offsets(log) == log.segment_bases()[1:]
    assert log.latest_values() == {"a": "c"}


# --- the leader-epoch checkpoint follows the log start offset (spec §12.2) ----------------------------------
@pytest.mark.xfail(strict=True, reason="DIVERGENCE: retention does not truncate leader-epoch-checkpoint from the "
                                       "new log start offset")
def test_should_truncate_leader_epochs_when_deleting_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldTruncateLeaderEpochsWhenDeletingSegments: epochs (0,0) (1,5) (2,10); when
    retention.bytes deletes the first segment the oldest entry goes: (1,5) (2,10)."""
    log = _five_per_segment(tmp_path, retention_bytes=SINGLETON_BYTES * 10)
    for epoch in range(3):
        append_singletons(log, 5, epoch=epoch)
    assert leader_epochs(log) == [(0, 0), (1, 5), (2, 10)]
    assert retention(log, T0)["applied"] == [0]
    assert leader_epochs(log) == [(1, 5), (2, 10)]


@pytest.mark.xfail(strict=True, reason="DIVERGENCE: retention does not move the first leader-epoch entry to the "
                                       "new log start offset")
def test_should_update_offset_for_leader_epochs_when_deleting_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldUpdateOffsetForLeaderEpochsWhenDeletingSegments: epochs (0,0) (1,7) (2,10);
    deleting the first segment (up to offset 5) moves the first entry to (0,5)."""
    log = _five_per_segment(tmp_path, retention_bytes=SINGLETON_BYTES * 10)
    append_singletons(log, 7, epoch=0)
    append_singletons(log, 3, epoch=1)
    append_singletons(log, 5, epoch=2)
    assert leader_epochs(log) == [(0, 0), (1, 7), (2, 10)]
    assert retention(log, T0)["applied"] == [0]
    assert leader_epochs(log) == [(0, 5), (1, 7), (2, 10)]


def test_read_after_retention_starts_at_the_log_start_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogDeletionAfterDeleteRecords (reads): once records below the log start
    offset (6) are deleted, a read from 0 starts at offset 6."""
    log = _five_per_segment(tmp_path)
    append_singletons(log, 15)
    set_log_start_offset(log, 6)
    retention(log, T0)
    assert [offset for offset, _, _ in consume(log)] == list(range(6, 15))
