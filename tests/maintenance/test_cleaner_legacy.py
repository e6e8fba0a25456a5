"""The cleaner on legacy (v0/v1) message sets and on segments that mix them with v2 batches
(``MemoryRecords.filterTo`` → ``buildRetainedRecordsInto``, spec §8.6.4): a wrapper keeping only some of
its records is rebuilt in its own magic and codec, at the last retained offset, its inner offsets
absolute (v0) or relative to the first retained record (v1), its timestamps per v1's rules; a
KAFKA-4298 wrapper (inner messages of another magic) is rebuilt even when it keeps every record.

Source segments are written as a 0.9/0.10 broker left them (kafka-python's ``LegacyRecordBatchBuilder``
for the messages, the wrapper at its last offset), then loaded by ``kafkalog recover --full``. The
expected output is spelled out field by field, its inner message sets written by kafka-python.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from cleaner_helpers import DAY, T0, clean, live_digest, new_store, put, read_log
from conftest import run_cli, tree_digest
from kafka.codec import gzip_encode, lz4_encode, lz4_encode_old_kafka, snappy_encode
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords

from kafkalog.errors import CleanerError
from kafkalog.format import compression, legacy
from kafkalog.format.batch import Record, TimestampType, build_batch
from kafkalog.format.compression import CompressionType
from kafkalog.log import names
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance import cleaning_tasks as tasks
from tests.format.records_helper import message_set

C = CompressionType
LEGACY_CODECS = [C.GZIP, C.SNAPPY, C.LZ4]
Row = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def source_wrapper(magic: int, codec: CompressionType, rows: list[Row], *, inner_magic: int | None = None,
                   log_append_time: int | None = None) -> bytes:
    """A wrapper as a 0.9/0.10 broker stored it: inner messages (of ``inner_magic``, KAFKA-4298) at
    absolute (v0) or relative (v1) offsets, compressed by kafka-python's codec (its gzip stamps the
    time: build once, compare with that); the wrapper at the last offset, its timestamp the largest (or
    ``log_append_time``, with the LogAppendTime bit)."""
    first = rows[0][0]
    inner_magic = magic if inner_magic is None else inner_magic
    inner = message_set(inner_magic, [(o - first if magic == 1 else o, t, k, v) for o, t, k, v in rows])
    value = {C.GZIP: gzip_encode, C.SNAPPY: snappy_encode, C.LZ4: lz4_encode_old_kafka if magic == 0 else lz4_encode}[
        codec](inner)
    attributes = int(codec) | (0x08 if log_append_time is not None else 0)
    timestamp = log_append_time if log_append_time is not None else max(t for _, t, _, _ in rows)
    return wrapper_entry(magic, attributes, timestamp, rows[-1][0], value)


def wrapper_entry(magic: int, attributes: int, timestamp: int, offset: int, value: bytes) -> bytes:
    """A wrapper entry, field by field: offset, size, CRC-32 of the rest, magic, attributes, (v1)
    timestamp, null key, value."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def expected_wrapper(magic: int, codec: CompressionType, rows: list[Row], *, wrapper_timestamp: int = -1,
                     log_append: bool = False) -> bytes:
    """What Kafka's cleaner writes for the retained ``rows``: kafka-python's message set of them at
    Kafka's inner offsets, compressed with the codec at its default level (kafkalog's codecs write
    Kafka's bytes: see tests/format/test_compression.py), in a wrapper at the last row's offset."""
    first = rows[0][0]
    inner = b""
    for offset, timestamp, key, value in rows:
        if log_append:  # kafka-python writes attributes 0: the LogAppendTime bit is set by hand
            body = struct.pack(">bbq", 1, 0x08, timestamp)
            for field in (key, value):
                body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
            inner += struct.pack(">qiI", offset - first, 4 + len(body), zlib.crc32(body)) + body
        else:
            inner += message_set(magic, [(offset - first if magic == 1 else offset, timestamp, key, value)])
    value = compression.compress(codec, inner, magic=magic)
    attributes = int(codec) | (0x08 if log_append else 0)
    return wrapper_entry(magic, attributes, wrapper_timestamp, rows[-1][0], value)


