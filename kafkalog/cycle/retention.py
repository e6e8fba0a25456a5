"""A cycle's retention, as the CLI and the pipeline's tasks both carry it out: plan (Kafka's
``deleteOldSegments`` decisions as a ``RetentionPlanDocument``), apply (mark what a plan lists as
``.deleted``) and sweep (phase two: delete what ``file.delete.delay.ms`` lets go). ``kafkalog retention
plan --json`` *is* a retention plan file.

Applying a retention plan never deletes more than it lists: each partition is re-planned under its
lock with the plan's clock and cut at the plan's last segment (``maintenance.retention.apply_retention``),
so a reviewed plan can be enforced later and applying it twice changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

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

T = TypeVar("T")
R = TypeVar("R")

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
        partitions.append(_partition_retention(location, plan))
    return partitions, errors


def _partition_retention(location: Any, plan: Any) -> PartitionRetention:
    """A partition's ``policy.retention.RetentionPlan`` as the plan document has it."""
    return PartitionRetention(
        plan.topic, plan.partition, str(location.log_dir), plan.now_ms,
        tuple(SegmentDeletion(s.base_offset, s.next_offset, s.size_bytes, s.reason, s.detail) for s in plan.segments),
        plan.bytes, plan.roll_first, plan.log_start_offset_before, plan.log_start_offset_after,
        tuple(str(b) for b in plan.blocked_by))


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
    mark = partial(_apply_one, store, plan.now_ms, run_id=run_id, dry_run=dry_run, lock_timeout_s=lock_timeout_s)
    shares = map_shares(partial(_mark_share, store, mark, lambda doc: (doc.topic, doc.partition)), list(plan.due),
                        processes)
    return _applied(plan.now_ms, dry_run, [entry for done, _ in shares for entry in done],
                    [e for _, failed in shares for e in failed])  # the plan's own errors stay the plan's


def enforce_retention(store: Any, locations: Sequence[Any], now_ms: int, *, run_id: str,
                      lock_timeout_s: float = 30.0,
                      processes: int = 1) -> tuple[RetentionPlanDocument, RetentionApplied]:
    """Plan and mark ``locations`` in one pass (``kafkalog retention apply`` without a plan file): each
    partition is planned under its lock and what is due marked at once
    (``maintenance.retention.enforce_retention``), instead of planning every partition and then
    planning the due ones again under their locks. Returns the plan that was carried out (what
    ``plan_retention`` makes of each partition) and what was marked; a partition that could be
    neither planned nor marked is an error of the marking."""
    mark = partial(_enforce_one, store, now_ms, run_id=run_id, lock_timeout_s=lock_timeout_s)
    shares = map_shares(partial(_mark_share, store, mark, _topic_partition), list(locations), processes)
    done = [entry for marked, _ in shares for entry in marked]
    plan = RetentionPlanDocument(now_ms, tuple(str(d) for d in store.log_dirs), tuple(p for p, _ in done), ())
    return plan, _applied(now_ms, False, [a for p, a in done if p.segments],
                          [e for _, failed in shares for e in failed])


def _topic_partition(location: Any) -> tuple[str, int]:
    return location.topic_partition.topic, location.topic_partition.partition


def _applied(now_ms: int, dry_run: bool, applied: list[AppliedMark], errors: list[PartitionError]) -> RetentionApplied:
    marks = [(a.mark_time_ms, a.due_ms) for a in applied if a.mark_time_ms is not None and a.due_ms is not None]
    return RetentionApplied(now_ms, dry_run, tuple(applied), tuple(errors), sum(len(a.segments) for a in applied),
                            sum(a.bytes for a in applied), max((mark for mark, _ in marks), default=None),
                            max((due - mark for mark, due in marks), default=0))


def _mark_share(store: Any, mark: Callable[[T, Any], R], topic_partition: Callable[[T], tuple[str, int]],
                items: Sequence[T]) -> tuple[list[R], list[PartitionError]]:
    """``mark`` each of one share's partitions (plan entries or locations, named by ``topic_partition``):
    checkpoints written and the journal fsynced once, at its end; the leader-epoch checkpoints of each
    ``MARKING_BATCH`` partitions written together, in the background while the next are marked."""
    from kafkalog.maintenance import journal
    from kafkalog.maintenance.retention import MarkingBatches

    done: list[R] = []
    errors: list[PartitionError] = []
    with store.batched_checkpoints(), journal.group_commit(), MarkingBatches() as batches:
        for first in range(0, len(items), MARKING_BATCH):
            with batches.batch() as batch:
                for item in items[first:first + MARKING_BATCH]:
                    try:
                        done.append(mark(item, batch))
                    except LogLockedError as exc:
                        errors.append(PartitionError(*topic_partition(item), str(exc), locked=True))
                    except (KafkaLogError, OSError) as exc:
                        errors.append(PartitionError(*topic_partition(item), str(exc)))
    return done, errors + [_epochs_not_written(directory, error) for directory, error in batches.errors]


def _epochs_not_written(directory: Path, error: OSError) -> PartitionError:
    from kafkalog.log.names import parse_partition_dir_name

    tp = parse_partition_dir_name(directory.name)
    return PartitionError(None if tp is None else tp.topic, None if tp is None else tp.partition,
                          f"{directory}: segments marked, but the leader-epoch checkpoint was not rewritten "
                          f"(every load truncates it again): {error}")


def _apply_one(store: Any, now_ms: int, doc: PartitionRetention, batch: Any, *, run_id: str, dry_run: bool,
               lock_timeout_s: float) -> AppliedMark:
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
    return _applied_mark(store, apply_retention(store, location, one, run_id=run_id, lock_timeout_s=lock_timeout_s,
                                                batch=batch))


def _enforce_one(store: Any, now_ms: int, location: Any, batch: Any, *, run_id: str,
                 lock_timeout_s: float) -> tuple[PartitionRetention, AppliedMark]:
    from kafkalog.maintenance.retention import enforce_retention

    plan, report = enforce_retention(store, location, now_ms, run_id=run_id, lock_timeout_s=lock_timeout_s,
                                     batch=batch)
    return _partition_retention(location, plan), _applied_mark(store, report)


def _applied_mark(store: Any, report: Any) -> AppliedMark:
    """A ``maintenance.retention.RetentionReport`` as the cycle reports it, with when its files are due."""
    mark_ms = report.mark_time_ms
    due_ms = None if mark_ms is None else mark_ms + store.log_config(report.topic).file_delete_delay_ms
    return AppliedMark(report.topic, report.partition, tuple(report.deleted_segments), report.bytes,
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
