"""The bulk path: a whole segment's batches and records as columns, scanned in compiled code.

Creating a Python object per record caps throughput near 30 MB/s; scanning into numpy arrays with
numba-compiled loops reaches ~1.5 GB/s (see ``shared/guide/performance-notes.md``). Every bulk reader
(verify, dump, consume of a range, compaction) goes through :func:`scan_segment`.

Kernels are compiled with ``cache=True``: a cold compile costs seconds per process, a cached one a
fraction of a second. ``NUMBA_CACHE_DIR`` must point at a writable directory where the package
directory is not writable (Spark executors).

Kernels take byte buffers only through :func:`as_array`, which always gives a read-only array: numba
compiles and caches one specialisation per argument type, and a writable array (from a ``bytearray``
or a fresh numpy array) is a different type from the read-only one ``np.frombuffer(bytes)`` gives.

Positions in :class:`RecordColumns` index into ``RecordColumns.data``: the file buffer itself when
every batch is uncompressed v2, otherwise an arena holding each batch's decompressed records section,
one after the other in batch order. A buffer holding legacy (v0/v1) entries, alone or before v2
batches (a message format upgrade), takes a slower path batch by batch: its arena holds the bytes
every record spans, in order (``_mixed_records``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cramjam
import numba
import numpy as np
import numpy.typing as npt
from crc32c import crc32c as _crc32c_c  # what format.crc.crc32c calls; directly, in the per-batch loop

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.format import compression, legacy, lz4_native
from kafkalog.format.batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, TIMESTAMP_TYPE_MASK
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32, crc32c
from kafkalog.format.intrinsics import HARDWARE_CRC32C, crc32c_spans

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

_MIN_ENTRY_LENGTH = 14
_MIN_RECORD_BYTES = 7  # length, attributes, ts delta, offset delta, key len, value len, header count

# Error codes the record kernel returns (with the failing byte position).
_OK, _E_EOF, _E_BODY, _E_HEADERS, _E_SIZE, _E_VARINT, _E_NULL_HEADER_KEY = range(7)
_ERROR_TEXT = {
    _E_EOF: "premature EOF in a record",
    _E_BODY: "record body runs past the end of its batch",
    _E_HEADERS: "invalid header count",
    _E_SIZE: "record size does not match the bytes its fields take",
    _E_VARINT: "varint longer than its type allows",
    _E_NULL_HEADER_KEY: "invalid null header key",
}


@numba.njit(cache=True, nogil=True, inline="always")
def _be32(buf: U8, p: int) -> Any:
    v = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@numba.njit(cache=True, nogil=True, inline="always")
def _be64(buf: U8, p: int) -> Any:
    v = np.uint64(0)
    for i in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return np.int64(v)


@numba.njit(cache=True, nogil=True)
def _count_entries(buf: U8, start: int, end: int) -> tuple[int, int, int]:
    """(entries, valid end, bad position or -1) walking the offset/length envelope."""
    pos = start
    n = 0
    while pos < end - 17:
        length = _be32(buf, pos + 8)
        if length < _MIN_ENTRY_LENGTH:
            return n, pos, pos
        if pos > end - 12 - length:
            break
        n += 1
        pos += 12 + length
    return n, pos, -1


@numba.njit(cache=True, nogil=True)
def _fill_batches(buf: U8, start: int, count: int, cols: I64) -> None:
    """Fill the batch columns (one row per field) for ``count`` entries starting at ``start``."""
    pos = start
    for i in range(count):
        length = _be32(buf, pos + 8)
        magic = np.int64(buf[pos + 16])
        cols[0, i] = pos
        cols[1, i] = 12 + length
        cols[2, i] = _be64(buf, pos)
        cols[4, i] = magic
        if magic >= 2 and 12 + length >= 61:
            cols[3, i] = _be32(buf, pos + 23)
            cols[5, i] = buf[pos + 22]
            cols[6, i] = _be32(buf, pos + 17) & 0xFFFFFFFF
            cols[7, i] = _be32(buf, pos + 57)
            cols[8, i] = _be64(buf, pos + 27)
            cols[9, i] = _be64(buf, pos + 35)
            cols[10, i] = _be64(buf, pos + 43)
            hi = np.int64(buf[pos + 51])
            cols[11, i] = ((hi << 8) | buf[pos + 52]) - (65536 if hi >= 128 else 0)
            cols[12, i] = _be32(buf, pos + 53)
            cols[13, i] = _be32(buf, pos + 12)
        elif magic >= 2:  # shorter than a v2 header: find_corrupt_batch / scan_records report it
            for row in (6, 8, 9, 10, 11, 12, 13):
                cols[row, i] = -1
            cols[3, i] = 0
            cols[5, i] = 0
            cols[7, i] = 0
        else:
            cols[3, i] = 0
            cols[5, i] = buf[pos + 17]
            cols[6, i] = _be32(buf, pos + 12) & 0xFFFFFFFF
            cols[7, i] = -1
            ts: Any = np.int64(-1)
            if magic == 1 and length >= 14:
                ts = _be64(buf, pos + 18)
            cols[8, i] = ts
            cols[9, i] = ts
            cols[10, i] = -1
            cols[11, i] = -1
            cols[12, i] = -1
            cols[13, i] = -1
        pos += 12 + length


_BATCH_FIELDS = ("position", "size", "base_offset", "last_offset_delta", "magic", "attributes", "crc",
                 "records_count", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "partition_leader_epoch")


@dataclass(frozen=True)
class BatchColumns:
    """Header fields of every complete entry of a buffer, one array per field (int64).

    For legacy entries ``base_offset`` is the entry's offset (a wrapper's last inner offset),
    ``records_count`` is -1 and the producer fields are -1.
    """

    position: I64
    size: I64
    base_offset: I64
    last_offset_delta: I64
    magic: I64
    attributes: I64
    crc: I64
    records_count: I64
    base_timestamp: I64
    max_timestamp: I64
    producer_id: I64
    producer_epoch: I64
    base_sequence: I64
    partition_leader_epoch: I64
    valid_end: int  # where the last complete entry ends; bytes beyond are a torn tail

    def __len__(self) -> int:
        return len(self.position)

    @property
    def last_offset(self) -> I64:
        return self.base_offset + self.last_offset_delta

    def window(self, lo: int, hi: int) -> BatchColumns:
        """Entries ``lo`` to ``hi`` (views, no copy)."""
        fields = {name: getattr(self, name)[lo:hi] for name in _BATCH_FIELDS}
        end = int(self.position[hi - 1] + self.size[hi - 1]) if hi > lo else self.valid_end
        return BatchColumns(**fields, valid_end=end)

    def windows(self, max_bytes: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` runs of consecutive entries of at most ``max_bytes`` each (or a single entry
        larger than that), covering every entry: a segment decoded a window at a time keeps its
        columns in the caches and needs no more memory than a window's."""
        if not len(self):
            return []
        ends = self.position + self.size - int(self.position[0])
        runs = []
        lo = 0
        while lo < len(self):
            limit = int(ends[lo - 1]) + max_bytes if lo else max_bytes
            hi = max(lo + 1, int(np.searchsorted(ends, limit, side="right")))
            runs.append((lo, hi))
            lo = hi
        return runs


