"""Kafka's ``UnifiedLogTest``, part 2: producer state, transactions, the last stable offset and the
aborted-transaction index, and producer snapshots.

Kafka's ``activeProducers`` is the producer state kafkalog loads for a partition (the newest snapshot
at or below the log end plus the batches after it); its ``firstUnstableOffset``/``lastStableOffset``
is the last stable offset kafkalog gives the cleaner (``snapshot_for_compaction``): the first offset of
an open transaction, capped by the high watermark. kafkalog's high watermark is its log end unless a
broker's ``replication-offset-checkpoint`` says less, so Kafka's steps where a COMMIT/ABORT marker sits
above a lagging high watermark (``unreplicatedTxns``) are replication-only and left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_log import MAX_INT, T0, ScenarioLog
from log_port_helpers import (
    FOUR_PRODUCER_ABORTED,
    TxnAppender,
    append_raw,
    four_producer_scenario,
    has_offset_overflow,
    kbatch,
    kbatch_of,
    leader_epochs,
    log_with_offset_overflow,
    producers,
    read_only,
    retention,
    set_log_start_offset,
    snapshot_entries,
    snapshot_offsets,
    txn_marker,
)

from kafkalog.format.batch import ControlType, Record, build_batch, empty_header_batch, parse_header
from kafkalog.log import names
from kafkalog.log.snapshot import snapshot_for_compaction


def last_stable_offset(log: ScenarioLog) -> int:
    """``UnifiedLog.lastStableOffset``: where the cleaner (and a read_committed reader) must stop."""
    return snapshot_for_compaction(log.log_dir, log.topic, 0, log.store.log_config(log.topic)).last_stable_offset


def first_unstable_offset(log: ScenarioLog) -> int | None:
    """``UnifiedLog.firstUnstableOffset``: the last stable offset when it lies below the log end."""
    lso = last_stable_offset(log)
    return lso if lso < read_only(log).log_end_offset else None


def _txn(log: ScenarioLog, producer_id: int, values: list[str], *, epoch: int = 0,
         sequence: int = 0) -> tuple[int, int]:
    """``MemoryRecords.withTransactionalRecords``: one transactional batch, no keys."""
    return log.txn(producer_id, [(None, v) for v in values], epoch=epoch, sequence=sequence)


def _plain(log: ScenarioLog, values: list[str]) -> tuple[int, int]:
    return log.append([(None, v) for v in values])


# --- producer state -------------------------------------------------------------------------------------------
def test_active_producers(tmp_path: Path) -> None:
    """UnifiedLogTest.testActiveProducers: an open transaction (epoch 5, last sequence 4, started at
    0, no coordinator epoch); after its COMMIT with coordinator epoch 15 (no transaction, coordinator
    epoch 15); an idempotent producer (last sequence 2, no transaction, no coordinator epoch)."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024)
    _txn(log, 1, [str(i) for i in range(5)], epoch=5)
    state = producers(log)[1]
    assert (state.producer_epoch, state.last_sequence, state.current_txn_first_offset, state.coordinator_epoch) == \
        (5, 4, 0, -1)
    log.commit(1, epoch=5, coordinator_epoch=15)
    state = producers(log)[1]
    assert (state.producer_epoch, state.last_sequence, state.current_txn_first_offset, state.coordinator_epoch) == \
        (5, 4, -1, 15)
    log.idempotent(2, [(None, str(i)) for i in range(3)], epoch=5)
    state = producers(log)[2]
    assert (state.producer_epoch, state.last_sequence, state.current_txn_first_offset, state.coordinator_epoch) == \
        (5, 2, -1, -1)


