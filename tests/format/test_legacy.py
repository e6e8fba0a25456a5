"""Legacy messages (magic 0/1, spec §1.8): the writer the cleaner rebuilds wrappers with
(``legacy.build_wrapper``, Kafka's ``MemoryRecordsBuilder`` for magic < 2) and the deep iterator's
checks.

Expected bytes are written out field by field here, or built by kafka-python's
``LegacyRecordBatchBuilder`` (an independent writer of uncompressed message sets); what is written is
read back with kafka-python's ``MemoryRecords`` as well as kafkalog's reader.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.codec import lz4_encode_old_kafka
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords
from records_helper import message_set

from kafkalog.errors import CompressionError, InvalidRecordError
from kafkalog.format import compression, legacy
from kafkalog.format.batch import Record, TimestampType
from kafkalog.format.compression import CompressionType

C = CompressionType
CREATE, LOG_APPEND, NO_TYPE = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME, TimestampType.NO_TIMESTAMP_TYPE
LEGACY_CODECS = [C.GZIP, C.SNAPPY, C.LZ4]


def wrapper_fields(entry: bytes) -> tuple[int, int, int, int, int, bytes | None, bytes]:
    """(offset, crc, magic, attributes, timestamp, key, value) of a wrapper, read by hand."""
    offset, length, crc, magic, attributes = struct.unpack_from(">qiIbb", entry)
    assert length == len(entry) - 12
    pos, timestamp = 18, -1
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", entry, pos)
        pos += 8
    (key_len,) = struct.unpack_from(">i", entry, pos)
    key = None if key_len < 0 else entry[pos + 4:pos + 4 + key_len]
    pos += 4 + max(key_len, 0)
    (value_len,) = struct.unpack_from(">i", entry, pos)
    assert pos + 4 + value_len == len(entry)
    return offset, crc, magic, attributes, timestamp, key, entry[pos + 4:]


def peer_read(entry: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    records = KafkaPythonMemoryRecords(entry)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in batch]
    return out


# --- one message ---------------------------------------------------------------------------------------


def test_encode_message_checksums_are_kafkas() -> None:
    # MemoryRecordsTest.testChecksum's expected CRCs for (ts 283843, "key1", "value1") (spec §1.9).
    assert struct.unpack_from(">I", legacy.encode_message(0, 283843, b"key1", b"value1"))[0] == 1978725405
    assert struct.unpack_from(">I", legacy.encode_message(1, 283843, b"key1", b"value1"))[0] == 109425508


@pytest.mark.parametrize("magic", [0, 1])
def test_encode_message_bytes(magic: int) -> None:
    timestamp = 1_700_000_000_123
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", timestamp) if magic else b"")
    body += struct.pack(">i", 3) + b"key" + struct.pack(">i", -1)
    assert legacy.encode_message(magic, timestamp, b"key", None) == struct.pack(">I", zlib.crc32(body)) + body
    # kafka-python writes the same message (after its 12-byte offset/size prefix)
    peer = message_set(magic, [(7, timestamp, b"key", None)])
    assert legacy.encode_message(magic, timestamp, b"key", None) == peer[12:]


def test_encode_message_refuses_what_kafka_refuses() -> None:
    with pytest.raises(InvalidRecordError, match="magic 0 or 1"):
        legacy.encode_message(2, -1, b"k", b"v")
    with pytest.raises(InvalidRecordError, match="invalid message timestamp -5"):
        legacy.encode_message(1, -5, b"k", b"v")
    assert legacy.encode_message(0, -5, b"k", b"v") == legacy.encode_message(0, -1, b"k", b"v")  # v0: no timestamp


# --- wrappers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_v0_wrapper_keeps_absolute_inner_offsets(codec: CompressionType) -> None:
    records = [Record(4, -1, b"0", b"4"), Record(7, -1, None, b"7"), Record(9, -1, b"1", None)]
    entry = legacy.build_wrapper(0, codec, NO_TYPE, records)
    offset, crc, magic, attributes, timestamp, key, value = wrapper_fields(entry)
    assert (offset, magic, attributes, timestamp, key) == (9, 0, int(codec), -1, None)
    assert crc == zlib.crc32(entry[16:])
    assert compression.decompress(codec, value, magic=0) == message_set(0, [
        (4, -1, b"0", b"4"), (7, -1, None, b"7"), (9, -1, b"1", None)])
    assert peer_read(entry) == [(4, -1, b"0", b"4"), (7, -1, None, b"7"), (9, -1, b"1", None)]


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_v1_create_time_wrapper_has_relative_offsets_and_the_largest_timestamp(codec: CompressionType) -> None:
    records = [Record(100, 1_000, b"a", b"x"), Record(102, 3_000, b"b", b"y"), Record(103, 2_000, b"c", b"z")]
    entry = legacy.build_wrapper(1, codec, CREATE, records)
    offset, crc, magic, attributes, timestamp, key, value = wrapper_fields(entry)
    assert (offset, magic, attributes, timestamp, key) == (103, 1, int(codec), 3_000, None)
    assert crc == zlib.crc32(entry[16:])
    # relative to the first record: the gap at 101 stays a gap
    assert compression.decompress(codec, value, magic=1) == message_set(1, [
        (0, 1_000, b"a", b"x"), (2, 3_000, b"b", b"y"), (3, 2_000, b"c", b"z")])
    assert peer_read(entry) == [(100, 1_000, b"a", b"x"), (102, 3_000, b"b", b"y"), (103, 2_000, b"c", b"z")]


def test_v1_wrapper_without_timestamps_carries_none() -> None:
    entry = legacy.build_wrapper(1, C.GZIP, CREATE, [Record(5, -1, b"a", b"x"), Record(6, -1, b"b", b"y")])
    assert wrapper_fields(entry)[4] == -1


def test_v1_log_append_time_wrapper_stamps_every_record() -> None:
    records = [Record(10, 1_000, b"a", b"x"), Record(12, 5_000, b"b", b"y")]
    entry = legacy.build_wrapper(1, C.GZIP, LOG_APPEND, records, log_append_time=1_234)
    offset, _, _, attributes, timestamp, _, value = wrapper_fields(entry)
    assert (offset, attributes, timestamp) == (12, 0x08 | 1, 1_234)
    inner = compression.decompress(C.GZIP, value, magic=1)
    # each inner message: attributes with the timestamp-type bit, the append time as its timestamp
    want = b""
    for relative, key, val in ((0, b"a", b"x"), (2, b"b", b"y")):
        body = struct.pack(">bbq", 1, 0x08, 1_234) + struct.pack(">i", 1) + key + struct.pack(">i", 1) + val
        want += struct.pack(">qiI", relative, 4 + len(body), zlib.crc32(body)) + body
    assert inner == want
    assert peer_read(entry) == [(10, 1_234, b"a", b"x"), (12, 1_234, b"b", b"y")]


@pytest.mark.parametrize("magic", [0, 1])
def test_lz4_wrapper_header_checksum_follows_the_magic(magic: int) -> None:
    entry = legacy.build_wrapper(magic, C.LZ4, CREATE if magic else NO_TYPE, [Record(0, -1, b"k", b"v")])
    value = wrapper_fields(entry)[6]
    # magic 0: Kafka 0.8's header checksum, over the frame magic too (kafka-python's lz4_encode_old_kafka
    # writes the same 7 bytes); magic 1: the standard one, over FLG and BD only
    assert value[:7] == bytes.fromhex("04224d1860401a" if magic == 0 else "04224d18604082")
    if magic == 0:
        assert value[:7] == lz4_encode_old_kafka(b"k")[:7]
    assert compression.decompress(C.LZ4, value, magic=magic) == message_set(magic, [(0, -1, b"k", b"v")])


def test_build_wrapper_refuses_what_kafka_refuses() -> None:
    one = [Record(0, -1, b"k", b"v")]
    with pytest.raises(InvalidRecordError, match="at least one record"):
        legacy.build_wrapper(0, C.GZIP, NO_TYPE, [])
    with pytest.raises(InvalidRecordError, match="no wrapper"):
        legacy.build_wrapper(0, C.NONE, NO_TYPE, one)
    with pytest.raises(CompressionError, match="zstd requires record format magic 2"):
        legacy.build_wrapper(1, C.ZSTD, CREATE, one)
    with pytest.raises(InvalidRecordError, match="needs a timestamp type"):
        legacy.build_wrapper(1, C.GZIP, NO_TYPE, one)
    with pytest.raises(InvalidRecordError, match="strictly increase: 3 after 3"):
        legacy.build_wrapper(1, C.GZIP, CREATE, [Record(3, -1, b"a", b"x"), Record(3, -1, b"b", b"y")])
    with pytest.raises(InvalidRecordError, match="does not fit in int32"):
        legacy.build_wrapper(1, C.GZIP, CREATE, [Record(0, -1, b"a", b"x"), Record(2**31, -1, b"b", b"y")])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_what_build_wrapper_writes_reads_back(magic: int, codec: CompressionType) -> None:
    records = [Record(50, 7 if magic else -1, b"k1", b"v1"), Record(53, 9 if magic else -1, b"k2", None)]
    entry = legacy.build_wrapper(magic, codec, CREATE if magic else NO_TYPE, records)
    parsed = legacy.parse_entry(entry)
    assert legacy.is_valid(entry, parsed)
    data, deep = legacy.deep_records(entry, parsed)
    assert [record for _, record in deep] == records
    for message, record in deep:  # key and value positions are where their bytes are
        assert data[message.key_position:message.key_position + len(record.key or b"")] == (record.key or b"")
        assert message.magic == magic


# --- the deep iterator's checks --------------------------------------------------------------------------


def _wrap(magic: int, codec: CompressionType, offset: int, inner: bytes, timestamp: int = -1) -> bytes:
    message = legacy.encode_message(magic, timestamp, None, compression.compress(codec, inner, magic=magic), int(codec))
    return struct.pack(">qi", offset, len(message)) + message


def test_nested_wrapper_is_refused() -> None:
    nested = legacy.build_wrapper(0, C.GZIP, NO_TYPE, [Record(0, -1, b"k", b"v")])
    entry = _wrap(0, C.GZIP, 0, nested)
    with pytest.raises(InvalidRecordError, match="inner messages must not be compressed"):
        legacy.inner_records(entry, legacy.parse_entry(entry))


def test_v1_wrapper_offset_below_its_last_inner_offset_is_refused() -> None:
    entry = _wrap(1, C.GZIP, 1, message_set(1, [(0, -1, b"a", b"x"), (1, -1, b"b", b"y"), (2, -1, b"c", b"z")]))
    with pytest.raises(InvalidRecordError, match="offset 1 is less than the last inner message offset 2"):
        legacy.inner_records(entry, legacy.parse_entry(entry))


def test_v1_wrapper_at_offset_zero_keeps_inner_offsets() -> None:
    # librdkafka wrote wrapper offset 0: Kafka takes the inner offsets as they are
    entry = _wrap(1, C.GZIP, 0, message_set(1, [(0, 5, b"a", b"x"), (1, 6, b"b", b"y")]))
    assert [(r.offset, r.timestamp) for _, r in legacy.inner_records(entry, legacy.parse_entry(entry))] == \
        [(0, 5), (1, 6)]
