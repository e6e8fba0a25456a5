"""The documents a cleanup cycle passes between its steps, one schema each, and the functions that
make and carry them out. The CLI and the pipeline's tasks call the same functions, so ``kafkalog
retention plan --json`` *is* a retention plan file and ``kafkalog compact --dry-run --json`` *is* a
compaction plan file.

Retention plan (``kind: kafkalog-retention-plan``, version 1)::

    {"version": 1, "kind": "kafkalog-retention-plan", "now_ms": T,
     "partitions": [{"topic", "partition", "log_dir", "now_ms", "segments": [{"base_offset",
                     "next_offset", "bytes", "reason", "detail"}], "bytes", "roll_first",
                     "log_start_offset_before", "log_start_offset_after", "blocked_by": [str]}],
     "errors": [{"topic", "partition", "error"}]}

Applying a plan never deletes more than it lists: each partition is re-planned under its lock with
the plan's clock and cut at the plan's last segment (``maintenance.retention.apply_retention``), so a
reviewed plan can be enforced later and applying it twice changes nothing the second time.

Compaction plan (``kind: kafkalog-compaction-plan``, version 1)::

    {"version": 1, "kind": "kafkalog-compaction-plan", "now_ms": T, "topic": str|null,
     "partitions": [int]|null,
     "selected": [{"topic", "partition", "log_dir", "first_dirty_offset", "first_uncleanable_offset",
                   "cleanable_bytes", "total_bytes", "dirty_ratio", "trigger", "limited_by"}],
     "checkpoint_resets": [{"topic", "partition", "offset"}],
     "not_selected": [{"topic", "partition", "kind", "reason"}],
     "errors": [{"topic", "partition", "error"}]}

``checkpoint_resets`` are the cleaner-checkpoint entries Kafka rewrites while choosing (spec §8.3);
whoever carries the plan out applies them before cleaning, whether or not the log is selected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from kafkalog.errors import KafkaLogError, LogLockedError
from kafkalog.log.shares import map_shares

RETENTION_PLAN_KIND = "kafkalog-retention-plan"
COMPACTION_PLAN_KIND = "kafkalog-compaction-plan"
PLAN_VERSION = 1

Doc = dict[str, Any]


class PlanError(KafkaLogError):
    """A plan file is unreadable, of another kind or version, or inconsistent."""


def write_json(path: Path | str, doc: Doc) -> None:
    """Write a document atomically (tmp + rename), so a reader never sees half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def read_json(path: Path | str) -> Doc:
    from kafkalog.log.config import read_regular_text

    try:
        doc = json.loads(read_regular_text(path))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PlanError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{path}: expected a JSON object")
    return doc


def read_plan(path: Path | str, kind: str) -> Doc:
    doc = read_json(path)
    if doc.get("kind") != kind or doc.get("version") != PLAN_VERSION:
        raise PlanError(f"{path}: not a {kind} version {PLAN_VERSION} (kind={doc.get('kind')!r}, "
                        f"version={doc.get('version')!r}); write it with the kafkalog of this version")
    if not isinstance(doc.get("now_ms"), int) or not isinstance(doc.get("partitions" if kind == RETENTION_PLAN_KIND
                                                                        else "selected"), list):
        raise PlanError(f"{path}: a {kind} needs an integer now_ms and its list of partitions")
    return doc


def error_entry(topic: str, partition: int, error: str, *, locked: bool = False) -> Doc:
    """A partition that failed; ``locked``: only because another process held its lock past the wait
    (Kafka's cleaner and retention skip such a log this time; a later run does it)."""
    return {"topic": topic, "partition": partition, "error": error, **({"locked": True} if locked else {})}


