"""A cleaning round cut into tasks that are pure functions of their inputs, and the commit that only
the round's driver runs: the Spark job's steps (``spark_jobs/compact_logs.py``), ``cleaner``'s own
steps cut where a scheduler can spread them, with nothing shared between tasks but their inputs and
outputs.

The driver, holding the partition's cleaner lock throughout, resolves a crashed cleaner's leftovers
and fixes the round in a ``RoundSpec`` (``plan_round``). Tasks build the key map and write every group
(``clean_round_task``); a partition too big for one task has its map built in ``spec.parts`` parts
that share the keys by hash (``map_part_task``), then one task per group (``write_group_task``). A
whole map holds at most the dedupe buffer's keys, as Kafka's does, and says where the round ends
(``settled``); parts are not capped, so when they hold more keys than that (``keys_fit``) the map is
built again whole. The
driver checks each group against the size and CRC-32C its attempt reported and swaps it in with
Kafka's ``.cleaned -> .swap`` protocol (``commit_round``), then removes every other attempt's output
(``discard_attempts``).

A task attempt writes ``<base>.log.<tag>.cleaned`` (and its indexes alike), ``tag`` its own: attempts
of the same group never touch each other's files, and any file a dead attempt leaves ends in
``.cleaned``, which Kafka's loader and ``kafkalog recover`` delete. Every task opens the partition
read-only with the spec's offsets, clocks and producer state, so it decides as one process would: the
segments written are byte for byte those of ``clean_partition``.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    key_map_capacity,
    map_slices,
    open_clean_context,
    recheck_round,
    resolve_leftovers,
    split_overflowed_segments,
    swap_cleaned_group,
    txn_events,
    write_cleaned_group,
)
from kafkalog.maintenance.key_map import HashedKeyMap, KeyMap, Supersession
from kafkalog.maintenance.txn_tracker import TxnTracker

# A round's counts are its tasks' sums; its map and clean seconds, its slowest task's.
SUMMED_STATS = [f.name for f in dataclasses.fields(CleanerStats) if not f.name.endswith("_seconds")]


@dataclass(frozen=True)
class RoundSpec:
    """One round as its driver fixed it: every task of the round gets this (JSON-able)."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    wall_now_ms: int
    producers: dict[int, tuple[int, int]]  # producer id -> (last data offset, epoch), read by the driver
    groups: list[list[int]]  # each group's source base offsets
    parts: int  # key maps sharing the keys by hash: 1 for the one-task round
    # Where the round ends: the dirty range's end as planned, until a whole key map (capped by the
    # dedupe buffer, as Kafka's) says where it filled (``settled``).
    end_offset: int

    def open(self, store: LogStore) -> CleanContext:
        location = store.locate(self.topic, self.partition)
        ctx = open_clean_context(store, location, self.first_dirty_offset, self.first_uncleanable_offset,
                                 now_ms=self.now_ms, wall_now_ms=self.wall_now_ms, producers=self.producers)
        present = {s.base_offset for s in ctx.segments}
        missing = [b for g in self.groups for b in g if b not in present]
        if missing:
            raise CleanerError(f"{location.directory}: segments {missing} of the round's groups are gone")
        return ctx

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RoundSpec:
        """Also after a JSON round trip, which makes producer ids strings and their states lists."""
        producers = {int(pid): (int(last), int(epoch)) for pid, (last, epoch) in doc["producers"].items()}
        return cls(**{**doc, "producers": producers})


def plan_round(store: LogStore, location: PartitionLocation, first_dirty_offset: int, first_uncleanable_offset: int,
               *, now_ms: int, wall_now_ms: int, parts: int = 1) -> tuple[RoundSpec, CleanContext]:
    """Step 1 (the driver, under the cleaner lock): the round's spec, and its context for the commit."""
    resolve_leftovers(location)
    if first_uncleanable_offset > first_dirty_offset:
        recheck_round(store, location, first_dirty_offset, first_uncleanable_offset, now_ms)
    ctx = open_clean_context(store, location, first_dirty_offset, first_uncleanable_offset, now_ms=now_ms,
                             wall_now_ms=wall_now_ms)
    split_overflowed_segments(ctx)
    groups = [[s.base_offset for s in g] for g in ctx.groups()] if first_uncleanable_offset > first_dirty_offset \
        else []
    tp = location.topic_partition
    return RoundSpec(tp.topic, tp.partition, first_dirty_offset, first_uncleanable_offset, now_ms, wall_now_ms,
                     ctx.producers, groups, parts, ctx.end_offset), ctx


