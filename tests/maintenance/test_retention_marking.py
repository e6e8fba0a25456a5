"""Retention marks a partition its last writer left closed and flushed from its listing, as Kafka's broker
marks its loaded log; any other partition is loaded in full first. Both ways end with the same files."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.cycle import retention as cycle_retention
from kafkalog.errors import LogLockedError
from kafkalog.log import checkpoint, names, snapshot
from kafkalog.log.lock import partition_lock
from kafkalog.log.snapshot import RetentionSource
from kafkalog.log.store import LogStore
from kafkalog.maintenance import journal
from kafkalog.maintenance.retention import MarkingBatch, apply_retention, enforce_retention
from kafkalog.policy.retention import RetentionPlan, plan_retention
from tests.pipeline.helpers import live_files

HOUR_MS = 3_600_000


def _store(log_dir: Path, now_ms: int) -> None:
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t", "--partitions", "2",
                   "--config", "retention.ms=3600000", "--config", "segment.bytes=1024").code == 0
    for partition, age_ms in ((0, 2 * HOUR_MS), (1, 0)):
        lines = "".join(f"k{i}:v{i}\n" for i in range(200))
        assert run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--partition", str(partition),
                       "--key-separator", ":", "--timestamp-ms", str(now_ms - age_ms), "--batch-records", "10",
                       stdin=lines).code == 0
    fresh = "".join(f"k{i}:new{i}\n" for i in range(30))  # partition 0 keeps these: not every segment goes
    assert run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--key-separator", ":",
                   "--timestamp-ms", str(now_ms), "--batch-records", "10", stdin=fresh).code == 0


def _marks(log_dir: Path) -> list[tuple[object, ...]]:
    return [(e["topic"], e["partition"], e["action"], tuple(e["segments"]), e["log_start_offset_before"],
             e["log_start_offset_after"], tuple(e["files"])) for e in journal.read(log_dir) if e["action"] != "create"]


def test_a_flushed_partition_is_marked_from_its_listing_to_the_files_a_full_load_gives(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    listed, loaded = tmp_path / "listed", tmp_path / "loaded"
    _store(listed, now_ms)
    before = _marks(listed)
    shutil.copytree(listed, loaded)
    # A broker's clean shutdown file: the full load consumes it, marking from the listing leaves it.
    for log_dir in (listed, loaded):
        (log_dir / names.CLEAN_SHUTDOWN_FILE).touch()
    # Without its recovery point t-0 is not known flushed: it is loaded (and flushed) first.
    points = checkpoint.read_offset_checkpoint(loaded / names.RECOVERY_POINT_CHECKPOINT)
    del points[("t", 0)]
    checkpoint.write_offset_checkpoint(loaded / names.RECOVERY_POINT_CHECKPOINT, points)

    for log_dir in (listed, loaded):
        done = run_cli("retention", "apply", "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--json")
        assert done.code == 0, done.err
        applied = json.loads(done.out)["applied"]
        assert [(a["topic"], a["partition"]) for a in applied] == [("t", 0)] and len(applied[0]["segments"]) >= 2
    assert (listed / names.CLEAN_SHUTDOWN_FILE).exists()  # marked from the listing
    assert not (loaded / names.CLEAN_SHUTDOWN_FILE).exists()  # loaded in full
    (listed / names.CLEAN_SHUTDOWN_FILE).unlink()
    assert live_files(listed) == live_files(loaded)
    deleted = sorted(p.name for p in (listed / "t-0").glob("*" + names.DELETED_SUFFIX))
    assert deleted == sorted(p.name for p in (loaded / "t-0").glob("*" + names.DELETED_SUFFIX)) and deleted
    assert _marks(listed)[len(before):] == _marks(loaded)[len(before):]
    # Both logs read the same from their new log start offset on.
    for log_dir in (listed, loaded):
        got = run_cli("consume", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--print-offset")
        assert got.code == 0 and got.out == run_cli("consume", "--log-dir", str(listed), "--topic", "t",
                                                    "--partition", "0", "--print-offset").out


def test_checkpoint_entries_a_batch_holds_back_read_as_written(tmp_path: Path) -> None:
    """Within ``batched_checkpoints`` every read sees the batch's updates (and removals) over the file."""
    assert run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "t", "--partitions", "3").code == 0
    store = LogStore([tmp_path])
    locations = store.partitions("t")
    store.write_offsets(locations[2], recovery_point=7, log_start_offset=5)
    with store.batched_checkpoints():
        store.write_offsets(locations[0], recovery_point=12, log_start_offset=10)
        store.write_offsets(locations[2], recovery_point=9, log_start_offset=0)  # 0: the entry goes
        starts = store.log_dir_checkpoints(tmp_path).log_start_offsets
        assert dict(starts) == {("t", 0): 10} and starts.get(("t", 2)) is None and len(starts) == 1
        assert (tmp_path / names.LOG_START_OFFSET_CHECKPOINT).read_text().splitlines()[2:] == ["t 2 5"]
    assert dict(LogStore([tmp_path]).log_dir_checkpoints(tmp_path).log_start_offsets) == {("t", 0): 10}


