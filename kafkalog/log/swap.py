"""Replacing segments with cleaned ones, crash-safely (``LocalLog.replaceSegments``, spec §11.3).

1. the new segments are complete, verified ``*.cleaned`` files;
2. in *descending* base-offset order their files are renamed ``.cleaned → .swap``;
3. the old segments' files (and producer snapshots of old bases no new segment reuses) are renamed
   ``*.deleted``, oldest first, their mark time stamped as mtime (the sweep deletes them later);
4. the new segments are renamed ``.swap → final``; the directory is fsynced.

A crash before step 2 completes leaves ``.cleaned`` files: recovery deletes them and every ``.swap``
at or above the lowest one (why step 2 runs in descending order) — the old segments stay. A crash
after it leaves ``.swap`` files and no ``.cleaned``: recovery deletes the old files in the swapped
range and promotes the swaps. Either way the log is wholly old or wholly new (``log/loader.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log import names
from kafkalog.log.checkpoint import fsync_dir


def _segment_files(directory: Path, base: int, state: str) -> list[Path]:
    prefix = names.offset_prefix(base)
    return [directory / f"{prefix}{suffix}{state}" for suffix in names.SEGMENT_SUFFIXES]


def mark_deleted(paths: Sequence[Path], *, mark_time_ms: int) -> list[Path]:
    """Phase one of an asynchronous delete: stamp the mark time as mtime (so the
    ``file.delete.delay.ms`` clock survives restarts), then rename to ``*.deleted``. Missing files are
    skipped; returns the new paths."""
    marked: list[Path] = []
    mark_ns = mark_time_ms * 1_000_000  # exact: the sweep reads it back as st_mtime_ns // 10**6
    for path in paths:
        if path.exists():
            os.utime(path, ns=(mark_ns, mark_ns))
            target = path.with_name(path.name + names.DELETED_SUFFIX)
            path.replace(target)
            marked.append(target)
    return marked


def replace_segments(directory: Path, new_bases: Sequence[int], old_bases: Sequence[int], *,
                     mark_time_ms: int) -> list[Path]:
    """Swap ``<base>.*.cleaned`` segments in for the ``old_bases`` segments; returns the marked files.
    A new segment whose ``.log.cleaned`` is missing stops the swap before anything is renamed: the old
    segments would otherwise go with nothing in their place."""
    for base in new_bases:
        cleaned_log = names.log_file(directory, base, names.CLEANED_SUFFIX)
        if not cleaned_log.is_file():
            raise KafkaLogError(f"{cleaned_log}: missing at the swap; nothing was swapped")
    for base in sorted(new_bases, reverse=True):
        for path in _segment_files(directory, base, names.CLEANED_SUFFIX):
            if path.exists():
                path.replace(path.with_name(path.name[: -len(names.CLEANED_SUFFIX)] + names.SWAP_SUFFIX))
    fsync_dir(directory)
    marked: list[Path] = []
    for base in sorted(old_bases):
        files = _segment_files(directory, base, "")
        if base not in new_bases:
            files.append(names.snapshot_file(directory, base))
        marked += mark_deleted(files, mark_time_ms=mark_time_ms)
    for base in sorted(new_bases):
        for path in _segment_files(directory, base, names.SWAP_SUFFIX):
            if path.exists():
                path.replace(path.with_name(path.name[: -len(names.SWAP_SUFFIX)]))
    fsync_dir(directory)
    return marked
