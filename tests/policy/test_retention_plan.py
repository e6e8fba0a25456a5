"""Table-driven tests of the pure retention planner against spec §10 (and §5.4, §8.1, §10.4).

Every scenario is a hand-built ``LogSnapshot`` (no filesystem) planned at a fixed ``NOW``. The
UnifiedLogTest scenarios of spec §15 items 68–69 are ported as tables: Kafka appends records of
size ``R`` into segments of ``5 * R``; here the resulting segments are written out directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import ConfigError
from kafkalog.log.config import BrokerConfig, LogConfig
from kafkalog.log.snapshot import LogSnapshot, SegmentSnapshot
from kafkalog.policy.retention import (
    LOG_START_OFFSET,
    RETENTION_BYTES,
    RETENTION_MS,
    Blocker,
    RetentionPlan,
    plan_retention,
)

NOW = 1_700_000_000_000
SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
R = 70  # the size of one single-record batch, as Kafka's tests use sizeInBytes of one record set
OLD = NOW - 30 * DAY  # far past every retention.ms used below
LSO, BYTES, MS = LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS


# --- builders ---------------------------------------------------------------------------------------


def config(broker: dict[str, str] | None = None, **topic: object) -> LogConfig:
    """``LogConfig.resolve`` with topic overrides given as ``retention_ms=...`` (dots for underscores)."""
    overrides = {name.replace("_", "."): str(value) for name, value in topic.items()}
    return LogConfig.resolve(BrokerConfig.from_properties(broker or {}), overrides)


@dataclasses.dataclass(frozen=True)
class Seg:
    """One segment of a table row: how many offsets it spans, its size, max timestamp and mtime."""

    count: int
    size: int
    ts: int = -1  # the time index's last timestamp, -1 = none
    mtime: int = NOW


def make_log(segs: Sequence[Seg], cfg: LogConfig, *, base: int = 0, log_start: int | None = None,
             hw: int | None = None) -> LogSnapshot:
    segments = []
    offset = base
    for s in segs:
        segments.append(SegmentSnapshot(offset, offset + s.count, s.size, s.ts, s.mtime))
        offset += s.count
    leo = offset
    return LogSnapshot(topic="t", partition=0, log_dir=Path("/nonexistent"), config=cfg,
                       segments=tuple(segments), log_start_offset=base if log_start is None else log_start,
                       log_end_offset=leo, high_watermark=leo if hw is None else hw, pending_delete_bytes=0)


def apply(log: LogSnapshot, plan: RetentionPlan, *, log_start: int | None = None) -> LogSnapshot:
    """The log after ``plan`` ran (spec §10.3): planned prefix gone, a fresh empty active segment when
    rolled, log start advanced; ``log_start`` then raises it further (a DeleteRecords call)."""
    n = len(plan.segments)
    assert tuple((d.base_offset, d.next_offset) for d in plan.segments) == \
        tuple((s.base_offset, s.next_offset) for s in log.segments[:n])
    remaining = log.segments[n:]
    if plan.roll_first:
        remaining = (SegmentSnapshot(log.log_end_offset, log.log_end_offset, 0, -1, plan.now_ms),)
    start = max(plan.log_start_offset_after, log_start if log_start is not None else 0)
    return dataclasses.replace(log, segments=remaining, log_start_offset=start)


def bases(plan: RetentionPlan) -> list[int]:
    return [d.base_offset for d in plan.segments]


def reasons(plan: RetentionPlan) -> list[str]:
    return [d.reason for d in plan.segments]


def kinds(plan: RetentionPlan) -> list[str]:
    return [b.kind for b in plan.blocked_by]


def blocker(plan: RetentionPlan, kind: str) -> Blocker:
    """The one blocker of ``kind`` (several passes stopping at the same segment for the same reason
    report it once each: they must agree)."""
    found = [b for b in plan.blocked_by if b.kind == kind]
    assert found, plan.blocked_by
    assert len(set(found)) == 1, found
    return found[0]


def five_record_segments(n: int, ts: int = -1, mtime: int = NOW) -> list[Seg]:
    """Kafka's ``createLog(segmentBytes = 5 * R)`` after ``5 * n`` single-record appends: n full segments."""
    return [Seg(5, 5 * R, ts, mtime) for _ in range(n)]


# --- pass order and stop-at-first-failure -----------------------------------------------------------


