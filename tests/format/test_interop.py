"""Cross-checks of kafkalog's record format with independent implementations: kafka-python's
``kafka.record`` and aiokafka's ``aiokafka.record`` (its Cython ``_crecords`` build, which is what it
loads here, and its pure-Python classes).

* kafka-python/aiokafka write → kafkalog reads, with both the per-record path (``decode_records``)
  and the bulk path (``scan_batches`` + ``scan_records``), for every codec, v2 and legacy v0/v1.
* kafkalog writes → kafka-python and aiokafka read, validate the CRC and see the same records.

The expected records are written out in each test, so a mistake shared by writer and reader still
fails; the peer libraries only ever build or parse bytes.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record import legacy_records as aio_legacy
from aiokafka.record import memory_records as aio_memory
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from records_helper import scanned

from kafkalog.format import legacy
from kafkalog.format.batch import (
    ControlType,
    Record,
    TimestampType,
    build_batch,
    decode_records,
    end_txn_marker_batch,
    iter_entries,
    verify_batch,
)
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import find_corrupt_batch, scan_batches, scan_records

C = CompressionType
CODECS = list(C)
MAX_INT = 2**31 - 1

# (offset delta, timestamp, key, value, headers): null key, null value, empty bytes, headers with a
# null value and a non-ASCII key, offset gaps, a timestamp below the first one and a large jump.
ROWS: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (0, 1_700_000_000_000, b"key-0", b"value " * 30, [("trace", b"abc"), ("none", None)]),
    (1, 1_700_000_000_005, None, b"value " * 30, []),
    (2, 1_699_999_999_000, b"key-2", None, [("é-ü", b"")]),
    (5, 1_700_000_000_001, b"", b"", [("a", b"x" * 10), ("b", b"y" * 10), ("c", None)]),
    (6, 1_800_000_000_000, b"key-6" * 20, b"value " * 40, []),
]


def expected(rows: Sequence[tuple[Any, ...]], base_offset: int, base_sequence: int = -1) -> list[Record]:
    """The records ``rows`` stand for, computed without kafkalog's decoder."""
    return [
        Record(base_offset + delta, ts, key, value, tuple(headers),
               -1 if base_sequence < 0 else (base_sequence + delta) % 2**31)
        for delta, ts, key, value, headers in rows
    ]


def decoded_per_batch(buf: bytes) -> list[Record]:
    out: list[Record] = []
    for entry in iter_entries(buf):
        batch = buf[entry.position:entry.position + entry.size]
        out += decode_records(batch, verify_batch(batch))
    return out


# --- kafka-python and aiokafka write v2, kafkalog reads ------------------------------------------------

BUILDERS: dict[str, Callable[..., Any]] = {
    "kafka-python": DefaultRecordBatchBuilder,
    "aiokafka": aio_default.DefaultRecordBatchBuilder,  # the Cython build when it loads
    "aiokafka-py": aio_default._DefaultRecordBatchBuilderPy,
}


def peer_batch(builder: str, codec: CompressionType, rows: Sequence[tuple[Any, ...]], *,
               transactional: bool = False, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, base_offset: int = 0) -> bytes:
    b = BUILDERS[builder](magic=2, compression_type=int(codec), is_transactional=transactional,
                          producer_id=producer_id, producer_epoch=producer_epoch,
                          base_sequence=base_sequence, batch_size=1 << 20)
    for delta, ts, key, value, headers in rows:
        assert b.append(delta, timestamp=ts, key=key, value=value, headers=headers) is not None
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)  # the broker assigns it; outside the CRC
    return bytes(buf)


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_kafka)
def test_peer_v2_batches_decode(builder: str, codec: CompressionType) -> None:
    batch = peer_batch(builder, codec, ROWS, base_offset=5000)
    header = verify_batch(batch)
    assert header.compression is codec  # the peer did compress (it falls back to none if it cannot shrink)
    assert (header.base_offset, header.last_offset, header.records_count) == (5000, 5006, 5)
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_000, 1_800_000_000_000)
    assert (header.producer_id, header.base_sequence, header.is_transactional) == (-1, -1, False)
    want = expected(ROWS, 5000)
    assert decode_records(batch, header) == want
    assert scanned(batch) == want


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_kafka)
def test_peer_transactional_batches_decode(builder: str, codec: CompressionType) -> None:
    # A base sequence near MAX_INT makes the record sequences wrap to 0.
    batch = peer_batch(builder, codec, ROWS, transactional=True, producer_id=2**40 + 3,
                       producer_epoch=32000, base_sequence=MAX_INT - 2, base_offset=77)
    header = verify_batch(batch)
    assert header.is_transactional and not header.is_control
    producer = (header.producer_id, header.producer_epoch, header.base_sequence)
    assert producer == (2**40 + 3, 32000, MAX_INT - 2)
    assert header.last_sequence == 3
    want = expected(ROWS, 77, MAX_INT - 2)
    assert [r.sequence for r in want] == [MAX_INT - 2, MAX_INT - 1, MAX_INT, 2, 3]
    assert decode_records(batch, header) == want
    assert scanned(batch) == want
    cols = scan_batches(batch)
    assert (int(cols.producer_id[0]), int(cols.producer_epoch[0]), int(cols.base_sequence[0])) == (
        2**40 + 3, 32000, MAX_INT - 2)


