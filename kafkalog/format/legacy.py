"""Legacy messages, magic 0 and 1 (spec §1.8): read, and rebuilt by the cleaner.

Entry layout after the 12-byte offset/length prefix::

    12 CRC uint32 (CRC-32 IEEE of [16, end))   17 attributes int8 (bits 0-2 codec, bit 3 LogAppendTime)
    16 magic int8                              18 timestamp int64 (v1 only)
    then key length int32 (-1 = null) + key, value length int32 (-1 = null) + value

A compressed entry is a "wrapper" whose value holds compressed inner entries. v1 wrappers carry
relative inner offsets and the absolute offset of the last inner record; v0 inner offsets are absolute.

kafkalog appends v2 only; the one legacy writer is :func:`build_wrapper`, with which the cleaner
rebuilds a wrapper that keeps only some of its records in the wrapper's own magic and codec, as
Kafka's ``MemoryRecords.filterTo`` does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format import compression
from kafkalog.format.batch import MAX_INT, NO_TIMESTAMP, TIMESTAMP_TYPE_MASK, Record, TimestampType, iter_entries
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32

_PREFIX = struct.Struct(">qiIbb")  # offset, length, crc, magic, attributes
_OFFSET_SIZE = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
_KEY_LENGTH_AT = {0: 18, 1: 26}  # where the key length field is, from the entry's start


def timestamp_type(magic: int, attributes: int) -> TimestampType:
    if magic == 0:
        return TimestampType.NO_TIMESTAMP_TYPE
    if attributes & TIMESTAMP_TYPE_MASK:
        return TimestampType.LOG_APPEND_TIME
    return TimestampType.CREATE_TIME


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One legacy entry (a plain message or a compressed wrapper)."""

    offset: int
    size_in_bytes: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int = 0

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> TimestampType:
        return timestamp_type(self.magic, self.attributes)

    @property
    def key_position(self) -> int:
        """Where the key's bytes start in the buffer the entry was parsed from."""
        return self.position + _KEY_LENGTH_AT[self.magic] + 4

    @property
    def value_position(self) -> int:
        """Where the value's bytes start in the buffer the entry was parsed from."""
        return self.key_position + (0 if self.key is None else len(self.key)) + 4


def parse_entry(buf: bytes | memoryview, pos: int = 0, end: int | None = None,
                where: str = "") -> LegacyEntry:
    """Decode a legacy entry at ``pos`` (no CRC check; see :func:`computed_crc`)."""
    end = len(buf) if end is None else end
    offset, length, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
    entry_end = pos + 12 + length
    if magic not in (0, 1):
        raise CorruptRecordError(f"{where}invalid magic {magic} for a legacy entry at byte {pos}")
    overhead = RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1
    if length < overhead or entry_end > end:
        raise CorruptRecordError(f"{where}legacy entry at byte {pos} has invalid size {length}")
    cursor = pos + 18
    timestamp = -1
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(buf, cursor)
        cursor += 8
    key, cursor = _read_bytes(buf, cursor, entry_end, where)
    value, cursor = _read_bytes(buf, cursor, entry_end, where)
    if cursor != entry_end:
        raise CorruptRecordError(f"{where}legacy entry at byte {pos}: {entry_end - cursor} unexpected bytes")
    return LegacyEntry(offset, 12 + length, crc, magic, attributes & 0xFF, timestamp, key, value, pos)


def computed_crc(buf: bytes | memoryview, entry: LegacyEntry) -> int:
    start = entry.position + 16
    return crc32(memoryview(buf)[start:entry.position + entry.size_in_bytes])


def is_valid(buf: bytes | memoryview, entry: LegacyEntry) -> bool:
    return computed_crc(buf, entry) == entry.crc


