"""Writing a new file front to back from a background thread, past the page cache where possible.

The cleaner writes each ``.cleaned`` segment once, front to back, and reads none of it back: the
output was verified in memory. Written through the page cache, every byte of it first takes a page
the kernel must allocate, fill and later write back and reclaim, all in system time charged to the
writing thread; where the hypervisor takes freed guest pages back, each such page costs more than the
copy itself. That CPU competes with the cleaning whenever every core is busy (several cleaners, or
Spark tasks). ``O_DIRECT`` moves the bytes from the staging buffer to the device without any of it.
Cleaned data is also the coldest data a partition has, so it should not push hot segments out of the
cache.

So the file is opened with ``O_DIRECT`` where the file system accepts it: whole blocks are written
from a block-aligned staging buffer, the few bytes past the last whole block wait there for the
next part, and the tail is written through the page cache at the end. Where ``O_DIRECT`` is refused
(ramfs, tmpfs before Linux 6.6, some network and FUSE file systems, or a platform without
it) the file is written through
the page cache instead, and the disk write of each part is started at once with
``sync_file_range`` so that the final fsync finds little left to do. Either way ``close`` fsyncs:
``O_DIRECT`` bypasses the page cache, not the disk's own write cache.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkalog.errors import KafkaLogError

# Offsets, lengths and buffer addresses of O_DIRECT writes are multiples of this. 4 KiB covers the
# logical block size of every disk Linux presents (512 B or 4 KiB) and is the page size.
BLOCK_BYTES = 4096
_O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_SYNC_FILE_RANGE_WRITE = 2
Part = bytes | memoryview | npt.NDArray[np.uint8]


def _load_sync_file_range() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load_sync_file_range()


class _Staging:
    """A block-aligned staging buffer, kept from file to file (it only grows): fresh memory costs
    more than the copy into it here. One per thread that opens writers, which write one at a time."""

    def __init__(self) -> None:
        self.raw = np.empty(0, dtype=np.uint8)

    def at_least(self, size: int, keep: int = 0) -> npt.NDArray[np.uint8]:
        """An aligned buffer of ``size`` bytes or more whose first ``keep`` bytes are as they were."""
        if len(self.raw) < size + BLOCK_BYTES:
            kept = self.aligned()[:keep].copy()
            self.raw = np.empty(max(size, len(self.raw) * 5 // 4) + BLOCK_BYTES, dtype=np.uint8)
            self.aligned()[:keep] = kept
        return self.aligned()

    def aligned(self) -> npt.NDArray[np.uint8]:
        skip = -self.raw.ctypes.data % BLOCK_BYTES
        return self.raw[skip:skip + max(len(self.raw) - BLOCK_BYTES, 0)]


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.staging = _Staging()


_per_thread = _PerThread()


class DirectWriter:
    """Writes ``path`` (created or truncated) from one background thread, one part at a time.

    ``write`` hands a part to the thread and returns once the part before it is written, so the
    caller may reuse a part's memory after the next ``write`` returns (two buffers used in turns).
    ``close`` writes what is left, fsyncs and closes; it raises the first write's error, if any.
    Use as a context manager: leaving it without ``close`` (on an error) stops the thread and closes
    the file without syncing."""

    def __init__(self, path: Path, *, direct: bool = True) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self.direct = direct and _O_DIRECT != 0
        if self.direct:
            try:
                self._fd = os.open(path, flags | _O_DIRECT, 0o666)
            except OSError as e:
                if e.errno != errno.EINVAL:  # EINVAL: this file system does not do O_DIRECT
                    raise
                self.direct = False
        if not self.direct:
            self._fd = os.open(path, flags, 0o666)
        self._staging = _per_thread.staging  # the opening thread's: its writer thread only borrows it
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-direct-writer")
        self._pending: Future[None] | None = None
        self._position = 0  # file offset of the next byte written to the file
        self._carry = 0  # bytes at the start of the staging buffer that wait for a whole block
        self.direct_bytes = 0  # written past the page cache
        self._closed = False

    # --- the caller's thread -------------------------------------------------------------------------
    def write(self, part: Part) -> None:
        self._wait()
        if len(part):
            self._pending = self._pool.submit(self._write, part)

    def close(self) -> int:
        """Write the rest, fsync, close; the file's size."""
        self._wait()
        try:
            if self._carry:
                self._buffered()  # the tail: less than a block, so not an O_DIRECT write
                self._write_carry()
            os.fsync(self._fd)
        finally:
            self._shutdown()
        return self._position

    def __enter__(self) -> DirectWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            try:
                if self._pending is not None:
                    self._pending.exception()  # wait; the error, if any, is the caller's to raise
            finally:
                self._shutdown()

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _shutdown(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True)
        os.close(self._fd)

    # --- the writer thread ---------------------------------------------------------------------------
    def _write(self, part: Part) -> None:
        if not self.direct:
            self._write_carry()  # left by O_DIRECT writes before a switch to the page cache
            start = self._position
            self._write_all(part.data if isinstance(part, np.ndarray) else part)
            if _sync_file_range is not None:  # advisory: start the disk write now, fsync waits for it
                _sync_file_range(self._fd, start, len(part), _SYNC_FILE_RANGE_WRITE)
            return
        end = self._carry + len(part)
        staging = self._staging.at_least(end, keep=self._carry)
        staging[self._carry:end] = np.frombuffer(part, dtype=np.uint8)
        whole = end - end % BLOCK_BYTES
        if whole:
            try:
                self._write_all(staging[:whole].data)
            except OSError as e:
                if e.errno != errno.EINVAL or self._position:
                    raise
                self._buffered()  # the file system took the open but not the write: page cache it is
                self._write_all(staging[:whole].data)
        self._carry = end - whole
        staging[:self._carry] = staging[whole:end]

    def _write_carry(self) -> None:
        if self._carry:
            self._write_all(self._staging.aligned()[:self._carry].data)
            self._carry = 0

    def _buffered(self) -> None:
        if self.direct:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
            self.direct = False

    def _write_all(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            written = os.pwrite(self._fd, view, self._position)
            if written <= 0:
                raise KafkaLogError(f"{self.path}: write returned {written}")
            self._position += written
            view = view[written:]
            if self.direct:
                self.direct_bytes += written
            if len(view) and self._position % BLOCK_BYTES:
                self._buffered()  # a short write left the offset off a block boundary