def as_array(buf: bytes | bytearray | memoryview | U8) -> U8:
    """``buf`` as a read-only uint8 array, without a copy (see the module docstring for why read-only)."""
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def scan_batches(buf: bytes | bytearray | memoryview | U8, start: int = 0, end: int | None = None,
                 where: str = "") -> BatchColumns:
    """Frame every entry of a ``.log`` buffer (``FileLogInputStream`` rules) and read its header.

    Raises :class:`CorruptRecordError` on a length field below 14 (a zero-filled or garbage region);
    an incomplete final entry just ends the scan (``valid_end`` says where).
    """
    arr = as_array(buf)
    end = len(arr) if end is None else end
    count, valid_end, bad = _count_entries(arr, start, end)
    if bad >= 0:
        raise CorruptRecordError(
            f"{where}record size {_be32_py(arr, bad + 8)} at byte {bad} is smaller than the minimum "
            f"record overhead ({_MIN_ENTRY_LENGTH})"
        )
    cols = np.empty((len(_BATCH_FIELDS), count), dtype=np.int64)
    _fill_batches(arr, start, count, cols)
    return BatchColumns(**dict(zip(_BATCH_FIELDS, cols, strict=True)), valid_end=int(valid_end))


def _be32_py(arr: U8, p: int) -> int:
    return int.from_bytes(bytes(arr[p:p + 4]), "big", signed=True)


_VECTOR_CHECK_FROM = 8  # entries; below this the plain loop costs less than the numpy set-up


def find_corrupt_batch(buf: bytes | bytearray | memoryview | U8, batches: BatchColumns,
                       where: str = "") -> str | None:
    """Check magic, size and CRC of every entry; describe the first failure, or None."""
    view = memoryview(as_array(buf))  # type: ignore[arg-type]  # ndarray is a buffer
    n = len(batches)
    if n >= _VECTOR_CHECK_FROM and ((batches.magic == 2) & (batches.size >= RECORD_BATCH_OVERHEAD)).all():
        # v2 batches of sane sizes, the usual segment: one C call per batch, all compared at once.
        computed = batch_crcs(as_array(buf), batches.position, batches.position + batches.size)
        bad = np.flatnonzero(computed != batches.crc)
        return _entry_problem(view, batches, int(bad[0]), where) if len(bad) else None
    for i in range(n):
        problem = _entry_problem(view, batches, i, where)
        if problem is not None:
            return problem
    return None


