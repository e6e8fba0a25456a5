"""The cleaner's file writer: the bytes land in order whatever the part sizes, O_DIRECT is used where
the file system takes it and the page cache elsewhere, and errors reach the caller."""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kafkalog.log.direct_writer import BLOCK_BYTES, DirectWriter


def _takes_o_direct(directory: Path) -> bool:
    probe = directory / "probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError as e:
        assert e.errno == errno.EINVAL
        return False
    finally:
        probe.unlink(missing_ok=True)
    return True


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


SIZES = [0, 1, BLOCK_BYTES - 1, 1, BLOCK_BYTES, BLOCK_BYTES + 1, 3 * BLOCK_BYTES - 7, 0, 5 << 20, 12_345, 7]


def _write_parts(path: Path, sizes: list[int], *, direct: bool = True) -> tuple[bytes, DirectWriter, int]:
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 256, size=n, dtype=np.uint8) for n in sizes]
    with DirectWriter(path, direct=direct) as writer:
        for part in parts:
            writer.write(part)
        size = writer.close()
    return b"".join(p.tobytes() for p in parts), writer, size


def test_parts_of_any_size_land_in_order(tmp_path: Path) -> None:
    fds = _open_fds()
    expected, writer, size = _write_parts(tmp_path / "out.log", SIZES)
    assert (tmp_path / "out.log").read_bytes() == expected
    assert size == len(expected) == sum(SIZES)
    # every whole block past the page cache where the file system allows, the tail through it
    assert writer.direct_bytes == (_whole_blocks(size) if _takes_o_direct(tmp_path) else 0)
    assert _open_fds() == fds


def test_a_part_that_is_a_whole_number_of_blocks_leaves_no_tail(tmp_path: Path) -> None:
    expected, writer, _size = _write_parts(tmp_path / "out.log", [BLOCK_BYTES, 2 * BLOCK_BYTES])
    assert (tmp_path / "out.log").read_bytes() == expected
    assert writer.direct_bytes == (3 * BLOCK_BYTES if _takes_o_direct(tmp_path) else 0)


def test_through_the_page_cache_when_asked(tmp_path: Path) -> None:
    expected, writer, size = _write_parts(tmp_path / "out.log", SIZES, direct=False)
    assert writer.direct_bytes == 0
    assert (tmp_path / "out.log").read_bytes() == expected and size == len(expected)


def _whole_blocks(size: int) -> int:
    return size - size % BLOCK_BYTES


@pytest.fixture
def ramfs(tmp_path: Path) -> Iterator[Path]:
    """A ramfs mount: a file system that refuses O_DIRECT at open (EINVAL), as some network and
    FUSE file systems do. Mounting needs root (CI here runs as root)."""
    mount_point = tmp_path / "ramfs"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "ramfs", "none", str(mount_point)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a ramfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_file_system_that_refuses_o_direct_gets_the_page_cache(ramfs: Path) -> None:
    assert not _takes_o_direct(ramfs)
    expected, writer, size = _write_parts(ramfs / "out.log", SIZES)
    assert (ramfs / "out.log").read_bytes() == expected and size == len(expected)
    assert writer.direct_bytes == 0


def test_a_file_system_that_takes_the_open_but_refuses_the_write(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Some file systems accept O_DIRECT at open and fail the first write with EINVAL; none does
    here, so the refusal is made by hand, for O_DIRECT writes only."""
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    expected, writer, size = _write_parts(tmp_path / "out.log", SIZES)
    assert (tmp_path / "out.log").read_bytes() == expected and size == len(expected)
    assert writer.direct_bytes == 0


def test_a_part_may_be_reused_once_the_next_write_returns(tmp_path: Path) -> None:
    """The caller cleans window i + 1 into the buffer of window i - 1: that buffer must be written."""
    buffers = [np.full(BLOCK_BYTES + 100, 1, dtype=np.uint8), np.full(2 * BLOCK_BYTES + 3, 2, dtype=np.uint8)]
    expected = b""
    with DirectWriter(tmp_path / "out.log") as writer:
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
        with pytest.raises(OSError) as failure, DirectWriter(tmp_path / "out.log") as writer:
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
    with pytest.raises(RuntimeError, match="the caller failed"), DirectWriter(tmp_path / "out.log") as writer:
        writer.write(np.ones(10, dtype=np.uint8))
        raise RuntimeError("the caller failed")
    assert _open_fds() == fds
    assert not any(t.name.startswith("kafkalog-direct-writer") for t in threading.enumerate())
