"""The divergences from Kafka that its own tests found, each through the CLI and the Spark job's tasks.

``segment.bytes=128`` holds one batch a segment, so each segment is a group of its own when cleaned
(Kafka's ``groupSegmentsBySize``): state that must cross groups is exercised.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import layouts
import pytest
from kafka_log import DAY, MAX_INT, T0, ScenarioLog

from kafkalog.format.batch import ControlType

SURFACES = ["cli", "spark-tasks"]


@pytest.mark.parametrize("surface", SURFACES)
def test_committed_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCommittedTransactionSpanningSegments: the COMMIT marker of a transaction
    whose data is in an earlier group stays, and so does the data."""
    log = layouts.transaction_spanning_segments(tmp_path, ControlType.COMMIT)
    log.two_pass_clean(T0, surface=surface)
    assert log.offsets_in_log() == [0, 1]
    assert log.last_offsets_per_batch() == [0, 1]
    assert all(b.delete_horizon_ms is None for b in log.batches())  # the marker is not discardable
    # Later data and another round that covers the marker again leave it in place.
    log.append_each([("2", "y")])
    log.roll()
    log.clean(T0 + 3 * DAY, surface=surface)
    assert log.offsets_in_log() == [0, 1, 2]


@pytest.mark.parametrize("surface", SURFACES)
def test_aborted_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testAbortedTransactionSpanningSegments: the aborted data goes but its batch stays
    empty (the producer's last), and the ABORT marker stays with its ``.txnindex`` entry because that
    batch of its transaction is still there, round after round."""
    log = layouts.transaction_spanning_segments(tmp_path, ControlType.ABORT)
    assert log.aborted_txns() == [(1, 0, 1, 2)]
    for now in (T0, T0 + DAY - 1):
        log.clean(now, surface=surface)
        assert log.offsets_in_log() == [1]  # the aborted record is gone
        assert log.last_offsets_per_batch() == [0, 1]
        assert [b.records for b in log.batches()] == [0, 1]
        assert log.aborted_txns() == [(1, 0, 1, 2)]
        assert all(b.delete_horizon_ms is None for b in log.batches())
    # Once producer.id.expiration.ms (a day) has passed since producer 1's last batch (its marker, at
    # T0 + 1) it has expired: its empty batch is no longer kept. The round that removes it still read
    # it, so the marker and its entry stay; the next round finds the transaction empty, drops the
    # entry and stamps the marker to go.
    log.clean(T0 + 1 + DAY, surface=surface)
    assert log.last_offsets_per_batch() == [1]
    assert log.aborted_txns() == [(1, 0, 1, 2)]
    assert [b.delete_horizon_ms for b in log.batches()] == [None]
    log.clean(T0 + 2 + DAY, surface=surface)
    assert log.aborted_txns() == []
    assert [b.delete_horizon_ms for b in log.batches()] == [T0 + 2 + 2 * DAY]


def _segments_fit_their_base(log: ScenarioLog) -> None:
    """Every segment's batches lie within its base offset + 2^31-1 (its index's relative offsets)."""
    for batch in log.batches():
        assert 0 <= batch.last_offset - batch.segment <= MAX_INT, batch


@pytest.mark.parametrize("surface", SURFACES)
def test_segment_grouping_span_is_measured_from_the_group_s_first_segment(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSegmentGroupingWithSparseOffsets, through a cleaning round: segments at 0,
    2^30 and 2^31-10 (holding 2^31+50) are not cleaned into one segment based at 0, whose index could
    not address 2^31+50; 0 and 2^30 may share one (2^31-11 - 0 fits)."""
    log = layouts.group_span_beyond_max_int(tmp_path)
    log.clean(T0, surface=surface)
    assert log.segment_bases() == [0, 2**31 - 10, 2**31 + 100]
    assert log.offsets_in_log() == [0, 2**30, 2**31 + 50, 2**31 + 100]
    _segments_fit_their_base(log)
    assert log.verify().code == 0


