"""``kafkalog verify``: decode everything, check everything, change nothing.

Per partition: every file name is one Kafka's layout explains; every batch frames, has a valid CRC
and decodes record by record; offsets strictly increase within and across batches and segments;
every offset-index entry points at the start of a batch whose chunk ends at the entry's offset; the
time index holds strictly increasing running maxima; the transaction index, producer snapshots and
checkpoint files parse. Each problem names the file and the byte position or offset.

Index entries are checked for *validity*, not equality with a rebuild: a broker's index depends on
history the ``.log`` does not record (multi-batch appends, restarts), see fixtures/INDEXES.md.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kafkalog.errors import KafkaLogError
from kafkalog.format import batch as fmt
from kafkalog.format.scan import ColumnWorkspace, find_corrupt_batch, scan_records
from kafkalog.log import checkpoint, names
from kafkalog.log.index import MAX_INT, OffsetIndex, TimeIndex
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_snapshot import read_producer_snapshot
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore, PartitionLocation

VERIFY_ATTEMPTS = 5
CHUNK_BYTES = 8 << 20  # read and checked at a time (a larger batch is read whole)


@dataclass
class PartitionReport:
    topic: str
    partition: int
    log_dir: str
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class VerifyReport:
    partitions: list[PartitionReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # log-dir level

    @property
    def ok(self) -> bool:
        return not self.problems and all(not p.problems for p in self.partitions)

    def all_problems(self) -> list[str]:
        return self.problems + [problem for p in self.partitions for problem in p.problems]


def verify_store(store: LogStore, topic: str | None = None, partition: int | None = None) -> VerifyReport:
    report = VerifyReport()
    if topic is None:
        for log_dir in store.log_dirs:
            report.problems += _verify_log_dir_files(log_dir)
    locations = store.partitions(topic, partition, symlinked=True)  # a symlinked one is reported, not followed
    if topic is not None and not locations:
        store.locate(topic, partition if partition is not None else 0)  # raises a clear error
    for location in locations:
        report.partitions.append(verify_partition(store, location))
    return report


def _verify_log_dir_files(log_dir: Path) -> list[str]:
    problems = []
    for name in (names.RECOVERY_POINT_CHECKPOINT, names.LOG_START_OFFSET_CHECKPOINT,
                 names.REPLICATION_OFFSET_CHECKPOINT, names.CLEANER_OFFSET_CHECKPOINT):
        try:
            checkpoint.read_offset_checkpoint(log_dir / name)
        except KafkaLogError as exc:
            problems.append(str(exc))
    return problems


def verify_partition(store: LogStore, location: PartitionLocation) -> PartitionReport:
    """Verify one partition. Readers take no lock: when retention or a swap renames a segment away
    meanwhile, the partition is verified again from the start, as it is then (a bounded number of times)."""
    for _ in range(VERIFY_ATTEMPTS - 1):
        try:
            return _verify_partition(store, location)
        except FileNotFoundError:
            continue
    return _verify_partition(store, location)


def _verify_partition(store: LogStore, location: PartitionLocation) -> PartitionReport:
    tp = location.topic_partition
    report = PartitionReport(tp.topic, tp.partition, str(location.log_dir))
    try:
        log = store.open_log(location, read_only=True)
    except KafkaLogError as exc:
        report.problems.append(str(exc))
        return report
    report.notes += log.load_report.notes
    _verify_partition_files(location.directory, report)
    previous_last = -1
    for i, segment in enumerate(log.segments):
        report.segments += 1
        try:
            previous_last = _verify_segment(segment, previous_last, i == len(log.segments) - 1, report)
        except KafkaLogError as exc:
            report.problems.append(str(exc))
    # The log end as the batches just read say (the log's own would read the last segment again).
    log_end_offset = max(previous_last + 1, log.segments[-1].base_offset) if log.segments else 0
    if log.segments and log.log_start_offset > log_end_offset:
        report.problems.append(f"{location.directory}: log start offset {log.log_start_offset} is past the "
                               f"log end offset {log_end_offset}")
    return report


def _verify_partition_files(directory: Path, report: PartitionReport) -> None:
    for path in sorted(directory.iterdir()):
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # renamed away since the listing (a swap or retention at work)
        if stat.S_ISDIR(mode):
            report.problems.append(f"{path}: unexpected directory inside a partition directory")
            continue
        try:
            names.check_partition_file(path, mode)
            if path.name == names.LEADER_EPOCH_CHECKPOINT:
                checkpoint.read_leader_epoch_checkpoint(path)
            elif path.name == names.PARTITION_METADATA:
                checkpoint.read_partition_metadata(path)
            elif path.name.endswith(names.SNAPSHOT_SUFFIX):
                read_producer_snapshot(path)
        except KafkaLogError as exc:
            report.problems.append(str(exc))


def _torn_bytes(segment: LogSegment, end: int) -> int:
    """The bytes after the last complete batch read at ``end``, if they do not hold a complete batch now
    (a torn write); 0 when they do: a writer appended it after the last read (readers take no lock)."""
    with open(segment.log_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = os.pread(f.fileno(), fmt.LOG_OVERHEAD, end)
    length = int.from_bytes(head[8:12], "big", signed=True) if len(head) == fmt.LOG_OVERHEAD else -1
    return 0 if fmt.MIN_ENTRY_LENGTH <= length <= size - end - fmt.LOG_OVERHEAD else max(0, size - end)


def _incomplete_batch_advice(segment: LogSegment, end: int, is_active: bool) -> str:
    """What repairs an incomplete batch at byte ``end``. ``kafkalog recover``, like Kafka's loader after a
    clean shutdown, reads only the active segment's bytes after its last offset-index entry (reading
    every segment would make it read the whole store), so it cuts a torn write there and nothing else:
    a segment a later one follows, or an incomplete batch before that entry, is damage that only
    ``recover --full`` (which re-validates every segment) truncates."""
    if is_active:
        try:
            _, last_entry = segment.offset_index.lookup(1 << 62)
        except KafkaLogError:
            last_entry = end + 1  # an index recovery cannot use: say what always works
        if last_entry <= end:
            return "a torn write; `kafkalog recover` truncates it"
    where = "in the active segment" if is_active else "in a segment a later one follows"
    return (f"{where}: damage, not a write in progress; `kafkalog recover --full` truncates the log there, as "
            "Kafka's recovery would; what follows is lost")


class _Batches(NamedTuple):
    """The header columns the index checks need, for the whole segment (positions from its start)."""

    position: npt.NDArray[np.int64]
    base_offset: npt.NDArray[np.int64]
    last_offset: npt.NDArray[np.int64]
    max_timestamp: npt.NDArray[np.int64]
    end: int  # where the last of them ends
    # The active segment's size once its index was read (else ``end``): a writer appends a batch before
    # its index entry, so entries between ``end`` and this point at batches appended after the read.
    appended_to: int

    def __len__(self) -> int:
        return len(self.position)


def _verify_segment(segment: LogSegment, previous_last: int, is_active: bool, report: PartitionReport) -> int:
    """Check a segment a chunk at a time: memory stays bounded by a chunk and its record columns, and
    the same buffers serve every chunk (fresh memory costs a page fault per page, which for a large
    segment costs more than checking it)."""
    where = segment.where()
    workspace = ColumnWorkspace()
    columns: list[tuple[npt.NDArray[np.int64], ...]] = []
    end = 0
    for view, batches, chunk_at in segment.scan_chunks(chunk_bytes=CHUNK_BYTES):
        end = chunk_at + batches.valid_end
        at = segment.where(chunk_at)
        report.batches += len(batches)
        corrupt = find_corrupt_batch(view, batches, at)
        if corrupt is not None:
            report.problems.append(f"{corrupt} (`kafkalog recover --full` truncates the log there, as Kafka's "
                                   "recovery would; what follows is lost)")
            return previous_last
        records = scan_records(view, batches, where=at, workspace=workspace)
        report.records += len(records)
        if not len(batches):
            continue
        bases, lasts = batches.base_offset, batches.last_offset
        if not chunk_at and int(bases[0]) < segment.base_offset:
            report.problems.append(f"{where}first batch offset {int(bases[0])} is below the segment base "
                                   f"offset {segment.base_offset}")
        unaddressable = np.flatnonzero(lasts - segment.base_offset > MAX_INT)
        if len(unaddressable):
            report.problems.append(f"{where}offset {int(lasts[unaddressable[0]])} does not fit the segment based at "
                                   f"{segment.base_offset} (its index holds at most {MAX_INT} offsets above the "
                                   "base; `kafkalog recover --full` splits the segment into ones that fit, as "
                                   "Kafka's loader does)")
        if not chunk_at and int(bases[0]) <= previous_last:
            report.problems.append(f"{where}offset {int(bases[0])} does not follow the previous segment's "
                                   f"last offset {previous_last}")
        # Every batch starts after the one before it: for a chunk's first, the previous chunk's last
        # (the segment's first was checked against the previous segment just above).
        before = np.concatenate(([previous_last], lasts[:-1]))
        backwards = np.flatnonzero(bases <= before)
        backwards = backwards if chunk_at else backwards[backwards > 0]
        if len(backwards):
            j = int(backwards[0])
            report.problems.append(f"{where}batch at byte {chunk_at + int(batches.position[j])} starts at offset "
                                   f"{int(bases[j])}, not after the previous batch's last offset {int(before[j])} "
                                   "(`kafkalog recover --full` truncates the log there)")
        if len(records):
            # A legacy compressed wrapper's offset is its last record's (Kafka's wrapper header), so
            # its inner records lie below it; a v2 batch's lie from its base offset on.
            inside = np.where(batches.magic[records.batch_index] >= 2, records.offset - bases[records.batch_index], 0)
            beyond = records.offset > lasts[records.batch_index]
            same_batch = records.batch_index[1:] == records.batch_index[:-1]
            not_increasing = same_batch & (np.diff(records.offset) <= 0)
            if (inside < 0).any() or beyond.any() or not_increasing.any():
                report.problems.append(f"{at}record offsets are outside their batch or not increasing")
        previous_last = int(lasts[-1])
        columns.append((batches.position + chunk_at, bases, lasts, batches.max_timestamp))
    torn = _torn_bytes(segment, end)
    report.bytes += end + torn
    # The files as they are on disk: a read-only open puts an unusable index aside in memory, but the
    # file itself is what a broker (or the next writing command) would meet. Its indexes are read here.
    on_disk = LogSegment(segment.directory, segment.base_offset, segment.settings, suffix=segment.suffix)
    if torn:
        report.problems.append(f"{where}{torn} bytes of an incomplete batch at byte {end} "
                               f"({_incomplete_batch_advice(on_disk, end, is_active)})")
    arrays = [np.concatenate(c) for c in zip(*columns, strict=True)] if columns else [np.empty(0, np.int64)] * 4
    whole = _Batches(arrays[0], arrays[1], arrays[2], arrays[3], end, max(on_disk.size, end) if is_active else end)
    _verify_offset_index(on_disk, whole, report)
    _verify_time_index(on_disk, whole, is_active, report)
    try:
        on_disk.txn_index.sanity_check()
    except KafkaLogError as exc:
        report.problems.append(str(exc))
    return previous_last


def _index_present_and_sane(index: OffsetIndex | TimeIndex, report: PartitionReport) -> bool:
    """Whether there are entries to check; a failed sanity check is reported (a missing or empty
    index is not a problem: Kafka rebuilds a missing one, and readers scan from the segment start)."""
    if not index.path.exists():
        return False
    try:
        index.sanity_check()
    except KafkaLogError as exc:
        report.problems.append(f"{exc} (`kafkalog recover` rebuilds it from the log)")
        return False
    return bool(len(index))


def _verify_offset_index(segment: LogSegment, batches: _Batches, report: PartitionReport) -> None:
    index = segment.offset_index
    if not _index_present_and_sane(index, report):
        return
    positions = batches.position
    lasts = batches.last_offset
    for slot in range(len(index)):
        offset, position = index.entry(slot)
        if batches.end <= position < batches.appended_to:
            return  # a batch a writer appended after it was read
        j = int(np.searchsorted(positions, position))
        if j >= len(positions) or int(positions[j]) != position:
            report.problems.append(f"{index.path}: entry {slot} (offset {offset}) points at byte {position}, "
                                   "which is not the start of a batch")
            return
        reaching = np.flatnonzero(lasts[j:] >= offset)
        if not len(reaching) or int(lasts[j + int(reaching[0])]) != offset or (j and int(lasts[j - 1]) >= offset):
            report.problems.append(f"{index.path}: entry {slot} (offset {offset}, byte {position}) is not the "
                                   "last offset of the chunk starting there")
            return


def _verify_time_index(segment: LogSegment, batches: _Batches, is_active: bool,
                       report: PartitionReport) -> None:
    index = segment.time_index
    if not _index_present_and_sane(index, report):
        return
    timestamps = index.entries["timestamp"].astype(np.int64)
    if (np.diff(timestamps) <= 0).any():
        report.problems.append(f"{index.path}: timestamps are not strictly increasing")
        return
    running_max = np.maximum.accumulate(batches.max_timestamp) if len(batches) else batches.max_timestamp
    appended = batches.appended_to > batches.end
    for slot in range(len(index)):
        timestamp, offset = index.entry(slot)
        if appended and (not len(batches) or offset > int(batches.last_offset[-1])):
            return  # in a batch a writer appended after it was read
        # The batch holding ``offset``: older brokers stored a record's offset, newer the batch's last.
        j = int(np.searchsorted(batches.last_offset, offset))
        if j >= len(batches) or int(batches.base_offset[j]) > offset:
            report.problems.append(f"{index.path}: entry {slot} offset {offset} is not in the segment")
            return
        if int(running_max[j]) != timestamp:
            report.problems.append(f"{index.path}: entry {slot} timestamp {timestamp} is not the running "
                                   f"maximum {int(running_max[j])} at offset {offset}")
            return
    if not is_active and len(batches) and int(timestamps[-1]) != int(running_max[-1]):
        report.problems.append(f"{index.path}: last entry {int(timestamps[-1])} is not the segment's max "
                               f"timestamp {int(running_max[-1])}")


def open_read_only(directory: Path, store: LogStore) -> LocalLog:
    tp = names.parse_partition_dir_name(directory.name)
    if tp is None:
        raise KafkaLogError(f"{directory}: not a partition directory")
    return store.open_log(PartitionLocation(tp, directory.parent), read_only=True)
