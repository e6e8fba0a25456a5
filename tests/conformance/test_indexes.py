"""Kafka's OffsetIndexTest, TimeIndexTest and TransactionIndexTest, ported onto kafkalog's index classes.

An index lookup has no command of its own, so these scenarios drive ``kafkalog.log.index`` and
``kafkalog.log.txn_index`` directly (spec §4–6). What an index holds on disk is also read back
independently: the bytes are decoded here with ``struct``, and where ``kafkalog dump`` (Kafka's
``kafka-dump-log``) reads a file, its output is checked too.

Exception types differ by language: where Kafka expects ``IllegalArgumentException`` for a full index,
kafkalog raises ``CorruptIndexError``; for an offset that does not increase, ``InvalidOffsetError``.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log import names
from kafkalog.log.index import OffsetIndex, TimeIndex
from kafkalog.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

BASE = 45  # both OffsetIndexTest and TimeIndexTest build their index at base offset 45
MAX_ENTRIES = 30


def dump(*paths: Path, sanity: bool = False) -> tuple[int, list[str], str]:
    """``kafkalog dump --files ...`` (``kafka-dump-log``): exit code, stdout lines after the headers, stderr."""
    args = ["dump", "--files", ",".join(str(p) for p in paths)] + (["--index-sanity-check"] if sanity else [])
    result = run_cli(*args)
    return result.code, [line for line in result.out.splitlines() if not line.startswith("Dumping ")], result.err


def offset_index(directory: Path, base: int = BASE, entries: int = MAX_ENTRIES) -> OffsetIndex:
    """A new offset index of ``entries`` slots, beside an empty ``.log`` (which ``dump`` opens first)."""
    names.log_file(directory, base).touch()
    return OffsetIndex(names.index_file(directory, base), base, entries * 8)


def time_index(directory: Path, base: int = BASE, entries: int = MAX_ENTRIES) -> TimeIndex:
    names.log_file(directory, base).touch()
    names.index_file(directory, base).touch()
    return TimeIndex(names.time_index_file(directory, base), base, entries * 12)


def offset_entries(index: OffsetIndex) -> list[tuple[int, int]]:
    return [index.entry(i) for i in range(len(index))]


def decode_offset_index(path: Path, base: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", data)]


def decode_time_index(path: Path, base: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", data)]


# ===================================================================================================
# OffsetIndexTest


def test_random_lookup_test(tmp_path: Path) -> None:
    """OffsetIndexTest.randomLookupTest: every appended offset is found exactly, and any other offset
    finds the largest entry at or below it, or (base offset, 0) below the first entry."""
    index = offset_index(tmp_path)
    assert index.lookup(92) == (BASE, 0)  # nothing appended yet
    rng = random.Random(20241025)
    offsets, positions, offset, position = [], [], BASE + 1, 0
    for _ in range(index.max_entries):
        offset += rng.randint(1, 15)
        position += rng.randint(1, 15)
        offsets.append(offset)
        positions.append(position)
    for o, p in zip(offsets, positions, strict=True):
        index.append(o, p)
    for o, p in zip(offsets, positions, strict=True):
        assert index.lookup(o) == (o, p)
    candidates = list(range(BASE, offsets[-1]))
    rng.shuffle(candidates)
    for target in candidates[:30]:
        below = [(o, p) for o, p in zip(offsets, positions, strict=True) if o <= target]
        assert index.lookup(target) == (below[-1] if below else (BASE, 0))
    index.close()
    assert decode_offset_index(index.path, BASE) == list(zip(offsets, positions, strict=True))


def test_lookup_extreme_cases(tmp_path: Path) -> None:
    """OffsetIndexTest.lookupExtremeCases: an empty index answers (base, 0); a full one answers its
    first and last entries at the two ends."""
    index = offset_index(tmp_path)
    assert index.lookup(BASE) == (BASE, 0)
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.lookup(BASE) == (BASE, 0)  # below the first entry (base + 1)
    assert index.lookup(BASE + index.max_entries) == (BASE + index.max_entries, index.max_entries - 1)
    assert index.lookup(BASE + 1) == (BASE + 1, 0)


def test_offset_index_entry(tmp_path: Path) -> None:
    """OffsetIndexTest.testEntry: slot i of an index filled with (base + i, i) reads back as that pair,
    in memory and from the file (whose first entry, relative offset 0 at position 0, is all zeros)."""
    index = offset_index(tmp_path)
    for i in range(index.max_entries):
        index.append(BASE + i, i)
    assert offset_entries(index) == [(BASE + i, i) for i in range(MAX_ENTRIES)]
    index.close()
    assert decode_offset_index(index.path, BASE) == [(BASE + i, i) for i in range(MAX_ENTRIES)]
    reopened = OffsetIndex(index.path, BASE, MAX_ENTRIES * 8)
    assert offset_entries(reopened) == [(BASE + i, i) for i in range(MAX_ENTRIES)]


def test_offset_index_entry_overflow(tmp_path: Path) -> None:
    """OffsetIndexTest.testEntryOverflow: reading slot 0 of an empty index fails. Kafka throws
    IllegalArgumentException; kafkalog raises IndexError."""
    index = offset_index(tmp_path)
    with pytest.raises(IndexError):
        index.entry(0)


def test_append_too_many(tmp_path: Path) -> None:
    """OffsetIndexTest.appendTooMany: an append to a full index fails (Kafka: IllegalArgumentException
    'Attempt to append to a full index'; kafkalog: CorruptIndexError with the same words)."""
    index = offset_index(tmp_path)
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.is_full
    with pytest.raises(CorruptIndexError, match="append to a full index"):
        index.append(BASE + index.max_entries + 1, 1)
    assert len(index) == MAX_ENTRIES


def test_append_out_of_order(tmp_path: Path) -> None:
    """OffsetIndexTest.appendOutOfOrder: an offset below the last appended one is rejected
    (InvalidOffsetException / InvalidOffsetError), and nothing is written."""
    index = offset_index(tmp_path)
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    assert offset_entries(index) == [(51, 0)]


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    """OffsetIndexTest.testFetchUpperBoundOffset: the first entry at or past start + size, if any."""
    index = offset_index(tmp_path)
    first, second, third, fourth = (BASE, 0), (BASE + 1, 10), (BASE + 2, 23), (BASE + 3, 37)
    assert index.fetch_upper_bound_offset(first[1], 5) is None
    for o, p in (first, second, third, fourth):
        index.append(o, p)
    assert index.fetch_upper_bound_offset(first[1], 5) == second
    assert index.fetch_upper_bound_offset(first[1], 10) == second
    assert index.fetch_upper_bound_offset(first[1], 23) == third
    assert index.fetch_upper_bound_offset(first[1], 22) == third
    assert index.fetch_upper_bound_offset(second[1], 24) == fourth
    assert index.fetch_upper_bound_offset(fourth[1], 1) is None
    assert index.fetch_upper_bound_offset(first[1], 200) is None
    assert index.fetch_upper_bound_offset(second[1], 200) is None


def test_reopen(tmp_path: Path) -> None:
    """OffsetIndexTest.testReopen: a closed index reopens with its two entries and refuses a third.

    Kafka reopens it with no size given, so its capacity is the trimmed file's (2 entries) and the
    append fails as on a full index. kafkalog takes capacity from ``segment.index.bytes``: the test
    reopens it with the file's length as that size, which gives the same full index."""
    index = offset_index(tmp_path)
    index.append(51, 0)
    index.append(52, 1)
    index.close()
    assert index.path.stat().st_size == 16  # trimmed to its entries
    reopened = OffsetIndex(index.path, BASE, index.path.stat().st_size)
    assert reopened.lookup(51) == (51, 0)
    assert reopened.lookup(52) == (52, 1)
    assert reopened.last_offset == 52
    assert len(reopened) == 2
    with pytest.raises(CorruptIndexError, match="full"):
        reopened.append(53, 1)
    assert decode_offset_index(index.path, BASE) == [(51, 0), (52, 1)]


