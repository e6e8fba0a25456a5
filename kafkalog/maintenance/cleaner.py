"""The log cleaner (``Cleaner.doClean``, spec §8.4–8.6): compact one partition's cleanable range.

1. Build the exact key map over the dirty range ``[first_dirty, first_uncleanable)``: the latest
   offset of every key, skipping aborted transactional data.
2. Group every segment below the end of the mapped range by size (``groupSegmentsBySize``), so that
   cleaned segments do not keep shrinking, and recopy each group into one ``.cleaned`` segment:
   keep a record iff its offset is at or past its key's latest offset (tombstones and transaction
   markers only until the delete horizon stamped into their batch has passed; aborted data and
   unkeyed records never), keep each producer's last batch (as a 61-byte empty header if needed),
   copy unchanged batches byte for byte and rebuild the others with the same base offset, last
   offset delta and codec.
3. Verify the ``.cleaned`` output against the records that had to survive, then swap it in under
   the partition lock (``log/swap.py``); a crash at any point recovers to old or new.
4. Write ``cleaner-offset-checkpoint`` and journal the round with Kafka-style statistics.

Two clocks: ``now_ms`` (the cycle's clock, never ahead of the wall) decides which horizons have
passed; the horizon *stamped* into a batch is ``wall clock + delete.retention.ms``, a grace period
readers are promised whatever the cycle's date.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkalog.errors import CleanerError, KafkaLogError
from kafkalog.format import batch as fmt
from kafkalog.format import compression, lz4_native
from kafkalog.format.compression import CompressionType
from kafkalog.format.crc import crc32c
from kafkalog.format.rewrite import (
    COPY,
    DROP,
    EMPTY,
    REBUILD,
    after_timestamp_delta,
    assemble_uncompressed,
    decide_records,
    rebuild_records,
    recompress_lz4,
    records_equal,
)
from kafkalog.format.scan import (
    BatchColumns,
    ColumnWorkspace,
    RecordColumns,
    as_array,
    batch_crcs,
    find_backward_batch,
    find_corrupt_batch,
    record_sections,
    scan_batches,
    scan_records,
)
from kafkalog.log import checkpoint, names
from kafkalog.log.background_writer import BackgroundWriter
from kafkalog.log.config import BrokerConfig
from kafkalog.log.index import MAX_INT
from kafkalog.log.loader import apply_temp_file_plan, plan_temp_files
from kafkalog.log.local_log import LocalLog
from kafkalog.log.lock import cleaner_lock, log_dir_lock, partition_lock
from kafkalog.log.segment import LogSegment, SegmentSettings
from kafkalog.log.snapshot import LogDirCheckpoints, snapshot_for_compaction
from kafkalog.log.split import split_overflowed_segment
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.log.swap import replace_segments
from kafkalog.log.txn_index import AbortedTxn
from kafkalog.maintenance import journal
from kafkalog.maintenance.key_map import KeyMap, Supersession
from kafkalog.maintenance.throttle import UNTHROTTLED, Throttler, Unthrottled, throttler
from kafkalog.maintenance.txn_tracker import EMPTY_CONTROL, TXN_DATA, TxnEvents, TxnTracker
from kafkalog.policy.compaction import cleanable_range
from kafkalog.policy.log_cleaner import require_cleaner

I64 = npt.NDArray[np.int64]
Buffer = bytes | memoryview


class _Scratch(threading.local):
    """Memory reused by every window this thread cleans: every fresh page is a page fault (and more
    where the hypervisor takes freed guest memory back), which can cost more than the work done in
    the page, so the columns of the source and of the cleaned output, and the output itself, live in
    buffers that only ever grow.

    The output buffers come in two sets, used in turns (``flip``): a window's output is written to
    its file in the background while the next window is cleaned into the other set."""

    def __init__(self) -> None:
        self.source = ColumnWorkspace()
        self.output = ColumnWorkspace()
        self._bytes = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]
        self._final = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]
        self._turn = 0

    def flip(self) -> None:
        self._turn ^= 1

    def out_bytes(self, size: int) -> npt.NDArray[np.uint8]:
        return self._grown(self._bytes, size)

    def final_bytes(self, size: int) -> npt.NDArray[np.uint8]:
        """A second output buffer: the window's batches after recompression."""
        return self._grown(self._final, size)

    def _grown(self, buffers: list[npt.NDArray[np.uint8]], size: int) -> npt.NDArray[np.uint8]:
        if len(buffers[self._turn]) < size:
            buffers[self._turn] = np.empty(max(size, len(buffers[self._turn]) * 5 // 4), dtype=np.uint8)
        return buffers[self._turn]


_scratch = _Scratch()
_LZ4_FRAME_HEADER = np.frombuffer(compression.LZ4_FRAME_HEADER, dtype=np.uint8)
# Segments are decoded this many bytes of batches at a time: memory does not grow with the segment
# size, and a window's batches, its columns (68 B a record) and its output are small enough to stay in
# the CPU caches from decoding to writing.
WINDOW_BYTES = 8 << 20


@dataclass
class CleanerStats:
    """What Kafka's cleaner logs after a round, plus what this implementation adds."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    empty_batches_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    unkeyed_records_removed: int = 0
    dirty_bytes: int = 0
    map_records: int = 0
    map_keys: int = 0
    map_seconds: float = 0.0
    clean_seconds: float = 0.0

    @property
    def recopy_percent(self) -> float:
        """How much of what was read was clean data recopied (Kafka's "recopied" ratio)."""
        return 100.0 * max(self.bytes_read - self.dirty_bytes, 0) / self.bytes_read if self.bytes_read else 0.0

    @property
    def mb_per_s(self) -> float:
        elapsed = self.map_seconds + self.clean_seconds
        return self.bytes_read / 1e6 / elapsed if elapsed else 0.0

    def to_dict(self) -> dict[str, float]:
        doc = asdict(self)
        doc.update(recopy_percent=round(self.recopy_percent, 1), mb_per_s=round(self.mb_per_s, 1))
        return doc


@dataclass
class CleanResult:
    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    groups: list[tuple[list[int], int]] = field(default_factory=list)  # (old bases, new base)
    stats: CleanerStats = field(default_factory=CleanerStats)


@dataclass(frozen=True)
class _Clock:
    now_ms: int  # decides whether a horizon has passed
    wall_ms: int  # the wall clock of the round (journal time)
    horizon_ms: int  # stamped into batches that get one now: wall clock + delete.retention.ms


@dataclass
class CleanContext:
    """One cleaning round of one partition, opened read-only: what every step below reads.

    Everything here follows from the files and the two clocks, so a Spark task that opens the same
    partition with the same arguments gets the same context and makes the same decisions.
    """

    store: LogStore
    location: PartitionLocation
    log: LocalLog
    clock: _Clock
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: list[LogSegment]  # every inactive segment
    aborted: list[AbortedTxn]
    producers: dict[int, tuple[int, int]]  # producer id -> (last data offset, epoch)
    legacy_horizon: int
    throttle: Throttler | Unthrottled  # log.cleaner.io.max.bytes.per.second, over reads and writes

    @property
    def end_offset(self) -> int:
        """Where the mapped range ends: the whole dirty range is mapped in one pass."""
        return max(self.first_uncleanable_offset, self.first_dirty_offset)

    @functools.cached_property
    def _next_bases(self) -> dict[int, int]:
        """Each segment's base offset -> the next segment's (the last one has none)."""
        bases = [s.base_offset for s in self.log.segments]
        return dict(zip(bases, bases[1:], strict=False))

    def aborted_in(self, segment: LogSegment) -> list[AbortedTxn]:
        """The aborted transactions reaching into ``segment`` (``collectAbortedTransactions`` from its
        base to the next segment's)."""
        upper = self._next_bases.get(segment.base_offset)
        if upper is None:
            upper = segment.read_next_offset()
        return [t for t in self.aborted if t.last_offset >= segment.base_offset and t.first_offset < upper]

    def group_txn_states(self, groups: list[list[LogSegment]], events: dict[int, TxnEvents]) -> list[dict[str, Any]]:
        """The round's transaction tracker as it stands at the start of each group, from the
        ``txn_events`` of every segment before the last group (keyed by base offset)."""
        tracker, states = TxnTracker(), []
        for i, group in enumerate(groups):
            states.append(tracker.state())
            for segment in group if i + 1 < len(groups) else ():
                tracker.add_aborted(self.aborted_in(segment))
                tracker.replay(events[segment.base_offset])
        return states

    def groups(self, end_offset: int | None = None) -> list[list[LogSegment]]:
        """Every segment below the round's end (``end_offset``, if its map filled before the dirty
        range's end) grouped by size, from the log's first segment."""
        end = self.end_offset if end_offset is None else end_offset
        to_group = [s for s in self.segments if s.base_offset < end]
        config = self.log.config
        return group_segments_by_size(to_group, config.segment_bytes, config.segment_index_bytes,
                                      self.first_uncleanable_offset, self.log.segments)


def open_clean_context(store: LogStore, location: PartitionLocation, first_dirty_offset: int,
                       first_uncleanable_offset: int, *, now_ms: int, wall_now_ms: int | None = None,
                       producers: dict[int, tuple[int, int]] | None = None) -> CleanContext:
    """The context of one round. The caller holds the partition's cleaner lock (or is a task of a
    driver that holds it) and has resolved a crashed cleaner's leftovers. ``producers``: the producer
    state the driver of a split round read as it planned (its workers all decide with that one)."""
    config = store.log_config(location.topic_partition.topic)
    wall = int(time.time() * 1000) if wall_now_ms is None else wall_now_ms
    log = store.open_log(location, read_only=True)
    segments = list(log.segments[:-1])  # never the active segment
    if producers is None:  # the active producers (``lastRecordsOfActiveProducers``) at the round's clock
        state = log.producer_state()
        state.remove_expired(now_ms, store.broker.producer_id_expiration_ms)
        producers = {e.producer_id: (e.last_offset, e.producer_epoch) for e in state.snapshot_entries()}
    clock = _Clock(now_ms, wall, wall + config.delete_retention_ms)
    aborted = [t for s in log.segments for t in s.txn_index.entries()]
    return CleanContext(store, location, log, clock, first_dirty_offset, first_uncleanable_offset, segments, aborted,
                        producers, _legacy_delete_horizon(segments, first_dirty_offset, config.delete_retention_ms),
                        throttler(store.broker.log_cleaner_io_max_bytes_per_second))


def resolve_leftovers(location: PartitionLocation, lock_timeout_s: float = 30.0) -> None:
    """A crashed cleaner's temporary files, resolved as recovery would. Needs the cleaner lock."""
    plan = plan_temp_files(location.directory)
    if not plan.empty:
        with partition_lock(location.directory, timeout_s=lock_timeout_s):
            apply_temp_file_plan(plan_temp_files(location.directory))


def recheck_round(store: LogStore, location: PartitionLocation, first_dirty_offset: int,
                  first_uncleanable_offset: int, now_ms: int) -> None:
    """A round comes from a plan, which may be older than the log: re-checked against the log under
    the partition's cleaner lock before anything is written, as Kafka's cleaner aborts a round whose log
    stops being compacted and never cleans past the last stable offset, the active segment or
    ``min.compaction.lag.ms``. Raises ``CleanerError`` (``ConfigError`` with no cleaner running)."""
    require_cleaner(store.broker)
    tp = location.topic_partition
    config = store.log_config(tp.topic)
    if not config.compact:
        raise CleanerError(f"{tp}: cleanup.policy={','.join(sorted(config.cleanup_policy))} is not compacted any "
                           "more; the planned round is refused (a new plan leaves it alone)")
    now = cleanable_range(snapshot_for_compaction(location.log_dir, tp.topic, tp.partition, config,
                                                  LogDirCheckpoints.read(location.log_dir)), now_ms)
    if first_uncleanable_offset > now.first_uncleanable_offset:
        raise CleanerError(f"{tp}: the planned round [{first_dirty_offset}, {first_uncleanable_offset}) reaches past "
                           f"what is cleanable now, offset {now.first_uncleanable_offset} ({now.limit_detail}); "
                           "nothing was cleaned")


def check_round(store: LogStore, location: PartitionLocation, first_dirty_offset: int, first_uncleanable_offset: int,
                *, now_ms: int, wall_now_ms: int | None = None) -> None:
    """What cleaning this round would refuse or fail on, found without writing anything (a dry run's
    truth): the round re-checked against the log (``recheck_round``), its key map built from the dirty
    segments, and every other segment it rewrites read as the rewrite reads it (framing, CRCs, offsets,
    records). Takes no lock: a partition that changes meanwhile may pass here and fail for real."""
    if first_uncleanable_offset <= first_dirty_offset:
        return
    recheck_round(store, location, first_dirty_offset, first_uncleanable_offset, now_ms)
    ctx = open_clean_context(store, location, first_dirty_offset, first_uncleanable_offset, now_ms=now_ms,
                             wall_now_ms=wall_now_ms)
    verified: set[int] = set()
    key_map = build_key_map(ctx, CleanerStats(), verified)
    for group in ctx.groups(key_map.latest_offset + 1):
        for segment in group:
            if segment.base_offset not in verified:
                data, batches = _read_batches(segment)
                scan_records(data, batches, where=f"{segment.log_path}: ")


def split_overflowed_segments(ctx: CleanContext, lock_timeout_s: float = 30.0) -> None:
    """Kafka's cleaner splits a segment of the round whose offsets overflow its base (a cleaned segment
    based there could not index them: legacy KAFKA-6264, or an older kafkalog's cleaner) and aborts
    the round; the next round cleans the split segments. Only a segment followed by a gap of more
    than ``MAX_INT`` offsets can hold such offsets, so only those are read."""
    bases = [s.base_offset for s in ctx.log.segments]
    overflowed = [s for s, after in zip(ctx.segments, bases[1:], strict=False)
                  if s.base_offset < ctx.end_offset and after - 1 - s.base_offset > MAX_INT
                  and s.read_next_offset() - 1 - s.base_offset > MAX_INT]
    if not overflowed:
        return
    directory = ctx.location.directory
    with partition_lock(directory, timeout_s=lock_timeout_s):
        for segment in overflowed:
            split_overflowed_segment(directory, segment.base_offset)
    raise CleanerError(f"{directory}: segments {[s.base_offset for s in overflowed]} held offsets more than {MAX_INT} "
                       "above their base; each was split into segments that fit, as Kafka's cleaner does, and the "
                       "round aborted: the next round cleans them")


def clean_partition(store: LogStore, location: PartitionLocation, first_dirty_offset: int,
                    first_uncleanable_offset: int, *, now_ms: int, wall_now_ms: int | None = None,
                    run_id: str = "", lock_timeout_s: float = 30.0) -> CleanResult:
    """Clean ``[first_dirty, first_uncleanable)`` of one partition; see the module docstring."""
    tp = location.topic_partition
    result = CleanResult(tp.topic, tp.partition, first_dirty_offset, first_dirty_offset)
    with cleaner_lock(location.directory, timeout_s=0):
        resolve_leftovers(location, lock_timeout_s)
        if first_uncleanable_offset <= first_dirty_offset:
            return result
        recheck_round(store, location, first_dirty_offset, first_uncleanable_offset, now_ms)
        ctx = open_clean_context(store, location, first_dirty_offset, first_uncleanable_offset, now_ms=now_ms,
                                 wall_now_ms=wall_now_ms)
        split_overflowed_segments(ctx, lock_timeout_s)
        started = time.perf_counter()
        verified: set[int] = set()  # segments whose CRCs the map build checked: not checked again
        key_map = build_key_map(ctx, result.stats, verified)
        result.stats.map_seconds = time.perf_counter() - started
        result.end_offset = key_map.latest_offset + 1
        started = time.perf_counter()
        tracker = TxnTracker()  # one for the round: transactions are followed from group to group
        for group in ctx.groups(result.end_offset):
            cleaned = write_cleaned_group(ctx, group, key_map, tracker, result.stats, verified)
            swap_cleaned_group(ctx, cleaned, lock_timeout_s)
            result.groups.append((cleaned.source_bases, cleaned.base_offset))
        result.stats.clean_seconds = time.perf_counter() - started
        finish_round(ctx, result, run_id)
    return result


def finish_round(ctx: CleanContext, result: CleanResult, run_id: str) -> None:
    """After every group is swapped: the cleaner checkpoint, and the round in the journal."""
    location = ctx.location
    tp = location.topic_partition
    _write_cleaner_checkpoint(location, result.end_offset)
    journal.append(location.log_dir, journal.JournalEntry(
        run_id, ctx.clock.wall_ms, tp.topic, tp.partition, "compact",
        tuple(b for _, b in result.groups), f"cleaned [{ctx.first_dirty_offset}, {result.end_offset})",
        result.stats.bytes_read - result.stats.bytes_written,
        extra={"first_dirty_offset": ctx.first_dirty_offset, "end_offset": result.end_offset,
               "stats": result.stats.to_dict(), "groups": result.groups}))


# --- 1. the key map --------------------------------------------------------------------------------
def _map(segment: LogSegment) -> Buffer:
    """The segment's bytes, memory-mapped: an inactive segment is never written or truncated, and
    mapping it reads it from the page cache without copying it into fresh memory."""
    with open(segment.log_path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))  # the view keeps the map alive


def _read_batches(segment: LogSegment, *, check_crc: bool = True) -> tuple[Buffer, BatchColumns]:
    """The segment's bytes and its batches, CRCs checked unless ``check_crc`` is false."""
    data = _map(segment)
    where = f"{segment.log_path}: "
    batches = scan_batches(data, where=where)
    corrupt = find_corrupt_batch(data, batches, where) if check_crc else None
    if corrupt is not None:
        raise CleanerError(corrupt)
    if batches.valid_end != len(data):
        raise CleanerError(f"{where}{len(data) - batches.valid_end} bytes of an incomplete batch at its end")
    backwards = find_backward_batch(batches, where=where)  # cleaning through it would misfile records
    if backwards is not None:
        raise CleanerError(f"{backwards}; `kafkalog recover --full` truncates the log there")
    return data, batches


def _control_types(batches: BatchColumns, records: RecordColumns) -> dict[int, int | None]:
    """Control type of each control batch (None when it holds no record)."""
    out: dict[int, int | None] = {}
    for control in np.flatnonzero(batches.attributes & fmt.CONTROL_MASK):
        out[int(control)] = None
    if not out:
        return out
    first_rows = np.flatnonzero(np.r_[True, records.batch_index[1:] != records.batch_index[:-1]]) \
        if len(records) else np.empty(0, dtype=np.int64)
    for row in first_rows:
        b = int(records.batch_index[row])
        if b in out:
            try:
                out[b] = fmt.parse_control_type(records.key(int(row)))
            except KafkaLogError:
                out[b] = -1
    return out


def txn_events(segment: LogSegment) -> TxnEvents:
    """The segment's transactional data batches and control batches in offset order, as
    ``TxnTracker.replay`` takes them: (kind, producer id, last offset) rows, the kind a marker's
    control type (``EMPTY_CONTROL`` when it holds no record) or ``TXN_DATA``. Reads batch headers,
    and the first record of each control batch."""
    data = _map(segment)
    batches = scan_batches(data, where=f"{segment.log_path}: ")
    control = (batches.attributes & fmt.CONTROL_MASK) != 0
    rows = np.flatnonzero((batches.magic >= 2) & (control | ((batches.attributes & fmt.TRANSACTIONAL_MASK) != 0)))
    events = np.empty((len(rows), 3), dtype=np.int64)
    for n, b in enumerate(rows.tolist()):
        kind: int | None = TXN_DATA
        if control[b]:
            one = batches.window(b, b + 1)
            kind = _control_types(one, scan_records(data, one, where=f"{segment.log_path}: ")).get(0)
        events[n] = (EMPTY_CONTROL if kind is None else kind, int(batches.producer_id[b]), int(batches.last_offset[b]))
    return events


def _span(batches: BatchColumns) -> int:
    """The bytes a window of batches spans in its segment."""
    return int(batches.position[-1] + batches.size[-1] - batches.position[0]) if len(batches) else 0


def dirty_segments(ctx: CleanContext) -> list[LogSegment]:
    """The inactive segments holding offsets of the dirty range."""
    start, end, segments = ctx.first_dirty_offset, ctx.end_offset, ctx.segments
    return [s for i, s in enumerate(segments)
            if s.base_offset < end and (i + 1 == len(segments) or segments[i + 1].base_offset > start)]


def key_map_capacity(broker: BrokerConfig) -> int:
    """The keys a round's map may hold: Kafka's ``SkimpyOffsetMap`` over each cleaner thread's share of
    ``log.cleaner.dedupe.buffer.size`` (24 bytes a slot), filled to ``log.cleaner.io.buffer.load.factor``.
    kafkalog's map is exact (key bytes, not digests) and takes ~40 bytes a key plus long keys' bytes,
    so it counts keys as Kafka does and uses about 1.7x the buffer for short keys."""
    memory = min(broker.log_cleaner_dedupe_buffer_size // max(broker.log_cleaner_threads, 1), MAX_INT)
    return max(1, int(memory // 24 * broker.log_cleaner_io_buffer_load_factor))


def build_key_map(ctx: CleanContext, stats: CleanerStats, verified: set[int], *, part: int = 0,
                  parts: int = 1) -> KeyMap:
    """The key map of the dirty range; with ``parts`` > 1 only of the keys that the ``part``-th of
    that many maps owns by hash (``HashedKeyMap`` answers from all of them as from one map). Every
    part reads the whole dirty range but checks the CRCs of only its slice of the dirty segments
    (``map_slices``), so that together the parts check each segment once.

    A whole map (``parts`` = 1) holds at most ``key_map_capacity`` keys, as Kafka's does: when the
    dirty range holds more, the round covers only the prefix whose keys fit, and the next round goes
    on from there (spec §8.4 step 3). The round's end is the map's ``latest_offset`` + 1. Parts are
    not capped: they serve rounds whose keys fit (``cleaning_tasks.keys_fit``).

    Aborted transactions in the range are followed in offset order, each to its marker."""
    start, end = ctx.first_dirty_offset, ctx.end_offset
    dirty = dirty_segments(ctx)
    own = {s.base_offset for s in map_slices(dirty, parts)[part]}
    workspace = _scratch.source  # one segment's columns at a time: the map keeps what it needs
    aborted = [t for t in ctx.aborted if t.last_offset >= start and t.first_offset < end]
    tracker = TxnTracker(aborted)
    key_map = KeyMap(tracked=(start, end), part=part, parts=parts, range_bytes=sum(s.size for s in dirty),
                     max_entries=key_map_capacity(ctx.store.broker) if parts == 1 else None)
    audit = _TxnIndexAudit(aborted)
    for segment in dirty:
        checked = segment.base_offset in own
        data, segment_batches = _read_batches(segment, check_crc=checked)
        if checked:
            verified.add(segment.base_offset)
            stats.dirty_bytes += len(data)
        for lo, hi in segment_batches.windows(WINDOW_BYTES):
            if key_map.full_at is not None:
                break
            batches = segment_batches.window(lo, hi)
            ctx.throttle.maybe_throttle(_span(batches))
            where = f"{segment.log_path}: "
            has_txn = bool((batches.attributes & (fmt.TRANSACTIONAL_MASK | fmt.CONTROL_MASK)).any())
            if not has_txn and int(batches.magic.min(initial=2)) >= 2:
                # The common case, keys hashed straight from the bytes; the rewrite pass decodes and
                # validates every record of these batches before anything is swapped.
                bad = key_map.add_sections(record_sections(data, batches, where), batches.base_offset, start, end)
                if bad >= 0:
                    scan_records(data, batches.window(bad, bad + 1), where=where)  # raises the record's error
                    raise CleanerError(f"{where}batch at byte {int(batches.position[bad])} does not parse")
                continue
            records = scan_records(data, batches, where=where, workspace=workspace)
            controls = _control_types(batches, records)
            skip = np.zeros(len(batches), dtype=bool)
            for b in range(len(batches)) if has_txn else ():
                if b in controls:
                    tracker.on_control_batch_read(int(batches.producer_id[b]), int(batches.last_offset[b]),
                                                  controls[b])
                    audit.on_marker(segment, int(batches.producer_id[b]), int(batches.last_offset[b]), controls[b])
                    skip[b] = True
                else:
                    if batches.attributes[b] & fmt.TRANSACTIONAL_MASK:
                        audit.on_data(int(batches.producer_id[b]), int(batches.last_offset[b]))
                    skip[b] = tracker.on_batch_read(int(batches.producer_id[b]),
                                                    bool(batches.attributes[b] & fmt.TRANSACTIONAL_MASK),
                                                    int(batches.last_offset[b]))
            rows = np.flatnonzero((records.key_len >= 0) & (records.offset >= start) & (records.offset < end)
                                  & ~skip[records.batch_index])
            key_map.add(records, rows)
        if key_map.full_at is not None:
            end = _round_end(segment, segment_batches, key_map.full_at, key_map.last_inserted)
            break
    audit.check(start)
    key_map.update_latest_offset(end - 1)
    stats.map_records = key_map.records
    stats.map_keys = len(key_map)
    return key_map


def _round_end(segment: LogSegment, batches: BatchColumns, full_at: int, last_inserted: int) -> int:
    """Where a round whose map filled at the record at ``full_at`` (of ``segment``) ends: Kafka's map
    moves its latest offset to each record it takes, to each batch's last offset once the batch is
    read, and to the next segment's base - 1 once a segment is; the record that finds it full stops
    all of that."""
    b = int(np.searchsorted(batches.last_offset, full_at))  # the batch holding it
    if last_inserted >= int(batches.base_offset[b]):
        return last_inserted + 1  # the map filled within this batch
    return int(batches.last_offset[b - 1]) + 1 if b else segment.base_offset


class _TxnIndexAudit:
    """Finds an aborted transaction that the ``.txnindex`` does not list (Kafka creates that file
    lazily, so a deleted one looks like a segment without aborts). The cleaner would keep such
    aborted records as committed, and once their marker is gone ``read_committed`` readers would
    see them: the partition is refused instead, before anything is written."""

    def __init__(self, indexed: Sequence[AbortedTxn]) -> None:
        self.indexed = {(t.producer_id, t.last_offset) for t in indexed}
        self.data: dict[int, list[int]] = {}  # producer id -> last offsets of its transactional batches
        self.markers: dict[int, list[int]] = {}  # producer id -> offsets of its markers
        self.unlisted: list[tuple[LogSegment, int, int]] = []  # ABORT markers the index does not list

    def on_data(self, producer_id: int, last_offset: int) -> None:
        self.data.setdefault(producer_id, []).append(last_offset)

    def on_marker(self, segment: LogSegment, producer_id: int, offset: int, control_type: int | None) -> None:
        self.markers.setdefault(producer_id, []).append(offset)
        if control_type == fmt.ControlType.ABORT and (producer_id, offset) not in self.indexed:
            self.unlisted.append((segment, producer_id, offset))

    def check(self, start: int) -> None:
        """Raise if an unlisted ABORT marker ends a transaction that wrote data in the range (a marker
        with no data before it, since the producer's previous marker, aborts nothing here)."""
        for segment, producer_id, offset in self.unlisted:
            opened = max((m for m in self.markers[producer_id] if m < offset), default=start - 1)
            if any(opened < d < offset for d in self.data.get(producer_id, ())):
                raise CleanerError(
                    f"{segment.txn_index.path}: producer {producer_id}'s aborted transaction ending at offset "
                    f"{offset} is not in the transaction index, so its records would be kept as committed; "
                    "`kafkalog recover --full` rebuilds the index")


def map_slices(segments: list[LogSegment], parts: int) -> list[list[LogSegment]]:
    """``segments`` cut into ``parts`` contiguous slices of about equal bytes (some may be empty)."""
    total = sum(s.size for s in segments)
    slices: list[list[LogSegment]] = [[] for _ in range(parts)]
    done = 0
    for segment in segments:
        # The slice this segment's middle byte falls in: balanced, and every slice in offset order.
        slices[min(parts - 1, (2 * done + segment.size) * parts // (2 * total) if total else 0)].append(segment)
        done += segment.size
    return slices


def _legacy_delete_horizon(segments: Sequence[LogSegment], first_dirty: int, delete_retention_ms: int) -> int:
    before = [s for s in segments if s.base_offset < first_dirty]
    return before[-1].last_modified_ms() - delete_retention_ms if before else 0


# --- 2. grouping -----------------------------------------------------------------------------------
def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int, all_segments: Sequence[LogSegment]) -> list[list[LogSegment]]:
    """Kafka's greedy ``groupSegmentsBySize`` over segments in offset order. A cleaned segment's index
    holds offsets relative to its base, the group's first segment's, so a group spans at most
    ``MAX_INT`` offsets from there (an empty segment adds none)."""
    bases = [s.base_offset for s in all_segments]

    def last_offset_estimate(segment: LogSegment) -> int:
        """Below the next segment's base; for the last segment, below the first uncleanable offset,
        unless its records reach further (a last stable offset inside it): Kafka's estimate would
        then let the group overflow, and cleaning it fail round after round."""
        i = bases.index(segment.base_offset)
        if i + 1 < len(bases) and segment is not segments[-1]:
            return bases[i + 1] - 1
        return max(first_uncleanable_offset, segment.read_next_offset()) - 1

    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_bytes = group[0].size
        offset_index_bytes = len(group[0].offset_index) * 8
        time_index_bytes = len(group[0].time_index) * 12
        while rest:
            s = rest[0]
            fits = (log_bytes + s.size <= max_size
                    and offset_index_bytes + len(s.offset_index) * 8 <= max_index_size
                    and time_index_bytes + len(s.time_index) * 12 <= max_index_size
                    and (s.size == 0 or last_offset_estimate(s) - group[0].base_offset <= MAX_INT))
            if not fits:
                break
            group.append(rest.pop(0))
            log_bytes += s.size
            offset_index_bytes += len(s.offset_index) * 8
            time_index_bytes += len(s.time_index) * 12
        groups.append(group)
    return groups


# --- 3. cleaning a group ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CleanedGroup:
    """A group's verified ``.cleaned`` segment, written and waiting for its swap. The size and
    CRC-32C of its log file are the writer's word for what it wrote: the swap checks the file
    against them (Kafka's atomic move fails on a missing file; a cut or overwritten one must fail too)."""

    base_offset: int
    source_bases: list[int]
    fingerprint: list[tuple[int, int, int]]  # of the sources when they were read
    log_bytes: int
    log_crc32c: int


def write_cleaned_group(ctx: CleanContext, group: list[LogSegment], key_map: Supersession, tracker: TxnTracker,
                        stats: CleanerStats, verified: set[int], suffix: str = names.CLEANED_SUFFIX) -> CleanedGroup:
    """Recopy one group of source segments into a verified ``.cleaned`` segment (files only: the
    log is unchanged until ``swap_cleaned_group``). ``tracker`` is the round's transaction tracker as
    it stands at the group's first offset (after the earlier groups were written or replayed), so
    groups may be written in parallel, each from its own starting state, and swapped afterwards, in
    any order. ``suffix``: the output's file-name suffix, one of a task attempt's own (any name
    ending in ``.cleaned`` is a cleaner's leftover to recovery)."""
    directory = ctx.location.directory
    base = group[0].base_offset
    fingerprint = [_fingerprint(directory, s.base_offset) for s in group]
    tracker.start_group()
    config = ctx.log.config
    cleaned = LogSegment(directory, base, SegmentSettings(config.index_interval_bytes, config.segment_index_bytes),
                         suffix=suffix)
    try:
        cleaned.delete_files()
        positions: list[I64] = []  # the output's batches: where they start, their last offsets and max timestamps
        last_offsets: list[I64] = []
        max_timestamps: list[I64] = []
        size = crc = 0
        # The cleaned segment must reach into the group's last source segment that holds data: crash
        # recovery rolls a swap forward over [its base, its next offset) only, and an old segment left
        # beyond that range would survive beside the new one (an empty one may: it holds nothing). So
        # if that segment would contribute nothing, its last batch is kept as a 61-byte empty batch.
        # The group's first segment needs no cover: the cleaned segment takes its name.
        with_data = [s for s in group if s.size]
        covered = with_data[-1] if with_data and with_data[-1] is not group[0] else None
        # The output's bytes go to the file from a second thread, one window at a time, while the next
        # window is cleaned into the other set of scratch buffers (``_Scratch.flip``).
        with BackgroundWriter(cleaned.log_path) as writer:
            for segment in group:
                tracker.add_aborted(ctx.aborted_in(segment))
                retain_legacy = segment.last_modified_ms() > ctx.legacy_horizon
                cover_end = segment is covered
                for part, part_batches in _clean_segment(
                        segment, key_map, tracker, ctx.producers, ctx.first_uncleanable_offset, ctx.clock,
                        retain_legacy, stats, cover_end, check_crc=segment.base_offset not in verified,
                        throttle=ctx.throttle):
                    ctx.throttle.maybe_throttle(len(part))
                    writer.write(part)
                    crc = crc32c(part, crc)
                    _scratch.flip()
                    positions.append(part_batches.position + size)
                    last_offsets.append(part_batches.last_offset)
                    max_timestamps.append(part_batches.max_timestamp)
                    size += len(part)
            writer.close()
        # The output was verified batch by batch (CRCs, offsets, records): index it from those batches
        # rather than read it back, as recovery would index it. A group whose records all went is
        # one empty segment (Kafka's groups of emptied segments).
        empty = np.empty(0, dtype=np.int64)
        output_last_offsets = np.concatenate([empty, *last_offsets])
        if len(output_last_offsets) and int(output_last_offsets[-1]) - base > MAX_INT:
            raise CleanerError(f"{cleaned.log_path}: offset {int(output_last_offsets[-1])} does not fit a segment "
                               f"based at {base} (at most {MAX_INT} offsets above it); nothing swapped")
        cleaned.rebuild_indexes(np.concatenate([empty, *positions]), output_last_offsets,
                                np.concatenate([empty, *max_timestamps]), size)
        for txn in tracker.cleaned_index_entries:
            cleaned.txn_index.append(txn)
        cleaned.close()
        cleaned.flush()
        mtime_ns = group[-1].log_path.stat().st_mtime_ns
        for path in cleaned.files():
            if path.exists():
                os.utime(path, ns=(mtime_ns, mtime_ns))
    except BaseException:
        cleaned.delete_files()
        raise
    return CleanedGroup(base, [s.base_offset for s in group], fingerprint, size, crc)


def swap_cleaned_group(ctx: CleanContext, cleaned: CleanedGroup, lock_timeout_s: float = 30.0) -> None:
    """Swap a written group in under the partition lock, unless its sources changed since they were read."""
    directory = ctx.location.directory
    try:
        with partition_lock(directory, timeout_s=lock_timeout_s):
            now = [_fingerprint(directory, b) for b in cleaned.source_bases]
            if now != cleaned.fingerprint:
                raise CleanerError(f"{directory}: segments {cleaned.source_bases} changed while being cleaned; "
                                   "nothing swapped (the next cycle retries)")
            # Swapping a group whose output went missing, was cut short or overwritten would delete
            # its sources with nothing (or something else) in their place.
            check_cleaned_log(names.log_file(directory, cleaned.base_offset, names.CLEANED_SUFFIX), cleaned)
            replace_segments(directory, [cleaned.base_offset], cleaned.source_bases,
                             mark_time_ms=int(time.time() * 1000))
    except BaseException:
        LogSegment(directory, cleaned.base_offset, suffix=names.CLEANED_SUFFIX).delete_files()
        raise


def check_cleaned_log(path: Path, cleaned: CleanedGroup) -> None:
    """Raise unless ``path`` holds the bytes ``cleaned``'s writer wrote (its size and CRC-32C)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            crc = 0
            if size == cleaned.log_bytes and size:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data, memoryview(data) as view:
                    crc = crc32c(view)
    except FileNotFoundError:
        size = -1
    if size != cleaned.log_bytes or crc != cleaned.log_crc32c:
        found = "missing" if size < 0 else f"{size} bytes with CRC-32C {crc:#010x}"
        raise CleanerError(f"{path}: {found} at the swap, but its writer wrote {cleaned.log_bytes} bytes with "
                           f"CRC-32C {cleaned.log_crc32c:#010x}; nothing swapped")


def _fingerprint(directory: Path, base_offset: int) -> tuple[int, int, int]:
    info = names.log_file(directory, base_offset).stat()
    return base_offset, info.st_size, info.st_mtime_ns


def _clean_segment(segment: LogSegment, key_map: Supersession, tracker: TxnTracker,
                   producers: dict[int, tuple[int, int]], upper_bound: int, clock: _Clock, retain_legacy: bool,
                   stats: CleanerStats, cover_end: bool = False, *, check_crc: bool = True,
                   throttle: Throttler | Unthrottled = UNTHROTTLED) -> Iterator[tuple[Buffer, BatchColumns]]:
    """``cleanInto`` for one source segment, a window of batches at a time: the bytes of each window's
    retained batches, verified, and their batches. The bytes may be a view of scratch memory, valid
    until the next window is cleaned. With ``cover_end``, a segment that would contribute nothing
    keeps its last batch as an empty one (see ``write_cleaned_group``)."""
    data, segment_batches = _read_batches(segment, check_crc=check_crc)
    stats.bytes_read += len(data)
    kept_any = False
    for lo, hi in segment_batches.windows(WINDOW_BYTES):
        batches = segment_batches.window(lo, hi)
        throttle.maybe_throttle(_span(batches))
        records = scan_records(data, batches, where=f"{segment.log_path}: ", workspace=_scratch.source)
        out, out_batches = _clean_window(
            segment, data, batches, records, key_map, tracker, producers, upper_bound, clock, retain_legacy, stats,
            cover_end and not kept_any and hi == len(segment_batches))
        kept_any = kept_any or len(out_batches) > 0
        yield out, out_batches


def _clean_window(segment: LogSegment, data: Buffer, batches: BatchColumns, records: RecordColumns,
                  key_map: Supersession, tracker: TxnTracker, producers: dict[int, tuple[int, int]],
                  upper_bound: int, clock: _Clock, retain_legacy: bool, stats: CleanerStats,
                  cover_end: bool) -> tuple[Buffer, BatchColumns]:
    n = len(batches)
    stats.records_read += len(records)
    controls = _control_types(batches, records)
    is_control = (batches.attributes & fmt.CONTROL_MASK) != 0
    has_horizon = (batches.magic >= 2) & ((batches.attributes & fmt.DELETE_HORIZON_MASK) != 0)
    next_offset = batches.last_offset + 1
    can_discard = np.zeros(n, dtype=bool)
    discard_records = np.zeros(n, dtype=bool)
    retain_empty = next_offset == upper_bound
    if (batches.producer_id >= 0).any() or is_control.any():
        for b in range(n):
            pid, last = int(batches.producer_id[b]), int(batches.last_offset[b])
            if is_control[b]:
                can_discard[b] = tracker.on_control_batch_read(pid, last, controls.get(b))
                discard_records[b] = (can_discard[b] and bool(has_horizon[b])
                                      and int(batches.base_timestamp[b]) <= clock.now_ms)
            else:
                can_discard[b] = tracker.on_batch_read(pid, bool(batches.attributes[b] & fmt.TRANSACTIONAL_MASK), last)
                discard_records[b] = can_discard[b]
            if pid >= 0 and pid in producers:
                last_data_offset, epoch = producers[pid]
                if (last == last_data_offset) if last_data_offset >= 0 else \
                        (bool(is_control[b]) and int(batches.producer_epoch[b]) == epoch):
                    retain_empty[b] = True
    # Record decisions, vectorised (shouldRetainRecord). A record is superseded when the map holds a
    # later offset of its key; the rows the map was built from are answered by its bitmap.
    b_of = records.batch_index
    has_key = records.key_len >= 0
    superseded = np.zeros(len(records), dtype=bool)
    # Control records and those of discarded batches are decided without it (decide_records), so
    # only the other keyed rows are asked; those of the dirty range are the rows the map inserted.
    mapped = np.flatnonzero(has_key & (records.offset <= key_map.latest_offset) & ~(is_control | discard_records)[b_of])
    superseded[mapped] = key_map.superseded(records, mapped, np.ones(len(mapped), dtype=bool))
    retain_deletes = np.where(batches.magic >= 2, ~has_horizon | (clock.now_ms < batches.base_timestamp), retain_legacy)
    keep, retained, counts, tombstone_kept, row_start, aborted, unkeyed, tombstones = decide_records(
        records.batch_index, records.key_len, records.value_len, records.offset, superseded, key_map.latest_offset,
        discard_records, is_control, retain_deletes, n)
    stats.aborted_records_removed += aborted
    stats.unkeyed_records_removed += unkeyed
    stats.tombstones_removed += tombstones
    needs_horizon = (batches.magic >= 2) & (tombstone_kept | (can_discard & is_control)) & ~has_horizon
    action = np.where(retained > 0, np.where((retained == counts) & ~needs_horizon, COPY, REBUILD),
                      np.where(retain_empty & (batches.magic >= 2), EMPTY, DROP))
    legacy = batches.magic < 2
    if legacy.any():
        # KAFKA-4298: old cleaners wrote wrappers holding records of another magic. A wrapper that keeps
        # such a record is rebuilt in its own magic even when it keeps them all (filterTo's writeOriginal).
        rows = np.flatnonzero(keep & legacy[b_of])
        other_magic = rows[records.legacy_magic(rows) != batches.magic[b_of[rows]]]
        action[b_of[other_magic]] = REBUILD
    if cover_end and n and (action == DROP).all() and int(batches.magic[-1]) >= 2:
        action[-1] = EMPTY
    out = _assemble(data, batches, records, keep, action, row_start, needs_horizon, clock, stats)
    out_batches = _verify(segment, out, records, keep, batches, action)
    stats.bytes_written += len(out)
    stats.records_written += int(keep.sum())
    return out, out_batches


def _assemble(data: Buffer, batches: BatchColumns, records: RecordColumns, keep: npt.NDArray[np.bool_],
              action: I64, row_start: I64, needs_horizon: npt.NDArray[np.bool_], clock: _Clock,
              stats: CleanerStats) -> Buffer:
    stats.batches_copied += int((action == COPY).sum())
    stats.batches_rebuilt += int((action == REBUILD).sum())
    stats.empty_batches_kept += int((action == EMPTY).sum())
    if (batches.magic >= 2).all():
        return _assemble_compiled(data, batches, records, keep, action, row_start, needs_horizon, clock)
    return _assemble_per_batch(data, batches, records, keep, action, row_start, needs_horizon, clock)


def _assemble_compiled(data: Buffer, batches: BatchColumns, records: RecordColumns, keep: npt.NDArray[np.bool_],
                       action: I64, row_start: I64, needs_horizon: npt.NDArray[np.bool_], clock: _Clock) -> Buffer:
    """One compiled pass writes every batch (rebuilt records uncompressed); Python then compresses the
    records of rebuilt compressed batches with their codec and fills in the CRCs."""
    has_horizon = (batches.attributes & fmt.DELETE_HORIZON_MASK) != 0
    horizon = np.where(needs_horizon, clock.horizon_ms, np.where(has_horizon, batches.base_timestamp, -1))
    # Room for every batch copied, plus every record rebuilt uncompressed with a timestamp delta that
    # grew to 10 bytes (a stamped horizon), plus an empty header for every batch.
    rebuilt_bytes = int(records.record_size.sum(dtype=np.int64)) if len(records) else 0
    out = _scratch.out_bytes(int(batches.size.sum()) + rebuilt_bytes + 10 * len(records) + 61 * len(batches))
    end, starts, needs_crc = assemble_uncompressed(
        as_array(data), batches.position, batches.size, action.astype(np.int64), row_start.astype(np.int64),
        keep, horizon.astype(np.int64), records.data, records.record_pos, records.record_size, records.timestamp,
        out)
    view = memoryview(out)  # type: ignore[arg-type]  # ndarray is a buffer
    codecs = batches.attributes & fmt.COMPRESSION_MASK
    recompress = (action == REBUILD) & (codecs != 0)
    _fill_crcs(out, starts[np.flatnonzero(needs_crc & ~recompress)])
    if not recompress.any():
        return view[:end]
    # Second pass: batches before each recompressed one are moved as they are; the recompressed
    # batch's records go straight from ``out`` into ``final`` through the codec.
    rebuilt = np.flatnonzero(recompress)
    # Their records sections add up to less than ``end``: room for each one's compress_bound.
    final = _scratch.final_bytes(compression.compress_bound(end) + 64 * len(rebuilt))
    if lz4_native.AVAILABLE and bool((codecs[rebuilt] == CompressionType.LZ4.value).all()):
        size, new_starts = recompress_lz4(out, end, starts[rebuilt], _LZ4_FRAME_HEADER,
                                          compression.LZ4_BLOCK_BYTES, final)
        _fill_crcs(final, new_starts)
        return memoryview(final)[:size]  # type: ignore[arg-type]  # ndarray is a buffer
    into = memoryview(final)  # type: ignore[arg-type]  # ndarray is a buffer
    q = cursor = 0
    for batch in rebuilt.tolist():
        s = int(starts[batch])
        length = int.from_bytes(view[s + 8:s + 12], "big")
        into[q:q + s - cursor] = view[cursor:s]
        q += s - cursor
        into[q:q + 61] = view[s:s + 61]
        size = 61 + compression.compress_into(CompressionType(int(codecs[batch])), view[s + 61:s + 12 + length],
                                              into[q + 61:])
        struct.pack_into(">i", into, q + 8, size - fmt.LOG_OVERHEAD)
        struct.pack_into(">I", into, q + fmt.CRC_OFFSET, crc32c(into[q + fmt.ATTRIBUTES_OFFSET:q + size]))
        q += size
        cursor = s + 12 + length
    into[q:q + end - cursor] = view[cursor:end]
    return into[:q + end - cursor]


def _fill_crcs(out: npt.NDArray[np.uint8], starts: I64) -> None:
    """Write the CRC of each v2 batch starting at ``starts`` in ``out`` (its length field is set)."""
    if not len(starts):
        return
    length = np.zeros(len(starts), dtype=np.int64)
    for i in range(4):  # the big-endian batch length at +8
        length = (length << 8) | out[starts + 8 + i]
    crcs = batch_crcs(out, starts, starts + fmt.LOG_OVERHEAD + length)
    for i in range(4):  # big-endian at +17
        out[starts + fmt.CRC_OFFSET + i] = (crcs >> (8 * (3 - i))) & 0xFF


def _assemble_per_batch(data: Buffer, batches: BatchColumns, records: RecordColumns, keep: npt.NDArray[np.bool_],
                        action: I64, row_start: I64, needs_horizon: npt.NDArray[np.bool_], clock: _Clock) -> bytes:
    out = bytearray()
    view = memoryview(data)
    run_start = -1  # coalesce consecutive copied batches into one slice
    for b in range(len(batches)):
        kind = int(action[b])
        pos = int(batches.position[b])
        if kind == COPY:
            if run_start < 0:
                run_start = pos
            continue
        if run_start >= 0:
            out += view[run_start:pos]
            run_start = -1
        if kind == DROP:
            continue
        s, e = int(row_start[b]), int(row_start[b + 1])
        rows = (np.flatnonzero(keep[s:e]) + s).astype(np.int64)
        magic = int(batches.magic[b])
        if magic < 2:
            # Only a wrapper is rebuilt (a plain message is kept whole or dropped): a new wrapper of the
            # retained records in its magic and codec, at the last one's offset (buildRetainedRecordsInto).
            from kafkalog.format import legacy

            attributes = int(batches.attributes[b])
            retained = [fmt.Record(int(records.offset[r]), int(records.timestamp[r]), records.key(r), records.value(r))
                        for r in rows.tolist()]
            out += legacy.build_wrapper(magic, CompressionType(attributes & fmt.COMPRESSION_MASK),
                                        legacy.timestamp_type(magic, attributes), retained,
                                        log_append_time=int(batches.max_timestamp[b]))
            continue
        header = fmt.parse_header(view, pos)
        if kind == EMPTY:
            out += fmt.empty_header_batch(header)
            continue
        horizon = clock.horizon_ms if needs_horizon[b] else header.delete_horizon_ms
        base_timestamp = horizon if horizon is not None else int(records.timestamp[rows[0]])
        body: bytes | npt.NDArray[np.uint8] = rebuild_records(records.data, records.record_pos, records.record_size,
                                                               records.timestamp, rows, base_timestamp)
        if header.compression is not CompressionType.NONE:
            body = compression.compress(header.compression, bytes(body))
        max_timestamp = header.max_timestamp if header.timestamp_type is fmt.TimestampType.LOG_APPEND_TIME \
            else int(records.timestamp[rows].max())
        attributes = header.attributes | (fmt.DELETE_HORIZON_MASK if horizon is not None else 0)
        out += fmt.assemble_batch(header.base_offset, header.partition_leader_epoch, attributes,
                                  header.last_offset_delta, base_timestamp, max_timestamp, header.producer_id,
                                  header.producer_epoch, header.base_sequence, len(rows), bytes(body))
    if run_start >= 0:
        out += view[run_start:]
    return bytes(out)


def _verify(segment: LogSegment, out: Buffer, records: RecordColumns, keep: npt.NDArray[np.bool_],
            batches: BatchColumns, action: I64) -> BatchColumns:
    """The output holds exactly the records that had to survive, byte for byte, in valid batches;
    returns its batches."""
    where = f"{segment.log_path} (cleaned): "
    out_batches = scan_batches(out, where=where)
    corrupt = find_corrupt_batch(out, out_batches, where)
    if corrupt is not None or out_batches.valid_end != len(out):
        raise CleanerError(corrupt or f"{where}trailing bytes in the cleaned output")
    kept_batches = np.flatnonzero(action != DROP)
    expected = np.flatnonzero(keep).astype(np.int64)
    base, last, timestamps = batches.base_offset, batches.last_offset, records.timestamp[expected]
    legacy = batches.magic < 2
    if legacy.any():
        # A rebuilt wrapper sits at its last retained offset, and its records carry the timestamps its
        # magic and timestamp type give them: none in v0, the wrapper's (the original's) with LogAppendTime.
        of_row = records.batch_index[expected]
        rebuilt = legacy & (action == REBUILD)
        in_rebuilt = rebuilt[of_row]
        last = last.copy()
        last[rebuilt] = -1
        np.maximum.at(last, of_row[in_rebuilt], records.offset[expected[in_rebuilt]])
        base = np.where(rebuilt, last, base)
        log_append = rebuilt & (batches.magic == 1) & ((batches.attributes & fmt.TIMESTAMP_TYPE_MASK) != 0)
        timestamps = np.where((rebuilt & (batches.magic == 0))[of_row], fmt.NO_TIMESTAMP,
                              np.where(log_append[of_row], batches.max_timestamp[of_row], timestamps))
    if not (np.array_equal(out_batches.base_offset, base[kept_batches])
            and np.array_equal(out_batches.last_offset, last[kept_batches])
            and np.array_equal(out_batches.magic, batches.magic[kept_batches])):
        raise CleanerError(f"{where}batch base/last offsets or magics differ from the source batches")
    out_records = scan_records(out, out_batches, where=where, workspace=_scratch.output)
    if not (np.array_equal(out_records.offset, records.offset[expected])
            and np.array_equal(out_records.timestamp, timestamps)):
        raise CleanerError(f"{where}the retained records' offsets or timestamps differ from the source")
    mine = np.arange(len(out_records), dtype=np.int64)
    if legacy.any():
        # Legacy records: the same key and value, in a message of its wrapper's magic (KAFKA-4298 repaired).
        old = legacy[records.batch_index[expected]]
        for r, i in zip(expected[old].tolist(), mine[old].tolist(), strict=True):
            if records.key(r) != out_records.key(i) or records.value(r) != out_records.value(i):
                raise CleanerError(f"{where}record at offset {int(out_records.offset[i])} differs from its source")
        magics = out_records.legacy_magic(mine[old])
        other = np.flatnonzero(magics != out_batches.magic[out_records.batch_index[mine[old]]])
        if len(other):
            raise CleanerError(f"{where}record at offset {int(out_records.offset[mine[old][other[0]]])} has "
                               f"magic {int(magics[other[0]])}, not its wrapper's")
        expected, mine = expected[~old], mine[~old]
    bad = records_equal(records.data, records.record_pos, records.record_size, expected, out_records.data,
                        out_records.record_pos, out_records.record_size, mine,
                        after_timestamp_delta(records.data, records.record_pos, expected),
                        after_timestamp_delta(out_records.data, out_records.record_pos, mine))
    if bad >= 0:
        raise CleanerError(f"{where}record at offset {int(out_records.offset[mine[bad]])} differs from its source")
    return out_batches


# --- 4. checkpoint ---------------------------------------------------------------------------------
def _write_cleaner_checkpoint(location: PartitionLocation, end_offset: int) -> None:
    tp = location.topic_partition
    path = Path(location.log_dir) / names.CLEANER_OFFSET_CHECKPOINT
    with log_dir_lock(location.log_dir):
        entries = checkpoint.read_offset_checkpoint(path)
        entries[(tp.topic, tp.partition)] = end_offset
        checkpoint.write_offset_checkpoint(path, entries)