def test_peer_batches_concatenated_scan_like_decode() -> None:
    """A segment-like buffer of batches from three writers and five codecs, bulk vs per batch."""
    parts, want, offset = [], [], 0
    for i, (builder, codec) in enumerate((b, c) for b in BUILDERS for c in CODECS):
        rows = ROWS[i % 3:] + ROWS[:i % 3]
        rows = [(j * 2, ts + i, *rest) for j, (_, ts, *rest) in enumerate(rows)]
        parts.append(peer_batch(builder, codec, rows, base_offset=offset))
        want += expected(rows, offset)
        offset += 2 * len(rows) + 3
    buf = b"".join(parts)
    assert decoded_per_batch(buf) == want
    assert scanned(buf) == want
    assert find_corrupt_batch(buf, scan_batches(buf)) is None


def test_peer_log_append_time_stamped_by_broker() -> None:
    # The broker stamps LogAppendTime: bit 3, MaxTimestamp, new CRC. kafkalog's set-up is checked
    # against kafka-python's reading of the same bytes.
    from crc32c import crc32c

    buf = bytearray(peer_batch("kafka-python", C.GZIP, ROWS, base_offset=10))
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x08)
    struct.pack_into(">q", buf, 35, 1_234_567)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    batch = bytes(buf)
    assert verify_batch(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode_records(batch)] == [1_234_567] * 5
    assert [r.timestamp for r in scanned(batch)] == [1_234_567] * 5
    peer = KafkaPythonMemoryRecords(batch).next_batch()
    assert peer.validate_crc() and peer.timestamp_type == 1
    assert [r.timestamp for r in peer] == [1_234_567] * 5


# --- kafka-python writes legacy v0/v1, kafkalog reads ----------------------------------------------------

LEGACY_CODECS = [C.NONE, C.GZIP, C.SNAPPY, C.LZ4]
LEGACY_ROWS: list[tuple[int, bytes | None, bytes | None]] = [
    (1_500_000_000_000, b"k0", b"payload " * 20),
    (1_500_000_000_900, None, b"payload " * 20),
    (1_499_000_000_000, b"k2", None),
    (1_500_000_000_100, b"", b""),
]
LEGACY_BASE = 300


