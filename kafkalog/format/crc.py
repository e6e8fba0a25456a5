"""Checksums: CRC-32C for v2 batches and snapshots, CRC-32 (IEEE) for legacy v0/v1 messages.

CRC-32C runs in C (the ``crc32c`` package, on the CPU's CRC instructions where there are some); a
pure-Python CRC would run a bytecode loop per byte and is never used.
"""

from __future__ import annotations

import zlib

from crc32c import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data`` as an unsigned 32-bit int."""
    return int(_crc32c(data, value))


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (IEEE, zlib) of ``data`` as an unsigned 32-bit int: the legacy message checksum."""
    return zlib.crc32(data) & 0xFFFFFFFF
