"""Bulk decode of a whole segment: kafkalog's numba scan against aiokafka's and kafka-python's parsers.

Issue acceptance: decoding a ~200 MB segment of uncompressed v2 batches (~111 B records, 20 B keys,
100 records per batch) must run >= 3x aiokafka's Cython parser and >= 40x kafka-python's record
classes; the same records with lz4 per batch must run >= 1.2x aiokafka.

What each contestant does, per run, on a ``bytes`` already in memory (warm, read once):

* kafkalog: ``scan_batches`` + ``find_corrupt_batch`` (CRC-32C of every batch) + ``scan_records``:
  offset, timestamp, key and value position/length of every record as numpy columns.
* aiokafka 0.14 (Cython ``_crecords``): ``MemoryRecords(data).next_batch()`` until None,
  ``validate_crc()`` per batch (and once more without it), then every record's offset, timestamp,
  key and value.
* kafka-python 3.0: the same loop with ``kafka.record.MemoryRecords``. At ~24 MB/s it runs on a
  batch-aligned prefix (default: the batches in the first 20 MB of the uncompressed segment, the same
  batches for lz4) and is compared by rate.

Inputs are built once with ``kafkalog.format.batch.build_batch`` and cached under ``benchmarks/.data/``
(keyed by size, batch size and a format version); nothing is built or read inside a timed region. The
numba kernels run once before timing: the first call (cache load, or compile on a cold cache) is
reported on its own. Times are medians of ``--repeat`` runs. After timing, an untimed pass checks
that every implementation decoded the same number of records and the same offsets, timestamps,
key/value lengths, and key/value bytes of a sample of records, so the race is fair.

MB/s counts bytes of the segment file (for lz4: compressed bytes as stored), 1 MB = 10**6 bytes.

Run from the project root::

    python -m benchmarks.bench_decode              # 200 MB, the acceptance run (~1-3 min)
    python -m benchmarks.bench_decode --quick      # 20 MB smoke run

The exit code is 0 whatever the result: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kafkalog.format import scan
from kafkalog.format.batch import Record, build_batch
from kafkalog.format.compression import CompressionType

DATA_DIR = Path(__file__).resolve().parent / ".data"
DATA_VERSION = 1  # bump when the generated records change, so stale caches are not reused
MB = 1_000_000

KEY_BYTES = 20
VALUE_BYTES = 82  # with a 20 B key and 100-record batches: ~111 B of log per record
TIMESTAMP_0 = 1_700_000_000_000
PRODUCER_ID = 4242

TARGETS = (  # (dataset, peer, minimum ratio kafkalog/peer)
    ("uncompressed", "aiokafka (+crc)", 3.0),
    ("uncompressed", "kafka-python (+crc)", 40.0),
    ("lz4", "aiokafka (+crc)", 1.2),
)


# --- inputs -------------------------------------------------------------------------------------------

def _records(rng: np.random.Generator, first_offset: int, count: int) -> list[Record]:
    """Records shaped like a typical event topic: a 20 B id key, an 82 B JSON value."""
    users = rng.integers(0, 10**15, size=count)
    amounts = rng.integers(0, 10**7, size=count)
    sessions = rng.integers(0, 2**63, size=count)
    kinds = rng.integers(0, 4, size=count)
    out = []
    for i in range(count):
        offset = first_offset + i
        key = b"user-%015d" % users[i]
        value = (b'{"event":"%s","amount":%d.%02d,"session":"%016x","seq":%d}'
                 % ((b"click", b"view", b"purchase", b"login")[kinds[i]], amounts[i] // 100,
                    amounts[i] % 100, sessions[i], offset)).ljust(VALUE_BYTES, b" ")[:VALUE_BYTES]
        out.append(Record(offset=offset, timestamp=TIMESTAMP_0 + offset // 3, key=key, value=value))
    return out


def build_segments(size_mb: int, records_per_batch: int, data_dir: Path,
                   rebuild: bool = False) -> dict[str, Path]:
    """Write (or reuse) an uncompressed segment of ``size_mb`` MB and an lz4 one of the same records."""
    stem = f"decode-v{DATA_VERSION}-{size_mb}mb-{records_per_batch}rpb"
    paths = {"uncompressed": data_dir / f"{stem}-none.log", "lz4": data_dir / f"{stem}-lz4.log"}
    if not rebuild and all(p.exists() for p in paths.values()):
        return paths
    data_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"building inputs ({size_mb} MB uncompressed + lz4) under {data_dir} ...", flush=True)
    rng = np.random.default_rng(20240601)
    tmp = {name: path.with_suffix(".tmp") for name, path in paths.items()}
    files = {name: path.open("wb") for name, path in tmp.items()}
    try:
        written, offset = 0, 0
        while written < size_mb * MB:
            records = _records(rng, offset, records_per_batch)
            common = dict(base_offset=offset, producer_id=PRODUCER_ID, producer_epoch=0,
                          base_sequence=offset % (2**31 - 1), partition_leader_epoch=0)
            plain = build_batch(records, **common)  # type: ignore[arg-type]
            files["uncompressed"].write(plain)
            files["lz4"].write(build_batch(records, compression_type=CompressionType.LZ4,
                                           **common))  # type: ignore[arg-type]
            written += len(plain)
            offset += records_per_batch
    finally:
        for f in files.values():
            f.close()
    for name, path in paths.items():
        os.replace(tmp[name], path)  # only complete files ever carry the cache name
    print(f"  built {offset:,} records in {time.perf_counter() - started:.1f} s", flush=True)
    return paths


# --- the contestants ------------------------------------------------------------------------------------

def kafkalog_decode(data: bytes) -> scan.RecordColumns:
    batches = scan.scan_batches(data)
    problem = scan.find_corrupt_batch(data, batches)
    if problem is not None:
        raise RuntimeError(problem)
    return scan.scan_records(data, batches)


def _aiokafka_records() -> type:
    from aiokafka.record import memory_records

    cls = memory_records.MemoryRecords
    if "_crecords" not in cls.__module__:
        raise RuntimeError(f"aiokafka's Cython parser is not in use ({cls.__module__}); "
                           "reinstall aiokafka from a binary wheel")
    return cls


def aiokafka_decode(data: bytes, check_crc: bool = True) -> int:
    records = _aiokafka_records()(data)
    last = -1
    while (batch := records.next_batch()) is not None:
        if check_crc and not batch.validate_crc():
            raise RuntimeError(f"aiokafka: CRC mismatch in batch at offset {batch.base_offset}")
        for record in batch:
            last = record.offset
            record.timestamp
            record.key
            record.value
    return last


def kafka_python_decode(data: bytes) -> int:
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    last = -1
    while (batch := records.next_batch()) is not None:
        if not batch.validate_crc():
            raise RuntimeError(f"kafka-python: CRC mismatch in batch at offset {batch.base_offset}")
        for record in batch:
            last = record.offset
            record.timestamp
            record.key
            record.value
    return last


# --- timing ---------------------------------------------------------------------------------------------

def time_runs(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


@dataclass
class Result:
    dataset: str
    implementation: str
    note: str
    nbytes: int
    records: int
    times: list[float]

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / MB / self.seconds

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def prefix_end(batches: scan.BatchColumns, limit_bytes: int) -> tuple[int, int]:
    """(end byte, batch count) of the longest run of whole batches within ``limit_bytes``."""
    ends = batches.position + batches.size
    count = max(int(np.searchsorted(ends, limit_bytes, side="right")), 1)
    return int(ends[count - 1]), count


def phase_breakdown(data: bytes, repeat: int) -> dict[str, float]:
    """Median seconds of each phase of kafkalog's bulk decode (private helpers timed one by one)."""
    phases: dict[str, list[float]] = {"scan_batches": [], "find_corrupt_batch": [],
                                      "decompress (arena)": [], "scan_records kernel": [],
                                      "crc32c of whole buffer (C limit)": []}
    from crc32c import crc32c

    arr = scan.as_array(data)
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        batches = scan.scan_batches(data)
        t1 = time.perf_counter()
        scan.find_corrupt_batch(data, batches)
        t2 = time.perf_counter()
        codec = batches.attributes & 0x07
        if codec.any():
            section, starts, ends = scan._decompress_sections(arr, batches, codec, "")
        else:
            section, starts, ends = arr, batches.position + 61, batches.position + batches.size
        t3 = time.perf_counter()
        total = int(batches.records_count.sum())
        out = np.empty((6, total), dtype=np.int64)
        out32 = np.empty((5, total), dtype=np.int32)
        log_append = (batches.attributes & 0x08) != 0
        scan._scan_records(section, starts, ends, batches.records_count, batches.base_offset,
                           batches.base_timestamp, log_append, batches.max_timestamp, out, out32)
        t4 = time.perf_counter()
        crc32c(data)
        t5 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            phases[name].append(seconds)
    return {name: statistics.median(v) for name, v in phases.items()}


