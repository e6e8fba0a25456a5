"""The Log store page's partition view and what-if form: read-only, over the real log dirs.

``partition_view`` is one partition's status row (``kafkalog status``), its segments with the moment
retention takes each, its compaction state and deadline (``max.compaction.lag.ms``), and its journal.
A segment's moment is when ``retention.ms`` lets it go: its newest timestamp plus ``retention.ms``, but
never before the older segments it waits behind. The high watermark can hold a segment longer; the
partition's ``blocked_by`` then says so.

``what_if`` answers "what would retention delete and the cleaner compact now if this topic had
``retention.ms``/``retention.bytes``/``min.cleanable.dirty.ratio`` = …": the same plan functions as
``kafkalog retention plan --topic T`` and ``kafkalog compact --dry-run`` (``pipeline.plans``), run over a
view of the store in which the topic's overrides are changed in memory, as ``kafkalog topics alter``
would change them on disk. Nothing is written: the plans are computed and returned.

Every partition is found by listing the configured log dirs (``LogStore.partitions``), never by
joining a request's text to a path, and topic names are checked against Kafka's rules first.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from kafkalog.airflow.log_store_inventory import BadRequest, NotFound, Row, dag_run_link
from kafkalog.errors import KafkaLogError
from kafkalog.log import names

if TYPE_CHECKING:
    from kafkalog.log.config import LogConfig
    from kafkalog.log.store import LogStore, PartitionLocation, TopicInfo

MAX_LONG = 2**63 - 1
WHAT_IF_KEYS = ("retention.ms", "retention.bytes", "min.cleanable.dirty.ratio")
CONFIG_SHOWN = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms", "delete.retention.ms",
                "file.delete.delay.ms")


class _TopicView:
    """The store as the plan functions see it, limited to one topic (and partition), with that topic's
    config optionally replaced: the in-memory equivalent of ``topics alter`` on a copy."""

    def __init__(self, store: LogStore, topic: str, partition: int | None = None,
                 config: LogConfig | None = None) -> None:
        self._store, self._topic, self._partition, self._config = store, topic, partition, config
        self.log_dirs = store.log_dirs
        self.broker = store.broker

    def topics(self) -> dict[str, TopicInfo]:
        return self._store.topics()

    def topic(self, name: str) -> TopicInfo:
        return self._store.topic(name)

    def log_config(self, topic: str) -> LogConfig:
        return self._config if self._config is not None and topic == self._topic else self._store.log_config(topic)

    def partitions(self, topic: str | None = None, partition: int | None = None,
                   symlinked: bool = False) -> list[PartitionLocation]:
        if topic not in (None, self._topic) or (None not in (partition, self._partition) and partition !=
                                                self._partition):
            return []
        return self._store.partitions(self._topic, self._partition if partition is None else partition,
                                      symlinked=symlinked)


def locate(store: LogStore, topic: str, partition: int) -> PartitionLocation:
    """The partition's location among the configured log dirs; BadRequest for an illegal name."""
    from kafkalog.log.config import validate_topic_name

    try:
        validate_topic_name(topic)
    except KafkaLogError as exc:
        raise BadRequest(str(exc)) from None
    if partition < 0:
        raise BadRequest(f"partition {partition}: must be at least 0")
    found = store.partitions(topic, partition)
    if not found:
        raise NotFound(f"no partition {topic}-{partition} in the configured log dirs")
    return found[0]


def partition_journal(log_dirs: Sequence[Path], topic: str, partition: int, *, limit: int = 100) -> list[Row]:
    """The partition's newest journal entries, newest first. Lines are matched on the quoted topic
    before being parsed, so a long journal costs one pass over its bytes."""
    needle = json.dumps(topic).encode()
    found: list[Row] = []
    for log_dir in log_dirs:
        newest: deque[Row] = deque(maxlen=limit)
        try:
            f = open(Path(log_dir) / names.JOURNAL_FILE, "rb")
        except FileNotFoundError:
            continue
        with f:
            for line in f:
                if needle not in line:
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue  # a torn last line
                if doc.get("topic") == topic and doc.get("partition") == partition:
                    newest.append(doc)
        found += newest
    found.sort(key=lambda d: d.get("time_ms", 0), reverse=True)
    for doc in found[:limit]:
        doc["dag_run"] = dag_run_link(str(doc.get("run_id", "")))
    return found[:limit]


