"""A round cleaned in parts (``split_clean``: key maps in hashed parts, then groups, then swaps) writes exactly
the bytes ``clean_partition`` writes in one pass, and a part that fails changes nothing."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from test_cleaner import DAY, T0, _mixed_log, clean, cleaner_checkpoint, live_digest, new_store, produce, put

from kafkalog.errors import CleanerError
from kafkalog.format.key_table import bits_set
from kafkalog.format.scan import scan_records
from kafkalog.log import names
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import split_clean
from kafkalog.maintenance.cleaner import (
    CleanContext,
    CleanerStats,
    _read_batches,
    build_key_map,
    dirty_segments,
    open_clean_context,
)
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


def _second_round(tmp_path: Path) -> CleanContext:
    """The context of the second round over ``_two_rounds_of_data``: a clean prefix, then the dirty range."""
    store, _ = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    first_dirty = cleaner_checkpoint(tmp_path / "logs")[("t", 0)]
    return open_clean_context(store, location, first_dirty, active, now_ms=T0, wall_now_ms=T0)


def _split_round(store: LogStore, scratch: Path, parts: int, first_dirty: int, now: int, workers: int = 1,
                 wait_for: list[dict[str, object]] | None = None) -> list[dict[str, object]]:
    """A round by ``workers`` threads on one board, as the Spark job's tasks run it; what each did."""
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, first_dirty, active, now, now)
    with cleaner_lock(location.directory, timeout_s=0):
        plan, ctx = split_clean.plan_round(store, location, job, scratch, parts)
        assert len(plan.groups) > 1
        with ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(lambda w: split_clean.run_split_task(store, [plan], f"w{w}"), range(workers)))
        assert all(d["failed"] == {} for d in done)
        written, maps = split_clean.collect(split_clean.Board(plan))
        assert len(written) == len(plan.groups) and len(maps) == parts
        split_clean.swap_and_finish(ctx, written, maps, run_id="split")
    return [d["rounds"].get("t-0", {"mapped": [], "groups_written": []}) for d in done]


@pytest.mark.parametrize(("parts", "workers"), [(1, 1), (1, 2), (3, 1), (2, 4)])
@pytest.mark.parametrize("first_round", [False, True])
def test_split_round_writes_the_bytes_of_one_pass(tmp_path: Path, parts: int, workers: int, first_round: bool) -> None:
    """A first round has aborted transactions in its range (the map goes forwards, every group waits for it);
    a second one recopies a clean prefix (its group needs the saved map parts), the rest from final bits."""
    if first_round:
        store, loc = new_store(tmp_path / "one" / "logs", segment_bytes="1024")
        _mixed_log(store, loc)
        logs = tmp_path / "one" / "logs"
    else:
        store, logs = _two_rounds_of_data(tmp_path / "one")
    shutil.copytree(logs, tmp_path / "split")
    split_store = LogStore([tmp_path / "split"])
    now = T0 + 2 * DAY  # horizons stamped in the first round have passed: tombstones and markers go now
    first_dirty = cleaner_checkpoint(logs).get(("t", 0), 0)
    assert (first_dirty > 0) != first_round
    one = clean(store, store.locate("t", 0), first_dirty=first_dirty, now=now)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = _split_round(split_store, scratch, parts, first_dirty, now, workers)
    assert live_digest(tmp_path / "split") == live_digest(logs)
    assert cleaner_checkpoint(tmp_path / "split") == cleaner_checkpoint(logs) == {("t", 0): one.end_offset}
    assert one.stats.records_written < one.stats.records_read
    assert verify_store(split_store).ok
    assert not list((tmp_path / "split").rglob(f"*{names.CLEANED_SUFFIX}"))
    assert sorted(m["part"] for d in done for m in d["mapped"]) == list(range(parts))  # each part built once
    assert sum(len(d["groups_written"]) for d in done) == len(list(scratch.glob("group-*.json")))
    # The parts are saved only when a group needs them: the clean prefix's.
    assert bool(list(scratch.glob("map-*.table.npy"))) == (not first_round)


