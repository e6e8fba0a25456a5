"""``log.cleaner.io.max.bytes.per.second`` holds a cleaning round's I/O to the rate.

    python -m benchmarks.bench_cleaner_throttle [--size-mb 200] [--rates 100,40]

The data set is bench_compaction's (one partition of v2 batches of ~110-byte records, 5 updates per
key; cached under ``benchmarks/.data/``). Each row compacts a fresh copy in a fresh process: first
unthrottled (the peer: what the cleaner does without a limit), then at each rate in MB/s. A round's
I/O is what the throttle counts: the dirty segments read for the key map, read again for the rewrite,
and the cleaned segments written. Target: the measured rate within 10 % of each configured rate (the
throttle may only hold a round back, and checks its rate every 300 ms as Kafka's does).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._machine import describe
from benchmarks.bench_compaction import DATA, build, time_cp
from kafkalog.format.compression import CompressionType

_CHILD = """
import json, sys, time
from pathlib import Path
from kafkalog.log.config import BrokerConfig
from kafkalog.log.store import LogStore
from kafkalog.maintenance.compact import snapshot_compacted_logs
from kafkalog.maintenance.cleaner import clean_partition
from kafkalog.maintenance.warmup import warm
from kafkalog.policy.compaction import log_to_clean
warm()
rate = sys.argv[3]
store = LogStore([Path(sys.argv[1])], BrokerConfig.from_properties(
    {"log.cleaner.io.max.bytes.per.second": rate} if rate != "none" else {}))
snapshot = snapshot_compacted_logs(store, "bench", 0)[0][0]
target = log_to_clean(snapshot, int(sys.argv[2]))
t = time.perf_counter()
result = clean_partition(store, store.locate("bench", 0), target.first_dirty_offset, target.first_uncleanable_offset,
                         now_ms=int(sys.argv[2]))
print(json.dumps({"clean_s": time.perf_counter() - t, "stats": result.stats.to_dict()}))
"""


def compact(work: Path, rate_bytes_per_s: float | None) -> tuple[float, int]:
    """(seconds, bytes counted by the throttle) of one round in a fresh process."""
    now_ms = int(time.time() * 1000)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(work), str(now_ms),
                          "none" if rate_bytes_per_s is None else repr(rate_bytes_per_s)],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"compaction failed:\n{out.stderr}")
    doc = json.loads(out.stdout)
    stats = doc["stats"]
    return float(doc["clean_s"]), int(stats["dirty_bytes"] + stats["bytes_read"] + stats["bytes_written"])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cleaner_throttle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200, help="partition size to build (default 200)")
    parser.add_argument("--rates", default="100,40", help="configured rates in MB/s (default 100,40)")
    args = parser.parse_args()
    print(describe("bench_cleaner_throttle"), flush=True)
    source = DATA / f"compaction-v2-{args.size_mb}mb-{CompressionType.NONE.name_kafka}"
    info = build(source, args.size_mb, CompressionType.NONE)
    work = DATA / "work-throttle"
    time_cp(source, work)
    compact(work, None)  # untimed: fills numba's cache and the page cache
    rows = []
    for rate_mb in [None, *(float(r) for r in args.rates.split(","))]:
        time_cp(source, work)
        seconds, moved = compact(work, None if rate_mb is None else rate_mb * 1e6)
        rows.append((rate_mb, seconds, moved))
    print(f"\n{info['bytes'] / 1e6:.0f} MB partition, {info['records']} records")
    print(f"{'configured MB/s':>16}{'round s':>9}{'I/O MB':>8}{'measured MB/s':>15}{'x configured':>14}{'verdict':>9}")
    for rate_mb, seconds, moved in rows:
        measured = moved / 1e6 / seconds
        if rate_mb is None:
            print(f"{'unthrottled':>16}{seconds:>9.2f}{moved / 1e6:>8.0f}{measured:>15.1f}{'':>14}{'peer':>9}")
            continue
        ratio = measured / rate_mb
        print(f"{rate_mb:>16.0f}{seconds:>9.2f}{moved / 1e6:>8.0f}{measured:>15.1f}{ratio:>14.2f}"
              f"{'PASS' if 0.9 <= ratio <= 1.1 else 'FAIL':>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
