"""The cleaner's file writer: the bytes land in order whatever the part sizes, and errors reach the caller."""

from __future__ import annotations

import errno
import os
import resource
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from kafkalog.log.background_writer import BackgroundWriter

BLOCK_BYTES = 4096


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


SIZES = [0, 1, BLOCK_BYTES - 1, 1, BLOCK_BYTES, BLOCK_BYTES + 1, 3 * BLOCK_BYTES - 7, 0, 5 << 20, 12_345, 7]


def _write_parts(path: Path, sizes: list[int]) -> tuple[bytes, BackgroundWriter, int]:
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 256, size=n, dtype=np.uint8) for n in sizes]
    with BackgroundWriter(path) as writer:
        for part in parts:
            writer.write(part)
        size = writer.close()
    return b"".join(p.tobytes() for p in parts), writer, size


def test_parts_of_any_size_land_in_order(tmp_path: Path) -> None:
    fds = _open_fds()
    expected, writer, size = _write_parts(tmp_path / "out.log", SIZES)
    assert (tmp_path / "out.log").read_bytes() == expected
    assert size == len(expected) == sum(SIZES)
    assert _open_fds() == fds


def test_a_part_may_be_reused_once_the_next_write_returns(tmp_path: Path) -> None:
    """The caller cleans window i + 1 into the buffer of window i - 1: that buffer must be written."""
    buffers = [np.full(BLOCK_BYTES + 100, 1, dtype=np.uint8), np.full(2 * BLOCK_BYTES + 3, 2, dtype=np.uint8)]
    expected = b""
    with BackgroundWriter(tmp_path / "out.log") as writer:
        for i in range(6):
            buffer = buffers[i % 2]
            buffer[:] = 10 + i
            writer.write(buffer)
            expected += buffer.tobytes()
        writer.close()
    assert (tmp_path / "out.log").read_bytes() == expected


def test_a_failed_write_reaches_the_caller_and_closes_the_file(tmp_path: Path) -> None:
    fds = _open_fds()
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (3 * BLOCK_BYTES, limit[1]))
    try:
        with pytest.raises(OSError) as failure, BackgroundWriter(tmp_path / "out.log") as writer:
            for _ in range(4):
                writer.write(np.zeros(2 * BLOCK_BYTES, dtype=np.uint8))
            writer.close()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert failure.value.errno == errno.EFBIG
    assert _open_fds() == fds


def test_leaving_without_close_stops_the_thread_and_closes_the_file(tmp_path: Path) -> None:
    fds = _open_fds()
    with pytest.raises(RuntimeError, match="the caller failed"), BackgroundWriter(tmp_path / "out.log") as writer:
        writer.write(np.ones(10, dtype=np.uint8))
        raise RuntimeError("the caller failed")
    assert _open_fds() == fds
    assert not any(t.name.startswith("kafkalog-background-writer") for t in threading.enumerate())
