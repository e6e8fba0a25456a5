"""Every file and directory name of Kafka's log layout (spec §3), in one place.

A partition directory ``<topic>-<partition>`` holds segments named by their 20-digit base offset
(``00000000000000000000.log`` with ``.index``, ``.timeindex``, ``.txnindex``), producer snapshots
``<offset>.snapshot``, KRaft snapshots ``<offset>-<epoch>.checkpoint``, ``leader-epoch-checkpoint``
and ``partition.metadata``. Suffixes ``.deleted``, ``.cleaned`` and ``.swap`` mark files in flight.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import InvalidTopicError, LogDirError, UnknownFileError
from kafkalog.log.config import validate_topic_name

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# Per log dir.
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# The per-log-dir ``<topic> <partition> <offset>`` files (spec §12.1).
OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                      CLEANER_OFFSET_CHECKPOINT)
META_PROPERTIES = "meta.properties"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
# kafkalog's own per-log-dir files: topic config overrides and the maintenance journal.
TOPIC_CONFIG_FILE = "kafkalog-topics.json"
JOURNAL_FILE = "kafkalog-journal.jsonl"
ADMIN_LOCK_FILE = ".kafkalog.lock"
LOG_DIR_FILES = frozenset({
    ADMIN_LOCK_FILE,
    LOCK_FILE, CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT, META_PROPERTIES, BOOTSTRAP_CHECKPOINT,
    TOPIC_CONFIG_FILE, JOURNAL_FILE,
})

# Per partition dir.
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
QUORUM_STATE = "quorum-state"  # KRaft __cluster_metadata only
PARTITION_LOCK_FILE = ".kafkalog.lock"  # kafkalog's cross-process lock (never a Kafka name)
CLEANER_LOCK_FILE = ".kafkalog-cleaner.lock"  # held while a cleaner has .cleaned/.swap files in flight
PARTITION_FILES = frozenset({LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, QUORUM_STATE, PARTITION_LOCK_FILE,
                             CLEANER_LOCK_FILE})

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9]\d{0,9})$")  # Kafka's own spelling only
_SEGMENT_FILE = re.compile(r"^(?P<offset>\d{20})(?P<suffix>\.[a-z]+)(?P<state>\.(?:deleted|cleaned|swap))?$")
# A cleaner task attempt's output (``<offset>.log.<attempt tag>.cleaned``): like every ``.cleaned`` file,
# unfinished work that recovery deletes (``kafkalog.maintenance.cleaning_tasks``).
_ATTEMPT_OUTPUT = re.compile(r"^\d{20}\.(?:log|index|timeindex|txnindex)\.[A-Za-z0-9-]+\.cleaned$")
_KRAFT_SNAPSHOT = re.compile(r"^\d{20}-\d{10}\.checkpoint(?:\.part|\.deleted)?$")


def offset_prefix(offset: int) -> str:
    """The 20-digit zero-padded base offset every segment file starts with."""
    return f"{offset:020d}"


def log_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{TXN_INDEX_SUFFIX}{suffix}"


def snapshot_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(offset)}{SNAPSHOT_SUFFIX}{suffix}"


def stray_snapshot_offsets(snapshot_offsets: Iterable[int], segment_bases: Collection[int]) -> list[int]:
    """The producer snapshots Kafka's loader removes (``ProducerStateManager.removeStraySnapshots``):
    every one at no segment's base offset, but for the newest if it lies past the last segment's base
    (one taken at the log end). A delete cut short between renaming a segment away and renaming its
    snapshot leaves such a stray, which no later delete reaches."""
    strays = sorted(offset for offset in snapshot_offsets if offset not in segment_bases)
    if strays and strays[-1] > max(segment_bases, default=-1):
        strays.pop()
    return strays


def offset_from_file_name(name: str) -> int:
    """Kafka parses the offset as the text before the first dot."""
    return int(name.split(".", 1)[0])


@dataclass(frozen=True, slots=True)
class SegmentFileName:
    base_offset: int
    suffix: str  # ".log", ".index", ".timeindex", ".txnindex" or ".snapshot"
    state: str  # "", ".deleted", ".cleaned" or ".swap"


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Parse ``<20 digits>.<kind>[.deleted|.cleaned|.swap]``; None for other names."""
    match = _SEGMENT_FILE.match(name)
    if match is None:
        return None
    suffix = match["suffix"]
    if suffix not in SEGMENT_SUFFIXES and suffix != SNAPSHOT_SUFFIX:
        return None
    return SegmentFileName(int(match["offset"]), suffix, match["state"] or "")


def is_known_partition_file(name: str) -> bool:
    """Whether Kafka (or kafkalog) could have put a file of this name in a partition directory."""
    if name in PARTITION_FILES or parse_segment_file_name(name) is not None:
        return True
    if _KRAFT_SNAPSHOT.match(name) or _ATTEMPT_OUTPUT.match(name):
        return True
    # Temp files of atomic writes (``leader-epoch-checkpoint.tmp``, ``<offset>.snapshot.tmp``).
    if name.endswith(TMP_SUFFIX):
        stem = name[: -len(TMP_SUFFIX)]
        return stem in PARTITION_FILES or parse_segment_file_name(stem) is not None
    return False


def check_partition_file(path: Path, mode: int | None = None) -> None:
    """Refuse a name Kafka's layout has no place for, and (given its ``lstat`` mode) anything but a
    regular file: kafkalog never reads or writes through a symlink, a FIFO or a device."""
    if not is_known_partition_file(path.name):
        raise UnknownFileError(
            f"{path}: unknown file in a partition directory (Kafka's layout has no such name); "
            "move it out of the log dir"
        )
    if mode is not None and not stat.S_ISREG(mode):
        raise not_a_regular_file(path, mode)


def not_a_regular_file(path: Path | str, mode: int) -> UnknownFileError:
    """The error for a partition file that is not a regular file (``mode`` from its ``lstat``)."""
    return UnknownFileError(f"{path}: not a regular file ({file_kind(mode)}); kafkalog reads and writes only "
                            "regular files in a partition directory (replace it with the file itself)")


def symlinked_partition_dir(directory: Path | str) -> LogDirError:
    """The error for a partition directory that is a symlink. kafkalog never follows one: its files lie
    outside the log dir (or in another store's), where retention, a swap or a lock file would change
    what this store does not own, and a reader would serve what no writer here appends to."""
    try:
        target = f" to {os.readlink(directory)}"
    except OSError:
        target = ""
    return LogDirError(f"{directory}: partition directory is a symlink{target}; kafkalog does not follow it "
                       "into another directory (put the partition's directory itself in the log dir)")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its ``lstat`` mode."""
    return ("a symlink" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a directory" if stat.S_ISDIR(mode) else "a device or socket")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` → TopicPartition; None for names that are not a live partition dir
    (``-delete``, ``-future`` and ``-stray`` directories, or anything else)."""
    if name.endswith(("-delete", "-future", "-stray")) or "." in name.rsplit("-", 1)[-1]:
        return None
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    topic = match["topic"]
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return TopicPartition(topic, int(match["partition"]))
