"""Zig-zag varints as Kafka writes them (spec §1.4): protobuf LEB128 of the zig-zag value."""

from __future__ import annotations

from kafkalog.errors import InvalidRecordError

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def encode_varint(value: int, out: bytearray) -> None:
    """Append a signed int32 as a zig-zag varint."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise InvalidRecordError(f"varint value {value} does not fit in int32")
    _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF, out)


def encode_varlong(value: int, out: bytearray) -> None:
    """Append a signed int64 as a zig-zag varlong."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidRecordError(f"varlong value {value} does not fit in int64")
    _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def _encode_unsigned(u: int, out: bytearray) -> None:
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def size_of_varint(value: int) -> int:
    u = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


def decode_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Read a zig-zag varint (int32) at ``pos``; return ``(value, next_pos)``."""
    return _decode(buf, pos, end, 5)


def decode_varlong(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Read a zig-zag varlong (int64) at ``pos``; return ``(value, next_pos)``."""
    return _decode(buf, pos, end, 10)


def _decode(buf: bytes | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    # Kafka's ByteUtils shifts into a Java int/long, so bits of the last byte beyond 32/64 vanish.
    mask = (1 << (32 if max_bytes == 5 else 64)) - 1
    u = 0
    shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise InvalidRecordError(f"premature EOF in a varint at byte {pos}")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            u &= mask
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
        if i == max_bytes - 1:
            break
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes ending at byte {pos}")
