"""Bulk decode of a whole segment: kafkalog's numba scan against aiokafka's and kafka-python's parsers.

Issue acceptance: decoding a ~200 MB segment of uncompressed v2 batches (~111 B records, 20 B keys,
100 records per batch) must run >= 3x aiokafka's Cython parser and >= 40x kafka-python's record
classes; the same records with lz4 per batch (Kafka's LZ4 frame) must run >= 1.2x aiokafka.

What each contestant does per run, on a ``bytes`` read into memory once (warm page cache):

* kafkalog: ``scan_batches`` + ``find_corrupt_batch`` (CRC-32C of every batch) + ``scan_records``:
  offset, timestamp, key and value position/length of every record as numpy columns.
* aiokafka 0.14, Cython ``_crecords``: ``MemoryRecords(data).next_batch()`` until None,
  ``validate_crc()`` per batch (the same work as kafkalog; also timed without it), then every
  record's offset, timestamp, key and value.
* kafka-python 3.0: the same loop with ``kafka.record.MemoryRecords``. Its pure-Python record classes
  build several objects per record, so it decodes only a batch-aligned prefix (the batches in the
  first ``--kafka-python-mb`` MB of the uncompressed segment, the same batches of the lz4 one) and is
  compared by rate.

Inputs are built with ``kafkalog.format.batch.build_batch`` and cached under ``benchmarks/.data/``
(keyed by size, batch size and a data version); nothing is built or read inside a timed region. The
numba kernels run once before timing; that first call (cache load, or compile on a cold cache) is
reported on its own. The contestants run in interleaved rounds, so load from other processes on a
shared machine falls on all of them alike; each figure is the median of ``--repeat`` rounds
(kafka-python: of 3), by wall clock (the verdicts) and by this process's CPU time (a cross-check that
outside load barely moves). Every timed run follows an untimed run of the same contestant, so all of
them are measured in the steady state of decoding segment after segment (see ``run_rounds``). An
untimed pass afterwards checks that every implementation decoded the same records: count, every
offset, timestamp and key/value length, and the key and value bytes of a sample.

MB/s counts bytes of the segment file (lz4: the compressed bytes as stored); 1 MB = 10**6 bytes.

Run from the project root::

    python -m benchmarks.bench_decode              # 200 MB, the acceptance run
    python -m benchmarks.bench_decode --quick      # 20 MB smoke run

The exit code is 0 whatever the result: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import cramjam
import numba
import numpy as np
from crc32c import crc32c as c_crc32c

from benchmarks._machine import describe
from kafkalog.format import scan
from kafkalog.format.batch import RECORD_BATCH_OVERHEAD, TIMESTAMP_TYPE_MASK, Record, build_batch
from kafkalog.format.compression import CompressionType

DATA_DIR = Path(__file__).resolve().parent / ".data"
DATA_VERSION = 1  # bump when the generated records change, so stale cached inputs are not reused
MB = 1_000_000

VALUE_BYTES = 82  # with a 20 B key, 100-record batches come to ~111 B of log per record
TIMESTAMP_0 = 1_700_000_000_000
PRODUCER_ID = 4242

KAFKALOG = "kafkalog"
AIOKAFKA_CRC, AIOKAFKA_NO_CRC, KAFKA_PYTHON = "aiokafka (+crc)", "aiokafka (no crc)", "kafka-python (+crc)"
TARGETS = (  # (dataset, peer, kafkalog/peer needed)
    ("uncompressed", AIOKAFKA_CRC, 3.0),
    ("uncompressed", KAFKA_PYTHON, 40.0),
    ("lz4", AIOKAFKA_CRC, 1.2),
)


# --- inputs -------------------------------------------------------------------------------------------

def _records(rng: np.random.Generator, first_offset: int, count: int) -> list[Record]:
    """Records shaped like an event topic: a 20 B id key, an 82 B JSON value (lz4 gets ~1.9:1)."""
    users = rng.integers(0, 10**15, size=count).tolist()
    amounts = rng.integers(0, 10**7, size=count).tolist()
    sessions = rng.integers(0, 2**63, size=count).tolist()
    kinds = rng.integers(0, 4, size=count).tolist()
    out = []
    for i in range(count):
        offset = first_offset + i
        value = (b'{"event":"%s","amount":%d.%02d,"session":"%016x","seq":%d}'
                 % ((b"click", b"view", b"purchase", b"login")[kinds[i]], amounts[i] // 100,
                    amounts[i] % 100, sessions[i], offset))
        out.append(Record(offset=offset, timestamp=TIMESTAMP_0 + offset // 3, key=b"user-%015d" % users[i],
                          value=value.ljust(VALUE_BYTES, b" ")[:VALUE_BYTES]))
    return out


def build_segments(size_mb: int, records_per_batch: int, data_dir: Path,
                   rebuild: bool = False) -> dict[str, Path]:
    """Write (or reuse) a ``size_mb`` MB uncompressed segment and an lz4 one of the same records."""
    stem = f"decode-v{DATA_VERSION}-{size_mb}mb-{records_per_batch}rpb"
    paths = {"uncompressed": data_dir / f"{stem}-none.log", "lz4": data_dir / f"{stem}-lz4.log"}
    if not rebuild and all(p.exists() for p in paths.values()):
        return paths
    data_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"building inputs ({size_mb} MB uncompressed + the same records with lz4) under {data_dir} ...",
          flush=True)
    rng = np.random.default_rng(20240601)
    tmp = {name: path.with_suffix(".tmp") for name, path in paths.items()}
    files = {name: path.open("wb") for name, path in tmp.items()}
    try:
        written, offset = 0, 0
        while written < size_mb * MB:
            records = _records(rng, offset, records_per_batch)
            # An idempotent producer's batches (the default since Kafka 3.0).
            producer: dict[str, Any] = dict(base_offset=offset, producer_id=PRODUCER_ID, producer_epoch=0,
                                            base_sequence=offset % (2**31 - 1), partition_leader_epoch=0)
            plain = build_batch(records, **producer)
            files["uncompressed"].write(plain)
            files["lz4"].write(build_batch(records, compression_type=CompressionType.LZ4, **producer))
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


def aiokafka_records_class() -> Any:
    from aiokafka.record import memory_records

    cls = memory_records.MemoryRecords
    if "_crecords" not in cls.__module__:  # the pure-Python fallback would make the race meaningless
        raise RuntimeError(f"aiokafka's Cython parser is not in use ({cls.__module__}); "
                           "reinstall aiokafka from a binary wheel")
    return cls


def aiokafka_decode(data: bytes, check_crc: bool = True) -> int:
    records = aiokafka_records_class()(data)
    last = -1
    while (batch := records.next_batch()) is not None:
        if check_crc and not batch.validate_crc():
            raise RuntimeError(f"aiokafka: CRC mismatch in the batch at offset {batch.base_offset}")
        for record in batch:
            last = record.offset
            record.timestamp  # noqa: B018 -- touching the field is the work being measured
            record.key  # noqa: B018
            record.value  # noqa: B018
    return last


def kafka_python_decode(data: bytes) -> int:
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    last = -1
    while (batch := records.next_batch()) is not None:
        if not batch.validate_crc():
            raise RuntimeError(f"kafka-python: CRC mismatch in the batch at offset {batch.base_offset}")
        for record in batch:
            last = record.offset
            record.timestamp  # noqa: B018
            record.key  # noqa: B018
            record.value  # noqa: B018
    return last


# --- timing ---------------------------------------------------------------------------------------------

@dataclass
class Contestant:
    dataset: str
    name: str
    nbytes: int
    records: int
    run: Callable[[], object]
    rounds: int
    note: str = ""
    times: list[float] = field(default_factory=list)  # wall clock
    cpu_times: list[float] = field(default_factory=list)  # this process's CPU time: blind to other load

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / MB / self.seconds

    @property
    def cpu_mb_per_s(self) -> float:
        return self.nbytes / MB / statistics.median(self.cpu_times)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def run_rounds(contestants: list[Contestant], rounds: int) -> None:
    """Interleave: round r runs every contestant once, so a burst of outside load hits all of them.

    Each timed run follows an untimed one of the same contestant: the steady state of decoding
    segment after segment, where memory freed by one decode is reused by the next. Without it, a
    contestant that allocates large arrays pays for fresh pages whenever it runs after a pause (a
    page fault per page, and more where the hypervisor takes freed guest memory back), which can cost
    more than the decode itself; ``fresh_memory_probe`` reports that cost on the machine at hand.
    """
    for r in range(rounds):
        for c in contestants:
            if r < c.rounds:
                c.run()
                gc.collect()
                started, cpu_started = time.perf_counter(), time.process_time()
                c.run()
                c.times.append(time.perf_counter() - started)
                c.cpu_times.append(time.process_time() - cpu_started)
        print(f"  round {r + 1}/{rounds} done", flush=True)


def fresh_memory_probe(nbytes: int = 256 * MB, pause: float = 3.0) -> tuple[float, float]:
    """Seconds to write ``nbytes`` of new numpy memory after an idle ``pause``, then (best of 3) at once."""
    time.sleep(pause)  # long enough for a balloon driver to report the freed pages to the host
    seconds = []
    for _ in range(4):
        started = time.perf_counter()
        np.empty(nbytes, dtype=np.uint8).fill(1)
        seconds.append(time.perf_counter() - started)
    return seconds[0], min(seconds[1:])


def prefix_batches(batches: scan.BatchColumns, limit_bytes: int) -> int:
    """How many whole batches fit in the first ``limit_bytes`` (at least one)."""
    return max(int(np.searchsorted(batches.position + batches.size, limit_bytes, side="right")), 1)


PHASES = (
    "scan_batches",
    "find_corrupt_batch (CRC of every batch)",
    "decompress to arena (scan._decompress_sections)",
    "scan_records kernel, newly allocated output arrays",
    "  same kernel, output arrays reused (no new pages)",
    "limit: crc32c of the whole buffer in one call",
    "limit: liblz4 alone, every block into one reused 64 KiB buffer",
)


def lz4_blocks(arr: scan.U8, batches: scan.BatchColumns, codec: scan.I64) -> list[memoryview]:
    """Every compressed lz4 block of the segment, as scan lists them (stored blocks are left out)."""
    pieces = np.empty((4, 2 * len(batches) + 16), dtype=np.int64)
    count = scan._list_pieces(arr, batches.position + RECORD_BATCH_OVERHEAD, batches.position + batches.size,
                              codec, scan._LZ4_HC, pieces)
    if count > pieces.shape[1]:
        raise RuntimeError(f"{count} lz4 blocks: more than the benchmark's segments have")
    view = arr.data
    return [view[start:start + length] for start, length, kind in zip(*pieces[1:, :count].tolist(), strict=True)
            if kind > 0]


def decompress_blocks(blocks: list[memoryview]) -> int:
    scratch = bytearray(1 << 16)
    decompress_into = cramjam.lz4.decompress_block_into
    return sum(decompress_into(block, scratch) for block in blocks)


def phase_breakdown(data: bytes, rounds: int) -> dict[str, float]:
    """Median CPU seconds of each phase of the bulk decode, timed one by one (scan's private helpers).

    CPU time, not wall clock: a phase takes milliseconds, so one burst of outside load would swamp it.
    Like the contestants, each timed step follows an untimed run of itself.
    """
    times: dict[str, list[float]] = {name: [] for name in PHASES}
    arr = scan.as_array(data)
    batches = scan.scan_batches(data)
    codec = batches.attributes & 0x07
    total = int(batches.records_count.sum())
    log_append = (batches.attributes & TIMESTAMP_TYPE_MASK) != 0
    reused = (np.empty((6, total), dtype=np.int64), np.empty((5, total), dtype=np.int32))
    compressed = bool(codec.any())

    def decompress() -> tuple[scan.U8, scan.I64, scan.I64]:
        if compressed:
            return scan._decompress_sections(arr, batches, codec, "")
        return arr, batches.position + RECORD_BATCH_OVERHEAD, batches.position + batches.size

    sections = decompress()
    blocks = lz4_blocks(arr, batches, codec) if compressed else []

    def kernel(out: tuple[np.ndarray, np.ndarray] | None) -> None:
        o, o32 = out or (np.empty((6, total), dtype=np.int64), np.empty((5, total), dtype=np.int32))
        scan._scan_records(sections[0], sections[1], sections[2], batches.records_count, batches.base_offset,
                           batches.base_timestamp, log_append, batches.max_timestamp, o, o32)

    steps: list[Callable[[], object] | None] = [
        lambda: scan.scan_batches(data),
        lambda: scan.find_corrupt_batch(data, batches),
        decompress if compressed else None,
        lambda: kernel(None),
        lambda: kernel(reused),
        lambda: c_crc32c(data),
        (lambda: decompress_blocks(blocks)) if compressed else None,
    ]
    for _ in range(rounds):
        for name, step in zip(PHASES, steps, strict=True):
            if step is None:
                continue
            step()  # warm-up, as in run_rounds
            gc.collect()
            started = time.process_time()
            step()
            times[name].append(time.process_time() - started)
    return {name: statistics.median(v) if v else float("nan") for name, v in times.items()}


# --- fairness -------------------------------------------------------------------------------------------

def peer_columns(records: Any, sample: set[int]) -> dict[str, Any]:
    """Every record's offset, timestamp, key/value length; key and value bytes of the ``sample``."""
    offsets, timestamps, key_lens, value_lens = [], [], [], []
    blobs: dict[int, tuple[bytes | None, bytes | None]] = {}
    i = 0
    while (batch := records.next_batch()) is not None:
        for record in batch:
            key, value = record.key, record.value
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            key_lens.append(-1 if key is None else len(key))
            value_lens.append(-1 if value is None else len(value))
            if i in sample:
                blobs[i] = (key, value)
            i += 1
    return {"offset": np.array(offsets, dtype=np.int64), "timestamp": np.array(timestamps, dtype=np.int64),
            "key_len": np.array(key_lens, dtype=np.int32), "value_len": np.array(value_lens, dtype=np.int32),
            "blobs": blobs}


def check_same(label: str, ours: scan.RecordColumns, theirs: dict[str, Any]) -> list[str]:
    count = len(theirs["offset"])
    problems = []
    for column in ("offset", "timestamp", "key_len", "value_len"):
        if not np.array_equal(getattr(ours, column)[:count], theirs[column]):
            problems.append(f"{label}: column {column} differs from kafkalog's")
    bad = [i for i, (key, value) in theirs["blobs"].items() if (ours.key(i), ours.value(i)) != (key, value)]
    if bad:
        problems.append(f"{label}: {len(bad)} sampled keys/values differ, the first at record {bad[0]}")
    return problems


def fairness_check(dataset: str, data: bytes, prefix: bytes, ours: scan.RecordColumns) -> list[str]:
    from kafka.record import MemoryRecords as KafkaPythonRecords

    problems = []
    if not np.array_equal(ours.offset, np.arange(len(ours))):
        problems.append(f"{dataset}/kafkalog: offsets are not 0..{len(ours) - 1}")
    prefix_count = len(scan.scan_records(prefix, scan.scan_batches(prefix)))
    sample = set(np.linspace(0, prefix_count - 1, 500).astype(np.int64).tolist())
    sample |= set(np.linspace(0, len(ours) - 1, 500).astype(np.int64).tolist())
    aio = peer_columns(aiokafka_records_class()(data), sample)
    if len(aio["offset"]) != len(ours):
        problems.append(f"{dataset}/aiokafka: {len(aio['offset']):,} records, kafkalog {len(ours):,}")
    problems += check_same(f"{dataset}/aiokafka", ours, aio)
    kp = peer_columns(KafkaPythonRecords(prefix), {i for i in sample if i < prefix_count})
    if len(kp["offset"]) != prefix_count:
        problems.append(f"{dataset}/kafka-python: {len(kp['offset']):,} records in the prefix, "
                        f"kafkalog {prefix_count:,}")
    problems += check_same(f"{dataset}/kafka-python", ours, kp)
    return problems


# --- report ---------------------------------------------------------------------------------------------

def print_report(contestants: list[Contestant], phases: dict[str, dict[str, float]], sizes: dict[str, int],
                 first_call: float, fresh: tuple[float, float], problems: list[str],
                 args: argparse.Namespace) -> None:
    by_key = {(c.dataset, c.name): c for c in contestants}
    print()
    print(describe("bench_decode"))
    print(f"numpy {np.__version__}, numba {numba.__version__}")
    kind = "cache load" if first_call < 1.0 else "longer than a cache load: probably a compile (cold cache)"
    print(f"numba kernels' first call (one batch of each dataset): {first_call * 1e3:,.0f} ms ({kind}); excluded below")
    print(f"fresh memory: writing 256 MB of new numpy memory after a 3 s pause took {fresh[0] * 1e3:,.0f} ms "
          f"({256 / fresh[0]:,.0f} MB/s), right after that (best of 3) {fresh[1] * 1e3:,.0f} ms "
          f"({256 / fresh[1]:,.0f} MB/s); timed runs follow a warm-up run, so they see the second case")
    print()
    print("| dataset | implementation | bytes decoded | records | median s | MB/s | records/s "
          "| kafkalog ÷ this | MB/s by CPU time | kafkalog ÷ this, CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in contestants:
        ours = by_key[(c.dataset, KAFKALOG)]
        ratio = "" if c.name == KAFKALOG else f"{ours.mb_per_s / c.mb_per_s:.2f}x"
        cpu_ratio = "" if c.name == KAFKALOG else f"{ours.cpu_mb_per_s / c.cpu_mb_per_s:.2f}x"
        print(f"| {c.dataset} | {c.name}{c.note} | {c.nbytes / MB:,.1f} MB | {c.records:,} | {c.seconds:.3f} "
              f"| {c.mb_per_s:,.0f} | {c.records_per_s / 1e6:.2f} M | {ratio} | {c.cpu_mb_per_s:,.0f} "
              f"| {cpu_ratio} |")
    print()
    print("| target | needed | kafkalog | result | (by CPU time) |")
    print("|---|---:|---:|---|---:|")
    for dataset, peer, needed in TARGETS:
        theirs, ours = by_key[(dataset, peer)], by_key[(dataset, KAFKALOG)]
        achieved = ours.mb_per_s / theirs.mb_per_s
        verdict = "PASS" if achieved >= needed else "**FAIL**"
        print(f"| {dataset}: ÷ {peer} | >= {needed:g}x | {achieved:.2f}x | {verdict} "
              f"| {ours.cpu_mb_per_s / theirs.cpu_mb_per_s:.2f}x |")
    print()
    print("kafkalog phase by phase (median CPU time; MB/s of the segment file):")
    print("| phase | " + " | ".join(phases) + " |")
    print("|---|" + "---:|" * len(phases))
    for name in PHASES:
        cells = []
        for dataset, seconds in ((d, phases[d][name]) for d in phases):
            cells.append("-" if seconds != seconds else
                         f"{seconds * 1e3:,.1f} ms ({sizes[dataset] / MB / seconds:,.0f} MB/s)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("notes:")
    print("- MB/s = bytes of the segment file per second (lz4: compressed bytes as stored); 1 MB = 10^6 B.")
    print(f"- kafka-python decodes a batch-aligned prefix (the batches in the first {args.kafka_python_mb} MB "
          "of the uncompressed segment; the same batches of the lz4 one), median of 3; its ratio "
          "compares that rate with kafkalog's full-segment rate.")
    print("- the targets use aiokafka (+crc): validate_crc() per batch, the same work as kafkalog's CRC check.")
    print("- verdicts use wall-clock medians; the CPU-time columns count only this process's CPU seconds, "
          "so load from other processes on a shared machine barely moves them: when the two disagree, "
          "the machine was busy.")
    if problems:
        print("\nFAIRNESS CHECK FAILED -- the figures above do not compare like with like:")
        for problem in problems:
            print("  - " + problem)
    else:
        print("- fairness check passed: every implementation decoded the same records (count, every "
              "offset, timestamp and key/value length; key and value bytes of ~1000 sampled records).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_decode",
                                     description="Bulk decode: kafkalog vs aiokafka vs kafka-python.")
    parser.add_argument("--size-mb", type=int, default=200, help="uncompressed segment size (default 200)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 MB, 3 rounds, 5 MB kafka-python")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds; medians (at least 3)")
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--kafka-python-mb", type=int, default=20, help="prefix kafka-python decodes (MB)")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="where inputs are cached")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached inputs")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.repeat, args.kafka_python_mb = 20, 3, min(args.kafka_python_mb, 5)
    args.repeat = max(args.repeat, 3)

    paths = build_segments(args.size_mb, args.records_per_batch, args.data_dir, args.rebuild)
    datasets = {name: path.read_bytes() for name, path in paths.items()}  # in memory before any timing

    def first_batch(data: bytes) -> bytes:
        return data[:12 + int.from_bytes(data[8:12], "big")]

    # The first call of the numba kernels loads their cached machine code, or compiles it.
    started = time.perf_counter()
    for data in datasets.values():
        kafkalog_decode(first_batch(data))
    first_call = time.perf_counter() - started

    fresh = fresh_memory_probe()
    n_prefix = prefix_batches(scan.scan_batches(datasets["uncompressed"]), args.kafka_python_mb * MB)
    contestants: list[Contestant] = []
    prefixes: dict[str, bytes] = {}
    for name, data in datasets.items():
        batches = scan.scan_batches(data)
        count = int(batches.records_count.sum())
        prefix = prefixes[name] = data[:int(batches.position[n_prefix - 1] + batches.size[n_prefix - 1])]
        prefix_count = int(batches.records_count[:n_prefix].sum())
        contestants += [
            Contestant(name, KAFKALOG, len(data), count, partial(kafkalog_decode, data), args.repeat),
            Contestant(name, AIOKAFKA_CRC, len(data), count, partial(aiokafka_decode, data), args.repeat),
            Contestant(name, AIOKAFKA_NO_CRC, len(data), count, partial(aiokafka_decode, data, False), args.repeat),
            Contestant(name, KAFKA_PYTHON, len(prefix), prefix_count, partial(kafka_python_decode, prefix), 3,
                       note=f", first {len(prefix) / MB:.1f} MB"),
        ]
    print(f"timing {len(contestants)} contestants in {args.repeat} interleaved rounds "
          f"({', '.join(f'{n} {len(d) / MB:,.1f} MB' for n, d in datasets.items())}) ...", flush=True)
    run_rounds(contestants, args.repeat)

    print("timing kafkalog's phases ...", flush=True)
    phases = {name: phase_breakdown(data, min(args.repeat, 5)) for name, data in datasets.items()}

    print("checking that all implementations decoded the same records ...", flush=True)
    problems: list[str] = []
    for name, data in datasets.items():
        problems += fairness_check(name, data, prefixes[name], kafkalog_decode(data))
        gc.collect()

    print_report(contestants, phases, {n: len(d) for n, d in datasets.items()}, first_call, fresh, problems,
                 args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
