"""Property tests of the v2 record format: ``decode_records(build_batch(x))`` gives ``x`` back, the
numba bulk path (``scan_batches`` + ``scan_records``) gives exactly what ``decode_records`` gives batch
by batch, entry framing stops at a torn tail and raises on a garbage length, and the varint codec
round-trips every int32/int64 including the extremes (checked against kafka-python's encoder).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.record.util import encode_varint as kafka_python_encode_varint
from records_helper import scanned

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format.batch import (
    Record,
    TimestampType,
    build_batch,
    decode_records,
    iter_entries,
    parse_header,
    verify_batch,
)
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import find_corrupt_batch, scan_batches, scan_records
from kafkalog.format.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
MAX_INT = INT32[1]
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies ---------------------------------------------------------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=24), st.binary(min_size=50, max_size=400).map(lambda b: b[:8] * 40))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)
timestamps = st.one_of(
    st.just(-1),
    st.integers(1_600_000_000_000, 1_600_000_100_000),  # realistic, small deltas
    st.integers(0, 2**62),  # large deltas, both signs
    st.just(INT64[1]),
)


@dataclass(frozen=True)
class Spec:
    """Everything one ``build_batch`` call gets, and what reading it must give back."""

    records: list[Record]
    kwargs: dict[str, Any]

    @property
    def batch(self) -> bytes:
        return build_batch(self.records, **self.kwargs)

    def expected(self) -> list[Record]:
        kw = self.kwargs
        base = kw["base_offset"]
        seq = kw["base_sequence"]
        log_append = kw["timestamp_type"] is TimestampType.LOG_APPEND_TIME
        return [Record(r.offset, kw["log_append_time"] if log_append else r.timestamp, r.key, r.value,
                       r.headers, -1 if seq < 0 else (seq + r.offset - base) % 2**31)
                for r in self.records]


@st.composite
def batch_specs(draw: st.DrawFn, first_offset: int | None = None) -> Spec:
    n = draw(st.integers(1, 12))
    start = draw(st.integers(0, 2**62)) if first_offset is None else first_offset
    lead = draw(st.integers(0, 3))  # the batch's base offset may sit below its first record (cleaned)
    gaps = draw(st.lists(st.one_of(st.integers(1, 3), st.integers(1, 2**20)), min_size=n - 1, max_size=n - 1))
    offsets = [start + lead]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    records = [Record(o, draw(timestamps), draw(blobs), draw(blobs), tuple(draw(headers))) for o in offsets]
    horizon = draw(st.one_of(st.none(), st.integers(0, 2**62)))
    producer = draw(st.one_of(
        st.just((-1, -1, -1, False)),
        st.tuples(st.integers(0, INT64[1]), st.integers(0, 32767),
                  st.one_of(st.integers(0, MAX_INT), st.integers(MAX_INT - 20, MAX_INT)), st.booleans()),
    ))
    log_append = draw(st.booleans())
    kwargs = {
        "base_offset": start,
        "last_offset": offsets[-1] + draw(st.integers(0, 4)),
        "compression_type": draw(st.sampled_from(list(CompressionType))),
        "timestamp_type": TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        "log_append_time": draw(st.integers(0, 2**62)) if log_append else None,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "base_sequence": producer[2],
        "is_transactional": producer[3],
        "partition_leader_epoch": draw(st.one_of(st.just(-1), st.integers(0, MAX_INT))),
        "delete_horizon_ms": horizon,
    }
    return Spec(records, kwargs)


@st.composite
def segments(draw: st.DrawFn) -> list[Spec]:
    """Batches as a log segment holds them: increasing offsets, arbitrary codecs and producers."""
    specs, offset = [], draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 5))):
        spec = draw(batch_specs(first_offset=offset))
        specs.append(spec)
        offset = spec.kwargs["last_offset"] + 1 + draw(st.integers(0, 100))
    return specs


# --- helpers ---------------------------------------------------------------------------------------------


def as_buffer(buf: bytes, kind: str) -> Any:
    return {"bytes": buf, "bytearray": bytearray(buf), "memoryview": memoryview(buf),
            "ndarray": np.frombuffer(buf, dtype=np.uint8)}[kind]


# --- round trip and bulk == per batch -----------------------------------------------------------------------


@PROPERTY
@given(batch_specs())
def test_build_then_decode_round_trips(spec: Spec) -> None:
    batch = spec.batch
    header = verify_batch(batch)
    kw = spec.kwargs
    assert header.base_offset == kw["base_offset"]
    assert header.last_offset == kw["last_offset"]
    assert header.records_count == len(spec.records)
    assert header.compression is kw["compression_type"]
    assert header.timestamp_type is kw["timestamp_type"]
    assert header.partition_leader_epoch == kw["partition_leader_epoch"]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        kw["producer_id"], kw["producer_epoch"], kw["base_sequence"])
    assert header.is_transactional is kw["is_transactional"] and not header.is_control
    assert header.delete_horizon_ms == kw["delete_horizon_ms"]
    assert header.base_timestamp == (spec.records[0].timestamp if kw["delete_horizon_ms"] is None
                                     else kw["delete_horizon_ms"])
    assert header.max_timestamp == (kw["log_append_time"] if kw["log_append_time"] is not None
                                    else max(r.timestamp for r in spec.records))
    assert decode_records(batch) == spec.expected()
    assert scanned(batch) == spec.expected()


@PROPERTY
@given(segments(), st.sampled_from(["bytes", "bytearray", "memoryview", "ndarray"]))
def test_scan_equals_per_batch_decode(specs: list[Spec], kind: str) -> None:
    batches = [spec.batch for spec in specs]
    raw = b"".join(batches)
    buf = as_buffer(raw, kind)
    cols = scan_batches(buf)
    assert cols.valid_end == len(raw)
    assert find_corrupt_batch(buf, cols) is None
    position = 0
    for i, batch in enumerate(batches):
        h = parse_header(batch)
        row = {f: int(getattr(cols, f)[i]) for f in (
            "position", "size", "base_offset", "last_offset_delta", "magic", "attributes", "crc",
            "records_count", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
            "base_sequence", "partition_leader_epoch")}
        assert row == {
            "position": position, "size": len(batch), "base_offset": h.base_offset,
            "last_offset_delta": h.last_offset_delta, "magic": 2, "attributes": h.attributes, "crc": h.crc,
            "records_count": h.records_count, "base_timestamp": h.base_timestamp,
            "max_timestamp": h.max_timestamp, "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
            "partition_leader_epoch": h.partition_leader_epoch,
        }
        position += len(batch)
    per_batch = [r for batch in batches for r in decode_records(batch)]
    assert per_batch == [r for spec in specs for r in spec.expected()]
    assert scanned(buf) == per_batch
    records = scan_records(buf, cols)
    assert records.batch_index.tolist() == [i for i, s in enumerate(specs) for _ in s.records]


# --- framing: torn tails and garbage lengths ----------------------------------------------------------------


@PROPERTY
@given(segments(), st.data())
def test_truncated_final_batch_is_ignored(specs: list[Spec], data: st.DataObject) -> None:
    batches = [spec.batch for spec in specs]
    raw = b"".join(batches)
    last_start = len(raw) - len(batches[-1])
    cut = data.draw(st.integers(last_start, len(raw) - 1), label="cut")
    torn = raw[:cut]
    entries = list(iter_entries(torn))
    assert [e.position for e in entries] == [sum(map(len, batches[:i])) for i in range(len(batches) - 1)]
    cols = scan_batches(torn)
    assert len(cols) == len(batches) - 1
    assert cols.valid_end == last_start
    assert scanned(torn) == [r for batch in batches[:-1] for r in decode_records(batch)]


@PROPERTY
@given(segments(), st.binary(max_size=17))
def test_short_tail_fragment_is_ignored(specs: list[Spec], tail: bytes) -> None:
    raw = b"".join(spec.batch for spec in specs)
    entries = list(iter_entries(raw + tail))
    assert [e.size for e in entries] == [len(spec.batch) for spec in specs]
    assert scan_batches(raw + tail).valid_end == len(raw)


@PROPERTY
@given(segments(), st.integers(INT32[0], 13), st.integers(INT64[0], INT64[1]), st.binary(min_size=6, max_size=40))
def test_length_below_14_is_corrupt(specs: list[Spec], length: int, offset: int, rest: bytes) -> None:
    raw = b"".join(spec.batch for spec in specs)
    buf = raw + struct.pack(">qi", offset, length) + rest
    with pytest.raises(CorruptRecordError, match=f"record size {length} at byte {len(raw)}"):
        list(iter_entries(buf))
    with pytest.raises(CorruptRecordError, match=f"record size {length} at byte {len(raw)}"):
        scan_batches(buf)


def test_zero_filled_tail() -> None:
    # A preallocated, zero-filled tail: 17 zero bytes are a torn fragment, 18 are a corrupt entry.
    raw = build_batch([Record(0, 5, b"k", b"v")])
    assert scan_batches(raw + bytes(17)).valid_end == len(raw)
    with pytest.raises(CorruptRecordError, match="record size 0"):
        scan_batches(raw + bytes(18))
    with pytest.raises(CorruptRecordError, match="record size 0"):
        list(iter_entries(raw + bytes(18)))


# --- varints ------------------------------------------------------------------------------------------------


def _kafka_python_bytes(value: int) -> bytes:
    out = bytearray()
    kafka_python_encode_varint(value, out.append)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.integers(*INT32), st.binary(max_size=3), st.binary(max_size=3))
@example(INT32[0], b"", b"")
@example(INT32[1], b"", b"")
@example(0, b"", b"")
@example(-1, b"", b"")
def test_varint_round_trip(value: int, before: bytes, after: bytes) -> None:
    out = bytearray()
    encode_varint(value, out)
    assert bytes(out) == _kafka_python_bytes(value)  # zig-zag 32 == zig-zag 64 inside int32
    assert len(out) == size_of_varint(value) <= 5
    buf = before + bytes(out) + after
    assert decode_varint(buf, len(before), len(buf)) == (value, len(before) + len(out))
    assert decode_varlong(buf, len(before), len(buf)) == (value, len(before) + len(out))


@settings(max_examples=300, deadline=None)
@given(st.integers(*INT64))
@example(INT64[0])
@example(INT64[1])
@example(INT32[0] - 1)
@example(INT32[1] + 1)
def test_varlong_round_trip(value: int) -> None:
    out = bytearray()
    encode_varlong(value, out)
    assert bytes(out) == _kafka_python_bytes(value)
    assert len(out) <= 10
    assert decode_varlong(bytes(out), 0, len(out)) == (value, len(out))


def test_varint_extreme_encodings() -> None:
    cases = {INT32[0]: "ffffffff0f", INT32[1]: "feffffff0f", -1: "01", 0: "00", 1: "02", -64: "7f", 64: "8001"}
    for value, hex_ in cases.items():
        out = bytearray()
        encode_varint(value, out)
        assert out.hex() == hex_
    out = bytearray()
    encode_varlong(INT64[0], out)
    assert out.hex() == "ff" * 9 + "01"


@pytest.mark.parametrize("value", [INT32[0] - 1, INT32[1] + 1, 2**40])
def test_varint_out_of_range_rejected(value: int) -> None:
    with pytest.raises(InvalidRecordError, match="does not fit in int32"):
        encode_varint(value, bytearray())


@pytest.mark.parametrize("value", [INT64[0] - 1, INT64[1] + 1])
def test_varlong_out_of_range_rejected(value: int) -> None:
    with pytest.raises(InvalidRecordError, match="does not fit in int64"):
        encode_varlong(value, bytearray())


def test_varint_too_long_or_truncated() -> None:
    with pytest.raises(InvalidRecordError, match="longer than 5 bytes"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0, 6)
    with pytest.raises(InvalidRecordError, match="longer than 10 bytes"):
        decode_varlong(b"\x80" * 10 + b"\x00", 0, 11)
    with pytest.raises(InvalidRecordError, match="premature EOF"):
        decode_varint(b"\x80\x80", 0, 2)
    with pytest.raises(InvalidRecordError, match="premature EOF"):
        decode_varint(b"\x80\x80\x00", 0, 2)  # the end bound counts, not the buffer length


# --- regressions: bugs found by these tests, now fixed ------------------------------------------------


def test_overlong_final_byte_truncates_like_kafka() -> None:
    # ByteUtils.readUnsignedVarint: `result |= tmp << 28` in a Java int keeps 4 bits of the 5th byte;
    # readUnsignedVarlong: `value |= b << 63` keeps 1 bit of the 10th byte.
    assert decode_varint(b"\xff\xff\xff\xff\x7f", 0, 5) == (INT32[0], 5)
    assert decode_varint(b"\x80\x80\x80\x80\x10", 0, 5) == (0, 5)
    assert decode_varlong(b"\xff" * 9 + b"\x7f", 0, 10) == (INT64[0], 10)


def test_overlong_varlong_decodes_the_same_on_both_paths() -> None:
    # Record: attributes 0, timestampDelta ff*9 7f (Kafka: Long.MIN_VALUE), offsetDelta 0, null key,
    # null value, no headers.
    body = b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"
    section = bytes([len(body) * 2]) + body
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(section), -1, 2, 0, 0, 0, 1000, 1000, -1, -1, -1, 1)
    buf = bytearray(header + section)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    batch = bytes(buf)
    # Java: 1000 + Long.MIN_VALUE; the numba kernel already gives this.
    assert int(scan_records(batch, scan_batches(batch)).timestamp[0]) == 1000 + INT64[0]
    assert decode_records(batch)[0].timestamp == 1000 + INT64[0]


def _scan_fields(view: np.ndarray) -> Any:
    try:
        cols = scan_batches(view)
    except CorruptRecordError:
        return "corrupt"
    return [getattr(cols, f).tolist() for f in ("records_count", "base_timestamp", "max_timestamp",
                                                 "producer_id", "producer_epoch", "base_sequence", "crc",
                                                 "last_offset_delta", "attributes")]


def test_short_v2_entry_is_not_read_past_its_end() -> None:
    # A 26-byte entry (length 14, the smallest the framing accepts) with magic 2, at the end of the
    # buffer. Whatever scan_batches reports must not depend on memory beyond the buffer.
    entry = struct.pack(">qiib", 5, 14, 0, 2) + bytes(9)
    seen = []
    for fill in (0x00, 0x7F):
        backing = np.full(4096, fill, dtype=np.uint8)
        backing[:26] = np.frombuffer(entry, dtype=np.uint8)
        seen.append(_scan_fields(backing[:26]))
    assert seen[0] == seen[1]


def test_short_v2_entry_fails_like_the_per_record_path() -> None:
    entry = struct.pack(">qiib", 5, 14, 0, 2) + bytes(9)
    with pytest.raises(CorruptRecordError, match="61-byte"):
        parse_header(entry)
    with pytest.raises(CorruptRecordError, match="61-byte header"):
        scan_records(entry, scan_batches(entry))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=0, max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=12))
def test_batch_crcs_equal_the_c_library_on_every_span(data: bytes, cuts: list[int]) -> None:
    """The compiled CRC (the CPU's crc32 instruction, where there is one) and the C library's agree
    on spans of every length and alignment, including empty ones."""
    from kafkalog.format import scan

    points = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    # A "batch" at position p is checksummed from p + 21 (its attributes): prefix 21 bytes to data.
    positions = np.array(points[:-1], dtype=np.int64)
    ends = np.array(points[1:], dtype=np.int64) + 21
    buf = np.frombuffer(b"\0" * 21 + data, dtype=np.uint8)
    want = [crc32c.crc32c(data[s:e]) for s, e in zip(points[:-1], points[1:], strict=True)]
    assert scan.batch_crcs(buf, positions, ends).tolist() == want
    fallback = scan.HARDWARE_CRC32C
    try:
        scan.HARDWARE_CRC32C = False
        assert scan.batch_crcs(buf, positions, ends).tolist() == want
    finally:
        scan.HARDWARE_CRC32C = fallback


def test_batch_crcs_across_the_interleaved_rounds() -> None:
    """The compiled CRC runs three interleaved streams over rounds of three 256-byte blocks and
    joins them; spans ending just before, at and after each round boundary, at odd alignments, and
    long spans (a batch of ~11 KB, one of 100 KB) give the C library's CRC."""
    from kafkalog.format import scan

    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 300_000, dtype=np.uint8)
    lengths = [n + d for n in (768, 1536, 2304, 3072) for d in (-9, -8, -1, 0, 1, 7, 8)] + [11_000, 100_000]
    starts = np.array([21 + (3 * i) % 61 for i in range(len(lengths))], dtype=np.int64)
    ends = starts + np.array(lengths, dtype=np.int64)
    want = [crc32c.crc32c(buf[s:e].tobytes()) for s, e in zip(starts, ends, strict=True)]
    assert scan.batch_crcs(buf, starts - 21, ends).tolist() == want
