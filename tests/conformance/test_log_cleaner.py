"""Apache Kafka's ``LogCleanerTest`` (core/src/test/scala/unit/kafka/log/), scenario by scenario.

Each test is named after the Kafka test it ports and builds the partition the way that test does
(``appendAsLeader``/``appendAsFollower``, transactional and idempotent appends, markers, ``roll``),
then cleans it through the ``kafkalog compact`` CLI and through the Spark job's tasks (``SURFACES``)
and reads the files back with kafka-python (``kafka_log.py``). The scenarios that need internals
with no CLI (segment grouping, the key map) use kafkalog's library, as Kafka's tests use the
``Cleaner`` directly. ``test_log_cleaner_2.py`` holds the rest of the file.

How Kafka's calls are stood for:

- ``cleaner.clean(LogToClean(tp, log, firstDirty, activeSegment.baseOffset))`` is a round of
  ``kafkalog compact --topic`` whose cleaner checkpoint was set to ``firstDirty``
  (``ScenarioLog.clean``); its upper bound is the cleanable range's (active segment base, last stable
  offset, ``min.compaction.lag.ms``), which is where these tests put it.
- Kafka re-runs ``doClean`` from the end offset of the previous round, where the dirty section is empty
  and every segment is still recopied. A CLI round needs a dirty section, so such re-runs start from
  offset 0 (``reclean``): on a log that is already clean the same records survive, and the
  transaction and delete-horizon rules are those of a recopy.
- Kafka's ``largeTimestamp`` (Long.MaxValue − 1 day − 1) and ``Long.MaxValue`` as the cleaning time:
  the CLI never runs a cycle ahead of the wall clock, so ``LARGE`` and ``LATEST`` stand for them:
  dates far after every record, ``LATEST`` past every horizon stamped at ``LARGE``.
- Kafka's ``FakeOffsetMap`` preloaded with keys at Long.MaxValue ("pretend these keys have later
  offsets"): kafkalog's cleaner has no map to preload, so the later offsets are real records of those
  keys appended after the segments that Kafka cleans, inside the cleaned range.
- kafkalog's key map is exact (keyed by the whole key, not its MD5 digest) but holds as many keys as
  Kafka's would in the same dedupe buffer, and a round whose keys do not fit cleans a prefix of the
  dirty section, as Kafka's does. The scenarios that depend on the cap set
  ``log.cleaner.dedupe.buffer.size`` as a broker would, and say so.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords
from kafka_log import DAY, HOUR, MIN, T0, ScenarioLog
from log_cleaner_helpers import SURFACES, digest, end_offset, fill_until, kafka_log, leo, with_broker

from kafkalog.errors import KafkaLogError
from kafkalog.log import names
from kafkalog.log.store import LogStore

LARGE = T0 + 20 * DAY  # Kafka's largeTimestamp: long after every record (within STILL_ACTIVE)
LATEST = T0 + 22 * DAY  # Kafka's Long.MaxValue: after every horizon stamped at LARGE
COMMIT_KEY = struct.pack(">hh", 0, 1)  # the key of a COMMIT control record (version 0, type 1)

Row = tuple[str | bytes | None, str | bytes | None]


# --- building logs as LogCleanerTest does -------------------------------------------------------------
class Producer:
    """Kafka's ``appendTransactionalAsLeader``/``appendIdempotentAsLeader`` closure: one batch of the
    given keys (value = key) a call, its sequence continuing from the previous call's."""

    def __init__(self, log: ScenarioLog, producer_id: int, *, transactional: bool = True, epoch: int = 0) -> None:
        self.log, self.producer_id, self.transactional, self.epoch = log, producer_id, transactional, epoch
        self.sequence = 0

    def __call__(self, keys: Sequence[int | str | bytes]) -> tuple[int, int]:
        rows: list[Row] = [(k if isinstance(k, bytes) else str(k), k if isinstance(k, bytes) else str(k))
                           for k in keys]
        append = self.log.txn if self.transactional else self.log.idempotent
        span = append(self.producer_id, rows, epoch=self.epoch, sequence=self.sequence)
        self.sequence += len(rows)
        return span


def reclean(log: ScenarioLog, now: int, surface: str) -> dict[str, Any]:
    """Kafka's ``doClean`` re-run from the previous round's end (see the module docstring)."""
    return log.clean(now, 0, surface=surface)


def last_sequences(log: ScenarioLog) -> dict[int, int]:
    """Kafka's ``lastSequencesInLog``: producer id -> last sequence of its data batches."""
    return {b.producer_id: b.base_sequence + b.last_offset - b.base_offset
            for b in log.batches() if not b.control and b.producer_id >= 0}


def batch_bases(log: ScenarioLog) -> list[int]:
    return [b.base_offset for b in log.batches()]


def round_stats(log: ScenarioLog) -> dict[str, Any]:
    """The statistics of the partition's latest cleaning round, as the maintenance journal holds them
    (both surfaces journal their rounds)."""
    out = log.cli("journal", "--log-dir", str(log.log_dir), "--topic", log.topic, "--json").out
    rounds = [e for e in json.loads(out)["entries"] if e["action"] == "compact"]
    return dict(rounds[-1]["extra"]["stats"])


def segment_sizes(log: ScenarioLog) -> dict[int, int]:
    return {b: names.log_file(log.directory, b).stat().st_size for b in log.segment_bases()}


