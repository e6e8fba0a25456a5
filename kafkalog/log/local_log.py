"""One partition's log: its segments in one directory (``LocalLog`` plus the append/roll/read parts
of ``UnifiedLog``).

Opening is Kafka's load (spec §11.2): temporary swap files are resolved, index files without a
``.log`` removed, segments whose index is missing or fails its sanity check recovered, the
unflushed tail (past the recovery point) re-validated and cut at the first invalid batch (what
follows deleted; a log left ending below its log start offset starts again empty there), and the
producer snapshots Kafka's load deletes removed. A read-only open changes nothing: it computes the
same view and rebuilds indexes only in memory.

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
from typing import Literal, NamedTuple

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
from kafkalog.format.scan import (
    BatchColumns,
    RecordColumns,
    find_backward_batch,
    find_corrupt_batch,
    scan_batches,
    scan_records,
)
from kafkalog.log import checkpoint, names, swap
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
from kafkalog.log.segment import LogSegment, ScanEnd, SegmentSettings, summarize_batch
from kafkalog.log.split import split_overflowed_segment

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


class _Carried(NamedTuple):
    """The producer state after the segment recovered last, and the offset it stands at."""

    state: ProducerState
    offset: int


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
        if directory.is_symlink():
            raise names.symlinked_partition_dir(directory)
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
        kafka_rebuilds: set[int] = set()  # those whose index Kafka's own sanity check refuses too
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
            check = _index_check(segment)
            if check != "sane":
                if check == "kafka":
                    kafka_rebuilds.add(parsed.base_offset)
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
        assert leader_epochs is not None
        log._recover(rebuild, kafka_rebuilds, had_clean_shutdown, notes, truncate_corrupt, leader_epochs)
        log.log_start_offset = max(log_start_offset, log._segments[0].base_offset)
        # Moved without it (a crash lost the truncation, or the log start offset checkpoint, or an operator
        # edited it): as Kafka's LogLoader, from max(checkpoint, first segment), the log start offset.
        leader_epochs.truncate_from_start(log.log_start_offset)
        log._remove_out_of_range_snapshots(notes)
        log.load_report = LoadReport(tuple(notes + log._snapshot_notes), log.load_report.recovered_segments,
                                     log.load_report.truncated_bytes)
        checkpoint.check_log_start_offset(directory, log_start_offset, log.log_end_offset)
        return log

    def _recover(self, rebuild: list[LogSegment], kafka_rebuilds: set[int], had_clean_shutdown: bool,
                 notes: list[str], truncate_corrupt: bool, leader_epochs: checkpoint.LeaderEpochFileCache) -> None:
        """Kafka's load past the segment listing (spec §11.2 steps 5 and 7): the segments whose indexes
        failed their check are recovered first (``loadSegmentFiles``), then, after an unclean shutdown,
        every segment from the one holding the recovery point on (``recoverLog``; and a torn last
        segment in any case).

        A segment ``recoverLog`` cuts means what follows it is suspect: every later segment is deleted.
        That holds for a rebuilt segment past the recovery point too when Kafka's own index check
        passes it (only kafkalog's stricter one refused it: Kafka would cut it in ``recoverLog``); one
        Kafka rebuilds as well is cut while the segments are listed, and what follows it stays. A log
        that then ends below its log start offset holds nothing it may serve: every segment and
        producer snapshot is deleted, the epoch cache cleared, and the log starts again, empty, at the
        log start offset (``deleteSegmentsIfLogStartGreaterThanLogEnd``). The recovered batches'
        epochs go to ``leader_epochs``, which then ends at the log end (``truncateFromEnd``)."""
        recovered: list[int] = []
        truncated = 0
        carried: _Carried | None = None

        def recover(segment: LogSegment) -> int:
            nonlocal carried
            cut, carried = self._recover_segment(segment, carried, truncate_corrupt, leader_epochs)
            recovered.append(segment.base_offset)
            if cut:
                notes.append(f"segment {segment.base_offset}: truncated {cut} invalid bytes at its end")
            return cut

        def unflushed(i: int) -> bool:  # it ends past the recovery point: Kafka's recoverLog recovers it
            last = i == len(self._segments) - 1
            ends = self._segments[i].read_next_offset() if last else self._segments[i + 1].base_offset
            return not had_clean_shutdown and ends > self.recovery_point

        for segment in rebuild:  # in offset order
            i = self._segments.index(segment)
            recover_log_cuts = unflushed(i) and segment.base_offset not in kafka_rebuilds
            cut = recover(segment)
            truncated += cut
            if cut and recover_log_cuts:
                self._delete_segments_after(i, notes)
                break
        for i, segment in enumerate(list(self._segments)):
            if segment.base_offset in recovered:
                continue
            if not (unflushed(i) or (i == len(self._segments) - 1 and _has_torn_tail(segment))):
                continue
            cut = recover(segment)
            truncated += cut
            if cut:
                self._delete_segments_after(i, notes)
                break
        end = self._segments[-1].read_next_offset() if self._segments else self.log_start_offset
        leader_epochs.truncate_from_end(end)
        if self._segments and end < self.log_start_offset:
            notes.append(f"the log ends at {end}, below its log start offset {self.log_start_offset}: every "
                         f"segment and producer snapshot deleted, the log starts again empty there")
            for segment in self._segments:
                segment.delete_files()
            self._segments = []
            for path in self.directory.glob("*" + names.SNAPSHOT_SUFFIX):
                path.unlink(missing_ok=True)
            leader_epochs.clear()
        if not self._segments:
            self._segments.append(self._new_segment(self.log_start_offset))
        self._log_end_offset = self._segments[-1].read_next_offset()
        self.recovery_point = min(max(self.recovery_point, 0), self._log_end_offset)
        self._producer_state = None
        self.load_report = LoadReport(tuple(notes), tuple(recovered), truncated)

    def _recover_segment(self, segment: LogSegment, carried: _Carried | None, truncate_corrupt: bool,
                         leader_epochs: checkpoint.LeaderEpochFileCache) -> tuple[int, _Carried]:
        """``LogLoader.recoverSegment``: the segment recovered from the producer state as of its base (the
        one the segment recovered just before it ended with, else rebuilt from the newest snapshot).
        Returns the bytes cut and the state at the segment's new end."""
        if carried is not None and carried.offset == segment.base_offset:
            state = carried.state
        else:
            state = self.producer_state_at(segment.base_offset)
        # The log's last batch may be one a writer was tearing when it died, whatever a checkpoint says (Kafka's
        # loader cuts it after a clean shutdown too); a segment a later one follows was complete when the log
        # rolled, so an incomplete batch there is a torn write only past the recovery point, where a broker
        # that crashed before flushing may have left one.
        sealed = segment is not self._segments[-1]
        cut = segment.recover(state, truncate_corrupt=truncate_corrupt, leader_epochs=leader_epochs,
                              recovery_point=self.recovery_point if sealed else 0)
        return cut, _Carried(state, segment.read_next_offset())

    def _delete_segments_after(self, i: int, notes: list[str]) -> None:
        for later in self._segments[i + 1:]:
            notes.append(f"segment {later.base_offset}: deleted, it follows a truncated segment")
            later.delete_files()
        self._segments = self._segments[: i + 1]

    def _remove_out_of_range_snapshots(self, notes: list[str]) -> None:
        """Kafka's load on the producer snapshots (``removeStraySnapshots``, then ``truncateAndReload``):
        the strays go (``names.stray_snapshot_offsets``), then, unread, those below the log start
        offset (their producers' records are all deleted) and those past the log end (they describe
        records that are gone); then the newest is read (``loadFromSnapshot``), and one that cannot be
        read is deleted for the one before it, so no later reader meets it.

        Kafka's load deletes the one at the log start offset too. kafkalog's keeps it and never reads
        it (``producer_state_at``), so the state is the same: retention leaves it with the first segment
        it keeps, and every kafkalog command loads the log, so deleting it would make the first one after
        each retention, a retried one included, change the log again. Kafka's load also snapshots the
        state it rebuilt (at the last two segment bases and the log end, and at each recovered segment's
        end) and its close at the log end; kafkalog's writes none, for the same reason: a reader
        rebuilds the state from the newest snapshot there is."""
        snapshots = {names.offset_from_file_name(path.name): path
                     for path in self.directory.glob("*" + names.SNAPSHOT_SUFFIX)}
        strays = names.stray_snapshot_offsets(snapshots, {s.base_offset for s in self._segments})
        end = self.log_end_offset
        for offset, path in sorted(snapshots.items()):
            if offset in strays:
                note = f"stray producer snapshot {path.name} removed"
            elif offset < self.log_start_offset:
                note = f"producer snapshot {path.name} below the log start offset removed"
            elif offset > end:
                note = f"producer snapshot {path.name} past the log end removed"
            else:
                continue
            del snapshots[offset]
            path.unlink(missing_ok=True)
            notes.append(note)
        for offset in sorted(snapshots, reverse=True):
            if offset == self.log_start_offset or self._read_snapshot(snapshots[offset]) is not None:
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
        """Producer state as of ``offset`` (a segment's base, or the log end): the newest snapshot above
        the log start offset and at or below ``offset``, plus the batches from there up to it
        (``UnifiedLog.rebuildProducerState``). A snapshot that cannot be read is passed over for the one
        before it (``loadFromSnapshot``, see ``_read_snapshot``); without any, the batches from the log
        start offset. Snapshots at or below the log start offset are never read: Kafka's load deletes
        them unread, so a reader sees the state a writable open of the log would."""
        snapshots = sorted(
            (names.offset_from_file_name(p.name), p) for p in self.directory.glob(f"*{names.SNAPSHOT_SUFFIX}")
            if self.log_start_offset < names.offset_from_file_name(p.name) <= offset
        )
        state, start = ProducerState(), self.log_start_offset
        for snapshot_offset, path in reversed(snapshots):
            entries = self._read_snapshot(path)
            if entries is not None:
                state, start = ProducerState(entries), snapshot_offset
                break
        for i, segment in enumerate(self._segments):
            if segment.base_offset >= offset or start >= offset:
                break
            if i + 1 < len(self._segments) and self._segments[i + 1].base_offset <= start:
                continue  # it ends where the next one begins, at or below the start: nothing to read
            # From the batch holding ``start`` (Kafka reads a segment from the batch holding an offset):
            # a batch straddling the log start offset still counts for its producer. The index finds it
            # without reading what lies before it.
            _, position = segment.offset_index.lookup(start)
            for data, batches, _ in segment.scan_chunks(position):  # the active segment can be large: in chunks
                for j in np.flatnonzero((batches.producer_id >= 0) & (batches.last_offset >= start)
                                        & (batches.base_offset < offset)):
                    state.update(summarize_batch(data, batches, int(j)))
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
        for segment in doomed:
            segment.offset_index.close()
            segment.time_index.close()
        marked = swap.mark_segments_deleted(self.directory, [s.base_offset for s in doomed],
                                            log_start_offset=self.log_start_offset,
                                            log_end_offset=self.log_end_offset, mark_time_ms=mark_time_ms)
        return [self.directory / name for files in marked.values() for name in files]

    def align_leader_epochs(self) -> None:
        """``swap.align_leader_epochs`` for this log: retention runs it again when a retried mark finds its
        renames done (its first try killed in between)."""
        self._check_writable()
        swap.align_leader_epochs(self.directory, log_start_offset=self.log_start_offset,
                                 log_end_offset=self.log_end_offset)

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
        A reader never skips records: at damage (a batch that fails its checks, offsets that do not
        increase — no CRC covers a base offset —, or a segment that ends inside a batch) it serves the
        records before it, then raises :class:`CorruptRecordError` naming the file, byte and offset.
        Only the log's last segment may end inside a batch past the recovery point: a write in flight.
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
                pass
            except CorruptRecordError:
                # Damage seen through a listing that went stale is a swap at work (a cleaned segment
                # that reaches past the next listed base), not damage: list again.
                if not log._listing_is_stale():
                    raise
            log = LocalLog.open(self.directory, self.config, log_start_offset=self.log_start_offset,
                                recovery_point=self.recovery_point, read_only=True)
            start = max(start, log.log_start_offset)
        raise KafkaLogError(f"{self.directory}: its segments changed under the reader {READ_REOPENS} times in a row; "
                            "try again")

    def _listing_is_stale(self) -> bool:
        """Whether the directory's segment files are no longer the ones this log listed (a lock-free
        reader's listing goes stale when a swap, retention or a roll renames or adds segments)."""
        listed = {segment.log_path.name for segment in self._segments}
        return listed != {path.name for path in self.directory.glob("*" + names.LOG_SUFFIX)}

    def _read_from(self, start: int) -> Iterator[tuple[RecordColumns, int]]:
        """Records from ``start`` on, a chunk of a segment at a time: a reader that stops early (a
        ``--max-records``) reads, checks and decodes only the chunks it was served from."""
        previous_last = -1
        last = len(self._segments) - 1
        for i, segment in enumerate(self._segments):
            # A segment ends where the next one begins: skipping needs no read. The last one is read from
            # its index entry below ``start``, which costs what finding its end would.
            if i < last and self._segments[i + 1].base_offset <= start:
                continue
            next_base = self._segments[i + 1].base_offset if i < last else None
            for data, batches in self._sound_batches(segment, start, previous_last, next_base):
                previous_last = int(batches.last_offset[-1])
                records = scan_records(data, batches, where=f"{segment.log_path}: ")
                control = (batches.attributes[records.batch_index] & fmt.CONTROL_MASK) != 0
                for row in np.flatnonzero((records.offset >= start) & ~control):
                    yield records, int(row)

    def _sound_batches(self, segment: LogSegment, start: int, previous_last: int,
                       next_base: int | None) -> Iterator[tuple[bytes, BatchColumns]]:
        """The batches of ``segment`` holding offsets ≥ ``start`` (those after ``previous_last``, the last
        offset served), a chunk at a time, up to damage, which then raises :class:`CorruptRecordError`.

        A batch is passed on only once the batch after it is seen: no CRC covers a base offset, so a
        batch whose base offset was damaged upwards shows only as the next one going backwards, and
        then neither is served. A segment's last batch is checked against the next segment's base
        offset instead (``next_base``; None for the log's last segment, whose last batch nothing
        follows)."""
        _, position = segment.offset_index.lookup(start)
        ends: list[ScanEnd] = []
        held, held_at = b"", -1  # the previous chunk's last batch, not served yet, and its byte in the segment
        for chunk in segment.scan_chunks(position, on_end=ends.append):
            skip = 0
            if not held:  # the batches before ``start`` (once past it, every batch is checked, in order)
                wanted = np.flatnonzero(chunk.batches.last_offset >= start)
                if not len(wanted):
                    continue
                skip = int(chunk.batches.position[wanted[0]])
            # One copy: the chunk buffer is read into again.
            data = b"".join((held, chunk.data[skip:chunk.batches.valid_end]))
            at = held_at if held else chunk.position + skip
            batches = scan_batches(data)
            damage = _first_damaged_batch(data, batches, previous_last, segment, at)
            sound = len(batches) - 1 if damage is None else max(0, damage[0] - (1 if damage[2] else 0))
            if sound:
                served = _first_batches(batches, sound)
                previous_last = int(served.last_offset[-1])
                yield data, served
            if damage is not None:
                raise CorruptRecordError(damage[1])
            held, held_at = data[int(batches.position[-1]):], at + int(batches.position[-1])
        if held:
            batches = scan_batches(held)
            held_last = int(batches.last_offset[-1])
            if next_base is not None and held_last >= next_base:
                raise CorruptRecordError(
                    f"{segment.log_path}: batch at byte {held_at} ends at offset {held_last}, not below the next "
                    f"segment's base offset {next_base}; `kafkalog recover --full` truncates the log there")
            previous_last = held_last
            yield held, batches
        if ends and ends[0].incomplete_bytes:
            problem = self._cut_short(segment, ends[0], previous_last, is_last=next_base is None)
            if problem is not None:
                raise CorruptRecordError(problem)

    def _cut_short(self, segment: LogSegment, end: ScanEnd, previous_last: int, *, is_last: bool) -> str | None:
        """Why a reader may not go past a segment that ends inside a batch, or None when it may stop there
        unseen: the log's last segment, past the recovery point, where a writer may be appending (the
        high watermark is the end of the whole batches). Anywhere else the next segment would make
        the reader skip records: the segment was cut short, or a length field was damaged."""
        offset = max(previous_last + 1, segment.base_offset)
        if len(end.head) >= 8:
            offset = max(offset, int.from_bytes(end.head[:8], "big", signed=True))
        if is_last and offset >= self.recovery_point:
            return None
        where = "below the recovery point, where every record was flushed whole" if is_last else \
            "and a later segment follows"
        return (f"{segment.log_path}: incomplete batch at byte {end.position} (offset {offset}): the segment ends "
                f"{end.incomplete_bytes} bytes into it, {where}; the reader stops here rather than skip records "
                "(`kafkalog verify` describes the damage)")


def _first_batches(batches: BatchColumns, count: int) -> BatchColumns:
    """The columns of the first ``count`` batches (views, not copies)."""
    columns = {name: getattr(batches, name)[:count] for name in BatchColumns.__dataclass_fields__
               if name != "valid_end"}
    return BatchColumns(**columns, valid_end=int(batches.position[count - 1] + batches.size[count - 1]))


def _first_damaged_batch(data: bytes, batches: BatchColumns, previous_last: int, segment: LogSegment,
                         at: int) -> tuple[int, str, bool] | None:
    """The first batch of ``data`` (read from byte ``at`` of ``segment``) that fails its checks or does not
    follow the offset before it, what is wrong with it, and whether it went backwards (then the batch
    before it may be the damaged one); None when all are sound (the usual case, checked for the whole
    chunk at once)."""
    corrupt = find_corrupt_batch(data, batches, where=segment.where(at))
    backwards = find_backward_batch(batches, previous_last, f"{segment.log_path}: ", at)
    if corrupt is None and backwards is None:
        return None
    advice = "; `kafkalog recover --full` truncates the log there"
    for i in range(len(batches)):  # damage is rare: find its batch one at a time
        one = scan_batches(data, int(batches.position[i]), int(batches.position[i] + batches.size[i]))
        problem = find_corrupt_batch(data, one, where=segment.where(at))
        if problem is not None:
            return i, problem, False
        problem = find_backward_batch(one, previous_last if i == 0 else int(batches.last_offset[i - 1]),
                                      f"{segment.log_path}: ", at)
        if problem is not None:
            return i, problem + advice, True
    return 0, corrupt if corrupt is not None else f"{backwards}{advice}", False  # the chunk, if no batch alone


def _leader_epoch_cache(directory: Path) -> checkpoint.LeaderEpochFileCache:
    return checkpoint.LeaderEpochFileCache(directory / names.LEADER_EPOCH_CHECKPOINT)


def _random_segment_jitter(config: LogConfig) -> int:
    """``LogConfig.randomSegmentJitter``: drawn for every segment Kafka opens, new or loaded."""
    bound = min(config.segment_jitter_ms, config.segment_ms)
    return random.randrange(bound) if bound > 0 else 0


def _index_check(segment: LogSegment) -> Literal["sane", "kafka", "kafkalog"]:
    """Kafka's load-time check (``sanityCheck``: a missing offset index or a ``CorruptIndexException``
    means the segment is recovered, its indexes rebuilt from the log; "kafka") plus what it lacks
    ("kafkalog"): a non-empty segment must have a time index (without one retention would judge it by
    its mtime), and no index entry may point past the log's data."""
    if not segment.offset_index.path.exists():
        return "kafka"
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
    except KafkaLogError:
        return "kafka"
    if not segment.time_index.path.exists() and segment.size > 0:
        return "kafkalog"
    if len(segment.offset_index) and segment.offset_index.entry(len(segment.offset_index) - 1)[1] >= segment.size:
        return "kafkalog"  # an entry points past the data: a lookup would start a reader past records
    next_offset = segment.read_next_offset()
    _, last_time_offset = segment.time_index.last_entry()
    sane = (segment.offset_index.last_offset <= max(segment.base_offset, next_offset)
            and (not len(segment.time_index) or last_time_offset < next_offset))
    return "sane" if sane else "kafkalog"


def _has_torn_tail(segment: LogSegment) -> bool:
    _, position = segment.offset_index.lookup(1 << 62)
    try:
        data, batches = segment.scan(min(position, segment.size))
    except CorruptRecordError:
        return True
    return batches.valid_end != len(data)
