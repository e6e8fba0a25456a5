"""The cleaner's key map: exact key bytes → the latest offset of that key in the dirty range.

Kafka's ``SkimpyOffsetMap`` stores MD5 digests in a fixed 128 MiB table and stops a pass when it is
full, and treats two keys with the same digest as one. This map is exact and grows as needed: an
open-addressing table (compiled, :mod:`kafkalog.format.rewrite`) of 32-byte slots holding a tag
(hash and length), the offset and the key itself (inline up to 16 bytes, else in a key arena);
equality is always decided on the bytes. Memory is about ``32 B / 0.8`` per distinct key, plus
``4 + key size`` for keys over 16 bytes: ~40 MB for a million short keys. Every page of fresh memory
is a page fault, so the table is sized to the keys, not to a power of two.

A map too big for one task is built as ``parts`` maps over the same range that share the keys by
hash (``KeyMap(part=p, parts=n)``), in parallel; ``HashedKeyMap`` answers from them exactly as one
map would: each key is in one part only, and the parts' supersession bitmaps OR together.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
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
    owned_rows,
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
# become memory where records are; past this span (a sparse, compacted range) it is not kept. Nor is
# it kept where it would outweigh the log it describes (a split round writes it to disk and reads it
# back whole): a sparse range is answered by lookups instead.
MAX_TRACKED_OFFSETS = 1 << 34


def tracks_range(first: int, end: int, range_bytes: int | None = None) -> bool:
    """Whether a map over ``[first, end)``, whose segments hold ``range_bytes``, keeps a supersession
    bitmap of it."""
    span = end - first
    return 0 < span <= MAX_TRACKED_OFFSETS and (range_bytes is None or span // 8 <= max(range_bytes, 1 << 20))


class _Supersession:
    """What a map, a map in hashed parts and a range's final bits answer alike, from a supersession
    bitmap over the tracked range and lookups for every other row."""

    _superseded: npt.NDArray[np.uint64]
    _tracked_base: int
    _inserted: tuple[int, int]  # the first and last offset of the rows the map pass read

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        raise NotImplementedError

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


class KeyMap(_Supersession):
    """Exact key → latest offset. With ``tracked`` = ``(first, end)``, it also records which offsets
    of that range are superseded by a later offset of their key, so ``superseded`` answers rows that
    were inserted without probing the table again (unless the range is too sparse for its segments'
    ``range_bytes``, ``tracks_range``). With ``parts`` > 1 it holds only the keys that
    ``part`` owns by hash (one of the parts a ``HashedKeyMap`` answers from)."""

    def __init__(self, capacity: int = 1 << 16, tracked: tuple[int, int] | None = None, *, part: int = 0,
                 parts: int = 1, range_bytes: int | None = None, max_entries: int | None = None) -> None:
        if not 0 <= part < parts:
            raise ValueError(f"key map part {part} of {parts}")
        if max_entries is not None and (parts > 1 or max_entries < 1):
            raise ValueError(f"a key map of at most {max_entries} keys must be whole and hold one at least")
        self.part, self.parts = part, parts
        # Kafka's buildOffsetMap: a keyed record that finds the map holding max_entries keys fills it
        # (even if its key is there already); nothing from it on is added, and the round ends before it.
        self.max_entries = max_entries
        self.full_at: int | None = None  # the offset of the record that found the map full
        self._table = np.zeros((capacity, SLOT_WORDS), dtype=np.int64)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._arena_used = 0
        self._size = 0
        self.latest_offset = -1
        self.records = 0
        first, end = tracked or (0, 0)
        span = end - first if tracks_range(first, end, range_bytes) else 0
        self._tracked_base = first
        self._superseded = np.zeros((span + 63) // 64, dtype=np.uint64)  # calloc: untouched pages are free
        self._inserted = (-1, -1)  # the first and last offset of the rows offered to the map
        self._scratch: tuple[I64, I64] | None = None

    def _staging(self, rows: int) -> tuple[I64, I64]:
        """Scratch for ``rows`` hashed rows and their ordered copies: kept and reused, so that a map
        faults in its staging pages once, not once per chunk."""
        if self._scratch is None or len(self._scratch[0]) < rows:
            self._scratch = (np.empty((rows, HASHED_WORDS), dtype=np.int64),
                             np.empty((rows, HASHED_WORDS + 1), dtype=np.int64))
        hashed, staged = self._scratch
        return hashed[:rows], staged[:rows]

    def _reserve(self, keys: int, key_bytes: int) -> None:
        if self._size + keys > len(self._table) * MAX_LOAD:
            # Double: every table of the chain is fresh memory, whose page faults can cost more than the
            # rehash itself; doubling touches 2x the final table in all, growing by 1.5x would touch 3x.
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
                                     base_offset, first, end, hashed, self.part, self.parts)
        self._put(sections.data, hashed[:rows], staged[:rows], owned=True)
        return int(bad)

    def _put(self, data: npt.NDArray[np.uint8], hashed: I64, staged: I64, owned: bool = False) -> None:
        """Insert the rows this map owns (``owned``: all of them, filtered when they were hashed), in
        offset order, until the map is full (``max_entries``)."""
        if self.full_at is not None or not len(hashed):
            return
        if self.max_entries is None or self._size + len(hashed) <= self.max_entries:
            self._put_rows(data, hashed, staged, owned)
            return
        done = 0  # rows are inserted in runs that cannot fill the map before their last row
        while done < len(hashed):
            room = self.max_entries - self._size
            if room <= 0:
                self.full_at = int(hashed[done, 3])
                return
            run = hashed[done:done + room]
            self._put_rows(data, run, staged[:len(run)], owned)
            done += len(run)

    def _put_rows(self, data: npt.NDArray[np.uint8], hashed: I64, staged: I64, owned: bool) -> None:
        first, last = int(hashed[:, 3].min()), int(hashed[:, 3].max())
        self._inserted = (first if self._inserted[0] < 0 else min(first, self._inserted[0]),
                          max(last, self._inserted[1]))
        part, parts = (0, 1) if owned else (self.part, self.parts)
        lengths = hashed[:, 5]  # arena room for every long key, owned or not: an upper bound
        self._reserve(owned_rows(hashed, part, parts), int((lengths[lengths > INLINE_KEY_BYTES] + 4).sum()))
        added, self._arena_used, inserted = table_put(self._table, self._arena, self._arena_used, data, hashed,
                                                      self._superseded, self._tracked_base, staged, part, parts)
        self._size += added
        self.records += inserted

    @property
    def last_inserted(self) -> int:
        """The offset of the last row inserted (rows come in offset order), -1 before any."""
        return self._inserted[1]

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def __len__(self) -> int:
        return self._size

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        """The latest offset of each row's key, -1 when the key is not in the map."""
        return _lookup([self], columns, rows, self._staging)

    def superseded(self, columns: RecordColumns, rows: I64, inserted: Bools) -> Bools:
        if self.parts > 1:  # its bitmap knows only its own keys: answer through a HashedKeyMap
            raise ValueError("superseded() of one hashed part of a key map")
        return super().superseded(columns, rows, inserted)

    def _get(self, data: npt.NDArray[np.uint8], hashed: I64, staged: I64) -> I64:
        if not self._size:
            return np.full(len(hashed), -1, dtype=np.int64)
        return table_get(self._table, self._arena, data, hashed, staged, self.part, self.parts)
    # --- sharing a map between processes (a huge partition's map and rewrite tasks) ---
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
                "tracked_base": self._tracked_base, "inserted": list(self._inserted), "part": self.part,
                "parts": self.parts}
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
            part, parts = int(meta["part"]), int(meta["parts"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CleanerError(f"key map {prefix}: cannot be read ({exc})") from None
        if table.ndim != 2 or table.shape[1] != SLOT_WORDS or table.dtype != np.int64 \
                or superseded.dtype != np.uint64 or superseded.ndim != 1 or not 0 <= part < parts:
            raise CleanerError(f"key map {prefix}: not a key-map table")
        key_map = cls.__new__(cls)
        key_map.part, key_map.parts = part, parts
        key_map._table, key_map._arena = table, arena
        key_map._arena_used, key_map._size = len(arena), int(meta["size"])
        key_map.latest_offset, key_map.records = int(meta["latest_offset"]), int(meta["records"])
        key_map._superseded, key_map._tracked_base = superseded, tracked_base
        key_map._inserted = (int(first), int(last))
        key_map._scratch = None
        return key_map


class HashedKeyMap(_Supersession):
    """The key map as the ``parts`` maps that share its keys by hash, each built over the whole range
    (in parallel: a split round's workers); answers exactly as one map over that range."""

    def __init__(self, parts: Sequence[KeyMap], latest_offset: int) -> None:
        self.parts = sorted(parts, key=lambda p: p.part)
        if not parts or [(p.part, p.parts) for p in self.parts] != [(i, len(parts)) for i in range(len(parts))] \
                or len({(p._tracked_base, len(p._superseded)) for p in self.parts}) != 1:
            raise CleanerError(f"key map parts {[(p.part, p.parts) for p in self.parts]} are not the hashed parts "
                               "of one map")
        self.latest_offset = latest_offset
        self.records = sum(p.records for p in parts)
        self._tracked_base = self.parts[0]._tracked_base
        self._superseded = np.bitwise_or.reduce([p._superseded for p in self.parts])
        firsts = [p._inserted[0] for p in self.parts if p._inserted[0] >= 0]
        self._inserted = (min(firsts), max(p._inserted[1] for p in self.parts)) if firsts else (-1, -1)

    def __len__(self) -> int:
        """The distinct keys: each is in one part."""
        return sum(len(p) for p in self.parts)

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        return _lookup(self.parts, columns, rows, self.parts[0]._staging)


def _lookup(maps: Sequence[KeyMap], columns: RecordColumns, rows: I64,
            staging: Callable[[int], tuple[I64, I64]]) -> I64:
    """The latest offset of each row's key in whichever of ``maps`` owns it, -1 where none has it;
    each row's key is hashed once."""
    if not len(rows) or not any(len(m) for m in maps):
        return np.full(len(rows), -1, dtype=np.int64)
    rows = rows.astype(np.int64, copy=False)
    out = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[start:start + CHUNK_ROWS]
        hashed, staged = staging(len(chunk))
        hash_rows(columns.data, columns.key_pos, columns.key_len, columns.offset, chunk, hashed)
        found = maps[0]._get(columns.data, hashed, staged)
        for other in maps[1:]:
            np.maximum(found, other._get(columns.data, hashed, staged), out=found)
        out[start:start + len(chunk)] = found
    return out


# What the cleaner's rewrite asks a map: one built here, or its hashed parts.
Supersession = KeyMap | HashedKeyMap
