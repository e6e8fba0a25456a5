"""What the pure planners read of partition logs: immutable snapshots, and the lazy segment source
retention planning walks.

Taking a snapshot is cheap on purpose: one ``scandir`` per partition, a ``stat`` per segment, the last
entry of each time index, and a short read at the tail of the active segment for the log end offset.
Retention, which scans every partition every cycle, reads less still: ``RetentionSource`` lists the
segments and reads each one's size, largest timestamp and the log end offset only when the planner
asks, once (as Kafka's ``deletableSegments(predicate)`` walks the segments and stops at the first it
keeps). Neither decides anything. No segment data is decoded.
"""

from __future__ import annotations

import errno
import os
import stat as stat_module
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from kafkalog.errors import KafkaLogError, UnknownFileError
from kafkalog.log import checkpoint, names
from kafkalog.log.config import LogConfig

if TYPE_CHECKING:
    from kafkalog.log.segment import LogSegment

_TIME_ENTRY = struct.Struct(">qi")
_INDEX_ENTRY = struct.Struct(">ii")
_ENVELOPE = struct.Struct(">qi")
MAX_LONG = (1 << 63) - 1
UNSET = -2  # the compaction-only fields of a segment of a snapshot not taken for compaction


class SegmentSnapshot(NamedTuple):  # a tuple: retention builds one per segment of every partition, each cycle
    base_offset: int
    next_offset: int  # the next segment's base offset, or the log end offset for the last segment
    size_bytes: int
    max_timestamp_ms: int  # the time index's last entry, -1 when the index has none
    mtime_ms: int  # the .log file's modification time
    # Read only by compaction snapshots (UNSET otherwise):
    first_batch_timestamp_ms: int = UNSET  # the first batch's max timestamp; MAX_LONG when empty
    offset_index_bytes: int = UNSET  # entries x 8 of the offset index (trimmed size)
    time_index_bytes: int = UNSET  # entries x 12 of the time index

    @property
    def largest_timestamp_ms(self) -> int:
        """What time retention compares (``LogSegment.largestTimestamp``): the max timestamp, else mtime."""
        return self.max_timestamp_ms if self.max_timestamp_ms >= 0 else self.mtime_ms

    @property
    def largest_timestamp_source(self) -> str:
        return "time-index" if self.max_timestamp_ms >= 0 else "mtime"


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """A partition as its files say now."""

    topic: str
    partition: int
    log_dir: Path
    config: LogConfig
    segments: tuple[SegmentSnapshot, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    pending_delete_bytes: int
    # Compaction snapshots only: min(first offset of an open transaction but at least the log start
    # offset, high watermark) (None: not a compaction snapshot), and the partition's
    # cleaner-offset-checkpoint entry (None when it has none).
    last_stable_offset: int | None = None
    cleaner_checkpoint: int | None = None

    @property
    def directory(self) -> Path:
        return self.log_dir / f"{self.topic}-{self.partition}"

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True, slots=True)
class LogDirCheckpoints:
    """The per-log-dir checkpoint files, read once for all of its partitions."""

    log_start_offsets: Mapping[tuple[str, int], int]
    high_watermarks: Mapping[tuple[str, int], int]
    cleaner_offsets: Mapping[tuple[str, int], int]

    @classmethod
    def read(cls, log_dir: Path) -> LogDirCheckpoints:
        return cls(checkpoint.read_offset_checkpoint(log_dir / names.LOG_START_OFFSET_CHECKPOINT),
                   checkpoint.read_offset_checkpoint(log_dir / names.REPLICATION_OFFSET_CHECKPOINT),
                   checkpoint.read_offset_checkpoint(log_dir / names.CLEANER_OFFSET_CHECKPOINT))


def snapshot_log(log_dir: Path, topic: str, partition: int, config: LogConfig,
                 checkpoints: LogDirCheckpoints | None = None) -> LogSnapshot:
    """Snapshot one partition directory without changing it: every segment stat-ed, its time index's
    last entry read, and the log end offset framed from the last segment's tail.

    The high watermark is the log end offset (kafkalog's durable end), capped by a Kafka broker's
    ``replication-offset-checkpoint`` where one exists, and never below the log start offset.
    """
    checkpoints = checkpoints if checkpoints is not None else LogDirCheckpoints.read(log_dir)
    with RetentionSource(log_dir, topic, partition, config, checkpoints) as source:
        return source.snapshot()