def test_offset_index_truncate(tmp_path: Path) -> None:
    """OffsetIndexTest.truncate: truncating past the end, at the last entry, between and to nothing,
    with the last offset and appends after each."""
    names.log_file(tmp_path, 0).touch()
    index = OffsetIndex(names.index_file(tmp_path, 0), 0, 10 * 8)
    index.reset()  # Kafka's truncate() of an empty index
    for i in range(1, 10):
        index.append(i, i)

    index.truncate_to(12)
    assert index.lookup(10) == (9, 9)
    assert index.last_offset == 9

    index.append(10, 10)
    index.truncate_to(10)
    assert index.lookup(10) == (9, 9)
    assert index.last_offset == 9
    index.append(10, 10)

    index.truncate_to(9)
    assert index.lookup(10) == (8, 8)
    assert index.last_offset == 8
    index.append(9, 9)

    index.truncate_to(5)
    assert index.lookup(10) == (4, 4)
    assert index.last_offset == 4
    index.append(5, 5)
    index.close()
    assert decode_offset_index(index.path, 0) == [(i, i) for i in range(1, 6)]

    index.reset()
    assert len(index) == 0
    assert index.path.stat().st_size == 0


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    """OffsetIndexTest.testSanityLastOffsetEqualToBaseOffset: an index whose only entry is the base
    offset (relative offset 0 at position 0, eight zero bytes) passes the sanity check, also when
    reopened and through ``kafka-dump-log --index-sanity-check``."""
    base = 20
    index = offset_index(tmp_path, base=base, entries=10)
    index.append(base, 0)
    index.sanity_check()
    index.close()
    assert index.path.read_bytes() == bytes(8)
    reopened = OffsetIndex(index.path, base, 80)
    assert offset_entries(reopened) == [(base, 0)]
    reopened.sanity_check()
    code, lines, err = dump(index.path, sanity=True)
    assert (code, lines, err) == (0, [f"{index.path} passed sanity check."], "")


