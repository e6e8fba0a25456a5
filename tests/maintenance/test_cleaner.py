"""The log cleaner against Kafka's ``LogCleanerTest`` scenarios (spec §8, §15), with a fixed clock.

Every scenario builds a real partition with ``LogStore``, cleans it with ``clean_partition`` (or the
``compact()`` cycle, or the CLI) and reads the result back from the files. Offsets, keys and batch
layouts are written out per scenario, so a rule that is wrong in the same way in writer and reader
still fails. ``now`` decides which delete horizons have passed; ``wall`` is what gets stamped.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record import memory_records as aio_memory
from cleaner_helpers import (
    DAY,
    HOUR,
    MAX_INT,
    MIN,
    T0,
    Row,
    clean,
    cleaner_checkpoint,
    latest_values,
    live_digest,
    marker,
    mixed_log,
    new_store,
    produce,
    put,
    read_log,
)
from conftest import kafka_fixtures_root, run_cli, tree_digest
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords

from kafkalog.errors import CleanerError, KafkaLogError
from kafkalog.format import batch as fmt
from kafkalog.format.batch import ControlType, Record, build_batch
from kafkalog.format.compression import CompressionType
from kafkalog.log import checkpoint, names
from kafkalog.log.local_log import LocalLog
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.log.swap import replace_segments
from kafkalog.maintenance import cleaner, journal
from kafkalog.maintenance.cleaner import CleanerStats, group_segments_by_size
from kafkalog.maintenance.compact import compact
from kafkalog.maintenance.txn_tracker import TxnTracker
from kafkalog.tools.verify import verify_store

EMPTY_BATCH = 61


# --- reading logs back ------------------------------------------------------------------------------


def offsets_in_log(store: LogStore, loc: PartitionLocation) -> list[int]:
    """Kafka's ``offsetsInLog``: every record with a key and a value, control records included."""
    return [r.offset for r in read_log(store, loc)[1] if r.key is not None and r.value is not None]


def keys_in_log(store: LogStore, loc: PartitionLocation) -> list[str]:
    """Kafka's ``keysInLog``: keys of data records with a key and a value."""
    return [r.key.decode() for r in read_log(store, loc)[1]
            if not r.control and r.key is not None and r.value is not None]


def last_offsets_per_batch(store: LogStore, loc: PartitionLocation) -> list[int]:
    return [b.last for b in read_log(store, loc)[0]]


def aborted_txns(store: LogStore, loc: PartitionLocation) -> list[tuple[int, int, int]]:
    log = store.open_log(loc, read_only=True)
    return [(t.producer_id, t.first_offset, t.last_offset) for s in log.segments for t in s.txn_index.entries()]


def segment_files_digest(directory: Path, from_offset: int) -> dict[str, str]:
    """sha256 of every live file of the partition whose name's offset is ≥ ``from_offset``."""
    out = {}
    for path in sorted(directory.iterdir()):
        parsed = names.parse_segment_file_name(path.name)
        if parsed is not None and not parsed.state and parsed.base_offset >= from_offset:
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def peer_records(data: bytes) -> tuple[list[tuple[int, bytes | None, bytes | None]], list[tuple[int, ...]]]:
    """Parse a ``.log`` with kafka-python and aiokafka, check every CRC, and return what they agree on."""
    kp_records, kp_batches = [], []
    for batch in KafkaPythonMemoryRecords(data):
        assert batch.validate_crc()
        kp_batches.append((batch.base_offset, batch.base_offset + batch.last_offset_delta, batch.compression_type))
        if not batch.is_control_batch:
            kp_records += [(r.offset, r.key, r.value) for r in batch]
    aio_records, aio_batches = [], []
    records = aio_memory.MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        aio_batches.append(batch.base_offset)
        if not batch.is_control_batch:
            aio_records += [(r.offset, r.key, r.value) for r in batch]
    assert aio_records == kp_records
    assert aio_batches == [b[0] for b in kp_batches]
    return kp_records, kp_batches


# --- latest value per key, the untouched tail, the checkpoint -----------------------------------------


def test_latest_value_per_key_survives_and_tail_is_untouched(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path, segment_bytes="2048")
    rng = random.Random(7)
    rows: list[Row] = []
    for i in range(500):
        key = f"k{rng.randrange(40):02d}"
        rows.append((key, None if rng.random() < 0.08 else f"v{i}-" + "x" * rng.randrange(30)))
    with store.writable_log(loc) as log:
        for start in range(0, len(rows), 50):
            put(log, rows[start:start + 50], ts=T0 + start, batch_records=rng.choice([1, 2, 3]))
    log = store.open_log(loc, read_only=True)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 8
    upper = bases[-4]  # three full segments and the active one stay dirty
    _, before = read_log(store, loc)
    tail = segment_files_digest(loc.directory, upper)
    assert len(tail) >= 12

    result = clean(store, loc, 0, upper, now=T0, wall=T0)

    assert result.end_offset == upper
    _, after = read_log(store, loc)
    assert latest_values(after) == latest_values(before)
    latest_below = {r.key: r.offset for r in before if r.offset < upper}
    expected = sorted(set(latest_below.values()) | {r.offset for r in before if r.offset >= upper})
    assert [r.offset for r in after] == expected
    assert [r for r in after if r.offset >= upper] == [r for r in before if r.offset >= upper]
    assert segment_files_digest(loc.directory, upper) == tail  # byte for byte, indexes included
    assert cleaner_checkpoint(tmp_path) == {("t", 0): upper}
    assert result.stats.records_read == sum(1 for r in before if r.offset < upper)
    assert result.stats.records_written == sum(1 for r in after if r.offset < upper)
    assert verify_store(store).ok