def test_final_bits_come_latest_segment_first_and_are_the_map_s(tmp_path: Path) -> None:
    """Built backwards, the map's bits of every offset from a segment on are final once it is in."""
    ctx = _second_round(tmp_path)
    first_dirty, active = ctx.first_dirty_offset, ctx.first_uncleanable_offset
    seen: list[tuple[int, np.ndarray]] = []
    whole = build_key_map(ctx, CleanerStats(), set(), on_final=lambda s, m: seen.append(
        (s.base_offset, m._superseded.copy())))
    bases = [s.base_offset for s in dirty_segments(ctx)]
    assert [b for b, _ in seen] == bases[::-1] and len(bases) > 4
    offsets = np.arange(first_dirty, active, dtype=np.int64)
    final = bits_set(whole._superseded, first_dirty, offsets)
    assert final.sum() > 100
    for base, bits in seen:
        later = offsets >= base
        assert np.array_equal(bits_set(bits, first_dirty, offsets[later]), final[later])
        assert not np.array_equal(bits_set(bits, first_dirty, offsets), final) or base == bases[0]


def test_a_part_left_by_a_dead_worker_is_built_again(tmp_path: Path) -> None:
    """Bits published, no result: its lock is free, so the next worker builds the part from the start."""
    store, logs = _two_rounds_of_data(tmp_path / "one")
    shutil.copytree(logs, tmp_path / "split")
    split_store = LogStore([tmp_path / "split"])
    first_dirty = cleaner_checkpoint(logs)[("t", 0)]
    clean(store, store.locate("t", 0), first_dirty=first_dirty, now=T0)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "bits-0-999999").write_bytes(b"torn")  # a segment that is not there: never read
    (scratch / "map-0.lock").touch()
    done = _split_round(split_store, scratch, 1, first_dirty, T0, workers=2)
    assert live_digest(tmp_path / "split") == live_digest(logs)
    assert [m["part"] for d in done for m in d["mapped"]] == [0]


def _planned_second_round(tmp_path: Path, board: Path) -> tuple[LogStore, Path, split_clean.RoundPlan]:
    """``_two_rounds_of_data`` with its second round planned on ``board``, in one key-map part: the
    store, its log dir, the plan."""
    store, logs = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    first_dirty = cleaner_checkpoint(logs)[("t", 0)]
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, first_dirty, active, T0, T0)
    plan, _ctx = split_clean.plan_round(store, location, job, board, 1)
    return store, logs, plan


