"""Kafka's ``LocalLogTest`` (core/src/test/scala/unit/kafka/log): the segments of one partition
directory (``kafkalog.log.local_log.LocalLog``), its appends, rolls, truncation and deletion, and the
names of partition directories and segment files.

``LocalLog`` has no CLI of its own: it is driven through the library, in one writable open of the
partition (``ScenarioLog.writable``), and what it leaves is read back with kafka-python.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka_log import T0, ScenarioLog
from log_port_helpers import (
    age_deleted_files,
    append_raw,
    consume,
    files,
    kbatch,
    kbatch_of,
    recovery_point,
    sweep,
    wall_ms,
)

from kafkalog.errors import KafkaLogError
from kafkalog.log import names
from kafkalog.log.local_log import LocalLog
from kafkalog.log.names import TopicPartition
from kafkalog.log.store import delete_dir_name, parse_delete_dir_name


def _kv(local: LocalLog, start: int = 0) -> list[tuple[str, str]]:
    """``recordsToKvs(readRecords(...))``: (key, value) of each record from ``start``, "" for null."""
    return [((columns.key(row) or b"").decode(), (columns.value(row) or b"").decode())
            for columns, row in local.read_records(start)]


def _append(local: LocalLog, offset: int, *pairs: tuple[str, str]) -> None:
    """``appendRecords(kvsToRecords(pairs), initialOffset = offset)``: one batch."""
    local.append_batch(kbatch_of(offset, [v.encode() for _, v in pairs], keys=[k.encode() or None for k, _ in pairs],
                                 ts=T0), now_ms=T0)


# --- appends, flush, close ------------------------------------------------------------------------------------
def test_log_append(tmp_path: Path) -> None:
    """LocalLogTest.testLogAppend: an empty log reads nothing; after appending (abc, ABC) and (de, DE)
    the log ends at 2, nothing is flushed yet (recovery point 0), and both records read back."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        assert _kv(local) == []
        _append(local, 0, ("abc", "ABC"), ("de", "DE"))
        assert local.log_end_offset == 2
        assert local.recovery_point == 0
        assert _kv(local) == [("abc", "ABC"), ("de", "DE")]


def test_log_flush(tmp_path: Path) -> None:
    """LocalLogTest.testLogFlush: the recovery point starts at 0; after an append, a roll and a flush
    up to the new segment's base it is 1."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        assert local.recovery_point == 0
        local.append_batch(kbatch(0, b"a", ts=T0), now_ms=T0)
        new_segment = local.roll(now_ms=T0 + 1)
        assert new_segment.base_offset == 1
        local.flush()
        assert local.recovery_point == 1
    assert recovery_point(log) == 1


def test_log_close_success(tmp_path: Path) -> None:
    """LocalLogTest.testLogCloseSuccess: once the log is closed, an append fails (ClosedChannelException)
    and the log keeps its 2 records."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        _append(local, 0, ("abc", "ABC"), ("de", "DE"))
    with pytest.raises((KafkaLogError, OSError, ValueError)):
        _append(local, 2, ("abc", "ABC"), ("de", "DE"))
    assert [r.offset for r in log.records()] == [0, 1]


def test_log_close_idempotent(tmp_path: Path) -> None:
    """LocalLogTest.testLogCloseIdempotent: closing a closed log again is fine, and leaves the log as it
    was."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        _append(local, 0, ("abc", "ABC"))
        local.close()
        local.close()
    assert consume(log) == [(0, "abc", "ABC")]
    assert log.verify().code == 0


def test_update_config(tmp_path: Path) -> None:
    """LocalLogTest.testUpdateConfig: a new config (segment.bytes + 1) replaces the old one (here through
    ``kafkalog topics alter``; the next open of the log has it)."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        old = local.config.segment_bytes
    log.cli("topics", "alter", "--log-dir", str(tmp_path), "--topic", "t", "--config", f"segment.bytes={old + 1}")
    log.store = type(log.store)([tmp_path])  # a new process: the topic registry is read again
    with log.writable() as local:
        assert local.config.segment_bytes == old + 1


