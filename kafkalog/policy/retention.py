"""Retention planning (``UnifiedLog.deleteOldSegments``, spec §10): pure, over a snapshot, at ``now_ms``.

Three passes in Kafka's order — log-start-offset breach, ``retention.bytes``, ``retention.ms`` — each
walking from the oldest remaining segment and stopping at the first one that fails; a segment can
go only when it lies wholly below the high watermark, and the last segment only when it is not
empty. When every segment is deletable the log is rolled first, so one empty active segment stays.

Every plan says why retention would not delete more now (``blocked_by``): the answer to "why not?".

The rules are written here once. The planner walks a read-only ``SegmentSource``: a full snapshot
(``LogSnapshot``, for status and the UI) or the lazy ``RetentionSource``, which reads each segment's
size and largest timestamp, and the log end offset, only when the walk asks for them (retention scans
every partition every cycle, and a walk stops at the first segment it keeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kafkalog.log.config import BrokerConfig, LogConfig
from kafkalog.log.snapshot import LogSnapshot
from kafkalog.policy.log_cleaner import CLEANER_DISABLED, cleaner_disabled_by

LOG_START_OFFSET = "log-start-offset"
RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"


class DeletableSegment(NamedTuple):  # tuples: one or more per partition of every plan, made fast
    base_offset: int
    next_offset: int
    size_bytes: int
    reason: str  # log-start-offset | retention.bytes | retention.ms
    detail: str


class Blocker(NamedTuple):
    """Why a retention pass stopped: ``kind`` is one of the documented ``blocked_by`` kinds."""

    kind: str  # policy | cleaner-disabled | unlimited | high-watermark | active-segment |
    #            below-retention.bytes | retention.bytes | retention.ms | future-timestamp | log-start-offset
    detail: str
    segment_base_offset: int | None = None
    until_ms: int | None = None  # for retention.ms: when the segment becomes deletable

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class SegmentSource(Protocol):
    """A partition's segments as retention reads them (``kafkalog.log.snapshot.RetentionSource``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def bases(self) -> Sequence[int]: ...  # every segment's base offset, oldest first

    def segment_bytes(self, i: int) -> int: ...
    def largest_timestamp(self, i: int) -> tuple[int, str]: ...  # (ms, "time-index" or "mtime")
    def log_end_offset(self) -> int: ...
    def high_watermark(self) -> int: ...
    def high_watermark_reaches(self, offset: int) -> bool: ...


class _SnapshotSource:
    """A full snapshot as a ``SegmentSource``: everything already read."""

    def __init__(self, log: LogSnapshot) -> None:
        self._log = log
        self.topic, self.partition, self.config = log.topic, log.partition, log.config
        self.log_start_offset = log.log_start_offset
        self.bases = [s.base_offset for s in log.segments]

    def segment_bytes(self, i: int) -> int:
        return self._log.segments[i].size_bytes

    def largest_timestamp(self, i: int) -> tuple[int, str]:
        segment = self._log.segments[i]
        return segment.largest_timestamp_ms, "time-index" if segment.max_timestamp_ms >= 0 else "mtime"

    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def high_watermark(self) -> int:
        return self._log.high_watermark

    def high_watermark_reaches(self, offset: int) -> bool:
        return self._log.high_watermark >= offset


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    topic: str
    partition: int
    now_ms: int
    segments: tuple[DeletableSegment, ...]
    roll_first: bool  # every segment goes: roll a new empty active segment at the log end first
    log_start_offset_before: int
    log_start_offset_after: int
    blocked_by: tuple[Blocker, ...]

    @property
    def bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @property
    def empty(self) -> bool:
        return not self.segments


