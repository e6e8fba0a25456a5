"""``kafkalog demo``: the embedded default job — write a sample log dir, dump it and verify it.

It creates two topics in a fresh log dir (a delete-policy topic with one partition per codec and a
compacted changelog with tombstones), appends enough records to roll several segments, then prints
``kafka-dump-log`` style output of one segment, what retention would delete at the demo's clock and
why it waits for the rest, compacts the changelog, and verifies everything.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import TextIO

from kafkalog.errors import LogDirError
from kafkalog.format.compression import CompressionType
from kafkalog.log import names
from kafkalog.log.snapshot import RetentionSource
from kafkalog.log.store import LogStore
from kafkalog.maintenance.compact import compact
from kafkalog.policy.retention import plan_retention
from kafkalog.tools.dump import dump_files
from kafkalog.tools.verify import verify_store

DEMO_MARKER = ".kafkalog-demo"
BASE_TIMESTAMP_MS = 1_700_000_000_000


def write_demo_store(directory: Path) -> LogStore:
    """A fresh demo log dir (an earlier demo dir there is replaced, anything else is refused)."""
    directory = Path(directory)
    if directory.exists():
        if not (directory / DEMO_MARKER).exists():
            raise LogDirError(f"{directory} exists and is not a kafkalog demo dir; pick another --dir")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / DEMO_MARKER).touch()
    store = LogStore([directory])
    codecs = list(CompressionType)
    store.create_topic("demo-events", len(codecs), {"segment.bytes": "16384", "retention.ms": "3600000"})
    store.create_topic("demo-changelog", 1, {"cleanup.policy": "compact", "segment.bytes": "16384"})
    for partition, codec in enumerate(codecs):
        rows: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]] = [
            (None if i % 7 == 0 else f"user-{i % 50}".encode(),
             f'{{"event": {i}, "codec": "{codec.name_kafka}"}}'.encode(),
             (("source", b"demo"),) if i % 3 == 0 else (), BASE_TIMESTAMP_MS + i * 1000)
            for i in range(2000)
        ]
        with store.writable_log(store.locate("demo-events", partition)) as log:
            log.append_records(rows, compression=codec, batch_records=50, now_ms=BASE_TIMESTAMP_MS + 2_000_000)
    changelog = [(f"key-{i % 100}".encode(), None if i % 13 == 0 else f"v{i}".encode(), (),
                  BASE_TIMESTAMP_MS + i) for i in range(1500)]
    with store.writable_log(store.locate("demo-changelog", 0)) as log:
        log.append_records(changelog, batch_records=25, now_ms=BASE_TIMESTAMP_MS + 2_000_000)
    return store


def run_demo(directory: Path, out: TextIO) -> int:
    directory = Path(directory)
    store = write_demo_store(directory)
    out.write(f"Wrote a sample log dir at {directory}\n")
    for location in store.partitions():
        log = store.open_log(location, read_only=True)
        tp = location.topic_partition
        out.write(f"  {tp}: codec={_codec_of(tp.partition, tp.topic)} "
                  f"segments={len(log.segments)} log_end_offset={log.log_end_offset} bytes={log.size_in_bytes}\n")
    first = store.locate("demo-events", CompressionType.LZ4)
    segment = names.log_file(first.directory, 0)
    out.write("\n$ kafkalog dump --deep-iteration --files " + str(segment) + " (first 12 lines)\n")
    buffer = io.StringIO()
    dump_files([segment], deep_iteration=True, out=buffer, err=buffer)
    out.write("".join(buffer.getvalue().splitlines(keepends=True)[:12]))
    now_ms = BASE_TIMESTAMP_MS + 4_500_000  # the demo's clock: 75 min after its first record
    out.write("\n$ kafkalog retention plan --now-ms " + str(now_ms) + "  (retention.ms = 1 h on demo-events)\n")
    for location in store.partitions("demo-events"):
        tp = location.topic_partition
        with RetentionSource(location.log_dir, tp.topic, tp.partition, store.log_config(tp.topic),
                             store.log_dir_checkpoints(location.log_dir)) as source:
            plan = plan_retention(source, now_ms, broker=store.broker)
        out.write(f"  {tp}: {len(plan.segments)} segments ({plan.bytes} bytes) deletable; "
                  f"waiting: {'; '.join(str(b) for b in plan.blocked_by) or '-'}\n")
    result = compact(store, now_ms=now_ms, topic="demo-changelog")
    for cleaned in result.cleaned:
        s = cleaned.stats
        out.write(f"\n$ kafkalog compact --topic demo-changelog\n  {cleaned.topic}-{cleaned.partition}: "
                  f"cleaned [{cleaned.first_dirty_offset}, {cleaned.end_offset}): {s.records_read} -> "
                  f"{s.records_written} records, {s.bytes_read} -> {s.bytes_written} bytes\n")
    report = verify_store(store)
    records = sum(p.records for p in report.partitions)
    out.write(f"\n$ kafkalog verify\n{'OK' if report.ok else 'FAILED'}: {len(report.partitions)} partitions, "
              f"{records} records verified\n")
    for problem in report.all_problems():
        out.write(f"PROBLEM {problem}\n")
    return 0 if report.ok else 1


def _codec_of(partition: int, topic: str) -> str:
    return CompressionType(partition).name_kafka if topic == "demo-events" else "none"