# --- rolls ----------------------------------------------------------------------------------------------------
def test_roll_empty_active_segment(tmp_path: Path) -> None:
    """LocalLogTest.testRollEmptyActiveSegment: rolling an empty active segment leaves one segment, at the
    same base. Kafka replaces it by a new segment object and schedules the old one's files for deletion
    (*.deleted); kafkalog keeps the empty segment itself: same files, nothing to delete."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        old = local.active_segment
        new = local.roll(now_ms=T0)
        assert len(local.segments) == 1 and new.base_offset == old.base_offset == 0
    assert files(log, names.DELETED_SUFFIX) == []
    assert log.segment_bases() == [0]


def test_roll_segment_that_already_exists(tmp_path: Path) -> None:
    """LocalLogTest.testRollSegmentThatAlreadyExists: rolling the empty active segment at its own base
    keeps one segment; (k1, v1) and (k2, v2) are appended at 0 and 1 and read back; a roll then starts
    an empty active segment at the log end (2), 2 segments."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        local.roll(0, now_ms=T0)
        assert len(local.segments) == 1
        _append(local, 0, ("k1", "v1"))
        assert local.active_segment.base_offset == 0
        local.append_batch(kbatch(1, b"v2", b"k2", ts=T0 + 10), now_ms=T0)
        assert local.log_end_offset == 2
        assert _kv(local) == [("k1", "v1"), ("k2", "v2")]
        local.roll(now_ms=T0)
        assert local.active_segment.base_offset == 2 and len(local.segments) == 2
        assert local.log_end_offset == 2


