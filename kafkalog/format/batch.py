"""RecordBatch v2 (spec §1.2–1.7): the 61-byte header, records, control batches; encode and decode.

Byte layout of the header (all big-endian), field offsets derived from the struct below::

    0  BaseOffset int64            35 MaxTimestamp int64
    8  Length int32                43 ProducerId int64
    12 PartitionLeaderEpoch int32  51 ProducerEpoch int16
    16 Magic int8                  53 BaseSequence int32
    17 CRC uint32 (CRC-32C of [21, end))
    21 Attributes int16            57 RecordsCount int32
    23 LastOffsetDelta int32       61 Records (possibly compressed)
    27 BaseTimestamp int64 (the delete horizon when attribute bit 6 is set)

This module is the readable, per-record path used for produce, consume and tests. Bulk reads of
whole segments go through :mod:`kafkalog.format.scan`, which yields the same values as columns.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format import compression
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32c
from kafkalog.format.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
LOG_OVERHEAD = 12  # offset int64 + length int32, common to every magic
HEADER_SIZE_UP_TO_MAGIC = 17
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MIN_ENTRY_LENGTH = 14  # LegacyRecord.RECORD_OVERHEAD_V0: smaller length fields are corrupt
MAX_INT = (1 << 31) - 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_ENVELOPE = struct.Struct(">qib")  # offset, length, (magic at byte 16 is read separately)
_OFFSET_LENGTH = struct.Struct(">qi")


class TimestampType(enum.Enum):
    NO_TIMESTAMP_TYPE = "NoTimestampType"
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def wrap_int64(value: int) -> int:
    """Java long arithmetic: timestamps and deltas wrap at 64 bits, as the reader and writer do."""
    return ((value + (1 << 63)) % (1 << 64)) - (1 << 63)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic, which wraps at MAX_INT."""
    if sequence > MAX_INT - increment:
        return increment - (MAX_INT - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded 61-byte header of a v2 batch; ``position`` is where it starts in its file."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size_in_bytes(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the v2 header at ``pos`` (no CRC check: see :func:`verify_batch`)."""
    if len(buf) - pos < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos} is {len(buf) - pos} bytes, smaller than the 61-byte v2 header"
        )
    (base_offset, length, leader_epoch, magic, crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, records_count) = HEADER.unpack_from(buf, pos)
    # Only the low byte of the attributes is meaningful (the reader casts to byte).
    return BatchHeader(base_offset, length, leader_epoch, magic, crc, attributes & 0xFF, last_offset_delta,
                       base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                       records_count, position=pos)


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def verify_batch(batch: bytes | bytearray | memoryview, where: str = "") -> BatchHeader:
    """Parse a whole v2 batch's header and check size and CRC (``ensureValid``)."""
    header = parse_header(batch)
    if header.size_in_bytes != len(batch):
        raise CorruptRecordError(
            f"{where}batch at offset {header.base_offset}: length field says "
            f"{header.size_in_bytes} bytes, {len(batch)} present"
        )
    computed = compute_crc(batch)
    if computed != header.crc:
        raise CorruptRecordError(
            f"{where}batch at offset {header.base_offset}: record is corrupt "
            f"(stored crc = {header.crc}, computed crc = {computed})"
        )
    return header


