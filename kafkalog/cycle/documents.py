"""The plan documents a cycle passes between its steps, typed: a retention plan and a compaction plan,
each a frozen dataclass with a versioned ``to_json`` and a ``from_json`` that refuses what it does not
know. ``kafkalog retention plan --json`` *is* a retention plan document and ``kafkalog compact --dry-run
--json`` *is* a compaction plan document; the plan files of a run are the same documents.

Reading is strict: a key a document does not define, a key it needs that is missing, or a value of the
wrong kind is a ``PlanError`` naming the document, the entry and the key, never a silent default
(``decode`` reads any document typed by its dataclass that way). The keys the CLI adds around a plan when it
prints one (``REPORT_KEYS``: the run id, the action, what was applied or cleaned) are known and not
part of the plan: its output can be given back as a plan file.
"""

from __future__ import annotations

import functools
import json
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from kafkalog.errors import KafkaLogError

VERSION = 1
RETENTION_PLAN_KIND = "kafkalog-retention-plan"
COMPACTION_PLAN_KIND = "kafkalog-compaction-plan"

Doc = dict[str, Any]
# What ``kafkalog retention plan|apply --json`` and ``kafkalog compact --json`` print around the plan.
REPORT_KEYS = {RETENTION_PLAN_KIND: ("run_id", "action", "applied"),
               COMPACTION_PLAN_KIND: ("run_id", "dry_run", "cleaned")}
T = TypeVar("T")


class PlanError(KafkaLogError):
    """A plan document is unreadable, of another kind or version, or malformed."""