def find_backward_batch(batches: BatchColumns, previous_last_offset: int = -1, where: str = "",
                        first_byte: int = 0) -> str | None:
    """Describe the first batch whose base offset is not above the last offset before it (that of
    the batch before, or ``previous_last_offset`` for the first), or None. No CRC covers a base
    offset: a damaged one shows only as offsets going backwards. ``first_byte`` is where
    ``batches`` were scanned from, for the byte position in the message."""
    if not len(batches):
        return None
    previous = np.concatenate(([previous_last_offset], batches.last_offset[:-1]))
    backwards = np.flatnonzero(batches.base_offset <= previous)
    if not len(backwards):
        return None
    j = int(backwards[0])
    return (f"{where}batch at byte {first_byte + int(batches.position[j])} starts at offset "
            f"{int(batches.base_offset[j])}, not after offset {int(previous[j])}")


def batch_crcs(data: U8, positions: I64, ends: I64) -> I64:
    """The CRC-32C of v2 batches starting at ``positions`` and ending at ``ends`` (from their
    attributes field on): in one compiled loop where the CPU has a crc32 instruction, else one C
    call per batch."""
    if HARDWARE_CRC32C:
        return crc32c_spans(data, positions + 21, ends)  # type: ignore[no-any-return]
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray is a buffer
    spans = map(slice, (positions + 21).tolist(), ends.tolist())
    return np.fromiter(map(_crc32c_c, map(view.__getitem__, spans)), dtype=np.int64, count=len(positions))


def _entry_problem(view: memoryview, batches: BatchColumns, i: int, where: str) -> str | None:
    """What is wrong with entry ``i``'s magic, size or CRC, or None."""
    pos, size, magic = int(batches.position[i]), int(batches.size[i]), int(batches.magic[i])
    offset = int(batches.base_offset[i])
    if magic > 2 or magic < 0:
        return f"{where}invalid magic {magic} in the entry at byte {pos} (offset {offset})"
    if magic == 2:
        if size < RECORD_BATCH_OVERHEAD:
            return f"{where}batch at byte {pos} (offset {offset}) is {size} bytes, below the 61-byte header"
        computed = crc32c(view[pos + 21:pos + size])
    else:
        overhead = 12 + (legacy.RECORD_OVERHEAD_V0 if magic == 0 else legacy.RECORD_OVERHEAD_V1)
        if size < overhead:
            return f"{where}legacy entry at byte {pos} (offset {offset}) is {size} bytes, too small"
        computed = crc32(view[pos + 16:pos + size])
    if computed != int(batches.crc[i]):
        return (f"{where}record is corrupt at byte {pos} (offset {offset}): "
                f"stored crc = {int(batches.crc[i])}, computed crc = {computed}")
    return None


@numba.njit(cache=True, nogil=True, inline="always")
def _varint(buf: U8, p: int, end: int, max_bytes: int) -> Any:
    """(value, next position, error code)."""
    u = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if p >= end:
            return 0, p, _E_EOF
        b = buf[p]
        p += 1
        u |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:  # a Java int: bits of the 5th byte past bit 31 are dropped
                u &= np.uint64(0xFFFFFFFF)
            return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1)), p, _OK
        shift += np.uint64(7)
    return 0, p, _E_VARINT


@numba.njit(cache=True, nogil=True)
def _scan_records(data: U8, sec_start: I64, sec_end: I64, counts: I64, base_offset: I64,
                  base_ts: I64, log_append: npt.NDArray[np.bool_], max_ts: I64, out: I64,
                  out32: I32) -> tuple[int, int, int]:
    """Decode every record of every section into ``out``/``out32``; (error, batch, byte) on failure.

    ``out`` rows: offset, timestamp, key_pos, value_pos, headers_pos, record_pos.
    ``out32`` rows: batch_index, key_len, value_len, headers_count, record_size.
    """
    r = 0
    for b in range(len(sec_start)):
        p = sec_start[b]
        end = sec_end[b]
        for _ in range(counts[b]):
            rec_start = p
            body_len, p, err = _varint(data, p, end, 5)
            if err != _OK:
                return err, b, p
            body_end = p + body_len
            if body_len < 0 or body_end > end:
                return _E_BODY, b, p
            p += 1
            ts_delta, p, err = _varint(data, p, body_end, 10)
            if err != _OK:
                return err, b, p
            off_delta, p, err = _varint(data, p, body_end, 5)
            if err != _OK:
                return err, b, p
            key_len, p, err = _varint(data, p, body_end, 5)
            if err != _OK:
                return err, b, p
            key_pos = p
            if key_len > 0:
                p += key_len
            if p > body_end:
                return _E_EOF, b, p
            value_len, p, err = _varint(data, p, body_end, 5)
            if err != _OK:
                return err, b, p
            value_pos = p
            if value_len > 0:
                p += value_len
            if p > body_end:
                return _E_EOF, b, p
            n_headers, p, err = _varint(data, p, body_end, 5)
            if err != _OK:
                return err, b, p
            if n_headers < 0 or n_headers > body_end - p:
                return _E_HEADERS, b, p
            headers_pos = p
            for _h in range(n_headers):
                hk, p, err = _varint(data, p, body_end, 5)
                if err != _OK:
                    return err, b, p
                if hk < 0:
                    return _E_NULL_HEADER_KEY, b, p
                p += hk
                if p > body_end:
                    return _E_EOF, b, p
                hv, p, err = _varint(data, p, body_end, 5)
                if err != _OK:
                    return err, b, p
                if hv > 0:
                    p += hv
                if p > body_end:
                    return _E_EOF, b, p
            if p != body_end:
                return _E_SIZE, b, p
            out[0, r] = base_offset[b] + off_delta
            out[1, r] = max_ts[b] if log_append[b] else base_ts[b] + ts_delta
            out[2, r] = key_pos
            out[3, r] = value_pos
            out[4, r] = headers_pos
            out[5, r] = rec_start
            out32[0, r] = b
            out32[1, r] = key_len if key_len >= 0 else -1  # any negative length is null

            out32[2, r] = value_len if value_len >= 0 else -1
            out32[3, r] = n_headers
            out32[4, r] = p - rec_start
            r += 1
        if p != end and counts[b] > 0:  # Kafka's iterator never looks inside a batch of 0 records
            return _E_SIZE, b, p
    return _OK, -1, -1