@dataclass(frozen=True, slots=True)
class Record:
    """One record, as written or as read (``offset``/``sequence`` are absolute on read)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    sequence: int = NO_SEQUENCE


def encode_record(
    out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
    value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    """Append one v2 record: length, attributes 0, timestamp delta, offset delta, key, value, headers."""
    body = bytearray(b"\x00")
    encode_varlong(timestamp_delta, body)
    encode_varint(offset_delta, body)
    for blob in (key, value):
        if blob is None:
            body.append(0x01)  # varint(-1)
        else:
            encode_varint(len(blob), body)
            body += blob
    encode_varint(len(headers), body)
    for header_key, header_value in headers:
        raw_key = header_key.encode("utf-8")
        encode_varint(len(raw_key), body)
        body += raw_key
        if header_value is None:
            body.append(0x01)
        else:
            encode_varint(len(header_value), body)
            body += header_value
    encode_varint(len(body), out)
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    compression_type: CompressionType | int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode records (absolute offsets, strictly increasing) as one v2 batch (MemoryRecordsBuilder).

    ``last_offset`` lets the cleaner keep a batch's original last offset when trailing records were
    removed; by default it is the last record's offset.
    """
    if not records:
        raise InvalidRecordError("a batch needs at least one record (an empty builder writes no bytes)")
    if timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
        raise InvalidRecordError("NoTimestampType is illegal for magic 2")
    if is_transactional and producer_id < 0:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if producer_id >= 0 and producer_epoch == NO_PRODUCER_EPOCH:
        raise InvalidRecordError(f"producer id {producer_id} needs a producer epoch")
    if producer_id >= 0 and not is_control and base_sequence < 0:
        raise InvalidRecordError(f"producer id {producer_id} needs a base sequence")
    base = records[0].offset if base_offset is None else base_offset
    last = records[-1].offset if last_offset is None else last_offset
    if last < records[-1].offset:
        raise InvalidRecordError(f"last offset {last} is below the last record's offset")
    if last - base > MAX_INT:
        raise InvalidRecordError(f"offset delta {last - base} does not fit in int32")
    first_timestamp = records[0].timestamp
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = bytearray()
    previous = base - 1
    max_timestamp = NO_TIMESTAMP
    for record in records:
        if record.offset <= previous:
            raise InvalidRecordError(
                f"record offsets must strictly increase in a batch: {record.offset} after {previous}"
            )
        if record.timestamp < 0 and record.timestamp != NO_TIMESTAMP:
            raise InvalidRecordError(f"invalid negative timestamp {record.timestamp} at offset {record.offset}")
        previous = record.offset
        max_timestamp = max(max_timestamp, record.timestamp)
        encode_record(body, record.offset - base, wrap_int64(record.timestamp - base_timestamp),
                      record.key, record.value, record.headers)
    codec = CompressionType(compression_type)
    if codec is not CompressionType.NONE:
        body = bytearray(compression.compress(codec, bytes(body), compression_level))
    attributes = codec & COMPRESSION_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise InvalidRecordError("a LogAppendTime batch needs the append time")
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = log_append_time
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return assemble_batch(base, partition_leader_epoch, attributes, last - base, base_timestamp,
                     max_timestamp, producer_id, producer_epoch, base_sequence, len(records), body)


def assemble_batch(
    base_offset: int, leader_epoch: int, attributes: int, last_offset_delta: int, base_timestamp: int,
    max_timestamp: int, producer_id: int, producer_epoch: int, base_sequence: int, count: int,
    body: bytes | bytearray,
) -> bytes:
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(body))
    HEADER.pack_into(buf, 0, base_offset, len(buf) - LOG_OVERHEAD, leader_epoch, 2, 0, attributes,
                     last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                     base_sequence, count)
    buf[RECORD_BATCH_OVERHEAD:] = body
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def empty_header_batch(header: BatchHeader) -> bytes:
    """``writeEmptyHeader``: the 61-byte batch the cleaner keeps when it removed every record."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return assemble_batch(header.base_offset, header.partition_leader_epoch, attributes,
                     header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp, header.producer_id,
                     header.producer_epoch, header.base_sequence, 0, b"")


def end_txn_marker_batch(
    control_type: ControlType, *, offset: int, timestamp: int, producer_id: int, producer_epoch: int,
    coordinator_epoch: int, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT/ABORT marker as the broker writes it (78 bytes, spec §1.7)."""
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise InvalidRecordError(f"an end-transaction marker is COMMIT or ABORT, not {control_type.name}")
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([Record(offset, timestamp, key, value)], producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)


def parse_control_type(key: bytes | None) -> int:
    """The control record type (bytes 2–3 of the key, whatever the version)."""
    if key is None or len(key) < 4:
        raise InvalidRecordError(f"control record key needs 4 bytes, got {0 if key is None else len(key)}")
    version, kind = struct.unpack_from(">hh", key)
    if version < 0:
        raise InvalidRecordError(f"invalid negative control record key version {version}")
    return int(kind)


def parse_end_txn_marker(value: bytes | None) -> int:
    """The coordinator epoch of an EndTransactionMarker value."""
    if value is None or len(value) < 6:
        raise InvalidRecordError("end transaction marker value needs 6 bytes")
    version, coordinator_epoch = struct.unpack_from(">hi", value)
    if version < 0:
        raise InvalidRecordError(f"invalid negative end transaction marker version {version}")
    return int(coordinator_epoch)


