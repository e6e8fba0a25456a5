"""Apache Kafka's ``LogCleanerTest``, continued (see ``test_log_cleaner.py`` for how Kafka's calls are
stood for): interrupted and concurrent rounds, segment grouping, the key map, offset overflow, crash
recovery of the swap, legacy message sets, tombstones and offset gaps.

Not applicable (Kafka internals with no kafkalog counterpart):

- ``testRemoveMetricsOnClose``, ``testMetricsActiveAfterReconfiguration``, ``testMaxCleanTimeSecs``:
  the cleaner's Yammer metrics and gauges (mocked ``KafkaMetricsGroup``); kafkalog has no metrics
  registry, its rounds report their statistics in the journal and the CLI's JSON.
- ``testReconfigureLogCleanerIoMaxBytesPerSecond``: dynamic broker reconfiguration of the cleaner
  threads' throttler; kafkalog has no running broker, no cleaner threads and no I/O throttler.
"""

from __future__ import annotations

import gzip
import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from kafka_log import DAY, MAX_INT, T0, ScenarioLog
from log_cleaner_helpers import SURFACES, digest, end_offset, fill_until, kafka_log, leo, open_segments, with_broker

from kafkalog.errors import CleanerError
from kafkalog.format.batch import Record, build_batch
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log import names
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.segment import LogSegment
from kafkalog.log.store import LogStore
from kafkalog.maintenance import cleaner
from kafkalog.maintenance.cleaner import CleanerStats, group_segments_by_size
from kafkalog.maintenance.key_map import KeyMap
from kafkalog.maintenance.txn_tracker import TxnTracker


def clean_context(log: ScenarioLog, first_dirty: int, first_uncleanable: int) -> cleaner.CleanContext:
    return cleaner.open_clean_context(log.store, log.location, first_dirty, first_uncleanable, now_ms=T0,
                                      wall_now_ms=T0)


def map_lookup(key_map: KeyMap, keys: list[str]) -> list[int]:
    """Kafka's ``map.get(key)`` for each key: its offset in the map, or -1."""
    raw = build_batch([Record(i, T0, k.encode(), b"") for i, k in enumerate(keys)])
    columns = scan_records(raw, scan_batches(raw))
    return [int(o) for o in key_map.lookup(columns, np.arange(len(keys), dtype=np.int64))]


class OneOpen:
    """Appends through one open of the log, as Kafka's tests append to one ``UnifiedLog``: an open
    segment counts the bytes since its last offset-index entry (``index.interval.bytes``), and each of
    the harness's appends opens the log anew, which starts that count again. Every record has the
    same timestamp (Kafka's ``singletonRecords`` have none), so the time index gets an entry only per
    segment, and only the offset index limits the index sizes, as in Kafka's tests."""

    def __init__(self, log: ScenarioLog) -> None:
        self.log = log

    def __enter__(self) -> OneOpen:
        self._open = self.log.writable()
        self.local = self._open.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.__exit__(*exc)

    @property
    def segments(self) -> int:
        return len(self.local.segments)

    def append(self, key: str, value: str, base_offset: int | None = None) -> None:
        """``appendAsLeader`` (at the log end) or ``appendAsFollower`` (at ``base_offset``)."""
        offset = self.local.log_end_offset if base_offset is None else base_offset
        self.local.append_batch(build_batch([Record(offset, T0, key.encode(), value.encode())]), now_ms=T0)


def temp_files(log: ScenarioLog) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir()
                  if p.name.endswith((names.CLEANED_SUFFIX, names.SWAP_SUFFIX, names.DELETED_SUFFIX)))


