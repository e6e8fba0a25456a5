"""Tests for kafkalog.log.txn_index, following Kafka's TransactionIndexTest plus layout and corruption."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    format_dump_line,
)

# The four transactions Kafka's TransactionIndexTest uses throughout.
KAFKA_TXNS = [
    AbortedTxn(producer_id=0, first_offset=0, last_offset=10, last_stable_offset=11),
    AbortedTxn(producer_id=1, first_offset=5, last_offset=15, last_stable_offset=13),
    AbortedTxn(producer_id=2, first_offset=18, last_offset=35, last_stable_offset=25),
    AbortedTxn(producer_id=3, first_offset=32, last_offset=50, last_stable_offset=40),
]


@pytest.fixture
def index(tmp_path: Path) -> TransactionIndex:
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", base_offset=0)


def fill(index: TransactionIndex, txns: list[AbortedTxn]) -> None:
    for txn in txns:
        index.append(txn)


def test_entry_layout_by_hand(index: TransactionIndex) -> None:
    index.append(AbortedTxn(983493, 137, 299, 200))
    assert index.path.read_bytes() == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    assert ENTRY_SIZE == 34
    assert index.entries() == [AbortedTxn(983493, 137, 299, 200, version=0)]


def test_position_set_correctly_when_opened(index: TransactionIndex) -> None:
    fill(index, KAFKA_TXNS)
    reopened = TransactionIndex(index.path, base_offset=0)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.entries() == [*KAFKA_TXNS, another]
    assert index.path.stat().st_size == 5 * ENTRY_SIZE


def test_reopened_index_still_checks_order(index: TransactionIndex) -> None:
    # Kafka forgets the last offset on reopen; we read it back so the order check still holds.
    fill(index, KAFKA_TXNS)
    reopened = TransactionIndex(index.path, base_offset=0)
    with pytest.raises(InvalidOffsetError, match="not greater than the index's current last offset 50"):
        reopened.append(AbortedTxn(4, 45, 50, 51))


def test_sanity_check(index: TransactionIndex) -> None:
    fill(index, KAFKA_TXNS)
    index.sanity_check()
    # Reopen with a larger base offset to fake entries that belong to an earlier segment.
    reopened = TransactionIndex(index.path, base_offset=100)
    with pytest.raises(CorruptIndexError) as info:
        reopened.sanity_check()
    message = str(info.value)
    assert str(index.path) in message and "byte 0" in message and "base offset 100" in message


def test_sanity_check_accepts_last_offset_equal_to_base(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000010.txnindex", base_offset=10)
    index.append(AbortedTxn(1, 3, 10, 11))
    index.sanity_check()


@pytest.mark.parametrize("last_offset", [15, 10], ids=["equal", "smaller"])
def test_last_offset_must_increase(index: TransactionIndex, last_offset: int) -> None:
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError) as info:
        index.append(AbortedTxn(0, 0, last_offset, 11))
    assert str(index.path) in str(info.value)
    assert index.entries() == [AbortedTxn(1, 5, 15, 13)]


def test_collect_aborted_transactions(index: TransactionIndex) -> None:
    fill(index, KAFKA_TXNS)
    assert index.collect_aborted_txns(0, 100) == (KAFKA_TXNS, False)
    assert index.collect_aborted_txns(0, 32) == (KAFKA_TXNS[0:3], True)
    assert index.collect_aborted_txns(0, 35) == (KAFKA_TXNS, True)
    assert index.collect_aborted_txns(10, 35) == (KAFKA_TXNS, True)
    assert index.collect_aborted_txns(11, 35) == (KAFKA_TXNS[1:4], True)
    result = index.collect_aborted_txns(20, 41)
    assert isinstance(result, TxnIndexSearchResult)
    assert result.aborted_transactions == KAFKA_TXNS[2:4] and result.is_complete is False
    txns, complete = index.collect_aborted_txns(0, 100)
    assert (txns, complete) == (KAFKA_TXNS, False)


def test_truncate(index: TransactionIndex) -> None:
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40)]
    fill(index, txns)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    assert index.path.stat().st_size == 3 * ENTRY_SIZE
    # After truncation the next append only has to beat the new last entry.
    index.append(AbortedTxn(4, 36, 40, 41))
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    assert index.path.exists() and index.path.stat().st_size == 0
    index.append(AbortedTxn(5, 0, 1, 2))  # reset forgets the last offset too
    assert index.entries() == [AbortedTxn(5, 0, 1, 2)]


def test_truncate_below_everything_empties(index: TransactionIndex) -> None:
    fill(index, KAFKA_TXNS)
    index.truncate_to(0)
    assert index.entries() == [] and index.path.stat().st_size == 0


def test_file_not_created_until_needed(index: TransactionIndex) -> None:
    assert not index.path.exists()
    assert index.entries() == []
    assert index.collect_aborted_txns(0, 100) == ([], False)
    index.reset()
    index.flush()
    index.truncate_to(0)
    index.sanity_check()
    assert not index.path.exists()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert index.path.stat().st_size == ENTRY_SIZE


def test_delete_if_exists(index: TransactionIndex) -> None:
    assert index.delete_if_exists() is False
    fill(index, KAFKA_TXNS)
    assert index.delete_if_exists() is True
    assert not index.path.exists()
    index.append(AbortedTxn(9, 0, 1, 2))  # a deleted index starts over
    assert index.entries() == [AbortedTxn(9, 0, 1, 2)]


def test_append_rejects_other_versions(index: TransactionIndex) -> None:
    with pytest.raises(ValueError, match="only version 0"):
        index.append(AbortedTxn(1, 0, 1, 2, version=1))
    assert not index.path.exists()


def test_length_not_multiple_of_entry_size_is_corrupt(index: TransactionIndex) -> None:
    index.path.write_bytes(AbortedTxn(1, 0, 10, 11).encode() + b"\x00" * 10)
    with pytest.raises(CorruptIndexError) as info:
        index.entries()
    message = str(info.value)
    assert str(index.path) in message and "size 44" in message and "byte 34" in message
    with pytest.raises(CorruptIndexError):
        index.append(AbortedTxn(2, 11, 20, 21))


def test_newer_version_byte_rejected_with_position(index: TransactionIndex) -> None:
    second = bytearray(AbortedTxn(2, 11, 20, 21).encode())
    second[0] = 1
    index.path.write_bytes(AbortedTxn(1, 0, 10, 11).encode() + bytes(second))
    with pytest.raises(CorruptIndexError) as info:
        index.entries()
    assert str(index.path) in str(info.value)
    assert "version 1 at byte 34" in str(info.value)


def test_version_read_from_first_byte_only(index: TransactionIndex) -> None:
    # Kafka reads one signed byte: an int16 version of 1 (bytes 00 01) reads as 0, and 0xFF reads
    # as -1, which is not above the current version and so is accepted.
    low = bytearray(AbortedTxn(1, 0, 10, 11).encode())
    low[1] = 1
    high = bytearray(AbortedTxn(2, 11, 20, 21).encode())
    high[0] = 0xFF
    index.path.write_bytes(bytes(low) + bytes(high))
    assert index.entries() == [AbortedTxn(1, 0, 10, 11, version=0), AbortedTxn(2, 11, 20, 21, version=-1)]


def test_dump_line_format() -> None:
    txn = AbortedTxn(983493, 137, 299, 200)
    expected = "version: 0 producerId: 983493 firstOffset: 137 lastOffset: 299 lastStableOffset: 200"
    assert format_dump_line(txn) == expected
    assert TransactionIndex.format_dump_line(txn) == expected


# Model test: a list of transactions with strictly increasing last offsets, checked against plain
# Python after truncation and for every collect range.
txn_lists = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(0, 1000), st.integers(1, 1000), st.integers(0, 1000)),
    max_size=15,
).map(lambda rows: _build_txns(rows))


def _build_txns(rows: list[tuple[int, int, int, int]]) -> list[AbortedTxn]:
    txns, last = [], 0
    for producer_id, span, gap, lso_gap in rows:
        last += gap
        txns.append(AbortedTxn(producer_id, max(0, last - span), last, last + lso_gap))
    return txns


@given(txn_lists, st.integers(0, 16_000), st.integers(0, 16_000), st.integers(0, 16_000))
def test_index_matches_list_model(txns: list[AbortedTxn], truncate_at: int, fetch: int, upper: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        index = TransactionIndex(Path(d) / "00000000000000000000.txnindex", base_offset=0)
        fill(index, txns)
        assert index.entries() == txns
        assert index.path.exists() == bool(txns)
        if txns:
            assert index.path.read_bytes() == b"".join(t.encode() for t in txns)

        # Entries up to the first one whose LSO reaches the bound, filtered by overlap with the range.
        stop = next((i for i, t in enumerate(txns) if t.last_stable_offset >= upper), None)
        scanned = txns if stop is None else txns[: stop + 1]
        model = [t for t in scanned if t.last_offset >= fetch and t.first_offset < upper]
        assert index.collect_aborted_txns(fetch, upper) == (model, stop is not None)

        index.truncate_to(truncate_at)
        kept = [t for t in txns if t.last_offset < truncate_at]
        assert TransactionIndex(index.path, 0).entries() == kept
