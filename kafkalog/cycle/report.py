"""A cycle's report, typed: what it deleted and compacted, why the rest waits, and every partition that
failed or was skipped anywhere in it. ``summarize`` builds it from the results a run dir holds (the
report task of both DAGs and ``make demo`` call it); ``format_report`` prints it; ``failure_message``
says in one line why a run failed. ``CycleReport.to_json`` is what the report task returns (its XCom);
``from_json`` reads it back strictly (an unknown or missing key, or a value of the wrong kind, is a
``PlanError`` naming the key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kafkalog.cycle.compaction import read_compaction_plan
from kafkalog.cycle.documents import (
    CompactionPlanDocument,
    Doc,
    check_version_and_keys,
    decode,
    plain,
)
from kafkalog.cycle.results import (
    CompactionJobReport,
    MarkResult,
    ScanResult,
    SelectResult,
    ShardPlanResult,
    SweepResult,
)
from kafkalog.cycle.retention import read_retention_plan
from kafkalog.cycle.steps import format_ms

VERSION = 1


@dataclass(frozen=True)
class Failure:
    """A partition (or, with ``partition`` None, a topic or the whole step) that failed or was skipped."""

    step: str
    topic: str | None
    partition: int | None
    error: str | None

    @property
    def where(self) -> str:
        return f"{self.topic}-{self.partition}" if self.partition is not None else str(self.topic or "cycle")


@dataclass(frozen=True)
class RetentionDone:
    segments_marked: int
    bytes_marked: int
    partitions: tuple[str, ...]  # "<topic>-<partition>", sorted


@dataclass(frozen=True)
class DeletionDone:
    files_deleted: int
    bytes_freed: int
    dirs_deleted: tuple[str, ...]
    files_waiting: int
    next_due_ms: int | None  # the first waiting file's due time (None: none waits)


@dataclass(frozen=True)
class TopicCompacted:
    partitions_compacted: int
    records_removed: int
    bytes_removed: int


@dataclass(frozen=True)
class CompactionDone:
    selected: tuple[str, ...]
    cleaned: tuple[str, ...]
    topics: dict[str, TopicCompacted]


@dataclass(frozen=True)
class CycleReport:
    run_dir: str | None  # None: the run dir could not even be found (bad log dirs)
    now_ms: int | None
    dry_run: bool
    partitions: int
    bytes: int
    recovered: tuple[str, ...]
    topic_deletes_finished: tuple[str, ...]
    retention: RetentionDone
    deletion: DeletionDone
    compaction: CompactionDone
    waiting: dict[str, tuple[str, ...]]  # per partition, why retention or compaction did not act on it
    failed: tuple[Failure, ...]
    skipped: tuple[Failure, ...]  # another process held the partition: a later cycle does it
    missing_results: tuple[str, ...]  # tasks that should have left a result and did not

    def to_json(self) -> Doc:
        return {"version": VERSION, **plain(self)}

    @classmethod
    def from_json(cls, doc: Any, where: str = "cycle report") -> CycleReport:
        check_version_and_keys(doc, where, "a cycle report", [f.name for f in fields(cls)], VERSION)
        return decode(cls, {k: v for k, v in doc.items() if k != "version"}, where)  # type: ignore[no-any-return]


NOTHING_DELETED = DeletionDone(0, 0, (), 0, None)


# --- building it -----------------------------------------------------------------------------------------
def compaction_changes(report: CompactionJobReport | None) -> dict[str, TopicCompacted]:
    """Per topic, what the Spark job's report says compaction removed."""
    changes: dict[str, TopicCompacted] = {}
    for p in report.cleaned if report else ():
        assert p.counts is not None  # a cleaned partition's report has its counts (CompactionOutcome.from_json)
        was = changes.get(p.topic, TopicCompacted(0, 0, 0))
        changes[p.topic] = TopicCompacted(
            was.partitions_compacted + 1,
            was.records_removed + p.counts.records_read - p.counts.records_written,
            was.bytes_removed + p.counts.bytes_read - p.counts.bytes_written)
    return changes


