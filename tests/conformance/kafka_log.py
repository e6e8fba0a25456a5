"""The harness Kafka's scenarios are ported on: a partition built the way Kafka's tests build theirs
(``appendAsLeader``, transactional appends, markers, ``roll``), driven through the surfaces users run
(the ``kafkalog`` CLI, and the Spark job's tasks for compaction), and read back from the files with
kafka-python, an implementation independent of kafkalog.

Kafka's tests call ``cleaner.doClean(LogToClean(tp, log, firstDirty, upper), now)``. Through the CLI a
round is ``kafkalog compact --topic T --now-ms NOW`` (whatever the dirty ratio); its first dirty offset
is the cleaner checkpoint, which :meth:`ScenarioLog.set_first_dirty` writes as an operator could, and
its upper bound the cleanable range's (active segment base, last stable offset, compaction lag).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import CliResult, run_cli
from kafka.record import MemoryRecords

from kafkalog.format.batch import ControlType, Record, build_batch, end_txn_marker_batch
from kafkalog.format.compression import CompressionType
from kafkalog.log import checkpoint, names
from kafkalog.log.config import BrokerConfig
from kafkalog.log.local_log import LocalLog
from kafkalog.log.store import LogStore, PartitionLocation

T0 = 1_700_000_000_000
MIN, HOUR, DAY = 60_000, 3_600_000, 86_400_000
MAX_INT = 2**31 - 1
EMPTY_BATCH_BYTES = 61  # a batch header with no records (Kafka's RETAIN_EMPTY)
_DELETE_HORIZON_FLAG = 0x40


@dataclass(frozen=True)
class PeerBatch:
    """One batch as kafka-python reads it (CRC checked)."""

    segment: int  # base offset of the segment file holding it
    base_offset: int
    last_offset: int
    records: int
    control: bool
    transactional: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    size: int
    delete_horizon_ms: int | None


@dataclass(frozen=True)
class PeerRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    control: bool


class ScenarioLog:
    """One partition (``topic-0`` unless ``other_partition`` says) of a topic in its own log dir, created
    through ``kafkalog topics create``."""

    def __init__(self, log_dir: Path, topic: str = "t", *, partitions: int = 1,
                 broker: dict[str, str | int] | None = None, **configs: str | int) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.topic = topic
        self.partition = 0  # the one this object reads and writes (``other_partition``)
        self.clock_ms = T0  # the timestamp of the next appended record unless one is given
        self.broker_file: Path | None = None
        self.store = LogStore([self.log_dir])
        if broker:
            self.set_broker(**broker)
        args = ["topics", "create", "--log-dir", str(self.log_dir), "--topic", topic,
                "--partitions", str(partitions)]
        for key, value in configs.items():
            args += ["--config", f"{key.replace('_', '.')}={value}"]
        self.cli(*args)

    def other_partition(self, partition: int) -> ScenarioLog:
        """The same topic's partition ``partition`` (created with ``partitions=``), on the same store."""
        other = copy.copy(self)
        other.partition = partition
        return other

    def set_broker(self, **props: str | int) -> None:
        """Broker settings (``server.properties`` beside the log dir, ``producer_id_expiration_ms`` for
        ``producer.id.expiration.ms``) for every surface from here on."""
        self.broker_file = self.log_dir.parent / f"{self.log_dir.name}-server.properties"
        self.broker_file.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in props.items()))
        self.store = LogStore([self.log_dir], broker=BrokerConfig.load(self.broker_file))

    # --- surfaces -------------------------------------------------------------------------------
    def cli(self, *args: str, ok: bool = True) -> CliResult:
        """``kafkalog ARGS`` (with the broker file, if set); with ``ok`` (the default) it must exit 0."""
        result = run_cli(*args, *(("--config-file", str(self.broker_file)) if self.broker_file else ()))
        if ok:
            assert result.code == 0, f"kafkalog {' '.join(args)} exited {result.code}: {result.err}"
        return result

    def compact(self, now_ms: int, *, wall_now_ms: int | None = None, ok: bool = True,
                surface: str = "cli") -> dict[str, object]:
        """One cleaning round of the topic through ``kafkalog compact --topic`` (its JSON report), or
        with ``surface="spark-tasks"`` through the Spark job's tasks (``spark_tasks_round``)."""
        if surface == "spark-tasks":
            return self.spark_tasks_round(now_ms, wall_now_ms=now_ms if wall_now_ms is None else wall_now_ms)
        assert surface == "cli", surface
        result = self.cli("compact", "--log-dir", str(self.log_dir), "--topic", self.topic, "--now-ms", str(now_ms),
                          "--wall-now-ms", str(now_ms if wall_now_ms is None else wall_now_ms), "--json", ok=ok)
        return json.loads(result.out) if result.out.strip() else {}

    def clean(self, now_ms: int, first_dirty: int = 0, *, wall_now_ms: int | None = None,
              surface: str = "cli") -> dict[str, object]:
        """Kafka's ``cleaner.doClean(LogToClean(tp, log, first_dirty, <cleanable end>), now)``."""
        self.set_first_dirty(first_dirty)
        return self.compact(now_ms, wall_now_ms=wall_now_ms, surface=surface)

    def two_pass_clean(self, now_ms: int = T0, first_dirty: int = 0, *, surface: str = "cli") -> None:
        """Kafka's ``runTwoPassClean``: clean, then clean again once the delete horizon has passed."""
        self.clean(now_ms, first_dirty, surface=surface)
        self.clean(now_ms + self.delete_retention_ms + 1, first_dirty, surface=surface)

    def spark_tasks_round(self, now_ms: int, *, wall_now_ms: int, parts: int = 2) -> dict[str, object]:
        """The round ``spark_jobs/compact_logs.py`` runs for this topic, its tasks run here in turn as
        Spark would run them on a cluster: the plan, the cleaner lock, the key map in ``parts`` parts
        (again whole if they hold more keys than the dedupe buffer's map), one task per group (the
        split round, where groups are written apart from each other), then the driver's commit.
        Returns ``{"cleaned": [{"end_offset": ...}]}`` like the CLI."""
        from kafkalog.cycle.compaction import apply_checkpoint_resets, plan_compaction
        from kafkalog.log.lock import cleaner_lock
        from kafkalog.maintenance import cleaning_tasks as tasks

        plan = plan_compaction(self.store, now_ms=now_ms, topic=self.topic)
        assert not plan.errors, plan.errors
        apply_checkpoint_resets(self.store, plan)
        cleaned = []
        for target in plan.selected:
            location = self.store.locate(target.topic, target.partition)
            with cleaner_lock(location.directory, timeout_s=0):
                try:
                    spec, ctx = tasks.plan_round(self.store, location, target.first_dirty_offset,
                                                 target.first_uncleanable_offset, now_ms=now_ms,
                                                 wall_now_ms=wall_now_ms, parts=parts)
                    spec = tasks.RoundSpec.from_dict(json.loads(json.dumps(spec.to_dict())))  # as a task gets it
                    scratch = self.log_dir.parent / f"{self.log_dir.name}-spark-scratch"
                    maps = [tasks.map_part_task(self.store, spec, p, scratch / f"map-{p}") for p in range(parts)]
                    if not tasks.keys_fit(ctx, [m["stats"] for m in maps]):  # more keys than a whole map holds
                        spec = dataclasses.replace(spec, parts=1)
                        maps = [tasks.map_part_task(self.store, spec, 0, scratch / "map-whole")]
                    spec = tasks.settled(ctx, spec, maps[0]["end_offset"])
                    prefixes = [m["prefix"] for m in maps]
                    states = tasks.group_txn_states(ctx, spec, maps)
                    groups = [tasks.write_group_task(self.store, spec, i, prefixes, state, f"attempt-{i}")
                              for i, state in enumerate(states)]
                    result = tasks.commit_round(ctx, spec, groups, [m["stats"] for m in maps], run_id="spark-tasks")
                finally:
                    tasks.discard_attempts(location)
            cleaned.append({"topic": result.topic, "partition": result.partition, "end_offset": result.end_offset})
        return {"cleaned": cleaned}

    def set_first_dirty(self, offset: int) -> None:
        """Write ``offset`` as this partition's cleaner checkpoint (where the next round starts)."""
        path = self.log_dir / names.CLEANER_OFFSET_CHECKPOINT
        entries = checkpoint.read_offset_checkpoint(path)
        entries[(self.topic, self.partition)] = offset
        checkpoint.write_offset_checkpoint(path, entries)

    def recover(self, *, full: bool = False) -> dict[str, object]:
        args = ["recover", "--log-dir", str(self.log_dir), "--json"] + (["--full"] if full else [])
        return json.loads(self.cli(*args).out)

    def verify(self) -> CliResult:
        """``kafkalog verify`` (whatever its exit code)."""
        return self.cli("verify", "--log-dir", str(self.log_dir), ok=False)

    # --- writing, as Kafka's tests do ----------------------------------------------------------------
    @property
    def location(self) -> PartitionLocation:
        return self.store.locate(self.topic, self.partition)

    @property
    def directory(self) -> Path:
        return self.location.directory

    @property
    def delete_retention_ms(self) -> int:
        return self.store.log_config(self.topic).delete_retention_ms

    @contextmanager
    def writable(self) -> Iterator[LocalLog]:
        with self.store.writable_log(self.location) as log:
            yield log

    def _timestamp(self, timestamp: int | None) -> int:
        if timestamp is None:
            timestamp, self.clock_ms = self.clock_ms, self.clock_ms + 1
        return timestamp

    def append(self, rows: Sequence[tuple[str | bytes | None, str | bytes | None]], *, timestamp: int | None = None,
               codec: CompressionType = CompressionType.NONE, producer_id: int = -1, producer_epoch: int = 0,
               base_sequence: int = -1, transactional: bool = False, base_offset: int | None = None,
               leader_epoch: int = 0) -> tuple[int, int]:
        """One batch of ``(key, value)`` rows at the log end (or at ``base_offset``, beyond it, as a
        follower may append); a None value is a tombstone. Returns its (base, last) offsets."""
        with self.writable() as log:
            base = log.log_end_offset if base_offset is None else base_offset
            ts = self._timestamp(timestamp)
            records = [Record(base + i, ts, _bytes(k), _bytes(v)) for i, (k, v) in enumerate(rows)]
            log.append_batch(build_batch(records, compression_type=codec, producer_id=producer_id,
                                         producer_epoch=producer_epoch, base_sequence=base_sequence,
                                         is_transactional=transactional, partition_leader_epoch=leader_epoch),
                             now_ms=ts)
            return base, base + len(rows) - 1

    def append_each(self, rows: Sequence[tuple[str | bytes | None, str | bytes | None]], **kw: object) -> None:
        """Each row in a batch of its own (Kafka's ``appendAsLeader(record(k, v))`` per record)."""
        for row in rows:
            self.append([row], **kw)  # type: ignore[arg-type]

    def txn(self, producer_id: int, rows: Sequence[tuple[str | bytes | None, str | bytes | None]], *,
            epoch: int = 0, sequence: int = 0, timestamp: int | None = None) -> tuple[int, int]:
        """A transactional batch (Kafka's ``appendTransactionalAsLeader``)."""
        return self.append(rows, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                           transactional=True, timestamp=timestamp)

    def idempotent(self, producer_id: int, rows: Sequence[tuple[str | bytes | None, str | bytes | None]], *,
                   epoch: int = 0, sequence: int = 0, timestamp: int | None = None) -> tuple[int, int]:
        """An idempotent, non-transactional batch (Kafka's ``appendIdempotentAsLeader``)."""
        return self.append(rows, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                           timestamp=timestamp)

    def marker(self, kind: ControlType, producer_id: int, *, epoch: int = 0, coordinator_epoch: int = 0,
               timestamp: int | None = None, base_offset: int | None = None) -> int:
        """A COMMIT or ABORT marker (``appendEndTxnMarkerAsLeader``); returns its offset."""
        with self.writable() as log:
            offset = log.log_end_offset if base_offset is None else base_offset
            log.append_batch(end_txn_marker_batch(kind, offset=offset, timestamp=self._timestamp(timestamp),
                                                  producer_id=producer_id, producer_epoch=epoch,
                                                  coordinator_epoch=coordinator_epoch, partition_leader_epoch=0),
                             now_ms=self.clock_ms)
            return offset

    def commit(self, producer_id: int, **kw: int) -> int:
        return self.marker(ControlType.COMMIT, producer_id, **kw)

    def abort(self, producer_id: int, **kw: int) -> int:
        return self.marker(ControlType.ABORT, producer_id, **kw)

    def roll(self, at_offset: int | None = None) -> None:
        with self.writable() as log:
            log.roll(at_offset, now_ms=self.clock_ms)

    # --- reading back, with kafka-python ---------------------------------------------------------
    def segment_bases(self) -> list[int]:
        return sorted(names.offset_from_file_name(p.name) for p in self.directory.glob("*" + names.LOG_SUFFIX))

    def active_base(self) -> int:
        return self.segment_bases()[-1]

    def batches(self) -> list[PeerBatch]:
        out = []
        for base in self.segment_bases():
            data = names.log_file(self.directory, base).read_bytes()
            records = MemoryRecords(data)
            position = 0
            while records.has_next():
                batch = records.next_batch()
                assert batch is not None and batch.validate_crc(), f"segment {base}: bad CRC at byte {position}"
                size = batch.size_in_bytes
                attributes = struct.unpack_from(">h", data, position + 21)[0]
                horizon = struct.unpack_from(">q", data, position + 27)[0] \
                    if attributes & _DELETE_HORIZON_FLAG else None
                out.append(PeerBatch(base, batch.base_offset, batch.base_offset + batch.last_offset_delta,
                                     batch.records_count, batch.is_control_batch, batch.is_transactional,
                                     batch.producer_id, batch.producer_epoch, batch.base_sequence, size, horizon))
                position += size
            assert position == len(data), f"segment {base}: {len(data) - position} bytes of a torn batch at its end"
        return out

    def records(self) -> list[PeerRecord]:
        out = []
        for base in self.segment_bases():
            for batch in MemoryRecords(names.log_file(self.directory, base).read_bytes()):
                out += [PeerRecord(r.offset, r.key, r.value, r.timestamp, batch.is_control_batch) for r in batch]
        return out

    def offsets_in_log(self) -> list[int]:
        """Kafka's ``LogTestUtils.offsetsInLog``: records with a key and a value, control records included."""
        return [r.offset for r in self.records() if r.key is not None and r.value is not None]

    def keys_in_log(self) -> list[str]:
        """Kafka's ``LogTestUtils.keysInLog``: keys of data records with a key and a value."""
        return [r.key.decode() for r in self.records() if not r.control and r.key is not None and r.value is not None]

    def last_offsets_per_batch(self) -> list[int]:
        return [b.last_offset for b in self.batches()]

    def latest_values(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for r in self.records():
            if not r.control and r.key is not None:
                out[r.key.decode()] = None if r.value is None else r.value.decode()
        return out

    def aborted_txns(self) -> list[tuple[int, int, int, int]]:
        """Every ``.txnindex`` entry, (producer id, first offset, last offset, last stable offset),
        decoded from the files (version 0, 34 bytes an entry)."""
        out = []
        for base in self.segment_bases():
            path = names.txn_index_file(self.directory, base)
            data = path.read_bytes() if path.exists() else b""
            for pos in range(0, len(data) - len(data) % 34, 34):
                _, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
                out.append((pid, first, last, lso))
        return out

    def cleaner_checkpoint(self) -> int | None:
        return checkpoint.read_offset_checkpoint(self.log_dir / names.CLEANER_OFFSET_CHECKPOINT).get(
            (self.topic, self.partition))


def _bytes(text: str | bytes | None) -> bytes | None:
    return text.encode() if isinstance(text, str) else text