def settled(ctx: CleanContext, spec: RoundSpec, end_offset: int) -> RoundSpec:
    """The round once its key map says where it ends: the groups of every segment below that."""
    return dataclasses.replace(spec, end_offset=end_offset,
                               groups=[[s.base_offset for s in g] for g in ctx.groups(end_offset)])


def keys_fit(ctx: CleanContext, map_stats: list[dict[str, Any]]) -> bool:
    """Whether a round's key map in hashed parts (built without a cap; their stats) holds fewer keys
    than a whole map may (``key_map_capacity``): then the round ends where the dirty range does, as
    Kafka's would; else it must be mapped again as one capped map, to end where Kafka's fills."""
    return len(map_stats) == 1 or sum(int(m["map_keys"]) for m in map_stats) < key_map_capacity(ctx.store.broker)


def attempt_suffix(tag: str) -> str:
    """The file-name suffix of one task attempt's output: ``.<tag>.cleaned``."""
    if not tag or not all(c.isalnum() or c == "-" for c in tag):
        raise ValueError(f"attempt tag {tag!r}: letters, digits and '-' only")
    return f".{tag}{names.CLEANED_SUFFIX}"


def _key_map(ctx: CleanContext, verified: set[int], part: int = 0, parts: int = 1) -> tuple[KeyMap, CleanerStats]:
    started, stats = time.perf_counter(), CleanerStats()
    key_map = build_key_map(ctx, stats, verified, part=part, parts=parts)
    stats.map_seconds = time.perf_counter() - started
    return key_map, stats


def _write_group(ctx: CleanContext, sources: list[int], key_map: Supersession, tracker: TxnTracker,
                 verified: set[int], tag: str) -> dict[str, Any]:
    """One group written under ``tag``: its ``CleanedGroup`` fields, the tag and the group's stats."""
    started, stats = time.perf_counter(), CleanerStats()
    by_base = {s.base_offset: s for s in ctx.segments}
    cleaned = write_cleaned_group(ctx, [by_base[b] for b in sources], key_map, tracker, stats, verified,
                                  attempt_suffix(tag))
    stats.clean_seconds = time.perf_counter() - started
    return {**dataclasses.asdict(cleaned), "tag": tag, "stats": stats.to_dict()}


def clean_round_task(store: LogStore, spec: RoundSpec, tag: str) -> dict[str, Any]:
    """Step 2, one task: the key map, then every group written under ``tag``. Returns the groups as
    written (``CleanedGroup`` fields and their stats) and the map's stats."""
    ctx = spec.open(store)
    verified: set[int] = set()  # segments whose CRCs the map build checked: not checked again
    key_map, stats = _key_map(ctx, verified)
    end = key_map.latest_offset + 1
    tracker = TxnTracker()  # the groups are written in turn: the tracker carries from one to the next
    return {"maps": [stats.to_dict()], "end_offset": end,
            "groups": [_write_group(ctx, [s.base_offset for s in g], key_map, tracker, verified, tag)
                       for g in ctx.groups(end)]}


def map_part_task(store: LogStore, spec: RoundSpec, part: int, prefix: Path) -> dict[str, Any]:
    """Step 2 of a huge partition: key-map part ``part`` of ``spec.parts``, saved at ``prefix`` (a name of
    this attempt's own, in a scratch dir every task sees). Returns its stats, and the transactional
    batches (``txn_events``) of its share of the segments whose groups precede others, from which the
    driver works out each group's starting transaction state (``group_txn_states``)."""
    ctx = spec.open(store)
    key_map, stats = _key_map(ctx, set(), part, spec.parts)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    key_map.save(prefix)
    end = key_map.latest_offset + 1  # a whole map's may be short of the dirty range's end
    before_last = [s for g in ctx.groups(end)[:-1] for s in g]
    return {"part": part, "prefix": str(prefix), "stats": stats.to_dict(), "end_offset": end,
            "txn_events": {s.base_offset: txn_events(s) for s in map_slices(before_last, spec.parts)[part]}}


