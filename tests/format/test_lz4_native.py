"""The compiled lz4 path (liblz4 called from the kernels, ``format/lz4_native.py``) against the
Python path (cramjam, one call per block): the same decoded records, the same cleaned bytes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kafkalog.format import lz4_native
from kafkalog.format.batch import Record, build_batch
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log.store import LogStore
from kafkalog.maintenance.cleaner import clean_partition

T0 = 1_700_000_000_000

pytestmark = pytest.mark.skipif(not lz4_native.AVAILABLE, reason="python-lz4's liblz4 symbols are missing")


def _values(rng: random.Random) -> list[bytes]:
    # Compressible, incompressible (stored blocks), empty, and sections over one 64 KiB block.
    return [b"", b"x" * 100, rng.randbytes(300), b"abc" * 30_000, rng.randbytes(70_000), b"json-like " * 9_000,
            bytes(rng.randrange(4) for _ in range(200_000))]


def _segment(codec: CompressionType) -> bytes:
    rng = random.Random(5)
    out, offset = b"", 0
    for value in _values(rng):
        records = [Record(offset + i, T0 + i, f"k{i % 3}".encode(), value[i:] or None) for i in range(4)]
        out += build_batch(records, compression_type=codec)
        offset += len(records)
    return out


def _decoded(raw: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    columns = scan_records(raw, scan_batches(raw))
    return [(int(columns.offset[i]), int(columns.timestamp[i]), columns.key(i), columns.value(i))
            for i in range(len(columns))]


def test_native_decompression_decodes_as_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every codec in one scan: the other codecs' sections are decoded whole on both paths.
    raw = b"".join(_segment(codec) for codec in CompressionType)
    native = _decoded(raw)
    monkeypatch.setattr(lz4_native, "AVAILABLE", False)
    assert native == _decoded(raw)
    assert len(native) == 28 * len(CompressionType) and native[13][3] == (b"abc" * 30_000)[1:]


def test_native_decompression_reports_a_corrupt_block_as_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = bytearray(_segment(CompressionType.LZ4))
    batches = scan_batches(bytes(raw))
    block = int(batches.position[3]) + 61 + 7 + 4  # the first block of batch 3 (its size word kept)
    raw[block + 2:block + 40] = b"\xff" * 38  # literal lengths that run past the block
    errors = []
    for available in (True, False):
        monkeypatch.setattr(lz4_native, "AVAILABLE", available)
        with pytest.raises(Exception) as caught:
            scan_records(bytes(raw), scan_batches(bytes(raw)), where="seg: ")
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1] and "seg: batch at byte" in errors[0][1]


def _cleaned(tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    monkeypatch.setattr(lz4_native, "AVAILABLE", native)
    store = LogStore([tmp_path], create_missing=True)
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    loc = store.locate("t", 0)
    rng = np.random.default_rng(3)
    with store.writable_log(loc) as log:
        for start in range(0, 3000, 100):
            values = [bytes(rng.integers(97, 100, int(rng.integers(0, 2000))).astype(np.uint8)) for _ in range(100)]
            log.append_records([(f"key-{int(k)}".encode(), v or None, (), T0 + start + i)
                                for i, (k, v) in enumerate(zip(rng.integers(0, 400, 100), values, strict=True))],
                               batch_records=100, compression=CompressionType.LZ4, now_ms=T0)
            if start % 1000 == 900:
                log.roll()
        log.roll()
    active = store.open_log(loc, read_only=True).active_segment.base_offset
    result = clean_partition(store, loc, 0, active, now_ms=T0, wall_now_ms=T0)
    assert result.stats.batches_rebuilt > 0
    return {p.name: p.read_bytes() for p in sorted(loc.directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex") and not p.name.endswith(".deleted")}


def test_native_recompression_writes_the_python_paths_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    native = _cleaned(tmp_path / "native", True, monkeypatch)
    python = _cleaned(tmp_path / "python", False, monkeypatch)
    assert native.keys() == python.keys() and len(native) >= 3
    assert native == python
