"""Compiled kernels for compaction: exact-key hashing and comparison, and rebuilding v2 records.

The cleaner's per-record work runs here, over the columns of :mod:`kafkalog.format.scan`:

* ``hash_keys`` — a 64-bit hash of each key's bytes (FNV-1a folded through a splitmix finaliser).
  Hashes only *group* keys; equality is always decided on the bytes (``group_collisions``), so the
  key map is exact where Kafka's MD5 map treats colliding digests as one key.
* ``rebuild_records`` — re-encode retained records against a new base timestamp: the timestamp
  delta is rewritten, the offset delta, key, value and headers are copied byte for byte (the batch
  keeps its base offset, so offset deltas stay valid).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@numba.njit(cache=True, nogil=True)
def hash_keys(data: U8, key_pos: I64, key_len: I32, rows: I64) -> U64:
    """64-bit hash of the key of each row in ``rows`` (rows must have non-null keys)."""
    out = np.empty(len(rows), dtype=np.uint64)
    for i in range(len(rows)):
        r = rows[i]
        p = key_pos[r]
        h = _FNV_OFFSET
        for j in range(key_len[r]):
            h = (h ^ np.uint64(data[p + j])) * _FNV_PRIME
        # splitmix64 finaliser: spreads FNV's weak low bits before the hashes are sorted and probed
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = h ^ (h >> np.uint64(31))
    return out


@numba.njit(cache=True, nogil=True)
def gather_keys(data: U8, key_pos: I64, key_len: I32, rows: I64) -> tuple[Any, Any]:
    """Copy the keys of ``rows`` into one arena: (arena, start of each key)."""
    starts = np.empty(len(rows) + 1, dtype=np.int64)
    total = 0
    for i in range(len(rows)):
        starts[i] = total
        total += key_len[rows[i]]
    starts[len(rows)] = total
    arena = np.empty(total, dtype=np.uint8)
    for i in range(len(rows)):
        r = rows[i]
        arena[starts[i]:starts[i + 1]] = data[key_pos[r]:key_pos[r] + key_len[r]]
    return arena, starts


@numba.njit(cache=True, nogil=True)
def group_collisions(arena: U8, starts: I64, order: I64, group_start: I64) -> npt.NDArray[np.bool_]:
    """For each group of equal hashes (``order`` sorted by hash, groups from ``group_start``), whether
    any member's key bytes differ from the first member's: a true hash collision."""
    n_groups = len(group_start) - 1
    collided = np.zeros(n_groups, dtype=np.bool_)
    for g in range(n_groups):
        first = order[group_start[g]]
        a0, a1 = starts[first], starts[first + 1]
        for k in range(group_start[g] + 1, group_start[g + 1]):
            other = order[k]
            b0, b1 = starts[other], starts[other + 1]
            if b1 - b0 != a1 - a0:
                collided[g] = True
                break
            for j in range(a1 - a0):
                if arena[a0 + j] != arena[b0 + j]:
                    collided[g] = True
                    break
            if collided[g]:
                break
    return collided


@numba.njit(cache=True, nogil=True, inline="always")
def _write_varlong(out: U8, p: int, value: int) -> int:
    u = np.uint64((value << 1) ^ (value >> 63))
    while u >= np.uint64(0x80):
        out[p] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        p += 1
        u >>= np.uint64(7)
    out[p] = np.uint8(u)
    return p + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _varlong_size(value: int) -> int:
    u = np.uint64((value << 1) ^ (value >> 63))
    size = 1
    while u >= np.uint64(0x80):
        u >>= np.uint64(7)
        size += 1
    return size


@numba.njit(cache=True, nogil=True, inline="always")
def _skip_varint(data: U8, p: int) -> int:
    while data[p] >= 0x80:
        p += 1
    return p + 1


@numba.njit(cache=True, nogil=True)
def rebuild_records(data: U8, record_pos: I64, record_size: I32, timestamps: I64, rows: I64,
                    base_timestamp: int) -> U8:
    """The records section holding ``rows`` re-encoded against ``base_timestamp``.

    Each record: length varint | attributes | timestamp delta varlong | offset delta … headers. Only
    the timestamp delta (and so the length) changes; the rest is copied.
    """
    rests = np.empty(len(rows), dtype=np.int64)
    total = 0
    for i in range(len(rows)):
        r = rows[i]
        start = record_pos[r]
        p = _skip_varint(data, start) + 1  # length, attributes
        rest = _skip_varint(data, p)  # end of the old timestamp delta
        rests[i] = rest
        body = 1 + _varlong_size(timestamps[r] - base_timestamp) + (start + record_size[r] - rest)
        total += _varlong_size(body) + body
    out = np.empty(total, dtype=np.uint8)
    q = 0
    for i in range(len(rows)):
        r = rows[i]
        rest = rests[i]
        tail = record_pos[r] + record_size[r] - rest
        delta = timestamps[r] - base_timestamp
        body = 1 + _varlong_size(delta) + tail
        q = _write_varlong(out, q, body)  # a varint of a non-negative int32 encodes like a varlong
        out[q] = 0
        q = _write_varlong(out, q + 1, delta)
        out[q:q + tail] = data[rest:rest + tail]
        q += tail
    return out


@numba.njit(cache=True, nogil=True)
def records_equal(a: U8, a_pos: I64, a_size: I32, a_rows: I64, b: U8, b_pos: I64, b_size: I32,
                  b_rows: I64, a_skip: I64, b_skip: I64) -> int:
    """Index of the first pair of rows whose record bytes differ after their timestamp delta
    (``*_skip`` give where that part starts), or -1 when all are equal."""
    for i in range(len(a_rows)):
        ra, rb = a_rows[i], b_rows[i]
        la = a_pos[ra] + a_size[ra] - a_skip[i]
        lb = b_pos[rb] + b_size[rb] - b_skip[i]
        if la != lb:
            return i
        for j in range(la):
            if a[a_skip[i] + j] != b[b_skip[i] + j]:
                return i
    return -1


@numba.njit(cache=True, nogil=True)
def after_timestamp_delta(data: U8, record_pos: I64, rows: I64) -> I64:
    """For each row, where its offset delta starts (just after the timestamp delta)."""
    out = np.empty(len(rows), dtype=np.int64)
    for i in range(len(rows)):
        p = _skip_varint(data, record_pos[rows[i]]) + 1
        out[i] = _skip_varint(data, p)
    return out


@numba.njit(cache=True, nogil=True)
def keys_match(data: U8, key_pos: I64, key_len: I32, rows: I64, arena: U8, starts: I64,
               slots: I64) -> npt.NDArray[np.bool_]:
    """Whether each row's key bytes equal the arena key at its slot (hash matches are verified)."""
    out = np.zeros(len(rows), dtype=np.bool_)
    for i in range(len(rows)):
        r = rows[i]
        s = slots[i]
        n = key_len[r]
        if starts[s + 1] - starts[s] != n:
            continue
        p, q = key_pos[r], starts[s]
        same = True
        for j in range(n):
            if data[p + j] != arena[q + j]:
                same = False
                break
        out[i] = same
    return out


