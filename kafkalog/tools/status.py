"""``kafkalog status``: one row per partition with the state of its log and why retention waits.

For compacted logs the cleaner manager fills ``first_dirty_offset``, ``dirty_ratio`` and
``cleanable_bytes`` and adds why it would not clean the log now; other logs leave them ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from kafkalog.errors import KafkaLogError
from kafkalog.log.shares import map_shares
from kafkalog.log.snapshot import LogDirCheckpoints, snapshot_for_compaction, snapshot_log
from kafkalog.log.store import METADATA_TOPICS, LogStore, PartitionLocation
from kafkalog.policy.compaction import log_to_clean, select_logs_to_clean
from kafkalog.policy.retention import plan_retention


def status_rows(store: LogStore, now_ms: int, *, processes: int = 1) -> list[dict[str, Any]]:
    """A row per partition, in partition order; with ``processes`` > 1 the partitions are read across
    this process and forked ones (:func:`kafkalog.log.shares.map_shares`), with the same rows."""
    # A symlinked partition dir is listed, quarantined with the reason, and never followed.
    locations = store.partitions(symlinked=True)
    shares = map_shares(partial(_status_rows, store, now_ms=now_ms), locations, processes)
    return [row for rows in shares for row in rows]


def _status_rows(store: LogStore, locations: Sequence[PartitionLocation], *, now_ms: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    checkpoints = {d: LogDirCheckpoints.read(d) for d in store.log_dirs}
    for location in locations:
        tp = location.topic_partition
        config = store.log_config(tp.topic)
        row: dict[str, Any] = {
            "topic": tp.topic, "partition": tp.partition, "log_dir": str(location.log_dir),
            "cleanup_policy": ",".join(sorted(config.cleanup_policy)), "log_start_offset": None,
            "log_end_offset": None, "size_bytes": None, "segment_count": None, "first_dirty_offset": None,
            "dirty_ratio": None, "cleanable_bytes": None, "pending_delete_bytes": None,
            "deletable_bytes": None, "quarantined": False, "blocked_by": [],
        }
        try:
            snapshot = snapshot_log(location.log_dir, tp.topic, tp.partition, config, checkpoints[location.log_dir])
        except (KafkaLogError, OSError) as exc:
            row.update(quarantined=True, blocked_by=[f"corrupt: {exc}"])
            rows.append(row)
            continue
        row.update(log_start_offset=snapshot.log_start_offset, log_end_offset=snapshot.log_end_offset,
                   size_bytes=snapshot.size_bytes, segment_count=len(snapshot.segments),
                   pending_delete_bytes=snapshot.pending_delete_bytes)
        if tp.topic in METADATA_TOPICS:
            row["blocked_by"] = ["policy: the KRaft metadata log is trimmed by its snapshots, not by retention"]
        else:
            plan = plan_retention(snapshot, now_ms, broker=store.broker)
            row.update(deletable_bytes=plan.bytes, blocked_by=[str(b) for b in plan.blocked_by])
            if config.compact:
                try:
                    compaction = snapshot_for_compaction(location.log_dir, tp.topic, tp.partition, config,
                                                         checkpoints[location.log_dir])
                except (KafkaLogError, OSError) as exc:
                    row.update(quarantined=True, blocked_by=row["blocked_by"] + [f"corrupt: {exc}"])
                    rows.append(row)
                    continue
                target = log_to_clean(compaction, now_ms)
                row.update(first_dirty_offset=target.first_dirty_offset, dirty_ratio=round(target.dirty_ratio, 4),
                           cleanable_bytes=target.cleanable_bytes)
                waiting = select_logs_to_clean([compaction], now_ms, broker=store.broker).not_selected
                row["blocked_by"] += [f"compaction {n}" for n in waiting]
        rows.append(row)
    return rows