def test_a_retried_plan_records_the_log_start_offsets_a_killed_batch_did_not(tmp_path: Path) -> None:
    """A ``mark_deleted`` task killed after its renames, before its batch wrote the checkpoints: its retry,
    with the same plan, finds the segments marked and still records the log start offsets."""
    now_ms = int(time.time() * 1000)
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    _store(killed, now_ms)
    shutil.copytree(killed, reference)
    plan = tmp_path / "plan.json"
    done = run_cli("retention", "plan", "--log-dir", str(killed), "--now-ms", str(now_ms), "--json")
    assert done.code == 0
    plan.write_text(done.out.replace(str(killed), str(reference)))
    assert run_cli("retention", "apply", "--log-dir", str(reference), "--plan", str(plan)).code == 0
    plan.write_text(done.out)

    checkpoints = (names.LOG_START_OFFSET_CHECKPOINT, names.RECOVERY_POINT_CHECKPOINT)
    unwritten = {name: (killed / name).read_bytes() if (killed / name).exists() else None for name in checkpoints}
    assert run_cli("retention", "apply", "--log-dir", str(killed), "--plan", str(plan)).code == 0
    assert (killed / names.LOG_START_OFFSET_CHECKPOINT).read_bytes() != unwritten[names.LOG_START_OFFSET_CHECKPOINT]
    for name, data in unwritten.items():  # the kill: the batch's checkpoint writes never happened
        if data is None:
            (killed / name).unlink()
        else:
            (killed / name).write_bytes(data)

    retry = run_cli("retention", "apply", "--log-dir", str(killed), "--plan", str(plan), "--json")
    assert retry.code == 0 and json.loads(retry.out)["applied"][0]["segments"] == []
    assert live_files(killed) == live_files(reference)