# --- retention ---------------------------------------------------------------------------------------
def plan_retention(store: Any, locations: Sequence[Any], now_ms: int, *, processes: int = 1) -> Doc:
    """Kafka's ``deleteOldSegments`` decisions for ``locations`` at ``now_ms``, as a retention plan.

    With ``processes`` > 1 the partitions are planned across this process and forked ones
    (:func:`kafkalog.log.shares.map_shares`); the document is the one a single process makes."""
    shares = map_shares(partial(_plan_retention_share, store, now_ms=now_ms), list(locations), processes)
    return {"version": PLAN_VERSION, "kind": RETENTION_PLAN_KIND, "now_ms": now_ms,
            "log_dirs": [str(d) for d in store.log_dirs],
            "partitions": [doc for planned, _ in shares for doc in planned],
            "errors": [doc for _, failed in shares for doc in failed]}


def check_plan_store(store: Any, plan: Doc) -> None:
    """A plan names the store it was made for (its log dirs, and each partition's): carried out on
    another, it would mark that store's files. Refused whole, before anything changes."""
    ours = {Path(d).resolve() for d in store.log_dirs}
    named = plan.get("log_dirs")
    if named is not None and {Path(d).resolve() for d in named} != ours:
        raise PlanError(f"the plan was made for log dirs {', '.join(named)}, not "
                        f"{', '.join(map(str, store.log_dirs))}; nothing applied (make the plan on this store)")
    for doc in plan["partitions"]:
        if doc["segments"] and Path(doc["log_dir"]).resolve() not in ours:
            raise PlanError(f"the plan's {doc['topic']}-{doc['partition']} is in log dir {doc['log_dir']}, which is "
                            f"not one of {', '.join(map(str, store.log_dirs))}; nothing applied")


def _plan_retention_share(store: Any, locations: Sequence[Any], *, now_ms: int) -> tuple[list[Doc], list[Doc]]:
    from kafkalog.log.snapshot import LogDirCheckpoints, snapshot_log
    from kafkalog.policy.retention import plan_retention as plan_one

    checkpoints: dict[Path, LogDirCheckpoints] = {}
    partitions: list[Doc] = []
    errors: list[Doc] = []
    for location in locations:
        tp = location.topic_partition
        if location.log_dir not in checkpoints:
            checkpoints[location.log_dir] = LogDirCheckpoints.read(location.log_dir)
        try:
            snapshot = snapshot_log(location.log_dir, tp.topic, tp.partition, store.log_config(tp.topic),
                                    checkpoints[location.log_dir], now_ms=now_ms)
            plan = plan_one(snapshot, now_ms, broker=store.broker)
        except (KafkaLogError, OSError) as exc:
            errors.append(error_entry(tp.topic, tp.partition, str(exc)))
            continue
        partitions.append({
            "topic": plan.topic, "partition": plan.partition, "log_dir": str(location.log_dir),
            "now_ms": plan.now_ms,
            "segments": [{"base_offset": s.base_offset, "next_offset": s.next_offset, "bytes": s.size_bytes,
                          "reason": s.reason, "detail": s.detail} for s in plan.segments],
            "bytes": plan.bytes, "roll_first": plan.roll_first,
            "log_start_offset_before": plan.log_start_offset_before,
            "log_start_offset_after": plan.log_start_offset_after,
            "blocked_by": [str(b) for b in plan.blocked_by]})
    return partitions, errors


