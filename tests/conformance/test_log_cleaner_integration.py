"""Kafka's ``LogCleanerIntegrationTest`` and ``LogCleanerParameterizedIntegrationTest`` (with their
``AbstractLogCleanerIntegrationTest`` setup), scenario by scenario.

Kafka starts cleaner threads and waits until the cleaner checkpoint reaches the active segment's
base offset (``awaitCleaned``). kafkalog has no threads: a cleaning round is a ``kafkalog compact``
run (or the Spark job's tasks, ``surface="spark-tasks"``) at a given clock, and retention of a
compacted log, which Kafka's cleaner thread runs after each round, is ``kafkalog retention apply``.
Rounds are run until the checkpoint reaches where Kafka waits for it: with Kafka's 4 MiB map and
kafkalog's exact one a single round gets there.
"""

from __future__ import annotations

import json
import os
import random
import string
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka_log import HOUR, T0, ScenarioLog

from kafkalog.format.batch import Record, build_batch
from kafkalog.format.compression import CompressionType
from kafkalog.log import checkpoint, names

SURFACES = ["cli", "spark-tasks"]
ALL_CODECS = list(CompressionType)
NOW = T0 + HOUR
NO_TIMESTAMP = -1  # TestUtils.singletonRecords writes records without a timestamp

# AbstractLogCleanerIntegrationTest's defaults
DEFAULT_MAX_MESSAGE_SIZE = 128
DEFAULT_SEGMENT_SIZE = 2048


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """These scenarios are about what is written, not its durability: skip the fsyncs (slow here)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def topic_configs(*, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, min_cleanable_dirty_ratio: float = 0.0,
                  min_compaction_lag_ms: int = 0, delete_delay_ms: int = 1000,
                  segment_size: int = DEFAULT_SEGMENT_SIZE, max_compaction_lag_ms: int = 2**63 - 1,
                  **overrides: str | int) -> dict[str, str | int]:
    """``logConfigProperties``: the topic configs of every log the cleaner is made with."""
    return {"max_message_bytes": max_message_size, "segment_bytes": segment_size,
            "segment_index_bytes": 100 * 1024, "file_delete_delay_ms": delete_delay_ms,
            "cleanup_policy": "compact", "min_cleanable_dirty_ratio": str(min_cleanable_dirty_ratio),
            "min_compaction_lag_ms": min_compaction_lag_ms, "max_compaction_lag_ms": max_compaction_lag_ms,
            **overrides}


def make_logs(log_dir: Path, count: int = 3, **configs: Any) -> list[ScenarioLog]:
    """``makeCleaner(partitions = log-0 .. log-{count-1})``: the logs the cleaner is given."""
    first = ScenarioLog(log_dir, "log", partitions=count, **topic_configs(**configs))
    return [first] + [first.other_partition(p) for p in range(1, count)]


@dataclass
class Writer:
    """The test's ``counter``: every value written is the next number."""

    counter: int = 0
    written: list[tuple[int, str, int]] = field(default_factory=list)

    def write_dups(self, log: ScenarioLog, num_keys: int, num_dups: int, codec: CompressionType,
                   start_key: int = 0, *, timestamp: int = NO_TIMESTAMP,
                   now_ms: int = NOW) -> list[tuple[int, str, int]]:
        """``writeDups``: ``num_dups`` rounds over the keys, one single-record batch each, the value the
        counter. Returns (key, value, offset) of each append."""
        out = []
        with log.writable() as local:
            for _ in range(num_dups):
                for key in range(start_key, start_key + num_keys):
                    value, offset = str(self.counter), local.log_end_offset
                    batch = build_batch([Record(offset, timestamp, str(key).encode(), value.encode())],
                                        compression_type=codec)
                    local.append_batch(batch, now_ms=now_ms)
                    self.counter += 1
                    out.append((key, value, offset))
        return out


def large_message(key: int, codec: CompressionType, offset: int = 0) -> tuple[str, bytes]:
    """``createLargeSingleMessageSet``: a record of 128 random letters and digits, alone in its batch."""
    value = "".join(random.Random(0).choices(string.ascii_letters + string.digits, k=128))
    return value, build_batch([Record(offset, NO_TIMESTAMP, str(key).encode(), value.encode())],
                              compression_type=codec)


def append_raw(log: ScenarioLog, value_key: int, codec: CompressionType) -> tuple[int, str, int]:
    with log.writable() as local:
        offset = local.log_end_offset
        value, batch = large_message(value_key, codec, offset)
        local.append_batch(batch, now_ms=NOW)
    return value_key, value, offset


