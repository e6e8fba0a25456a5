"""LogSegment (spec §4.2, §5, §11.5), after Kafka's LogSegmentTest (spec §15 items 50–60).

Batches are v2 (kafkalog writes nothing else); Kafka's ``records(offset, ...)`` helper becomes
:func:`records`, one batch whose records have consecutive offsets and timestamp ``10 * offset``.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptRecordError, OffsetOverflowError
from kafkalog.format import batch as fmt
from kafkalog.format.scan import scan_batches
from kafkalog.log.checkpoint import LeaderEpochFileCache
from kafkalog.log.index import encode_offset_index, encode_time_index
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry
from kafkalog.log.producer_state import ProducerState
from kafkalog.log.segment import LogSegment, SegmentSettings
from kafkalog.log.txn_index import AbortedTxn

MAX_LONG = (1 << 63) - 1
NO_TIMESTAMP = -1
_unique = itertools.count()


def records(offset: int, *values: str, timestamp: int | None = None, **kw: object) -> bytes:
    """One batch holding ``values`` at offsets ``offset, offset+1, ...`` (timestamp 10·offset)."""
    ts = offset * 10 if timestamp is None else timestamp
    return fmt.build_batch([fmt.Record(offset + i, ts, None, v.encode()) for i, v in enumerate(values)],
                           **kw)  # type: ignore[arg-type]


def segment(directory: Path, base: int, interval: int = 10, **kw: object) -> LogSegment:
    """A segment whose ``.log`` exists, as ``LocalLog`` creates them (the constructor creates no file)."""
    seg = LogSegment(directory, base, SegmentSettings(index_interval_bytes=interval), **kw)  # type: ignore[arg-type]
    seg.log_path.touch()
    return seg


def batch_offsets(seg: LogSegment) -> list[int]:
    _, batches = seg.scan()
    return [int(x) for x in batches.last_offset]


def read_records(seg: LogSegment, offset: int) -> list[fmt.Record]:
    """Kafka's ``seg.read(offset, ...)``: the records of every batch from the one holding ``offset``."""
    found = seg.translate_offset(offset)
    if found is None:
        return []
    data = seg.read_bytes(found.position)
    out: list[fmt.Record] = []
    for entry in fmt.iter_entries(data):
        out += fmt.decode_records(data[entry.position:entry.position + entry.size])
    return out


def find_offset_by_timestamp(seg: LogSegment, timestamp: int, starting_offset: int = 0) -> int | None:
    """Spec §5.3 findOffsetByTimestamp, built on the segment's two indexes."""
    _, ts_offset = seg.time_index.lookup(timestamp)
    _, position = seg.offset_index.lookup(max(ts_offset, starting_offset))
    data, batches = seg.scan(position)
    for i in range(len(batches)):
        if int(batches.max_timestamp[i]) >= timestamp:
            p, n = int(batches.position[i]), int(batches.size[i])
            for record in fmt.decode_records(data[p:p + n]):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.offset
    return None


# ---------------------------------------------------------------------------------------------------
# 50: offset overflow on append


@pytest.mark.parametrize(("base", "largest"), [
    (0, -(1 << 31)),
    (0, 1 << 31),
    (1, 0),
    (100, 10),
    (1 << 31, 0),
    ((1 << 31), 1 << 32),
])
def test_append_offset_overflow(tmp_path: Path, base: int, largest: int) -> None:
    seg = segment(tmp_path, base)
    with pytest.raises(OffsetOverflowError):
        seg.append(largest, int(time.time() * 1000), largest, records(0, "hello"))
    assert seg.size == 0  # nothing was written
    assert seg.read_next_offset() == base


def test_append_at_the_relative_offset_limits(tmp_path: Path) -> None:
    seg = segment(tmp_path, 100)
    raw = records(100, "a")
    seg.append(100, 1000, 100, raw)  # relative offset 0
    seg.append(100 + (1 << 31) - 1, 1000, 100, records(100 + (1 << 31) - 1, "b"))  # MAX_INT
    assert seg.read_next_offset() == 100 + (1 << 31)


