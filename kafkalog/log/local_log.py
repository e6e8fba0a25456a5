"""One partition's log: its segments in one directory (``LocalLog`` plus the append/roll/read parts
of ``UnifiedLog``).

Opening is Kafka's load (spec §11.2): temporary swap files are resolved, index files without a
``.log`` removed, segments whose index is missing or fails its sanity check recovered, and the
unflushed tail (past the recovery point) re-validated and cut at the first invalid batch. A
read-only open changes nothing: it computes the same view and rebuilds indexes only in memory.

For this store the high watermark is the durable log end: everything appended and flushed.
"""

from __future__ import annotations

import functools
import os
import random
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kafkalog.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    KafkaLogError,
    LogLockedError,
    OffsetOverflowError,
    RecordBatchTooLargeError,
)
from kafkalog.format import batch as fmt
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import RecordColumns, find_backward_batch, find_corrupt_batch, scan_batches, scan_records
from kafkalog.log import checkpoint, names
from kafkalog.log.config import BROKER_CONFIGS, LogConfig
from kafkalog.log.index import MAX_INT
from kafkalog.log.loader import apply_temp_file_plan, plan_temp_files, visible_files
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.producer_snapshot import (
    ProducerSnapshotEntry,
    ProducerSnapshotError,
    read_producer_snapshot,
    write_producer_snapshot,
)
from kafkalog.log.producer_state import ProducerState
from kafkalog.log.segment import LogSegment, SegmentSettings, summarize_batch
from kafkalog.log.split import split_overflowed_segment
from kafkalog.log.swap import mark_deleted

DEFAULT_PRODUCER_ID_EXPIRATION_MS = int(BROKER_CONFIGS["producer.id.expiration.ms"].default)  # type: ignore[arg-type]
READ_REOPENS = 8  # how often a reader follows segments renamed under it before it gives up
_COMPRESSION_BY_TOPIC_NAME = {"uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP,
                              "snappy": CompressionType.SNAPPY, "lz4": CompressionType.LZ4,
                              "zstd": CompressionType.ZSTD}
LEADER_EPOCH = 0  # kafkalog is the only "leader" a partition it writes has ever had


@dataclass(frozen=True)
class LoadReport:
    """What opening a partition found and did."""

    notes: tuple[str, ...]
    recovered_segments: tuple[int, ...]
    truncated_bytes: int


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    batches: int


