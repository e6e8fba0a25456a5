"""Kafka's ProducerStateManagerTest, ported onto kafkalog's producer state (spec §6, §7).

Kafka's test drives a ``ProducerStateManager`` with append infos and markers and no log. kafkalog has
no such manager: producer state is rebuilt from the batches of a partition (``LocalLog.producer_state``,
the newest ``.snapshot`` plus the batches after it), snapshots are written at each roll and removed
with their segment, and an ABORT marker turns into a ``.txnindex`` entry. So each scenario writes the
same batches to a partition (``ScenarioLog``: idempotent and transactional appends at the offsets
Kafka's test uses, markers, rolls, truncation, retention) and checks what kafkalog keeps: the state it
loads, the snapshot files (decoded here with ``struct`` and CRC-32C, independently of kafkalog, and
through ``kafkalog dump``), the aborted transactions and the first unstable offset.

kafkalog keeps one entry per producer, its last data batch, as a snapshot does. Kafka's in-memory
entry caches up to five batches, so its ``firstSeq``/``firstDataOffset`` can name an older batch than
a snapshot (or kafkalog) can; where a Kafka test asserts those, the docstring says what kafkalog
asserts instead. Sequence validation, epoch fencing, coordinator fencing, transaction verification
and late-transaction tracking are the broker's and are not ported (README table).
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
from kafka_log import DAY, T0, ScenarioLog

from kafkalog.format import batch as fmt
from kafkalog.log import checkpoint, names
from kafkalog.log.producer_snapshot import (
    ProducerSnapshotEntry,
    first_sequence,
    read_producer_snapshot,
    write_producer_snapshot,
)
from kafkalog.log.segment import LogSegment

PID = 1
MAX_INT = 2**31 - 1
NO_TIMESTAMP = -1
_ENTRY = struct.Struct(">qhiqiqiq")


def entry(pid: int, epoch: int, last_sequence: int, last_offset: int, offset_delta: int, timestamp: int,
          coordinator_epoch: int = -1, txn_first: int = -1) -> ProducerSnapshotEntry:
    return ProducerSnapshotEntry(pid, epoch, last_sequence, last_offset, offset_delta, timestamp,
                                 coordinator_epoch, txn_first)


def encode_snapshot(entries: list[ProducerSnapshotEntry]) -> bytes:
    """Snapshot bytes as Kafka's ``writeSnapshot`` lays them out (spec §7), encoded here."""
    body = struct.pack(">i", len(entries)) + b"".join(
        _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                    e.timestamp_ms, e.coordinator_epoch, e.current_txn_first_offset) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def decode_snapshot(path: Path) -> list[ProducerSnapshotEntry]:
    """A ``.snapshot`` file decoded here (version 1, CRC-32C over bytes 6 on), not by kafkalog."""
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1 and crc == crc32c.crc32c(data[6:]) and len(data) == 10 + 46 * count
    return [ProducerSnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(data[10:])]


def snapshot_offsets(log: ScenarioLog) -> list[int]:
    return sorted(names.offset_from_file_name(p.name) for p in log.directory.glob("*" + names.SNAPSHOT_SUFFIX))


def snapshot(log: ScenarioLog, offset: int) -> list[ProducerSnapshotEntry]:
    return decode_snapshot(names.snapshot_file(log.directory, offset))


def producers(log: ScenarioLog) -> dict[int, ProducerSnapshotEntry]:
    """The producer state kafkalog loads for the partition (newest snapshot + the batches after it)."""
    with log.writable() as writable:
        return dict(writable.producer_state().producers)


def first_unstable_offset(log: ScenarioLog) -> int | None:
    with log.writable() as writable:
        return writable.producer_state().first_unstable_offset()


def log_end(log: ScenarioLog) -> int:
    with log.writable() as writable:
        return writable.log_end_offset


def dump_lines(path: Path, log: ScenarioLog) -> list[str]:
    out = log.cli("dump", "--files", str(path)).out
    return [line for line in out.splitlines() if not line.startswith("Dumping ")]


def data(log: ScenarioLog, pid: int, offset: int, count: int = 1, *, epoch: int = 0, sequence: int = 0,
         transactional: bool = False, timestamp: int | None = None) -> None:
    """A producer's batch of ``count`` records at ``offset`` (Kafka's ``appendClientEntry`` /
    ``appendReplicationEntry``; kafkalog appends either way without validating the sequence)."""
    log.append([(f"k{offset + i}", "v") for i in range(count)], base_offset=offset, producer_id=pid,
               producer_epoch=epoch, base_sequence=sequence, transactional=transactional, timestamp=timestamp)


def marker(log: ScenarioLog, kind: fmt.ControlType, pid: int, offset: int, *, epoch: int = 0,
           coordinator_epoch: int = 0, timestamp: int | None = None) -> None:
    log.marker(kind, pid, epoch=epoch, coordinator_epoch=coordinator_epoch, timestamp=timestamp, base_offset=offset)