def test_passes_run_in_kafkas_order_log_start_then_bytes_then_ms() -> None:
    # 5 segments of 100 bytes; LSO 10 breaches segment 0; retention.bytes leaves 300 of the remaining 400,
    # so segment 10 goes by size; segment 20 is the only one old enough, so it goes by time.
    segs = [Seg(10, 100, OLD), Seg(10, 100, NOW), Seg(10, 100, OLD), Seg(10, 100, NOW), Seg(10, 100, NOW)]
    log = make_log(segs, config(retention_bytes=300, retention_ms=DAY), log_start=10)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 10, 20]
    assert reasons(plan) == [LSO, BYTES, MS]
    assert [(d.base_offset, d.next_offset, d.size_bytes) for d in plan.segments] == [(0, 10, 100), (10, 20, 100),
                                                                                     (20, 30, 100)]
    assert plan.log_start_offset_before == 10
    assert plan.log_start_offset_after == 30
    assert plan.bytes == 300
    assert not plan.roll_first
    # The size pass measured the log *after* the log-start pass: 400 bytes, excess 100, so only one goes.
    # Measured over all five (500, excess 200) it would have taken two.
    assert kinds(plan) == ["retention.bytes", "retention.ms"]


def test_log_start_pass_counts_first_for_size_pass() -> None:
    # Without the log-start pass running first, 500 bytes with retention.bytes=350 would delete segment 0
    # by size; with it, the log is 400 bytes (excess 50) and the size pass deletes nothing further.
    log = make_log([Seg(10, 100)] * 5, config(retention_bytes=350, retention_ms=-1), log_start=10)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0] and reasons(plan) == [LSO]
    assert blocker(plan, "retention.bytes").segment_base_offset == 10


@pytest.mark.parametrize(("segs", "cfg", "expected_bases", "stop_kind", "stop_at"), [
    # time: an old segment after a young one is not reached
    ([Seg(5, R, OLD), Seg(5, R, NOW - 1000), Seg(5, R, OLD), Seg(5, R, NOW)],
     dict(retention_ms=DAY), [0], "retention.ms", 5),
    # size: a big segment stops the walk although the small ones after it would fit
    ([Seg(5, 100), Seg(5, 500), Seg(5, 100), Seg(5, 100)],
     dict(retention_bytes=300, retention_ms=-1), [0], "retention.bytes", 5),
    # time: the first segment young → nothing at all, even though all later ones are expired
    ([Seg(5, R, NOW), Seg(5, R, OLD), Seg(5, R, OLD)],
     dict(retention_ms=DAY), [], "retention.ms", 0),
], ids=["time", "size", "time-first-young"])
def test_each_pass_stops_at_the_first_failing_segment(segs, cfg, expected_bases, stop_kind, stop_at) -> None:
    plan = plan_retention(make_log(segs, config(**cfg)), NOW)
    assert bases(plan) == expected_bases
    assert blocker(plan, stop_kind).segment_base_offset == stop_at


def test_log_start_pass_stops_at_segment_holding_the_log_start() -> None:
    # Segments with a gap in base offsets; LSO 12 lies inside [10,20): the segments before it go.
    segs = [Seg(5, R), Seg(5, R), Seg(10, R), Seg(5, R)]
    plan = plan_retention(make_log(segs, config(retention_ms=-1), log_start=12), NOW)
    assert bases(plan) == [0, 5] and reasons(plan) == [LSO, LSO]
    assert plan.log_start_offset_after == 12  # never lowered to the next segment's base 10
    assert "log-start-offset" not in kinds(plan)  # the log start simply lies in segment 10


# --- retention.bytes -------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_segments", "seg_size", "retention_bytes", "expected_deleted", "stop"), [
    # Kafka shouldDeleteSizeBasedSegments: 15 records in segments of 5, retention of 10 records → 2 remain
    (3, 5 * R, 10 * R, 1, "retention.bytes"),
    # Kafka shouldNotDeleteSizeBasedSegmentsWhenUnderRetentionSize: retention of 15 records → 3 remain
    (3, 5 * R, 15 * R, 0, "retention.bytes"),
    # one byte more than the log: below retention.bytes, the pass does not walk at all
    (3, 5 * R, 15 * R + 1, 0, "below-retention.bytes"),
    # equal segments, retention.bytes = 10 segments → exactly 10 remain
    (15, 5 * R, 10 * 5 * R, 5, "retention.bytes"),
    # a byte less than 10 segments: still 10 remain (the log never drops below retention.bytes)
    (15, 5 * R, 10 * 5 * R - 1, 5, "retention.bytes"),
    # a byte more than 10 segments: 11 remain
    (15, 5 * R, 10 * 5 * R + 1, 4, "retention.bytes"),
    # retention.bytes = 1 segment
    (15, 5 * R, 5 * R, 14, "retention.bytes"),
])
def test_size_retention_leaves_exactly_the_segments_that_fit(n_segments, seg_size, retention_bytes,
                                                             expected_deleted, stop) -> None:
    log = make_log(five_record_segments(n_segments), config(retention_bytes=retention_bytes, retention_ms=-1))
    plan = plan_retention(log, NOW)
    assert len(plan.segments) == expected_deleted
    assert n_segments - len(plan.segments) == n_segments - expected_deleted  # remaining count
    assert bases(plan) == [5 * i for i in range(expected_deleted)]
    assert set(reasons(plan)) <= {BYTES}
    remaining = log.size_bytes - plan.bytes
    assert remaining >= retention_bytes or expected_deleted == 0
    assert plan.bytes == expected_deleted * seg_size
    b = blocker(plan, stop)
    if stop == "retention.bytes":
        assert b.segment_base_offset == 5 * expected_deleted
    assert plan.log_start_offset_after == 5 * expected_deleted
    assert not plan.roll_first


