"""Tests for kafkalog.format.batch: the golden vectors of spec §1.9 byte for byte, and the record-format
scenarios of Kafka's own tests (spec §15 items 72–73: ``DefaultRecordBatchTest``, ``DefaultRecordTest``,
``MemoryRecordsTest``).

Every decode is checked twice: with the per-record path (``decode_records``) and with the numba bulk
path (``scan_batches`` + ``scan_records``), which must agree value for value and fail on the same input.
Malformed batches are assembled here with ``struct`` from the spec's layout (§1.2), not with the
library's own writer, so a layout mistake in both writer and reader cannot hide itself.
"""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest
from records_helper import scanned

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format.batch import (
    ControlType,
    Record,
    TimestampType,
    build_batch,
    compute_crc,
    decode_records,
    empty_header_batch,
    end_txn_marker_batch,
    increment_sequence,
    iter_entries,
    parse_control_type,
    parse_end_txn_marker,
    parse_header,
    verify_batch,
)
from kafkalog.format.compression import CompressionType, compress
from kafkalog.format.scan import find_corrupt_batch, scan_batches, scan_records
from kafkalog.format.varint import decode_varint, decode_varlong

C = CompressionType
MAX_INT = 2**31 - 1
HEADER = struct.Struct(">qiibIhiqqqhii")  # spec §1.2, independent of the library's own struct

# --- helpers -------------------------------------------------------------------------------------------


def both_paths(buf: bytes) -> list[Record]:
    """Decode one batch with both paths and insist they agree."""
    records = decode_records(buf)
    assert scanned(buf) == records
    return records


def raw_batch(section: bytes, count: int, *, base_offset: int = 0, last_offset_delta: int = 0,
              attributes: int = 0, base_timestamp: int = 1000, max_timestamp: int = 1000,
              producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
              leader_epoch: int = -1) -> bytes:
    """A v2 batch around an arbitrary records section, with a correct CRC-32C."""
    buf = bytearray(HEADER.pack(base_offset, 49 + len(section), leader_epoch, 2, 0, attributes,
                                last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                producer_epoch, base_sequence, count)) + section
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def uvarint(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def zz(n: int) -> bytes:
    """Zig-zag varint/varlong, written independently of kafkalog.format.varint."""
    return uvarint((n << 1) ^ (n >> 63))


def record(body: bytes) -> bytes:
    return zz(len(body)) + body


def body(ts_delta: int = 0, offset_delta: int = 0, key: bytes = zz(-1), value: bytes = zz(-1),
         headers: bytes = zz(0)) -> bytes:
    return b"\x00" + zz(ts_delta) + zz(offset_delta) + key + value + headers


def blob(data: bytes) -> bytes:
    return zz(len(data)) + data


def set_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


# --- golden vectors (spec §1.9) ----------------------------------------------------------------------------

VECTOR_1_HEX = (
    "0000000000000000 00000055 ffffffff 02 e58cf1ff 0000 00000001 00000000000454c3 00000000000454c3"
    "ffffffffffffffff ffff ffffffff 00000002"
    "20 00 00 00 08 6b657931 0c 76616c756531 00"
    "24 00 e1bf22 02 08 6b657932 0c 76616c756532 00"
)
VECTOR_1_RECORDS = [Record(0, 283843, b"key1", b"value1"), Record(1, 1234, b"key2", b"value2")]

VECTOR_2_HEX = (
    "0000000000000000 00000042 00000000 02 6091c83e 0030 00000000 00000000000003e8 00000000000003e8"
    "0000000000000001 0000 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000005 00"
)


def test_golden_vector_1_bytes() -> None:
    batch = build_batch(VECTOR_1_RECORDS)
    assert batch == bytes.fromhex(VECTOR_1_HEX.replace(" ", ""))
    assert len(batch) == 97
    assert compute_crc(batch) == 3851219455 == 0xE58CF1FF
    header = verify_batch(batch)
    assert (header.base_timestamp, header.max_timestamp, header.last_offset_delta) == (283843, 283843, 1)
    # Record 2's timestamp delta -282609 is the zig-zag varlong e1 bf 22.
    assert batch[80:83] == bytes.fromhex("e1bf22")
    assert decode_varlong(batch, 80, 83) == (-282609, 83)


def test_golden_vector_1_decodes() -> None:
    assert both_paths(bytes.fromhex(VECTOR_1_HEX.replace(" ", ""))) == VECTOR_1_RECORDS


def test_golden_vector_1_lz4_crc_matches_kafka() -> None:
    batch = build_batch(VECTOR_1_RECORDS, compression_type=C.LZ4)
    assert compute_crc(batch) == parse_header(batch).crc == 2745969314
    assert both_paths(batch) == VECTOR_1_RECORDS


def test_golden_vector_2_commit_marker_bytes() -> None:
    batch = end_txn_marker_batch(ControlType.COMMIT, offset=0, timestamp=1000, producer_id=1,
                                 producer_epoch=0, coordinator_epoch=5, partition_leader_epoch=0)
    assert batch == bytes.fromhex(VECTOR_2_HEX.replace(" ", ""))
    assert len(batch) == 78
    assert compute_crc(batch) == 1620166718
    header = verify_batch(batch)
    assert header.is_control and header.is_transactional
    assert header.compression is C.NONE and header.timestamp_type is TimestampType.CREATE_TIME
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1, 0, -1)
    [marker] = both_paths(batch)
    assert parse_control_type(marker.key) == ControlType.COMMIT
    assert parse_end_txn_marker(marker.value) == 5
    # The record is 17 bytes: length byte 0x20 and a 16-byte body.
    assert batch[61] == 0x20 and len(batch) - 61 == 17


