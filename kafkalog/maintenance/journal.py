"""The maintenance journal: append-only JSON lines, one file per log dir (``kafkalog-journal.jsonl``).

Every action that changes a log (mark deleted, sweep, compact, recover) appends one line: run id,
wall time, partition, action, segments, reason, bytes and the log start offset before/after. Each
action's lines are written with a single ``write`` on an ``O_APPEND`` descriptor, so concurrent writers
never interleave within a line, and a crash can at worst leave one torn last line, which readers skip.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kafkalog.log import names


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class JournalEntry:
    run_id: str
    time_ms: int
    topic: str
    partition: int
    action: str  # mark-deleted | sweep | roll | compact | recover
    segments: tuple[int, ...] = ()
    reason: str = ""
    bytes: int = 0
    log_start_offset_before: int | None = None
    log_start_offset_after: int | None = None
    files: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        # The fields by name, not ``asdict`` (which deep-copies each one): retention journals every segment it marks.
        doc = {name: getattr(self, name) for name in _FIELDS}
        doc["segments"] = list(self.segments)
        doc["files"] = list(self.files)
        return _ENCODE(doc)


_FIELDS = tuple(f.name for f in fields(JournalEntry))
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # one encoder for every line, not one per line


_GROUP: ContextVar[dict[Path | str, int] | None] = ContextVar("kafkalog_journal_group", default=None)


@contextmanager
def group_commit() -> Iterator[None]:
    """Within this block lines are still written at once (a killed process loses none of them), but each
    log dir's journal is opened once and fsynced once, when the block ends: a batch over many
    partitions pays one fsync per log dir, not one per partition (group commit)."""
    if _GROUP.get() is not None:
        yield
        return
    journals: dict[Path | str, int] = {}  # log dir -> its journal's descriptor
    token = _GROUP.set(journals)
    try:
        yield
    finally:
        _GROUP.reset(token)
        try:
            for fd in journals.values():
                os.fsync(fd)
        finally:
            for fd in journals.values():
                os.close(fd)


def append(log_dir: Path, *entries: JournalEntry) -> None:
    """Append ``entries`` in one write, fsynced now or, in a ``group_commit`` block, at its end (an action
    on a partition journals its segments together)."""
    if not entries:
        return
    lines = "".join(entry.to_json() + "\n" for entry in entries).encode()
    group = _GROUP.get()
    if group is None:
        fd = _open(log_dir)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    fd = group.get(log_dir, -1)
    if fd < 0:
        fd = group[log_dir] = _open(log_dir)
    os.write(fd, lines)


def _open(log_dir: Path) -> int:
    return os.open(Path(log_dir) / names.JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def read(log_dir: Path, *, topic: str | None = None, partition: int | None = None,
         run_id: str | None = None) -> Iterator[dict[str, Any]]:
    path = Path(log_dir) / names.JOURNAL_FILE
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a torn last line after a crash
            if topic is not None and doc.get("topic") != topic:
                continue
            if partition is not None and doc.get("partition") != partition:
                continue
            if run_id is not None and doc.get("run_id") != run_id:
                continue
            yield doc
