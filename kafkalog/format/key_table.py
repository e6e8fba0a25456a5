"""Compiled kernels of the cleaner's key map: an open-addressing table keyed by exact key bytes.

A 64-bit hash only picks the slot; equality is always decided on the key bytes (Kafka's MD5 map
treats colliding digests as one key). A slot is one 32-byte row of an int64 array::

    [tag, offset, w0, w1]    tag = the hash's high 56 bits | min(key length, 255) | 1 << 8 (never 0)

Keys of up to 16 bytes live in ``w0``/``w1`` and are compared inside the slot; longer keys keep
their first 8 bytes in ``w0`` and their arena position in ``w1`` and are compared against the arena
(length-prefixed). The home slot is ``(hash_hi * capacity) >> 32``: any capacity works, so the table
is sized to the keys rather than to a power of two.

The table is larger than the caches: probed in log order, every row is a random access that misses
the caches and the TLB (a page walk, nested under virtualisation). Rows are therefore hashed first,
ordered by home slot a 32nd of the table at a time (a counting sort on the tag's top bits), and then
probed in that order with the slot ``AHEAD`` rows later prefetched: the probes sweep the table from
start to end, so neighbouring probes share pages and cache lines and several misses are in flight at
once. The map's own pass hashes keys straight from the records sections (``hash_record_keys``),
without record columns.

The helpers are plain compiled functions, which LLVM inlines: numba's own inlining
(``inline="always"``) leaves reference-count calls on the array arguments inside the loops, which
cost more than hashing a short key does.

``superseded`` (a bitmap over the offsets ``[base, base + 64 * len)``, or empty) records every
offset whose key gets a later offset in the same table: after a whole range is inserted, a record of
that range is its key's latest iff its bit is clear, with no second lookup.

A map may be one of ``parts`` tables that share the keys by hash (``part`` = ``_owner(tag, parts)``):
the kernels then insert and answer only the rows whose key that table owns, so tables built in
parallel over the same records hold disjoint keys, and their bitmaps OR into the whole map's.
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
AHEAD = 8  # rows in flight
BUCKET_BITS = 5  # rows are probed a 32nd of the table at a time (more buckets: scattering costs more)

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _mix(h: Any) -> Any:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _hash_key(data: U8, p: Any, n: Any) -> tuple[Any, Any, Any]:
    """(hash, w0, w1) of the key ``data[p:p + n]``: w0 its first 8 bytes, w1 the next 8 (keys up
    to 16 bytes; the caller replaces w1 by an arena position for longer keys)."""
    w0 = _word(data, p, n)
    w1 = _word(data, p + 8, n - 8)
    h = (w0 * _M1) ^ ((w1 * _M2) >> np.uint64(7)) ^ np.uint64(n)
    for q in range(p + 16, p + n, 8):
        h = _mix(h) ^ _word(data, q, p + n - q) * _M1
    return _mix(h) | np.uint64(1), w0, w1


@numba.njit(cache=True, nogil=True)
def _tag(h: Any, n: Any) -> Any:
    return np.int64((h & np.uint64(~0xFF & 0xFFFFFFFFFFFFFFFF)) | np.uint64(min(n, 255)) | np.uint64(1 << 8))


@numba.njit(cache=True, nogil=True)
def _home(tag: Any, capacity: Any) -> Any:
    return np.int64(((np.uint64(tag) >> np.uint64(32)) * np.uint64(capacity)) >> np.uint64(32))


@numba.njit(cache=True, nogil=True)
def _bucket(tag: Any) -> Any:
    """The tag's top bits: buckets of rows in the order of their home slots (``_home`` is monotonic in them)."""
    return np.int64(np.uint64(tag) >> np.uint64(64 - BUCKET_BITS))


@numba.njit(cache=True, nogil=True)
def _owner(tag: Any, parts: Any) -> Any:
    """Which of ``parts`` tables owns a key: hash bits the home slot and the bucket do not use
    (they use the top 32), so each table's keys still spread over all of its slots."""
    return np.int64((np.uint64(tag) >> np.uint64(9)) & np.uint64(0x7FFFFF)) % parts


