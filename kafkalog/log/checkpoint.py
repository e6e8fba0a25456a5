"""Kafka's small text checkpoint files, and the atomic write every kafkalog metadata file goes through.

Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``; spec §12.1) are UTF-8 text, every
line ended by ``\\n``::

    0                         <- format version, always 0
    <N>                       <- number of entry lines
    <topic> <partition> <offset>   (N times)

``leader-epoch-checkpoint`` (§12.2) is the same with ``<epoch> <start_offset>`` lines. Kafka writes
entries in hash-map order; we sort offset checkpoints by (topic, partition) so output is reproducible,
and keep leader epochs in the given order (it is meaningful there).

``partition.metadata`` (§12.3) is exactly ``version: 0\\ntopic_id: <uuid>`` with no trailing newline,
where ``<uuid>`` is Kafka's ``Uuid.toString()``: 16 bytes in URL-safe base64 without padding.

Crash story: every write goes to ``<file>.tmp``, is flushed and fsynced, renamed over the target with
``os.replace`` and the directory is fsynced, so a crash leaves either the old or the new file. A stale
``.tmp`` left by a crash is ignored by readers and overwritten by the next write.

Readers follow Kafka's ``CheckpointReadBuffer``: lines end at ``\\n``, ``\\r`` or ``\\r\\n`` (Java's
``readLine``), numbers are Java ``parseInt``/``parseLong`` (optional sign, ASCII digits, in range), and
entry lines are split on ``\\s+`` the Java way (a leading blank makes an empty first field).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kafkalog.errors import KafkaLogError
from kafkalog.log.names import LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, TMP_SUFFIX

StrPath = str | os.PathLike[str]

OFFSET_CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
# Kafka reserves Uuid(0, 1) for the KRaft metadata topic; randomUuid never hands it out.
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_LINE_END = re.compile(r"\r\n|\r|\n")
# re.ASCII makes \s exactly Java's [ \t\n\x0B\f\r].
_JAVA_WHITESPACE = re.compile(r"\s+", re.ASCII)
_METADATA_SEPARATOR = re.compile(r":\s+", re.ASCII)


class CheckpointError(KafkaLogError):
    """A checkpoint or partition.metadata file is malformed, or an entry cannot be written."""


def atomic_write_bytes(path: StrPath, data: bytes, *, durable_rename: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory so the rename
    itself survives a power loss; ``durable_rename=False`` leaves that last fsync out, for a file whose
    old content is as good after a power loss (the new content is never torn either way). On an
    exception the ``.tmp`` is removed and ``path`` is untouched.
    """
    target = Path(path)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    try:
        _write_synced(tmp, data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable_rename:
        fsync_dir(target.parent)


def _write_synced(path: Path, data: bytes, *, fsync: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """Linux's ``syncfs(2)`` (every file of one file system written back, its journal committed once), or
    None where the C library has none."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if function is not None:
        function.argtypes = [ctypes.c_int]
    return function


def _sync_file_systems(syncfs: Callable[[int], int], directories: Iterable[Path]) -> dict[Path, OSError]:
    """``syncfs`` once for each file system holding one of ``directories``; the directories whose files it
    could not make durable, with the error."""
    synced: dict[int, OSError | None] = {}  # device → the error of its syncfs
    errors: dict[Path, OSError] = {}
    for directory in directories:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            errors[directory] = exc
            continue
        try:
            device = os.fstat(fd).st_dev
            if device not in synced:
                number = ctypes.get_errno() if syncfs(fd) != 0 else 0
                synced[device] = OSError(number, f"syncfs: {os.strerror(number)}", str(directory)) if number else None
            if (error := synced[device]) is not None:
                errors[directory] = error
        finally:
            os.close(fd)
    return errors


def fsync_dir(directory: Path) -> None:
    """Make the renames and creations in ``directory`` survive a power loss."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------
# Generic "version / count / lines" reader shared by both checkpoint kinds.


def _read_text(path: Path, raw: bytes | None = None) -> str | None:
    """The file's text (``raw``: its bytes, already read); None if there is no such file."""
    if raw is None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text at byte {e.start}; delete or restore the file") from e


def _java_lines(text: str) -> list[str]:
    lines = _JAVA_LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # a terminator ends the last line; it does not start an empty one
    return lines


def _java_split(line: str) -> list[str]:
    parts = _JAVA_WHITESPACE.split(line)
    while parts and parts[-1] == "":
        parts.pop()  # Java's String.split drops trailing empty strings, but keeps a leading one
    return parts


def _parse_int(path: Path, line_no: int, line: str, text: str, low: int, high: int) -> int:
    if _JAVA_INT.fullmatch(text) is None or not low <= int(text) <= high:
        raise CheckpointError(f"{path}: malformed line {line_no}: {line!r} ({text!r} is not an integer "
                              f"in [{low}, {high}])")
    return int(text)


def _read_entry_lines(path: Path, version: int, fields: int,
                      raw: bytes | None = None) -> list[tuple[int, str, list[str]]]:
    """Return ``(line number, line, fields)`` per entry line after checking the version and count
    (``raw``: the file's bytes, already read)."""
    text = _read_text(path, raw)
    if text is None:
        return []
    lines = _java_lines(text)
    if not lines:
        return []
    found_version = _parse_int(path, 1, lines[0], lines[0], _INT32_MIN, _INT32_MAX)
    if found_version != version:
        raise CheckpointError(f"{path}: line 1: unrecognised version {found_version}, expected {version}")
    if len(lines) == 1:
        return []
    expected = _parse_int(path, 2, lines[1], lines[1], _INT32_MIN, _INT32_MAX)
    entries: list[tuple[int, str, list[str]]] = []
    for line_no, line in enumerate(lines[2:], start=3):
        parts = _java_split(line)
        if len(parts) != fields:
            raise CheckpointError(f"{path}: malformed line {line_no}: {line!r} (expected {fields} "
                                  f"whitespace-separated fields, found {len(parts)})")
        entries.append((line_no, line, parts))
    if len(entries) != expected:
        raise CheckpointError(f"{path}: line 2 says {expected} entries but {len(entries)} follow")
    return entries


def _encode_checkpoint(version: int, lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in [str(version), str(len(lines)), *lines]).encode("utf-8")


def _check_range(path: Path, what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise CheckpointError(f"{path}: cannot write {what} {value}: outside [{low}, {high}]")


# ---------------------------------------------------------------------------------------------------
# Offset checkpoints


def read_offset_checkpoint(path: StrPath) -> dict[tuple[str, int], int]:
    """Read an offset checkpoint into ``{(topic, partition): offset}``; a missing file is empty."""
    p = Path(path)
    result: dict[tuple[str, int], int] = {}
    for line_no, line, (topic, partition, offset) in _read_entry_lines(p, OFFSET_CHECKPOINT_VERSION, 3):
        key = (topic, _parse_int(p, line_no, line, partition, _INT32_MIN, _INT32_MAX))
        # Kafka turns the entry list into a map, so a repeated partition is not an error: last one wins.
        result[key] = _parse_int(p, line_no, line, offset, _INT64_MIN, _INT64_MAX)
    return result


def write_offset_checkpoint(path: StrPath, entries: Mapping[tuple[str, int], int]) -> None:
    """Atomically write an offset checkpoint, entries sorted by (topic, partition)."""
    p = Path(path)
    lines = []
    for (topic, partition), offset in sorted(entries.items()):
        # A topic with whitespace (or none at all) would produce a line no reader can split back.
        if not topic or _JAVA_WHITESPACE.search(topic) or _JAVA_LINE_END.search(topic):
            raise CheckpointError(f"{p}: cannot write topic {topic!r}: empty or contains whitespace")
        _check_range(p, f"partition of {topic}", partition, _INT32_MIN, _INT32_MAX)
        _check_range(p, f"offset of {topic}-{partition}", offset, _INT64_MIN, _INT64_MAX)
        lines.append(f"{topic} {partition} {offset}")
    atomic_write_bytes(p, _encode_checkpoint(OFFSET_CHECKPOINT_VERSION, lines))


# ---------------------------------------------------------------------------------------------------
# leader-epoch-checkpoint


def read_leader_epoch_checkpoint(path: StrPath, raw: bytes | None = None) -> list[tuple[int, int]]:
    """Read ``[(epoch, start_offset), ...]`` in file order; a missing file is empty. ``raw``: the file's
    bytes, read already.

    Real brokers record epochs that no batch carries (spec §17), so no cross-check against the log
    happens here.
    """
    p = Path(path)
    result = []
    for line_no, line, (epoch, start_offset) in _read_entry_lines(p, LEADER_EPOCH_CHECKPOINT_VERSION, 2, raw):
        result.append((_parse_int(p, line_no, line, epoch, _INT32_MIN, _INT32_MAX),
                       _parse_int(p, line_no, line, start_offset, _INT64_MIN, _INT64_MAX)))
    return result


def write_leader_epoch_checkpoint(path: StrPath, entries: Iterable[tuple[int, int]], *,
                                  durable_rename: bool = True) -> None:
    """Atomically write a leader-epoch checkpoint, keeping the given order (``atomic_write_bytes``)."""
    atomic_write_bytes(path, _encode_leader_epochs(Path(path), entries), durable_rename=durable_rename)


def _encode_leader_epochs(path: Path, entries: Iterable[tuple[int, int]]) -> bytes:
    lines = []
    for epoch, start_offset in entries:
        _check_range(path, "leader epoch", epoch, _INT32_MIN, _INT32_MAX)
        _check_range(path, f"start offset of epoch {epoch}", start_offset, _INT64_MIN, _INT64_MAX)
        lines.append(f"{epoch} {start_offset}")
    return _encode_checkpoint(LEADER_EPOCH_CHECKPOINT_VERSION, lines)


class LeaderEpochFileCache:
    """A partition's ``leader-epoch-checkpoint`` held in memory (Kafka's ``LeaderEpochFileCache``):
    ``(epoch, start_offset)`` entries, ascending in both. Every change is written through at once, as
    Kafka's ``assign`` writes it, so a crash loses no entry an append or a recovery made."""

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        self.entries = read_leader_epoch_checkpoint(self.path)

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign_if_newer(self, epoch: int, start_offset: int) -> bool:
        """What an append (``UnifiedLog.append``) and segment recovery (``LogSegment.recover``) do
        with a v2 batch: an epoch ≥ 0 greater than the latest starts at the batch's base offset.
        Entries it contradicts (epoch or start offset at or past the new one) are dropped first."""
        if epoch < 0 or (self.entries and self.entries[-1][0] >= epoch):
            return False
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o < start_offset] + [(epoch, start_offset)]
        write_leader_epoch_checkpoint(self.path, self.entries)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or past ``end_offset`` (``truncateFromEnd``): the log was cut
        there, and an epoch that starts in records that are gone must not outlive them."""
        kept = _truncated_from_end(self.entries, end_offset)
        if kept == self.entries:
            return False
        self.entries = kept
        write_leader_epoch_checkpoint(self.path, kept)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start offset moved to ``start_offset`` (``truncateFromStart``): the entries starting at
        or below it go, and the last of them comes back starting at ``start_offset``, since its epoch
        still holds the records from there.

        The rename is not made durable (Kafka's ``truncateFromStartAsyncFlush`` flushes it later, off the
        caller's path): the entries it drops describe only records below the log start offset, and every
        load truncates them again from there, so the old file after a power loss is as good."""
        kept = _truncated_from_start(self.entries, start_offset)
        if kept == self.entries:
            return False
        self.entries = kept
        write_leader_epoch_checkpoint(self.path, kept, durable_rename=False)
        return True

    def clear(self) -> None:
        """Forget every entry (``clearAndFlush``): the log they described is gone."""
        if self.entries or self.path.exists():
            self.entries = []
            write_leader_epoch_checkpoint(self.path, [])


def _truncated_from_end(entries: list[tuple[int, int]], end_offset: int) -> list[tuple[int, int]]:
    return [(e, o) for e, o in entries if o < end_offset]


def _truncated_from_start(entries: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    below = [(e, o) for e, o in entries if o <= start_offset]
    return [(below[-1][0], start_offset)] + entries[len(below):] if below else entries


class LeaderEpochBatch:
    """The leader-epoch truncations of many partitions (``truncate_from_start`` then ``truncate_from_end``,
    as ``swap.align_leader_epochs`` makes them one at a time), written together by ``commit``: every new
    file is written, then all are made durable at once (one ``syncfs`` per file system: group commit,
    not one journal commit per file), and only then is each renamed over its old file, as a lone write
    renames it once it is durable. Whoever stages a partition's truncation holds that
    partition's lock until ``commit`` returns. Until then the old files stay, as after a crash before a
    lone write: every load truncates them again from the log start offset."""

    _FSYNC_THREADS = 16  # where there is no syncfs: concurrent fsyncs the file system can commit together

    def __init__(self) -> None:
        self._staged: list[tuple[Path, bytes, bool]] = []  # (checkpoint, its new content, durable rename)

    def truncate(self, directory: Path, *, log_start_offset: int, log_end_offset: int,
                 entries: list[tuple[int, int]] | None = None) -> None:
        """Stage the partition's truncation; ``entries``: its checkpoint as read under the lock already."""
        path = Path(directory) / LEADER_EPOCH_CHECKPOINT
        if entries is None:
            entries = read_leader_epoch_checkpoint(path)
        from_start = _truncated_from_start(entries, log_start_offset)
        kept = _truncated_from_end(from_start, log_end_offset)
        if kept != entries:  # a rename that drops entries at the end is made durable, as truncate_from_end makes it
            self._staged.append((path, _encode_leader_epochs(path, kept), kept != from_start))

    def commit(self) -> list[tuple[Path, OSError]]:
        """Write every staged file; returns the checkpoints that could not be written (their old file
        stays), with the error."""
        staged, self._staged = self._staged, []
        written = self._write_durably(staged)
        failed: list[tuple[Path, OSError]] = []
        for (path, _, durable), error in zip(staged, written, strict=True):
            try:
                if error is not None:
                    raise error
                os.replace(path.with_name(path.name + TMP_SUFFIX), path)
                if durable:
                    fsync_dir(path.parent)
            except OSError as exc:
                with contextlib.suppress(OSError):  # the error to report is the one above (write, syncfs or rename)
                    path.with_name(path.name + TMP_SUFFIX).unlink(missing_ok=True)
                failed.append((path, exc))
        return failed

    def _write_durably(self, staged: list[tuple[Path, bytes, bool]]) -> list[OSError | None]:
        """Each staged file's ``.tmp`` written and on disk before anything is renamed over the old file; the
        error of each (None: written). One ``syncfs`` per file system makes them durable together: an fsync
        of each new file would commit the file system's journal once per file (and with it every rename
        the marking made meanwhile), which bounds how fast partitions can be marked."""
        syncfs = _syncfs()

        def write(item: tuple[Path, bytes, bool]) -> OSError | None:
            try:
                _write_synced(item[0].with_name(item[0].name + TMP_SUFFIX), item[1], fsync=syncfs is None)
            except OSError as exc:
                return exc
            return None

        if syncfs is None:
            with ThreadPoolExecutor(min(self._FSYNC_THREADS, len(staged) or 1),
                                    thread_name_prefix="kafkalog-epoch-flush") as pool:
                return list(pool.map(write, staged))
        written = [write(item) for item in staged]
        unsynced = _sync_file_systems(syncfs, {path.parent for (path, _, _), error in zip(staged, written, strict=True)
                                               if error is None})
        return [error or unsynced.get(path.parent) for (path, _, _), error in zip(staged, written, strict=True)]


# ---------------------------------------------------------------------------------------------------
# partition.metadata and topic ids


def _encode_topic_id(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_topic_id(text: str) -> bytes | None:
    """Kafka's ``Uuid.fromString``: at most 24 chars of URL-safe base64 decoding to 16 bytes."""
    if len(text) > 24 or re.fullmatch(r"[A-Za-z0-9_-]+={0,2}", text) is None:
        return None
    stripped = text.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except ValueError:
        return None
    return raw if len(raw) == 16 else None


def new_topic_id() -> str:
    """A fresh topic id as Kafka's ``Uuid.randomUuid().toString()`` makes it.

    Like Kafka we start from a random version-4 UUID and retry on the reserved ids and on ids starting
    with ``-``, which command-line tools would take for an option.
    """
    while True:
        topic_id = _encode_topic_id(uuid.uuid4().bytes)
        if topic_id not in (ZERO_TOPIC_ID, METADATA_TOPIC_ID) and not topic_id.startswith("-"):
            return topic_id


def _metadata_field(path: Path, lines: list[str], index: int, key: str) -> str:
    line = lines[index]
    parts = _METADATA_SEPARATOR.split(line)
    if len(parts) != 2 or parts[0] != key:
        raise CheckpointError(f"{path}: malformed line {index + 1}: {line!r} (expected '{key}: <value>')")
    return parts[1]


def read_partition_metadata(path: StrPath) -> str:
    """Return the topic id stored in a ``partition.metadata`` file (canonical 22-char form)."""
    p = Path(path)
    text = _read_text(p)
    if text is None:
        raise CheckpointError(f"{p}: partition metadata file is missing")
    lines = _java_lines(text)
    if len(lines) != 2:
        raise CheckpointError(f"{p}: malformed partition metadata {text!r}: expected exactly 2 lines, "
                              f"found {len(lines)}")
    version_text = _metadata_field(p, lines, 0, "version")
    version = _parse_int(p, 1, lines[0], version_text, _INT32_MIN, _INT32_MAX)
    # Newer versions are accepted, as Kafka does, so a downgraded broker can still read the file.
    if version < PARTITION_METADATA_VERSION:
        raise CheckpointError(f"{p}: line 1: unrecognised partition metadata version {version}")
    id_text = _metadata_field(p, lines, 1, "topic_id")
    raw = _decode_topic_id(id_text)
    if raw is None:
        raise CheckpointError(f"{p}: line 2: {lines[1]!r}: {id_text!r} is not a base64 topic id of 16 bytes")
    if raw == bytes(16):
        raise CheckpointError(f"{p}: line 2: the zero topic id {id_text!r} is not a valid topic id")
    return _encode_topic_id(raw)


def write_partition_metadata(path: StrPath, topic_id: str) -> None:
    """Atomically write ``version: 0\\ntopic_id: <topic_id>`` (no trailing newline, as Kafka does)."""
    p = Path(path)
    raw = _decode_topic_id(topic_id)
    if raw is None or raw == bytes(16):
        raise CheckpointError(f"{p}: cannot write topic id {topic_id!r}: not a non-zero 16-byte base64 id")
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {_encode_topic_id(raw)}"
    atomic_write_bytes(p, text.encode("ascii"))


def check_log_start_offset(directory: Path | str, log_start_offset: int, log_end_offset: int) -> None:
    """A checkpointed log start offset past the log end is refused: records appended then would sit
    below the log start offset, where no reader looks, and retention would plan away every segment."""
    if log_start_offset > log_end_offset:
        raise KafkaLogError(f"{directory}: the log start offset checkpoint says {log_start_offset} but the log "
                            f"ends at {log_end_offset}; correct or remove its entry in "
                            f"{LOG_START_OFFSET_CHECKPOINT} before using this partition")