def group_txn_states(ctx: CleanContext, spec: RoundSpec, maps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step 2 on the driver: the transaction tracker's state at the start of each group, from the map
    parts' ``txn_events`` (each group task then decides as the one-task round would)."""
    by_base = {s.base_offset: s for s in ctx.segments}
    events = {base: e for m in maps for base, e in m["txn_events"].items()}
    return ctx.group_txn_states([[by_base[b] for b in g] for g in spec.groups], events)


def write_group_task(store: LogStore, spec: RoundSpec, index: int, map_prefixes: list[str],
                     txn_state: dict[str, Any], tag: str) -> dict[str, Any]:
    """Step 3 of a huge partition: group ``index`` written under ``tag`` from the saved key-map parts,
    its transaction tracker starting from ``txn_state`` (``group_txn_states``)."""
    ctx = spec.open(store)
    key_map = HashedKeyMap([KeyMap.load(Path(p)) for p in map_prefixes], spec.end_offset - 1)
    # The map tasks checked the CRCs of the dirty segments; the group checks those of the clean ones.
    return _write_group(ctx, spec.groups[index], key_map, TxnTracker.from_state(txn_state),
                        {s.base_offset for s in dirty_segments(ctx)}, tag)


def commit_round(ctx: CleanContext, spec: RoundSpec, groups: list[dict[str, Any]],
                 maps: list[dict[str, Any]], run_id: str = "") -> CleanResult:
    """Step 4 (the driver, still under the cleaner lock): every group of the spec, as one attempt wrote
    it, checked, renamed to its ``.cleaned`` name and swapped in; then the checkpoint and the journal.
    Raises (having swapped nothing more) if a group is missing or its files are not what its attempt
    reported; the caller then discards the rest."""
    directory = ctx.location.directory
    by_base = {g["base_offset"]: g for g in groups}
    missing = [sources[0] for sources in spec.groups if sources[0] not in by_base]
    if missing:
        raise CleanerError(f"{directory}: no task wrote the groups at {missing}")
    docs = [*maps, *(g["stats"] for g in groups)]
    stats = CleanerStats(**{key: sum(doc.get(key, 0) for doc in docs) for key in SUMMED_STATS},
                         map_seconds=max((m.get("map_seconds", 0.0) for m in maps), default=0.0),
                         clean_seconds=max((g["stats"]["clean_seconds"] for g in groups), default=0.0))
    tp = ctx.location.topic_partition
    result = CleanResult(tp.topic, tp.partition, ctx.first_dirty_offset, spec.end_offset, stats=stats)
    for sources in spec.groups:
        doc = by_base[sources[0]]
        cleaned = CleanedGroup(doc["base_offset"], list(doc["source_bases"]),
                               [(int(b), int(size), int(mtime)) for b, size, mtime in doc["fingerprint"]],
                               int(doc["log_bytes"]), int(doc["log_crc32c"]))
        if cleaned.source_bases != sources:
            raise CleanerError(f"{directory}: a task wrote group {cleaned.source_bases}, the round planned {sources}")
        written = LogSegment(directory, cleaned.base_offset, suffix=attempt_suffix(doc["tag"])).files()
        for path, name in zip(written, LogSegment(directory, cleaned.base_offset, suffix=names.CLEANED_SUFFIX).files(),
                              strict=True):
            if path.exists():
                os.replace(path, name)
        # Checks the log against the attempt's size and CRC-32C under the partition lock, and removes the
        # group's .cleaned files if they are not what the attempt wrote.
        swap_cleaned_group(ctx, cleaned)
        result.groups.append((cleaned.source_bases, cleaned.base_offset))
    finish_round(ctx, result, run_id)
    return result


def discard_attempts(location: PartitionLocation) -> None:
    """Remove every task attempt's output left in the partition (the driver holds its cleaner lock, so
    any file ending in ``.cleaned`` is cleaner output nobody will swap)."""
    for entry in os.scandir(location.directory):
        if entry.name.endswith(names.CLEANED_SUFFIX) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
