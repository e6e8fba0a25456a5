"""Issue #35, items 8-11, on the pipeline's steps without Airflow: bad input is refused where it enters,
with a message, before anything is written, and classified as permanent (no retry) or transient; a long
``file.delete.delay.ms`` never holds a cycle open past its interval; a dry run reads what the real
compaction reads; a partition another process holds is skipped and said so; a run dir is a place of
its own. The same through Airflow: ``test_bad_input_dags.py``."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import tree_digest
from synthetic import CHANGELOG, EVENTS, NOW_MS, build_store, corrupt_compacted_store, delete_topic

from kafkalog.cycle import compaction, report, steps
from kafkalog.cycle.documents import PlanError, write_json
from kafkalog.cycle.results import CompactionJobReport, compaction_report_path
from kafkalog.cycle.steps import CycleSettings
from kafkalog.errors import (
    CleanerError,
    ConfigError,
    CorruptRecordError,
    InvalidTopicError,
    KafkaLogError,
    LogDirError,
    LogLockedError,
)
from kafkalog.log import names
from kafkalog.log.lock import partition_lock
from kafkalog.log.store import LogStore

ROOT_REFUSED = ("log directory / is the filesystem root: every top-level directory would be taken for a partition; "
                "name a directory of its own")


def _settings(*log_dirs: Path | str, **kwargs: object) -> CycleSettings:
    return CycleSettings(run_id="test/run", now_ms=NOW_MS, log_dirs=tuple(str(d) for d in log_dirs),
                         **kwargs)  # type: ignore[arg-type]


def _broker(directory: Path, text: str, name: str = "server.properties") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


# --- item 8: permanent errors fail fast and say why ------------------------------------------------------
def test_bad_log_dirs_and_broker_files_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_store(logs, NOW_MS)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    partition = next(d for d in sorted(logs.iterdir()) if d.is_dir() and any(d.glob("*.log")))
    segment = min(partition.glob("*.log"))
    first = min(p.name for p in partition.iterdir() if names.parse_segment_file_name(p.name))
    with pytest.raises(UnicodeDecodeError) as not_text:
        segment.read_bytes().decode("utf-8")
    bad = not_text.value.start
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases: list[tuple[CycleSettings, type[KafkaLogError], str]] = [
        (_settings(tmp_path / "a-file"), LogDirError,
         f"log directory {tmp_path}/a-file does not exist or is not a directory"),
        (_settings(tmp_path / "missing"), LogDirError,
         f"log directory {tmp_path}/missing does not exist or is not a directory"),
        (_settings(logs, f"{logs}/"), LogDirError, f"a log directory is listed twice: {logs}, {logs}"),
        (_settings(tmp_path / "loop1"), LogDirError,
         f"log directory {tmp_path}/loop1 cannot be resolved (Symlink loop from '{tmp_path}/loop1')"),
        (_settings("/"), LogDirError, ROOT_REFUSED),
        (_settings(partition), LogDirError, f"log directory {partition} holds segment file {first}: it is a "
                                            "partition dir, not a log dir; name the directory that holds it"),
        (_settings(logs, config_file=str(segment)), ConfigError,
         f"cannot read broker config file {segment}: not UTF-8 text (byte 0x{segment.read_bytes()[bad]:02x} at offset "
         f"{bad}): a binary file, such as a segment?"),
        (_settings(logs, config_file=str(fifo)), ConfigError,
         f"cannot read broker config file {fifo}: not a regular file (a FIFO)"),
        (_settings(logs, config_file=_broker(tmp_path, "log.retention.hours=abc\n", "hours.properties")), ConfigError,
         f"{tmp_path}/hours.properties: log.retention.hours=abc: must be a 32-bit integer"),
        (_settings(logs, config_file=_broker(tmp_path, "log.segment.delete.delay.ms=-1\n", "delay.properties")),
         ConfigError, f"{tmp_path}/delay.properties: log.segment.delete.delay.ms=-1: must be at least 0"),
        (_settings(logs, config_file=str(tmp_path / "nowhere.properties")), ConfigError,
         f"cannot read broker config file {tmp_path}/nowhere.properties: [Errno 2] No such file or directory: "
         f"'{tmp_path}/nowhere.properties'"),
    ]
    before = tree_digest(tmp_path)
    for settings, kind, message in cases:
        run_dir = tmp_path / "runs" / "run"
        with pytest.raises(kind) as raised:
            steps.scan_partitions(run_dir, settings)
        assert str(raised.value) == message
        assert steps.permanent_error(raised.value), message
        assert not (tmp_path / "runs").exists() and tree_digest(tmp_path) == before, message


def test_a_wall_clock_before_the_cycles_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        _settings("/data/logs", wall_now_ms=5)
    assert str(raised.value) == (f"wall_now_ms 5 is before the cycle's clock {NOW_MS}: it pins the wall clock, which "
                                 "is never earlier than the cycle's (milliseconds since the epoch)")


def test_a_missing_partition_of_a_named_topic_is_permanent(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_store(logs, NOW_MS)
    run_dir = steps.start_cycle(tmp_path / "run", _settings(logs))
    with pytest.raises(KafkaLogError) as raised:
        steps.select_logs_to_clean(run_dir, topic=CHANGELOG, partitions=[7])
    assert str(raised.value) == f"topic '{CHANGELOG}' has 2 partitions; no partition 7"
    assert steps.permanent_error(raised.value)


def _with_context(exc: BaseException, context: BaseException) -> BaseException:
    try:
        try:
            raise context
        except BaseException:
            raise exc from None
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(("exc", "permanent"), [
    (ConfigError("log.retention.hours=abc"), True),
    (LogDirError("missing"), True),
    (InvalidTopicError("no such topic"), True),
    (CorruptRecordError("crc"), True),
    (PlanError("not a plan"), True),
    (KafkaLogError("has 2 partitions; no partition 7"), True),
    (LogLockedError("locked by another kafkalog process"), False),
    (OSError(errno.EIO, "Input/output error"), False),
    (OSError(errno.ENOSPC, "No space left on device"), False),
    (FileNotFoundError(errno.ENOENT, "gone meanwhile"), False),
    (OSError(errno.ELOOP, "Too many levels of symbolic links"), True),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory"), True),
    (_with_context(ConfigError("cannot read broker config file"), FileNotFoundError(errno.ENOENT, "x")), True),
    (_with_context(PlanError("cannot read plan"), OSError(errno.EIO, "Input/output error")), False),
    (_with_context(CleanerError("round aborted"), LogLockedError("locked")), False),
    (RuntimeError("Spark died"), False),
])
def test_one_classification_of_errors(exc: BaseException, permanent: bool) -> None:
    assert steps.permanent_error(exc) is permanent


def test_the_report_names_the_cause_and_never_claims_what_was_not_done() -> None:
    empty = report.summarize(None)
    assert report.failure_message(empty, {}, subject="the cycle", started=True) is None
    cause = "/etc/k.properties: log.retention.hours=abc: must be a 32-bit integer"
    assert report.failure_message(empty, {"scan_partitions": cause, "plan_retention": None, "mark_deleted": None},
                                 subject="the cycle", started=False) == f"nothing was maintained: scan_partitions " \
                                                                        f"failed: {cause}"
    corrupt = report.Failure("mark_deleted", EVENTS, 1, "corrupt batch")
    failed = dataclasses.replace(empty, partitions=3, failed=(corrupt,))
    assert report.failure_message(failed, {"mark_deleted[0]": "disk on fire"}, subject="the cycle", started=True) == \
        f"the cycle failed in partitions {EVENTS}-1 and tasks mark_deleted[0] (the other partitions were " \
        f"maintained): {EVENTS}-1 in mark_deleted: corrupt batch; mark_deleted[0]: disk on fire"
    every = dataclasses.replace(failed, partitions=1)
    assert "(no partition was maintained)" in str(report.failure_message(every, {}, subject="the cycle", started=True))


# --- item 9: a long file.delete.delay.ms never holds the cycle open ----------------------------------------
def test_the_wait_never_outlasts_the_cycles_interval(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    store = LogStore([logs], create_missing=True)
    delete_topic(store, "quick", 1000)
    delete_topic(store, "slow", 86_400_000)  # a legal day
    broker = _broker(tmp_path, "log.retention.check.interval.ms=30000\n")
    run_dir = tmp_path / "run"
    scan = steps.scan_partitions(run_dir, _settings(logs, config_file=broker))
    marks = [steps.mark_shard(run_dir, steps.plan_retention_shard(run_dir, s["path"])["plan"]) for s in scan["shards"]]
    assert sum(m["segments"] for m in marks) == 4
    quick_due = max(int(p.stat().st_mtime * 1000) for p in (logs / "quick-0").glob("*.log.deleted")) + 1000
    wall = int(time.time() * 1000)
    wait = steps.file_delete_wait(run_dir, wall_now_ms=wall)
    slow_marks = [int(p.stat().st_mtime * 1000) for p in (logs / "slow-0").glob("*.log.deleted")]
    assert wait["interval_ms"] == 30_000 and wait["later"] == 1
    assert wait["next_due_ms"] is not None and abs(wait["next_due_ms"] - (max(slow_marks) + 86_400_000)) <= 1
    assert wait["until_ms"] is not None and wait["until_ms"] <= quick_due and wait["until_ms"] - wall <= 1000
    time.sleep(max(0, wait["until_ms"] - int(time.time() * 1000)) / 1000 + 0.05)
    deleted = steps.delete_marked(run_dir)
    waiting = len(list((logs / "slow-0").glob("*.deleted")))  # two segments' files and a snapshot
    assert not list((logs / "quick-0").glob("*.deleted")) and waiting == deleted["deleted_files"] == 7
    lines = report.format_report(report.summarize(run_dir))
    assert lines[2] == f"deletion: 7 files ({deleted['deleted_bytes']} bytes) deleted, 0 deleted-topic dirs " \
                       f"removed, 7 files wait for file.delete.delay.ms, the first due at " \
                       f"{steps.format_ms(deleted['next_due_ms'])}: a later cycle deletes them"


# --- item 10: a dry run reads what the real run reads ----------------------------------------------------
def test_a_dry_run_fails_the_partition_the_real_compaction_fails_on(tmp_path: Path) -> None:
    logs, copy = tmp_path / "logs", tmp_path / "copy"
    corrupt_compacted_store(logs, NOW_MS)
    shutil.copytree(logs, copy)
    plan = compaction.plan_compaction(LogStore([copy]), now_ms=NOW_MS)
    real = compaction.compact_planned(LogStore([copy]), plan, run_id="real")
    assert real["cleaned"] == [] and [(e["topic"], e["partition"]) for e in real["errors"]] == [("cl", 0)]
    expected = real["errors"][0]["error"].replace(str(copy), str(logs))
    assert "record is corrupt at byte 0 (offset 0): stored crc = " in expected

    before = tree_digest(logs)
    run_dir = tmp_path / "run"
    steps.scan_partitions(run_dir, _settings(logs, dry_run=True))
    selected = steps.select_logs_to_clean(run_dir)
    assert (selected["selected"], selected["would_fail"]) == (1, 1)
    summary = report.summarize(run_dir)
    assert summary.failed == (report.Failure("compact (dry run)", "cl", 0, f"the compaction would fail: {expected}"),)
    assert f"FAILED cl-0 in compact (dry run): the compaction would fail: {expected}" in report.format_report(summary)
    assert tree_digest(logs) == before


def test_a_dry_run_over_a_healthy_store_finds_nothing_to_fail(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_store(logs, NOW_MS)
    before = tree_digest(logs)
    run_dir = tmp_path / "run"
    steps.scan_partitions(run_dir, _settings(logs, dry_run=True))
    assert (steps.select_logs_to_clean(run_dir)["would_fail"], report.summarize(run_dir).failed) == (0, ())
    assert tree_digest(logs) == before


# --- item 11: two cycles at once; where a run dir may go ------------------------------------------------
def test_a_partition_held_by_another_process_is_skipped_and_said_so(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    build_store(logs, NOW_MS, file_delete_delay_ms=0)
    run_dir = tmp_path / "run"
    scan = steps.scan_partitions(run_dir, _settings(logs))
    planned = steps.plan_retention_shard(run_dir, scan["shards"][0]["path"])
    held = logs / f"{EVENTS}-1"
    before = tree_digest(held)
    with partition_lock(held, timeout_s=0):
        mark = steps.mark_shard(run_dir, planned["plan"], lock_timeout_s=0.2)
    assert mark["errors"] == 1 and mark["topics"][EVENTS]["log_start_offsets"] == {"0": 100}
    assert tree_digest(held) == before
    summary = report.summarize(run_dir)
    assert summary.failed == ()
    assert summary.skipped == (report.Failure("mark_deleted", EVENTS, 1,
                                              f"{held}: locked by another kafkalog process (waited 0.2 s)"),)
    assert f"SKIPPED {EVENTS}-1 in mark_deleted: {held}: locked by another kafkalog process (waited 0.2 s); a later " \
           "cycle does it" in report.format_report(summary)
    assert report.failure_message(summary, {}, subject="the cycle", started=True) is None


def test_a_compaction_round_another_cleaner_holds_is_skipped(tmp_path: Path) -> None:
    """The Spark job's report says ``locked`` for a partition whose cleaner lock another process holds."""
    run_dir = tmp_path / "run"
    write_json(compaction_report_path(run_dir), {
        "version": 2, "status": "partitions-failed", "error": None, "plan": None, "started_at": 0, "timings": {},
        "totals": {}, "partitions": [
            {"topic": CHANGELOG, "partition": 0, "ok": False, "status": "locked", "error": "x: locked"},
            {"topic": CHANGELOG, "partition": 1, "ok": True, "status": "cleaned", "error": None,
             "stats": {"records_read": 4, "records_written": 4, "bytes_read": 90, "bytes_written": 90}}]})
    summary = report.summarize(run_dir)
    assert summary.failed == () and summary.compaction.cleaned == (f"{CHANGELOG}-1",)
    assert summary.skipped == (report.Failure("compact", CHANGELOG, 0, "x: locked"),)
    assert summary.compaction.topics == {CHANGELOG: report.TopicCompacted(1, 0, 0)}


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(totl=d.pop("totals")), "not a compaction job report of this kafkalog (version 2; unknown "
                                               "key(s) totl; missing key(s) totals)"),
    (lambda d: d.update(version=1), "not a compaction job report of this kafkalog (version 1)"),
    (lambda d: d.update(status="fine"), "status 'fine' is not one of ok, partitions-failed, refused, spark-failed"),
    (lambda d: d["partitions"][0].pop("ok"), "partitions[0]: missing key(s) ok"),
    (lambda d: d["partitions"][0].update(stat={}), "partitions[0]: unknown key(s) stat"),
    (lambda d: d.pop("plan"), "not a compaction job report of this kafkalog (version 2; missing key(s) plan)"),
    (lambda d: d["plan"]["targets"][0].update(topik="x"), "plan.targets[0]: unknown key(s) topik"),
    (lambda d: d["partitions"][0].pop("stats"), "partitions[0]: a cleaned partition without its stats"),
    (lambda d: d["partitions"][0]["stats"].pop("bytes_read"), "partitions[0]: stats: missing key(s) bytes_read"),
    (lambda d: d["partitions"][0]["stats"].update(records_read="5"),
     "partitions[0]: stats: records_read must be an integer of 0 or more, not \"5\""),
])
def test_a_compaction_job_report_of_another_shape_is_refused_naming_the_key(
        tmp_path: Path, change: Any, message: str) -> None:
    run_dir = tmp_path / "run"
    target = {"topic": CHANGELOG, "partition": 1, "first_dirty_offset": 0, "first_uncleanable_offset": 5}
    doc = {"version": 2, "status": "ok", "error": None, "started_at": 0, "timings": {}, "totals": {},
           "plan": {"source": "plan.json", "topic": None, "partition": None, "targets": [target]}, "partitions": [
        {"topic": CHANGELOG, "partition": 1, "ok": True, "status": "cleaned", "error": None,
         "stats": {"records_read": 5, "records_written": 2, "bytes_read": 500, "bytes_written": 200,
                   "map_seconds": 0.1}}]}
    write_json(compaction_report_path(run_dir), doc)
    assert report.summarize(run_dir).compaction.topics == {CHANGELOG: report.TopicCompacted(1, 3, 300)}
    assert CompactionJobReport.load(run_dir).topics_read == (CHANGELOG,)  # type: ignore[union-attr]
    change(doc)
    write_json(compaction_report_path(run_dir), doc)
    with pytest.raises(PlanError, match=re.escape(f"{compaction_report_path(run_dir)}: {message}")):
        report.summarize(run_dir)


