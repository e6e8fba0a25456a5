"""Deleting topics as Kafka's LogManager does (``asyncDelete`` and the ``kafka-delete-logs`` task).

Phase one (:func:`delete_topic`): the topic leaves the registry for its ``deleting`` list, then each
partition dir is renamed ``<topic>-<partition>.<uuid>-delete`` (its mtime stamped with the mark
time first) and journalled, then the topic's entries leave the offset checkpoints (recovery points,
log start offsets, high watermarks, cleaner offsets: a topic created again must not inherit them)
and the intent is forgotten (``LogStore.end_topic_delete``). From the first step on, no command
lists, reads or maintains the topic; a crash at any step leaves the intent recorded, and
:func:`finish_topic_deletes` (the next cleanup cycle's scan, or ``topics delete`` run again)
renames the rest and removes the entries.

Phase two (:func:`delete_marked_dirs`): a ``-delete`` dir is removed once the broker's
``file.delete.delay.ms`` (``log.segment.delete.delay.ms``) has passed on the wall clock since its
mark, as Kafka's delete-logs task does. Symlinks are never followed out of a log dir.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log.config import LogConfig
from kafkalog.log.names import parse_partition_dir_name
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance import journal


@dataclass
class TopicDeleteReport:
    topic: str
    renamed: list[str] = field(default_factory=list)  # the new dir names
    failures: list[str] = field(default_factory=list)  # partitions not renamed yet, with why

    @property
    def complete(self) -> bool:
        return not self.failures


def delete_topic(store: LogStore, topic: str, *, wall_now_ms: int, run_id: str) -> TopicDeleteReport:
    """Begin (or resume) deleting ``topic`` and rename every partition dir it still has."""
    store.begin_topic_delete(topic, now_ms=wall_now_ms)
    return _rename_all(store, topic, wall_now_ms=wall_now_ms, run_id=run_id)


def finish_topic_deletes(store: LogStore, *, wall_now_ms: int, run_id: str) -> list[TopicDeleteReport]:
    """Finish every deletion a crash (or a locked partition) left half done."""
    return [_rename_all(store, name, wall_now_ms=wall_now_ms, run_id=run_id) for name in store.deleting_topics()]


def _rename_all(store: LogStore, topic: str, *, wall_now_ms: int, run_id: str) -> TopicDeleteReport:
    report = TopicDeleteReport(topic)
    for location in _remaining_dirs(store, topic):
        tp = location.topic_partition
        try:
            target = store.rename_for_delete(location, mark_time_ms=wall_now_ms)
        except (KafkaLogError, OSError) as exc:
            report.failures.append(f"{tp}: {exc}")
            continue
        report.renamed.append(target.name)
        journal.append(location.log_dir, journal.JournalEntry(
            run_id, wall_now_ms, tp.topic, tp.partition, "delete-topic", reason=f"renamed to {target.name}",
            files=(target.name,)))
    if report.complete:
        store.end_topic_delete(topic)
    return report


def _remaining_dirs(store: LogStore, topic: str) -> list[PartitionLocation]:
    """The live partition dirs of a topic being deleted (``LogStore.partitions`` hides them)."""
    out = []
    for log_dir in store.log_dirs:
        for entry in os.scandir(log_dir):
            tp = parse_partition_dir_name(entry.name)
            if tp is not None and tp.topic == topic and entry.is_dir(follow_symlinks=False):
                out.append(PartitionLocation(tp, log_dir))
    return sorted(out, key=lambda loc: (loc.topic_partition.partition, str(loc.log_dir)))


@dataclass
class DirSweepReport:
    deleted_dirs: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    waiting_dirs: list[str] = field(default_factory=list)
    next_due_ms: int | None = None
    refused: list[str] = field(default_factory=list)


def delete_marked_dirs(store: LogStore, *, wall_now_ms: int, run_id: str, dry_run: bool = False,
                       topics: frozenset[str] | None = None) -> DirSweepReport:
    """Remove the ``-delete`` dirs whose ``file.delete.delay.ms`` has passed since their mark."""
    delay_ms = LogConfig.resolve(store.broker, {}).file_delete_delay_ms
    report = DirSweepReport()
    for tp, path in store.deleted_partition_dirs():
        if topics is not None and tp.topic not in topics:
            continue
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            report.refused.append(f"{path}: not a directory (symlink?); left alone")
            continue
        due_ms = info.st_mtime_ns // 1_000_000 + delay_ms
        if wall_now_ms < due_ms:
            report.waiting_dirs.append(path.name)
            report.next_due_ms = due_ms if report.next_due_ms is None else min(report.next_due_ms, due_ms)
            continue
        size = _tree_bytes(path)
        if not dry_run:
            shutil.rmtree(path)
            journal.append(path.parent, journal.JournalEntry(
                run_id, wall_now_ms, tp.topic, tp.partition, "delete-dir", reason=f"file.delete.delay.ms={delay_ms} "
                "elapsed since the topic was deleted", bytes=size, files=(path.name,)))
        report.deleted_dirs.append(path.name)
        report.deleted_bytes += size
    return report


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total
