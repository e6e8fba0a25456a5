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
from conftest import run_cli
from kafka_log import T0, ScenarioLog
from log_port_helpers import (
    SINGLETON_BYTES,
    age_deleted_files,
    append_raw,
    append_singletons,
    consume,
    files,
    kbatch,
    kbatch_of,
    leader_epochs,
    one_log,
    producers,
    read_only,
    retention,
    set_high_watermark,
    set_log_start_offset,
    snapshot_offsets,
    status,
    sweep,
)

from kafkalog.log import names
from kafkalog.log.local_log import LocalLog


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
    segments; the log start offset is what was asked, and a read from 0 starts there."""
    log = _five_per_segment(tmp_path)
    append_singletons(log, 15)
    assert log.segment_bases() == [0, 5, 10] and status(log, T0)["log_start_offset"] == 0
    for start, segments in ((1, 3), (6, 2), (15, 1)):
        set_log_start_offset(log, start)
        retention(log, T0)
        assert len(log.segment_bases()) == segments, start
        assert status(log, T0)["log_start_offset"] == start
        assert [offset for offset, _, _ in consume(log)] == list(range(start, 15))  # reads start there
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
    log end - 1 deletes the first two segments and, after the delay, their snapshots: one remains, the
    active segment's. Kafka's test never reloads its log, so the steps are one open of it here
    (``one_log``; the deletion the one retention makes for a log start offset of 2). Kafka's load in
    between would delete that snapshot too, unread: it is at the log start offset."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, retention_bytes=-1, file_delete_delay_ms=0)
    with one_log(log) as local:
        log.idempotent(1, [(None, "a")], sequence=0)
        log.roll()
        log.idempotent(1, [(None, "b")], sequence=1)
        log.roll()
        log.idempotent(1, [(None, "c")], sequence=2)
        assert snapshot_offsets(log) == [1, 2]
        local.mark_segments_deleted(2, mark_time_ms=T0)
        assert local.log_start_offset == 2
    sweep(log)
    assert snapshot_offsets(log) == [2]


def test_delete_snapshots_on_increment_log_start_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeleteSnapshotsOnIncrementLogStartOffset: deleting records to offset 2 keeps
    both producers' state (pid 2's last sequence 0) but deletes the dropped segment's snapshot after
    file.delete.delay.ms. The state is the running log's: Kafka's test never reloads it, so the steps
    are one open of the log here (``one_log``; the deletion the one retention makes for a log start
    offset of 2). A load forgets both producers: Kafka's deletes the snapshots at or below the log
    start offset unread, and no batch of theirs is left above it."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    with one_log(log) as local:
        log.idempotent(1, [(None, "a")], sequence=0)
        log.roll()
        log.idempotent(2, [(None, "b")], sequence=0)
        log.roll()
        assert len(local.producer_state().producers) == 2 and snapshot_offsets(log) == [1, 2]
        local.mark_segments_deleted(2, mark_time_ms=T0)
        assert local.log_start_offset == 2
        state = local.producer_state().producers
        assert sorted(state) == [1, 2]
        assert state[2].last_sequence == 0
    age_deleted_files(log, 60_000 + 1000)
    sweep(log)
    assert snapshot_offsets(log) == [2]
    assert producers(log) == {}


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
def test_should_truncate_leader_epochs_when_deleting_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldTruncateLeaderEpochsWhenDeletingSegments: epochs (0,0) (1,5) (2,10); when
    retention.bytes deletes the first segment the oldest entry goes: (1,5) (2,10)."""
    log = _five_per_segment(tmp_path, retention_bytes=SINGLETON_BYTES * 10)
    for epoch in range(3):
        append_singletons(log, 5, epoch=epoch)
    assert leader_epochs(log) == [(0, 0), (1, 5), (2, 10)]
    assert retention(log, T0)["applied"] == [0]
    assert leader_epochs(log) == [(1, 5), (2, 10)]


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