def write_json(path: Path | str, doc: Mapping[str, Any]) -> None:
    """Write a document atomically (tmp + rename), so a reader never sees half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def read_json(path: Path | str) -> Doc:
    from kafkalog.log.config import read_regular_text

    try:
        doc = json.loads(read_regular_text(path))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PlanError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{path}: expected a JSON object")
    return doc


# --- strict reading ------------------------------------------------------------------------------------
# check_keys: an object with exactly these keys; as_int/as_str/as_list/as_number/as_bool: the value of ``key``
# if it is of that kind, else a PlanError naming ``where`` and ``key``. The run-dir documents read with them.
def check_keys(doc: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: expected an object, not {json.dumps(doc)[:100]}")
    unknown = sorted(set(doc) - set(required) - set(optional))
    missing = [key for key in required if key not in doc]
    if unknown or missing:
        raise PlanError(f"{where}: " + "; ".join(
            ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))
    return doc


def as_int(value: Any, where: str, key: str, *, minimum: int | None = None, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        kind = "an integer" + (f" of {minimum} or more" if minimum is not None else "")
        raise PlanError(f"{where}: {key} must be {kind}{' or null' if nullable else ''}, not {json.dumps(value)}")
    return value


def as_str(value: Any, where: str, key: str, *, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise PlanError(f"{where}: {key} must be a string{' or null' if nullable else ''}, not {json.dumps(value)}")
    return value


def as_list(value: Any, where: str, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"{where}: {key} must be a list, not {json.dumps(value)[:100]}")
    return value


def as_number(value: Any, where: str, key: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise PlanError(f"{where}: {key} must be a number, not {json.dumps(value)}")
    return float(value)


def as_bool(value: Any, where: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{where}: {key} must be true or false, not {json.dumps(value)}")
    return value


def check_version_and_keys(doc: Any, where: str, what: str, names: Sequence[str], version: int = VERSION, *,
                           optional: Sequence[str] = ()) -> None:
    """A document written as ``{"version": version, <names>..., <optional>...}``: ``PlanError`` naming
    ``what`` it should be, the version found, and each unknown and missing key."""
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: expected a JSON object")
    unknown = sorted(set(doc) - {"version", *names, *optional})
    missing = [n for n in names if n not in doc]
    if doc.get("version") != version or unknown or missing:
        raise PlanError(f"{where}: not {what} of this kafkalog (version {doc.get('version')!r}"
                        + (f"; unknown key(s) {', '.join(unknown)}" if unknown else "")
                        + (f"; missing key(s) {', '.join(missing)}" if missing else "") + ")")


def _header(doc: Any, where: str, kind: str) -> None:
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: expected a JSON object")
    if doc.get("kind") != kind or doc.get("version") != VERSION:
        raise PlanError(f"{where}: not a {kind} version {VERSION} (kind={doc.get('kind')!r}, "
                        f"version={doc.get('version')!r}); write it with the kafkalog of this version")


def plain(value: Any) -> Any:
    """A dataclass tree as JSON values (tuples as lists)."""
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@functools.cache
def _fields_and_types(kind: type) -> tuple[dict[str, None], dict[str, Any]]:
    """A dataclass's field names (in order, as dict keys) and their types: resolved once per class, not
    once per decoded entry (a result holds tens of thousands)."""
    return dict.fromkeys(f.name for f in fields(kind)), typing.get_type_hints(kind)


def decode(kind: Any, value: Any, where: str) -> Any:
    """``value`` (JSON) as ``kind``: a dataclass (exactly its fields, each decoded by its type), tuple[X, ...],
    dict[str, X], int, float, str, bool, or an Optional of one; anything else is a ``PlanError`` naming
    ``where`` and the key inside it."""
    if kind is int or kind is str or kind is bool:  # the leaves, most of a document's values, first
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise PlanError(f"{where}: expected {kind.__name__}, not {value!r:.100}")
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return decode(inner, value, where)
    if hasattr(kind, "__dataclass_fields__"):
        names, hints = _fields_and_types(kind)
        if not isinstance(value, dict) or value.keys() != names.keys():
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise PlanError(f"{where}: expected the keys {', '.join(names)}, not {got}")
        return kind(**{n: decode(hints[n], value[n], f"{where}.{n}") for n in names})
    if origin is tuple:
        if not isinstance(value, list):
            raise PlanError(f"{where}: expected a list, not {value!r:.100}")
        return tuple(decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise PlanError(f"{where}: expected an object, not {value!r:.100}")
        return {k: decode(args[1], v, f"{where}[{k}]") for k, v in value.items()}
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise PlanError(f"{where}: expected {getattr(kind, '__name__', kind)}, not {value!r:.100}")


# --- shared entries ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionError:
    """A partition a step could not handle (``partition`` None: the whole topic; ``topic`` None: a log
    dir's deleted-topic dir); ``locked``: only because another process held its lock past the wait
    (Kafka's cleaner and retention skip such a log this time; a later run does it)."""

    topic: str | None
    partition: int | None
    error: str
    locked: bool = False

    def to_json(self) -> Doc:
        return {"topic": self.topic, "partition": self.partition, "error": self.error, "locked": self.locked}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PartitionError:
        d = check_keys(doc, where, ("topic", "partition", "error", "locked"))
        return cls(as_str(d["topic"], where, "topic", nullable=True),
                   as_int(d["partition"], where, "partition", minimum=0, nullable=True),
                   as_str(d["error"], where, "error"), as_bool(d["locked"], where, "locked"))


def _errors(value: Any, where: str) -> tuple[PartitionError, ...]:
    return tuple(PartitionError.from_json(e, f"{where}[{i}]") for i, e in enumerate(as_list(value, where, "errors")))


# --- retention -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentDeletion:
    """A segment retention deletes, and why (``reason``: log-start-offset, retention.bytes, retention.ms)."""

    base_offset: int
    next_offset: int
    bytes: int
    reason: str
    detail: str

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SegmentDeletion:
        d = check_keys(doc, where, [f.name for f in fields(cls)])
        return cls(as_int(d["base_offset"], where, "base_offset", minimum=0),
                   as_int(d["next_offset"], where, "next_offset", minimum=0),
                   as_int(d["bytes"], where, "bytes", minimum=0),
                   as_str(d["reason"], where, "reason"), as_str(d["detail"], where, "detail"))


@dataclass(frozen=True)
class PartitionRetention:
    """Kafka's ``deleteOldSegments`` decisions for one partition at ``now_ms``."""

    topic: str
    partition: int
    log_dir: str
    now_ms: int
    segments: tuple[SegmentDeletion, ...]
    bytes: int
    roll_first: bool
    log_start_offset_before: int
    log_start_offset_after: int
    blocked_by: tuple[str, ...]

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PartitionRetention:
        d = check_keys(doc, where, [f.name for f in fields(cls)])
        where = f"{where} ({d['topic']}-{d['partition']})"
        segments = tuple(SegmentDeletion.from_json(s, f"{where} segments[{i}]")
                         for i, s in enumerate(as_list(d["segments"], where, "segments")))
        return cls(as_str(d["topic"], where, "topic"), as_int(d["partition"], where, "partition", minimum=0),
                   as_str(d["log_dir"], where, "log_dir"), as_int(d["now_ms"], where, "now_ms", minimum=0), segments,
                   as_int(d["bytes"], where, "bytes", minimum=0), as_bool(d["roll_first"], where, "roll_first"),
                   as_int(d["log_start_offset_before"], where, "log_start_offset_before", minimum=0),
                   as_int(d["log_start_offset_after"], where, "log_start_offset_after", minimum=0),
                   tuple(as_str(b, where, "blocked_by") for b in as_list(d["blocked_by"], where, "blocked_by")))


@dataclass(frozen=True)
class RetentionPlanDocument:
    """A retention plan: per partition what ``deleteOldSegments`` deletes at ``now_ms``, for the store of
    ``log_dirs`` (carried out on another store it would mark that store's files: refused)."""

    KIND: ClassVar[str] = RETENTION_PLAN_KIND

    now_ms: int
    log_dirs: tuple[str, ...]
    partitions: tuple[PartitionRetention, ...]
    errors: tuple[PartitionError, ...]

    def to_json(self) -> Doc:
        return {"version": VERSION, "kind": self.KIND, "now_ms": self.now_ms, "log_dirs": list(self.log_dirs),
                "partitions": plain(self.partitions), "errors": [e.to_json() for e in self.errors]}

    @classmethod
    def from_json(cls, doc: Any, where: str = "retention plan") -> RetentionPlanDocument:
        _header(doc, where, cls.KIND)
        d = check_keys(doc, where, ("version", "kind", "now_ms", "log_dirs", "partitions", "errors"),
                       REPORT_KEYS[cls.KIND])
        log_dirs = tuple(as_str(x, where, "log_dirs") for x in as_list(d["log_dirs"], where, "log_dirs"))
        partitions = tuple(PartitionRetention.from_json(p, f"{where}: partitions[{i}]")
                           for i, p in enumerate(as_list(d["partitions"], where, "partitions")))
        return cls(as_int(d["now_ms"], where, "now_ms", minimum=0), log_dirs, partitions,
                   _errors(d["errors"], f"{where}: errors"))

    @property
    def due(self) -> tuple[PartitionRetention, ...]:
        """The partitions with something to delete."""
        return tuple(p for p in self.partitions if p.segments)


# --- compaction ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionTarget:
    """A log the cleaner cleans: its cleanable range ``[first_dirty_offset, first_uncleanable_offset)``."""

    topic: str
    partition: int
    log_dir: str
    first_dirty_offset: int
    first_uncleanable_offset: int
    cleanable_bytes: int
    total_bytes: int
    dirty_ratio: float
    trigger: str | None  # dirty-ratio or max-compaction-lag; None: asked for by name, whatever the ratio
    limited_by: str  # what sets the first uncleanable offset

    @classmethod
    def from_json(cls, doc: Any, where: str) -> CompactionTarget:
        d = check_keys(doc, where, [f.name for f in fields(cls)])
        target = cls(as_str(d["topic"], where, "topic"), as_int(d["partition"], where, "partition", minimum=0),
                     as_str(d["log_dir"], where, "log_dir"),
                     as_int(d["first_dirty_offset"], where, "first_dirty_offset", minimum=0),
                     as_int(d["first_uncleanable_offset"], where, "first_uncleanable_offset", minimum=0),
                     as_int(d["cleanable_bytes"], where, "cleanable_bytes", minimum=0),
                     as_int(d["total_bytes"], where, "total_bytes", minimum=0),
                     as_number(d["dirty_ratio"], where, "dirty_ratio"),
                     as_str(d["trigger"], where, "trigger", nullable=True),
                     as_str(d["limited_by"], where, "limited_by"))
        if target.first_uncleanable_offset < target.first_dirty_offset:
            raise PlanError(f"{where}: {target.topic}-{target.partition} [{target.first_dirty_offset}, "
                            f"{target.first_uncleanable_offset}) is not a valid range")
        return target


@dataclass(frozen=True)
class CheckpointResetEntry:
    """A cleaner-offset-checkpoint entry Kafka rewrites while choosing (spec §8.3)."""

    topic: str
    partition: int
    offset: int

    @classmethod
    def from_json(cls, doc: Any, where: str) -> CheckpointResetEntry:
        d = check_keys(doc, where, ("topic", "partition", "offset"))
        return cls(as_str(d["topic"], where, "topic"), as_int(d["partition"], where, "partition", minimum=0),
                   as_int(d["offset"], where, "offset", minimum=0))


@dataclass(frozen=True)
class NotSelected:
    """A log the cleaner leaves this time, and why."""

    topic: str
    partition: int
    kind: str
    reason: str

    @classmethod
    def from_json(cls, doc: Any, where: str) -> NotSelected:
        d = check_keys(doc, where, ("topic", "partition", "kind", "reason"))
        return cls(as_str(d["topic"], where, "topic"), as_int(d["partition"], where, "partition", minimum=0),
                   as_str(d["kind"], where, "kind"), as_str(d["reason"], where, "reason"))


@dataclass(frozen=True)
class CompactionPlanDocument:
    """A compaction plan: what the cleaner cleans at ``now_ms`` (``topic``/``partitions``: asked for by
    name, whatever the dirty ratio), the checkpoint resets whoever carries it out applies first (whether
    or not the log is selected), and why the other logs stay."""

    KIND: ClassVar[str] = COMPACTION_PLAN_KIND

    now_ms: int
    topic: str | None
    partitions: tuple[int, ...] | None
    selected: tuple[CompactionTarget, ...]
    checkpoint_resets: tuple[CheckpointResetEntry, ...]
    not_selected: tuple[NotSelected, ...]
    errors: tuple[PartitionError, ...]

    def to_json(self) -> Doc:
        return {"version": VERSION, "kind": self.KIND, "now_ms": self.now_ms, "topic": self.topic,
                "partitions": None if self.partitions is None else list(self.partitions),
                "selected": plain(self.selected), "checkpoint_resets": plain(self.checkpoint_resets),
                "not_selected": plain(self.not_selected), "errors": [e.to_json() for e in self.errors]}

    @classmethod
    def from_json(cls, doc: Any, where: str = "compaction plan") -> CompactionPlanDocument:
        _header(doc, where, cls.KIND)
        d = check_keys(doc, where, ("version", "kind", "now_ms", "topic", "partitions", "selected", "checkpoint_resets",
                               "not_selected", "errors"), REPORT_KEYS[cls.KIND])
        partitions = None if d["partitions"] is None else tuple(
            as_int(p, where, "partitions", minimum=0) for p in as_list(d["partitions"], where, "partitions"))
        selected = tuple(CompactionTarget.from_json(s, f"{where}: selected[{i}]")
                         for i, s in enumerate(as_list(d["selected"], where, "selected")))
        seen: set[tuple[str, int]] = set()
        for target in selected:
            if (target.topic, target.partition) in seen:
                raise PlanError(f"{where}: {target.topic}-{target.partition} is selected twice")
            seen.add((target.topic, target.partition))
        resets = tuple(CheckpointResetEntry.from_json(r, f"{where}: checkpoint_resets[{i}]")
                       for i, r in enumerate(as_list(d["checkpoint_resets"], where, "checkpoint_resets")))
        not_selected = tuple(NotSelected.from_json(n, f"{where}: not_selected[{i}]")
                             for i, n in enumerate(as_list(d["not_selected"], where, "not_selected")))
        return cls(as_int(d["now_ms"], where, "now_ms", minimum=0), as_str(d["topic"], where, "topic", nullable=True),
                   partitions, selected, resets, not_selected, _errors(d["errors"], f"{where}: errors"))


def read_document(path: Path | str, cls: type[T]) -> T:
    """A plan file of ``cls`` (``RetentionPlanDocument`` or ``CompactionPlanDocument``), read strictly."""
    return cls.from_json(read_json(path), str(path))  # type: ignore[attr-defined, no-any-return]
