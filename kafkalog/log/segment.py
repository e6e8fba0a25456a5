"""One segment: a ``.log`` file and its offset, time and transaction indexes (``LogSegment``).

Crash story: batches are appended to the ``.log`` whole (a write that a full disk stops part way is
cut back to the batch's start, ``_write_whole``); index entries follow the data they point at, so
after a crash an index can only lag or carry a torn last entry, and :meth:`LogSegment.recover` (spec
§11.5) rebuilds all three indexes from the ``.log`` and truncates a torn or corrupt tail. Nothing
before the first invalid batch is ever dropped.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from kafkalog.errors import CorruptRecordError, InvalidRecordError, OffsetOverflowError
from kafkalog.format import batch as fmt
from kafkalog.format.scan import BatchColumns, as_array, find_corrupt_batch, scan_batches
from kafkalog.log import names
from kafkalog.log.checkpoint import LeaderEpochFileCache
from kafkalog.log.index import DEFAULT_MAX_INDEX_BYTES, MAX_INT, OffsetIndex, TimeIndex
from kafkalog.log.producer_state import BatchSummary, ProducerState
from kafkalog.log.txn_index import TransactionIndex


@dataclass(frozen=True, slots=True)
class SegmentSettings:
    """The config a segment needs: ``index.interval.bytes`` and ``segment.index.bytes``."""

    index_interval_bytes: int = 4096
    max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is: its last offset, file position and size (``LogOffsetPosition``)."""

    last_offset: int
    position: int
    size: int


class Chunk(NamedTuple):
    """Complete entries of a segment as ``LogSegment.scan_chunks`` serves them: their bytes (valid until
    the next chunk is read), their header columns, and where ``data`` starts in the ``.log``."""

    data: memoryview
    batches: BatchColumns
    position: int


class ScanEnd(NamedTuple):
    """Where ``LogSegment.scan_chunks`` stopped: the end of its complete entries, the file's size then,
    and the first bytes (up to a batch's offset and length) of what lies past that end."""

    position: int
    file_size: int
    head: bytes

    @property
    def incomplete_bytes(self) -> int:
        """The bytes past the complete entries: 0 at the end of the file, else an incomplete entry."""
        return max(0, self.file_size - self.position)


