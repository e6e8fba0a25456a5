"""Whole commands, as users and the pipeline's task processes run them, against their peers.

    python -m benchmarks.bench_cli [--runs 5] [--only NAME ...] [--quick]

Every contestant is a fresh process (``kafkalog`` is the venv's console script), timed by wall clock
from spawn to exit; rounds interleave the contestants so that outside load falls on both alike, and
the table shows medians with the range over rounds. Inputs are built once under ``benchmarks/.data/``
(shared with ``bench_decode``, ``bench_compaction`` and ``bench_retention``) and read warm.

Scenarios (kafkalog's command; its peer or limit; the floor from issue #25):

- help: ``kafkalog --help``; a limit (``python -c pass`` shown for scale); <= 0.25 s.
- describe: ``kafkalog topics describe --topic bench-0``; the same; <= 0.25 s.
- consume: ``kafkalog consume --max-records 10`` on the 200 MB segment; ``python -c pass``; reported.
- verify: ``kafkalog verify`` of a 200 MB uncompressed segment without index files; a fresh Python
  process decoding and CRC-checking the file with aiokafka's Cython parser; >= 1.5x the peer.
- compact: ``kafkalog compact --topic bench`` of a ~500 MB partition of ~900 k keys (a fresh copy
  each round, made untimed); ``cp -r`` + ``sync`` of the same files; >= 0.3x the peer.
- retention: ``kafkalog retention plan --json`` over 10,000 partitions x 20 segments;
  ``find <log dir> -type f``; at most 3x the peer's time.
- status: ``kafkalog status --json`` over the same store; ``find``; reported.
- recover: ``kafkalog recover`` on that store, healthy (every partition flushed to its recovery
  point, as kafkalog's writers leave it); a limit (``find`` shown for scale); <= 20 s.

"x peer" is the peer's time over kafkalog's: above 1 kafkalog is faster.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kafkalog
from benchmarks import bench_compaction, bench_decode, bench_retention
from benchmarks._machine import describe
from kafkalog.format.compression import CompressionType
from kafkalog.log import checkpoint, names
from kafkalog.log.store import LogStore

DATA = Path(__file__).resolve().parent / ".data"
BIN = Path(sys.executable).parent
KAFKALOG = str(BIN / "kafkalog")
T_RETENTION_NOW = bench_retention.T0 + 11 * bench_retention.HOUR_MS  # one segment of 20 expired

AIOKAFKA_VERIFY = """
import sys
from aiokafka.record.memory_records import MemoryRecords
with open(sys.argv[1], "rb") as f:
    records = MemoryRecords(f.read())
count = 0
while (batch := records.next_batch()) is not None:
    if not batch.validate_crc():
        sys.exit(f"CRC mismatch at offset {batch.base_offset}")
    for record in batch:
        record.offset, record.timestamp, record.key, record.value
        count += 1
