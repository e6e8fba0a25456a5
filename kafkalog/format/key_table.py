"""Compiled kernels of the cleaner's key map: an open-addressing table keyed by exact key bytes.

A 64-bit hash only picks the slot; equality is always decided on the key bytes (Kafka's MD5 map
treats colliding digests as one key). A slot is one 32-byte row of an int64 array::

    [tag, offset, w0, w1]    tag = the hash's high 56 bits | min(key length, 255) | 1 << 8 (never 0)

Keys of up to 16 bytes live in ``w0``/``w1`` and are compared inside the slot; longer keys keep
their first 8 bytes in ``w0`` and their arena position in ``w1`` and are compared against the arena
(length-prefixed). The home slot is ``(hash_hi * capacity) >> 32``: any capacity works, so the table
is sized to the keys rather than to a power of two.

The table is larger than the caches, so every probe is a DRAM miss (~100 ns). The kernels hide
that latency by software pipelining: row ``k + AHEAD`` is hashed and its home slot prefetched while
row ``k`` is probed, so about ``AHEAD`` misses are in flight at once (measured on this machine's
EPYC VM: 115 → 55 ns per row; sorting rows by home slot instead was slower than visiting them in
log order).

``superseded`` (a bitmap over the offsets ``[base, base + 64 * len)``, or empty) records every
offset whose key gets a later offset in the same table: after a whole range is inserted, a record of
that range is its key's latest iff its bit is clear, with no second lookup.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from kafkalog.format.intrinsics import load_u64, prefetch_row

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

INLINE_KEY_BYTES = 16
SLOT_WORDS = 4
AHEAD = 8  # rows in flight; 4 is measurably slower, 8-16 the same
_RING = 16  # > AHEAD, a power of two

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


@numba.njit(cache=True, nogil=True, inline="always")
def _word(data: U8, p: Any, n: Any) -> Any:
    """Up to 8 bytes at ``p``, little-endian, zero-padded: one 8-byte load where the buffer allows."""
    w = np.uint64(0)
    if n <= 0:
        return w
    if p + 8 <= len(data):
        w = load_u64(data, p)  # type: ignore[call-arg]  # typingctx is numba's
        if n < 8:
            w &= (np.uint64(1) << np.uint64(8 * n)) - np.uint64(1)
        return w
    for j in range(min(n, 8)):
        w |= np.uint64(data[p + j]) << np.uint64(8 * j)
    return w


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(h: Any) -> Any:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@numba.njit(cache=True, nogil=True, inline="always")
def _hash_key(data: U8, p: Any, n: Any) -> tuple[Any, Any, Any]:
    """(hash, w0, w1) of the key ``data[p:p + n]``: w0 its first 8 bytes, w1 the next 8 (keys up
    to 16 bytes; the caller replaces w1 by an arena position for longer keys)."""
    w0 = _word(data, p, n)
    w1 = _word(data, p + 8, n - 8)
    h = (w0 * _M1) ^ ((w1 * _M2) >> np.uint64(7)) ^ np.uint64(n)
    for q in range(p + 16, p + n, 8):
        h = _mix(h) ^ _word(data, q, p + n - q) * _M1
    return _mix(h) | np.uint64(1), w0, w1


@numba.njit(cache=True, nogil=True, inline="always")
def _tag(h: Any, n: Any) -> Any:
    return np.int64((h & np.uint64(~0xFF & 0xFFFFFFFFFFFFFFFF)) | np.uint64(min(n, 255)) | np.uint64(1 << 8))


@numba.njit(cache=True, nogil=True, inline="always")
def _home(tag: Any, capacity: Any) -> Any:
    return np.int64(((np.uint64(tag) >> np.uint64(32)) * np.uint64(capacity)) >> np.uint64(32))


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


@numba.njit(cache=True, nogil=True, inline="always")
def _mark(superseded: U64, base: Any, offset: Any) -> None:
    d = offset - base
    if 0 <= d < 64 * len(superseded):
        superseded[d >> 6] |= np.uint64(1) << np.uint64(d & 63)


@numba.njit(cache=True, nogil=True, inline="always")
def _stage(ring: Any, k: Any, table: Any, data: U8, key_pos: I64, key_len: I32, rows: I64) -> None:
    """Hash row ``k`` into the ring and prefetch its home slot."""
    r = rows[k]
    n = key_len[r]
    h, w0, w1 = _hash_key(data, key_pos[r], n)
    tag = _tag(h, n)
    home = _home(tag, len(table))
    prefetch_row(table, home)  # type: ignore[call-arg]  # typingctx is numba's
    i = k & (_RING - 1)
    ring[i, 0] = tag
    ring[i, 1] = home
    ring[i, 2] = np.int64(w0)
    ring[i, 3] = np.int64(w1)


@numba.njit(cache=True, nogil=True, inline="always")
def _pipeline(table: Any, data: U8, key_pos: I64, key_len: I32, rows: I64) -> Any:
    """The ring with the first ``AHEAD`` rows staged."""
    ring = np.empty((_RING, 4), dtype=np.int64)
    for k in range(min(AHEAD, len(rows))):
        _stage(ring, k, table, data, key_pos, key_len, rows)
    return ring


@numba.njit(cache=True, nogil=True, inline="always")
def _next(ring: Any, k: Any, table: Any, data: U8, key_pos: I64, key_len: I32, rows: I64) -> tuple[Any, Any, Any, Any]:
    """Stage row ``k + AHEAD``, then (tag, home slot, w0, w1) of row ``k``."""
    if k + AHEAD < len(rows):
        _stage(ring, k + AHEAD, table, data, key_pos, key_len, rows)
    i = k & (_RING - 1)
    return ring[i, 0], ring[i, 1], ring[i, 2], ring[i, 3]


@numba.njit(cache=True, nogil=True)
def table_put(table: Any, arena: U8, arena_used: int, data: U8, key_pos: I64, key_len: I32, offsets: I64,
              rows: I64, superseded: U64, base: int) -> tuple[int, int]:
    """Insert or update key → offset for each row (the larger offset wins; the smaller one is marked
    in ``superseded``); returns (new keys, arena used).

    The caller guarantees room: a load factor below 0.8 after the inserts and arena space (4 + length)
    for every key longer than 16 bytes.
    """
    capacity = len(table)
    added = 0
    total = len(rows)
    ring = _pipeline(table, data, key_pos, key_len, rows)
    for k in range(total):
        tag, s, w0, w1 = _next(ring, k, table, data, key_pos, key_len, rows)
        r = rows[k]
        n = key_len[r]
        offset = offsets[r]
        while True:
            if table[s, 0] == 0:
                table[s, 0] = tag
                table[s, 1] = offset
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
                if offset > table[s, 1]:
                    _mark(superseded, base, table[s, 1])
                    table[s, 1] = offset
                else:
                    _mark(superseded, base, offset)
                break
            s += 1
            if s == capacity:
                s = 0
    return added, arena_used


@numba.njit(cache=True, nogil=True)
def table_get(table: Any, arena: U8, data: U8, key_pos: I64, key_len: I32, rows: I64) -> I64:
    """The offset stored for each row's key, -1 when the key is absent."""
    capacity = len(table)
    total = len(rows)
    out = np.full(total, -1, dtype=np.int64)
    ring = _pipeline(table, data, key_pos, key_len, rows)
    for k in range(total):
        tag, s, w0, w1 = _next(ring, k, table, data, key_pos, key_len, rows)
        while table[s, 0] != 0:
            if table[s, 0] == tag and table[s, 2] == w0:
                r = rows[k]
                if _slot_matches(table, s, tag, key_len[r], w0, w1, data, key_pos[r], arena):
                    out[k] = table[s, 1]
                    break
            s += 1
            if s == capacity:
                s = 0
    return out


