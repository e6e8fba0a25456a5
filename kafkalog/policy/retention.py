"""Retention planning (``UnifiedLog.deleteOldSegments``, spec §10): pure, over a snapshot, at ``now_ms``.

Three passes in Kafka's order — log-start-offset breach, ``retention.bytes``, ``retention.ms`` — each
walking from the oldest remaining segment and stopping at the first one that fails; a segment can
go only when it lies wholly below the high watermark, and the last segment only when it is not
empty. When every segment is deletable the log is rolled first, so one empty active segment stays.

Every plan says why retention would not delete more now (``blocked_by``): the answer to "why not?".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kafkalog.log.config import BrokerConfig
from kafkalog.log.snapshot import LogSnapshot, SegmentSnapshot
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


def plan_retention(log: LogSnapshot, now_ms: int, *, broker: BrokerConfig | None = None) -> RetentionPlan:
    """``deleteOldSegments`` for ``log`` at ``now_ms``. ``broker`` (default: Kafka's defaults) says whether
    a log cleaner runs; a compacted log's retention runs in it and nowhere else (spec §8.1)."""
    config = log.config
    off = cleaner_disabled_by(broker) if broker is not None and config.compact else None
    if off is not None:
        return RetentionPlan(log.topic, log.partition, now_ms, (), False, log.log_start_offset, log.log_start_offset,
                             (Blocker(CLEANER_DISABLED, f"{off}: no log cleaner runs, and a compacted topic's "
                                                        "retention runs in the log cleaner"),))
    remaining = list(log.segments)
    log_start_offset = log.log_start_offset
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
        found, stop = _deletable(log, remaining, log_start_offset, kind, now_ms)
        if stop is not None:
            blocked.append(stop)
        if not found:
            continue
        if len(found) == len(remaining):
            roll_first = True  # a new empty active segment at the log end will remain
        planned += found
        remaining = remaining[len(found):]
        next_base = remaining[0].base_offset if remaining else log.log_end_offset
        log_start_offset = max(log_start_offset, next_base)
        if not remaining:
            break
    return RetentionPlan(log.topic, log.partition, now_ms, tuple(planned), roll_first, log.log_start_offset,
                         log_start_offset, tuple(blocked))


def _deletable(log: LogSnapshot, segments: list[SegmentSnapshot], log_start_offset: int, kind: str,
               now_ms: int) -> tuple[list[DeletableSegment], Blocker | None]:
    """``deletableSegments(predicate)``: the prefix of segments the pass may delete, and why it stopped."""
    config = log.config
    if kind == RETENTION_BYTES:
        if config.retention_bytes < 0:
            return [], Blocker("unlimited", "retention.bytes=-1")
        size = sum(s.size_bytes for s in segments)
        if size < config.retention_bytes:
            return [], Blocker("below-retention.bytes", f"log is {size} bytes, retention.bytes is "
                                                        f"{config.retention_bytes}")
        excess = size - config.retention_bytes
    if kind == RETENTION_MS and config.retention_ms < 0:
        return [], Blocker("unlimited", "retention.ms=-1")
    found: list[DeletableSegment] = []
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper = following.base_offset if following else log.log_end_offset
        base = segment.base_offset
        if not log.high_watermark_reaches(upper):
            return found, Blocker("high-watermark", f"segment {base} ends at offset {upper}, past the high "
                                                    f"watermark {log.high_watermark}", base)
        if kind == LOG_START_OFFSET:
            if following is None or following.base_offset > log_start_offset:
                return found, None  # not a blocker: the log start offset simply lies in this segment
            detail = f"log start offset {log_start_offset} is at or past the next segment {following.base_offset}"
        elif kind == RETENTION_BYTES:
            if excess - segment.size_bytes < 0:
                return found, Blocker("retention.bytes", f"deleting segment {base} ({segment.size_bytes} bytes) "
                                      f"would leave the log below retention.bytes={config.retention_bytes}", base)
            excess -= segment.size_bytes
            detail = f"log exceeds retention.bytes={config.retention_bytes}"
        else:
            largest = segment.largest_timestamp_ms
            source = segment.largest_timestamp_source
            if now_ms - largest <= config.retention_ms:
                if largest > now_ms:
                    return found, Blocker("future-timestamp", f"segment {base} has newest timestamp {largest} "
                                          f"({source}), in the future; it pins every later segment", base,
                                          largest + config.retention_ms + 1)
                return found, Blocker("retention.ms", f"segment {base} newest timestamp {largest} ({source}) "
                                      f"expires at {largest + config.retention_ms + 1}", base,
                                      largest + config.retention_ms + 1)
            detail = f"newest timestamp {largest} ({source}) older than retention.ms={config.retention_ms}"
        if following is None and segment.size_bytes == 0:
            return found, Blocker("active-segment", f"segment {base} is the empty active segment", base)
        found.append(DeletableSegment(base, upper, segment.size_bytes, kind, detail))
    return found, None