def test_retention_bytes_zero_deletes_everything_and_rolls() -> None:
    log = make_log(five_record_segments(3), config(retention_bytes=0, retention_ms=-1))
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 5, 10] and reasons(plan) == [BYTES] * 3
    assert plan.roll_first
    assert plan.log_start_offset_after == log.log_end_offset == 15
    assert plan.bytes == 15 * R
    assert plan.blocked_by == ()  # nothing is left to block: the time pass (unlimited) does not even run


@pytest.mark.parametrize(("sizes", "retention_bytes", "expected_bases", "stop_kind"), [
    # log exactly at retention.bytes: excess 0, the leading empty segments still "fit"
    ([0, 0, 100, 100], 200, [0, 5], "retention.bytes"),
    # an empty segment between two that fit
    ([100, 0, 100, 100], 200, [0, 5], "retention.bytes"),
    # an empty segment right after the walk ran out of excess still goes
    ([100, 0, 0, 100], 100, [0, 5, 10], "retention.bytes"),
    # ...but not the empty *last* segment, even at retention.bytes=0
    ([100, 100, 0], 0, [0, 5], "active-segment"),
])
def test_zero_size_segments_fit(sizes, retention_bytes, expected_bases, stop_kind) -> None:
    segs = [Seg(5 if size or i < len(sizes) - 1 else 0, size) for i, size in enumerate(sizes)]
    plan = plan_retention(make_log(segs, config(retention_bytes=retention_bytes, retention_ms=-1)), NOW)
    assert bases(plan) == expected_bases
    assert set(reasons(plan)) == {BYTES}
    assert stop_kind in kinds(plan)
    assert not plan.roll_first


# --- retention.ms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("ts", "mtime", "deletable", "source"), [
    (NOW - 2 * DAY, NOW, True, "time-index"),      # old max timestamp, fresh file
    (NOW - 1000, OLD, False, "time-index"),        # fresh max timestamp, ancient file: never mtime
    (-1, OLD, True, "mtime"),                      # no timestamp: the file's mtime
    (-1, NOW - 1000, False, "mtime"),
    (0, NOW, True, "time-index"),                  # 0 is a timestamp (>= 0), not "none"
])
def test_time_uses_the_largest_timestamp_else_mtime(ts, mtime, deletable, source) -> None:
    log = make_log([Seg(5, R, ts, mtime), Seg(5, R, NOW)], config(retention_ms=DAY))
    plan = plan_retention(log, NOW)
    assert log.segments[0].largest_timestamp_source == source
    largest = ts if ts >= 0 else mtime
    if deletable:
        assert bases(plan) == [0] and reasons(plan) == [MS]
        assert source in plan.segments[0].detail
    else:
        assert plan.empty
        b = blocker(plan, "retention.ms")
        assert (b.segment_base_offset, b.until_ms) == (0, largest + DAY + 1)
        assert source in b.detail


@pytest.mark.parametrize(("age", "deletable"), [
    (DAY - 1, False),
    (DAY, False),       # now − ts == retention.ms: not strictly greater
    (DAY + 1, True),
])
def test_time_retention_is_strictly_greater(age, deletable) -> None:
    plan = plan_retention(make_log([Seg(5, R, NOW - age), Seg(5, R, NOW)], config(retention_ms=DAY)), NOW)
    assert bases(plan) == ([0] if deletable else [])


def test_until_ms_is_exactly_when_the_segment_becomes_deletable() -> None:
    ts = NOW - 5 * HOUR
    log = make_log([Seg(5, R, ts), Seg(5, R, NOW)], config(retention_ms=DAY))
    until = blocker(plan_retention(log, NOW), "retention.ms").until_ms
    assert until == ts + DAY + 1
    assert plan_retention(log, until - 1).empty
    assert bases(plan_retention(log, until)) == [0]


