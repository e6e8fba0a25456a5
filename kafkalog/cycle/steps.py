"""One cleanup cycle (Kafka's LogManager and LogCleaner scheduled work) as steps with JSON in and out.

Each step is what one task of the ``kafkalog_cleanup`` DAG runs; the CLI runs the same functions of
``kafkalog.cycle.retention`` and ``kafkalog.cycle.compaction``. A cycle lives in a *run dir* that every
worker sees (beside the log dirs by default): ``cycle.json`` (its settings and clock), the shard lists,
the retention and compaction plans, and each step's result (``results/<step>[-<shard>].json``). Tasks pass only paths
and counts; the report reads the results from the run dir. Every step is idempotent, so a retried
task converges on what one uninterrupted run does:

- ``scan_partitions``: resolves interrupted swaps and topic deletions (as a broker start does),
  inventories the log dirs and splits the partitions into shards by bytes.
- ``plan_retention_shard`` / ``mark_shard``: ``deleteOldSegments`` for a shard, planned to a file,
  then that plan applied.
- ``delete_marked``: ``.deleted`` files and ``-delete`` dirs whose ``file.delete.delay.ms`` passed.
- ``select_logs_to_clean``: the cleaner manager's choice, as a compaction plan.
- the report (``kafkalog.cycle.report``): what the cycle did, with every partition that failed anywhere.

The cycle's clock (``now_ms``) is fixed in ``cycle.json`` by the scan and never later than the wall
clock; grace periods promised to readers run on the wall clock.
"""

from __future__ import annotations

import datetime
import errno
import heapq
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kafkalog.cycle import compaction, retention
from kafkalog.cycle.documents import Doc, PartitionError, read_json, write_json
from kafkalog.cycle.results import (
    AppliedMark,
    MarkResult,
    ScanResult,
    SelectResult,
    ShardEntry,
    ShardPlanResult,
    SweepResult,
    TopicFreed,
    TopicMarked,
)
from kafkalog.errors import ConfigError, KafkaLogError, LogDirError, LogLockedError

CYCLE_FILE = "cycle.json"
DEFAULT_STATE_DIR = ".kafkalog-pipeline"  # beside the first log dir, like the Spark job's scratch dir
SHARD_BYTES = 4 << 30  # a shard's share of the log bytes ...
SHARD_PARTITIONS = 5000  # ... and of the partitions (retention planning costs per partition)
MAX_SHARDS = 32
KEEP_RUN_DIRS_S = 7 * 86_400  # run dirs (plans and results, for audit) older than this are removed


# OS errors that a retry meets again: an I/O error, a full disk or a stale handle may pass; a path that
# is missing, of the wrong kind, a symlink loop or not permitted needs someone to change something.
TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN,
                              errno.EINTR, errno.EBUSY, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ENOLCK,
                              errno.ECONNRESET, errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH})
PATH_ERRNOS = frozenset({errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM,
                         errno.EROFS})


def permanent_error(exc: BaseException) -> bool:
    """Whether a retry would fail the same way, so a task should fail at once and say why.

    Every kafkalog error is bad input, configuration or data (``ConfigError``, ``LogDirError``,
    ``InvalidTopicError``, a corrupt batch, an unreadable plan, …) unless another process holds a lock
    (``LogLockedError``) or the error wraps an I/O error that may pass (``TRANSIENT_ERRNOS``). A bare
    ``OSError`` is transient unless its path is the wrong kind of thing (``PATH_ERRNOS``); anything else
    (Spark, the network, a bug) keeps Airflow's retries."""
    if isinstance(exc, LogLockedError):
        return False
    if isinstance(exc, KafkaLogError):
        inner = exc.__cause__ or exc.__context__
        if isinstance(inner, LogLockedError):
            return False
        return not (isinstance(inner, OSError) and inner.errno in TRANSIENT_ERRNOS)
    if isinstance(exc, OSError):
        return exc.errno in PATH_ERRNOS
    return False