class LogSegment:
    """A segment of one partition; ``suffix`` is ``""``, ``.cleaned`` or ``.swap`` for files in flight."""

    def __init__(self, directory: Path, base_offset: int, settings: SegmentSettings = SegmentSettings(),
                 suffix: str = "", created_ms: int | None = None) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.settings = settings
        self.suffix = suffix
        self.log_path = names.log_file(self.directory, base_offset, suffix)
        self.offset_index = OffsetIndex(names.index_file(self.directory, base_offset, suffix), base_offset,
                                        settings.max_index_bytes)
        self.time_index = TimeIndex(names.time_index_file(self.directory, base_offset, suffix), base_offset,
                                    settings.max_index_bytes)
        self._txn_index = TransactionIndex(names.txn_index_file(self.directory, base_offset, suffix), base_offset)
        self._rebuild_pending = False  # see rebuild_in_memory
        self._producer_state_at_base: Callable[[], ProducerState] = ProducerState
        self.created_ms = int(time.time() * 1000) if created_ms is None else created_ms
        self.bytes_since_last_index_entry = 0
        last_ts, last_ts_offset = self.time_index.last_entry()
        self.max_timestamp_so_far = last_ts
        self.offset_of_max_timestamp_so_far = last_ts_offset
        self.rolling_based_timestamp: int | None = None
        self.roll_jitter_ms = 0

    @property
    def txn_index(self) -> TransactionIndex:
        if self._rebuild_pending:
            self._finish_rebuild_in_memory()
        return self._txn_index

    # --- files ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    @property
    def index_files_exist(self) -> bool:
        return self.offset_index.path.exists()

    def read_bytes(self, start: int = 0, end: int | None = None) -> bytes:
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def where(self, position: int = 0) -> str:
        """The prefix of a message about this segment's bytes from ``position`` on."""
        return f"{self.log_path} (from byte {position}): " if position else f"{self.log_path}: "

    def scan_chunks(self, start: int = 0, chunk_bytes: int = 8 << 20,
                    on_end: Callable[[ScanEnd], None] | None = None) -> Iterator[Chunk]:
        """``scan`` a chunk of complete entries at a time, every chunk read into the same buffer:
        memory stays bounded by the chunk (or the largest entry), not the segment. Each chunk's data
        is valid until the next one is read. An incomplete entry at the end just ends the scan;
        ``on_end`` is then told where the complete entries ended, in the file this scan read (a
        reader that may not skip records must tell a torn tail from a segment cut short)."""
        buffer = bytearray(chunk_bytes)
        with open(self.log_path, "rb") as f:
            position = start
            while True:
                f.seek(position)
                read = f.readinto(buffer)
                view = memoryview(buffer)[:read]
                batches = scan_batches(view, where=self.where(position))
                if not len(batches):
                    if read >= len(buffer):
                        # The buffer holds only the start of an entry: a larger one, unless that entry
                        # claims to reach past the end of the file (torn).
                        needed = fmt.LOG_OVERHEAD + int.from_bytes(view[8:12], "big") \
                            if read >= fmt.LOG_OVERHEAD else 2 * fmt.LOG_OVERHEAD
                        if needed <= os.fstat(f.fileno()).st_size - position and needed > len(buffer):
                            buffer = bytearray(needed)
                            continue
                    if on_end is not None:  # the end of the file, or an incomplete entry
                        on_end(ScanEnd(position, os.fstat(f.fileno()).st_size, bytes(view[:fmt.LOG_OVERHEAD])))
                    return
                yield Chunk(view, batches, position)
                position += batches.valid_end

    def scan(self, start: int = 0) -> tuple[bytes, BatchColumns]:
        """The ``.log`` bytes from ``start`` and the header columns of every complete entry."""
        data = self.read_bytes(start)
        return data, scan_batches(data, where=f"{self.log_path}: ")

    def last_modified_ms(self) -> int:
        return self.log_path.stat().st_mtime_ns // 1_000_000

    # --- reading -------------------------------------------------------------------------------
    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch with last offset ≥ ``offset``, searching from the index's lower bound."""
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        data, batches = self.scan(position)
        hits = np.flatnonzero(batches.last_offset >= offset)
        if not len(hits):
            return None
        i = int(hits[0])
        return BatchPosition(int(batches.last_offset[i]), position + int(batches.position[i]),
                             int(batches.size[i]))

    def read_next_offset(self) -> int:
        """The offset after the last complete batch (base offset when empty).

        Reads from the last index entry; a torn or zero-filled tail just ends the scan, and when the
        index points at nothing complete the whole file is scanned instead.
        """
        _, position = self.offset_index.lookup(1 << 62)
        if not 0 <= position <= self.size:  # an index pointing outside the data: trust only the log
            position = 0
        batches = self.scan_valid(position)
        if not len(batches) and position > 0:
            batches = self.scan_valid(0)
        return int(batches.last_offset[-1]) + 1 if len(batches) else self.base_offset

    def scan_valid(self, start: int = 0) -> BatchColumns:
        """Header columns of the complete entries from ``start`` up to any torn or zero-filled tail."""
        data = self.read_bytes(start)
        try:
            return scan_batches(data)
        except CorruptRecordError:
            return scan_batches(data, 0, _framed_prefix(data))

    def largest_timestamp(self) -> int:
        """The max timestamp if known, else the ``.log`` mtime (what time retention uses, §5.4)."""
        if self._rebuild_pending:
            self._finish_rebuild_in_memory()
        return self.max_timestamp_so_far if self.max_timestamp_so_far >= 0 else self.last_modified_ms()

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp (``getFirstBatchTimestamp``), MAX_LONG when empty.

        A first batch declaring fewer than 14 bytes raises :class:`CorruptRecordError` whatever the
        size, as Kafka's ``FileLogInputStream.nextBatch`` does once the file holds a header up to the
        magic byte: at least that much is read, or a size of 0-5 would read as a file too short to
        hold a batch."""
        if self.rolling_based_timestamp is not None:
            return self.rolling_based_timestamp
        head = self.read_bytes(0, fmt.LOG_OVERHEAD)
        if len(head) < fmt.LOG_OVERHEAD:
            return (1 << 63) - 1
        length = int.from_bytes(head[8:12], "big", signed=True)
        data = self.read_bytes(0, max(fmt.LOG_OVERHEAD + length, fmt.HEADER_SIZE_UP_TO_MAGIC + 1))
        batches = scan_batches(data, where=self.where())
        return int(batches.max_timestamp[0]) if len(batches) else (1 << 63) - 1

    # --- writing -------------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset_of_max_timestamp: int,
               records: bytes) -> None:
        """Append already-validated batch bytes (``LogSegment.append``, spec §4.2)."""
        if not records:
            return
        physical_position = self.size
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        if not 0 <= largest_offset - self.base_offset <= MAX_INT:
            raise OffsetOverflowError(
                f"{self.log_path}: largest offset {largest_offset} does not fit in the segment "
                f"starting at {self.base_offset}"
            )
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_whole(fd, records, physical_position, self.log_path)
        finally:
            os.close(fd)
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp_so_far = shallow_offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.settings.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += len(records)

    def flush(self) -> None:
        if self.log_path.exists():
            fd = os.open(self.log_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.offset_index.flush()
        self.time_index.flush()

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, trimmed index files."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                     skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()
        if not self.offset_index.path.exists():
            self.offset_index.path.touch()
        if not self.time_index.path.exists():
            self.time_index.path.touch()

    def close(self) -> None:
        if self.max_timestamp_so_far >= 0 and self.log_path.exists():
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()

    # --- recovery and truncation ---------------------------------------------------------------
    def recover(self, producer_state: ProducerState | None = None, *, truncate_corrupt: bool = True,
                leader_epochs: LeaderEpochFileCache | None = None, recovery_point: int = 0) -> int:
        """Rebuild every index from the ``.log`` and cut it at the first invalid batch (§11.5).

        ``producer_state`` is the partition's producer state at this segment's base offset (Kafka's
        ``recoverSegment`` rebuilds it first): a transaction opened in an earlier segment and ended
        by a marker in this one gets its true ``.txnindex`` entry. It is advanced through the
        segment's batches. ``leader_epochs`` is the partition's epoch cache: each valid v2 batch whose
        partition leader epoch is greater than the latest starts that epoch, as on append (a cache
        lost or behind the log gets its entries back). Returns the number of bytes truncated. With
        ``truncate_corrupt=False`` only an incomplete last batch (a torn write) may be cut, and only where
        the whole batches before it reach ``recovery_point`` (the caller's for a sealed segment): every
        record below it was flushed whole, so an incomplete batch there is damage, not a write a crash
        tore. A complete batch that fails its checks, or such damage, raises :class:`CorruptRecordError`
        before anything is changed.
        Valid batches beyond the base offset + ``MAX_INT`` raise :class:`OffsetOverflowError`, also
        before anything is changed.
        """
        state = producer_state if producer_state is not None else ProducerState()
        data = self.read_bytes()
        where = f"{self.log_path}: "
        valid_bytes = _valid_prefix(data, self.base_offset, where=where)
        if not truncate_corrupt and valid_bytes < _framed_prefix(data):
            raise CorruptRecordError(
                f"{where}corrupt batch at byte {valid_bytes} with valid data after it; nothing was "
                "changed (run `kafkalog recover` to truncate the log there, as Kafka's recovery would)"
            )
        batches = scan_batches(data, 0, valid_bytes)
        valid_end_offset = int(batches.last_offset[-1]) + 1 if len(batches) else self.base_offset
        if not truncate_corrupt and valid_bytes < len(data) and valid_end_offset < recovery_point:
            raise CorruptRecordError(
                f"{where}incomplete batch at byte {valid_bytes} (offset {valid_end_offset}), below the recovery "
                f"point {recovery_point}: the records there were flushed whole, so this is damage, not a torn "
                "write; nothing was changed (`kafkalog recover --full` truncates the log there, as Kafka's "
                "recovery would; what follows is lost)"
            )
        beyond = np.flatnonzero(batches.last_offset - self.base_offset > MAX_INT)
        if len(beyond):  # valid records the index cannot address: the loader splits the segment
            raise OffsetOverflowError(
                f"{where}offset {int(batches.last_offset[beyond[0]])} does not fit the segment based at "
                f"{self.base_offset} (at most {MAX_INT} offsets above it)", segment_base=self.base_offset)
        self.txn_index.reset()
        for i in np.flatnonzero((batches.magic >= 2) & (batches.producer_id >= 0)).tolist():
            aborted = state.update(summarize_batch(data, batches, i))
            if aborted is not None:
                self.txn_index.append(aborted)
        if leader_epochs is not None:
            for i in _new_epoch_batches(batches, leader_epochs.latest_epoch):
                leader_epochs.assign_if_newer(int(batches.partition_leader_epoch[i]), int(batches.base_offset[i]))
        truncated = len(data) - valid_bytes
        if truncated:
            os.truncate(self.log_path, valid_bytes)
        self.rebuild_indexes(batches.position, batches.last_offset, batches.max_timestamp, valid_bytes)
        return truncated

    def rebuild_in_memory(self, producer_state_at_base: Callable[[], ProducerState] = ProducerState) -> None:
        """What :meth:`recover` would rebuild, for a read-only view that may not write. The offset and
        time index entries are dropped (an empty offset index is always correct: lookups scan from the
        segment's start). The max timestamp and the aborted transactions need the whole log read, so
        they are rebuilt when first asked for: readers that never ask (``consume``, ``verify``, which
        reads every batch itself) do not read the segment twice. ``producer_state_at_base`` gives
        the partition's producer state at this segment's base, as :meth:`recover` takes it."""
        self.offset_index.forget_entries()
        self.time_index.forget_entries()
        self._rebuild_pending = True
        self._producer_state_at_base = producer_state_at_base

    def _finish_rebuild_in_memory(self) -> None:
        self._rebuild_pending = False
        data = self.read_bytes()
        batches = scan_batches(data, 0, _framed_prefix(data))
        aborted = []
        if ((batches.attributes & fmt.CONTROL_MASK) != 0).any():  # only an ABORT marker makes an entry
            state = self._producer_state_at_base()
            for i in np.flatnonzero((batches.magic >= 2) & (batches.producer_id >= 0)).tolist():
                txn = state.update(summarize_batch(data, batches, i))
                if txn is not None:
                    aborted.append(txn)
        self._txn_index.use_in_memory(aborted)
        if len(batches):
            best = int(np.argmax(batches.max_timestamp))
            self.max_timestamp_so_far = int(batches.max_timestamp[best])
            self.offset_of_max_timestamp_so_far = int(batches.last_offset[best])

    def rebuild_indexes(self, positions: npt.NDArray[np.int64], last_offsets: npt.NDArray[np.int64],
                        max_timestamps: npt.NDArray[np.int64], size: int) -> None:
        """Write the offset and time indexes of a ``.log`` of ``size`` bytes whose batches start at
        ``positions`` (already validated): the entries Kafka's per-batch appends would make."""
        self.offset_index.reset()
        self.time_index.reset()
        offsets, offset_positions, times, time_offsets, max_timestamp, offset_of_max, last_index_entry = \
            _index_points(positions.astype(np.int64), last_offsets.astype(np.int64), max_timestamps.astype(np.int64),
                          self.settings.index_interval_bytes, -1, self.base_offset)
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = int(max_timestamp), int(offset_of_max)
        self.offset_index.write_entries(offsets, offset_positions)
        valid = times >= 0
        self.time_index.write_entries(times[valid], time_offsets[valid])
        if not self.offset_index.path.exists():
            self.offset_index.path.touch()
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                     skip_full_check=True)
        if not self.time_index.path.exists():
            self.time_index.path.touch()
        self.bytes_since_last_index_entry = size - int(last_index_entry) if len(positions) else 0

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Drop every batch holding an offset ≥ ``offset``; returns the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            if self.size == 0:  # Kafka resets the roll clock whenever the segment ends up empty
                self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
                self.rolling_based_timestamp = None
            return 0
        removed = self.size - found.position
        os.truncate(self.log_path, found.position)
        self.bytes_since_last_index_entry = 0
        if found.position == 0:
            self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
            self.rolling_based_timestamp = None
        last_ts, last_ts_offset = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = last_ts, last_ts_offset
        _, position = self.offset_index.lookup(last_ts_offset)
        data, batches = self.scan(position)
        for i in range(len(batches)):
            if int(batches.max_timestamp[i]) > self.max_timestamp_so_far:
                self.max_timestamp_so_far = int(batches.max_timestamp[i])
                self.offset_of_max_timestamp_so_far = int(batches.last_offset[i])
        return removed

    def delete_files(self) -> None:
        self.offset_index.delete()
        self.time_index.delete()
        self._txn_index.delete_if_exists()
        self.log_path.unlink(missing_ok=True)

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self._txn_index.path]


