"""Cleaning rounds in parts, shared by workers: many partitions' rounds at once, for a driver that
spreads the work over many cores (the Spark job).

``clean_partition`` runs a round in one process: key map, then for each segment group write and
swap, then checkpoint and journal. Here the same steps (the same functions of ``cleaner``) run in
several workers at once that share only files, so that every core has work until the last group
of the last partition is written, whether the job is one huge partition or many small ones:

1. the driver, holding each partition's cleaner lock until step 3: ``plan_round`` — leftovers of a
   crashed cleaner resolved, the segment groups (lists of source base offsets) and which of them
   the final bits of the map will answer;
2. every worker of the job, in parallel: ``run_split_task`` over every round, each on its ``Board``,
   a scratch dir every worker sees. The workers may start before the driver has planned every
   round: the driver publishes each plan in the job's run dir as it is made (``publish_plan``),
   then their count (``publish_plans_end``), and the workers take them up as they come. A worker
   writes the latest group that is ready (of the earliest round that has one), else takes a
   key-map part nobody holds (``parts`` maps that share the keys by hash) and builds it from the
   last dirty segment to the first, publishing each segment's supersession bits once they are
   final (every later record is in). A group is ready as soon as every part has published its
   segments: the latest groups, which keep the most records, are written while the map goes on,
   and a worker with no part left to map writes another round's groups instead of waiting. A
   group that also holds clean-prefix records needs the whole map: its parts are saved when they
   are done, and the group is written from them. Parts and groups are claimed with a lock each
   and published with their result; a worker returns once every round is complete or failed. A
   worker that dies releases its locks: its part or group is taken over, from the start. A
   failure fails its own round only: it is published on that round's board, the other workers
   take no more work in the round, and every other round goes on. A failed round is settled once
   no worker holds one of its groups' locks, so that nothing is written into the partition after
   the driver discarded the round;
3. the driver, as each round settles (the first worker to see it complete or failed says so with
   a marker in the run dir, so that the driver watches one directory, not every board):
   ``collect`` its parts' and groups' results, then ``swap_and_finish`` — each group swapped in
   under the partition lock (unless its sources changed since they were read), the cleaner
   checkpoint, the journal; or, when the round failed, ``discard`` — every ``.cleaned`` file
   removed, the log untouched.

Every worker opens a partition read-only with the same offsets and clocks, so it makes the
decisions one process would: the segments written are byte for byte those of ``clean_partition``.
A worker killed at any point leaves at most a ``.cleaned`` segment, which recovery, a retried
task, another worker or the next round removes or writes again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
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

POLL_S = 0.004  # how often an idle worker looks for work: short against writing a group (megabytes)
PLAN_PREFIX, PLANS_END = "round-", "rounds-end.json"  # in the run dir: the plans, then their count
SETTLED_PREFIX = "settled-"  # in the run dir, + a board's name: that round is complete or failed


@dataclass(frozen=True)
class SplitRound:
    """What every part of one round gets: the range and the two clocks."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    wall_now_ms: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def open(self, store: LogStore, producers: dict[int, tuple[int, int]] | None = None) -> CleanContext:
        location = store.locate(self.topic, self.partition)
        return open_clean_context(store, location, self.first_dirty_offset, self.first_uncleanable_offset,
                                  now_ms=self.now_ms, wall_now_ms=self.wall_now_ms, producers=producers)


@dataclass(frozen=True)
class RoundPlan:
    """One round as the driver planned it, which every worker of the job gets: the round, its segment
    groups (source base offsets), which of them the final bits answer (the others need the whole
    saved map), its board dir, how many key-map parts it builds, and the producer state the driver
    read (every worker decides with it, as one process would with its own)."""

    round: SplitRound
    groups: list[list[int]]
    from_bits: list[bool]
    board: str
    parts: int
    producers: dict[int, tuple[int, int]]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RoundPlan:
        """The plan ``to_dict`` gave, also after a JSON round trip (which makes the producer ids strings
        and their states lists: the cleaner looks producers up by int id)."""
        producers = {int(pid): (int(last), int(epoch)) for pid, (last, epoch) in doc["producers"].items()}
        return cls(**{**doc, "round": SplitRound(**doc["round"]), "producers": producers})


