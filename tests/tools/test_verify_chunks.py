"""``verify`` reads a segment a chunk at a time: what it finds must not depend on where chunks begin."""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import names
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore
from kafkalog.tools import verify

NOW = int(time.time() * 1000)


def _store(tmp_path: Path) -> tuple[LogStore, Path]:
    store = LogStore([tmp_path], create_missing=True)
    store.create_topic("t", 1, {"index.interval.bytes": "300"})
    with store.writable_log(store.locate("t", 0)) as log:
        for i in range(60):
            log.append_records([(b"k%d" % j, b"v" * (20 + i), (), NOW + i) for j in range(3)])
    return LogStore([tmp_path]), tmp_path / "t-0" / names.log_file(Path(), 0).name


def _batch_starts(segment: Path) -> list[int]:
    data, starts, at = segment.read_bytes(), [], 0
    while at < len(data):
        starts.append(at)
        at += 12 + struct.unpack_from(">i", data, at + 8)[0]
    return starts


def _report(store: LogStore, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int) -> verify.PartitionReport:
    monkeypatch.setattr(verify, "CHUNK_BYTES", chunk_bytes)
    return verify.verify_store(store, "t").partitions[0]


def test_small_chunks_see_what_one_read_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment = _store(tmp_path)
    whole = _report(store, monkeypatch, 8 << 20)
    assert (whole.batches, whole.records, whole.bytes, whole.problems) == (60, 180, segment.stat().st_size, [])
    assert len((segment.with_suffix(names.INDEX_SUFFIX)).read_bytes()) >= 8 * 10  # index entries to check
    for chunk_bytes in (64, 500, 1500):  # below a batch, a few batches, many
        small = _report(store, monkeypatch, chunk_bytes)
        assert (small.batches, small.records, small.bytes, small.problems) == (60, 180, whole.bytes, [])


def test_problems_in_a_later_chunk_name_their_byte_in_the_segment(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment = _store(tmp_path)
    starts = _batch_starts(segment)
    data = bytearray(segment.read_bytes())
    # A base offset (no CRC covers it) going back at batch 40, and a torn batch at the end.
    struct.pack_into(">q", data, starts[40], 3)
    segment.write_bytes(bytes(data) + data[starts[1]:starts[1] + 30])
    for chunk_bytes in (8 << 20, 700):
        problems = _report(store, monkeypatch, chunk_bytes).problems
        assert any(f"batch at byte {starts[40]} starts at offset 3, not after the previous batch's last offset 119"
                   in p for p in problems), problems
        assert any(f"30 bytes of an incomplete batch at byte {len(data)}" in p for p in problems), problems
    # A flipped record byte: the CRC check names the batch, counted from the chunk it was read in.
    data[starts[50] + 70] ^= 0xFF
    segment.write_bytes(bytes(data))
    problems = _report(store, monkeypatch, 700).problems
    crc = [p for p in problems if "crc" in p.lower()]
    assert len(crc) == 1, problems
    found = re.search(r"\(from byte (\d+)\): .*?byte (\d+)", crc[0])
    assert found is not None and int(found[1]) + int(found[2]) == starts[50], crc[0]


def test_batches_appended_after_the_last_read_are_not_problems(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment = _store(tmp_path / "store")
    index = segment.with_suffix(names.INDEX_SUFFIX)
    entries = len(index.read_bytes())
    chunks = LogSegment.scan_chunks

    def then_a_writer_appends(self: LogSegment, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from chunks(self, *args, **kwargs)
        # A producer, after verify's last read of the active segment and before it reads the index.
        with store.writable_log(store.locate("t", 0)) as log:
            for i in range(4):
                log.append_records([(b"late%d" % i, b"w" * 400, (), NOW + 100)])

    monkeypatch.setattr(LogSegment, "scan_chunks", then_a_writer_appends)
    report = _report(store, monkeypatch, 8 << 20)
    assert len(index.read_bytes()) > entries  # the index now points past what verify read
    assert (report.batches, report.records, report.problems) == (60, 180, [])
    monkeypatch.setattr(LogSegment, "scan_chunks", chunks)
    assert _report(store, monkeypatch, 8 << 20).problems == []


def test_half_a_batch_at_the_end_is_a_torn_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment = _store(tmp_path / "store")
    size = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(segment.read_bytes()[:_batch_starts(segment)[1]][:50])
    assert _report(store, monkeypatch, 8 << 20).problems == [
        f"{segment}: 50 bytes of an incomplete batch at byte {size} (a torn write; `kafkalog recover` "
        "truncates it)"]