COMMIT, ABORT = fmt.ControlType.COMMIT, fmt.ControlType.ABORT


# ---------------------------------------------------------------------------------------------------
# Markers and data batches


def test_append_txn_marker_with_no_producer_state(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testAppendTxnMarkerWithNoProducerState: a COMMIT marker of an unknown
    producer (epoch 2, offset 27) makes an entry with epoch 2 and no sequence; a later batch at
    sequence 0 gives last sequence 0. (Kafka's fencing and sequence checks in between are the broker's.)
    The snapshot holds the marker-only entry as Kafka writes it: no batch (last offset -1, delta 0)."""
    log = ScenarioLog(tmp_path)
    marker(log, COMMIT, PID, 27, epoch=2, timestamp=T0)
    first = producers(log)[PID]
    assert (first.producer_epoch, first.producer_id, first.last_sequence) == (2, PID, -1)
    log.roll()
    assert snapshot(log, 28) == [entry(PID, 2, -1, -1, 0, T0, coordinator_epoch=0)]
    assert dump_lines(names.snapshot_file(log.directory, 28), log) == [
        f"producerId: {PID} producerEpoch: 2 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {T0} "]
    data(log, PID, 39, epoch=2, sequence=0, timestamp=4)
    second = producers(log)[PID]
    assert (second.producer_epoch, second.producer_id, second.last_sequence) == (2, PID, 0)


def test_producer_sequence_wrap_around(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testProducerSequenceWrapAround: a batch at sequence Int.MaxValue (offset
    735, epoch 15) then one at sequence 0 (offset 1235): epoch 15, last sequence 0.

    Kafka's in-memory entry still caches the first batch, so its firstSeq is Int.MaxValue; kafkalog, like
    a snapshot, keeps the last batch only, whose first sequence is 0."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 735, epoch=15, sequence=MAX_INT)
    data(log, PID, 1235, epoch=15, sequence=0)
    last = producers(log)[PID]
    assert last.producer_epoch == 15
    assert last.last_sequence == 0
    assert first_sequence(last.last_sequence, last.offset_delta) == 0
    assert last.last_offset == 1235


def test_producer_sequence_with_wrap_around_batch_record(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testProducerSequenceWithWrapAroundBatchRecord: one batch of 21 records
    at 2000–2020 whose sequences wrap from Int.MaxValue - 10 to 9: first sequence Int.MaxValue - 10,
    last 9, first offset 2000, last 2020; the snapshot and ``kafka-dump-log`` agree."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 2000, count=21, epoch=15, sequence=MAX_INT - 10, timestamp=T0)
    last = producers(log)[PID]
    assert last.last_sequence == 9
    assert first_sequence(last.last_sequence, last.offset_delta) == MAX_INT - 10
    assert (last.last_offset - last.offset_delta, last.last_offset) == (2000, 2020)
    log.roll()
    assert snapshot(log, 2021) == [entry(PID, 15, 9, 2020, 20, T0)]
    assert dump_lines(names.snapshot_file(log.directory, 2021), log) == [
        f"producerId: {PID} producerEpoch: 15 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {T0} firstSequence: {MAX_INT - 10} lastSequence: 9 lastOffset: 2020 offsetDelta: 20 "
        f"timestamp: {T0}"]


def test_no_validation_on_first_entry_when_loading_log(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testNoValidationOnFirstEntryWhenLoadingLog: the first batch seen of a
    producer (epoch 5, sequence 16, offset 735) is taken as it is."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 735, epoch=5, sequence=16)
    last = producers(log)[PID]
    assert last.producer_epoch == 5
    assert first_sequence(last.last_sequence, last.offset_delta) == 16
    assert last.last_sequence == 16
    assert last.last_offset == 735
    assert last.last_offset - last.offset_delta == 735


def test_control_record_bumps_producer_epoch(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testControlRecordBumpsProducerEpoch: an ABORT marker at epoch 1 after a
    batch at epoch 0 bumps the epoch and clears the batch: no open transaction, first and last sequence
    NO_SEQUENCE (-1); a batch at the new epoch from sequence 0 then has first sequence 0."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, epoch=0, sequence=0)
    marker(log, ABORT, PID, 1, epoch=1)
    last = producers(log)[PID]
    assert last.producer_epoch == 1
    assert last.current_txn_first_offset == -1
    assert (last.last_sequence, last.last_offset) == (-1, -1)
    data(log, PID, 2, epoch=1, sequence=0)
    last = producers(log)[PID]
    assert first_sequence(last.last_sequence, last.offset_delta) == 0


def test_txn_first_offset_metadata_cached(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testTxnFirstOffsetMetadataCached: a transaction begun at 992342 makes
    that the first unstable offset. (Kafka also caches the offset's segment and position, which
    kafkalog does not keep; the offset is asserted.)"""
    log = ScenarioLog(tmp_path)
    data(log, PID, 992342, transactional=True)
    assert first_unstable_offset(log) == 992342
    assert producers(log)[PID].current_txn_first_offset == 992342


def test_update_producer_transaction_state(tmp_path: Path) -> None:
    """ProducerStateManagerTest.updateProducerTransactionState: after a batch at 9, transactional
    batches 16–20 (sequences 1–5) and 26–30 (6–10) open a transaction at 16; a COMMIT at 40 with
    coordinator epoch 15 completes it (not aborted: no ``.txnindex`` entry) and leaves the last batch
    (sequence 10, offset 30) untouched and no open transaction.

    Kafka's entry also reports firstSeq 1 and firstDataOffset 16 from the batches it caches; kafkalog
    keeps the last batch, 26–30 (first sequence 6)."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 9, sequence=0)
    data(log, PID, 16, count=5, sequence=1, transactional=True)
    state = producers(log)[PID]
    assert (state.last_sequence, state.last_offset, state.current_txn_first_offset) == (5, 20, 16)
    data(log, PID, 26, count=5, sequence=6, transactional=True)
    state = producers(log)[PID]
    assert (state.last_sequence, state.last_offset, state.current_txn_first_offset) == (10, 30, 16)
    marker(log, COMMIT, PID, 40, coordinator_epoch=15)
    state = producers(log)[PID]
    assert state.producer_epoch == 0
    assert (state.last_sequence, state.last_offset, state.current_txn_first_offset) == (10, 30, -1)
    assert first_sequence(state.last_sequence, state.offset_delta) == 6
    assert state.coordinator_epoch == 15
    assert log.aborted_txns() == []
    assert first_unstable_offset(log) is None


def test_accept_append_with_sequence_gaps_on_replica(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testAcceptAppendWithSequenceGapsOnReplica: a replica takes sequence 3
    right after sequence 0 and records it as the last sequence. (Kafka first shows a client append
    with that gap rejected, which is the broker's check.)"""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, timestamp=0)
    assert producers(log)[PID].last_sequence == 0
    data(log, PID, 1, sequence=3, timestamp=1)
    assert producers(log)[PID].last_sequence == 3


