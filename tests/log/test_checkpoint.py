"""Tests for kafkalog.log.checkpoint: exact text, Kafka's reader rules, real broker files, atomic writes."""

from __future__ import annotations

import base64
import ctypes
import errno
import os
import stat
import tempfile
import uuid
from pathlib import Path

import pytest
from conftest import kafka_fixtures_root
from hypothesis import given
from hypothesis import strategies as st

from kafkalog.errors import KafkaLogError
from kafkalog.log import checkpoint
from kafkalog.log.checkpoint import (
    TMP_SUFFIX,
    ZERO_TOPIC_ID,
    CheckpointError,
    LeaderEpochBatch,
    LeaderEpochFileCache,
    atomic_write_bytes,
    new_topic_id,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)

OFFSET_CHECKPOINT_NAMES = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def fixtures_root() -> Path:
    return kafka_fixtures_root()  # tests/conftest.py: skips, or fails on CI, when absent


def real_files(name: str) -> list[Path]:
    files = sorted(p for p in fixtures_root().rglob(name) if p.is_file())
    assert files, f"no {name} files under {fixtures_root()}"
    return files


# ---------------------------------------------------------------------------------------------------
# Offset checkpoints


def test_offset_checkpoint_exact_text_sorted(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("orders", 1): 42, ("__consumer_offsets", 13): 0, ("orders", 0): 7})
    assert path.read_bytes() == b"0\n3\n__consumer_offsets 13 0\norders 0 7\norders 1 42\n"
    assert read_offset_checkpoint(path) == {
        ("orders", 1): 42, ("__consumer_offsets", 13): 0, ("orders", 0): 7,
    }


def test_offset_checkpoint_empty_is_version_and_zero(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_offset_checkpoint_sorts_partitions_numerically(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("t", 10): 1, ("t", 2): 2})
    assert path.read_text() == "0\n2\nt 2 2\nt 10 1\n"


@pytest.mark.parametrize("content", [b"", b"0\n", b"0"], ids=["empty", "version-only", "version-no-newline"])
def test_offset_checkpoint_without_entries(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert read_offset_checkpoint(path) == {}
    assert read_leader_epoch_checkpoint(path) == []


def test_missing_checkpoint_reads_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nope") == {}
    assert read_leader_epoch_checkpoint(tmp_path / "nope") == []
    assert not (tmp_path / "nope").exists()


def test_offset_checkpoint_java_reader_rules(tmp_path: Path) -> None:
    # \r\n and \r end lines as in Java's readLine; tabs and runs of blanks separate fields; Java's
    # parseLong takes a leading '+'; the last line needs no newline.
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n3\rt 0 +5\na\t1    -1\nb 2 9223372036854775807")
    assert read_offset_checkpoint(path) == {("t", 0): 5, ("a", 1): -1, ("b", 2): 2**63 - 1}


def test_offset_checkpoint_repeated_partition_last_wins(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n2\nt 0 5\nt 0 9\n")
    assert read_offset_checkpoint(path) == {("t", 0): 9}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"1\n0\n", "line 1: unrecognised version 1"),
        (b"x\n0\n", "malformed line 1: 'x'"),
        (b" 0\n0\n", "malformed line 1"),
        (b"0\ntwo\n", "malformed line 2: 'two'"),
        (b"0\n2\nt 0 5\n", "line 2 says 2 entries but 1 follow"),
        (b"0\n0\nt 0 5\n", "line 2 says 0 entries but 1 follow"),
        (b"0\n1\nt 0\n", "malformed line 3: 't 0' (expected 3"),
        (b"0\n1\nt 0 5 6\n", "malformed line 3: 't 0 5 6'"),
        (b"0\n1\n t 0 5\n", "malformed line 3: ' t 0 5'"),  # Java split keeps a leading empty field
        (b"0\n2\nt 0 5\n\n", "malformed line 4: ''"),
        (b"0\n1\nt x 5\n", "malformed line 3: 't x 5' ('x' is not an integer"),
        (b"0\n1\nt 2147483648 5\n", "'2147483648' is not an integer in [-2147483648, 2147483647]"),
        (b"0\n1\nt 0 9223372036854775808\n", "'9223372036854775808' is not an integer"),
        (b"0\n1\nt 0 1_000\n", "'1_000' is not an integer"),
        (b"0\n1\nt 0 \xff\n", "not UTF-8 text at byte 8"),
    ],
)
def test_offset_checkpoint_malformed(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    assert str(path) in str(info.value)
    assert needle in str(info.value)
    assert isinstance(info.value, KafkaLogError)


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        ({("a b", 0): 1}, "cannot write topic 'a b'"),
        ({("", 0): 1}, "cannot write topic ''"),
        ({("t", 2**31): 1}, "partition of t 2147483648"),
        ({("t", 0): 2**63}, "offset of t-0 9223372036854775808"),
    ],
)
def test_offset_checkpoint_rejects_unwritable_entries(
    tmp_path: Path, entries: dict[tuple[str, int], int], needle: str
) -> None:
    path = tmp_path / "cp"
    with pytest.raises(CheckpointError, match=needle):
        write_offset_checkpoint(path, entries)
    assert list(tmp_path.iterdir()) == []