def test_tombstone_survives_first_cleaning_and_goes_after_horizon(tmp_path: Path) -> None:
    # testCleanTombstone, testCleaningWithDeletes, testCleanSegmentsRetainingLastEmptyBatch
    store, loc = new_store(tmp_path)
    old = T0 - 30 * DAY  # the tombstone's own timestamp is irrelevant to its horizon
    with store.writable_log(loc) as log:
        put(log, [("a", "1"), ("c", "1"), ("c", None), ("c", "2"), ("b", "1")])  # 0..4
        put(log, [("b", None)], ts=old)  # 5: the last batch of the round
        log.roll(now_ms=T0)
        put(log, [("d", "1")])  # 6, active
    result = clean(store, loc, now=T0, wall=T0)
    batches, records = read_log(store, loc)
    assert [(r.offset, r.key, r.value) for r in records] == [(0, b"a", b"1"), (3, b"c", b"2"), (5, b"b", None),
                                                            (6, b"d", b"1")]
    [stamped] = [b for b in batches if b.base == 5]
    assert stamped.horizon == T0 + DAY  # wall clock + delete.retention.ms
    assert [r.timestamp for r in records if r.offset == 5] == [old]
    assert [b.base for b in batches if b.horizon is not None] == [5]  # only the tombstone's batch
    assert result.stats.tombstones_removed == 0

    # A later cleaning before the horizon keeps it, byte for byte.
    digest = live_digest(tmp_path)
    clean(store, loc, now=T0 + DAY - 1)
    assert live_digest(tmp_path) == digest

    # At the horizon the tombstone goes; its batch was the round's last, so it stays as an empty header.
    result = clean(store, loc, now=T0 + DAY)
    batches, records = read_log(store, loc)
    assert [(r.offset, r.key) for r in records] == [(0, b"a"), (3, b"c"), (6, b"d")]
    assert result.stats.tombstones_removed == 1
    assert result.stats.empty_batches_kept == 1
    [empty] = [b for b in batches if b.base == 5]
    assert (empty.size, empty.count, empty.last, empty.max_timestamp) == (EMPTY_BATCH, 0, 5, old)
    assert verify_store(store).ok


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    # testCleanableOffsetsForTime / testCleanableOffsetsForShortTime, through the compact() cycle
    store, loc = new_store(tmp_path, min_compaction_lag_ms=str(HOUR))
    with store.writable_log(loc) as log:
        for seg, age in enumerate([5 * HOUR, 4 * HOUR, 30 * MIN, 10 * MIN]):
            put(log, [(f"k{i}", f"s{seg}") for i in range(5)], ts=T0 - age)
            log.roll(now_ms=T0)
        put(log, [("k0", "active")])
    tail = segment_files_digest(loc.directory, 10)

    report = compact(store, now_ms=T0, topic="t")

    assert not report.failures
    [result] = report.cleaned
    assert (result.first_dirty_offset, result.end_offset) == (0, 10)
    assert segment_files_digest(loc.directory, 10) == tail
    assert cleaner_checkpoint(tmp_path) == {("t", 0): 10}
    assert [r.offset for r in read_log(store, loc)[1]] == [5, 6, 7, 8, 9, *range(10, 21)]

    # Two hours later every non-active segment is older than the lag.
    report = compact(store, now_ms=T0 + 2 * HOUR, topic="t")
    [result] = report.cleaned
    assert (result.first_dirty_offset, result.end_offset) == (10, 20)
    assert [r.offset for r in read_log(store, loc)[1]] == [15, 16, 17, 18, 19, 20]
    assert cleaner_checkpoint(tmp_path) == {("t", 0): 20}


def _two_equal_segments(tmp_path: Path, ratio: str) -> tuple[LogStore, PartitionLocation]:
    store, loc = new_store(tmp_path, min_cleanable_dirty_ratio=ratio)
    with store.writable_log(loc) as log:
        put(log, [(f"k{i}", "a") for i in range(10)])
        log.roll(now_ms=T0)
        put(log, [(f"k{i}", "b") for i in range(10)])
        log.roll(now_ms=T0)
        put(log, [("k0", "c")])
    checkpoint.write_offset_checkpoint(tmp_path / names.CLEANER_OFFSET_CHECKPOINT, {("t", 0): 10})
    sizes = [s.size for s in store.open_log(loc, read_only=True).segments]
    assert sizes[0] == sizes[1] > 0  # so the dirty ratio is exactly 0.5
    return store, loc


def test_dirty_ratio_at_the_threshold_is_not_cleaned(tmp_path: Path) -> None:
    store, loc = _two_equal_segments(tmp_path, "0.5")
    before = tree_digest(tmp_path)
    report = compact(store, now_ms=T0)
    assert report.cleaned == [] and report.plan is not None and report.plan.selected == ()
    [why] = report.plan.not_selected
    assert why.kind == "below-min-cleanable-dirty-ratio" and why.log is not None and why.log.dirty_ratio == 0.5
    assert tree_digest(tmp_path) == before


def test_dirty_ratio_above_the_threshold_is_cleaned(tmp_path: Path) -> None:
    store, loc = _two_equal_segments(tmp_path, "0.49")
    report = compact(store, now_ms=T0)
    [result] = report.cleaned
    assert (result.first_dirty_offset, result.end_offset) == (10, 20)
    assert [(r.offset, r.value) for r in read_log(store, loc)[1]] == [(o, b"b") for o in range(10, 20)] + [(20, b"c")]