def test_update_producer_id_map_with_compacted_data(tmp_path: Path) -> None:
    """UnifiedLogTest.testUpdateProducerIdMapWithCompactedData: a batch at 23 whose keyed records the
    cleaner removed (records 23 and 25 left, last offset 26 kept) gives its producer last sequence 3."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    append_raw(log, [_compacted_batch()])
    assert producers(log)[1].last_sequence == 3


def test_rebuild_producer_id_map_with_compacted_data(tmp_path: Path) -> None:
    """UnifiedLogTest.testRebuildProducerIdMapWithCompactedData: the same compacted batch, more data at
    27, then a truncation to 27 that rebuilds the producer state from the log: last sequence 3."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    append_raw(log, [_compacted_batch(), kbatch_of(27, [b"e", b"f"])])
    with log.writable() as local:
        local.truncate_to(27)
        assert local.producer_state().producers[1].last_sequence == 3
    assert producers(log)[1].last_sequence == 3


def test_rebuild_producer_state_with_empty_compacted_batch(tmp_path: Path) -> None:
    """UnifiedLogTest.testRebuildProducerStateWithEmptyCompactedBatch: a batch at 23 of two records that
    the cleaner emptied (kept as a bare header), more data at 25, a truncation to 25: last sequence 1."""
    original = build_batch([Record(23, T0, b"key", b"a"), Record(24, T0, b"key", b"b")], producer_id=1,
                           producer_epoch=0, base_sequence=0, partition_leader_epoch=0)
    emptied = empty_header_batch(parse_header(original))
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    append_raw(log, [emptied, kbatch_of(25, [b"e", b"f"])])
    with log.writable() as local:
        local.truncate_to(25)
    assert producers(log)[1].last_sequence == 1


def _compacted_batch() -> bytes:
    """Producer 1's batch at 23 (sequence 0) of a, key:b, c, key:d with the keyed records removed."""
    return build_batch([Record(23, T0, None, b"a"), Record(25, T0, None, b"c")], base_offset=23, last_offset=26,
                       producer_id=1, producer_epoch=0, base_sequence=0, partition_leader_epoch=0)


def test_producer_id_map_truncate_to_with_no_snapshots(tmp_path: Path) -> None:
    """UnifiedLogTest.testProducerIdMapTruncateToWithNoSnapshots: with every snapshot deleted, a
    truncation to 1 rebuilds one producer whose last sequence is 0."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    log.idempotent(1, [(None, "a")], sequence=0)
    log.idempotent(1, [(None, "b")], sequence=1)
    for path in log.directory.glob("*" + names.SNAPSHOT_SUFFIX):
        path.unlink()
    with log.writable() as local:
        local.truncate_to(1)
    state = producers(log)
    assert list(state) == [1] and state[1].last_sequence == 0


def test_truncate_below_first_unstable_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testTruncateBelowFirstUnstableOffset: an open transaction at 3 is the first
    unstable offset, also after reopening; truncating to 0 leaves no unstable offset and no producer."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024)
    _plain(log, ["0", "1", "2"])
    _txn(log, 17, ["3", "4"], epoch=10)
    assert first_unstable_offset(log) == 3
    with log.writable() as local:  # reopened: producer state from the files
        assert local.producer_state().first_unstable_offset() == 3
        local.truncate_to(0)
        assert local.producer_state().first_unstable_offset() is None
        assert local.producer_state().producers == {}
    assert first_unstable_offset(log) is None and producers(log) == {}


# --- producer snapshots -------------------------------------------------------------------------------------
def test_take_snapshot_on_roll_and_delete_snapshot_on_recovery_point_checkpoint(tmp_path: Path) -> None:
    """UnifiedLogTest.testTakeSnapshotOnRollAndDeleteSnapshotOnRecoveryPointCheckpoint: each roll (at 1,
    2, 3) takes a snapshot at the new base and keeps the older ones; a flush inside the active segment
    leaves the newest at 3."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    for i, value in enumerate(["a", "b", "c"], start=1):
        log.append([(None, value)])
        log.roll(i)
        offsets = snapshot_offsets(log)
        assert (offsets[-1], offsets[0]) == (i, 1)
    log.append([(None, "baz")])  # the writable open flushes it: the recovery point moves to 4
    assert snapshot_offsets(log) == [1, 2, 3]


