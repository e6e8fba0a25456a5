"""A round cleaned in parts (``split_clean``: key maps in hashed parts, then groups, then swaps) writes exactly
the bytes ``clean_partition`` writes in one pass, and a part that fails changes nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_cleaner import DAY, T0, _mixed_log, clean, cleaner_checkpoint, live_digest, new_store, put

from kafkalog.errors import CleanerError
from kafkalog.format.scan import scan_records
from kafkalog.log import names
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import split_clean
from kafkalog.maintenance.cleaner import CleanerStats, _read_batches, build_key_map, open_clean_context
from kafkalog.maintenance.key_map import HashedKeyMap, KeyMap
from kafkalog.tools.verify import verify_store


def _two_rounds_of_data(tmp_path: Path) -> tuple[LogStore, Path]:
    store, loc = new_store(tmp_path / "logs", segment_bytes="1024")
    _mixed_log(store, loc)
    clean(store, loc, now=T0)  # a first round: the next one recopies a clean prefix too
    with store.writable_log(loc) as log:
        put(log, [(f"k{i % 40}", None if i % 9 == 0 else f"again-{i}") for i in range(300)], batch_records=3)
        put(log, [("tail", "active")])
    return store, tmp_path / "logs"


def _split_round(store: LogStore, scratch: Path, parts: int, first_dirty: int, now: int) -> None:
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, first_dirty, active, now, now)
    with cleaner_lock(location.directory, timeout_s=0):
        groups = split_clean.plan_split(store, location, job)
        assert len(groups) > 1
        prefixes = [scratch / f"map-{b}" for b in range(parts)]
        parts = [split_clean.build_map_part(store, job, b, parts, prefixes[b]) for b in range(parts)]
        # Any order; one writer for several groups (as a Spark task does) or one call per group.
        writer = split_clean.GroupWriter(store, job, prefixes)
        written = [writer.write(g) if i % 2 else split_clean.write_group(store, job, g, prefixes)
                   for i, g in enumerate(reversed(groups))]
        split_clean.swap_and_finish(store, location, job, written, parts, run_id="split")


@pytest.mark.parametrize("parts", [1, 3])
def test_split_round_writes_the_bytes_of_one_pass(tmp_path: Path, parts: int) -> None:
    store, logs = _two_rounds_of_data(tmp_path / "one")
    shutil.copytree(logs, tmp_path / "split")
    split_store = LogStore([tmp_path / "split"])
    now = T0 + 2 * DAY  # horizons stamped in the first round have passed: tombstones and markers go now
    first_dirty = cleaner_checkpoint(logs)[("t", 0)]
    assert first_dirty > 0
    one = clean(store, store.locate("t", 0), first_dirty=first_dirty, now=now)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _split_round(split_store, scratch, parts, first_dirty, now)
    assert live_digest(tmp_path / "split") == live_digest(logs)
    assert cleaner_checkpoint(tmp_path / "split") == cleaner_checkpoint(logs) == {("t", 0): one.end_offset}
    assert one.stats.records_written < one.stats.records_read
    assert verify_store(split_store).ok
    assert not list((tmp_path / "split").rglob(f"*{names.CLEANED_SUFFIX}"))


def test_hashed_map_parts_answer_exactly_as_the_one_map(tmp_path: Path) -> None:
    store, _ = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    first_dirty = cleaner_checkpoint(tmp_path / "logs")[("t", 0)]
    ctx = open_clean_context(store, location, first_dirty, active, now_ms=T0, wall_now_ms=T0)
    whole_stats, whole_verified = CleanerStats(), set[int]()
    whole = build_key_map(ctx, whole_stats, whole_verified)
    parts, stats, verified = [], [CleanerStats() for _ in range(4)], [set[int]() for _ in range(4)]
    for b in range(4):
        build_key_map(ctx, stats[b], verified[b], part=b, parts=4).save(tmp_path / f"part-{b}")
        parts.append(KeyMap.load(tmp_path / f"part-{b}"))
    assert sum(len(p) for p in parts) == len(whole) > 30
    assert sum(p.records for p in parts) == whole.records
    assert all(len(p) > 0 for p in parts)
    # Each part checked the CRCs of its own slice of the dirty segments: together, each one once.
    assert sorted(s for v in verified for s in v) == sorted(whole_verified) and len(whole_verified) > 4
    assert sum(s.dirty_bytes for s in stats) == whole_stats.dirty_bytes
    hashed = HashedKeyMap(parts, whole.latest_offset)
    for segment in ctx.segments:  # the clean prefix (looked up) and the dirty range (from the bitmaps)
        records = scan_records(*_read_batches(segment))
        rows = np.flatnonzero(records.key_len >= 0).astype(np.int64)
        assert np.array_equal(hashed.lookup(records, rows), whole.lookup(records, rows))
        inserted = records.offset[rows] >= first_dirty
        assert np.array_equal(hashed.superseded(records, rows, inserted), whole.superseded(records, rows, inserted))


def test_a_torn_map_part_is_refused(tmp_path: Path) -> None:
    KeyMap().save(tmp_path / "m")
    (tmp_path / "m.json").write_text("{")
    with pytest.raises(CleanerError, match="cannot be read"):
        KeyMap.load(tmp_path / "m")


def test_discarded_round_leaves_the_log_untouched(tmp_path: Path) -> None:
    store, logs = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    before = live_digest(logs)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, 0, active, T0, T0)
    with cleaner_lock(location.directory, timeout_s=0):
        groups = split_clean.plan_split(store, location, job)
        split_clean.build_map_part(store, job, 0, 1, tmp_path / "map")
        written = [split_clean.write_group(store, job, g, [tmp_path / "map"]) for g in groups]
        assert list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))
        split_clean.discard(location, [w["base_offset"] for w in written])
    assert not list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))
    assert live_digest(logs) == before


def test_a_group_whose_sources_changed_is_not_swapped(tmp_path: Path) -> None:
    store, logs = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, 0, active, T0, T0)
    with cleaner_lock(location.directory, timeout_s=0):
        groups = split_clean.plan_split(store, location, job)
        parts = [split_clean.build_map_part(store, job, 0, 1, tmp_path / "map")]
        written = [split_clean.write_group(store, job, g, [tmp_path / "map"]) for g in groups]
        source = names.log_file(location.directory, groups[0][0])
        info = source.stat()
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
        before = {k: v for k, v in live_digest(logs).items() if not k.endswith(names.CLEANED_SUFFIX)}
        with pytest.raises(CleanerError, match="changed while being cleaned"):
            split_clean.swap_and_finish(store, location, job, written, parts)
    assert live_digest(logs) == before
    assert not list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))
