"""Retention over many partitions: what each step costs per partition, and how that grows.

    python -m benchmarks.bench_scale [--partitions 1000,10000] [--due 5]

For each size, a log dir of P partitions × 20 segments over 100 topics (``bench_retention``'s data
set, with ``file.delete.delay.ms=0``), loaded once with ``kafkalog recover`` as any kafkalog-maintained
store is (cached under ``benchmarks/.data/``), is copied fresh (untimed), then each step runs as the
whole CLI command, in order, on that copy, with ``--due`` segments of every partition expired:

* ``find <log dir> -type f``: the floor for deciding, listing every file;
* ``retention plan --json``: deciding;
* ``retention apply``: marking the due segments ``.deleted`` (target: ≤ 3x plan);
* ``retention sweep``: deleting the marked files, against ``find <copy> -name '*.deleted' -delete`` on
  a second copy of the same marked store (target: ≤ 2x find);
* ``status``: the store's inventory afterwards.

Each row gives seconds, milliseconds per partition and the command's peak memory (``/usr/bin/time``).
The cost per partition should stay flat as P grows (target ±30 % from the smallest size).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._machine import describe
from benchmarks.bench_retention import DATA, HOUR_MS, T0, build
from kafkalog.log import names

SEGMENTS = 20
KAFKALOG = [sys.executable, "-m", "kafkalog.cli"]


def prepared(partitions: int) -> Path:
    """The cached store of ``partitions`` × 20 segments, recovered once (checkpoints, epochs, snapshots)."""
    root = DATA / f"scale-{partitions}x{SEGMENTS}"
    marker = root / ".recovered"
    if marker.exists():
        return root
    build(root, partitions, SEGMENTS)
    topics_file = root / names.TOPIC_CONFIG_FILE
    doc = json.loads(topics_file.read_text())
    for topic in doc["topics"].values():
        topic["config"]["file.delete.delay.ms"] = "0"  # the sweep right after the apply deletes all
    topics_file.write_text(json.dumps(doc))
    subprocess.run([*KAFKALOG, "recover", "--log-dir", str(root)], stdout=subprocess.DEVNULL, check=True)
    marker.touch()
    return root


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one command."""
    with tempfile.NamedTemporaryFile("r") as report:
        started = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *command], stdout=subprocess.DEVNULL,
                       check=True)
        elapsed = time.perf_counter() - started
        return elapsed, int(report.read().split()[-1]) / 1024


def copy(source: Path, target: Path) -> None:
    """A fresh copy, written back before anything is timed (else its writeback would slow what runs next)."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    subprocess.run(["sync"], check=True)


def measure(partitions: int, due: int, work: Path) -> list[tuple[str, float, float]]:
    source = prepared(partitions)
    store, marked = work / "store", work / "marked"
    copy(source, store)
    now_ms = T0 + (10 + due) * HOUR_MS  # retention.ms = 10 h; segment i's newest record at T0 + i h
    clock = ["--now-ms", str(now_ms)]
    rows = [("find -type f", *timed(["find", str(store), "-type", "f"]))]
    rows.append(("retention plan --json", *timed([*KAFKALOG, "retention", "plan", "--log-dir", str(store), *clock,
                                                  "--json"])))
    rows.append(("retention apply", *timed([*KAFKALOG, "retention", "apply", "--log-dir", str(store), *clock])))
    deleted = sum(1 for _ in store.rglob("*" + names.DELETED_SUFFIX))
    assert deleted >= partitions * due * 3, deleted  # .log, .index, .timeindex of each due segment
    copy(store, marked)
    rows.append(("retention sweep", *timed([*KAFKALOG, "retention", "sweep", "--log-dir", str(store)])))
    rows.append(("find -name *.deleted -delete",
                 *timed(["find", str(marked), "-name", "*" + names.DELETED_SUFFIX, "-delete"])))
    assert not any(store.rglob("*" + names.DELETED_SUFFIX))
    rows.append(("status", *timed([*KAFKALOG, "status", "--log-dir", str(store)])))
    shutil.rmtree(store)
    shutil.rmtree(marked)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1000,10000",
                        help="comma-separated store sizes, in partitions (default 1000,10000)")
    parser.add_argument("--due", type=int, default=5, help="expired segments per partition (default 5)")
    parser.add_argument("--work-dir", type=Path, default=DATA, help="where the timed copies go")
    args = parser.parse_args()
    sizes = [int(p) for p in args.partitions.split(",")]
    print(describe("bench_scale"), flush=True)
    print(f"{'partitions':>10}  {'step':<30}{'s':>8}{'ms/part':>9}{'peak MB':>9}  ratio", flush=True)
    first_per_partition: dict[str, float] = {}
    for partitions in sizes:
        rows = dict((step, (s, mb)) for step, s, mb in measure(partitions, args.due, args.work_dir))
        plan_s, find_delete_s = rows["retention plan --json"][0], rows["find -name *.deleted -delete"][0]
        ratios = {"retention apply": f"{rows['retention apply'][0] / plan_s:.1f}x plan (target <= 3x)",
                  "retention sweep": f"{rows['retention sweep'][0] / find_delete_s:.1f}x find -delete (target <= 2x)",
                  "retention plan --json": f"{plan_s / rows['find -type f'][0]:.1f}x find -type f"}
        for step, (seconds, peak_mb) in rows.items():
            per_partition = seconds * 1000 / partitions
            first = first_per_partition.setdefault(step, per_partition)
            growth = f"; {per_partition / first:.2f}x the per-partition cost at {sizes[0]}" \
                if partitions != sizes[0] else ""
            print(f"{partitions:>10}  {step:<30}{seconds:>8.2f}{per_partition:>9.3f}{peak_mb:>9.0f}  "
                  f"{ratios.get(step, '')}{growth}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
