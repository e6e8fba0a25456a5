"""Table-driven tests of the pure compaction selector against spec §8.2, §8.3, §8.8 and §5.4.

Every scenario is a hand-built ``LogSnapshot`` (no filesystem) planned at a fixed ``NOW``. The
LogCleanerManagerTest scenarios of spec §15 items 37–48 are ported as tables: where Kafka appends
single-record batches and rolls, the resulting segments are written out directly with ``R`` bytes
per batch.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import ConfigError, KafkaLogError
from kafkalog.log.config import BrokerConfig, LogConfig
from kafkalog.log.snapshot import LogSnapshot, SegmentSnapshot
from kafkalog.policy.compaction import (
    MAX_LONG,
    CheckpointReset,
    CompactionPlan,
    NotSelected,
    cleanable_range,
    dirty_ratio,
    log_to_clean,
    max_compaction_delay_ms,
    select_logs_to_clean,
)

NOW = 1_400_000_000_000  # Kafka's MockTime start in LogCleanerManagerTest
SECOND, HOUR, DAY = 1000, 3_600_000, 86_400_000
LAG = HOUR  # the compactionLag of Kafka's min.compaction.lag tests
R = 70  # bytes of one single-record batch
OLD = NOW - 30 * DAY


# --- builders ---------------------------------------------------------------------------------------


def config(**topic: object) -> LogConfig:
    """``LogConfig.resolve`` with topic overrides as ``min_cleanable_dirty_ratio=...``; compact by default."""
    topic.setdefault("cleanup_policy", "compact")
    overrides = {name.replace("_", "."): str(value) for name, value in topic.items()}
    return LogConfig.resolve(BrokerConfig.from_properties({}), overrides)


LOW_RATIO = config(min_cleanable_dirty_ratio=0.05)  # Kafka's createLowRetentionLogConfig


@dataclasses.dataclass(frozen=True)
class Seg:
    """One segment of a table row: offsets it spans, bytes, time-index max, mtime, first batch timestamp."""

    count: int
    size: int
    ts: int = -1
    mtime: int = OLD
    first_ts: int = MAX_LONG


def make_log(segs: Sequence[Seg], cfg: LogConfig = LOW_RATIO, *, checkpoint: int | None = None,
             log_start: int | None = None, hw: int | None = None, lso: int | None = None, topic: str = "t",
             partition: int = 0, base: int = 0) -> LogSnapshot:
    """The last of ``segs`` is the active segment. HW defaults to the log end, the LSO to the HW."""
    segments, offset = [], base
    for s in segs:
        segments.append(SegmentSnapshot(offset, offset + s.count, s.size, s.ts, s.mtime,
                                        first_batch_timestamp_ms=s.first_ts, offset_index_bytes=0,
                                        time_index_bytes=0))
        offset += s.count
    hw = offset if hw is None else hw
    return LogSnapshot(topic=topic, partition=partition, log_dir=Path("/nonexistent"), config=cfg,
                       segments=tuple(segments), log_start_offset=base if log_start is None else log_start,
                       log_end_offset=offset, high_watermark=hw, pending_delete_bytes=0,
                       last_stable_offset=hw if lso is None else lso, cleaner_checkpoint=checkpoint)


def filthy(num_batches: int, **ts: int) -> list[Seg]:
    """Kafka's ``writeRecords(numBatches, recordsPerBatch = 1, batchesPerSegment = 5)``: a roll after
    batches 0, 5, 10, … and one at the end, leaving an empty active segment at the log end."""
    counts, current = [], 0
    for i in range(num_batches):
        current += 1
        if i % 5 == 0:
            counts.append(current)
            current = 0
    if current:
        counts.append(current)
    return [Seg(c, c * R, **ts) for c in counts] + [Seg(0, 0)]


def twelve(n: int, size: int = 100, **kw: int) -> list[Seg]:
    """``n`` segments of 12 offsets each, the last active (Kafka's 1024-byte segments, roughly)."""
    return [Seg(12, size, **kw) for _ in range(n)]


def reasons(plan: CompactionPlan) -> dict[tuple[str, int], str]:
    return {(n.topic, n.partition): n.kind for n in plan.not_selected}


def not_selected(plan: CompactionPlan, topic: str = "t", partition: int = 0) -> NotSelected:
    [found] = [n for n in plan.not_selected if (n.topic, n.partition) == (topic, partition)]
    return found


def order(plan: CompactionPlan) -> list[tuple[str, int]]:
    return [(c.topic, c.partition) for c in plan.selected]


def test_filthy_builder_matches_kafkas_roll_points() -> None:
    log = make_log(filthy(20))
    assert [(s.base_offset, s.next_offset) for s in log.segments] == [
        (0, 1), (1, 6), (6, 11), (11, 16), (16, 20), (20, 20)]
    assert [s.base_offset for s in make_log(filthy(25)).segments] == [0, 1, 6, 11, 16, 21, 25]


# --- cleanable range (cleanableOffsets) -------------------------------------------------------------

T0 = NOW - LAG - 1  # Kafka: records appended at t0, then time.sleep(compactionLag + 1)
LAGGED = config(min_compaction_lag_ms=LAG)


@pytest.mark.parametrize(("segs", "kw", "now", "expected"), [
    # testCleanableOffsetsForNone: HW 50 (no transactions, so LSO = HW) bounds the range, unaligned
    pytest.param(twelve(8), dict(checkpoint=0, hw=50), NOW, (0, 50, False, "high-watermark"), id="ForNone"),
    # testCleanableOffsetsActiveSegment: HW = LEO, the active segment bounds it
    pytest.param(twelve(8), dict(checkpoint=0), NOW, (0, 84, False, "active-segment"), id="ActiveSegment"),
    # testCleanableOffsetsForTime: segments 0-2 hold t0 records; segment 3 (active at t0) and later got
    # records at t1 = now, so segment 3 is the first within the lag
    pytest.param([Seg(12, 100, T0)] * 3 + [Seg(12, 100, NOW)] * 5, dict(checkpoint=0, cfg=LAGGED), NOW,
                 (0, 36, False, "min-compaction-lag"), id="ForTime"),
    # testCleanableOffsetsForShortTime: every segment older than the lag, only the active one bounds
    pytest.param(twelve(8, ts=T0), dict(checkpoint=0, cfg=LAGGED), NOW, (0, 84, False, "active-segment"),
                 id="ForShortTime"),
    # the lag comparison is strict: largestTimestamp > now - lag is uncleanable, == is cleanable
    pytest.param([Seg(12, 100, NOW - LAG), Seg(12, 100, NOW - LAG + 1), Seg(1, 10)], dict(cfg=LAGGED), NOW,
                 (0, 12, False, "min-compaction-lag"), id="lag-boundary"),
    # no time index entry: the mtime is the largest timestamp (§5.4)
    pytest.param([Seg(12, 100, -1, mtime=NOW - LAG - 1), Seg(12, 100, -1, mtime=NOW - 5), Seg(1, 10)],
                 dict(cfg=LAGGED), NOW, (0, 12, False, "min-compaction-lag"), id="lag-mtime"),
    # the lag search starts at the segment holding the first dirty offset: a young segment before it
    # does not hold the range back
    pytest.param([Seg(12, 100, NOW), Seg(12, 100, T0), Seg(1, 10)], dict(checkpoint=12, cfg=LAGGED), NOW,
                 (12, 24, False, "active-segment"), id="lag-before-dirty"),
    # min.compaction.lag.ms = 0 (default): young segments are cleanable
    pytest.param(twelve(3, ts=NOW), dict(), NOW, (0, 24, False, "active-segment"), id="no-lag"),
    # testUndecidedTransactionalDataNotCleanable: an open transaction from offset 0, rolled, HW 3: the
    # lag has passed, but the LSO pins the range empty
    pytest.param([Seg(3, 150, T0), Seg(0, 0)], dict(checkpoint=0, hw=3, lso=0, cfg=LAGGED), NOW,
                 (0, 0, False, "open-transaction"), id="Undecided-open"),
    # … after the abort marker at 3 (written now) and a roll, HW 4: the first segment is cleanable at once
    pytest.param([Seg(3, 150, T0), Seg(1, 80, NOW), Seg(0, 0)], dict(checkpoint=0, cfg=LAGGED), NOW,
                 (0, 3, False, "min-compaction-lag"), id="Undecided-aborted"),
    # … and the marker's segment once the lag has passed
    pytest.param([Seg(3, 150, T0), Seg(1, 80, NOW - LAG - 1), Seg(0, 0)], dict(checkpoint=0, cfg=LAGGED),
                 NOW, (0, 4, False, "active-segment"), id="Undecided-after-lag"),
    # LSO below the active base with no lag at all
    pytest.param(twelve(4), dict(lso=20, hw=40), NOW, (0, 20, False, "open-transaction"), id="lso-below-active"),
    # ties: an LSO equal to the active base is explained by the active segment, one equal to the lag bound
    # by the transaction (it outlives the lag)
    pytest.param(twelve(4), dict(hw=36), NOW, (0, 36, False, "active-segment"), id="tie-lso-active"),
    pytest.param([Seg(12, 100, T0), Seg(12, 100, NOW), Seg(12, 100, NOW), Seg(5, 10)],
                 dict(lso=12, cfg=LAGGED), NOW, (0, 12, False, "open-transaction"), id="tie-lso-lag"),
    # testDirtyOffsetResetIfSmallerThanStartOffset: log start 10, checkpoint 0 → 10, checkpoint rewritten
    pytest.param(filthy(20), dict(checkpoint=0, log_start=10), NOW, (10, 20, True, "active-segment"),
                 id="ResetIfSmallerThanStart"),
    # testDirtyOffsetResetIfLargerThanEndOffset: checkpoint 200 > LEO 20 → log start 0
    pytest.param(filthy(20), dict(checkpoint=200), NOW, (0, 20, True, "active-segment"),
                 id="ResetIfLargerThanEnd"),
    # testCleanableOffsetsNeedsCheckpointReset: valid 15 with log start 10; 15 below log start 20; 25 > LEO
    pytest.param(filthy(20), dict(checkpoint=15, log_start=10), NOW, (15, 20, False, "active-segment"),
                 id="NeedsReset-valid"),
    pytest.param(filthy(20), dict(checkpoint=15, log_start=20), NOW, (20, 20, True, "active-segment"),
                 id="NeedsReset-below-start"),
    pytest.param(filthy(20), dict(checkpoint=25, log_start=20), NOW, (20, 20, True, "active-segment"),
                 id="NeedsReset-past-end"),
    # a checkpoint exactly at the log end or log start is valid; none at all means the log start
    pytest.param(filthy(20), dict(checkpoint=20), NOW, (20, 20, False, "active-segment"), id="at-end"),
    pytest.param(filthy(20), dict(checkpoint=10, log_start=10), NOW, (10, 20, False, "active-segment"),
                 id="at-start"),
    pytest.param(filthy(20), dict(log_start=6), NOW, (6, 20, False, "active-segment"), id="no-checkpoint"),
    # testLogStartOffsetLargerThanActiveSegmentBaseOffset: one segment of 9 offsets, log start 2, checkpoint 0
    pytest.param([Seg(9, 3 * R)], dict(checkpoint=0, log_start=2), NOW, (2, 2, True, "active-segment"),
                 id="LogStartLargerThanActiveBase"),
    # testDirtyOffsetLargerThanActiveSegmentBaseOffset: one segment of 6 offsets, checkpoint 3
    pytest.param([Seg(6, 2 * R)], dict(checkpoint=3), NOW, (3, 3, False, "active-segment"),
                 id="DirtyOffsetLargerThanActiveBase"),
])
def test_cleanable_range(segs, kw, now, expected) -> None:
    cfg = kw.pop("cfg", LOW_RATIO)
    span = cleanable_range(make_log(segs, cfg, **kw), now)
    assert (span.first_dirty_offset, span.first_uncleanable_offset, span.checkpoint_reset,
            span.limited_by) == expected
    assert (span.reset_reason is None) is not span.checkpoint_reset


def test_reset_reasons_name_the_checkpoint_and_the_bound() -> None:
    below = cleanable_range(make_log(filthy(20), checkpoint=15, log_start=20), NOW)
    assert below.reset_reason == "cleaner checkpoint 15 is below the log start offset 20"
    past = cleanable_range(make_log(filthy(20), checkpoint=25), NOW)
    assert past.reset_reason == "cleaner checkpoint 25 is past the log end offset 20"
    # compact,delete moves the log start past the checkpoint routinely: Kafka suppresses the warning (§8.8)
    both = cleanable_range(make_log(filthy(20), config(cleanup_policy="compact,delete"), checkpoint=15,
                                    log_start=20), NOW)
    assert both.checkpoint_reset
    assert both.reset_reason == "cleaner checkpoint 15 is below the log start offset 20 (expected with compact,delete)"


def test_last_stable_offset_below_the_log_start_offset_counts_from_the_log_start() -> None:
    """Kafka's first unstable offset never lies below the log start offset: a transaction opened in
    records since deleted holds the range at the log start, and the reason says so (whether or not
    the snapshot was bounded already; ``snapshot_for_compaction`` bounds it)."""
    for lso in (5, 14):
        span = cleanable_range(make_log(twelve(4), checkpoint=0, log_start=14, lso=lso), NOW)
        assert (span.first_dirty_offset, span.first_uncleanable_offset, span.limited_by) == (14, 14, "open-transaction")
        assert span.limit_detail == "a transaction open since offset 14 holds the last stable offset there"
    # the log start at a segment base: the range is empty there
    span = cleanable_range(make_log(twelve(4), log_start=24, lso=5), NOW)
    assert (span.first_dirty_offset, span.first_uncleanable_offset) == (24, 24)


def test_limit_details_say_what_holds_the_range_back() -> None:
    lag = cleanable_range(make_log([Seg(12, 100, T0), Seg(12, 100, NOW - 5), Seg(1, 10)], LAGGED), NOW)
    assert lag.limit_detail == (f"segment 12 has newest timestamp {NOW - 5} (time-index), within "
                                f"min.compaction.lag.ms={LAG}; cleanable from {NOW - 5 + LAG}")
    txn = cleanable_range(make_log(twelve(4), lso=20, hw=40), NOW)
    assert txn.limit_detail == "a transaction open since offset 20 holds the last stable offset there"
    hw = cleanable_range(make_log(twelve(4), hw=20), NOW)
    assert hw.limited_by == "high-watermark" and "high watermark 20" in hw.limit_detail


# --- byte accounting (LogToClean) -------------------------------------------------------------------


@pytest.mark.parametrize(("segs", "kw", "expected"), [
    # a segment straddling the first dirty offset (15 in [10,20)) counts as clean and as cleanable
    pytest.param([Seg(10, 100), Seg(10, 200), Seg(10, 400), Seg(5, 50)], dict(checkpoint=15),
                 (15, 30, 300, 600, 900), id="straddling"),
    # a checkpoint on a segment boundary splits the bytes cleanly
    pytest.param([Seg(10, 100), Seg(10, 200), Seg(10, 400), Seg(5, 50)], dict(checkpoint=10),
                 (10, 30, 100, 600, 700), id="aligned"),
    # the LSO (HW 50) inside segment 48: aligned down, so that segment is not cleanable
    pytest.param(twelve(8), dict(hw=50), (0, 48, 0, 400, 400), id="ForNone-aligned"),
    # the first dirty offset and the LSO in the same segment: nothing cleanable; that segment is clean
    pytest.param(twelve(8), dict(checkpoint=49, hw=50), (49, 48, 500, 0, 500), id="dirty-and-lso-same-segment"),
    # the first dirty offset inside the active segment: the active segment's bytes count as clean
    pytest.param([Seg(6, 2 * R)], dict(checkpoint=3), (3, 0, 2 * R, 0, 2 * R), id="dirty-in-active"),
    # log start 10 inside [6,11): testDirtyOffsetResetIfSmallerThanStartOffset's bytes
    pytest.param(filthy(20), dict(checkpoint=0, log_start=10), (10, 20, 11 * R, 14 * R, 25 * R), id="reset-10"),
    # empty segments weigh nothing
    pytest.param([Seg(5, 0), Seg(5, 0), Seg(0, 0)], dict(), (0, 10, 0, 0, 0), id="empty"),
])
def test_byte_accounting(segs, kw, expected) -> None:
    c = log_to_clean(make_log(segs, **kw), NOW)
    assert (c.first_dirty_offset, c.first_uncleanable_offset, c.clean_bytes, c.cleanable_bytes,
            c.total_bytes) == expected
    assert c.dirty_ratio == (c.cleanable_bytes / c.total_bytes if c.total_bytes else 0.0)


def test_straddling_segment_is_counted_twice() -> None:
    log = make_log([Seg(10, 100), Seg(10, 200), Seg(10, 400), Seg(5, 50)], checkpoint=15)
    c = log_to_clean(log, NOW)
    assert c.clean_bytes + c.cleanable_bytes == 900 > 700  # more than the non-active segments hold
    assert c.dirty_ratio == pytest.approx(600 / 900)
    assert dirty_ratio(log, NOW) == c.dirty_ratio


# --- max.compaction.lag.ms (maxCompactionDelay) -----------------------------------------------------

MAXLAG = config(max_compaction_lag_ms=HOUR)


@pytest.mark.parametrize(("first_stamps", "cfg", "first_dirty", "expected"), [
    pytest.param([NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - 9 * HOUR], LOW_RATIO, 0, 0, id="default-never"),
    # the earliest non-active dirty segment: 3h old against a 1h lag → 2h overdue
    pytest.param([NOW - 2 * HOUR, NOW - 3 * HOUR, NOW], MAXLAG, 0, 2 * HOUR, id="earliest"),
    # strictly before cleanUntil = now - lag
    pytest.param([NOW - HOUR, NOW, NOW], MAXLAG, 0, 0, id="at-clean-until"),
    pytest.param([NOW - HOUR - 1, NOW, NOW], MAXLAG, 0, 1, id="just-before"),
    # non-positive stamps and MAX_LONG (an empty segment) say nothing
    pytest.param([-1, 0, MAX_LONG, NOW - 2 * HOUR, NOW], MAXLAG, 0, HOUR, id="filtered"),
    pytest.param([-1, MAX_LONG, NOW], MAXLAG, 0, 0, id="all-filtered"),
    # segments before the one holding the first dirty offset are clean: not counted …
    pytest.param([NOW - 9 * HOUR, NOW - 2 * HOUR, NOW], MAXLAG, 10, HOUR, id="before-dirty"),
    # … but the one holding it is (first dirty 5 in [0,10))
    pytest.param([NOW - 9 * HOUR, NOW - 2 * HOUR, NOW], MAXLAG, 5, 8 * HOUR, id="straddling"),
    # the active segment never is
    pytest.param([NOW, NOW, NOW - 9 * HOUR], MAXLAG, 0, 0, id="active-ignored"),
])
def test_max_compaction_delay(first_stamps, cfg, first_dirty, expected) -> None:
    log = make_log([Seg(10, 100, first_ts=t) for t in first_stamps], cfg)
    assert max_compaction_delay_ms(log, first_dirty, NOW) == expected


def test_max_compaction_lag_forces_cleaning_below_the_ratio() -> None:
    # clean 400, cleanable 100: ratio 0.2, below the default 0.5
    segs = [Seg(10, 400, first_ts=NOW - DAY), Seg(10, 100, first_ts=NOW - 2 * HOUR), Seg(1, 10)]
    overdue = make_log(segs, MAXLAG, checkpoint=10, topic="overdue")
    plan = select_logs_to_clean([overdue, dataclasses.replace(overdue, config=config(), topic="patient")], NOW)
    [c] = plan.selected
    assert (c.topic, c.dirty_ratio, c.trigger) == ("overdue", 0.2, "max-compaction-lag")
    assert c.needs_compaction_now and c.max_compaction_delay_ms == HOUR  # segment 0 is clean: not counted
    patient = not_selected(plan, "patient")
    assert patient.kind == "below-min-cleanable-dirty-ratio"
    assert patient.detail == "dirty ratio 0.2000 (100 of 500 bytes) is not above min.cleanable.dirty.ratio=0.5"
    assert patient.log is not None and not patient.log.needs_compaction_now


def test_max_compaction_lag_needs_cleanable_bytes() -> None:
    # overdue, but an open transaction from offset 10 leaves nothing cleanable
    segs = [Seg(10, 400), Seg(10, 100, first_ts=NOW - 2 * HOUR), Seg(1, 10)]
    plan = select_logs_to_clean([make_log(segs, MAXLAG, checkpoint=10, lso=10, hw=21)], NOW)
    assert plan.selected == ()
    why = not_selected(plan)
    assert why.kind == "open-transaction"
    assert why.log is not None and why.log.needs_compaction_now and why.log.cleanable_bytes == 0
    assert why.detail.endswith(f"max.compaction.lag.ms is overdue by {HOUR} ms but nothing is cleanable")


# --- selection (grabFilthiestCompactedLog) ----------------------------------------------------------


def test_filthiest_log_first() -> None:
    # testGrabFilthiestCompactedLogReturnsLogWithDirtiestRatio: cleanable ranges [20,20], [20,25], [20,30]
    logs = [make_log(filthy(n), checkpoint=20, topic="wishing-well", partition=p)
            for p, n in enumerate([20, 25, 30])]
    plan = select_logs_to_clean(logs, NOW)
    assert order(plan) == [("wishing-well", 2), ("wishing-well", 1)]
    # [16,21) straddles offset 20: its 5 batches are clean and cleanable
    assert [(c.clean_bytes, c.cleanable_bytes, c.first_uncleanable_offset) for c in plan.selected] == [
        (21 * R, 14 * R, 30), (21 * R, 9 * R, 25)]
    assert [c.dirty_ratio for c in plan.selected] == [0.4, 0.3]
    assert [c.trigger for c in plan.selected] == ["dirty-ratio"] * 2
    assert reasons(plan) == {("wishing-well", 0): "nothing-to-clean"}
    assert plan.checkpoint_resets == () and plan.now_ms == NOW
    assert plan.cleanable_bytes == 23 * R


@pytest.mark.parametrize(("threshold", "selected"), [
    (0.5, False),  # ratio == threshold: not selected (strictly greater)
    (0.4999, True),
    (0.0, True),
    (1.0, False),
])
def test_ratio_must_be_strictly_above_min_cleanable_dirty_ratio(threshold, selected) -> None:
    log = make_log([Seg(10, 100), Seg(10, 100), Seg(1, 10)], config(min_cleanable_dirty_ratio=threshold),
                   checkpoint=10)
    plan = select_logs_to_clean([log], NOW)
    assert log_to_clean(log, NOW).dirty_ratio == 0.5
    assert bool(plan.selected) is selected
    if not selected:
        why = not_selected(plan)
        assert why.kind == "below-min-cleanable-dirty-ratio"
        assert f"dirty ratio 0.5000 (100 of 200 bytes) is not above min.cleanable.dirty.ratio={threshold:g}" \
            == why.detail


@pytest.mark.parametrize(("segs", "kw", "kind", "detail"), [
    pytest.param(twelve(3), dict(cfg=config(cleanup_policy="delete")), "policy",
                 "cleanup.policy=delete does not include compact", id="delete-only"),
    pytest.param([Seg(5, 0), Seg(5, 0), Seg(0, 0)], {}, "nothing-to-clean",
                 "no bytes below the first uncleanable offset 10", id="empty"),
    pytest.param(filthy(20), dict(checkpoint=20), "nothing-to-clean",
                 "every offset below the log end offset 20 is clean (first dirty offset 20)", id="all-clean"),
    pytest.param([Seg(6, 2 * R)], dict(checkpoint=3), "active-segment",
                 "only the active segment (base 0) is dirty, from offset 3", id="only-active"),
    pytest.param([Seg(10, 100), Seg(10, 100)], dict(checkpoint=10), "active-segment",
                 "only the active segment (base 10) is dirty, from offset 10", id="only-active-boundary"),
    pytest.param([Seg(10, 100, T0), Seg(10, 100, NOW - 5), Seg(1, 10)], dict(checkpoint=10, cfg=LAGGED),
                 "min-compaction-lag",
                 f"segment 10 has newest timestamp {NOW - 5} (time-index), within min.compaction.lag.ms={LAG}; "
                 f"cleanable from {NOW - 5 + LAG}, so nothing from the first dirty offset 10 is cleanable",
                 id="min-lag"),
    pytest.param([Seg(10, 100), Seg(10, 100), Seg(1, 10)], dict(checkpoint=10, lso=12, hw=21),
                 "open-transaction", "a transaction open since offset 12 holds the last stable offset there, so "
                 "nothing from the first dirty offset 10 is cleanable", id="open-transaction"),
    pytest.param([Seg(10, 100), Seg(10, 100), Seg(1, 10)], dict(checkpoint=10, hw=15), "high-watermark",
                 "the high watermark 15 (the last stable offset) bounds what is committed, so nothing from the "
                 "first dirty offset 10 is cleanable", id="high-watermark"),
])
def test_every_unselected_log_says_why(segs, kw, kind, detail) -> None:
    cfg = kw.pop("cfg", LOW_RATIO)
    plan = select_logs_to_clean([make_log(segs, cfg, **kw)], NOW)
    assert plan.selected == ()
    why = not_selected(plan)
    assert (why.kind, why.detail) == (kind, detail)
    assert str(why) == f"{kind}: {detail}"
    assert (why.log is None) is (kind == "policy")


def test_single_active_segment_is_never_cleanable() -> None:
    # testLogStartOffsetLargerThanActiveSegmentBaseOffset: not selected, yet its checkpoint is rewritten
    plan = select_logs_to_clean([make_log([Seg(9, 3 * R)], checkpoint=0, log_start=2)], NOW)
    assert plan.selected == ()
    assert not_selected(plan).kind == "active-segment"
    assert plan.checkpoint_resets == (CheckpointReset("t", 0, 2),)


@pytest.mark.parametrize(("policy", "candidate"), [
    ("delete", False), ("compact", True), ("compact,delete", True), ("Delete, COMPACT", True)])
def test_only_compacted_logs_are_candidates(policy, candidate) -> None:
    # testLogsWithSegmentsToDeleteShouldNotConsider…Delete / …CompactDelete / …Compact
    log = make_log(filthy(25), config(cleanup_policy=policy, min_cleanable_dirty_ratio=0.05), checkpoint=20)
    plan = select_logs_to_clean([log], NOW)
    assert bool(plan.selected) is candidate
    assert (reasons(plan) == {("t", 0): "policy"}) is not candidate


@pytest.mark.parametrize(("broker", "key"), [({"log.cleaner.enable": "false"}, "log.cleaner.enable=false"),
                                             ({"log.cleaner.threads": "0"}, "log.cleaner.threads=0")])
def test_no_log_is_selected_when_no_cleaner_runs(broker, key) -> None:
    # LogManager creates the LogCleaner only with log.cleaner.enable=true, and LogCleaner.startup starts
    # log.cleaner.threads threads: with none, no log is chosen and no checkpoint is rewritten.
    logs = [make_log(filthy(25), checkpoint=20), make_log([Seg(9, 3 * R)], checkpoint=0, log_start=2, partition=1),
            make_log(filthy(25), config(cleanup_policy="delete"), topic="d")]
    assert order(select_logs_to_clean(logs, NOW, broker=BrokerConfig.from_properties({}))) == [("t", 0)]
    plan = select_logs_to_clean(logs, NOW, broker=BrokerConfig.from_properties(broker))
    assert plan.selected == () and plan.checkpoint_resets == ()
    assert [(n.topic, n.partition, str(n), n.log) for n in plan.not_selected] == [
        ("d", 0, "policy: cleanup.policy=delete does not include compact", None),
        ("t", 0, f"cleaner-disabled: {key}: no log cleaner runs, so no log is compacted", None),
        ("t", 1, f"cleaner-disabled: {key}: no log cleaner runs, so no log is compacted", None)]


def test_compact_delete_log_below_log_start_is_reset_and_cleaned() -> None:
    log = make_log(filthy(25), config(cleanup_policy="compact,delete"), checkpoint=5, log_start=11)
    [c] = select_logs_to_clean([log], NOW).selected
    assert (c.first_dirty_offset, c.clean_bytes, c.cleanable_bytes) == (11, 11 * R, 14 * R)
    assert c.checkpoint_reset and c.reset_reason is not None and "compact,delete" in c.reset_reason


def test_checkpoint_updated_for_invalid_offset_even_without_cleaning() -> None:
    # testCheckpointUpdatedForInvalidOffsetNoCleaning: log start 20 past checkpoint 15, nothing to clean
    plan = select_logs_to_clean([make_log(filthy(20), topic="foo", checkpoint=15, log_start=20)], NOW)
    assert plan.selected == ()
    assert plan.checkpoint_resets == (CheckpointReset("foo", 0, 20),)
    assert reasons(plan) == {("foo", 0): "nothing-to-clean"}


def test_checkpoint_updated_for_invalid_offset_not_selected() -> None:
    # testCheckpointUpdatedForInvalidOffsetNotSelected: foo-1 (checkpoint 5) is dirtier than foo-0, whose
    # checkpoint 10 lies below its log start 15; with one log per cycle foo-0's checkpoint is still rewritten
    foo0 = make_log(filthy(20), topic="foo", partition=0, checkpoint=10, log_start=15)
    foo1 = make_log(filthy(25), topic="foo", partition=1, checkpoint=5)
    plan = select_logs_to_clean([foo0, foo1], NOW, max_logs=1)
    assert order(plan) == [("foo", 1)]
    assert plan.selected[0].dirty_ratio == 0.8  # 24 of 30 batches
    assert plan.checkpoint_resets == (CheckpointReset("foo", 0, 15),)
    skipped = not_selected(plan, "foo", 0)
    assert skipped.kind == "max-logs" and skipped.log is not None
    assert (skipped.log.first_dirty_offset, skipped.log.dirty_ratio) == (15, 9 / 25)


def test_ties_are_broken_by_topic_then_partition() -> None:
    segs = [Seg(10, 100), Seg(10, 300), Seg(1, 10)]
    logs = [make_log(segs, checkpoint=10, topic=t, partition=p) for t, p in [("b", 0), ("a", 1), ("a", 0)]]
    logs.append(make_log([Seg(10, 100), Seg(10, 900), Seg(1, 10)], checkpoint=10, topic="z"))
    expected = [("z", 0), ("a", 0), ("a", 1), ("b", 0)]
    for permutation in itertools.permutations(logs):
        assert order(select_logs_to_clean(permutation, NOW)) == expected


def _budget_logs() -> list[LogSnapshot]:
    """Cleanable 100, 200, 300 bytes at ratios 0.90 > 0.80 > 0.75, and one ineligible log (ratio 0.01)."""
    def log(topic: str, clean: int, cleanable: int) -> LogSnapshot:
        return make_log([Seg(10, clean), Seg(10, cleanable), Seg(1, 10)], checkpoint=10, topic=topic)
    return [log("c", 100, 300), log("a", 11, 100), log("b", 50, 200), log("d", 900, 10)]


@pytest.mark.parametrize(("budget", "max_logs", "chosen", "left_out"), [
    (None, None, ["a", "b", "c"], {}),
    (600, None, ["a", "b", "c"], {}),
    (300, None, ["a", "b"], {"c": "byte-budget"}),  # the running sum may equal the budget
    (299, None, ["a"], {"b": "byte-budget", "c": "byte-budget"}),  # no skipping ahead to smaller logs
    (50, None, ["a"], {"b": "byte-budget", "c": "byte-budget"}),  # the first is taken even if too big
    (0, None, ["a"], {"b": "byte-budget", "c": "byte-budget"}),
    (None, 2, ["a", "b"], {"c": "max-logs"}),
    (None, 0, [], {"a": "max-logs", "b": "max-logs", "c": "max-logs"}),
    (300, 1, ["a"], {"b": "max-logs", "c": "max-logs"}),
])
def test_byte_budget_and_max_logs(budget, max_logs, chosen, left_out) -> None:
    plan = select_logs_to_clean(_budget_logs(), NOW, byte_budget=budget, max_logs=max_logs)
    assert [c.topic for c in plan.selected] == chosen
    assert [c.cleanable_bytes for c in plan.selected] == [{"a": 100, "b": 200, "c": 300}[t] for t in chosen]
    assert {t: k for (t, _), k in reasons(plan).items()} == {**left_out, "d": "below-min-cleanable-dirty-ratio"}
    assert [n.topic for n in plan.not_selected] == sorted(left_out.keys() | {"d"})


def test_budget_details_name_the_log_that_did_not_fit() -> None:
    plan = select_logs_to_clean(_budget_logs(), NOW, byte_budget=250)
    assert not_selected(plan, "b").detail == \
        "its 200 cleanable bytes would bring the cycle to 300, over byte_budget=250"
    assert not_selected(plan, "c").detail.startswith("ranked after b-0, which did not fit (its 200 cleanable")
    assert not_selected(plan, "c").log == log_to_clean(_budget_logs()[0], NOW)


@pytest.mark.parametrize("kw", [dict(byte_budget=-1), dict(max_logs=-1)])
def test_negative_limits_are_rejected(kw) -> None:
    with pytest.raises(ConfigError, match=next(iter(kw))):
        select_logs_to_clean([], NOW, **kw)


def test_a_snapshot_not_taken_for_compaction_is_rejected() -> None:
    log = dataclasses.replace(make_log(twelve(3)), last_stable_offset=None)
    with pytest.raises(KafkaLogError, match="snapshot_for_compaction"):
        log_to_clean(log, NOW)


# --- properties --------------------------------------------------------------------------------------

_POLICIES = ["compact", "compact,delete", "delete"]


@st.composite
def snapshots(draw: st.DrawFn, *, checkpoint_within_active_base: bool = False) -> LogSnapshot:
    n = draw(st.integers(1, 6))
    stamps = st.one_of(st.just(-1), st.integers(NOW - 3 * HOUR, NOW + 1000))
    segs = [Seg(draw(st.integers(0 if i == n - 1 else 1, 8)), draw(st.integers(0, 400)), draw(stamps),
                draw(st.integers(NOW - 3 * HOUR, NOW)), draw(st.sampled_from([MAX_LONG, -1, NOW - 2 * HOUR, NOW])))
            for i in range(n)]  # the last is the active segment, possibly empty
    base = draw(st.integers(0, 30))
    leo = base + sum(s.count for s in segs)
    active_base = leo - segs[-1].count
    cfg = config(cleanup_policy=draw(st.sampled_from(_POLICIES)),
                 min_cleanable_dirty_ratio=draw(st.sampled_from([0, 0.1, 0.5, 0.9, 1])),
                 min_compaction_lag_ms=draw(st.sampled_from([0, HOUR])),
                 max_compaction_lag_ms=draw(st.sampled_from([HOUR, MAX_LONG])))
    # checkpoint_within_active_base: the first dirty offset (checkpoint or log start) is at most the active base
    top = active_base if checkpoint_within_active_base else leo
    start = draw(st.integers(base, top))
    hw = draw(st.integers(start, leo))
    lso = draw(st.integers(start, hw))
    checkpoint = draw(st.one_of(st.none(), st.integers(max(base - 5, 0), top if checkpoint_within_active_base
                                                       else leo + 5)))
    return make_log(segs, cfg, base=base, log_start=start, hw=hw, lso=lso, checkpoint=checkpoint,
                    topic=draw(st.sampled_from("xy")), partition=draw(st.integers(0, 3)))


def _bases(log: LogSnapshot) -> tuple[int, int]:
    return log.segments[-1].base_offset, log.log_end_offset


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_property_range_and_bytes(log: LogSnapshot) -> None:
    active_base, leo = _bases(log)
    span = cleanable_range(log, NOW)
    c = log_to_clean(log, NOW)
    assert log.log_start_offset <= span.first_dirty_offset <= leo
    # the range never reaches into the active segment unless the first dirty offset already lies there
    assert span.first_dirty_offset <= span.first_uncleanable_offset <= max(span.first_dirty_offset, active_base)
    assert span.first_uncleanable_offset <= max(span.first_dirty_offset, log.last_stable_offset)
    assert c.first_uncleanable_offset <= min(active_base, span.first_uncleanable_offset)
    assert c.clean_bytes + c.cleanable_bytes == c.total_bytes
    assert 0.0 <= c.dirty_ratio <= 1.0
    # an independent model: whole segments below the first dirty offset, whole segments overlapping
    # [first dirty, aligned uncleanable)
    fd, fu = c.first_dirty_offset, c.first_uncleanable_offset
    assert c.clean_bytes == sum(s.size_bytes for s in log.segments if s.base_offset < fd)
    assert c.cleanable_bytes == sum(s.size_bytes for s in log.segments
                                    if s.base_offset < fu and s.next_offset > min(fd, fu))
    assert c.needs_compaction_now is (c.max_compaction_delay_ms > 0)
    expected_reset = log.cleaner_checkpoint is not None and not (
        log.log_start_offset <= log.cleaner_checkpoint <= leo)
    assert c.checkpoint_reset is expected_reset


@settings(max_examples=200, deadline=None)
@given(snapshots(checkpoint_within_active_base=True))
def test_property_uncleanable_at_most_active_base(log: LogSnapshot) -> None:
    active_base, _ = _bases(log)
    span = cleanable_range(log, NOW)
    assert span.first_dirty_offset <= span.first_uncleanable_offset <= active_base


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(snapshots(), max_size=6), st.one_of(st.none(), st.integers(0, 2000)),
       st.one_of(st.none(), st.integers(0, 4)))
def test_property_plan_accounts_for_every_log(logs: list[LogSnapshot], budget: int | None,
                                              max_logs: int | None) -> None:
    plan = select_logs_to_clean(logs, NOW, byte_budget=budget, max_logs=max_logs)
    assert len(plan.selected) + len(plan.not_selected) == len(logs)
    ratios = [c.dirty_ratio for c in plan.selected]
    assert ratios == sorted(ratios, reverse=True)
    assert all(c.trigger is not None for c in plan.selected)
    if max_logs is not None:
        assert len(plan.selected) <= max_logs
    if budget is not None and len(plan.selected) > 1:
        assert plan.cleanable_bytes <= budget
    for n in plan.not_selected:
        assert n.detail and (n.log is None) is (n.kind == "policy")
        if n.log is not None:
            assert (n.log.trigger is not None) is (n.kind in ("byte-budget", "max-logs"))
    assert {(r.topic, r.partition) for r in plan.checkpoint_resets} <= {(x.topic, x.partition) for x in logs}