@pytest.mark.parametrize(("stamps", "expected_bases", "roll"), [
    ([NOW - 1, NOW - 1, NOW], [0, 5], False),      # ts == now is not in the past
    ([NOW - 1, NOW - 2, NOW - 1], [0, 5, 10], True),
    ([NOW, NOW - 1, NOW - 1], [], False),
])
def test_retention_ms_zero_deletes_everything_in_the_past(stamps, expected_bases, roll) -> None:
    plan = plan_retention(make_log([Seg(5, R, ts) for ts in stamps], config(retention_ms=0)), NOW)
    assert bases(plan) == expected_bases
    assert plan.roll_first is roll


def test_minus_one_is_unlimited_for_both() -> None:
    log = make_log([Seg(5, 10**9, 0, 0)] * 4, config(retention_ms=-1, retention_bytes=-1))
    plan = plan_retention(log, NOW)
    assert plan.empty and plan.bytes == 0
    assert kinds(plan) == ["unlimited", "unlimited"]
    assert [b.detail for b in plan.blocked_by] == ["retention.bytes=-1", "retention.ms=-1"]
    assert plan.log_start_offset_after == plan.log_start_offset_before == 0


def test_negative_retention_bytes_other_than_minus_one_is_unlimited() -> None:
    # Kafka: `retentionSize < 0` → no size retention; retention.bytes has no validator.
    plan = plan_retention(make_log([Seg(5, 100)] * 3, config(retention_bytes=-7, retention_ms=-1)), NOW)
    assert plan.empty and kinds(plan)[0] == "unlimited"


# --- all deletable, the active segment ---------------------------------------------------------------


def test_all_expired_rolls_first_and_plans_the_active_segment() -> None:
    # Kafka shouldDeleteTimeBasedSegmentsReadyToBeDeleted: 15 records stamped 10 in one segment,
    # retention.ms=10000 → the segment is rolled, then deleted; 1 (new, empty) segment remains.
    log = make_log([Seg(15, 15 * R, 10)], config(retention_ms=10000))
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0] and plan.segments[0].next_offset == 15
    assert plan.roll_first
    assert plan.log_start_offset_after == 15 == log.log_end_offset
    after = apply(log, plan)
    assert len(after.segments) == 1 and after.segments[0].size_bytes == 0


def test_all_expired_several_segments() -> None:
    log = make_log([Seg(5, R, OLD), Seg(5, 2 * R, OLD), Seg(3, 3 * R, OLD)], config(retention_ms=DAY))
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 5, 10] and reasons(plan) == [MS] * 3
    assert plan.roll_first and plan.log_start_offset_after == 13
    assert plan.bytes == 6 * R
    assert kinds(plan) == ["unlimited"]  # retention.bytes at its default -1; the time pass ran to the end


@pytest.mark.parametrize("cfg", [dict(retention_ms=DAY), dict(retention_ms=0), dict(retention_bytes=0)])
def test_empty_active_segment_is_never_deletable(cfg) -> None:
    # An empty active segment whose mtime is ancient: its predicate holds, yet it stays.
    log = make_log([Seg(5, R, OLD), Seg(5, R, OLD), Seg(0, 0, -1, OLD)], config(**{"retention_ms": -1, **cfg}))
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 5]
    assert not plan.roll_first
    assert plan.log_start_offset_after == 10 == log.log_end_offset
    b = blocker(plan, "active-segment")
    assert b.segment_base_offset == 10


def test_log_of_only_an_empty_segment_deletes_nothing() -> None:
    log = make_log([Seg(0, 0, -1, OLD)], config(retention_ms=0, retention_bytes=0), base=42)
    plan = plan_retention(log, NOW)
    assert plan.empty and not plan.roll_first
    assert kinds(plan) == ["active-segment", "active-segment"]
    assert plan.log_start_offset_after == 42


# --- cleanup.policy (spec §8.1) ----------------------------------------------------------------------


def test_compact_deletes_nothing_by_size_or_time() -> None:
    # Kafka shouldNotDeleteSegmentsWhenPolicyDoesNotIncludeDelete: records stamped 10, retention.ms
    # 10000, the oldest segment's mtime old — compact alone deletes nothing.
    segs = [Seg(5, 5 * R, 10, NOW - 20000)] + five_record_segments(2, ts=10)
    log = make_log(segs, config(cleanup_policy="compact", retention_ms=10000, retention_bytes=0))
    plan = plan_retention(log, NOW)
    assert plan.empty
    assert kinds(plan) == ["policy"]
    assert "compact" in blocker(plan, "policy").detail


