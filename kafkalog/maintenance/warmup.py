"""Load the cleaner's compiled kernels into this process before the real work.

The numba kernels are compiled once into a cache dir, but every new process still loads each one
from that cache on its first call. A long-lived worker, such as a Spark executor's Python worker,
can pay that up front: ``warm()`` cleans a tiny throwaway partition in a temporary directory, in one
pass and in parts, which calls every kernel a cleaning round calls. It is idempotent per process and
touches no real log.

It faults in the memory key maps take their tables from (``key_map.TABLES``), as Kafka's cleaner
fills its dedupe buffer when it starts, so that a big map's first table chain is not faulted in in
the middle of a round, on its critical path.

Then it moves every object alive (modules, compiled kernels: ~125,000 objects) out of the cyclic
garbage collector's reach (``gc.freeze``): pyspark's worker daemon runs a full ``gc.collect()``
after every task of a reused Python worker, and a full collection walks every tracked object, so
with these in reach each collection would cost as much as a small task.
"""

from __future__ import annotations

import gc
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
    from kafkalog.log.lock import cleaner_lock
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance import split_clean
    from kafkalog.maintenance.cleaner import clean_partition
    from kafkalog.maintenance.key_map import TABLES

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
            if partition == 0:
                clean_partition(store, location, 0, active, now_ms=now, wall_now_ms=now)
                continue
            job = split_clean.SplitRound("warmup", partition, 0, active, now, now)
            with cleaner_lock(location.directory, timeout_s=0):
                board = Path(tmp, "board")
                board.mkdir()
                plan, ctx = split_clean.plan_round(store, location, job, board, 2)
                split_clean.run_split_task(store, [plan])  # both parts, then every group
                written, maps = split_clean.collect(split_clean.Board(plan))
                split_clean.swap_and_finish(ctx, written, maps)
    gc.collect()  # the throwaway round's cycles, before the survivors are frozen for good
    gc.freeze()
    TABLES.touch()  # the key maps' memory faulted in now, not in the first real map
    _warmed_s = time.perf_counter() - started
    return _warmed_s