# ===================================================================================================
# TimeIndexTest


def append_time_entries(index: TimeIndex, count: int) -> None:
    """TimeIndexTest.appendEntries: entries (10·i, base + 10·i) for i = 1..count."""
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + BASE)


def test_look_up(tmp_path: Path) -> None:
    """TimeIndexTest.testLookUp: (-1, base) when empty or below the first entry, else the entry with
    the largest timestamp at or below the target."""
    index = time_index(tmp_path)
    assert index.lookup(100) == (-1, BASE)
    append_time_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == (-1, BASE)
    assert index.lookup(25) == (20, 65)
    assert index.lookup(30) == (30, 75)
    index.close()
    code, lines, _ = dump(index.path)
    assert code == 0
    assert lines[:3] == ["timestamp: 10 offset: 55", "timestamp: 20 offset: 65", "timestamp: 30 offset: 75"]
    assert len(lines) == MAX_ENTRIES - 1


def test_time_index_entry(tmp_path: Path) -> None:
    """TimeIndexTest.testEntry: slots 0–3 hold (10, 55), (20, 65), (30, 75), (40, 85)."""
    index = time_index(tmp_path)
    append_time_entries(index, MAX_ENTRIES - 1)
    assert [index.entry(i) for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]
    index.close()
    assert decode_time_index(index.path, BASE)[:4] == [(10, 55), (20, 65), (30, 75), (40, 85)]


def test_time_index_entry_overflow(tmp_path: Path) -> None:
    """TimeIndexTest.testEntryOverflow: slot 0 of an empty time index cannot be read (Kafka:
    IllegalArgumentException; kafkalog: IndexError)."""
    index = time_index(tmp_path)
    with pytest.raises(IndexError):
        index.entry(0)


def test_time_index_truncate(tmp_path: Path) -> None:
    """TimeIndexTest.testTruncate: a full truncation empties the index, and so does truncating to the
    first entry's offset (base + 10)."""
    index = time_index(tmp_path)
    append_time_entries(index, MAX_ENTRIES - 1)
    index.reset()
    assert len(index) == 0
    append_time_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE)
    assert len(index) == 0
    assert index.path.stat().st_size == 0
    assert index.last_entry() == (-1, BASE)


def test_append(tmp_path: Path) -> None:
    """TimeIndexTest.testAppend: a full time index refuses an ordinary append, refuses an offset below
    its last one even with the full check skipped, and takes the final entry with it skipped."""
    index = time_index(tmp_path)
    append_time_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(CorruptIndexError, match="full"):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert len(index) == MAX_ENTRIES
    assert index.last_entry() == (10000, 1000)
    index.close()
    assert decode_time_index(index.path, BASE)[-1] == (10000, 1000)


