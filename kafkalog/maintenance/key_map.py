"""The cleaner's key map: exact key bytes → the latest offset of that key in the dirty range.

Kafka's ``SkimpyOffsetMap`` stores MD5 digests in a fixed 128 MiB table and stops a pass when it is
full, and treats two keys with the same digest as one. This map is exact and grows as needed: an
open-addressing table (compiled, :mod:`kafkalog.format.rewrite`) of 64-byte slots holding a 64-bit
hash, the offset and the key itself (its first 16 bytes inline, the rest in a key arena); equality is
always decided on the bytes. Memory is about ``64 B / load factor`` per distinct key, plus the key for
keys over 16 bytes: ~110 MB for a million keys.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafkalog.format.rewrite import INLINE_KEY_BYTES, SLOT_WORDS, table_get, table_put, table_rehash
from kafkalog.format.scan import RecordColumns

I64 = npt.NDArray[np.int64]
MAX_LOAD = 0.6


class KeyMap:
    def __init__(self, capacity: int = 1 << 16) -> None:
        self._allocate(capacity)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._arena_used = 0
        self._size = 0
        self.latest_offset = -1
        self.records = 0

    def _allocate(self, capacity: int) -> None:
        self._table = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)

    def _reserve(self, keys: int, key_bytes: int) -> None:
        capacity = len(self._table)
        while (self._size + keys) > capacity * MAX_LOAD:
            capacity *= 2
        if capacity != len(self._table):
            old = self._table
            self._allocate(capacity)
            table_rehash(old, self._table)
        if self._arena_used + key_bytes > len(self._arena):
            grown = np.empty(max(2 * len(self._arena), self._arena_used + key_bytes), dtype=np.uint8)
            grown[:self._arena_used] = self._arena[:self._arena_used]
            self._arena = grown

    def add(self, columns: RecordColumns, rows: I64) -> None:
        """Record the keys of ``rows`` (keyed records; the largest offset per key wins)."""
        if not len(rows):
            return
        rows = rows.astype(np.int64, copy=False)
        lengths = columns.key_len[rows]
        self._reserve(len(rows), int(lengths[lengths > INLINE_KEY_BYTES].sum()))
        added, self._arena_used = table_put(self._table, self._arena, self._arena_used, columns.data,
                                            columns.key_pos, columns.key_len, columns.offset, rows)
        self._size += added
        self.records += len(rows)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def freeze(self) -> None:
        """Nothing to build: kept so the cleaner's phases read the same as Kafka's."""

    def __len__(self) -> int:
        return self._size

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        """The latest offset of each row's key, -1 when the key is not in the map."""
        if not len(rows) or not self._size:
            return np.full(len(rows), -1, dtype=np.int64)
        return table_get(self._table, self._arena, columns.data, columns.key_pos, columns.key_len,
                         rows.astype(np.int64, copy=False))