def test_compact_still_deletes_log_start_offset_breaches() -> None:
    # Kafka shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete: LSO 5 → 2 remain.
    log = make_log(five_record_segments(3, ts=10), config(cleanup_policy="compact", retention_ms=10000),
                   log_start=5)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0] and reasons(plan) == [LSO]
    assert plan.log_start_offset_after == 5
    after = apply(log, plan)
    assert len(after.segments) == 2
    assert after.segments[0].base_offset <= after.log_start_offset < after.segments[1].base_offset


@pytest.mark.parametrize("policy", ["compact, delete", "delete,compact", "Compact,DELETE"])
def test_compact_delete_gets_log_start_size_and_time(policy) -> None:
    # Kafka shouldDeleteSegmentsReadyToBeDeletedWhenCleanupPolicyIsCompactAndDelete: records stamped 10,
    # retention.bytes of 10 records, default retention.ms (7 days) → 1 segment remains.
    log = make_log(five_record_segments(3, ts=10), config(cleanup_policy=policy, retention_bytes=10 * R))
    assert log.config.retention_ms == 7 * DAY
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 5, 10]
    assert reasons(plan) == [BYTES, MS, MS]
    assert plan.roll_first
    assert "policy" not in kinds(plan)
    # and the log-start pass too
    plan = plan_retention(dataclasses.replace(log, log_start_offset=5), NOW)
    assert reasons(plan) == [LSO, MS, MS]


# --- log.cleaner.enable / log.cleaner.threads (spec §8.1, §10.1) ---------------------------------------


@pytest.mark.parametrize(("broker", "key"), [({"log.cleaner.enable": "false"}, "log.cleaner.enable=false"),
                                             ({"log.cleaner.threads": "0"}, "log.cleaner.threads=0")])
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_log_gets_no_retention_when_no_cleaner_runs(broker, key, policy) -> None:
    # Kafka's LogManager.cleanupLogs skips compacted logs; their retention runs in the cleaner threads,
    # which log.cleaner.enable=false never creates and log.cleaner.threads=0 never starts.
    cfg = config(cleanup_policy=policy, retention_ms=10000, retention_bytes=0)
    log = make_log(five_record_segments(3, ts=10), cfg, log_start=5)  # every pass would delete
    assert not plan_retention(log, NOW, broker=BrokerConfig.from_properties({})).empty
    plan = plan_retention(log, NOW, broker=BrokerConfig.from_properties(broker))
    assert plan.empty and not plan.roll_first and plan.log_start_offset_after == 5
    assert plan.blocked_by == (Blocker("cleaner-disabled", f"{key}: no log cleaner runs, and a compacted "
                                       "topic's retention runs in the log cleaner"),)
    assert str(plan.blocked_by[0]) == (f"cleaner-disabled: {key}: no log cleaner runs, and a compacted topic's "
                                       "retention runs in the log cleaner")


def test_a_delete_log_keeps_its_retention_when_no_cleaner_runs() -> None:
    log = make_log(five_record_segments(3, ts=10), config(retention_ms=10000))
    off = BrokerConfig.from_properties({"log.cleaner.enable": "false"})
    assert plan_retention(log, NOW, broker=off) == plan_retention(log, NOW)
    assert bases(plan_retention(log, NOW, broker=off)) == [0, 5, 10]


# --- future timestamps -------------------------------------------------------------------------------


def test_future_timestamp_blocks_time_retention_of_everything_after_it() -> None:
    future = NOW + HOUR
    segs = [Seg(5, R, OLD), Seg(5, R, future), Seg(5, R, OLD), Seg(5, R, OLD), Seg(5, R, OLD)]
    for retention_ms in (0, DAY):
        plan = plan_retention(make_log(segs, config(retention_ms=retention_ms)), NOW)
        assert bases(plan) == [0]
        b = blocker(plan, "future-timestamp")
        assert (b.segment_base_offset, b.until_ms) == (5, future + retention_ms + 1)


def test_future_timestamp_does_not_block_size_retention() -> None:
    segs = [Seg(5, 100, NOW + DAY), Seg(5, 100, OLD), Seg(5, 100, NOW)]
    plan = plan_retention(make_log(segs, config(retention_ms=DAY, retention_bytes=200)), NOW)
    assert bases(plan) == [0, 5] and reasons(plan) == [BYTES, MS]


# --- high watermark ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("hw", "expected_bases", "stop_at"), [
    (15, [0, 5, 10], None),
    (14, [0, 5], 10),
    (10, [0, 5], 10),
    (9, [0], 5),
    (5, [0], 5),
    (4, [], 0),
    (0, [], 0),  # HW = log start: a fresh log whose HW never advanced deletes nothing
])
def test_nothing_at_or_after_the_high_watermark(hw, expected_bases, stop_at) -> None:
    log = make_log(five_record_segments(3, ts=OLD), config(retention_ms=DAY), hw=hw)
    plan = plan_retention(log, NOW)
    assert bases(plan) == expected_bases
    assert all(d.next_offset <= hw for d in plan.segments)
    assert plan.roll_first is (hw == 15)
    if stop_at is not None:
        b = blocker(plan, "high-watermark")
        assert b.segment_base_offset == stop_at
    assert plan.log_start_offset_after <= hw


