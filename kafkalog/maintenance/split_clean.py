"""One partition's cleaning round in parts, for a driver that spreads the parts over workers.

``clean_partition`` runs a round in one process: key map, then for each segment group write and
swap, then checkpoint and journal. Here the same steps (the same functions of ``cleaner``) run in
several workers at once that share only files, so that a huge partition can use many cores (the
Spark job):

1. the driver, holding the partition's cleaner lock until step 3: ``plan_split`` — leftovers of a
   crashed cleaner resolved, the segment groups (lists of source base offsets);
2. every worker of the round, in parallel: ``run_split_task`` on a ``Board``, a scratch dir every
   worker sees. A worker first takes a key-map part nobody holds (``map_parts`` maps that share the
   keys by hash) and builds it from the last dirty segment to the first, publishing each segment's
   supersession bits once they are final (every later record is in). Any worker writes a group as
   soon as every part has published its segments: the latest groups, which keep the most records,
   are written while the map goes on. A group that also holds clean-prefix records needs the
   whole map: its parts are saved when they are done, and the group is written from them. Groups
   are claimed with a lock each and published with their result; a worker returns once every group
   is. A worker that dies releases its locks: its part or its group is taken over, from the start;
3. the driver: ``collect`` the parts' and groups' results, then ``swap_and_finish`` — each group
   swapped in under the partition lock (unless its sources changed since they were read), the
   cleaner checkpoint, the journal; or, when anything failed, ``discard`` — every ``.cleaned`` file
   removed, the log untouched.

Every worker opens the partition read-only with the same offsets and clocks, so it makes the
decisions one process would: the segments written are byte for byte those of ``clean_partition``.
A worker killed at any point leaves at most a ``.cleaned`` segment, which recovery, a retried
task, another worker or the next round removes or writes again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kafkalog.errors import CleanerError
from kafkalog.log import names
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance.cleaner import (
    CleanContext,
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
from kafkalog.maintenance.key_map import FinalBits, HashedKeyMap, KeyMap, tracks_range

POLL_S = 0.004  # how often an idle worker looks for a group to write (a group takes 50-500 ms)


@dataclass(frozen=True)
class SplitRound:
    """What every part of one round gets: the range and the two clocks."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    wall_now_ms: int

    def open(self, store: LogStore) -> CleanContext:
        location = store.locate(self.topic, self.partition)
        return open_clean_context(store, location, self.first_dirty_offset, self.first_uncleanable_offset,
                                  now_ms=self.now_ms, wall_now_ms=self.wall_now_ms)


def plan_split(store: LogStore, location: PartitionLocation, job: SplitRound) -> list[list[int]]:
    """Step 1 (driver, under the cleaner lock): the groups, as lists of source base offsets."""
    resolve_leftovers(location)
    if job.first_uncleanable_offset <= job.first_dirty_offset:
        return []
    return [[s.base_offset for s in group] for group in job.open(store).groups()]