def batch_payload(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bytes | memoryview:
    """The records section of a batch, decompressed."""
    section = memoryview(batch)[RECORD_BATCH_OVERHEAD:header.size_in_bytes]
    if header.compression is CompressionType.NONE:
        return section
    return compression.decompress(header.compression, section)


def decode_records(batch: bytes | bytearray | memoryview, header: BatchHeader | None = None) -> list[Record]:
    """Decode every record of one v2 batch with all of Kafka's read-time validation (spec §1.5)."""
    if header is None:
        header = parse_header(batch)
    if header.records_count < 0:
        raise InvalidRecordError(f"batch at offset {header.base_offset} has a negative record count")
    if header.records_count == 0:
        return []  # Kafka's iterator never looks inside an empty batch
    data = batch_payload(batch, header)
    pos, end = 0, len(data)
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    records: list[Record] = []
    for _ in range(header.records_count):
        record, pos = _decode_record(data, pos, end, header, log_append)
        records.append(record)
    if pos != end:
        raise InvalidRecordError(
            f"batch at offset {header.base_offset}: incorrect declared batch size, "
            f"{end - pos} bytes left after {header.records_count} records"
        )
    return records


def _decode_record(
    data: bytes | memoryview, pos: int, end: int, header: BatchHeader, log_append: bool,
) -> tuple[Record, int]:
    body_len, pos = decode_varint(data, pos, end)
    body_end = pos + body_len
    if body_len < 0 or body_end > end:
        raise InvalidRecordError(f"batch at offset {header.base_offset}: record body of {body_len} "
                                 f"bytes at byte {pos} runs past the end ({end})")
    pos += 1  # attributes, unused
    timestamp_delta, pos = decode_varlong(data, pos, body_end)
    offset_delta, pos = decode_varint(data, pos, body_end)
    key, pos = _read_blob(data, pos, body_end)
    value, pos = _read_blob(data, pos, body_end)
    header_count, pos = decode_varint(data, pos, body_end)
    if header_count < 0 or header_count > body_end - pos:
        raise InvalidRecordError(f"invalid header count {header_count} at byte {pos}")
    headers = []
    for _ in range(header_count):
        raw_key, pos = _read_blob(data, pos, body_end)
        if raw_key is None:
            raise InvalidRecordError("invalid null header key")
        header_value, pos = _read_blob(data, pos, body_end)
        headers.append((raw_key.decode("utf-8", "replace"), header_value))
    if pos != body_end:
        raise InvalidRecordError(f"invalid record size: expected to read {body_len} bytes, "
                                 f"read {body_len - (body_end - pos)}")
    timestamp = header.max_timestamp if log_append else wrap_int64(header.base_timestamp + timestamp_delta)
    sequence = (increment_sequence(header.base_sequence, offset_delta)
                if header.base_sequence >= 0 else NO_SEQUENCE)
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers), sequence), pos


def _read_blob(data: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise InvalidRecordError(f"premature EOF: {length} bytes at byte {pos} run past {end}")
    return bytes(data[pos:pos + length]), pos + length


@dataclass(frozen=True, slots=True)
class Entry:
    """One framed entry of a ``.log`` file: where it is, how big, which magic."""

    position: int
    size: int
    offset: int  # v2: base offset; v0/v1: the (wrapper) record's offset
    magic: int


def iter_entries(buf: bytes | memoryview, start: int = 0, end: int | None = None,
                 where: str = "") -> Iterable[Entry]:
    """Walk the entries of a ``.log`` buffer like ``FileLogInputStream``.

    A trailing fragment of at most 17 bytes and an incomplete last entry end the walk silently (a
    torn write); a length field below 14 raises, as it can only be garbage or a zero-filled tail.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        offset, length = _OFFSET_LENGTH.unpack_from(buf, pos)
        if length < MIN_ENTRY_LENGTH:
            raise CorruptRecordError(
                f"{where}record size {length} at byte {pos} is smaller than the minimum record "
                f"overhead ({MIN_ENTRY_LENGTH})"
            )
        if pos > end - LOG_OVERHEAD - length:
            return
        magic = buf[pos + 16]
        yield Entry(pos, LOG_OVERHEAD + length, offset, magic if magic < 128 else magic - 256)
        pos += LOG_OVERHEAD + length