@pytest.mark.parametrize("cfg", [dict(retention_ms=0), dict(retention_bytes=0, retention_ms=-1)])
def test_high_watermark_equal_to_log_start_deletes_nothing(cfg) -> None:
    log = make_log(five_record_segments(3, ts=OLD), config(**cfg), base=5, hw=5)
    plan = plan_retention(log, NOW)
    assert plan.empty
    assert blocker(plan, "high-watermark").segment_base_offset == 5


def test_high_watermark_also_bounds_the_log_start_pass() -> None:
    # LSO 15 would breach three segments, but the HW at 8 lets only [0,5) go.
    log = make_log(five_record_segments(4), config(retention_ms=-1), log_start=8, hw=8)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0] and reasons(plan) == [LSO]
    assert plan.log_start_offset_after == 8


def test_delete_old_segments_as_the_high_watermark_advances() -> None:
    # Kafka testDeleteOldSegments: 100 records stamped now−1000, segments of 5, retention.ms=999.
    log = make_log(five_record_segments(20, ts=NOW - 1000), config(retention_ms=999), hw=0)
    assert plan_retention(log, NOW).empty  # no HW set yet
    for hw in range(25, 31):
        log = dataclasses.replace(log, high_watermark=hw)
        plan = plan_retention(log, NOW)
        assert plan.log_start_offset_after <= hw
        log = apply(log, plan)
        assert log.segments[0].base_offset == hw - hw % 5  # the first kept segment holds offset hw
        assert all(s.next_offset > hw for s in log.segments)
    log = dataclasses.replace(log, high_watermark=log.log_end_offset)
    plan = plan_retention(log, NOW)
    assert plan.roll_first
    assert len(apply(log, plan).segments) == 1


# --- log start offset (DeleteRecords) ----------------------------------------------------------------


@pytest.mark.parametrize(("n_segments", "steps"), [
    # Kafka testLogDeletionAfterDeleteRecords: 15 records → [0,5) [5,10) [10,15); LSO 1, 6, 15 → 3, 2, 1 left
    (3, [(1, 0, 3), (6, 1, 2), (15, 1, 1)]),
    # the same with a non-empty active segment [15,20) after them
    (4, [(1, 0, 4), (6, 1, 3), (15, 2, 1)]),
])
def test_log_deletion_after_delete_records(n_segments, steps) -> None:
    log = make_log(five_record_segments(n_segments), config(retention_ms=-1))
    for new_start, deleted, remaining in steps:
        log = dataclasses.replace(log, log_start_offset=new_start)
        plan = plan_retention(log, NOW)
        assert len(plan.segments) == deleted
        assert set(reasons(plan)) <= {LSO}
        assert plan.log_start_offset_after == new_start
        log = apply(log, plan)
        assert len(log.segments) == remaining
        assert log.log_start_offset == new_start
        assert not plan.roll_first


def test_log_deletion_after_delete_records_with_empty_active_segment() -> None:
    # [0,5) [5,10) [10,15) [15,15) with LSO 15: three breach, the empty active one stays.
    log = make_log(five_record_segments(3) + [Seg(0, 0)], config(retention_ms=-1), log_start=15)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 5, 10] and not plan.roll_first
    assert plan.log_start_offset_after == 15


# --- idempotency -------------------------------------------------------------------------------------


def test_retention_idempotency() -> None:
    # Kafka testRetentionIdempotency: one record per segment stamped T+100, T, T+100; retention.ms=900;
    # now = T+901; LSO 1 breaches segment 0, which unblocks time retention of segment 1 → 2, then 0.
    t = NOW - 901
    log = make_log([Seg(1, R, t + 100), Seg(1, R, t), Seg(1, R, t + 100)],
                   config(retention_ms=900, retention_bytes=-1))
    blocked = plan_retention(log, NOW)
    assert blocked.empty and blocker(blocked, "retention.ms").segment_base_offset == 0
    log = dataclasses.replace(log, log_start_offset=1)
    plan = plan_retention(log, NOW)
    assert bases(plan) == [0, 1] and reasons(plan) == [LSO, MS]
    assert plan.log_start_offset_after == 2
    again = plan_retention(apply(log, plan), NOW)
    assert again.empty
    assert again.log_start_offset_after == again.log_start_offset_before == 2