# --- fairness check ------------------------------------------------------------------------------------

def peer_columns(make_records: Callable[[bytes], object], data: bytes,
                 sample: np.ndarray) -> dict[str, object]:
    """Every record's offset, timestamp, key/value length, and key/value bytes at ``sample``."""
    offsets, timestamps, key_lens, value_lens = [], [], [], []
    keys, values = {}, {}
    wanted = set(sample.tolist())
    records = make_records(data)
    i = 0
    while (batch := records.next_batch()) is not None:  # type: ignore[attr-defined]
        for record in batch:
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            key, value = record.key, record.value
            key_lens.append(-1 if key is None else len(key))
            value_lens.append(-1 if value is None else len(value))
            if i in wanted:
                keys[i], values[i] = key, value
            i += 1
    return {"offset": np.array(offsets, dtype=np.int64), "timestamp": np.array(timestamps, dtype=np.int64),
            "key_len": np.array(key_lens, dtype=np.int32), "value_len": np.array(value_lens, dtype=np.int32),
            "keys": keys, "values": values}


def check_same(name: str, ours: scan.RecordColumns, theirs: dict[str, object], count: int) -> list[str]:
    problems = []
    offsets = theirs["offset"]
    assert isinstance(offsets, np.ndarray)
    if len(offsets) != count:
        return [f"{name}: decoded {len(offsets):,} records, kafkalog {count:,}"]
    for column in ("offset", "timestamp", "key_len", "value_len"):
        if not np.array_equal(getattr(ours, column)[:count], theirs[column]):
            problems.append(f"{name}: column {column} differs from kafkalog's")
    for kind, getter in (("keys", ours.key), ("values", ours.value)):
        blobs = theirs[kind]
        assert isinstance(blobs, dict)
        bad = [i for i, blob in blobs.items() if getter(i) != blob]
        if bad:
            problems.append(f"{name}: {len(bad)} sampled {kind} differ, first at record {bad[0]}")
    return problems