def describe_error(exc: BaseException) -> str:
    """One line for a report: kafkalog's messages name the file, key and value; others get their type."""
    return str(exc) if isinstance(exc, KafkaLogError) else f"{type(exc).__name__}: {exc}"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def format_ms(ms: int) -> str:
    """A wall-clock moment for a person, with the number a tool reads."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="seconds")
    return f"{moment} ({ms} ms)"


@dataclass(frozen=True)
class CycleSettings:
    """What a cycle runs on and with which clock; written once to ``cycle.json`` by the scan."""

    run_id: str
    now_ms: int
    log_dirs: tuple[str, ...]
    config_file: str | None = None
    topics: tuple[str, ...] | None = None  # only these topics (None: all)
    dry_run: bool = False
    wall_now_ms: int | None = None  # pins the wall clock stamped into tombstone horizons (None: the wall clock)

    def __post_init__(self) -> None:
        if not self.log_dirs:
            raise ConfigError("no log directory given: set the log_dirs param, KAFKALOG_LOG_DIRS or log.dirs in "
                              "the broker file")
        if self.now_ms < 0:
            raise ConfigError(f"the cycle's clock {self.now_ms} must not be negative")
        if self.wall_now_ms is not None and self.wall_now_ms < self.now_ms:
            raise ConfigError(f"wall_now_ms {self.wall_now_ms} is before the cycle's clock {self.now_ms}: it pins the "
                              "wall clock, which is never earlier than the cycle's (milliseconds since the epoch)")

    def to_json(self) -> Doc:
        return {"version": 1, **asdict(self)}

    @classmethod
    def from_json(cls, doc: Doc, where: str = "cycle.json") -> CycleSettings:
        """Strictly: every key, none unknown, each of its kind (a misspelt key is an error, not a default)."""
        from kafkalog.cycle.documents import PlanError, check_version_and_keys

        check_version_and_keys(doc, where, "the cycle settings", [f.name for f in fields(cls)], 1)
        kinds: dict[str, type | tuple[type, ...]] = {
                 "run_id": str, "now_ms": int, "log_dirs": list, "config_file": (str, type(None)),
                 "topics": (list, type(None)), "dry_run": bool, "wall_now_ms": (int, type(None))}
        for name, kind in kinds.items():
            if not isinstance(doc[name], kind) or (kind is int and isinstance(doc[name], bool)):
                raise PlanError(f"{where}: {name} = {doc[name]!r} is not of the kind the cycle writes")
        topics = doc["topics"]
        return cls(doc["run_id"], doc["now_ms"], tuple(doc["log_dirs"]), doc["config_file"],
                   None if topics is None else tuple(topics), doc["dry_run"], doc["wall_now_ms"])

    def store(self) -> Any:
        from kafkalog.log.config import BrokerConfig
        from kafkalog.log.store import LogStore

        return LogStore([Path(d) for d in self.log_dirs], BrokerConfig.load(self.config_file))


def cycle_clock_ms(logical_ms: int | None, wall_ms: int | None = None) -> int:
    """The cycle's clock: the run's logical time, never later than the wall clock."""
    wall = wall_clock_ms() if wall_ms is None else wall_ms
    return wall if logical_ms is None else min(logical_ms, wall)


def run_dir_for(state_dir: Path | str | None, log_dirs: Sequence[str], dag_id: str, run_id: str) -> Path:
    """Where a run keeps its files: ``<state dir>/<dag id>/<run id>``; the state dir defaults to
    ``.kafkalog-pipeline`` beside the first log dir, so every worker that sees the logs sees it.

    Refused (``ConfigError``) unless the state dir is a place of its own that this user can write: not
    the filesystem root or a directory in it (a log dir ``/data`` would put it at ``/.kafkalog-pipeline``;
    set ``KAFKALOG_PIPELINE_DIR`` then), not inside a log dir, not a file."""
    from kafkalog.log.store import resolve_log_dir

    if state_dir:
        base = Path(state_dir)
        if not base.is_absolute():
            raise ConfigError(f"KAFKALOG_PIPELINE_DIR={state_dir} must be an absolute path (every worker finds it)")
        base = _resolved(base, "KAFKALOG_PIPELINE_DIR")
        named = f"KAFKALOG_PIPELINE_DIR={state_dir}"
    else:
        base = resolve_log_dir(log_dirs[0]).parent / DEFAULT_STATE_DIR
        named = f"the run dir {base} (beside log dir {log_dirs[0]})"
    if base.parent == Path(base.anchor) or base == Path(base.anchor):
        raise ConfigError(f"{named} would be at the filesystem root: set KAFKALOG_PIPELINE_DIR to a directory of "
                          "the pipeline's own that every worker sees")
    for log_dir in log_dirs:
        inside = resolve_log_dir(log_dir)
        if base == inside or inside in base.parents:
            raise ConfigError(f"{named} is inside log directory {log_dir}: its files would be taken for the "
                              "log's; set KAFKALOG_PIPELINE_DIR to a directory outside every log dir")
    existing = next(p for p in (base, *base.parents) if os.path.lexists(p))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{named}: {existing} is not a directory this user can write")
    return base / _safe(dag_id) / _safe(run_id)


def _resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError on a symlink loop
        raise LogDirError(f"{what} cannot be resolved ({exc})") from None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def load_settings(run_dir: Path | str) -> CycleSettings:
    path = Path(run_dir) / CYCLE_FILE
    return CycleSettings.from_json(read_json(path), str(path))


# --- scan --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionInventory:
    topic: str
    partition: int
    log_dir: str
    size_bytes: int
    leftovers: bool  # .cleaned/.swap files of an interrupted swap


def start_cycle(run_dir: Path | str, settings: CycleSettings) -> Path:
    """Make the run dir and fix the cycle's settings and clock in it (a retry keeps the first clock).
    The log dirs and the broker file are checked first: bad ones fail here, before anything is written."""
    settings.store()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / CYCLE_FILE).exists():
        fixed = load_settings(run_dir)
        if fixed.run_id == settings.run_id:
            return run_dir
    write_json(run_dir / CYCLE_FILE, settings.to_json())
    return run_dir


def scan_partitions(run_dir: Path | str, settings: CycleSettings, *, shard_bytes: int = SHARD_BYTES,
                    shard_partitions: int = SHARD_PARTITIONS, max_shards: int = MAX_SHARDS) -> Doc:
    """Start a cycle: write ``cycle.json``, finish interrupted swaps and topic deletions, list the
    partitions (not the KRaft metadata log) and write them as shards balanced by bytes."""
    from kafkalog.log import names
    from kafkalog.log.store import METADATA_TOPICS

    run_dir = start_cycle(run_dir, settings)
    settings = load_settings(run_dir)
    store = settings.store()
    wall = wall_clock_ms()
    errors: list[PartitionError] = []
    finished: list[str] = []
    if not settings.dry_run:
        from kafkalog.maintenance.topic_delete import finish_topic_deletes

        for report in finish_topic_deletes(store, wall_now_ms=wall, run_id=settings.run_id):
            finished += report.renamed
            errors += [PartitionError(report.topic, None, f"topic delete: {f}") for f in report.failures]
    inventory: list[PartitionInventory] = []
    for location in store.partitions(symlinked=True):
        tp = location.topic_partition
        if tp.topic in METADATA_TOPICS or (settings.topics is not None and tp.topic not in settings.topics):
            continue
        if location.directory.is_symlink():  # named, never followed (``names.symlinked_partition_dir``)
            errors.append(PartitionError(tp.topic, tp.partition, str(names.symlinked_partition_dir(
                location.directory))))
            continue
        try:
            inventory.append(_inventory(location))
        except OSError as exc:
            errors.append(PartitionError(tp.topic, tp.partition, f"cannot list: {exc}"))
    recovered: list[str] = []
    for item in inventory:
        if item.leftovers and not settings.dry_run:
            try:
                _resolve_leftovers(store, item)
                recovered.append(f"{item.topic}-{item.partition}")
            except (KafkaLogError, OSError) as exc:
                errors.append(PartitionError(item.topic, item.partition, f"recovery: {exc}"))
    shards = split_into_shards(inventory, shard_bytes=shard_bytes, shard_partitions=shard_partitions,
                               max_shards=max_shards)
    entries = []
    for i, shard in enumerate(shards):
        path = run_dir / "shards" / f"shard-{i:04d}.json"
        write_json(path, {"shard": i, "partitions": [[p.topic, p.partition, p.log_dir] for p in shard]})
        entries.append(ShardEntry(i, str(path), len(shard), sum(p.size_bytes for p in shard)))
    result = ScanResult(str(run_dir), settings.now_ms, settings.dry_run, len(inventory),
                        sum(p.size_bytes for p in inventory), tuple(entries), tuple(recovered), tuple(finished),
                        tuple(errors)).save(run_dir)
    return {**result, "recovered": recovered[:20], "errors": result["errors"][:20], "error_count": len(errors)}


def _inventory(location: Any) -> PartitionInventory:
    from kafkalog.log import names

    size, leftovers = 0, False
    with os.scandir(location.directory) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(names.LOG_SUFFIX) and entry.is_file(follow_symlinks=False):
                size += entry.stat(follow_symlinks=False).st_size
            elif name.endswith((names.CLEANED_SUFFIX, names.SWAP_SUFFIX)):
                leftovers = True
    tp = location.topic_partition
    return PartitionInventory(tp.topic, tp.partition, str(location.log_dir), size, leftovers)


def _resolve_leftovers(store: Any, item: PartitionInventory) -> None:
    """An interrupted swap is finished or rolled back as recovery would, unless a cleaner is at work."""
    from kafkalog.errors import LogLockedError
    from kafkalog.log.lock import cleaner_lock
    from kafkalog.log.names import TopicPartition
    from kafkalog.log.store import PartitionLocation
    from kafkalog.maintenance.cleaner import resolve_leftovers

    location = PartitionLocation(TopicPartition(item.topic, item.partition), Path(item.log_dir))
    try:
        with cleaner_lock(location.directory, timeout_s=0):
            resolve_leftovers(location)
    except LogLockedError:
        pass  # a cleaner is running there: its files are in flight, not left over


def split_into_shards(inventory: Sequence[PartitionInventory], *, shard_bytes: int = SHARD_BYTES,
                      shard_partitions: int = SHARD_PARTITIONS, max_shards: int = MAX_SHARDS,
                      ) -> list[list[PartitionInventory]]:
    """Enough shards for each to hold about ``shard_bytes`` and ``shard_partitions`` (at most
    ``max_shards``), filled biggest partition first into the lightest shard; each sorted by name."""
    if not inventory:
        return []
    total = sum(p.size_bytes for p in inventory)
    count = max(-(-total // shard_bytes), -(-len(inventory) // shard_partitions), 1)
    count = min(count, max_shards, len(inventory))
    heap = [(0, 0, i) for i in range(count)]  # (bytes, partitions, shard)
    shards: list[list[PartitionInventory]] = [[] for _ in range(count)]
    for item in sorted(inventory, key=lambda p: (-p.size_bytes, p.topic, p.partition)):
        size, members, i = heapq.heappop(heap)
        shards[i].append(item)
        heapq.heappush(heap, (size + item.size_bytes, members + 1, i))
    return [sorted(s, key=lambda p: (p.topic, p.partition)) for s in shards]


def _shard_locations(shard_path: Path | str) -> tuple[int, list[Any]]:
    from kafkalog.log.names import TopicPartition
    from kafkalog.log.store import PartitionLocation

    doc = read_json(shard_path)
    return int(doc["shard"]), [PartitionLocation(TopicPartition(t, p), Path(d)) for t, p, d in doc["partitions"]]


# --- retention -----------------------------------------------------------------------------------------
def plan_retention_shard(run_dir: Path | str, shard_path: Path | str) -> Doc:
    """Plan ``deleteOldSegments`` for one shard at the cycle's clock; the plan goes to a file."""
    settings = load_settings(run_dir)
    shard, locations = _shard_locations(shard_path)
    plan = retention.plan_retention(settings.store(), locations, settings.now_ms)
    path = Path(run_dir) / "retention" / f"plan-{shard:04d}.json"
    write_json(path, plan.to_json())
    doc = ShardPlanResult(shard, str(path), len(locations), len(plan.due),
                          sum(len(p.segments) for p in plan.partitions), sum(p.bytes for p in plan.partitions),
                          plan.errors, tuple(sorted({loc.topic_partition.topic for loc in locations})),
                          ).save(run_dir, shard)
    return {**doc, "errors": len(plan.errors)}


