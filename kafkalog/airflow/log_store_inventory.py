"""The Log store page's inventory: ``kafkalog status`` for every partition, plus its last journal action.

Each row is exactly a ``tools.status.status_rows`` row at the same clock (a test compares them with
``kafkalog status --json``); this module only takes the snapshots differently. ``status_rows`` snapshots
every log afresh, and a compacted log's snapshot opens the log (producer state for the last stable
offset, and a re-read of the cleaner checkpoint): ~20 ms each, so seconds to minutes for a store of
tens of thousands of partitions, every time. Here each partition's snapshots are kept between builds
and taken again only when the partition's fingerprint changes: its directory's mtime (any segment
rolled, marked ``.deleted``, swapped or removed), the active segment's ``.log``/``.index``/
``.timeindex`` size and mtime (appends), its checkpoint entries and its config. The pure planners
then run on every build at the build's clock, so time-based answers (``retention.ms`` expiry,
compaction lags) are never stale. A snapshot taken within ``SETTLE_S`` of a file's mtime is not kept:
mtimes tick coarsely, and a change in the same tick would go unseen.

The journals are read incrementally: only complete lines appended since the last build are parsed.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkaLogError
from kafkalog.log import names

if TYPE_CHECKING:
    from kafkalog.log.config import BrokerConfig, LogConfig
    from kafkalog.log.snapshot import LogDirCheckpoints, LogSnapshot
    from kafkalog.log.store import LogStore, PartitionLocation

Row = dict[str, Any]
RUNS_KEPT = 500  # cycles remembered for the "bytes reclaimed per cycle" chart
RECLAIMING = {"mark-deleted": "retention", "compact": "compaction", "delete-dir": "topic_deletion", "sweep": "swept"}
SETTLE_S = 2.0


class BadRequest(KafkaLogError):
    """A request the page cannot answer as asked (an unknown sort key, a log dir that is not configured…)."""


class NotFound(KafkaLogError):
    """No such topic or partition in the configured log dirs."""


def dag_run_link(run_id: str) -> dict[str, str] | None:
    """A journal run id written by a DAG task (``<dag id>/<Airflow run id>``) → the run's UI path
    (relative to Airflow's base URL); None for runs of the CLI (``run-<time>-<hex>``)."""
    dag_id, sep, dag_run_id = run_id.partition("/")
    if not sep or not dag_id or not dag_run_id:
        return None
    return {"dag_id": dag_id, "dag_run_id": dag_run_id,
            "path": f"dags/{urllib.parse.quote(dag_id, safe='')}/runs/{urllib.parse.quote(dag_run_id, safe='')}"}


def blocked_kind(reason: str) -> str:
    """``"retention.ms: segment 20 …"`` → ``"retention.ms"``; ``"compaction min-compaction-lag: …"`` →
    ``"compaction min-compaction-lag"``: the part a filter selects on."""
    return reason.split(":", 1)[0].strip()


@dataclass
class JournalTail:
    """What the page needs from one log dir's journal, read incrementally: the journal is append-only, so
    only complete lines appended since the last read are parsed (a rewrite or a new inode starts over)."""

    path: Path
    inode: int = -1
    offset: int = 0
    last: dict[tuple[str, int], Row] = field(default_factory=dict)  # (topic, partition) → newest entry
    runs: dict[str, Row] = field(default_factory=dict)  # run id → bytes per kind of reclaiming action

    def update(self) -> None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self.inode, self.offset, self.last, self.runs = -1, 0, {}, {}
            return
        if info.st_ino != self.inode or info.st_size < self.offset:
            self.inode, self.offset, self.last, self.runs = info.st_ino, 0, {}, {}
        if info.st_size == self.offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(info.st_size - self.offset)
        end = data.rfind(b"\n") + 1  # a torn (or still being written) last line waits for its newline
        for line in data[:end].splitlines():
            try:
                self._add(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
        self.offset += end

    def _add(self, doc: Row) -> None:
        key = (doc["topic"], doc["partition"])
        previous = self.last.get(key)
        if previous is None or doc["time_ms"] >= previous["time_ms"]:
            self.last[key] = {k: doc.get(k) for k in ("run_id", "time_ms", "action", "bytes", "reason")}
        kind = RECLAIMING.get(doc["action"])
        if kind is not None:
            run = self.runs.setdefault(doc["run_id"], {"run_id": doc["run_id"], "time_ms": doc["time_ms"],
                                                       **dict.fromkeys(RECLAIMING.values(), 0)})
            run["time_ms"] = min(run["time_ms"], doc["time_ms"])
            run[kind] += int(doc.get("bytes") or 0)
            if len(self.runs) > 2 * RUNS_KEPT:
                for old in sorted(self.runs.values(), key=lambda r: r["time_ms"])[:RUNS_KEPT]:
                    del self.runs[old["run_id"]]


@dataclass
class _Snapshots:
    fingerprint: tuple[Any, ...]
    log: LogSnapshot | Exception
    compaction: LogSnapshot | Exception | None

    @property
    def active_base(self) -> int | None:
        return None if isinstance(self.log, Exception) else self.log.segments[-1].base_offset


@dataclass
class SnapshotMemo:
    """Each partition's last snapshots with the fingerprint they were taken at (see the module doc)."""

    entries: dict[tuple[str, str, int], _Snapshots] = field(default_factory=dict)
    taken: int = 0  # snapshots taken by the last build (the rest were reused)

    def snapshots(self, location: PartitionLocation, config: LogConfig, checkpoints: LogDirCheckpoints,
                  cleaner: dict[tuple[str, int], int]) -> _Snapshots:
        from kafkalog.log.snapshot import snapshot_for_compaction, snapshot_log

        tp = location.topic_partition
        key = (str(location.log_dir), tp.topic, tp.partition)
        facts = (checkpoints.log_start_offsets.get((tp.topic, tp.partition)),
                 checkpoints.high_watermarks.get((tp.topic, tp.partition)), cleaner.get((tp.topic, tp.partition)),
                 config)
        previous = self.entries.get(key)
        if previous is not None and _fingerprint(location.directory, previous.active_base, facts)[0] == \
                previous.fingerprint:
            return previous
        self.taken += 1
        started_ns = time.time_ns()
        log: LogSnapshot | Exception
        compaction: LogSnapshot | Exception | None = None
        try:
            log = snapshot_log(location.log_dir, tp.topic, tp.partition, config, checkpoints)
        except (KafkaLogError, OSError) as exc:
            log = exc
        if config.compact and not isinstance(log, Exception):
            try:
                compaction = snapshot_for_compaction(location.log_dir, tp.topic, tp.partition, config, checkpoints)
            except (KafkaLogError, OSError) as exc:
                compaction = exc
        taken = _Snapshots((), log, compaction)
        taken.fingerprint, newest_ns = _fingerprint(location.directory, taken.active_base, facts)
        # Kept only if nothing in the fingerprint changed since shortly before the snapshot began: a
        # change during it (or in the same coarse mtime tick) would otherwise go unseen.
        if newest_ns is not None and newest_ns < started_ns - SETTLE_S * 1e9:
            self.entries[key] = taken
        else:
            self.entries.pop(key, None)
        return taken


def _fingerprint(directory: Path, active_base: int | None,
                 facts: tuple[Any, ...]) -> tuple[tuple[Any, ...], int | None]:
    """The partition's fingerprint — its directory, its active segment's files, its checkpoint entries
    and config (``facts``) — and the newest mtime in it (None: unreadable, never kept)."""
    try:
        stats: list[os.stat_result | None] = [os.stat(directory)]
    except OSError:
        return (None,), None
    if active_base is not None:  # plain strings: this runs for every partition on every build
        prefix = os.path.join(directory, names.offset_prefix(active_base))
        stats += [_stat_or_missing(prefix + suffix) for suffix in (names.LOG_SUFFIX, names.INDEX_SUFFIX,
                                                                   names.TIME_INDEX_SUFFIX)]
    marks = tuple((s.st_ino, s.st_size, s.st_mtime_ns) if s is not None else None for s in stats)
    return (marks, *facts), max(s.st_mtime_ns for s in stats if s is not None)


def _stat_or_missing(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def status_row(location: PartitionLocation, config: LogConfig, taken: _Snapshots, now_ms: int,
               broker: BrokerConfig) -> Row:
    """``tools.status.status_rows``' row for one partition, from its (possibly reused) snapshots."""
    from kafkalog.log.store import METADATA_TOPICS
    from kafkalog.policy.compaction import log_to_clean, select_logs_to_clean
    from kafkalog.policy.retention import plan_retention

    tp = location.topic_partition
    row: Row = {
        "topic": tp.topic, "partition": tp.partition, "log_dir": str(location.log_dir),
        "cleanup_policy": ",".join(sorted(config.cleanup_policy)), "log_start_offset": None,
        "log_end_offset": None, "size_bytes": None, "segment_count": None, "first_dirty_offset": None,
        "dirty_ratio": None, "cleanable_bytes": None, "pending_delete_bytes": None,
        "deletable_bytes": None, "quarantined": False, "blocked_by": [],
    }
    snapshot = taken.log
    if isinstance(snapshot, Exception):
        row.update(quarantined=True, blocked_by=[f"corrupt: {snapshot}"])
        return row
    row.update(log_start_offset=snapshot.log_start_offset, log_end_offset=snapshot.log_end_offset,
               size_bytes=snapshot.size_bytes, segment_count=len(snapshot.segments),
               pending_delete_bytes=snapshot.pending_delete_bytes)
    if tp.topic in METADATA_TOPICS:
        row["blocked_by"] = ["policy: the KRaft metadata log is trimmed by its snapshots, not by retention"]
        return row
    plan = plan_retention(snapshot, now_ms, broker=broker)
    row.update(deletable_bytes=plan.bytes, blocked_by=[str(b) for b in plan.blocked_by])
    compaction = taken.compaction
    if isinstance(compaction, Exception):
        row.update(quarantined=True, blocked_by=row["blocked_by"] + [f"corrupt: {compaction}"])
    elif compaction is not None:
        target = log_to_clean(compaction, now_ms)
        row.update(first_dirty_offset=target.first_dirty_offset, dirty_ratio=round(target.dirty_ratio, 4),
                   cleanable_bytes=target.cleanable_bytes)
        waiting = select_logs_to_clean([compaction], now_ms, broker=broker).not_selected
        row["blocked_by"] += [f"compaction {n}" for n in waiting]
    return row


@dataclass(frozen=True)
class Inventory:
    as_of_ms: int
    build_s: float
    snapshots_taken: int  # partitions snapshotted afresh by this build (the others' files had not changed)
    log_dirs: tuple[str, ...]
    rows: list[Row]
    topics: list[Row]
    cycles: list[Row]  # bytes reclaimed per maintenance run, oldest first


def build_inventory(store: LogStore, now_ms: int, memo: SnapshotMemo, journals: dict[Path, JournalTail]) -> Inventory:
    from kafkalog.log import checkpoint
    from kafkalog.log.snapshot import LogDirCheckpoints

    started = time.perf_counter()
    memo.taken = 0
    checkpoints = {d: LogDirCheckpoints.read(d) for d in store.log_dirs}
    cleaners = {d: checkpoint.read_offset_checkpoint(d / names.CLEANER_OFFSET_CHECKPOINT) for d in store.log_dirs}
    rows = []
    seen = set()
    for location in store.partitions(symlinked=True):  # a symlinked one is listed quarantined, never followed
        config = store.log_config(location.topic_partition.topic)
        taken = memo.snapshots(location, config, checkpoints[location.log_dir], cleaners[location.log_dir])
        rows.append(status_row(location, config, taken, now_ms, store.broker))
        seen.add((str(location.log_dir), location.topic_partition.topic, location.topic_partition.partition))
    for gone in set(memo.entries) - seen:
        del memo.entries[gone]
    last: dict[tuple[str, int], Row] = {}
    runs: dict[str, Row] = {}
    for log_dir in store.log_dirs:
        tail = journals.setdefault(log_dir, JournalTail(log_dir / names.JOURNAL_FILE))
        tail.update()
        for key, entry in tail.last.items():
            if key not in last or entry["time_ms"] >= last[key]["time_ms"]:
                last[key] = entry
        for run_id, run in tail.runs.items():  # a run that maintained several log dirs: add them up
            if run_id not in runs:
                runs[run_id] = dict(run)
                continue
            for kind in RECLAIMING.values():
                runs[run_id][kind] += run[kind]
            runs[run_id]["time_ms"] = min(runs[run_id]["time_ms"], run["time_ms"])
    for row in rows:
        newest = last.get((row["topic"], row["partition"]))
        row["last_action"] = None if newest is None else {**newest, "dag_run": dag_run_link(newest["run_id"] or "")}
        row["last_action_ms"] = None if newest is None else newest["time_ms"]
        row["blocked_kinds"] = sorted({blocked_kind(b) for b in row["blocked_by"]})
    topics = []
    for name, info in store.topics().items():
        config = store.log_config(name)
        topics.append({"topic": name, "partitions": info.partitions, "overrides": dict(info.overrides),
                       "cleanup_policy": ",".join(sorted(config.cleanup_policy)), "retention_ms": config.retention_ms,
                       "retention_bytes": config.retention_bytes,
                       "min_cleanable_dirty_ratio": config.min_cleanable_dirty_ratio})
    cycles = sorted(runs.values(), key=lambda r: r["time_ms"])[-RUNS_KEPT:]
    for cycle in cycles:
        cycle["dag_run"] = dag_run_link(cycle["run_id"])
    return Inventory(now_ms, round(time.perf_counter() - started, 3), memo.taken,
                     tuple(str(d) for d in store.log_dirs), rows, topics, cycles)