def partition_view(store: LogStore, topic: str, partition: int, now_ms: int, *, journal_limit: int = 100) -> Row:
    from kafkalog.log.config import describe
    from kafkalog.log.snapshot import snapshot_for_compaction, snapshot_log
    from kafkalog.log.store import METADATA_TOPICS
    from kafkalog.policy.compaction import log_to_clean
    from kafkalog.policy.retention import plan_retention
    from kafkalog.tools.status import status_rows

    location = locate(store, topic, partition)
    config = store.log_config(topic)
    view = cast("LogStore", _TopicView(store, topic, partition))
    overrides = store.topic(topic).overrides
    doc: Row = {
        "topic": topic, "partition": partition, "now_ms": now_ms, "row": status_rows(view, now_ms)[0],
        "config": {e.name: {"value": e.value, "source": e.source} for e in describe(store.broker, overrides)
                   if e.name in CONFIG_SHOWN},
        "segments": [], "retention": None, "compaction": None, "error": None,
        "journal": partition_journal(store.log_dirs, topic, partition, limit=journal_limit)}
    try:
        snapshot = snapshot_log(location.log_dir, topic, partition, config, store.log_dir_checkpoints(location.log_dir))
        compaction = snapshot_for_compaction(location.log_dir, topic, partition, config,
                                             store.log_dir_checkpoints(location.log_dir)) if config.compact else None
    except (KafkaLogError, OSError) as exc:
        doc["error"] = f"corrupt: {exc}"
        return doc
    plan = None if topic in METADATA_TOPICS else plan_retention(snapshot, now_ms, broker=store.broker)
    now_deleted = {s.base_offset: s for s in plan.segments} if plan else {}
    by_time = plan is not None and config.delete and config.retention_ms >= 0
    waits_until: int | None = None  # retention walks from the oldest segment: a segment waits for those before it
    target = log_to_clean(compaction, now_ms) if compaction is not None else None
    for i, s in enumerate(snapshot.segments):
        last = i + 1 == len(snapshot.segments)
        entry: Row = {"base_offset": s.base_offset, "next_offset": s.next_offset, "size_bytes": s.size_bytes,
                      "largest_timestamp_ms": s.largest_timestamp_ms, "timestamp_source": s.largest_timestamp_source,
                      "active": last, "retention_at_ms": None, "retention_reason": None, "deletable_now": False}
        if s.base_offset in now_deleted:
            d = now_deleted[s.base_offset]
            entry.update(retention_at_ms=now_ms, retention_reason=f"{d.reason}: {d.detail}", deletable_now=True)
        elif by_time and not (last and s.size_bytes == 0):
            waits_until = max(waits_until or 0, s.largest_timestamp_ms + config.retention_ms + 1)
            entry.update(retention_at_ms=waits_until, retention_reason=f"retention.ms={config.retention_ms}")
        if target is not None:
            entry["cleanable"] = (not last and s.base_offset < target.first_uncleanable_offset
                                  and s.next_offset > target.first_dirty_offset)
            entry["dirty"] = s.next_offset > target.first_dirty_offset
        doc["segments"].append(entry)
    if plan is not None:
        doc["retention"] = {"deletable_segments": len(plan.segments), "deletable_bytes": plan.bytes,
                            "log_start_offset_after": plan.log_start_offset_after,
                            "blocked_by": [str(b) for b in plan.blocked_by]}
    if compaction is not None and target is not None:
        # max.compaction.lag.ms counts from the first batch of the oldest dirty non-active segment (spec 8.3)
        first = target.first_dirty_offset
        earliest = min((s.first_batch_timestamp_ms for s in compaction.segments[:-1]
                        if s.next_offset > first and s.first_batch_timestamp_ms > 0), default=MAX_LONG)
        lag = config.max_compaction_lag_ms
        deadline = earliest + lag if earliest < MAX_LONG and lag < MAX_LONG - earliest else None
        doc["compaction"] = {
            "first_dirty_offset": first, "first_uncleanable_offset": target.first_uncleanable_offset,
            "dirty_ratio": round(target.dirty_ratio, 4), "min_cleanable_dirty_ratio": config.min_cleanable_dirty_ratio,
            "cleanable_bytes": target.cleanable_bytes, "total_bytes": target.total_bytes, "trigger": target.trigger,
            "limited_by": target.limited_by, "limit_detail": target.limit_detail,
            "max_compaction_lag_ms": lag, "deadline_ms": deadline, "overdue_ms": target.max_compaction_delay_ms,
            "min_compaction_lag_ms": config.min_compaction_lag_ms, "cleaner_checkpoint": compaction.cleaner_checkpoint}
    return doc


