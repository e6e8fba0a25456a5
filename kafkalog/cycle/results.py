"""What each step of a cycle leaves in its run dir (``results/<step>[-<shard>].json``), typed: the report
(``report.summarize``) and the file-delete wait read these back. Each is a frozen dataclass whose JSON
is its fields and a version; reading refuses an unknown or a missing key, in the result or in any entry
inside it (``PlanError`` naming the file and the key), so a misspelt key is an error, never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from kafkalog.cycle.documents import (
    Doc,
    PartitionError,
    PlanError,
    as_bool,
    as_int,
    as_list,
    as_str,
    check_keys,
    check_version_and_keys,
    decode,
    plain,
    read_json,
    write_json,
)

VERSION = 1
R = TypeVar("R", bound="StepResult")


class StepResult:
    """A step's result as saved in the run dir: its fields (entries included) decoded by their types."""

    STEP: ClassVar[str]

    def to_json(self) -> Doc:
        return {"version": VERSION, **plain(self)}

    @classmethod
    def from_json(cls: type[R], doc: Any, where: str) -> R:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        check_version_and_keys(doc, where, f"a {cls.STEP} result", names, VERSION)
        return decode(cls, {n: doc[n] for n in names}, where)  # type: ignore[no-any-return]

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
class ShardEntry:
    """A shard the scan wrote: its partition list's file, and how much it holds."""

    shard: int
    path: str
    partitions: int
    bytes: int


@dataclass(frozen=True)
class ScanResult(StepResult):
    STEP: ClassVar[str] = "scan_partitions"

    run_dir: str
    now_ms: int
    dry_run: bool
    partitions: int
    bytes: int
    shards: tuple[ShardEntry, ...]
    recovered: tuple[str, ...]
    topic_deletes_finished: tuple[str, ...]
    errors: tuple[PartitionError, ...]  # partition None: a topic-wide error


@dataclass(frozen=True)
class ShardPlanResult(StepResult):
    STEP: ClassVar[str] = "plan_retention"

    shard: int
    plan: str
    partitions: int
    deletable_partitions: int
    segments: int
    bytes: int
    errors: tuple[PartitionError, ...]
    topics_read: tuple[str, ...]


@dataclass(frozen=True)
class AppliedMark:
    """What applying a plan marked in one partition (a dry run: what it would mark, nothing marked)."""

    topic: str
    partition: int
    segments: tuple[int, ...]  # base offsets
    bytes: int
    log_start_offset_before: int
    log_start_offset_after: int
    rolled: bool
    marked_files: tuple[str, ...]
    mark_time_ms: int | None  # the wall clock stamped on the marked files (None: none marked)
    due_ms: int | None  # mark_time_ms + the topic's file.delete.delay.ms (None: none marked)


@dataclass(frozen=True)
class RetentionApplied:
    """A retention plan carried out (``kafkalog.cycle.retention.apply_retention_plan``)."""

    now_ms: int
    dry_run: bool
    applied: tuple[AppliedMark, ...]
    errors: tuple[PartitionError, ...]  # ``locked``: another process held the partition
    segments: int
    bytes: int
    newest_mark_ms: int | None  # None: nothing marked
    file_delete_delay_ms: int  # the largest delay of a topic with marks


@dataclass(frozen=True)
class TopicMarked:
    segments_deleted: int
    bytes_deleted: int
    log_start_offsets: dict[str, int]  # per partition number


@dataclass(frozen=True)
class MarkResult(StepResult, RetentionApplied):
    """A shard's retention plan carried out, with what it changed per topic."""

    STEP: ClassVar[str] = "mark_deleted"

    shard: int
    topics: dict[str, TopicMarked]


@dataclass(frozen=True)
class SelectResult(StepResult):
    STEP: ClassVar[str] = "select_logs_to_clean"

    plan: str
    selected: int
    cleanable_bytes: int
    checkpoint_resets: int
    errors: tuple[PartitionError, ...]
    would_fail: tuple[PartitionError, ...]  # a dry run: the partitions the compaction would fail on
    dry_run: bool
    wall_now_ms: int | None
    topics_read: tuple[str, ...]


@dataclass(frozen=True)
class TopicFreed:
    files_deleted: int
    bytes_freed: int


