"""Compaction throughput vs. ``cp`` of the same bytes, uncompressed and lz4.

    python -m benchmarks.bench_compaction [--size-mb 1000] [--quick]

Data set (built once, cached under ``benchmarks/.data/``): one partition of ``--size-mb`` of v2
batches of 100 records, ~100-byte records (11-byte keys, 80-byte values), 1 distinct key per 5
records (so ~5 updates per key, spread over the whole log), ~1 % tombstones, in 256 MiB segments
(at least four; all but the small active segment cleanable), and the same records with lz4 batches.

Each round copies the cached partition into a work directory with ``cp -r`` + ``sync`` (the peer,
timed), then compacts the copy in a fresh process (``clean_partition``, timed inside the process:
key map, rewrite, verification, fsync and swap; Python start-up and the numba cache load are
reported separately) and reports its peak RSS. An untimed round comes first (with a cold numba
cache, the first compaction compiles the kernels). Targets (issue #4): uncompressed ≥ 0.35× cp, lz4
≥ 0.1× cp, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np

from benchmarks._machine import describe
from kafkalog.format.batch import assemble_batch
from kafkalog.format.compression import CompressionType, compress
from kafkalog.log.store import LogStore

DATA = Path(__file__).resolve().parent / ".data"
T0 = 1_700_000_000_000
RECORDS_PER_BATCH = 100
VALUE_BYTES = 80
KEY_BYTES = 11
SEGMENT_BYTES = 256 * 1024 * 1024


@numba.njit(cache=True, inline="always")
def _put_varint(out: np.ndarray, q: int, value: int) -> int:
    """Write a non-negative int as a zig-zag varint at ``q``; return the position after it."""
    z = value << 1
    while z >= 0x80:
        out[q] = (z & 0x7F) | 0x80
        q += 1
        z >>= 7
    out[q] = z
    return q + 1


@numba.njit(cache=True)
def _records_section(first_offset: int, keys: np.ndarray, tombstone: np.ndarray, value_seed: int) -> np.ndarray:
    """The records of one batch: key "k" + 10 digits, an 80-byte value or null; deltas ts=i, offset=i."""
    out = np.empty(len(keys) * 128, dtype=np.uint8)
    q = 0
    for i in range(len(keys)):
        # attributes, timestamp delta, offset delta, key length, key, null value length, header count
        body = 1 + (1 if i < 64 else 2) + (1 if i < 64 else 2) + 1 + KEY_BYTES + 1 + 1
        if not tombstone[i]:
            body += 1 + VALUE_BYTES  # value length 80 -> zig-zag 160 -> 2 bytes (not 1)
        q = _put_varint(out, q, body)
        out[q] = 0  # attributes
        q += 1
        q = _put_varint(out, q, i)  # timestamp delta
        q = _put_varint(out, q, i)  # offset delta
        out[q] = KEY_BYTES << 1
        q += 1
        out[q] = ord("k")
        k = keys[i]
        for d in range(10):
            out[q + 10 - d] = ord("0") + k % 10
            k //= 10
        q += KEY_BYTES
        if tombstone[i]:
            out[q] = 1  # varint(-1): null value
            q += 1
        else:
            out[q] = (VALUE_BYTES << 1) & 0x7F | 0x80
            out[q + 1] = (VALUE_BYTES << 1) >> 7
            q += 2
            # Half pseudo-random letters, half a repeated pattern: lz4 compresses it about 1.6:1,
            # like typical JSON payloads, rather than the 5:1 of a pure pattern.
            x = np.uint64(value_seed * 1000003 + i * 7919 + 1)
            for j in range(VALUE_BYTES):
                if j < VALUE_BYTES // 2:
                    x = x * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
                    out[q + j] = 97 + np.int64(x >> np.uint64(59))  # 32 letters and symbols
                else:
                    out[q + j] = 97 + (j % 26)
            q += VALUE_BYTES
        out[q] = 0  # no headers
        q += 1
    return out[:q]


def build(root: Path, size_mb: int, codec: CompressionType) -> dict[str, int]:
    marker = root / "bench-info.json"
    if marker.exists():
        cached: dict[str, int] = json.loads(marker.read_text())
        return cached
    if root.exists():
        shutil.rmtree(root)
    total_records = size_mb * 1_000_000 // 110
    distinct_keys = total_records // 5
    rng = np.random.default_rng(42)
    keys = rng.integers(0, distinct_keys, size=total_records)
    tombstones = rng.random(total_records) < 0.01
    store = LogStore([root], create_missing=True)
    # Segments of at most 256 MiB, at least four per log, so nearly all of it is cleanable.
    segment_bytes = min(SEGMENT_BYTES, size_mb * 1_000_000 // 4 // (5 if codec is CompressionType.LZ4 else 1))
    store.create_topic("bench", 1, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
    with store.writable_log(store.locate("bench", 0)) as log:
        for start in range(0, total_records, RECORDS_PER_BATCH):
            n = min(RECORDS_PER_BATCH, total_records - start)
            section = _records_section(start, keys[start:start + n], tombstones[start:start + n], start)
            body = section.tobytes()
            if codec is not CompressionType.NONE:
                body = compress(codec, body)
            raw = assemble_batch(start, 0, int(codec), n - 1, T0 + start, T0 + start + n - 1, -1, -1, -1, n, body)
            log.append_batch(raw, now_ms=T0)
    info = {"records": total_records, "distinct_keys": distinct_keys, "bytes": _size(root / "bench-0")}
    marker.write_text(json.dumps(info))
    return info


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def time_cp(source: Path, target: Path) -> float:
    if target.exists():
        shutil.rmtree(target)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - started


_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from kafkalog.log.store import LogStore
from kafkalog.maintenance.compact import snapshot_compacted_logs
from kafkalog.maintenance.cleaner import clean_partition
from kafkalog.maintenance.warmup import warm
from kafkalog.policy.compaction import log_to_clean
warm()  # numba's cache load, reported with the start-up
store = LogStore([Path(sys.argv[1])])
snapshot = snapshot_compacted_logs(store, "bench", 0)[0][0]
target = log_to_clean(snapshot, int(sys.argv[2]))
t1 = time.perf_counter()
result = clean_partition(store, store.locate("bench", 0), target.first_dirty_offset, target.first_uncleanable_offset,
                         now_ms=int(sys.argv[2]))
t2 = time.perf_counter()
print(json.dumps({"startup_s": t1 - t0, "clean_s": t2 - t1, "stats": result.stats.to_dict()}))
"""


