"""Kafka's LogSegmentTest, ported onto ``kafkalog.log.segment.LogSegment`` (spec §4.2, §5, §11.5).

Kafka's ``records(offset, ...)`` helper writes magic v1 messages, each its own entry, all stamped
``offset * 10``; :func:`v1_records` writes the same bytes here, with its own encoder, so positions and
sizes are Kafka's (a one-record "hello" entry is 39 bytes). The transactional scenarios use v2 batches.
What a segment holds is read back with kafka-python (an implementation independent of kafkalog), and
where a user surface exists (``kafkalog recover``, ``verify``, ``consume``, ``dump``) through it too.

Kafka's ``seg.read(offset, maxSize)`` returns the records from the batch holding ``offset``;
kafkalog's segment has no bounded read, so :func:`read` finds that batch with ``translate_offset`` (the
offset index lookup, then a scan) and decodes everything from there. Kafka's
``findOffsetByTimestamp`` is :func:`find_offset_by_timestamp`, built on the segment's two indexes the
way spec §5.3 describes it.
"""

from __future__ import annotations

import os
import random
import struct
import time
import zlib
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka_log import MAX_INT, T0, ScenarioLog

from kafkalog.errors import OffsetOverflowError
from kafkalog.format import batch as fmt
from kafkalog.log import names
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry
from kafkalog.log.producer_state import ProducerState
from kafkalog.log.segment import LogSegment, SegmentSettings
from kafkalog.log.swap import mark_deleted
from kafkalog.log.txn_index import AbortedTxn

NO_TIMESTAMP = -1
MAX_LONG = (1 << 63) - 1


def v1_records(offset: int, *values: str) -> bytes:
    """Kafka's ``records(offset, values...)``: uncompressed magic v1 messages at consecutive offsets,
    no key, every timestamp ``offset * 10`` (CreateTime)."""
    out = b""
    for i, value in enumerate(values):
        body = struct.pack(">bbqi", 1, 0, offset * 10, -1) + struct.pack(">i", len(value)) + value.encode()
        message = struct.pack(">I", zlib.crc32(body)) + body
        out += struct.pack(">qi", offset + i, len(message)) + message
    return out


def create_segment(directory: Path, base: int, interval: int = 10, created_ms: int | None = None) -> LogSegment:
    """Kafka's ``createSegment(offset, indexIntervalBytes)`` (default interval 10): an empty ``.log``."""
    segment = LogSegment(directory, base, SegmentSettings(index_interval_bytes=interval), created_ms=created_ms)
    segment.log_path.touch()
    return segment


def reopen(segment: LogSegment) -> LogSegment:
    """The same segment's files opened again (indexes read back from disk)."""
    segment.close()
    return LogSegment(segment.directory, segment.base_offset, segment.settings)


def peer_records(data: bytes) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, timestamp) of every record in ``data``, decoded by kafka-python."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        out += [(r.offset, r.value, r.timestamp) for r in batch]
    return out


def read(segment: LogSegment, offset: int) -> list[tuple[int, bytes | None]] | None:
    """Kafka's ``seg.read(offset, ...)``: None past the last offset, else the records from the batch
    holding the first offset at or after ``offset``."""
    found = segment.translate_offset(offset)
    if found is None:
        return None
    return [(o, v) for o, v, _ in peer_records(segment.read_bytes(found.position))]


def batch_last_offsets(segment: LogSegment) -> list[int]:
    records = MemoryRecords(segment.read_bytes())
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.append(list(batch)[-1].offset if batch.magic < 2 else batch.base_offset + batch.last_offset_delta)
    return out


def find_offset_by_timestamp(segment: LogSegment, timestamp: int, starting_offset: int = 0) -> int | None:
    """``LogSegment.findOffsetByTimestamp`` (spec §5.3): the time index narrows the start, the offset
    index gives its position, then the first record stamped at or after ``timestamp``."""
    _, indexed_offset = segment.time_index.lookup(timestamp)
    _, position = segment.offset_index.lookup(max(indexed_offset, starting_offset))
    for offset, _, ts in peer_records(segment.read_bytes(position)):
        if ts >= timestamp and offset >= starting_offset:
            return offset
    return None