# --- DefaultRecordBatchTest ------------------------------------------------------------------------------

EMPTY_TS = 1_700_000_000_123


@pytest.mark.parametrize("timestamp_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])
@pytest.mark.parametrize("is_transactional", [True, False])
@pytest.mark.parametrize("is_control", [True, False])
def test_write_empty_header(timestamp_type: TimestampType, is_transactional: bool, is_control: bool) -> None:
    # testWriteEmptyHeader's values: pid 23423, epoch 145, sequence 983, offsets 15..37, leader epoch 15.
    source = build_batch(
        [Record(15, EMPTY_TS - 5, b"k", b"v" * 50), Record(37, EMPTY_TS - 9, b"k", None)],
        compression_type=C.GZIP, timestamp_type=timestamp_type, log_append_time=EMPTY_TS + 1,
        producer_id=23423, producer_epoch=145, base_sequence=983, is_transactional=is_transactional,
        is_control=is_control, partition_leader_epoch=15, delete_horizon_ms=EMPTY_TS + 500,
    )
    original = verify_batch(source)
    empty = empty_header_batch(original)
    assert len(empty) == 61
    header = verify_batch(empty)
    assert header.length == 49
    assert header.base_timestamp == -1
    assert header.max_timestamp == original.max_timestamp
    assert header.max_timestamp == (EMPTY_TS + 1 if timestamp_type is TimestampType.LOG_APPEND_TIME
                                    else EMPTY_TS - 5)
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (15, 37, 15)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (23423, 145, 983)
    assert header.last_sequence == 983 + 37 - 15 == original.last_sequence
    assert header.records_count == 0
    assert header.compression is C.NONE
    assert not header.has_delete_horizon and original.has_delete_horizon
    assert header.timestamp_type is timestamp_type
    assert (header.is_transactional, header.is_control) == (is_transactional, is_control)
    assert empty[21:23] == struct.pack(">h", (0x08 if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
                                       | (0x10 if is_transactional else 0) | (0x20 if is_control else 0))
    assert [(e.position, e.size, e.offset, e.magic) for e in iter_entries(empty)] == [(0, 61, 15, 2)]
    assert both_paths(empty) == []
    assert int(scan_batches(empty).records_count[0]) == 0


def test_invalid_crc_detected() -> None:
    good = build_batch(VECTOR_1_RECORDS, compression_type=C.SNAPPY)
    verify_batch(good)
    for position in (21, 30, 60, 61, len(good) - 1):  # attributes, header fields, the records section
        bad = bytearray(good)
        bad[position] ^= 0x01
        with pytest.raises(CorruptRecordError, match=r"stored crc = \d+, computed crc = \d+"):
            verify_batch(bytes(bad))
        assert "stored crc" in (find_corrupt_batch(bytes(bad), scan_batches(bytes(bad))) or "")
    bad = bytearray(good)
    bad[17] ^= 0x80  # the stored CRC itself
    with pytest.raises(CorruptRecordError, match="record is corrupt"):
        verify_batch(bytes(bad))
    assert find_corrupt_batch(good, scan_batches(good)) is None


def test_batch_size_errors() -> None:
    batch = build_batch(VECTOR_1_RECORDS)
    with pytest.raises(CorruptRecordError, match="97 bytes, 98 present"):
        verify_batch(batch + b"\x00")
    with pytest.raises(CorruptRecordError, match="smaller than the 61-byte v2 header"):
        verify_batch(batch[:60])


def test_set_partition_leader_epoch_keeps_crc_valid() -> None:
    batch = bytearray(build_batch(VECTOR_1_RECORDS, compression_type=C.ZSTD))
    crc = parse_header(batch).crc
    struct.pack_into(">i", batch, 12, 778)
    header = verify_batch(bytes(batch))
    assert (header.partition_leader_epoch, header.crc, compute_crc(batch)) == (778, crc, crc)
    assert int(scan_batches(bytes(batch)).partition_leader_epoch[0]) == 778


def test_set_last_offset_keeps_crc_valid() -> None:
    records = [Record(0, 10, b"a", b"1"), Record(2, 11, b"b", b"2"), Record(5, 12, b"c", b"3")]
    batch = bytearray(build_batch(records, producer_id=9, producer_epoch=1, base_sequence=40))
    # setLastOffset(100): BaseOffset = 100 - LastOffsetDelta; nothing under the CRC changes.
    struct.pack_into(">q", batch, 0, 100 - parse_header(batch).last_offset_delta)
    header = verify_batch(bytes(batch))
    assert (header.base_offset, header.last_offset, header.next_offset) == (95, 100, 101)
    decoded = both_paths(bytes(batch))
    assert [r.offset for r in decoded] == [95, 97, 100]
    assert [r.sequence for r in decoded] == [40, 42, 45]  # sequences follow the deltas, not offsets


def test_changing_max_timestamp_in_place_needs_a_new_crc() -> None:
    batch = bytearray(build_batch(VECTOR_1_RECORDS))
    struct.pack_into(">q", batch, 35, 999_999)
    with pytest.raises(CorruptRecordError):
        verify_batch(bytes(batch))
    assert verify_batch(set_crc(batch)).max_timestamp == 999_999


@pytest.mark.parametrize("codec", list(C), ids=lambda c: c.name_kafka)
def test_log_append_time_reports_max_timestamp(codec: CompressionType) -> None:
    records = [Record(7, 100, b"a", b"x" * 40), Record(8, 5, b"b", b"y" * 40), Record(9, 900, None, None)]
    batch = build_batch(records, compression_type=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                        log_append_time=123_456)
    header = verify_batch(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and batch[22] & 0x08
    assert (header.base_timestamp, header.max_timestamp) == (100, 123_456)
    assert [r.timestamp for r in both_paths(batch)] == [123_456] * 3


def test_set_log_append_time_in_place() -> None:
    # setMaxTimestamp(LOG_APPEND_TIME, t): flip bit 3, stamp MaxTimestamp, recompute the CRC.
    batch = bytearray(build_batch(VECTOR_1_RECORDS, compression_type=C.GZIP))
    assert [r.timestamp for r in both_paths(bytes(batch))] == [283843, 1234]
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 0x08)
    struct.pack_into(">q", batch, 35, 77_000)
    stamped = set_crc(batch)
    assert verify_batch(stamped).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in both_paths(stamped)] == [77_000, 77_000]


def test_log_append_time_needs_the_append_time() -> None:
    with pytest.raises(InvalidRecordError, match="append time"):
        build_batch(VECTOR_1_RECORDS, timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidRecordError, match="NoTimestampType"):
        build_batch(VECTOR_1_RECORDS, timestamp_type=TimestampType.NO_TIMESTAMP_TYPE)


@pytest.mark.parametrize("codec", [C.NONE, C.LZ4], ids=lambda c: c.name_kafka)
def test_delete_horizon_in_base_timestamp(codec: CompressionType) -> None:
    # MemoryRecordsTest.testBaseTimestampToDeleteHorizonConversion.
    records = [Record(0, 1000, b"k1", None), Record(1, 2500, b"k2", b"v"), Record(2, 1500, b"k3", None)]
    batch = build_batch(records, compression_type=codec, delete_horizon_ms=60_000)
    header = verify_batch(batch)
    assert header.base_timestamp == 60_000 and header.delete_horizon_ms == 60_000
    assert header.has_delete_horizon and batch[22] & 0x40
    assert header.max_timestamp == 2500
    assert both_paths(batch) == records
    if codec is C.NONE:
        deltas, pos = [], 61
        for _ in records:
            length, pos = decode_varint(batch, pos, len(batch))
            deltas.append(decode_varlong(batch, pos + 1, pos + length)[0])
            pos += length
        assert deltas == [-59_000, -57_500, -58_500]
    plain = verify_batch(build_batch(records, compression_type=codec))
    assert (plain.base_timestamp, plain.delete_horizon_ms, plain.has_delete_horizon) == (1000, None, False)


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_control_batch_round_trip(control_type: ControlType) -> None:
    batch = end_txn_marker_batch(control_type, offset=4242, timestamp=1_600_000_000_000,
                                 producer_id=77, producer_epoch=3, coordinator_epoch=2**31 - 1)
    header = verify_batch(batch)
    assert header.is_control and header.is_transactional and not header.has_delete_horizon
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (4242, 0, 1)
    assert header.partition_leader_epoch == -1
    [marker] = both_paths(batch)
    assert marker == Record(4242, 1_600_000_000_000, struct.pack(">hh", 0, control_type),
                            struct.pack(">hi", 0, 2**31 - 1))
    assert parse_control_type(marker.key) == control_type
    assert parse_end_txn_marker(marker.value) == 2**31 - 1


def test_control_record_parsing_rules() -> None:
    assert parse_control_type(struct.pack(">hh", 3, 1) + b"extra") == 1  # future version: type still read
    assert parse_control_type(struct.pack(">hh", 0, 6)) == ControlType.KRAFT_VOTERS
    for bad_key in (None, b"\x00\x00\x01", struct.pack(">hh", -1, 1)):
        with pytest.raises(InvalidRecordError):
            parse_control_type(bad_key)
    for bad_value in (None, b"\x00" * 5, struct.pack(">hi", -2, 1)):
        with pytest.raises(InvalidRecordError):
            parse_end_txn_marker(bad_value)
    with pytest.raises(InvalidRecordError, match="LEADER_CHANGE"):
        end_txn_marker_batch(ControlType.LEADER_CHANGE, offset=0, timestamp=0, producer_id=1,
                             producer_epoch=0, coordinator_epoch=0)


def test_compressed_control_batch_with_sequence_reads_back() -> None:
    key, value = struct.pack(">hh", 0, 2), b"leader-change-payload" * 3
    batch = build_batch([Record(9, 5, key, value)], compression_type=C.ZSTD, producer_id=4,
                        producer_epoch=0, is_control=True)
    header = verify_batch(batch)
    assert header.is_control and not header.is_transactional and header.base_sequence == -1
    [read] = both_paths(batch)
    assert parse_control_type(read.key) == ControlType.LEADER_CHANGE and read.value == value


def test_increment_sequence() -> None:
    assert increment_sequence(5, 5) == 10
    assert increment_sequence(MAX_INT, 1) == 0
    assert increment_sequence(MAX_INT - 5, 10) == 4
    assert increment_sequence(0, MAX_INT) == MAX_INT


def test_sequences_wrap_at_max_int() -> None:
    records = [Record(o, 10, None, b"v") for o in range(50, 56)]
    batch = build_batch(records, producer_id=1, producer_epoch=0, base_sequence=MAX_INT - 2)
    header = verify_batch(batch)
    assert header.last_sequence == 2
    assert [r.sequence for r in both_paths(batch)] == [MAX_INT - 2, MAX_INT - 1, MAX_INT, 0, 1, 2]
    no_seq = build_batch(records)
    assert verify_batch(no_seq).last_sequence == -1
    assert [r.sequence for r in both_paths(no_seq)] == [-1] * 6


def test_attributes_high_byte_is_ignored() -> None:
    batch = bytearray(build_batch(VECTOR_1_RECORDS, compression_type=C.GZIP))
    batch[21] = 0x7F  # the reader casts the int16 to a byte
    stamped = set_crc(batch)
    header = verify_batch(stamped)
    assert header.attributes == 0x01 and header.compression is C.GZIP
    assert int(scan_batches(stamped).attributes[0]) == 0x01
    assert both_paths(stamped) == VECTOR_1_RECORDS


@pytest.mark.parametrize(
    ("kwargs", "records", "message"),
    [
        ({}, [], "at least one record"),
        ({}, [Record(3, 1, None, None), Record(3, 2, None, None)], "strictly increase"),
        ({}, [Record(0, -2, None, None)], "invalid negative timestamp -2"),
        ({"is_transactional": True}, [Record(0, 1, None, None)], "needs a producer id"),
        ({"producer_id": 5, "base_sequence": 0}, [Record(0, 1, None, None)], "needs a producer epoch"),
        ({"producer_id": 5, "producer_epoch": 0}, [Record(0, 1, None, None)], "needs a base sequence"),
        ({"last_offset": 3}, [Record(0, 1, None, None), Record(4, 1, None, None)], "below the last"),
        ({}, [Record(0, 1, None, None), Record(2**31, 1, None, None)], "does not fit in int32"),
    ],
)
def test_build_batch_rejects(kwargs: dict[str, Any], records: list[Record], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        build_batch(records, **kwargs)


def test_no_timestamp_records_and_kept_last_offset() -> None:
    records = [Record(10, -1, b"a", b""), Record(11, -1, b"", b"b")]
    batch = build_batch(records, last_offset=20)
    header = verify_batch(batch)
    assert (header.base_timestamp, header.max_timestamp, header.last_offset) == (-1, -1, 20)
    assert both_paths(batch) == records


# --- declared record count (testInvalidRecordCount*) ---------------------------------------------------


def test_declared_count_zero_reads_no_records_like_kafka() -> None:
    # DefaultRecordBatch.iterator() returns an empty iterator when count() == 0, without reading.
    batch = _with_count(build_batch([Record(0, 1, b"k", b"v")]), 0)
    assert decode_records(batch) == []
    assert len(scan_records(batch, scan_batches(batch))) == 0


def _with_count(batch: bytes, count: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 57, count)
    return set_crc(buf)


@pytest.mark.parametrize("codec", list(C), ids=lambda c: c.name_kafka)
@pytest.mark.parametrize("count", [4, 5, 100, 2])  # 3 records were written
def test_declared_record_count_mismatch(codec: CompressionType, count: int) -> None:
    records = [Record(i, 1000 + i, b"key%d" % i, b"value" * 20) for i in range(3)]
    batch = _with_count(build_batch(records, compression_type=codec), count)
    verify_batch(batch)  # the CRC is fine: only record iteration notices
    with pytest.raises(InvalidRecordError):
        decode_records(batch)
    with pytest.raises(InvalidRecordError):
        scan_records(batch, scan_batches(batch))


def test_negative_record_count() -> None:
    batch = _with_count(build_batch(VECTOR_1_RECORDS), -1)
    with pytest.raises(InvalidRecordError, match="negative record count"):
        decode_records(batch)
    with pytest.raises(InvalidRecordError, match="negative record count"):
        scan_records(batch, scan_batches(batch))


def test_declared_count_too_low_names_leftover_bytes() -> None:
    batch = _with_count(build_batch(VECTOR_1_RECORDS), 1)
    with pytest.raises(InvalidRecordError, match="incorrect declared batch size, 19 bytes left"):
        decode_records(batch)


# --- DefaultRecordTest: record-level validation ----------------------------------------------------------

GOOD_HEADERS = zz(2) + blob(b"h1") + blob(b"v1") + blob(b"h2") + zz(-1)

# case -> (records section, what decode_records says, what scan_records says)
INVALID_RECORDS = {
    # key/value sizes beyond the record body (testInvalidKeySize / testInvalidValueSize*)
    "key size past body": (record(body(key=zz(105) + b"abc")), "premature EOF", "premature EOF"),
    "value size past body": (record(body(key=blob(b"k"), value=zz(50) + b"xy")), "premature EOF",
                             "premature EOF"),
    # headers (testInvalidNumHeaders*, testInvalidHeaderKey, testNullHeaderKey, ...)
    "negative header count": (record(body(headers=zz(-1))), "invalid header count -1", "header count"),
    "header count > remaining bytes": (record(body(headers=zz(3) + blob(b"a"))), "invalid header count 3",
                                       "header count"),
    "header count partial": (record(body(headers=zz(2) + blob(b"a") + blob(b"b"))), "premature EOF",
                             "premature EOF"),
    "null header key": (record(body(headers=zz(1) + zz(-1) + blob(b"v"))), "null header key",
                        "null header key"),
    "header key size past body": (record(body(headers=zz(1) + zz(105) + b"k" + blob(b"v"))),
                                  "premature EOF", "premature EOF"),
    "header value size past body": (record(body(headers=zz(1) + blob(b"k") + zz(40) + b"v")),
                                    "premature EOF", "premature EOF"),
    # body length vs the bytes its fields take
    "body longer than fields": (record(body() + b"\x00"), "expected to read 7 bytes, read 6",
                                "record size does not match"),
    "body shorter than fields": (zz(len(body()) - 1) + body(), "premature EOF", "premature EOF"),
    "body past the section": (zz(40) + body(), "record body of 40 bytes", "runs past the end"),
    "negative body length": (zz(-3) + body(), "record body of -3 bytes", "runs past the end"),
    # varints (testInvalidVarlong, testUnderflowReadingVarlong, testUnderflowReadingTimestamp)
    "varlong of 11 bytes": (record(b"\x00" + b"\xff" * 10 + b"\x01" + zz(0) + zz(-1) + zz(-1) + zz(0)),
                            "varint longer than 10 bytes", "varint longer"),
    "varint of 6 bytes": (record(b"\x00" + zz(0) + b"\xff" * 5 + b"\x01" + zz(-1) + zz(-1) + zz(0)),
                          "varint longer than 5 bytes", "varint longer"),
    "body ends inside the timestamp": (record(b"\x00\xff\xff"), "premature EOF", "cannot fit"),
    "body ends inside the offset delta": (record(b"\x00" + zz(0) + b"\x80"), "premature EOF", "cannot fit"),
    "length varint never ends": (b"\xff\xff\xff\xff\xff\x01" + body(), "varint longer than 5 bytes",
                                 "varint longer"),
}


@pytest.mark.parametrize("case", list(INVALID_RECORDS))
def test_invalid_record(case: str) -> None:
    section, decode_error, scan_error = INVALID_RECORDS[case]
    batch = raw_batch(section, 1)
    verify_batch(batch)
    with pytest.raises(InvalidRecordError, match=decode_error):
        decode_records(batch)
    with pytest.raises(InvalidRecordError, match=scan_error):
        scan_records(batch, scan_batches(batch))


def test_record_size_is_checked_per_record() -> None:
    # The first body declares one byte more than its fields take; the byte would parse as the start of
    # a second record, so only a per-record size check reports the real fault.
    section = record(body() + b"\x00") + record(body())
    batch = raw_batch(section, 2, last_offset_delta=1)
    with pytest.raises(InvalidRecordError, match="expected to read 7 bytes, read 6"):
        decode_records(batch)
    with pytest.raises(InvalidRecordError, match=f"record size does not match .* at byte {61 + 1 + 6}"):
        scan_records(batch, scan_batches(batch))


def test_invalid_record_inside_compressed_section() -> None:
    section = record(body(key=blob(b"k"))) + INVALID_RECORDS["null header key"][0]
    batch = raw_batch(compress(C.GZIP, section), 2, attributes=1, last_offset_delta=1)
    with pytest.raises(InvalidRecordError, match="null header key"):
        decode_records(batch)
    with pytest.raises(InvalidRecordError, match="null header key"):
        scan_records(batch, scan_batches(batch))


def test_hand_built_records_decode() -> None:
    # testBasicSerde from bytes written by hand: negative key length = null, headers with null value,
    # a header key that is not UTF-8 (Java decodes with replacement), offset gaps and ts deltas.
    section = (
        record(body(ts_delta=-5, offset_delta=0, key=blob(b""), value=blob(b"v0"), headers=GOOD_HEADERS))
        + record(body(ts_delta=2**40, offset_delta=7, key=zz(-7), value=blob(b"")))
    )
    batch = raw_batch(section, 2, base_offset=1000, last_offset_delta=9, base_timestamp=50,
                      max_timestamp=2**40 + 50, producer_id=3, producer_epoch=1, base_sequence=10)
    assert both_paths(batch) == [
        Record(1000, 45, b"", b"v0", (("h1", b"v1"), ("h2", None)), 10),
        Record(1007, 2**40 + 50, None, b"", (), 17),
    ]
    odd_key = raw_batch(record(body(headers=zz(1) + blob(b"\xff") + blob(b"x"))), 1)
    assert decode_records(odd_key)[0].headers == (("\ufffd", b"x"),)


def test_timestamp_delta_wraps_like_java() -> None:
    # MemoryRecordsBuilder computes `timestamp - baseTimestamp` in a Java long: records at -1 and
    # MAX_LONG give the delta MIN_LONG, and the reader's `base + delta` wraps back to MAX_LONG.
    batch = raw_batch(record(body(ts_delta=-(2**63))), 1, base_timestamp=-1, max_timestamp=2**63 - 1)
    assert int(scan_records(batch, scan_batches(batch)).timestamp[0]) == 2**63 - 1  # numba wraps
    assert decode_records(batch)[0].timestamp == 2**63 - 1
    records = [Record(0, -1, None, None), Record(1, 2**63 - 1, None, None)]
    assert both_paths(build_batch(records)) == records