def mark_shard(run_dir: Path | str, plan_path: Path | str, *, lock_timeout_s: float = 30.0) -> Doc:
    """Apply one shard's retention plan: phase one of the two-phase delete. A partition whose lock
    another process holds past ``lock_timeout_s`` is skipped (and said so); a later cycle marks it."""
    settings = load_settings(run_dir)
    plan = retention.read_retention_plan(plan_path)
    shard = int(Path(plan_path).stem.rsplit("-", 1)[-1])
    done = retention.apply_retention_plan(settings.store(), plan, run_id=settings.run_id, dry_run=settings.dry_run,
                                          lock_timeout_s=lock_timeout_s)
    changes = _topic_changes(() if done.dry_run else done.applied)  # a dry run changes no topic
    doc = MarkResult(**vars(done), shard=shard, topics=changes).save(run_dir, shard)
    return {k: v for k, v in doc.items() if k not in ("applied", "errors")} | {"errors": len(done.errors)}


def file_delete_deadline_ms(run_dir: Path | str) -> int | None:
    """When this run's marks are all due: its newest mark plus the largest delay involved (None when
    it marked nothing)."""
    dues = _mark_dues(run_dir)
    return max(dues) if dues else None


def _marks(run_dir: Path | str) -> Iterator[MarkResult]:
    """The results of this run's ``mark_deleted`` shards that finished."""
    for path in sorted((Path(run_dir) / "results").glob(f"{MarkResult.STEP}-*.json")):
        yield MarkResult.from_json(read_json(path), str(path))