def write_nonsense(path: Path, position: int, size: int, rng: random.Random) -> None:
    """Kafka's ``writeNonsenseToFile``: ``size`` random bytes from ``position`` on."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(rng.randrange(255) for _ in range(size)))


def txn_batch(offset: int, producer_id: int, *, epoch: int = 0, sequence: int = 100, leader_epoch: int = 15,
              transactional: bool = True) -> bytes:
    """Two records "a", "b" at ``offset`` (``MemoryRecords.withTransactionalRecords``), or a plain batch
    for producer id -1."""
    records = [fmt.Record(offset, NO_TIMESTAMP, None, b"a"), fmt.Record(offset + 1, NO_TIMESTAMP, None, b"b")]
    if producer_id < 0:
        return fmt.build_batch(records, partition_leader_epoch=leader_epoch)
    return fmt.build_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                           is_transactional=transactional, partition_leader_epoch=leader_epoch)


def end_txn(kind: fmt.ControlType, producer_id: int, offset: int, epoch: int = 0) -> bytes:
    """``endTxnRecords``: a marker with coordinator epoch 0 and no timestamp."""
    return fmt.end_txn_marker_batch(kind, offset=offset, timestamp=NO_TIMESTAMP, producer_id=producer_id,
                                    producer_epoch=epoch, coordinator_epoch=0, partition_leader_epoch=0)


# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "largest"), [
    (0, -2147483648),
    (0, 2147483648),
    (1, 0),
    (100, 10),
    (2147483648, 0),
    (-2147483648, 0),
    (2147483648, 4294967296),
])
def test_append_for_log_segment_offset_overflow_exception(tmp_path: Path, base: int, largest: int) -> None:
    """LogSegmentTest.testAppendForLogSegmentOffsetOverflowException: an append whose largest offset
    minus the base is negative or above Int.MaxValue raises (LogSegmentOffsetOverflowException /
    OffsetOverflowError), and writes nothing."""
    segment = create_segment(tmp_path, base)
    with pytest.raises(OffsetOverflowError):
        segment.append(largest, T0, largest, v1_records(0, "hello"))
    assert segment.size == 0


def test_read_on_empty_segment(tmp_path: Path) -> None:
    """LogSegmentTest.testReadOnEmptySegment: a read of an empty segment is null."""
    segment = create_segment(tmp_path, 40)
    assert read(segment, 40) is None


def test_read_before_first_offset(tmp_path: Path) -> None:
    """LogSegmentTest.testReadBeforeFirstOffset: a read below the first offset returns every record
    from the first one on."""
    segment = create_segment(tmp_path, 40)
    segment.append(53, NO_TIMESTAMP, -1, v1_records(50, "hello", "there", "little", "bee"))
    assert read(segment, 41) == [(50, b"hello"), (51, b"there"), (52, b"little"), (53, b"bee")]


def test_read_after_last(tmp_path: Path) -> None:
    """LogSegmentTest.testReadAfterLast: a read past the last offset is null."""
    segment = create_segment(tmp_path, 40)
    segment.append(51, NO_TIMESTAMP, -1, v1_records(50, "hello", "there"))
    assert read(segment, 52) is None
    assert read(segment, 51) == [(51, b"there")]


def test_read_from_gap(tmp_path: Path) -> None:
    """LogSegmentTest.testReadFromGap: a read at an offset in a gap (55) starts at the next records."""
    segment = create_segment(tmp_path, 40)
    segment.append(51, NO_TIMESTAMP, -1, v1_records(50, "hello", "there"))
    segment.append(61, NO_TIMESTAMP, -1, v1_records(60, "alpha", "beta"))
    assert read(segment, 55) == [(60, b"alpha"), (61, b"beta")]


def test_read_when_no_max_position(tmp_path: Path) -> None:
    """LogSegmentTest.testReadWhenNoMaxPosition: reads at 48, 50, 51 start in segment 40 at positions
    0, 0 and 39 (Kafka's fetchOffsetMetadata); at 52 and 53, past the end, they are null.

    Kafka also finds no record fits max size 1 (the 39-byte entry is larger), with minOneMessage either
    way; kafkalog's segment has no size-bounded read, so the entry's size (39) is asserted instead."""
    segment = create_segment(tmp_path, 40)
    segment.append(51, NO_TIMESTAMP, -1, v1_records(50, "hello", "there"))
    positions = {offset: segment.translate_offset(offset) for offset in (48, 50, 51, 52, 53)}
    assert [(p.position, p.size) if p else None for p in positions.values()] == [(0, 39), (0, 39), (39, 39), None, None]
    assert segment.base_offset == 40


def test_log_segment_truncate(tmp_path: Path) -> None:
    """LogSegmentTest.testTruncate: thirty times, append two entries, read both back, truncate the
    second off, and read only the first."""
    segment = create_segment(tmp_path, 40)
    offset = 40
    for _ in range(30):
        ms1, ms2 = v1_records(offset, "hello"), v1_records(offset + 1, "hello")
        segment.append(offset, NO_TIMESTAMP, -1, ms1)
        segment.append(offset + 1, NO_TIMESTAMP, -1, ms2)
        assert read(segment, offset) == [(offset, b"hello"), (offset + 1, b"hello")]
        segment.truncate_to(offset + 1)
        assert read(segment, offset) == [(offset, b"hello")]
        assert segment.read_bytes()[-len(ms1):] == ms1
        offset += 1
    assert segment.read_next_offset() == 70
    assert batch_last_offsets(segment) == list(range(40, 70))


def test_truncate_empty_segment(tmp_path: Path) -> None:
    """LogSegmentTest.testTruncateEmptySegment: a follower truncating to an empty segment resets its
    roll clock and leaves its indexes not full; such an empty segment does not roll however long it
    waited, but does roll when the next offset does not fit.

    Kafka asks ``timeWaitedForRoll``/``shouldRoll`` of the segment; in kafkalog the roll decision is
    the log's, so the waiting is asserted on the segment's creation time and the roll through appends."""
    segment = create_segment(tmp_path, 0, created_ms=T0)
    segment.close()
    reopened = LogSegment(tmp_path, 0, SegmentSettings(10), created_ms=T0)
    assert len(reopened.time_index) * 12 == 0
    assert len(reopened.offset_index) * 8 == 0
    now = T0 + 500
    reopened.truncate_to(57, now_ms=now)
    assert now - reopened.created_ms == 0  # timeWaitedForRoll
    assert not reopened.time_index.is_full
    assert not reopened.offset_index.is_full
    max_segment_ms = 300_000
    assert now + max_segment_ms + 1 - reopened.created_ms == max_segment_ms + 1

    # The roll decision: an empty active segment with segment.ms long past does not roll ...
    log = ScenarioLog(tmp_path / "log", segment_ms=max_segment_ms, segment_jitter_ms=0)
    log.clock_ms = int(time.time() * 1000) + 10 * max_segment_ms  # long after the segment was created
    log.append([("k", "v")], base_offset=100)
    assert log.segment_bases() == [0]
    # ... but one whose next offset would not fit a relative offset does.
    fresh = ScenarioLog(tmp_path / "fresh", segment_ms=max_segment_ms, segment_jitter_ms=0)
    fresh.append([("k", "v")], base_offset=MAX_INT + 200)
    assert fresh.segment_bases() == [0, MAX_INT + 200]


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    """LogSegmentTest.testReloadLargestTimestampAndNextOffsetAfterTruncation: with an index interval
    of two entries less a byte, thirty appends make 14 time index entries; truncating to 41 leaves
    none, largest timestamp 400 (the remaining entry's) and next offset 41."""
    size = len(v1_records(0, "hello"))
    segment = create_segment(tmp_path, 40, interval=2 * size - 1)
    offset = 40
    for _ in range(30):
        segment.append(offset, offset, offset, v1_records(offset, "hello"))
        offset += 1
    assert segment.read_next_offset() == offset
    assert len(segment.time_index) == 30 // 2 - 1
    segment.truncate_to(41)
    assert len(segment.time_index) == 0
    assert segment.largest_timestamp() == 400
    assert segment.read_next_offset() == 41


def test_truncate_full(tmp_path: Path) -> None:
    """LogSegmentTest.testTruncateFull: truncating a whole segment resets its roll clock (waited 500,
    then 0), leaves its indexes not full and the segment empty, and the same offsets can be appended
    again."""
    segment = create_segment(tmp_path, 40, created_ms=T0)
    segment.append(41, NO_TIMESTAMP, -1, v1_records(40, "hello", "there"))
    now = T0 + 500
    # No first-batch timestamp (the append gave none), so the wait is measured from creation.
    assert segment.first_batch_timestamp() < 0
    assert now - segment.created_ms == 500
    segment.truncate_to(0, now_ms=now)
    assert now - segment.created_ms == 0
    assert segment.first_batch_timestamp() == MAX_LONG
    assert not segment.time_index.is_full
    assert not segment.offset_index.is_full
    assert read(segment, 0) is None
    assert segment.size == 0
    segment.append(41, NO_TIMESTAMP, -1, v1_records(40, "hello", "there"))
    assert read(segment, 40) == [(40, b"hello"), (41, b"there")]


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    """LogSegmentTest.testFindOffsetByTimestamp: records stamped 400..490; searches for indexed,
    unindexed, too-late and too-early timestamps."""
    message_size = len(v1_records(0, "msg00"))
    segment = create_segment(tmp_path, 40, interval=2 * message_size - 1)
    for i in range(40, 50):
        segment.append(i, i * 10, i, v1_records(i, f"msg{i}"))
    assert segment.largest_timestamp() == 490
    assert find_offset_by_timestamp(segment, 420) == 42
    assert find_offset_by_timestamp(segment, 421) == 43
    assert find_offset_by_timestamp(segment, 430) == 43
    assert find_offset_by_timestamp(segment, 431) == 44
    assert find_offset_by_timestamp(segment, 491) is None
    assert find_offset_by_timestamp(segment, 401) == 41
    assert find_offset_by_timestamp(segment, 399) == 40


def test_next_offset_calculation(tmp_path: Path) -> None:
    """LogSegmentTest.testNextOffsetCalculation: an empty segment's next offset is its base (40);
    after records 50–52 it is 53."""
    segment = create_segment(tmp_path, 40)
    assert segment.read_next_offset() == 40
    segment.append(52, NO_TIMESTAMP, -1, v1_records(50, "hello", "there", "you"))
    assert segment.read_next_offset() == 53
    assert reopen(segment).read_next_offset() == 53


def test_change_file_suffixes(tmp_path: Path) -> None:
    """LogSegmentTest.testChangeFileSuffixes: renaming a segment's files to ``.deleted`` renames the
    ``.log`` and creates no index file that did not exist.

    Kafka renames through ``changeFileSuffixes`` and then creates the lazy indexes under the new name
    when first touched; kafkalog renames through ``swap.mark_deleted`` (what retention and the swap
    use) and never creates a file it renames, so only the renaming is asserted."""
    segment = LogSegment(tmp_path, 40)
    segment.log_path.touch()
    assert not segment.offset_index.path.exists()
    assert not segment.time_index.path.exists()
    marked = mark_deleted(tmp_path, [path.name for path in segment.files()], mark_time_ms=T0)
    assert marked == [segment.log_path.name + ".deleted"]
    assert not segment.log_path.exists()
    assert Path(str(segment.log_path) + ".deleted").exists()
    assert not Path(str(segment.offset_index.path) + ".deleted").exists()
    assert not Path(str(segment.time_index.path) + ".deleted").exists()
    assert not segment.offset_index.path.exists()
    assert not segment.time_index.path.exists()


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryFixesCorruptIndex: after garbage is written over the offset index,
    recovery rebuilds it and every offset reads back from its own record. Through the user surface:
    ``verify`` reports the damage, ``recover`` rebuilds the same index bytes, ``consume`` reads."""
    segment = create_segment(tmp_path, 0)
    for i in range(100):
        segment.append(i, NO_TIMESTAMP, -1, v1_records(i, str(i)))
    segment.close()
    good = segment.offset_index.path.read_bytes()
    assert len(good) > 8 * 10
    rng = random.Random(1)
    write_nonsense(segment.offset_index.path, 5, len(good), rng)
    segment = LogSegment(tmp_path, 0, SegmentSettings(10))
    assert segment.recover(ProducerState()) == 0
    for i in range(100):
        records = read(segment, i)
        assert records is not None and records[0][0] == i
    segment.close()
    assert segment.offset_index.path.read_bytes() == good

    log = ScenarioLog(tmp_path / "log", index_interval_bytes=10)
    with log.writable() as writable:
        for i in range(100):
            writable.append_batch(fmt.build_batch([fmt.Record(i, T0 + i, None, str(i).encode())],
                                                  partition_leader_epoch=0), now_ms=T0 + i)
    index_path = names.index_file(log.directory, 0)
    good = index_path.read_bytes()
    write_nonsense(index_path, 5, len(good), rng)
    assert log.verify().code == 1
    log.recover()
    assert index_path.read_bytes() == good
    assert log.verify().code == 0
    for i in range(0, 100, 9):
        out = log.cli("consume", "--log-dir", str(log.log_dir), "--topic", "t", "--partition", "0",
                      "--from-offset", str(i), "--max-records", "1", "--print-offset").out
        assert out == f"{i}\tnull\t{i}\n"


def test_recover_transaction_index(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoverTransactionIndex: recovery rebuilds one aborted transaction, pid2's
    (102–106), whose last stable offset is held at 100 by pid1's open transaction; recovered again
    with pid2's transaction begun at 75 in an earlier segment (loaded state), the entry starts at 75.

    Kafka also asserts the state manager's map end offset (108); kafkalog's ProducerState keeps no
    end offset, so the state left after the recovery is asserted instead (no open transaction)."""
    pid1, pid2 = 5, 10
    segment = create_segment(tmp_path, 100)
    segment.append(101, NO_TIMESTAMP, 100, txn_batch(100, pid1))
    segment.append(103, NO_TIMESTAMP, 102, txn_batch(102, pid2))
    segment.append(105, NO_TIMESTAMP, 104, txn_batch(104, -1))
    segment.append(106, NO_TIMESTAMP, 106, end_txn(fmt.ControlType.ABORT, pid2, 106))
    segment.append(107, NO_TIMESTAMP, 107, end_txn(fmt.ControlType.COMMIT, pid1, 107))

    state = ProducerState()
    segment.recover(state)
    assert segment.txn_index.entries() == [AbortedTxn(pid2, 102, 106, 100)]
    assert state.first_unstable_offset() is None
    assert struct.unpack(">hqqqq", segment.txn_index.path.read_bytes()) == (0, pid2, 102, 106, 100)

    state = ProducerState([ProducerSnapshotEntry(
        producer_id=pid2, producer_epoch=0, last_sequence=0, last_offset=10, offset_delta=5,
        timestamp_ms=NO_TIMESTAMP, coordinator_epoch=-1, current_txn_first_offset=75)])
    segment.recover(state)
    assert segment.txn_index.entries() == [AbortedTxn(pid2, 75, 106, 100)]
    assert state.first_unstable_offset() is None


def test_recover_transaction_index_txn_begun_in_earlier_segment(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoverTransactionIndex, second half, through ``kafkalog recover``: a
    transaction begun in segment 0 and aborted in segment 1; segment 1's indexes are lost and
    recovered. Kafka recovers it with the producer state at offset 1 (spec §11.5 step 0), so the entry
    keeps first offset 0: (1, 0, 1, 2)."""
    log = ScenarioLog(tmp_path)
    log.txn(1, [("k", "v")])
    log.roll()
    log.abort(1)
    log.roll()
    assert log.aborted_txns() == [(1, 0, 1, 2)]
    names.txn_index_file(log.directory, 1).unlink()
    names.index_file(log.directory, 1).write_bytes(b"\x01\x02\x03")  # a torn index: the segment is recovered
    log.recover()
    assert log.aborted_txns() == [(1, 0, 1, 2)]


def test_recovery_rebuilds_epoch_cache(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryRebuildsEpochCache: batches at 104 (epoch 0), 106 and 108 (epoch 1)
    and 110 (epoch 2) recovered into an empty epoch cache give (0, 104), (1, 106), (2, 110).

    kafkalog's ``LogSegment.recover`` takes no epoch cache, so the scenario runs through the log:
    the partition's ``leader-epoch-checkpoint`` is emptied and ``kafkalog recover --full`` recovers the
    segment, as Kafka's loader recovers unflushed segments into the partition's cache."""
    log = ScenarioLog(tmp_path)
    for base, epoch in ((104, 0), (106, 1), (108, 1), (110, 2)):
        log.append([(None, "a"), (None, "b")], base_offset=base, leader_epoch=epoch)
    checkpoint_path = log.directory / "leader-epoch-checkpoint"
    assert checkpoint_path.read_text() == "0\n3\n0 104\n1 106\n2 110\n"
    checkpoint_path.write_text("0\n0\n")
    report = log.recover(full=True)
    assert report["partitions"][0]["recovered_segments"] == [0]  # type: ignore[index]
    assert checkpoint_path.read_text() == "0\n3\n0 104\n1 106\n2 110\n"


def test_recovery_fixes_corrupt_time_index(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryFixesCorruptTimeIndex: after garbage over the time index, recovery
    rebuilds it: timestamp 10·i finds offset i and 10·i + 1 finds i + 1."""
    segment = create_segment(tmp_path, 0)
    for i in range(100):
        segment.append(i, i * 10, i, v1_records(i, str(i)))
    segment.close()
    good = segment.time_index.path.read_bytes()
    write_nonsense(segment.time_index.path, 5, len(good), random.Random(2))
    segment = LogSegment(tmp_path, 0, SegmentSettings(10))
    segment.recover(ProducerState())
    for i in range(100):
        assert find_offset_by_timestamp(segment, i * 10) == i
        if i < 99:
            assert find_offset_by_timestamp(segment, i * 10 + 1) == i + 1
    segment.close()
    assert segment.time_index.path.read_bytes() == good


def test_recovery_with_corrupt_message(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryWithCorruptMessage: ten times, garbage from a random point inside a
    random entry to the end; recovery truncates to the entries before it."""
    rng = random.Random(20241025)
    for attempt in range(10):
        directory = tmp_path / str(attempt)
        directory.mkdir()
        segment = create_segment(directory, 0)
        for i in range(20):
            segment.append(i, NO_TIMESTAMP, -1, v1_records(i, str(i)))
        corrupt_from = rng.randrange(20)
        found = segment.translate_offset(corrupt_from)
        assert found is not None
        position = found.position + rng.randrange(15)
        write_nonsense(segment.log_path, position, segment.size - position, rng)
        segment.recover(ProducerState())
        assert batch_last_offsets(segment) == list(range(corrupt_from))
        assert segment.size == found.position
        segment.delete_files()
        assert not segment.log_path.exists()


def test_create_with_init_file_size_append_message(tmp_path: Path) -> None:
    """LogSegmentTest.testCreateWithInitFileSizeAppendMessage: a segment created with
    ``preallocate=true`` takes appends and a read from a gap finds the later records.

    Kafka's active ``.log`` is 512 MiB of preallocated space while open; kafkalog never preallocates
    (the ``.log`` is always exactly its data), which is asserted instead."""
    log = ScenarioLog(tmp_path, preallocate="true", index_interval_bytes=10, segment_index_bytes=1000,
                      segment_jitter_ms=0)
    log.append([(None, "hello"), (None, "there")], base_offset=50)
    log.append([(None, "alpha"), (None, "beta")], base_offset=60)
    out = log.cli("consume", "--log-dir", str(log.log_dir), "--topic", "t", "--partition", "0",
                  "--from-offset", "55", "--print-offset").out
    assert out == "60\tnull\talpha\n61\tnull\tbeta\n"
    assert names.log_file(log.directory, 0).stat().st_size == sum(b.size for b in log.batches())


def test_create_with_init_file_size_clear_shutdown(tmp_path: Path) -> None:
    """LogSegmentTest.testCreateWithInitFileSizeClearShutdown: after a clean close the ``.log`` is
    trimmed to its data and reopens with the same size, reading the same records.

    kafkalog never preallocates, so the file is its data before the close too. What Kafka leaves when
    it does not shut down cleanly, a zero-filled preallocated tail, is cut back by ``kafkalog recover``."""
    log = ScenarioLog(tmp_path, preallocate="true", index_interval_bytes=10, segment_index_bytes=1000,
                      segment_jitter_ms=0)
    log.append([(None, "hello"), (None, "there")], base_offset=50)
    log.append([(None, "alpha"), (None, "beta")], base_offset=60)
    path = names.log_file(log.directory, 0)
    size = path.stat().st_size
    assert size == sum(b.size for b in log.batches())
    segment = LogSegment(log.directory, 0)
    assert [r for r in (read(segment, 55) or [])] == [(60, b"alpha"), (61, b"beta")]
    assert segment.size == size
    with open(path, "ab") as f:  # Kafka's preallocated file after an unclean stop
        f.write(bytes(64 * 1024))
    log.recover(full=True)
    assert path.stat().st_size == size
    assert read(LogSegment(log.directory, 0), 55) == [(60, b"alpha"), (61, b"beta")]


def test_should_truncate_even_if_offset_points_to_a_gap_in_the_log(tmp_path: Path) -> None:
    """LogSegmentTest.shouldTruncateEvenIfOffsetPointsToAGapInTheLog: with batches at 40 and 43,
    truncating to 41 (in the gap) removes the batch at 43."""
    segment = create_segment(tmp_path, 40)
    ms1 = fmt.build_batch([fmt.Record(40, 40 * 1000, None, b"first message")])
    ms2 = fmt.build_batch([fmt.Record(43, 43 * 1000, None, b"message after gap")])
    segment.append(40, NO_TIMESTAMP, -1, ms1)
    segment.append(43, NO_TIMESTAMP, -1, ms2)
    segment.truncate_to(41)
    assert batch_last_offsets(segment) == [40]
    assert read(segment, 40) == [(40, b"first message")]


def test_get_first_batch_timestamp(tmp_path: Path) -> None:
    """LogSegmentTest.testGetFirstBatchTimestamp: Long.MaxValue while empty, then the first append's
    timestamp (1000)."""
    segment = create_segment(tmp_path, 1)
    assert segment.first_batch_timestamp() == MAX_LONG
    segment.append(1, 1000, 1, fmt.build_batch([fmt.Record(1, NO_TIMESTAMP, None, b"one")]))
    assert segment.first_batch_timestamp() == 1000


def test_delete_if_exists_with_get_parent_is_null(tmp_path: Path) -> None:
    """LogSegmentTest.testDeleteIfExistsWithGetParentIsNull: deleting a segment whose transaction index
    does not exist does not fail. Kafka mocks the files; here the ``.txnindex`` is simply absent."""
    segment = create_segment(tmp_path, 0)
    segment.append(0, T0, 0, v1_records(0, "a"))
    segment.close()
    assert not segment.txn_index.path.exists()
    segment.delete_files()
    assert not any(p.exists() for p in segment.files())
    assert os.listdir(tmp_path) == []
