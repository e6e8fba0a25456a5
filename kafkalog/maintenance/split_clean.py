"""One partition's cleaning round in parts, for a driver that spreads the parts over workers.

``clean_partition`` runs a round in one process: key map, then for each segment group write and
swap, then checkpoint and journal. Here the same steps (the same functions of ``cleaner``) are
separate calls that share only files and small values, so that a huge partition can use many
workers (the Spark job):

1. the driver, holding the partition's cleaner lock until step 4: ``plan_split`` — leftovers of a
   crashed cleaner resolved, the segment groups (lists of source base offsets);
2. several workers in parallel: ``build_map_part`` — one of the maps that share the dirty range's
   keys by hash (each reads the whole range and checks the CRCs of its slice of the segments),
   saved under a prefix in a scratch dir every worker sees;
3. workers in parallel, each writing some of the groups: ``write_group`` (or a ``GroupWriter`` for
   several) — maps every part (copy-on-write), ORs their supersession bitmaps, and writes each
   group's verified ``.cleaned`` segment beside the sources; the log is unchanged;
4. the driver: ``swap_and_finish`` — each group swapped in under the partition lock (unless its
   sources changed since they were read), the cleaner checkpoint, the journal; or, when any part
   failed, ``discard`` — every ``.cleaned`` file removed, the log untouched.

Every worker opens the partition read-only with the same offsets and clocks, so it makes the
decisions one process would: the segments written are byte for byte those of ``clean_partition``.
A worker killed at any point leaves at most a ``.cleaned`` segment, which recovery, a retried
task or the next round removes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalog.errors import CleanerError
from kafkalog.log import names
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance.cleaner import (
    CleanedGroup,
    CleanerStats,
    CleanResult,
    build_key_map,
    dirty_segments,
    finish_round,
    open_clean_context,
    resolve_leftovers,
    swap_cleaned_group,
    write_cleaned_group,
)
from kafkalog.maintenance.key_map import HashedKeyMap, KeyMap


@dataclass(frozen=True)
class SplitRound:
    """What every part of one round gets: the range and the two clocks."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    wall_now_ms: int

    def open(self, store: LogStore) -> Any:
        location = store.locate(self.topic, self.partition)
        return open_clean_context(store, location, self.first_dirty_offset, self.first_uncleanable_offset,
                                  now_ms=self.now_ms, wall_now_ms=self.wall_now_ms)


def plan_split(store: LogStore, location: PartitionLocation, job: SplitRound) -> list[list[int]]:
    """Step 1 (driver, under the cleaner lock): the groups, as lists of source base offsets."""
    resolve_leftovers(location)
    if job.first_uncleanable_offset <= job.first_dirty_offset:
        return []
    return [[s.base_offset for s in group] for group in job.open(store).groups()]


def build_map_part(store: LogStore, job: SplitRound, part: int, parts: int, prefix: Path) -> dict[str, Any]:
    """Step 2: build and save the ``part``-th of the ``parts`` maps that share the keys by hash;
    returns its statistics."""
    started = time.perf_counter()
    stats = CleanerStats()
    build_key_map(job.open(store), stats, set(), part=part, parts=parts).save(prefix)
    return {"part": part, "map_records": stats.map_records, "map_keys": stats.map_keys,
            "dirty_bytes": stats.dirty_bytes, "map_seconds": time.perf_counter() - started}


class GroupWriter:
    """Step 3 for any number of groups of one round in one worker: the partition and the key map
    parts are opened once (~25 ms a group otherwise, as much as writing a small one)."""

    def __init__(self, store: LogStore, job: SplitRound, prefixes: list[Path]) -> None:
        self.ctx = job.open(store)
        self.key_map = HashedKeyMap([KeyMap.load(p) for p in prefixes], self.ctx.end_offset - 1)
        self._by_base = {s.base_offset: s for s in self.ctx.segments}
        # The map parts checked the CRCs of every dirty segment; the clean segments below the dirty
        # range are checked here, as in one process.
        self._verified = {s.base_offset for s in dirty_segments(self.ctx)}

    def write(self, sources: list[int]) -> dict[str, Any]:
        """Write one group's ``.cleaned`` segment against the saved key map parts."""
        started = time.perf_counter()
        missing = [b for b in sources if b not in self._by_base]
        if missing:
            raise CleanerError(f"{self.ctx.location.directory}: segments {missing} of a group to clean are gone")
        stats = CleanerStats()
        cleaned = write_cleaned_group(self.ctx, [self._by_base[b] for b in sources], self.key_map, stats,
                                      self._verified)
        stats.clean_seconds = time.perf_counter() - started
        return {"base_offset": cleaned.base_offset, "source_bases": cleaned.source_bases,
                "fingerprint": [list(f) for f in cleaned.fingerprint], "stats": stats.to_dict()}


def write_group(store: LogStore, job: SplitRound, sources: list[int], prefixes: list[Path]) -> dict[str, Any]:
    """Step 3: write one group's ``.cleaned`` segment against the saved key map parts."""
    return GroupWriter(store, job, prefixes).write(sources)


def swap_and_finish(store: LogStore, location: PartitionLocation, job: SplitRound, written: list[dict[str, Any]],
                    map_parts: list[dict[str, Any]], run_id: str = "") -> CleanResult:
    """Step 4 (driver, still under the cleaner lock): swap every written group, checkpoint, journal."""
    ctx = job.open(store)
    result = CleanResult(job.topic, job.partition, job.first_dirty_offset, ctx.end_offset)
    stats = result.stats
    for part in map_parts:
        stats.map_records += part["map_records"]
        stats.map_keys += part["map_keys"]
        stats.dirty_bytes += part["dirty_bytes"]
        stats.map_seconds = max(stats.map_seconds, part["map_seconds"])
    written = sorted(written, key=lambda g: g["base_offset"])
    for group in written:
        for key, value in group["stats"].items():
            if key in ("bytes_read", "bytes_written", "records_read", "records_written", "batches_copied",
                       "batches_rebuilt", "empty_batches_kept", "tombstones_removed", "aborted_records_removed",
                       "unkeyed_records_removed"):
                setattr(stats, key, getattr(stats, key) + value)
        stats.clean_seconds = max(stats.clean_seconds, group["stats"]["clean_seconds"])
    for i, group in enumerate(written):
        cleaned = CleanedGroup(group["base_offset"], list(group["source_bases"]),
                               [(int(b), int(size), int(mtime)) for b, size, mtime in group["fingerprint"]])
        try:
            swap_cleaned_group(ctx, cleaned)  # removes this group's .cleaned files if it fails
        except BaseException:
            discard(location, [g["base_offset"] for g in written[i + 1:]])
            raise
        result.groups.append((cleaned.source_bases, cleaned.base_offset))
    finish_round(ctx, result, run_id)
    return result


def discard(location: PartitionLocation, group_bases: list[int]) -> None:
    """Remove the ``.cleaned`` segments of a round that will not be swapped."""
    for base in group_bases:
        LogSegment(location.directory, base, suffix=names.CLEANED_SUFFIX).delete_files()