def plan_round(store: LogStore, location: PartitionLocation, job: SplitRound, board: Path,
               parts: int) -> tuple[RoundPlan, CleanContext]:
    """Step 1 (driver, under the cleaner lock): a crashed cleaner's leftovers resolved, the groups; and
    the round's context, for ``swap_and_finish``."""
    resolve_leftovers(location)
    ctx = job.open(store)
    dirty = job.first_uncleanable_offset > job.first_dirty_offset
    groups = [[s.base_offset for s in group] for group in ctx.groups()] if dirty else []
    # Bits cover the dirty range only: a group reaching below it (the clean prefix) asks the whole map.
    tracked = tracks_range(job.first_dirty_offset, ctx.end_offset)
    from_bits = [tracked and g[0] >= job.first_dirty_offset for g in groups]
    return RoundPlan(job, groups, from_bits, str(board), parts, ctx.producers), ctx


def map_parts_for(workers: int) -> int:
    """How many key-map parts a huge partition's round over ``workers`` builds: half of them map while
    the others write the groups the map has passed; one part on two workers."""
    return max(1, workers // 2)


def _publish(path: Path, data: bytes) -> None:
    # Whole or absent, by rename: a reader never sees a torn file. Not fsynced (unlike
    # checkpoint.atomic_write_bytes): a run dir does not outlive its job, a crash discards it. The
    # temporary name is the writer's own: two workers may say the same round is settled at once.
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def publish_plan(run_dir: Path, index: int, plan: RoundPlan) -> None:
    """Driver: hand round ``index`` (0, 1, ... in order) to the job's workers."""
    _publish(run_dir / f"{PLAN_PREFIX}{index}.json", json.dumps(plan.to_dict()).encode())


def read_plan(run_dir: Path, index: int) -> RoundPlan:
    """Worker: round ``index`` as the driver published it."""
    return RoundPlan.from_dict(json.loads((run_dir / f"{PLAN_PREFIX}{index}.json").read_bytes()))


def publish_plans_end(run_dir: Path, count: int) -> None:
    """Driver: no round after the first ``count`` (the workers return once those are settled)."""
    _publish(run_dir / PLANS_END, json.dumps({"count": count}).encode())


def _remove_plans_and_markers(run_dir: Path) -> None:
    for entry in os.scandir(run_dir):
        if entry.is_file() and (entry.name == PLANS_END or entry.name.startswith((PLAN_PREFIX, SETTLED_PREFIX))):
            os.unlink(entry.path)


def start_run_dir(run_dir: Path) -> None:
    """Driver, before the workers start: the run dir, without the plans and markers a killed job of
    the same run id left (its boards go one by one, under each partition's cleaner lock)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_plans_and_markers(run_dir)


def remove_dead_run_dir(run_dir: Path) -> None:
    """Driver, having removed a killed job's board (under that partition's cleaner lock): that job's
    run dir, with its plans and markers, once no board of it is left."""
    with contextlib.suppress(OSError):  # a board left, or another driver was quicker
        if not any(entry.is_dir() for entry in os.scandir(run_dir)):
            _remove_plans_and_markers(run_dir)
            run_dir.rmdir()


def settled_rounds(run_dir: Path) -> set[str]:
    """Driver: the names of the boards a worker has seen settled (one listing of the run dir)."""
    return {n[len(SETTLED_PREFIX):] for n in os.listdir(run_dir) if n.startswith(SETTLED_PREFIX)}


class Board:
    """The files the workers of one round share in its scratch dir: per key-map part a lock, the
    final bits of each segment it passed, its statistics once done (and the part itself when a group
    needs it); per group a lock and its result; and the first failure."""

    def __init__(self, plan: RoundPlan) -> None:
        self.plan = plan
        self.directory, self.groups, self.parts = Path(plan.board), plan.groups, plan.parts
        self._results: dict[str, dict[str, Any]] = {}  # results seen: published once, never changed
        self._bits: set[tuple[int, int]] = set()
        self._settled = False
        self.failed = False  # a failure was published, as of the last ``settled``
        # A board is removed only once its round is over: by its own driver after the stage, or by a
        # later job's driver that took the partition's cleaner lock after this job's driver let it go
        # (the round swapped in or discarded). Its workers may still look: for them, it is settled.
        self.gone = False

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

    def publish_json(self, name: str, doc: dict[str, Any]) -> None:
        _publish(self._path(name), json.dumps(doc).encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A published document; once seen, it is not read again (results never change)."""
        if name not in self._results:
            try:
                self._results[name] = dict(json.loads(self._path(name).read_bytes()))
            except FileNotFoundError:
                return None
        return self._results[name]

    def publish_bits(self, part: int, base: int, words: np.ndarray[Any, Any]) -> None:
        _publish(self._bits_path(part, base), np.ascontiguousarray(words, dtype=np.uint64).tobytes())

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

    def ready(self, index: int) -> bool:
        """Whether group ``index`` can be written now: the final bits of its segments are published
        (or, for a group that needs the whole map, every part is saved)."""
        if self.plan.from_bits[index]:
            return all(self.has_bits(b) for b in self.groups[index])
        return all((self.map_done(p) or {}).get("saved") for p in range(self.parts))

    def fail(self, message: str) -> None:
        if self.failure() is None:
            self.publish_json("failed.json", {"error": message, "pid": os.getpid()})

    def failure(self) -> str | None:
        """The first failure a worker of the round published, if any."""
        failed = self.read_json("failed.json")
        return None if failed is None else str(failed["error"])

    def settled(self) -> bool:
        """Nothing left to do in this round, and nothing under way: every key-map part and every group
        published; or a failure, once no worker is still writing a group (``_writing``); or the board
        gone (``gone``). One listing of the board, no failed opens."""
        if not self._settled:
            try:
                present = set(os.listdir(self.directory))
            except FileNotFoundError:
                self._settled = self.gone = True
                return True
            self.failed = "failed.json" in present
            if self.failed:
                self._settled = not self._writing(present)
            else:
                self._settled = all(f"map-{p}.json" in present for p in range(self.parts)) \
                    and all(f"group-{g[0]}.json" in present for g in self.groups)
        return self._settled

    def _writing(self, present: set[str]) -> bool:
        """Whether a worker holds a group's claim: it may still be writing that group's ``.cleaned``
        files into the partition, which a failed round's driver must not discard before it is done.
        A worker that claims a group after this look finds the failure and writes nothing
        (``_JobWorker._write_a_ready_group``)."""
        for group in self.groups:
            name = f"group-{group[0]}.lock"
            if name in present:
                with self.claim(name.removesuffix(".lock")) as free:
                    if not free:
                        return True
        return False

    def say_settled(self) -> None:
        """Tell the driver the round is settled: a marker beside the board, in the run dir it watches."""
        if not self.gone:  # else the driver is done with it, and the run dir may be gone too
            _publish(self.directory.parent / f"{SETTLED_PREFIX}{self.directory.name}", b"")