def test_a_failed_worker_stops_the_others_and_the_driver_refuses_the_round(tmp_path: Path) -> None:
    store, logs, plan = _planned_second_round(tmp_path, tmp_path)
    location = store.locate("t", 0)
    last = names.log_file(location.directory, plan.groups[-1][-1])
    data = bytearray(last.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records: its CRC fails
    last.write_bytes(bytes(data))
    before = live_digest(logs)
    first = split_clean.run_split_task(store, [plan], "w1")
    assert set(first["failed"]) == {"t-0"} and "CleanerError" in first["failed"]["t-0"]
    assert re.search("CRC|crc|checksum", first["failed"]["t-0"]), first
    # The next worker finds the round settled: it does nothing, and the driver refuses the round.
    assert split_clean.run_split_task(store, [plan], "w2")["rounds"] == {}
    with pytest.raises(CleanerError, match="a worker failed: CleanerError"):
        split_clean.collect(split_clean.Board(plan))
    assert live_digest(logs) == before


def _three_partitions(root: Path) -> LogStore:
    """t-0 with aborted transactions (its map goes forwards), u-0 and u-1 plain (maps built backwards)."""
    store, loc = new_store(root, segment_bytes="1024")
    _mixed_log(store, loc)
    store.create_topic("u", 2, {"cleanup.policy": "compact", "delete.retention.ms": str(DAY), "segment.bytes": "1024"})
    for p in (0, 1):
        with store.writable_log(store.locate("u", p)) as log:
            put(log, [(f"k{(i * (p + 3)) % 50}", None if i % 11 == 0 else f"v{p}-{i}") for i in range(400)],
                batch_records=4)
            put(log, [("tail", "active")])
    return store


THREE = (("t", 0), ("u", 0), ("u", 1))


def _job_beside_one_pass(tmp_path: Path, one_pass: tuple[tuple[str, int], ...]
                         ) -> tuple[LogStore, list[tuple[split_clean.RoundPlan, CleanContext]]]:
    """The three partitions in ``one`` (those of ``one_pass`` cleaned there in one pass each), and a copy
    in ``job`` with every round planned, as the Spark job's driver plans them."""
    store = _three_partitions(tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "job")
    for topic, partition in one_pass:
        clean(store, store.locate(topic, partition))
    job_store = LogStore([tmp_path / "job"])
    return job_store, _plan_job(job_store, tmp_path / "scratch")


def _plan_job(store: LogStore, scratch: Path, partitions: tuple[tuple[str, int], ...] = THREE
              ) -> list[tuple[split_clean.RoundPlan, CleanContext]]:
    plans = []
    for topic, partition in partitions:
        location = store.locate(topic, partition)
        active = store.open_log(location, read_only=True).active_segment.base_offset
        board = scratch / location.directory.name
        board.mkdir(parents=True)
        with cleaner_lock(location.directory, timeout_s=0):  # the driver's (held throughout by the Spark job's)
            job = split_clean.SplitRound(topic, partition, 0, active, T0, T0)
            plans.append(split_clean.plan_round(store, location, job, board, 1))
    return plans


@pytest.mark.parametrize("workers", [1, 2])
def test_one_job_of_many_rounds_writes_the_bytes_of_one_pass_each(tmp_path: Path, workers: int) -> None:
    """The Spark job's stage: every worker takes any round's ready groups and free map parts."""
    job_store, planned = _job_beside_one_pass(tmp_path, THREE)
    plans = [plan for plan, _ in planned]
    assert all(len(p.groups) > 1 and all(p.from_bits) for p in plans)  # first rounds: no clean prefix
    with ThreadPoolExecutor(workers) as pool:
        done = list(pool.map(lambda w: split_clean.run_split_task(job_store, plans, f"w{w}"), range(workers)))
    assert all(d["failed"] == {} for d in done)
    for plan, ctx in planned:
        name = plan.round.name
        assert sorted(m["part"] for d in done for m in d["rounds"].get(name, {}).get("mapped", [])) == [0]
        assert sorted(b for d in done for b in d["rounds"].get(name, {}).get("groups_written", [])) == \
            [g[0] for g in plan.groups]
        written, maps = split_clean.collect(split_clean.Board(plan))
        assert {w["worker"] for w in written} <= {f"w{w}" for w in range(workers)}
        split_clean.swap_and_finish(ctx, written, maps)
    assert live_digest(tmp_path / "job") == live_digest(tmp_path / "one")
    assert cleaner_checkpoint(tmp_path / "job") == cleaner_checkpoint(tmp_path / "one")
    assert verify_store(job_store).ok


def test_rounds_handed_to_the_workers_while_they_run(tmp_path: Path) -> None:
    """As in the Spark job: the workers start with no plan; the driver publishes the rounds one by one, then
    their count; the first worker to see a round settled says so, and the driver finds every round there."""
    job_store, planned = _job_beside_one_pass(tmp_path, THREE)
    run_dir = tmp_path / "scratch"
    for stale in (split_clean.PLANS_END, f"{split_clean.PLAN_PREFIX}0.json", f"{split_clean.SETTLED_PREFIX}t-0"):
        (run_dir / stale).write_text("{}")  # what a killed job of the same run id left
    split_clean.start_run_dir(run_dir)
    assert sorted(os.listdir(run_dir)) == sorted(plan.round.name for plan, _ in planned)  # the boards only
    with ThreadPoolExecutor(3) as pool:
        tasks = [pool.submit(split_clean.run_split_task, job_store, [], f"w{w}", run_dir) for w in range(2)]
        for index, (plan, _ctx) in enumerate(planned):
            time.sleep(0.05)
            assert not any(t.done() for t in tasks)  # they wait for the rest
            split_clean.publish_plan(run_dir, index, plan)
        split_clean.publish_plans_end(run_dir, len(planned))
        done = [t.result(timeout=60) for t in tasks]
    assert all(d["failed"] == {} for d in done)
    assert split_clean.settled_rounds(run_dir) == {plan.round.name for plan, _ in planned}
    for plan, ctx in planned:
        assert sorted(b for d in done for b in d["rounds"].get(plan.round.name, {}).get("groups_written", [])) == \
            [g[0] for g in plan.groups]
        split_clean.swap_and_finish(ctx, *split_clean.collect(split_clean.Board(plan)))
    assert live_digest(tmp_path / "job") == live_digest(tmp_path / "one")


def test_a_plan_handed_over_as_a_file_keeps_the_producer_state(tmp_path: Path) -> None:
    """The plans reach the workers as JSON files: producer ids must come back as the ints the cleaner looks
    up, or a producer's last batch, whose record a later one supersedes, would be dropped instead of kept
    (as an empty batch, as Kafka keeps it)."""
    store, loc = new_store(tmp_path / "one", segment_bytes="1024")
    with store.writable_log(loc) as log:
        put(log, [(f"k{i % 9}", f"v{i}") for i in range(40)])
        produce(log, 5, 0, [("k1", "from the producer")], transactional=False)
        put(log, [(f"k{i % 9}", f"w{i}") for i in range(40)])  # supersedes the producer's record
        put(log, [("tail", "active")])
    shutil.copytree(tmp_path / "one", tmp_path / "job")
    one_pass = clean(store, loc)
    assert one_pass.stats.empty_batches_kept == 1
    job_store = LogStore([tmp_path / "job"])
    [(plan, ctx)] = _plan_job(job_store, tmp_path / "run", (("t", 0),))
    assert plan.producers == {5: (40, 0)}
    split_clean.publish_plan(tmp_path / "run", 0, plan)
    split_clean.publish_plans_end(tmp_path / "run", 1)
    assert split_clean.read_plan(tmp_path / "run", 0) == plan
    assert split_clean.run_split_task(job_store, [], "w", tmp_path / "run")["failed"] == {}
    result = split_clean.swap_and_finish(ctx, *split_clean.collect(split_clean.Board(plan)))
    assert result.stats.empty_batches_kept == 1
    assert live_digest(tmp_path / "job") == live_digest(tmp_path / "one")


def test_a_dead_jobs_run_dir_goes_with_its_last_board(tmp_path: Path) -> None:
    """A killed job leaves its plans, markers and boards; the next driver removes each board under that
    partition's cleaner lock, and the run dir with its plans and markers once no board is left."""
    run_dir = tmp_path / "killed-run"
    for board in ("t-0", "t-1"):
        (run_dir / board).mkdir(parents=True)
        (run_dir / board / "group-0.json").write_text("{}")
    for name in (f"{split_clean.PLAN_PREFIX}0.json", f"{split_clean.PLAN_PREFIX}1.json", split_clean.PLANS_END,
                 f"{split_clean.SETTLED_PREFIX}t-0"):
        (run_dir / name).write_text("{}")
    shutil.rmtree(run_dir / "t-0")
    split_clean.remove_dead_run_dir(run_dir)
    assert sorted(os.listdir(run_dir)) == ["round-0.json", "round-1.json", "rounds-end.json", "settled-t-0", "t-1"]
    shutil.rmtree(run_dir / "t-1")
    split_clean.remove_dead_run_dir(run_dir)
    assert not run_dir.exists()
    split_clean.remove_dead_run_dir(run_dir)  # gone already (another driver was quicker): nothing to do


def test_two_workers_may_publish_the_same_file_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both have written their temporary file before either renames it (two workers saying the same round
    is settled): each has its own, so both renames succeed."""
    both_written = threading.Barrier(2, timeout=10)
    rename = os.replace

    def replace_after_the_other_wrote(src: str | Path, dst: str | Path) -> None:
        both_written.wait()
        rename(src, dst)

    monkeypatch.setattr(split_clean.os, "replace", replace_after_the_other_wrote)
    plan = split_clean.RoundPlan(split_clean.SplitRound("t", 0, 0, 1, T0, T0), [[0]], [True], str(tmp_path / "t-0"),
                                 1, {})
    (tmp_path / "t-0").mkdir()
    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(split_clean.Board(plan).say_settled) for _ in range(2)]:
            f.result(timeout=20)
    assert split_clean.settled_rounds(tmp_path) == {"t-0"}
    assert sorted(os.listdir(tmp_path)) == ["settled-t-0", "t-0"]  # no temporary file left


def test_a_failed_round_does_not_stop_the_others(tmp_path: Path) -> None:
    job_store, planned = _job_beside_one_pass(tmp_path, (("t", 0), ("u", 1)))
    plans = [plan for plan, _ in planned]
    corrupt = job_store.locate("u", 0).directory
    last = names.log_file(corrupt, plans[1].groups[-1][-1])
    data = bytearray(last.read_bytes())
    data[100] ^= 0xFF
    last.write_bytes(bytes(data))
    before = live_digest(corrupt)
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda w: split_clean.run_split_task(job_store, plans, f"w{w}"), range(2)))
    assert [list(d["failed"]) for d in done if d["failed"]] == [["u-0"]]  # one worker met it; the other left it
    with pytest.raises(CleanerError, match="a worker failed: CleanerError"):
        split_clean.collect(split_clean.Board(plans[1]))
    split_clean.discard(job_store.locate("u", 0), [g[0] for g in plans[1].groups])
    assert live_digest(corrupt) == before
    for plan, ctx in (planned[0], planned[2]):
        written, maps = split_clean.collect(split_clean.Board(plan))
        split_clean.swap_and_finish(ctx, written, maps)
    for name in ("t-0", "u-1"):
        assert live_digest(tmp_path / "job" / name) == live_digest(tmp_path / "one" / name)


def test_a_round_failed_while_a_group_is_written_settles_once_that_group_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another worker fails the round while this one writes a group into the partition. Until that
    write is over, the round is not settled: its driver, which discards every ``.cleaned`` file of a
    failed round and lets the cleaner lock go, would otherwise discard before the write ends, and the
    write would leave its files in the partition."""
    run_dir = tmp_path / "run"
    (run_dir / "t-0").mkdir(parents=True)
    store, logs, plan = _planned_second_round(tmp_path, run_dir / "t-0")
    location = store.locate("t", 0)
    before = live_digest(logs)
    driver = split_clean.Board(plan)  # what the driver's watch looks at
    seen_while_writing: list[bool] = []
    write = split_clean._RoundWorker.write

    def failed_meanwhile(self: split_clean._RoundWorker, index: int) -> int:
        if not seen_while_writing:
            self.board.fail("CleanerError: another worker met a corrupt batch")
            seen_while_writing.append(driver.settled())
        return write(self, index)

    monkeypatch.setattr(split_clean._RoundWorker, "write", failed_meanwhile)
    done = split_clean.run_split_task(store, [plan], "w1")
    assert seen_while_writing == [False]  # failed, but a group was being written
    assert len(done["rounds"]["t-0"]["groups_written"]) == 1  # the one under way; no other after the failure
    assert list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))  # what that write left
    assert driver.settled() and driver.failed
    assert split_clean.settled_rounds(run_dir) == {"t-0"}  # said by the worker, once its write was over
    split_clean.discard(location, [g[0] for g in plan.groups])
    assert live_digest(logs) == before