def legacy_store(tmp_path: Path, data: bytes, next_offset: int, **configs: str) -> tuple[LogStore, PartitionLocation]:
    """A partition whose first segment is ``data`` and whose active segment starts at ``next_offset``,
    loaded (indexes rebuilt) by ``kafkalog recover --full``."""
    _, loc = new_store(tmp_path, **configs)
    for path in loc.directory.iterdir():
        if path.name[0].isdigit():
            path.unlink()
    names.log_file(loc.directory, 0).write_bytes(data)
    names.log_file(loc.directory, next_offset).touch()
    assert run_cli("recover", "--log-dir", str(tmp_path), "--full").code == 0
    store = LogStore([tmp_path])
    return store, store.locate("t", 0)


def cleaned_log(store: LogStore, loc: PartitionLocation) -> bytes:
    return names.log_file(loc.directory, 0).read_bytes()


def peer_read(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record by kafka-python, every batch's CRC checked."""
    out = []
    records = KafkaPythonMemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in batch]
    return out


# --- rebuilt wrappers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_v0_wrapper_keeping_some_records_is_rebuilt_at_its_last_retained_offset(tmp_path: Path,
                                                                                codec: CompressionType) -> None:
    # testCleaningNestedMessagesWithV0AndV1's first message set: keys 0/1 three times in one wrapper
    rows: list[Row] = [(o, -1, str(o % 2).encode(), str(o).encode()) for o in range(6)]
    plain = message_set(0, [(6, -1, b"3", b"6"), (7, -1, b"4", b"7")])
    store, loc = legacy_store(tmp_path, source_wrapper(0, codec, rows) + plain, 8)
    result = clean(store, loc)
    assert cleaned_log(store, loc) == expected_wrapper(0, codec, [(4, -1, b"0", b"4"), (5, -1, b"1", b"5")]) + plain
    assert (result.stats.batches_rebuilt, result.stats.batches_copied, result.stats.records_written) == (1, 2, 4)
    assert peer_read(cleaned_log(store, loc)) == [(4, -1, b"0", b"4"), (5, -1, b"1", b"5"), (6, -1, b"3", b"6"),
                                                   (7, -1, b"4", b"7")]


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_v1_wrapper_is_rebuilt_with_relative_offsets_from_its_first_retained_record(tmp_path: Path,
                                                                                   codec: CompressionType) -> None:
    # b at 11 is superseded inside the wrapper: 10, 12 and 13 stay, at relative offsets 0, 2 and 3. The
    # wrapper's timestamp is the largest retained one (500), not the source's (900, of the record gone).
    rows: list[Row] = [(10, 500, b"a", b"10"), (11, 900, b"b", b"11"), (12, 100, b"c", b"12"), (13, 300, b"b", b"13")]
    store, loc = legacy_store(tmp_path, message_set(1, [(9, 50, b"z", b"9")]) + source_wrapper(1, codec, rows), 14)
    clean(store, loc)
    kept: list[Row] = [(10, 500, b"a", b"10"), (12, 100, b"c", b"12"), (13, 300, b"b", b"13")]
    assert cleaned_log(store, loc) == message_set(1, [(9, 50, b"z", b"9")]) + expected_wrapper(
        1, codec, kept, wrapper_timestamp=500)
    assert peer_read(cleaned_log(store, loc)) == [(9, 50, b"z", b"9"), *kept]


def test_v1_log_append_time_wrapper_stamps_its_records_with_the_append_time(tmp_path: Path) -> None:
    rows: list[Row] = [(0, 100, b"a", b"0"), (1, 200, b"a", b"1"), (2, 300, b"b", b"2")]
    store, loc = legacy_store(tmp_path, source_wrapper(1, C.GZIP, rows, log_append_time=7_777), 3)
    clean(store, loc)
    # each retained record is written with the append time (its read timestamp all along)
    assert cleaned_log(store, loc) == expected_wrapper(1, C.GZIP, [(1, 7_777, b"a", b"1"), (2, 7_777, b"b", b"2")],
                                                       wrapper_timestamp=7_777, log_append=True)
    assert peer_read(cleaned_log(store, loc)) == [(1, 7_777, b"a", b"1"), (2, 7_777, b"b", b"2")]