def test_checkpoint_is_the_end_offset_and_resets_when_out_of_range(tmp_path: Path) -> None:
    store = LogStore([tmp_path], create_missing=True)
    for topic in ("t", "u", "w"):
        store.create_topic(topic, 1, {"cleanup.policy": "compact"})
    with store.writable_log(store.locate("t", 0)) as log:
        for _ in range(3):
            put(log, [(f"k{i}", "v") for i in range(10)])
            log.roll(now_ms=T0)
    with store.writable_log(store.locate("u", 0)) as log:  # only an active segment: never cleanable
        put(log, [(f"k{i}", "v") for i in range(20)])
    with store.writable_log(store.locate("w", 0)) as log:
        for _ in range(3):
            put(log, [(f"k{i}", "v") for i in range(10)])
            log.roll(now_ms=T0)
    path = tmp_path / names.CLEANER_OFFSET_CHECKPOINT
    # t: beyond its log end (30); u: beyond its log end (20); w: below its log start offset (10).
    checkpoint.write_offset_checkpoint(path, {("t", 0): 1000, ("u", 0): 1000, ("w", 0): 5})
    checkpoint.write_offset_checkpoint(tmp_path / names.LOG_START_OFFSET_CHECKPOINT, {("w", 0): 10})

    report = compact(store, now_ms=T0)

    assert report.plan is not None
    assert sorted(report.plan.checkpoint_resets) == [("t", 0, 0), ("u", 0, 0), ("w", 0, 10)]
    cleaned = {(r.topic, r.first_dirty_offset, r.end_offset) for r in report.cleaned}
    assert cleaned == {("t", 0, 30), ("w", 10, 30)}
    # testCheckpointUpdatedForInvalidOffsetNoCleaning: u is rewritten although it is not cleaned.
    assert checkpoint.read_offset_checkpoint(path) == {("t", 0): 30, ("u", 0): 0, ("w", 0): 30}


def test_cleaner_stats_and_a_dirty_section_starting_mid_log(tmp_path: Path) -> None:
    # testLogCleanerStats: the whole log is recopied, only the dirty section is mapped
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        put(log, [("0", "a"), ("1", "a"), ("0", "b"), ("1", "b"), ("0", "c")])
        log.roll(now_ms=T0)
    size = sum(s.size for s in store.open_log(loc, read_only=True).segments)
    result = clean(store, loc, 2)
    stats = result.stats
    assert result.end_offset == 5
    assert (stats.records_read, stats.records_written, stats.bytes_read, stats.map_records) == (5, 2, size, 3)
    assert offsets_in_log(store, loc) == [3, 4]


def test_cleaning_beyond_missing_offsets(tmp_path: Path) -> None:
    # testCleaningBeyondMissingOffsets: offset gaps at the end of the dirty range
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        put(log, [(f"k{i}", "a") for i in range(5)])  # 0-4
        log.roll(10)
        log.append_batch(build_batch([Record(10 + i, T0, f"k{i}".encode(), b"b") for i in range(3)]), now_ms=T0)
        log.roll(30)  # nothing in [13, 30)
        log.append_batch(build_batch([Record(30, T0, b"k0", b"active")]), now_ms=T0)
    result = clean(store, loc)
    assert result.end_offset == 30 == store.open_log(loc, read_only=True).active_segment.base_offset
    assert [(r.offset, r.value) for r in read_log(store, loc)[1]] == [(3, b"a"), (4, b"a"), (10, b"b"), (11, b"b"),
                                                                       (12, b"b"), (30, b"active")]
    assert cleaner_checkpoint(tmp_path) == {("t", 0): 30}


def test_corrupt_segment_is_refused_and_left_untouched(tmp_path: Path) -> None:
    # testCorruptMessageSizeLargerThanBytesAvailable / a CRC mismatch: the partition is not cleaned
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        for _ in range(3):
            put(log, [(f"k{i}", "v" * 20) for i in range(5)])
            log.roll(now_ms=T0)
    segment = store.open_log(loc, read_only=True).segments[1]
    data = bytearray(segment.log_path.read_bytes())
    data[100] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
    segment.log_path.write_bytes(bytes(data))
    def digest() -> dict[str, str]:  # kafkalog's (empty) lock files aside
        return {k: v for k, v in tree_digest(loc.directory).items() if not k.startswith(".kafkalog")}

    before = digest()
    report = compact(store, now_ms=T0, topic="t")
    assert report.cleaned == [] and len(report.failures) == 1
    assert digest() == before
    assert names.CLEANER_OFFSET_CHECKPOINT not in os.listdir(tmp_path)


# --- producers and transactions -----------------------------------------------------------------------


def test_each_producers_last_batch_is_retained(tmp_path: Path) -> None:
    # testLogCleanerRetainsProducerLastSequence
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        put(log, [("0", "0")])  # 0
        produce(log, 1, 0, [("0", "1")], transactional=False)  # 1
        produce(log, 2, 0, [("0", "2")], transactional=False)  # 2
        produce(log, 3, 0, [("0", "3")], transactional=False)  # 3
        produce(log, 2, 1, [("1", "1")], transactional=False)  # 4
        log.roll(now_ms=T0)
    result = clean(store, loc)
    batches, _ = read_log(store, loc)
    assert [b.last for b in batches] == [1, 3, 4]
    assert {b.pid: b.last_sequence for b in batches} == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(store, loc) == ["0", "1"]
    assert offsets_in_log(store, loc) == [3, 4]
    empty = batches[0]
    assert (empty.size, empty.count, empty.base, empty.pid, empty.epoch, empty.seq) == (EMPTY_BATCH, 0, 1, 1, 0, 0)
    assert result.stats.empty_batches_kept == 1


