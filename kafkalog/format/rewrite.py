"""Compiled kernels for compaction: rebuilding v2 records and comparing them.

The cleaner's per-record work runs here, over the columns of :mod:`kafkalog.format.scan` (the key
map's kernels are in :mod:`kafkalog.format.key_table`):

* ``decide_records`` — which records a window keeps (``shouldRetainRecord``), in one pass.
* ``assemble_uncompressed`` — write the cleaned form of a segment's batches in one pass.
* ``records_equal`` — the verification's byte-for-byte comparison of retained records.
* ``rebuild_records`` — re-encode retained records against a new base timestamp: the timestamp
  delta is rewritten, the offset delta, key, value and headers are copied byte for byte (the batch
  keeps its base offset, so offset deltas stay valid).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from kafkalog.format import lz4_native
from kafkalog.format.intrinsics import copy_bytes, load_u64

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


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
        copy_bytes(out, q, data, rest, tail)
        q += tail
    return out


@numba.njit(cache=True, nogil=True)
def decide_records(batch_index: Any, key_len: I32, value_len: I32, offsets: I64, superseded: Any, latest_offset: int,
                   discard: Any, control: Any, retain_deletes: Any, batch_count: int) -> tuple[Any, ...]:
    """Kafka's ``shouldRetainRecord`` for every record of a window, in one pass: records of
    discarded (aborted) batches go; control records and records past the mapped range stay; a keyed
    record stays unless its key has a later offset (``superseded``), and a tombstone only while its
    batch retains deletes. Returns ``keep``; per batch the records retained, the records, whether a
    tombstone is kept, and where its rows start (``batch_count + 1`` entries); and the aborted,
    unkeyed and tombstone records removed."""
    rows = len(batch_index)
    keep = np.empty(rows, dtype=np.bool_)
    retained = np.zeros(batch_count, dtype=np.int64)
    counts = np.zeros(batch_count, dtype=np.int64)
    tombstone_kept = np.zeros(batch_count, dtype=np.bool_)
    aborted = unkeyed = tombstones = 0
    for r in range(rows):
        b = batch_index[r]
        keyed = key_len[r] >= 0
        by_key = keyed and not superseded[r] and (value_len[r] >= 0 or retain_deletes[b])
        kept = not discard[b] and (control[b] or offsets[r] > latest_offset or by_key)
        keep[r] = kept
        counts[b] += 1
        if kept:
            retained[b] += 1
            if keyed and value_len[r] < 0:
                tombstone_kept[b] = True
        elif not control[b]:
            if discard[b]:
                aborted += 1
            elif not keyed:
                unkeyed += 1
            elif not superseded[r]:
                tombstones += 1
    row_start = np.zeros(batch_count + 1, dtype=np.int64)  # rows come grouped by batch, in order
    for b in range(batch_count):
        row_start[b + 1] = row_start[b] + counts[b]
    return keep, retained, counts, tombstone_kept, row_start, aborted, unkeyed, tombstones


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
        pa, pb = a_skip[i], b_skip[i]
        j = 0
        while j + 8 <= la:  # eight bytes at a time
            if load_u64(a, pa + j) != load_u64(b, pb + j):  # type: ignore[call-arg]  # typingctx is numba's
                return i
            j += 8
        for k in range(j, la):
            if a[pa + k] != b[pb + k]:
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
            copy_bytes(out, q, data, pos, size[b])
            q += size[b]
            continue
        needs_crc[b] = True
        copy_bytes(out, q, data, pos, 61)
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
            copy_bytes(out, w, rec_data, rest, tail)
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


@numba.njit(cache=True, nogil=True)
def recompress_lz4(out: U8, end: int, starts: I64, header: U8, block_bytes: int, final: U8) -> tuple[int, I64]:
    """``out[:end]`` into ``final`` with the records section of each batch starting at ``starts``
    (ascending; its length field set) compressed in Kafka's lz4 frame: ``header``, then blocks of at
    most ``block_bytes`` as ``uint32 LE size | data`` (the data stored raw, size bit 31 set, when liblz4
    does not make it smaller), then a zero end mark. Returns the bytes written and the batches' new
    starts; their length fields are set, their CRCs are not. ``final`` has room for every section's
    ``compression.compress_bound``."""
    out_address = out.ctypes.data
    final_address = final.ctypes.data
    new_starts = np.empty(len(starts), dtype=np.int64)
    q = 0
    cursor = 0
    for j in range(len(starts)):
        s = starts[j]
        section_end = s + 12 + ((np.int64(out[s + 8]) << 24) | (np.int64(out[s + 9]) << 16)
                                | (np.int64(out[s + 10]) << 8) | np.int64(out[s + 11]))
        copy_bytes(final, q, out, cursor, s + 61 - cursor)  # what lies before, and the batch header
        q += s + 61 - cursor
        new_starts[j] = q - 61
        copy_bytes(final, q, header, 0, len(header))
        q += len(header)
        p = s + 61
        while p < section_end:
            chunk = min(block_bytes, section_end - p)
            written = lz4_native.compress_fast(  # type: ignore[call-overload]  # a numba ExternalFunction
                out_address + p, final_address + q + 4, chunk, len(final) - q - 4, 1)
            if written <= 0 or written >= chunk:  # incompressible: stored raw
                _put_le32(final, q, chunk | 0x80000000)
                copy_bytes(final, q + 4, out, p, chunk)
                q += 4 + chunk
            else:
                _put_le32(final, q, written)
                q += 4 + written
            p += chunk
        _put_le32(final, q, 0)
        q += 4
        _put_be(final, new_starts[j] + 8, q - new_starts[j] - 12, 4)
        cursor = section_end
    copy_bytes(final, q, out, cursor, end - cursor)
    return q + end - cursor, new_starts


@numba.njit(cache=True, nogil=True)
def _put_le32(out: U8, p: int, value: Any) -> None:
    v = np.int64(value)
    for j in range(4):
        out[p + j] = np.uint8(v & 0xFF)
        v >>= 8
