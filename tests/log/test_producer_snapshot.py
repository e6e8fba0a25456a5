"""Tests for kafkalog.log.producer_snapshot: layout, CRC, real broker snapshots, kafka-dump-log lines."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import crc32c
import pytest
from conftest import kafka_fixtures_root
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import KafkaLogError
from kafkalog.log.producer_snapshot import (
    ProducerSnapshotEntry,
    ProducerSnapshotError,
    decode_producer_snapshot,
    encode_producer_snapshot,
    first_sequence,
    format_snapshot_dump_lines,
    read_producer_snapshot,
    write_producer_snapshot,
)


def fixtures_root() -> Path:
    return kafka_fixtures_root()  # tests/conftest.py: skips, or fails on CI, when absent


ENTRY = ProducerSnapshotEntry(
    producer_id=1, producer_epoch=0, last_sequence=4, last_offset=4, offset_delta=4, timestamp_ms=123,
    coordinator_epoch=-1, current_txn_first_offset=-1,
)


def test_encode_layout_by_hand() -> None:
    data = encode_producer_snapshot([ENTRY])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 1, 0, 4, 4, 4, 123, -1, -1)
    assert len(data) == 10 + 46
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_empty_snapshot_is_ten_bytes() -> None:
    # CRC-32C of the big-endian int32 0 (the entry count), as in the broker's empty snapshots.
    assert encode_producer_snapshot([]) == b"\x00\x01" + struct.pack(">I", crc32c.crc32c(bytes(4))) + bytes(4)
    assert decode_producer_snapshot(encode_producer_snapshot([])) == []


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000005.snapshot"
    entries = [ENTRY, ProducerSnapshotEntry(7, 3, 10, 99, 2, 5000, 12, 95)]
    write_producer_snapshot(path, entries)
    assert read_producer_snapshot(path) == entries
    assert path.read_bytes() == encode_producer_snapshot(entries)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


entries_strategy = st.lists(
    st.builds(
        ProducerSnapshotEntry,
        producer_id=st.integers(-(2**63), 2**63 - 1),
        producer_epoch=st.integers(-(2**15), 2**15 - 1),
        last_sequence=st.integers(-(2**31), 2**31 - 1),
        last_offset=st.integers(-(2**63), 2**63 - 1),
        offset_delta=st.integers(-(2**31), 2**31 - 1),
        timestamp_ms=st.integers(-(2**63), 2**63 - 1),
        coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
        current_txn_first_offset=st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=20,
)


@given(entries_strategy)
def test_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    data = encode_producer_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    assert decode_producer_snapshot(data) == entries
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000.snapshot"
        write_producer_snapshot(path, entries)
        assert read_producer_snapshot(path) == entries


def test_encode_rejects_out_of_range_field() -> None:
    with pytest.raises(ProducerSnapshotError, match="cannot encode producer 1"):
        encode_producer_snapshot([ProducerSnapshotEntry(1, 2**15, 0, 0, 0, 0, 0, -1)])


def _flip(data: bytes, position: int, mask: int) -> bytes:
    return data[:position] + bytes([data[position] ^ mask]) + data[position + 1:]


def _with_crc(body_after_crc: bytes, version: int = 1) -> bytes:
    return struct.pack(">hI", version, crc32c.crc32c(body_after_crc)) + body_after_crc


GOOD = encode_producer_snapshot([ENTRY])


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "0 bytes is shorter than the 10-byte snapshot header"),
        (GOOD[:9], "9 bytes is shorter"),
        (_flip(GOOD, 1, 3), "unknown snapshot version 2 at byte 0"),
        (_flip(GOOD, 20, 0xFF), "snapshot is corrupt: stored CRC"),
        (_flip(GOOD, 3, 0x10), "snapshot is corrupt: stored CRC"),
        (GOOD[:-1], "snapshot is corrupt"),  # a torn write breaks the CRC first
        (_with_crc(struct.pack(">i", 2) + GOOD[10:]), "entry count 2 at byte 6 needs 102 bytes, file has 56"),
        (_with_crc(struct.pack(">i", -1)), "negative entry count -1 at byte 6"),
        (_with_crc(GOOD[6:] + b"\x00"), "entry count 1 at byte 6 needs 56 bytes, file has 57"),
    ],
)
def test_corrupt_snapshot_names_file(tmp_path: Path, data: bytes, needle: str) -> None:
    path = tmp_path / "00000000000000000042.snapshot"
    path.write_bytes(data)
    with pytest.raises(ProducerSnapshotError) as info:
        read_producer_snapshot(path)
    assert str(path) in str(info.value) and needle in str(info.value)
    assert isinstance(info.value, KafkaLogError)


def test_real_snapshots_decode_and_reencode_exactly() -> None:
    files = sorted(fixtures_root().rglob("*.snapshot"))
    assert len(files) >= 150
    total = 0
    for path in files:
        entries = read_producer_snapshot(path)
        total += len(entries)
        assert encode_producer_snapshot(entries) == path.read_bytes(), path
    assert total >= 30  # most real snapshots are empty; some hold idempotent producers


def test_real_snapshot_values_and_dump() -> None:
    path = fixtures_root() / "flink-on-prem/data/promotions-0/00000000000000000029.snapshot"
    assert path.exists(), f"{path} missing: the fixture set differs from the one these values come from"
    entries = read_producer_snapshot(path)
    assert entries == [
        ProducerSnapshotEntry(45, 0, 2, 26, 0, 1713541721870, -1, -1),
        ProducerSnapshotEntry(46, 0, 25, 28, 1, 1713541726610, -1, -1),
    ]
    assert format_snapshot_dump_lines(entries) == [
        "producerId: 45 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1713541721870 firstSequence: 2 lastSequence: 2 lastOffset: 26 offsetDelta: 0 "
        "timestamp: 1713541721870",
        "producerId: 46 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1713541726610 firstSequence: 24 lastSequence: 25 lastOffset: 28 offsetDelta: 1 "
        "timestamp: 1713541726610",
    ]


def test_dump_line_matches_kafka_format() -> None:
    assert format_snapshot_dump_lines([ENTRY]) == [
        "producerId: 1 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 123 firstSequence: 0 lastSequence: 4 lastOffset: 4 offsetDelta: 4 timestamp: 123"
    ]


def test_dump_line_open_transaction() -> None:
    entry = ProducerSnapshotEntry(9, 2, 14, 120, 4, 777, 5, 100)
    assert format_snapshot_dump_lines([entry]) == [
        "producerId: 9 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong[100] "
        "lastTimestamp: 777 firstSequence: 10 lastSequence: 14 lastOffset: 120 offsetDelta: 4 timestamp: 777"
    ]


def test_dump_line_without_batch_metadata_keeps_trailing_space() -> None:
    # Kafka prints the batch part only when last_offset >= 0, after a "lastTimestamp: T " that ends
    # in a space.
    entry = ProducerSnapshotEntry(3, 1, -1, -1, 0, -1, 7, -1)
    assert format_snapshot_dump_lines([entry]) == [
        "producerId: 3 producerEpoch: 1 coordinatorEpoch: 7 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: -1 "
    ]


@pytest.mark.parametrize(
    ("last_sequence", "offset_delta", "expected"),
    [
        # Expected values computed by running Kafka's decrementSequence body in jshell (Java 17).
        (4, 4, 0),
        (14, 4, 10),
        (2, 5, 2147483645),  # the batch wrapped past Int.MaxValue
        (-1, 4, 2147483643),
        (-1, 0, 2147483647),
        (0, 0, 0),
        (-(2**31), 2**31 - 1, -2147483647),
        (2**31 - 1, -(2**31), -1),
        (-5, -(2**31), 2147483643),
        (5, -3, 8),
    ],
)
def test_first_sequence_is_java_decrement_sequence(
    last_sequence: int, offset_delta: int, expected: int
) -> None:
    assert first_sequence(last_sequence, offset_delta) == expected
