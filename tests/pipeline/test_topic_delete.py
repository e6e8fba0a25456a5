"""``kafkalog topics delete`` and the cycle's ``delete_marked``, as Kafka's LogManager deletes topics."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import run_cli
from synthetic import CHANGELOG, EVENTS, build_store

from kafkalog.cycle import steps
from kafkalog.cycle.steps import CycleSettings
from kafkalog.log.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kafkalog.log.names import OFFSET_CHECKPOINTS, RECOVERY_POINT_CHECKPOINT, TopicPartition
from kafkalog.log.store import LogStore, PartitionLocation, parse_delete_dir_name


def _delete_dirs(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.endswith("-delete"))


def test_a_deleted_topic_disappears_at_once_and_its_dirs_go_after_the_delay(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    (tmp_path / "broker.properties").write_text("log.segment.delete.delay.ms=30000\n")
    config = ["--config-file", str(tmp_path / "broker.properties")]
    done = run_cli("topics", "delete", "--log-dir", str(log_dir), "--topic", EVENTS, *config)
    assert done.code == 0, done.err
    renamed = _delete_dirs(log_dir)
    assert len(renamed) == 2 and all(parse_delete_dir_name(n) is not None for n in renamed)
    assert {parse_delete_dir_name(n).partition for n in renamed} == {0, 1}  # type: ignore[union-attr]
    assert all(n.startswith(f"{EVENTS}-") and len(n.split(".")[-1]) == len("0123456789abcdef0123456789abcdef-delete")
               for n in renamed)

    consumed = run_cli("consume", "--log-dir", str(log_dir), "--topic", EVENTS, "--partition", "0")
    assert consumed.code == 1 and "does not exist" in consumed.err
    status = json.loads(run_cli("status", "--log-dir", str(log_dir), "--json").out)
    assert EVENTS not in {row["topic"] for row in status["partitions"]}
    assert EVENTS not in json.loads(run_cli("topics", "describe", "--log-dir", str(log_dir), "--json").out)["topics"]
    assert run_cli("verify", "--log-dir", str(log_dir)).code == 0
    journal = json.loads(run_cli("journal", "--log-dir", str(log_dir), "--topic", EVENTS, "--json").out)["entries"]
    assert sorted(e["files"][0] for e in journal if e["action"] == "delete-topic") == renamed

    settings = CycleSettings("t/1", now_ms, (str(log_dir),), str(tmp_path / "broker.properties"))
    steps.scan_partitions(tmp_path / "run1", settings)
    early = steps.delete_marked(tmp_path / "run1")
    assert early["deleted_dirs"] == 0 and _delete_dirs(log_dir) == renamed  # not before the delay
    marked_s = (log_dir / renamed[0]).lstat().st_mtime
    assert abs(marked_s - time.time()) < 30  # the mark time is the dir's mtime ...
    for name in renamed:  # ... so 31 s later is this:
        os.utime(log_dir / name, (marked_s - 31, marked_s - 31), follow_symlinks=False)
    steps.scan_partitions(tmp_path / "run2", CycleSettings("t/2", now_ms, (str(log_dir),),
                                                           str(tmp_path / "broker.properties")))
    late = steps.delete_marked(tmp_path / "run2")
    assert late["deleted_dirs"] == 2 and _delete_dirs(log_dir) == []
    assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", EVENTS).code == 0  # the name is free


def test_a_crash_between_the_renames_is_finished_by_the_next_cycle(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    store = LogStore([log_dir])
    store.begin_topic_delete(CHANGELOG, now_ms=now_ms)  # the intent is recorded ...
    store.rename_for_delete(_live(log_dir, CHANGELOG, 0), mark_time_ms=now_ms)
    # ... one partition renamed, then the process died.
    assert (log_dir / f"{CHANGELOG}-1").is_dir() and len(_delete_dirs(log_dir)) == 1
    fresh = LogStore([log_dir])
    assert CHANGELOG not in fresh.topics() and all(p.topic_partition.topic != CHANGELOG for p in fresh.partitions())
    recreate = run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", CHANGELOG)
    assert recreate.code == 1 and "is being deleted" in recreate.err

    scan = steps.scan_partitions(tmp_path / "run", CycleSettings("t/1", now_ms, (str(log_dir),)))
    assert scan["errors"] == []
    assert not (log_dir / f"{CHANGELOG}-1").exists() and len(_delete_dirs(log_dir)) == 2
    assert LogStore([log_dir]).deleting_topics() == {}


def _live(log_dir: Path, topic: str, partition: int) -> PartitionLocation:
    return PartitionLocation(TopicPartition(topic, partition), log_dir.resolve())


def test_bad_deletes_are_refused_and_change_nothing(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    build_store(log_dir, int(time.time() * 1000) - 60_000)
    before = sorted(os.listdir(log_dir))
    missing = run_cli("topics", "delete", "--log-dir", str(log_dir), "--topic", "nope")
    assert missing.code == 1 and "'nope' does not exist" in missing.err
    store = LogStore([log_dir])
    store.create_topic("__consumer_offsets", 1, {})
    internal = run_cli("topics", "delete", "--log-dir", str(log_dir), "--topic", "__consumer_offsets")
    assert internal.code == 1 and "internal topic" in internal.err
    assert sorted(os.listdir(log_dir)) == sorted([*before, "__consumer_offsets-0"])


def _checkpoints(log_dir: Path) -> dict[str, dict[tuple[str, int], int]]:
    return {name: read_offset_checkpoint(log_dir / name) for name in OFFSET_CHECKPOINTS}


def _with_entries(log_dir: Path, topic: str, offset: int) -> dict[str, dict[tuple[str, int], int]]:
    """Give partitions 0 and 1 of ``topic`` an entry in every offset checkpoint; returns the files' entries."""
    for name in OFFSET_CHECKPOINTS:
        entries = read_offset_checkpoint(log_dir / name)
        entries.update({(topic, 0): offset, (topic, 1): offset})
        write_offset_checkpoint(log_dir / name, entries)
    return _checkpoints(log_dir)