# --- rounds that do not finish ---------------------------------------------------------------------------
def test_clean_segments_with_concurrent_segment_deletion(tmp_path: Path) -> None:
    """LogCleanerTest.testCleanSegmentsWithConcurrentSegmentDeletion: retention (compact,delete) deletes
    the segments being cleaned between the writing of the cleaned segment and its swap; the first
    segment's file is renamed to ``.deleted`` exactly once. Kafka then swaps the cleaned segment in
    anyway (2 segments: it and the active one); kafkalog checks its sources before swapping and
    refuses (nothing swapped, the next round retries), which leaves only the active segment."""
    log = kafka_log(tmp_path, cleanup_policy="compact,delete", retention_ms=60_000)
    while len(log.segment_bases()) < 3:
        log.append_each([("0", str(leo(log)))])
        log.roll()
    assert log.segment_bases() == [0, 1, 2]
    with cleaner_lock(log.directory, timeout_s=0):
        ctx = clean_context(log, 0, 2)
        key_map = cleaner.build_key_map(ctx, CleanerStats(), set())
        (group,) = ctx.groups()
        assert [s.base_offset for s in group] == [0, 1]
        written = cleaner.write_cleaned_group(ctx, group, key_map, TxnTracker(), CleanerStats(), set())
        # meanwhile, retention
        log.cli("retention", "apply", "--log-dir", str(log.log_dir), "--topic", log.topic,
                "--now-ms", str(T0 + 120_000))
        with pytest.raises((CleanerError, FileNotFoundError), match="changed while being cleaned|No such file"):
            cleaner.swap_cleaned_group(ctx, written)
    assert names.log_file(log.directory, 0, names.DELETED_SUFFIX).is_file()
    assert not names.log_file(log.directory, 0).exists()
    assert not list(log.directory.glob("*" + names.DELETED_SUFFIX + names.DELETED_SUFFIX))
    assert not list(log.directory.glob("*" + names.CLEANED_SUFFIX))
    assert log.segment_bases() == [2]


class CleaningAborted(CleanerError):
    """Kafka's ``LogCleaningAbortedException``, raised by its ``checkDone`` callback."""