def read_from_log(log: ScenarioLog) -> list[tuple[int, str, int]]:
    """``readFromLog``: every record of every segment, as (key, value, offset)."""
    return [(int(r.key), r.value.decode(), r.offset) for r in log.records()  # type: ignore[union-attr]
            if not r.control]


def to_map(messages: list[tuple[int, str, int]]) -> dict[int, tuple[str, int]]:
    return {key: (value, offset) for key, value, offset in messages}


def log_size(log: ScenarioLog) -> int:
    return sum(names.log_file(log.directory, b).stat().st_size for b in log.segment_bases())


def surviving_offsets(appends: list[tuple[int, str, int]], end: int) -> list[int]:
    """What a round over [0, end) with an exact key map keeps: each key's last offset below ``end``
    (superseded there only by what the round saw) and everything from ``end`` on."""
    last = {key: offset for key, _, offset in appends if offset < end}
    return sorted(set(last.values()) | {offset for _, _, offset in appends if offset >= end})


def check_last_cleaned(log: ScenarioLog, first_dirty: int, now_ms: int, surface: str) -> None:
    """``checkLastCleaned``: clean until the checkpoint reaches ``first_dirty`` (``awaitCleaned``)."""
    log.compact(now_ms, surface=surface)
    last_cleaned = log.cleaner_checkpoint()
    assert last_cleaned is not None and last_cleaned >= first_dirty, \
        f"log cleaner should have processed up to offset {first_dirty}, but lastCleaned={last_cleaned}"
    assert last_cleaned == first_dirty  # one round: the whole dirty section fits the map


def check_log_after_appending_dups(log: ScenarioLog, start_size: int, appends: list[tuple[int, str, int]]) -> None:
    """``checkLogAfterAppendingDups``: the latest value of every key survives and the log is smaller."""
    assert to_map(read_from_log(log)) == to_map(appends), "Contents of the map shouldn't change"
    assert start_size > log_size(log)


# --- LogCleanerParameterizedIntegrationTest -------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name_kafka)
def test_cleaner_test(tmp_path: Path, codec: CompressionType, surface: str) -> None:
    """LogCleanerParameterizedIntegrationTest.cleanerTest: 100 keys written 3 times are compacted to
    their latest values; a large message and 300 more records are compacted in their turn."""
    large_key = 20
    _, large = large_message(large_key, codec)
    log, *_ = make_logs(tmp_path, max_message_size=len(large))
    writer = Writer()
    appends = writer.write_dups(log, 100, 3, codec)
    start_size = log_size(log)

    first_dirty = log.active_base()
    check_last_cleaned(log, first_dirty, NOW, surface)
    compacted_size = log_size(log)
    assert start_size > compacted_size, f"log should have been compacted: {start_size=} {compacted_size=}"
    check_log_after_appending_dups(log, start_size, appends)
    assert [r.offset for r in log.records()] == surviving_offsets(appends, first_dirty)

    large_append = append_raw(log, large_key, codec)
    dups = writer.write_dups(log, 100, 3, codec, start_key=large_key + 1)
    appends2 = appends + [large_append] + dups
    first_dirty2 = log.active_base()
    check_last_cleaned(log, first_dirty2, NOW + 1, surface)
    check_log_after_appending_dups(log, start_size, appends2)
    assert [r.offset for r in log.records()] == surviving_offsets(appends2, first_dirty2)


def test_cleaner_test_deleted_partition_gone_from_checkpoint(tmp_path: Path) -> None:
    """LogCleanerParameterizedIntegrationTest.cleanerTest, its end: once partition log-0 is deleted its
    entry is gone from the cleaner-offset-checkpoint file, so a topic re-created under the same name
    is cleaned from its start."""
    log, *_ = make_logs(tmp_path)
    writer = Writer()
    writer.write_dups(log, 100, 3, CompressionType.NONE)
    check_last_cleaned(log, log.active_base(), NOW, "cli")
    log.cli("topics", "delete", "--log-dir", str(tmp_path), "--topic", "log")
    assert ("log", 0) not in checkpoint.read_offset_checkpoint(tmp_path / names.CLEANER_OFFSET_CHECKPOINT)
    again = ScenarioLog(tmp_path, "log", **topic_configs())
    Writer().write_dups(again, 100, 4, CompressionType.NONE)
    [selected] = json.loads(again.cli("compact", "--log-dir", str(tmp_path), "--now-ms", str(NOW), "--dry-run",
                                      "--json").out)["selected"]
    assert selected["first_dirty_offset"] == 0


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name_kafka)
def test_cleans_combined_compact_and_delete_topic(tmp_path: Path, codec: CompressionType, surface: str) -> None:
    """LogCleanerParameterizedIntegrationTest.testCleansCombinedCompactAndDeleteTopic: a
    ``compact,delete`` log is compacted, then retention.ms removes every segment (all older than it by
    their modification time: the records have no timestamps), and cleaning resumes on new records."""
    retention_ms = 100_000
    log, = make_logs(tmp_path, 1, retention_ms=retention_ms, cleanup_policy="compact,delete")
    writer = Writer()

    def run_cleaner_and_check_compacted(num_keys: int, now_ms: int) -> list[tuple[int, str, int]]:
        messages = writer.write_dups(log, num_keys, 3, codec, now_ms=now_ms)
        start_size = log_size(log)
        first_dirty = log.active_base()
        check_last_cleaned(log, first_dirty, now_ms, surface)
        compacted_size = log_size(log)
        assert start_size > compacted_size, f"log should have been compacted: {start_size=} {compacted_size=}"
        return messages

    run_cleaner_and_check_compacted(100, NOW)
    # Every segment last modified 2 x retention.ms ago: the cleaner's retention deletes them all.
    end_offset = log_end(log)
    old = (NOW - 2 * retention_ms) * 1_000_000
    for base in log.segment_bases():
        os.utime(names.log_file(log.directory, base), ns=(old, old))
    doc = json.loads(log.cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(NOW), "--json").out)
    assert doc["errors"] == []
    assert (log_start(log), log.segment_bases()) == (end_offset, [end_offset])

    # Cleaning again after the deletion works.
    messages = run_cleaner_and_check_compacted(20, NOW + 1)
    assert to_map(read_from_log(log)) == to_map(messages), "Contents of the map shouldn't change"


def log_end(log: ScenarioLog) -> int:
    with log.writable() as local:
        return local.log_end_offset


def log_start(log: ScenarioLog) -> int:
    with log.writable() as local:
        return local.log_start_offset


# --- LogCleanerIntegrationTest ----------------------------------------------------------------------------


def cleaner_round(log: ScenarioLog, now_ms: int, surface: str) -> dict[str, Any]:
    """One iteration of Kafka's cleaner thread: the manager chooses (``kafkalog compact`` without a
    topic), then what it chose is cleaned, by the CLI or by the Spark job's tasks. Returns the plan."""
    if surface == "cli":
        result = log.cli("compact", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--wall-now-ms",
                         str(now_ms), "--json", ok=False)
        doc: dict[str, Any] = json.loads(result.out)
        doc["exit_code"] = result.code
        return doc
    doc = json.loads(log.cli("compact", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--dry-run",
                             "--json").out)
    if any((s["topic"], s["partition"]) == (log.topic, 0) for s in doc["selected"]):
        doc["cleaned"] = log.compact(now_ms, surface=surface)["cleaned"]
    return doc


def write_key_dups(log: ScenarioLog, num_keys: int, num_dups: int, timestamp: int, start_value: int,
                   step: int) -> list[tuple[int, int]]:
    """``writeKeyDups``: ``num_dups`` rounds over keys 0..num_keys-1, values from ``start_value`` by
    ``step``, every record at ``timestamp`` (appended at that time)."""
    out, value = [], start_value
    with log.writable() as local:
        for _ in range(num_dups):
            for key in range(num_keys):
                offset = local.log_end_offset
                batch = build_batch([Record(offset, timestamp, str(key).encode(), str(value).encode())])
                local.append_batch(batch, now_ms=timestamp)
                out.append((key, value))
                value += step
    return out


def read_key_values(log: ScenarioLog) -> list[tuple[int, int]]:
    return [(key, int(value)) for key, value, _ in read_from_log(log)]