@numba.njit(cache=True, nogil=True)
def _owns(tag: Any, part: Any, parts: Any) -> Any:
    return parts == 1 or _owner(tag, parts) == part


@numba.njit(cache=True, nogil=True)
def owned_rows(hashed: I64, part: int, parts: int) -> int:
    """How many hashed rows ``part`` of ``parts`` owns."""
    if parts == 1:
        return len(hashed)
    count = 0
    for k in range(len(hashed)):
        if _owns(hashed[k, 0], part, parts):
            count += 1
    return count


@numba.njit(cache=True, nogil=True)
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
def _mark(superseded: U64, base: Any, offset: Any) -> None:
    d = offset - base
    if 0 <= d < 64 * len(superseded):
        superseded[d >> 6] |= np.uint64(1) << np.uint64(d & 63)


# A hashed row, one per record to insert or look up: (tag, w0, w1, offset, key position, key length).
HASHED_WORDS = 6


@numba.njit(cache=True, nogil=True)
def _hashed_key(data: U8, p: Any, n: Any) -> tuple[Any, Any, Any]:
    """(tag, w0, w1) of the key ``data[p:p + n]``."""
    h, w0, w1 = _hash_key(data, p, n)
    return _tag(h, n), np.int64(w0), np.int64(w1)


@numba.njit(cache=True, nogil=True)
def hash_rows(data: U8, key_pos: I64, key_len: I32, offsets: I64, rows: I64, hashed: I64) -> None:
    """Hash the key of each of ``rows`` (columns of :mod:`kafkalog.format.scan`) into ``hashed``."""
    for k in range(len(rows)):
        r = rows[k]
        p, n = key_pos[r], key_len[r]
        hashed[k, 0], hashed[k, 1], hashed[k, 2] = _hashed_key(data, p, n)
        hashed[k, 3] = offsets[r]
        hashed[k, 4] = p
        hashed[k, 5] = n


@numba.njit(cache=True, nogil=True)
def _varint(data: U8, p: Any, end: Any, max_bytes: Any) -> tuple[Any, Any]:
    """(value, next position) of the zig-zag varint at ``p``, decoded by the rules of the record
    decoder's ``scan._varint`` (at most ``max_bytes``; a 5-byte one is a Java int, bits past 31
    dropped), so both passes read the same offsets and keys; position -1 where that one reports an
    error. That one also says which error, for its messages; the map pass needs only that there is
    one (``scan_records`` then reports it), so its loop carries no error state."""
    u = np.uint64(0)
    shift = np.uint64(0)
    limit = np.uint64(7 * max_bytes)
    while p < end and shift < limit:
        b = data[p]
        p += 1
        u |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:
                u &= np.uint64(0xFFFFFFFF)
            return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1)), p
        shift += np.uint64(7)
    return 0, -1


@numba.njit(cache=True, nogil=True)
def hash_record_keys(data: U8, sec_start: I64, sec_end: I64, counts: I64, base_offset: I64, first: int, end: int,
                     hashed: I64, part: int, parts: int) -> tuple[int, int]:
    """Hash the key of every keyed record in ``[first, end)`` of the v2 records sections straight
    from the bytes (no record columns), keeping the rows whose key ``part`` of ``parts`` owns:
    (rows written, -1), or (rows, batch) for the first batch whose records do not parse, which the
    caller decodes with :func:`scan.scan_records` for its error. Only the framing of each record is
    read: its length, offset delta and key."""
    i = 0
    for b in range(len(sec_start)):
        p = sec_start[b]
        stop = sec_end[b]
        for _ in range(counts[b]):
            body_len, q = _varint(data, p, stop, 5)
            if q < 0 or body_len < 0 or q + body_len > stop:
                return i, b
            next_record = q + body_len
            _ts, q = _varint(data, q + 1, next_record, 10)  # after the attributes byte
            if q < 0:
                return i, b
            delta, q = _varint(data, q, next_record, 5)
            if q < 0:
                return i, b
            n, q = _varint(data, q, next_record, 5)
            if q < 0 or q + max(n, 0) > next_record:
                return i, b
            offset = base_offset[b] + delta
            if n >= 0 and first <= offset < end:
                tag, w0, w1 = _hashed_key(data, q, n)
                if _owns(tag, part, parts):
                    hashed[i, 0], hashed[i, 1], hashed[i, 2] = tag, w0, w1
                    hashed[i, 3] = offset
                    hashed[i, 4] = q
                    hashed[i, 5] = n
                    i += 1
            p = next_record
    return i, -1