def test_only_the_segments_the_plan_read_and_the_last_are_checked_before_marking_from_the_listing(
        tmp_path: Path) -> None:
    """A torn time index in a kept segment whose timestamp the plan never read changes nothing the plan
    decides: the partition is still marked from its listing, as Kafka's loader after a clean shutdown
    reads no index below the recovery point; the same damage in a segment the plan read (the first one
    kept) makes it load the partition in full first, which rebuilds that index."""
    now_ms = int(time.time() * 1000)
    unread, read = tmp_path / "unread", tmp_path / "read"
    _store(unread, now_ms)
    more = "".join(f"k{i}:newer{i}\n" for i in range(200))  # several fresh segments after the first kept one
    assert run_cli("produce", "--log-dir", str(unread), "--topic", "t", "--partition", "0", "--key-separator", ":",
                   "--timestamp-ms", str(now_ms), "--batch-records", "10", stdin=more).code == 0
    shutil.copytree(unread, read)
    plan = json.loads(run_cli("retention", "plan", "--log-dir", str(unread), "--now-ms", str(now_ms), "--json").out)
    (due,) = [p for p in plan["partitions"] if p["segments"]]
    bases = sorted(int(p.name[:20]) for p in (unread / "t-0").glob("*" + names.LOG_SUFFIX))
    first_kept = bases[len(due["segments"])]
    middle = bases[len(due["segments"]) + 1]
    assert middle != bases[-1]
    for log_dir, damaged in ((unread, middle), (read, first_kept)):
        (log_dir / names.CLEAN_SHUTDOWN_FILE).touch()  # consumed by a full load only
        index = names.time_index_file(log_dir / "t-0", damaged)
        with index.open("ab") as torn:
            torn.write(b"\x00" * 5)  # not a whole entry: Kafka's sanity check refuses it
        done = run_cli("retention", "apply", "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--json")
        assert done.code == 0, done.err
        assert [a["segments"] for a in json.loads(done.out)["applied"]] == [[s["base_offset"] for s in due["segments"]]]
    assert (unread / names.CLEAN_SHUTDOWN_FILE).exists()  # marked from the listing
    assert names.time_index_file(unread / "t-0", middle).stat().st_size % 12 == 5  # not read, not repaired
    assert not (read / names.CLEAN_SHUTDOWN_FILE).exists()  # loaded in full
    assert names.time_index_file(read / "t-0", first_kept).stat().st_size % 12 == 0  # rebuilt by the load
    assert sorted(p.name for p in (unread / "t-0").glob("*" + names.DELETED_SUFFIX)) == \
        sorted(p.name for p in (read / "t-0").glob("*" + names.DELETED_SUFFIX))


def test_a_lost_epoch_truncation_is_made_again_by_the_next_load(tmp_path: Path) -> None:
    """Marking writes the leader epochs' truncation without making its rename durable, as Kafka's
    ``truncateFromStartAsyncFlush`` flushes it later: a power loss may bring back the old checkpoint, and
    the log start offset checkpoint with it. The next load truncates the epochs again from the log start
    offset, max(checkpoint, first segment), as Kafka's ``LogLoader`` does."""
    now_ms = int(time.time() * 1000)
    _store(tmp_path, now_ms)
    partition = tmp_path / "t-0"
    epochs = partition / names.LEADER_EPOCH_CHECKPOINT
    checkpoint.write_leader_epoch_checkpoint(epochs, [(0, 0), (3, 5)])
    start_checkpoint = tmp_path / names.LOG_START_OFFSET_CHECKPOINT
    old = {path: path.read_bytes() for path in (epochs, start_checkpoint) if path.exists()}
    done = run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(now_ms), "--json")
    assert done.code == 0, done.err
    new_start = json.loads(done.out)["applied"][0]["log_start_offset_after"]
    assert new_start > 5 and checkpoint.read_leader_epoch_checkpoint(epochs) == [(3, new_start)]
    for path in (epochs, start_checkpoint):  # the power loss
        if path in old:
            path.write_bytes(old[path])
        else:
            path.unlink()
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == [(0, 0), (3, 5)]
    store = LogStore([tmp_path])
    with store.writable_log(store.locate("t", 0)) as log:
        assert log.log_start_offset == new_start
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == [(3, new_start)]