# --- roll rules (spec §9) -----------------------------------------------------------------------------------
def test_time_based_log_roll_during_append(tmp_path: Path) -> None:
    """UnifiedLogTest.testTimeBasedLogRollDuringAppend (segment.ms=3600): an append into an empty
    segment never rolls; without timestamps the wall clock since the segment's creation decides; a
    segment whose first batch has a timestamp rolls on the incoming batch's timestamp, not the clock;
    an empty append never rolls."""
    log = ScenarioLog(tmp_path, segment_ms=3600)
    with log.writable() as local:
        now = local.active_segment.created_ms  # the mock clock starts when the segment was made

        def append(ts: int = -1) -> int:
            local.append_batch(kbatch(local.log_end_offset, ts=ts), now_ms=now)
            return len(local.segments)

        assert len(local.segments) == 1
        now += 3601
        assert append() == 1  # never roll into an empty segment
        assert append() == 2  # no timestamps: the wall clock has passed segment.ms
        for segments in (3, 4):
            now += 3601
            assert append() == segments
        timestamp = now + 3601
        assert append(timestamp) == 4  # the segment's first batch has no timestamp: wall clock rule
        now += 3601
        assert append(timestamp) == 5
        now += 3601
        assert append(timestamp) == 5  # timestamp rule: the first batch's timestamp is the same
        assert append(now) == 6  # this batch's timestamp is segment.ms + 1 past the first one's
        now += 3601
        local.append_records([], now_ms=now)
        assert len(local.segments) == 6


def test_time_based_log_roll_jitter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """UnifiedLogTest.testTimeBasedLogRollJitter (segment.ms=3600, segment.jitter.ms=1200): a new
    segment's random jitter shortens its time to roll: no roll at segment.ms - max jitter, a roll at
    segment.ms - jitter + 1. (The random draw is pinned to its largest value, 1199.)"""
    import random

    monkeypatch.setattr(random, "randrange", lambda bound, *a: bound - 1)
    log = ScenarioLog(tmp_path, segment_ms=3600, segment_jitter_ms=1200)
    with log.writable() as local:
        start = local.active_segment.created_ms
        local.append_batch(kbatch(0, ts=start), now_ms=start)
        local.roll(now_ms=start)  # a segment made now, with its jitter drawn now
        jitter = local.active_segment.roll_jitter_ms
        assert jitter == 1199
        local.append_batch(kbatch(1, ts=start), now_ms=start)
        t = start + 3600 - 1200
        local.append_batch(kbatch(2, ts=t), now_ms=t)
        assert len(local.segments) == 2
        t += 1200 - jitter + 1
        local.append_batch(kbatch(3, ts=t), now_ms=t)
        assert len(local.segments) == 3


def test_time_based_log_roll_jitter_on_a_loaded_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """UnifiedLogTest.testTimeBasedLogRollJitter, with the segment loaded again before the appends (every
    ``kafkalog produce`` loads the partition): Kafka's loader opens each segment with a fresh random
    jitter, so the roll comes at segment.ms - jitter (here 1199), not at segment.ms."""
    import random

    monkeypatch.setattr(random, "randrange", lambda bound, *a: bound - 1)
    monkeypatch.setattr(random, "randint", lambda low, high: high - 1)
    log = ScenarioLog(tmp_path, segment_ms=3600, segment_jitter_ms=1200)
    log.append([(None, "test")], timestamp=T0)
    log.append([(None, "test")], timestamp=T0 + 3600 - 1200)
    assert log.segment_bases() == [0]
    log.append([(None, "test")], timestamp=T0 + 3600 - 1199 + 1)
    assert log.segment_bases() == [0, 2]


def test_size_based_log_roll(tmp_path: Path) -> None:
    """UnifiedLogTest.testSizeBasedLogRoll: segment.bytes of 10 x (batch size - 1): 11 appends make 2
    segments (a segment may reach segment.bytes but not pass it)."""
    log = ScenarioLog(tmp_path, segment_bytes=10 * (SINGLETON_BYTES - 1))
    append_singletons(log, 11, ts=T0)
    assert len(log.segment_bases()) == 2
    assert log.segment_bases() == [0, 9]
    assert names.log_file(log.directory, 0).stat().st_size == 9 * SINGLETON_BYTES


def test_roll_segment_that_already_exists(tmp_path: Path) -> None:
    """UnifiedLogTest.testRollSegmentThatAlreadyExists: rolling the empty active segment at its own base
    keeps one segment; appends continue at 0 and 1; a roll then starts at the log end (2); a forced roll
    of that empty active segment on the next append keeps 2 segments and the record is read back."""
    log = ScenarioLog(tmp_path, segment_ms=3600)
    with log.writable() as local:
        local.roll(0, now_ms=T0)
        assert len(local.segments) == 1
        local.append_batch(kbatch(0, b"v1", b"k1", ts=T0), now_ms=T0)
        assert len(local.segments) == 1 and local.active_segment.base_offset == 0
        local.append_batch(kbatch(1, b"v2", b"k2", ts=T0 + 10), now_ms=T0)
        assert local.log_end_offset == 2
        local.roll(now_ms=T0)
        assert local.active_segment.base_offset == 2 and len(local.segments) == 2
        local.active_segment.offset_index.max_entries = 0  # Kafka: offsetIndex.resize(0): full, so it rolls
        local.append_batch(kbatch(2, b"v3", b"k3", ts=T0 + 12), now_ms=T0)
        assert len(local.segments) == 2
    assert consume(log) == [(0, "k1", "v1"), (1, "k2", "v2"), (2, "k3", "v3")]
    assert [b.segment for b in log.batches()] == [0, 0, 2]


