"""Offset index and time index (spec §4, §5), after Kafka's OffsetIndexTest and TimeIndexTest.

kafkalog writes its index files append-only and trimmed and takes its capacity from
``segment.index.bytes``; Kafka's preallocated files (real entries followed by zero slots) are read up to
the first unused slot. Scenarios and expected values follow Kafka's tests; the code is our own.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.index import (
    DEFAULT_MAX_INDEX_BYTES,
    OffsetIndex,
    TimeIndex,
    encode_offset_index,
    encode_time_index,
)

BASE = 45  # OffsetIndexTest / TimeIndexTest base offset
_unique = itertools.count()


def offset_index(tmp_path: Path, base: int = BASE, entries: int = 30) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{next(_unique):020d}.index", base, entries * 8)


def time_index(tmp_path: Path, base: int = BASE, entries: int = 30) -> TimeIndex:
    return TimeIndex(tmp_path / f"{next(_unique):020d}.timeindex", base, entries * 12)


def offset_entries(index: OffsetIndex) -> list[tuple[int, int]]:
    return [index.entry(i) for i in range(len(index))]


def time_entries(index: TimeIndex) -> list[tuple[int, int]]:
    return [index.entry(i) for i in range(len(index))]


# ---------------------------------------------------------------------------------------------------
# OffsetIndexTest


def test_lookup_extreme_cases(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    assert idx.max_entries == 30
    assert idx.lookup(BASE) == (BASE, 0), "lookup on an empty index"
    for i in range(idx.max_entries):
        idx.append(BASE + i + 1, i)
    assert idx.lookup(BASE) == (BASE, 0)  # below the first entry: (base, 0)
    assert idx.lookup(BASE + idx.max_entries) == (BASE + idx.max_entries, idx.max_entries - 1)
    assert idx.lookup(BASE + 10**9) == (BASE + 30, 29)


def test_entry_and_file_layout(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(idx.max_entries):
        idx.append(BASE + i, i)
    assert offset_entries(idx) == [(BASE + i, i) for i in range(30)]
    idx.close()
    raw = idx.path.read_bytes()
    assert len(raw) == 30 * 8  # append-only, never preallocated
    assert raw[:16] == struct.pack(">iiii", 0, 0, 1, 1)
    assert raw == b"".join(struct.pack(">ii", i, i) for i in range(30))


def test_random_lookup_fixed(tmp_path: Path) -> None:
    # randomLookupTest with a fixed sequence: absent values find the largest entry ≤ target.
    idx = offset_index(tmp_path)
    assert idx.lookup(92) == (BASE, 0), "not present value should return physical offset 0"
    rng = np.random.default_rng(7)
    offsets = list(BASE + 1 + np.cumsum(rng.integers(1, 16, size=30)))
    positions = list(np.cumsum(rng.integers(1, 16, size=30)))
    for o, p in zip(offsets, positions, strict=True):
        idx.append(int(o), int(p))
    for o, p in zip(offsets, positions, strict=True):
        assert idx.lookup(int(o)) == (o, p)
    for target in range(BASE, int(offsets[-1])):
        i = bisect.bisect_right(offsets, target) - 1
        assert idx.lookup(target) == ((BASE, 0) if i < 0 else (offsets[i], positions[i]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    deltas=st.lists(st.integers(1, 15), min_size=0, max_size=30),
    gaps=st.lists(st.integers(0, 40), min_size=30, max_size=30),
    targets=st.lists(st.integers(BASE - 5, BASE + 600), min_size=1, max_size=40),
    first_at_base=st.booleans(),
)
def test_random_lookup_matches_bisect(tmp_path: Path, deltas: list[int], gaps: list[int],
                                      targets: list[int], first_at_base: bool) -> None:
    idx = offset_index(tmp_path)
    start = BASE if first_at_base else BASE + 1
    offsets = [start + sum(deltas[:i]) for i in range(len(deltas))]
    positions = [sum(gaps[:i + 1]) + i for i in range(len(deltas))]
    for o, p in zip(offsets, positions, strict=True):
        idx.append(o, p)
    assert len(idx) == len(offsets)
    assert idx.last_offset == (offsets[-1] if offsets else BASE)
    for target in targets:
        i = bisect.bisect_right(offsets, target) - 1
        expected = (BASE, 0) if i < 0 else (offsets[i], positions[i])
        assert idx.lookup(target) == expected
        assert idx.largest_lower_bound_slot(target - BASE) == i


def test_append_too_many(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(idx.max_entries):
        assert not idx.is_full
        idx.append(BASE + i + 1, i)
    assert idx.is_full
    with pytest.raises(CorruptIndexError, match="full"):
        idx.append(BASE + idx.max_entries + 1, 1)
    assert len(idx) == 30
    idx.close()
    assert idx.path.stat().st_size == 30 * 8  # the refused entry left no bytes


def test_append_out_of_order(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        idx.append(51, 1)  # equal is refused too: offsets strictly increase
    assert offset_entries(idx) == [(51, 0)]


def test_append_relative_offset_out_of_range(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE - 1, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + (1 << 31), 0)
    idx.append(BASE + (1 << 31) - 1, 0)
    assert idx.last_offset == BASE + (1 << 31) - 1


def test_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 10 * 8)
    idx.reset()
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)  # past the end: unchanged
    assert idx.lookup(10) == (9, 9)
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(10)  # exactly the last entry: it goes
    assert idx.lookup(10) == (9, 9)
    assert idx.last_offset == 9
    idx.append(10, 10)

    idx.truncate_to(9)
    assert idx.lookup(10) == (8, 8), "index should truncate off the last entry"
    assert idx.last_offset == 8
    idx.append(9, 9)

    idx.truncate_to(5)
    assert idx.lookup(10) == (4, 4)
    assert idx.last_offset == 4
    idx.append(5, 5)
    idx.flush()
    assert idx.path.read_bytes() == encode_offset_index([(i, i) for i in range(1, 6)], 0)

    idx.reset()
    assert len(idx) == 0, "full truncation should leave no entries"
    assert idx.last_offset == 0
    idx.append(0, 0)
    assert offset_entries(idx) == [(0, 0)]


def test_truncate_between_entries_and_before_first(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 10 * 8)
    for o in (102, 105, 110):
        idx.append(o, o)
    idx.truncate_to(107)  # between entries: keep the entries below
    assert offset_entries(idx) == [(102, 102), (105, 105)]
    idx.truncate_to(101)  # below the first entry: none are ≤, nothing remains
    assert len(idx) == 0
    assert idx.last_offset == 100
    assert idx.path.stat().st_size == 0


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    first, second, third, fourth = (BASE, 0), (BASE + 1, 10), (BASE + 2, 23), (BASE + 3, 37)
    assert idx.fetch_upper_bound_offset(first[1], 5) is None
    for o, p in (first, second, third, fourth):
        idx.append(o, p)
    assert idx.fetch_upper_bound_offset(first[1], 5) == second
    assert idx.fetch_upper_bound_offset(first[1], 10) == second
    assert idx.fetch_upper_bound_offset(first[1], 23) == third
    assert idx.fetch_upper_bound_offset(first[1], 22) == third
    assert idx.fetch_upper_bound_offset(second[1], 24) == fourth
    assert idx.fetch_upper_bound_offset(fourth[1], 1) is None
    assert idx.fetch_upper_bound_offset(first[1], 200) is None
    assert idx.fetch_upper_bound_offset(second[1], 200) is None


def test_reopen(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    first, sec = (51, 0), (52, 1)
    idx.append(*first)
    idx.append(*sec)
    idx.close()
    assert idx.path.stat().st_size == 16
    # Reopened at the capacity the file has, as Kafka's read-only reopen: full.
    ro = OffsetIndex(idx.path, BASE, 16)
    assert ro.lookup(51) == first
    assert ro.lookup(52) == sec
    assert ro.last_offset == 52
    assert len(ro) == 2
    assert ro.is_full
    with pytest.raises(CorruptIndexError):
        ro.append(53, 1)
    # kafkalog's capacity follows segment.index.bytes, so a normal reopen appends after the entries.
    rw = OffsetIndex(idx.path, BASE)
    assert rw.max_entries == DEFAULT_MAX_INDEX_BYTES // 8
    rw.append(53, 2)
    rw.close()
    assert idx.path.read_bytes() == encode_offset_index([first, sec, (53, 2)], BASE)


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000020.index", 20, 10 * 8)
    idx.append(20, 0)
    idx.sanity_check()  # equality with the base offset is allowed
    idx.close()
    reopened = OffsetIndex(idx.path, 20, 10 * 8)
    assert offset_entries(reopened) == [(20, 0)]
    reopened.sanity_check()


def test_sanity_check_failures(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(encode_offset_index([(101, 10), (105, 20)], 100) + b"\x00\x00\x00")
    torn = OffsetIndex(path, 100)
    assert offset_entries(torn) == [(101, 10), (105, 20)]
    with pytest.raises(CorruptIndexError):
        torn.sanity_check()
    # last offset below the base offset (a negative relative offset)
    path.write_bytes(struct.pack(">ii", 1, 10) + struct.pack(">ii", -3, 20))
    below = OffsetIndex(path, 100)
    assert below.last_offset == 97
    with pytest.raises(CorruptIndexError):
        below.sanity_check()


def test_appending_after_torn_entry_trims_it_first(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(encode_offset_index([(3, 100)], 0) + b"\x01\x02\x03")
    idx = OffsetIndex(path, 0)
    idx.append(7, 200)
    idx.close()
    assert path.read_bytes() == encode_offset_index([(3, 100), (7, 200)], 0)


# ---------------------------------------------------------------------------------------------------
# Kafka's preallocated files: real entries, then zero slots


def test_reads_kafka_preallocated_offset_index(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    real = [(1000 + 3 * i + 2, 4100 * (i + 1)) for i in range(10)]
    path.write_bytes(encode_offset_index(real, 1000) + bytes(8 * 500))
    idx = OffsetIndex(path, 1000)
    assert len(idx) == 10
    assert offset_entries(idx) == real
    assert idx.last_offset == real[-1][0]
    assert idx.preallocated_bytes == 8 * 500
    assert idx.lookup(10**6) == real[-1]
    assert idx.lookup(1000 + 6) == real[1]
    idx.sanity_check()
    # Appending trims the zero tail first, then appends.
    idx.append(1100, 99999)
    idx.close()
    assert path.read_bytes() == encode_offset_index([*real, (1100, 99999)], 1000)
    assert OffsetIndex(path, 1000).preallocated_bytes == 0


def test_reads_kafka_preallocated_index_whose_first_entry_is_the_base(tmp_path: Path) -> None:
    # The first entry may have relative offset 0; only a later zero slot marks the unused tail.
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(encode_offset_index([(0, 0), (5, 4200)], 0) + bytes(8 * 64))
    idx = OffsetIndex(path, 0)
    assert offset_entries(idx) == [(0, 0), (5, 4200)]


def test_reads_kafka_preallocated_time_index(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000200.timeindex"
    real = [(1_700_000_000_000 + 10 * i, 200 + 4 * i + 3) for i in range(7)]
    path.write_bytes(encode_time_index(real, 200) + bytes(12 * 300))
    idx = TimeIndex(path, 200)
    assert time_entries(idx) == real
    assert idx.last_entry() == real[-1]
    assert idx.lookup(real[3][0] + 5) == real[3]
    idx.sanity_check()
    idx.maybe_append(real[-1][0] + 1, 250)
    idx.close()
    assert path.read_bytes() == encode_time_index([*real, (real[-1][0] + 1, 250)], 200)


def test_trim_drops_the_zero_tail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(encode_time_index([(5, 1), (9, 4)], 0) + bytes(12 * 10))
    idx = TimeIndex(path, 0)
    idx.trim()
    assert path.stat().st_size == 24
    assert time_entries(TimeIndex(path, 0)) == [(5, 1), (9, 4)]


def test_all_zero_preallocated_time_index_has_no_entries(tmp_path: Path) -> None:
    # The .timeindex of a Kafka active segment that has no entry yet: 873813 zero slots (cut short here).
    path = tmp_path / "00000000000000000500.timeindex"
    path.write_bytes(bytes(12 * 1000))
    idx = TimeIndex(path, 500)
    assert len(idx) == 0
    assert idx.last_entry() == (-1, 500)


# ---------------------------------------------------------------------------------------------------
# TimeIndexTest (maxEntries = 30, base offset 45; entry i is (10 i, 10 i + 45))


def append_entries(idx: TimeIndex, n: int) -> None:
    for i in range(1, n + 1):
        idx.maybe_append(10 * i, 10 * i + BASE)


def test_time_lookup(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.lookup(100) == (-1, BASE)
    append_entries(idx, 29)
    assert idx.lookup(9) == (-1, BASE)  # smaller than the earliest entry
    assert idx.lookup(25) == (20, 65)  # between two entries
    assert idx.lookup(30) == (30, 75)  # equal to an entry
    assert idx.lookup(10**12) == (290, 335)


def test_time_entry(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    append_entries(idx, 29)
    assert time_entries(idx)[:4] == [(10, 55), (20, 65), (30, 75), (40, 85)]
    idx.close()
    assert idx.path.read_bytes()[:12] == struct.pack(">qi", 10, 10)


def test_time_last_entry(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.last_entry() == (-1, BASE)
    idx.maybe_append(1, BASE + 1)
    assert idx.last_entry() == (1, BASE + 1)


def test_time_is_full_one_slot_early(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.max_entries == 30
    assert not idx.is_full
    append_entries(idx, 28)
    assert not idx.is_full
    idx.maybe_append(290, 290 + BASE)
    assert len(idx) == 29
    assert idx.is_full  # full at maxEntries - 1


def test_time_append_full_and_skip_full_check(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    append_entries(idx, 29)
    with pytest.raises(CorruptIndexError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10000, 28 * 10, skip_full_check=True)  # offset below the last entry's
    idx.maybe_append(10000, 1000, skip_full_check=True)  # the reserved last slot
    assert len(idx) == 30
    assert idx.last_entry() == (10000, 1000)
    idx.close()
    assert idx.path.stat().st_size == 30 * 12


def test_time_equal_timestamps_ignored(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    idx.maybe_append(-1, BASE + 3)  # no timestamp: (-1, base) is the empty index's last entry
    assert len(idx) == 0
    idx.maybe_append(100, BASE + 3)
    idx.maybe_append(100, BASE + 7)  # equal timestamp: ignored
    assert time_entries(idx) == [(100, BASE + 3)]
    idx.maybe_append(101, BASE + 7)
    assert time_entries(idx) == [(100, BASE + 3), (101, BASE + 7)]
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(50, BASE + 9)  # a smaller timestamp is refused
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE + 6)  # a smaller offset is refused
    assert len(idx) == 2


def test_time_truncate(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    append_entries(idx, 29)
    idx.reset()
    assert len(idx) == 0
    append_entries(idx, 29)
    idx.truncate_to(10 + BASE)  # the first entry's offset: nothing remains
    assert len(idx) == 0
    assert idx.path.stat().st_size == 0
    append_entries(idx, 29)
    idx.truncate_to(60)  # between entries 55 and 65: keep (10, 55)
    assert time_entries(idx) == [(10, 55)]
    for i in range(2, 6):
        idx.maybe_append(10 * i, 10 * i + BASE)
    idx.truncate_to(75)  # exact offset of (30, 75): it goes
    assert time_entries(idx) == [(10, 55), (20, 65)]
    idx.truncate_to(10**6)  # past the end: unchanged
    assert time_entries(idx) == [(10, 55), (20, 65)]
    assert idx.path.read_bytes() == encode_time_index([(10, 55), (20, 65)], BASE)


def test_time_sanity_check(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    idx.sanity_check()
    append_entries(idx, 5)
    idx.sanity_check()
    idx.close()
    good = idx.path.read_bytes()
    TimeIndex(idx.path, BASE).sanity_check()

    # last timestamp below the first
    idx.path.write_bytes(good[:-12] + struct.pack(">qi", 9, 50 - BASE))
    with pytest.raises(CorruptIndexError):
        TimeIndex(idx.path, BASE).sanity_check()
    # last offset below the base offset
    idx.path.write_bytes(good[:-12] + struct.pack(">qi", 60, -1))
    with pytest.raises(CorruptIndexError):
        TimeIndex(idx.path, BASE).sanity_check()
    # length not a multiple of 12
    idx.path.write_bytes(good[:-1])
    with pytest.raises(CorruptIndexError):
        TimeIndex(idx.path, BASE).sanity_check()
    idx.path.write_bytes(good)
    TimeIndex(idx.path, BASE).sanity_check()