@numba.njit(cache=True, nogil=True)
def _order_by_bucket(hashed: I64, staged: I64, part: int, parts: int) -> int:
    """The rows of ``hashed`` that ``part`` of ``parts`` owns into ``staged`` in the order of their
    home slots, a bucket (the tag's top ``BUCKET_BITS``) at a time, stable within one (a counting
    sort), each with its index appended; returns how many. Probing in that order walks the table
    from start to end: each bucket's slots stay in the caches and the TLB, where probes in log
    order would each miss both."""
    starts = np.zeros((1 << BUCKET_BITS) + 1, dtype=np.int64)
    for k in range(len(hashed)):
        if _owns(hashed[k, 0], part, parts):
            starts[_bucket(hashed[k, 0]) + 1] += 1
    for b in range(1, len(starts)):
        starts[b] += starts[b - 1]
    for k in range(len(hashed)):
        if not _owns(hashed[k, 0], part, parts):
            continue
        b = _bucket(hashed[k, 0])
        i = starts[b]
        starts[b] = i + 1
        for w in range(HASHED_WORDS):
            staged[i, w] = hashed[k, w]
        staged[i, HASHED_WORDS] = k
    return int(starts[-1])


@numba.njit(cache=True, nogil=True)
def table_put(table: Any, arena: U8, arena_used: int, data: U8, hashed: I64, superseded: U64, base: int,
              staged: I64, part: int, parts: int) -> tuple[int, int, int]:
    """Insert or update key → offset for each hashed row that ``part`` of ``parts`` owns (the larger
    offset wins; the smaller one is marked in ``superseded``); returns (new keys, arena used, rows
    inserted).

    The caller guarantees room: a load factor below 0.8 after the inserts, arena space (4 + length)
    for every key longer than 16 bytes, and ``staged`` of ``len(hashed)`` rows of ``HASHED_WORDS + 1``.
    """
    capacity = len(table)
    added = 0
    total = _order_by_bucket(hashed, staged, part, parts)
    for i in range(total):
        if i + AHEAD < total:
            prefetch_row(table, _home(staged[i + AHEAD, 0], capacity))  # type: ignore[call-arg]
        tag, w0, w1, offset, p, n = staged[i, 0], staged[i, 1], staged[i, 2], staged[i, 3], staged[i, 4], staged[i, 5]
        s = _home(tag, capacity)
        while True:
            if table[s, 0] == 0:
                table[s, 0] = tag
                table[s, 1] = offset
                table[s, 2] = w0
                if n > INLINE_KEY_BYTES:
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
            if _slot_matches(table, s, tag, n, w0, w1, data, p, arena):
                if offset > table[s, 1]:
                    _mark(superseded, base, table[s, 1])
                    table[s, 1] = offset
                else:
                    _mark(superseded, base, offset)
                break
            s += 1
            if s == capacity:
                s = 0
    return added, arena_used, total


@numba.njit(cache=True, nogil=True)
def table_get(table: Any, arena: U8, data: U8, hashed: I64, staged: I64, part: int, parts: int) -> I64:
    """The offset stored for each hashed row's key, -1 when the key is absent or not owned by
    ``part`` of ``parts`` (``staged`` as for ``table_put``)."""
    capacity = len(table)
    out = np.full(len(hashed), -1, dtype=np.int64)
    total = _order_by_bucket(hashed, staged, part, parts)
    for i in range(total):
        if i + AHEAD < total:
            prefetch_row(table, _home(staged[i + AHEAD, 0], capacity))  # type: ignore[call-arg]
        tag, w0, w1 = staged[i, 0], staged[i, 1], staged[i, 2]
        s = _home(tag, capacity)
        while table[s, 0] != 0:
            if _slot_matches(table, s, tag, staged[i, 5], w0, w1, data, staged[i, 4], arena):
                out[staged[i, HASHED_WORDS]] = table[s, 1]
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
