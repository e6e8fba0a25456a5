"""The cleaner's key map: exact key bytes → the latest offset of that key in the dirty range.

Kafka's ``SkimpyOffsetMap`` stores MD5 digests in a fixed 128 MiB table and stops a pass when it is
full. This map is exact and unbounded by design: it holds 16 bytes per distinct key (a 64-bit hash
and the offset) in sorted arrays, and decides equality on the key bytes — keys whose hashes collide
are kept apart in a small exact dictionary. While it is being built it also holds the dirty keys'
bytes (to detect collisions), about ``24 B + key size`` per dirty keyed record; those are dropped by
:meth:`KeyMap.freeze`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafkalog.format.rewrite import gather_keys, group_collisions, hash_keys, keys_match
from kafkalog.format.scan import RecordColumns

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


class KeyMap:
    def __init__(self) -> None:
        self._hashes: list[U64] = []
        self._offsets: list[I64] = []
        self._arenas: list[npt.NDArray[np.uint8]] = []
        self._starts: list[I64] = []
        self.latest_offset = -1
        self._map_hash: U64 = np.empty(0, dtype=np.uint64)
        self._map_offset: I64 = np.empty(0, dtype=np.int64)
        self._collided_hash: U64 = np.empty(0, dtype=np.uint64)
        self._exact: dict[bytes, int] = {}
        self._rep_arena = np.empty(0, dtype=np.uint8)  # one key per map entry, to verify hash hits
        self._rep_starts = np.zeros(1, dtype=np.int64)
        self.records = 0

    def add(self, columns: RecordColumns, rows: I64) -> None:
        """Record the keys of ``rows`` (keyed records, in offset order across calls)."""
        if not len(rows):
            return
        self._hashes.append(hash_keys(columns.data, columns.key_pos, columns.key_len, rows))
        self._offsets.append(columns.offset[rows])
        arena, starts = gather_keys(columns.data, columns.key_pos, columns.key_len, rows)
        self._arenas.append(arena)
        self._starts.append(starts)
        self.records += len(rows)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def freeze(self) -> None:
        """Build the lookup arrays; detect and separate true hash collisions."""
        if not self._hashes:
            return
        hashes = np.concatenate(self._hashes)
        offsets = np.concatenate(self._offsets)
        shifts = np.cumsum([0] + [len(a) for a in self._arenas[:-1]])
        starts = np.concatenate([s[:-1] + shift for s, shift in zip(self._starts, shifts, strict=True)]
                                + [np.array([sum(len(a) for a in self._arenas)], dtype=np.int64)])
        arena = np.concatenate(self._arenas)
        self._hashes, self._offsets, self._arenas, self._starts = [], [], [], []
        order = np.lexsort((offsets, hashes))
        sorted_hashes = hashes[order]
        boundaries = np.flatnonzero(sorted_hashes[1:] != sorted_hashes[:-1]) + 1
        group_start = np.concatenate(([0], boundaries, [len(order)])).astype(np.int64)
        collided = group_collisions(arena, starts, order, group_start)
        last = group_start[1:] - 1
        keep = ~collided
        self._map_hash = sorted_hashes[group_start[:-1]][keep]
        self._map_offset = offsets[order[last]][keep]
        representatives = order[group_start[:-1]][keep]
        lengths = starts[representatives + 1] - starts[representatives]
        self._rep_starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        all_lengths = (starts[1:] - starts[:-1]).astype(np.int32)
        self._rep_arena, _ = gather_keys(arena, starts[:-1].copy(), all_lengths, representatives.astype(np.int64))
        if collided.any():
            self._collided_hash = sorted_hashes[group_start[:-1]][collided]
            for g in np.flatnonzero(collided):
                for k in range(group_start[g], group_start[g + 1]):
                    row = order[k]
                    key = arena[starts[row]:starts[row + 1]].tobytes()
                    self._exact[key] = max(self._exact.get(key, -1), int(offsets[row]))

    def __len__(self) -> int:
        return len(self._map_hash) + len(self._exact)

    def lookup(self, columns: RecordColumns, rows: I64) -> I64:
        """The latest offset of each row's key, -1 when the key is not in the map."""
        out = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows) or not len(self):
            return out
        hashes = hash_keys(columns.data, columns.key_pos, columns.key_len, rows)
        idx = np.searchsorted(self._map_hash, hashes)
        idx_clipped = np.minimum(idx, max(len(self._map_hash) - 1, 0))
        if len(self._map_hash):
            found = np.flatnonzero(self._map_hash[idx_clipped] == hashes)
            # A hash hit is only a candidate: the key bytes decide (a key outside the dirty range
            # may share a hash with one inside it).
            same = keys_match(columns.data, columns.key_pos, columns.key_len, rows[found], self._rep_arena,
                              self._rep_starts, idx_clipped[found])
            out[found[same]] = self._map_offset[idx_clipped[found[same]]]
        if len(self._collided_hash):
            for i in np.flatnonzero(np.isin(hashes, self._collided_hash)):
                key = columns.key(int(rows[i]))
                out[i] = self._exact.get(key if key is not None else b"", -1)
        return out