def _log_prefixes(listing: list[str]) -> list[str]:
    """The 20-digit base offsets of the ``.log`` files of a listing, in offset order."""
    prefixes = [name[:20] for name in listing if name[20:] == names.LOG_SUFFIX]
    if not all(map(str.isdigit, prefixes)):  # checked apart: a per-name check costs a partition a third more
        prefixes = [prefix for prefix in prefixes if prefix.isdigit()]
    prefixes.sort()  # same width, so text order is offset order
    return prefixes


def _names_present(listing: list[str]) -> Collection[str]:
    # Asked once per segment read: scanning a short listing costs less than hashing it, but scanning a
    # partition of thousands of segments once per segment would grow with the square of its size.
    return frozenset(listing) if len(listing) > 256 else listing


def _high_watermark(log_start_offset: int, log_end_offset: int, checkpointed: int | None) -> int:
    # Kafka never lets the high watermark fall below the log start offset.
    capped = log_end_offset if checkpointed is None else min(log_end_offset, checkpointed)
    return max(log_start_offset, capped)


class _PartitionFiles:
    """A partition directory's files as one reader sees them: the listing, then each index's first and
    last entries and each segment's framed tail read once, however many checks ask. Every file is
    reached through the directory's descriptor (the kernel resolves one name per call instead of the
    whole path, which is most of what a stat or an open of a small file costs)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.fd = _open_partition_dir(directory)
        try:
            self.regular, self.irregular = _file_names(self.fd)
        except BaseException:
            self.close()
            raise
        self._ends: dict[str, tuple[bytes, bytes, int]] = {}
        self._tails: dict[str, _LogTail] = {}
        self._leader_epochs: list[tuple[int, int]] | None = None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def ends(self, name: str, entry_size: int) -> tuple[bytes, bytes, int]:
        """``_read_ends`` of the file, read once."""
        found = self._ends.get(name)
        if found is None:
            found = self._ends[name] = _read_ends(self.fd, self.directory, name, entry_size)
        return found

    def leader_epochs(self) -> list[tuple[int, int]]:
        """The ``leader-epoch-checkpoint``'s entries (none if there is no file), read once."""
        if self._leader_epochs is None:
            try:
                fd = os.open(names.LEADER_EPOCH_CHECKPOINT, os.O_RDONLY, dir_fd=self.fd)
            except FileNotFoundError:
                raw = None
            else:
                try:
                    raw = b"".join(iter(partial(os.read, fd, 1 << 16), b""))
                finally:
                    os.close(fd)
            path = Path(self.directory, names.LEADER_EPOCH_CHECKPOINT)
            self._leader_epochs = checkpoint.read_leader_epoch_checkpoint(path, raw)
        return self._leader_epochs

    def tail(self, prefix: str, base_offset: int) -> _LogTail:
        """``_frame_log_tail`` of the segment, framed once."""
        found = self._tails.get(prefix)
        if found is None:
            found = self._tails[prefix] = _frame_log_tail(self, prefix, base_offset)
        return found