def _retention_totals(plan: Row) -> Row:
    parts = [p for p in plan["partitions"] if p["segments"]]
    return {"partitions": len(parts), "segments": sum(len(p["segments"]) for p in parts),
            "bytes": sum(p["bytes"] for p in parts), "errors": len(plan["errors"])}


def _compaction_totals(plan: Row) -> Row:
    return {"partitions": len(plan["selected"]), "bytes": sum(s["cleanable_bytes"] for s in plan["selected"]),
            "errors": len(plan["errors"])}


def _what_if_values(config: LogConfig) -> Row:
    return {"retention.ms": config.retention_ms, "retention.bytes": config.retention_bytes,
            "min.cleanable.dirty.ratio": config.min_cleanable_dirty_ratio,
            "cleanup.policy": ",".join(sorted(config.cleanup_policy))}


def what_if(store: LogStore, topic: str, changes: Mapping[str, str], now_ms: int) -> Row:
    """Retention and compaction plans for ``topic`` at ``now_ms``, as they are and with ``changes`` applied
    to its overrides. The ``after`` plans equal ``retention plan --topic T --json`` and ``compact --dry-run
    --json`` (its entries for T) on a copy after ``topics alter --topic T --config k=v``."""
    from kafkalog.cycle.compaction import plan_compaction
    from kafkalog.cycle.retention import plan_retention
    from kafkalog.log.config import LogConfig, validate_topic_name, validate_topic_overrides
    from kafkalog.log.store import METADATA_TOPICS

    if not changes:
        raise BadRequest(f"name at least one of {', '.join(WHAT_IF_KEYS)} to change")
    unknown = sorted(set(changes) - set(WHAT_IF_KEYS))
    if unknown:
        raise BadRequest(f"what-if changes only {', '.join(WHAT_IF_KEYS)}; not {', '.join(unknown)}")
    wall = int(time.time() * 1000)
    if not 0 <= now_ms <= wall:
        raise BadRequest(f"now_ms {now_ms} must be between 0 and the wall clock {wall}")
    try:
        validate_topic_name(topic)
        normalised = validate_topic_overrides({k: str(v) for k, v in changes.items()})
    except KafkaLogError as exc:
        raise BadRequest(str(exc)) from None
    if topic not in store.topics():
        raise NotFound(f"no topic {topic!r} in the configured log dirs")
    info = store.topic(topic)
    overrides = {**info.overrides, **normalised}
    try:
        after_config = LogConfig.resolve(store.broker, overrides)  # as `topics alter` checks it
    except KafkaLogError as exc:
        raise BadRequest(str(exc)) from None
    if topic in METADATA_TOPICS:
        raise BadRequest(f"{topic} is the KRaft metadata log: retention and compaction never act on it")
    before = _TopicView(store, topic)
    after = _TopicView(store, topic, config=after_config)
    locations = store.partitions(topic)
    doc: Row = {"topic": topic, "now_ms": now_ms, "changes": normalised, "partitions": len(locations),
                "config_before": _what_if_values(store.log_config(topic)),
                "config_after": _what_if_values(after_config)}
    retention = {"before": plan_retention(before, locations, now_ms).to_json(),
                 "after": plan_retention(after, locations, now_ms).to_json()}
    doc["retention"] = {**retention, "totals": {k: _retention_totals(v) for k, v in retention.items()}}
    if store.log_config(topic).compact or after_config.compact:
        compaction = {"before": plan_compaction(before, now_ms=now_ms).to_json(),
                      "after": plan_compaction(after, now_ms=now_ms).to_json()}
        doc["compaction"] = {**compaction, "totals": {k: _compaction_totals(v) for k, v in compaction.items()}}
    else:
        doc["compaction"] = None
    return doc