def test_idempotent_batches_keep_offsets_and_sequences(tmp_path: Path) -> None:
    # testDuplicateCheckAfterCleaning: rebuilt batches keep base offset, last offset delta, sequences
    store, loc = new_store(tmp_path, segment_bytes="2048")
    with store.writable_log(loc) as log:
        produce(log, 1, 0, [("1", "p1"), ("2", "p1"), ("3", "p1")], transactional=False)  # 0-2
        produce(log, 2, 0, [("3", "p2"), ("1", "p2"), ("4", "p2")], transactional=False)  # 3-5
        produce(log, 3, 0, [("1", "p3"), ("4", "p3")], transactional=False)  # 6-7
        log.roll(now_ms=T0)
    clean(store, loc)
    batches, _ = read_log(store, loc)
    assert [b.last for b in batches] == [2, 5, 7]
    assert [(b.base, b.count) for b in batches] == [(0, 1), (3, 1), (6, 2)]
    assert {b.pid: b.last_sequence for b in batches} == {1: 2, 2: 2, 3: 1}
    assert keys_in_log(store, loc) == ["2", "3", "1", "4"]
    assert offsets_in_log(store, loc) == [1, 3, 6, 7]

    # The producer state rebuilt from the cleaned batches alone still knows every last sequence.
    for snapshot in loc.directory.glob("*.snapshot"):
        snapshot.unlink()
    state = {e.producer_id: (e.last_offset, e.last_sequence)
             for e in store.open_log(loc, read_only=True).producer_state().snapshot_entries()}
    assert state == {1: (2, 2), 2: (5, 2), 3: (7, 1)}

    with store.writable_log(loc) as log:
        produce(log, 4, 0, [("2", "p4")], transactional=False)  # 8
        log.roll(now_ms=T0)
    clean(store, loc)
    batches, _ = read_log(store, loc)
    assert [b.last for b in batches] == [2, 5, 7, 8]
    assert {b.pid: b.last_sequence for b in batches} == {1: 2, 2: 2, 3: 1, 4: 0}
    assert keys_in_log(store, loc) == ["3", "1", "4", "2"]
    assert offsets_in_log(store, loc) == [3, 6, 7, 8]
    assert (batches[0].size, batches[0].count, batches[0].base) == (EMPTY_BATCH, 0, 0)


@pytest.mark.parametrize("damage", ["removed", "truncated"])
def test_a_group_whose_cleaned_output_is_gone_or_cut_is_not_swapped(tmp_path: Path, damage: str) -> None:
    """Between writing a group and swapping it, its ``.cleaned`` log is removed (a second attempt
    "recovering" it) or cut short: the swap refuses, the sources stay, nothing is marked deleted."""
    store, loc = new_store(tmp_path, segment_bytes="1024")
    with store.writable_log(loc) as log:
        put(log, [(f"k{i % 5}", f"v{i}") for i in range(60)], batch_records=3)
        log.roll(now_ms=T0)
    before = read_log(store, loc)[1]
    live = {k: v for k, v in tree_digest(tmp_path).items() if not k.endswith(".lock")}
    ctx = cleaner.open_clean_context(store, loc, 0, store.open_log(loc, read_only=True).active_segment.base_offset,
                                     now_ms=T0)
    verified: set[int] = set()
    key_map = cleaner.build_key_map(ctx, CleanerStats(), verified)
    group = ctx.groups()[-1]  # it holds the latest values: its output is not empty
    written = cleaner.write_cleaned_group(ctx, group, key_map, TxnTracker(), CleanerStats(), verified)
    output = names.log_file(loc.directory, written.base_offset, names.CLEANED_SUFFIX)
    if damage == "removed":
        output.unlink()
    else:
        assert written.log_bytes > 0
        os.truncate(output, written.log_bytes - 1)
    with pytest.raises(CleanerError, match="nothing swapped"):
        cleaner.swap_cleaned_group(ctx, written)
    assert read_log(store, loc)[1] == before
    assert {k: v for k, v in tree_digest(tmp_path).items() if not k.endswith(".lock")} == live
    with pytest.raises(KafkaLogError, match="missing at the swap"):  # the swap itself checks too
        replace_segments(loc.directory, [written.base_offset], written.source_bases, mark_time_ms=T0)
    assert not list(loc.directory.glob("*" + names.DELETED_SUFFIX))


def _producer_1_aborts_producer_2_commits(log: LocalLog) -> None:
    """Offsets 0-7: producer 1 writes keys 1-4 (0-1, 4-5) and aborts (6); producer 2 writes keys 2-3
    (2-3) and commits (7)."""
    produce(log, 1, 0, [("1", "a"), ("2", "a")], transactional=True)
    produce(log, 2, 0, [("2", "b"), ("3", "b")], transactional=True)
    produce(log, 1, 2, [("3", "a"), ("4", "a")], transactional=True)
    marker(log, ControlType.ABORT, 1)
    marker(log, ControlType.COMMIT, 2)


def test_basic_transaction_aware_cleaning(tmp_path: Path) -> None:
    # testBasicTransactionAwareCleaning: aborted data goes whatever its key; the txn index is unchanged
    store, loc = new_store(tmp_path, segment_bytes="2048")
    with store.writable_log(loc) as log:
        _producer_1_aborts_producer_2_commits(log)  # 0-7
        produce(log, 1, 4, [("2", "c")], transactional=True)  # 8
        marker(log, ControlType.COMMIT, 1)  # 9
        log.roll(now_ms=T0)
    txns = aborted_txns(store, loc)
    assert txns == [(1, 0, 6)]
    result = clean(store, loc)
    assert keys_in_log(store, loc) == ["3", "2"]
    assert offsets_in_log(store, loc) == [3, 6, 7, 8, 9]
    assert aborted_txns(store, loc) == txns
    assert result.stats.aborted_records_removed == 4


def test_an_abort_missing_from_a_deleted_txnindex_is_refused_until_recover_rebuilds_it(tmp_path: Path) -> None:
    """Kafka creates a ``.txnindex`` lazily, so a deleted one looks like "no aborts": cleaning on it
    would keep aborted records as committed. The cleaner notices the ABORT marker the index does not
    list and refuses; ``recover --full`` rebuilds the index and the cleaning is then Kafka's."""
    store, loc = new_store(tmp_path, segment_bytes="2048")
    with store.writable_log(loc) as log:
        _producer_1_aborts_producer_2_commits(log)  # 0-7
        marker(log, ControlType.ABORT, 3)  # 8: a transaction with no data here aborts nothing
        log.roll(now_ms=T0)
    (loc.directory / "00000000000000000000.txnindex").unlink()
    def unlocked() -> dict[str, str]:
        return {k: v for k, v in tree_digest(tmp_path).items() if not k.endswith(".lock")}

    before = unlocked()
    with pytest.raises(CleanerError, match="producer 1's aborted transaction ending at offset 6 is not in the "
                                           "transaction index"):
        clean(store, loc)
    assert unlocked() == before
    assert run_cli("recover", "--full", "--log-dir", str(tmp_path)).code == 0
    assert aborted_txns(store, loc) == [(1, 0, 6)]
    result = clean(store, loc)
    assert keys_in_log(store, loc) == ["2", "3"] and result.stats.aborted_records_removed == 4