def _write_whole(fd: int, data: bytes, position: int, path: Path) -> None:
    """Append all of ``data`` to the file at ``position`` (its size), or nothing: a write that stops
    part way (a full disk: a short write, then ENOSPC) is cut back to ``position``, so the log ends at
    its last whole batch, as recovery would leave it, and the error names the file."""
    view = memoryview(data)
    written = 0
    try:
        while written < len(view):
            n = os.write(fd, view[written:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written += n
    except OSError as exc:
        try:
            os.ftruncate(fd, position)
        except OSError:
            pass  # left for the next load: a torn last batch past the recovery point is cut there
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _valid_prefix(data: bytes, base_offset: int, where: str) -> int:
    """Bytes of whole, valid batches at the start of ``data`` (stop at the first bad one)."""
    try:
        batches = scan_batches(data)
        end = batches.valid_end
    except CorruptRecordError:
        # A length field below 14 somewhere: find how far the good framing goes.
        end = _framed_prefix(data)
        batches = scan_batches(data, 0, end)
    # ensureValid per batch, and no offset below the base. The whole-segment check is one pass; only
    # when it finds a problem are batches checked one by one to find the first bad one. (Offsets past
    # base + MAX_INT are valid records the index cannot address: ``recover`` refuses those whole.)
    arr = as_array(data)
    relative = batches.last_offset - base_offset
    # Offsets must also go up from batch to batch: a damaged base offset is not covered by the CRC.
    increasing = batches.base_offset[1:] > batches.last_offset[:-1]
    if find_corrupt_batch(arr, batches, where) is None and (relative >= 0).all() and increasing.all():
        return end
    for i in range(len(batches)):
        relative_ok = int(batches.last_offset[i]) >= base_offset
        in_order = i == 0 or bool(increasing[i - 1])
        if not relative_ok or not in_order or find_corrupt_batch(arr, _slice_columns(batches, i), where) is not None:
            return int(batches.position[i])
        if int(batches.magic[i]) >= 2 and int(batches.size[i]) < fmt.RECORD_BATCH_OVERHEAD:
            return int(batches.position[i])
    return end


def _new_epoch_batches(batches: BatchColumns, latest_epoch: int | None) -> list[int]:
    """The v2 batches whose partition leader epoch is above every epoch before them (and the cache's
    latest): the only ones that can start an epoch, found without a Python step per batch."""
    rows = np.flatnonzero((batches.magic >= 2) & (batches.partition_leader_epoch >= 0))
    epochs = batches.partition_leader_epoch[rows]
    before = np.maximum.accumulate(np.concatenate(([-1 if latest_epoch is None else latest_epoch], epochs)))[:-1]
    return rows[epochs > before].tolist()  # type: ignore[no-any-return]


def _framed_prefix(data: bytes) -> int:
    end = 0
    try:
        for entry in fmt.iter_entries(data):
            end = entry.position + entry.size
    except CorruptRecordError:
        pass
    return end


def summarize_batch(data: bytes | memoryview, batches: BatchColumns, i: int) -> BatchSummary:
    """What producer state needs from batch ``i`` (decodes the record of a control batch)."""
    attributes = int(batches.attributes[i])
    base_sequence = int(batches.base_sequence[i])
    last_delta = int(batches.last_offset_delta[i])
    control_type = None
    coordinator_epoch = -1
    if attributes & fmt.CONTROL_MASK:
        position, size = int(batches.position[i]), int(batches.size[i])
        raw = memoryview(data)[position:position + size]
        try:
            records = fmt.decode_records(raw)
            if records:
                control_type = fmt.parse_control_type(records[0].key)
                if control_type in (fmt.ControlType.ABORT, fmt.ControlType.COMMIT):
                    coordinator_epoch = fmt.parse_end_txn_marker(records[0].value)
        except InvalidRecordError:
            control_type = None
    return BatchSummary(
        producer_id=int(batches.producer_id[i]),
        producer_epoch=int(batches.producer_epoch[i]),
        last_sequence=-1 if base_sequence < 0 else fmt.increment_sequence(base_sequence, last_delta),
        first_offset=int(batches.base_offset[i]),
        last_offset=int(batches.last_offset[i]),
        max_timestamp=int(batches.max_timestamp[i]),
        is_transactional=bool(attributes & fmt.TRANSACTIONAL_MASK),
        control_type=control_type,
        coordinator_epoch=coordinator_epoch,
        is_control=bool(attributes & fmt.CONTROL_MASK),
    )


def _slice_columns(batches: BatchColumns, i: int) -> BatchColumns:
    fields = {name: getattr(batches, name)[i:i + 1] for name in BatchColumns.__dataclass_fields__
              if name != "valid_end"}
    return BatchColumns(**fields, valid_end=batches.valid_end)


@numba.njit(cache=True, nogil=True)
def _index_points(positions: npt.NDArray[np.int64], last_offsets: npt.NDArray[np.int64],
                  max_timestamps: npt.NDArray[np.int64], interval: int, max_timestamp: int,
                  offset_of_max: int) -> tuple[Any, Any, Any, Any, int, int, int]:
    """The index entries per-batch appends make (``LogSegment.append``): an offset entry, and a time
    entry when the running max timestamp grew, at each batch more than ``interval`` bytes past the
    last entry. Returns them, the final max timestamp and its offset, and the last entry's position."""
    n = len(positions)
    offsets, offset_positions = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    times, time_offsets = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    k = m = 0
    last_entry = 0
    for i in range(n):
        if max_timestamps[i] > max_timestamp:
            max_timestamp, offset_of_max = max_timestamps[i], last_offsets[i]
        if positions[i] - last_entry > interval:
            offsets[k], offset_positions[k] = last_offsets[i], positions[i]
            k += 1
            if m == 0 or max_timestamp > times[m - 1]:
                times[m], time_offsets[m] = max_timestamp, offset_of_max
                m += 1
            last_entry = positions[i]
    return offsets[:k], offset_positions[:k], times[:m], time_offsets[:m], max_timestamp, offset_of_max, last_entry