def test_producer_snapshot_after_segment_roll_on_append(tmp_path: Path) -> None:
    """UnifiedLogTest.testProducerSnapshotAfterSegmentRollOnAppend: a second 512-byte batch rolls a 1024
    byte segment and a snapshot is taken at 1; after truncating to 1 (state reloaded from it) there are
    2 segments, the active one empty, and the producer's last data offset is 0."""
    log = ScenarioLog(tmp_path, segment_bytes=1024)
    log.idempotent(1, [(None, b"\0" * 512)], sequence=0)
    log.idempotent(1, [(None, b"\0" * 512)], sequence=1)
    assert log.segment_bases() == [0, 1] and snapshot_offsets(log) == [1]
    with log.writable() as local:
        local.truncate_to(1)
        assert [s.base_offset for s in local.segments] == [0, 1] and local.active_segment.size == 0
        entry = local.producer_state().producers[1]
        assert (entry.last_offset - entry.offset_delta, entry.last_offset) == (0, 0)
    assert snapshot_offsets(log) == [1]
    assert [e.last_offset for e in snapshot_entries(log, 1)] == [0]


def test_loading_log_deletes_producer_state_snapshots_past_log_end_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testLoadingLogDeletesProducerStateSnapshotsPastLogEndOffset: an (empty) snapshot
    file at 42 in an empty log is deleted when the log is loaded."""
    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5, retention_bytes=-1, file_delete_delay_ms=0)
    names.snapshot_file(log.directory, 42).touch()
    log.recover(full=True)
    with log.writable():
        pass
    assert snapshot_offsets(log) == []


@pytest.mark.xfail(strict=True, reason="DIVERGENCE: loading a log writes no producer snapshots (Kafka snapshots the "
                                       "last two segment bases and the log end offset while rebuilding state, and "
                                       "each recovered segment's end)")
def test_initialization_of_producer_snapshots_upgrade_path(tmp_path: Path) -> None:
    """UnifiedLogTest.testInitializationOfProducerSnapshotsUpgradePath: with every snapshot deleted,
    loading after a clean shutdown writes snapshots at the last two segment bases and the log end
    offset; a load that recovers from 0 writes one at every segment base but the first, and the end."""
    log = ScenarioLog(tmp_path, segment_bytes=64 * 10)
    append_raw(log, [kbatch(i, str(i).encode(), ts=T0) for i in range(101)], now_ms=T0)
    bases = log.segment_bases()
    assert len(bases) >= 2
    for path in log.directory.glob("*" + names.SNAPSHOT_SUFFIX):
        path.unlink()
    with log.writable():
        pass
    assert snapshot_offsets(log) == bases[-2:] + [101]
    for path in log.directory.glob("*" + names.SNAPSHOT_SUFFIX):
        path.unlink()
    log.recover(full=True)
    assert snapshot_offsets(log) == bases[1:] + [101]


def test_periodic_producer_id_expiration(tmp_path: Path) -> None:
    """UnifiedLogTest.testPeriodicProducerIdExpiration (producer.id.expiration.ms=200): a producer idle
    for 200 ms is gone from the producer state (here: the state a roll 400 ms later snapshots)."""
    from kafkalog.log.config import BrokerConfig
    from kafkalog.log.store import LogStore

    log = ScenarioLog(tmp_path, segment_bytes=2048 * 5)
    store = LogStore([tmp_path], BrokerConfig.from_properties({"producer.id.expiration.ms": "200"}))
    with store.writable_log(log.location) as local:
        local.append_batch(kbatch(0, b"foo", producer_id=23, producer_epoch=0, sequence=0, ts=T0), now_ms=T0)
        assert sorted(local.producer_state().producers) == [23]
        local.append_batch(kbatch(1, b"bar", ts=T0 + 400), now_ms=T0 + 400)
        local.roll(now_ms=T0 + 400)
    assert [e.producer_id for e in snapshot_entries(log, 2)] == []


# --- transactions, the last stable offset and the .txnindex ------------------------------------------------
def test_first_unstable_offset_no_transactional_data(tmp_path: Path) -> None:
    """UnifiedLogTest.testFirstUnstableOffsetNoTransactionalData: plain records leave no unstable
    offset (the last stable offset is the log end)."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    _plain(log, ["foo", "bar", "baz"])
    assert first_unstable_offset(log) is None and last_stable_offset(log) == 3