def test_abort_marker_across_passes(tmp_path: Path) -> None:
    # testAbortMarkerRemoval with the delete horizon of KIP-534
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        produce(log, 1, 0, [("1", "x")], transactional=True)  # 0
        produce(log, 1, 1, [("2", "x"), ("3", "x")], transactional=True)  # 1-2
        marker(log, ControlType.ABORT, 1)  # 3
        produce(log, 1, 3, [("3", "y")], transactional=True)  # 4
        marker(log, ControlType.COMMIT, 1)  # 5
        log.roll(now_ms=T0)

    # Pass 1 removes the aborted data; the marker stays, and so does its txn-index entry.
    clean(store, loc, now=T0)
    assert keys_in_log(store, loc) == ["3"]
    assert offsets_in_log(store, loc) == [3, 4, 5]
    assert aborted_txns(store, loc) == [(1, 0, 3)]
    assert [b.horizon for b in read_log(store, loc)[0]] == [None, None, None]

    # Pass 2: the transaction is empty now; the marker gets its horizon, the index entry goes.
    clean(store, loc, now=T0 + HOUR)
    batches, _ = read_log(store, loc)
    assert offsets_in_log(store, loc) == [3, 4, 5]
    assert [(b.base, b.horizon) for b in batches] == [(3, T0 + HOUR + DAY), (4, None), (5, None)]
    assert aborted_txns(store, loc) == []

    # Before the horizon nothing changes; at it the marker goes.
    clean(store, loc, now=T0 + HOUR + DAY - 1)
    assert offsets_in_log(store, loc) == [3, 4, 5]
    clean(store, loc, now=T0 + HOUR + DAY)
    assert keys_in_log(store, loc) == ["3"]
    assert offsets_in_log(store, loc) == [4, 5]
    assert verify_store(store).ok


def test_abort_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    # testAbortMarkerRetentionWithEmptyBatch / testLogCleanerRetainsLastSequenceEvenIfTransactionAborted
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        produce(log, 1, 0, [("2", "x"), ("3", "x")], transactional=True)  # 0-1
        marker(log, ControlType.ABORT, 1)  # 2
        log.roll(now_ms=T0)
    for _ in range(2):  # the empty batch keeps the producer's last sequence, so the marker stays too
        clean(store, loc)
        assert keys_in_log(store, loc) == []
        assert offsets_in_log(store, loc) == [2]
        assert last_offsets_per_batch(store, loc) == [1, 2]
        assert aborted_txns(store, loc) == [(1, 0, 2)]
        assert read_log(store, loc)[0][0].size == EMPTY_BATCH

    with store.writable_log(loc) as log:
        produce(log, 1, 2, [("1", "y")], transactional=True)  # 3
        marker(log, ControlType.COMMIT, 1)  # 4
        log.roll(now_ms=T0)
    clean(store, loc)  # the empty batch goes (no longer the last); the marker saw it, so it stays
    assert keys_in_log(store, loc) == ["1"]
    assert offsets_in_log(store, loc) == [2, 3, 4]
    assert last_offsets_per_batch(store, loc) == [2, 3, 4]
    assert aborted_txns(store, loc) == [(1, 0, 2)]

    clean(store, loc, now=T0 + 1)  # now the transaction is empty: horizon stamped, index entry gone
    assert offsets_in_log(store, loc) == [2, 3, 4]
    assert read_log(store, loc)[0][0].horizon == T0 + 1 + DAY
    assert aborted_txns(store, loc) == []
    clean(store, loc, now=T0 + 1 + DAY)
    assert offsets_in_log(store, loc) == [3, 4]


def test_commit_marker_kept_while_its_transaction_holds_records(tmp_path: Path) -> None:
    # testCommitMarkerRemoval
    store, loc = new_store(tmp_path, segment_bytes="256")
    with store.writable_log(loc) as log:
        produce(log, 1, 0, [("1", "a")], transactional=True)  # 0
        produce(log, 1, 1, [("2", "a"), ("3", "a")], transactional=True)  # 1-2
        marker(log, ControlType.COMMIT, 1)  # 3
        produce(log, 1, 3, [("2", "b")], transactional=True)  # 4
        marker(log, ControlType.COMMIT, 1)  # 5
        log.roll(now_ms=T0)
    clean(store, loc)
    assert keys_in_log(store, loc) == ["1", "3", "2"]
    assert offsets_in_log(store, loc) == [0, 2, 3, 4, 5]

    with store.writable_log(loc) as log:
        produce(log, 1, 4, [("1", "c"), ("3", "c")], transactional=True)  # 6-7
        marker(log, ControlType.COMMIT, 1)  # 8
        log.roll(now_ms=T0)
    # The marker at 3 stays: this pass still read batches of its transaction (and removed them).
    clean(store, loc)
    assert keys_in_log(store, loc) == ["2", "1", "3"]
    assert offsets_in_log(store, loc) == [3, 4, 5, 6, 7, 8]
    assert all(b.horizon is None for b in read_log(store, loc)[0])
    # Re-cleaning stamps the now empty transaction's marker; it goes only once now ≥ horizon.
    clean(store, loc, now=T0 + 5)
    assert offsets_in_log(store, loc) == [3, 4, 5, 6, 7, 8]
    assert [b.base for b in read_log(store, loc)[0] if b.horizon == T0 + 5 + DAY] == [3]
    clean(store, loc, now=T0 + 5 + DAY)
    assert keys_in_log(store, loc) == ["2", "1", "3"]
    assert offsets_in_log(store, loc) == [4, 5, 6, 7, 8]


