"""Cross-process locks, so a writer process and a maintenance process can share a partition.

``flock`` on a lock file: the kernel drops the lock when its holder dies, so a killed process never
leaves a partition locked. Appends and swaps hold the partition's exclusive lock for as long as a
write or a rename takes; readers take no lock (they only read whole batches, and a torn tail just
ends their scan).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from kafkalog.errors import LogLockedError
from kafkalog.log import names


@contextmanager
def file_lock(path: Path, *, exclusive: bool = True, timeout_s: float = 30.0,
              follow_dir_symlink: bool = True) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (created if missing); wait up to ``timeout_s`` (0: do not wait).
    Without ``follow_dir_symlink`` a directory that is a symlink is refused, not locked (nor written)
    through: a partition's lock is taken before anything in it changes."""
    if follow_dir_symlink:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    else:
        try:
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP) and path.parent.is_symlink():
                raise names.symlinked_partition_dir(path.parent) from None
            raise
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        except OSError as exc:  # named in full (a lock file that is a symlink is not followed either)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        finally:
            os.close(dir_fd)
    try:
        deadline = time.monotonic() + timeout_s
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LogLockedError(
                        f"{path.parent}: locked by another kafkalog process (waited {timeout_s:g} s)"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def partition_lock(partition_dir: Path, *, timeout_s: float = 30.0) -> AbstractContextManager[None]:
    """The exclusive lock of one partition directory (refused for a symlinked one)."""
    return file_lock(Path(partition_dir) / names.PARTITION_LOCK_FILE, timeout_s=timeout_s, follow_dir_symlink=False)


def cleaner_lock(partition_dir: Path, *, timeout_s: float = 0.0) -> AbstractContextManager[None]:
    """Held by a cleaner for as long as its ``.cleaned``/``.swap`` files are in flight; whoever opens
    the partition for writing resolves such files (crash leftovers) only if it can take this lock."""
    return file_lock(Path(partition_dir) / names.CLEANER_LOCK_FILE, timeout_s=timeout_s, follow_dir_symlink=False)


def log_dir_lock(log_dir: Path, *, timeout_s: float = 30.0) -> AbstractContextManager[None]:
    """The lock serialising topic administration (create/alter) within one log dir."""
    return file_lock(Path(log_dir) / names.ADMIN_LOCK_FILE, timeout_s=timeout_s)