@pytest.mark.parametrize("surface", SURFACES)
def test_clean_segments_with_abort(tmp_path: Path, surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testCleanSegmentsWithAbort: a round aborted while it copies the first segment
    (Kafka's ``checkDone`` throws ``LogCleaningAbortedException``) fails with that exception. kafkalog
    has no abort callback: the abort is raised where the cleaner reads its source segments, and
    kafkalog also asserts what it promises of an aborted round: no ``.cleaned`` file left, no
    segment changed, no checkpoint written."""
    log = kafka_log(tmp_path)
    fill_until(log, 4)
    log.roll()
    before = digest(log.directory)
    real = cleaner._clean_segment

    def aborting(*args: object, **kwargs: object) -> Iterator[object]:
        for window in real(*args, **kwargs):  # type: ignore[arg-type]
            yield window
            raise CleaningAborted("cleaning of t-0 aborted")

    monkeypatch.setattr(cleaner, "_clean_segment", aborting)
    if surface == "cli":
        result = log.cli("compact", "--log-dir", str(log.log_dir), "--topic", log.topic, "--now-ms", str(T0),
                         "--json", ok=False)
        assert result.code == 1
        assert [e["error"] for e in json.loads(result.out)["errors"]] == ["cleaning of t-0 aborted"]
    else:
        with pytest.raises(CleaningAborted):
            log.compact(T0, surface=surface)
    assert digest(log.directory) == before
    assert log.cleaner_checkpoint() is None


@pytest.mark.parametrize("surface", SURFACES)
def test_clean_segments_retaining_last_empty_batch(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanSegmentsRetainingLastEmptyBatch: when every record of the cleaned range
    is superseded, its last batch stays as an empty batch ending at the next segment's base − 1, and
    the cleaned range becomes one segment. Kafka's fake map supersedes every key; here every key is
    deleted by a tombstone and a two-pass clean removes the tombstones too. Kafka cleans its segments
    as one group whatever their size; here segment.bytes is raised after they are written, so that
    they make one group."""
    log = kafka_log(tmp_path)
    fill_until(log, 4)
    log.append_each([(str(k), None) for k in range(leo(log))])
    log.roll()
    active = log.active_base()
    log.cli("topics", "alter", "--log-dir", str(log.log_dir), "--topic", log.topic,
            "--config", f"segment.bytes={1024 * 1024}")
    log.store = LogStore([log.log_dir])  # forget the old topic config
    log.two_pass_clean(T0, 0, surface=surface)
    assert log.segment_bases() == [0, active]
    (retained,) = [b for b in log.batches() if b.segment != active]
    assert (retained.last_offset, retained.records, retained.size) == (active - 1, 0, 61)
    assert log.records() == []


# --- segment grouping --------------------------------------------------------------------------------------
def check_segment_order(groups: list[list[LogSegment]]) -> None:
    offsets = [s.base_offset for g in groups for s in g]
    assert offsets == sorted(offsets)


def test_segment_grouping(tmp_path: Path) -> None:
    """LogCleanerTest.testSegmentGrouping: 10 segments (segment.bytes=300, an index entry per batch)
    group into one under unlimited sizes, into singletons under a 1-byte log or index limit, and into
    groups of 3 (all but the last) under a limit of three segments' log bytes or offset-index bytes
    (+1)."""
    log = kafka_log(tmp_path, segment_bytes=300, index_interval_bytes=1)
    with OneOpen(log) as one:
        while one.segments < 10:
            one.append("hello", "hello")
    segments = open_segments(log)
    assert all(len(s.offset_index) > 0 for s in segments[:-1])
    end = leo(log)

    def grouped(max_size: int, max_index_size: int) -> list[list[LogSegment]]:
        groups = group_segments_by_size(segments, max_size, max_index_size, end, segments)
        check_segment_order(groups)
        assert [s.base_offset for g in groups for s in g] == [s.base_offset for s in segments]
        return groups

    assert [len(g) for g in grouped(MAX_INT, MAX_INT)] == [10]
    assert [len(g) for g in grouped(1, MAX_INT)] == [1] * 10
    assert [len(g) for g in grouped(MAX_INT, 1)] == [1] * 10
    log_size = sum(s.size for s in segments[:3]) + 1
    assert [len(g) for g in grouped(log_size, MAX_INT)] == [3, 3, 3, 1]
    index_size = sum(len(s.offset_index) * 8 for s in segments[:3]) + 1
    # the active segment has no index entry yet (none for a segment's first batch): it joins the third
    assert [len(g) for g in grouped(MAX_INT, index_size)] == [3, 3, 4]


def sparse_log_with_empty_segments(tmp_path: Path) -> ScenarioLog:
    """Three segments each holding a record at its base and one at its base + MAX_INT (as a follower
    appends them), then an active segment with one record."""
    log = kafka_log(tmp_path)
    with OneOpen(log) as one:
        for i in range(3):
            one.append("key", "val")
            one.append("key", "val", base_offset=(i + 1) * (MAX_INT + 1) - 1)
            assert one.segments == i + 1
        one.append("key", "val")
    assert log.segment_bases() == [0, MAX_INT + 1, 2 * (MAX_INT + 1), 3 * (MAX_INT + 1)]
    return log


@pytest.mark.parametrize("surface", ["cli"])
def test_segment_grouping_with_sparse_offsets_and_empty_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSegmentGroupingWithSparseOffsetsAndEmptySegments: segments that each span
    MAX_INT offsets never group (each of the 3 cleanable segments alone); once cleaning has emptied
    the first two, those empty segments group, and the next round merges them into one segment
    (3 segments). Kafka groups all four segments, the active one included, with the first
    uncleanable offset at the active segment's record: it counts 3 groups, then 2, because its
    estimate of the last segment's end stops below that offset and joins the active segment to the
    third. kafkalog's estimate reaches the segment's own last record (such a group would overflow),
    so the active segment stays alone: 4 groups, then 3; the cleanable segments group as in Kafka.
    Only through the CLI: the Spark tasks save the key map's supersession bitmap, a bit per offset of
    the range (here 6.4e9 offsets)."""
    log = sparse_log_with_empty_segments(tmp_path)
    first_uncleanable = leo(log) - 1
    b1, b2, b3 = MAX_INT + 1, 2 * (MAX_INT + 1), 3 * (MAX_INT + 1)

    def groups(cleanable_only: bool) -> list[list[int]]:
        segments = open_segments(log)
        grouped = segments[:-1] if cleanable_only else segments
        found = group_segments_by_size(grouped, MAX_INT, MAX_INT, first_uncleanable, segments)
        check_segment_order(found)
        return [[s.base_offset for s in g] for g in found]

    assert groups(cleanable_only=True) == [[0], [b1], [b2]]
    assert groups(cleanable_only=False) == [[0], [b1], [b2], [b3]]  # Kafka: [[0], [b1], [b2, b3]]
    log.clean(T0, 0, surface=surface)
    assert log.segment_bases() == [0, b1, b2, b3]
    assert names.log_file(log.directory, 0).stat().st_size == 0
    assert names.log_file(log.directory, b1).stat().st_size == 0
    assert groups(cleanable_only=True) == [[0, b1], [b2]]
    assert groups(cleanable_only=False) == [[0, b1], [b2], [b3]]  # Kafka: [[0, b1], [b2, b3]]
    log.clean(T0, 0, surface=surface)
    assert log.segment_bases() == [0, b2, b3]


def test_segment_grouping_with_sparse_offsets(tmp_path: Path) -> None:
    """LogCleanerTest.testSegmentGroupingWithSparseOffsets: a segment whose offsets reach MAX_INT still
    groups with the first (relative offsets fit 4 bytes); one offset more and it does not; with more
    segments, no group spans more than MAX_INT offsets."""
    log = kafka_log(tmp_path, segment_bytes=400, index_interval_bytes=1)
    with OneOpen(log) as one:
        while one.segments == 1:
            one.append("hello", "hello")
        one.append("hello", "hello", base_offset=MAX_INT - 1)
        one.append("hello", "hello")
        assert one.local.active_segment.offset_index.last_offset == MAX_INT

        def groups() -> list[list[LogSegment]]:
            segments = list(one.local.segments)
            found = group_segments_by_size(segments, MAX_INT, MAX_INT, one.local.log_end_offset, segments)
            check_segment_order(found)
            return found

        assert len(groups()) == 1
        one.append("hello", "hello")
        assert len(groups()) == 2
        while one.segments < 4:
            one.append("hello", "hello")
        found = groups()
        assert len(found) == one.segments - 1 == 3
        for group in found:
            assert group[-1].offset_index.last_offset - group[0].offset_index.base_offset <= MAX_INT


def test_segment_grouping_following_load_of_zero_index(tmp_path: Path) -> None:
    """LogCleanerTest.testSegmentGroupingFollowingLoadOfZeroIndex: with no index entries
    (index.interval.bytes=400) the second segment's index reports its base as its last offset, but
    the segment holds offsets up to MAX_INT + 1: the two segments must not group (2 groups)."""
    log = kafka_log(tmp_path, segment_bytes=400, index_interval_bytes=400)
    with OneOpen(log) as one:
        one.append("hello", "hello", base_offset=0)
        one.append("hello", "hello", base_offset=1)
        one.local.roll(MAX_INT // 2, now_ms=T0)
        one.append("hello", "hello", base_offset=MAX_INT // 2)
        one.append("hello", "hello", base_offset=MAX_INT + 1)
    segments = open_segments(log)
    assert [s.base_offset for s in segments] == [0, MAX_INT // 2]
    assert leo(log) - 1 - 0 > MAX_INT
    assert segments[-1].offset_index.last_offset - 0 <= MAX_INT
    groups = group_segments_by_size(segments, MAX_INT, MAX_INT, leo(log), segments)
    assert len(groups) == 2
    for group in groups:
        assert group[-1].read_next_offset() - 1 - group[0].base_offset <= MAX_INT
    check_segment_order(groups)


# --- the key map ---------------------------------------------------------------------------------------------
def test_build_offset_map(tmp_path: Path) -> None:
    """LogCleanerTest.testBuildOffsetMap: maps of [0, seg 1), [seg 1, seg 3) and [seg 3, end) over 500
    records of distinct keys hold exactly the keys of their range at their offsets, end at the range's
    end − 1, and read one record per offset of the range. (Kafka's last range reaches into the active
    segment; kafkalog maps only inactive segments, so the log is rolled first.)"""
    log = kafka_log(tmp_path)
    log.append_each([(str(i), str(i)) for i in range(500)])
    log.roll()
    bases = log.segment_bases()

    def check_range(start: int, end: int) -> None:
        stats = CleanerStats()
        key_map = cleaner.build_key_map(clean_context(log, start, end), stats, set())
        assert key_map.latest_offset + 1 == end
        assert len(key_map) == end - start
        assert map_lookup(key_map, [str(i) for i in range(start, end)]) == list(range(start, end))
        assert map_lookup(key_map, [str(start - 1), str(end)]) == [-1, -1]
        assert stats.map_records == end - start

    check_range(0, bases[1])
    check_range(bases[1], bases[3])
    check_range(bases[3], leo(log))


def test_build_offset_map_fake_large(tmp_path: Path) -> None:
    """LogCleanerTest.testBuildOffsetMapFakeLarge: two keys at offsets 0 and 7206178 (segment.bytes and
    segment.index.bytes 120): the map holds both, at those offsets, and ends at 7206178."""
    log = kafka_log(tmp_path, segment_bytes=120, segment_index_bytes=120)
    log.append([("0", "0")], base_offset=0)
    log.append([("1", "1")], base_offset=7_206_178)
    log.roll()
    key_map = cleaner.build_key_map(clean_context(log, 0, 7_206_179), CleanerStats(), set())
    assert key_map.latest_offset == 7_206_178
    assert len(key_map) == 2
    assert map_lookup(key_map, ["0", "1"]) == [0, 7_206_178]


@pytest.mark.parametrize("surface", SURFACES)
def test_build_partial_offset_map(tmp_path: Path, surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testBuildPartialOffsetMap: a key map of 2 entries (Kafka's 3 slots at load factor
    0.75; here a 72-byte dedupe buffer) built from offset 2 over keys 0..4 holds keys 2 and 3 and
    stops before 4: the round cleans [2, 4). Kafka reads the map; kafkalog asserts the round's end
    offset, checkpoint and map size."""
    log = kafka_log(tmp_path)
    with_broker(log, monkeypatch, log_cleaner_dedupe_buffer_size=72, log_cleaner_io_buffer_load_factor=0.75)
    log.append_each([(str(i), str(i)) for i in range(5)])
    log.roll()
    assert end_offset(log.clean(T0, 2, surface=surface)) == 4
    assert log.cleaner_checkpoint() == 4
    out = log.cli("journal", "--log-dir", str(log.log_dir), "--topic", log.topic, "--json").out
    (entry,) = [e for e in json.loads(out)["entries"] if e["action"] == "compact"]
    assert entry["extra"]["stats"]["map_keys"] == 2


# --- offset overflow and crash recovery ---------------------------------------------------------------------
def overflowed_log(tmp_path: Path) -> ScenarioLog:
    """Kafka's ``initializeLogDirWithOverflowedSegment``: segments at 0, MAX_INT and 3 * MAX_INT, each of
    batches at base, base + 1 (two records) and base + MAX_INT − 1; the second holds those batches twice
    (from MAX_INT and from 2 * MAX_INT), so its offsets overflow its base. Every record's key and value
    are its offset. The files are written raw, with empty index files, as Kafka's helper writes them."""
    log = kafka_log(tmp_path, index_interval_bytes=1, file_delete_delay_ms=1000)
    for path in log.directory.iterdir():
        if path.name[0].isdigit():
            path.unlink()

    def sample(base: int) -> bytes:
        def batch(first: int, count: int) -> bytes:
            return build_batch([Record(o, T0, str(o).encode(), str(o).encode()) for o in range(first, first + count)])
        return batch(base, 1) + batch(base + 1, 2) + batch(base + MAX_INT - 1, 1)

    for base, data in ((0, sample(0)), (MAX_INT, sample(MAX_INT) + sample(2 * MAX_INT)),
                       (3 * MAX_INT, sample(3 * MAX_INT))):
        names.log_file(log.directory, base).write_bytes(data)
        names.index_file(log.directory, base).touch()
        names.time_index_file(log.directory, base).touch()
    return log


def has_offset_overflow(log: ScenarioLog) -> bool:
    return any(b.last_offset > b.segment + MAX_INT or b.base_offset < b.segment for b in log.batches())


# Kafka splits a segment into segments each based at its first batch and taking batches while their
# last offset fits: the overflowed segment at MAX_INT keeps its batches up to the one at 2 * MAX_INT
# (MAX_INT above its base), and the next segment starts at 2 * MAX_INT + 1.
SPLIT_BASES = [0, MAX_INT, 2 * MAX_INT + 1, 3 * MAX_INT]
OVERFLOW_KEYS = [str(o) for base in (0, MAX_INT, 2 * MAX_INT, 3 * MAX_INT)
                 for o in (base, base + 1, base + 2, base + MAX_INT - 1)]


def check_cleaning_after_split(log: ScenarioLog, surface: str) -> None:
    """Kafka's second half: every other key cleaned away, across the split segments."""
    superseded = OVERFLOW_KEYS[1::2]
    log.append_each([(k, "later") for k in superseded])
    log.roll()
    log.clean(T0, 0, surface=surface)
    assert log.keys_in_log() == OVERFLOW_KEYS[0::2] + superseded
    assert not has_offset_overflow(log)


@pytest.mark.parametrize("surface", SURFACES)
def test_segment_with_offset_overflow(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSegmentWithOffsetOverflow: a segment whose offsets overflow its base is split
    by the cleaning round that meets it (one segment more; keys unchanged; no overflow left), which
    Kafka then aborts; cleaning every other key then works across the split segments. Kafka's fake
    map supersedes every other key; here they are written again later."""
    log = overflowed_log(tmp_path)
    assert has_offset_overflow(log)
    if surface == "cli":
        log.compact(T0, ok=False)
    else:
        with pytest.raises(CleanerError):  # Kafka: LogCleaningAbortedException
            log.compact(T0, surface=surface)
    assert log.segment_bases() == SPLIT_BASES
    assert log.keys_in_log() == OVERFLOW_KEYS
    assert not has_offset_overflow(log)
    check_cleaning_after_split(log, surface)


@pytest.mark.parametrize("surface", SURFACES)
def test_segment_with_offset_overflow_split_by_recover(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSegmentWithOffsetOverflow as kafkalog gets there: ``kafkalog recover`` splits
    the overflowed segment as Kafka's cleaner does (one segment more, based at 2 * MAX_INT + 1; keys
    unchanged; no overflow), and cleaning every other key then works across the split segments."""
    log = overflowed_log(tmp_path)
    log.recover()
    assert log.segment_bases() == SPLIT_BASES
    assert log.keys_in_log() == OVERFLOW_KEYS
    assert not has_offset_overflow(log)
    check_cleaning_after_split(log, surface)


CRASH_STAGES = {
    # stage: (what the files are renamed to, whether recovery finds the old keys)
    "cleaned-before-swap": True,  # the cleaned segment is still .cleaned, the old ones are back
    "one-file-swap": True,  # the cleaned .log renamed to .swap, its indexes still .cleaned
    "swap-before-delete": False,  # the cleaned segment is .swap, the old segments not yet .deleted
    "swap-after-delete": False,  # .swap, and the old segments renamed .deleted
    "partly-promoted": False,  # only the time index still .swap, the old segments .deleted
    "swapped": False,  # the swap is complete, the .deleted files not yet removed
}


@pytest.mark.parametrize("stage", list(CRASH_STAGES))
def test_recovery_after_crash(tmp_path: Path, stage: str) -> None:
    """LogCleanerTest.testRecoveryAfterCrash: a crash at each stage of the cleaned segment's swap
    (segment.bytes=300, nine segments cleaned into one) recovers to all the old keys while the
    cleaned segment has any ``.cleaned`` file, else to the cleaned keys, and leaves no ``.cleaned``,
    ``.swap`` or (after file.delete.delay.ms) ``.deleted`` file. Kafka's fake map supersedes every odd
    key; here the odd keys are written again after the ten segments. kafkalog removes ``.deleted``
    files with ``retention sweep``, not at load."""
    log = kafka_log(tmp_path, segment_bytes=300, index_interval_bytes=1, file_delete_delay_ms=10)
    fill_until(log, 10)
    count = leo(log)
    log.append_each([(str(k), "later") for k in range(1, count, 2)])
    log.roll()
    all_keys = log.keys_in_log()
    with cleaner_lock(log.directory, timeout_s=0):
        ctx = clean_context(log, 0, log.active_base())
        key_map = cleaner.build_key_map(ctx, CleanerStats(), set())
        nine = ctx.segments[:9]
        in_nine = nine[-1].read_next_offset()
        written = cleaner.write_cleaned_group(ctx, nine, key_map, TxnTracker(), CleanerStats(), set())
        cleaner.swap_cleaned_group(ctx, written)
    cleaned_keys = log.keys_in_log()
    assert cleaned_keys == [k for k in all_keys[:in_nine] if int(k) % 2 == 0] + all_keys[in_nine:]

    new_files = [p for p in (log.directory / (names.offset_prefix(0) + s) for s in names.SEGMENT_SUFFIXES)
                 if p.exists()]
    deleted = list(log.directory.glob("*" + names.DELETED_SUFFIX))

    def rename(path: Path, suffix: str) -> None:
        path.rename(path.with_name(path.name + suffix))

    def restore_deleted() -> None:
        for path in deleted:
            path.rename(path.with_name(path.name[: -len(names.DELETED_SUFFIX)]))

    if stage in ("cleaned-before-swap", "one-file-swap"):
        for path in new_files:
            rename(path, names.CLEANED_SUFFIX)
        if stage == "one-file-swap":
            cleaned_log = names.log_file(log.directory, 0, names.CLEANED_SUFFIX)
            cleaned_log.rename(names.log_file(log.directory, 0, names.SWAP_SUFFIX))
        restore_deleted()
    elif stage in ("swap-before-delete", "swap-after-delete"):
        for path in new_files:
            rename(path, names.SWAP_SUFFIX)
        if stage == "swap-before-delete":
            restore_deleted()
    elif stage == "partly-promoted":
        rename(names.time_index_file(log.directory, 0), names.SWAP_SUFFIX)

    log.recover()
    time.sleep(0.05)  # file.delete.delay.ms=10
    log.cli("retention", "sweep", "--log-dir", str(log.log_dir))
    assert temp_files(log) == []
    assert log.keys_in_log() == (all_keys if CRASH_STAGES[stage] else cleaned_keys)
    assert log.verify().code == 0


# --- legacy message sets ------------------------------------------------------------------------------------
def legacy_message(magic: int, key: bytes | None, value: bytes | None, *, attributes: int = 0,
                   timestamp: int = -1) -> bytes:
    """A legacy message (magic 0 or 1) without its offset/size prefix."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">I", zlib.crc32(body)) + body


def invalid_cleaned_message(first_offset: int, pairs: list[tuple[int, int]]) -> bytes:
    """Kafka's ``invalidCleanedMessage``: what old cleaners wrote under KAFKA-4298, a magic 1 GZIP
    wrapper (of the last absolute offset) whose inner messages are magic 0, at relative offsets."""
    inner = b""
    for i, (key, value) in enumerate(pairs):
        message = legacy_message(0, str(key).encode(), str(value).encode())
        inner += struct.pack(">qi", i, len(message)) + message
    wrapper = legacy_message(1, None, gzip.compress(inner), attributes=1)
    return struct.pack(">qi", first_offset + len(pairs) - 1, len(wrapper)) + wrapper


def legacy_log(tmp_path: Path, sets: list[bytes], next_offset: int, **configs: str | int) -> ScenarioLog:
    """A log whose first segment holds ``sets`` written raw (as Kafka's ``appendAsFollower``), then an
    empty active segment at ``next_offset``; its indexes are rebuilt by ``kafkalog recover --full``."""
    log = kafka_log(tmp_path, segment_bytes=1024 * 1024, **configs)
    for path in log.directory.iterdir():
        if path.name[0].isdigit():
            path.unlink()
    names.log_file(log.directory, 0).write_bytes(b"".join(sets))
    names.log_file(log.directory, next_offset).touch()
    log.recover(full=True)
    assert log.segment_bases() == [0, next_offset]
    return log


def read_legacy(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """Every inner message of a segment of legacy GZIP wrappers: (wrapper magic, inner magic, absolute
    offset, value), read by hand (v1 inner offsets are relative to the wrapper's, its last)."""
    out = []
    pos = 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        magic, attributes = struct.unpack_from(">bb", data, pos + 16)
        assert attributes & 0x07 == 1, "a GZIP wrapper"
        cursor = pos + 18 + (8 if magic == 1 else 0)
        (key_len,) = struct.unpack_from(">i", data, cursor)
        cursor += 4 + max(key_len, 0)
        (value_len,) = struct.unpack_from(">i", data, cursor)
        inner = gzip.decompress(data[cursor + 4:cursor + 4 + value_len])
        entries = []
        ipos = 0
        while ipos < len(inner):
            ioffset, isize = struct.unpack_from(">qi", inner, ipos)
            imagic = inner[ipos + 16]
            icursor = ipos + 18 + (8 if imagic == 1 else 0)
            (klen,) = struct.unpack_from(">i", inner, icursor)
            icursor += 4 + max(klen, 0)
            (vlen,) = struct.unpack_from(">i", inner, icursor)
            entries.append((ioffset, imagic, inner[icursor + 4:icursor + 4 + vlen]))
            ipos += 12 + isize
        last_relative = entries[-1][0]
        for ioffset, imagic, value in entries:
            absolute = offset - (last_relative - ioffset) if magic == 1 else ioffset
            out.append((magic, imagic, absolute, value))
        pos += 12 + size
    return out


@pytest.mark.parametrize("surface", SURFACES)
def test_clean_corrupt_message_set(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanCorruptMessageSet: message sets corrupted by KAFKA-4298 (magic 1 GZIP
    wrappers holding magic 0 messages) are rewritten by the cleaner, the duplicated one (keys 0, 1,
    0, 1 at 25-28) and the other one (keys 3, 4 at 50-51) alike: every message then has its
    wrapper's magic, and every value is still its offset."""
    dup = invalid_cleaned_message(25, [(0, 25), (1, 26), (0, 27), (1, 28)])
    no_dup = invalid_cleaned_message(50, [(3, 50), (4, 51)])
    log = legacy_log(tmp_path, [dup, no_dup], 52, compression_type="gzip")
    log.clean(T0, 0, surface=surface)
    messages = read_legacy(names.log_file(log.directory, 0).read_bytes())
    assert [(absolute, value) for _, _, absolute, value in messages] == \
        [(27, b"27"), (28, b"28"), (50, b"50"), (51, b"51")]
    assert all(magic == inner_magic for magic, inner_magic, _, _ in messages)


def test_client_handling_of_corrupt_message_set(tmp_path: Path) -> None:
    """LogCleanerTest.testClientHandlingOfCorruptMessageSet: a reader of a KAFKA-4298 message set (keys
    1-9 at offsets 50-58, magic 0 messages in a magic 1 GZIP wrapper) gives each record its absolute
    offset, which is its value. The reader here is ``kafkalog consume``."""
    pairs = [(k, 49 + k) for k in range(1, 10)]
    log = legacy_log(tmp_path, [invalid_cleaned_message(50, pairs)], 59)
    out = log.cli("consume", "--log-dir", str(log.log_dir), "--topic", log.topic, "--partition", "0",
                  "--print-offset").out
    rows = [line.split("\t") for line in out.splitlines()]
    assert [(int(offset), key, value) for offset, key, value in rows] == \
        [(49 + k, str(k), str(49 + k)) for k in range(1, 10)]
    assert all(int(offset) == int(value) for offset, _, value in rows)


# --- tombstones and gaps ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("surface", SURFACES)
def test_clean_tombstone(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanTombstone: a tombstone whose own timestamp is older than
    delete.retention.ms is kept by its first cleanings (its horizon counts from the cleaning time,
    not its timestamp), and the record it deletes, newer by its timestamp, goes."""
    log = kafka_log(tmp_path)
    log.append([("0", "0")], timestamp=T0 + DAY + 10_000)
    log.roll()
    log.clean(T0, 0, surface=surface)
    log.append([("0", None)], timestamp=T0 - DAY - 10_000)
    log.roll()
    log.clean(T0, 1, surface=surface)
    first = log.batches()[0]
    assert (first.last_offset, first.delete_horizon_ms) == (1, T0 + DAY)
    log.append([("1", "1")], timestamp=T0)
    log.roll()
    log.clean(T0, 2, surface=surface)
    assert log.batches()[0].last_offset == 1
    assert log.latest_values() == {"0": None, "1": "1"}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("layout", ["gap-before-active", "gaps-in-two-segments"])
def test_cleaning_beyond_missing_offsets(tmp_path: Path, surface: str, layout: str) -> None:
    """LogCleanerTest.testCleaningBeyondMissingOffsets: when the dirty section ends in offsets no
    record has (keys 0-9 at 0-9, the active segment rolled at 11; or also keys 15-24 and a roll at
    30), the round's end offset (the next first dirty offset) is the active segment's base."""
    log = kafka_log(tmp_path, segment_bytes=1024 * 1024)
    for i in range(10):
        log.append([(str(i), str(i))], base_offset=i)
    if layout == "gap-before-active":
        log.roll(11)
        log.append([("1015", "1015")], base_offset=11)
    else:
        log.roll(15)
        for i in range(15, 25):
            log.append([(str(i), str(i))], base_offset=i)
        log.roll(30)
        log.append([("1015", "1015")], base_offset=30)
    active = log.active_base()
    assert active == (11 if layout == "gap-before-active" else 30)
    assert end_offset(log.clean(T0, 0, surface=surface)) == active
    assert log.cleaner_checkpoint() == active