def test_data_key_equal_to_a_commit_marker_key_does_not_remove_the_marker(tmp_path: Path) -> None:
    # testCleaningWithKeysConflictingWithTxnMarkerKeys
    store, loc = new_store(tmp_path)
    commit_key = "\x00\x00\x00\x01"  # version 0, type COMMIT
    with store.writable_log(loc) as log:
        produce(log, 1, 0, [("1", "x")], transactional=True)  # 0
        marker(log, ControlType.COMMIT, 1)  # 1
        produce(log, 2, 0, [(commit_key, "foo")], transactional=True)  # 2
        marker(log, ControlType.COMMIT, 2)  # 3
        log.roll(now_ms=T0)
    assert offsets_in_log(store, loc) == [0, 1, 2, 3]
    clean(store, loc)
    assert last_offsets_per_batch(store, loc) == [0, 1, 2, 3]
    assert offsets_in_log(store, loc) == [0, 1, 2, 3]


def test_empty_control_batch_is_kept_for_the_producer_epoch(tmp_path: Path) -> None:
    # testCleanEmptyControlBatch
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        marker(log, ControlType.COMMIT, 1)  # 0: a commit marker without a transaction
        put(log, [("2", "2"), ("3", "3")])  # 1, 2
        log.roll(now_ms=T0)
    clean(store, loc, now=T0)  # pass 1 stamps the horizon of the marker of an empty transaction
    assert offsets_in_log(store, loc) == [0, 1, 2]
    assert read_log(store, loc)[0][0].horizon == T0 + DAY
    for now in (T0 + DAY, T0 + DAY, T0 + 2 * DAY):  # then it is emptied, never dropped, and stays valid
        clean(store, loc, now=now)
        batches, _ = read_log(store, loc)
        assert keys_in_log(store, loc) == ["2", "3"]
        assert offsets_in_log(store, loc) == [1, 2]
        assert [b.last for b in batches] == [0, 1, 2]
        assert (batches[0].size, batches[0].count, batches[0].control, batches[0].pid) == (EMPTY_BATCH, 0, True, 1)


def test_unkeyed_records_are_dropped_and_counted(tmp_path: Path) -> None:
    # testCleaningWithUnkeyedMessages
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        put(log, [(f"k{i}", "a") for i in range(5)])  # 0-4
        put(log, [(None, "u1"), (None, "u2"), (None, "u3")])  # 5-7
        put(log, [(f"k{i}", "b") for i in range(5)])  # 8-12
        log.roll(now_ms=T0)
        put(log, [(None, "beyond")])  # 13: in the active segment, untouched
    result = clean(store, loc)
    assert result.stats.unkeyed_records_removed == 3
    assert [(r.offset, r.key, r.value) for r in read_log(store, loc)[1]] == \
        [(8 + i, f"k{i}".encode(), b"b") for i in range(5)] + [(13, None, b"beyond")]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name_kafka)
def test_compressed_batches_rebuilt_with_same_codec(tmp_path: Path, codec: CompressionType) -> None:
    store, loc = new_store(tmp_path)
    hdr = (("h", b"v"), ("n", None))
    with store.writable_log(loc) as log:
        put(log, [(f"k{i}", f"first-{i}" * 3) for i in range(10)], batch_records=10, compression=codec,
            headers=hdr)  # 0-9
        put(log, [("k0", "second"), ("k2", "second"), ("k9", "second")], batch_records=3,
            compression=codec, ts=T0 + 50)  # 10-12: supersedes the first batch's first and last
        put(log, [(f"u{i}", "unique") for i in range(4)], batch_records=4, compression=codec)  # 13-16
        log.roll(now_ms=T0)
    before, before_records = read_log(store, loc)
    result = clean(store, loc)
    after, records = read_log(store, loc)

    assert [(b.base, b.last, b.attributes & fmt.COMPRESSION_MASK) for b in after] == \
        [(0, 9, int(codec)), (10, 12, int(codec)), (13, 16, int(codec))]
    assert after[0].count == 7 and after[0].raw != before[0].raw
    assert after[1].raw == before[1].raw and after[2].raw == before[2].raw  # unchanged: copied byte for byte
    assert result.stats.batches_rebuilt == 1 and result.stats.batches_copied == 2
    kept = [1, 3, 4, 5, 6, 7, 8]
    assert [r for r in records if r.offset < 10] == [r for r in before_records if r.offset in kept]
    assert after[0].max_timestamp == T0 + 8
    # Headers survive the rebuild, and the peers read the batch with a valid CRC.
    kp = next(iter(KafkaPythonMemoryRecords(after[0].raw)))
    assert kp.validate_crc() and kp.compression_type == int(codec)
    assert [(r.offset, list(r.headers)) for r in kp] == [(o, [("h", b"v"), ("n", None)]) for o in kept]


def test_log_append_time_batch_rebuilt_keeps_its_append_time(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path, message_timestamp_type="LogAppendTime")
    with store.writable_log(loc) as log:
        put(log, [("a", "1"), ("b", "1"), ("c", "1")], batch_records=3, compression=CompressionType.LZ4)
        put(log, [("b", "2")])
        log.roll(now_ms=T0)
    before, _ = read_log(store, loc)
    clean(store, loc)
    after, records = read_log(store, loc)
    assert (after[0].base, after[0].last, after[0].count) == (0, 2, 2)
    assert after[0].attributes & fmt.TIMESTAMP_TYPE_MASK
    assert after[0].max_timestamp == before[0].max_timestamp == T0
    assert [(r.offset, r.timestamp) for r in records] == [(0, T0), (2, T0), (3, T0)]


# --- grouping, mtimes, idempotence ------------------------------------------------------------------------