def summarize(run_dir: Path | str | None) -> CycleReport:
    """The cycle's report from the results in its run dir. A step that left no result (it never ran)
    counts nothing: the failed tasks' errors explain why. ``None``: the run dir could not even be
    found (bad log dirs): the empty report."""
    found = None if run_dir is None else Path(run_dir)
    scan = None if found is None else ScanResult.load(found)
    shards = [s.shard for s in scan.shards] if scan else []
    failed: list[Failure] = []
    skipped: list[Failure] = []  # partitions another process held locked: Kafka skips a log in progress too
    missing: list[str] = []

    def step_errors(step: str, doc: ScanResult | ShardPlanResult | MarkResult | SelectResult | SweepResult | None,
                    ) -> None:
        for e in doc.errors if doc else ():
            (skipped if e.locked else failed).append(Failure(step, e.topic, e.partition, e.error))

    step_errors("scan_partitions", scan)
    marks: list[MarkResult] = []
    for kind in (ShardPlanResult, MarkResult):
        for shard in shards:
            doc = kind.load(found, shard) if found is not None else None
            if doc is None:
                missing.append(f"{kind.STEP}[{shard}]")
                continue
            if isinstance(doc, MarkResult):
                marks.append(doc)
            step_errors(kind.STEP, doc)
    compaction = None if found is None else CompactionJobReport.load(found)
    for p in compaction.partitions if compaction else ():
        if not p.ok:
            (skipped if p.status == "locked" else failed).append(Failure("compact", p.topic, p.partition, p.error))
    if compaction and compaction.status in ("refused", "spark-failed"):
        failed.append(Failure("compact", None, None, compaction.error))
    selection = None if found is None else SelectResult.load(found)
    step_errors("select_logs_to_clean", selection)
    failed += [Failure("compact (dry run)", e.topic, e.partition, f"the compaction would fail: {e.error}")
               for e in (selection.would_fail if selection else ())]
    deleted = None if found is None else SweepResult.load(found)
    step_errors("delete_marked", deleted)
    plan_path = None if found is None else found / "compaction-plan.json"
    plan = read_compaction_plan(plan_path) if plan_path is not None and plan_path.exists() else None
    return CycleReport(
        run_dir=None if found is None else str(found), now_ms=scan.now_ms if scan else None,
        dry_run=scan.dry_run if scan else False, partitions=scan.partitions if scan else 0,
        bytes=scan.bytes if scan else 0, recovered=scan.recovered if scan else (),
        topic_deletes_finished=scan.topic_deletes_finished if scan else (),
        retention=RetentionDone(sum(m.segments for m in marks), sum(m.bytes for m in marks),
                                tuple(sorted(f"{a.topic}-{a.partition}" for m in marks for a in m.applied))),
        deletion=DeletionDone(deleted.deleted_files, deleted.deleted_bytes, deleted.deleted_dirs,
                              deleted.waiting_files, deleted.next_due_ms) if deleted else NOTHING_DELETED,
        compaction=CompactionDone(
            tuple(f"{s.topic}-{s.partition}" for s in (plan.selected if plan else ())),
            tuple(f"{p.topic}-{p.partition}" for p in (compaction.cleaned if compaction else ())),
            compaction_changes(compaction)),
        waiting={} if found is None else _why_waiting(found, shards, plan),
        failed=tuple(failed), skipped=tuple(skipped), missing_results=tuple(missing))


