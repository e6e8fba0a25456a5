"""Retention planning over many partitions vs. listing the same tree with ``find``.

    python -m benchmarks.bench_retention [--partitions 10000] [--segments 20]

Builds (once, cached under ``benchmarks/.data/``) a log dir of P partitions × S segments, each
segment one small batch with its ``.index`` and ``.timeindex``, then times, warm cache:

* ``find <log dir> -type f`` — the floor: listing every file of the tree;
* planning retention for every partition in one process (what each of the DAG's ``plan_retention``
  shards does): walk each partition's segments as the planner asks;
* the whole ``kafkalog retention plan --json`` command, Python start-up included (it plans on every
  CPU it may use, ``--processes``).

Target (issue #3): planning within 5× the ``find`` time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._machine import describe
from kafkalog.format.batch import Record, build_batch
from kafkalog.log import names
from kafkalog.log.index import encode_time_index
from kafkalog.log.snapshot import LogDirCheckpoints, RetentionSource
from kafkalog.log.store import LogStore
from kafkalog.policy.retention import plan_retention

DATA = Path(__file__).resolve().parent / ".data"
T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
RECORDS_PER_SEGMENT = 10
TOPICS = 100


def build(root: Path, partitions: int, segments: int) -> None:
    """P partitions over 100 topics; segment i holds offsets [10 i, 10 i + 10) at T0 + i hours."""
    marker = root / ".complete"
    if marker.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    templates = []
    for i in range(segments):
        base = i * RECORDS_PER_SEGMENT
        records = [Record(base + j, T0 + i * HOUR_MS + j, b"key-%d" % j, b"v" * 80) for j in range(RECORDS_PER_SEGMENT)]
        time_entry = encode_time_index([(T0 + i * HOUR_MS + RECORDS_PER_SEGMENT - 1, base + RECORDS_PER_SEGMENT - 1)],
                                       base)
        templates.append((base, build_batch(records, partition_leader_epoch=0), time_entry))
    per_topic = max(1, partitions // TOPICS)
    topics = {}
    for p in range(partitions):
        topic, partition = f"bench-{p // per_topic}", p % per_topic
        topics[topic] = {"partitions": partition + 1, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
                         "config": {"retention.ms": str(10 * HOUR_MS)}}
        directory = root / f"{topic}-{partition}"
        directory.mkdir(exist_ok=True)
        for base, batch, time_entry in templates:
            names.log_file(directory, base).write_bytes(batch)
            names.index_file(directory, base).write_bytes(b"")
            names.time_index_file(directory, base).write_bytes(time_entry)
    (root / names.TOPIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "generation": 1, "topics": topics}))
    marker.touch()


def time_find(root: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["find", str(root), "-type", "f"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def time_plan(root: Path, now_ms: int) -> tuple[float, int]:
    started = time.perf_counter()
    store = LogStore([root])
    checkpoints = LogDirCheckpoints.read(root)
    deletable = 0
    for location in store.partitions():
        tp = location.topic_partition
        with RetentionSource(root, tp.topic, tp.partition, store.log_config(tp.topic), checkpoints) as source:
            deletable += len(plan_retention(source, now_ms).segments)
    return time.perf_counter() - started, deletable


def time_cli(root: Path, now_ms: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kafkalog.cli", "retention", "plan", "--log-dir", str(root),
                    "--now-ms", str(now_ms), "--json"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_retention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions, over 100 topics (default 10000)")
    parser.add_argument("--segments", type=int, default=20, help="segments per partition (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each; medians (default 3)")
    args = parser.parse_args()
    print(describe("bench_retention"), flush=True)
    root = DATA / f"retention-{args.partitions}x{args.segments}"
    started = time.perf_counter()
    build(root, args.partitions, args.segments)
    files = args.partitions * args.segments * 3
    print(f"data set: {root}\n  {args.partitions} partitions x {args.segments} segments = {files} files "
          f"(built/checked in {time.perf_counter() - started:.1f} s); retention.ms = 10 h, segment i's newest "
          "record at T0 + i h")
    time_find(root)  # warm the dentry and page caches for both sides
    find_s = statistics.median(time_find(root) for _ in range(args.runs))
    print(f"\n{'scenario':<34}{'what':<40}{'median s':>10}{'x find':>9}{'target':>9}")
    print(f"{'':<34}{'find <log dir> -type f':<40}{find_s:>10.2f}{1:>9.2f}")
    # Steady state: a cycle every few minutes finds about one expired segment per partition.
    # Backlog: retention was not run for hours; 15 of 20 segments per partition have expired.
    for label, expired in (("steady state (1 of 20 expired)", 1), ("backlog (15 of 20 expired)", 15)):
        now_ms = T0 + (10 + expired) * HOUR_MS
        time_plan(root, now_ms)
        plans = [time_plan(root, now_ms) for _ in range(args.runs)]
        plan_s = statistics.median(t for t, _ in plans)
        cli_s = statistics.median(time_cli(root, now_ms) for _ in range(args.runs))
        verdict = "PASS" if plan_s <= 5 * find_s else "FAIL"
        assert plans[0][1] == args.partitions * expired, plans[0][1]
        print(f"{label:<34}{'plan retention, in process':<40}{plan_s:>10.2f}{plan_s / find_s:>9.2f}"
              f"{verdict + ' <=5x':>9}")
        print(f"{'':<34}{'kafkalog retention plan --json (CLI)':<40}{cli_s:>10.2f}{cli_s / find_s:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