def test_first_unstable_offset_with_transactional_data(tmp_path: Path) -> None:
    """UnifiedLogTest.testFirstUnstableOffsetWithTransactionalData: the first offset of an open
    transaction stays the first unstable offset while it grows; its COMMIT (once the high watermark
    passes it, which for kafkalog is at once) leaves none."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    first, _ = _txn(log, 137, ["foo", "bar", "baz"], epoch=5)
    assert first_unstable_offset(log) == first == 0
    _txn(log, 137, ["blah"], epoch=5, sequence=3)
    assert first_unstable_offset(log) == 0
    log.commit(137, epoch=5)
    assert first_unstable_offset(log) is None


def test_fetch_up_to_last_stable_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testFetchUpToLastStableOffset: two interleaved transactions hold the last stable
    offset at 0; committing producer 1 moves it to producer 2's first offset (8); aborting producer
    2 moves it to the log end. (The fetch-isolation reads are replication/fetch API.)"""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024)
    with log.writable() as local:
        a = TxnAppender(local)
        a.txn(1, 5)
        a.plain(3)
        a.txn(2, 2)
        a.txn(1, 4)
        a.plain(2)
        a.txn(1, 10)
    assert last_stable_offset(log) == 0
    log.commit(1)
    assert last_stable_offset(log) == 8
    log.abort(2)
    assert last_stable_offset(log) == read_only(log).log_end_offset == 28


def test_last_stable_offset_with_mixed_producer_data(tmp_path: Path) -> None:
    """UnifiedLogTest.testLastStableOffsetWithMixedProducerData: producer 137's open transaction at 0
    holds the first unstable offset through plain data and producer 983's transaction (6); aborting 137
    moves it to 983's first offset; committing 983 leaves none."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    first, _ = _txn(log, 137, ["a", "b", "c"], epoch=5)
    assert first_unstable_offset(log) == first
    _plain(log, ["g", "h", "i"])
    second, _ = _txn(log, 983, ["d", "e", "f"], epoch=5)
    assert first_unstable_offset(log) == first
    log.abort(137, epoch=5)
    assert first_unstable_offset(log) == second == 6
    log.commit(983, epoch=5)
    assert first_unstable_offset(log) is None


def test_transaction_index_updated(tmp_path: Path) -> None:
    """UnifiedLogTest.testTransactionIndexUpdated: four producers' transactions mixed with plain data:
    the aborted-transaction index holds (pid 1, 0, 29, LSO 8) and (pid 2, 8, 74, LSO 36), and no
    offset is unstable at the end."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    four_producer_scenario(log)
    assert log.aborted_txns() == FOUR_PRODUCER_ABORTED
    assert first_unstable_offset(log) is None


