"""One compaction cycle: snapshot the compacted logs, let the cleaner manager choose, clean them.

A partition that fails (corrupt, locked, changed under the cleaner) is reported with its reason and
left untouched; the others are still cleaned (``CompactReport.failures``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kafkalog.errors import ConfigError, KafkaLogError
from kafkalog.log import checkpoint, names
from kafkalog.log.lock import log_dir_lock
from kafkalog.log.snapshot import LogDirCheckpoints, LogSnapshot, snapshot_for_compaction
from kafkalog.log.store import METADATA_TOPICS, LogStore, PartitionLocation
from kafkalog.maintenance.cleaner import CleanResult, clean_partition
from kafkalog.policy.compaction import CompactionPlan, LogToClean, log_to_clean, select_logs_to_clean
from kafkalog.policy.log_cleaner import cleaner_disabled_by, require_cleaner


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
    cleaner_runs = cleaner_disabled_by(store.broker) is None
    snapshots: list[LogSnapshot] = []
    failures: list[dict[str, Any]] = []
    for location in store.partitions(topic, partition):
        tp = location.topic_partition
        if tp.topic in METADATA_TOPICS:
            continue
        try:
            config = store.log_config(tp.topic)
            if not config.compact or not cleaner_runs:
                # The cleaner manager never opens a log whose policy excludes compaction, and without a
                # cleaner there is no cleaner manager; the log is listed only so the plan can say why.
                snapshots.append(LogSnapshot(tp.topic, tp.partition, location.log_dir, config, (), 0, 0, 0, 0))
                continue
            snapshots.append(snapshot_for_compaction(location.log_dir, tp.topic, tp.partition,
                                                     config, checkpoints[location.log_dir]))
        except (KafkaLogError, OSError) as exc:
            failures.append({"topic": tp.topic, "partition": tp.partition, "error": f"corrupt: {exc}"})
    return snapshots, failures


@dataclass(frozen=True)
class Selection:
    """What one compaction run cleans: the cleaner manager's plan (its checkpoint resets and its
    reasons for the rest) and the logs chosen, with the partitions that could not be read."""

    plan: CompactionPlan
    targets: list[LogToClean]
    failures: list[dict[str, Any]]


def choose_logs(store: LogStore, *, now_ms: int, topic: str | None = None, partitions: Sequence[int] | None = None,
                byte_budget: int | None = None, among_topics: Collection[str] | None = None) -> Selection:
    """With a topic named (and optionally partitions), every cleanable range of it whatever the dirty
    ratio (the "compact now" Kafka users ask for); otherwise what the cleaner manager selects, among
    ``among_topics`` when given. A named topic must exist and be compacted, named partitions must
    exist, and the broker config must run a log cleaner: anything else is refused."""
    if partitions is not None and topic is None:
        raise KafkaLogError("partitions need a topic")
    if topic is not None:
        require_cleaner(store.broker)
        info = store.topic(topic)  # a clear error for an unknown topic
        config = store.log_config(topic)
        if not config.compact:
            raise ConfigError(f"topic {topic!r} has cleanup.policy={','.join(sorted(config.cleanup_policy))}: only "
                              "a compacted topic (cleanup.policy=compact or compact,delete) can be compacted")
        missing = sorted(set(partitions or ()) - set(range(info.partitions)))
        if missing:
            raise KafkaLogError(f"topic {topic!r} has {info.partitions} partitions; no partition "
                                f"{', '.join(map(str, missing))}")
    snapshots, failures = snapshot_compacted_logs(store, topic)
    if among_topics is not None:
        snapshots = [s for s in snapshots if s.topic in among_topics]
        failures = [f for f in failures if f["topic"] in among_topics]
    if partitions is not None:
        wanted = set(partitions)
        snapshots = [s for s in snapshots if s.partition in wanted]
        failures = [f for f in failures if f["partition"] in wanted]
    plan = select_logs_to_clean(snapshots, now_ms, broker=store.broker, byte_budget=byte_budget)
    if topic is not None:
        chosen = [c for c in (log_to_clean(s, now_ms) for s in snapshots if s.config.compact) if c.cleanable_bytes > 0]
    else:
        chosen = list(plan.selected)
    return Selection(plan, chosen, failures)


def compact(store: LogStore, *, now_ms: int, topic: str | None = None, partition: int | None = None,
            dry_run: bool = False, run_id: str = "", byte_budget: int | None = None,
            wall_now_ms: int | None = None, partitions: Sequence[int] | None = None) -> CompactReport:
    """Clean what :func:`choose_logs` chooses, in this process. ``wall_now_ms`` (default: the wall
    clock) is what delete horizons are stamped from; pin it to reproduce a run byte for byte."""
    if partition is not None:
        partitions = [partition]
    selection = choose_logs(store, now_ms=now_ms, topic=topic, partitions=partitions, byte_budget=byte_budget)
    report = CompactReport(now_ms, plan=selection.plan, failures=list(selection.failures), dry_run=dry_run,
                           targets=selection.targets)
    if dry_run:
        return report
    apply_checkpoint_resets(store, selection.plan)
    ranges = [(t.topic, t.partition, t.first_dirty_offset, t.first_uncleanable_offset) for t in selection.targets]
    cleaned, failures = clean_ranges(store, ranges, now_ms=now_ms, wall_now_ms=wall_now_ms, run_id=run_id)
    report.cleaned += cleaned
    report.failures += failures
    return report


def clean_ranges(store: LogStore, ranges: Sequence[tuple[str, int, int, int]], *, now_ms: int,
                 wall_now_ms: int | None = None, run_id: str = "",
                 threads: int | None = None) -> tuple[list[CleanResult], list[dict[str, Any]]]:
    """Clean each ``(topic, partition, first_dirty, first_uncleanable)`` in this process, up to ``threads``
    (default: the broker's ``log.cleaner.threads``) partitions at a time, as each of Kafka's cleaner
    threads cleans one log at a time. Results come in the order of ``ranges``; a partition that fails
    is reported and left untouched, the others are still cleaned. No cleaner runs without a thread."""
    if ranges:
        require_cleaner(store.broker)
    threads = store.broker.log_cleaner_threads if threads is None else threads
    failures: list[dict[str, Any]] = []
    todo: list[tuple[PartitionLocation, int, int]] = []
    for topic, partition, first_dirty, first_uncleanable in ranges:
        try:
            # Here, not in the threads: the store fills its topic and config caches on first use.
            location = store.locate(topic, partition)
            store.log_config(topic)
            todo.append((location, first_dirty, first_uncleanable))
        except (KafkaLogError, OSError) as exc:
            failures.append({"topic": topic, "partition": partition, "error": str(exc)})

    def clean(item: tuple[PartitionLocation, int, int]) -> CleanResult | dict[str, Any]:
        location, first_dirty, first_uncleanable = item
        try:
            return clean_partition(store, location, first_dirty, first_uncleanable, now_ms=now_ms,
                                   wall_now_ms=wall_now_ms, run_id=run_id)
        except (KafkaLogError, OSError) as exc:
            tp = location.topic_partition
            return {"topic": tp.topic, "partition": tp.partition, "error": str(exc)}

    if threads > 1 and len(todo) > 1:
        with ThreadPoolExecutor(min(threads, len(todo)), thread_name_prefix="kafkalog-log-cleaner") as pool:
            outcomes = list(pool.map(clean, todo))
    else:
        outcomes = [clean(item) for item in todo]
    failures += [o for o in outcomes if isinstance(o, dict)]
    return [o for o in outcomes if isinstance(o, CleanResult)], failures


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
