"""Compaction selection (Kafka's ``LogCleanerManager``, spec §8.2, §8.3, §8.8): pure, over snapshots, at ``now_ms``.

``cleanable_range`` is ``cleanableOffsets``: where the dirty section starts (the cleaner checkpoint, reset
to the log start offset when it lies outside the log) and the first offset that may not be cleaned yet
(the last stable offset, the active segment, ``min.compaction.lag.ms``). ``log_to_clean`` adds Kafka's
segment-aligned byte accounting and the dirty ratio; ``select_logs_to_clean`` is
``grabFilthiestCompactedLog`` run to exhaustion, ranking every eligible log instead of taking one.

Every log the plan does not select carries a reason, the answer to "why was this not cleaned?".
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from kafkalog.errors import ConfigError, KafkaLogError
from kafkalog.log.config import BrokerConfig
from kafkalog.log.snapshot import LogSnapshot, SegmentSnapshot
from kafkalog.policy.log_cleaner import CLEANER_DISABLED, cleaner_disabled_by

MAX_LONG = 2**63 - 1

# What sets the first uncleanable offset (``limited_by``).
Limit = Literal["active-segment", "open-transaction", "high-watermark", "min-compaction-lag"]
# Why a log is not in ``CompactionPlan.selected``.
ReasonKind = Literal["policy", "cleaner-disabled", "nothing-to-clean", "below-min-cleanable-dirty-ratio",
                     "min-compaction-lag", "open-transaction", "high-watermark", "active-segment", "byte-budget",
                     "max-logs"]
# Why a log is eligible (``LogToClean.trigger``).
Trigger = Literal["dirty-ratio", "max-compaction-lag"]


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """``[first_dirty_offset, first_uncleanable_offset)``, not segment aligned (``OffsetsToClean``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    checkpoint_reset: bool  # Kafka rewrites the cleaner checkpoint to first_dirty_offset at once
    reset_reason: str | None
    limited_by: Limit
    limit_detail: str


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's ``LogToClean``: the range with its byte accounting (spec §8.2)."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int  # segment aligned: the base offset of the first segment not cleaned
    clean_bytes: int
    cleanable_bytes: int
    total_bytes: int
    dirty_ratio: float  # cleanable / total; 0.0 when total is 0 (Kafka's NaN there is filtered out anyway)
    max_compaction_delay_ms: int
    needs_compaction_now: bool
    checkpoint_reset: bool
    reset_reason: str | None
    limited_by: Limit
    limit_detail: str
    trigger: Trigger | None  # why it is eligible, None when it is not


@dataclass(frozen=True, slots=True)
class NotSelected:
    topic: str
    partition: int
    kind: ReasonKind
    detail: str
    log: LogToClean | None = None  # None only for kinds "policy" and "cleaner-disabled": no range is computed

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class CheckpointReset(NamedTuple):
    """A cleaner-checkpoint entry Kafka rewrites while choosing, whether or not the log is cleaned."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    now_ms: int
    selected: tuple[LogToClean, ...]  # filthiest first
    not_selected: tuple[NotSelected, ...]  # by (topic, partition)
    checkpoint_resets: tuple[CheckpointReset, ...]  # by (topic, partition)

    @property
    def cleanable_bytes(self) -> int:
        return sum(c.cleanable_bytes for c in self.selected)


def cleanable_range(log: LogSnapshot, now_ms: int) -> CleanableRange:
    """``cleanableOffsets(log, checkpoint, now)`` (spec §8.2 steps 1–3)."""
    segments = _segments(log)
    start, end = log.log_start_offset, log.log_end_offset
    checkpoint = log.cleaner_checkpoint if log.cleaner_checkpoint is not None else start
    reset_reason = None
    if checkpoint < start:
        # With compact,delete retention moves the log start past the checkpoint routinely (§8.8), so
        # Kafka does not warn; the checkpoint is rewritten all the same.
        expected = " (expected with compact,delete)" if log.config.delete else ""
        reset_reason = f"cleaner checkpoint {checkpoint} is below the log start offset {start}{expected}"
    elif checkpoint > end:
        # Data lost at the log end (truncation, corruption): assume the whole log needs cleaning.
        reset_reason = f"cleaner checkpoint {checkpoint} is past the log end offset {end}"
    first_dirty = start if reset_reason is not None else checkpoint

    active_base = segments[-1].base_offset
    # Kafka's last stable offset never lies below the log start offset (nor, then, does the range end).
    lso = max(_last_stable_offset(log), start)
    if lso < log.high_watermark:
        lso_limit: Limit = "open-transaction"
        lso_detail = f"a transaction open since offset {lso} holds the last stable offset there"
    else:
        lso_limit = "high-watermark"
        lso_detail = f"the high watermark {lso} (the last stable offset) bounds what is committed"
    # Order matters only on ties: the active segment always bounds, so it explains an equal LSO; an open
    # transaction outlives the lag, so it explains an equal lag bound.
    bounds: list[tuple[int, Limit, str]] = [
        (active_base, "active-segment", f"the active segment (base {active_base}) is never cleaned"),
        (lso, lso_limit, lso_detail)]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for s in _non_active_from(segments, first_dirty):
            if s.largest_timestamp_ms > now_ms - lag:
                bounds.append((s.base_offset, "min-compaction-lag",
                               f"segment {s.base_offset} has newest timestamp {s.largest_timestamp_ms} "
                               f"({s.largest_timestamp_source}), within min.compaction.lag.ms={lag}; "
                               f"cleanable from {s.largest_timestamp_ms + lag}"))
                break
    uncleanable, limited_by, detail = min(bounds, key=lambda b: b[0])  # min keeps the first of equals
    if first_dirty >= active_base:
        limited_by, detail = bounds[0][1], bounds[0][2]  # the dirty section starts in the active segment
    return CleanableRange(first_dirty, max(first_dirty, uncleanable), reset_reason is not None, reset_reason,
                          limited_by, detail)


def max_compaction_delay_ms(log: LogSnapshot, first_dirty_offset: int, now_ms: int) -> int:
    """How overdue the oldest dirty non-active segment is under ``max.compaction.lag.ms`` (spec §8.3).

    A segment's age is its first batch's timestamp; non-positive ones (no timestamp, or MAX_LONG for an
    empty segment, which the filter keeps but never wins) say nothing, as in Kafka.
    """
    stamps = [s.first_batch_timestamp_ms for s in _non_active_from(_segments(log), first_dirty_offset)]
    earliest = min((t for t in stamps if t > 0), default=MAX_LONG)
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(log: LogSnapshot, now_ms: int) -> LogToClean:
    """The range of ``cleanable_range`` with Kafka's byte accounting (spec §8.2 "LogToClean").

    A segment straddling the first dirty offset counts as clean and as cleanable: Kafka sums whole
    segments on both sides, so ``clean_bytes + cleanable_bytes`` can exceed the log's size.
    """
    segments = _segments(log)
    span = cleanable_range(log, now_ms)
    first_dirty = span.first_dirty_offset
    clean_bytes = sum(s.size_bytes for s in _values(segments, -1, first_dirty))
    # Aligned down to the segment holding the uncleanable offset: a partly cleanable segment is not cleaned.
    head = _non_active_from(segments, span.first_uncleanable_offset)
    first_uncleanable = head[0].base_offset if head else segments[-1].base_offset
    cleanable_bytes = sum(s.size_bytes for s in _values(segments, min(first_dirty, first_uncleanable),
                                                          first_uncleanable))
    total = clean_bytes + cleanable_bytes
    ratio = cleanable_bytes / total if total else 0.0
    delay = max_compaction_delay_ms(log, first_dirty, now_ms)
    trigger: Trigger | None = None
    if ratio > log.config.min_cleanable_dirty_ratio:  # strictly greater, as Kafka
        trigger = "dirty-ratio"
    elif delay > 0 and cleanable_bytes > 0:
        trigger = "max-compaction-lag"
    return LogToClean(log.topic, log.partition, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                      total, ratio, delay, delay > 0, span.checkpoint_reset, span.reset_reason, span.limited_by,
                      span.limit_detail, trigger)


def dirty_ratio(log: LogSnapshot, now_ms: int) -> float:
    return log_to_clean(log, now_ms).dirty_ratio


def select_logs_to_clean(logs: Sequence[LogSnapshot], now_ms: int, *, broker: BrokerConfig | None = None,
                         byte_budget: int | None = None, max_logs: int | None = None) -> CompactionPlan:
    """Every eligible compacted log, filthiest (highest dirty ratio) first, ties by (topic, partition).

    Eligible as in ``grabFilthiestCompactedLog``: ``dirty_ratio > min.cleanable.dirty.ratio``, or
    ``max.compaction.lag.ms`` overdue with cleanable bytes. The cycle then takes the ranked logs in
    order while the running sum of their ``cleanable_bytes`` stays within ``byte_budget`` and their
    count within ``max_logs``, stopping at the first that does not fit: a smaller, cleaner log never
    jumps ahead of a dirtier one. The first log is taken even if it alone exceeds ``byte_budget``, or
    a log larger than the budget would never be cleaned. ``checkpoint_resets`` lists the checkpoint
    entries Kafka rewrites while choosing, for selected and unselected logs alike. When ``broker``
    (default: Kafka's defaults) runs no log cleaner, nothing is chosen and no checkpoint is rewritten.
    """
    if byte_budget is not None and byte_budget < 0:
        raise ConfigError(f"byte_budget={byte_budget}: must be at least 0 (or None for no limit)")
    if max_logs is not None and max_logs < 0:
        raise ConfigError(f"max_logs={max_logs}: must be at least 0 (or None for no limit)")
    ranked: list[tuple[LogToClean, LogSnapshot]] = []
    skipped: list[tuple[NotSelected, LogSnapshot]] = []
    resets: list[tuple[CheckpointReset, LogSnapshot]] = []
    off = cleaner_disabled_by(broker) if broker is not None else None
    for log in logs:
        if not log.config.compact:
            policy = ",".join(sorted(log.config.cleanup_policy))
            skipped.append((NotSelected(log.topic, log.partition, "policy",
                                        f"cleanup.policy={policy} does not include compact"), log))
            continue
        if off is not None:
            skipped.append((NotSelected(log.topic, log.partition, CLEANER_DISABLED,
                                        f"{off}: no log cleaner runs, so no log is compacted"), log))
            continue
        candidate = log_to_clean(log, now_ms)
        if candidate.checkpoint_reset:
            resets.append((CheckpointReset(log.topic, log.partition, candidate.first_dirty_offset), log))
        if candidate.trigger is None:
            skipped.append((_why_not(log, candidate), log))
        else:
            ranked.append((candidate, log))
    ranked.sort(key=lambda c: (-c[0].dirty_ratio, _key(c[1])))
    selected: list[LogToClean] = []
    running, stop = 0, None
    for candidate, log in ranked:
        if stop is None:
            if max_logs is not None and len(selected) >= max_logs:
                stop = NotSelected(log.topic, log.partition, "max-logs",
                                   f"max_logs={max_logs} filthier logs were selected first", candidate)
            elif byte_budget is not None and selected and running + candidate.cleanable_bytes > byte_budget:
                stop = NotSelected(log.topic, log.partition, "byte-budget",
                                   f"its {candidate.cleanable_bytes} cleanable bytes would bring the cycle to "
                                   f"{running + candidate.cleanable_bytes}, over byte_budget={byte_budget}",
                                   candidate)
            else:
                selected.append(candidate)
                running += candidate.cleanable_bytes
                continue
            skipped.append((stop, log))
        else:
            skipped.append((NotSelected(log.topic, log.partition, stop.kind,
                                        f"ranked after {stop.topic}-{stop.partition}, which did not fit "
                                        f"({stop.detail}); logs are taken filthiest first without skipping",
                                        candidate), log))
    skipped.sort(key=lambda s: _key(s[1]))
    resets.sort(key=lambda r: _key(r[1]))
    return CompactionPlan(now_ms, tuple(selected), tuple(s for s, _ in skipped), tuple(r for r, _ in resets))


def _why_not(log: LogSnapshot, c: LogToClean) -> NotSelected:
    """The reason an ineligible compacted log is not cleaned now."""
    active_base = log.segments[-1].base_offset

    def reason(kind: ReasonKind, detail: str) -> NotSelected:
        return NotSelected(c.topic, c.partition, kind, detail, c)

    if c.total_bytes == 0:
        return reason("nothing-to-clean", f"no bytes below the first uncleanable offset {c.first_uncleanable_offset}")
    if c.cleanable_bytes > 0:  # then the ratio alone failed, and max.compaction.lag.ms is not overdue
        return reason("below-min-cleanable-dirty-ratio",
                      f"dirty ratio {c.dirty_ratio:.4f} ({c.cleanable_bytes} of {c.total_bytes} bytes) is not "
                      f"above min.cleanable.dirty.ratio={log.config.min_cleanable_dirty_ratio:g}")
    overdue = (f"; max.compaction.lag.ms is overdue by {c.max_compaction_delay_ms} ms but nothing is cleanable"
               if c.needs_compaction_now else "")
    if c.first_dirty_offset >= log.log_end_offset:
        return reason("nothing-to-clean", f"every offset below the log end offset {log.log_end_offset} is clean "
                                          f"(first dirty offset {c.first_dirty_offset})")
    if c.first_dirty_offset >= active_base:
        return reason("active-segment", f"only the active segment (base {active_base}) is dirty, from offset "
                                        f"{c.first_dirty_offset}{overdue}")
    return reason(c.limited_by, f"{c.limit_detail}, so nothing from the first dirty offset "
                                f"{c.first_dirty_offset} is cleanable{overdue}")


def _key(log: LogSnapshot) -> tuple[str, int, str]:
    return log.topic, log.partition, str(log.log_dir)


def _segments(log: LogSnapshot) -> tuple[SegmentSnapshot, ...]:
    """The segments, after checking the snapshot was taken for compaction (a retention snapshot lacks the
    last stable offset and would silently plan nothing)."""
    if not log.segments:
        raise KafkaLogError(f"{log.topic}-{log.partition}: a log has at least one (active) segment")
    _last_stable_offset(log)
    return log.segments


def _last_stable_offset(log: LogSnapshot) -> int:
    if log.last_stable_offset is None:
        raise KafkaLogError(f"{log.topic}-{log.partition}: not a compaction snapshot (no last stable offset); "
                            "take it with snapshot_for_compaction")
    return log.last_stable_offset


def _values(segments: Sequence[SegmentSnapshot], start: int, stop: int) -> Sequence[SegmentSnapshot]:
    """``LogSegments.values(from, to)``: from the segment holding ``start`` (or the first) up to ``stop``."""
    if start >= stop:
        return ()
    bases = [s.base_offset for s in segments]
    first = max(bisect_right(bases, start) - 1, 0)
    return segments[first:bisect_right(bases, stop - 1)]


def _non_active_from(segments: Sequence[SegmentSnapshot], start: int) -> Sequence[SegmentSnapshot]:
    """``nonActiveLogSegmentsFrom(from)``: from the segment holding ``start`` up to the active segment."""
    return _values(segments, start, segments[-1].base_offset)
