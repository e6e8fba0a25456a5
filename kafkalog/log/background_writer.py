"""Writing a new file front to back from a background thread.

The cleaner writes each ``.cleaned`` segment once, front to back, a window of batches at a time, and
cleans the next window while the previous one is written: the file's writes overlap the CPU work
instead of following it. Each part's disk write is started at once (``sync_file_range``), so the
final fsync finds little left to do. The bytes go through the page cache: the swap reads the file
back to check its CRC-32C before anything is swapped, and finds it there.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kafkalog.errors import KafkaLogError

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


class BackgroundWriter:
    """Writes ``path`` (created or truncated) from one background thread, one part at a time.

    ``write`` hands a part to the thread and returns once the part before it is written, so the
    caller may reuse a part's memory after the next ``write`` returns (two buffers used in turns).
    ``close`` waits for the last part, fsyncs and closes; it raises the first write's error, if any.
    Use as a context manager: leaving it without ``close`` (on an error) stops the thread and closes
    the file without syncing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-background-writer")
        self._pending: Future[None] | None = None
        self._position = 0  # file offset of the next byte written
        self._closed = False

    def write(self, part: Part) -> None:
        self._wait()
        if len(part):
            self._pending = self._pool.submit(self._write, part)

    def close(self) -> int:
        """Write the rest, fsync, close; the file's size."""
        self._wait()
        try:
            os.fsync(self._fd)
        finally:
            self._shutdown()
        return self._position

    def __enter__(self) -> BackgroundWriter:
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

    def _write(self, part: Part) -> None:  # the writer thread
        start = self._position
        view = memoryview(part.data if isinstance(part, np.ndarray) else part).cast("B")
        while len(view):
            written = os.pwrite(self._fd, view, self._position)
            if written <= 0:
                raise KafkaLogError(f"{self.path}: write returned {written}")
            self._position += written
            view = view[written:]
        if _sync_file_range is not None:  # advisory: start the disk write now, fsync waits for it
            _sync_file_range(self._fd, start, self._position - start, _SYNC_FILE_RANGE_WRITE)