def _mark_dues(run_dir: Path | str) -> list[int]:
    """When each partition this run marked is due for deletion (its mark time + its topic's delay)."""
    return [a.due_ms for mark in _marks(run_dir) for a in mark.applied
            if a.due_ms is not None]  # None: it marked no file


def _topic_changes(applied: Iterable[AppliedMark]) -> dict[str, TopicMarked]:
    """Marks per topic, sorted by topic: the segments and bytes deleted and each partition's new log
    start offset."""
    by_topic: dict[str, list[AppliedMark]] = {}
    for a in applied:
        by_topic.setdefault(a.topic, []).append(a)
    return {topic: TopicMarked(sum(len(a.segments) for a in entries), sum(a.bytes for a in entries),
                               {str(a.partition): a.log_start_offset_after for a in entries})
            for topic, entries in sorted(by_topic.items())}


def retention_changes(run_dir: Path | str) -> dict[str, Doc]:
    """What this run's retention changed per topic, every shard's marks together (``TopicMarked``, as a
    document; a dry run changed nothing)."""
    changes = _topic_changes(a for mark in _marks(run_dir) if not mark.dry_run for a in mark.applied)
    return {topic: vars(change) for topic, change in changes.items()}


def file_delete_wait(run_dir: Path | str, *, wall_now_ms: int) -> Doc:
    """How long this cycle waits before ``delete_marked``: until every mark of this run that falls due
    within the cycle's interval (``log.retention.check.interval.ms``) is due, never longer. Marks due
    later (a long ``file.delete.delay.ms``) are deleted by a later cycle, as Kafka deletes ``.deleted``
    files on a schedule of their own: one topic's day-long delay never holds every topic's cycle open.

    Returns ``until_ms`` (None: no wait), ``interval_ms``, and the marks left to later cycles
    (``later``: how many partitions, ``next_due_ms``: the first of them)."""
    from kafkalog.log.config import BrokerConfig

    settings = load_settings(run_dir)
    interval_ms = BrokerConfig.load(settings.config_file).log_retention_check_interval_ms
    dues = _mark_dues(run_dir)
    now = [d for d in dues if d <= wall_now_ms + interval_ms]
    later = [d for d in dues if d > wall_now_ms + interval_ms]
    until = max(now) if now and max(now) > wall_now_ms else None
    return {"until_ms": until, "interval_ms": interval_ms, "later": len(later),
            "next_due_ms": min(later) if later else None}