# --- an open-addressing hash table over exact key bytes (the cleaner's key map) -------------------
@numba.njit(cache=True, nogil=True, inline="always")
def _hash_one(data: U8, p: Any, n: Any) -> Any:
    h = _FNV_OFFSET
    for j in range(n):
        h = (h ^ np.uint64(data[p + j])) * _FNV_PRIME
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    h = h ^ (h >> np.uint64(31))
    return h | np.uint64(1)  # 0 marks an empty slot


@numba.njit(cache=True, nogil=True, inline="always")
def _same_key(data: U8, p: int, n: int, arena: U8, q: int, m: int) -> bool:
    if n != m:
        return False
    for j in range(n):
        if data[p + j] != arena[q + j]:
            return False
    return True


# A table slot is one 64-byte row of an int64 array, so a probe touches one cache line:
# [hash, offset, key length, arena position, first 16 key bytes (2 words), unused, unused]. Keys of up
# to 16 bytes are compared entirely inside the slot; longer ones also in the key arena.
INLINE_KEY_BYTES = 16
SLOT_WORDS = 8


@numba.njit(cache=True, nogil=True, inline="always")
def _key_words(data: U8, p: Any, n: Any) -> tuple[Any, Any]:
    w0 = np.int64(0)
    w1 = np.int64(0)
    for j in range(min(n, 8)):
        w0 |= np.int64(data[p + j]) << np.int64(8 * j)
    for j in range(8, min(n, 16)):
        w1 |= np.int64(data[p + j]) << np.int64(8 * (j - 8))
    return w0, w1


