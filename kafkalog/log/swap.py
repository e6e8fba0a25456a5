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
from collections.abc import Collection, Sequence
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log import names
from kafkalog.log.checkpoint import LeaderEpochBatch, LeaderEpochFileCache, fsync_dir


def _segment_files(directory: Path, base: int, state: str) -> list[Path]:
    return [directory / name for name in _segment_file_names(base, state)]


def _segment_file_names(base: int, state: str) -> list[str]:
    prefix = names.offset_prefix(base)
    return [f"{prefix}{suffix}{state}" for suffix in names.SEGMENT_SUFFIXES]


def mark_deleted(directory: Path, file_names: Sequence[str], *, mark_time_ms: int) -> list[str]:
    """Phase one of an asynchronous delete for files of ``directory``: stamp the mark time as mtime (so
    the ``file.delete.delay.ms`` clock survives restarts), then rename to ``*.deleted``. Missing files
    are skipped; returns the new names. Each file is reached through the directory's descriptor (one
    name for the kernel to resolve, not the whole path)."""
    marked: list[str] = []
    mark_ns = mark_time_ms * 1_000_000  # exact: the sweep reads it back as st_mtime_ns // 10**6
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in file_names:
            try:
                os.utime(name, ns=(mark_ns, mark_ns), dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            target = name + names.DELETED_SUFFIX
            os.replace(name, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            marked.append(target)
    finally:
        os.close(dir_fd)
    return marked


def mark_segments_deleted(directory: Path, bases: Sequence[int], *, log_start_offset: int, log_end_offset: int,
                          mark_time_ms: int, epochs: LeaderEpochBatch | None = None,
                          listed: Collection[str] | None = None,
                          leader_epochs: list[tuple[int, int]] | None = None) -> dict[int, list[str]]:
    """Phase one of Kafka's asynchronous delete (``deleteSegments``, spec §10.3) for the log's oldest
    segments at ``bases``, once the log start offset has moved to ``log_start_offset``: each segment's
    files (``.log`` first, so the segment leaves the log in one rename) and its producer snapshot are
    renamed to ``*.deleted``; then the leader epochs are aligned with the log that is left
    (``align_leader_epochs``; with ``epochs``, staged in that batch, which the caller commits while it
    still holds the partition's lock). Returns the marked file names of each base. A caller that listed
    the directory and read its ``leader-epoch-checkpoint`` under the lock it still holds passes both
    (``listed``: the names of its files; only those are marked), so neither is read again."""
    files = [name for base in bases for name in
             (*_segment_file_names(base, ""), names.offset_prefix(base) + names.SNAPSHOT_SUFFIX)
             if listed is None or name in listed]
    marked: dict[int, list[str]] = {base: [] for base in bases}
    for name in mark_deleted(directory, files, mark_time_ms=mark_time_ms):
        marked[names.offset_from_file_name(name)].append(name)
    # After the renames, so a crash before them leaves no entry starting above records still in the log.
    if epochs is not None:
        epochs.truncate(directory, log_start_offset=log_start_offset, log_end_offset=log_end_offset,
                        entries=leader_epochs)
    else:
        align_leader_epochs(directory, log_start_offset=log_start_offset, log_end_offset=log_end_offset)
    return marked


def align_leader_epochs(directory: Path, *, log_start_offset: int, log_end_offset: int) -> None:
    """``maybeIncrementLogStartOffset``'s truncation of the leader epochs (none start below the log),
    then the next load's (``truncateFromEnd``): an entry starting at the log end, which is what is left
    when every record went, goes now, so a later open changes nothing more."""
    epochs = LeaderEpochFileCache(directory / names.LEADER_EPOCH_CHECKPOINT)
    epochs.truncate_from_start(log_start_offset)
    epochs.truncate_from_end(log_end_offset)


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
        files = _segment_file_names(base, "")
        if base not in new_bases:
            files.append(names.snapshot_file(directory, base).name)
        marked += [directory / name for name in mark_deleted(directory, files, mark_time_ms=mark_time_ms)]
    for base in sorted(new_bases):
        for path in _segment_files(directory, base, names.SWAP_SUFFIX):
            if path.exists():
                path.replace(path.with_name(path.name[: -len(names.SWAP_SUFFIX)]))
    fsync_dir(directory)
    return marked