def delete_marked(run_dir: Path | str) -> Doc:
    """Phase two: delete the ``.deleted`` files (this run's and earlier runs') and the ``-delete`` dirs
    of deleted topics whose ``file.delete.delay.ms`` has passed on the wall clock."""
    from kafkalog.log.store import METADATA_TOPICS
    from kafkalog.maintenance.topic_delete import delete_marked_dirs

    settings = load_settings(run_dir)
    store = settings.store()
    wall = wall_clock_ms()
    locations = [loc for loc in store.partitions() if loc.topic_partition.topic not in METADATA_TOPICS
                 and (settings.topics is None or loc.topic_partition.topic in settings.topics)]
    swept = retention.sweep(store, locations, wall_now_ms=wall, run_id=settings.run_id, dry_run=settings.dry_run)
    dirs = delete_marked_dirs(store, wall_now_ms=wall, run_id=settings.run_id, dry_run=settings.dry_run,
                              topics=None if settings.topics is None else frozenset(settings.topics))
    # Not "topics": deleting files no reader sees any more changes no topic's data, so it is no asset event.
    freed: dict[str, TopicFreed] = {}
    for p in swept["partitions"]:
        if p["deleted_files"]:
            was = freed.get(p["topic"], TopicFreed(0, 0))
            freed[p["topic"]] = TopicFreed(was.files_deleted + len(p["deleted_files"]),
                                           was.bytes_freed + p["deleted_bytes"])
    due = [d for d in (swept["next_due_ms"], dirs.next_due_ms) if d is not None]
    errors = [*swept["errors"], *(PartitionError(None, None, refused) for refused in dirs.refused)]
    doc = SweepResult(swept["wall_clock_ms"], swept["dry_run"], tuple(errors), swept["deleted_files"],
                      swept["deleted_bytes"], swept["waiting_files"], swept["waiting_bytes"], min(due) if due else None,
                      tuple(dirs.deleted_dirs), dirs.deleted_bytes, tuple(dirs.waiting_dirs), freed).save(run_dir)
    return {**doc, "errors": len(doc["errors"]), "deleted_dirs": len(dirs.deleted_dirs)}