print(count)
"""


@dataclass
class Contestant:
    name: str
    argv: Sequence[str]
    before: Callable[[], None] | None = None  # untimed set-up before each run (a fresh copy)
    times: list[float] = field(default_factory=list)

    def run(self) -> None:
        if self.before is not None:
            self.before()
        started = time.perf_counter()
        done = subprocess.run(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: {' '.join(self.argv)} exited {done.returncode}:\n{done.stderr}")
        self.times.append(elapsed)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def spread(self) -> str:
        return f"{min(self.times):.2f}-{max(self.times):.2f}"


@dataclass
class Scenario:
    name: str
    ours: Contestant
    peer: Contestant
    floor: str  # "ratio>=X", "ratio<=X" (our time / peer's) or "seconds<=X"

    def verdict(self) -> tuple[str, str]:
        kind, _, value = self.floor.partition(":")
        limit = float(value)
        if kind == "seconds<=":
            return f"<= {limit:g} s", "PASS" if self.ours.median <= limit else "FAIL"
        speed = self.peer.median / self.ours.median
        if kind == "x>=":
            return f">= {limit:g}x", "PASS" if speed >= limit else "FAIL"
        if kind == "slower<=":
            return f"<= {limit:g}x peer", "PASS" if self.ours.median <= limit * self.peer.median else "FAIL"
        return "", ""


def verify_store(segment: Path) -> Path:
    """A one-partition store holding (a hard link to) the 200 MB segment and no index files."""
    root = DATA / "cli-verify"
    log = root / "decode-0" / names.log_file(Path(), 0).name
    if not log.exists():
        if root.exists():
            shutil.rmtree(root)
        LogStore([root], create_missing=True).create_topic("decode", 1, {})
        for stale in log.parent.iterdir():
            if stale.name.endswith((names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX)):
                stale.unlink()
        log.hardlink_to(segment)
    return root


def mark_flushed(root: Path, partitions: int, segments: int) -> None:
    """The retention store as kafkalog's writers leave it: every partition flushed to its log end."""
    per_topic = max(1, partitions // bench_retention.TOPICS)
    end = segments * bench_retention.RECORDS_PER_SEGMENT
    checkpoint.write_offset_checkpoint(root / names.RECOVERY_POINT_CHECKPOINT,
                                       {(f"bench-{p // per_topic}", p % per_topic): end for p in range(partitions)})


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    python_pass = [sys.executable, "-c", "pass"]
    size_mb, partitions = (20, 500) if args.quick else (args.size_mb, args.partitions)
    retention_root = DATA / f"retention-{partitions}x20"
    segment = bench_decode.build_segments(200 if not args.quick else 20, 100, DATA)["uncompressed"]
    verify_root = verify_store(segment)
    compaction_source = DATA / f"compaction-v2-{size_mb}mb-none"
    out: list[Scenario] = []
    want = set(args.only or ())

    def wanted(name: str) -> bool:
        return not want or name in want

    if wanted("help"):
        out.append(Scenario("help", Contestant("kafkalog --help", [KAFKALOG, "--help"]),
                            Contestant("python -c pass", python_pass), "seconds<=:0.25"))
    if want & {"describe", "retention", "status", "recover"} or not want:
        started = time.perf_counter()
        bench_retention.build(retention_root, partitions, 20)
        mark_flushed(retention_root, partitions, 20)
        print(f"retention store: {retention_root} ({partitions} x 20 segments, built/checked in "
              f"{time.perf_counter() - started:.0f} s)", flush=True)
    log_dir = ["--log-dir", str(retention_root)]
    find = ["find", str(retention_root), "-type", "f"]
    if wanted("describe"):
        out.append(Scenario("describe", Contestant("kafkalog topics describe", [
            KAFKALOG, "topics", "describe", "--topic", "bench-0", *log_dir]),
            Contestant("python -c pass", python_pass), "seconds<=:0.25"))
    if wanted("consume"):
        out.append(Scenario("consume", Contestant("kafkalog consume --max-records 10", [
            KAFKALOG, "consume", "--log-dir", str(verify_root), "--topic", "decode", "--partition", "0",
            "--max-records", "10"]), Contestant("python -c pass", python_pass), "report:0"))
    if wanted("verify"):
        out.append(Scenario("verify", Contestant("kafkalog verify (200 MB)", [
            KAFKALOG, "verify", "--log-dir", str(verify_root)]),
            Contestant("aiokafka decode + CRC", [sys.executable, "-c", AIOKAFKA_VERIFY, str(segment)]), "x>=:1.5"))
    if wanted("compact"):
        started = time.perf_counter()
        info = bench_compaction.build(compaction_source, size_mb, CompressionType.NONE)
        print(f"compaction partition: {info['bytes'] / 1e6:.0f} MB, {info['records']} records, "
              f"{info['distinct_keys']} keys (built/checked in {time.perf_counter() - started:.0f} s)", flush=True)
        work, copy = DATA / "cli-compact-work", DATA / "cli-compact-cp"

        def fresh_copy() -> None:
            shutil.rmtree(work, ignore_errors=True)
            subprocess.run(["cp", "-r", str(compaction_source), str(work)], check=True)
            subprocess.run(["sync"], check=True)

        def no_copy() -> None:
            shutil.rmtree(copy, ignore_errors=True)
            subprocess.run(["sync"], check=True)

        out.append(Scenario("compact", Contestant("kafkalog compact (500 MB)", [
            KAFKALOG, "compact", "--log-dir", str(work), "--topic", "bench"], before=fresh_copy),
            Contestant("cp -r + sync", ["sh", "-c", f"cp -r '{compaction_source}' '{copy}' && sync"],
                       before=no_copy), "x>=:0.3"))
    if wanted("retention"):
        out.append(Scenario("retention", Contestant("kafkalog retention plan --json", [
            KAFKALOG, "retention", "plan", "--json", "--now-ms", str(T_RETENTION_NOW), *log_dir]),
            Contestant("find -type f", find), "slower<=:3"))
    if wanted("status"):
        out.append(Scenario("status", Contestant("kafkalog status --json", [
            KAFKALOG, "status", "--json", "--now-ms", str(T_RETENTION_NOW), *log_dir]),
            Contestant("find -type f", find), "report:0"))
    if wanted("recover"):
        out.append(Scenario("recover", Contestant("kafkalog recover (healthy)", [KAFKALOG, "recover", *log_dir]),
                            Contestant("find -type f", find), "seconds<=:20"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed rounds; medians are reported (default 5)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this scenario (repeatable): help, describe, consume, verify, compact, "
                             "retention, status, recover")
    parser.add_argument("--size-mb", type=int, default=500, help="the compaction partition's size (default 500)")
    parser.add_argument("--partitions", type=int, default=10_000, help="the retention store's partitions")
    parser.add_argument("--quick", action="store_true", help="small inputs, 1 round: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    print(describe("bench_cli", list(argv) if argv is not None else None), flush=True)
    # Measure commands as installed: `make install` byte-compiles the package, and where
    # PYTHONDONTWRITEBYTECODE is set a module edited since then would be compiled again by every command.
    compileall.compile_dir(Path(kafkalog.__file__).parent, quiet=1)
    table = scenarios(args)
    for s in table:  # one untimed round: page cache, dentries and numba's on-disk cache warm
        s.ours.run()
        s.peer.run()
        s.ours.times.clear()
        s.peer.times.clear()
    for _ in range(args.runs):
        for s in table:
            s.ours.run()
            s.peer.run()
    print(f"\n{'scenario':<10}{'kafkalog':<34}{'median s':>9}{'range':>12}  {'peer or limit':<24}"
          f"{'median s':>9}{'x peer':>8}  {'floor':<12}{'verdict':>7}")
    for s in table:
        floor, verdict = s.verdict()
        print(f"{s.name:<10}{s.ours.name:<34}{s.ours.median:>9.2f}{s.ours.spread():>12}  {s.peer.name:<24}"
              f"{s.peer.median:>9.2f}{s.peer.median / s.ours.median:>8.2f}  {floor:<12}{verdict:>7}")
    for s in table:
        if s.name == "compact":
            shutil.rmtree(DATA / "cli-compact-work", ignore_errors=True)
            shutil.rmtree(DATA / "cli-compact-cp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