def test_the_check_before_marking_from_the_listing_reads_each_file_once_with_the_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the lock the plan is made again and the partition checked as a full load would see it: both
    read through one ``RetentionSource``, so each index's ends and each segment's tail are read once."""
    now_ms = int(time.time() * 1000)
    _store(tmp_path, now_ms)
    store = LogStore([tmp_path])
    location = store.locate("t", 0)
    with RetentionSource(tmp_path, "t", 0, store.log_config("t"), store.log_dir_checkpoints(tmp_path)) as source:
        plan = plan_retention(source, now_ms, broker=store.broker)
    assert plan.segments
    ends: list[str] = []
    tails: list[str] = []
    read_ends, frame_log_tail = snapshot._read_ends, snapshot._frame_log_tail
    monkeypatch.setattr(snapshot, "_read_ends", lambda *args: ends.append(args[2]) or read_ends(*args))
    monkeypatch.setattr(snapshot, "_frame_log_tail", lambda *args: tails.append(args[1]) or frame_log_tail(*args))
    report = apply_retention(store, location, plan, run_id="run-once")
    assert report.deleted_segments == tuple(s.base_offset for s in plan.segments)
    assert not report.rolled and tails  # marked from the listing, after the check framed the tails
    assert len(ends) == len(set(ends)) and len(tails) == len(set(tails))
    read = {int(name[:20]) for name in ends if name.endswith(names.TIME_INDEX_SUFFIX)}
    last = max(int(p.name[:20]) for p in (tmp_path / "t-0").glob("*" + names.LOG_SUFFIX))
    assert {int(prefix) for prefix in tails} == read | {last}  # what the plan read, and the log end


def _epochs_and_plan(tmp_path: Path) -> tuple[LogStore, object, list[tuple[int, int]], RetentionPlan]:
    now_ms = int(time.time() * 1000)
    _store(tmp_path, now_ms)
    store = LogStore([tmp_path])
    epochs = checkpoint.read_leader_epoch_checkpoint(tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT)
    with RetentionSource(tmp_path, "t", 0, store.log_config("t"), store.log_dir_checkpoints(tmp_path)) as source:
        plan = plan_retention(source, now_ms, broker=store.broker)
    assert plan.segments and epochs and epochs[0][1] < plan.log_start_offset_after
    return store, store.locate("t", 0), epochs, plan


def test_a_batch_writes_the_epochs_and_releases_the_lock_of_each_partition_it_marked_when_it_closes(
        tmp_path: Path) -> None:
    store, location, epochs, plan = _epochs_and_plan(tmp_path)
    path = tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT
    with MarkingBatch() as batch:
        report = apply_retention(store, location, plan, run_id="run-batch", batch=batch)
        assert report.log_start_offset_after == plan.log_start_offset_after
        assert checkpoint.read_leader_epoch_checkpoint(path) == epochs  # not yet: the batch writes it
        with pytest.raises(LogLockedError):  # and holds the partition until then
            with partition_lock(tmp_path / "t-0", timeout_s=0):
                pass
    assert not batch.errors
    assert checkpoint.read_leader_epoch_checkpoint(path)[0] == (epochs[0][0], report.log_start_offset_after)
    with partition_lock(tmp_path / "t-0", timeout_s=0):
        pass
    assert not list((tmp_path / "t-0").glob("*" + names.TMP_SUFFIX))


def test_an_epoch_file_the_batch_cannot_write_is_an_error_and_the_old_file_stays(tmp_path: Path) -> None:
    store, location, epochs, plan = _epochs_and_plan(tmp_path)
    path = tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT
    with MarkingBatch() as batch:
        report = apply_retention(store, location, plan, run_id="run-batch", batch=batch)
        assert not report.rolled and report.deleted_segments  # marked from its listing: the epochs are staged
        path.with_name(path.name + names.TMP_SUFFIX).mkdir()  # where the batch writes the new file
    assert [directory for directory, _ in batch.errors] == [tmp_path / "t-0"]
    assert checkpoint.read_leader_epoch_checkpoint(path) == epochs
    with partition_lock(tmp_path / "t-0", timeout_s=0):  # released all the same
        pass
    path.with_name(path.name + names.TMP_SUFFIX).rmdir()
    with store.writable_log(location) as log:  # the next load truncates them
        assert log.log_start_offset == plan.log_start_offset_after
    assert checkpoint.read_leader_epoch_checkpoint(path)[0] == (epochs[0][0], plan.log_start_offset_after)


def test_apply_without_a_plan_marks_in_one_pass_what_planning_then_applying_the_plan_marks(tmp_path: Path) -> None:
    """``retention apply`` plans each partition under its lock and marks it at once: the same files, journal
    and plan as ``retention plan`` followed by ``retention apply --plan`` on a copy."""
    now_ms = int(time.time() * 1000)
    one_pass, two_pass = tmp_path / "one", tmp_path / "two"
    _store(one_pass, now_ms)
    shutil.copytree(one_pass, two_pass)
    before = _marks(one_pass)

    done = run_cli("retention", "apply", "--log-dir", str(one_pass), "--now-ms", str(now_ms), "--json")
    assert done.code == 0, done.err
    planned = run_cli("retention", "plan", "--log-dir", str(two_pass), "--now-ms", str(now_ms), "--json")
    (tmp_path / "plan.json").write_text(planned.out)
    applied = run_cli("retention", "apply", "--log-dir", str(two_pass), "--plan", str(tmp_path / "plan.json"), "--json")
    assert applied.code == 0, applied.err

    one, two = json.loads(done.out), json.loads(applied.out)
    assert one["partitions"] == [{**p, "log_dir": str(one_pass)} for p in two["partitions"]]
    assert [(a["topic"], a["partition"], a["segments"]) for a in one["applied"]] == \
        [(a["topic"], a["partition"], a["segments"]) for a in two["applied"]] and one["applied"][0]["segments"]
    assert live_files(one_pass) == live_files(two_pass)
    for partition in ("t-0", "t-1"):
        assert sorted(p.name for p in (one_pass / partition).iterdir()) == \
            sorted(p.name for p in (two_pass / partition).iterdir())
    assert _marks(one_pass)[len(before):] == _marks(two_pass)[len(before):]


def test_apply_in_one_pass_reads_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan made under the lock and the check before marking from the listing share their reads."""
    now_ms = int(time.time() * 1000)
    _store(tmp_path, now_ms)
    store = LogStore([tmp_path])
    ends: list[str] = []
    tails: list[str] = []
    read_ends, frame_log_tail = snapshot._read_ends, snapshot._frame_log_tail
    monkeypatch.setattr(snapshot, "_read_ends", lambda *args: ends.append(args[2]) or read_ends(*args))
    monkeypatch.setattr(snapshot, "_frame_log_tail", lambda *args: tails.append(args[1]) or frame_log_tail(*args))
    plan, report = enforce_retention(store, store.locate("t", 0), now_ms, run_id="run-once")
    assert plan.segments and report.deleted_segments == tuple(s.base_offset for s in plan.segments)
    assert not report.rolled and tails  # marked from the listing, after the check framed the tails
    assert len(ends) == len(set(ends)) and len(tails) == len(set(tails))


def test_a_partition_another_process_holds_is_waited_for_only_if_it_has_segments_due(tmp_path: Path) -> None:
    """t-0 has segments due, t-1 none: with both locked elsewhere, t-1 is planned without its lock and t-0
    waits for its lock, then fails ``locked`` (an error, not part of the plan carried out), nothing changed."""
    now_ms = int(time.time() * 1000)
    _store(tmp_path, now_ms)
    store = LogStore([tmp_path])
    files = live_files(tmp_path)
    with partition_lock(tmp_path / "t-0"), partition_lock(tmp_path / "t-1"):
        started = time.monotonic()
        plan, applied = cycle_retention.enforce_retention(store, store.partitions("t"), now_ms, run_id="run-held",
                                                          lock_timeout_s=1.0)
        waited_s = time.monotonic() - started
    assert [(p.partition, p.segments) for p in plan.partitions] == [(1, ())]
    assert [(e.partition, e.locked) for e in applied.errors] == [(0, True)] and not applied.applied
    assert 1.0 <= waited_s < 10  # waited for t-0 alone
    assert live_files(tmp_path) == files and not list(tmp_path.glob("t-*/*" + names.DELETED_SUFFIX))
