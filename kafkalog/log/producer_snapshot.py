"""Producer-state snapshot files (``<offset>.snapshot``, spec §7).

Layout (big-endian)::

    offset  size  field
    0       2     version              int16, always 1
    2       4     crc                  uint32 CRC-32C of bytes [6, end)
    6       4     entry count          int32
    10      46*N  entries:
                    +0   producer_id               int64
                    +8   producer_epoch            int16
                    +10  last_sequence             int32
                    +14  last_offset               int64, -1 if no batch is known
                    +22  offset_delta              int32, last offset minus first offset of that batch
                    +26  timestamp_ms              int64, max timestamp of that batch
                    +34  coordinator_epoch         int32
                    +38  current_txn_first_offset  int64, -1 if no transaction is open

Entries appear in whatever order the broker's hash map produced; we keep the order we read so a
snapshot re-encodes to identical bytes.

Crash story: Kafka writes snapshots in place and fsyncs later, so a crash can leave a torn file; the
CRC detects it and Kafka then deletes the snapshot and rebuilds state from the log. We write through
:func:`kafkalog.log.checkpoint.atomic_write_bytes`, so ours are never torn.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from kafkalog.errors import KafkaLogError
from kafkalog.log.checkpoint import StrPath, atomic_write_bytes

PRODUCER_SNAPSHOT_VERSION = 1

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # field order as in the module docstring
_CRC_START = 6  # the CRC covers the entry count and the entries, not the version or itself
assert _HEADER.size == 10 and _ENTRY.size == 46

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class ProducerSnapshotError(KafkaLogError):
    """A producer snapshot has the wrong version, size or CRC (Kafka's CorruptSnapshotException)."""


@dataclass(frozen=True)
class ProducerSnapshotEntry:
    """One producer's state as a snapshot stores it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp_ms: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """Serialize entries, in the given order, into snapshot-file bytes."""
    items = list(entries)
    body = bytearray(_HEADER.size + _ENTRY.size * len(items))
    for i, e in enumerate(items):
        try:
            _ENTRY.pack_into(body, _HEADER.size + _ENTRY.size * i, e.producer_id, e.producer_epoch,
                             e.last_sequence, e.last_offset, e.offset_delta, e.timestamp_ms,
                             e.coordinator_epoch, e.current_txn_first_offset)
        except struct.error as exc:
            raise ProducerSnapshotError(f"cannot encode producer {e.producer_id}: a field does not fit "
                                        f"its int16/int32/int64 slot ({exc})") from exc
    struct.pack_into(">i", body, _CRC_START, len(items))
    crc = crc32c.crc32c(bytes(body[_CRC_START:]))
    struct.pack_into(">hI", body, 0, PRODUCER_SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_producer_snapshot(data: bytes, source: str = "<bytes>") -> list[ProducerSnapshotEntry]:
    """Parse snapshot bytes; ``source`` names the file in error messages."""
    if len(data) < _HEADER.size:
        raise ProducerSnapshotError(f"{source}: {len(data)} bytes is shorter than the "
                                    f"{_HEADER.size}-byte snapshot header; delete it to rebuild from the log")
    version, stored_crc, count = _HEADER.unpack_from(data)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise ProducerSnapshotError(f"{source}: unknown snapshot version {version} at byte 0, "
                                    f"expected {PRODUCER_SNAPSHOT_VERSION}")
    computed_crc = crc32c.crc32c(data[_CRC_START:])
    if stored_crc != computed_crc:
        raise ProducerSnapshotError(f"{source}: snapshot is corrupt: stored CRC {stored_crc} at byte 2, "
                                    f"computed {computed_crc}; delete it to rebuild from the log")
    # Kafka ignores bytes after the last entry (they are still under the CRC); no Kafka writer makes
    # them, so we treat them as corruption rather than guess.
    if count < 0:
        raise ProducerSnapshotError(f"{source}: negative entry count {count} at byte 6")
    expected_size = _HEADER.size + _ENTRY.size * count
    if len(data) != expected_size:
        raise ProducerSnapshotError(f"{source}: entry count {count} at byte 6 needs {expected_size} "
                                    f"bytes, file has {len(data)}")
    return [ProducerSnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(data[_HEADER.size:])]


def read_producer_snapshot(path: StrPath) -> list[ProducerSnapshotEntry]:
    """Read and verify a ``.snapshot`` file."""
    p = Path(path)
    return decode_producer_snapshot(p.read_bytes(), str(p))


def write_producer_snapshot(path: StrPath, entries: Iterable[ProducerSnapshotEntry]) -> None:
    """Atomically write a ``.snapshot`` file."""
    atomic_write_bytes(path, encode_producer_snapshot(entries))


# ---------------------------------------------------------------------------------------------------
# kafka-dump-log output


def _wrap_int32(value: int) -> int:
    return (value - _INT32_MIN) % 2**32 + _INT32_MIN


def first_sequence(last_sequence: int, offset_delta: int) -> int:
    """The batch's first sequence, as Kafka's ``DefaultRecordBatch.decrementSequence`` computes it.

    Sequences wrap from Int.MaxValue to 0, so going back past 0 wraps to the top; the arithmetic is
    Java int arithmetic, overflow included.
    """
    if last_sequence < offset_delta:
        return _wrap_int32(_INT32_MAX - _wrap_int32(offset_delta - last_sequence) + 1)
    return _wrap_int32(last_sequence - offset_delta)


def _optional_long(value: int) -> str:
    # Java's OptionalLong.toString(); Kafka maps a negative stored offset to empty.
    return f"OptionalLong[{value}]" if value >= 0 else "OptionalLong.empty"


def format_snapshot_dump_line(entry: ProducerSnapshotEntry) -> str:
    """One line of ``kafka-dump-log --files <offset>.snapshot`` output."""
    line = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(entry.current_txn_first_offset)} "
            f"lastTimestamp: {entry.timestamp_ms} ")
    # Kafka has batch metadata only when last_offset >= 0; without it the line keeps its trailing space.
    if entry.last_offset >= 0:
        line += (f"firstSequence: {first_sequence(entry.last_sequence, entry.offset_delta)} "
                 f"lastSequence: {entry.last_sequence} lastOffset: {entry.last_offset} "
                 f"offsetDelta: {entry.offset_delta} timestamp: {entry.timestamp_ms}")
    return line


def format_snapshot_dump_lines(entries: Iterable[ProducerSnapshotEntry]) -> list[str]:
    """The ``kafka-dump-log`` lines for a snapshot's entries, without line terminators."""
    return [format_snapshot_dump_line(e) for e in entries]