@numba.njit(cache=True, nogil=True)
def table_rehash(table: Any, new: Any) -> None:
    """Move every entry into the (larger, empty) new table; the tag keeps the hash bits that pick
    the home slot, so no key is hashed again."""
    capacity = len(new)
    old = len(table)
    for s in range(old):
        ahead = s + AHEAD
        if ahead < old and table[ahead, 0] != 0:
            prefetch_row(new, _home(table[ahead, 0], capacity))  # type: ignore[call-arg]
        tag = table[s, 0]
        if tag == 0:
            continue
        d = _home(tag, capacity)
        while new[d, 0] != 0:
            d += 1
            if d == capacity:
                d = 0
        for w in range(SLOT_WORDS):
            new[d, w] = table[s, w]


@numba.njit(cache=True, nogil=True)
def bits_set(bitmap: U64, base: int, offsets: I64) -> npt.NDArray[np.bool_]:
    """Whether each offset's bit is set (offsets outside the bitmap: False)."""
    out = np.zeros(len(offsets), dtype=np.bool_)
    limit = 64 * len(bitmap)
    for i in range(len(offsets)):
        d = offsets[i] - base
        if 0 <= d < limit:
            out[i] = (bitmap[d >> 6] >> np.uint64(d & 63)) & np.uint64(1) != 0
    return out