@numba.njit(cache=True, nogil=True, inline="always")
def _slot_matches(table: Any, s: Any, h: Any, n: Any, w0: Any, w1: Any, data: U8, p: Any, arena: U8) -> bool:
    if table[s, 0] != h or table[s, 2] != n or table[s, 4] != w0 or table[s, 5] != w1:
        return False
    if n <= INLINE_KEY_BYTES:
        return True
    q = table[s, 3]
    for j in range(INLINE_KEY_BYTES, n):
        if data[p + j] != arena[q + j]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _slot_order(table: Any, data: U8, key_pos: I64, key_len: I32, rows: I64) -> tuple[Any, Any, Any, Any]:
    """Hash every row's key and order the rows by home slot, so the table is walked in memory order
    (random probes into a table larger than the caches cost a DRAM miss each)."""
    n = len(rows)
    hashes = np.empty(n, dtype=np.int64)
    w0s = np.empty(n, dtype=np.int64)
    w1s = np.empty(n, dtype=np.int64)
    mask = len(table) - 1
    shift = 0
    while (mask >> shift) >= 4096:
        shift += 1
    counts = np.zeros(4097, dtype=np.int64)
    for i in range(n):
        r = rows[i]
        h = np.int64(_hash_one(data, key_pos[r], key_len[r]))
        hashes[i] = h
        w0s[i], w1s[i] = _key_words(data, key_pos[r], key_len[r])
        counts[((h & mask) >> shift) + 1] += 1
    for b in range(1, 4097):
        counts[b] += counts[b - 1]
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        b = (hashes[i] & mask) >> shift
        order[counts[b]] = i
        counts[b] += 1
    return order, hashes, w0s, w1s


@numba.njit(cache=True, nogil=True)
def table_put(table: Any, arena: U8, arena_used: int, data: U8, key_pos: I64, key_len: I32, offsets: I64,
              rows: I64) -> tuple[int, int]:
    """Insert or update key → offset for each row (the larger offset wins, so the order rows are
    visited in does not matter); returns (new keys, arena used).

    The caller guarantees room: a load factor below 0.7 after the inserts and arena space for every
    key longer than 16 bytes. Equality is on the key bytes; the hash only picks the probe sequence.
    """
    mask = len(table) - 1
    added = 0
    order, hashes, w0s, w1s = _slot_order(table, data, key_pos, key_len, rows)
    for k in range(len(order)):
        i = order[k]
        r = rows[i]
        p, n = key_pos[r], key_len[r]
        h, w0, w1 = hashes[i], w0s[i], w1s[i]
        s = h & mask
        while True:
            if table[s, 0] == 0:
                table[s, 0] = h
                table[s, 1] = offsets[r]
                table[s, 2] = n
                table[s, 3] = arena_used
                table[s, 4] = w0
                table[s, 5] = w1
                if n > INLINE_KEY_BYTES:
                    for j in range(n):
                        arena[arena_used + j] = data[p + j]
                    arena_used += n
                added += 1
                break
            if _slot_matches(table, s, h, n, w0, w1, data, p, arena):
                if offsets[r] > table[s, 1]:
                    table[s, 1] = offsets[r]
                break
            s = (s + 1) & mask
    return added, arena_used


@numba.njit(cache=True, nogil=True)
def table_get(table: Any, arena: U8, data: U8, key_pos: I64, key_len: I32, rows: I64) -> I64:
    """The offset stored for each row's key, -1 when the key is absent."""
    mask = len(table) - 1
    out = np.full(len(rows), -1, dtype=np.int64)
    order, hashes, w0s, w1s = _slot_order(table, data, key_pos, key_len, rows)
    for k in range(len(order)):
        i = order[k]
        r = rows[i]
        p, n = key_pos[r], key_len[r]
        h = hashes[i]
        s = h & mask
        while table[s, 0] != 0:
            if _slot_matches(table, s, h, n, w0s[i], w1s[i], data, p, arena):
                out[i] = table[s, 1]
                break
            s = (s + 1) & mask
    return out


