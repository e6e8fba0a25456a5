"""What each step of a cycle leaves in its run dir (``results/<step>[-<shard>].json``), typed: the report
(``report.summarize``) and the file-delete wait read these back. Each is a frozen dataclass whose JSON
is its fields and a version; reading refuses an unknown or a missing key (``PlanError`` naming the
file), so a misspelt key is an error, never a silent zero. Entries inside (errors, applied marks,
shards) keep the JSON shapes the steps document.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from kafkalog.cycle.documents import (
    Doc,
    PlanError,
    as_bool,
    as_int,
    as_list,
    as_str,
    check_keys,
    check_version_and_keys,
    read_json,
    write_json,
)

VERSION = 1
R = TypeVar("R", bound="StepResult")


class StepResult:
    """A step's result as saved in the run dir."""

    STEP: ClassVar[str]

    def to_json(self) -> Doc:
        return {"version": VERSION, **{f.name: getattr(self, f.name) for f in fields(self)}}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls: type[R], doc: Any, where: str) -> R:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        check_version_and_keys(doc, where, f"a {cls.STEP} result", names, VERSION)
        return cls(**{n: doc[n] for n in names})

    def save(self, run_dir: Path | str, shard: int | None = None) -> Doc:
        doc = self.to_json()
        write_json(result_path(run_dir, self.STEP, shard), doc)
        return doc

    @classmethod
    def load(cls: type[R], run_dir: Path | str, shard: int | None = None) -> R | None:
        """The step's result in ``run_dir``, or None when the step left none."""
        path = result_path(run_dir, cls.STEP, shard)
        return cls.from_json(read_json(path), str(path)) if path.exists() else None


def result_path(run_dir: Path | str, step: str, shard: int | None = None) -> Path:
    return Path(run_dir) / "results" / (f"{step}.json" if shard is None else f"{step}-{shard:04d}.json")


@dataclass(frozen=True)
class ScanResult(StepResult):
    STEP: ClassVar[str] = "scan_partitions"

    run_dir: str
    now_ms: int
    dry_run: bool
    partitions: int
    bytes: int
    shards: list[Doc]  # {"shard", "path", "partitions", "bytes"}
    recovered: list[str]
    topic_deletes_finished: list[str]
    errors: list[Doc]  # {"topic", "partition", "error"}; partition null for a topic-wide error


@dataclass(frozen=True)
class ShardPlanResult(StepResult):
    STEP: ClassVar[str] = "plan_retention"

    shard: int
    plan: str
    partitions: int
    deletable_partitions: int
    segments: int
    bytes: int
    errors: list[Doc]
    topics_read: list[str]


@dataclass(frozen=True)
class MarkResult(StepResult):
    STEP: ClassVar[str] = "mark_deleted"

    shard: int
    now_ms: int
    dry_run: bool
    applied: list[Doc]  # per partition: what was marked, and (if it marked files) ``due_ms``
    errors: list[Doc]  # ``locked``: another process held the partition
    segments: int
    bytes: int
    newest_mark_ms: int | None  # None: nothing marked
    file_delete_delay_ms: int
    topics: dict[str, Doc]  # per topic: segments_deleted, bytes_deleted, log_start_offsets


@dataclass(frozen=True)
class SelectResult(StepResult):
    STEP: ClassVar[str] = "select_logs_to_clean"

    plan: str
    selected: int
    cleanable_bytes: int
    checkpoint_resets: int
    errors: list[Doc]
    would_fail: list[Doc]  # a dry run: the partitions the compaction would fail on
    dry_run: bool
    wall_now_ms: int | None
    topics_read: list[str]


@dataclass(frozen=True)
class SweepResult(StepResult):
    STEP: ClassVar[str] = "delete_marked"

    wall_clock_ms: int
    dry_run: bool
    errors: list[Doc]
    deleted_files: int
    deleted_bytes: int
    waiting_files: int
    waiting_bytes: int
    next_due_ms: int | None
    deleted_dirs: list[str]
    deleted_dir_bytes: int
    waiting_dirs: list[Any]
    freed: dict[str, Doc]  # per topic: files_deleted, bytes_freed


# --- the compaction job's report ----------------------------------------------------------------------------
# The Spark job (``spark_jobs/compact_logs.py``) leaves ``compaction-report.json``: an audit document of
# the whole job (its clocks, plan, Spark stages, timings and each partition's round) that the job
# builds as it goes. What the cycle reads from it is typed here; every key is known, so a report of
# another shape (a misspelt key, another version) is refused naming the file.
JOB_REPORT_VERSION = 2
JOB_STATUSES = ("ok", "partitions-failed", "refused", "spark-failed")
JOB_REPORT_KEYS = ("status", "started_at", "timings", "partitions", "totals")
JOB_REPORT_OPTIONAL_KEYS = ("error", "now_ms", "wall_now_ms", "log_dirs", "numba_cache_dir", "scratch_dir", "plan",
                            "run_id", "spark")
JOB_PARTITION_KEYS = ("topic", "partition", "ok", "status", "error")
JOB_PARTITION_OPTIONAL_KEYS = ("stage", "first_dirty_offset", "first_uncleanable_offset", "started_at",
                               "finished_at", "log_dir", "end_offset", "groups", "stats", "round")


@dataclass(frozen=True)
class CompactionOutcome:
    """One partition in the job's report: ``status`` cleaned, locked (another cleaner held it) or failed."""

    topic: str
    partition: int
    ok: bool
    status: str
    error: str | None
    stats: Doc | None  # the cleaner's counts (records_read, records_written, bytes_read, ...) when cleaned


@dataclass(frozen=True)
class CompactionJobReport:
    status: str  # one of JOB_STATUSES
    error: str | None  # why the job refused or Spark failed
    partitions: tuple[CompactionOutcome, ...]
    totals: dict[str, int]
    topics_read: tuple[str, ...]  # the topics of the partitions the job set out to clean

    @classmethod
    def from_json(cls, doc: Any, where: str) -> CompactionJobReport:
        check_version_and_keys(doc, where, "a compaction job report", JOB_REPORT_KEYS, JOB_REPORT_VERSION,
                               optional=JOB_REPORT_OPTIONAL_KEYS)
        if doc["status"] not in JOB_STATUSES:
            raise PlanError(f"{where}: status {doc['status']!r} is not one of {', '.join(JOB_STATUSES)}")
        outcomes = []
        for i, p in enumerate(as_list(doc["partitions"], where, "partitions")):
            entry = f"{where}: partitions[{i}]"
            check_keys(p, entry, JOB_PARTITION_KEYS, JOB_PARTITION_OPTIONAL_KEYS)
            outcomes.append(CompactionOutcome(
                as_str(p["topic"], entry, "topic"), as_int(p["partition"], entry, "partition"),
                as_bool(p["ok"], entry, "ok"), str(p["status"]), p["error"], p.get("stats")))
        targets = (doc.get("plan") or {}).get("targets", [])
        return cls(doc["status"], doc.get("error"), tuple(outcomes), dict(doc["totals"]),
                   tuple(sorted({t["topic"] for t in targets})))

    @classmethod
    def load(cls, run_dir: Path | str) -> CompactionJobReport | None:
        """The job's report in ``run_dir``, or None when the job left none."""
        path = compaction_report_path(run_dir)
        return cls.from_json(read_json(path), str(path)) if path.exists() else None

    @property
    def cleaned(self) -> tuple[CompactionOutcome, ...]:
        return tuple(p for p in self.partitions if p.status == "cleaned")


def compaction_report_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / "compaction-report.json"