def test_kafka_4298_wrapper_is_rebuilt_in_its_magic_even_when_it_keeps_every_record(tmp_path: Path) -> None:
    # testCleanCorruptMessageSet's second set: a magic 1 wrapper of magic 0 messages, nothing superseded
    rows: list[Row] = [(50, -1, b"3", b"50"), (51, -1, b"4", b"51")]
    store, loc = legacy_store(tmp_path, source_wrapper(1, C.GZIP, rows, inner_magic=0), 52)
    result = clean(store, loc)
    assert cleaned_log(store, loc) == expected_wrapper(1, C.GZIP, rows, wrapper_timestamp=-1)
    assert (result.stats.batches_rebuilt, result.stats.batches_copied) == (1, 0)


def test_kafka_4298_v0_wrapper_of_v1_messages_is_rebuilt_without_their_timestamps(tmp_path: Path) -> None:
    # The other way round: magic 1 messages (timestamps 10, 20: what a reader sees) in a magic 0 wrapper
    # become magic 0 messages, which have no timestamp.
    rows: list[Row] = [(0, 10, b"a", b"0"), (1, 20, b"b", b"1")]
    store, loc = legacy_store(tmp_path, source_wrapper(0, C.GZIP, rows, inner_magic=1), 2)
    assert [r.timestamp for r in read_log(store, loc)[1]] == [10, 20]
    clean(store, loc)
    assert cleaned_log(store, loc) == expected_wrapper(0, C.GZIP, [(0, -1, b"a", b"0"), (1, -1, b"b", b"1")])
    assert [r.timestamp for r in read_log(store, loc)[1]] == [-1, -1]


def test_wrapper_keeping_every_record_of_its_magic_is_copied(tmp_path: Path) -> None:
    source = source_wrapper(1, C.SNAPPY, [(0, 10, b"a", b"0"), (1, 20, b"b", b"1")])  # kafka-python's snappy
    store, loc = legacy_store(tmp_path, source, 2)
    result = clean(store, loc)
    assert cleaned_log(store, loc) == source
    assert (result.stats.batches_rebuilt, result.stats.batches_copied) == (0, 1)