class _RoundWorker:
    """What one worker does in one round: build a key-map part, write a group."""

    def __init__(self, store: LogStore, board: Board, worker: str) -> None:
        self.board, self.worker = board, worker
        self.job = board.plan.round
        self.ctx = self.job.open(store, board.plan.producers)
        # The map parts check the CRCs of every dirty segment; the groups check those of the clean
        # segments below the dirty range, as in one process.
        self._verified = {s.base_offset for s in dirty_segments(self.ctx)}
        self._by_base = {s.base_offset: s for s in self.ctx.segments}
        missing = [b for g in board.groups for b in g if b not in self._by_base]
        if missing:  # else the workers would wait for final bits no map publishes
            raise CleanerError(f"{self.ctx.location.directory}: segments {missing} of the round's groups are gone")
        bases = [s.base_offset for s in self.ctx.segments]
        self._upper = {b: (bases[i + 1] if i + 1 < len(bases) else self.ctx.end_offset) for i, b in enumerate(bases)}
        self._maps: HashedKeyMap | None = None

    def build_part(self, part: int) -> float:
        """Build key-map part ``part``, publishing final bits as it goes; its seconds."""
        started = time.perf_counter()
        stats = CleanerStats()
        start = self.job.first_dirty_offset
        publishing = any(self.board.plan.from_bits)

        def publish(segment: LogSegment, key_map: KeyMap) -> None:
            if publishing:
                base = segment.base_offset
                self.board.publish_bits(part, base, key_map.superseded_words(
                    max(base, start), min(self._upper[base], self.ctx.end_offset)))

        key_map = build_key_map(self.ctx, stats, set(), part=part, parts=self.board.parts, on_final=publish)
        saved = not all(self.board.plan.from_bits)
        if saved:
            key_map.save(self.board.map_prefix(part))
        seconds = time.perf_counter() - started
        self.board.publish_json(f"map-{part}.json", {
            "part": part, "map_records": stats.map_records, "map_keys": stats.map_keys,
            "dirty_bytes": stats.dirty_bytes, "map_seconds": seconds, "saved": saved,
            "pid": os.getpid(), "worker": self.worker})
        return seconds

    def write(self, index: int) -> int:
        """Write the ``.cleaned`` segment of group ``index`` and publish its result; its base offset."""
        started = time.perf_counter()
        sources = self.board.groups[index]
        segments = [self._by_base[b] for b in sources]
        latest = self.ctx.end_offset - 1
        key_map: FinalBits | HashedKeyMap
        parts = self.board.parts
        if self.board.plan.from_bits[index]:
            key_map = FinalBits.of_words([(base, self.board.read_bits(part, base)) for base in sources
                                          for part in range(parts)],
                                         (self.job.first_dirty_offset, self.ctx.end_offset), sources[0],
                                         self._upper[sources[-1]], latest)
        else:
            if self._maps is None:
                self._maps = HashedKeyMap([KeyMap.load(self.board.map_prefix(p)) for p in range(parts)], latest)
            key_map = self._maps
        stats = CleanerStats()
        cleaned = write_cleaned_group(self.ctx, segments, key_map, stats, self._verified)
        stats.clean_seconds = time.perf_counter() - started
        self.board.publish_json(f"group-{cleaned.base_offset}.json", {
            "base_offset": cleaned.base_offset, "source_bases": cleaned.source_bases,
            "fingerprint": [list(f) for f in cleaned.fingerprint], "log_bytes": cleaned.log_bytes,
            "stats": stats.to_dict(), "pid": os.getpid(),
            "worker": self.worker})
        return cleaned.base_offset


