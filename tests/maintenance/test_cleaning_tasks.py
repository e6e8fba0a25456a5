"""A round as tasks and a driver's commit (``cleaning_tasks``, what the Spark job's tasks run) writes exactly
the bytes ``clean_partition`` writes in one pass, whichever attempt of a task is committed; an attempt's
output that went missing, was cut or was overwritten before the commit is refused and nothing is lost."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from cleaner_helpers import (
    BROKER,
    DAY,
    T0,
    clean,
    cleaner_checkpoint,
    latest_values,
    live_digest,
    marker,
    mixed_log,
    new_store,
    produce,
    put,
    read_log,
)

from kafkalog.errors import CleanerError
from kafkalog.format.batch import ControlType
from kafkalog.log import names
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import cleaning_tasks as tasks
from kafkalog.maintenance.cleaner import CleanResult
from kafkalog.tools.verify import verify_store


def _two_rounds_of_data(tmp_path: Path) -> tuple[LogStore, Path]:
    store, loc = new_store(tmp_path / "logs", segment_bytes="1024")
    mixed_log(store, loc)
    clean(store, loc, now=T0)  # a first round: the next one recopies a clean prefix too
    with store.writable_log(loc) as log:
        put(log, [(f"k{i % 40}", None if i % 9 == 0 else f"again-{i}") for i in range(300)], batch_records=3)
        put(log, [("tail", "active")])
    return store, tmp_path / "logs"


def _data(tmp_path: Path, first_round: bool) -> tuple[LogStore, Path]:
    if first_round:  # aborted transactions in the range
        store, loc = new_store(tmp_path / "logs", segment_bytes="1024")
        mixed_log(store, loc)
        return store, tmp_path / "logs"
    return _two_rounds_of_data(tmp_path)  # a clean prefix below the dirty range


def _as_tasks(store: LogStore, first_dirty: int, now: int, parts: int, scratch: Path,
              damage: object = None) -> CleanResult:
    """The round as the Spark job runs it: planned, its tasks (each group written by two attempts, the
    second committed), the commit, the other attempts discarded."""
    location = store.locate("t", 0)
    active = store.open_log(location, read_only=True).active_segment.base_offset
    with cleaner_lock(location.directory, timeout_s=0):
        spec, ctx = tasks.plan_round(store, location, first_dirty, active, now_ms=now, wall_now_ms=now, parts=parts)
        assert len(spec.groups) > 1
        spec = tasks.RoundSpec.from_dict(spec.to_dict())  # as it reaches a task
        if parts == 1:
            tasks.clean_round_task(store, spec, "attempt-1")  # a lost attempt: its files stay until the discard
            done = tasks.clean_round_task(store, spec, "attempt-2")
            groups, maps = done["groups"], done["maps"]
        else:
            parts_done = [tasks.map_part_task(store, spec, p, scratch / f"map-{p}") for p in range(parts)]
            prefixes = [d["prefix"] for d in parts_done]
            states = tasks.group_txn_states(ctx, spec, parts_done)
            groups = [tasks.write_group_task(store, spec, i, prefixes, state, f"attempt-{i}")
                      for i, state in enumerate(states)]
            maps = [d["stats"] for d in parts_done]
        if callable(damage):
            damage(location.directory, groups)
        try:
            return tasks.commit_round(ctx, spec, groups, maps, run_id="tasks")
        finally:
            tasks.discard_attempts(location)


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("first_round", [False, True])
def test_a_round_as_tasks_writes_the_bytes_of_one_pass(tmp_path: Path, parts: int, first_round: bool) -> None:
    store, logs = _data(tmp_path / "one", first_round)
    shutil.copytree(logs, tmp_path / "tasks")
    task_store = LogStore([tmp_path / "tasks"], BROKER)
    now = T0 + 2 * DAY  # horizons stamped in the first round have passed: tombstones and markers go now
    first_dirty = cleaner_checkpoint(logs).get(("t", 0), 0)
    assert (first_dirty > 0) != first_round
    one = clean(store, store.locate("t", 0), first_dirty=first_dirty, now=now)
    result = _as_tasks(task_store, first_dirty, now, parts, tmp_path / "scratch")
    assert live_digest(tmp_path / "tasks") == live_digest(logs)
    assert cleaner_checkpoint(tmp_path / "tasks") == cleaner_checkpoint(logs) == {("t", 0): one.end_offset}
    assert result.groups == one.groups and result.stats.records_written == one.stats.records_written
    assert result.stats.map_keys == one.stats.map_keys and one.stats.records_written < one.stats.records_read
    assert verify_store(task_store).ok
    assert not [p.name for p in (tmp_path / "tasks").rglob("*") if p.name.endswith(names.CLEANED_SUFFIX)]


def _interleaved_transactions(store: LogStore, seed: int) -> None:
    """Three producers whose transactions stay open across several segments (a batch a segment at
    most), committed or aborted in a later one, between plain records."""
    rng = random.Random(seed)
    loc = store.locate("t", 0)
    open_txns: set[int] = set()
    with store.writable_log(loc) as log:
        for step in range(60):
            pid = rng.choice([3, 4, 5])
            if pid in open_txns and rng.random() < 0.4:
                marker(log, rng.choice([ControlType.ABORT, ControlType.COMMIT]), pid)
                open_txns.discard(pid)
            elif rng.random() < 0.6:
                produce(log, pid, step, [(f"k{rng.randrange(12)}", f"{pid}-{step}")], transactional=True)
                open_txns.add(pid)
            else:
                put(log, [(f"k{rng.randrange(12)}", None if rng.random() < 0.2 else f"plain-{step}")])
        for pid in sorted(open_txns):
            marker(log, ControlType.COMMIT, pid)
        log.roll()


@pytest.mark.parametrize("seed", range(6))
def test_transactions_across_groups_split_into_tasks_write_the_bytes_of_one_pass(tmp_path: Path, seed: int) -> None:
    """Each group of a split round is written by its own task, which starts from the transaction
    tracker's state at the group's first offset (worked out on the driver from the map parts'
    ``txn_events``): a transaction's data and its marker in different groups are decided as one pass
    decides them, round after round."""
    store, loc = new_store(tmp_path / "one", segment_bytes="160")  # about one batch a segment: a group each
    _interleaved_transactions(store, seed)
    shutil.copytree(tmp_path / "one", tmp_path / "tasks")
    task_store = LogStore([tmp_path / "tasks"], BROKER)
    for now in (T0, T0 + 2 * DAY, T0 + 4 * DAY):
        clean(store, loc, now=now)
        assert len(_as_tasks(task_store, 0, now, 2, tmp_path / "scratch").groups) > 3
        assert live_digest(tmp_path / "tasks") == live_digest(tmp_path / "one")
    assert verify_store(task_store).ok


def _remove(directory: Path, groups: list[dict[str, object]]) -> None:
    os.unlink(names.log_file(directory, int(groups[-1]["base_offset"]), tasks.attempt_suffix(str(groups[-1]["tag"]))))


def _cut(directory: Path, groups: list[dict[str, object]]) -> None:
    path = names.log_file(directory, int(groups[-1]["base_offset"]), tasks.attempt_suffix(str(groups[-1]["tag"])))
    os.truncate(path, path.stat().st_size - 1)


def _overwrite(directory: Path, groups: list[dict[str, object]]) -> None:
    path = names.log_file(directory, int(groups[0]["base_offset"]), tasks.attempt_suffix(str(groups[0]["tag"])))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the checksum tells
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_remove, _cut, _overwrite])
@pytest.mark.parametrize("parts", [1, 2])
def test_an_attempt_s_output_damaged_before_the_commit_is_refused_and_nothing_is_lost(
        tmp_path: Path, damage: object, parts: int) -> None:
    store, logs = _two_rounds_of_data(tmp_path)
    first_dirty = cleaner_checkpoint(logs)[("t", 0)]
    before = _latest(store)
    with pytest.raises(CleanerError, match="nothing swapped"):
        _as_tasks(store, first_dirty, T0 + 2 * DAY, parts, tmp_path / "scratch", damage)
    # Groups before the damaged one may be swapped in (each is whole); every key keeps its latest value.
    assert _latest(store) == before
    assert cleaner_checkpoint(logs)[("t", 0)] == first_dirty  # the round is not recorded as done
    assert verify_store(store).ok
    assert not [p.name for p in logs.rglob("*") if p.name.endswith(names.CLEANED_SUFFIX)]


def test_attempt_tags_are_checked() -> None:
    assert tasks.attempt_suffix("attempt-7") == ".attempt-7.cleaned"
    for bad in ("", "../x", "a.b", "a/b"):
        with pytest.raises(ValueError, match="attempt tag"):
            tasks.attempt_suffix(bad)


def _latest(store: LogStore) -> dict[bytes, bytes | None]:
    """Each key's latest value, keys whose latest record is a tombstone left out."""
    return {k: v for k, v in latest_values(read_log(store, store.locate("t", 0))[1]).items() if v is not None}