# --- report ---------------------------------------------------------------------------------------------

def _ratio(ours: Result, peer: Result | None) -> str:
    return "" if peer is None else f"{ours.mb_per_s / peer.mb_per_s:.1f}x"


def print_report(results: list[Result], first_call: float, cache_before: bool,
                 phases: dict[str, dict[str, float]], sizes: dict[str, int], args: argparse.Namespace,
                 problems: list[str]) -> None:
    print()
    print(f"date: {datetime.date.today().isoformat()}   machine: {os.cpu_count()} cores, "
          f"{platform.machine()}, Python {platform.python_version()}   "
          f"command: python -m benchmarks.bench_decode {' '.join(sys.argv[1:])}".rstrip())
    print(f"numba first call (tiny input): {first_call * 1e3:.0f} ms "
          f"({'cache load' if cache_before else 'cold compile: no cache index before the call'})")
    print()
    by_key = {(r.dataset, r.implementation): r for r in results}
    header = ("| dataset | implementation | bytes decoded | records | median s | MB/s | records/s "
              "| kafkalog / this |")
    print(header)
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        ours = by_key[(r.dataset, "kafkalog")]
        vs = "" if r.implementation == "kafkalog" else _ratio(ours, r)
        print(f"| {r.dataset} | {r.implementation}{r.note} | {r.nbytes / MB:,.1f} MB | {r.records:,} "
              f"| {r.seconds:.3f} | {r.mb_per_s:,.0f} | {r.records_per_s / 1e6:.2f} M | {vs} |")
    print()
    print("| target | kafkalog / peer | needed | result |")
    print("|---|---:|---:|---|")
    for dataset, peer, needed in TARGETS:
        ours, theirs = by_key.get((dataset, "kafkalog")), by_key.get((dataset, peer))
        if ours is None or theirs is None:
            print(f"| {dataset}: kafkalog vs {peer} | - | {needed:g}x | not run |")
            continue
        ratio = ours.mb_per_s / theirs.mb_per_s
        verdict = "PASS" if ratio >= needed else "FAIL"
        print(f"| {dataset}: kafkalog vs {peer}{theirs.note} | {ratio:.2f}x | >= {needed:g}x | {verdict} |")
    print()
    print("kafkalog phases (median s; MB/s of the segment file):")
    names = list(next(iter(phases.values())))
    print("| phase | " + " | ".join(phases) + " |")
    print("|---|" + "---:|" * len(phases))
    for name in names:
        cells = [f"{phases[d][name]:.3f} s ({sizes[d] / MB / phases[d][name]:,.0f} MB/s)"
                 if phases[d][name] > 0 else "-" for d in phases]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    notes = [
        "MB/s = bytes of the segment file per second (lz4: compressed bytes as stored); 1 MB = 10^6 B.",
        f"kafka-python runs on a batch-aligned prefix ({args.kafka_python_mb} MB of the uncompressed "
        "segment, the same batches of the lz4 one); its ratio compares rates against kafkalog's full run.",
        "aiokafka (+crc) calls validate_crc() per batch, as kafkalog checks every CRC: the targets use it.",
    ]
    for note in notes:
        print("note: " + note)
    if problems:
        print("\nFAIRNESS CHECK FAILED:")
        for p in problems:
            print("  " + p)
    else:
        print("fairness check: all implementations decoded the same records (count, offsets, timestamps, "
              "key/value lengths, sampled key/value bytes).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_decode", description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=200, help="uncompressed segment size (default 200)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 MB, 3 repeats")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per contestant (median; >= 3)")
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--kafka-python-mb", type=int, default=20, help="prefix kafka-python decodes")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached inputs")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.repeat = 20, 3
        args.kafka_python_mb = min(args.kafka_python_mb, 5)
    args.repeat = max(args.repeat, 3)

    paths = build_segments(args.size_mb, args.records_per_batch, args.data_dir, args.rebuild)
    datasets = {name: path.read_bytes() for name, path in paths.items()}  # warm, outside any timing

    # numba: the first call loads the cached machine code (or compiles it); keep it out of the timings.
    cache_before = any(Path(scan.__file__).parent.joinpath("__pycache__").glob("scan._scan_records*.nbi"))
    def first_batch(data: bytes) -> bytes:
        return data[:12 + int.from_bytes(data[8:12], "big")]

    started = time.perf_counter()
    kafkalog_decode(first_batch(datasets["uncompressed"]))
    first_call = time.perf_counter() - started
    kafkalog_decode(first_batch(datasets["lz4"]))

    results: list[Result] = []
    phases: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    uncompressed_batches = scan.scan_batches(datasets["uncompressed"])
    _, prefix_batches = prefix_end(uncompressed_batches, args.kafka_python_mb * MB)
    for name, data in datasets.items():
        print(f"timing {name}: {len(data) / MB:,.1f} MB ...", flush=True)
        ours = kafkalog_decode(data)
        count = len(ours)
        batches = scan.scan_batches(data)
        end = int(batches.position[prefix_batches - 1] + batches.size[prefix_batches - 1])
        prefix = data[:end]
        prefix_count = int(batches.records_count[:prefix_batches].sum())

        results.append(Result(name, "kafkalog", "", len(data), count,
                              time_runs(lambda d=data: kafkalog_decode(d), args.repeat)))
        results.append(Result(name, "aiokafka (+crc)", "", len(data), count,
                              time_runs(lambda d=data: aiokafka_decode(d, True), args.repeat)))
        results.append(Result(name, "aiokafka (no crc)", "", len(data), count,
                              time_runs(lambda d=data: aiokafka_decode(d, False), args.repeat)))
        results.append(Result(name, "kafka-python (+crc)", f", {len(prefix) / MB:.1f} MB prefix", len(prefix),
                              prefix_count, time_runs(lambda p=prefix: kafka_python_decode(p), 3)))
        phases[name] = phase_breakdown(data, args.repeat)

        # Untimed fairness check: the peers must have decoded exactly what kafkalog did.
        from kafka.record import MemoryRecords as KafkaPythonRecords

        sample = np.unique(np.linspace(0, prefix_count - 1, 500).astype(np.int64))
        problems += check_same(f"{name}/aiokafka", ours, peer_columns(_aiokafka_records(), data, sample), count)
        problems += check_same(f"{name}/kafka-python", ours,
                               peer_columns(KafkaPythonRecords, prefix, sample), prefix_count)
        expected = int(batches.records_count.sum())
        if count != expected or not np.array_equal(ours.offset, np.arange(count)):
            problems.append(f"{name}/kafkalog: offsets are not 0..{expected - 1}")
        del ours

    print_report(results, first_call, cache_before, phases, {n: len(d) for n, d in datasets.items()}, args,
                 problems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
