"""A cycle's retention, as the CLI and the pipeline's tasks both carry it out: plan (Kafka's
``deleteOldSegments`` decisions as a ``RetentionPlanDocument``), apply (mark what a plan lists as
``.deleted``) and sweep (phase two: delete what ``file.delete.delay.ms`` lets go). ``kafkalog retention
plan --json`` *is* a retention plan file.

Applying a retention plan never deletes more than it lists: each partition is re-planned under its
lock with the plan's clock and cut at the plan's last segment (``maintenance.retention.apply_retention``),
so a reviewed plan can be enforced later and applying it twice changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from kafkalog.cycle.documents import (
    Doc,
    PartitionError,
    PartitionRetention,
    PlanError,
    RetentionPlanDocument,
    SegmentDeletion,
    read_document,
)
from kafkalog.cycle.results import AppliedMark, RetentionApplied
from kafkalog.errors import KafkaLogError, LogLockedError
from kafkalog.log.shares import map_shares

# Partitions whose leader-epoch checkpoints are written together (and whose locks are held until then).
MARKING_BATCH = 64


def plan_retention(store: Any, locations: Sequence[Any], now_ms: int, *, processes: int = 1) -> RetentionPlanDocument:
    """Kafka's ``deleteOldSegments`` decisions for ``locations`` at ``now_ms``, as a retention plan.

    With ``processes`` > 1 the partitions are planned across this process and forked ones
    (:func:`kafkalog.log.shares.map_shares`); the document is the one a single process makes."""
    shares = map_shares(partial(_plan_retention_share, store, now_ms=now_ms), list(locations), processes)
    return RetentionPlanDocument(now_ms, tuple(str(d) for d in store.log_dirs),
                                 tuple(doc for planned, _ in shares for doc in planned),
                                 tuple(error for _, failed in shares for error in failed))


def read_retention_plan(path: Path | str) -> RetentionPlanDocument:
    return read_document(path, RetentionPlanDocument)


def check_plan_store(store: Any, plan: RetentionPlanDocument) -> None:
    """A plan names the store it was made for (its log dirs, and each partition's): carried out on
    another, it would mark that store's files. Refused whole, before anything changes."""
    ours = {Path(d).resolve() for d in store.log_dirs}
    if {Path(d).resolve() for d in plan.log_dirs} != ours:
        raise PlanError(f"the plan was made for log dirs {', '.join(plan.log_dirs)}, not "
                        f"{', '.join(map(str, store.log_dirs))}; nothing applied (make the plan on this store)")
    for doc in plan.due:
        if Path(doc.log_dir).resolve() not in ours:
            raise PlanError(f"the plan's {doc.topic}-{doc.partition} is in log dir {doc.log_dir}, which is "
                            f"not one of {', '.join(map(str, store.log_dirs))}; nothing applied")


def _plan_retention_share(store: Any, locations: Sequence[Any], *,
                          now_ms: int) -> tuple[list[PartitionRetention], list[PartitionError]]:
    from kafkalog.log.snapshot import LogDirCheckpoints, RetentionSource
    from kafkalog.policy.retention import plan_retention as plan_one

    checkpoints: dict[Path, LogDirCheckpoints] = {}
    partitions: list[PartitionRetention] = []
    errors: list[PartitionError] = []
    for location in locations:
        tp = location.topic_partition
        if location.log_dir not in checkpoints:
            checkpoints[location.log_dir] = LogDirCheckpoints.read(location.log_dir)
        try:
            with RetentionSource(location.log_dir, tp.topic, tp.partition, store.log_config(tp.topic),
                                 checkpoints[location.log_dir]) as source:
                plan = plan_one(source, now_ms, broker=store.broker)
        except (KafkaLogError, OSError) as exc:
            errors.append(PartitionError(tp.topic, tp.partition, str(exc)))
            continue
        partitions.append(PartitionRetention(
            plan.topic, plan.partition, str(location.log_dir), plan.now_ms,
            tuple(SegmentDeletion(s.base_offset, s.next_offset, s.size_bytes, s.reason, s.detail)
                  for s in plan.segments),
            plan.bytes, plan.roll_first, plan.log_start_offset_before, plan.log_start_offset_after,
            tuple(str(b) for b in plan.blocked_by)))
    return partitions, errors


def apply_retention_plan(store: Any, plan: RetentionPlanDocument, *, run_id: str, dry_run: bool = False,
                         lock_timeout_s: float = 30.0, processes: int = 1) -> RetentionApplied:
    """Mark what ``plan`` lists as ``.deleted`` (never more). Returns, per partition, what was marked
    and when its files are due for deletion (``due_ms``: the mark time plus the topic's
    ``file.delete.delay.ms``), and the newest mark time (the wall clock the wait counts from). A
    partition whose lock another process holds for ``lock_timeout_s`` is an error marked ``locked``.
    With ``processes`` > 1 the partitions are marked across this process and forked ones, as
    ``plan_retention`` plans them (each under its own lock, so the result is the one a single process
    gets)."""
    check_plan_store(store, plan)
    shares = map_shares(partial(_apply_share, store, plan.now_ms, run_id=run_id, dry_run=dry_run,
                                lock_timeout_s=lock_timeout_s), list(plan.due), processes)
    applied = tuple(entry for done, _ in shares for entry in done)
    marks = [(a.mark_time_ms, a.due_ms) for a in applied if a.mark_time_ms is not None and a.due_ms is not None]
    errors = tuple(e for _, failed in shares for e in failed)  # the plan's own errors stay the plan's
    return RetentionApplied(plan.now_ms, dry_run, applied, errors, sum(len(a.segments) for a in applied),
                            sum(a.bytes for a in applied), max((mark for mark, _ in marks), default=None),
                            max((due - mark for mark, due in marks), default=0))


def _apply_share(store: Any, now_ms: int, docs: Sequence[PartitionRetention], *, run_id: str, dry_run: bool,
                 lock_timeout_s: float) -> tuple[list[AppliedMark], list[PartitionError]]:
    """Mark one share of a plan's partitions: checkpoints written and the journal fsynced once, at its end;
    the leader-epoch checkpoints of each ``MARKING_BATCH`` partitions written together."""
    from kafkalog.maintenance import journal
    from kafkalog.maintenance.retention import MarkingBatch

    applied: list[AppliedMark] = []
    errors: list[PartitionError] = []
    with store.batched_checkpoints(), journal.group_commit():
        for first in range(0, len(docs), MARKING_BATCH):
            with MarkingBatch() as batch:
                for doc in docs[first:first + MARKING_BATCH]:
                    try:
                        applied.append(_apply_one(store, now_ms, doc, run_id, dry_run, lock_timeout_s, batch))
                    except LogLockedError as exc:
                        errors.append(PartitionError(doc.topic, doc.partition, str(exc), locked=True))
                    except (KafkaLogError, OSError) as exc:
                        errors.append(PartitionError(doc.topic, doc.partition, str(exc)))
            errors += [_epochs_not_written(directory, error) for directory, error in batch.errors]
    return applied, errors


def _epochs_not_written(directory: Path, error: OSError) -> PartitionError:
    from kafkalog.log.names import parse_partition_dir_name

    tp = parse_partition_dir_name(directory.name)
    return PartitionError(None if tp is None else tp.topic, None if tp is None else tp.partition,
                          f"{directory}: segments marked, but the leader-epoch checkpoint was not rewritten "
                          f"(every load truncates it again): {error}")


def _apply_one(store: Any, now_ms: int, doc: PartitionRetention, run_id: str, dry_run: bool,
               lock_timeout_s: float, batch: Any) -> AppliedMark:
    from kafkalog.log.names import TopicPartition
    from kafkalog.log.store import PartitionLocation
    from kafkalog.maintenance.retention import apply_retention
    from kafkalog.policy.retention import DeletableSegment, RetentionPlan

    if dry_run:
        return AppliedMark(doc.topic, doc.partition, tuple(s.base_offset for s in doc.segments), doc.bytes,
                           doc.log_start_offset_before, doc.log_start_offset_after, doc.roll_first, (), None, None)
    location = PartitionLocation(TopicPartition(doc.topic, doc.partition), Path(doc.log_dir))
    one = RetentionPlan(doc.topic, doc.partition, now_ms, tuple(
        DeletableSegment(s.base_offset, s.next_offset, s.bytes, s.reason, s.detail)
        for s in doc.segments), doc.roll_first, doc.log_start_offset_before, doc.log_start_offset_after, ())
    if not location.directory.is_dir():
        raise KafkaLogError(f"partition directory {location.directory} is gone")
    report = apply_retention(store, location, one, run_id=run_id, lock_timeout_s=lock_timeout_s, batch=batch)
    mark_ms = report.mark_time_ms
    due_ms = None if mark_ms is None else mark_ms + store.log_config(doc.topic).file_delete_delay_ms
    return AppliedMark(doc.topic, doc.partition, tuple(report.deleted_segments), report.bytes,
                       report.log_start_offset_before, report.log_start_offset_after, report.rolled,
                       tuple(report.marked_files), mark_ms, due_ms)


def sweep(store: Any, locations: Iterable[Any], *, wall_now_ms: int, run_id: str, dry_run: bool = False) -> Doc:
    """Phase two for ``locations``: delete ``.deleted`` files whose ``file.delete.delay.ms`` has passed.
    ``errors`` are ``PartitionError``s; the rest is JSON."""
    from kafkalog.maintenance import journal
    from kafkalog.maintenance.retention import sweep_partition

    partitions: list[Doc] = []
    errors: list[PartitionError] = []
    with journal.group_commit():
        for location in locations:
            tp = location.topic_partition
            try:
                report = sweep_partition(store, location, wall_now_ms=wall_now_ms, run_id=run_id, dry_run=dry_run)
            except (KafkaLogError, OSError) as exc:
                errors.append(PartitionError(tp.topic, tp.partition, str(exc)))
                continue
            errors += [PartitionError(tp.topic, tp.partition, f"refused: {line}") for line in report.refused]
            if report.deleted_files or report.waiting_files:
                partitions.append(vars(report))
    due = [p["next_due_ms"] for p in partitions if p["next_due_ms"] is not None]
    return {"wall_clock_ms": wall_now_ms, "dry_run": dry_run, "partitions": partitions, "errors": errors,
            "deleted_files": sum(len(p["deleted_files"]) for p in partitions),
            "deleted_bytes": sum(p["deleted_bytes"] for p in partitions),
            "waiting_files": sum(len(p["waiting_files"]) for p in partitions),
            "waiting_bytes": sum(p["waiting_bytes"] for p in partitions),
            "next_due_ms": min(due) if due else None}
