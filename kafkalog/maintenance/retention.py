"""Carrying out retention plans: mark segments ``.deleted`` (phase one) and sweep them (phase two).

Crash story: ``apply_retention`` re-plans under the partition lock with the plan's own clock and
never goes past the plan's cut, so applying a plan twice, or again after a crash, converges to the
same state. Marking advances the log start offset and writes its checkpoint before renaming; the
segments are renamed oldest first, ``.log`` first, so a crash leaves a prefix of them gone and the
rest intact — and a log start offset recovered as ``max(checkpoint, first segment base)``.

``sweep`` deletes ``.deleted`` files whose mark time (their mtime, stamped at marking) is at least
``file.delete.delay.ms`` old on the wall clock. It deletes regular files only: a symlink is never
followed out of the log dir, nor removed.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.log import names
from kafkalog.log.snapshot import snapshot_log
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance import journal
from kafkalog.policy.retention import RetentionPlan, plan_retention


@dataclass(frozen=True)
class RetentionReport:
    topic: str
    partition: int
    deleted_segments: tuple[int, ...]
    bytes: int
    rolled: bool
    log_start_offset_before: int
    log_start_offset_after: int
    marked_files: tuple[str, ...]
    mark_time_ms: int | None = None  # the wall clock stamped on the marked files (None: nothing marked)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def apply_retention(store: LogStore, location: PartitionLocation, plan: RetentionPlan, *, run_id: str,
                    lock_timeout_s: float = 30.0) -> RetentionReport:
    """Mark the plan's segments deleted (never more than the plan: its cut is the upper bound)."""
    tp = location.topic_partition
    cut = max((s.base_offset for s in plan.segments), default=None)
    with store.writable_log(location, timeout_s=lock_timeout_s) as log:
        before = log.log_start_offset
        if cut is None:
            return RetentionReport(tp.topic, tp.partition, (), 0, False, before, before, ())
        config = store.log_config(tp.topic)
        fresh = plan_retention(snapshot_log(location.log_dir, tp.topic, tp.partition, config,
                                            store.log_dir_checkpoints(location.log_dir), now_ms=plan.now_ms),
                               plan.now_ms, broker=store.broker)
        todo = [s for s in fresh.segments if s.base_offset <= cut]
        mark_ms = wall_clock_ms()
        rolled = False
        if todo and len(todo) == len(log.segments):
            log.roll()  # every segment goes: keep a new, empty active segment at the log end
            rolled = True
            journal.append(location.log_dir, journal.JournalEntry(
                run_id, mark_ms, tp.topic, tp.partition, "roll", (log.active_segment.base_offset,),
                "all segments deletable", log_start_offset_before=before, log_start_offset_after=before))
        marked = log.mark_segments_deleted(len(todo), mark_time_ms=mark_ms) if todo else []
        if not todo:  # the plan's segments are marked already: a retry whose first try died after the renames
            log.align_leader_epochs()
        store.write_checkpoints(location, log)
        after = log.log_start_offset
        for segment in todo:
            journal.append(location.log_dir, journal.JournalEntry(
                run_id, mark_ms, tp.topic, tp.partition, "mark-deleted", (segment.base_offset,),
                f"{segment.reason}: {segment.detail}", segment.size_bytes, before, after,
                tuple(p.name for p in marked if names.offset_from_file_name(p.name) == segment.base_offset)))
        return RetentionReport(tp.topic, tp.partition, tuple(s.base_offset for s in todo),
                               sum(s.size_bytes for s in todo), rolled, before, after,
                               tuple(p.name for p in marked), mark_ms if todo else None)


@dataclass
class SweepReport:
    topic: str
    partition: int
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    waiting_files: list[str] = field(default_factory=list)
    waiting_bytes: int = 0
    next_due_ms: int | None = None
    refused: list[str] = field(default_factory=list)


def sweep_partition(store: LogStore, location: PartitionLocation, *, wall_now_ms: int, run_id: str,
                    dry_run: bool = False) -> SweepReport:
    """Phase two: delete this partition's ``.deleted`` files whose delay has passed (a dry run only
    says which)."""
    tp = location.topic_partition
    delay_ms = store.log_config(tp.topic).file_delete_delay_ms
    report = SweepReport(tp.topic, tp.partition)
    directory = location.directory
    if directory.is_symlink() or directory.resolve().parent != location.log_dir.resolve():
        report.refused.append(f"{directory}: partition directory leads outside its log dir; not swept")
        return report
    with os.scandir(directory) as entries:
        doomed = sorted((e for e in entries if e.name.endswith(names.DELETED_SUFFIX)), key=lambda e: e.name)
        for entry in doomed:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                report.refused.append(f"{entry.path}: not a regular file ({names.file_kind(info.st_mode)}); left alone")
                continue
            due_ms = info.st_mtime_ns // 1_000_000 + delay_ms
            if wall_now_ms >= due_ms:
                if not dry_run:
                    os.unlink(entry.path)
                report.deleted_files.append(entry.name)
                report.deleted_bytes += info.st_size
            else:
                report.waiting_files.append(entry.name)
                report.waiting_bytes += info.st_size
                report.next_due_ms = due_ms if report.next_due_ms is None else min(report.next_due_ms, due_ms)
    if report.deleted_files and not dry_run:
        journal.append(location.log_dir, journal.JournalEntry(
            run_id, wall_now_ms, tp.topic, tp.partition, "sweep",
            tuple(sorted({names.offset_from_file_name(n) for n in report.deleted_files})),
            f"file.delete.delay.ms={delay_ms} elapsed", report.deleted_bytes, files=tuple(report.deleted_files)))
    return report


def pending_delete_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(names.DELETED_SUFFIX))