def test_append_empty_control_batch(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testAppendEmptyControlBatch: an empty control batch (what the cleaner
    leaves of a marker, pid 23423 at offset 15) starts no transaction: the producer has an entry and
    no current transaction first offset, so nothing holds the first unstable offset."""
    pid = 23423
    log = ScenarioLog(tmp_path)
    header = fmt.parse_header(fmt.end_txn_marker_batch(COMMIT, offset=15, timestamp=T0, producer_id=pid,
                                                       producer_epoch=0, coordinator_epoch=0, partition_leader_epoch=0))
    with log.writable() as writable:
        writable.append_batch(fmt.empty_header_batch(header), now_ms=T0)
    assert [(b.control, b.records) for b in log.batches()] == [(True, 0)]
    state = producers(log)
    assert pid in state
    assert state[pid].current_txn_first_offset == -1
    assert first_unstable_offset(log) is None


# ---------------------------------------------------------------------------------------------------
# First unstable offset and last stable offsets


def test_first_unstable_offset(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testFirstUnstableOffset: transactions open at 99 (pid 1) and 105
    (pid 2) hold the first unstable offset at 99; committing pid 1 at 109 moves it to 105; aborting
    pid 2 at 112 clears it, with a ``.txnindex`` entry (2, 105, 112, LSO 113).

    Kafka holds firstUnstableOffset back until the high watermark passes each marker (its
    firstUndecidedOffset moves at once); kafkalog's high watermark is the log end, so both are one."""
    log = ScenarioLog(tmp_path)
    assert first_unstable_offset(log) is None
    data(log, PID, 99, epoch=5, transactional=True)
    assert first_unstable_offset(log) == 99
    data(log, 2, 105, epoch=5, transactional=True)
    assert first_unstable_offset(log) == 99
    marker(log, COMMIT, PID, 109, epoch=5)
    assert first_unstable_offset(log) == 105
    marker(log, ABORT, 2, 112, epoch=5)
    assert first_unstable_offset(log) is None
    assert log.aborted_txns() == [(2, 105, 112, 113)]


def test_last_stable_offset_completed_txn(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testLastStableOffsetCompletedTxn: three transactions begun at s1 =
    992342, s2 = s1 + 25 and s3 = s1 + 57. Completing the first (at s3 + 15) gives LSO s2, completing
    the third (20 later) still s2, completing the second (78 later) its marker + 1; the first unstable
    offset follows (s2, s2, none).

    Kafka computes ``lastStableOffset`` of completed COMMITs; kafkalog writes that value only for an
    aborted transaction (its ``.txnindex`` entry), so the three are aborted here."""
    s1 = 992342
    s2, s3 = s1 + 25, s1 + 57
    log = ScenarioLog(tmp_path)
    data(log, 1, s1, transactional=True)
    data(log, 2, s2, transactional=True)
    data(log, 3, s3, transactional=True)
    last1 = s3 + 15
    marker(log, ABORT, 1, last1)
    assert log.aborted_txns()[-1] == (1, s1, last1, s2)
    assert first_unstable_offset(log) == s2
    last3 = last1 + 20
    marker(log, ABORT, 3, last3)
    assert log.aborted_txns()[-1] == (3, s3, last3, s2)
    assert first_unstable_offset(log) == s2
    last2 = last3 + 78
    marker(log, ABORT, 2, last2)
    assert log.aborted_txns()[-1] == (2, s2, last2, last2 + 1)
    assert first_unstable_offset(log) is None


def test_skip_empty_transactions(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testSkipEmptyTransactions: data 16–20 then COMMIT 21 completes a
    transaction; COMMIT 22, ABORT 23 and ABORT 29 find none open and complete nothing; data 24–27 and
    ABORT 28 complete an aborted one (the only ``.txnindex`` entry, LSO 29); data 30–31 leaves a
    transaction open at 30, the first unstable offset."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 16, count=5, sequence=0, transactional=True)
    assert first_unstable_offset(log) == 16
    marker(log, COMMIT, PID, 21, coordinator_epoch=27)
    marker(log, COMMIT, PID, 22, coordinator_epoch=27)
    marker(log, ABORT, PID, 23, coordinator_epoch=27)
    data(log, PID, 24, count=4, sequence=5, transactional=True)
    marker(log, ABORT, PID, 28, coordinator_epoch=27)
    marker(log, ABORT, PID, 29, coordinator_epoch=27)
    data(log, PID, 30, count=2, sequence=9, transactional=True)
    assert log.aborted_txns() == [(PID, 24, 28, 29)]
    assert first_unstable_offset(log) == 30
    state = producers(log)[PID]
    assert (state.last_sequence, state.last_offset, state.current_txn_first_offset) == (10, 31, 30)


def test_first_unstable_offset_after_truncation(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testFirstUnstableOffsetAfterTruncation: a transaction at 99 (first
    unstable offset 99) committed at 105 (none), then a batch at 106; truncated to 106 there is still
    none, truncated to 100 (before the COMMIT) the transaction is open again at 99."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 99, transactional=True)
    assert first_unstable_offset(log) == 99
    log.roll()
    marker(log, COMMIT, PID, 105)
    assert first_unstable_offset(log) is None
    log.roll()
    data(log, PID, 106, sequence=1)
    with log.writable() as writable:
        writable.truncate_to(106)
    assert first_unstable_offset(log) is None
    with log.writable() as writable:
        writable.truncate_to(100)
    assert first_unstable_offset(log) == 99
    assert log_end(log) == 100


# ---------------------------------------------------------------------------------------------------
# Snapshots: written, reloaded, truncated, removed


def test_take_snapshot(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testTakeSnapshot: after two batches a snapshot is one non-empty file;
    here it is the one written at the roll, at offset 2, holding the producer's last batch exactly.
    Kafka's test stamps the batches at 0 and 1 ms and never runs its expiration check; kafkalog expires
    idle producers when it writes a snapshot (at a roll, ``producer.id.expiration.ms`` after their last
    timestamp), so the batches are stamped at the roll's time here."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, timestamp=T0)
    data(log, PID, 1, sequence=1, timestamp=T0 + 1)
    assert snapshot_offsets(log) == []
    log.roll()
    assert snapshot_offsets(log) == [2]
    path = names.snapshot_file(log.directory, 2)
    assert path.read_bytes() == encode_snapshot([entry(PID, 0, 1, 1, 0, T0 + 1)])


def test_recover_from_snapshot_unfinished_transaction(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRecoverFromSnapshotUnfinishedTransaction: transactional batches at
    0 and 1 (sequences 0, 1), a snapshot, a reload: the entry's batch is offset 1, sequence 1, with the
    transaction still open at 0; a batch at sequence 2 is then taken."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, transactional=True, timestamp=T0)
    data(log, PID, 1, sequence=1, transactional=True, timestamp=T0 + 1)
    log.roll()
    assert snapshot(log, 2) == [entry(PID, 0, 1, 1, 0, T0 + 1, txn_first=0)]
    loaded = producers(log)[PID]
    assert loaded.last_offset - loaded.offset_delta == 1
    assert first_sequence(loaded.last_sequence, loaded.offset_delta) == 1
    assert (loaded.last_offset, loaded.last_sequence, loaded.current_txn_first_offset) == (1, 1, 0)
    data(log, PID, 2, sequence=2, transactional=True)
    assert producers(log)[PID].last_sequence == 2
    assert first_unstable_offset(log) == 0


def test_recover_from_snapshot_finished_transaction(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRecoverFromSnapshotFinishedTransaction: transactional batches at 0
    and 1 and an ABORT at 2, a snapshot, a reload: the entry's batch is still offset 1, sequence 1
    (the marker does not change it), and no transaction is open."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, transactional=True, timestamp=T0)
    data(log, PID, 1, sequence=1, transactional=True, timestamp=T0 + 1)
    marker(log, ABORT, PID, 2, timestamp=T0 + 2)
    log.roll()
    loaded = producers(log)[PID]
    assert loaded.last_offset - loaded.offset_delta == 1
    assert first_sequence(loaded.last_sequence, loaded.offset_delta) == 1
    assert (loaded.last_offset, loaded.last_sequence, loaded.current_txn_first_offset) == (1, 1, -1)
    assert [(e.last_offset, e.last_sequence, e.current_txn_first_offset) for e in snapshot(log, 3)] == [(1, 1, -1)]
    assert log.aborted_txns() == [(PID, 0, 2, 3)]


def test_recover_from_snapshot_finished_transaction_snapshot_bytes(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRecoverFromSnapshotFinishedTransaction, the snapshot Kafka writes
    for it: a marker sets the entry's last timestamp to its own (``ProducerStateEntry.update`` at
    ``appendEndTxnMarker``) while keeping the batch, so the snapshot at 3 holds timestamp T0 + 2 (the
    ABORT's), coordinator epoch 0, and the batch at offset 1."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, transactional=True, timestamp=T0)
    data(log, PID, 1, sequence=1, transactional=True, timestamp=T0 + 1)
    marker(log, ABORT, PID, 2, timestamp=T0 + 2)
    log.roll()
    assert names.snapshot_file(log.directory, 3).read_bytes() == \
        encode_snapshot([entry(PID, 0, 1, 1, 0, T0 + 2, coordinator_epoch=0)])


def test_recover_from_snapshot_empty_transaction(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRecoverFromSnapshotEmptyTransaction: an ABORT with no transaction
    (offset 0, timestamp T), a snapshot, a reload: the entry's last timestamp is T and no transaction
    is open (and no ``.txnindex`` entry was made)."""
    log = ScenarioLog(tmp_path)
    marker(log, ABORT, PID, 0, timestamp=T0)
    log.roll()
    assert snapshot(log, 1) == [entry(PID, 0, -1, -1, 0, T0, coordinator_epoch=0)]
    loaded = producers(log)[PID]
    assert loaded.timestamp_ms == T0
    assert loaded.current_txn_first_offset == -1
    assert log.aborted_txns() == []


def test_producer_state_after_fencing_abort_marker(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testProducerStateAfterFencingAbortMarker: a transaction at 0 (epoch 0)
    aborted at 1 by a fencing marker (epoch 1): the transaction is closed (``.txnindex`` entry (1, 0, 1,
    2)) and the entry has no batch (last and first data offset -1); the producer stays."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, transactional=True)
    marker(log, ABORT, PID, 1, epoch=1)
    assert log.aborted_txns() == [(PID, 0, 1, 2)]
    last = producers(log)[PID]
    assert last.current_txn_first_offset == -1
    assert last.last_offset == -1
    assert last.last_offset - last.offset_delta == -1


def test_remove_expired_pids_on_reload(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRemoveExpiredPidsOnReload: batches at 0 and 1 (timestamps 0, 1), a
    snapshot at 2, a reload at log end 1 (which drops the snapshot), then sequence 2 at time 70001: one
    producer, last sequence 2.

    Kafka's manager has no log, appends at 2 and ends at 3; kafkalog truncates the partition to 1 and
    appends at its end, 1, so the log ends at 2."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, timestamp=0)
    data(log, PID, 1, sequence=1, timestamp=1)
    log.roll()
    assert snapshot_offsets(log) == [2]
    with log.writable() as writable:
        writable.truncate_to(1)
    assert snapshot_offsets(log) == []
    data(log, PID, 1, sequence=2, timestamp=70001)
    state = producers(log)
    assert list(state) == [PID]
    assert state[PID].last_sequence == 2
    assert log_end(log) == 2


def test_accept_append_without_producer_state_on_replica(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testAcceptAppendWithoutProducerStateOnReplica: once a reload left no
    state for the producer, a replica's batch at sequence 2 is taken: epoch 0, first and last sequence 2.

    Kafka's manager loses the producer with the out-of-range snapshot; a kafkalog partition rebuilds
    it from its batches, so it is truncated to 0 for the producer to be gone."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, timestamp=0)
    data(log, PID, 1, sequence=1, timestamp=1)
    log.roll()
    with log.writable() as writable:
        writable.truncate_to(0)
    assert PID not in producers(log)
    data(log, PID, 0, sequence=2, timestamp=70001)
    state = producers(log)[PID]
    assert state.producer_epoch == 0
    assert first_sequence(state.last_sequence, state.offset_delta) == 2
    assert state.last_sequence == 2


def test_truncate_and_reload_removes_out_of_range_snapshots(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testTruncateAndReloadRemovesOutOfRangeSnapshots: snapshots at 1–5, a
    reload for log start 1 and log end 3 keeps only 2 and 3 (those past the end and at or below the
    start go). Here a batch per segment gives the snapshots, retention moves the log start to 1 and the
    partition is truncated to 3, as ``UnifiedLog.truncateTo`` would, keeping the segment at 3 empty."""
    log = ScenarioLog(tmp_path)
    for offset in range(5):
        data(log, PID, offset, sequence=offset)
        log.roll()
    assert snapshot_offsets(log) == [1, 2, 3, 4, 5]
    with log.writable() as writable:
        writable.mark_segments_deleted(1, mark_time_ms=T0)
        assert writable.log_start_offset == 1
        writable.truncate_to(3)
    assert log_end(log) == 3
    assert snapshot_offsets(log) == [2, 3]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testTruncateFullyAndStartAt: snapshots at 2 and 3; truncating everything
    (to 0) removes both; a batch and a snapshot later there is one, at 1."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0)
    data(log, PID, 1, sequence=1)
    log.roll()
    assert snapshot_offsets(log) == [2]
    data(log, PID, 2, sequence=2)
    log.roll()
    assert snapshot_offsets(log) == [2, 3]
    with log.writable() as writable:
        writable.truncate_to(0)
    assert snapshot_offsets(log) == []
    assert producers(log) == {}
    data(log, PID, 0, sequence=0)
    log.roll()
    assert snapshot_offsets(log) == [1]


def test_load_from_snapshot_retains_non_expired_producers(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testLoadFromSnapshotRetainsNonExpiredProducers: producers 1 (offset 0)
    and 2 (offset 1), a snapshot, then the log start moves to 1: both producers stay (1 with last
    offset 0, 2 with last offset 1, both at sequence 0), and the next snapshot still holds both."""
    log = ScenarioLog(tmp_path)
    data(log, 1, 0, sequence=0)
    log.roll()
    data(log, 2, 1, sequence=0)
    log.roll()
    assert [e.producer_id for e in snapshot(log, 2)] == [1, 2]
    with log.writable() as writable:
        writable.mark_segments_deleted(1, mark_time_ms=T0)
        assert writable.log_start_offset == 1
    state = producers(log)
    assert sorted(state) == [1, 2]
    assert (state[1].last_sequence, state[1].last_offset) == (0, 0)
    assert (state[2].last_sequence, state[2].last_offset) == (0, 1)
    data(log, 3, 2, sequence=0)
    log.roll()
    assert [e.producer_id for e in snapshot(log, 3)] == [1, 2, 3]


def test_skip_snapshot_if_offset_unchanged(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testSkipSnapshotIfOffsetUnchanged: a second snapshot at the same offset
    (a roll with nothing appended since) writes no new file."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0, timestamp=0)
    log.roll()
    assert snapshot_offsets(log) == [1]
    before = names.snapshot_file(log.directory, 1).stat()
    log.roll()
    assert snapshot_offsets(log) == [1]
    assert names.snapshot_file(log.directory, 1).stat().st_mtime_ns == before.st_mtime_ns
    assert len(list(log.directory.glob("*.snapshot*"))) == 1


def test_pid_expiration_timeout(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testPidExpirationTimeout: a producer idle for longer than
    ``producer.id.expiration.ms`` (default one day) is expired; when it appends again (sequence 1 at
    offset 2) it is the one producer, last sequence 1, and the log ends at 3.

    kafkalog runs no expiration task; the snapshot taken at a roll after the expiration time is where
    Kafka's ``removeExpiredProducers`` shows, so it must hold no producer."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 1, epoch=5, sequence=0, timestamp=T0)
    log.clock_ms = T0 + DAY + 1
    log.roll()
    assert snapshot(log, 2) == []
    data(log, PID, 2, epoch=5, sequence=1, timestamp=T0 + DAY + 1)
    state = producers(log)
    assert list(state) == [PID]
    assert state[PID].last_sequence == 1
    assert log_end(log) == 3


def test_producers_with_ongoing_transactions_dont_expire(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testProducersWithOngoingTransactionsDontExpire: a producer with an open
    transaction (at 99) stays past ``producer.id.expiration.ms``, and so does the first unstable offset
    it holds; the snapshot at a later roll keeps it."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 99, epoch=5, transactional=True, timestamp=T0)
    assert first_unstable_offset(log) == 99
    log.clock_ms = T0 + DAY + 1
    log.roll()
    assert [(e.producer_id, e.current_txn_first_offset) for e in snapshot(log, 100)] == [(PID, 99)]
    assert PID in producers(log)
    assert first_unstable_offset(log) == 99


def test_coordinator_fencing(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testCoordinatorFencing: after a COMMIT from coordinator epoch 1 the
    entry's coordinator epoch is 1; markers at the same epoch and at a bumped one (2) are taken and
    the entry ends at 2. (Kafka then rejects a marker from the old epoch 1: the broker's check.)"""
    log = ScenarioLog(tmp_path)
    data(log, PID, 99, epoch=5, transactional=True)
    marker(log, COMMIT, PID, 100, epoch=5, coordinator_epoch=1)
    assert producers(log)[PID].coordinator_epoch == 1
    marker(log, COMMIT, PID, 101, epoch=5, coordinator_epoch=1)
    marker(log, COMMIT, PID, 102, epoch=5, coordinator_epoch=2)
    assert producers(log)[PID].coordinator_epoch == 2
    log.roll()
    assert [e.coordinator_epoch for e in snapshot(log, 103)] == [2]


def test_coordinator_fenced_after_reload(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testCoordinatorFencedAfterReload: the coordinator epoch (1) of the last
    marker survives a snapshot and a reload, which is what fences the old coordinator afterwards (the
    rejection itself is the broker's)."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 99, transactional=True)
    marker(log, COMMIT, PID, 100, coordinator_epoch=1)
    log.roll()
    assert [e.coordinator_epoch for e in snapshot(log, 101)] == [1]
    assert producers(log)[PID].coordinator_epoch == 1


def _load_from_corrupt_snapshot(tmp_path: Path, damage: str) -> None:
    """Kafka's ``testLoadFromCorruptSnapshot``: the newest snapshot is damaged; a reload deletes it and
    loads the one before. Here producer 1's only batch (offset 0) lies below the log start offset (1),
    so only the older snapshot (at 2) knows it; producer 2 is at 2, the damaged snapshot at 3."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0)
    log.append([(None, "x")])  # offset 1, no producer
    log.roll()
    data(log, 2, 2, sequence=0)
    log.roll()
    assert snapshot_offsets(log) == [2, 3]
    path = names.snapshot_file(log.directory, 3)
    size = path.stat().st_size
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    else:
        with open(path, "r+b") as f:
            f.write(bytes(37))
    start_checkpoint = log.log_dir / names.LOG_START_OFFSET_CHECKPOINT
    checkpoint.write_offset_checkpoint(start_checkpoint, {(log.topic, 0): 1})
    with log.writable() as writable:
        assert writable.log_start_offset == 1
        state = dict(writable.producer_state().producers)
    assert not path.exists()
    assert state[PID].last_offset == 0
    assert state[2].last_offset == 2


def test_load_from_empty_snapshot_file(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testLoadFromEmptySnapshotFile: the newest snapshot truncated to 0 bytes
    is deleted at load and producer state comes from the snapshot before it (last data offset 0)."""
    _load_from_corrupt_snapshot(tmp_path, "empty")


def test_load_from_truncated_snapshot_file(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testLoadFromTruncatedSnapshotFile: the newest snapshot cut in half is
    deleted at load and producer state comes from the snapshot before it (last data offset 0)."""
    _load_from_corrupt_snapshot(tmp_path, "truncated")


def test_load_from_corrupt_snapshot_file(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testLoadFromCorruptSnapshotFile: the newest snapshot with 37 zero bytes
    written over its start is deleted at load and producer state comes from the snapshot before it."""
    _load_from_corrupt_snapshot(tmp_path, "garbage")


def _segment_with_snapshots(log: ScenarioLog, base: int, snapshot_at: list[int]) -> None:
    """Replace the partition's files by one segment at ``base`` (a batch at that offset) and empty
    snapshot files at ``snapshot_at``, as Kafka's test creates them."""
    for path in log.directory.glob("0000*"):
        path.unlink()
    segment = LogSegment(log.directory, base)
    segment.append(base, T0, base, fmt.build_batch([fmt.Record(base, T0, b"k", b"v")], partition_leader_epoch=0))
    segment.on_become_inactive()
    segment.close()
    for offset in snapshot_at:
        names.snapshot_file(log.directory, offset).touch()
    checkpoint.write_offset_checkpoint(log.log_dir / names.LOG_START_OFFSET_CHECKPOINT, {(log.topic, 0): base})


def test_remove_stray_snapshots_keep_clean_shutdown_snapshot(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRemoveStraySnapshotsKeepCleanShutdownSnapshot: with one segment, at
    5, and snapshots at 2, 5 and 42, the stray at 2 goes; 5 (a segment's) and 42 (the newest, past the
    last segment's base, as a clean shutdown leaves it) stay: ``names.stray_snapshot_offsets`` is
    ``removeStraySnapshots``'s choice. Kafka's test calls that step alone. A writable open is Kafka's
    whole load, which goes on (``truncateAndReload``) to delete 42, past the log end (6), unread; 5,
    at the log start offset, is never read either (Kafka's load deletes it, kafkalog's keeps it)."""
    log = ScenarioLog(tmp_path)
    _segment_with_snapshots(log, 5, [5, 2, 42])
    assert names.stray_snapshot_offsets([5, 2, 42], {5}) == [2]
    with log.writable() as writable:
        assert [s.base_offset for s in writable.segments] == [5]
        assert [n for n in writable.load_report.notes if "snapshot" in n] == [
            "stray producer snapshot 00000000000000000002.snapshot removed",
            "producer snapshot 00000000000000000042.snapshot past the log end removed"]
    assert not {2, 42} & set(snapshot_offsets(log))


def test_remove_all_stray_snapshots(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRemoveAllStraySnapshots: with one segment, at 42, the snapshots at
    2 and 5 are strays below it and go; 42 stays (``removeStraySnapshots`` alone, as Kafka's test calls
    it, and a writable open, kafkalog's whole load, which never reads 42: it is at the log start
    offset, which Kafka's load deletes)."""
    log = ScenarioLog(tmp_path)
    _segment_with_snapshots(log, 42, [5, 2, 42])
    assert names.stray_snapshot_offsets([5, 2, 42], {42}) == [2, 5]
    with log.writable() as writable:
        assert [n for n in writable.load_report.notes if "snapshot" in n] == [
            "stray producer snapshot 00000000000000000002.snapshot removed",
            "stray producer snapshot 00000000000000000005.snapshot removed"]
    assert not {2, 5} & set(snapshot_offsets(log))


def test_remove_and_mark_snapshot_for_deletion(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRemoveAndMarkSnapshotForDeletion: deleting the segment at 5 renames
    its snapshot to ``.snapshot.deleted`` and it no longer counts as a snapshot. (Kafka's test has no
    other snapshot; here the active segment's, at 10, remains.)"""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0)
    log.roll(5)
    data(log, PID, 5, sequence=1)
    log.roll(10)
    assert snapshot_offsets(log) == [5, 10]
    with log.writable() as writable:
        marked = writable.mark_segments_deleted(2, mark_time_ms=T0)
    deleted = Path(str(names.snapshot_file(log.directory, 5)) + names.DELETED_SUFFIX)
    assert deleted in marked
    assert deleted.exists()
    assert snapshot_offsets(log) == [10]


def test_remove_and_mark_snapshot_for_deletion_already_deleted(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testRemoveAndMarkSnapshotForDeletionAlreadyDeleted: a segment whose
    snapshot file is already gone is deleted without error, and no ``.snapshot.deleted`` appears."""
    log = ScenarioLog(tmp_path)
    data(log, PID, 0, sequence=0)
    log.roll(5)
    data(log, PID, 5, sequence=1)
    log.roll(10)
    names.snapshot_file(log.directory, 5).unlink()
    with log.writable() as writable:
        marked = writable.mark_segments_deleted(2, mark_time_ms=T0)
    assert not any(p.name.startswith(names.offset_prefix(5) + names.SNAPSHOT_SUFFIX) for p in marked)
    assert not list(log.directory.glob(names.offset_prefix(5) + ".snapshot*"))
    assert snapshot_offsets(log) == [10]


def test_read_write_snapshot(tmp_path: Path) -> None:
    """ProducerStateManagerTest.testReadWriteSnapshot: two entries written and read back alike: pid 1
    (epoch 2, coordinator epoch 3, transaction at 100, batch sequence 1 / offset 2 / delta 3, no
    timestamp) and pid 11 (epoch 12, coordinator epoch 13, timestamp 123456, no batch). The file is
    the bytes Kafka writes, and ``kafka-dump-log`` prints it as Kafka does."""
    entries = [entry(1, 2, 1, 2, 3, NO_TIMESTAMP, coordinator_epoch=3, txn_first=100),
               entry(11, 12, -1, -1, 0, 123456, coordinator_epoch=13)]
    path = tmp_path / "00000000000000000000.snapshot"
    write_producer_snapshot(path, entries)
    assert read_producer_snapshot(path) == entries
    assert path.read_bytes() == encode_snapshot(entries)
    assert decode_snapshot(path) == entries
    log = ScenarioLog(tmp_path / "log")
    assert dump_lines(path, log) == [
        "producerId: 1 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[100] "
        f"lastTimestamp: -1 firstSequence: {MAX_INT - 1} lastSequence: 1 lastOffset: 2 offsetDelta: 3 timestamp: -1",
        "producerId: 11 producerEpoch: 12 coordinatorEpoch: 13 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 123456 "]
