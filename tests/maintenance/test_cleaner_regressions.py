"""Regressions found outside the scenario tests (by the compaction benchmark)."""

from __future__ import annotations

from pathlib import Path

from kafkalog.format.compression import CompressionType
from kafkalog.log.store import LogStore
from kafkalog.maintenance.cleaner import clean_partition

T0 = 1_700_000_000_000


def test_rebuilding_highly_compressed_batches(tmp_path: Path) -> None:
    """Rebuilt records are assembled uncompressed before recompression: far larger than the file's
    compressed bytes when the values compress well."""
    store = LogStore([tmp_path], create_missing=True)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "20000"})
    location = store.locate("t", 0)
    with store.writable_log(location) as log:
        for round_ in range(4):
            rows = [(f"k{i % 40}".encode(), (b"x" * 2000) + str(round_).encode(), (), T0 + i) for i in range(200)]
            log.append_records(rows, compression=CompressionType.LZ4, batch_records=50, now_ms=T0)
        log.roll()
    result = clean_partition(store, location, 0, log.active_segment.base_offset, now_ms=T0, wall_now_ms=T0)
    assert result.stats.batches_rebuilt > 0
    assert result.stats.records_written == 40
    values = {}
    for columns, row in store.open_log(location, read_only=True).read_records(0):
        values[columns.key(row)] = columns.value(row)
    assert values == {f"k{i}".encode(): b"x" * 2000 + b"3" for i in range(40)}