def test_second_plan_after_a_roll_deletes_nothing() -> None:
    log = make_log(five_record_segments(3, ts=OLD), config(retention_ms=0, retention_bytes=0))
    plan = plan_retention(log, NOW)
    assert plan.roll_first
    again = plan_retention(apply(log, plan), NOW)
    assert again.empty and again.log_start_offset_after == 15


# --- config precedence (spec §10.4) through LogConfig.resolve ------------------------------------------


@pytest.mark.parametrize(("broker", "topic", "expected"), [
    ({}, {}, 168 * HOUR),
    ({"log.retention.hours": "1"}, {}, HOUR),
    ({"log.retention.hours": "3"}, {}, 3 * 3_600_000),
    ({"log.retention.hours": "1", "log.retention.minutes": "5"}, {}, 5 * MINUTE),
    ({"log.retention.hours": "1", "log.retention.minutes": "5", "log.retention.ms": "1234"}, {}, 1234),
    ({"log.retention.ms": "1234"}, {"retention.ms": "99"}, 99),
    ({"log.retention.hours": "1"}, {"retention.ms": "-1"}, -1),
    ({"log.retention.ms": "-1"}, {"retention.ms": "5000"}, 5000),
    ({"log.retention.hours": "-5"}, {}, -1),
    ({"log.retention.minutes": "-2", "log.retention.hours": "1"}, {}, -1),
    ({"log.retention.ms": "-100"}, {}, -1),
    ({"log.retention.ms": "0", "log.retention.hours": "1"}, {}, 0),
])
def test_retention_ms_precedence(broker, topic, expected) -> None:
    cfg = LogConfig.resolve(BrokerConfig.from_properties(broker), topic)
    assert cfg.retention_ms == expected


@pytest.mark.parametrize(("broker", "topic", "expected"), [
    ({}, {}, -1),
    ({"log.retention.bytes": "1000"}, {}, 1000),
    ({"log.retention.bytes": "1000"}, {"retention.bytes": "10"}, 10),
])
def test_retention_bytes_precedence(broker, topic, expected) -> None:
    assert LogConfig.resolve(BrokerConfig.from_properties(broker), topic).retention_bytes == expected


def test_topic_retention_ms_below_minus_one_is_rejected() -> None:
    with pytest.raises(ConfigError, match="retention.ms"):
        config(retention_ms=-2)


@pytest.mark.parametrize(("broker", "topic", "boundary"), [
    ({"log.retention.hours": "1"}, {}, HOUR),
    ({"log.retention.hours": "1", "log.retention.minutes": "2"}, {}, 2 * MINUTE),
    ({"log.retention.minutes": "2", "log.retention.ms": "1500"}, {}, 1500),
    ({"log.retention.ms": "1500"}, {"retention.ms": "700"}, 700),
])
def test_resolved_retention_ms_drives_the_plan(broker, topic, boundary) -> None:
    cfg = LogConfig.resolve(BrokerConfig.from_properties(broker), topic)
    at = make_log([Seg(5, R, NOW - boundary), Seg(5, R, NOW)], cfg)
    past = make_log([Seg(5, R, NOW - boundary - 1), Seg(5, R, NOW)], cfg)
    assert plan_retention(at, NOW).empty
    assert bases(plan_retention(past, NOW)) == [0]


def test_negative_broker_retention_plans_nothing() -> None:
    cfg = LogConfig.resolve(BrokerConfig.from_properties({"log.retention.hours": "-1"}), {})
    plan = plan_retention(make_log([Seg(5, R, 0, 0)] * 3, cfg), NOW)
    assert plan.empty and kinds(plan) == ["unlimited", "unlimited"]


# --- plan fields -------------------------------------------------------------------------------------


def test_plan_identity_fields_and_bytes() -> None:
    log = make_log([Seg(5, 111, OLD), Seg(5, 222, OLD), Seg(5, 333, NOW)], config(retention_ms=DAY), base=100)
    log = dataclasses.replace(log, topic="orders", partition=7)
    plan = plan_retention(log, NOW)
    assert (plan.topic, plan.partition, plan.now_ms) == ("orders", 7, NOW)
    assert [(d.base_offset, d.next_offset, d.size_bytes) for d in plan.segments] == [(100, 105, 111),
                                                                                     (105, 110, 222)]
    assert plan.bytes == 333 and not plan.empty
    assert (plan.log_start_offset_before, plan.log_start_offset_after) == (100, 110)


# --- property: Kafka's deleteOldSegments, modelled independently (spec §10.2–10.3) ------------------