def plan_retention(log: LogSnapshot | SegmentSource, now_ms: int, *,
                   broker: BrokerConfig | None = None) -> RetentionPlan:
    """``deleteOldSegments`` for ``log`` at ``now_ms``. ``broker`` (default: Kafka's defaults) says whether
    a log cleaner runs; a compacted log's retention runs in it and nowhere else (spec §8.1)."""
    source: SegmentSource = _SnapshotSource(log) if isinstance(log, LogSnapshot) else log
    config = source.config
    start_before = source.log_start_offset
    off = cleaner_disabled_by(broker) if broker is not None and config.compact else None
    if off is not None:
        return RetentionPlan(source.topic, source.partition, now_ms, (), False, start_before, start_before,
                             (Blocker(CLEANER_DISABLED, f"{off}: no log cleaner runs, and a compacted topic's "
                                                        "retention runs in the log cleaner"),))
    count = len(source.bases)
    first = 0  # the oldest segment not planned for deletion yet
    log_start_offset = start_before
    planned: list[DeletableSegment] = []
    blocked: list[Blocker] = []
    passes = [LOG_START_OFFSET]
    if config.delete:
        passes += [RETENTION_BYTES, RETENTION_MS]
    else:
        blocked.append(Blocker("policy", f"cleanup.policy={','.join(sorted(config.cleanup_policy))} deletes "
                                         "only below the log start offset"))
    roll_first = False
    for kind in passes:
        found, stop = _deletable(source, first, log_start_offset, kind, now_ms)
        if stop is not None:
            blocked.append(stop)
        if not found:
            continue
        if first + len(found) == count:
            roll_first = True  # a new empty active segment at the log end will remain
        planned += found
        first += len(found)
        next_base = source.bases[first] if first < count else source.log_end_offset()
        log_start_offset = max(log_start_offset, next_base)
        if first == count:
            break
    return RetentionPlan(source.topic, source.partition, now_ms, tuple(planned), roll_first, start_before,
                         log_start_offset, tuple(blocked))


def _deletable(log: SegmentSource, first: int, log_start_offset: int, kind: str,
               now_ms: int) -> tuple[list[DeletableSegment], Blocker | None]:
    """``deletableSegments(predicate)``: the segments from ``first`` on the pass may delete, and why it
    stopped. What it asks of ``log`` is what it reads: a walk stops at the first segment it keeps."""
    config = log.config
    bases = log.bases
    count = len(bases)
    if kind == RETENTION_BYTES:
        if config.retention_bytes < 0:
            return [], Blocker("unlimited", "retention.bytes=-1")
        size = sum(log.segment_bytes(i) for i in range(first, count))
        if size < config.retention_bytes:
            return [], Blocker("below-retention.bytes", f"log is {size} bytes, retention.bytes is "
                                                        f"{config.retention_bytes}")
        excess = size - config.retention_bytes
    if kind == RETENTION_MS and config.retention_ms < 0:
        return [], Blocker("unlimited", "retention.ms=-1")
    found: list[DeletableSegment] = []
    for i in range(first, count):
        following = bases[i + 1] if i + 1 < count else None
        upper = following if following is not None else log.log_end_offset()
        base = bases[i]
        if not log.high_watermark_reaches(upper):
            return found, Blocker("high-watermark", f"segment {base} ends at offset {upper}, past the high "
                                                    f"watermark {log.high_watermark()}", base)
        if kind == LOG_START_OFFSET:
            if following is None or following > log_start_offset:
                return found, None  # not a blocker: the log start offset simply lies in this segment
            detail = f"log start offset {log_start_offset} is at or past the next segment {following}"
        elif kind == RETENTION_BYTES:
            size_bytes = log.segment_bytes(i)
            if excess - size_bytes < 0:
                return found, Blocker("retention.bytes", f"deleting segment {base} ({size_bytes} bytes) "
                                      f"would leave the log below retention.bytes={config.retention_bytes}", base)
            excess -= size_bytes
            detail = f"log exceeds retention.bytes={config.retention_bytes}"
        else:
            largest, source = log.largest_timestamp(i)
            if now_ms - largest <= config.retention_ms:
                if largest > now_ms:
                    return found, Blocker("future-timestamp", f"segment {base} has newest timestamp {largest} "
                                          f"({source}), in the future; it pins every later segment", base,
                                          largest + config.retention_ms + 1)
                return found, Blocker("retention.ms", f"segment {base} newest timestamp {largest} ({source}) "
                                      f"expires at {largest + config.retention_ms + 1}", base,
                                      largest + config.retention_ms + 1)
            detail = f"newest timestamp {largest} ({source}) older than retention.ms={config.retention_ms}"
        size_bytes = log.segment_bytes(i)
        if following is None and size_bytes == 0:
            return found, Blocker("active-segment", f"segment {base} is the empty active segment", base)
        found.append(DeletableSegment(base, upper, size_bytes, kind, detail))
    return found, None