def test_message_set_size_check(tmp_path: Path) -> None:
    """UnifiedLogTest.testMessageSetSizeCheck: a batch one byte larger than segment.bytes is rejected
    (RecordBatchTooLargeException) and nothing is written."""
    from kafkalog.errors import RecordBatchTooLargeError

    size = len(kbatch_of(0, [b"You", b"bethe"]))
    log = ScenarioLog(tmp_path, segment_bytes=size - 1)
    with pytest.raises(RecordBatchTooLargeError):
        append_raw(log, [kbatch_of(0, [b"You", b"bethe"])])
    assert status(log, T0)["log_end_offset"] == 0 and log.batches() == []


def test_message_size_check(tmp_path: Path) -> None:
    """UnifiedLogTest.testMessageSizeCheck: with max.message.bytes one below the second batch's size the
    first batch is appended and the second rejected (RecordTooLargeException)."""
    from kafkalog.errors import RecordBatchTooLargeError

    first = kbatch_of(0, [b"You", b"bethe"])
    second = kbatch_of(2, [b"change (I need more bytes)... blah blah blah.", b"More padding boo hoo"])
    log = ScenarioLog(tmp_path, max_message_bytes=len(second) - 1)
    append_raw(log, [first])
    with pytest.raises(RecordBatchTooLargeError):
        append_raw(log, [second])
    assert [(b.base_offset, b.last_offset) for b in log.batches()] == [(0, 1)]


