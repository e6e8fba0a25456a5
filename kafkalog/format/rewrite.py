"""Compiled kernels for compaction: exact-key hashing and comparison, and rebuilding v2 records.

The cleaner's per-record work runs here, over the columns of :mod:`kafkalog.format.scan`:

* ``table_put``/``table_get`` — the cleaner's key map: an open-addressing table keyed by the exact
  key bytes (a 64-bit hash only picks the slot), where Kafka's MD5 map treats colliding digests as
  one key.
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


@numba.njit(cache=True, nogil=True, inline="always")
def _hash_one(data: U8, p: Any, n: Any) -> Any:
    h = _FNV_OFFSET
    for j in range(n):
        h = (h ^ np.uint64(data[p + j])) * _FNV_PRIME
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    h = h ^ (h >> np.uint64(31))
    return h | np.uint64(1)  # 0 marks an empty slot


# A table slot is one 32-byte row of an int64 array:
#   [tag, offset, w0, w1] with tag = (hash with its low byte replaced by min(key length, 255)) | 1<<7...
# Keys of up to 16 bytes live in w0/w1 and are compared inside the slot; longer keys keep their first
# 8 bytes in w0 and their arena position in w1, and are compared against the arena (length-prefixed).
# The home slot is ``(hash_hi * capacity) >> 32`` (any capacity, no power-of-two waste), so walking rows
# in hash order walks the table in memory order.
INLINE_KEY_BYTES = 16
SLOT_WORDS = 4


@numba.njit(cache=True, nogil=True, inline="always")
def _tag(h: Any, n: Any) -> Any:
    return (h & np.int64(~0xFF)) | np.int64(min(n, 255)) | np.int64(1 << 8)  # never 0: 0 marks empty


@numba.njit(cache=True, nogil=True, inline="always")
def _home(h: Any, capacity: Any) -> Any:
    return np.int64(((np.uint64(h) >> np.uint64(32)) * np.uint64(capacity)) >> np.uint64(32))


@numba.njit(cache=True, nogil=True, inline="always")
def _key_words(data: U8, p: Any, n: Any) -> tuple[Any, Any]:
    w0 = np.int64(0)
    w1 = np.int64(0)
    for j in range(min(n, 8)):
        w0 |= np.int64(data[p + j]) << np.int64(8 * j)
    if n <= INLINE_KEY_BYTES:
        for j in range(8, n):
            w1 |= np.int64(data[p + j]) << np.int64(8 * (j - 8))
    return w0, w1


@numba.njit(cache=True, nogil=True, inline="always")
def _slot_matches(table: Any, s: Any, tag: Any, n: Any, w0: Any, w1: Any, data: U8, p: Any, arena: U8) -> bool:
    if table[s, 0] != tag or table[s, 2] != w0:
        return False
    if n <= INLINE_KEY_BYTES:
        return bool(table[s, 3] == w1)
    q = table[s, 3]
    stored = (np.int64(arena[q]) << 24) | (np.int64(arena[q + 1]) << 16) | (np.int64(arena[q + 2]) << 8) \
        | np.int64(arena[q + 3])
    if stored != n:
        return False
    for j in range(n):
        if data[p + j] != arena[q + 4 + j]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _ordered(table: Any, data: U8, key_pos: I64, key_len: I32, rows: I64) -> tuple[Any, Any, Any, Any, Any]:
    """One sequential pass over the rows: tag, home slot and key words of each, and the rows ordered
    by home slot (a counting sort on the hash's top 12 bits), so that the table is then walked in
    memory order: a random probe into a table larger than the caches costs a DRAM miss."""
    n = len(rows)
    tags = np.empty(n, dtype=np.int64)
    homes = np.empty(n, dtype=np.int64)
    w0s = np.empty(n, dtype=np.int64)
    w1s = np.empty(n, dtype=np.int64)
    capacity = len(table)
    counts = np.zeros(4097, dtype=np.int64)
    for i in range(n):
        r = rows[i]
        p, m = key_pos[r], key_len[r]
        h = np.int64(_hash_one(data, p, m))
        tags[i] = _tag(h, m)
        homes[i] = _home(h, capacity)
        w0s[i], w1s[i] = _key_words(data, p, m)
        counts[(np.uint64(h) >> np.uint64(52)) + 1] += 1
    for b in range(1, 4097):
        counts[b] += counts[b - 1]
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        bucket = np.int64(np.uint64(tags[i]) >> np.uint64(52))
        order[counts[bucket]] = i
        counts[bucket] += 1
    return order, tags, homes, w0s, w1s


@numba.njit(cache=True, nogil=True)
def table_put(table: Any, arena: U8, arena_used: int, data: U8, key_pos: I64, key_len: I32, offsets: I64,
              rows: I64) -> tuple[int, int]:
    """Insert or update key → offset for each row (the larger offset wins, so the order rows are
    visited in does not matter); returns (new keys, arena used).

    The caller guarantees room: a load factor below 0.8 after the inserts and arena space (4 + length)
    for every key longer than 16 bytes. Equality is on the key bytes; the hash only picks the slot.
    """
    capacity = len(table)
    added = 0
    order, tags, homes, w0s, w1s = _ordered(table, data, key_pos, key_len, rows)
    for k in range(len(order)):
        i = order[k]
        r = rows[i]
        n = key_len[r]
        tag, w0, w1 = tags[i], w0s[i], w1s[i]
        s = homes[i]
        while True:
            if table[s, 0] == 0:
                table[s, 0] = tag
                table[s, 1] = offsets[r]
                table[s, 2] = w0
                if n > INLINE_KEY_BYTES:
                    p = key_pos[r]
                    table[s, 3] = arena_used
                    arena[arena_used] = (n >> 24) & 0xFF
                    arena[arena_used + 1] = (n >> 16) & 0xFF
                    arena[arena_used + 2] = (n >> 8) & 0xFF
                    arena[arena_used + 3] = n & 0xFF
                    for j in range(n):
                        arena[arena_used + 4 + j] = data[p + j]
                    arena_used += 4 + n
                else:
                    table[s, 3] = w1
                added += 1
                break
            if _slot_matches(table, s, tag, n, w0, w1, data, key_pos[r], arena):
                if offsets[r] > table[s, 1]:
                    table[s, 1] = offsets[r]
                break
            s += 1
            if s == capacity:
                s = 0
    return added, arena_used


@numba.njit(cache=True, nogil=True)
def table_get(table: Any, arena: U8, data: U8, key_pos: I64, key_len: I32, rows: I64) -> I64:
    """The offset stored for each row's key, -1 when the key is absent."""
    capacity = len(table)
    out = np.full(len(rows), -1, dtype=np.int64)
    order, tags, homes, w0s, w1s = _ordered(table, data, key_pos, key_len, rows)
    for k in range(len(order)):
        i = order[k]
        s = homes[i]
        tag, w0, w1 = tags[i], w0s[i], w1s[i]
        while table[s, 0] != 0:
            if table[s, 0] == tag and table[s, 2] == w0:
                r = rows[i]
                if _slot_matches(table, s, tag, key_len[r], w0, w1, data, key_pos[r], arena):
                    out[i] = table[s, 1]
                    break
            s += 1
            if s == capacity:
                s = 0
    return out


@numba.njit(cache=True, nogil=True)
def table_rehash(table: Any, arena: U8, new: Any) -> None:
    """Move every entry into the (larger, empty) new table; home slots are recomputed from the
    stored keys' hashes (the tag keeps only part of the hash)."""
    capacity = len(new)
    for s in range(len(table)):
        tag = table[s, 0]
        if tag == 0:
            continue
        # The tag's high 56 bits are the hash's; _home only uses the top 32.
        d = _home(tag, capacity)
        while new[d, 0] != 0:
            d += 1
            if d == capacity:
                d = 0
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
