"""The partition layouts on which kafkalog diverged from Kafka's own tests (issue #34, points 1-4),
built in a log dir with the conformance harness: the divergence tests clean them one surface at a
time, and the pipeline tests put them all in one store for a whole cycle."""

from __future__ import annotations

from pathlib import Path

from kafka_log import MAX_INT, ScenarioLog

from kafkalog.format.batch import ControlType


def transaction_spanning_segments(log_dir: Path, kind: ControlType, topic: str = "t") -> ScenarioLog:
    """Point 1: producer 1's transactional record at 0 in one segment, its marker at 1 in the next,
    the active segment at 2; ``segment.bytes=128`` makes each segment a cleaning group of its own."""
    log = ScenarioLog(log_dir, topic, cleanup_policy="compact", segment_bytes=128)
    log.txn(1, [("1", "x")])
    log.roll()
    log.marker(kind, 1)
    log.roll()
    return log


def abort_of_a_transaction_opened_earlier(log_dir: Path, topic: str = "t") -> ScenarioLog:
    """Point 2: the same with an ABORT marker, and no ``.txnindex`` files (Kafka writes them lazily,
    so a directory may have none): recovery must rebuild the marker's entry from the producer state
    at its segment's base."""
    log = transaction_spanning_segments(log_dir, ControlType.ABORT, topic)
    for path in log.directory.glob("*.txnindex"):
        path.unlink()
    return log


def group_span_beyond_max_int(log_dir: Path, topic: str = "t") -> ScenarioLog:
    """Point 3: segments at 0, 2^30 and 2^31-10 (holding 2^31+50), the active one at 2^31+100: the
    first two may be cleaned into one segment, the third may not join them."""
    log = ScenarioLog(log_dir, topic, cleanup_policy="compact")
    log.append([("a", "1")])
    log.roll(2**30)
    log.append([("b", "1")], base_offset=2**30)
    log.roll(2**31 - 10)
    log.append([("c", "1")], base_offset=2**31 + 50)
    log.roll(2**31 + 100)
    log.append([("d", "1")], base_offset=2**31 + 100)
    return log


def sparse_offsets_and_empty_segments(log_dir: Path, topic: str = "t") -> ScenarioLog:
    """Point 4 (Kafka's testSegmentGroupingWithSparseOffsetsAndEmptySegments): segments at 0, 2^31
    and 2^32, each with "key" at its base and at its base + 2^31-1, the active one at 3 * 2^31. A
    round empties the first two; the next cleans the two empty segments into one."""
    log = ScenarioLog(log_dir, topic, cleanup_policy="compact")
    for i in range(3):
        base = i * 2**31
        if i:
            log.roll(base)
        log.append([("key", "val")], base_offset=base)
        log.append([("key", "val")], base_offset=base + MAX_INT)
    log.roll(3 * 2**31)
    log.append([("key", "val")], base_offset=3 * 2**31)
    return log