def test_new_segments_after_roll(tmp_path: Path) -> None:
    """LocalLogTest.testNewSegmentsAfterRoll: a roll of the empty log returns the segment at 0 (1
    segment, end 0); after one record a roll makes one at 1 (2 segments); after another, a roll asked
    for 1 makes one at the log end, 2 (3 segments)."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        segment = local.roll(now_ms=T0)
        assert (segment.base_offset, len(local.segments), local.log_end_offset) == (0, 1, 0)
        _append(local, 0, ("k1", "v1"))
        segment = local.roll(now_ms=T0)
        assert (segment.base_offset, len(local.segments), local.log_end_offset) == (1, 2, 1)
        _append(local, 1, ("k2", "v2"))
        segment = local.roll(1, now_ms=T0)
        assert (segment.base_offset, len(local.segments), local.log_end_offset) == (2, 3, 2)
    assert log.segment_bases() == [0, 1, 2]


def test_roll_segment_error_when_next_offset_is_illegal(tmp_path: Path) -> None:
    """LocalLogTest.testRollSegmentErrorWhenNextOffsetIsIllegal: with the active segment at 3 and the log
    end forced back to 1 (Kafka's package-private ``updateLogEndOffset``, here the log's cached end), a
    roll to 1 is refused (a base below the active segment's)."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        _append(local, 0, ("k1", "v1"), ("k2", "v2"), ("k3", "v3"))
        assert local.active_segment.base_offset == 0 and local.log_end_offset == 3
        local.roll(now_ms=T0)
        assert local.active_segment.base_offset == 3
        local._log_end_offset = 1
        with pytest.raises(KafkaLogError, match="below the active segment base 3"):
            local.roll(now_ms=T0)
        local._log_end_offset = 3


# --- truncation and deletion ----------------------------------------------------------------------------------
def test_truncate_to(tmp_path: Path) -> None:
    """LocalLogTest.testTruncateTo: 12 records, a roll after every third: 5 segments ending at 12;
    truncating to 7 deletes the segments past it (9, 12), leaves 3 with the active one at 6 and the
    log end at 7; a read from 6 returns its one record; an append at 7 ends the log at 8."""
    log = ScenarioLog(tmp_path)
    with log.writable() as local:
        for offset in range(12):
            local.append_batch(kbatch(offset, b"a", ts=T0), now_ms=T0)
            if offset % 3 == 2:
                local.roll(now_ms=T0)
        assert [s.base_offset for s in local.segments] == [0, 3, 6, 9, 12]
        assert local.log_end_offset == 12
        local.truncate_to(7)
        assert [s.base_offset for s in local.segments] == [0, 3, 6]
        assert local.active_segment.base_offset == 6 and local.log_end_offset == 7
        assert _kv(local, 6) == [("", "a")]
        local.append_batch(kbatch(7, b"a", ts=T0), now_ms=T0)
        assert local.log_end_offset == 8
    assert log.segment_bases() == [0, 3, 6]
    assert [r.offset for r in log.records()] == list(range(8))


def _nine_rolled_segments(log: ScenarioLog) -> None:
    with log.writable() as local:
        for offset in range(9):
            local.append_batch(kbatch(offset, b"a", ts=T0), now_ms=T0)
            local.roll(now_ms=T0)
        assert len(local.segments) == 10


def test_remove_and_delete_segments_async(tmp_path: Path) -> None:
    """LocalLogTest.testRemoveAndDeleteSegmentsAsync: the segments removed from the log (here the 9
    below the active one, which kafkalog never deletes) leave it at once, their files (and producer
    snapshots) renamed *.deleted; once file.delete.delay.ms has passed they are deleted."""
    log = ScenarioLog(tmp_path)
    _nine_rolled_segments(log)
    with log.writable() as local:
        marked = local.mark_segments_deleted(9, mark_time_ms=wall_ms())
        assert [s.base_offset for s in local.segments] == [9]
        assert local.log_start_offset == 9
    assert all(p.name.endswith(names.DELETED_SUFFIX) and p.exists() for p in marked)
    assert sorted({names.offset_from_file_name(p.name) for p in marked}) == list(range(9))
    assert log.segment_bases() == [9]
    assert sweep(log)["deleted_files"] == 0
    age_deleted_files(log, 60_001)
    sweep(log)
    assert not any(p.exists() for p in marked) and files(log, names.DELETED_SUFFIX) == []


def test_delete_segment_files_async(tmp_path: Path) -> None:
    """LocalLogTest.testDeleteSegmentFilesAsync: before the delay every deleted segment's files exist
    with the *.deleted suffix (not yet deleted); after it none is left."""
    log = ScenarioLog(tmp_path, file_delete_delay_ms=1000)
    _nine_rolled_segments(log)
    with log.writable() as local:
        local.mark_segments_deleted(9, mark_time_ms=wall_ms())
    for base in range(9):
        for path in (names.log_file(log.directory, base), names.index_file(log.directory, base),
                     names.time_index_file(log.directory, base)):
            assert not path.exists()
            assert path.with_name(path.name + names.DELETED_SUFFIX).exists()
    assert sweep(log)["deleted_files"] == 0
    age_deleted_files(log, 1001)
    sweep(log)
    assert files(log, names.DELETED_SUFFIX) == []


# --- names ------------------------------------------------------------------------------------------------------
def test_parse_topic_partition_name() -> None:
    """LocalLogTest.testParseTopicPartitionName: ``test_topic-143`` is topic test_topic, partition 143."""
    assert names.parse_partition_dir_name("test_topic-143") == TopicPartition("test_topic", 143)


def test_parse_topic_partition_name_with_period_for_deleted_topic() -> None:
    """LocalLogTest.testParseTopicPartitionNameWithPeriodForDeletedTopic (KAFKA-5232): the delete dir
    name of topic ``foo.bar-testtopic`` partition 42 parses back to them."""
    name = delete_dir_name(TopicPartition("foo.bar-testtopic", 42))
    assert parse_delete_dir_name(name) == TopicPartition("foo.bar-testtopic", 42)
    assert names.parse_partition_dir_name(name) is None  # not a live partition directory


def test_parse_topic_partition_name_for_empty_name() -> None:
    """LocalLogTest.testParseTopicPartitionNameForEmptyName: an empty name is no partition directory."""
    assert names.parse_partition_dir_name("") is None
    assert parse_delete_dir_name("") is None


def test_parse_topic_partition_name_for_missing_separator() -> None:
    """LocalLogTest.testParseTopicPartitionNameForMissingSeparator: ``test_topic1999`` and its ``.-delete``
    marker form are refused."""
    assert names.parse_partition_dir_name("test_topic1999") is None
    assert parse_delete_dir_name("test_topic1999.-delete") is None


def test_parse_topic_partition_name_for_missing_topic() -> None:
    """LocalLogTest.testParseTopicPartitionNameForMissingTopic: ``-1999`` and the delete dir name of an
    empty topic, partition 1999, are refused."""
    assert names.parse_partition_dir_name("-1999") is None
    assert parse_delete_dir_name(delete_dir_name(TopicPartition("", 1999))) is None


def test_parse_topic_partition_name_for_missing_partition() -> None:
    """LocalLogTest.testParseTopicPartitionNameForMissingPartition: ``test_topic-`` and
    ``test_topic-.-delete`` are refused."""
    assert names.parse_partition_dir_name("test_topic-") is None
    assert parse_delete_dir_name("test_topic-.-delete") is None


def test_parse_topic_partition_name_for_invalid_partition() -> None:
    """LocalLogTest.testParseTopicPartitionNameForInvalidPartition: ``test_topic-1999a`` and
    ``test_topic1999a.-delete`` are refused."""
    assert names.parse_partition_dir_name("test_topic-1999a") is None
    assert parse_delete_dir_name("test_topic1999a.-delete") is None


def test_parse_topic_partition_name_for_existing_invalid_dir(tmp_path: Path) -> None:
    """LocalLogTest.testParseTopicPartitionNameForExistingInvalidDir: ``non_kafka_dir`` and
    ``non_kafka_dir-delete`` are no partition directories, and a store lists neither."""
    assert names.parse_partition_dir_name("non_kafka_dir") is None
    assert parse_delete_dir_name("non_kafka_dir-delete") is None
    log = ScenarioLog(tmp_path)
    (tmp_path / "non_kafka_dir").mkdir()
    (tmp_path / "non_kafka_dir-delete").mkdir()
    store = type(log.store)([tmp_path])
    assert [str(p.topic_partition) for p in store.partitions()] == ["t-0"]
    assert store.deleted_partition_dirs() == []


def test_log_delete_dir_name() -> None:
    """LocalLogTest.testLogDeleteDirName: ``foo-3.<32 hex>-delete`` (at most 255 characters); a 249
    character topic is cut so the name is exactly 255."""
    short = delete_dir_name(TopicPartition("foo", 3))
    assert len(short) <= 255 and re.fullmatch(r"foo-3\.[0-9a-z]{32}-delete", short)
    assert parse_delete_dir_name(short) == TopicPartition("foo", 3)
    long = delete_dir_name(TopicPartition("n" + "o" * 248, 5))
    assert len(long) == 255 and re.fullmatch(r"no{212}-5\.[0-9a-z]{32}-delete", long)
    assert parse_delete_dir_name(long) == TopicPartition("n" + "o" * 212, 5)


def test_offset_from_file(tmp_path: Path) -> None:
    """LocalLogTest.testOffsetFromFile: the .log, .index and .timeindex names of offset 23423423 give it
    back."""
    for path in (names.log_file(tmp_path, 23423423), names.index_file(tmp_path, 23423423),
                 names.time_index_file(tmp_path, 23423423)):
        assert path.name.startswith("00000000000023423423.")
        assert names.offset_from_file_name(path.name) == 23423423


def test_log_append_read_back_by_kafka_python(tmp_path: Path) -> None:
    """LocalLogTest.testLogAppend, read back by an independent reader: the batch appended at 0 is one
    CRC-valid v2 batch holding (abc, ABC) and (de, DE)."""
    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch_of(0, [b"ABC", b"DE"], keys=[b"abc", b"de"], ts=T0)])
    assert [(b.base_offset, b.last_offset, b.records) for b in log.batches()] == [(0, 1, 2)]
    assert [(r.key, r.value) for r in log.records()] == [(b"abc", b"ABC"), (b"de", b"DE")]