def apply_retention_plan(store: Any, plan: Doc, *, run_id: str, dry_run: bool = False,
                         lock_timeout_s: float = 30.0, processes: int = 1) -> Doc:
    """Mark what ``plan`` lists as ``.deleted`` (never more). Returns, per partition, what was marked
    and when its files are due for deletion (``due_ms``: the mark time plus the topic's
    ``file.delete.delay.ms``), and the newest mark time (the wall clock the wait counts from). A
    partition whose lock another process holds for ``lock_timeout_s`` is an error marked ``locked``.
    With ``processes`` > 1 the partitions are marked across this process and forked ones, as
    ``plan_retention`` plans them (each under its own lock, so the result is the one a single process
    gets)."""
    check_plan_store(store, plan)
    due = [doc for doc in plan["partitions"] if doc["segments"]]
    shares = map_shares(partial(_apply_share, store, plan["now_ms"], run_id=run_id, dry_run=dry_run,
                                lock_timeout_s=lock_timeout_s), due, processes)
    applied = [entry for done, _ in shares for entry in done]
    errors = [entry for _, failed in shares for entry in failed]  # the plan's own errors stay the plan's
    newest_mark_ms: int | None = None
    delay_ms = 0
    for entry in applied:
        if entry.get("mark_time_ms") is not None:
            mark_ms = entry.pop("mark_time_ms")
            newest_mark_ms = max(newest_mark_ms or 0, mark_ms)
            topic_delay_ms = store.log_config(entry["topic"]).file_delete_delay_ms
            delay_ms = max(delay_ms, topic_delay_ms)
            entry["due_ms"] = mark_ms + topic_delay_ms
    return {"now_ms": plan["now_ms"], "dry_run": dry_run, "applied": applied, "errors": errors,
            "segments": sum(len(a["segments"]) for a in applied), "bytes": sum(a["bytes"] for a in applied),
            "newest_mark_ms": newest_mark_ms, "file_delete_delay_ms": delay_ms}


def _apply_share(store: Any, now_ms: int, docs: Sequence[Doc], *, run_id: str, dry_run: bool,
                 lock_timeout_s: float) -> tuple[list[Doc], list[Doc]]:
    """Mark one share of a plan's partitions: checkpoints written and the journal fsynced once, at its end."""
    from kafkalog.maintenance import journal

    applied: list[Doc] = []
    errors: list[Doc] = []
    with store.batched_checkpoints(), journal.group_commit():
        for doc in docs:
            _apply_one(store, now_ms, doc, run_id, dry_run, applied, errors, lock_timeout_s)
    return applied, errors


def _apply_one(store: Any, now_ms: int, doc: Doc, run_id: str, dry_run: bool, applied: list[Doc],
               errors: list[Doc], lock_timeout_s: float) -> None:
    from kafkalog.log.names import TopicPartition
    from kafkalog.log.store import PartitionLocation
    from kafkalog.maintenance.retention import apply_retention
    from kafkalog.policy.retention import DeletableSegment, RetentionPlan

    if not doc["segments"]:
        return
    topic, partition = doc["topic"], doc["partition"]
    entry = {"topic": topic, "partition": partition, "segments": [s["base_offset"] for s in doc["segments"]],
             "bytes": doc["bytes"], "log_start_offset_before": doc["log_start_offset_before"],
             "log_start_offset_after": doc["log_start_offset_after"], "rolled": doc["roll_first"]}
    if dry_run:
        applied.append(entry)
        return
    location = PartitionLocation(TopicPartition(topic, partition), Path(doc["log_dir"]))
    one = RetentionPlan(topic, partition, now_ms, tuple(
        DeletableSegment(s["base_offset"], s["next_offset"], s["bytes"], s["reason"], s["detail"])
        for s in doc["segments"]), doc["roll_first"], doc["log_start_offset_before"],
        doc["log_start_offset_after"], ())
    try:
        if not location.directory.is_dir():
            raise KafkaLogError(f"partition directory {location.directory} is gone")
        report = apply_retention(store, location, one, run_id=run_id, lock_timeout_s=lock_timeout_s)
    except LogLockedError as exc:
        errors.append(error_entry(topic, partition, str(exc), locked=True))
        return
    except (KafkaLogError, OSError) as exc:
        errors.append(error_entry(topic, partition, str(exc)))
        return
    entry.update(segments=list(report.deleted_segments), bytes=report.bytes, rolled=report.rolled,
                 log_start_offset_before=report.log_start_offset_before,
                 log_start_offset_after=report.log_start_offset_after, marked_files=list(report.marked_files),
                 mark_time_ms=report.mark_time_ms)
    applied.append(entry)