def test_compacted_topic_constraints(tmp_path: Path) -> None:
    """UnifiedLogTest.testCompactedTopicConstraints: a compacted topic refuses records without a key
    (plain or compressed) and appends nothing; keyed records (plain or gzip) are accepted. (Through
    ``kafkalog produce``, the leader's append path.)"""
    log = ScenarioLog(tmp_path, cleanup_policy="compact")
    base = ["produce", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0"]
    for extra in ([], ["--compression", "gzip"]):
        refused = run_cli(*base, *extra, stdin="this message does not have a key\n")
        assert refused.code == 1 and "without a key" in refused.err
    assert log.batches() == []
    assert run_cli(*base, "--key-separator", ":", stdin="and here it is:this message has a key\n").code == 0
    assert run_cli(*base, "--key-separator", ":", "--compression", "gzip",
                   stdin="and here it is:this message has a key\nanother key:this message also has a key\n").code == 0
    assert log.keys_in_log() == ["and here it is", "and here it is", "another key"]


# --- appends and reads --------------------------------------------------------------------------------------
def _read_one(reader: LocalLog, offset: int) -> tuple[int, bytes | None, bytes | None] | None:
    """The first record a read from ``offset`` returns (what ``consume --max-records 1`` prints)."""
    for columns, row in reader.read_records(offset, 1):
        return int(columns.offset[row]), columns.key(row), columns.value(row)
    return None


def test_load_empty_log(tmp_path: Path) -> None:
    """UnifiedLogTest.testLoadEmptyLog: a partition holding only an empty .log and .index at 0 opens and
    takes an append."""
    log = ScenarioLog(tmp_path)
    for path in log.directory.glob("0*"):
        path.unlink()
    names.log_file(log.directory, 0).touch()
    names.index_file(log.directory, 0).touch()
    log.append([(None, "test")], timestamp=T0)
    assert consume(log) == [(0, "null", "test")]


def test_append_and_read_with_sequential_offsets(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendAndReadWithSequentialOffsets (segment.bytes=71): 50 one-record appends
    read back one by one at their offsets with their values; a read past the end returns nothing."""
    log = ScenarioLog(tmp_path, segment_bytes=71)
    values = [str(i).encode() for i in range(0, 100, 2)]
    append_raw(log, [kbatch(i, v) for i, v in enumerate(values)])
    assert len(log.segment_bases()) == 50
    reader = read_only(log)
    for i, value in enumerate(values):
        assert _read_one(reader, i) == (i, None, value)
    for i in (0, 1, 25, 49):  # and through `kafkalog consume`
        assert consume(log, i, 1) == [(i, "null", values[i].decode())]
    assert consume(log, len(values), 100) == []


def test_append_and_read_with_non_sequential_offsets(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendAndReadWithNonSequentialOffsets (segment.bytes=72): records appended at
    offsets 0..49 then every 7th from 50; a read from any offset below the last returns the first
    record at or after it."""
    log = ScenarioLog(tmp_path, segment_bytes=72)
    ids = list(range(50)) + list(range(50, 200, 7))
    append_raw(log, [kbatch(i, str(i).encode()) for i in ids])
    reader = read_only(log)
    for i in range(50, max(ids)):
        expected = next(m for m in ids if m >= i)
        assert _read_one(reader, i) == (expected, None, str(expected).encode())
    for i in (50, 51, 56, 57, 58, 196):  # and through `kafkalog consume`
        expected = next(m for m in ids if m >= i)
        assert consume(log, i, 1) == [(expected, "null", str(expected))]


def test_read_at_log_gap(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadAtLogGap (segment.bytes=300): with the first segment cut back to offset 0
    (a gap up to the second segment), a read at 1 returns the last record, from the second segment."""
    log = ScenarioLog(tmp_path, segment_bytes=300)
    with log.writable() as local:
        while len(local.segments) == 1:
            local.append_batch(kbatch(local.log_end_offset, b"42"), now_ms=T0)
        end = local.log_end_offset
        local.segments[0].truncate_to(1)
    assert consume(log, 1, 1) == [(end - 1, "null", "42")]


def test_read_out_of_range(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadOutOfRange: a log starting at 1024 with one record: a read at 1025 (the
    log end) is empty. Kafka's fetch throws OffsetOutOfRange for 0 and 1026; kafkalog's ``consume``
    starts a read below the log start offset at the log start offset (1024) and returns nothing past
    the end."""
    log = ScenarioLog(tmp_path, segment_bytes=1024)
    for path in log.directory.glob("0*"):
        path.unlink()
    names.log_file(log.directory, 1024).touch()
    names.index_file(log.directory, 1024).touch()
    assert log.append([(None, "42")], timestamp=T0) == (1024, 1024)
    assert consume(log, 1025, 1000) == []
    assert consume(log, 0, 1000) == [(1024, "null", "42")]
    assert consume(log, 1026, 1000) == []
    assert status(log, T0)["log_start_offset"] == 1024


def test_flushing_empty_active_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.testFlushingEmptyActiveSegments: after an append and a roll there are 2 .log files
    and, once flushed, 2 .index files, the active one empty."""
    log = ScenarioLog(tmp_path)
    log.append([(None, "Test")], timestamp=T0)
    log.roll()
    assert len(files(log, names.LOG_SUFFIX)) == 2
    assert len(files(log, names.INDEX_SUFFIX)) == 2
    assert names.log_file(log.directory, 1).stat().st_size == 0


def test_log_rolls(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogRolls (segment.bytes=100): 100 one-record appends read back in order with
    their values and timestamps, nothing past them, and the roll flushed the log (recovery point >=
    the active segment's base)."""
    from log_port_helpers import recovery_point

    log = ScenarioLog(tmp_path, segment_bytes=100)
    append_raw(log, [kbatch(i, str(i).encode(), ts=T0 + i) for i in range(100)])
    assert [(o, v) for o, _, v in consume(log)] == [(i, str(i)) for i in range(100)]
    assert [(r.offset, r.timestamp) for r in log.records()] == [(i, T0 + i) for i in range(100)]
    assert consume(log, 100) == []
    assert recovery_point(log) >= log.active_base()


def test_compressed_messages(tmp_path: Path) -> None:
    """UnifiedLogTest.testCompressedMessages (segment.bytes=110): two gzip batches of two records each go
    to two segments. Kafka's fetch returns whole batches (a read at 1 starts at record 0); kafkalog's
    ``consume`` starts at the asked offset inside the batch."""
    from kafkalog.format.compression import CompressionType

    log = ScenarioLog(tmp_path, segment_bytes=110)
    append_raw(log, [kbatch_of(0, [b"hello", b"there"], codec=CompressionType.GZIP),
                     kbatch_of(2, [b"alpha", b"beta"], codec=CompressionType.GZIP)])
    assert [(b.segment, b.base_offset, b.last_offset) for b in log.batches()] == [(0, 0, 1), (2, 2, 3)]
    assert [consume(log, i, 1)[0][0] for i in range(4)] == [0, 1, 2, 3]
    assert [v for _, _, v in consume(log, 1)] == ["there", "alpha", "beta"]


def test_append_message_with_null_payload(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendMessageWithNullPayload: a record with a null value reads back at offset 0
    without a value."""
    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch(0, None)])
    assert consume(log) == [(0, "null", "null")]
    assert log.records()[0].value is None


def test_append_below_expected_offset_throws_exception(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendBelowExpectedOffsetThrowsException: after records at 0 and 1 a batch at
    offset 1 is refused (plain and LZ4). (v0/v1 batches: kafkalog appends v2 only.)"""
    from kafkalog.errors import InvalidOffsetError
    from kafkalog.format.compression import CompressionType

    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch(0, b"0"), kbatch(1, b"1")])
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        with pytest.raises(InvalidOffsetError):
            append_raw(log, [kbatch(1, b"1", codec=codec)])
    assert log.last_offsets_per_batch() == [0, 1]


def test_append_empty_log_below_log_start_offset_throws_exception(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendEmptyLogBelowLogStartOffsetThrowsException: a log of one empty segment at
    7 starts and ends at 7; a 3-record batch at 4 (plain or LZ4) is refused, naming offset 4."""
    from kafkalog.errors import InvalidOffsetError
    from kafkalog.format.compression import CompressionType

    log = ScenarioLog(tmp_path)
    for path in log.directory.glob("0*"):
        path.unlink()
    names.log_file(log.directory, 7).touch()
    names.index_file(log.directory, 7).touch()
    row = status(log, T0)
    assert (row["log_start_offset"], row["log_end_offset"]) == (7, 7)
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        with pytest.raises(InvalidOffsetError, match=r"\b4\b"):
            append_raw(log, [kbatch_of(4, [b"v1", b"v2", b"v3"], keys=[b"k1", b"k2", b"k3"], codec=codec)])
    assert log.batches() == []


def test_append_with_no_timestamp(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendWithNoTimestamp: a record without a timestamp (-1) is appended and reads
    back with timestamp -1."""
    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch(0, b"value", b"key", ts=-1)])
    assert [(r.offset, r.timestamp) for r in log.records()] == [(0, -1)]


def test_build_time_index_when_not_assigning_offsets(tmp_path: Path) -> None:
    """UnifiedLogTest.testBuildTimeIndexWhenNotAssigningOffsets (index.interval.bytes=1): 100 batches
    appended at offsets 100.. with timestamps T..T+99 give 99 time-index entries, the last one T+99."""
    log = ScenarioLog(tmp_path, segment_bytes=10_000, index_interval_bytes=1)
    append_raw(log, [kbatch(100 + i, str(i).encode(), ts=T0 + i) for i in range(100)], now_ms=T0)
    entries = sum(names.time_index_file(log.directory, b).stat().st_size // 12 for b in log.segment_bases())
    assert entries == 99
    with log.writable() as local:
        assert local.active_segment.time_index.last_entry()[0] == T0 + 99


def test_truncate_to(tmp_path: Path) -> None:
    """UnifiedLogTest.testTruncateTo: truncating at or past the log end changes nothing; to 5 cuts the
    log end and size; to 0 empties it; 10 appends bring back the same end and size. (The
    ``truncateFullyAndStartAt`` part has no kafkalog counterpart: kafkalog is never a follower.)"""
    log = ScenarioLog(tmp_path, segment_bytes=10 * SINGLETON_BYTES)
    append_singletons(log, 10, ts=T0)
    with log.writable() as local:
        assert len(local.segments) == 1 and local.log_end_offset == 10
        size = local.size_in_bytes
        for offset in (10, 11):
            local.truncate_to(offset)
            assert (local.log_end_offset, local.size_in_bytes) == (10, size)
        local.truncate_to(5)
        assert local.log_end_offset == 5 and local.size_in_bytes < size
        local.truncate_to(0)
        assert (local.log_end_offset, local.size_in_bytes) == (0, 0)
    append_singletons(log, 10, ts=T0)
    with log.writable() as local:
        assert (local.log_end_offset, local.size_in_bytes) == (10, size)


def test_index_resizing_at_truncation(tmp_path: Path) -> None:
    """UnifiedLogTest.testIndexResizingAtTruncation: the rolled segment's indexes are trimmed to their 9
    entries; after truncating to 0 the one remaining segment takes 10 appends without rolling (its
    indexes have their full capacity again)."""
    log = ScenarioLog(tmp_path, segment_bytes=10 * SINGLETON_BYTES, index_interval_bytes=SINGLETON_BYTES - 1)
    with log.writable() as local:
        for i in range(1, 11):
            local.append_batch(kbatch(local.log_end_offset, ts=T0 + i), now_ms=T0)
        assert len(local.segments) == 1
        for i in range(1, 11):
            local.append_batch(kbatch(local.log_end_offset, ts=T0 + 10 + i), now_ms=T0)
        assert len(local.segments) == 2
    assert names.index_file(log.directory, 0).stat().st_size == 9 * 8
    assert names.time_index_file(log.directory, 0).stat().st_size == 9 * 12
    with log.writable() as local:
        local.truncate_to(0)
        assert len(local.segments) == 1
        for i in range(1, 11):
            local.append_batch(kbatch(local.log_end_offset, ts=T0 + 20 + i), now_ms=T0)
        assert len(local.segments) == 1


def test_fetch_up_to_log_end_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testFetchUpToLogEndOffset: a read from every offset between the log start and end
    offsets returns that record."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024)
    append_raw(log, [kbatch_of(0, [b"0", b"1", b"2"]), kbatch_of(3, [b"3", b"4"])])
    for offset in range(0, 5):
        assert consume(log, offset, 1) == [(offset, "null", str(offset))]


def test_offset_from_producer_snapshot_file(tmp_path: Path) -> None:
    """UnifiedLogTest.testOffsetFromProducerSnapshotFile: a snapshot file's name gives back its offset."""
    path = names.snapshot_file(tmp_path, 23423423)
    assert path.name == "00000000000023423423.snapshot"
    assert names.offset_from_file_name(path.name) == 23423423


def test_log_reinitialize_after_manual_delete(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogReinitializeAfterManualDelete: no data but a log start offset of 500: the
    log loads with start and end 500 (one empty segment there)."""
    log = ScenarioLog(tmp_path)
    for path in log.directory.glob("0*"):
        path.unlink()
    set_log_start_offset(log, 500)
    doc = log.recover()
    assert doc["partitions"][0]["log_end_offset"] == 500
    row = status(log, T0)
    assert (row["log_start_offset"], row["log_end_offset"]) == (500, 500)
    assert log.segment_bases() == [500]


def test_get_first_batch_timestamp_for_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.testGetFirstBatchTimestampForSegments: an empty segment's first batch timestamp is
    Long.MAX_VALUE; after a batch stamped 1000 (2000) it is 1000 (2000)."""
    from kafkalog.log.segment import LogSegment

    directory = tmp_path / "t-0"
    directory.mkdir()
    for base in (1, 2):  # LogTestUtils.createSegment makes the files
        names.log_file(directory, base).touch()
    segments = [LogSegment(directory, 1), LogSegment(directory, 2)]
    assert [s.first_batch_timestamp() for s in segments] == [2**63 - 1, 2**63 - 1]
    segments[0].append(1, 1000, 1, kbatch(1, b"one", ts=1000))
    segments[1].append(2, 2000, 2, kbatch(2, b"two", ts=2000))
    assert [s.first_batch_timestamp() for s in segments] == [1000, 2000]
    assert [LogSegment(directory, b).first_batch_timestamp() for b in (1, 2)] == [1000, 2000]


def test_should_truncate_leader_epoch_checkpoint_file_when_truncating_log(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldTruncateLeaderEpochCheckpointFileWhenTruncatingLog: epochs 0@0, 1@10, 2@16
    over 2 segments; truncating to the log end keeps 3 entries, to 11 leaves 2, to 10 one, to 0 none."""
    size = len(kbatch(0, b"value"))
    log = ScenarioLog(tmp_path, segment_bytes=10 * size)
    batches = [kbatch(i, b"value", epoch=0) for i in range(10)] + [kbatch(10 + i, b"value", epoch=1) for i in range(6)]
    batches += [kbatch(16 + i, b"value", epoch=2) for i in range(4)]
    append_raw(log, batches)
    assert len(log.segment_bases()) == 2
    assert leader_epochs(log) == [(0, 0), (1, 10), (2, 16)]
    for offset, entries in ((20, 3), (11, 2), (10, 1), (0, 0)):
        with log.writable() as local:
            local.truncate_to(offset)
        assert len(leader_epochs(log)) == entries, offset
