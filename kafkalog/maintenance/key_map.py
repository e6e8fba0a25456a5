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

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kafkalog.errors import CleanerError
from kafkalog.format.key_table import (
    HASHED_WORDS,
    INLINE_KEY_BYTES,
    SLOT_WORDS,
    bits_set,
    hash_record_keys,
    hash_rows,
    table_get,
    table_put,
    table_rehash,
)
from kafkalog.format.scan import RecordColumns, RecordSections

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
MAX_LOAD = 0.8
CHUNK_ROWS = 1 << 18
# The superseded bitmap costs a bit per offset of the range it tracks, in zero pages that only
# become memory where records are; past this span (a sparse, compacted range) it is not kept.
MAX_TRACKED_OFFSETS = 1 << 34


class KeyMap:
    """Exact key → latest offset. With ``tracked`` = ``(first, end)``, it also records which offsets
    of that range are superseded by a later offset of their key, so ``superseded`` answers rows that
    were inserted without probing the table again."""

    def __init__(self, capacity: int = 1 << 16, tracked: tuple[int, int] | None = None) -> None:
        self._table = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._arena_used = 0
        self._size = 0
        self.latest_offset = -1
        self.records = 0
        first, end = tracked or (0, 0)
        span = end - first if 0 < end - first <= MAX_TRACKED_OFFSETS else 0
        self._tracked_base = first
        self._superseded = np.zeros((span + 63) // 64, dtype=np.uint64)  # calloc: untouched pages are free
        self._inserted = (-1, -1)  # the first and last offset inserted (rows come in offset order)
        self._scratch: tuple[I64, I64] | None = None

    def _staging(self, rows: int) -> tuple[I64, I64]:
        """Scratch for ``rows`` hashed rows and their ordered copies: kept and reused, as fresh
        memory is slow on a VM that returns freed pages to its host."""
        if self._scratch is None or len(self._scratch[0]) < rows:
            self._scratch = (np.empty((rows, HASHED_WORDS), dtype=np.int64),
                             np.empty((rows, HASHED_WORDS + 1), dtype=np.int64))
        hashed, staged = self._scratch
        return hashed[:rows], staged[:rows]

    def _reserve(self, keys: int, key_bytes: int) -> None:
        if self._size + keys > len(self._table) * MAX_LOAD:
            # Double: every table of the chain is fresh memory, which costs more than the rehash itself
            # on a VM that returns freed pages to its host; doubling touches 2x the final table in all.
            capacity = max(int((self._size + keys) / MAX_LOAD) + 1, len(self._table) * 2)
            new = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)
            table_rehash(self._table, new)
            self._table = new
        if self._arena_used + key_bytes > len(self._arena):
            grown = np.empty(max(2 * len(self._arena), self._arena_used + key_bytes), dtype=np.uint8)
            grown[:self._arena_used] = self._arena[:self._arena_used]
            self._arena = grown

    def add(self, columns: RecordColumns, rows: I64) -> None:
        """Record the keys of ``rows`` (keyed records; the largest offset per key wins, the others
        are marked superseded)."""
        rows = rows.astype(np.int64, copy=False)
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start:start + CHUNK_ROWS]
            hashed, staged = self._staging(len(chunk))
            hash_rows(columns.data, columns.key_pos, columns.key_len, columns.offset, chunk, hashed)
            self._put(columns.data, hashed, staged)

    def add_sections(self, sections: RecordSections, base_offset: I64, first: int, end: int) -> int:
        """Record the keys of every keyed record in ``[first, end)`` of the records sections, read
        straight from the bytes; returns -1, or the index of the first batch whose records do not
        parse (nothing of it or after it was added)."""
        hashed, staged = self._staging(int(sections.counts.sum()))
        rows, bad = hash_record_keys(sections.data, sections.sec_start, sections.sec_end, sections.counts,
                                     base_offset, first, end, hashed)
        self._put(sections.data, hashed[:rows], staged[:rows])
        return int(bad)

    def _put(self, data: npt.NDArray[np.uint8], hashed: I64, staged: I64) -> None:
        if not len(hashed):
            return
        first, last = int(hashed[:, 3].min()), int(hashed[:, 3].max())
        self._inserted = (first if self._inserted[0] < 0 else min(first, self._inserted[0]),
                          max(last, self._inserted[1]))
        lengths = hashed[:, 5]
        self._reserve(len(hashed), int((lengths[lengths > INLINE_KEY_BYTES] + 4).sum()))
        added, self._arena_used = table_put(self._table, self._arena, self._arena_used, data, hashed,
                                            self._superseded, self._tracked_base, staged)
        self._size += added
        self.records += len(hashed)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def __len__(self) -> int:
        return self._size

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        """The latest offset of each row's key, -1 when the key is not in the map."""
        if not len(rows) or not self._size:
            return np.full(len(rows), -1, dtype=np.int64)
        rows = rows.astype(np.int64, copy=False)
        out = np.empty(len(rows), dtype=np.int64)
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start:start + CHUNK_ROWS]
            hashed, staged = self._staging(len(chunk))
            hash_rows(columns.data, columns.key_pos, columns.key_len, columns.offset, chunk, hashed)
            out[start:start + len(chunk)] = table_get(self._table, self._arena, columns.data, hashed, staged)
        return out

    def tracks(self, offsets: I64) -> Bools:
        """Which offsets lie in the range this map inserted and tracks supersession for."""
        first, last = self._inserted
        end = min(last + 1, self._tracked_base + 64 * len(self._superseded))
        return (offsets >= max(first, self._tracked_base)) & (offsets < end)

    def superseded(self, columns: RecordColumns, rows: I64, inserted: Bools) -> Bools:
        """Whether the map holds a later offset than each row's own for the row's key.

        ``inserted`` marks rows that were added to this map (keyed, in its range, not skipped); they
        are answered from the bitmap, every other row by a lookup."""
        rows = rows.astype(np.int64, copy=False)
        offsets = columns.offset[rows]
        out = np.zeros(len(rows), dtype=bool)
        fast = inserted & self.tracks(offsets)
        out[fast] = bits_set(self._superseded, self._tracked_base, offsets[fast])
        slow = np.flatnonzero(~fast)
        out[slow] = self.lookup(columns, rows[slow]) > offsets[slow]
        return out
    # --- sharing a map between processes (the Spark job's key-map tasks and its rewrite tasks) ------
    def save(self, prefix: Path) -> None:
        """Write the map as ``<prefix>.table.npy``, ``.arena.npy``, ``.superseded.npy`` and ``.json``
        (last, by rename: its presence means the map is complete)."""
        for suffix, array in ((".table.npy", self._table), (".arena.npy", self._arena[:self._arena_used]),
                              (".superseded.npy", self._superseded)):
            tmp = Path(f"{prefix}{suffix}.tmp")
            with open(tmp, "wb") as f:
                np.save(f, array)
            os.replace(tmp, f"{prefix}{suffix}")
        meta = {"size": self._size, "latest_offset": self.latest_offset, "records": self.records,
                "tracked_base": self._tracked_base, "inserted": list(self._inserted)}
        tmp = Path(f"{prefix}.json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, f"{prefix}.json")

    @classmethod
    def load(cls, prefix: Path) -> KeyMap:
        """A saved map, memory-mapped copy-on-write (only the slots probed are paged in)."""
        try:
            meta = json.loads(Path(f"{prefix}.json").read_text())
            # Copy-on-write maps: writable arrays, so the kernels compiled for a built map serve it too.
            table = np.load(f"{prefix}.table.npy", mmap_mode="c")
            arena = np.load(f"{prefix}.arena.npy", mmap_mode="c") if meta["size"] else np.empty(0, np.uint8)
            superseded = np.load(f"{prefix}.superseded.npy")
            tracked_base, (first, last) = int(meta["tracked_base"]), meta["inserted"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CleanerError(f"key map {prefix}: cannot be read ({exc})") from None
        if table.ndim != 2 or table.shape[1] != SLOT_WORDS or table.dtype != np.int64 \
                or superseded.dtype != np.uint64 or superseded.ndim != 1:
            raise CleanerError(f"key map {prefix}: not a key-map table")
        key_map = cls.__new__(cls)
        key_map._table, key_map._arena = table, arena
        key_map._arena_used, key_map._size = len(arena), int(meta["size"])
        key_map.latest_offset, key_map.records = int(meta["latest_offset"]), int(meta["records"])
        key_map._superseded, key_map._tracked_base = superseded, tracked_base
        key_map._inserted = (int(first), int(last))
        key_map._scratch = None
        return key_map


class RangedKeyMap:
    """The key map as maps of successive, disjoint offset ranges (built in parallel, one per slice of
    the dirty segments); ``lookup`` answers exactly as one map over the whole range: a key's latest
    offset is in the latest range that has the key."""

    def __init__(self, parts: Sequence[KeyMap], latest_offset: int) -> None:
        self.parts = list(parts)  # in offset order
        self.latest_offset = latest_offset
        self.records = sum(p.records for p in parts)

    def __len__(self) -> int:
        """Keys counted once per range that holds them (an upper bound of the distinct keys)."""
        return sum(len(p) for p in self.parts)

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        rows = rows.astype(np.int64, copy=False)
        out = np.full(len(rows), -1, dtype=np.int64)
        todo = np.arange(len(rows))
        for part in reversed(self.parts):
            if not len(todo):
                break
            found = part.lookup(columns, rows[todo])
            out[todo] = found
            todo = todo[found < 0]
        return out

    def superseded(self, columns: RecordColumns, rows: I64, inserted: Bools) -> Bools:
        """As ``KeyMap.superseded`` over the whole range: a row inserted into one range's map is
        superseded there, or by its key in any later range."""
        rows = rows.astype(np.int64, copy=False)
        offsets = columns.offset[rows]
        out = np.zeros(len(rows), dtype=bool)
        answered = np.zeros(len(rows), dtype=bool)
        for i, part in enumerate(self.parts):
            mine = np.flatnonzero(inserted & ~answered & part.tracks(offsets))
            answered[mine] = True
            out[mine] = part.superseded(columns, rows[mine], np.ones(len(mine), dtype=bool))
            later = mine[~out[mine]]
            if len(later) and i + 1 < len(self.parts):
                out[later] = RangedKeyMap(self.parts[i + 1:], self.latest_offset).lookup(columns, rows[later]) >= 0
        rest = np.flatnonzero(~answered)
        out[rest] = self.lookup(columns, rows[rest]) > offsets[rest]
        return out