def _why_waiting(run_dir: Path, shards: Sequence[int],
                 compaction_plan: CompactionPlanDocument | None) -> dict[str, tuple[str, ...]]:
    """Per partition, why retention or compaction did not act on it (the plans' ``blocked_by``)."""
    waiting: dict[str, list[str]] = {}
    for shard in shards:
        path = run_dir / "retention" / f"plan-{shard:04d}.json"
        if path.exists():
            for p in read_retention_plan(path).partitions:
                reasons = [b for b in p.blocked_by if not b.startswith(("unlimited", "policy"))]
                if reasons:
                    waiting.setdefault(f"{p.topic}-{p.partition}", []).extend(f"retention {r}" for r in reasons)
    for n in compaction_plan.not_selected if compaction_plan else ():
        if n.kind != "policy":
            waiting.setdefault(f"{n.topic}-{n.partition}", []).append(f"compaction {n.reason}")
    return {partition: tuple(reasons) for partition, reasons in sorted(waiting.items())}


# --- saying it ---------------------------------------------------------------------------------------------
def format_report(report: CycleReport) -> list[str]:
    """The report as log lines, one per partition where something happened or failed."""
    lines = [f"cycle at now_ms={report.now_ms}{' (dry run: nothing changed)' if report.dry_run else ''}: "
             f"{report.partitions} partitions, {report.bytes} bytes"]
    r, d, c = report.retention, report.deletion, report.compaction
    verb = "would mark" if report.dry_run else "marked"
    lines.append(f"retention: {verb} {r.segments_marked} segments ({r.bytes_marked} bytes) deleted in "
                 f"{len(r.partitions)} partitions: {', '.join(r.partitions) or '-'}")
    due = "" if d.next_due_ms is None else f", the first due at {format_ms(d.next_due_ms)}: a later cycle deletes them"
    lines.append(f"deletion: {d.files_deleted} files ({d.bytes_freed} bytes) deleted, {len(d.dirs_deleted)} "
                 f"deleted-topic dirs removed, {d.files_waiting} files wait for file.delete.delay.ms{due}")
    lines.append(f"compaction: selected {', '.join(c.selected) or 'nothing'}; cleaned {', '.join(c.cleaned) or '-'}")
    for topic, change in sorted(c.topics.items()):
        lines.append(f"  {topic}: {change.records_removed} records, {change.bytes_removed} bytes removed "
                     f"from {change.partitions_compacted} partitions")
    for partition, reasons in report.waiting.items():
        lines.append(f"waiting {partition}: {'; '.join(reasons)}")
    for f in report.skipped:
        lines.append(f"SKIPPED {f.where} in {f.step}: {f.error}; a later cycle does it")
    for f in report.failed:
        lines.append(f"FAILED {f.where} in {f.step}: {f.error}")
    for m in report.missing_results:
        lines.append(f"FAILED task {m} left no result (see its log)")
    return lines


def failure_message(report: CycleReport, tasks: Mapping[str, str | None], *, subject: str, started: bool,
                    causes_shown: int = 5) -> str | None:
    """Why a run failed, in one line for the failed ``report`` task (None: it did not fail). ``tasks``:
    each failed task with its error (None: it could not run because an upstream task failed);
    ``started``: the run's first task succeeded, so partitions were looked at. Names every failed
    partition and task, and the causes (the first ``causes_shown``; the report's log has all)."""
    errors = {t: e for t, e in tasks.items() if e is not None}
    if not report.failed and not tasks:
        return None
    if not started:
        causes = "; ".join(f"{task} failed: {error}" for task, error in errors.items()) or \
            f"{', '.join(tasks)} did not run"
        return f"nothing was maintained: {causes}"
    names = sorted({f.where for f in report.failed})
    looked_at = report.partitions or len(report.compaction.selected)
    others = " (a dry run: nothing was changed)" if report.dry_run else \
        " (the other partitions were maintained)" if len(names) < looked_at else \
        " (no partition was maintained)" if names else ""
    causes_list = [f"{f.where} in {f.step}: {f.error}" for f in report.failed] + \
        [f"{task}: {error}" for task, error in errors.items()]
    causes = "; ".join(causes_list[:causes_shown])
    if len(causes_list) > causes_shown:
        causes += f"; and {len(causes_list) - causes_shown} more (see the report above)"
    return f"{subject} failed in partitions {', '.join(names) or '-'} and tasks {', '.join(tasks) or '-'}" \
           f"{others}: {causes}"
