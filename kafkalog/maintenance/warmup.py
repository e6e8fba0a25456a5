"""Load the cleaner's compiled kernels into this process before work that is timed.

The numba kernels are compiled once into a cache dir, but every new process still loads each one
from that cache on its first call. ``warm()`` cleans two tiny throwaway partitions (uncompressed and
LZ4) in a temporary directory, which calls the kernels a cleaning round calls: the Spark job's probe
runs it in each Python worker Spark will reuse for cleaning tasks, and the benchmarks before timing.
It is idempotent per process and touches no real log.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

_warmed_s: float | None = None


def warm() -> float:
    """Seconds this call spent loading (0.0 after the first call in this process)."""
    global _warmed_s
    if _warmed_s is not None:
        return 0.0
    from kafkalog.format.compression import CompressionType
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance.cleaner import clean_partition

    started = time.perf_counter()
    now = int(time.time() * 1000)
    with tempfile.TemporaryDirectory(prefix="kafkalog-warmup-") as tmp:
        store = LogStore([Path(tmp)], create_missing=True)
        store.create_topic("warmup", 2, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        for partition, codec in enumerate((None, CompressionType.LZ4)):
            location = store.locate("warmup", partition)
            with store.writable_log(location) as log:
                for n in range(6):
                    log.append_records([(f"k{i % 7}".encode(), None if i % 5 == 0 else b"v" * 40, (), now)
                                        for i in range(10 * n, 10 * n + 10)], batch_records=5, compression=codec,
                                       now_ms=now)
            active = store.open_log(location, read_only=True).active_segment.base_offset
            clean_partition(store, location, 0, active, now_ms=now, wall_now_ms=now)
    _warmed_s = time.perf_counter() - started
    return _warmed_s