def _without(entries: dict[str, dict[tuple[str, int], int]], topic: str) -> dict[str, dict[tuple[str, int], int]]:
    return {name: {k: v for k, v in found.items() if k[0] != topic} for name, found in entries.items()}


def test_a_crash_before_the_checkpoints_lose_the_topic_is_finished_by_the_next_cycle(tmp_path: Path) -> None:
    """Kafka's asyncDelete drops a deleted partition from every offset checkpoint. A crash after the renames
    and before that leaves the intent recorded: the next cycle's scan removes the entries, then the intent;
    the other topics' entries stay as they were."""
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    before = _with_entries(log_dir, CHANGELOG, 300)
    assert all(before[name][(CHANGELOG, 1)] == 300 for name in OFFSET_CHECKPOINTS)
    store = LogStore([log_dir])
    store.begin_topic_delete(CHANGELOG, now_ms=now_ms)
    for partition in (0, 1):
        store.rename_for_delete(_live(log_dir, CHANGELOG, partition), mark_time_ms=now_ms)
    assert _checkpoints(log_dir) == before  # the process died here
    scan = steps.scan_partitions(tmp_path / "run", CycleSettings("t/1", now_ms, (str(log_dir),)))
    assert scan["errors"] == []
    assert _checkpoints(log_dir) == _without(before, CHANGELOG)
    assert LogStore([log_dir]).deleting_topics() == {}


def test_a_batch_of_checkpoint_updates_does_not_bring_back_a_deleted_partition(tmp_path: Path) -> None:
    """A command that batches its checkpoint updates (``retention apply``, ``recover``) and touched a
    partition before its topic was deleted writes no entry for it at its end."""
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    store = LogStore([log_dir])
    with store.batched_checkpoints():
        with store.writable_log(store.locate(CHANGELOG, 0)):
            pass
        with store.writable_log(store.locate(EVENTS, 0)) as log:
            log.roll()  # its recovery point moves to its log end
            events_end = log.log_end_offset
        done = run_cli("topics", "delete", "--log-dir", str(log_dir), "--topic", CHANGELOG)
        assert done.code == 0, done.err
    after = _checkpoints(log_dir)
    assert not [key for found in after.values() for key in found if key[0] == CHANGELOG]
    assert after[RECOVERY_POINT_CHECKPOINT][(EVENTS, 0)] == events_end


def test_a_topic_created_again_does_not_inherit_entries_under_its_name(tmp_path: Path) -> None:
    """Entries a deletion left behind (one that predates their removal, or a broker's) are not the new
    topic's: ``topics create`` removes them, and a produce starts at offset 0."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    before = _with_entries(log_dir, "gone", 300)
    created = run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "gone", "--partitions", "2")
    assert created.code == 0, created.err
    assert _checkpoints(log_dir) == _without(before, "gone") == {name: {} for name in OFFSET_CHECKPOINTS}
    produced = run_cli("produce", "--log-dir", str(log_dir), "--topic", "gone", "--partition", "1", stdin="x\n")
    assert produced.code == 0, produced.err
    assert run_cli("consume", "--log-dir", str(log_dir), "--topic", "gone", "--partition", "1",
                   "--print-offset").out == "0\tnull\tx\n"