@dataclass(frozen=True)
class SweepResult(StepResult):
    STEP: ClassVar[str] = "delete_marked"

    wall_clock_ms: int
    dry_run: bool
    errors: tuple[PartitionError, ...]
    deleted_files: int
    deleted_bytes: int
    waiting_files: int
    waiting_bytes: int
    next_due_ms: int | None
    deleted_dirs: tuple[str, ...]
    deleted_dir_bytes: int
    waiting_dirs: tuple[str, ...]
    freed: dict[str, TopicFreed]


# --- the compaction job's report ----------------------------------------------------------------------------
# The Spark job (``spark_jobs/compact_logs.py``) leaves ``compaction-report.json``: an audit document of
# the whole job (its clocks, plan, Spark stages, timings and each partition's round) that the job
# builds as it goes. What the cycle reads from it is typed here; every key is known, so a report of
# another shape (a misspelt key, another version) is refused naming the file.
JOB_REPORT_VERSION = 2
JOB_STATUSES = ("ok", "partitions-failed", "refused", "spark-failed")
JOB_REPORT_KEYS = ("status", "error", "plan", "started_at", "timings", "partitions", "totals")
# Written as the job gets that far: a job refused at its arguments has none of them.
JOB_REPORT_PROGRESS_KEYS = ("now_ms", "wall_now_ms", "log_dirs", "numba_cache_dir", "scratch_dir", "run_id", "spark")
JOB_PLAN_KEYS = ("source", "topic", "partition", "targets")
JOB_TARGET_KEYS = ("topic", "partition", "first_dirty_offset", "first_uncleanable_offset")
JOB_PARTITION_KEYS = ("topic", "partition", "ok", "status", "error")
JOB_PARTITION_PROGRESS_KEYS = ("stage", "first_dirty_offset", "first_uncleanable_offset", "started_at",
                               "finished_at", "log_dir", "end_offset", "groups", "stats", "round")
COUNTED = ("records_read", "records_written", "bytes_read", "bytes_written")  # of the cleaner's stats


@dataclass(frozen=True)
class CleanedCounts:
    """What the cleaner read and wrote in one partition (its stats' counts; the rest are timings)."""

    records_read: int
    records_written: int
    bytes_read: int
    bytes_written: int


@dataclass(frozen=True)
class CompactionOutcome:
    """One partition in the job's report: ``status`` cleaned, locked (another cleaner held it) or failed."""

    topic: str
    partition: int
    ok: bool
    status: str
    error: str | None
    counts: CleanedCounts | None  # when cleaned

    @classmethod
    def from_json(cls, p: Any, where: str) -> CompactionOutcome:
        check_keys(p, where, JOB_PARTITION_KEYS, JOB_PARTITION_PROGRESS_KEYS)
        status = as_str(p["status"], where, "status")
        counts = None
        if status == "cleaned":
            if "stats" not in p:
                raise PlanError(f"{where}: a cleaned partition without its stats")
            stats = check_keys(p["stats"], f"{where}: stats", COUNTED, [k for k in p["stats"] if k not in COUNTED])
            counts = CleanedCounts(*(as_int(stats[k], f"{where}: stats", k, minimum=0) for k in COUNTED))
        return cls(as_str(p["topic"], where, "topic"), as_int(p["partition"], where, "partition", minimum=0),
                   as_bool(p["ok"], where, "ok"), status, as_str(p["error"], where, "error", nullable=True), counts)


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
                               optional=JOB_REPORT_PROGRESS_KEYS)
        if doc["status"] not in JOB_STATUSES:
            raise PlanError(f"{where}: status {doc['status']!r} is not one of {', '.join(JOB_STATUSES)}")
        outcomes = tuple(CompactionOutcome.from_json(p, f"{where}: partitions[{i}]")
                         for i, p in enumerate(as_list(doc["partitions"], where, "partitions")))
        topics: set[str] = set()
        if doc["plan"] is not None:  # None: refused before it had a plan
            plan = check_keys(doc["plan"], f"{where}: plan", JOB_PLAN_KEYS)
            for i, t in enumerate(as_list(plan["targets"], f"{where}: plan", "targets")):
                target = check_keys(t, f"{where}: plan.targets[{i}]", JOB_TARGET_KEYS)
                topics.add(as_str(target["topic"], f"{where}: plan.targets[{i}]", "topic"))
        return cls(doc["status"], as_str(doc["error"], where, "error", nullable=True), outcomes,
                   decode(dict[str, int], doc["totals"], f"{where}: totals"), tuple(sorted(topics)))

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
