"""A cycle's compaction, as the CLI and the pipeline's tasks both carry it out: the cleaner manager's
choice as a ``CompactionPlanDocument`` (``kafkalog compact --dry-run --json`` *is* a compaction plan
file), that plan checked without writing (a dry run's truth), and carried out in this process (the
Spark job is the other way).

A compaction plan's ``checkpoint_resets`` are the cleaner-checkpoint entries Kafka rewrites while
choosing (spec §8.3); whoever carries the plan out applies them before cleaning, whether or not the
log is selected.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafkalog.cycle.documents import (
    CheckpointResetEntry,
    CompactionPlanDocument,
    CompactionTarget,
    Doc,
    NotSelected,
    PartitionError,
    read_document,
)
from kafkalog.errors import KafkaLogError


def plan_compaction(store: Any, *, now_ms: int, topic: str | None = None, partitions: Sequence[int] | None = None,
                    among_topics: Sequence[str] | None = None,
                    byte_budget: int | None = None) -> CompactionPlanDocument:
    """The compaction plan: what ``kafkalog compact`` (same arguments) would clean now, and why not the rest."""
    from kafkalog.maintenance.compact import choose_logs

    selection = choose_logs(store, now_ms=now_ms, topic=topic, partitions=partitions, byte_budget=byte_budget,
                            among_topics=None if among_topics is None else set(among_topics))
    log_dirs = {(loc.topic_partition.topic, loc.topic_partition.partition): str(loc.log_dir)
                for loc in store.partitions(topic)} if selection.targets else {}
    plan = selection.plan
    return CompactionPlanDocument(
        now_ms, topic, None if partitions is None else tuple(sorted(partitions)),
        tuple(CompactionTarget(c.topic, c.partition, log_dirs[(c.topic, c.partition)], c.first_dirty_offset,
                               c.first_uncleanable_offset, c.cleanable_bytes, c.total_bytes, round(c.dirty_ratio, 4),
                               c.trigger, c.limited_by) for c in selection.targets),
        tuple(CheckpointResetEntry(r.topic, r.partition, r.offset) for r in plan.checkpoint_resets),
        tuple(NotSelected(n.topic, n.partition, n.kind, str(n)) for n in plan.not_selected),
        tuple(PartitionError(f["topic"], f["partition"], f["error"]) for f in selection.failures))


def read_compaction_plan(path: Path | str) -> CompactionPlanDocument:
    """A compaction plan file, checked: version, kind, every key, every selected range well formed and
    unique, every checkpoint reset a topic, a partition and an offset."""
    return read_document(path, CompactionPlanDocument)


def compact_planned(store: Any, plan: CompactionPlanDocument, *, run_id: str, wall_now_ms: int | None = None) -> Doc:
    """Carry a compaction plan out in this process (the Spark job is the other way): its checkpoint
    resets, then each selected range. Returns what was cleaned and what failed. A plan that would
    change something is refused while the broker config runs no log cleaner."""
    from kafkalog.maintenance.compact import clean_ranges
    from kafkalog.policy.log_cleaner import require_cleaner

    if plan.selected or plan.checkpoint_resets:
        require_cleaner(store.broker)
    apply_checkpoint_resets(store, plan)
    ranges = [(s.topic, s.partition, s.first_dirty_offset, s.first_uncleanable_offset) for s in plan.selected]
    cleaned, failures = clean_ranges(store, ranges, now_ms=plan.now_ms, wall_now_ms=wall_now_ms, run_id=run_id)
    return {"cleaned": [{"topic": r.topic, "partition": r.partition, "first_dirty_offset": r.first_dirty_offset,
                         "end_offset": r.end_offset, "groups": r.groups, "stats": r.stats.to_dict()} for r in cleaned],
            "errors": failures}


def check_compaction_plan(store: Any, plan: CompactionPlanDocument, *,
                          wall_now_ms: int | None = None) -> list[PartitionError]:
    """What carrying ``plan`` out would refuse or fail on, found without writing anything (a dry run's
    truth): each selected round checked as the cleaner would run it (``cleaner.check_round``). Returns
    the partitions that would fail."""
    from kafkalog.maintenance.cleaner import check_round

    errors: list[PartitionError] = []
    for entry in plan.selected:
        topic, partition = entry.topic, entry.partition
        try:
            check_round(store, store.locate(topic, partition), entry.first_dirty_offset,
                        entry.first_uncleanable_offset, now_ms=plan.now_ms, wall_now_ms=wall_now_ms)
        except (KafkaLogError, OSError) as exc:
            errors.append(PartitionError(topic, partition, str(exc)))
    return errors


def apply_checkpoint_resets(store: Any, plan: CompactionPlanDocument) -> None:
    """Rewrite the cleaner checkpoints the plan says Kafka would rewrite (spec §8.3)."""
    from kafkalog.maintenance.compact import apply_checkpoint_resets as apply
    from kafkalog.policy.compaction import CheckpointReset, CompactionPlan

    resets = tuple(CheckpointReset(r.topic, r.partition, r.offset) for r in plan.checkpoint_resets)
    if resets:
        apply(store, CompactionPlan(plan.now_ms, (), (), resets))
