"""The cleaner's key map: exact key bytes → the latest offset of that key in the dirty range.

Kafka's ``SkimpyOffsetMap`` stores MD5 digests in a fixed 128 MiB table and stops a pass when it is
full, and treats two keys with the same digest as one. This map is exact and grows as needed: an
open-addressing table (compiled, :mod:`kafkalog.format.rewrite`) of 32-byte slots holding a tag
(hash and length), the offset and the key itself (inline up to 16 bytes, else in a key arena);
equality is always decided on the bytes. Memory is about ``32 B / 0.8`` per distinct key, plus
``4 + key size`` for keys over 16 bytes: ~40 MB for a million short keys. Fresh memory is slow on a
VM that returns freed pages to its host, so the table is sized to the keys, not to a power of two.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafkalog.format.rewrite import INLINE_KEY_BYTES, SLOT_WORDS, table_get, table_put, table_rehash
from kafkalog.format.scan import RecordColumns

I64 = npt.NDArray[np.int64]
MAX_LOAD = 0.8
CHUNK_ROWS = 1 << 18


class KeyMap:
    def __init__(self, capacity: int = 1 << 16) -> None:
        self._table = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._arena_used = 0
        self._size = 0
        self.latest_offset = -1
        self.records = 0

    def _reserve(self, keys: int, key_bytes: int) -> None:
        if self._size + keys > len(self._table) * MAX_LOAD:
            # Grow by at least half, so a long run of inserts costs amortised O(1) rehashing.
            capacity = max(int((self._size + keys) / MAX_LOAD) + 1, len(self._table) * 3 // 2)
            new = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)
            table_rehash(self._table, self._arena, new)
            self._table = new
        if self._arena_used + key_bytes > len(self._arena):
            grown = np.empty(max(2 * len(self._arena), self._arena_used + key_bytes), dtype=np.uint8)
            grown[:self._arena_used] = self._arena[:self._arena_used]
            self._arena = grown

    def add(self, columns: RecordColumns, rows: I64) -> None:
        """Record the keys of ``rows`` (keyed records; the largest offset per key wins)."""
        rows = rows.astype(np.int64, copy=False)
        # In chunks: the table is sized for "every row is a new key", so a smaller chunk over-sizes less.
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start:start + CHUNK_ROWS]
            lengths = columns.key_len[chunk]
            self._reserve(len(chunk), int((lengths[lengths > INLINE_KEY_BYTES] + 4).sum()))
            added, self._arena_used = table_put(self._table, self._arena, self._arena_used, columns.data,
                                                columns.key_pos, columns.key_len, columns.offset, chunk)
            self._size += added
            self.records += len(chunk)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def __len__(self) -> int:
        return self._size

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        """The latest offset of each row's key, -1 when the key is not in the map."""
        if not len(rows) or not self._size:
            return np.full(len(rows), -1, dtype=np.int64)
        return table_get(self._table, self._arena, columns.data, columns.key_pos, columns.key_len,
                         rows.astype(np.int64, copy=False))