@dataclass(frozen=True)
class RecordColumns:
    """Every record of a segment as columns; positions index into ``data``. ``record_pos`` and
    ``record_size`` span a v2 record from its length varint on, a legacy record's message from its
    CRC on."""

    data: U8
    batch_index: I32
    offset: I64
    timestamp: I64
    key_pos: I64
    key_len: I32  # -1: null key
    value_pos: I64
    value_len: I32  # -1: null value (a tombstone)
    headers_pos: I64
    headers_count: I32
    record_pos: I64
    record_size: I32

    def __len__(self) -> int:
        return len(self.offset)

    def key(self, i: int) -> bytes | None:
        n = int(self.key_len[i])
        return None if n < 0 else self.data[self.key_pos[i]:self.key_pos[i] + n].tobytes()

    def value(self, i: int) -> bytes | None:
        n = int(self.value_len[i])
        return None if n < 0 else self.data[self.value_pos[i]:self.value_pos[i] + n].tobytes()

    def legacy_magic(self, rows: I64) -> I64:
        """The magic of each legacy (v0/v1) record of ``rows``: a wrapper's inner records can have
        another magic than the wrapper (KAFKA-4298). A legacy record's ``record_pos`` is its CRC's."""
        return self.data[self.record_pos[rows] + 4].astype(np.int64)

    def header_keys(self, i: int) -> list[str]:
        from kafkalog.format.varint import decode_varint

        keys = []
        p, end = int(self.headers_pos[i]), int(self.record_pos[i] + self.record_size[i])
        view = memoryview(self.data)  # type: ignore[arg-type]  # ndarray is a buffer
        for _ in range(int(self.headers_count[i])):
            n, p = decode_varint(view, p, end)
            keys.append(view[p:p + n].tobytes().decode("utf-8", "replace"))
            p += n
            n, p = decode_varint(view, p, end)
            p += max(n, 0)
        return keys