class _JobWorker:
    """One worker of the job (``run_split_task``): ready groups first, then free key-map parts, over
    every round, until every round is settled."""

    def __init__(self, store: LogStore, plans: list[RoundPlan], worker: str, run_dir: Path | None) -> None:
        self.store, self.worker = store, worker
        self.boards = [Board(plan) for plan in plans]
        self.run_dir = run_dir  # where more plans arrive, until the driver says how many there are
        self._open: dict[int, _RoundWorker] = {}  # rounds this worker has worked in and not seen settled
        self._settled: set[int] = set()
        self.did: dict[str, dict[str, list[Any]]] = {}
        self.failed: dict[str, str] = {}
        self.idle_s = 0.0

    def _take_new_plans(self) -> None:
        """The plans the driver has published since the last look, in order; stop looking after the last."""
        assert self.run_dir is not None
        try:
            present = set(os.listdir(self.run_dir))
        except FileNotFoundError:  # every board removed, then the run dir (``remove_dead_run_dir``): over
            self.run_dir = None
            return
        while f"{PLAN_PREFIX}{len(self.boards)}.json" in present:
            self.boards.append(Board(read_plan(self.run_dir, len(self.boards))))
        # A plan renamed into place just before the end can escape a listing made meanwhile: the
        # next look finds it.
        if PLANS_END in present and len(self.boards) >= json.loads((self.run_dir / PLANS_END).read_bytes())["count"]:
            self.run_dir = None

    def run(self) -> None:
        while True:
            if self.run_dir is not None:
                self._take_new_plans()
            active = []
            for i, board in enumerate(self.boards):
                if i in self._settled:
                    continue
                if not board.settled():
                    if not board.failed:  # a failed round takes no more work; it waits for its writers
                        active.append(i)
                    continue
                self._settled.add(i)
                board.say_settled()  # whoever sees it first; any other worker, if that one dies first
                self._open.pop(i, None)  # its segments closed, its loaded map parts freed
            if not active and self.run_dir is None:
                return
            # Finish what is under way before starting more: a round's groups, then the next map.
            if any(self._attempt(i, self._write_a_ready_group) for i in active):
                continue
            if any(self._attempt(i, self._map_a_free_part) for i in active):
                continue
            time.sleep(POLL_S)
            self.idle_s += POLL_S

    def _attempt(self, i: int, action: Callable[[int], bool]) -> bool:
        """Run ``action`` on round ``i``; a failure fails that round (published on its board), not the job."""
        board = self.boards[i]
        try:
            return action(i)
        except Exception as exc:
            self._open.pop(i, None)
            if not board.directory.is_dir():  # removed under the worker: the round is over (``Board.gone``)
                board.gone = True
                return True
            message = f"{type(exc).__name__}: {exc}"
            board.fail(message)
            self.failed[board.plan.round.name] = message
            return True

    def _round(self, i: int) -> _RoundWorker:
        if i not in self._open:
            self._open[i] = _RoundWorker(self.store, self.boards[i], self.worker)
        return self._open[i]

    def _note(self, i: int, what: str, value: Any) -> None:
        self.did.setdefault(self.boards[i].plan.round.name, {"mapped": [], "groups_written": []})[what].append(value)

    def _map_a_free_part(self, i: int) -> bool:
        """Build one part of round ``i`` that is neither done nor held by a live worker."""
        board = self.boards[i]
        for part in range(board.parts):
            if board.map_done(part) is not None:
                continue
            with board.claim(f"map-{part}") as mine:
                if mine and board.map_done(part) is None and board.failure() is None:
                    seconds = self._round(i).build_part(part)
                    self._note(i, "mapped", {"part": part, "map_seconds": round(seconds, 3)})
                    return True
        return False

    def _write_a_ready_group(self, i: int) -> bool:
        """Write the latest group of round ``i`` that is ready and free."""
        board = self.boards[i]
        for index in reversed(range(len(board.groups))):
            group = board.groups[index]
            if board.group_done(group[0]) is not None or not board.ready(index):
                continue
            with board.claim(f"group-{group[0]}") as mine:
                # The failure is looked for after the claim: a round found failed and free of writers
                # (``Board.settled``) may be discarded at once, and nothing may be written into it then.
                if not mine or board.group_done(group[0]) is not None or board.failure() is not None:
                    continue
                self._note(i, "groups_written", self._round(i).write(index))
                return True
        return False