class LocalLog:
    def __init__(self, directory: Path, topic_partition: names.TopicPartition, config: LogConfig,
                 segments: list[LogSegment], log_start_offset: int, recovery_point: int,
                 read_only: bool, report: LoadReport,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.config = config
        self._segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.read_only = read_only
        self.load_report = report
        # A writable open recovers the log and sets its end; a read-only one finds it when first asked.
        self._log_end_offset: int | None = None
        self._checkpointed_log_start_offset = log_start_offset
        self._producer_state: ProducerState | None = None
        self._snapshot_notes: list[str] = []  # corrupt snapshots a writable log deleted
        self._closed = False
        self.producer_id_expiration_ms = producer_id_expiration_ms  # the broker's

    # --- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, log_start_offset: int = 0,
             recovery_point: int | None = None, had_clean_shutdown: bool = False,
             read_only: bool = False, truncate_corrupt: bool = False,
             producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> LocalLog:
        """Load a partition directory; ``truncate_corrupt`` lets recovery cut a log at a corrupt
        batch (``kafkalog recover``), otherwise only a torn last batch is cut and corruption raises.
        A read-only open takes no lock: a file renamed away while it loads (a swap, retention) makes
        it load again, a bounded number of times; it reads no segment data until asked (the log end
        offset, a max timestamp, the stand-in for an unusable index): a reader that reads every batch
        itself (``verify``) or stops early (``consume --max-records``) reads each byte at most once."""
        split: set[int] = set()
        for attempt in range(READ_REOPENS if read_only else 1):
            while True:
                try:
                    log = cls._open(directory, config, log_start_offset=log_start_offset,
                                    recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                                    read_only=read_only, truncate_corrupt=truncate_corrupt)
                    log.producer_id_expiration_ms = producer_id_expiration_ms
                    return log
                except FileNotFoundError:
                    if attempt + 1 == READ_REOPENS or not read_only:
                        raise
                    break
                except OffsetOverflowError as exc:
                    # Kafka's loader splits such a segment and loads again (``retryOnOffsetOverflow``).
                    if read_only or exc.segment_base is None or exc.segment_base in split:
                        raise
                    split.add(exc.segment_base)
                    with cleaner_lock(Path(directory), timeout_s=0):
                        split_overflowed_segment(Path(directory), exc.segment_base)
        raise AssertionError("unreachable")

    @classmethod
    def _open(cls, directory: Path, config: LogConfig, *, log_start_offset: int, recovery_point: int | None,
              had_clean_shutdown: bool, read_only: bool, truncate_corrupt: bool) -> LocalLog:
        directory = Path(directory)
        topic_partition = names.parse_partition_dir_name(directory.name)
        if topic_partition is None:
            raise KafkaLogError(f"{directory}: not a partition directory (expected <topic>-<partition>)")
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except FileNotFoundError:
                    continue  # a writer's temp file, renamed away since the listing
                if not stat.S_ISDIR(mode):
                    names.check_partition_file(Path(entry.path), mode)
        # Recovery and appends update it: a file that cannot be read must stop them before they start.
        leader_epochs = None if read_only else _leader_epoch_cache(directory)
        settings = SegmentSettings(config.index_interval_bytes, config.segment_index_bytes)
        notes: list[str] = []
        plan = plan_temp_files(directory)
        notes += plan.notes
        if not read_only and not plan.empty:
            try:
                # Leftovers of a crashed cleaner are resolved; a running cleaner's files are not.
                with cleaner_lock(directory, timeout_s=0):
                    apply_temp_file_plan(plan)
                    plan = plan_temp_files(directory)
            except LogLockedError:
                notes.append("a cleaner is running: its in-flight files are left alone")
        view = visible_files(directory, plan)
        segments: list[LogSegment] = []
        rebuild: list[LogSegment] = []  # segments whose indexes are missing or corrupt
        for name in sorted(view):
            parsed = names.parse_segment_file_name(name)
            if parsed is None or parsed.suffix == names.LOG_SUFFIX or parsed.suffix == names.SNAPSHOT_SUFFIX:
                continue
            if names.log_file(directory, parsed.base_offset).name not in view:
                notes.append(f"orphan index file {name} " + ("ignored" if read_only else "deleted"))
                if not read_only:
                    view[name].unlink(missing_ok=True)
        for name in sorted(view):
            parsed = names.parse_segment_file_name(name)
            if parsed is None or parsed.suffix != names.LOG_SUFFIX:
                continue
            suffix = view[name].name[len(name):]  # ".swap" when seen through a pending promotion
            segment = LogSegment(directory, parsed.base_offset, settings, suffix=suffix)
            segment.roll_jitter_ms = _random_segment_jitter(config)  # as LogSegment.open draws it
            if not _indexes_sane(segment):
                notes.append(f"segment {parsed.base_offset}: index missing or corrupt, rebuilt"
                             + (" in memory" if read_only else ""))
                rebuild.append(segment)
            segments.append(segment)
        log = cls(directory, topic_partition, config, segments, log_start_offset,
                  recovery_point if recovery_point is not None else 0, read_only, LoadReport(tuple(notes), (), 0))
        if read_only:
            for segment in rebuild:
                segment.rebuild_in_memory(functools.partial(log.producer_state_at, segment.base_offset))
            if segments:
                log.log_start_offset = max(log_start_offset, segments[0].base_offset)
                if log_start_offset > segments[-1].base_offset:  # else it is below the end without reading it
                    checkpoint.check_log_start_offset(directory, log_start_offset, log.log_end_offset)
            return log
        if segments:  # checked before recovery writes anything, and again after it
            checkpoint.check_log_start_offset(directory, log_start_offset, segments[-1].read_next_offset())
        recovered: list[int] = []
        truncated = 0
        carried, carried_to = None, -1  # the producer state after the segment recovered last, and its offset
        for segment in rebuild:  # in offset order, each from the producer state at its base
            state = carried if carried is not None and carried_to == segment.base_offset \
                else log.producer_state_at(segment.base_offset)
            truncated += segment.recover(state, truncate_corrupt=truncate_corrupt, leader_epochs=leader_epochs)
            carried, carried_to = state, segment.read_next_offset()
            recovered.append(segment.base_offset)
        log.load_report = LoadReport(tuple(notes), tuple(recovered), truncated)
        assert leader_epochs is not None
        log._recover_unflushed(had_clean_shutdown, notes, recovered, truncate_corrupt, leader_epochs)
        if not log._segments:
            log._segments.append(log._new_segment(log_start_offset))
        log.log_start_offset = max(log_start_offset, log._segments[0].base_offset)
        log._remove_stray_and_corrupt_snapshots(view, notes)
        log.load_report = LoadReport(tuple(notes + log._snapshot_notes), tuple(recovered),
                                     log.load_report.truncated_bytes)
        checkpoint.check_log_start_offset(directory, log_start_offset, log.log_end_offset)
        return log

    def _recover_unflushed(self, had_clean_shutdown: bool, notes: list[str], recovered: list[int],
                           truncate_corrupt: bool, leader_epochs: checkpoint.LeaderEpochFileCache) -> None:
        """Re-validate segments past the recovery point; cut the log at the first invalid batch. The
        recovered batches' epochs go to ``leader_epochs``, which then ends at the log end (Kafka's
        loader: ``LogSegment.recover``, then ``truncateFromEnd``)."""
        truncated = self.load_report.truncated_bytes
        state: ProducerState | None = None  # at the next segment's base, while segments are recovered in a row
        for i, segment in enumerate(list(self._segments)):
            is_last = i == len(self._segments) - 1
            unflushed = not had_clean_shutdown and segment.read_next_offset() > self.recovery_point
            torn = is_last and _has_torn_tail(segment)
            if not (unflushed or torn) or segment.base_offset in recovered:
                state = None
                continue
            if state is None:
                state = self.producer_state_at(segment.base_offset)
            cut = segment.recover(state, truncate_corrupt=truncate_corrupt, leader_epochs=leader_epochs)
            recovered.append(segment.base_offset)
            if cut:
                truncated += cut
                notes.append(f"segment {segment.base_offset}: truncated {cut} invalid bytes at its end")
                for later in self._segments[i + 1:]:
                    notes.append(f"segment {later.base_offset}: deleted, it follows a truncated segment")
                    later.delete_files()
                self._segments = self._segments[: i + 1]
                break
        self._log_end_offset = self._segments[-1].read_next_offset() if self._segments else self.log_start_offset
        self.recovery_point = min(max(self.recovery_point, 0), self._log_end_offset)
        if truncated:
            leader_epochs.truncate_from_end(self._log_end_offset)
            # Producer state taken past the new log end describes records that are gone (an open
            # transaction there would hold the last stable offset back forever): Kafka drops it too.
            for path in sorted(self.directory.glob("*" + names.SNAPSHOT_SUFFIX)):
                parsed = names.parse_segment_file_name(path.name)
                if parsed is not None and not parsed.state and parsed.base_offset > self._log_end_offset:
                    path.unlink()
                    notes.append(f"producer snapshot {path.name} past the log end removed")
            self._producer_state = None
        self.load_report = LoadReport(tuple(notes), tuple(recovered), truncated)

    def _remove_stray_and_corrupt_snapshots(self, view: dict[str, Path], notes: list[str]) -> None:
        """Kafka's loader on the producer snapshots, as the open listed them (recovery may have removed
        some since): the strays go (``removeStraySnapshots``, ``names.stray_snapshot_offsets``), then
        the newest is read (``loadFromSnapshot``): one that cannot be read is deleted, for the one
        before it, so no later reader meets it. Kafka's load first deletes those at or below the log
        start offset or past the log end unread (``truncateAndReload``), so only those in between are
        read here. kafkalog's load keeps the others (but those past a log end its recovery cut): a
        reader takes the state a broker holds in memory from the one at the log start offset.
        Truncation deletes them (``truncate_to``)."""
        snapshots = {names.offset_from_file_name(name): path for name, path in view.items()
                     if name.endswith(names.SNAPSHOT_SUFFIX)}
        for offset in names.stray_snapshot_offsets(snapshots, {s.base_offset for s in self._segments}):
            path = snapshots.pop(offset)
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            notes.append(f"stray producer snapshot {path.name} removed")
        for offset in sorted(snapshots, reverse=True):
            if self.log_start_offset < offset <= self.log_end_offset \
                    and self._read_snapshot(snapshots[offset]) is not None:
                break

    def _read_snapshot(self, path: Path) -> list[ProducerSnapshotEntry] | None:
        """A snapshot's entries, or None when it cannot be read (gone, or corrupt). A writable log
        deletes a corrupt one above the log start offset, as Kafka's ``loadFromSnapshot`` does (it
        never meets one at or below it: ``truncateAndReload`` deleted those unread); a read-only view
        changes nothing."""
        try:
            return read_producer_snapshot(path)
        except FileNotFoundError:
            return None  # renamed or removed since the listing: retention, truncation, another load
        except ProducerSnapshotError as exc:
            if not self.read_only and names.offset_from_file_name(path.name) > self.log_start_offset:
                path.unlink(missing_ok=True)
                self._snapshot_notes.append(f"corrupt producer snapshot {path.name} deleted ({exc})")
            return None

    # --- state ---------------------------------------------------------------------------------
    @property
    def segments(self) -> Sequence[LogSegment]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        if self._log_end_offset is None:
            end = self._segments[-1].read_next_offset() if self._segments else self.log_start_offset
            checkpoint.check_log_start_offset(self.directory, self._checkpointed_log_start_offset, end)
            self._log_end_offset = end
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _settings(self) -> SegmentSettings:
        return SegmentSettings(self.config.index_interval_bytes, self.config.segment_index_bytes)

    def _new_segment(self, base_offset: int, now_ms: int | None = None) -> LogSegment:
        segment = LogSegment(self.directory, base_offset, self._settings(), created_ms=now_ms)
        for stale in segment.files():  # leftovers with the new name are deleted first
            stale.unlink(missing_ok=True)
        for path in (segment.log_path, segment.offset_index.path, segment.time_index.path):
            path.touch()
        segment.roll_jitter_ms = _random_segment_jitter(self.config)
        return segment

    def producer_state(self) -> ProducerState:
        """Producer state at the log end: the newest snapshot plus the batches after it."""
        if self._producer_state is None:
            self._producer_state = self._load_producer_state()
        return self._producer_state

    def first_unstable_offset(self) -> int | None:
        """``UnifiedLog.firstUnstableOffset``: where the oldest open transaction begins, None when none is
        open. Never below the log start offset: a transaction begun in deleted records holds back only
        what is still in the log (``updateFirstUnstableOffset``)."""
        first = self.producer_state().first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    def _load_producer_state(self) -> ProducerState:
        return self.producer_state_at(self.log_end_offset)

    def producer_state_at(self, offset: int) -> ProducerState:
        """Producer state as of ``offset`` (a segment's base, or the log end): the newest snapshot at or
        below it plus the batches from there up to it (``UnifiedLog.rebuildProducerState``). A snapshot
        that cannot be read is passed over for the one before it (``loadFromSnapshot``, see
        ``_read_snapshot``); without any, the batches from the log start offset."""
        snapshots = sorted(
            (names.offset_from_file_name(p.name), p) for p in self.directory.glob(f"*{names.SNAPSHOT_SUFFIX}")
            if names.offset_from_file_name(p.name) <= offset
        )
        state, start = ProducerState(), self.log_start_offset
        for snapshot_offset, path in reversed(snapshots):
            entries = self._read_snapshot(path)
            if entries is not None:
                state, start = ProducerState(entries), snapshot_offset
                break
        for segment in self._segments:
            if segment.base_offset >= offset:
                break
            if segment.read_next_offset() <= start:
                continue
            # From the batch holding ``start`` (Kafka reads a segment from the batch holding an offset):
            # a batch straddling the log start offset still counts for its producer.
            for data, batches, _ in segment.scan_chunks():  # the active segment can be large: in chunks
                for i in np.flatnonzero((batches.producer_id >= 0) & (batches.last_offset >= start)
                                        & (batches.base_offset < offset)):
                    state.update(summarize_batch(data, batches, int(i)))
        return state

    # --- appending -----------------------------------------------------------------------------
    def append_records(self, records: Sequence[tuple[bytes | None, bytes | None,
                                                     tuple[tuple[str, bytes | None], ...], int]],
                       *, compression: CompressionType | None = None, batch_records: int = 500,
                       now_ms: int | None = None) -> AppendInfo:
        """Leader-style append: assign offsets from the log end, batch, compress, roll as needed.

        Each record is ``(key, value, headers, timestamp_ms)``.
        """
        self._check_writable()
        if not records:
            return AppendInfo(self.log_end_offset, self.log_end_offset - 1, 0)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        codec = compression if compression is not None else self._topic_codec()
        level = {CompressionType.GZIP: self.config.compression_gzip_level,
                 CompressionType.LZ4: self.config.compression_lz4_level,
                 CompressionType.ZSTD: self.config.compression_zstd_level}.get(codec)
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        first = self.log_end_offset
        batches = 0
        for start in range(0, len(records), max(1, batch_records)):
            chunk = records[start:start + batch_records]
            base = self.log_end_offset
            built = [fmt.Record(base + j, ts, key, value, headers)
                     for j, (key, value, headers, ts) in enumerate(chunk)]
            raw = fmt.build_batch(
                built, compression_type=codec, compression_level=level if level != -1 else None,
                timestamp_type=fmt.TimestampType.LOG_APPEND_TIME if log_append else fmt.TimestampType.CREATE_TIME,
                log_append_time=now if log_append else None, partition_leader_epoch=LEADER_EPOCH)
            self.append_batch(raw, now_ms=now)
            batches += 1
        return AppendInfo(first, self.log_end_offset - 1, batches)

    def _topic_codec(self) -> CompressionType:
        return _COMPRESSION_BY_TOPIC_NAME.get(self.config.compression_type, CompressionType.NONE)

    def append_batch(self, raw: bytes, *, now_ms: int | None = None) -> None:
        """Append one complete, valid v2 batch whose base offset is the log end (follower-style)."""
        self._check_writable()
        header = fmt.verify_batch(raw, where=f"{self.directory}: ")
        if header.base_offset < self.log_end_offset:
            raise InvalidOffsetError(
                f"{self.topic_partition}: batch base offset {header.base_offset} is below the log end "
                f"offset {self.log_end_offset}"
            )
        if len(raw) > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{self.topic_partition}: batch of {len(raw)} bytes exceeds segment.bytes="
                f"{self.config.segment_bytes}"
            )
        if len(raw) > self.config.max_message_bytes:
            raise RecordBatchTooLargeError(
                f"{self.topic_partition}: batch of {len(raw)} bytes exceeds max.message.bytes="
                f"{self.config.max_message_bytes}"
            )
        now = int(time.time() * 1000) if now_ms is None else now_ms
        # Producer state as of the log end before this batch: loaded after the append, it would read
        # the batch from the segment and then apply it a second time (an ABORT marker would find its
        # transaction already ended and write no .txnindex entry).
        state = self.producer_state() if header.has_producer_id else None
        segment = self.active_segment
        if self._should_roll(segment, len(raw), header.max_timestamp, header.last_offset, now):
            segment = self.roll(header.base_offset, now_ms=now)
        segment.append(header.last_offset, header.max_timestamp, header.last_offset, raw)
        if state is not None:
            columns = scan_batches(raw)
            aborted = state.update(summarize_batch(raw, columns, 0))
            if aborted is not None:
                segment.txn_index.append(aborted)
        if header.partition_leader_epoch >= 0:
            self._assign_epoch(header.partition_leader_epoch, header.base_offset)
        self._log_end_offset = header.next_offset

    def _should_roll(self, segment: LogSegment, messages_size: int, max_timestamp: int,
                     max_offset: int, now_ms: int) -> bool:
        """``UnifiedLog.maybeRoll``'s ``shouldRoll`` (spec §9)."""
        size = segment.size
        max_segment_ms = self.config.segment_ms
        if self.config.compact and 0 < self.config.max_compaction_lag_ms:
            max_segment_ms = min(self.config.max_compaction_lag_ms, self.config.segment_ms)
        if size > self.config.segment_bytes - messages_size:
            return True
        if size > 0:
            first_ts = segment.first_batch_timestamp()
            waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - segment.created_ms
            if waited > max_segment_ms - segment.roll_jitter_ms:
                return True
        if segment.offset_index.is_full or segment.time_index.is_full:
            return True
        return not 0 <= max_offset - segment.base_offset <= MAX_INT

    def roll(self, expected_next_offset: int | None = None, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, log end) (``LocalLog.roll``)."""
        self._check_writable()
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # KAFKA-6388: an empty active segment at that offset is reused
            raise KafkaLogError(f"{self.topic_partition}: trying to roll a new segment at offset "
                                f"{new_base}, which already exists")
        if new_base < active.base_offset:
            raise KafkaLogError(f"{self.topic_partition}: new segment base {new_base} is below the "
                                f"active segment base {active.base_offset}")
        active.on_become_inactive()
        active.flush()
        segment = self._new_segment(new_base, now_ms)
        self._segments.append(segment)
        # Kafka's broker drops expired producers on a timer; the snapshot is where that shows here.
        state = self.producer_state()
        state.remove_expired(segment.created_ms, self.producer_id_expiration_ms)
        write_producer_snapshot(names.snapshot_file(self.directory, new_base), state.snapshot_entries())
        self.recovery_point = max(self.recovery_point, new_base)
        return segment

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        _leader_epoch_cache(self.directory).assign_if_newer(epoch, start_offset)

    def mark_segments_deleted(self, count: int, *, mark_time_ms: int) -> list[Path]:
        """Phase one of Kafka's asynchronous delete (``deleteSegments``, spec §10.3) for the oldest
        ``count`` segments: advance the log start offset past them, then rename each segment's files
        (``.log`` first, so the segment leaves the log in one rename) and its producer snapshot to
        ``*.deleted``. The mark time is stamped as the files' mtime *before* the rename, so the
        ``file.delete.delay.ms`` clock survives restarts. The active segment is never marked.
        """
        self._check_writable()
        if not 0 <= count < len(self._segments):
            raise KafkaLogError(f"{self.topic_partition}: cannot delete {count} of {len(self._segments)} "
                                "segments (the active segment always stays)")
        doomed, self._segments = self._segments[:count], self._segments[count:]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        renamed: list[Path] = []
        for segment in doomed:
            segment.offset_index.close()
            segment.time_index.close()
            files = [*segment.files(), names.snapshot_file(self.directory, segment.base_offset)]
            renamed += mark_deleted(files, mark_time_ms=mark_time_ms)
        # ``maybeIncrementLogStartOffset``: epochs start no lower than the log. After the renames, so a
        # crash before them leaves no entry starting above records still in the log.
        _leader_epoch_cache(self.directory).truncate_from_start(self.log_start_offset)
        return renamed

    def truncate_to(self, offset: int) -> int:
        """Drop every record at or after ``offset`` (``UnifiedLog.truncateTo``); returns bytes removed.

        Segments whose base offset is past ``offset`` are deleted (``LocalLog.truncateTo``); the one
        holding it is cut, and one starting at it is emptied and stays, with its snapshot. Producer
        snapshots out of range go (``truncateAndReload``: past the new log end, or at or below the
        log start offset); producer state and the leader-epoch cache are reset to what the remaining
        log says.
        """
        self._check_writable()
        if offset >= self.log_end_offset:
            return 0
        if offset < self.log_start_offset:
            raise InvalidOffsetError(f"{self.topic_partition}: cannot truncate to {offset}, below the log "
                                     f"start offset {self.log_start_offset}")
        removed = 0
        # The log start offset is at or past the first base, so at least the first segment stays.
        keep = [s for s in self._segments if s.base_offset <= offset]
        for segment in self._segments[len(keep):]:
            removed += segment.size
            segment.delete_files()
            names.snapshot_file(self.directory, segment.base_offset).unlink(missing_ok=True)
        self._segments = keep
        removed += keep[-1].truncate_to(offset)
        self._log_end_offset = keep[-1].read_next_offset()
        for path in self.directory.glob(f"*{names.SNAPSHOT_SUFFIX}"):
            if not self.log_start_offset < names.offset_from_file_name(path.name) <= self.log_end_offset:
                path.unlink()
        _leader_epoch_cache(self.directory).truncate_from_end(self.log_end_offset)
        self._producer_state = None
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        return removed

    def flush(self) -> None:
        """fsync everything written; the recovery point moves to the log end."""
        for segment in self._segments:
            if segment.read_next_offset() > self.recovery_point or segment is self.active_segment:
                segment.flush()
        self.recovery_point = self.log_end_offset

    def close(self) -> None:
        """Trim and close the segments; closing again does nothing. A closed log takes no more writes
        (Kafka's closed file channels refuse them): the partition lock a writer holds goes with the
        close, so a later write could race another process's."""
        if self._closed:
            return
        self._closed = True
        if self.read_only:
            return
        for segment in self._segments:
            segment.close()

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaLogError(f"{self.topic_partition}: log is closed; open the partition again to write to it")
        if self.read_only:
            raise KafkaLogError(f"{self.topic_partition}: log was opened read-only")

    # --- reading -------------------------------------------------------------------------------
    def segment_for(self, offset: int) -> LogSegment | None:
        bases = [s.base_offset for s in self._segments]
        i = int(np.searchsorted(bases, offset, side="right")) - 1
        return self._segments[i] if i >= 0 else None

    def read_records(self, from_offset: int, max_records: int | None = None) -> Iterator[tuple[RecordColumns, int]]:
        """Yield (columns, row) for records at offsets ≥ ``from_offset``, below the high watermark (which
        for kafkalog is the log end: every complete batch read lies below it).

        Offsets below the log start offset are never served. Control records are skipped. Readers
        take no lock: when retention or a swap renames a segment away under this reader, it reopens
        the partition and goes on from the next offset it has not served (a bounded number of times).
        Offsets that do not increase (a damaged base offset, which no CRC covers) raise instead of
        being served out of order.
        """
        start = max(from_offset, self.log_start_offset)
        served = 0
        log = self
        for _ in range(READ_REOPENS):
            try:
                for records, row in log._read_from(start):
                    yield records, row
                    served += 1
                    start = int(records.offset[row]) + 1
                    if max_records is not None and served >= max_records:
                        return
                return
            except FileNotFoundError:
                log = LocalLog.open(self.directory, self.config, log_start_offset=self.log_start_offset,
                                    read_only=True)
                start = max(start, log.log_start_offset)
        raise KafkaLogError(f"{self.directory}: its segments changed under the reader {READ_REOPENS} times in a row; "
                            "try again")

    def _read_from(self, start: int) -> Iterator[tuple[RecordColumns, int]]:
        """Records from ``start`` on, a chunk of a segment at a time: a reader that stops early (a
        ``--max-records``) reads, checks and decodes only the chunks it was served from."""
        previous_last = -1
        for i, segment in enumerate(self._segments):
            # A segment ends where the next one begins: skipping needs no read. The last one is read from
            # its index entry below ``start``, which costs what finding its end would.
            if i + 1 < len(self._segments) and self._segments[i + 1].base_offset <= start:
                continue
            _, position = segment.offset_index.lookup(start)
            for chunk in segment.scan_chunks(position):
                wanted = np.flatnonzero(chunk.batches.last_offset >= start)
                if not len(wanted):
                    continue
                skip = int(chunk.batches.position[wanted[0]])
                data = bytes(chunk.data[skip:chunk.batches.valid_end])  # the chunk buffer is read into again
                batches = scan_batches(data)
                at = chunk.position + skip
                corrupt = find_corrupt_batch(data, batches, where=segment.where(at))
                if corrupt is not None:
                    raise CorruptRecordError(corrupt)
                backwards = find_backward_batch(batches, previous_last, f"{segment.log_path}: ", at)
                if backwards is not None:
                    raise CorruptRecordError(f"{backwards}; `kafkalog recover --full` truncates the log there")
                if len(batches):
                    previous_last = int(batches.last_offset[-1])
                records = scan_records(data, batches, where=f"{segment.log_path}: ")
                control = (batches.attributes[records.batch_index] & fmt.CONTROL_MASK) != 0
                rows = np.flatnonzero((records.offset >= start) & ~control)
                for row in rows:
                    yield records, int(row)


def _leader_epoch_cache(directory: Path) -> checkpoint.LeaderEpochFileCache:
    return checkpoint.LeaderEpochFileCache(directory / names.LEADER_EPOCH_CHECKPOINT)


def _random_segment_jitter(config: LogConfig) -> int:
    """``LogConfig.randomSegmentJitter``: drawn for every segment Kafka opens, new or loaded."""
    bound = min(config.segment_jitter_ms, config.segment_ms)
    return random.randrange(bound) if bound > 0 else 0


def _indexes_sane(segment: LogSegment) -> bool:
    """Kafka's load-time check (a missing or corrupt index means the segment is recovered, its indexes
    rebuilt from the log) plus what it lacks: a non-empty segment must have a time index (without one
    retention would judge it by its mtime), and no index entry may point past the log's data."""
    if not segment.offset_index.path.exists():
        return False
    if not segment.time_index.path.exists() and segment.size > 0:
        return False
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
    except KafkaLogError:
        return False
    if len(segment.offset_index) and segment.offset_index.entry(len(segment.offset_index) - 1)[1] >= segment.size:
        return False  # an entry points past the data: a lookup would start a reader past records
    next_offset = segment.read_next_offset()
    _, last_time_offset = segment.time_index.last_entry()
    return (segment.offset_index.last_offset <= max(segment.base_offset, next_offset)
            and (not len(segment.time_index) or last_time_offset < next_offset))


def _has_torn_tail(segment: LogSegment) -> bool:
    _, position = segment.offset_index.lookup(1 << 62)
    try:
        data, batches = segment.scan(min(position, segment.size))
    except CorruptRecordError:
        return True
    return batches.valid_end != len(data)
