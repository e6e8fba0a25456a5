"""Helpers of the UnifiedLogTest, LogLoaderTest and LocalLogTest ports (``test_unified_log*.py``,
``test_log_loader.py``, ``test_kafka_local_log.py``), on top of the harness in ``kafka_log.py``.

Kafka's tests drive a ``UnifiedLog`` object with a mock clock; here a partition is driven through the
CLI where a surface exists (``retention apply``/``sweep``, ``recover``, ``consume``, ``status``,
``verify``) and through ``LocalLog`` (one writable open, appends with an explicit clock) where none
does. What an operator or a Kafka broker would set by hand is written as they would write it: the log
start offset (``deleteRecords``) into ``log-start-offset-checkpoint``, the high watermark into
``replication-offset-checkpoint``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

from kafka_log import MAX_INT, ScenarioLog

from kafkalog.format.batch import ControlType, Record, build_batch, end_txn_marker_batch
from kafkalog.format.compression import CompressionType
from kafkalog.log import checkpoint, names
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_snapshot import ProducerSnapshotEntry, read_producer_snapshot

NO_TIMESTAMP = -1


def kbatch(offset: int, value: bytes | None = b"test", key: bytes | None = None, *, ts: int = NO_TIMESTAMP,
           epoch: int = 0, codec: CompressionType = CompressionType.NONE, producer_id: int = -1,
           producer_epoch: int = -1, sequence: int = -1, transactional: bool = False) -> bytes:
    """One v2 batch of one record at ``offset`` (Kafka's ``TestUtils.singletonRecords``: no key and no
    timestamp unless given, leader epoch 0)."""
    return build_batch([Record(offset, ts, key, value)], compression_type=codec, partition_leader_epoch=epoch,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence,
                       is_transactional=transactional)


def kbatch_of(offset: int, values: Sequence[bytes | None], *, ts: int = NO_TIMESTAMP, keys: Sequence[bytes | None]
              | None = None, codec: CompressionType = CompressionType.NONE, **kw: int | bool) -> bytes:
    """One v2 batch of several records from ``offset`` on (``MemoryRecords.withRecords``)."""
    keys = keys if keys is not None else [None] * len(values)
    records = [Record(offset + i, ts, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return build_batch(records, compression_type=codec, partition_leader_epoch=0,
                       producer_id=int(kw.get("producer_id", -1)), producer_epoch=int(kw.get("producer_epoch", -1)),
                       base_sequence=int(kw.get("sequence", -1)), is_transactional=bool(kw.get("transactional", False)))


SINGLETON_BYTES = len(kbatch(0))  # 72: Kafka's singletonRecords("test".getBytes).sizeInBytes


def wall_ms() -> int:
    return int(time.time() * 1000)


@contextmanager
def one_log(log: ScenarioLog) -> Iterator[LocalLog]:
    """Kafka's test keeps one ``UnifiedLog`` object across its steps. Each ``ScenarioLog`` step opens the
    partition and closes it again, a broker stopping and starting in between, and a start (Kafka's
    load, and kafkalog's) reads no producer snapshot at or below the log start offset: the state the
    running log held for producers below it is gone. Inside this block every step goes to
    one writable open of the partition instead, as Kafka's test runs; a CLI step (another process)
    would wait for its lock."""
    with log.writable() as local:
        log.writable = lambda: nullcontext(local)  # type: ignore[method-assign]
        try:
            yield local
        finally:
            del log.writable


def append_raw(log: ScenarioLog, raws: Iterable[bytes], *, now_ms: int | None = None) -> LocalLog:
    """Append whole batches in one writable open of the partition (one ``UnifiedLog`` object across
    the appends: the segment's index byte counter and roll clock carry over from one to the next)."""
    with log.writable() as local:
        for raw in raws:
            local.append_batch(raw, now_ms=wall_ms() if now_ms is None else now_ms)
    return local


def append_singletons(log: ScenarioLog, count: int, value: bytes = b"test", *, ts: int = NO_TIMESTAMP,
                      key: bytes | None = None, epoch: int = 0) -> None:
    """``count`` times ``appendAsLeader(singletonRecords(value))``, in one open."""
    with log.writable() as local:
        for _ in range(count):
            local.append_batch(kbatch(local.log_end_offset, value, key, ts=ts, epoch=epoch), now_ms=max(ts, 0))


def txn_marker(kind: ControlType, offset: int, producer_id: int, *, epoch: int = 0, coordinator_epoch: int = 0,
               ts: int = 0) -> bytes:
    return end_txn_marker_batch(kind, offset=offset, timestamp=ts, producer_id=producer_id, producer_epoch=epoch,
                                coordinator_epoch=coordinator_epoch, partition_leader_epoch=0)


# --- Kafka's mixed transactional scenario (testTransactionIndexUpdated, testFullTransactionIndexRecovery) ----
class TxnAppender:
    """``LogTestUtils.appendTransactionalAsLeader``/``appendNonTransactionalAsLeader``/
    ``appendEndTxnMarkerAsLeader`` over one writable open: sequences kept per producer."""

    def __init__(self, local: LocalLog, epoch: int = 0) -> None:
        self.local = local
        self.epoch = epoch
        self.sequences: dict[int, int] = {}

    def txn(self, producer_id: int, count: int) -> None:
        seq = self.sequences.get(producer_id, 0)
        self.local.append_batch(kbatch_of(self.local.log_end_offset, [str(seq + i).encode() for i in range(count)],
                                          producer_id=producer_id, producer_epoch=self.epoch, sequence=seq,
                                          transactional=True), now_ms=0)
        self.sequences[producer_id] = seq + count

    def plain(self, count: int) -> None:
        self.local.append_batch(kbatch_of(self.local.log_end_offset, [str(i).encode() for i in range(count)]),
                                now_ms=0)

    def end(self, producer_id: int, kind: ControlType, *, coordinator_epoch: int = 0) -> None:
        self.local.append_batch(txn_marker(kind, self.local.log_end_offset, producer_id, epoch=self.epoch,
                                           coordinator_epoch=coordinator_epoch), now_ms=0)


def four_producer_scenario(log: ScenarioLog) -> None:
    """The 90-offset mix of four transactional producers and plain data Kafka's tests share: pid 1
    aborts [0, 29], pid 3 commits at 58, pid 2 aborts [8, 74], pid 4 commits at 89."""
    with log.writable() as local:
        a = TxnAppender(local)
        a.txn(1, 5)  # 0-4
        a.plain(3)  # 5-7
        a.txn(2, 2)  # 8-9
        a.txn(1, 4)  # 10-13
        a.txn(3, 3)  # 14-16
        a.plain(2)  # 17-18
        a.txn(1, 10)  # 19-28
        a.end(1, ControlType.ABORT)  # 29
        a.txn(2, 6)  # 30-35
        a.txn(4, 3)  # 36-38
        a.plain(10)  # 39-48
        a.txn(3, 9)  # 49-57
        a.end(3, ControlType.COMMIT)  # 58
        a.txn(4, 8)  # 59-66
        a.txn(2, 7)  # 67-73
        a.end(2, ControlType.ABORT)  # 74
        a.plain(10)  # 75-84
        a.txn(4, 4)  # 85-88
        a.end(4, ControlType.COMMIT)  # 89


FOUR_PRODUCER_ABORTED = [(1, 0, 29, 8), (2, 8, 74, 36)]  # (pid, first, last, last stable offset)


# --- a log written by an old broker, with offsets past a segment's 2^31 - 1 range --------------------------
def _overflow_batches(base: int) -> tuple[list[bytes], int]:
    """``writeSampleBatches``: batches at base, base+1..base+2 and base + Int.MaxValue - 1 (keys and
    values the offsets); returns them and base + Int.MaxValue."""
    def batch(offsets: list[int]) -> bytes:
        return build_batch([Record(o, -1, str(o).encode(), str(o).encode()) for o in offsets],
                           partition_leader_epoch=0)
    return [batch([base]), batch([base + 1, base + 2]), batch([base + MAX_INT - 1])], base + MAX_INT


def log_with_offset_overflow(tmp_path: Path) -> tuple[ScenarioLog, list[int], list[tuple[int, list[bytes]]]]:
    """``LogTestUtils.initializeLogDirWithOverflowedSegment``: three segments, the second holding offsets
    more than Int.MaxValue past its base (written by an old broker). Returns the log, every key, and
    the segments Kafka's split of the second one makes (base, batches)."""
    log = ScenarioLog(tmp_path, index_interval_bytes=1, file_delete_delay_ms=1000)
    for path in log.directory.glob("0*"):
        path.unlink()
    first, after_first = _overflow_batches(0)
    second_a, middle = _overflow_batches(after_first)
    second_b, after_second = _overflow_batches(middle)
    third, _ = _overflow_batches(after_second)
    for base, batches in ((0, first), (after_first, second_a + second_b), (after_second, third)):
        names.log_file(log.directory, base).write_bytes(b"".join(batches))
        names.index_file(log.directory, base).touch()
        names.time_index_file(log.directory, base).touch()
    keys = [int(r.key) for r in log.records()]
    # Kafka's split: each new segment starts at its first batch and takes batches while they fit.
    split = [(after_first, second_a + second_b[:1]), (middle + 1, second_b[1:])]
    return log, keys, split


def has_offset_overflow(log: ScenarioLog) -> bool:
    return any(b.last_offset - b.segment > MAX_INT or b.base_offset < b.segment for b in log.batches())



# --- surfaces ----------------------------------------------------------------------------------------
def retention(log: ScenarioLog, now_ms: int, action: str = "apply") -> dict[str, object]:
    """``kafkalog retention plan|apply --now-ms NOW --json``: the partition's plan entry, with the
    ``applied`` entry (segments marked) merged in under ``applied``."""
    doc = json.loads(log.cli("retention", action, "--log-dir", str(log.log_dir), "--now-ms", str(now_ms),
                             "--topic", log.topic, "--json").out)
    assert not doc["errors"], doc["errors"]
    part = dict(doc["partitions"][0])
    applied = doc.get("applied") or []
    part["applied"] = applied[0]["segments"] if applied else []
    return part


def sweep(log: ScenarioLog) -> dict[str, object]:
    """``kafkalog retention sweep --json``."""
    return json.loads(log.cli("retention", "sweep", "--log-dir", str(log.log_dir), "--json").out)


def age_deleted_files(log: ScenarioLog, by_ms: int) -> None:
    """Move the mark time of every ``.deleted`` file ``by_ms`` into the past (the wall clock passing)."""
    for path in log.directory.glob("*" + names.DELETED_SUFFIX):
        stamp = path.stat().st_mtime_ns - by_ms * 1_000_000
        os.utime(path, ns=(stamp, stamp))


def status(log: ScenarioLog, now_ms: int) -> dict[str, object]:
    doc = json.loads(log.cli("status", "--log-dir", str(log.log_dir), "--now-ms", str(now_ms), "--json").out)
    return next(p for p in doc["partitions"] if p["topic"] == log.topic)


def consume(log: ScenarioLog, from_offset: int = 0, max_records: int | None = None) -> list[tuple[int, str, str]]:
    """``kafkalog consume --print-offset``: (offset, key, value) per record, ``null`` for a null."""
    args = ["consume", "--log-dir", str(log.log_dir), "--topic", log.topic, "--partition", "0", "--print-offset",
            "--from-offset", str(from_offset)]
    if max_records is not None:
        args += ["--max-records", str(max_records)]
    out = []
    for line in log.cli(*args).out.splitlines():
        offset, key, value = line.split("\t")
        out.append((int(offset), key, value))
    return out


def set_log_start_offset(log: ScenarioLog, offset: int) -> None:
    """``maybeIncrementLogStartOffset(offset, ClientRecordDeletion)`` as an operator does it here: the
    partition's entry in ``log-start-offset-checkpoint``."""
    path = log.log_dir / names.LOG_START_OFFSET_CHECKPOINT
    entries = checkpoint.read_offset_checkpoint(path)
    entries[(log.topic, 0)] = offset
    checkpoint.write_offset_checkpoint(path, entries)


def set_high_watermark(log: ScenarioLog, offset: int) -> None:
    """``updateHighWatermark(offset)``: the partition's entry in ``replication-offset-checkpoint``."""
    path = log.log_dir / names.REPLICATION_OFFSET_CHECKPOINT
    entries = checkpoint.read_offset_checkpoint(path)
    entries[(log.topic, 0)] = offset
    checkpoint.write_offset_checkpoint(path, entries)


def recovery_point(log: ScenarioLog) -> int | None:
    return checkpoint.read_offset_checkpoint(log.log_dir / names.RECOVERY_POINT_CHECKPOINT).get((log.topic, 0))


def checkpointed_log_start(log: ScenarioLog) -> int | None:
    return checkpoint.read_offset_checkpoint(log.log_dir / names.LOG_START_OFFSET_CHECKPOINT).get((log.topic, 0))


def leader_epochs(log: ScenarioLog) -> list[tuple[int, int]]:
    return checkpoint.read_leader_epoch_checkpoint(log.directory / names.LEADER_EPOCH_CHECKPOINT)


def snapshot_offsets(log: ScenarioLog) -> list[int]:
    """``ProducerStateManager.listSnapshotFiles`` offsets (live ``.snapshot`` files only)."""
    return sorted(names.offset_from_file_name(p.name) for p in log.directory.glob("*" + names.SNAPSHOT_SUFFIX))


def snapshot_entries(log: ScenarioLog, offset: int) -> list[ProducerSnapshotEntry]:
    return read_producer_snapshot(names.snapshot_file(log.directory, offset))


def read_only(log: ScenarioLog) -> LocalLog:
    """The partition as a reader opens it (log start offset from its checkpoint)."""
    return log.store.open_log(log.location, read_only=True)


def producers(log: ScenarioLog) -> dict[int, ProducerSnapshotEntry]:
    """``activeProducers``: producer state at the log end, as the partition loads it now."""
    return dict(read_only(log).producer_state().producers)


def files(log: ScenarioLog, suffix: str = "") -> list[str]:
    return sorted(p.name for p in log.directory.iterdir() if p.name.endswith(suffix) and not p.name.startswith("."))