def sweep(store: Any, locations: Iterable[Any], *, wall_now_ms: int, run_id: str, dry_run: bool = False) -> Doc:
    """Phase two for ``locations``: delete ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
    from kafkalog.maintenance import journal
    from kafkalog.maintenance.retention import sweep_partition

    partitions: list[Doc] = []
    errors: list[Doc] = []
    with journal.group_commit():
        for location in locations:
            tp = location.topic_partition
            try:
                report = sweep_partition(store, location, wall_now_ms=wall_now_ms, run_id=run_id, dry_run=dry_run)
            except (KafkaLogError, OSError) as exc:
                errors.append(error_entry(tp.topic, tp.partition, str(exc)))
                continue
            errors += [error_entry(tp.topic, tp.partition, f"refused: {line}") for line in report.refused]
            if report.deleted_files or report.waiting_files:
                partitions.append(vars(report))
    due = [p["next_due_ms"] for p in partitions if p["next_due_ms"] is not None]
    return {"wall_clock_ms": wall_now_ms, "dry_run": dry_run, "partitions": partitions, "errors": errors,
            "deleted_files": sum(len(p["deleted_files"]) for p in partitions),
            "deleted_bytes": sum(p["deleted_bytes"] for p in partitions),
            "waiting_files": sum(len(p["waiting_files"]) for p in partitions),
            "waiting_bytes": sum(p["waiting_bytes"] for p in partitions),
            "next_due_ms": min(due) if due else None}


# --- compaction --------------------------------------------------------------------------------------
def plan_compaction(store: Any, *, now_ms: int, topic: str | None = None, partitions: Sequence[int] | None = None,
                    among_topics: Sequence[str] | None = None, byte_budget: int | None = None) -> Doc:
    """The compaction plan: what ``kafkalog compact`` (same arguments) would clean now, and why not the rest."""
    from kafkalog.maintenance.compact import choose_logs

    selection = choose_logs(store, now_ms=now_ms, topic=topic, partitions=partitions, byte_budget=byte_budget,
                            among_topics=None if among_topics is None else set(among_topics))
    log_dirs = {(loc.topic_partition.topic, loc.topic_partition.partition): str(loc.log_dir)
                for loc in store.partitions(topic)} if selection.targets else {}
    plan = selection.plan
    return {
        "version": PLAN_VERSION, "kind": COMPACTION_PLAN_KIND, "now_ms": now_ms, "topic": topic,
        "partitions": None if partitions is None else sorted(partitions),
        "selected": [{"topic": c.topic, "partition": c.partition, "log_dir": log_dirs[(c.topic, c.partition)],
                      "first_dirty_offset": c.first_dirty_offset,
                      "first_uncleanable_offset": c.first_uncleanable_offset, "cleanable_bytes": c.cleanable_bytes,
                      "total_bytes": c.total_bytes, "dirty_ratio": round(c.dirty_ratio, 4), "trigger": c.trigger,
                      "limited_by": c.limited_by} for c in selection.targets],
        "checkpoint_resets": [{"topic": r.topic, "partition": r.partition, "offset": r.offset}
                              for r in plan.checkpoint_resets],
        "not_selected": [{"topic": n.topic, "partition": n.partition, "kind": n.kind, "reason": str(n)}
                         for n in plan.not_selected],
        "errors": selection.failures,
    }


def _is_offset(value: Any) -> bool:
    """A partition number or an offset: an int of 0 or more (JSON's true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_compaction_plan(path: Path | str) -> Doc:
    """A compaction plan file, checked: version, kind, every selected range well formed and unique, and
    every checkpoint reset a topic, a partition and an offset."""
    doc = read_plan(path, COMPACTION_PLAN_KIND)
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(doc["selected"]):
        try:
            topic, partition = entry["topic"], entry["partition"]
            first_dirty, first_uncleanable = entry["first_dirty_offset"], entry["first_uncleanable_offset"]
        except (KeyError, TypeError):
            raise PlanError(f"{path}: selected[{i}] lacks topic/partition/first_dirty_offset/"
                            "first_uncleanable_offset") from None
        ints = (partition, first_dirty, first_uncleanable)
        if not isinstance(topic, str) or not all(isinstance(v, int) and not isinstance(v, bool) for v in ints) \
                or partition < 0 or first_dirty < 0 or first_uncleanable < first_dirty:
            raise PlanError(f"{path}: selected[{i}] = {topic}-{partition} [{first_dirty}, {first_uncleanable}) "
                            "is not a valid range")
        if (topic, partition) in seen:
            raise PlanError(f"{path}: {topic}-{partition} is selected twice")
        seen.add((topic, partition))
    resets = doc.get("checkpoint_resets", [])
    if not isinstance(resets, list):
        raise PlanError(f"{path}: checkpoint_resets is not a list")
    for i, reset in enumerate(resets):
        if not isinstance(reset, dict) or not isinstance(reset.get("topic"), str) \
                or not _is_offset(reset.get("partition")) or not _is_offset(reset.get("offset")):
            raise PlanError(f"{path}: checkpoint_resets[{i}] = {json.dumps(reset)[:200]} is not a {{topic, partition, "
                            "offset}} entry with a partition and an offset of 0 or more")
    return doc


def compact_planned(store: Any, plan: Doc, *, run_id: str, wall_now_ms: int | None = None) -> Doc:
    """Carry a compaction plan out in this process (the Spark job is the other way): its checkpoint
    resets, then each selected range. Returns what was cleaned and what failed. A plan that would
    change something is refused while the broker config runs no log cleaner."""
    from kafkalog.maintenance.compact import clean_ranges
    from kafkalog.policy.log_cleaner import require_cleaner

    if plan["selected"] or plan.get("checkpoint_resets"):
        require_cleaner(store.broker)
    apply_checkpoint_resets(store, plan)
    ranges = [(s["topic"], s["partition"], s["first_dirty_offset"], s["first_uncleanable_offset"])
              for s in plan["selected"]]
    cleaned, failures = clean_ranges(store, ranges, now_ms=plan["now_ms"], wall_now_ms=wall_now_ms, run_id=run_id)
    return {"cleaned": [{"topic": r.topic, "partition": r.partition, "first_dirty_offset": r.first_dirty_offset,
                         "end_offset": r.end_offset, "groups": r.groups, "stats": r.stats.to_dict()} for r in cleaned],
            "errors": failures}


def check_compaction_plan(store: Any, plan: Doc, *, wall_now_ms: int | None = None) -> list[Doc]:
    """What carrying ``plan`` out would refuse or fail on, found without writing anything (a dry run's
    truth): each selected round checked as the cleaner would run it (``cleaner.check_round``). Returns
    the error entries of the partitions that would fail."""
    from kafkalog.maintenance.cleaner import check_round

    errors: list[Doc] = []
    for entry in plan["selected"]:
        topic, partition = entry["topic"], entry["partition"]
        try:
            check_round(store, store.locate(topic, partition), entry["first_dirty_offset"],
                        entry["first_uncleanable_offset"], now_ms=plan["now_ms"], wall_now_ms=wall_now_ms)
        except (KafkaLogError, OSError) as exc:
            errors.append(error_entry(topic, partition, str(exc)))
    return errors


def apply_checkpoint_resets(store: Any, plan: Doc) -> None:
    """Rewrite the cleaner checkpoints the plan says Kafka would rewrite (spec §8.3)."""
    from kafkalog.maintenance.compact import apply_checkpoint_resets as apply
    from kafkalog.policy.compaction import CheckpointReset, CompactionPlan

    resets = tuple(CheckpointReset(r["topic"], r["partition"], r["offset"]) for r in plan.get("checkpoint_resets", []))
    if resets:
        apply(store, CompactionPlan(plan["now_ms"], (), (), resets))