def test_hashed_map_parts_answer_exactly_as_the_one_map(tmp_path: Path) -> None:
    ctx = _second_round(tmp_path)
    first_dirty = ctx.first_dirty_offset
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


def _written_groups(store: LogStore, tmp_path: Path) -> tuple[CleanContext, list[list[int]],
                                                           list[dict[str, object]], list[dict[str, object]]]:
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    job = split_clean.SplitRound("t", 0, 0, active, T0, T0)
    board = tmp_path / "board"
    board.mkdir()
    plan, ctx = split_clean.plan_round(store, location, job, board, 1)
    split_clean.run_split_task(store, [plan])
    written, maps = split_clean.collect(split_clean.Board(plan))
    return ctx, plan.groups, written, maps


def test_discarded_round_leaves_the_log_untouched(tmp_path: Path) -> None:
    store, logs = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    before = live_digest(logs)
    with cleaner_lock(location.directory, timeout_s=0):
        _job, _groups, written, _maps = _written_groups(store, tmp_path)
        assert list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))
        split_clean.discard(location, [int(str(w["base_offset"])) for w in written])
    assert not list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))
    assert live_digest(logs) == before


def test_a_group_whose_sources_changed_is_not_swapped(tmp_path: Path) -> None:
    store, logs = _two_rounds_of_data(tmp_path)
    location = store.locate("t", 0)
    with cleaner_lock(location.directory, timeout_s=0):
        ctx, groups, written, maps = _written_groups(store, tmp_path)
        source = names.log_file(location.directory, groups[0][0])
        info = source.stat()
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
        before = {k: v for k, v in live_digest(logs).items() if not k.endswith(names.CLEANED_SUFFIX)}
        with pytest.raises(CleanerError, match="changed while being cleaned"):
            split_clean.swap_and_finish(ctx, written, maps)
    assert live_digest(logs) == before
    assert not list(location.directory.glob(f"*{names.CLEANED_SUFFIX}"))