def test_transaction_index_updated_through_replication(tmp_path: Path) -> None:
    """UnifiedLogTest.testTransactionIndexUpdatedThroughReplication: the same data appended with its
    offsets already assigned (as a follower gets it): the same two aborted-transaction entries."""
    seqs: dict[int, int] = {}

    def txn(pid: int, offset: int, count: int) -> bytes:
        seq = seqs.get(pid, 0)
        seqs[pid] = seq + count
        return kbatch_of(offset, [str(seq + i).encode() for i in range(count)], producer_id=pid, producer_epoch=0,
                         sequence=seq, transactional=True)

    batches = [txn(1, 0, 5), kbatch_of(5, [b"0", b"1", b"2"]), txn(2, 8, 2), txn(1, 10, 4), txn(3, 14, 3),
               kbatch_of(17, [b"0", b"1"]), txn(1, 19, 10), txn_marker(ControlType.ABORT, 29, 1),
               txn(2, 30, 6), txn(4, 36, 3), kbatch_of(39, [str(i).encode() for i in range(10)]), txn(3, 49, 9),
               txn_marker(ControlType.COMMIT, 58, 3), txn(4, 59, 8), txn(2, 67, 7),
               txn_marker(ControlType.ABORT, 74, 2), kbatch_of(75, [str(i).encode() for i in range(10)]),
               txn(4, 85, 4), txn_marker(ControlType.COMMIT, 89, 4)]
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    append_raw(log, batches)
    assert log.aborted_txns() == FOUR_PRODUCER_ABORTED
    assert first_unstable_offset(log) is None


def test_aborted_transaction_spanning_multiple_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.testAbortedTransactionSpanningMultipleSegments: a transaction whose second batch
    spills into a new segment (3) and is aborted: no unstable offset is left, and the aborted
    transaction a read from 0 collects is (pid 137, first offset 0)."""
    size = len(kbatch_of(0, [b"a", b"b", b"c"], producer_id=137, producer_epoch=5, sequence=0, transactional=True))
    log = ScenarioLog(tmp_path, segment_bytes=size)
    first, _ = _txn(log, 137, ["a", "b", "c"], epoch=5)
    assert first_unstable_offset(log) == first == 0
    _txn(log, 137, ["d", "e", "f"], epoch=5, sequence=3)
    assert first_unstable_offset(log) == 0
    assert log.active_base() == 3
    marker = log.abort(137, epoch=5)
    assert first_unstable_offset(log) is None
    assert log.aborted_txns() == [(137, 0, marker, marker + 1)]
    reader = read_only(log)
    collected = [t for s in reader.segments for t in s.txn_index.collect_aborted_txns(0, reader.log_end_offset)[0]]
    assert [(t.producer_id, t.first_offset) for t in collected] == [(137, 0)]


def test_rebuild_transactional_state(tmp_path: Path) -> None:
    """UnifiedLogTest.testRebuildTransactionalState: an aborted transaction leaves no unstable offset,
    also after an unclean reopen that rebuilds the state from the log."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    _txn(log, 137, ["foo", "bar", "baz"], epoch=5)
    log.abort(137, epoch=5)
    assert first_unstable_offset(log) is None
    log.recover(full=True)
    assert first_unstable_offset(log) is None
    assert log.aborted_txns() == [(137, 0, 3, 4)]