def run_split_task(store: LogStore, plans: list[RoundPlan], worker: str = "",
                   run_dir: Path | None = None) -> dict[str, Any]:
    """Step 2, in every worker of the job: write ready groups and build free key-map parts of every
    round (``plans``, and with ``run_dir`` those the driver publishes there) until each round is
    complete or failed; returns what this worker did (``rounds``: per round the parts it mapped and
    the groups it wrote; ``failed``: the rounds it failed, and why)."""
    started = time.perf_counter()
    job = _JobWorker(store, plans, worker, run_dir)
    job.run()
    return {"rounds": job.did, "failed": job.failed, "idle_s": round(job.idle_s, 3),
            "task_s": round(time.perf_counter() - started, 3)}


def collect(board: Board) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Step 3 (driver): the written groups and the map parts' statistics, as the workers published
    them on ``board``; an error if the round failed or anything is missing (the round is then
    discarded)."""
    plan = board.plan
    failure = board.failure()
    if failure is not None:
        raise CleanerError(f"a worker failed: {failure}")
    maps = [board.map_done(p) for p in range(plan.parts)]
    written = [board.group_done(g[0]) for g in plan.groups]
    if any(m is None for m in maps) or any(w is None for w in written):
        raise CleanerError(f"{plan.board}: the round's workers ended with key-map parts "
                           f"{[p for p, m in enumerate(maps) if m is None]} and groups "
                           f"{[g[0] for g, w in zip(plan.groups, written, strict=True) if w is None]} not done")
    return [w for w in written if w is not None], [m for m in maps if m is not None]


def swap_and_finish(ctx: CleanContext, written: list[dict[str, Any]], map_parts: list[dict[str, Any]],
                    run_id: str = "") -> CleanResult:
    """Step 3 (driver, still under the cleaner lock, with the context ``plan_round`` opened): swap every
    written group, checkpoint, journal."""
    tp = ctx.location.topic_partition
    result = CleanResult(tp.topic, tp.partition, ctx.first_dirty_offset, ctx.end_offset)
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
                               [(int(b), int(size), int(mtime)) for b, size, mtime in group["fingerprint"]],
                               int(group["log_bytes"]))
        try:
            swap_cleaned_group(ctx, cleaned)  # removes this group's .cleaned files if it fails
        except BaseException:
            discard(ctx.location, [g["base_offset"] for g in written[i + 1:]])
            raise
        result.groups.append((cleaned.source_bases, cleaned.base_offset))
    finish_round(ctx, result, run_id)
    return result


def discard(location: PartitionLocation, group_bases: list[int]) -> None:
    """Remove the ``.cleaned`` segments of a round that will not be swapped."""
    for base in group_bases:
        LogSegment(location.directory, base, suffix=names.CLEANED_SUFFIX).delete_files()