def test_group_segments_by_size(tmp_path: Path) -> None:
    # testSegmentGrouping
    store, loc = new_store(tmp_path, segment_bytes="300", index_interval_bytes="1")
    with store.writable_log(loc) as log:
        while len(log.segments) < 10:
            put(log, [("hello", "hello")])
    segments = list(store.open_log(loc, read_only=True).segments)
    end = segments[-1].read_next_offset()

    def check(groups: list[list[Any]]) -> None:
        flat = [s.base_offset for g in groups for s in g]
        assert flat == [s.base_offset for s in segments]

    groups = group_segments_by_size(segments, MAX_INT, MAX_INT, end, segments)
    check(groups)
    assert [len(g) for g in groups] == [10]
    for max_size, max_index in ((1, MAX_INT), (MAX_INT, 1)):
        groups = group_segments_by_size(segments, max_size, max_index, end, segments)
        check(groups)
        assert [len(g) for g in groups] == [1] * 10
    log_size = sum(s.size for s in segments[:3]) + 1
    groups = group_segments_by_size(segments, log_size, MAX_INT, end, segments)
    check(groups)
    assert all(len(g) == 3 for g in groups[:-1])
    index_size = sum(len(s.offset_index) * 8 for s in segments[:3]) + 1
    groups = group_segments_by_size(segments, MAX_INT, index_size, end, segments)
    check(groups)
    assert all(len(g) == 3 for g in groups[:-1])


def test_cleaned_segments_are_merged_up_to_segment_bytes(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path, segment_bytes="2048")
    for round_ in range(4):
        with store.writable_log(loc) as log:
            for seg in range(10):
                put(log, [(f"k{i}", f"r{round_}s{seg}") for i in range(10)])
                log.roll(now_ms=T0)
        log = store.open_log(loc, read_only=True)
        sizes = {s.base_offset: s.size for s in log.segments}
        bases = [s.base_offset for s in log.segments]
        result = clean(store, loc)
        for old, new in result.groups:
            assert new == old[0]
            assert sum(sizes[b] for b in old) <= 2048
        for (old, _), (nxt, _) in zip(result.groups, result.groups[1:], strict=False):
            assert sum(sizes[b] for b in old) + sizes[nxt[0]] > 2048  # each group is as large as allowed
        assert [b for old, _ in result.groups for b in old] == bases[:-1]
        # Without merging, each round would add ten segments; with it the log stays small.
        assert len(store.open_log(loc, read_only=True).segments) <= 7
    values = latest_values(read_log(store, loc)[1])
    assert values == {f"k{i}".encode(): b"r3s9" for i in range(10)}


def test_cleaned_segments_keep_the_mtime_of_their_groups_last_segment(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path, segment_bytes="2048")
    with store.writable_log(loc) as log:
        for seg in range(8):
            put(log, [(f"k{i}", f"s{seg}" * (5 if i == 0 else 1)) for i in range(8)])
            log.roll(now_ms=T0)
    log = store.open_log(loc, read_only=True)
    mtimes = {}
    for n, segment in enumerate(log.segments[:-1]):
        mtimes[segment.base_offset] = 1_600_000_000 + 1000 * n
        os.utime(segment.log_path, (mtimes[segment.base_offset],) * 2)
    result = clean(store, loc)
    assert any(len(old) > 1 for old, _ in result.groups)
    for old, new in result.groups:
        for path in (names.log_file(loc.directory, new), names.index_file(loc.directory, new),
                     names.time_index_file(loc.directory, new)):
            assert path.stat().st_mtime == mtimes[old[-1]], path.name


def test_recompaction_without_new_writes_changes_no_byte(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path)
    mixed_log(store, loc)
    clean(store, loc, now=T0)  # stamps tombstones, removes aborted data
    clean(store, loc, now=T0)  # stamps the markers of transactions that are empty now
    digest = live_digest(tmp_path)
    assert compact(store, now_ms=T0, topic="t").cleaned == []  # nothing dirty: a no-op
    assert live_digest(tmp_path) == digest
    result = clean(store, loc, now=T0 + DAY - 1)  # recopy everything from offset 0
    assert result.stats.batches_rebuilt == 0 and result.stats.bytes_read == result.stats.bytes_written
    assert live_digest(tmp_path) == digest


def test_output_parses_with_kafka_python_and_aiokafka(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path)
    mixed_log(store, loc)
    for now in (T0, T0, T0 + 2 * DAY):
        clean(store, loc, now=now, wall=T0)
        _, records = read_log(store, loc)
        ours = [(r.offset, r.key, r.value) for r in records if not r.control]
        theirs = []
        log_files = sorted(loc.directory.glob("*.log"))
        assert len(log_files) >= 2
        for path in log_files:
            theirs += peer_records(path.read_bytes())[0]
        assert theirs == ours
    assert verify_store(store).ok


# --- the cycle: journal, CLI -----------------------------------------------------------------------------


def test_journal_records_the_round(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path)
    mixed_log(store, loc)
    report = compact(store, now_ms=T0, topic="t", run_id="run-x")
    [result] = report.cleaned
    [entry] = list(journal.read(tmp_path, run_id="run-x"))
    assert (entry["action"], entry["topic"], entry["partition"]) == ("compact", "t", 0)
    extra = entry["extra"]
    assert (extra["first_dirty_offset"], extra["end_offset"]) == (0, result.end_offset)
    stats = result.stats.to_dict()
    for name in ("bytes_read", "bytes_written", "records_read", "records_written", "tombstones_removed",
                 "aborted_records_removed", "empty_batches_kept"):
        assert extra["stats"][name] == stats[name], name
    assert extra["stats"]["records_read"] > extra["stats"]["records_written"] > 0
    assert entry["bytes"] == result.stats.bytes_read - result.stats.bytes_written
    assert [tuple(g[0]) for g in extra["groups"]] == [tuple(old) for old, _ in result.groups]


