"""Retention walks a ``RetentionSource``, which reads a segment's size or largest timestamp, or the log
end offset, only when the planner asks; the plan over it must be the plan over a full snapshot of the
same files, whatever the config, the checkpoints and the clock, and it reads no more than the walk
needs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import KafkaLogError, UnknownFileError
from kafkalog.log import checkpoint, names, snapshot
from kafkalog.log.config import BrokerConfig, LogConfig
from kafkalog.log.local_log import LocalLog
from kafkalog.log.snapshot import LogDirCheckpoints, RetentionSource, snapshot_log
from kafkalog.policy.retention import plan_retention

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


def build(log_dir: Path, segment_hours: list[int], empty_active: bool) -> None:
    """Partition ``t-0`` with one segment of three records per entry, stamped T0 + that many hours."""
    config = LogConfig.resolve(BrokerConfig.from_properties({}), {})
    (log_dir / "t-0").mkdir()
    log = LocalLog.open(log_dir / "t-0", config)
    for i, hours in enumerate(segment_hours):
        log.append_records([(b"k", b"v%d" % i, (), T0 + hours * HOUR_MS + j) for j in range(3)], now_ms=T0)
        if i < len(segment_hours) - 1 or empty_active:
            log.roll()
    log.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment_hours=st.lists(st.integers(0, 12), min_size=1, max_size=6), empty_active=st.booleans(),
       retention_hours=st.sampled_from([-1, 0, 1, 3, 6, 100]), retention_bytes=st.sampled_from([-1, 0, 100, 400]),
       policy=st.sampled_from(["delete", "compact", "compact,delete"]),
       log_start=st.none() | st.integers(0, 24), high_watermark=st.none() | st.integers(0, 24),
       now_hours=st.integers(0, 30))
def test_a_retention_source_plans_what_a_full_snapshot_plans(
        segment_hours: list[int], empty_active: bool, retention_hours: int, retention_bytes: int, policy: str,
        log_start: int | None, high_watermark: int | None, now_hours: int) -> None:
    log_dir = Path(tempfile.mkdtemp())
    try:
        build(log_dir, segment_hours, empty_active)
        if log_start is not None:
            checkpoint.write_offset_checkpoint(log_dir / names.LOG_START_OFFSET_CHECKPOINT, {("t", 0): log_start})
        if high_watermark is not None:
            checkpoint.write_offset_checkpoint(log_dir / names.REPLICATION_OFFSET_CHECKPOINT,
                                               {("t", 0): high_watermark})
        config = LogConfig.resolve(BrokerConfig.from_properties({}), {
            "retention.ms": str(retention_hours * HOUR_MS if retention_hours >= 0 else -1),
            "retention.bytes": str(retention_bytes), "cleanup.policy": policy})
        now_ms = T0 + now_hours * HOUR_MS
        checkpoints = LogDirCheckpoints.read(log_dir)
        log_end = 3 * len(segment_hours)
        if log_start is not None and log_start > log_end:  # refused by both, whatever retention would read
            with pytest.raises(KafkaLogError, match="log start offset checkpoint"):
                snapshot_log(log_dir, "t", 0, config, checkpoints)
            with pytest.raises(KafkaLogError, match="log start offset checkpoint"):
                RetentionSource(log_dir, "t", 0, config, checkpoints)
            return
        full = snapshot_log(log_dir, "t", 0, config, checkpoints)
        assert full.log_end_offset == log_end
        with RetentionSource(log_dir, "t", 0, config, checkpoints) as lean:
            assert plan_retention(lean, now_ms) == plan_retention(full, now_ms)
            assert list(lean.bases) == [s.base_offset for s in full.segments]
            assert lean.log_start_offset == full.log_start_offset
            # What the walk did not read is still the snapshot's when asked.
            assert (lean.high_watermark(), lean.log_end_offset()) == (full.high_watermark, full.log_end_offset)
            assert [lean.largest_timestamp(i)[0] for i in range(len(lean.bases))] == \
                [s.largest_timestamp_ms for s in full.segments]
    finally:
        shutil.rmtree(log_dir)


def test_the_walk_reads_no_log_end_while_the_oldest_segment_is_unexpired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path, [0, 1, 2, 3], empty_active=True)
    framed: list[str] = []
    timed: list[str] = []
    frame_log_tail, largest_timestamp = snapshot._frame_log_tail, snapshot._largest_timestamp
    monkeypatch.setattr(snapshot, "_frame_log_tail", lambda *args: framed.append(args[1]) or frame_log_tail(*args))
    monkeypatch.setattr(snapshot, "_largest_timestamp",
                        lambda *args: timed.append(args[1]) or largest_timestamp(*args))
    config = LogConfig.resolve(BrokerConfig.from_properties({}), {"retention.ms": str(2 * HOUR_MS)})
    with RetentionSource(tmp_path, "t", 0, config, LogDirCheckpoints.read(tmp_path)) as lean:
        plan = plan_retention(lean, T0 + 2 * HOUR_MS)
        assert plan.segments == ()
        assert [b.kind for b in plan.blocked_by] == ["unlimited", "retention.ms"]
        assert (framed, timed) == ([], [f"{0:020d}"])  # the oldest segment's time index, nothing else
        assert lean.high_watermark_reaches(12)  # the last segment's base: every other segment ends at or below
        assert framed == []
        assert not lean.high_watermark_reaches(13) and framed == [f"{12:020d}"]  # past it, the end is read once
        assert lean.log_end_offset() == 12 and framed == [f"{12:020d}"]
    assert framed == [f"{12:020d}"]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_segment_name_on_anything_but_a_regular_file_is_refused_even_where_retention_reads_nothing(
        tmp_path: Path, kind: str) -> None:
    build(tmp_path, [0, 1, 2, 3], empty_active=True)
    odd = tmp_path / "t-0" / names.log_file(Path(), 5).name  # between segments no plan reaches
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "symlink":
        odd.symlink_to(tmp_path / "t-0" / names.log_file(Path(), 0).name)
    else:
        odd.mkdir()
    config = LogConfig.resolve(BrokerConfig.from_properties({}), {"retention.ms": str(2 * HOUR_MS)})
    with pytest.raises(UnknownFileError, match=f"{odd.name}: not a regular file"):
        RetentionSource(tmp_path, "t", 0, config, LogDirCheckpoints.read(tmp_path))