def test_a_board_removed_by_a_later_job_ends_that_round_for_the_workers(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A later job that took a partition's cleaner lock once this job's driver let it go removes this job's
    board of it (``_remove_stale_boards`` in the Spark job) while this job's workers may still look: before
    a worker saw it (u-0) or while it writes a group there (u-1). The workers take those rounds as over,
    fail none, and finish the others."""
    job_store, planned = _job_beside_one_pass(tmp_path, (("t", 0),))
    plans = [plan for plan, _ in planned]
    untouched = {name: live_digest(tmp_path / "job" / name) for name in ("u-0", "u-1")}
    shutil.rmtree(plans[1].board)
    write = split_clean._RoundWorker.write

    def removed_while_writing(self: split_clean._RoundWorker, index: int) -> int:
        if self.board.plan.round.name == "u-1":
            shutil.rmtree(self.board.directory)
        return write(self, index)

    monkeypatch.setattr(split_clean._RoundWorker, "write", removed_while_writing)
    done = split_clean.run_split_task(job_store, plans, "w")
    assert done["failed"] == {}
    assert "u-0" not in done["rounds"] and done["rounds"]["u-1"]["groups_written"] == []
    assert sorted(done["rounds"]["t-0"]["groups_written"]) == [g[0] for g in plans[0].groups]
    assert [m["part"] for m in done["rounds"]["u-1"]["mapped"]] == [0]  # its map was done when it went
    split_clean.swap_and_finish(planned[0][1], *split_clean.collect(split_clean.Board(plans[0])))
    assert live_digest(tmp_path / "job" / "t-0") == live_digest(tmp_path / "one" / "t-0")
    for name in ("u-0", "u-1"):  # their .cleaned leftovers aside, which the next round's recovery removes
        assert live_digest(tmp_path / "job" / name) == untouched[name]


def test_a_worker_whose_run_dir_is_removed_stops_looking_for_plans(tmp_path: Path) -> None:
    """Every board of a run removed, then its run dir (``remove_dead_run_dir``), before a worker saw the
    plans' end: it returns rather than dying on the missing dir."""
    job_store, planned = _job_beside_one_pass(tmp_path, (("t", 0),))
    run_dir = tmp_path / "scratch"
    split_clean.publish_plan(run_dir, 0, planned[0][0])
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(split_clean.run_split_task, job_store, [], "w", run_dir)
        deadline = time.monotonic() + 60
        while split_clean.settled_rounds(run_dir) != {"t-0"}:
            assert time.monotonic() < deadline and not task.done()
            time.sleep(0.01)
        shutil.rmtree(run_dir)
        done = task.result(timeout=60)
    assert done["failed"] == {} and [m["part"] for m in done["rounds"]["t-0"]["mapped"]] == [0]