class ColumnWorkspace:
    """Reusable memory for :func:`scan_records`' columns.

    Decoding segment after segment into the same arrays avoids writing fresh memory each time: every
    fresh page is a page fault (more where the hypervisor takes freed guest memory back), while the
    decoding writes each column byte only once, so the faults can cost more than the decoding. Columns
    returned while using a workspace are views into it: they are valid until the next scan with it.
    """

    def __init__(self) -> None:
        self.out = np.empty((6, 0), dtype=np.int64)
        self.out32 = np.empty((5, 0), dtype=np.int32)

    def reserve(self, records: int) -> tuple[I64, I32]:
        if self.out.shape[1] < records:
            capacity = max(records, self.out.shape[1] * 5 // 4)
            self.out = np.empty((6, capacity), dtype=np.int64)
            self.out32 = np.empty((5, capacity), dtype=np.int32)
        return self.out, self.out32


@dataclass(frozen=True)
class RecordSections:
    """The records sections of v2 batches, validated up to the records themselves: section ``i`` of
    batch ``i`` is ``data[sec_start[i]:sec_end[i]]`` and holds ``counts[i]`` records. ``data`` is the
    buffer itself when no batch is compressed, otherwise an arena of the decompressed sections."""

    data: U8
    sec_start: I64
    sec_end: I64
    counts: I64
    decompressed: bool


def record_sections(buf: bytes | bytearray | memoryview | U8, batches: BatchColumns,
                    where: str = "") -> RecordSections:
    """The records sections of ``batches`` (all magic 2), decompressed, with Kafka's checks of the
    batch header fields that frame them."""
    arr = as_array(buf)
    short = (batches.magic >= 2) & (batches.size < RECORD_BATCH_OVERHEAD)
    if short.any():
        i = int(np.argmax(short))
        raise CorruptRecordError(
            f"{where}batch at byte {int(batches.position[i])} (offset {int(batches.base_offset[i])}) is "
            f"{int(batches.size[i])} bytes, below the 61-byte header"
        )
    codec = batches.attributes & 0x07
    sec_start = batches.position + RECORD_BATCH_OVERHEAD
    sec_end = batches.position + batches.size
    data = arr
    if len(batches) and codec.any():
        data, sec_start, sec_end = _decompress_sections(arr, batches, codec, where)
    counts = batches.records_count
    if len(batches) and (counts < 0).any():
        i = int(np.argmax(counts < 0))
        raise InvalidRecordError(f"{where}batch at byte {int(batches.position[i])} has a negative record count")
    too_many = counts * _MIN_RECORD_BYTES > (sec_end - sec_start)
    if too_many.any():
        i = int(np.argmax(too_many))
        raise InvalidRecordError(
            f"{where}batch at byte {int(batches.position[i])} (offset {int(batches.base_offset[i])}): "
            f"incorrect declared batch size, {int(counts[i])} records cannot fit in "
            f"{int(sec_end[i] - sec_start[i])} bytes"
        )
    return RecordSections(as_array(data), sec_start, sec_end, counts, data is not arr)


def scan_records(buf: bytes | bytearray | memoryview | U8, batches: BatchColumns,
                 where: str = "", workspace: ColumnWorkspace | None = None) -> RecordColumns:
    """Decode every record of every entry in ``batches`` with Kafka's read-time validation."""
    arr = as_array(buf)
    if len(batches) and int(batches.magic.min()) < 2:
        return _mixed_records(arr, batches, where)
    return _v2_records(arr, batches, where, workspace)


def _v2_records(arr: U8, batches: BatchColumns, where: str, workspace: ColumnWorkspace | None) -> RecordColumns:
    """``scan_records`` of v2 batches: one compiled pass over their (decompressed) records sections."""
    sections = record_sections(arr, batches, where)
    data, sec_start, sec_end, counts = sections.data, sections.sec_start, sections.sec_end, sections.counts
    total = int(counts.sum())
    if workspace is None:
        out = np.empty((6, total), dtype=np.int64)
        out32 = np.empty((5, total), dtype=np.int32)
    else:
        out, out32 = workspace.reserve(total)
    log_append = (batches.attributes & TIMESTAMP_TYPE_MASK) != 0
    err, b, p = _scan_records(data, sec_start, sec_end, counts, batches.base_offset,
                              batches.base_timestamp, log_append, batches.max_timestamp, out, out32)
    if err != _OK:
        raise InvalidRecordError(
            f"{where}batch at byte {int(batches.position[b])} (offset {int(batches.base_offset[b])}): "
            f"{_ERROR_TEXT.get(err, 'invalid record')} (at byte {p} of the records section)"
            if sections.decompressed else
            f"{where}batch at byte {int(batches.position[b])} (offset {int(batches.base_offset[b])}): "
            f"{_ERROR_TEXT.get(err, 'invalid record')} at byte {p}"
        )
    out, out32 = out[:, :total], out32[:, :total]
    return RecordColumns(data, out32[0], out[0], out[1], out[2], out32[1], out[3], out32[2], out[4],
                         out32[3], out[5], out32[4])


# Kinds of arena pieces (_list_pieces); a positive kind is an lz4 block of at most that many bytes.
_STORED, _WHOLE = -1, -2  # bytes copied as they are; a whole section through compression.decompress_parts
_LZ4_HC = np.array(compression.lz4_plain_header_checksums(), dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _list_pieces(src: U8, sec_start: I64, sec_end: I64, codec: I64, hc: I64, pieces: I64) -> int:
    """List the pieces a compressed segment's arena is made of, in order; return how many there are.

    Column ``i`` of ``pieces`` is (batch, start, length, kind) of the bytes ``src[start:start + length]``:
    kind ``_STORED``, copied as they are (an uncompressed section, a stored lz4 block); kind ``_WHOLE``,
    a whole section for ``compression.decompress_parts``; kind n > 0, an lz4 block that decompresses to
    at most n bytes. Only Kafka's plain lz4 frames (``compression.lz4_plain_header_checksums``) are split
    into blocks, and only when every block size is in bounds and the end mark is there: anything else
    is _WHOLE, so that compression produces its errors. Every batch gets at least one piece. Only the
    first ``pieces.shape[1]`` pieces are written; the caller reruns with room for all when there are more.
    """
    room = pieces.shape[1]
    n = 0
    for b in range(len(sec_start)):
        p = sec_start[b]
        end = sec_end[b]
        first = n
        if codec[b] == 0:
            if n < room:
                pieces[0, n], pieces[1, n], pieces[2, n], pieces[3, n] = b, p, end - p, _STORED
            n += 1
            continue
        ok = (codec[b] == 3 and end - p >= 11 and src[p] == 0x04 and src[p + 1] == 0x22 and src[p + 2] == 0x4D
              and src[p + 3] == 0x18 and src[p + 4] == 0x60)
        bd = np.int64(src[p + 5]) if ok else np.int64(0)
        if ok:
            ok = (bd & 0x8F) == 0 and (bd >> 4) >= 4 and np.int64(src[p + 6]) == hc[bd >> 4]
        if ok:
            max_block = np.int64(1) << (2 * (bd >> 4) + 8)
            q = p + 7
            while True:
                if q + 4 > end:
                    ok = False
                    break
                word = (np.int64(src[q]) | (np.int64(src[q + 1]) << 8) | (np.int64(src[q + 2]) << 16)
                        | (np.int64(src[q + 3]) << 24))
                q += 4
                if word == 0:  # the end mark; like Kafka, bytes after it are never read
                    break
                size = word & 0x7FFFFFFF
                if size > max_block or q + size > end:
                    ok = False
                    break
                if n < room:
                    pieces[0, n], pieces[1, n], pieces[2, n] = b, q, size
                    pieces[3, n] = _STORED if word & 0x80000000 else max_block
                n += 1
                q += size
            if ok and n == first:  # a frame without blocks: one empty piece
                if n < room:
                    pieces[0, n], pieces[1, n], pieces[2, n], pieces[3, n] = b, q, 0, _STORED
                n += 1
        if not ok:
            n = first
            if n < room:
                pieces[0, n], pieces[1, n], pieces[2, n], pieces[3, n] = b, p, end - p, _WHOLE
            n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _fill_arena(src: U8, pieces: I64, i: int, count: int, arena: U8, cursor: int, starts: I64, ends: I64,
                current: int) -> tuple[int, int, int]:
    """Write pieces ``i``, ``i + 1``, … of ``_list_pieces`` into the arena at ``cursor`` (stored bytes
    copied, lz4 blocks through liblz4), keeping each batch's ``starts``/``ends``. Stops at the first
    piece it leaves to Python: a whole section, one that does not fit, or a block liblz4 refuses (its
    batch's start is set); returns (that piece, or ``count``; cursor; current batch)."""
    src_address = src.ctypes.data
    arena_address = arena.ctypes.data
    while i < count:
        b, start, length, kind = pieces[0, i], pieces[1, i], pieces[2, i], pieces[3, i]
        if b != current:
            if current >= 0:
                ends[current] = cursor
            starts[b] = cursor
            current = b
        if kind == _WHOLE or cursor + (length if kind == _STORED else kind) > len(arena):
            break
        if kind == _STORED:
            arena[cursor:cursor + length] = src[start:start + length]
            cursor += length
        else:
            written = lz4_native.decompress_safe(  # type: ignore[call-overload]  # a numba ExternalFunction
                src_address + start, arena_address + cursor, length, kind)
            if written < 0:
                break
            cursor += written
        i += 1
    return i, cursor, current


def _decompress_sections(arr: U8, batches: BatchColumns, codec: I64,
                         where: str) -> tuple[U8, I64, I64]:
    """Build an arena of every batch's (decompressed) records section, one after the other.

    liblz4 decompresses each block of Kafka's plain lz4 frames straight into the arena; uncompressed
    sections and stored blocks are copied; any other section (other codecs, unusual lz4 frames) goes
    through ``compression.decompress_parts`` and its pieces are copied in, so every payload byte is
    copied at most once after decoding. Errors are compression's, for the first bad batch.
    """
    arr = as_array(arr)
    n = len(batches)
    sec_start = batches.position + RECORD_BATCH_OVERHEAD
    sec_end = batches.position + batches.size
    pieces = np.empty((4, 2 * n + 16), dtype=np.int64)  # room for a segment of batches of 1-2 blocks
    count = _list_pieces(arr, sec_start, sec_end, codec, _LZ4_HC, pieces)
    if count > pieces.shape[1]:
        pieces = np.empty((4, count), dtype=np.int64)
        _list_pieces(arr, sec_start, sec_end, codec, _LZ4_HC, pieces)
    lengths, kinds = pieces[2, :count], pieces[3, :count]
    src_total = int(lengths.sum())
    # Kafka's lz4 and the other codecs rarely reach 3:1 on real records; the arena grows if they do.
    estimate = np.where(kinds == _STORED, lengths, np.where(kinds > 0, np.minimum(kinds, 3 * lengths), 3 * lengths))
    arena = np.empty(int(estimate.sum()) + (1 << 16), dtype=np.uint8)
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    if lz4_native.AVAILABLE:
        return _decompress_natively(arr, batches, codec, where, pieces, count, arena, starts, ends, src_total)
    out, src = memoryview(arena), memoryview(arr)  # type: ignore[arg-type]  # ndarray is a buffer
    decompress_block_into = cramjam.lz4.decompress_block_into
    cursor, src_done, current, skip = 0, 0, -1, -1
    for b, start, length, kind in zip(*(row.tolist() for row in pieces[:, :count]), strict=True):
        if b != current:
            if current >= 0:
                ends[current] = cursor
            starts[b], current = cursor, b
        elif b == skip:
            continue
        if kind == _WHOLE:
            arena, cursor = _put_section(src, batches, b, codec, where, arena, cursor, src_done, src_total)
            out = memoryview(arena)  # type: ignore[arg-type]  # ndarray is a buffer
            src_done += length
            continue
        need = length if kind == _STORED else kind
        if cursor + need > len(arena):
            arena, out = _grown(arena, cursor, need, src_done, src_total)
        src_done += length
        if kind == _STORED:
            out[cursor:cursor + length] = src[start:start + length]
            cursor += length
            continue
        try:
            cursor += decompress_block_into(src[start:start + length], out[cursor:cursor + kind])
        except cramjam.DecompressionError:
            # The same liblz4 call fails in compression's lz4 reader, which raises the exact error.
            arena, cursor = _put_section(src, batches, b, codec, where, arena, int(starts[b]), src_done, src_total)
            out = memoryview(arena)  # type: ignore[arg-type]  # ndarray is a buffer
            skip = b  # the rest of this batch's blocks are in already
    ends[current] = cursor
    return as_array(arena[:cursor]), starts, ends


def _decompress_natively(arr: U8, batches: BatchColumns, codec: I64, where: str, pieces: I64, count: int,
                         arena: U8, starts: I64, ends: I64, src_total: int) -> tuple[U8, I64, I64]:
    """``_decompress_sections``' loop with liblz4 called from compiled code; Python handles only
    the pieces ``_fill_arena`` stops at, as the loop above does."""
    src = memoryview(arr)  # type: ignore[arg-type]  # ndarray is a buffer
    i, cursor, current = 0, 0, -1
    while True:
        i, cursor, current = _fill_arena(arr, pieces, i, count, arena, cursor, starts, ends, current)
        if i == count:
            break
        b, length, kind = int(pieces[0, i]), int(pieces[2, i]), int(pieces[3, i])
        need = length if kind == _STORED else kind
        if kind != _WHOLE and cursor + need > len(arena):
            arena, _ = _grown(arena, cursor, need, int(pieces[2, :i].sum()), src_total)
            continue
        # A whole section; or a block liblz4 refused, whose batch compression decodes whole and
        # raises its exact error (the same liblz4 call fails in its lz4 reader).
        arena, cursor = _put_section(src, batches, b, codec, where, arena, int(starts[b]),
                                     int(pieces[2, :i].sum()), src_total)
        while i < count and pieces[0, i] == b:  # the rest of this batch is in already
            i += 1
    if current >= 0:
        ends[current] = cursor
    return as_array(arena[:cursor]), starts, ends


def _put_section(src: memoryview, batches: BatchColumns, b: int, codec: I64, where: str, arena: U8, cursor: int,
                 src_done: int, src_total: int) -> tuple[U8, int]:
    """Batch ``b``'s records section decoded whole by compression (which raises its errors) and put
    into the arena at ``cursor``, grown if needed; returns the arena and the cursor after it."""
    parts = _decompress_section(src, batches, b, codec, where)
    need = sum(len(part) for part in parts)
    if cursor + need > len(arena):
        arena, _ = _grown(arena, cursor, need, src_done, src_total)
    return arena, _put_parts(memoryview(arena), cursor, parts)  # type: ignore[arg-type]  # ndarray is a buffer


def _decompress_section(src: memoryview, batches: BatchColumns, b: int, codec: I64,
                        where: str) -> list[bytes | bytearray | memoryview]:
    pos, size = int(batches.position[b]), int(batches.size[b])
    try:
        return compression.decompress_parts(CompressionType(int(codec[b])),
                                            src[pos + RECORD_BATCH_OVERHEAD:pos + size])
    except (InvalidRecordError, ValueError) as exc:
        raise InvalidRecordError(f"{where}batch at byte {pos}: {exc}") from exc


def _put_parts(out: memoryview, cursor: int, parts: list[bytes | bytearray | memoryview]) -> int:
    for part in parts:
        out[cursor:cursor + len(part)] = part
        cursor += len(part)
    return cursor


def _grown(arena: U8, cursor: int, need: int, src_done: int, src_total: int) -> tuple[U8, memoryview]:
    """A larger arena holding ``arena[:cursor]``: room for ``need`` more bytes and, at the ratio seen
    so far, for the rest of the segment (at least 1.5 times the old size, so regrowing stays rare)."""
    rest = (src_total - src_done) * max(cursor / max(src_done, 1), 1.0)
    grown = np.empty(max(cursor + need + int(rest * 1.125), len(arena) * 3 // 2), dtype=np.uint8)
    grown[:cursor] = arena[:cursor]
    return grown, memoryview(grown)  # type: ignore[arg-type]  # ndarray is a buffer


def _mixed_records(arr: U8, batches: BatchColumns, where: str) -> RecordColumns:
    """``scan_records`` of a buffer holding legacy entries: v0/v1 ones, and v2 batches after them
    where the message format was upgraded (Kafka reads each batch by its own magic). Each run of
    consecutive v2 batches goes through the compiled scan, each legacy entry through Python (legacy
    data is rare and read-only); the bytes every record spans are gathered into one arena, in
    order, so that the columns index one ``data`` as the v2 path's do.

    A legacy record's ``record_pos``/``record_size`` span its message from the CRC on (its magic is
    at ``record_pos + 4``: see :meth:`RecordColumns.legacy_magic`); it has no headers."""
    view = memoryview(arr)  # type: ignore[arg-type]  # ndarray is a buffer
    is_legacy = batches.magic < 2
    pieces: list[U8] = []  # the arena, in order
    tables: list[I64] = []  # a table of _COLUMNS rows per piece, positions from the arena's start
    cursor = 0
    b = 0
    while b < len(batches):
        if is_legacy[b]:
            table, piece = _legacy_entry_table(view, batches, b, where)
            b += 1
        else:
            later = np.flatnonzero(is_legacy[b:])
            hi = b + int(later[0]) if len(later) else len(batches)
            table, piece = _v2_run_table(_v2_records(arr, batches.window(b, hi), where, None), b)
            b = hi
        table[_POSITION_ROWS] += cursor
        cursor += len(piece)
        pieces.append(piece)
        tables.append(table)
    data = as_array(np.concatenate(pieces) if pieces else np.empty(0, dtype=np.uint8))
    joined = np.concatenate(tables, axis=1) if tables else np.empty((len(_COLUMNS), 0), dtype=np.int64)
    columns = {name: joined[i].astype(np.int32 if name in _INT32_COLUMNS else np.int64)
               for i, name in enumerate(_COLUMNS)}
    return RecordColumns(data, **columns)


_COLUMNS = ("batch_index", "offset", "timestamp", "key_pos", "key_len", "value_pos", "value_len", "headers_pos",
            "headers_count", "record_pos", "record_size")
_POSITION_ROWS = [_COLUMNS.index(name) for name in ("key_pos", "value_pos", "headers_pos", "record_pos")]
_INT32_COLUMNS = {"batch_index", "key_len", "value_len", "headers_count", "record_size"}


def _v2_run_table(run: RecordColumns, first_batch: int) -> tuple[I64, U8]:
    """A run's columns as a table (batch indexes from ``first_batch``) and the bytes its records span,
    positions counted from their start."""
    if not len(run):
        return np.empty((len(_COLUMNS), 0), dtype=np.int64), np.empty(0, dtype=np.uint8)
    lo = int(run.record_pos.min())
    end = int((run.record_pos + run.record_size).max())
    table = np.stack([getattr(run, name).astype(np.int64) for name in _COLUMNS])
    table[_COLUMNS.index("batch_index")] += first_batch
    table[_POSITION_ROWS] -= lo
    return table, run.data[lo:end]


def _legacy_entry_table(view: memoryview, batches: BatchColumns, b: int, where: str) -> tuple[I64, U8]:
    """Entry ``b``'s records (itself, or a wrapper's inner ones) as a table and the bytes their
    messages span, positions counted from their start."""
    entry = legacy.parse_entry(view, int(batches.position[b]), where=where)
    data, records = legacy.deep_records(view, entry, where)
    lo = records[0][0].position + LOG_OVERHEAD  # from the first message's CRC
    end = records[-1][0].position + records[-1][0].size_in_bytes
    rows = [(b, record.offset, record.timestamp, message.key_position, _length(message.key),
             message.value_position, _length(message.value),
             message.position + message.size_in_bytes, 0,  # no headers: they start where the message ends
             message.position + LOG_OVERHEAD, message.size_in_bytes - LOG_OVERHEAD)
            for message, record in records]
    table = np.array(rows, dtype=np.int64).T.copy()
    table[_POSITION_ROWS] -= lo
    return table, np.frombuffer(data, dtype=np.uint8)[lo:end]


def _length(blob: bytes | None) -> int:
    return -1 if blob is None else len(blob)

