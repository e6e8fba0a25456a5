"""The Log store page's data served from a cache: the inventory per store, queried on the server
(filter, sort, page), and the charts' figures.

The inventory (``log_store_inventory``: ``kafkalog status`` rows plus the last journal action) of a
store with tens of thousands of partitions takes seconds to build the first time and well under a
second after (snapshots of unchanged partitions are reused), so it is cached per store, keyed on its
log dirs and broker file: fresh for ``ttl_s``, then served as it is while one background thread
rebuilds it (stale-while-revalidate), and rebuilt before answering only when older than
``max_stale_s``. Every answer says how old it is. Nothing here writes to a log dir.

Heavy modules (the log layer pulls in numba) are imported where used: the plugin module is imported
by every Airflow component, and only the api-server needs them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog.airflow.log_store_inventory import (
    BadRequest,
    Inventory,
    JournalTail,
    Row,
    SnapshotMemo,
    build_inventory,
)
from kafkalog.errors import KafkaLogError

if TYPE_CHECKING:
    from kafkalog.log.store import LogStore

SORT_KEYS = ("topic", "partition", "log_dir", "size_bytes", "segment_count", "log_start_offset", "log_end_offset",
             "cleanup_policy", "dirty_ratio", "cleanable_bytes", "pending_delete_bytes", "deletable_bytes",
             "quarantined", "last_action_ms")
MAX_PAGE = 500


@dataclass(frozen=True)
class StoreSpec:
    """Which store the page shows: its connection, log dirs and broker file, found as the DAGs find them."""

    log_dirs: tuple[str, ...]
    config_file: str | None = None
    conn_id: str = "kafkalog_default"

    @classmethod
    def of(cls, conn_id: str) -> StoreSpec:
        """The store of ``kafkalog`` connection ``conn_id`` (``KafkalogHook``; for ``kafkalog_default``
        without one, ``$KAFKALOG_LOG_DIRS``/``$KAFKALOG_CONFIG``)."""
        from kafkalog.airflow.hooks import KafkalogHook

        store = KafkalogHook(conn_id).store
        return cls(tuple(str(Path(d).resolve()) for d in store.resolved_log_dirs()), store.config_file, conn_id)

    def open(self) -> LogStore:
        from kafkalog.log.config import BrokerConfig
        from kafkalog.log.store import LogStore

        return LogStore([Path(d) for d in self.log_dirs], BrokerConfig.load(self.config_file))


@dataclass
class _Entry:
    build_lock: threading.Lock = field(default_factory=threading.Lock)
    memo: SnapshotMemo = field(default_factory=SnapshotMemo)
    journals: dict[Path, JournalTail] = field(default_factory=dict)
    inventory: Inventory | None = None
    built_at: float = 0.0
    refreshing: bool = False
    error: str | None = None


class InventoryCache:
    """Inventories per store (``StoreSpec``: its log dirs and broker file). A build holds the store's
    build lock, so concurrent requests never build one store twice at once."""

    def __init__(self, *, ttl_s: float = 10.0, max_stale_s: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.ttl_s, self.max_stale_s, self.clock = ttl_s, max_stale_s, clock
        self._lock = threading.Lock()
        self._entries: dict[StoreSpec, _Entry] = {}

    def _entry(self, spec: StoreSpec) -> _Entry:
        with self._lock:
            return self._entries.setdefault(spec, _Entry())

    def get(self, spec: StoreSpec, *, refresh: bool = False) -> tuple[Inventory, dict[str, Any]]:
        """The inventory and how fresh it is; ``refresh`` asks for a rebuild in the background."""
        entry = self._entry(spec)
        inventory, age = entry.inventory, self.clock() - entry.built_at
        if inventory is None or age > self.max_stale_s:
            with entry.build_lock:  # someone else may have built it while this request waited
                if entry.inventory is None or self.clock() - entry.built_at > self.max_stale_s:
                    self._build(spec, entry)
            inventory = entry.inventory
            assert inventory is not None
        elif age > self.ttl_s or refresh:
            self.refresh_in_background(spec)
        return inventory, {"age_s": round(max(0.0, self.clock() - entry.built_at), 1),
                           "refreshing": entry.refreshing, "refresh_error": entry.error}

    def refresh_in_background(self, spec: StoreSpec) -> threading.Thread | None:
        entry = self._entry(spec)
        if not entry.build_lock.acquire(blocking=False):
            return None  # a build is under way
        entry.refreshing = True

        def run() -> None:
            try:
                self._build(spec, entry)
            except (KafkaLogError, OSError) as exc:
                entry.error = str(exc)  # the last good inventory stays; the page shows the error
            finally:
                entry.refreshing = False
                entry.build_lock.release()

        thread = threading.Thread(target=run, name="kafkalog-inventory", daemon=True)
        thread.start()
        return thread

    def _build(self, spec: StoreSpec, entry: _Entry) -> None:
        now = self.clock()  # the inventory's age counts from its clock, not from when the build ended
        entry.inventory = build_inventory(spec.open(), int(now * 1000), entry.memo, entry.journals)
        entry.built_at, entry.error = now, None


def query_partitions(inventory: Inventory, *, q: str | None = None, topic: str | None = None,
                     policy: str | None = None, blocked: str | None = None, quarantined: bool | None = None,
                     log_dir: str | None = None, sort: str = "topic", descending: bool = False, offset: int = 0,
                     limit: int = 50) -> dict[str, Any]:
    """One page of the inventory: filtered, sorted (missing values last either way, ties by topic and
    partition) and cut at ``offset``/``limit``."""
    if sort not in SORT_KEYS:
        raise BadRequest(f"sort={sort!r}: one of {', '.join(SORT_KEYS)}")
    if not 1 <= limit <= MAX_PAGE or offset < 0:
        raise BadRequest(f"limit must be 1..{MAX_PAGE} and offset at least 0 (got limit={limit}, offset={offset})")
    if log_dir is not None and log_dir not in inventory.log_dirs:
        raise BadRequest(f"log_dir={log_dir!r} is not one of the configured log dirs")
    needle = (q or "").strip().lower()
    rows: Iterable[Row] = inventory.rows
    if needle:
        rows = (r for r in rows if needle in f"{r['topic']}-{r['partition']}".lower())
    if topic:
        rows = (r for r in rows if r["topic"] == topic)
    if policy:
        rows = (r for r in rows if r["cleanup_policy"] == policy)
    if blocked:
        rows = (r for r in rows if blocked in r["blocked_kinds"])
    if quarantined is not None:
        rows = (r for r in rows if r["quarantined"] == quarantined)
    if log_dir is not None:
        rows = (r for r in rows if r["log_dir"] == log_dir)
    matched = list(rows)  # the inventory's order is (topic, partition): the tie-break of every sort
    if sort != "topic":
        present = [r for r in matched if r[sort] is not None]
        present.sort(key=lambda r: r[sort], reverse=descending)
        matched = present + [r for r in matched if r[sort] is None]
    elif descending:
        matched.reverse()
    return {"as_of_ms": inventory.as_of_ms, "total": len(inventory.rows), "matched": len(matched), "offset": offset,
            "limit": limit, "sort": sort, "descending": descending, "rows": matched[offset:offset + limit]}


def summary(inventory: Inventory, *, top_topics: int = 20, top_dirty: int = 60) -> dict[str, Any]:
    """Totals, the filter choices, and the charts' data: disk use per log dir and per topic, the dirty
    ratio of the compacted partitions (filthiest first, with each topic's threshold) and the bytes
    reclaimed per cycle."""
    disks = []
    for log_dir in inventory.log_dirs:
        rows = [r for r in inventory.rows if r["log_dir"] == log_dir]
        fs = os.statvfs(log_dir)
        disks.append({"log_dir": log_dir, "partitions": len(rows),
                      "size_bytes": sum(r["size_bytes"] or 0 for r in rows),
                      "pending_delete_bytes": sum(r["pending_delete_bytes"] or 0 for r in rows),
                      "fs_total_bytes": fs.f_blocks * fs.f_frsize, "fs_free_bytes": fs.f_bavail * fs.f_frsize})
    per_topic: dict[str, Row] = {}
    for r in inventory.rows:
        t = per_topic.setdefault(r["topic"], {"topic": r["topic"], "partitions": 0, "size_bytes": 0,
                                              "pending_delete_bytes": 0})
        t["partitions"] += 1
        t["size_bytes"] += r["size_bytes"] or 0
        t["pending_delete_bytes"] += r["pending_delete_bytes"] or 0
    by_size = sorted(per_topic.values(), key=lambda t: (-t["size_bytes"], t["topic"]))
    thresholds = {t["topic"]: t["min_cleanable_dirty_ratio"] for t in inventory.topics}
    compacted = [r for r in inventory.rows if r["dirty_ratio"] is not None]
    compacted.sort(key=lambda r: (-r["dirty_ratio"], r["topic"], r["partition"]))
    histogram = [0] * 10
    for r in compacted:
        histogram[min(int(r["dirty_ratio"] * 10), 9)] += 1
    kinds: dict[str, int] = {}
    for r in inventory.rows:
        for kind in r["blocked_kinds"]:
            kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "as_of_ms": inventory.as_of_ms, "build_s": inventory.build_s, "snapshots_taken": inventory.snapshots_taken,
        "log_dirs": list(inventory.log_dirs),
        "partitions": len(inventory.rows), "topics": inventory.topics,
        "size_bytes": sum(d["size_bytes"] for d in disks),
        "pending_delete_bytes": sum(d["pending_delete_bytes"] for d in disks),
        "quarantined": sum(1 for r in inventory.rows if r["quarantined"]),
        "blocked_kinds": dict(sorted(kinds.items())),
        "policies": sorted({r["cleanup_policy"] for r in inventory.rows}),
        "disk_by_log_dir": disks,
        "disk_by_topic": by_size[:top_topics],
        "disk_other_topics_bytes": sum(t["size_bytes"] for t in by_size[top_topics:]),
        "dirty_ratios": [{"topic": r["topic"], "partition": r["partition"], "dirty_ratio": r["dirty_ratio"],
                          "min_cleanable_dirty_ratio": thresholds.get(r["topic"])} for r in compacted[:top_dirty]],
        "compacted_partitions": len(compacted), "dirty_ratio_histogram": histogram,
        "cycles": inventory.cycles[-60:],
    }