@pytest.mark.parametrize("surface", SURFACES)
def test_segment_grouping_with_sparse_offsets_and_empty_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSegmentGroupingWithSparseOffsetsAndEmptySegments: three segments at 0, 2^31
    and 2^32, each with "key" at its base and base + 2^31-1, the active one at 3 * 2^31. The first
    round empties the first two (each a group of its own: their spans do not fit one); the next round
    groups the two empty segments and cleans them into one empty segment."""
    log = layouts.sparse_offsets_and_empty_segments(tmp_path)
    assert log.segment_bases() == [0, 2**31, 2**32, 3 * 2**31]
    log.clean(T0, surface=surface)
    assert log.segment_bases() == [0, 2**31, 2**32, 3 * 2**31]
    assert [(b.segment, b.last_offset) for b in log.batches()] == [(2**32, 2**32 + MAX_INT), (3 * 2**31, 3 * 2**31)]
    log.clean(T0 + 1, surface=surface)
    assert log.segment_bases() == [0, 2**32, 3 * 2**31]  # the two empty segments are one now
    assert (log.directory / "00000000000000000000.log").stat().st_size == 0
    assert log.offsets_in_log() == [2**32 + MAX_INT, 3 * 2**31]
    _segments_fit_their_base(log)
    assert log.verify().code == 0


def _without_txn_indexes(log: ScenarioLog) -> None:
    """Kafka creates a ``.txnindex`` only when it has an entry: a directory may lack them all."""
    for path in log.directory.glob("*.txnindex"):
        path.unlink()


def test_recovery_rebuilds_the_txn_index_of_a_transaction_opened_in_an_earlier_segment(tmp_path: Path) -> None:
    """LogLoaderTest (recoverSegment rebuilds producer state up to the segment's base offset first):
    an ABORT marker in segment 1 ends a transaction whose data is in segment 0, so the rebuilt
    ``.txnindex`` of segment 1 holds AbortedTxn(pid 1, first 0, last 1, LSO 2); the cleaner then
    removes the aborted record instead of refusing the partition."""
    log = layouts.abort_of_a_transaction_opened_earlier(tmp_path)
    assert log.aborted_txns() == []
    log.recover(full=True)
    assert log.aborted_txns() == [(1, 0, 1, 2)]
    log.clean(T0)
    assert log.keys_in_log() == []
    assert log.last_offsets_per_batch() == [0, 1]


def test_recovery_of_the_active_segment_indexes_an_abort_of_earlier_data(tmp_path: Path) -> None:
    """The same with the ABORT marker in the active segment and producer 2's transaction open
    across it: the entry's first offset is in segment 0 and its last stable offset is producer 2's
    first offset, as Kafka writes them, so the aborted records are not kept as committed."""
    log = ScenarioLog(tmp_path, cleanup_policy="compact", segment_bytes=128)
    log.txn(1, [("a", "x")])  # 0
    log.txn(2, [("b", "y")])  # 1
    log.roll()
    log.txn(1, [("c", "x")])  # 2
    log.roll()
    log.abort(1)  # 3, in the active segment
    log.commit(2)  # 4
    assert log.aborted_txns() == [(1, 0, 3, 1)]
    _without_txn_indexes(log)
    log.recover(full=True)
    assert log.aborted_txns() == [(1, 0, 3, 1)]
    log.roll()
    log.clean(T0)
    assert log.keys_in_log() == ["b"]


def test_a_segment_holding_offsets_beyond_its_base_is_reported_and_split_not_truncated(tmp_path: Path) -> None:
    """Kafka's loader splits a segment whose offsets do not fit its base + 2^31-1 (LogLoaderTest's
    testSplitOnOffsetOverflow, spec §11.4): ``verify`` reports it and says how to fix it, and
    ``recover --full`` splits it into segments that fit, losing nothing (truncating there would)."""
    from kafkalog.format.batch import Record, build_batch
    from kafkalog.log import names

    log = ScenarioLog(tmp_path, cleanup_policy="compact")
    log.append([("a", "1"), ("b", "2")])
    log.roll(2**31 + 100)
    log.append([("d", "4")], base_offset=2**31 + 100)
    # What an older kafkalog's cleaner could write: 0.log holding an offset its index cannot address.
    beyond = build_batch([Record(2**31 + 50, T0, b"c", b"3")], partition_leader_epoch=0)
    with open(names.log_file(log.directory, 0), "ab") as f:
        f.write(beyond)
    result = log.verify()
    assert result.code == 1
    assert "offset 2147483698 does not fit the segment based at 0" in result.out + result.err
    assert "kafkalog recover --full" in result.out + result.err
    log.recover(full=True)
    assert log.segment_bases() == [0, 2**31 + 50, 2**31 + 100]
    assert log.offsets_in_log() == [0, 1, 2**31 + 50, 2**31 + 100]
    assert log.keys_in_log() == ["a", "b", "c", "d"]
    _segments_fit_their_base(log)
    assert log.verify().code == 0


def _journal_rounds(log: ScenarioLog) -> list[dict[str, object]]:
    """The compaction rounds the maintenance journal holds for the partition, oldest first."""
    import json as _json

    from kafkalog.log import names

    lines = (log.log_dir / names.JOURNAL_FILE).read_text().splitlines()
    return [doc for doc in map(_json.loads, lines) if doc.get("action") == "compact"]


@pytest.mark.parametrize("surface", SURFACES)
def test_a_small_dedupe_buffer_cleans_in_prefixes_and_ends_where_one_big_round_does(
        tmp_path: Path, surface: str) -> None:
    """``log.cleaner.dedupe.buffer.size`` bounds a round's key map as Kafka's SkimpyOffsetMap is bounded
    (24 bytes a key, filled to ``log.cleaner.io.buffer.load.factor``): with room for 20 keys a dirty
    section of 300 records over 120 keys is cleaned a prefix at a time, no round mapping more than 20
    keys, and once nothing is dirty the log holds exactly what one round with the default buffer left."""
    import random

    def build(where: Path, **broker: str | int) -> ScenarioLog:
        log = ScenarioLog(where, cleanup_policy="compact", segment_bytes=2048, broker=broker or None)
        rng = random.Random(7)
        rows = [(f"k{rng.randrange(120)}".encode(), None if i % 11 == 0 else f"v{i}".encode(), (), T0 + i)
                for i in range(300)]
        with log.writable() as writable:
            writable.append_records(rows, batch_records=1, now_ms=T0)
            writable.roll(now_ms=T0)
        return log

    big = build(tmp_path / "big")
    small = build(tmp_path / "small", log_cleaner_dedupe_buffer_size=23 * 24)  # 23 slots: 20 keys at 0.9
    assert len(big.compact(T0, surface=surface)["cleaned"]) == 1  # type: ignore[arg-type]
    ends = []
    for _ in range(40):
        cleaned = small.compact(T0, surface=surface)["cleaned"]
        if not cleaned:
            break
        ends.append(cleaned[0]["end_offset"])  # type: ignore[index]
    assert len(ends) > 5 and ends == sorted(ends) and ends[-1] == 300
    assert max(int(r["extra"]["stats"]["map_keys"]) for r in _journal_rounds(small)) == 20  # type: ignore[index]
    assert small.records() == big.records()
    # The same batches, though in other segments: each round regroups what it recopies.
    assert [dataclasses.replace(b, segment=0) for b in small.batches()] == \
        [dataclasses.replace(b, segment=0) for b in big.batches()]
