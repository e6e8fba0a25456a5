"""``clean_log_end``: the cheap check that lets ``kafkalog recover`` leave a healthy partition alone, as
Kafka's loader does after a clean shutdown, and sends everything doubtful to the full load."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest

from kafkalog.log import checkpoint, names
from kafkalog.log.store import LogStore

NOW = int(time.time() * 1000)


def _store(tmp_path: Path) -> tuple[LogStore, Path]:
    log_dir = tmp_path / "logs"
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("t", 1, {"segment.bytes": "2048", "index.interval.bytes": "256"})
    with store.writable_log(store.locate("t", 0)) as log:
        for i in range(40):
            log.append_records([(b"k%d" % i, b"v" * 60, (), NOW + i)])
    return LogStore([log_dir]), log_dir / "t-0"


def _segments(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


def test_a_partition_its_writer_closed_is_clean_at_its_log_end(tmp_path: Path) -> None:
    store, partition = _store(tmp_path)
    location = store.locate("t", 0)
    assert len(_segments(partition)) >= 3
    assert store.clean_log_end(location) == 40
    assert store.open_log(location, read_only=True).log_end_offset == 40
    before = tree_digest(partition.parent)
    result = run_cli("recover", "--json", "--log-dir", str(partition.parent))
    assert result.code == 0, result.err
    assert '"log_end_offset": 40' in result.out and '"recovered_segments": []' in result.out
    assert tree_digest(partition.parent) == before


def test_a_writer_that_died_before_its_checkpoint_is_recovered(tmp_path: Path) -> None:
    store, partition = _store(tmp_path)
    # The recovery point left behind the log end: what a writer killed before closing its log leaves.
    checkpoint.write_offset_checkpoint(partition.parent / names.RECOVERY_POINT_CHECKPOINT, {("t", 0): 5})
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) is None
    result = run_cli("recover", "--json", "--log-dir", str(partition.parent))
    assert result.code == 0, result.err
    assert '"recovered_segments": []' not in result.out
    assert checkpoint.read_offset_checkpoint(partition.parent / names.RECOVERY_POINT_CHECKPOINT) == {("t", 0): 40}
    # A broker's clean-shutdown marker vouches for the whole log dir, as in Kafka's loader.
    checkpoint.write_offset_checkpoint(partition.parent / names.RECOVERY_POINT_CHECKPOINT, {("t", 0): 5})
    (partition.parent / names.CLEAN_SHUTDOWN_FILE).touch()
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) == 40


@pytest.mark.parametrize("damage", ["torn tail", "leftover .cleaned", "orphan index", "index missing",
                                    "torn index entry", "last index entry past the data",
                                    "time index decreasing", "offset index preallocated",
                                    "time index a symlink", "index entries on an empty log",
                                    "sealed segment overwritten after its index", "stray producer snapshot"])
def test_anything_doubtful_goes_to_the_full_load(tmp_path: Path, damage: str) -> None:
    store, partition = _store(tmp_path)
    logs = _segments(partition)
    first, last = logs[0], logs[-1]
    if damage == "torn tail":
        with last.open("ab") as f:
            f.write(b"\0\0\0\0\0\0\0\x07\0\0")
    elif damage == "leftover .cleaned":
        (partition / (first.name + names.CLEANED_SUFFIX)).write_bytes(b"")
    elif damage == "orphan index":
        (partition / "00000000000000099999.index").write_bytes(b"")
    elif damage == "index missing":
        first.with_suffix(names.INDEX_SUFFIX).unlink()
    elif damage == "torn index entry":
        with first.with_suffix(names.INDEX_SUFFIX).open("ab") as f:
            f.write(b"\0\0\0")
    elif damage == "last index entry past the data":
        index = first.with_suffix(names.INDEX_SUFFIX)
        index.write_bytes(index.read_bytes()[:-8] + (1).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    elif damage == "time index decreasing":
        index = first.with_suffix(names.TIME_INDEX_SUFFIX)
        entries = index.read_bytes()
        assert len(entries) >= 24
        index.write_bytes((NOW + 10**9).to_bytes(8, "big") + entries[8:])
    elif damage == "offset index preallocated":  # a running broker's file: zero slots after the entries
        with first.with_suffix(names.INDEX_SUFFIX).open("ab") as f:
            f.write(bytes(8 * 16))
    elif damage == "time index a symlink":
        index = first.with_suffix(names.TIME_INDEX_SUFFIX)
        index.rename(tmp_path / "elsewhere.timeindex")
        index.symlink_to(tmp_path / "elsewhere.timeindex")
    elif damage == "index entries on an empty log":  # vouched for by a broker's marker, not the recovery point
        last.write_bytes(b"")
        last.with_suffix(names.TIME_INDEX_SUFFIX).write_bytes(b"")
        last.with_suffix(names.INDEX_SUFFIX).write_bytes((1).to_bytes(4, "big") + (0).to_bytes(4, "big"))
        (partition.parent / names.CLEAN_SHUTDOWN_FILE).touch()
    elif damage == "stray producer snapshot":  # a delete cut short between a segment and its snapshot
        (partition / f"{int(logs[1].name[:20]) + 1:020d}{names.SNAPSHOT_SUFFIX}").write_bytes(b"")
    else:  # a batch length in the first segment's tail grown: its batches no longer frame to its end
        data = bytearray(first.read_bytes())
        at = 0
        while at + 12 + int.from_bytes(data[at + 8:at + 12], "big") < len(data):  # to the last batch
            at += 12 + int.from_bytes(data[at + 8:at + 12], "big")
        length = int.from_bytes(data[at + 8:at + 12], "big")
        assert at > 0 and at + 12 + length == len(data)
        data[at + 8:at + 12] = (length + 5).to_bytes(4, "big")
        first.write_bytes(bytes(data))
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) is None


def test_recover_removes_a_stray_producer_snapshot_and_keeps_the_one_at_the_log_end(tmp_path: Path) -> None:
    store, partition = _store(tmp_path)
    logs = _segments(partition)
    at_log_end = partition / f"{40:020d}{names.SNAPSHOT_SUFFIX}"
    at_log_end.write_bytes(names.snapshot_file(partition, int(logs[1].name[:20])).read_bytes())
    assert store.clean_log_end(store.locate("t", 0)) == 40  # the newest, past the last base: kept by Kafka too
    stray = partition / f"{int(logs[1].name[:20]) + 1:020d}{names.SNAPSHOT_SUFFIX}"
    stray.write_bytes(at_log_end.read_bytes())
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) is None
    result = run_cli("recover", "--json", "--log-dir", str(partition.parent))
    assert result.code == 0, result.err
    assert f"stray producer snapshot {stray.name} removed" in result.out
    assert not stray.exists() and at_log_end.exists()
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) == 40


def test_full_recovery_checks_the_index_entries_the_quick_check_does_not_read(tmp_path: Path) -> None:
    """Like Kafka's loader after a clean shutdown, the quick check reads an index's first and last
    entries only; a damaged entry in between is for ``recover --full`` (and ``verify``)."""
    store, partition = _store(tmp_path)
    index = _segments(partition)[0].with_suffix(names.INDEX_SUFFIX)
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 24
    entries[8:12] = (10**6).to_bytes(4, "big")  # the second entry's offset, past every other
    index.write_bytes(bytes(entries))
    os.utime(index)
    assert LogStore([partition.parent]).clean_log_end(store.locate("t", 0)) == 40
    assert run_cli("verify", "--log-dir", str(partition.parent)).code == 1
    assert run_cli("recover", "--full", "--log-dir", str(partition.parent)).code == 0
    assert run_cli("verify", "--log-dir", str(partition.parent)).code == 0
