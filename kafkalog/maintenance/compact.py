"""One compaction cycle: snapshot the compacted logs, let the cleaner manager choose, clean them.

A partition that fails (corrupt, locked, changed under the cleaner) is reported with its reason and
left untouched; the others are still cleaned (``CompactReport.failures``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafkalog.errors import KafkaLogError
from kafkalog.log import checkpoint, names
from kafkalog.log.lock import log_dir_lock
from kafkalog.log.snapshot import LogDirCheckpoints, LogSnapshot, snapshot_for_compaction
from kafkalog.log.store import METADATA_TOPICS, LogStore
from kafkalog.maintenance.cleaner import CleanResult, clean_partition
from kafkalog.policy.compaction import CompactionPlan, LogToClean, log_to_clean, select_logs_to_clean


@dataclass
class CompactReport:
    now_ms: int
    plan: CompactionPlan | None = None
    cleaned: list[CleanResult] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False
    targets: list[LogToClean] = field(default_factory=list)  # what was (or, dry run, would be) cleaned


def snapshot_compacted_logs(store: LogStore, topic: str | None = None,
                            partition: int | None = None) -> tuple[list[LogSnapshot], list[dict[str, Any]]]:
    """Compaction snapshots of the candidate logs, and the partitions that could not be read."""
    checkpoints = {d: LogDirCheckpoints.read(d) for d in store.log_dirs}
    snapshots: list[LogSnapshot] = []
    failures: list[dict[str, Any]] = []
    for location in store.partitions(topic, partition):
        tp = location.topic_partition
        if tp.topic in METADATA_TOPICS:
            continue
        try:
            snapshots.append(snapshot_for_compaction(location.log_dir, tp.topic, tp.partition,
                                                     store.log_config(tp.topic), checkpoints[location.log_dir]))
        except (KafkaLogError, OSError) as exc:
            failures.append({"topic": tp.topic, "partition": tp.partition, "error": f"corrupt: {exc}"})
    return snapshots, failures


def compact(store: LogStore, *, now_ms: int, topic: str | None = None, partition: int | None = None,
            dry_run: bool = False, run_id: str = "", byte_budget: int | None = None,
            wall_now_ms: int | None = None) -> CompactReport:
    """With a topic (and partition) named, clean those logs' cleanable ranges whatever their dirty
    ratio; otherwise clean what the cleaner manager selects. ``wall_now_ms`` (default: the wall clock)
    is what delete horizons are stamped from; pin it to reproduce a run byte for byte."""
    report = CompactReport(now_ms, dry_run=dry_run)
    snapshots, report.failures = snapshot_compacted_logs(store, topic, partition)
    plan = select_logs_to_clean(snapshots, now_ms, byte_budget=byte_budget)
    report.plan = plan
    if topic is not None:
        chosen = [log_to_clean(s, now_ms) for s in snapshots if s.config.compact]
        chosen = [c for c in chosen if c.cleanable_bytes > 0]
    else:
        chosen = list(plan.selected)
    report.targets = chosen
    if dry_run:
        return report
    apply_checkpoint_resets(store, plan)
    for target in chosen:
        location = store.locate(target.topic, target.partition)
        try:
            report.cleaned.append(clean_partition(store, location, target.first_dirty_offset,
                                                  target.first_uncleanable_offset, now_ms=now_ms,
                                                  wall_now_ms=wall_now_ms, run_id=run_id))
        except (KafkaLogError, OSError) as exc:
            report.failures.append({"topic": target.topic, "partition": target.partition, "error": str(exc)})
    return report


def apply_checkpoint_resets(store: LogStore, plan: CompactionPlan) -> None:
    """Kafka rewrites a checkpoint that lies outside its log as soon as it notices (§8.3)."""
    by_dir: dict[Any, dict[tuple[str, int], int]] = {}
    for reset in plan.checkpoint_resets:
        location = store.locate(reset.topic, reset.partition)
        by_dir.setdefault(location.log_dir, {})[(reset.topic, reset.partition)] = reset.offset
    for log_dir, resets in by_dir.items():
        path = log_dir / names.CLEANER_OFFSET_CHECKPOINT
        with log_dir_lock(log_dir):
            entries = checkpoint.read_offset_checkpoint(path)
            entries.update(resets)
            checkpoint.write_offset_checkpoint(path, entries)
