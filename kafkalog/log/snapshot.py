"""Immutable snapshots of partition logs, the input of every pure planner.

Taking a snapshot is cheap on purpose (retention scans every partition every cycle): one ``scandir``
per partition, a ``stat`` per segment, the last entry of each time index, and a short read at the
tail of the active segment for the log end offset. No segment data is decoded.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log import checkpoint, names
from kafkalog.log.config import LogConfig
from kafkalog.log.index import TimeIndex
from kafkalog.log.segment import LogSegment

_TIME_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    base_offset: int
    next_offset: int  # the next segment's base offset, or the log end offset for the last segment
    size_bytes: int
    max_timestamp_ms: int  # the time index's last entry, -1 when the index has none
    mtime_ms: int  # the .log file's modification time

    @property
    def largest_timestamp_ms(self) -> int:
        """What time retention compares (``LogSegment.largestTimestamp``): the max timestamp, else mtime."""
        return self.max_timestamp_ms if self.max_timestamp_ms >= 0 else self.mtime_ms

    @property
    def largest_timestamp_source(self) -> str:
        return "time-index" if self.max_timestamp_ms >= 0 else "mtime"


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    topic: str
    partition: int
    log_dir: Path
    config: LogConfig
    segments: tuple[SegmentSnapshot, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    pending_delete_bytes: int

    @property
    def directory(self) -> Path:
        return self.log_dir / f"{self.topic}-{self.partition}"

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True, slots=True)
class LogDirCheckpoints:
    """The per-log-dir checkpoint files, read once for all of its partitions."""

    log_start_offsets: dict[tuple[str, int], int]
    high_watermarks: dict[tuple[str, int], int]

    @classmethod
    def read(cls, log_dir: Path) -> LogDirCheckpoints:
        return cls(checkpoint.read_offset_checkpoint(log_dir / names.LOG_START_OFFSET_CHECKPOINT),
                   checkpoint.read_offset_checkpoint(log_dir / names.REPLICATION_OFFSET_CHECKPOINT))


def snapshot_log(log_dir: Path, topic: str, partition: int, config: LogConfig,
                 checkpoints: LogDirCheckpoints | None = None) -> LogSnapshot:
    """Snapshot one partition directory without changing it.

    The high watermark is the log end offset (kafkalog's durable end), capped by a Kafka broker's
    ``replication-offset-checkpoint`` where one exists.
    """
    checkpoints = checkpoints if checkpoints is not None else LogDirCheckpoints.read(log_dir)
    directory = log_dir / f"{topic}-{partition}"
    logs: list[tuple[int, os.stat_result]] = []
    time_index_sizes: dict[int, int] = {}
    pending_delete = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            parsed = names.parse_segment_file_name(entry.name)
            if parsed is None:
                continue
            if parsed.state == names.DELETED_SUFFIX:
                if entry.is_file(follow_symlinks=False):
                    pending_delete += entry.stat(follow_symlinks=False).st_size
            elif parsed.state:
                continue  # .cleaned / .swap: in flight, not part of the log
            elif parsed.suffix == names.LOG_SUFFIX:
                logs.append((parsed.base_offset, entry.stat(follow_symlinks=False)))
            elif parsed.suffix == names.TIME_INDEX_SUFFIX:
                time_index_sizes[parsed.base_offset] = entry.stat(follow_symlinks=False).st_size
    logs.sort(key=lambda item: item[0])
    if not logs:
        raise KafkaLogError(f"{directory}: no segment (.log file) found")
    key = (topic, partition)
    last_base = logs[-1][0]
    log_end_offset = LogSegment(directory, last_base).read_next_offset()
    segments = []
    for i, (base, stat) in enumerate(logs):
        next_offset = logs[i + 1][0] if i + 1 < len(logs) else log_end_offset
        max_ts = _last_time_index_timestamp(directory, base, time_index_sizes.get(base, 0))
        segments.append(SegmentSnapshot(base, next_offset, stat.st_size, max_ts, int(stat.st_mtime * 1000)))
    log_start_offset = max(checkpoints.log_start_offsets.get(key, 0), logs[0][0])
    # Kafka never lets the high watermark fall below the log start offset.
    high_watermark = max(log_start_offset,
                         min(log_end_offset, checkpoints.high_watermarks.get(key, log_end_offset)))
    return LogSnapshot(topic, partition, log_dir, config, tuple(segments), log_start_offset, log_end_offset,
                       high_watermark, pending_delete)


def _last_time_index_timestamp(directory: Path, base_offset: int, size: int) -> int:
    """The time index's last timestamp (-1 if none), reading only its last entry when possible."""
    usable = size - size % _TIME_ENTRY.size
    if usable <= 0:
        return -1
    path = names.time_index_file(directory, base_offset)
    with open(path, "rb") as f:
        f.seek(usable - _TIME_ENTRY.size)
        timestamp, relative_offset = _TIME_ENTRY.unpack(f.read(_TIME_ENTRY.size))
    if relative_offset == 0 and usable > _TIME_ENTRY.size:
        # A preallocated file from a running broker ends in zero slots: find the real last entry.
        last, _ = TimeIndex(path, base_offset).last_entry()
        return last
    return int(timestamp)
