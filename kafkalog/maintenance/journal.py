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
        return json.dumps(doc, separators=(",", ":"), sort_keys=False)


_FIELDS = tuple(f.name for f in fields(JournalEntry))


def append(log_dir: Path, *entries: JournalEntry) -> None:
    """Append ``entries`` in one write and one fsync (an action on a partition journals its segments together)."""
    if not entries:
        return
    lines = "".join(entry.to_json() + "\n" for entry in entries).encode()
    fd = os.open(Path(log_dir) / names.JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, lines)
        os.fsync(fd)
    finally:
        os.close(fd)


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