def time_compaction(work: Path) -> dict[str, object]:
    now_ms = int(time.time() * 1000)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", _CHILD, str(work), str(now_ms)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"compaction failed:\n{out.stderr}")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    doc: dict[str, object] = json.loads(out.stdout)
    doc["peak_rss_mib"] = max(peak_kib, before) / 1024
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_compaction", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000, help="partition size to build (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="timed rounds; medians are reported (default 3)")
    parser.add_argument("--quick", action="store_true", help="100 MB, 1 run: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.runs = 100, 1
    print(describe("bench_compaction"), flush=True)
    rows = []
    for codec, target in ((CompressionType.NONE, 0.35), (CompressionType.LZ4, 0.10)):
        source = DATA / f"compaction-v2-{args.size_mb}mb-{codec.name_kafka}"
        started = time.perf_counter()
        info = build(source, args.size_mb, codec)
        print(f"{codec.name_kafka}: {info['bytes'] / 1e6:.0f} MB, {info['records']} records, "
              f"{info['distinct_keys']} distinct keys (built/checked in {time.perf_counter() - started:.0f} s)")
        work = DATA / "work"
        # An untimed round first: a cold numba cache compiles the kernels in the first compaction.
        time_cp(source, work)
        time_compaction(work)
        cps, cleans = [], []
        for _ in range(args.runs):
            cps.append(time_cp(source, work))
            cleans.append(time_compaction(work))
        shutil.rmtree(work)
        cp_s = statistics.median(cps)
        clean_s = statistics.median(float(c["clean_s"]) for c in cleans)  # type: ignore[arg-type]
        mb = info["bytes"] / 1e6
        median_run = sorted(cleans, key=lambda c: float(c["clean_s"]))[len(cleans) // 2]  # type: ignore[arg-type]
        print(f"{codec.name_kafka}: rounds (cp s, compact s, x cp): " + ", ".join(
            f"({c:.2f}, {float(d['clean_s']):.2f}, {c / float(d['clean_s']):.2f})"  # type: ignore[arg-type]
            for c, d in zip(cps, cleans, strict=True)))
        rows.append((codec.name_kafka, mb, cp_s, clean_s, target, median_run, median_run["stats"]))
    print(f"\n{'codec':<6}{'log MB':>8}{'cp+sync s':>11}{'cp MB/s':>9}{'compact s':>11}{'MB/s':>8}"
          f"{'x cp':>7}{'target':>8}{'verdict':>9}{'peak RSS MiB':>14}{'start-up s':>12}")
    for name, mb, cp_s, clean_s, target, doc, _stats in rows:
        ratio = (mb / clean_s) / (mb / cp_s)
        print(f"{name:<6}{mb:>8.0f}{cp_s:>11.2f}{mb / cp_s:>9.0f}{clean_s:>11.2f}{mb / clean_s:>8.0f}"
              f"{ratio:>7.2f}{target:>8.2f}{'PASS' if ratio >= target else 'FAIL':>9}"
              f"{float(doc['peak_rss_mib']):>14.0f}{float(doc['startup_s']):>12.2f}")  # type: ignore[arg-type]
    for name, *_rest, stats in rows:
        print(f"{name}: {json.dumps(stats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