def write_time_index(path: Path, entries: list[tuple[int, int]], base: int = BASE, extra: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">qi", ts, offset - base) for ts, offset in entries) + extra)


def test_time_index_sanity_check(tmp_path: Path) -> None:
    """TimeIndexTest.testSanityCheck: an index passes until its last offset is below the base offset,
    its last timestamp below its first, or its length not a multiple of 12. Kafka fakes each with a
    subclass; here the file itself is damaged, and ``kafka-dump-log --index-sanity-check`` agrees."""
    index = time_index(tmp_path)
    index.sanity_check()
    append_time_entries(index, 5)
    first = index.entry(0)
    index.sanity_check()
    index.close()
    good = decode_time_index(index.path, BASE)
    code, lines, _ = dump(index.path, sanity=True)
    assert (code, lines) == (0, [f"{index.path} passed sanity check."])

    def check(entries: list[tuple[int, int]], extra: bytes = b"") -> tuple[bool, int]:
        write_time_index(index.path, entries, extra=extra)
        try:
            TimeIndex(index.path, BASE, MAX_ENTRIES * 12).sanity_check()
            ok = True
        except CorruptIndexError:
            ok = False
        return ok, dump(index.path, sanity=True)[0]

    assert check(good[:-1] + [(good[-1][0], BASE - 1)]) == (False, 1)  # last offset below the base
    assert check(good[:-1] + [(first[0] - 1, good[-1][1])]) == (False, 1)  # last timestamp below the first
    assert check(good, extra=bytes(11)) == (False, 1)  # length one short of another entry
    assert check(good) == (True, 0)


def test_is_full(tmp_path: Path) -> None:
    """TimeIndexTest.testIsFull: a time index of 30 slots is full at 29 entries (one slot is kept for
    the entry a roll appends)."""
    index = time_index(tmp_path)
    assert not index.is_full
    append_time_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full
    index.maybe_append((MAX_ENTRIES - 1) * 10, (MAX_ENTRIES - 1) * 10 + BASE)
    assert index.is_full


def test_last_entry(tmp_path: Path) -> None:
    """TimeIndexTest.testLastEntry: (NO_TIMESTAMP, base) when empty, then the entry just appended."""
    index = time_index(tmp_path)
    assert index.last_entry() == (-1, BASE)
    index.maybe_append(1, 1 + BASE)
    assert index.last_entry() == (1, BASE + 1)


def test_entry_size(tmp_path: Path) -> None:
    """TimeIndexTest.testEntrySize: a time index entry is 12 bytes (the offset index's, 8)."""
    assert time_index(tmp_path).entry_size == 12
    assert offset_index(tmp_path).entry_size == 8


def test_parse_entry(tmp_path: Path) -> None:
    """TimeIndexTest.testParseEntry: the first 12 bytes of the file are int64 timestamp 1, int32
    relative offset 1, read back as (1, base + 1)."""
    index = time_index(tmp_path)
    index.maybe_append(1, 1 + BASE)
    index.close()
    assert index.path.read_bytes() == struct.pack(">qi", 1, 1)
    assert TimeIndex(index.path, BASE, MAX_ENTRIES * 12).entry(0) == (1, BASE + 1)


# ===================================================================================================
# TransactionIndexTest

FOUR_TXNS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


def txn_index(directory: Path, base: int = 0) -> TransactionIndex:
    return TransactionIndex(names.txn_index_file(directory, base), base)


def decode_txn_index(path: Path) -> list[AbortedTxn]:
    return [AbortedTxn(pid, first, last, lso, version)
            for version, pid, first, last, lso in struct.iter_unpack(">hqqqq", path.read_bytes())]


def test_position_set_correctly_when_opened(tmp_path: Path) -> None:
    """TransactionIndexTest.testPositionSetCorrectlyWhenOpened: an entry appended to a reopened index
    goes after the four already there."""
    index = txn_index(tmp_path)
    for txn in FOUR_TXNS:
        index.append(txn)
    reopened = txn_index(tmp_path)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.entries() == FOUR_TXNS + [another]
    assert decode_txn_index(reopened.path) == FOUR_TXNS + [another]
    assert reopened.path.stat().st_size == 5 * ENTRY_SIZE