def test_last_stable_offset_does_not_exceed_log_start_offset_mid_segment(tmp_path: Path) -> None:
    """UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffsetMidSegment: an open transaction
    from 0 and the log start offset moved to 5: the first unstable offset is 5."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    _txn(log, 1, [str(i) for i in range(5)])
    _plain(log, ["0", "1", "2"])
    log.roll()
    _txn(log, 1, [str(i) for i in range(5)], sequence=5)
    assert first_unstable_offset(log) == 0
    set_log_start_offset(log, 5)
    assert first_unstable_offset(log) == 5


def test_last_stable_offset_does_not_exceed_log_start_offset_after_segment_deletion(tmp_path: Path) -> None:
    """UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffsetAfterSegmentDeletion: the same open
    transaction, the log start offset moved to 8 and the first segment deleted: 1 segment remains and
    the first unstable offset is 8."""
    log = ScenarioLog(tmp_path, segment_bytes=1024 * 1024 * 5)
    _txn(log, 1, [str(i) for i in range(5)])
    _plain(log, ["0", "1", "2"])
    log.roll()
    _txn(log, 1, [str(i) for i in range(5)], sequence=5)
    assert first_unstable_offset(log) == 0
    set_log_start_offset(log, 8)
    retention(log, T0)
    assert log.segment_bases() == [8]
    assert first_unstable_offset(log) == 8


# --- splitting a segment whose offsets overflow its base + 2^31 - 1 (spec §11.4) -----------------------------
def test_split_on_offset_overflow(tmp_path: Path) -> None:
    """UnifiedLogTest.testSplitOnOffsetOverflow: a log whose second segment overflows (``verify`` names
    it) is split: 4 segments, the same records, no overflow. (Kafka calls ``splitOverflowedSegment``;
    kafkalog splits in ``recover --full``.)"""
    log, keys, _ = log_with_offset_overflow(tmp_path)
    assert has_offset_overflow(log) and log.verify().code == 1
    before = [(r.offset, r.key, r.value) for r in log.records()]
    log.recover(full=True)
    assert len(log.segment_bases()) == 4
    assert [(r.offset, r.key, r.value) for r in log.records()] == before
    assert not has_offset_overflow(log) and log.verify().code == 0


def _degenerate_split(tmp_path: Path, batches: list[bytes]) -> ScenarioLog:
    """``testDegenerateSplitSegmentWithOverflow``: one segment at 0 holding only ``batches`` (index files
    present, so a plain load does not recover it), split: one segment remains, based at the first
    batch's base offset, with the same records and no overflow."""
    log = ScenarioLog(tmp_path, index_interval_bytes=1, file_delete_delay_ms=1000)
    names.log_file(log.directory, 0).write_bytes(b"".join(batches))
    assert has_offset_overflow(log)
    before = [(r.offset, r.value) for r in log.records()]
    log.recover(full=True)
    assert log.segment_bases() == [parse_header(batches[0]).base_offset]
    assert [(r.offset, r.value) for r in log.records()] == before
    assert not has_offset_overflow(log)
    return log


def test_degenerate_segment_split(tmp_path: Path) -> None:
    """UnifiedLogTest.testDegenerateSegmentSplit: every batch of the segment overflows (at Int.MaxValue + 1
    and + 2): the split makes one segment, based at Int.MaxValue + 1."""
    overflow = MAX_INT + 1
    _degenerate_split(tmp_path, [kbatch(overflow, b"a"), kbatch(overflow + 1, b"b")])


def test_degenerate_segment_split_with_out_of_range_batch_last_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testDegenerateSegmentSplitWithOutOfRangeBatchLastOffset: the only batch starts at
    Int.MaxValue - 1 (in range) and ends past it: the split makes one segment based at Int.MaxValue - 1."""
    _degenerate_split(tmp_path, [kbatch_of(MAX_INT - 1, [b"a", b"b", b"c"])])


# --- appends with offsets already assigned --------------------------------------------------------------------
def test_append_with_out_of_order_offsets_throws_exception(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendWithOutOfOrderOffsetsThrowsException: batches at 0, 1, 3, 2, 4: the one
    at 2, below the log end, is refused (OffsetsOutOfOrderException). Kafka refuses the whole message
    set at once; kafkalog appends batch by batch, so 0, 1 and 3 are in."""
    from kafkalog.errors import InvalidOffsetError

    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch(0, b"value", b"key"), kbatch(1, b"value", b"key"), kbatch(3, b"value", b"key")])
    with pytest.raises(InvalidOffsetError):
        append_raw(log, [kbatch(2, b"value", b"key")])
    assert log.last_offsets_per_batch() == [0, 1, 3]


def test_follower_should_save_epoch_information_from_replicated_messages_to_the_epoch_cache(tmp_path: Path) -> None:
    """UnifiedLogTest.followerShouldSaveEpochInformationFromReplicatedMessagesToTheEpochCache: 50 batches
    stamped with partition leader epoch 42 make 42 the latest epoch, starting at offset 0."""
    log = ScenarioLog(tmp_path)
    append_raw(log, [kbatch(i, str(i).encode(), epoch=42) for i in range(50)])
    assert leader_epochs(log) == [(42, 0)]
