"""Legacy messages, magic 0 and 1 (spec §1.8): read-only.

Entry layout after the 12-byte offset/length prefix::

    12 CRC uint32 (CRC-32 IEEE of [16, end))   17 attributes int8 (bits 0-2 codec, bit 3 LogAppendTime)
    16 magic int8                              18 timestamp int64 (v1 only)
    then key length int32 (-1 = null) + key, value length int32 (-1 = null) + value

A compressed entry is a "wrapper" whose value holds compressed inner entries. v1 wrappers carry
relative inner offsets and the absolute offset of the last inner record; v0 inner offsets are absolute.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format import compression
from kafkalog.format.batch import TIMESTAMP_TYPE_MASK, Record, TimestampType, iter_entries
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32

_PREFIX = struct.Struct(">qiIbb")  # offset, length, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22


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
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


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


def inner_records(buf: bytes | memoryview, entry: LegacyEntry, where: str = "") -> list[tuple[LegacyEntry, Record]]:
    """The records an entry stands for: itself, or a wrapper's decompressed inner entries."""
    if entry.compression is CompressionType.NONE:
        return [(entry, _as_record(entry, entry.offset, entry.timestamp))]
    if entry.compression is CompressionType.ZSTD:
        raise InvalidRecordError(f"{where}zstd is illegal for magic {entry.magic} at byte {entry.position}")
    if entry.value is None:
        raise InvalidRecordError(f"{where}compressed wrapper at byte {entry.position} has a null value")
    data = compression.decompress(entry.compression, entry.value, magic=entry.magic)
    # Trailing bytes after the last whole inner entry are ignored, as Kafka's deep iterator does.
    inner = [parse_entry(data, e.position, where=where) for e in iter_entries(data, where=where)]
    if not inner:
        raise InvalidRecordError(f"{where}compressed wrapper at byte {entry.position} holds no records")
    # v1 inner offsets are relative to the wrapper's (last) offset; a wrapper offset of 0 (written by
    # librdkafka) means the inner offsets are used as they are, as Kafka does.
    shift = entry.offset - inner[-1].offset if entry.magic == 1 and entry.offset != 0 else 0
    log_append = entry.timestamp_type is TimestampType.LOG_APPEND_TIME
    out = []
    for message in inner:
        timestamp = entry.timestamp if log_append and message.magic >= 1 else message.timestamp
        out.append((message, _as_record(message, message.offset + shift, timestamp)))
    return out


def _as_record(entry: LegacyEntry, offset: int, timestamp: int) -> Record:
    return Record(offset, timestamp, entry.key, entry.value)