def map_parts_for(workers: int) -> int:
    """How many key-map parts a round over ``workers`` builds: half of them map while the others
    write the groups the map has passed; one part on two workers."""
    return max(1, workers // 2)


class Board:
    """The files the workers of one round share in its scratch dir: per key-map part a lock, the
    final bits of each segment it passed, its statistics once done (and the part itself when a group
    needs it); per group a lock and its result; and the first failure."""

    def __init__(self, directory: Path, groups: list[list[int]], parts: int) -> None:
        self.directory, self.groups, self.parts = directory, groups, parts
        self._results: dict[str, dict[str, Any]] = {}  # results seen: published once, never changed
        self._bits: set[tuple[int, int]] = set()

    def _path(self, name: str) -> Path:
        return self.directory / name

    def map_prefix(self, part: int) -> Path:
        return self._path(f"map-{part}-of-{self.parts}")

    def _bits_path(self, part: int, base: int) -> Path:
        return self._path(f"bits-{part}-{base}")

    @contextlib.contextmanager
    def claim(self, name: str) -> Iterator[bool]:
        """An exclusive lock on ``name`` if nobody holds it (True), held until the block ends. The
        kernel drops it when its holder dies, so a dead worker's part or group is free again."""
        fd = os.open(self._path(name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock

    def _publish(self, path: Path, data: bytes) -> None:
        # Whole or absent, by rename: a reader never sees a torn file. Not fsynced (unlike
        # checkpoint.atomic_write_bytes): a board does not outlive its round, a crash discards it.
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def publish_json(self, name: str, doc: dict[str, Any]) -> None:
        self._publish(self._path(name), json.dumps(doc).encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A published document; once seen, it is not read again (results never change)."""
        if name not in self._results:
            try:
                self._results[name] = dict(json.loads(self._path(name).read_bytes()))
            except FileNotFoundError:
                return None
        return self._results[name]

    def publish_bits(self, part: int, base: int, words: np.ndarray[Any, Any]) -> None:
        self._publish(self._bits_path(part, base), np.ascontiguousarray(words, dtype=np.uint64).tobytes())

    def has_bits(self, base: int) -> bool:
        """Whether every part has published the final bits of the segment at ``base``."""
        for part in range(self.parts):
            if (part, base) not in self._bits:
                if not self._bits_path(part, base).exists():
                    return False
                self._bits.add((part, base))
        return True

    def read_bits(self, part: int, base: int) -> np.ndarray[Any, Any]:
        return np.fromfile(self._bits_path(part, base), dtype=np.uint64)

    def map_done(self, part: int) -> dict[str, Any] | None:
        return self.read_json(f"map-{part}.json")

    def group_done(self, base: int) -> dict[str, Any] | None:
        return self.read_json(f"group-{base}.json")

    def fail(self, message: str) -> None:
        if self.failure() is None:
            self.publish_json("failed.json", {"error": message, "pid": os.getpid()})

    def failure(self) -> str | None:
        """The first failure a worker of the round published, if any."""
        failed = self.read_json("failed.json")
        return None if failed is None else str(failed["error"])

    def check_failed(self) -> None:
        failure = self.failure()
        if failure is not None:
            raise CleanerError(f"another worker of the round failed: {failure}")


class _Worker:
    """One worker of a split round (``run_split_task``)."""

    def __init__(self, store: LogStore, job: SplitRound, board: Board) -> None:
        self.job, self.board = job, board
        self.ctx = job.open(store)
        self.dirty = dirty_segments(self.ctx)
        self._by_base = {s.base_offset: s for s in self.ctx.segments}
        bases = [s.base_offset for s in self.ctx.segments]
        self._upper = {b: (bases[i + 1] if i + 1 < len(bases) else self.ctx.end_offset) for i, b in enumerate(bases)}
        start, end = job.first_dirty_offset, self.ctx.end_offset
        self._tracked = tracks_range(start, end)
        # Groups whose every record the final bits answer; the others need the whole map.
        self._from_bits = {g[0]: self._tracked and g[0] >= start and all(b in self._by_base for b in g)
                           for g in board.groups}  # (a group whose segments are gone fails in _write)
        self._maps: HashedKeyMap | None = None
        self.mapped: list[dict[str, Any]] = []
        self.written: list[int] = []
        self.idle_s = 0.0

    def run(self) -> None:
        board = self.board
        while True:
            board.check_failed()
            if self._map_a_free_part():
                continue
            if all(board.group_done(g[0]) is not None for g in board.groups):
                return
            if not self._write_a_ready_group():
                time.sleep(POLL_S)
                self.idle_s += POLL_S

    # --- key-map parts ---------------------------------------------------------------------------
    def _map_a_free_part(self) -> bool:
        """Build one part that is neither done nor held by a live worker; False if there is none."""
        for part in range(self.board.parts):
            if self.board.map_done(part) is not None:
                continue
            with self.board.claim(f"map-{part}") as mine:
                if mine and self.board.map_done(part) is None:
                    self._build_part(part)
                    return True
        return False

    def _build_part(self, part: int) -> None:
        started = time.perf_counter()
        stats = CleanerStats()
        start = self.job.first_dirty_offset

        def publish(segment: LogSegment, key_map: KeyMap) -> None:
            if self._tracked:
                base = segment.base_offset
                self.board.publish_bits(part, base, key_map.superseded_words(
                    max(base, start), min(self._upper[base], self.ctx.end_offset)))

        key_map = build_key_map(self.ctx, stats, set(), part=part, parts=self.board.parts, on_final=publish)
        saved = not all(self._from_bits.values())
        if saved:
            key_map.save(self.board.map_prefix(part))
        self.board.publish_json(f"map-{part}.json", {
            "part": part, "map_records": stats.map_records, "map_keys": stats.map_keys,
            "dirty_bytes": stats.dirty_bytes, "map_seconds": time.perf_counter() - started, "saved": saved,
            "pid": os.getpid()})
        self.mapped.append({"part": part, "map_seconds": time.perf_counter() - started})

    # --- groups ----------------------------------------------------------------------------------
    def _write_a_ready_group(self) -> bool:
        """Write the latest group that is ready and free; False if there is none."""
        for group in reversed(self.board.groups):
            base = group[0]
            if self.board.group_done(base) is not None or not self._ready(group):
                continue
            with self.board.claim(f"group-{base}") as mine:
                if not mine or self.board.group_done(base) is not None:
                    continue
                self._write(group)
                return True
        return False

    def _ready(self, group: list[int]) -> bool:
        if self._from_bits[group[0]]:
            return all(self.board.has_bits(b) for b in group)
        return all((self.board.map_done(p) or {}).get("saved") for p in range(self.board.parts))

    def _write(self, sources: list[int]) -> None:
        started = time.perf_counter()
        missing = [b for b in sources if b not in self._by_base]
        if missing:
            raise CleanerError(f"{self.ctx.location.directory}: segments {missing} of a group to clean are gone")
        segments = [self._by_base[b] for b in sources]
        latest = self.ctx.end_offset - 1
        key_map: FinalBits | HashedKeyMap
        if self._from_bits[sources[0]]:
            key_map = FinalBits.of_words([(base, self.board.read_bits(part, base)) for base in sources
                                          for part in range(self.board.parts)],
                                         (self.job.first_dirty_offset, self.ctx.end_offset), sources[0],
                                         self._upper[sources[-1]], latest)
        else:
            if self._maps is None:
                self._maps = HashedKeyMap([KeyMap.load(self.board.map_prefix(p)) for p in range(self.board.parts)],
                                          latest)
            key_map = self._maps
        # The map parts checked the CRCs of every dirty segment they passed; the clean segments below
        # the dirty range are checked here, as in one process.
        verified = {s.base_offset for s in self.dirty}
        stats = CleanerStats()
        cleaned = write_cleaned_group(self.ctx, segments, key_map, stats, verified)
        stats.clean_seconds = time.perf_counter() - started
        self.board.publish_json(f"group-{cleaned.base_offset}.json", {
            "base_offset": cleaned.base_offset, "source_bases": cleaned.source_bases,
            "fingerprint": [list(f) for f in cleaned.fingerprint], "stats": stats.to_dict(), "pid": os.getpid()})
        self.written.append(cleaned.base_offset)


def run_split_task(store: LogStore, job: SplitRound, groups: list[list[int]], board_dir: Path,
                   parts: int) -> dict[str, Any]:
    """Step 2, in every worker of the round: build free key-map parts, write ready groups, until every
    group is written; returns what this worker did. A failure is published on the board first, so
    the other workers stop instead of waiting for what will not come."""
    started = time.perf_counter()
    board = Board(board_dir, groups, parts)
    worker: _Worker | None = None
    try:
        worker = _Worker(store, job, board)
        worker.run()
    except Exception as exc:
        if not (isinstance(exc, CleanerError) and str(exc).startswith("another worker")):
            board.fail(f"{type(exc).__name__}: {exc}")
        raise
    return {"mapped": worker.mapped, "groups_written": worker.written, "idle_s": round(worker.idle_s, 3),
            "task_s": round(time.perf_counter() - started, 3)}


def collect(board_dir: Path, groups: list[list[int]], parts: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Step 3 (driver): the written groups and the map parts' statistics, as the workers published
    them; an error if anything is missing (the round is then discarded)."""
    board = Board(board_dir, groups, parts)
    board.check_failed()
    maps = [board.map_done(p) for p in range(parts)]
    written = [board.group_done(g[0]) for g in groups]
    if any(m is None for m in maps) or any(w is None for w in written):
        raise CleanerError(f"{board_dir}: the round's workers ended with key-map parts "
                           f"{[p for p, m in enumerate(maps) if m is None]} and groups "
                           f"{[g[0] for g, w in zip(groups, written, strict=True) if w is None]} not done")
    return [w for w in written if w is not None], [m for m in maps if m is not None]


def swap_and_finish(store: LogStore, location: PartitionLocation, job: SplitRound, written: list[dict[str, Any]],
                    map_parts: list[dict[str, Any]], run_id: str = "") -> CleanResult:
    """Step 3 (driver, still under the cleaner lock): swap every written group, checkpoint, journal."""
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
