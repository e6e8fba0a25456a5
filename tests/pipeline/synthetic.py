"""A synthetic store for the pipeline tests: a delete topic whose segments expire at known times, a
compacted changelog with duplicates and tombstones, and a compact,delete topic where both act. Also the
bad-input tests' stores (``test_bad_input.py``, ``test_bad_input_dags.py``): a delete topic of four hourly
segments before ``NOW_MS`` (``delete_topic``) and a compacted partition with a CRC-corrupt batch
(``corrupt_compacted_store``)."""

from __future__ import annotations

import time
from pathlib import Path

from kafkalog.log.store import LogStore

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
EVENTS, CHANGELOG, SESSIONS = "events", "changelog", "sessions"
NOW_MS = int(time.time() * 1000) - 60_000  # the bad-input tests' clock: a minute before this module is imported


def build_store(log_dir: Path, now_ms: int, *, file_delete_delay_ms: int = 2000, event_hours: int = 8) -> LogStore:
    """``events`` (2 partitions): segment i holds records ``event_hours - i`` hours older than ``now_ms``
    (retention.ms 3 h: the oldest ``event_hours - 3`` segments expire). ``changelog`` (2 partitions,
    compact): 50 keys rewritten many times, every 13th record a tombstone. ``sessions`` (compact,delete,
    retention.ms 5 h): ten hours of keyed records, so retention trims its head and compaction the rest."""
    store = LogStore([log_dir], create_missing=True)
    delay = str(file_delete_delay_ms)
    store.create_topic(EVENTS, 2, {"segment.bytes": "1048576", "retention.ms": str(3 * HOUR_MS),
                                   "file.delete.delay.ms": delay})
    store.create_topic(CHANGELOG, 2, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                      "delete.retention.ms": str(DAY_MS), "file.delete.delay.ms": delay})
    store.create_topic(SESSIONS, 1, {"cleanup.policy": "compact,delete", "segment.bytes": "4096",
                                     "retention.ms": str(5 * HOUR_MS), "delete.retention.ms": str(DAY_MS),
                                     "file.delete.delay.ms": delay})
    for partition in range(2):
        with store.writable_log(store.locate(EVENTS, partition)) as log:
            for i in range(event_hours):
                ts = now_ms - (event_hours - i) * HOUR_MS
                log.append_records([(f"e{j}".encode(), f"event {partition}/{i}/{j}".encode(), (), ts + j)
                                    for j in range(20)], batch_records=5, now_ms=now_ms)
                log.roll()
        with store.writable_log(store.locate(CHANGELOG, partition)) as log:
            rows = [(f"key-{i % 50}".encode(), None if i % 13 == 0 else f"value {partition}/{i}".encode(), (),
                     now_ms - 10 * HOUR_MS + i * 1000) for i in range(900)]
            log.append_records(rows, batch_records=10, now_ms=now_ms)
    with store.writable_log(store.locate(SESSIONS, 0)) as log:
        rows = [(f"session-{i % 40}".encode(), None if i % 17 == 0 else f"state {i}".encode(), (),
                 now_ms - 10 * HOUR_MS + i * 60_000) for i in range(600)]
        log.append_records(rows, batch_records=10, now_ms=now_ms)
    return store


def delete_topic(store: LogStore, name: str, delay_ms: int) -> None:
    """Four hourly segments, the oldest two past retention.ms (2.5 h)."""
    store.create_topic(name, 1, {"retention.ms": str(5 * HOUR_MS // 2), "file.delete.delay.ms": str(delay_ms)})
    with store.writable_log(store.locate(name, 0)) as log:
        for i in range(4):
            log.append_records([(b"k", f"{name} {i}".encode(), (), NOW_MS - (4 - i) * HOUR_MS)], now_ms=NOW_MS)
            log.roll()


def corrupt_compacted_store(log_dir: Path, now_ms: int) -> LogStore:
    """``cl``: one compacted partition whose first (inactive, dirty) segment has a batch whose CRC fails."""
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("cl", 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
    with store.writable_log(store.locate("cl", 0)) as log:
        log.append_records([(f"k{i % 20}".encode(), f"v{i}".encode(), (), now_ms - HOUR_MS + i) for i in range(400)],
                           batch_records=10, now_ms=now_ms)
    first = log_dir / "cl-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    return store