# --- the basics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("surface", SURFACES)
def test_clean_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanSegments: the keys the map holds at a later offset (1, 3, 5, 7, 9) go
    from the cleaned segments, every other key stays, and the round reads every source byte.
    Kafka preloads a fake map; here the later offsets are records in a segment after Kafka's four."""
    log = kafka_log(tmp_path)
    fill_until(log, 4)
    n = leo(log)
    assert log.keys_in_log() == [str(i) for i in range(n)]
    later = ["1", "3", "5", "7", "9"]
    log.append_each([(k, "later") for k in later])
    log.roll()
    sizes = segment_sizes(log)
    source_bytes = sum(size for base, size in sizes.items() if base != log.active_base())
    log.clean(T0, surface=surface)
    assert log.keys_in_log() == [str(i) for i in range(n) if str(i) not in later] + later
    assert round_stats(log)["bytes_read"] == source_bytes


@pytest.mark.parametrize("surface", SURFACES)
def test_size_trimmed_for_preallocated_and_compacted_topic(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testSizeTrimmedForPreallocatedAndCompactedTopic: with preallocate=true the
    cleaned segment's file ends at its last batch, well below segment.bytes (1024)."""
    log = kafka_log(tmp_path, preallocate="true")
    log.append_each([("0", "0"), ("1", "1"), ("0", "0"), ("1", "1"), ("0", "0")])
    log.roll()
    log.clean(T0, 2, surface=surface)
    first = log.segment_bases()[0]
    size = names.log_file(log.directory, first).stat().st_size
    assert size < 1024
    assert size == sum(b.size for b in log.batches() if b.segment == first)
    assert log.offsets_in_log() == [3, 4]


@pytest.mark.parametrize("surface", SURFACES)
def test_duplicate_check_after_cleaning(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testDuplicateCheckAfterCleaning: idempotent batches keep their base and last
    offsets and last sequences through cleaning (batch last offsets [2, 5, 7], then [2, 5, 7, 8]).
    Kafka then reloads the log and checks that duplicate appends return the original offsets; kafkalog
    has no duplicate detection (idempotence is the broker's), so it asserts instead that the producer
    state rebuilt from the cleaned log holds the batch metadata that check answers from."""
    log = kafka_log(tmp_path, segment_bytes=2048)
    p1, p2, p3, p4 = (Producer(log, pid, transactional=False) for pid in (1, 2, 3, 4))
    p1([1, 2, 3])
    p2([3, 1, 4])
    p3([1, 4])
    log.roll()
    log.clean(T0, surface=surface)
    assert log.last_offsets_per_batch() == [2, 5, 7]
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1}
    assert log.keys_in_log() == ["2", "3", "1", "4"]
    assert log.offsets_in_log() == [1, 3, 6, 7]
    # (first offset, last offset, last sequence) per producer: a duplicate of p1's batch is answered
    # with offsets 0-2, of p3's with 6-7, of p2's with 3-5.
    assert reloaded_producers(log) == {1: (0, 2, 2), 2: (3, 5, 2), 3: (6, 7, 1)}

    p4([2])
    log.roll()
    log.clean(T0, surface=surface)
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert log.last_offsets_per_batch() == [2, 5, 7, 8]
    assert log.keys_in_log() == ["3", "1", "4", "2"]
    assert log.offsets_in_log() == [3, 6, 7, 8]
    assert reloaded_producers(log)[1] == (0, 2, 2)  # p1's batch is empty now, and still answers


def reloaded_producers(log: ScenarioLog) -> dict[int, tuple[int, int, int]]:
    """Producer state rebuilt from the log files alone (snapshots removed, as a reload from recovery
    point 0 would read the log): producer id -> (first offset, last offset, last sequence)."""
    for snapshot in log.directory.glob("*" + names.SNAPSHOT_SUFFIX):
        snapshot.unlink()
    entries = LogStore([log.log_dir]).open_log(log.location, read_only=True).producer_state().snapshot_entries()
    return {e.producer_id: (e.last_offset - e.offset_delta, e.last_offset, e.last_sequence) for e in entries}


# --- transactions ------------------------------------------------------------------------------------
def multi_pass_log(tmp_path: Path) -> ScenarioLog:
    """testMultiPassSegmentCleaningWithAbortedTransactions' log: two producers' transactions, two of
    them aborted, 20 offsets in one segment (delete.retention.ms=50000)."""
    log = kafka_log(tmp_path, delete_retention_ms=50_000, segment_bytes=4096)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1([1, 2])  # 0-1
    p2([2, 3])  # 2-3
    p1([3, 4])  # 4-5
    log.commit(1)  # 6
    log.commit(2)  # 7
    p1([2, 3])  # 8-9
    log.abort(1)  # 10
    p2([4, 5])  # 11-12
    p1([5, 6])  # 13-14
    log.commit(1)  # 15
    log.abort(2)  # 16
    p2([6, 7])  # 17-18
    log.commit(2)  # 19
    log.roll()
    assert leo(log) == 20 and log.segment_bases() == [0, 20]
    assert log.aborted_txns() == [(1, 8, 10, 11), (2, 11, 16, 17)]
    return log


@pytest.mark.parametrize("surface", SURFACES)
def test_multi_pass_segment_cleaning_with_aborted_transactions(tmp_path: Path, surface: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testMultiPassSegmentCleaningWithAbortedTransactions: with a key map of 3 entries
    (Kafka's 4 slots at load factor 0.75; here a 96-byte dedupe buffer, 4 slots of 24 bytes) the dirty
    section takes three rounds, ending at 4, 14 and 20. Round 1 removes the aborted data and keeps
    the markers and the txn index; round 2 drops the index entries of the now empty transactions;
    after delete.retention.ms round 3 removes the ABORT markers (10 and 16)."""
    log = multi_pass_log(tmp_path)
    with_broker(log, monkeypatch, log_cleaner_dedupe_buffer_size=96, log_cleaner_io_buffer_load_factor=0.75)
    assert end_offset(log.clean(T0, 0, surface=surface)) == 4
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets_in_log() == [0, 2, 3, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert log.aborted_txns() == [(1, 8, 10, 11), (2, 11, 16, 17)]

    assert end_offset(log.compact(T0, surface=surface)) == 14
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets_in_log() == [0, 2, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert log.aborted_txns() == []

    assert end_offset(log.compact(T0 + 50_000, surface=surface)) == 20
    assert batch_bases(log) == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert log.offsets_in_log() == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert log.aborted_txns() == []


@pytest.mark.parametrize("surface", SURFACES)
def test_multi_pass_segment_cleaning_with_aborted_transactions_exact_map(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testMultiPassSegmentCleaningWithAbortedTransactions with the default dedupe
    buffer, whose map takes the whole dirty section in one round: round 1 ends at 20 with Kafka's round-2
    records (aborted data and superseded keys gone) and, as Kafka's round 1, the txn index intact
    (the aborted data was still there to remove); round 2 drops the index entries; after
    delete.retention.ms round 3 removes the ABORT markers, ending where Kafka ends."""
    log = multi_pass_log(tmp_path)
    assert end_offset(log.clean(T0, 0, surface=surface)) == 20
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets_in_log() == [0, 2, 4, 5, 6, 7, 10, 13, 15, 16, 17, 18, 19]
    assert log.aborted_txns() == [(1, 8, 10, 11), (2, 11, 16, 17)]

    reclean(log, T0, surface)
    assert batch_bases(log) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert log.offsets_in_log() == [0, 2, 4, 5, 6, 7, 10, 13, 15, 16, 17, 18, 19]
    assert log.aborted_txns() == []
    assert [b.delete_horizon_ms for b in log.batches() if b.base_offset in (10, 16)] == [T0 + 50_000] * 2

    reclean(log, T0 + 50_000, surface)
    assert batch_bases(log) == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert log.offsets_in_log() == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert log.aborted_txns() == []


@pytest.mark.parametrize("surface", SURFACES)
def test_basic_transaction_aware_cleaning(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testBasicTransactionAwareCleaning: aborted records go whatever their key (keys
    [3, 2] remain at offsets 3, 6, 7, 8, 9 with the markers) and the txn index is unchanged."""
    log = kafka_log(tmp_path, segment_bytes=2048)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1([1, 2])  # 0-1
    p2([2, 3])  # 2-3
    p1([3, 4])  # 4-5
    log.abort(1)  # 6
    log.commit(2)  # 7
    p1([2])  # 8
    log.commit(1)  # 9
    aborted = log.aborted_txns()
    assert aborted == [(1, 0, 6, 2)]
    log.roll()
    log.clean(T0, surface=surface)
    assert log.keys_in_log() == ["3", "2"]
    assert log.offsets_in_log() == [3, 6, 7, 8, 9]
    assert log.aborted_txns() == aborted


@pytest.mark.parametrize("surface", SURFACES)
def test_clean_with_transactions_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanWithTransactionsSpanningSegments: a round below the active segment
    cleans only the first segment (keys 2..10 left); once the transactions are decided and a new
    segment holds later open ones, the aborted data goes and only pid 3's keys and the open
    transactions' keys remain ([2, 3, 6, 7, 8, 9, 11, 12])."""
    log = kafka_log(tmp_path)
    p1, p2, p3 = Producer(log, 1), Producer(log, 2), Producer(log, 3)
    p1([1, 2])  # 0-1
    p3([2, 3])  # 2-3
    p2([3, 4])  # 4-5
    log.roll()
    p2([5, 6])  # 6-7
    p3([6, 7])  # 8-9
    p1([7, 8])  # 10-11
    log.abort(2)  # 12
    p3([8, 9])  # 13-14
    log.commit(3)  # 15
    p1([9, 10])  # 16-17
    log.abort(1)  # 18
    dirty = end_offset(log.clean(T0, 0, surface=surface))
    assert dirty == 6
    assert log.keys_in_log() == ["2", "3", "5", "6", "6", "7", "7", "8", "8", "9", "9", "10"]
    log.roll()
    p2([11])  # 19, open
    p1([12])  # 20, open
    log.clean(T0, dirty, surface=surface)
    assert log.keys_in_log() == ["2", "3", "6", "7", "8", "9", "11", "12"]


@pytest.mark.parametrize("surface", SURFACES)
def test_commit_marker_removal(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCommitMarkerRemoval: a COMMIT marker stays while its transaction still has
    records (also in the round that removes them), stays when re-cleaned at the same time (it gets its
    delete horizon), and goes once the cleaning time passes that horizon."""
    log = kafka_log(tmp_path, segment_bytes=256)
    p = Producer(log, 1)
    p([1])  # 0
    p([2, 3])  # 1-2
    log.commit(1)  # 3
    p([2])  # 4
    log.commit(1)  # 5
    log.roll()
    dirty = end_offset(log.clean(LARGE, 0, surface=surface))
    assert log.keys_in_log() == ["1", "3", "2"]
    assert log.offsets_in_log() == [0, 2, 3, 4, 5]

    p([1, 3])  # 6-7
    log.commit(1)  # 8
    log.roll()
    log.clean(LARGE, dirty, surface=surface)
    assert log.keys_in_log() == ["2", "1", "3"]
    assert log.offsets_in_log() == [3, 4, 5, 6, 7, 8]
    # The round read the transaction's batches (and emptied them): the marker is not discardable yet.
    assert [b.delete_horizon_ms for b in log.batches() if b.base_offset == 3] == [None]

    reclean(log, LARGE, surface)
    assert log.keys_in_log() == ["2", "1", "3"]
    assert log.offsets_in_log() == [3, 4, 5, 6, 7, 8]
    assert [b.delete_horizon_ms for b in log.batches() if b.base_offset == 3] == [LARGE + DAY]

    reclean(log, LATEST, surface)
    assert log.keys_in_log() == ["2", "1", "3"]
    assert log.offsets_in_log() == [4, 5, 6, 7, 8]


@pytest.mark.parametrize("surface", SURFACES)
def test_deleted_batches_with_no_messages_read(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testDeletedBatchesWithNoMessagesRead: with max.message.bytes=100 (Kafka's read
    buffer is 100 bytes too) whole batches are deleted and cleaning carries on from the next offset:
    offsets [1, 3, 4], then after two passes [3, 4]. kafkalog reads batches in windows of any size, so
    only the topic limit is set."""
    log = kafka_log(tmp_path, max_message_bytes=100, segment_bytes=1000)
    p = Producer(log, 1)
    p([1])  # 0
    log.abort(1)  # 1
    p([2])  # 2
    p([2])  # 3
    log.commit(1)  # 4
    log.roll()
    log.clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["2"]
    assert log.offsets_in_log() == [1, 3, 4]
    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["2"]
    assert log.offsets_in_log() == [3, 4]


@pytest.mark.parametrize("surface", SURFACES)
def test_commit_marker_retention_with_empty_batch(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCommitMarkerRetentionWithEmptyBatch: a producer's emptied last batch stays
    (it holds the last sequence) round after round, goes once the producer writes again, and its
    transaction's COMMIT marker then needs two passes (horizon, then removal)."""
    log = kafka_log(tmp_path, segment_bytes=256)
    p1, p2 = Producer(log, 1), Producer(log, 2)
    p1([2, 3])  # 0-1
    log.roll()
    p2([2, 3])  # 2-3
    log.commit(2)  # 4
    log.roll()
    log.append_each([("2", "2"), ("3", "3")])  # 5, 6
    log.commit(1)  # 7
    log.roll()
    dirty = end_offset(log.clean(LARGE, 0, surface=surface))
    assert log.keys_in_log() == ["2", "3"]
    assert log.offsets_in_log() == [4, 5, 6, 7]
    assert log.last_offsets_per_batch() == [1, 3, 4, 5, 6, 7]

    reclean(log, LARGE, surface)
    assert log.keys_in_log() == ["2", "3"]
    assert log.offsets_in_log() == [4, 5, 6, 7]
    assert log.last_offsets_per_batch() == [1, 3, 4, 5, 6, 7]

    p2([1])  # 8
    log.commit(2)  # 9
    log.roll()
    dirty = end_offset(log.clean(LARGE, dirty, surface=surface))
    assert log.keys_in_log() == ["2", "3", "1"]
    assert log.offsets_in_log() == [4, 5, 6, 7, 8, 9]
    assert log.last_offsets_per_batch() == [1, 4, 5, 6, 7, 8, 9]

    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["2", "3", "1"]
    assert log.offsets_in_log() == [5, 6, 7, 8, 9]
    assert log.last_offsets_per_batch() == [1, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("surface", SURFACES)
def test_clean_empty_control_batch(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleanEmptyControlBatch: a lone COMMIT marker gets its horizon, then loses
    its record but stays as an empty control batch (it holds the producer's epoch); cleaning that
    empty batch again is no error."""
    log = kafka_log(tmp_path, segment_bytes=256)
    log.commit(1)  # 0
    log.append_each([("2", "2"), ("3", "3")])  # 1, 2
    log.roll()
    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["2", "3"]
    assert log.offsets_in_log() == [1, 2]
    assert log.last_offsets_per_batch() == [0, 1, 2]
    marker = log.batches()[0]
    assert (marker.control, marker.records, marker.producer_id) == (True, 0, 1)

    reclean(log, LATEST, surface)
    assert log.keys_in_log() == ["2", "3"]
    assert log.offsets_in_log() == [1, 2]
    assert log.last_offsets_per_batch() == [0, 1, 2]


@pytest.mark.parametrize("surface", SURFACES)
def test_committed_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCommittedTransactionSpanningSegments: with segment.bytes=128 (one batch a
    segment, each its own group) a record and its COMMIT marker in the next segment both stay
    through two passes (offsets [0, 1], batch last offsets [0, 1])."""
    log = kafka_log(tmp_path, segment_bytes=128)
    Producer(log, 1)([1])  # 0
    log.roll()
    log.commit(1)  # 1
    log.roll()
    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.offsets_in_log() == [0, 1]
    assert log.last_offsets_per_batch() == [0, 1]


@pytest.mark.parametrize("surface", SURFACES)
def test_aborted_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testAbortedTransactionSpanningSegments: with one batch a segment, the aborted
    batch stays as an empty batch (the producer's last) and its ABORT marker in the next segment stays
    (a batch of its transaction remains), also when cleaned again at Long.MaxValue."""
    log = kafka_log(tmp_path, segment_bytes=128)
    Producer(log, 1)([1])  # 0
    log.roll()
    log.abort(1)  # 1
    log.roll()
    log.clean(LARGE, 0, surface=surface)
    assert log.offsets_in_log() == [1]
    assert log.last_offsets_per_batch() == [0, 1]
    reclean(log, LATEST, surface)
    assert log.offsets_in_log() == [1]
    assert log.last_offsets_per_batch() == [0, 1]
    assert log.aborted_txns() == [(1, 0, 1, 2)]


@pytest.mark.parametrize("surface", SURFACES)
def test_abort_marker_removal(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testAbortMarkerRemoval: the aborted records go in the first pass while the
    ABORT marker stays (offsets [3, 4, 5]); the marker goes after a two-pass clean ([4, 5])."""
    log = kafka_log(tmp_path, segment_bytes=256)
    p = Producer(log, 1)
    p([1])  # 0
    p([2, 3])  # 1-2
    log.abort(1)  # 3
    p([3])  # 4
    log.commit(1)  # 5
    log.roll()
    log.clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["3"]
    assert log.offsets_in_log() == [3, 4, 5]
    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["3"]
    assert log.offsets_in_log() == [4, 5]


@pytest.mark.parametrize("surface", SURFACES)
def test_empty_batch_removal_with_sequence_reuse(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testEmptyBatchRemovalWithSequenceReuse: two transactions of one producer that
    both start at sequence 0 (as the group coordinator writes them): both batches are cleaned, the
    second stays empty (the producer's last), and a two-pass clean removes the first marker."""
    log = kafka_log(tmp_path, segment_bytes=2048)
    Producer(log, 1)([1])  # 0, sequence 0
    log.commit(1)  # 1
    Producer(log, 1)([2])  # 2, sequence 0 again
    log.commit(1)  # 3
    log.append_each([("1", "1"), ("2", "1")])  # 4, 5
    log.roll()
    log.clean(LARGE, 0, surface=surface)
    assert log.offsets_in_log() == [1, 3, 4, 5]
    assert log.last_offsets_per_batch() == [1, 2, 3, 4, 5]
    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.offsets_in_log() == [3, 4, 5]
    assert log.last_offsets_per_batch() == [2, 3, 4, 5]


@pytest.mark.parametrize("surface", SURFACES)
def test_abort_marker_retention_with_empty_batch(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testAbortMarkerRetentionWithEmptyBatch: the aborted transaction stays in the txn
    index while its marker is kept; the emptied batch stays as the producer's last until it writes
    again; in the end the marker and the index entry are gone. Kafka writes the producer's next batch
    as a transaction it never ends and bounds the round by the active segment; kafkalog never cleans
    past the last stable offset, which that open transaction would hold at 3, so the batch is written
    idempotent instead: the producer's sequence moves on as in Kafka and the rounds have Kafka's bounds."""
    log = kafka_log(tmp_path, segment_bytes=256)
    p = Producer(log, 1)
    p([2, 3])  # 0-1
    log.abort(1)  # 2
    log.roll()
    indexed = [(1, 0, 2, 3)]
    assert log.aborted_txns() == indexed

    dirty = end_offset(log.clean(LARGE, 0, surface=surface))
    assert log.aborted_txns() == indexed
    assert log.keys_in_log() == []
    assert log.offsets_in_log() == [2]  # the ABORT marker stays
    assert log.last_offsets_per_batch() == [1, 2]  # and so does the empty batch

    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.aborted_txns() == indexed
    assert log.keys_in_log() == []
    assert log.offsets_in_log() == [2]
    assert log.last_offsets_per_batch() == [1, 2]

    log.idempotent(1, [("1", "1")], sequence=p.sequence)  # 3
    log.roll()
    log.clean(LARGE, dirty, surface=surface)
    assert log.aborted_txns() == indexed
    assert log.keys_in_log() == ["1"]
    assert log.offsets_in_log() == [2, 3]  # the round still read the (empty) aborted batch
    assert log.last_offsets_per_batch() == [2, 3]  # which is not the producer's last any more

    log.two_pass_clean(LARGE, 0, surface=surface)
    assert log.keys_in_log() == ["1"]
    assert log.offsets_in_log() == [3]
    assert log.last_offsets_per_batch() == [3]
    assert log.aborted_txns() == []


@pytest.mark.parametrize("surface", SURFACES)
def test_log_cleaner_retains_producer_last_sequence(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testLogCleanerRetainsProducerLastSequence: each idempotent producer's last batch
    stays, empty if its key is superseded (batch last offsets [1, 3, 4], last sequences 0, 1, 0)."""
    log = kafka_log(tmp_path)
    log.append_each([("0", "0")])  # 0
    log.idempotent(1, [("0", "1")], sequence=0)  # 1
    log.idempotent(2, [("0", "2")], sequence=0)  # 2
    log.idempotent(3, [("0", "3")], sequence=0)  # 3
    log.idempotent(2, [("1", "1")], sequence=1)  # 4
    log.roll()
    log.clean(T0, surface=surface)
    assert log.last_offsets_per_batch() == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert log.keys_in_log() == ["0", "1"]
    assert log.offsets_in_log() == [3, 4]


@pytest.mark.parametrize("surface", SURFACES)
def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testLogCleanerRetainsLastSequenceEvenIfTransactionAborted: an aborted batch stays
    (empty) while it is the producer's last, and goes once the producer writes a new batch. Kafka
    cleans the new, still open transaction too; kafkalog's round stops at the last stable offset
    before it, which leaves the same records."""
    log = kafka_log(tmp_path)
    p = Producer(log, 1)
    p([1])  # 0
    p([2, 3])  # 1-2
    log.abort(1)  # 3
    log.roll()
    log.clean(T0, surface=surface)
    assert log.last_offsets_per_batch() == [2, 3]
    assert last_sequences(log) == {1: 2}
    assert log.keys_in_log() == []
    assert log.offsets_in_log() == [3]

    p([1, 5])  # 4-5, sequences 3-4
    log.roll()
    log.clean(T0, surface=surface)
    assert log.last_offsets_per_batch() == [3, 5]
    assert last_sequences(log) == {1: 4}
    assert log.keys_in_log() == ["1", "5"]
    assert log.offsets_in_log() == [3, 4, 5]


@pytest.mark.parametrize("surface", SURFACES)
def test_cleaning_with_keys_conflicting_with_txn_marker_keys(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleaningWithKeysConflictingWithTxnMarkerKeys: a transactional record whose
    key is the bytes of a COMMIT control key does not supersede the earlier COMMIT marker: every
    batch and offset stays ([0, 1, 2, 3])."""
    log = kafka_log(tmp_path)
    log.append([("1", "1")], producer_id=1, base_sequence=0, transactional=True, leader_epoch=5)  # 0
    log.commit(1)  # 1
    log.append([(COMMIT_KEY, "foo")], producer_id=2, base_sequence=0, transactional=True, leader_epoch=5)  # 2
    log.commit(2)  # 3
    log.roll()
    assert log.offsets_in_log() == [0, 1, 2, 3]
    log.clean(T0, surface=surface)
    assert log.last_offsets_per_batch() == [0, 1, 2, 3]
    assert log.offsets_in_log() == [0, 1, 2, 3]


# --- large and corrupt batches --------------------------------------------------------------------------
LARGE_MESSAGE = 1024 * 1024


def large_message_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ScenarioLog, int]:
    """Kafka's ``createLogWithMessagesLargerThanMaxSize``: 1 MiB records (key = offset) until a second
    segment (segment.bytes 16 MiB, max.message.bytes 2 MiB), for a cleaner whose I/O buffers are
    1 KiB (``log.cleaner.io.buffer.size``); then keys 1, 3, 5, 7, 9 again, small, in a later segment
    (Kafka's fake map holds them at a later offset). Returns the log and the number of large records."""
    log = kafka_log(tmp_path, segment_bytes=16 * LARGE_MESSAGE, max_message_bytes=2 * LARGE_MESSAGE)
    with_broker(log, monkeypatch, log_cleaner_io_buffer_size=1024)
    fill_until(log, 2, lambda offset: (str(offset), bytes(LARGE_MESSAGE)))
    n = leo(log)
    assert log.keys_in_log() == [str(i) for i in range(n)]
    log.roll()
    log.append_each([(str(k), "later") for k in (1, 3, 5, 7, 9)])
    log.roll()
    return log, n


@pytest.mark.parametrize("surface", SURFACES)
def test_large_message(tmp_path: Path, surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testLargeMessage: records of 1 MiB, far larger than the cleaner's 1 KiB I/O
    buffers, are cleaned: the superseded keys 1, 3, 5, 7, 9 go, the other large records stay whole."""
    log, n = large_message_log(tmp_path, monkeypatch)
    log.clean(T0, surface=surface)
    later = ["1", "3", "5", "7", "9"]
    assert log.keys_in_log() == [str(i) for i in range(n) if str(i) not in later] + later
    assert all(len(r.value or b"") == LARGE_MESSAGE for r in log.records() if r.value != b"later")


@pytest.mark.parametrize("surface", SURFACES)
def test_message_larger_than_max_message_size(tmp_path: Path, surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testMessageLargerThanMaxMessageSize: after the topic's max.message.bytes is
    lowered to 512 KiB, the 1 MiB records already in the log are still cleaned."""
    log, n = large_message_log(tmp_path, monkeypatch)
    log.cli("topics", "alter", "--log-dir", str(log.log_dir), "--topic", log.topic,
            "--config", f"max.message.bytes={LARGE_MESSAGE // 2}")
    log.store = LogStore([log.log_dir], broker=log.store.broker)  # forget the old topic config
    log.clean(T0, surface=surface)
    later = ["1", "3", "5", "7", "9"]
    assert log.keys_in_log() == [str(i) for i in range(n) if str(i) not in later] + later


def assert_round_refused(log: ScenarioLog, surface: str, match: str) -> None:
    """The round fails and leaves the partition as it was (Kafka's ``CorruptRecordException``)."""
    before = digest(log.directory)
    if surface == "cli":
        result = log.cli("compact", "--log-dir", str(log.log_dir), "--topic", log.topic, "--now-ms", str(T0),
                         "--json", ok=False)
        assert result.code == 1
        errors = json.loads(result.out)["errors"]
        assert len(errors) == 1 and errors[0]["partition"] == 0
        assert match in errors[0]["error"], errors
        assert json.loads(result.out)["cleaned"] == []
    else:
        with pytest.raises(KafkaLogError, match=match):
            log.compact(T0, surface=surface)
    assert digest(log.directory) == before
    assert log.cleaner_checkpoint() in (None, 0)


@pytest.mark.parametrize("surface", SURFACES)
def test_message_larger_than_max_message_size_with_corrupt_header(tmp_path: Path, surface: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testMessageLargerThanMaxMessageSizeWithCorruptHeader: a first batch whose magic
    byte is 0xff makes the cleaning fail (Kafka: ``CorruptRecordException``); kafkalog refuses the
    partition and changes nothing."""
    log, _ = large_message_log(tmp_path, monkeypatch)
    first = names.log_file(log.directory, 0)
    with open(first, "r+b") as f:
        f.seek(16)  # Records.MAGIC_OFFSET
        f.write(b"\xff")
    assert_round_refused(log, surface, "invalid magic 255")


@pytest.mark.parametrize("surface", SURFACES)
def test_corrupt_message_size_larger_than_bytes_available(tmp_path: Path, surface: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testCorruptMessageSizeLargerThanBytesAvailable: the first segment cut to 1024
    bytes, inside its first 1 MiB batch, makes the cleaning fail (Kafka: ``CorruptRecordException``);
    kafkalog refuses the partition and changes nothing."""
    log, _ = large_message_log(tmp_path, monkeypatch)
    os.truncate(names.log_file(log.directory, 0), 1024)
    assert_round_refused(log, surface, "1024 bytes of an incomplete batch")


# --- keys, deletes, statistics ---------------------------------------------------------------------------
@pytest.mark.parametrize("surface", SURFACES)
def test_cleaning_with_deletes(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleaningWithDeletes: every key deleted by a later tombstone is gone after
    cleaning; the odd keys and the padding keys stay."""
    log = kafka_log(tmp_path)
    fill_until(log, 2)
    end = leo(log)
    log.append_each([(str(k), None) for k in range(0, end, 2)])
    fill_until(log, 4)
    last = leo(log)
    log.clean(T0, surface=surface)
    keys = log.keys_in_log()
    assert not {str(k) for k in range(0, end, 2)} & set(keys)
    assert keys == [str(k) for k in range(1, end, 2)] + [str(k) for k in range(end + (end + 1) // 2, last)]


@pytest.mark.parametrize("surface", SURFACES)
def test_log_cleaner_stats(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testLogCleanerStats: cleaning 5 records on keys 0/1 from offset 2 ends at 5,
    reads 5 records and every byte of the log, writes 2 records (all the log's bytes after it), and
    finds no unkeyed record."""
    log = kafka_log(tmp_path)
    log.append_each([("0", "0"), ("1", "1"), ("0", "0"), ("1", "1"), ("0", "0")])
    log.roll()
    initial = sum(segment_sizes(log).values())
    assert end_offset(log.clean(T0, 2, surface=surface)) == 5
    stats = round_stats(log)
    assert stats["records_read"] == 5
    assert stats["bytes_read"] == initial
    assert stats["records_written"] == 2
    assert stats["bytes_written"] == sum(segment_sizes(log).values())
    assert stats["unkeyed_records_removed"] == 0
    assert log.offsets_in_log() == [3, 4]


@pytest.mark.parametrize("surface", SURFACES)
def test_partial_segment_clean(tmp_path: Path, surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LogCleanerTest.testPartialSegmentClean: with a key map of one entry (Kafka's 2 slots at load
    factor 0.75; here a 48-byte dedupe buffer) each round maps one record and still makes progress:
    offsets [1, 2, 3, 4], then [2, 3, 4], then [3, 4], the rounds ending at 3, 4 and 5."""
    log = kafka_log(tmp_path)
    with_broker(log, monkeypatch, log_cleaner_dedupe_buffer_size=48, log_cleaner_io_buffer_load_factor=0.75)
    log.append_each([("0", "0"), ("1", "1"), ("0", "0"), ("1", "1"), ("0", "0")])
    log.roll()
    assert end_offset(log.clean(T0, 2, surface=surface)) == 3
    assert log.keys_in_log() == ["1", "0", "1", "0"]
    assert log.offsets_in_log() == [1, 2, 3, 4]
    assert end_offset(log.clean(T0, 3, surface=surface)) == 4
    assert log.keys_in_log() == ["0", "1", "0"]
    assert log.offsets_in_log() == [2, 3, 4]
    assert end_offset(log.clean(T0, 4, surface=surface)) == 5
    assert log.keys_in_log() == ["1", "0"]
    assert log.offsets_in_log() == [3, 4]


def values_by_segment(log: ScenarioLog) -> dict[int, set[bytes]]:
    out = {}
    for base in log.segment_bases():
        out[base] = {r.value for batch in MemoryRecords(names.log_file(log.directory, base).read_bytes())
                     for r in batch if r.value is not None}
    return out


@pytest.mark.parametrize("surface", SURFACES)
def test_cleaning_with_uncleanable_section(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleaningWithUncleanableSection: 10 keys over 7 segments; the segments at or
    after the first uncleanable offset (from the third on) are not touched, the two before it lose
    their duplicates. Kafka passes the uncleanable offset to the round; here min.compaction.lag.ms
    puts it there (the later segments hold records newer than the lag)."""
    log = kafka_log(tmp_path, min_compaction_lag_ms=HOUR)
    while len(log.segment_bases()) <= 2:
        offset = leo(log)
        log.append_each([(str(offset % 10), str(offset))], timestamp=T0)
    while len(log.segment_bases()) < 6:
        offset = leo(log)
        log.append_each([(str(offset % 10), str(offset))], timestamp=T0 + 2 * HOUR)
    bases = log.segment_bases()
    before = values_by_segment(log)
    assert all(len(before[b]) > 10 for b in bases[:-1])  # every segment holds duplicates
    untouched = {f: h for f, h in digest(log.directory).items()
                 if f.endswith((".log", ".index", ".timeindex")) and names.offset_from_file_name(f) >= bases[2]}
    log.clean(T0 + 2 * HOUR + 30 * MIN, surface=surface)
    after = values_by_segment(log)
    assert log.segment_bases() == bases
    for base in bases[:2]:
        assert len(after[base]) < len(before[base])
    # what stays in the first two is each key's last record there
    latest = {}
    for v in sorted(int(v) for b in bases[:2] for v in before[b]):
        latest[v % 10] = v
    assert {int(v) for b in bases[:2] for v in after[b]} == set(latest.values())
    assert {f: h for f, h in digest(log.directory).items() if f in untouched} == untouched


def test_log_to_clean(tmp_path: Path) -> None:
    """LogCleanerTest.testLogToClean: with the first dirty offset at the active segment (six
    segments of one record each, segment.bytes=100), the total bytes are the log's size without the
    active segment. Through kafkalog's ``log_to_clean`` (the cleaner manager's accounting)."""
    from kafkalog.maintenance.compact import snapshot_compacted_logs
    from kafkalog.policy.compaction import log_to_clean

    log = kafka_log(tmp_path, segment_bytes=100)
    for _ in range(6):
        log.append_each([("1", bytes(25))])
    sizes = segment_sizes(log)
    assert len(sizes) == 6
    log.set_first_dirty(log.active_base())
    (snapshot,), failures = snapshot_compacted_logs(log.store, log.topic)
    assert failures == []
    c = log_to_clean(snapshot, T0)
    assert (c.first_dirty_offset, c.first_uncleanable_offset) == (log.active_base(), log.active_base())
    assert c.total_bytes == sum(sizes.values()) - sizes[log.active_base()]
    assert c.cleanable_bytes == 0


def test_log_to_clean_with_uncleanable_section(tmp_path: Path) -> None:
    """LogCleanerTest.testLogToCleanWithUncleanableSection: six one-record segments, [0, 1] clean,
    [2, 3] cleanable, [4, 5] uncleanable: clean bytes are the first two segments, cleanable bytes the
    next two, the ratio cleanable/total. Through ``kafkalog compact --dry-run --json``; Kafka passes
    the uncleanable offset, here min.compaction.lag.ms puts it at the fifth segment."""
    log = kafka_log(tmp_path, segment_bytes=100, min_compaction_lag_ms=HOUR)
    for i in range(6):
        log.append_each([("1", bytes(25))], timestamp=T0 if i < 4 else T0 + 2 * HOUR)
    bases = log.segment_bases()
    sizes = [segment_sizes(log)[b] for b in bases]
    log.set_first_dirty(bases[2])
    out = log.cli("compact", "--log-dir", str(log.log_dir), "--topic", log.topic, "--now-ms",
                  str(T0 + 2 * HOUR + 30 * MIN), "--dry-run", "--json").out
    (selected,) = json.loads(out)["selected"]
    clean, cleanable = sum(sizes[:2]), sum(sizes[2:4])
    assert (selected["first_dirty_offset"], selected["first_uncleanable_offset"]) == (bases[2], bases[4])
    assert selected["cleanable_bytes"] == cleanable
    assert selected["total_bytes"] == clean + cleanable
    assert selected["dirty_ratio"] == pytest.approx(cleanable / (clean + cleanable), abs=1e-4)


@pytest.mark.parametrize("surface", SURFACES)
def test_cleaning_with_unkeyed_messages(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCleaningWithUnkeyedMessages: unkeyed records (written while the topic's policy
    was delete) are all removed and counted as invalid; the log keeps exactly the keyed bytes."""
    log = kafka_log(tmp_path, cleanup_policy="delete")
    fill_until(log, 2, lambda offset: (None, str(offset)))
    unkeyed = len(log.records())
    size_with_unkeyed = sum(segment_sizes(log).values())
    fill_until(log, 3)
    expected_size = sum(segment_sizes(log).values()) - size_with_unkeyed
    log.cli("topics", "alter", "--log-dir", str(log.log_dir), "--topic", log.topic,
            "--config", "cleanup.policy=compact")
    log.store = LogStore([log.log_dir])  # forget the old topic config
    log.clean(T0, surface=surface)
    assert [r for r in log.records() if r.key is None] == []
    assert sum(segment_sizes(log).values()) == expected_size
    assert round_stats(log)["unkeyed_records_removed"] == unkeyed
