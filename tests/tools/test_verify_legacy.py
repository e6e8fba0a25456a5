"""``verify`` on legacy (v0/v1) message sets as Kafka brokers wrote them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import run_cli
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kafkalog.log import names


def _store_with_wrapper(log_dir: Path, magic: int, wrapper_offset: int) -> None:
    """A gzip wrapper of three records (inner offsets 0-2: absolute in v0, relative in v1) at
    ``wrapper_offset`` as the partition's only segment."""
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t").code == 0
    builder = LegacyRecordBatchBuilder(magic, 1, 1 << 20)
    for i in range(3):
        builder.append(i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode())
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, wrapper_offset)
    names.log_file(log_dir / "t-0", 0).write_bytes(bytes(data))
    assert run_cli("recover", "--log-dir", str(log_dir)).code == 0


@pytest.mark.parametrize("magic", [0, 1])
def test_a_compressed_wrapper_s_records_lie_below_its_offset(tmp_path: Path, magic: int) -> None:
    """A compressed wrapper's offset is its last inner record's (Kafka's ``writeLegacyCompressedWrapperHeader``):
    its records at 0-2 below the wrapper's offset 2 are no problem."""
    _store_with_wrapper(tmp_path, magic, 2)
    done = run_cli("verify", "--log-dir", str(tmp_path))
    assert (done.code, done.out) == (0, "OK: 1 partitions, 1 batches, 3 records verified\n"), done.err
    consumed = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    assert [line.split("\t")[0] for line in consumed.out.splitlines()] == ["0", "1", "2"]


def test_a_v0_inner_offset_past_its_wrapper_s_is_reported(tmp_path: Path) -> None:
    _store_with_wrapper(tmp_path, 0, 1)  # inner offset 2 lies past the wrapper's 1
    done = run_cli("verify", "--log-dir", str(tmp_path))
    assert done.code == 1 and "record offsets are outside their batch or not increasing" in done.out