LEGAL_TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
topics = st.text(LEGAL_TOPIC_CHARS, min_size=1, max_size=249)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@given(st.dictionaries(st.tuples(topics, int32s), int64s, max_size=30))
def test_offset_checkpoint_round_trip(entries: dict[tuple[str, int], int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cp"
        write_offset_checkpoint(path, entries)
        assert read_offset_checkpoint(path) == entries
        lines = path.read_text().split("\n")
        assert lines[:2] == ["0", str(len(entries))] and lines[-1] == ""
        assert lines[2:-1] == [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]


@pytest.mark.parametrize("name", OFFSET_CHECKPOINT_NAMES)
def test_real_offset_checkpoints(tmp_path: Path, name: str) -> None:
    for original in real_files(name):
        data = original.read_bytes()
        entries = read_offset_checkpoint(original)
        text_lines = data.decode().split("\n")
        if data:
            assert int(text_lines[1]) == len(entries), original
        out = tmp_path / name
        write_offset_checkpoint(out, entries)
        assert read_offset_checkpoint(out) == entries, original
        # Kafka writes hash-map order, we write sorted; otherwise the bytes are the same.
        if data:
            written = out.read_bytes().decode().split("\n")
            assert written[:2] == text_lines[:2] and sorted(written[2:]) == sorted(text_lines[2:]), original


def test_real_checkpoints_have_entries() -> None:
    # Guard against the loop above passing vacuously: the fixtures hold partitions with offsets.
    entries = read_offset_checkpoint(real_files("cleaner-offset-checkpoint")[0])
    assert entries and all(isinstance(o, int) and o >= 0 for o in entries.values())
    sample = fixtures_root() / "Internship/kafka/data/cleaner-offset-checkpoint"
    if sample.exists():
        expected = {("__consumer_offsets", 15): 669, ("__consumer_offsets", 2): 174}
        assert read_offset_checkpoint(sample) == expected


def test_stale_tmp_checkpoint_from_mid_clean_crash_is_readable() -> None:
    tmps = real_files("cleaner-offset-checkpoint.tmp")
    assert read_offset_checkpoint(tmps[0]) == {("__consumer_offsets", 13): 0}


# ---------------------------------------------------------------------------------------------------
# leader-epoch-checkpoint


def test_leader_epoch_exact_text_keeps_order(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(0, 0), (3, 120), (64, 7001)])
    assert path.read_bytes() == b"0\n3\n0 0\n3 120\n64 7001\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (3, 120), (64, 7001)]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"0\n1\n5\n", "malformed line 3: '5' (expected 2"),
        (b"0\n1\n5 6 7\n", "malformed line 3: '5 6 7'"),
        (b"0\n1\n2147483648 0\n", "'2147483648' is not an integer"),
        (b"0\n2\n1 0\n", "line 2 says 2 entries but 1 follow"),
        (b"-1\n0\n", "unrecognised version -1"),
    ],
)
def test_leader_epoch_malformed(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        read_leader_epoch_checkpoint(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_leader_epoch_cache_assigns_only_a_newer_epoch_and_drops_what_it_contradicts(tmp_path: Path) -> None:
    """``LeaderEpochFileCache.assign`` as appends and recovery call it: an epoch not above the latest, or
    -1, changes nothing (and writes nothing); a newer one drops entries starting at or past its offset."""
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path)
    assert cache.latest_epoch is None and not cache.assign_if_newer(-1, 0) and not path.exists()
    path.write_bytes(b"0\n3\n0 0\n2 10\n4 30\n")
    cache = LeaderEpochFileCache(path)
    assert not cache.assign_if_newer(4, 40) and not cache.assign_if_newer(3, 40)
    assert cache.assign_if_newer(5, 20)
    assert cache.latest_epoch == 5 and path.read_bytes() == b"0\n3\n0 0\n2 10\n5 20\n"


def test_leader_epoch_cache_truncate_from_end(tmp_path: Path) -> None:
    """``truncateFromEnd(20)``: entries starting at 20 or later go; one that already ends there is kept
    and no file is written."""
    path = tmp_path / "leader-epoch-checkpoint"
    assert not LeaderEpochFileCache(path).truncate_from_end(0) and not path.exists()
    path.write_bytes(b"0\n3\n0 0\n2 10\n5 20\n")
    cache = LeaderEpochFileCache(path)
    assert cache.truncate_from_end(20) and cache.entries == [(0, 0), (2, 10)]
    assert path.read_bytes() == b"0\n2\n0 0\n2 10\n"
    os.utime(path, ns=(0, 0))
    assert not cache.truncate_from_end(11) and path.stat().st_mtime_ns == 0


def test_leader_epoch_cache_truncate_from_start(tmp_path: Path) -> None:
    """``truncateFromStart``: entries starting at or below the new log start offset go, and the last of
    them comes back starting there; an entry already starting there, or none below it, writes nothing."""
    path = tmp_path / "leader-epoch-checkpoint"
    assert not LeaderEpochFileCache(path).truncate_from_start(5) and not path.exists()
    path.write_bytes(b"0\n3\n0 0\n1 7\n2 10\n")
    cache = LeaderEpochFileCache(path)
    assert cache.truncate_from_start(5) and cache.entries == [(0, 5), (1, 7), (2, 10)]
    assert path.read_bytes() == b"0\n3\n0 5\n1 7\n2 10\n"
    assert cache.truncate_from_start(7) and cache.entries == [(1, 7), (2, 10)]
    os.utime(path, ns=(0, 0))
    assert not cache.truncate_from_start(7) and not cache.truncate_from_start(6) and path.stat().st_mtime_ns == 0
    assert cache.truncate_from_start(12) and read_leader_epoch_checkpoint(path) == [(2, 12)]
    cache.clear()
    assert cache.entries == [] and read_leader_epoch_checkpoint(path) == [] and path.read_bytes() == b"0\n0\n"


@given(st.lists(st.tuples(int32s, int64s), max_size=30))
def test_leader_epoch_round_trip(entries: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "leader-epoch-checkpoint"
        write_leader_epoch_checkpoint(path, entries)
        assert read_leader_epoch_checkpoint(path) == entries


def test_real_leader_epoch_checkpoints_reencode_exactly(tmp_path: Path) -> None:
    files = real_files("leader-epoch-checkpoint")
    assert len(files) >= 700
    out = tmp_path / "leader-epoch-checkpoint"
    non_empty = 0
    for original in files:
        entries = read_leader_epoch_checkpoint(original)
        non_empty += bool(entries)
        write_leader_epoch_checkpoint(out, entries)
        assert out.read_bytes() == original.read_bytes(), original
    assert non_empty > 0


# ---------------------------------------------------------------------------------------------------
# partition.metadata and topic ids


def test_partition_metadata_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    write_partition_metadata(path, "i_ss_LxlSI-afcfdd0S78g")
    assert path.read_bytes() == b"version: 0\ntopic_id: i_ss_LxlSI-afcfdd0S78g"
    assert read_partition_metadata(path) == "i_ss_LxlSI-afcfdd0S78g"


def test_partition_metadata_reader_tolerances(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    # A trailing newline, several blanks after ':', a newer version and base64 padding are all accepted.
    path.write_bytes(b"version:   1\ntopic_id: i_ss_LxlSI-afcfdd0S78g==\n")
    assert read_partition_metadata(path) == "i_ss_LxlSI-afcfdd0S78g"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "expected exactly 2 lines, found 0"),
        (b"version: 0", "expected exactly 2 lines, found 1"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\nextra", "found 3"),
        (b"version: -1\ntopic_id: i_ss_LxlSI-afcfdd0S78g", "unrecognised partition metadata version -1"),
        (b"version: x\ntopic_id: i_ss_LxlSI-afcfdd0S78g", "malformed line 1: 'version: x'"),
        (b"version:0\ntopic_id: i_ss_LxlSI-afcfdd0S78g", "malformed line 1: 'version:0'"),
        (b"version: 0\ntopic: i_ss_LxlSI-afcfdd0S78g", "malformed line 2"),
        (b"version: 0\ntopic_id: " + ZERO_TOPIC_ID.encode(), "zero topic id"),
        (b"version: 0\ntopic_id: not+base64/at-all!", "is not a base64 topic id"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAA", "is not a base64 topic id"),  # 15 bytes
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "is not a base64 topic id"),  # too long
    ],
)
def test_partition_metadata_malformed(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        read_partition_metadata(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_partition_metadata_missing_names_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="partition.metadata: partition metadata file is missing"):
        read_partition_metadata(tmp_path / "partition.metadata")


@pytest.mark.parametrize("bad", [ZERO_TOPIC_ID, "short", "AAAAAAAAAAAAAAAAAAAA$A"])
def test_write_partition_metadata_rejects_bad_ids(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CheckpointError, match="cannot write topic id"):
        write_partition_metadata(tmp_path / "partition.metadata", bad)
    assert list(tmp_path.iterdir()) == []


def test_new_topic_id_shape() -> None:
    ids = {new_topic_id() for _ in range(2000)}
    assert len(ids) == 2000
    for topic_id in ids:
        assert len(topic_id) == 22 and not topic_id.startswith("-") and topic_id != ZERO_TOPIC_ID
        assert set(topic_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_new_topic_id_retries_on_leading_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeUuid:
        def __init__(self, raw: bytes) -> None:
            self.bytes = raw

    # 0xF8 encodes to '-' as the first base64url character; the second candidate is fine.
    candidates = iter([FakeUuid(b"\xf8" + bytes(15)), FakeUuid(bytes(16)), FakeUuid(b"\x01" + bytes(15))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(candidates))
    assert new_topic_id() == "AQAAAAAAAAAAAAAAAAAAAA"


@given(st.binary(min_size=16, max_size=16).filter(lambda b: b != bytes(16)))
def test_partition_metadata_round_trip(raw: bytes) -> None:
    topic_id = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "partition.metadata"
        write_partition_metadata(path, topic_id)
        assert read_partition_metadata(path) == topic_id
        assert path.read_bytes() == f"version: 0\ntopic_id: {topic_id}".encode()


def test_real_partition_metadata_reencode_exactly(tmp_path: Path) -> None:
    files = real_files("partition.metadata")
    assert len(files) >= 500
    out = tmp_path / "partition.metadata"
    for original in files:
        write_partition_metadata(out, read_partition_metadata(original))
        assert out.read_bytes() == original.read_bytes(), original


# ---------------------------------------------------------------------------------------------------
# Atomic, durable writes


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"old")
    (tmp_path / "leader-epoch-checkpoint.tmp").write_bytes(b"stale tmp from a crash")
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader-epoch-checkpoint"]
    write_offset_checkpoint(tmp_path / "cp", {("t", 0): 1})
    write_partition_metadata(tmp_path / "partition.metadata", new_topic_id())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    atomic_write_bytes(tmp_path / "x", b"data")
    assert synced == ["file", "dir"]


def test_failed_replace_keeps_old_file_and_removes_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"0\n0\n")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        write_offset_checkpoint(path, {("t", 0): 5})
    assert path.read_bytes() == b"0\n0\n"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def _staged_epoch_batch(tmp_path: Path, partitions: int) -> tuple[LeaderEpochBatch, list[Path]]:
    """A batch truncating ``partitions`` partitions' epochs [(0, 0), (1, 50), (2, 90)] from offset 60."""
    batch, paths = LeaderEpochBatch(), []
    for i in range(partitions):
        directory = tmp_path / f"t-{i}"
        directory.mkdir()
        write_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint", [(0, 0), (1, 50), (2, 90)])
        batch.truncate(directory, log_start_offset=60, log_end_offset=100)
        paths.append(directory / "leader-epoch-checkpoint")
    return batch, paths


def test_a_leader_epoch_batch_is_made_durable_with_one_syncfs_per_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncfs = checkpoint._syncfs()
    if syncfs is None:
        pytest.skip("this C library has no syncfs: the batch fsyncs each file (the next test)")
    calls: list[int] = []
    monkeypatch.setattr(checkpoint, "_syncfs", lambda: lambda fd: calls.append(fd) or syncfs(fd))
    batch, paths = _staged_epoch_batch(tmp_path, 5)
    assert batch.commit() == []
    assert len(calls) == 1  # five partitions, one file system
    assert [read_leader_epoch_checkpoint(p) for p in paths] == [[(1, 60), (2, 90)]] * 5
    assert not list(tmp_path.rglob("*" + TMP_SUFFIX))


def test_without_syncfs_a_leader_epoch_batch_fsyncs_each_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "_syncfs", lambda: None)
    batch, paths = _staged_epoch_batch(tmp_path, 3)
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    assert batch.commit() == []
    assert len(synced) == 3
    assert [read_leader_epoch_checkpoint(p) for p in paths] == [[(1, 60), (2, 90)]] * 3


def test_a_failed_syncfs_renames_nothing_and_reports_every_file_of_its_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> int:
        ctypes.set_errno(errno.EIO)  # what a write-back error gives
        return -1

    monkeypatch.setattr(checkpoint, "_syncfs", lambda: failing)
    batch, paths = _staged_epoch_batch(tmp_path, 3)
    failed = batch.commit()
    assert [path for path, _ in failed] == paths
    assert all(error.errno == errno.EIO for _, error in failed)
    assert [read_leader_epoch_checkpoint(p) for p in paths] == [[(0, 0), (1, 50), (2, 90)]] * 3  # the old files
    assert not list(tmp_path.rglob("*" + TMP_SUFFIX))