def legacy_buffer(magic: int, codec: CompressionType) -> bytes:
    """Uncompressed: one entry per record. Compressed: one wrapper with offsets as a broker stores
    them (v1 inner offsets relative, wrapper = last absolute offset; v0 inner offsets absolute)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    relative = codec is not C.NONE and magic == 1
    for i, (ts, key, value) in enumerate(LEGACY_ROWS):
        b.append(i if relative else LEGACY_BASE + i, timestamp=ts, key=key, value=value)
    buf = bytearray(b.build())
    if codec is not C.NONE:
        struct.pack_into(">q", buf, 0, LEGACY_BASE + len(LEGACY_ROWS) - 1)  # outside the CRC
    return bytes(buf)


def legacy_expected(magic: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(LEGACY_BASE + i, ts if magic == 1 else -1, key, value)
            for i, (ts, key, value) in enumerate(LEGACY_ROWS)]


def legacy_read(buf: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    for entry in iter_entries(buf):
        parsed = legacy.parse_entry(buf, entry.position)
        assert legacy.is_valid(buf, parsed)
        out += [(r.offset, r.timestamp, r.key, r.value) for _, r in legacy.inner_records(buf, parsed)]
    return out


def legacy_scanned(buf: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    cols = scan_records(buf, scan_batches(buf))
    return [(int(cols.offset[i]), int(cols.timestamp[i]), cols.key(i), cols.value(i))
            for i in range(len(cols))]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_legacy_from_kafka_python(magic: int, codec: CompressionType) -> None:
    buf = legacy_buffer(magic, codec)
    entries = list(iter_entries(buf))
    assert len(entries) == (len(LEGACY_ROWS) if codec is C.NONE else 1)
    first = legacy.parse_entry(buf, 0)
    assert (first.magic, first.compression) == (magic, codec)
    timestamp_type = TimestampType.CREATE_TIME if magic == 1 else TimestampType.NO_TIMESTAMP_TYPE
    assert first.timestamp_type is timestamp_type
    want = legacy_expected(magic)
    assert legacy_read(buf) == want
    assert legacy_scanned(buf) == want
    # kafka-python's own reading of the same bytes agrees (v0 has no timestamps: None there, -1 here).
    peer = [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
            for batch in KafkaPythonMemoryRecords(buf) for r in batch]
    assert peer == want
    cols = scan_batches(buf)
    assert cols.magic.tolist() == [magic] * len(entries)
    assert cols.records_count.tolist() == [-1] * len(entries)
    assert find_corrupt_batch(buf, cols) is None


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_legacy_crc32_detects_corruption(magic: int, codec: CompressionType) -> None:
    good = legacy_buffer(magic, codec)
    entry = legacy.parse_entry(good, 0)
    assert entry.crc == zlib.crc32(good[16:entry.size_in_bytes]) == legacy.computed_crc(good, entry)
    bad = bytearray(good)
    bad[entry.size_in_bytes - 1] ^= 0x20  # last byte of the value: CRC-covered, framing intact
    bad_entry = legacy.parse_entry(bytes(bad), 0)
    assert not legacy.is_valid(bytes(bad), bad_entry)
    assert "stored crc" in (find_corrupt_batch(bytes(bad), scan_batches(bytes(bad))) or "")
    assert not next(iter(KafkaPythonMemoryRecords(bytes(bad)))).validate_crc()
    # The offset is outside the legacy CRC (it starts at the magic byte).
    moved = bytearray(good)
    struct.pack_into(">q", moved, 0, 123_456)
    assert legacy.is_valid(bytes(moved), legacy.parse_entry(bytes(moved), 0))


@pytest.mark.parametrize("codec", [C.GZIP, C.SNAPPY, C.LZ4], ids=lambda c: c.name_kafka)
def test_legacy_v1_log_append_time_wrapper(codec: CompressionType) -> None:
    # A v1 LogAppendTime wrapper: inner records report the wrapper's timestamp.
    buf = bytearray(legacy_buffer(1, codec))
    buf[17] |= 0x08
    struct.pack_into(">q", buf, 18, 1_600_000_000_000)
    struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16:])))
    data = bytes(buf)
    want = [(o, 1_600_000_000_000, k, v) for o, _, k, v in legacy_expected(1)]
    assert legacy_read(data) == want
    assert legacy_scanned(data) == want
    assert [r.timestamp for batch in KafkaPythonMemoryRecords(data) for r in batch] == [1_600_000_000_000] * 4


def test_legacy_aiokafka_wrapper_reads() -> None:
    # aiokafka's (Cython) legacy builder is a second, independent legacy writer.
    b = aio_legacy.LegacyRecordBatchBuilder(1, int(C.GZIP), 1 << 20)
    for i, (ts, key, value) in enumerate(LEGACY_ROWS):
        b.append(i, timestamp=ts, key=key, value=value)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, LEGACY_BASE + len(LEGACY_ROWS) - 1)
    assert legacy_read(bytes(buf)) == legacy_scanned(bytes(buf)) == legacy_expected(1)


# --- kafkalog writes v2, kafka-python and aiokafka read ---------------------------------------------------

MINE = [
    Record(900, 1_700_000_000_000, b"key-0", b"value " * 30, (("trace", b"abc"), ("none", None))),
    Record(901, 1_699_999_999_000, None, b"value " * 30),
    Record(904, 1_700_000_000_700, b"key-2", None, (("é-ü", b""),)),
    Record(905, 1_700_000_000_001, b"", b""),
]


def kafka_python_view(buf: bytes) -> list[dict[str, Any]]:
    out = []
    for batch in KafkaPythonMemoryRecords(buf):
        assert batch.validate_crc()
        out.append({
            "base_offset": batch.base_offset, "last_offset_delta": batch.last_offset_delta,
            "codec": batch.compression_type, "timestamp_type": batch.timestamp_type,
            "transactional": batch.is_transactional, "control": batch.is_control_batch,
            "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
            "timestamps": (batch.first_timestamp, batch.max_timestamp), "count": batch.records_count,
            "records": [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch],
        })
    return out


def aiokafka_view(buf: bytes, pure_python: bool) -> list[dict[str, Any]]:
    out = []
    if pure_python:
        batches = [aio_default._DefaultRecordBatchPy(buf[e.position:e.position + e.size])
                   for e in iter_entries(buf)]
    else:
        records = aio_memory.MemoryRecords(buf)
        batches = []
        while records.has_next():
            batches.append(records.next_batch())
    for batch in batches:
        assert batch.validate_crc()
        out.append({
            "base_offset": batch.base_offset, "codec": batch.compression_type,
            "transactional": batch.is_transactional, "control": batch.is_control_batch,
            "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
            "records": [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch],
        })
    return out


def as_rows(records: Sequence[Record]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def test_aiokafka_loads_its_compiled_records() -> None:
    # Documents which implementation the "aiokafka" cases below exercise; both are tested anyway.
    assert aio_memory.MemoryRecords.__module__.endswith("_crecords.memory_records")


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_kafka)
def test_kafka_python_reads_kafkalog(codec: CompressionType) -> None:
    batch = build_batch(MINE, compression_type=codec, producer_id=12, producer_epoch=3,
                        base_sequence=100, is_transactional=True, partition_leader_epoch=8)
    [view] = kafka_python_view(batch)
    assert view == {
        "base_offset": 900, "last_offset_delta": 5, "codec": int(codec), "timestamp_type": 0,
        "transactional": True, "control": False, "producer": (12, 3, 100),
        "timestamps": (1_700_000_000_000, 1_700_000_000_700), "count": 4, "records": as_rows(MINE),
    }
    assert KafkaPythonMemoryRecords(batch).next_batch().last_sequence == 105


@pytest.mark.parametrize("pure_python", [False, True], ids=["cython", "python"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_kafka)
def test_aiokafka_reads_kafkalog(codec: CompressionType, pure_python: bool) -> None:
    batch = build_batch(MINE, compression_type=codec, producer_id=12, producer_epoch=3, base_sequence=100)
    [view] = aiokafka_view(batch, pure_python)
    assert view == {"base_offset": 900, "codec": int(codec), "transactional": False, "control": False,
                    "producer": (12, 3, 100), "records": as_rows(MINE)}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_kafka)
def test_peers_read_kafkalog_variants(codec: CompressionType) -> None:
    """LogAppendTime, a delete horizon (negative deltas), compression levels: a multi-batch buffer."""
    level = {C.GZIP: 1, C.LZ4: 12, C.ZSTD: -5}.get(codec)
    second = [dataclasses.replace(r, offset=r.offset + 50) for r in MINE]
    third = [dataclasses.replace(MINE[1], offset=992)]
    buf = (
        build_batch(MINE, compression_type=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                    log_append_time=1_750_000_000_000)
        + build_batch(second, compression_type=codec, delete_horizon_ms=1_800_000_000_000)
        + build_batch(third, base_offset=990, last_offset=995, compression_type=codec,
                      compression_level=level)
    )
    appended = [(r[0], 1_750_000_000_000, *r[2:]) for r in as_rows(MINE)]
    want = [appended, as_rows(second), as_rows(third)]
    assert [v["records"] for v in kafka_python_view(buf)] == want
    assert [v["records"] for v in aiokafka_view(buf, False)] == want
    assert [v["records"] for v in aiokafka_view(buf, True)] == want
    assert [(v["timestamp_type"], v["timestamps"][0]) for v in kafka_python_view(buf)] == [
        (1, 1_700_000_000_000), (0, 1_800_000_000_000), (0, 1_699_999_999_000)]
    assert decoded_per_batch(buf) == scanned(buf)


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
def test_kafka_python_sees_end_txn_marker(control_type: ControlType) -> None:
    marker = end_txn_marker_batch(control_type, offset=31, timestamp=1_700_000_000_000, producer_id=44,
                                  producer_epoch=2, coordinator_epoch=17, partition_leader_epoch=6)
    batch = KafkaPythonMemoryRecords(marker).next_batch()
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (44, 2, -1)
    assert (batch.leader_epoch, batch.base_offset, batch.records_count) == (6, 31, 1)
    [record] = list(batch)
    assert (record.version, record.type) == (0, int(control_type))
    assert record.commit is (control_type is ControlType.COMMIT)
    assert record.abort is (control_type is ControlType.ABORT)
    assert record.key == struct.pack(">hh", 0, int(control_type))
    assert record.value == struct.pack(">hi", 0, 17)
    assert (record.offset, record.timestamp, record.headers) == (31, 1_700_000_000_000, [])
    [aio] = aiokafka_view(marker, pure_python=False)
    assert aio["control"] and aio["transactional"]
    assert aio["records"] == [(31, 1_700_000_000_000, struct.pack(">hh", 0, int(control_type)),
                               struct.pack(">hi", 0, 17), [])]