def test_cli_compact_json_and_dry_run(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path)
    mixed_log(store, loc)
    active = store.open_log(loc, read_only=True).active_segment.base_offset
    before = tree_digest(tmp_path)
    for extra in ((), ("--topic", "t")):
        dry = run_cli("compact", "--log-dir", str(tmp_path), "--dry-run", "--json", *extra)
        assert dry.code == 0, dry.err
        doc = json.loads(dry.out)
        assert doc["dry_run"] is True and doc["cleaned"] == []
        assert [(s["topic"], s["first_dirty_offset"], s["first_uncleanable_offset"]) for s in doc["selected"]] == \
            [("t", 0, active)]
        assert tree_digest(tmp_path) == before

    run = run_cli("compact", "--log-dir", str(tmp_path), "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    [cleaned] = doc["cleaned"]
    assert (cleaned["topic"], cleaned["partition"], cleaned["end_offset"]) == ("t", 0, active)
    assert cleaned["stats"]["records_read"] > cleaned["stats"]["records_written"]
    assert doc["errors"] == []
    assert cleaner_checkpoint(tmp_path) == {("t", 0): active}
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0
    again = json.loads(run_cli("compact", "--log-dir", str(tmp_path), "--json").out)
    assert again["cleaned"] == []


# --- Kafka-written __consumer_offsets ----------------------------------------------------------------------


def _writable_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("fixture", ["Internship", "smartassets-backend-server"])
def test_kafka_written_consumer_offsets_compact_to_a_valid_log(tmp_path: Path, fixture: str) -> None:
    source = kafka_fixtures_root() / fixture / "kafka" / "data"
    if not source.is_dir():
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(f"{source} not present")
    data = tmp_path / "data"
    _writable_copy(source, data)
    store = LogStore([data])
    locations = store.partitions("__consumer_offsets")
    assert locations
    # Roll every non-empty partition so the broker's active segments become cleanable too.
    for location in locations:
        with store.writable_log(location) as log:
            if log.active_segment.size:
                log.roll(now_ms=T0)
    before = {loc.topic_partition.partition: read_log(store, loc) for loc in locations}
    assert sum(len(recs) for _, recs in before.values()) > 100

    result = run_cli("compact", "--log-dir", str(data), "--topic", "__consumer_offsets", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["errors"] == []
    assert len(doc["cleaned"]) == sum(1 for _, recs in before.values() if recs)
    verify = run_cli("verify", "--log-dir", str(data), "--topic", "__consumer_offsets")
    assert verify.code == 0, verify.out

    store = LogStore([data])
    now = doc["now_ms"]
    for location in locations:
        batches, records = before[location.topic_partition.partition]
        expected = latest_values(records)
        # A tombstone whose (Kafka-stamped) horizon has passed may legitimately be gone.
        by_offset = {r.offset: r for r in records}
        expired = {by_offset[o].key for b in batches if b.horizon is not None and b.horizon <= now
                   for o in range(b.base, b.last + 1) if o in by_offset and by_offset[o].value is None}
        after_batches, after_records = read_log(store, location)
        got = latest_values(after_records)
        assert {k: v for k, v in expected.items() if k not in expired or k in got} == got
        assert len(after_records) <= len(records)
        for path in sorted(location.directory.glob("*.log")):
            peer_records(path.read_bytes())


def test_a_producer_snapshot_temp_file_does_not_stop_the_cleaner(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path)
    with store.writable_log(loc) as log:
        put(log, [("a", "1"), ("a", "2")])
        log.roll(now_ms=T0)
        put(log, [("b", "1")])
    (loc.directory / f"{3:020d}.snapshot.tmp").write_bytes(b"torn")  # a roll in progress (or killed)
    report = compact(store, now_ms=T0, topic="t")
    assert report.failures == []
    assert [r.offset for r in read_log(store, loc)[1]] == [1, 2]
    assert run_cli("recover", "--log-dir", str(tmp_path)).code == 0


# --- concurrency ----------------------------------------------------------------------------------------


def test_produce_subprocess_appending_while_the_cleaner_runs(tmp_path: Path) -> None:
    store, loc = new_store(tmp_path, segment_bytes="4096")
    with store.writable_log(loc) as log:
        for seg in range(6):
            put(log, [(f"old{i}", f"s{seg}") for i in range(40)], batch_records=4)
        log.roll(now_ms=T0)
    old_latest = latest_values(read_log(store, loc)[1])
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    produced: list[tuple[bytes, bytes]] = []
    errors: list[str] = []

    def producer() -> None:
        for round_ in range(4):
            lines = [f"r{round_}-{i:04d}\tv{round_}-{i}" for i in range(300)]
            proc = subprocess.run([sys.executable, "-m", "kafkalog.cli", "produce", "--log-dir", str(tmp_path),
                                   "--topic", "t", "--partition", "0", "--key-separator", "\t",
                                   "--batch-records", "3"], input="\n".join(lines) + "\n", text=True,
                                  capture_output=True, env=env, timeout=60)
            if proc.returncode != 0:
                errors.append(proc.stderr)
            produced.extend((k.encode(), v.encode()) for k, v in (line.split("\t") for line in lines))

    thread = threading.Thread(target=producer)
    thread.start()
    rounds = cleaned = 0
    while thread.is_alive() or rounds == 0:
        report = compact(LogStore([tmp_path]), now_ms=T0, topic="t")
        for failure in report.failures:  # only a refusal to swap segments that changed under it, by design
            assert "changed while being cleaned" in failure["error"], failure
        cleaned += len(report.cleaned)
        rounds += 1
        time.sleep(0.002)
    thread.join()
    assert not errors, errors
    cleaned += len(compact(store, now_ms=T0, topic="t").cleaned)
    assert cleaned >= 2
    _, records = read_log(store, loc)
    new = [(r.key, r.value) for r in records if r.key is not None and r.key.startswith(b"r")]
    assert new == produced  # every appended record, once, in order
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    assert {k: v for k, v in latest_values(records).items() if k.startswith(b"old")} == old_latest
    assert verify_store(LogStore([tmp_path])).ok