# --- compaction ----------------------------------------------------------------------------------------
def select_logs_to_clean(run_dir: Path | str, *, topic: str | None = None,
                         partitions: Sequence[int] | None = None) -> Doc:
    """The cleaner manager's choice at the cycle's clock (or, with ``topic``, that topic's cleanable
    ranges whatever their dirty ratio), written as the cycle's compaction plan. A dry run also reads
    what the compaction would read, as it would (``compaction.check_compaction_plan``), and lists the
    partitions it would fail on (``would_fail``): a dry run tells what the real run would do."""
    settings = load_settings(run_dir)
    store = settings.store()
    plan = compaction.plan_compaction(store, now_ms=settings.now_ms, topic=topic, partitions=partitions,
                                 among_topics=settings.topics)
    path = Path(run_dir) / "compaction-plan.json"
    write_json(path, plan.to_json())
    would_fail = compaction.check_compaction_plan(store, plan, wall_now_ms=settings.wall_now_ms) \
        if settings.dry_run else []
    doc = SelectResult(str(path), len(plan.selected), sum(s.cleanable_bytes for s in plan.selected),
                       len(plan.checkpoint_resets), plan.errors, tuple(would_fail), settings.dry_run,
                       settings.wall_now_ms, tuple(sorted({s.topic for s in plan.selected}))).save(run_dir)
    return {**doc, "errors": len(plan.errors), "would_fail": len(would_fail)}


def prune_run_dirs(run_dir: Path | str, *, keep_s: int = KEEP_RUN_DIRS_S, now_s: float | None = None) -> list[str]:
    """Remove this DAG's run dirs older than ``keep_s`` (never the current one)."""
    run_dir = Path(run_dir)
    cutoff = (time.time() if now_s is None else now_s) - keep_s
    removed = []
    for other in run_dir.parent.iterdir():
        if other != run_dir and other.is_dir() and not other.is_symlink() and other.stat().st_mtime < cutoff:
            shutil.rmtree(other, ignore_errors=True)
            removed.append(other.name)
    return removed
