"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Matching it means a key lands in the same partition here as it would through a Java producer.
Unkeyed records (Kafka spreads them with its sticky partitioner) go to partition 0 unless the
caller names a partition.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h >= (1 << 31) else h


def default_partition(key: bytes | None, partitions: int) -> int:
    if key is None:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions
