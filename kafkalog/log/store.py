"""The log store: several log dirs, their partitions, topic configs and per-dir checkpoints.

A log dir is laid out exactly as Kafka's (``<topic>-<partition>`` directories plus the checkpoint
files of spec §12), so a directory written by a broker is a valid store. Topic-level config
overrides, which Kafka keeps in its metadata log, are kept in ``kafkalog-topics.json`` in every log
dir (the same document in each, written atomically), so any one dir describes every topic.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog.errors import InvalidTopicError, LogDirError
from kafkalog.log import checkpoint, names
from kafkalog.log.config import (
    BrokerConfig,
    LogConfig,
    validate_topic_config,
    validate_topic_name,
    validate_topic_overrides,
)
from kafkalog.log.lock import cleaner_lock, log_dir_lock, partition_lock
from kafkalog.log.names import TopicPartition
from kafkalog.log.snapshot import LogDirCheckpoints, RetentionSource

if TYPE_CHECKING:  # opening a log loads the compiled kernels: commands that only list or describe do not
    from kafkalog.log.local_log import LocalLog

# Kafka's internal topics are created compacted by the broker; a log dir copied from a broker has no
# record of that, so without this table retention would treat them as `delete` topics.
INTERNAL_TOPIC_CONFIGS: Mapping[str, Mapping[str, str]] = {
    "__consumer_offsets": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
    "__transaction_state": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
    "__share_group_state": {"cleanup.policy": "delete", "segment.bytes": "104857600"},
}
# The KRaft metadata log is trimmed by its own snapshots, never by log retention or compaction.
METADATA_TOPICS = frozenset({"__cluster_metadata"})
TOPICS_FILE_VERSION = 1
MAX_PARTITIONS = 100_000  # per topic: far above any real topic, and a typo cannot fill a disk with dirs
DELETE_DIR_SUFFIX = "-delete"
# Kafka's DeleteDirPattern needs a topic before "-<partition>": "-1999.<uuid>-delete" names no partition.
_DELETE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})-delete$")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    topic_id: str
    overrides: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeletingTopic:
    """A topic whose deletion has begun: its partition dirs are being renamed to ``…-delete``."""

    name: str
    topic_id: str
    since_ms: int


@dataclass(frozen=True)
class PartitionLocation:
    topic_partition: TopicPartition
    log_dir: Path

    @property
    def directory(self) -> Path:
        return self.log_dir / self.topic_partition.dir_name


def configured_log_dirs(given: Sequence[str] | None, broker: BrokerConfig | None,
                        environ: Mapping[str, str] = os.environ) -> list[str]:
    """The log dirs every driver (the CLI, the DAGs, the Spark job, the UI) uses: those ``given``
    (``--log-dir``, a DAG's ``log_dirs``), else ``$KAFKALOG_LOG_DIRS`` (comma-separated, blanks and
    spaces around items dropped), else the ``broker`` config's ``log.dirs`` (none without one)."""
    if given:
        return list(given)
    from_env = [d.strip() for d in environ.get("KAFKALOG_LOG_DIRS", "").split(",") if d.strip()]
    return from_env or (list(broker.log_dirs) if broker is not None else [])


def configured_broker_file(given: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The broker file: the one ``given`` (``--config-file``), else ``$KAFKALOG_CONFIG``, else none."""
    return given or environ.get("KAFKALOG_CONFIG") or None


def resolve_log_dirs(log_dirs: Sequence[Path | str], *, create_missing: bool = False) -> list[Path]:
    """The log dirs as a store uses them, each resolved (symlinks and ``..``), or ``LogDirError`` naming
    the first that cannot be one, before anything is written: none given, an empty name, a symlink loop,
    the filesystem root, one listed twice, one inside another (a log dir's topics file and new partitions
    would be written into the other's tree, and its partitions taken for the other's files), one that is
    not a directory, or a partition dir (it holds segment files: a store would write its topics file and
    new partitions among them). A missing one is made with ``create_missing`` (``topics create``, as a
    broker makes its log dirs at start), else refused. Every driver makes its store here: the CLI, the
    pipeline, the Spark job and the UI refuse the same dirs with the same words."""
    if not log_dirs:
        raise LogDirError("no log directory given: pass --log-dir DIR or set KAFKALOG_LOG_DIRS")
    resolved = [resolve_log_dir(given) for given in log_dirs]
    if len(set(resolved)) != len(resolved):
        raise LogDirError(f"a log directory is listed twice: {', '.join(map(str, log_dirs))}")
    for inner, inner_path in zip(log_dirs, resolved, strict=True):
        for outer, outer_path in zip(log_dirs, resolved, strict=True):
            if outer_path in inner_path.parents:
                raise LogDirError(f"log directory {_as_given(inner, inner_path)} is inside log directory "
                                  f"{_as_given(outer, outer_path)}: log dirs must not contain one another (one's "
                                  "topics file and partitions would be written into the other's)")
    for given, log_dir in zip(log_dirs, resolved, strict=True):
        if create_missing and not os.path.lexists(log_dir):
            log_dir.mkdir(parents=True, exist_ok=True)
        if not log_dir.is_dir():
            raise LogDirError(f"log directory {log_dir} does not exist or is not a directory")
        segment = min((e.name for e in os.scandir(log_dir) if names.parse_segment_file_name(e.name)), default=None)
        if segment is not None:
            raise LogDirError(f"log directory {_as_given(given, log_dir)} holds segment file {segment}: it is a "
                              "partition dir, not a log dir; name the directory that holds it")
    return resolved


def resolve_log_dir(given: Path | str) -> Path:
    """One log dir resolved (symlinks and ``..``), whether or not it exists yet, or ``LogDirError``: an
    empty name, a symlink loop, or the filesystem root (its every directory would be taken for a
    partition)."""
    if not str(given).strip():
        raise LogDirError("a log directory is named by an empty string: name a directory")
    try:
        path = Path(given).resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError on a symlink loop
        raise LogDirError(f"log directory {given} cannot be resolved ({exc})") from None
    if path.parent == path:
        raise LogDirError(f"log directory {_as_given(given, path)} is the filesystem root: every top-level "
                          "directory would be taken for a partition; name a directory of its own")
    return path


def _as_given(given: Path | str, resolved: Path) -> str:
    """A log dir as the user named it, and where it resolves to when that is elsewhere."""
    return str(given) if Path(given) == resolved else f"{given} ({resolved})"


class LogStore:
    def __init__(self, log_dirs: Sequence[Path | str], broker: BrokerConfig | None = None,
                 *, create_missing: bool = False) -> None:
        self.log_dirs = resolve_log_dirs(log_dirs, create_missing=create_missing)
        self.broker = broker if broker is not None else BrokerConfig.from_properties({})
        self._topics: dict[str, TopicInfo] | None = None
        self._registered: dict[str, TopicInfo] | None = None
        self._deleting: dict[str, DeletingTopic] | None = None
        self._configs: dict[str, LogConfig] = {}
        self._checkpoints: dict[Path, tuple[tuple[int, int, int] | None, dict[tuple[str, int], int]]] = {}
        self._pending: dict[Path, dict[tuple[str, int], int | None]] | None = None

    # --- topics --------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicInfo]:
        """Topics from the registry, plus topics only seen as partition directories (Kafka-written).

        Computed once per store object (a CLI invocation or a task) and refreshed by create/alter.
        """
        if self._topics is None:
            registry = self._registry()
            found: dict[str, list[PartitionLocation]] = {}
            for location in self.partitions():
                found.setdefault(location.topic_partition.topic, []).append(location)
            topics = dict(registry)
            for topic, locations in found.items():
                if topic not in topics:
                    count = max(loc.topic_partition.partition for loc in locations) + 1
                    topics[topic] = TopicInfo(topic, count, _topic_id_on_disk(locations),
                                              dict(INTERNAL_TOPIC_CONFIGS.get(topic, {})))
            self._topics = dict(sorted(topics.items()))
            self._configs = {}
        return self._topics

    def topic(self, name: str) -> TopicInfo:
        info = self._find_topic(name)
        if info is None:
            raise InvalidTopicError(f"topic {name!r} does not exist in {self._dirs_text()}")
        return info

    def _find_topic(self, name: str) -> TopicInfo | None:
        """A registered topic is found in the registry alone; only another name needs every partition
        directory listed (a topic a broker wrote has no registry entry)."""
        if self._topics is None and name in self._registry():
            return self._registry()[name]
        return self.topics().get(name)

    def _registry(self) -> dict[str, TopicInfo]:
        if self._registered is None:
            self._registered, self._deleting = self._read_registry()
        return self._registered

    def log_config(self, topic: str) -> LogConfig:
        if topic not in self._configs:
            info = self._find_topic(topic)
            overrides = info.overrides if info else INTERNAL_TOPIC_CONFIGS.get(topic, {})
            self._configs[topic] = LogConfig.resolve(self.broker, overrides)
        return self._configs[topic]

    def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str]) -> TopicInfo:
        """Create a topic and all its partition dirs, or (on any error) none of them."""
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidTopicError(f"topic {name!r}: --partitions must be between 1 and {MAX_PARTITIONS}, "
                                    f"got {partitions}")
        normalised = validate_topic_overrides(overrides)
        validate_topic_config(self.broker, normalised)  # cross-checks against the broker file
        with self._admin_lock():
            if name in self.topics():
                raise InvalidTopicError(f"topic {name!r} already exists")
            if name in self.deleting_topics():
                raise InvalidTopicError(f"topic {name!r} is being deleted; run `kafkalog topics delete --topic "
                                        f"{name}` again (or wait for the next cleanup cycle) before re-creating it")
            colliding = [t for t in self.topics() if t.replace(".", "_") == name.replace(".", "_")]
            if colliding:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {colliding[0]!r} "
                                        "('.' and '_' are the same in metric names)")
            # A new log starts with no history, as Kafka creates it: entries under the name are a deleted
            # topic's (left by a deletion that predates their removal, or by a broker's), not its own.
            self._forget_checkpoint_entries(name)
            info = TopicInfo(name, partitions, checkpoint.new_topic_id(), normalised)
            counts = {d: sum(1 for p in self.partitions() if p.log_dir == d) for d in self.log_dirs}
            made: list[Path] = []
            try:
                for partition in range(partitions):
                    log_dir = min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))
                    counts[log_dir] += 1
                    directory = log_dir / TopicPartition(name, partition).dir_name
                    directory.mkdir()
                    made.append(directory)
                    checkpoint.write_partition_metadata(directory / names.PARTITION_METADATA, info.topic_id)
                    from kafkalog.log.local_log import LocalLog

                    LocalLog.open(directory, LogConfig.resolve(self.broker, normalised)).close()
                registry, deleting = self._read_registry()
                registry[name] = info
                self._write_registry(registry, deleting)
            except BaseException:
                for directory in made:  # all or nothing: no half-made topic is left behind
                    shutil.rmtree(directory, ignore_errors=True)
                raise
            return info

    def alter_topic(self, name: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> TopicInfo:
        with self._admin_lock():
            info = self.topic(name)
            unknown = [k for k in delete_configs if k not in info.overrides]
            if unknown:
                raise InvalidTopicError(f"topic {name!r} has no override for {', '.join(unknown)} to delete")
            overrides = {k: v for k, v in info.overrides.items() if k not in delete_configs}
            overrides.update(validate_topic_overrides(set_configs))
            validate_topic_config(self.broker, overrides, existing=info.overrides)
            updated = TopicInfo(name, info.partitions, info.topic_id, overrides)
            registry, deleting = self._read_registry()
            registry[name] = updated
            self._write_registry(registry, deleting)
            return updated

    # --- topic deletion (LogManager.asyncDelete, spec §3.1) --------------------------------------
    def deleting_topics(self) -> dict[str, DeletingTopic]:
        """Topics whose deletion began and has not finished renaming every partition dir."""
        self._registry()
        assert self._deleting is not None
        return self._deleting

    def begin_topic_delete(self, name: str, *, now_ms: int) -> DeletingTopic:
        """Record the intent to delete ``name``: from here on no command sees the topic, and its
        partition dirs are renamed by :meth:`rename_for_delete` (a crash in between is finished by
        whoever calls this again, or by the next cleanup cycle)."""
        with self._admin_lock():
            if name in self.deleting_topics():
                return self.deleting_topics()[name]
            info = self.topic(name)
            if name in INTERNAL_TOPIC_CONFIGS or name in METADATA_TOPICS:
                raise InvalidTopicError(f"topic {name!r} is an internal topic; Kafka does not delete it")
            registry, deleting = self._read_registry()
            registry.pop(name, None)
            deleting[name] = DeletingTopic(name, info.topic_id, now_ms)
            self._write_registry(registry, deleting)
            return deleting[name]

    def rename_for_delete(self, location: PartitionLocation, *, mark_time_ms: int,
                          lock_timeout_s: float = 30.0) -> Path:
        """Rename a partition dir to Kafka's ``<topic>-<partition>.<uuid>-delete``, under its
        partition and cleaner locks so no append or swap is in flight. The dir's mtime is stamped
        with the mark time first: ``file.delete.delay.ms`` runs from it, as for ``.deleted`` files."""
        directory = location.directory
        if directory.is_symlink():
            raise names.symlinked_partition_dir(directory)
        target = location.log_dir / delete_dir_name(location.topic_partition)
        with cleaner_lock(directory, timeout_s=lock_timeout_s), partition_lock(directory, timeout_s=lock_timeout_s):
            os.utime(directory, ns=(mark_time_ms * 1_000_000, mark_time_ms * 1_000_000))
            os.rename(directory, target)
            checkpoint.fsync_dir(location.log_dir)
        return target

    def end_topic_delete(self, name: str) -> None:
        """Every partition dir of ``name`` is renamed: remove the topic's checkpoint entries, then forget
        the intent. Kafka's ``asyncDelete`` drops a deleted partition from ``cleaner-offset-checkpoint``
        and writes the recovery points and log start offsets without it (the high watermarks follow):
        a topic created again under the name must not inherit them. A crash between the two steps
        leaves the intent recorded, and whoever finishes the deletion does both again."""
        with self._admin_lock():
            registry, deleting = self._read_registry()
            if name not in deleting:
                return  # finished by someone else: the name may belong to a new topic by now
            self._forget_checkpoint_entries(name)
            del deleting[name]
            self._write_registry(registry, deleting)

    def deleted_partition_dirs(self) -> list[tuple[TopicPartition, Path]]:
        """Every ``…-delete`` dir (ours or a broker's) across the log dirs, waiting to be removed."""
        out = []
        for log_dir in self.log_dirs:
            for entry in os.scandir(log_dir):
                parsed = parse_delete_dir_name(entry.name)
                if parsed is not None and entry.is_dir(follow_symlinks=False):
                    out.append((parsed, Path(entry.path)))
        return sorted(out, key=lambda item: item[1].name)

    # --- partitions ----------------------------------------------------------------------------
    def partitions(self, topic: str | None = None, partition: int | None = None, *,
                   symlinked: bool = False) -> list[PartitionLocation]:
        """Every ``<topic>-<partition>`` directory, across log dirs, sorted; none of a topic being deleted.

        With ``symlinked``, a symlink so named is listed too, never followed: whatever opens a partition
        refuses a symlinked one (``names.symlinked_partition_dir``), so a command that lists them names
        each (``verify``, ``status``, retention, ``recover``) instead of leaving it out without a word."""
        self._registry()
        deleting = self._deleting or {}
        out: list[PartitionLocation] = []
        for log_dir in self.log_dirs:
            for entry in os.scandir(log_dir):
                if not entry.is_dir(follow_symlinks=False) and not (symlinked and entry.is_symlink()):
                    continue
                tp = names.parse_partition_dir_name(entry.name)
                if tp is None or (topic is not None and tp.topic != topic) or tp.topic in deleting:
                    continue
                if partition is not None and tp.partition != partition:
                    continue
                out.append(PartitionLocation(tp, log_dir))
        # Sort on plain values: comparing the dataclasses is several times slower with 10,000s of them.
        out.sort(key=lambda p: (p.topic_partition.topic, p.topic_partition.partition, str(p.log_dir)))
        seen: dict[TopicPartition, PartitionLocation] = {}
        for location in out:
            first = seen.setdefault(location.topic_partition, location)
            if first is not location:
                raise LogDirError(f"partition {location.topic_partition} is in two log dirs: "
                                  f"{first.directory} and {location.directory}; keep one")
        return out

    def locate(self, topic: str, partition: int) -> PartitionLocation:
        found = self.partitions(topic, partition, symlinked=True)  # a symlinked one is refused where it is opened
        if not found:
            raise InvalidTopicError(f"partition {topic}-{partition} does not exist in {self._dirs_text()}")
        return found[0]

    def open_log(self, location: PartitionLocation, *, read_only: bool, truncate_corrupt: bool = False,
                 revalidate_all: bool = False) -> LocalLog:
        """Open a partition as Kafka's loader would; ``revalidate_all`` re-validates every segment, as
        after an unclean shutdown with no recovery point (``kafkalog recover --full``)."""
        from kafkalog.log.local_log import LocalLog

        tp = location.topic_partition
        key = (tp.topic, tp.partition)
        start = self._offsets(location.log_dir / names.LOG_START_OFFSET_CHECKPOINT).get(key)
        recovery = 0 if revalidate_all else self._offsets(location.log_dir / names.RECOVERY_POINT_CHECKPOINT).get(key)
        clean = had_clean_shutdown(location.log_dir, consume=not read_only) and not revalidate_all
        return LocalLog.open(location.directory, self.log_config(tp.topic), log_start_offset=start or 0,
                             recovery_point=recovery or 0, had_clean_shutdown=clean,
                             read_only=read_only, truncate_corrupt=truncate_corrupt,
                             producer_id_expiration_ms=self.broker.producer_id_expiration_ms)

    def clean_log_end(self, location: PartitionLocation) -> int | None:
        """The log end offset if Kafka's loader would open this partition without recovering anything
        (``snapshot.clean_log_end``), else None; reads a few file headers. ``kafkalog recover`` asks it
        of every partition it loads, so it is a load of the log dir: it consumes a broker's clean
        shutdown file (``had_clean_shutdown``), and changes nothing else."""
        return self._clean_log_end(location, had_clean_shutdown(location.log_dir, consume=True))

    def flushed_log_end(self, location: PartitionLocation, source: RetentionSource) -> int | None:
        """The log end offset of a partition as its last kafkalog writer left it, closed and flushed: Kafka's
        loader would recover nothing (``snapshot.clean_log_end``: no file it would resolve, every segment
        ending on a batch boundary with its indexes in range) and the recovery point checkpoint is at
        the end (what a full load and flush would make of it); else None. Reads a few file headers and
        consumes nothing, not even a broker's clean shutdown file. Retention marks such a partition from
        its listing, as Kafka's broker marks its loaded log, instead of loading it again. ``source``: the
        partition as the plan just read it, under its lock, whose reads the check reuses
        (``snapshot.clean_log_end`` says which files it checks)."""
        return self._clean_log_end(location, False, source)

    def _clean_log_end(self, location: PartitionLocation, clean_shutdown: bool,
                       source: RetentionSource | None = None) -> int | None:
        from kafkalog.log.snapshot import clean_log_end

        tp = location.topic_partition
        key = (tp.topic, tp.partition)
        recovery = self._offsets(location.log_dir / names.RECOVERY_POINT_CHECKPOINT).get(key)
        end = clean_log_end(location.directory, recovery, clean_shutdown, source=source)
        start = self._offsets(location.log_dir / names.LOG_START_OFFSET_CHECKPOINT).get(key, 0)
        return end if end is not None and start <= end else None

    @contextmanager
    def writable_log(self, location: PartitionLocation, *, timeout_s: float = 30.0,
                     truncate_corrupt: bool = False, revalidate_all: bool = False) -> Iterator[LocalLog]:
        """Open a partition for writing under its exclusive lock; flush, checkpoint and close after."""
        with partition_lock(location.directory, timeout_s=timeout_s):
            log = self.open_log(location, read_only=False, truncate_corrupt=truncate_corrupt,
                                revalidate_all=revalidate_all)
            try:
                yield log
                log.flush()
            finally:
                log.close()
            self.write_checkpoints(location, log)

    # --- checkpoints (spec §12) ----------------------------------------------------------------------
    @contextmanager
    def batched_checkpoints(self) -> Iterator[None]:
        """Within this block, checkpoint updates are kept in memory and written once per file at its
        end, as Kafka's broker writes them on a schedule rather than per change. Safe to lose in a
        crash: the loader takes the log start offset as max(checkpoint, first segment), and a stale
        recovery point only means more recovery. Without it, N partitions cost N rewrites of N lines."""
        if self._pending is not None:
            yield
            return
        self._pending = {}
        try:
            yield
        finally:
            pending, self._pending = self._pending, None
            for path, updates in pending.items():
                with log_dir_lock(path.parent):
                    # A partition whose topic was deleted while the block ran must not get back the
                    # entries its deletion removed (a topic created again would inherit them).
                    gone = {key for key in updates if not (path.parent / TopicPartition(*key).dir_name).is_dir()}
                    self._update_offsets(path, {key: None if key in gone else value for key, value in updates.items()})

    def _forget_checkpoint_entries(self, topic: str) -> None:
        """Remove every entry of ``topic`` from each log dir's offset checkpoints; the caller holds every
        log dir lock."""
        for log_dir in self.log_dirs:
            for name in names.OFFSET_CHECKPOINTS:
                path = log_dir / name
                self._update_offsets(path, {key: None for key in self._offsets(path) if key[0] == topic})

    def write_checkpoints(self, location: PartitionLocation, log: LocalLog) -> None:
        """Record the log's recovery point and log start offset in its log dir's checkpoint files."""
        self.write_offsets(location, recovery_point=log.recovery_point, log_start_offset=log.log_start_offset)

    def write_offsets(self, location: PartitionLocation, *, recovery_point: int, log_start_offset: int) -> None:
        """Record a partition's recovery point and log start offset in its log dir's checkpoint files."""
        tp = location.topic_partition
        key = (tp.topic, tp.partition)
        # Kafka records only logs whose start offset is past their first segment's base; kafkalog also
        # keeps the entry when the start offset equals it (after retention), which Kafka reads the
        # same way (it takes max(checkpoint, first base)) and which makes the advance visible.
        updates: dict[Path, dict[tuple[str, int], int | None]] = {
            location.log_dir / names.RECOVERY_POINT_CHECKPOINT: {key: recovery_point},
            location.log_dir / names.LOG_START_OFFSET_CHECKPOINT:
                {key: log_start_offset if log_start_offset > 0 else None}}
        if self._pending is not None:
            for path, update in updates.items():
                self._pending.setdefault(path, {}).update(update)
            return
        with log_dir_lock(location.log_dir):
            for path, update in updates.items():
                self._update_offsets(path, update)

    def log_dir_checkpoints(self, log_dir: Path) -> LogDirCheckpoints:
        """The checkpoints a snapshot of a partition in ``log_dir`` reads, from this store's cache."""
        return LogDirCheckpoints(self._offsets(log_dir / names.LOG_START_OFFSET_CHECKPOINT),
                                 self._offsets(log_dir / names.REPLICATION_OFFSET_CHECKPOINT),
                                 self._offsets(log_dir / names.CLEANER_OFFSET_CHECKPOINT))

    def _offsets(self, path: Path) -> Mapping[tuple[str, int], int]:
        """An offset checkpoint's entries, parsed again only when the file changed, with this store's
        batched updates applied."""
        try:
            info = os.stat(path)
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        cached = self._checkpoints.get(path)
        if cached is None or cached[0] != stamp:
            cached = (stamp, checkpoint.read_offset_checkpoint(path))
            self._checkpoints[path] = cached
        pending = (self._pending or {}).get(path)
        return _PendingOffsets(cached[1], pending) if pending else cached[1]

    def _update_offsets(self, path: Path, updates: Mapping[tuple[str, int], int | None]) -> None:
        """Apply ``updates`` (None removes an entry) to a checkpoint file; the caller holds its log dir lock."""
        self._checkpoints.pop(path, None)  # read it fresh: another process may have written it
        entries = dict(self._offsets(path))
        changed = False
        for key, value in updates.items():
            if entries.get(key) != value:
                changed = True
                if value is None:
                    entries.pop(key, None)
                else:
                    entries[key] = value
        if changed:
            checkpoint.write_offset_checkpoint(path, entries)
            info = os.stat(path)
            self._checkpoints[path] = ((info.st_ino, info.st_mtime_ns, info.st_size), entries)

    # --- registry ------------------------------------------------------------------------------
    def _read_registry(self) -> tuple[dict[str, TopicInfo], dict[str, DeletingTopic]]:
        best: tuple[int, dict[str, Any]] | None = None
        for log_dir in self.log_dirs:
            path = log_dir / names.TOPIC_CONFIG_FILE
            if not path.exists():
                continue
            try:
                doc = json.loads(path.read_text())
                generation = int(doc["generation"])
            except (ValueError, KeyError, TypeError) as exc:
                raise LogDirError(f"{path}: unreadable topic registry ({exc}); restore it or remove it") from exc
            if best is None or generation > best[0]:
                best = (generation, doc)
        if best is None:
            return {}, {}
        doc = best[1]
        topics = {name: TopicInfo(name, int(t["partitions"]), str(t["topic_id"]), dict(t.get("config", {})))
                  for name, t in doc["topics"].items()}
        deleting = {name: DeletingTopic(name, str(d["topic_id"]), int(d["since_ms"]))
                    for name, d in doc.get("deleting", {}).items()}
        return topics, deleting

    def _write_registry(self, topics: Mapping[str, TopicInfo], deleting: Mapping[str, DeletingTopic]) -> None:
        generation = 1 + max((self._generation(d) for d in self.log_dirs), default=0)
        doc: dict[str, Any] = {
            "version": TOPICS_FILE_VERSION, "generation": generation,
            "topics": {t.name: {"partitions": t.partitions, "topic_id": t.topic_id,
                                "config": dict(sorted(t.overrides.items()))}
                       for t in sorted(topics.values(), key=lambda t: t.name)}}
        if deleting:
            doc["deleting"] = {d.name: {"topic_id": d.topic_id, "since_ms": d.since_ms}
                               for d in sorted(deleting.values(), key=lambda d: d.name)}
        data = (json.dumps(doc, indent=2) + "\n").encode()
        for log_dir in self.log_dirs:
            checkpoint.atomic_write_bytes(log_dir / names.TOPIC_CONFIG_FILE, data)
        self._invalidate()

    def _generation(self, log_dir: Path) -> int:
        path = log_dir / names.TOPIC_CONFIG_FILE
        try:
            return int(json.loads(path.read_text())["generation"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def _invalidate(self) -> None:
        self._topics = None
        self._registered = None
        self._deleting = None
        self._configs = {}

    @contextmanager
    def _admin_lock(self) -> Iterator[None]:
        with ExitStack() as stack:
            for log_dir in self.log_dirs:
                stack.enter_context(log_dir_lock(log_dir))
            self._invalidate()  # another process may have changed the registry before we got the lock
            yield

    def _dirs_text(self) -> str:
        return ", ".join(str(d) for d in self.log_dirs)


class _PendingOffsets(Mapping[tuple[str, int], int]):
    """A checkpoint's entries with a batch's pending updates over them (None removes an entry), copying
    neither: a batch over 10,000s of partitions asks for the entries once per partition."""

    def __init__(self, entries: Mapping[tuple[str, int], int], pending: Mapping[tuple[str, int], int | None]) -> None:
        self._entries = entries
        self._pending = pending

    def __getitem__(self, key: tuple[str, int]) -> int:
        if key in self._pending:
            value = self._pending[key]
            if value is None:
                raise KeyError(key)
            return value
        return self._entries[key]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        yield from (key for key in self._entries if key not in self._pending)
        yield from (key for key, value in self._pending.items() if value is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def had_clean_shutdown(log_dir: Path, *, consume: bool) -> bool:
    """Whether the broker that wrote ``log_dir`` last shut down cleanly (its ``.kafka_cleanshutdown``).
    With ``consume`` the file is deleted once read, as Kafka's LogManager deletes it when it starts
    loading the dir, so that a crash from then on loads as unclean.

    Only a broker writes the file, at a clean shutdown, after it flushed every log of the dir and
    checkpointed each one's recovery point at its log end. Every kafkalog command is a process of its
    own, and one that opens a partition for writing (or ``recover``, which loads every partition and
    writes to none it leaves alone) is a broker start for the dir as far as the file goes: it consumes
    the file, holding the partition's lock, before it appends or truncates anything. So a file that is
    still there means no kafkalog writer has opened any partition of the dir since the broker stopped,
    whatever other processes run (the cleaner's swaps are flushed before they show, and its leftovers
    resolved at every load, clean or not); and a writer that dies later leaves no file behind to make
    its torn writes load as clean. The dir's other partitions lose nothing by it: their recovery
    points, at their log ends, say what the file said of them (a stale entry only means more
    recovery). Two processes may both read the file before either deletes it: both partitions were as
    the broker left them, so both are right. Each open reads the file again rather than remembering
    it for the dir (another process may write and crash in between). A read-only open never deletes
    it: it changes nothing."""
    path = log_dir / names.CLEAN_SHUTDOWN_FILE
    if not path.exists():
        return False
    if consume:
        path.unlink(missing_ok=True)
        checkpoint.fsync_dir(log_dir)  # the deletion is durable before anything is written
    return True


def delete_dir_name(tp: TopicPartition) -> str:
    """Kafka's ``logDeleteDirName``: ``<topic>-<partition>.<uuid without dashes>-delete``, the topic
    cut so that the whole name fits in 255 characters."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: 255 - len(suffix)] + suffix


def parse_delete_dir_name(name: str) -> TopicPartition | None:
    match = _DELETE_DIR.match(name)
    return TopicPartition(match["topic"], int(match["partition"])) if match else None


def _topic_id_on_disk(locations: Sequence[PartitionLocation]) -> str:
    """The topic id a Kafka broker wrote into ``partition.metadata`` ("" when none is readable)."""
    for location in locations:
        path = location.directory / names.PARTITION_METADATA
        if path.exists():
            try:
                return checkpoint.read_partition_metadata(path)
            except checkpoint.CheckpointError:
                continue
    return ""