@pytest.mark.parametrize("surface", SURFACES)
def test_max_log_compaction_lag(tmp_path: Path, surface: str) -> None:
    """LogCleanerIntegrationTest.testMaxLogCompactionLag: with min.cleanable.dirty.ratio=1 only
    max.compaction.lag.ms gets a log cleaned: nothing before it has passed, then the old block, then
    (once min.compaction.lag.ms allows) the new one."""
    min_lag, max_lag = 1 * HOUR, 6 * HOUR
    log, *_ = make_logs(tmp_path, min_compaction_lag_ms=min_lag, segment_size=512, max_compaction_lag_ms=max_lag,
                        min_cleanable_dirty_ratio=1.0)
    t0 = T0
    write_key_dups(log, 100, 3, t0, 0, 1)
    start_size_block0 = log_size(log)
    active_at_t0 = log.active_base()

    # Half the max lag later: not cleaned.
    doc = cleaner_round(log, t0 + max_lag // 2, surface)
    assert doc["selected"] == [] and doc["cleaned"] == []
    assert log_size(log) == start_size_block0, "There should be no cleaning until the max compaction lag has passed"

    # Past the max lag: a second block, every key again with value 0, then a roll.
    t1 = t0 + max_lag // 2 + max_lag // 2 + 1
    appends1 = write_key_dups(log, 100, 1, t1, 0, 0)
    log.roll()
    active_at_t1 = log.active_base()
    first_block_cleanable = active_at_t0
    cleaner_round(log, t1, surface)
    last_cleaned = log.cleaner_checkpoint()
    assert last_cleaned is not None and last_cleaned >= first_block_cleanable, \
        f"log cleaner should have processed at least to offset {first_block_cleanable}, but lastCleaned={last_cleaned}"
    assert last_cleaned == 300  # the max lag rolled the segment at the second block's first record
    read1 = read_key_values(log)
    assert read1 != appends1, "log should still contain non-zero keys"
    assert read1 == [(key, 200 + key) for key in range(100)] + appends1

    # Past the max lag again: the second block is cleaned, only the zero values are left.
    t2 = t1 + max_lag + 1
    cleaner_round(log, t2, surface)
    assert read_key_values(log) == appends1, "log should only contains zero keys now"
    last_cleaned2 = log.cleaner_checkpoint()
    assert last_cleaned2 is not None and last_cleaned2 >= active_at_t1
    assert last_cleaned2 == active_at_t1 == 400


def test_marks_partitions_as_offline_and_populates_uncleanable_metrics(tmp_path: Path) -> None:
    """LogCleanerIntegrationTest.testMarksPartitionsAsOfflineAndPopulatesUncleanableMetrics: two
    partitions whose segment was overwritten under the log cannot be cleaned and are reported, the
    third is not; nothing of theirs is changed."""
    codec = CompressionType.LZ4
    _, large = large_message(20, codec)
    logs = make_logs(tmp_path, max_message_size=len(large))
    writer = Writer()

    def break_partition_log(log: ScenarioLog) -> None:
        writer.write_dups(log, 20, 3, codec)
        with log.writable() as local:  # the log stays open, as Kafka's does, while its file is overwritten
            segment = names.log_file(log.directory, local.active_segment.base_offset)
            size = segment.stat().st_size
            segment.write_bytes(b"jogeajgoea" + bytes(size - 10))  # what follows lands past the hole
            for _ in range(3):
                for key in range(20):
                    offset = local.log_end_offset
                    local.append_batch(build_batch([Record(offset, NO_TIMESTAMP, str(key).encode(),
                                                           str(writer.counter).encode())], compression_type=codec),
                                       now_ms=NOW)
                    writer.counter += 1

    break_partition_log(logs[0])
    break_partition_log(logs[1])
    before = [{p.name: p.read_bytes() for p in log.directory.glob("*.log")} for log in logs]
    doc = cleaner_round(logs[0], NOW, "cli")
    assert doc["exit_code"] == 1
    assert sorted((e["topic"], e["partition"]) for e in doc["errors"]) == [("log", 0), ("log", 1)]
    assert all("corrupt" in e["error"] or "incomplete" in e["error"] or "magic" in e["error"]
               for e in doc["errors"]), doc["errors"]
    assert doc["cleaned"] == []
    assert [{p.name: p.read_bytes() for p in log.directory.glob("*.log")} for log in logs] == before
    assert [logs[0].cleaner_checkpoint(), logs[0].other_partition(1).cleaner_checkpoint()] == [None, None]


# --- legacy message formats (v0, v1) ----------------------------------------------------------------------
# kafkalog appends v2 batches only (Kafka's message.format.version is ignored from IBP 3.0). The legacy
# message sets of these scenarios are written into the segment files as a 0.9 / 0.10 broker left them
# (absolute inner offsets in a v0 wrapper, relative ones in a v1 wrapper, the wrapper at the last
# offset, a roll when the active segment is too full for the append), and kafkalog loads them: it
# recovers the appended tail and rebuilds the segment's indexes. What Kafka up-converts (v1 records
# appended under message.format.version 0.11) is appended as v2.

LEGACY_CODECS = [c for c in CompressionType if c is not CompressionType.ZSTD]  # Kafka's ExcludeZstd


def legacy_message_set(magic: int, codec: CompressionType, records: list[tuple[int, bytes, bytes]]) -> bytes:
    """``MemoryRecords.withRecords(magic, codec, records)`` as the broker stored it (offsets assigned)."""
    if codec is CompressionType.NONE:
        out = b""
        for offset, key, value in records:
            entry = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
            entry.append(offset, NO_TIMESTAMP, key, value)
            out += bytes(entry.build())
        return out
    wrapper = LegacyRecordBatchBuilder(magic, int(codec), 1 << 20)
    for i, (offset, key, value) in enumerate(records):
        wrapper.append(offset if magic == 0 else i, NO_TIMESTAMP, key, value)
    data = bytearray(wrapper.build())
    struct.pack_into(">q", data, 0, records[-1][0])  # the wrapper's offset: the last inner one
    return bytes(data)


def append_legacy(log: ScenarioLog, magic: int, codec: CompressionType,
                  message_sets: list[list[tuple[int, str]]]) -> list[tuple[int, str, int]]:
    """Appends of message sets of ``magic``, each a list of (key, value) rows; returns (key, value,
    offset) of every record. The bytes of the sets that fit the active segment are appended to its file
    at once, then the log is loaded again (its tail recovered and indexed) before the next roll."""
    segment_bytes = log.store.log_config(log.topic).segment_bytes
    out: list[tuple[int, str, int]] = []
    done = 0
    while done < len(message_sets):
        with log.writable() as local:
            offset = local.log_end_offset
            size, path = local.active_segment.size, local.active_segment.log_path
            pending = b""
            while done < len(message_sets):
                rows = message_sets[done]
                data = legacy_message_set(magic, codec, [(offset + i, str(k).encode(), v.encode())
                                                         for i, (k, v) in enumerate(rows)])
                if size + len(pending) > segment_bytes - len(data):  # Kafka's size-based roll
                    if pending:
                        break  # written first; the roll comes once the log has loaded it
                    local.roll(now_ms=NOW)
                    size, path = 0, local.active_segment.log_path
                pending += data
                out += [(k, v, offset + i) for i, (k, v) in enumerate(rows)]
                offset += len(rows)
                done += 1
        with open(path, "ab") as f:
            f.write(pending)
    with log.writable() as local:  # loaded again: the appended tail is recovered and indexed
        assert local.log_end_offset == out[-1][2] + 1
    return out


def read_any_format(log: ScenarioLog) -> list[tuple[int, str, int]]:
    """``readFromLog`` over any message format, every batch's CRC checked (kafka-python)."""
    out = []
    for base in log.segment_bases():
        records = MemoryRecords(names.log_file(log.directory, base).read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch is not None and batch.validate_crc()
            out += [(int(r.key), r.value.decode(), r.offset) for r in batch]
    return out


def write_dups_legacy(writer: Writer, log: ScenarioLog, num_keys: int, num_dups: int, codec: CompressionType,
                      magic: int, start_key: int = 0) -> list[tuple[int, str, int]]:
    """``writeDups(magicValue = magic)``: one single-record message set per append."""
    sets = []
    for _ in range(num_dups):
        for key in range(start_key, start_key + num_keys):
            sets.append([(key, str(writer.counter))])
            writer.counter += 1
    return append_legacy(log, magic, codec, sets)


def write_dups_single_message_set(writer: Writer, log: ScenarioLog, num_keys: int, num_dups: int,
                                  codec: CompressionType, magic: int, start_key: int = 0) -> list[tuple[int, str, int]]:
    """``writeDupsSingleMessageSet``: every record in one message set (one wrapper when compressed)."""
    rows = []
    for _ in range(num_dups):
        for key in range(start_key, start_key + num_keys):
            rows.append((key, str(writer.counter)))
            writer.counter += 1
    return append_legacy(log, magic, codec, [rows])


def check_last_cleaned_legacy(log: ScenarioLog, first_dirty: int, surface: str, now_ms: int = NOW) -> None:
    doc = log.compact(now_ms, surface=surface)
    assert [c["end_offset"] for c in doc["cleaned"]] == [first_dirty]  # type: ignore[index]
    assert log.cleaner_checkpoint() == first_dirty


LARGE_KEY = 20


@dataclass
class FormatV0Log:
    log: ScenarioLog
    writer: Writer
    appends: list[tuple[int, str, int]]
    start_size: int
    large_value: str


def cleaned_v0_log(tmp_path: Path, codec: CompressionType, surface: str) -> FormatV0Log:
    """testCleanerWithMessageFormatV0's first part: 100 keys written 3 times as v0 messages, compacted."""
    large_value = "".join(random.Random(0).choices(string.ascii_letters + string.digits, k=128))
    large_size = len(legacy_message_set(0, codec, [(0, str(LARGE_KEY).encode(), large_value.encode())]))
    max_message_size = large_size if codec is CompressionType.NONE else large_size + 6
    log, *_ = make_logs(tmp_path, max_message_size=max_message_size)
    writer = Writer()
    appends = write_dups_legacy(writer, log, 100, 3, codec, 0)
    start_size = log_size(log)

    first_dirty = log.active_base()
    check_last_cleaned_legacy(log, first_dirty, surface)
    compacted_size = log_size(log)
    assert start_size > compacted_size, f"log should have been compacted: {start_size=} {compacted_size=}"
    assert to_map(read_any_format(log)) == to_map(appends)
    assert start_size > log_size(log)
    assert [o for *_, o in read_any_format(log)] == surviving_offsets(appends, first_dirty)
    return FormatV0Log(log, writer, appends, start_size, large_value)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_cleaner_with_message_format_v0(tmp_path: Path, codec: CompressionType, surface: str) -> None:
    """LogCleanerParameterizedIntegrationTest.testCleanerWithMessageFormatV0, its first part: v0
    messages (one wrapper each when compressed) are compacted to the latest value of each key."""
    cleaned_v0_log(tmp_path, codec, surface)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_cleaner_with_message_format_v0_mixed_formats(tmp_path: Path, codec: CompressionType, surface: str) -> None:
    """LogCleanerParameterizedIntegrationTest.testCleanerWithMessageFormatV0, whole: after the v0 part,
    more v0 messages, a large v0 message and (message format upgraded) v2 batches in the same
    segment, all compacted together."""
    v0 = cleaned_v0_log(tmp_path, codec, surface)
    log, writer = v0.log, v0.writer
    dups_v0 = write_dups_legacy(writer, log, 40, 3, codec, 0)
    large_append = append_legacy(log, 0, codec, [[(LARGE_KEY, v0.large_value)]])
    # Under message.format.version 0.11 Kafka up-converts the v1 and v2 records it is given to v2.
    dups_v1 = writer.write_dups(log, 40, 3, codec, start_key=30)
    dups_v2 = writer.write_dups(log, 5, 3, codec, start_key=15)
    appends2 = v0.appends + dups_v0 + large_append + dups_v1 + dups_v2
    first_dirty2 = log.active_base()
    check_last_cleaned_legacy(log, first_dirty2, surface, NOW + 1)
    assert to_map(read_any_format(log)) == to_map(appends2)
    assert v0.start_size > log_size(log)
    assert [o for *_, o in read_any_format(log)] == surviving_offsets(appends2, first_dirty2)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_cleaning_nested_messages_with_v0_and_v1(tmp_path: Path, codec: CompressionType, surface: str) -> None:
    """LogCleanerParameterizedIntegrationTest.testCleaningNestedMessagesWithV0AndV1: message sets of
    several records (one wrapper each when compressed), v0 then v1, are compacted record by record."""
    max_message_size = 192
    log, *_ = make_logs(tmp_path, max_message_size=max_message_size, segment_size=256)
    writer = Writer()
    appends_v0 = write_dups_single_message_set(writer, log, 2, 3, codec, 0)
    appends_v0 += write_dups_single_message_set(writer, log, 2, 2, codec, 0, start_key=3)
    appends_v1 = write_dups_single_message_set(writer, log, 2, 2, codec, 1, start_key=4)
    appends_v1 += write_dups_single_message_set(writer, log, 2, 2, codec, 1, start_key=4)
    appends_v1 += write_dups_single_message_set(writer, log, 2, 2, codec, 1, start_key=6)
    appends = appends_v0 + appends_v1
    start_size = log_size(log)

    first_dirty = log.active_base()
    assert first_dirty > len(appends_v0)  # the v1 sets are cleaned too
    check_last_cleaned_legacy(log, first_dirty, surface)
    compacted_size = log_size(log)
    assert start_size > compacted_size, f"log should have been compacted: {start_size=} {compacted_size=}"
    assert to_map(read_any_format(log)) == to_map(appends)
    assert start_size > log_size(log)