class RetentionSource:
    """One partition's segments as retention planning walks them (``policy.retention.plan_retention``):
    the listing up front, and each segment's size, largest timestamp and the log end offset read only
    when the planner asks, each once (``snapshot`` reads them all). It decides nothing: the planner's
    walk is what is read. Use it as a context manager: it holds the partition directory open (its
    ``_PartitionFiles``, which ``clean_log_end`` may go on reading)."""

    def __init__(self, log_dir: Path, topic: str, partition: int, config: LogConfig,
                 checkpoints: LogDirCheckpoints) -> None:
        self.topic, self.partition, self.log_dir, self.config = topic, partition, log_dir, config
        self._directory = f"{log_dir}/{topic}-{partition}"
        self.files = _PartitionFiles(self._directory)
        self._stats: dict[int, tuple[int, int]] = {}  # segment index -> (size, mtime ms)
        self._timestamps: dict[int, int] = {}
        self._end: int | None = None
        key = (topic, partition)
        self._hw_checkpoint = checkpoints.high_watermarks.get(key)
        try:
            _refuse_irregular_segment_files(self.files)
            self._listing = self.files.regular
            self._prefixes = _log_prefixes(self._listing)
            self._present = _names_present(self._listing)
            self._checkpointed_start = checkpoints.log_start_offsets.get(key, 0)
            if not self._prefixes:  # the loader's empty active segment at the checkpointed log start offset
                start = self._checkpointed_start
                self.bases: tuple[int, ...] = (start,)
                self.log_start_offset = self._end = start
                self._stats[0] = (0, os.stat(self.files.fd).st_mtime_ns // 1_000_000)
                self._timestamps[0] = -1
            else:
                self.bases = tuple(map(int, self._prefixes))
                self.log_start_offset = max(self._checkpointed_start, self.bases[0])
                if self._checkpointed_start > self.bases[-1]:
                    self.log_end_offset()  # a checkpointed start past the log's end is refused up front
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.files.close()

    def __enter__(self) -> RetentionSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stat(self, i: int) -> tuple[int, int]:
        if i not in self._stats:
            info = _regular_stat(self.files.fd, self._directory, self._prefixes[i] + names.LOG_SUFFIX)
            self._stats[i] = (info.st_size, info.st_mtime_ns // 1_000_000)
        return self._stats[i]

    def segment_bytes(self, i: int) -> int:
        return self._stat(i)[0]

    def largest_timestamp(self, i: int) -> tuple[int, str]:
        """``LogSegment.largestTimestamp`` of segment ``i`` and where it comes from (time-index or mtime)."""
        if i not in self._timestamps:
            prefix = self._prefixes[i]
            self._timestamps[i] = _largest_timestamp(self.files, prefix, self.bases[i],
                                                     prefix + names.INDEX_SUFFIX in self._present,
                                                     self._stats[i][0] if i in self._stats else None)
        max_ts = self._timestamps[i]
        return (max_ts, "time-index") if max_ts >= 0 else (self._stat(i)[1], "mtime")

    @property
    def listed(self) -> Collection[str]:
        """The names of the partition's regular files, as listed."""
        return self._present

    @property
    def timestamps_read(self) -> frozenset[int]:
        """The base offsets of the segments whose largest timestamp was read from their time index."""
        return frozenset(self.bases[i] for i in self._timestamps)

    def log_end_offset(self) -> int:
        if self._end is None:
            last = len(self.bases) - 1
            tail = self.files.tail(self._prefixes[last], self.bases[last])
            end = _log_end_offset(tail, self._directory, self.bases[last])
            checkpoint.check_log_start_offset(self._directory, self._checkpointed_start, end)
            self._stats.setdefault(last, (tail.log_size, tail.log_mtime_ms))
            self._end = end
        return self._end

    def high_watermark(self) -> int:
        ckpt = self._hw_checkpoint
        if ckpt is not None and ckpt <= self.bases[-1]:  # below the log end, whatever it is: no need to read it
            return max(self.log_start_offset, ckpt)
        return _high_watermark(self.log_start_offset, self.log_end_offset(), ckpt)

    def snapshot(self) -> LogSnapshot:
        """Every segment read: the partition as its files say now."""
        for i in range(len(self.bases) - 1):  # in offset order, the last segment's tail after them
            self.largest_timestamp(i)
            self._stat(i)
        end = self.log_end_offset()
        self.largest_timestamp(len(self.bases) - 1)
        nexts = (*self.bases[1:], end)
        segments = tuple(SegmentSnapshot(base, nexts[i], self._stats[i][0], self._timestamps[i], self._stats[i][1])
                         for i, base in enumerate(self.bases))
        return LogSnapshot(self.topic, self.partition, self.log_dir, self.config, segments, self.log_start_offset,
                           end, self.high_watermark(), _pending_delete_bytes(self.files.fd, self._listing))

    def high_watermark_reaches(self, offset: int) -> bool:
        """``highWatermark >= offset``, reading the log end offset only when ``offset`` lies past the last
        segment's base (below it, the end cannot be what caps the high watermark)."""
        if offset <= self.bases[-1]:
            ckpt = self._hw_checkpoint
            return ckpt is None or ckpt >= offset or self.log_start_offset >= offset
        return self.high_watermark() >= offset




def _open_partition_dir(directory: Path | str) -> int:
    """A descriptor of the partition directory, which must not be a symlink (``O_NOFOLLOW``: no extra
    call on the way; only a refusal asks why)."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and os.path.islink(directory):
            raise names.symlinked_partition_dir(directory) from None
        raise


def _file_names(dir_fd: int) -> tuple[list[str], list[str]]:
    """The names of the partition directory's regular files and of anything else in it, told by the
    listing's file types (no stat per file)."""
    with os.scandir(dir_fd) as listing:
        entries = list(listing)
    regular = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
    if len(regular) == len(entries):
        return regular, []
    return regular, [entry.name for entry in entries if not entry.is_file(follow_symlinks=False)]


def _refuse_irregular_segment_files(files: _PartitionFiles) -> None:
    """A symlink, FIFO, device or directory named like a segment file is refused: a segment the
    snapshot does not read is still checked."""
    for name in files.irregular:
        if names.parse_segment_file_name(name) is not None:
            raise names.not_a_regular_file(f"{files.directory}/{name}", os.stat(name, dir_fd=files.fd,
                                                                               follow_symlinks=False).st_mode)


def _regular_stat(dir_fd: int, directory: str, name: str) -> os.stat_result:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat_module.S_ISREG(info.st_mode):
        raise names.not_a_regular_file(f"{directory}/{name}", info.st_mode)
    return info


def _pending_delete_bytes(dir_fd: int, listing: list[str]) -> int:
    """The bytes of the segment files marked for deletion (``.deleted``), still on disk until swept."""
    if names.DELETED_SUFFIX not in "/".join(listing):  # the usual partition: one search instead of a loop
        return 0
    return sum(max(_regular_size(dir_fd, name), 0) for name in listing if name.endswith(names.DELETED_SUFFIX)
               and names.parse_segment_file_name(name) is not None)


def _regular_size(dir_fd: int, name: str) -> int:
    """The size of a regular file; -1 for a symlink, FIFO or device (each caller judges those)."""
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    return info.st_size if stat_module.S_ISREG(info.st_mode) else -1


def _open_regular(dir_fd: int, directory: str, name: str) -> tuple[int, os.stat_result]:
    """Open a file of the partition for reading; a symlink, FIFO or device is refused, never followed
    or waited on (``O_NONBLOCK`` keeps a FIFO from blocking the open)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise names.not_a_regular_file(f"{directory}/{name}", stat_module.S_IFLNK) from None
        raise
    info = os.fstat(fd)
    if not stat_module.S_ISREG(info.st_mode):
        os.close(fd)
        raise names.not_a_regular_file(f"{directory}/{name}", info.st_mode)
    return fd, info


def _read_ends(dir_fd: int, directory: str, name: str, entry_size: int) -> tuple[bytes, bytes, int]:
    """The first and the last whole ``entry_size`` bytes of a file (b"" if none) and its length (0 when
    it is missing)."""
    try:
        fd, info = _open_regular(dir_fd, directory, name)
    except FileNotFoundError:
        return b"", b"", 0
    try:
        size = info.st_size
        usable = size - size % entry_size
        if not usable:
            return b"", b"", size
        if usable <= 65536:  # the usual index: one read
            data = os.pread(fd, usable, 0)
            return data[:entry_size], data[len(data) - entry_size:], size
        return os.pread(fd, entry_size, 0), os.pread(fd, entry_size, usable - entry_size), size
    finally:
        os.close(fd)


def _largest_timestamp(files: _PartitionFiles, prefix: str, base_offset: int, has_offset_index: bool,
                       log_size: int | None = None) -> int:
    """The segment's max timestamp as Kafka's loader leaves it (-1 if it has none): the time index's
    last entry, read alone where possible; but where the offset index is missing or the time index is
    unusable, the loader rebuilds both from the log, so it is the largest batch timestamp there. Like
    Kafka's loader below the recovery point, it judges the offset index by its presence alone. The log
    is stat-ed (when ``log_size`` is not given) only if the time index cannot answer alone."""
    directory = files.directory
    head, tail, size = files.ends(prefix + names.TIME_INDEX_SUFFIX, _TIME_ENTRY.size) if has_offset_index \
        else (b"", b"", 0)
    if tail and size % _TIME_ENTRY.size == 0:
        timestamp, relative_offset = _TIME_ENTRY.unpack(tail)
        if relative_offset == 0 and size > _TIME_ENTRY.size:
            # A preallocated file from a running broker ends in zero slots: find the real last entry.
            from kafkalog.log.index import TimeIndex

            index = TimeIndex(Path(directory, prefix + names.TIME_INDEX_SUFFIX), base_offset)
            try:
                index.sanity_check()
                return index.last_entry()[0]
            except KafkaLogError:
                pass
        elif relative_offset >= 0 and timestamp >= _TIME_ENTRY.unpack(head)[0]:
            # Kafka's sanity check refuses a time index whose last timestamp is below its first.
            return int(timestamp)
    if log_size is None:
        log_size = _regular_stat(files.fd, directory, prefix + names.LOG_SUFFIX).st_size
    if log_size <= 0:
        return -1
    batches = _segment(directory, base_offset).scan_valid()
    return int(batches.max_timestamp.max()) if len(batches) else -1


def _segment(directory: str, base_offset: int) -> LogSegment:
    """The segment, for the rare files the fast paths above cannot read alone (the compiled kernels load
    here, not with this module: listing and planning retention do without them)."""
    from kafkalog.log.segment import LogSegment

    return LogSegment(Path(directory), base_offset)


class _LogTail(NamedTuple):
    """A segment's log framed from the position of its offset index's last entry."""

    log_size: int
    log_mtime_ms: int
    entries: tuple[tuple[int, int], ...]  # the index's first and last (relative offset, position); () if none
    position: int  # where framing started: the last entry's position, or 0 if that lies outside the log
    next_offset: int  # the offset after the last whole batch from there; -1 if the index could not say
    framed_bytes: int  # where that batch ends, counted from position
    unframed_bytes: int  # what follows it: a torn or zero-filled tail, or a position that starts no batch


def _frame_log_tail(files: _PartitionFiles, prefix: str, base_offset: int) -> _LogTail:
    """Frame the batch headers after the last offset-index entry: a segment's end without reading its
    start (an empty log needs no index). The index cannot say where to start (``next_offset`` -1) when
    it ends in a torn entry, or in the zero slots of a file a running broker preallocated: then only
    the whole segment tells where its data ends."""
    fd, info = _open_regular(files.fd, files.directory, prefix + names.LOG_SUFFIX)
    try:
        log_size, mtime_ms = info.st_size, info.st_mtime_ns // 1_000_000
        if not log_size:
            return _LogTail(0, mtime_ms, (), 0, base_offset, 0, 0)
        head, tail, index_size = files.ends(prefix + names.INDEX_SUFFIX, _INDEX_ENTRY.size)
        if index_size % _INDEX_ENTRY.size or (index_size > _INDEX_ENTRY.size and tail[:4] == bytes(4)):
            return _LogTail(log_size, mtime_ms, (), 0, -1, 0, log_size)
        entries = (_INDEX_ENTRY.unpack(head), _INDEX_ENTRY.unpack(tail)) if tail else ()
        position = entries[1][1] if entries and 0 <= entries[1][1] <= log_size else 0
        data = os.pread(fd, log_size - position, position)
    finally:
        os.close(fd)
    next_offset, end = _frame(data, base_offset)
    return _LogTail(log_size, mtime_ms, entries, position, next_offset, end, len(data) - end)


def _log_end_offset(tail: _LogTail, directory: str, base_offset: int) -> int:
    """The log end offset from the last segment's framed tail, or from the whole segment when the index
    could not say where to start or its last entry starts no batch."""
    if tail.next_offset < 0 or (tail.position > 0 and tail.framed_bytes == 0):
        return _segment(directory, base_offset).read_next_offset()
    return tail.next_offset


def _frame(data: bytes, base_offset: int) -> tuple[int, int]:
    """(the offset after the last whole batch, where that batch ends) from the batch headers alone."""
    next_offset, pos = base_offset, 0
    while pos + 17 < len(data):
        offset, length = _ENVELOPE.unpack_from(data, pos)
        if length < 14 or pos + 12 + length > len(data):
            break  # a torn or zero-filled tail ends the log
        if data[pos + 16] >= 2 and length >= 49:
            next_offset = offset + int.from_bytes(data[pos + 23:pos + 27], "big", signed=True) + 1
        else:
            next_offset = offset + 1
        pos += 12 + length
    return next_offset, pos


_INDEX_ENTRY_BYTES = {names.INDEX_SUFFIX: 8, names.TIME_INDEX_SUFFIX: 12, names.TXN_INDEX_SUFFIX: 34}
_KNOWN_SEGMENT_SUFFIXES = frozenset({*_INDEX_ENTRY_BYTES, names.LOG_SUFFIX, names.SNAPSHOT_SUFFIX})


def clean_log_end(directory: Path, recovery_point: int | None, clean_shutdown: bool, *,
                  source: RetentionSource | None = None) -> int | None:
    """The log end offset of a partition that Kafka's loader opens without recovering anything, else None
    (then only the full load can tell what to do).

    Clean means: only segment files, producer snapshots and the partition's own files (no ``.swap`` or
    ``.cleaned`` leftovers, no index without its log, no snapshot the loader would remove as stray);
    every segment with its offset index and, if it
    holds data, its time index, each a whole number of entries whose first and last entries lie inside
    the segment's offsets and data, in order; every segment's batches after its last offset-index entry
    ending exactly at its end (the bytes the full load's index check reads); a readable
    ``leader-epoch-checkpoint`` where there is one; and either the log end at the recovery point (every
    kafkalog writer flushes and records it when it closes a log, so a writer that died leaves the point
    behind the end) or a broker's ``.kafka_cleanshutdown`` in the log dir. Like Kafka's loader after a
    clean shutdown, it reads no index entries in between (``recover --full`` and ``verify`` check all).

    ``source``: the partition as a retention plan just read it, under the partition's lock (retention
    marking): its listing and reads are this check's, and only the files of the segments whose largest
    timestamp the plan read, and the last (the log end), are checked; the others' names are. What a
    full load could change under the plan's decisions.
    """
    present: set[str] = set()
    logs: list[str] = []
    files = source.files if source is not None else _PartitionFiles(str(directory))
    segments = source.timestamps_read if source is not None else None
    try:
        for name in (*files.regular, *files.irregular):
            if name in names.PARTITION_FILES or name.endswith(names.DELETED_SUFFIX):
                continue
            prefix, dot, suffix = name.partition(".")
            if len(prefix) != 20 or not prefix.isdigit() or dot + suffix not in _KNOWN_SEGMENT_SUFFIXES:
                return None  # a leftover, or a name only the full load can judge
            present.add(name)
            if dot + suffix == names.LOG_SUFFIX:
                logs.append(prefix)
        for name in present:
            if name[20:] in _INDEX_ENTRY_BYTES and name[:20] + names.LOG_SUFFIX not in present:
                return None  # an orphan index
        if not logs:
            return None
        logs.sort()
        snapshots = (int(name[:20]) for name in present if name.endswith(names.SNAPSHOT_SUFFIX))
        if names.stray_snapshot_offsets(snapshots, {int(prefix) for prefix in logs}):
            return None  # a producer snapshot the loader removes
        log_end = -1
        for prefix in logs:
            if segments is not None and prefix != logs[-1] and int(prefix) not in segments:
                if prefix + names.INDEX_SUFFIX not in present:
                    return None  # Kafka's loader rebuilds a missing offset index
                continue
            try:
                log_end = _clean_segment_end(files, prefix, present)
            except (FileNotFoundError, UnknownFileError):  # renamed since the listing, or not a regular file
                return None
            if log_end < 0:
                return None
        files.leader_epochs()  # loaded with it: an unreadable file stops the load
    finally:
        if source is None:
            files.close()
    return log_end if clean_shutdown or recovery_point == log_end else None


def _clean_segment_end(files: _PartitionFiles, prefix: str, present: set[str]) -> int:
    """The segment's next offset if it passes ``clean_log_end``'s checks, else -1."""
    base, time_name, txn_name = int(prefix), prefix + names.TIME_INDEX_SUFFIX, prefix + names.TXN_INDEX_SUFFIX
    if prefix + names.INDEX_SUFFIX not in present:
        return -1
    tail = files.tail(prefix, base)
    if tail.next_offset < 0 or tail.unframed_bytes or (tail.position and not tail.framed_bytes):
        return -1  # not ending on a batch boundary, or an index entry that starts no batch
    if not tail.log_size and _regular_size(files.fd, prefix + names.INDEX_SUFFIX):
        return -1  # entries pointing into an empty log (the framing above did not read the index)
    if tail.entries:
        (first_offset, first_position), (last_offset, last_position) = tail.entries
        if not 0 <= first_offset <= last_offset or not 0 <= first_position <= last_position < tail.log_size \
                or base + last_offset > max(base, tail.next_offset):
            return -1
    if txn_name in present and _regular_size(files.fd, txn_name) % _INDEX_ENTRY_BYTES[names.TXN_INDEX_SUFFIX]:
        return -1  # a torn entry, or not a regular file (-1)
    if time_name not in present:
        return -1 if tail.log_size else tail.next_offset
    head, last, size = files.ends(time_name, _TIME_ENTRY.size)
    if size % _TIME_ENTRY.size:
        return -1
    if last:
        (first_time, _), (last_time, last_relative) = _TIME_ENTRY.unpack(head), _TIME_ENTRY.unpack(last)
        if not (first_time <= last_time and 0 <= last_relative and base + last_relative < tail.next_offset):
            return -1  # also a preallocated index's zero slots: only the full load finds its real end
    return tail.next_offset


def snapshot_for_compaction(log_dir: Path, topic: str, partition: int, config: LogConfig,
                            checkpoints: LogDirCheckpoints | None = None) -> LogSnapshot:
    """A full snapshot plus what the cleaner manager needs: each segment's first batch timestamp and
    index sizes, the last stable offset (open transactions hold it back) and the cleaner checkpoint."""
    from kafkalog.log.local_log import LocalLog  # local: local_log imports this module's users
    from kafkalog.log.segment import LogSegment

    base = snapshot_log(log_dir, topic, partition, config, checkpoints)
    directory = Path(base.directory)
    segments = []
    for s in base.segments:
        if s.size_bytes == 0 and not names.log_file(directory, s.base_offset).exists():  # the loader's new segment
            segments.append(SegmentSnapshot(s.base_offset, s.next_offset, 0, -1, s.mtime_ms,
                                            first_batch_timestamp_ms=MAX_LONG, offset_index_bytes=0,
                                            time_index_bytes=0))
            continue
        segment = LogSegment(directory, s.base_offset)
        segments.append(SegmentSnapshot(
            s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp_ms, s.mtime_ms,
            first_batch_timestamp_ms=segment.first_batch_timestamp(),
            offset_index_bytes=len(segment.offset_index) * 8, time_index_bytes=len(segment.time_index) * 12))
    log = LocalLog.open(directory, config, log_start_offset=base.log_start_offset, read_only=True)
    first_unstable = log.first_unstable_offset()  # at or above the log start offset, as the high watermark is
    lso = base.high_watermark if first_unstable is None else min(first_unstable, base.high_watermark)
    cleaner = checkpoints.cleaner_offsets if checkpoints is not None else \
        checkpoint.read_offset_checkpoint(Path(log_dir) / names.CLEANER_OFFSET_CHECKPOINT)
    return LogSnapshot(topic, partition, log_dir, config, tuple(segments), base.log_start_offset,
                       base.log_end_offset, base.high_watermark, base.pending_delete_bytes,
                       last_stable_offset=lso, cleaner_checkpoint=cleaner.get((topic, partition)))