def test_a_run_dir_is_a_writable_place_of_its_own(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    assert steps.run_dir_for(None, [str(logs)], "d", "r") == tmp_path / ".kafkalog-pipeline" / "d" / "r"
    assert steps.run_dir_for(str(tmp_path / "state"), [str(logs)], "d", "r") == tmp_path / "state" / "d" / "r"
    (tmp_path / "a-file").write_text("x")
    for state_dir, log_dirs, message in [
        (None, ["/"], ROOT_REFUSED),
        (None, ["/kafka-logs"], "the run dir /.kafkalog-pipeline (beside log dir /kafka-logs) would be at the "
                                "filesystem root: set KAFKALOG_PIPELINE_DIR to a directory of the pipeline's own that "
                                "every worker sees"),
        ("/", [str(logs)], "KAFKALOG_PIPELINE_DIR=/ would be at the filesystem root: set KAFKALOG_PIPELINE_DIR to "
                           "a directory of the pipeline's own that every worker sees"),
        ("relative/state", [str(logs)], "KAFKALOG_PIPELINE_DIR=relative/state must be an absolute path (every "
                                        "worker finds it)"),
        (str(logs / "state"), [str(logs)], f"KAFKALOG_PIPELINE_DIR={logs}/state is inside log directory {logs}: its "
                                           "files would be taken for the log's; set KAFKALOG_PIPELINE_DIR to a "
                                           "directory outside every log dir"),
        (str(tmp_path / "a-file" / "state"), [str(logs)], f"KAFKALOG_PIPELINE_DIR={tmp_path}/a-file/state: "
                                                          f"{tmp_path}/a-file is not a directory this user can write"),
    ]:
        with pytest.raises((ConfigError, LogDirError)) as raised:
            steps.run_dir_for(state_dir, log_dirs, "d", "r")
        assert str(raised.value) == message
        assert steps.permanent_error(raised.value)
    assert not os.path.lexists("/.kafkalog-pipeline")