def test_transaction_index_sanity_check(tmp_path: Path) -> None:
    """TransactionIndexTest.testSanityCheck: the same entries read as the index of a segment based at
    100 fail the sanity check (their last offsets lie before the segment)."""
    index = txn_index(tmp_path)
    for txn in FOUR_TXNS:
        index.append(txn)
    index.sanity_check()
    with pytest.raises(CorruptIndexError):
        TransactionIndex(index.path, 100).sanity_check()


def test_last_offset_must_increase(tmp_path: Path) -> None:
    """TransactionIndexTest.testLastOffsetMustIncrease: an entry with the same last offset (15) as the
    previous one is rejected (Kafka: IllegalArgumentException; kafkalog: InvalidOffsetError)."""
    index = txn_index(tmp_path)
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, 15, 11))
    assert index.entries() == [AbortedTxn(1, 5, 15, 13)]


def test_last_offset_cannot_decrease(tmp_path: Path) -> None:
    """TransactionIndexTest.testLastOffsetCannotDecrease: an entry whose last offset (10) is below the
    previous one's (15) is rejected."""
    index = txn_index(tmp_path)
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, 10, 11))
    assert index.entries() == [AbortedTxn(1, 5, 15, 13)]


def test_collect_aborted_transactions(tmp_path: Path) -> None:
    """TransactionIndexTest.testCollectAbortedTransactions: the entries overlapping [fetch, upper) and
    whether the search is complete (an entry's LSO reached the upper bound)."""
    index = txn_index(tmp_path)
    for txn in FOUR_TXNS:
        index.append(txn)
    assert index.collect_aborted_txns(0, 100) == (FOUR_TXNS, False)
    assert index.collect_aborted_txns(0, 32) == (FOUR_TXNS[:3], True)
    assert index.collect_aborted_txns(0, 35) == (FOUR_TXNS, True)
    assert index.collect_aborted_txns(10, 35) == (FOUR_TXNS, True)
    assert index.collect_aborted_txns(11, 35) == (FOUR_TXNS[1:], True)
    assert index.collect_aborted_txns(20, 41) == (FOUR_TXNS[2:], False)
    code, lines, _ = dump(index.path)
    assert code == 0
    assert lines == [f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                     f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}" for t in FOUR_TXNS]


def test_transaction_index_truncate(tmp_path: Path) -> None:
    """TransactionIndexTest.testTruncate: truncating to 51 keeps all four, to 50 drops the one whose
    marker is at 50, and a reset drops the rest."""
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    index = txn_index(tmp_path)
    for txn in txns:
        index.append(txn)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    assert decode_txn_index(index.path) == txns[:3]
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    assert index.path.stat().st_size == 0


def test_aborted_txn_serde(tmp_path: Path) -> None:
    """TransactionIndexTest.testAbortedTxnSerde: an AbortedTxn keeps its four fields at version 0, and
    (beyond Kafka's assertions) encodes to the 34 bytes of spec §6."""
    txn = AbortedTxn(983493, 137, 299, 200)
    assert txn.version == 0
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == (983493, 137, 299, 200)
    assert txn.encode() == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    index = txn_index(tmp_path)
    index.append(txn)
    assert decode_txn_index(index.path) == [txn]


def test_flush(tmp_path: Path) -> None:
    """TransactionIndexTest.testFlush: flushing an index with no file is fine (and creates none); after
    an append and a flush the file is not empty."""
    index = txn_index(tmp_path)
    assert not index.path.exists()
    index.flush()
    assert not index.path.exists()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert index.path.stat().st_size == ENTRY_SIZE


def test_delete_if_exists(tmp_path: Path) -> None:
    """TransactionIndexTest.testDeleteIfExists: an existing (empty) index file is deleted."""
    index = txn_index(tmp_path)
    index.path.touch()  # Kafka's test index sits on an existing empty temp file
    assert index.delete_if_exists() is True
    assert not index.path.exists()
    assert index.delete_if_exists() is False