def _read_bytes(buf: bytes | memoryview, pos: int, end: int, where: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"{where}legacy record truncated at byte {pos}")
    (size,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > end:
        raise CorruptRecordError(f"{where}legacy record field of {size} bytes at byte {pos} runs past {end}")
    return bytes(buf[pos:pos + size]), pos + size


def deep_records(buf: bytes | memoryview, entry: LegacyEntry,
                 where: str = "") -> tuple[bytes | memoryview, list[tuple[LegacyEntry, Record]]]:
    """The records an entry stands for, as Kafka's deep iterator yields them, and the buffer their
    messages were parsed from (each message's ``position`` is in it): the entry itself in ``buf``, or
    a wrapper's inner entries in its decompressed value."""
    if entry.compression is CompressionType.NONE:
        return buf, [(entry, _as_record(entry, entry.offset, entry.timestamp))]
    if entry.compression is CompressionType.ZSTD:
        raise InvalidRecordError(f"{where}zstd is illegal for magic {entry.magic} at byte {entry.position}")
    if entry.value is None:
        raise InvalidRecordError(f"{where}compressed wrapper at byte {entry.position} has a null value")
    data = compression.decompress(entry.compression, entry.value, magic=entry.magic)
    # Trailing bytes after the last whole inner entry are ignored, as Kafka's deep iterator does.
    inner = [parse_entry(data, e.position, where=where) for e in iter_entries(data, where=where)]
    if not inner:
        raise InvalidRecordError(f"{where}compressed wrapper at byte {entry.position} holds no records")
    if any(message.compression is not CompressionType.NONE for message in inner):
        # A nested wrapper would be read (and rebuilt by the cleaner) as one record of compressed bytes.
        raise InvalidRecordError(f"{where}compressed wrapper at byte {entry.position}: inner messages must "
                                 "not be compressed")
    # v1 inner offsets are relative to the wrapper's (last) offset; a wrapper offset of 0 (written by
    # librdkafka) means the inner offsets are used as they are, as Kafka does.
    shift = 0
    if entry.magic == 1 and entry.offset != 0:
        if entry.offset < inner[-1].offset:
            raise InvalidRecordError(
                f"{where}compressed v1 wrapper at byte {entry.position}: its offset {entry.offset} is less "
                f"than the last inner message offset {inner[-1].offset} and it is not zero")
        shift = entry.offset - inner[-1].offset
    log_append = entry.timestamp_type is TimestampType.LOG_APPEND_TIME
    out = []
    for message in inner:
        timestamp = entry.timestamp if log_append and message.magic >= 1 else message.timestamp
        out.append((message, _as_record(message, message.offset + shift, timestamp)))
    return data, out


def inner_records(buf: bytes | memoryview, entry: LegacyEntry, where: str = "") -> list[tuple[LegacyEntry, Record]]:
    """The records an entry stands for: itself, or a wrapper's decompressed inner entries."""
    return deep_records(buf, entry, where)[1]


def _as_record(entry: LegacyEntry, offset: int, timestamp: int) -> Record:
    return Record(offset, timestamp, entry.key, entry.value)


def encode_message(magic: int, timestamp: int, key: bytes | None, value: bytes | None, attributes: int = 0) -> bytes:
    """One message from its CRC on, without the offset/size prefix (``LegacyRecord.write``)."""
    if magic not in (0, 1):
        raise InvalidRecordError(f"a legacy message has magic 0 or 1, not {magic}")
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        if timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise InvalidRecordError(f"invalid message timestamp {timestamp}")
        body += _INT64.pack(timestamp)
    for blob in (key, value):
        if blob is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(blob))
            body += blob
    return struct.pack(">I", crc32(body)) + bytes(body)


def build_wrapper(magic: int, codec: CompressionType, ts_type: TimestampType, records: Sequence[Record], *,
                  log_append_time: int = NO_TIMESTAMP) -> bytes:
    """A compressed wrapper entry holding ``records`` (absolute offsets, strictly increasing), as
    Kafka's ``MemoryRecordsBuilder`` writes one for magic 0/1 with a base offset of the first record's:

    * inner offsets: absolute for v0, relative to the first record for v1 (so gaps stay gaps);
    * the wrapper's offset: the last record's; its key null; its value the inner entries compressed
      with ``codec`` at its default level (lz4 with magic 0's header checksum);
    * v1 timestamps: with LogAppendTime every inner record and the wrapper carry ``log_append_time``
      and the timestamp-type bit; with CreateTime each record keeps its own and the wrapper carries
      the largest (-1 when there is none). v0 has no timestamps.
    """
    if not records:
        raise InvalidRecordError("a wrapper needs at least one record (an empty builder writes no bytes)")
    if codec is CompressionType.NONE:
        raise InvalidRecordError("an uncompressed legacy message set has no wrapper")
    if magic == 1 and ts_type is TimestampType.NO_TIMESTAMP_TYPE:
        raise InvalidRecordError("magic 1 needs a timestamp type")
    log_append = magic == 1 and ts_type is TimestampType.LOG_APPEND_TIME
    type_bit = TIMESTAMP_TYPE_MASK if log_append else 0
    base = records[0].offset
    inner = bytearray()
    max_timestamp = NO_TIMESTAMP
    previous = base - 1
    for record in records:
        if record.offset <= previous:
            raise InvalidRecordError(f"record offsets must strictly increase: {record.offset} after {previous}")
        if record.offset - base > MAX_INT:
            raise InvalidRecordError(f"offset delta {record.offset - base} does not fit in int32")
        previous = record.offset
        timestamp = log_append_time if log_append else record.timestamp
        if magic == 1:
            max_timestamp = max(max_timestamp, timestamp)
        message = encode_message(magic, timestamp, record.key, record.value, type_bit)
        inner += _OFFSET_SIZE.pack(record.offset - base if magic == 1 else record.offset, len(message))
        inner += message
    value = compression.compress(codec, bytes(inner), magic=magic)
    wrapper = encode_message(magic, log_append_time if log_append else max_timestamp, None, value, codec | type_bit)
    return _OFFSET_SIZE.pack(records[-1].offset, len(wrapper)) + wrapper