@pytest.mark.parametrize("past_horizon", [False, True])
def test_legacy_tombstone_goes_once_its_segment_is_past_the_legacy_horizon(tmp_path: Path, past_horizon: bool) -> None:
    # A v0 tombstone stays while its segment is newer than the legacy delete horizon (the mtime of the
    # last segment below the dirty range - delete.retention.ms); once older, it goes, and its wrapper is
    # rebuilt without it.
    rows: list[Row] = [(0, -1, b"a", b"0"), (1, -1, b"b", None), (2, -1, b"c", b"2")]
    source = source_wrapper(0, C.GZIP, rows)
    store, loc = legacy_store(tmp_path, source, 3)
    with store.writable_log(loc) as log:
        put(log, [("d", "3")])
        log.roll()
        put(log, [("e", "4")])
        log.roll()
    legacy_mtime = (T0 - (3 * DAY if past_horizon else DAY // 2)) / 1000
    os.utime(names.log_file(loc.directory, 0), (legacy_mtime, legacy_mtime))
    os.utime(names.log_file(loc.directory, 3), (T0 / 1000, T0 / 1000))
    result = clean(store, loc, first_dirty=4)
    if past_horizon:
        assert cleaned_log(store, loc).startswith(expected_wrapper(0, C.GZIP, [(0, -1, b"a", b"0"),
                                                                              (2, -1, b"c", b"2")]))
        assert result.stats.tombstones_removed == 1
    else:
        assert cleaned_log(store, loc).startswith(source)  # copied, the tombstone kept
        assert result.stats.tombstones_removed == 0
    assert [(o, k, v) for o, _, k, v in peer_read(cleaned_log(store, loc))] == \
        [(0, b"a", b"0"), *([] if past_horizon else [(1, b"b", None)]), (2, b"c", b"2"), (3, b"d", b"3"),
         (4, b"e", b"4")]


# --- segments mixing legacy entries and v2 batches -------------------------------------------------------


def _mixed_segment(codec: CompressionType) -> tuple[bytes, int]:
    """v0 and v1 wrappers, a plain v1 message, then (message format upgraded) v2 batches, one compressed:
    keys superseded inside wrappers, across formats and inside a v2 batch."""
    data = source_wrapper(0, codec, [(0, -1, b"k0", b"0"), (1, -1, b"k1", b"1"), (2, -1, b"k0", b"2")])
    data += source_wrapper(1, codec, [(3, 30, b"k2", b"3"), (4, 40, b"k3", b"4"), (5, 50, b"k2", b"5")])
    data += message_set(1, [(6, 60, b"k4", b"6")])
    data += build_batch([Record(7, 70, b"k3", b"7"), Record(8, 80, b"k5", b"8"), Record(9, 90, b"k5", b"9")])
    data += build_batch([Record(10, 100, b"k6", b"10"), Record(11, 110, b"k1", b"11")], compression_type=C.LZ4)
    return data, 12


def test_mixed_segment_is_cleaned_batch_by_batch_in_each_magic(tmp_path: Path) -> None:
    data, end = _mixed_segment(C.GZIP)
    store, loc = legacy_store(tmp_path, data, end)
    clean(store, loc)
    want = expected_wrapper(0, C.GZIP, [(2, -1, b"k0", b"2")])
    want += expected_wrapper(1, C.GZIP, [(5, 50, b"k2", b"5")], wrapper_timestamp=50)
    want += message_set(1, [(6, 60, b"k4", b"6")])
    # the v2 batch keeps its base and last offsets (7, 9), as the all-v2 path rebuilds it
    want += build_batch([Record(7, 70, b"k3", b"7"), Record(9, 90, b"k5", b"9")], base_offset=7, last_offset=9)
    want += build_batch([Record(10, 100, b"k6", b"10"), Record(11, 110, b"k1", b"11")], compression_type=C.LZ4)
    assert cleaned_log(store, loc) == want
    assert peer_read(cleaned_log(store, loc)) == [(2, -1, b"k0", b"2"), (5, 50, b"k2", b"5"), (6, 60, b"k4", b"6"),
                                                   (7, 70, b"k3", b"7"), (9, 90, b"k5", b"9"),
                                                   (10, 100, b"k6", b"10"), (11, 110, b"k1", b"11")]
    out = run_cli("verify", "--log-dir", str(tmp_path))
    assert out.code == 0, out.out
    consumed = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    assert consumed.code == 0 and consumed.out.split() == ["2", "k0", "2", "5", "k2", "5", "6", "k4", "6", "7", "k3",
                                                           "7", "9", "k5", "9", "10", "k6", "10", "11", "k1", "11"]


def _spark_tasks_round(store: LogStore, loc: PartitionLocation, scratch: Path, parts: int = 2) -> None:
    """The round the Spark job's tasks run: the key map in parts, a task per group, the driver's commit."""
    active = store.open_log(loc, read_only=True).active_segment.base_offset
    with cleaner_lock(loc.directory, timeout_s=0):
        try:
            spec, ctx = tasks.plan_round(store, loc, 0, active, now_ms=T0, wall_now_ms=T0, parts=parts)
            spec = tasks.RoundSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
            maps = [tasks.map_part_task(store, spec, p, scratch / f"map-{p}") for p in range(parts)]
            states = tasks.group_txn_states(ctx, spec, maps)
            groups = [tasks.write_group_task(store, spec, i, [m["prefix"] for m in maps], state, f"attempt-{i}")
                      for i, state in enumerate(states)]
            tasks.commit_round(ctx, spec, groups, [m["stats"] for m in maps], run_id="tasks")
        finally:
            tasks.discard_attempts(loc)


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name_kafka)
def test_spark_tasks_write_the_bytes_the_cli_writes(tmp_path: Path, codec: CompressionType) -> None:
    # Two groups at segment.bytes 500: the mixed segment (422-475 bytes, by codec) and a v2 one (83)
    # cannot share one, so the tasks write them apart.
    first, end = _mixed_segment(codec)
    cli_dir = tmp_path / "cli"
    store, loc = legacy_store(cli_dir, first, end, segment_bytes="500")
    with store.writable_log(loc) as log:
        log.append_batch(build_batch([Record(end, 120, b"k0", b"12"), Record(end + 1, 130, b"k9", b"13")]), now_ms=T0)
        log.roll(now_ms=T0)
    assert len(store.open_log(loc, read_only=True).segments) == 3
    shutil.copytree(cli_dir, tmp_path / "tasks")
    before = tree_digest(cli_dir)
    assert run_cli("compact", "--log-dir", str(cli_dir), "--topic", "t", "--now-ms", str(T0), "--wall-now-ms",
                   str(T0)).code == 0
    assert tree_digest(cli_dir) != before
    task_store = LogStore([tmp_path / "tasks"])
    _spark_tasks_round(task_store, task_store.locate("t", 0), tmp_path / "scratch")
    assert live_digest(tmp_path / "tasks") == live_digest(cli_dir)


# --- the verification before the swap -------------------------------------------------------------------


def _damaged(how: str) -> Callable[..., bytes]:
    """``legacy.build_wrapper`` with one mistake a rebuild could make."""
    real = legacy.build_wrapper

    def build(magic: int, codec: CompressionType, ts_type: TimestampType, records: list[Record], *,
              log_append_time: int = -1) -> bytes:
        if how == "offset":  # left at the source wrapper's offset, not the last retained record's
            return struct.pack(">q", 5) + real(magic, codec, ts_type, records, log_append_time=log_append_time)[8:]
        if how == "value":
            records = [dataclasses.replace(records[0], value=b"X"), *records[1:]]
        if how == "timestamp":
            log_append_time += 1
        if how == "magic":  # KAFKA-4298 again: magic 0 messages in the magic 1 wrapper
            first = records[0].offset
            inner = message_set(0, [(r.offset - first, -1, r.key, r.value) for r in records])
            return wrapper_entry(1, int(codec), -1, records[-1].offset, compression.compress(codec, inner, magic=1))
        return real(magic, codec, ts_type, records, log_append_time=log_append_time)

    return build


@pytest.mark.parametrize(("how", "error"), [
    ("offset", "batch base/last offsets or magics differ from the source batches"),
    ("value", "record at offset 1 differs from its source"),
    ("timestamp", "the retained records' offsets or timestamps differ from the source"),
    ("magic", "record at offset 1 has magic 0, not its wrapper's"),
])
def test_a_wrongly_rebuilt_wrapper_is_refused_before_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              how: str, error: str) -> None:
    # a@1, b@2 and c@4 stay; x@5 is superseded by the plain message after the wrapper
    rows: list[Row] = [(0, -1, b"a", b"0"), (1, -1, b"a", b"1"), (2, -1, b"b", b"2"), (3, -1, b"c", b"3"),
                       (4, -1, b"c", b"4"), (5, -1, b"x", b"5")]
    wrapper = source_wrapper(1, C.GZIP, rows, log_append_time=7_777 if how == "timestamp" else None)
    store, loc = legacy_store(tmp_path, wrapper + message_set(1, [(6, -1, b"x", b"6")]), 7)
    before = tree_digest(loc.directory)
    monkeypatch.setattr(legacy, "build_wrapper", _damaged(how))
    with pytest.raises(CleanerError, match=error):
        clean(store, loc)
    assert {k: v for k, v in tree_digest(loc.directory).items() if not k.startswith(".kafkalog")} == \
        {k: v for k, v in before.items() if not k.startswith(".kafkalog")}
    monkeypatch.undo()
    clean(store, loc)  # the real rebuild passes the same checks
    assert [(o, k) for o, _, k, _ in peer_read(cleaned_log(store, loc))] == [(1, b"a"), (2, b"b"), (4, b"c"), (6, b"x")]