# ---------------------------------------------------------------------------------------------------
# 51: reads


def test_read_on_empty_segment(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    assert seg.translate_offset(40) is None


def test_read_before_first_offset(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    ms = records(50, "hello", "there", "little", "bee")
    seg.append(53, NO_TIMESTAMP, -1, ms)
    found = seg.translate_offset(41)
    assert found is not None
    assert (found.last_offset, found.position, found.size) == (53, 0, len(ms))
    assert [(r.offset, r.value) for r in read_records(seg, 41)] == [
        (50, b"hello"), (51, b"there"), (52, b"little"), (53, b"bee")]


def test_read_after_last(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    seg.append(51, NO_TIMESTAMP, -1, records(50, "hello", "there"))
    assert seg.translate_offset(52) is None
    assert seg.translate_offset(51) is not None


def test_read_from_gap(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    ms = records(50, "hello", "there")
    seg.append(51, NO_TIMESTAMP, -1, ms)
    ms2 = records(60, "alpha", "beta")
    seg.append(61, NO_TIMESTAMP, -1, ms2)
    found = seg.translate_offset(55)
    assert found is not None
    assert (found.last_offset, found.position, found.size) == (61, len(ms), len(ms2))
    assert seg.read_bytes(found.position, found.position + found.size) == ms2
    assert [(r.offset, r.value) for r in read_records(seg, 55)] == [(60, b"alpha"), (61, b"beta")]


def test_translate_offset_uses_the_index_lower_bound(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, interval=0)
    sizes = []
    for o in range(20):
        raw = records(o, f"v{o}")
        sizes.append(len(raw))
        seg.append(o, o, o, raw)
    assert len(seg.offset_index) == 19  # interval 0: every append after the first
    for o in range(20):
        found = seg.translate_offset(o)
        assert found is not None
        assert (found.last_offset, found.position) == (o, sum(sizes[:o]))
    # start_position moves the scan forward past the index's answer
    found = seg.translate_offset(3, start_position=sum(sizes[:10]))
    assert found is not None and found.last_offset == 10


# ---------------------------------------------------------------------------------------------------
# 52: truncation


def test_truncate(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    offset = 40
    for _ in range(30):
        ms1 = records(offset, "hello")
        seg.append(offset, NO_TIMESTAMP, -1, ms1)
        ms2 = records(offset + 1, "hello")
        seg.append(offset + 1, NO_TIMESTAMP, -1, ms2)
        assert [r.offset for r in read_records(seg, offset)] == [offset, offset + 1]
        size = seg.size
        removed = seg.truncate_to(offset + 1)
        assert removed == len(ms2)
        assert seg.size == size - len(ms2)
        assert [r.offset for r in read_records(seg, offset)] == [offset]
        assert seg.read_bytes(seg.size - len(ms1)) == ms1
        assert seg.read_next_offset() == offset + 1
        assert seg.offset_index.last_offset <= offset
        offset += 1


def test_truncate_to_a_gap(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    ms1 = records(40, "first message")
    seg.append(40, NO_TIMESTAMP, -1, ms1)
    ms2 = records(43, "message after gap")
    seg.append(43, NO_TIMESTAMP, -1, ms2)
    assert seg.truncate_to(41) == len(ms2)
    assert batch_offsets(seg) == [40]
    assert seg.read_bytes() == ms1
    assert seg.read_next_offset() == 41


def test_truncate_full_resets_roll_state(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40, created_ms=1000)
    seg.append(41, NO_TIMESTAMP, -1, records(40, "hello", "there", timestamp=NO_TIMESTAMP))
    assert seg.rolling_based_timestamp == NO_TIMESTAMP
    before = int(time.time() * 1000)
    assert seg.truncate_to(0) > 0
    assert seg.size == 0
    assert seg.created_ms >= before  # the roll clock restarts
    assert seg.rolling_based_timestamp is None
    assert seg.first_batch_timestamp() == MAX_LONG
    assert not seg.time_index.is_full
    assert not seg.offset_index.is_full
    assert seg.translate_offset(0) is None
    assert seg.read_next_offset() == 40
    seg.append(41, NO_TIMESTAMP, -1, records(40, "hello", "there"))
    assert seg.read_next_offset() == 42


def test_truncate_empty_segment_resets_creation_time(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, created_ms=1000)
    seg.close()
    reopened = segment(tmp_path, 0, created_ms=1000)
    before = int(time.time() * 1000)
    reopened.truncate_to(57)
    assert not reopened.time_index.is_full
    assert not reopened.offset_index.is_full
    assert reopened.created_ms >= before


# ---------------------------------------------------------------------------------------------------
# 53: largest timestamp and next offset reloaded after truncation


def test_reload_largest_timestamp_and_next_offset_after_truncation(tmp_path: Path) -> None:
    size = len(records(0, "hello"))
    seg = segment(tmp_path, 40, interval=2 * size - 1)
    offset = 40
    for _ in range(30):
        raw = records(offset, "hello")
        assert len(raw) == size
        seg.append(offset, offset, offset, raw)
        offset += 1
    assert seg.read_next_offset() == offset == 70
    assert len(seg.time_index) == 14
    assert len(seg.offset_index) == 14
    # entries come at appends 3, 5, ..., 29 (offsets 42, 44, ..., 68), at the start of that batch
    assert [seg.offset_index.entry(i) for i in range(14)] == [(42 + 2 * i, (2 + 2 * i) * size) for i in range(14)]
    assert [seg.time_index.entry(i) for i in range(14)] == [(42 + 2 * i, 42 + 2 * i) for i in range(14)]

    seg.truncate_to(41)
    assert len(seg.time_index) == 0
    assert len(seg.offset_index) == 0
    assert seg.largest_timestamp() == 400  # from the batch left, not the index
    assert seg.read_next_offset() == 41


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    size = len(records(0, "msg00"))
    seg = segment(tmp_path, 40, interval=2 * size - 1)
    for i in range(40, 50):
        seg.append(i, i * 10, i, records(i, f"msg{i}"))
    assert seg.largest_timestamp() == 490
    assert find_offset_by_timestamp(seg, 420) == 42
    assert find_offset_by_timestamp(seg, 421) == 43
    assert find_offset_by_timestamp(seg, 430) == 43
    assert find_offset_by_timestamp(seg, 431) == 44
    assert find_offset_by_timestamp(seg, 491) is None
    assert find_offset_by_timestamp(seg, 401) == 41
    assert find_offset_by_timestamp(seg, 399) == 40


# ---------------------------------------------------------------------------------------------------
# 55: next offset


def test_next_offset_calculation(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    assert seg.read_next_offset() == 40
    seg.append(52, NO_TIMESTAMP, -1, records(50, "hello", "there", "you"))
    assert seg.read_next_offset() == 53
    seg.close()
    assert segment(tmp_path, 40).read_next_offset() == 53


def test_next_offset_ignores_an_index_past_the_data(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    seg.append(2, 0, 2, records(0, "a", "b", "c"))
    seg.close()
    seg.offset_index.path.write_bytes(encode_offset_index([(7, 10_000)], 0))
    assert segment(tmp_path, 0).read_next_offset() == 3


# ---------------------------------------------------------------------------------------------------
# 56: recovery fixes garbage indexes


def write_nonsense(path: Path, position: int, size: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(rng.randrange(256) for _ in range(size)))


def test_recovery_fixes_corrupt_index(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(100):
        seg.append(i, NO_TIMESTAMP, -1, records(i, str(i)))
    good = [seg.offset_index.entry(i) for i in range(len(seg.offset_index))]
    assert len(good) > 10
    seg.close()
    index_file = seg.offset_index.path
    write_nonsense(index_file, 5, index_file.stat().st_size - 5)
    seg = segment(tmp_path, 0)
    assert [seg.offset_index.entry(i) for i in range(len(seg.offset_index))] != good
    assert seg.recover() == 0
    assert [seg.offset_index.entry(i) for i in range(len(seg.offset_index))] == good
    for i in range(100):
        assert read_records(seg, i)[0].offset == i
    seg.close()
    assert index_file.read_bytes() == encode_offset_index(good, 0)


def test_recovery_fixes_corrupt_time_index(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for i in range(100):
        seg.append(i, i * 10, i, records(i, str(i)))
    seg.close()  # adds the final entry (990, 99)
    good = [seg.time_index.entry(i) for i in range(len(seg.time_index))]
    assert good[-1] == (990, 99)
    time_file = seg.time_index.path
    write_nonsense(time_file, 5, time_file.stat().st_size - 5)
    seg = segment(tmp_path, 0)
    seg.recover()
    assert [seg.time_index.entry(i) for i in range(len(seg.time_index))] == good
    for i in range(100):
        assert find_offset_by_timestamp(seg, i * 10) == i
        if i < 99:
            assert find_offset_by_timestamp(seg, i * 10 + 1) == i + 1
    seg.close()
    assert time_file.read_bytes() == encode_time_index(good, 0)


# ---------------------------------------------------------------------------------------------------
# 57: recovery truncates at a corrupt batch


@pytest.mark.parametrize(("corrupt_at", "skew"), [(0, 0), (3, 7), (7, 14), (12, 3), (19, 11)])
def test_recovery_with_corrupt_message(tmp_path: Path, corrupt_at: int, skew: int) -> None:
    seg = segment(tmp_path, 0)
    for j in range(20):
        seg.append(j, NO_TIMESTAMP, -1, records(j, str(j)))
    found = seg.translate_offset(corrupt_at)
    assert found is not None
    total = seg.size
    position = found.position + skew
    write_nonsense(seg.log_path, position, total - position, seed=corrupt_at)
    truncated = seg.recover()
    assert truncated == total - found.position
    assert batch_offsets(seg) == list(range(corrupt_at))
    assert seg.size == found.position
    assert seg.read_next_offset() == corrupt_at


def test_recovery_cuts_a_torn_last_batch_even_without_truncate_corrupt(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    for j in range(5):
        seg.append(j, 1000 + j, j, records(j, str(j)))
    seg.close()
    full = seg.size
    os.truncate(seg.log_path, full - 9)
    seg = segment(tmp_path, 0)
    assert seg.recover(truncate_corrupt=False) == len(records(4, "4")) - 9
    assert batch_offsets(seg) == [0, 1, 2, 3]


def test_recovery_truncates_a_zero_filled_tail(tmp_path: Path) -> None:
    # A preallocated .log (preallocate=true) left by a crash: zeros after the data (spec §11.5).
    seg = segment(tmp_path, 0)
    for j in range(4):
        seg.append(j, 1000 + j, j, records(j, str(j)))
    seg.close()
    size = seg.size
    with open(seg.log_path, "ab") as f:
        f.write(bytes(4096))
    seg = segment(tmp_path, 0)
    assert seg.recover(truncate_corrupt=False) == 4096
    assert seg.size == size
    assert batch_offsets(seg) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------------------
# 58: recovery rebuilds the transaction index


def txn_batch(offset: int, pid: int, *, epoch: int = 0, sequence: int = 100, leader_epoch: int = 15,
              transactional: bool = True) -> bytes:
    recs = [fmt.Record(offset, NO_TIMESTAMP, None, b"a"), fmt.Record(offset + 1, NO_TIMESTAMP, None, b"b")]
    if pid < 0:
        return fmt.build_batch(recs, partition_leader_epoch=leader_epoch)
    return fmt.build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                           is_transactional=transactional, partition_leader_epoch=leader_epoch)


def marker(kind: fmt.ControlType, pid: int, offset: int, epoch: int = 0) -> bytes:
    return fmt.end_txn_marker_batch(kind, offset=offset, timestamp=NO_TIMESTAMP, producer_id=pid,
                                    producer_epoch=epoch, coordinator_epoch=0, partition_leader_epoch=0)


def test_recovery_assigns_each_new_epoch_once_to_the_cache(tmp_path: Path) -> None:
    """``LogSegment.recover`` with an epoch cache (LogSegmentTest.testRecoveryRebuildsEpochCache): a
    batch starts its epoch when it is greater than the latest; lower, equal and absent (-1) epochs
    change nothing, and an entry already in the cache is kept."""
    seg = segment(tmp_path, 100)
    for offset, epoch in ((100, 0), (102, 1), (104, 1), (106, -1), (108, 0), (110, 3)):
        raw = records(offset, "a", "b", partition_leader_epoch=epoch)
        seg.append(offset + 1, offset * 10, offset + 1, raw)
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n0 50\n")
    cache = LeaderEpochFileCache(path)
    assert seg.recover(ProducerState(), leader_epochs=cache) == 0
    assert cache.entries == [(0, 50), (1, 102), (3, 110)]
    assert path.read_text() == "0\n3\n0 50\n1 102\n3 110\n"
    assert seg.recover(ProducerState(), leader_epochs=LeaderEpochFileCache(path)) == 0  # again: nothing new
    assert path.read_text() == "0\n3\n0 50\n1 102\n3 110\n"


def test_recover_transaction_index(tmp_path: Path) -> None:
    pid1, pid2 = 5, 10
    seg = segment(tmp_path, 100)
    seg.append(101, NO_TIMESTAMP, 100, txn_batch(100, pid1))
    seg.append(103, NO_TIMESTAMP, 102, txn_batch(102, pid2))
    seg.append(105, NO_TIMESTAMP, 104, txn_batch(104, -1))
    seg.append(106, NO_TIMESTAMP, 106, marker(fmt.ControlType.ABORT, pid2, 106))
    seg.append(107, NO_TIMESTAMP, 107, marker(fmt.ControlType.COMMIT, pid1, 107))

    state = ProducerState()
    seg.recover(state)
    # pid1's transaction (first offset 100) is still open when pid2 aborts: the LSO is held at 100.
    assert seg.txn_index.entries() == [AbortedTxn(pid2, 102, 106, 100)]
    assert seg.txn_index.path.read_bytes() == AbortedTxn(pid2, 102, 106, 100).encode()
    assert state.ongoing_first_offsets() == []
    # Markers do not move a producer's last data offset (Kafka's lastDataOffset; the cleaner keeps
    # that batch), they only close the transaction.
    assert state.producers[pid1].last_offset == 101
    assert state.producers[pid2].last_offset == 103

    # Recover again, with pid2's transaction begun in an earlier segment (loaded producer state).
    state = ProducerState([ProducerSnapshotEntry(
        producer_id=pid2, producer_epoch=0, last_sequence=0, last_offset=10, offset_delta=5,
        timestamp_ms=NO_TIMESTAMP, coordinator_epoch=-1, current_txn_first_offset=75)])
    seg.recover(state)
    assert seg.txn_index.entries() == [AbortedTxn(pid2, 75, 106, 100)]


def test_recover_transaction_index_lso_after_marker_when_nothing_else_open(tmp_path: Path) -> None:
    seg = segment(tmp_path, 100)
    seg.append(101, NO_TIMESTAMP, 100, txn_batch(100, 5))
    seg.append(102, NO_TIMESTAMP, 102, marker(fmt.ControlType.COMMIT, 5, 102))
    seg.append(104, NO_TIMESTAMP, 103, txn_batch(103, 10))
    seg.append(105, NO_TIMESTAMP, 105, marker(fmt.ControlType.ABORT, 10, 105))
    seg.recover(ProducerState())
    assert seg.txn_index.entries() == [AbortedTxn(10, 103, 105, 106)]


def test_recover_drops_a_stale_transaction_index(tmp_path: Path) -> None:
    seg = segment(tmp_path, 100)
    seg.append(105, 5, 105, txn_batch(104, -1))
    seg.txn_index.append(AbortedTxn(1, 100, 104, 105))  # nothing in the log aborts anything
    seg.recover(ProducerState())
    assert seg.txn_index.entries() == []


# ---------------------------------------------------------------------------------------------------
# 59-60: Kafka-preallocated indexes on close, first batch timestamp


def test_on_become_inactive_trims_kafka_preallocated_indexes(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, interval=0)
    for i in range(5):
        seg.append(i, 100 + i, i, records(i, str(i)))
    seg.close()
    offsets = seg.offset_index.path.read_bytes()
    times = seg.time_index.path.read_bytes()
    # As a running broker leaves them: the same entries, then preallocated zeros.
    seg.offset_index.path.write_bytes(offsets + bytes(8 * 200))
    seg.time_index.path.write_bytes(times + bytes(12 * 200))
    seg = segment(tmp_path, 0, interval=0)
    assert len(seg.offset_index) == 4
    assert seg.max_timestamp_so_far == 104
    seg.append(5, 200, 5, records(5, "5"))  # the byte counter restarted: no entry yet
    position = seg.size
    seg.append(6, 300, 6, records(6, "6"))
    seg.on_become_inactive()
    assert seg.offset_index.path.read_bytes() == offsets + encode_offset_index([(6, position)], 0)
    assert seg.time_index.path.read_bytes() == times + encode_time_index([(300, 6)], 0)
    assert seg.time_index.path.stat().st_size % 12 == 0


def test_close_appends_the_final_time_index_entry(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0, interval=10**6)
    seg.append(0, 500, 0, records(0, "a"))
    seg.append(1, 700, 1, records(1, "b"))
    seg.append(2, 600, 2, records(2, "c"))
    assert len(seg.time_index) == 0
    seg.close()
    assert seg.time_index.path.read_bytes() == encode_time_index([(700, 1)], 0)
    assert segment(tmp_path, 0).largest_timestamp() == 700


def test_largest_timestamp_falls_back_to_mtime(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    seg.append(0, NO_TIMESTAMP, 0, records(0, "a", timestamp=NO_TIMESTAMP))
    os.utime(seg.log_path, (1_600_000_000, 1_600_000_000))
    assert seg.largest_timestamp() == 1_600_000_000_000


def test_first_batch_timestamp(tmp_path: Path) -> None:
    seg = segment(tmp_path, 40)
    assert seg.first_batch_timestamp() == MAX_LONG
    seg.append(41, 1234, 41, records(40, "a", "b", timestamp=1234))
    seg.append(42, 9999, 42, records(42, "c", timestamp=9999))
    assert seg.first_batch_timestamp() == 1234
    seg.close()
    assert segment(tmp_path, 40).first_batch_timestamp() == 1234  # loaded from the file


def test_first_batch_timestamp_of_a_large_first_batch(tmp_path: Path) -> None:
    seg = segment(tmp_path, 0)
    seg.append(0, 4321, 0, fmt.build_batch([fmt.Record(0, 4321, b"k", b"x" * 100_000)]))
    seg.close()
    assert segment(tmp_path, 0).first_batch_timestamp() == 4321


@pytest.mark.parametrize("size", [-1, 0, 5, 6, 13])
def test_first_batch_timestamp_of_a_first_batch_below_the_minimum_size(tmp_path: Path, size: int) -> None:
    """Kafka's ``FileLogInputStream.nextBatch`` throws for any declared size below 14 (0-5 included),
    once the file holds the header up to the magic byte (17 bytes); a file of only 17 bytes is no batch."""
    seg = segment(tmp_path, 0)
    seg.append(0, 4321, 0, records(0, "a", timestamp=4321))
    seg.close()
    data = bytearray(seg.log_path.read_bytes())
    data[8:12] = size.to_bytes(4, "big", signed=True)
    seg.log_path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as raised:
        segment(tmp_path, 0).first_batch_timestamp()
    assert str(raised.value) == (f"{seg.log_path}: record size {size} at byte 0 is smaller than the minimum "
                                 "record overhead (14)")
    seg.log_path.write_bytes(bytes(data[:17]))
    assert segment(tmp_path, 0).first_batch_timestamp() == MAX_LONG


# ---------------------------------------------------------------------------------------------------
# The append index rule equals the recovery rebuild for one batch per append (spec §4.2, §17)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 300), st.integers(-1, 10**6)),
        min_size=1, max_size=40),
    interval=st.integers(0, 700),
    gap=st.integers(0, 3),
)
def test_append_index_rule_equals_recovery_rebuild(tmp_path: Path, batches: list[tuple[int, int, int]],
                                                   interval: int, gap: int) -> None:
    root = tmp_path / f"case{next(_unique)}"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    base = 1000
    seg = segment(root / "a", base, interval)
    offset = base
    for count, value_len, ts in batches:
        recs = [fmt.Record(offset + i, ts, b"k", b"v" * value_len) for i in range(count)]
        raw = fmt.build_batch(recs)
        header = fmt.parse_header(raw)
        seg.append(header.last_offset, header.max_timestamp, header.last_offset, raw)
        offset += count + gap
    seg.on_become_inactive()  # as at roll: final time entry, trimmed files
    seg.close()
    shutil.copy(seg.log_path, root / "b" / seg.log_path.name)
    rebuilt = LogSegment(root / "b", base, SegmentSettings(index_interval_bytes=interval))
    assert rebuilt.recover() == 0
    rebuilt.close()
    assert rebuilt.offset_index.path.read_bytes() == seg.offset_index.path.read_bytes()
    assert rebuilt.time_index.path.read_bytes() == seg.time_index.path.read_bytes()
    # and the entries say what §4.1 says they mean
    cols = scan_batches(seg.read_bytes())
    for i in range(len(seg.offset_index)):
        o, p = seg.offset_index.entry(i)
        j = int((cols.position == p).nonzero()[0][0])
        assert int(cols.last_offset[j]) == o


@pytest.mark.parametrize("chunk_bytes", [1, 100, 250, 1 << 20])
def test_scan_chunks_sees_what_scan_sees(tmp_path: Path, chunk_bytes: int) -> None:
    """Chunks smaller than one entry, a few entries, or the whole file: the same entries, in order,
    up to a torn last entry."""
    seg = segment(tmp_path, 0)
    for offset in range(0, 60, 3):
        values = (f"v{offset}-{i}" * (offset % 7) for i in range(3))
        seg.append(offset + 2, 10 * offset, offset, records(offset, *values))
    seg.flush()
    with open(seg.log_path, "ab") as f:
        f.write(records(60, "torn")[:30])  # a write cut short
    _, whole = seg.scan()
    chunks = [(c.position, c.batches) for c in seg.scan_chunks(chunk_bytes=chunk_bytes)]
    assert [int(o) for _, b in chunks for o in b.last_offset] == [int(o) for o in whole.last_offset] == \
        list(range(2, 60, 3))
    # each chunk says where it starts: where the one before it ended
    assert [at for at, _ in chunks] == [0] + list(np.cumsum([b.valid_end for _, b in chunks]))[:-1]
    data, first, _ = next(iter(seg.scan_chunks(chunk_bytes=chunk_bytes)))
    start, size = int(first.position[0]), int(first.size[0])
    assert bytes(data[start:start + size]) == seg.read_bytes(0, int(whole.size[0]))