def kafka_model(log: LogSnapshot, now: int) -> tuple[list[tuple[int, str]], bool, int]:
    """Spec §10.2–§10.3 written out naively: (deleted (base, reason)), rolled, log start after."""
    cfg = log.config
    segs = [(s.base_offset, s.size_bytes, s.largest_timestamp_ms) for s in log.segments]
    start, leo, hw = log.log_start_offset, log.log_end_offset, log.high_watermark
    deleted: list[tuple[int, str]] = []
    rolled = False

    def run(reason: str, predicate) -> None:  # noqa: ANN001
        nonlocal segs, start, rolled
        found = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt[0] if nxt else leo
            if not (hw >= upper and predicate(seg, nxt)) or (nxt is None and seg[1] == 0):
                break
            found.append(seg)
        if not found:
            return
        if len(found) == len(segs):
            segs = segs + [(leo, 0, now)]
            rolled = True
        segs = segs[len(found):]
        start = max(start, segs[0][0])
        deleted.extend((seg[0], reason) for seg in found)

    run(LSO, lambda seg, nxt: nxt is not None and nxt[0] <= start)
    if "delete" in cfg.cleanup_policy:
        size = sum(seg[1] for seg in segs)
        if cfg.retention_bytes >= 0 and size >= cfg.retention_bytes:
            diff = [size - cfg.retention_bytes]

            def fits(seg, nxt) -> bool:  # noqa: ANN001
                if diff[0] - seg[1] >= 0:
                    diff[0] -= seg[1]
                    return True
                return False

            run(BYTES, fits)
        if cfg.retention_ms >= 0:
            run(MS, lambda seg, nxt: now - seg[2] > cfg.retention_ms)
    return deleted, rolled, start


_POLICIES = [frozenset({"delete"}), frozenset({"compact"}), frozenset({"compact", "delete"})]
_BASE_CONFIG = LogConfig.default()


@st.composite
def snapshots(draw: st.DrawFn) -> LogSnapshot:
    n = draw(st.integers(1, 7))
    stamps = st.one_of(st.just(-1), st.integers(NOW - 20_000, NOW + 2000))
    segs = []
    for i in range(n):
        last = i == n - 1
        count = draw(st.integers(0 if last else 1, 6))
        size = 0 if last and count == 0 else draw(st.integers(1 if last else 0, 500))
        segs.append(Seg(count, size, draw(stamps), draw(st.integers(NOW - 20_000, NOW + 2000))))
    base = draw(st.integers(0, 50))
    total = sum(s.size for s in segs)
    cfg = dataclasses.replace(
        _BASE_CONFIG,
        cleanup_policy=draw(st.sampled_from(_POLICIES)),
        retention_ms=draw(st.one_of(st.just(-1), st.just(0), st.integers(0, 20_000))),
        retention_bytes=draw(st.one_of(st.just(-1), st.integers(0, total + 50))),
    )
    leo = base + sum(s.count for s in segs)
    hw = draw(st.one_of(st.just(leo), st.integers(base, leo)))  # HW = LEO half the time
    start = draw(st.one_of(st.just(base), st.integers(base, hw)))
    return make_log(segs, cfg, base=base, log_start=start, hw=hw)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_property_plan_is_a_prefix_below_the_high_watermark_and_idempotent(log: LogSnapshot) -> None:
    plan = plan_retention(log, NOW)
    n = len(plan.segments)
    # a prefix of the snapshot's segments, with their offsets and sizes
    assert [(d.base_offset, d.next_offset, d.size_bytes) for d in plan.segments] == \
        [(s.base_offset, s.next_offset, s.size_bytes) for s in log.segments[:n]]
    assert all(d.next_offset <= log.high_watermark for d in plan.segments)
    assert plan.bytes == sum(s.size_bytes for s in log.segments[:n])
    assert plan.roll_first is (n == len(log.segments))
    expected_start = log.segments[n].base_offset if n < len(log.segments) else log.log_end_offset
    if n:
        assert plan.log_start_offset_after == max(log.log_start_offset, expected_start)
    else:
        assert plan.log_start_offset_after == log.log_start_offset
    assert plan.log_start_offset_after <= log.high_watermark
    if "delete" not in log.config.cleanup_policy:
        assert set(reasons(plan)) <= {LSO} and "policy" in kinds(plan)
    # the independent model of Kafka agrees segment by segment, reason by reason
    deleted, rolled, start = kafka_model(log, NOW)
    assert [(d.base_offset, d.reason) for d in plan.segments] == deleted
    assert (plan.roll_first, plan.log_start_offset_after) == (rolled, start)
    # re-planning the log that results deletes nothing: not by log start, not at all
    again = plan_retention(apply(log, plan), NOW)
    assert LSO not in reasons(again)
    assert again.empty