@numba.njit(cache=True, nogil=True)
def table_rehash(table: Any, new: Any) -> None:
    """Move every entry into the (larger, empty) new table."""
    mask = len(new) - 1
    for s in range(len(table)):
        h = table[s, 0]
        if h == 0:
            continue
        d = h & mask
        while new[d, 0] != 0:
            d = (d + 1) & mask
        new[d, :] = table[s, :]


# --- assembling a cleaned segment ------------------------------------------------------------------
COPY, REBUILD, EMPTY, DROP = 0, 1, 2, 3
_DELETE_HORIZON = 0x40


@numba.njit(cache=True, nogil=True, inline="always")
def _put_be(out: U8, p: int, value: Any, width: int) -> None:
    v = np.int64(value)
    for j in range(width):
        out[p + width - 1 - j] = np.uint8(v & 0xFF)
        v >>= 8


@numba.njit(cache=True, nogil=True)
def assemble_uncompressed(data: U8, position: I64, size: I64, action: I64, row_start: I64, keep: Any,
                          new_horizon: I64, rec_data: U8, record_pos: I64, record_size: I32, timestamps: I64,
                          out: U8) -> tuple[int, Any, Any]:
    """Write the cleaned form of uncompressed v2 batches into ``out``.

    COPY batches are copied byte for byte (consecutive ones in one run), EMPTY ones become Kafka's
    61-byte empty header, REBUILD ones keep their header fields but get the retained records
    re-encoded against a new base timestamp (``new_horizon[b]`` when one is to be stamped or kept,
    -1 otherwise: then the first retained record's timestamp). Record positions index ``rec_data``
    (the file itself, or the arena of a segment that also holds compressed batches). Returns the bytes written and, for
    every written batch, its start in ``out`` and whether its CRC must be recomputed.
    """
    n = len(position)
    starts = np.empty(n, dtype=np.int64)
    needs_crc = np.zeros(n, dtype=np.bool_)
    q = 0
    for b in range(n):
        kind = action[b]
        starts[b] = q
        if kind == DROP:
            starts[b] = -1
            continue
        pos = position[b]
        if kind == COPY:
            out[q:q + size[b]] = data[pos:pos + size[b]]
            q += size[b]
            continue
        needs_crc[b] = True
        out[q:q + 61] = data[pos:pos + 61]
        attributes = np.int64(data[pos + 22])
        if kind == EMPTY:
            # writeEmptyHeader: no records, codec none, no horizon, base timestamp -1
            out[q + 22] = np.uint8(attributes & (0x08 | 0x10 | 0x20))
            out[q + 21] = 0
            _put_be(out, q + 8, 49, 4)
            _put_be(out, q + 27, -1, 8)
            _put_be(out, q + 57, 0, 4)
            q += 61
            continue
        first, last = row_start[b], row_start[b + 1]
        base_ts = new_horizon[b]
        max_ts = np.int64(-1)
        count = 0
        for r in range(first, last):
            if keep[r]:
                if count == 0 and base_ts < 0:
                    base_ts = timestamps[r]
                if timestamps[r] > max_ts:
                    max_ts = timestamps[r]
                count += 1
        w = q + 61
        for r in range(first, last):
            if not keep[r]:
                continue
            start = record_pos[r]
            p = _skip_varint(rec_data, start) + 1
            rest = _skip_varint(rec_data, p)
            tail = start + record_size[r] - rest
            delta = timestamps[r] - base_ts
            body = 1 + _varlong_size(delta) + tail
            w = _write_varlong(out, w, body)
            out[w] = 0
            w = _write_varlong(out, w + 1, delta)
            out[w:w + tail] = rec_data[rest:rest + tail]
            w += tail
        if new_horizon[b] >= 0:
            attributes |= _DELETE_HORIZON
        out[q + 22] = np.uint8(attributes)
        _put_be(out, q + 8, w - q - 12, 4)
        _put_be(out, q + 27, base_ts, 8)
        if not attributes & 0x08:  # LogAppendTime batches keep their append time
            _put_be(out, q + 35, max_ts, 8)
        _put_be(out, q + 57, count, 4)
        q = w
    return q, starts, needs_crc
