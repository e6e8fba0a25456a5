"""Helpers of the cleaner tests (``test_cleaner.py``, ``test_cleaner_legacy.py``, ``test_cleaning_tasks.py``):
the clock (``T0``, ``DAY``) and the broker config (``BROKER``: producers never expire) their stores are
made with, building a compacted partition (``new_store``) and appending plain records, producer batches and
transaction markers to it (``put``, ``produce``, ``marker``, ``mixed_log``), one cleaning round over a
range (``clean``, Kafka's ``cleaner.doClean``), and reading it back: batches and records (``read_log``),
the latest value per key, the digest of the live files and the cleaner checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from conftest import tree_digest

from kafkalog.format import batch as fmt
from kafkalog.format.batch import ControlType, Record, build_batch, end_txn_marker_batch
from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log import checkpoint, names
from kafkalog.log.config import BrokerConfig
from kafkalog.log.local_log import LocalLog
from kafkalog.log.store import LogStore, PartitionLocation
from kafkalog.maintenance.cleaner import CleanResult, clean_partition

T0 = 1_700_000_000_000
MIN, HOUR, DAY = 60_000, 3_600_000, 86_400_000
MAX_INT = 2**31 - 1
Row = tuple[str | None, str | None]  # (key, value); None value = tombstone, None key = unkeyed


# --- building logs ----------------------------------------------------------------------------------


# Kafka's LogCleanerTest runs on a clock that stands still, so its producers never expire; these
# rounds run at clocks up to a few days after T0, so the broker keeps idle producers for the longest
# producer.id.expiration.ms there is (about 24.8 days).
BROKER = BrokerConfig.from_properties({"producer.id.expiration.ms": str(MAX_INT)})


def new_store(tmp_path: Path, topic: str = "t", **overrides: str) -> tuple[LogStore, PartitionLocation]:
    store = LogStore([tmp_path], BROKER, create_missing=True)
    configs = {"cleanup.policy": "compact", "delete.retention.ms": str(DAY)}
    configs.update({k.replace("_", "."): v for k, v in overrides.items()})
    store.create_topic(topic, 1, configs)
    return store, store.locate(topic, 0)


def _b(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def put(log: LocalLog, rows: Sequence[Row], *, ts: int = T0, batch_records: int = 1,
        compression: CompressionType | None = None,
        headers: tuple[tuple[str, bytes | None], ...] = ()) -> None:
    """Plain (non-producer) records; record i gets timestamp ``ts + i``."""
    log.append_records([(_b(k), _b(v), headers, ts + i) for i, (k, v) in enumerate(rows)],
                       batch_records=batch_records, compression=compression, now_ms=T0)


def produce(log: LocalLog, pid: int, seq: int, rows: Sequence[Row], *, transactional: bool,
            epoch: int = 0, ts: int = T0) -> None:
    """One idempotent or transactional batch of ``rows`` from producer ``pid`` at the log end."""
    base = log.log_end_offset
    records = [Record(base + i, ts + i, _b(k), _b(v)) for i, (k, v) in enumerate(rows)]
    log.append_batch(build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=transactional, partition_leader_epoch=0), now_ms=T0)


def marker(log: LocalLog, kind: ControlType, pid: int, *, epoch: int = 0, ts: int = T0) -> None:
    log.append_batch(end_txn_marker_batch(kind, offset=log.log_end_offset, timestamp=ts, producer_id=pid,
                                          producer_epoch=epoch, coordinator_epoch=0,
                                          partition_leader_epoch=0), now_ms=T0)


def clean(store: LogStore, loc: PartitionLocation, first_dirty: int = 0, upper: int | None = None, *,
          now: int = T0, wall: int | None = None) -> CleanResult:
    """``cleaner.doClean(LogToClean(tp, log, firstDirty, activeSegment.baseOffset), now)``."""
    if upper is None:
        upper = store.open_log(loc, read_only=True).active_segment.base_offset
    return clean_partition(store, loc, first_dirty, upper, now_ms=now, wall_now_ms=now if wall is None else wall)


# --- reading logs back ------------------------------------------------------------------------------


class Batch(NamedTuple):
    segment: int
    base: int
    last: int
    count: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    pid: int
    epoch: int
    seq: int
    size: int
    raw: bytes

    @property
    def control(self) -> bool:
        return bool(self.attributes & fmt.CONTROL_MASK)

    @property
    def horizon(self) -> int | None:
        return self.base_timestamp if self.attributes & fmt.DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self) -> int:
        return fmt.increment_sequence(self.seq, self.last - self.base) if self.seq >= 0 else -1


class Rec(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    control: bool


def read_log(store: LogStore, loc: PartitionLocation) -> tuple[list[Batch], list[Rec]]:
    log = store.open_log(loc, read_only=True)
    batches: list[Batch] = []
    records: list[Rec] = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        cols = scan_batches(data)
        assert cols.valid_end == len(data), f"{segment.log_path}: torn tail"
        recs = scan_records(data, cols)
        for b in range(len(cols)):
            pos, size = int(cols.position[b]), int(cols.size[b])
            batches.append(Batch(segment.base_offset, int(cols.base_offset[b]), int(cols.last_offset[b]),
                                 int(cols.records_count[b]), int(cols.attributes[b]), int(cols.base_timestamp[b]),
                                 int(cols.max_timestamp[b]), int(cols.producer_id[b]), int(cols.producer_epoch[b]),
                                 int(cols.base_sequence[b]), size, data[pos:pos + size]))
        for r in range(len(recs)):
            b = int(recs.batch_index[r])
            records.append(Rec(int(recs.offset[r]), recs.key(r), recs.value(r), int(recs.timestamp[r]),
                               bool(cols.attributes[b] & fmt.CONTROL_MASK)))
    return batches, records


def latest_values(records: Sequence[Rec]) -> dict[bytes, bytes | None]:
    """Key → value of its last record (None for a tombstone), data records only."""
    out: dict[bytes, bytes | None] = {}
    for r in records:
        if not r.control and r.key is not None:
            out[r.key] = r.value
    return out


def live_digest(log_dir: Path) -> dict[str, str]:
    """sha256 of every file of the log dir except the journal, checkpoints and ``.deleted`` leftovers."""
    skip = {names.JOURNAL_FILE, names.CLEANER_OFFSET_CHECKPOINT, names.RECOVERY_POINT_CHECKPOINT,
            names.LOG_START_OFFSET_CHECKPOINT}
    return {k: v for k, v in tree_digest(log_dir).items()
            if Path(k).name not in skip and not k.endswith(names.DELETED_SUFFIX)}


def cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    return checkpoint.read_offset_checkpoint(log_dir / names.CLEANER_OFFSET_CHECKPOINT)


def mixed_log(store: LogStore, loc: PartitionLocation) -> None:
    """Plain, compressed, tombstones, idempotent, committed and aborted transactional batches."""
    rng = random.Random(3)
    with store.writable_log(loc) as log:
        for n, codec in enumerate(CompressionType):
            put(log, [(f"k{rng.randrange(30)}", None if rng.random() < 0.1 else f"v{n}-{i}") for i in range(20)],
                batch_records=rng.choice([1, 4, 7]), compression=codec)
            produce(log, 7, 10 * n, [(f"k{rng.randrange(30)}", f"idem{n}")], transactional=False)
            produce(log, 8, 10 * n, [(f"k{rng.randrange(30)}", f"txn{n}")], transactional=True)
            marker(log, ControlType.ABORT if n % 2 else ControlType.COMMIT, 8)
            log.roll(now_ms=T0)
        put(log, [("k0", "active")])
