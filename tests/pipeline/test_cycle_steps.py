"""The pipeline API without Airflow: each step of a cycle on a real store, the plan documents, shards."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from synthetic import CHANGELOG, EVENTS, SESSIONS, build_store

from kafkalog.cycle import compaction, report, steps
from kafkalog.cycle.documents import PlanError
from kafkalog.cycle.steps import CycleSettings, PartitionInventory, split_into_shards


def _settings(log_dir: Path, now_ms: int, **kwargs: object) -> CycleSettings:
    return CycleSettings(run_id="test/run", now_ms=now_ms, log_dirs=(str(log_dir),), **kwargs)  # type: ignore[arg-type]


def test_shards_balance_bytes_and_respect_their_bounds() -> None:
    sizes = [900, 800, 700, 100, 100, 100, 50, 50, 10, 0]
    inventory = [PartitionInventory("t", i, "/d", size, False) for i, size in enumerate(sizes)]
    shards = split_into_shards(inventory, shard_bytes=1000, shard_partitions=100, max_shards=8)
    assert len(shards) == 3  # ceil(2810 / 1000)
    assert sorted(p.partition for s in shards for p in s) == list(range(10))  # each partition once
    loads = sorted(sum(p.size_bytes for p in s) for s in shards)
    assert loads == [910, 950, 950]  # biggest first into the lightest shard
    assert all(s == sorted(s, key=lambda p: p.partition) for s in shards)
    assert len(split_into_shards(inventory, shard_bytes=1, shard_partitions=100, max_shards=4)) == 4
    assert len(split_into_shards(inventory, shard_bytes=10**9, shard_partitions=3, max_shards=8)) == 4
    assert split_into_shards([], shard_bytes=1, shard_partitions=1, max_shards=1) == []


def test_a_cycle_step_by_step(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir, run_dir = tmp_path / "logs", tmp_path / "run"
    build_store(log_dir, now_ms, file_delete_delay_ms=0)
    scan = steps.scan_partitions(run_dir, _settings(log_dir, now_ms), shard_partitions=2)
    assert (scan["partitions"], len(scan["shards"])) == (5, 3)
    assert scan["now_ms"] == now_ms and scan["errors"] == []

    planned = [steps.plan_retention_shard(run_dir, s["path"]) for s in scan["shards"]]
    cli_plan = json.loads(run_cli("retention", "plan", "--log-dir", str(log_dir), "--now-ms", str(now_ms),
                                  "--json").out)
    assert sum(p["segments"] for p in planned) == sum(len(p["segments"]) for p in cli_plan["partitions"]) == 12
    assert {t for p in planned for t in p["topics_read"]} == {EVENTS, CHANGELOG, SESSIONS}

    marks = [steps.mark_shard(run_dir, p["plan"]) for p in planned]
    changed = {t: c for m in marks for t, c in m["topics"].items()}
    assert changed[EVENTS]["segments_deleted"] == 10 and changed[EVENTS]["log_start_offsets"] == {"0": 100, "1": 100}
    assert changed[SESSIONS]["log_start_offsets"] == {"0": 240} and CHANGELOG not in changed
    deadline = steps.file_delete_deadline_ms(run_dir)
    assert deadline is not None and deadline == max(m["newest_mark_ms"] for m in marks if m["newest_mark_ms"])

    deleted = steps.delete_marked(run_dir)
    assert deleted["deleted_files"] > 0 and deleted["waiting_files"] == 0
    assert not list(log_dir.rglob("*.deleted"))
    selected = steps.select_logs_to_clean(run_dir)
    assert selected["selected"] == 3 and selected["topics_read"] == [CHANGELOG, SESSIONS]
    plan = compaction.read_compaction_plan(selected["plan"])
    assert plan.selected[0].log_dir == str(log_dir.resolve())
    assert {(s.topic, s.partition) for s in plan.selected} == {(CHANGELOG, 0), (CHANGELOG, 1), (SESSIONS, 0)}
    summary = report.summarize(run_dir)
    assert summary.retention.segments_marked == 12 and summary.failed == ()
    assert summary.compaction.selected == tuple(f"{s.topic}-{s.partition}" for s in plan.selected)
    assert summary.deletion.files_deleted == deleted["deleted_files"] and summary.deletion.next_due_ms is None
    lines = report.format_report(summary)
    assert lines[1].startswith("retention: marked 12 segments")
    # The report task's XCom: JSON that reads back to the same report, strictly.
    as_json = json.loads(json.dumps(summary.to_json()))
    assert report.CycleReport.from_json(as_json) == summary
    as_json["deletion"]["bytes_free"] = as_json["deletion"].pop("bytes_freed")
    with pytest.raises(PlanError, match=re.escape("cycle report.deletion: expected the keys files_deleted, "
                                                  "bytes_freed, dirs_deleted, files_waiting, next_due_ms, not")):
        report.CycleReport.from_json(as_json)
    as_json = summary.to_json() | {"partitions": "4"}
    with pytest.raises(PlanError, match=re.escape("cycle report.partitions: expected int, not '4'")):
        report.CycleReport.from_json(as_json)

    # A result read back with a key it does not define (or without one it needs) is an error naming the
    # file, never a silent zero in the report.
    swept = run_dir / "results" / "delete_marked.json"
    doc = json.loads(swept.read_text())
    doc["deleted_file"] = doc.pop("deleted_files")
    swept.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=re.escape(f"{swept}: not a delete_marked result of this kafkalog "
                                                        "(version 1; unknown key(s) deleted_file; missing key(s) "
                                                        "deleted_files)")):
        report.summarize(run_dir)
    doc["deleted_files"] = doc.pop("deleted_file")
    swept.write_text(json.dumps(doc))
    assert report.summarize(run_dir) == summary

    # So is an entry inside a result: a shard, an applied mark, an error.
    scanned = run_dir / "results" / "scan_partitions.json"
    marked = next(p for p in sorted((run_dir / "results").glob("mark_deleted-*.json"))
                  if json.loads(p.read_text())["applied"])
    for path, change, message in [
        (scanned, lambda d: d["shards"][0].update(path=1), "shards[0].path: expected str, not 1"),
        (marked, lambda d: d["applied"][0].pop("due_ms"), "applied[0]: expected the keys topic, partition, "
                                                          "segments, bytes, log_start_offset_before"),
        (marked, lambda d: d["errors"].append({"topic": "t", "partition": 0, "error": "x"}),
         "errors[0]: expected the keys topic, partition, error, locked, not ['error', 'partition', 'topic']"),
    ]:
        kept = path.read_text()
        doc = json.loads(kept)
        change(doc)
        path.write_text(json.dumps(doc))
        with pytest.raises(PlanError, match=re.escape(f"{path}.{message}")):
            report.summarize(run_dir)
        path.write_text(kept)


def test_the_runs_retention_changes_are_one_change_per_topic_whatever_the_shards(tmp_path: Path) -> None:
    """What ``delete_marked`` announces as asset events: the shards of ``mark_deleted`` emit none (two
    shards creating the same new asset at once in Airflow's database fail one of them)."""
    now_ms = int(time.time() * 1000) - 60_000
    log_dir, run_dir = tmp_path / "logs", tmp_path / "run"
    build_store(log_dir, now_ms, file_delete_delay_ms=0)
    scan = steps.scan_partitions(run_dir, _settings(log_dir, now_ms), shard_partitions=1)
    marks = [steps.mark_shard(run_dir, steps.plan_retention_shard(run_dir, s["path"])["plan"]) for s in scan["shards"]]
    events = [m["topics"][EVENTS] for m in marks if EVENTS in m["topics"]]
    assert len(marks) == 5 and len(events) == 2  # events-0 and events-1 marked by two shards
    changes = steps.retention_changes(run_dir)
    assert sorted(changes) == [EVENTS, SESSIONS]
    assert changes[EVENTS] == {"segments_deleted": 10, "bytes_deleted": sum(e["bytes_deleted"] for e in events),
                               "log_start_offsets": {"0": 100, "1": 100}}
    assert changes[EVENTS]["bytes_deleted"] > max(e["bytes_deleted"] for e in events) > 0
    [sessions] = [m["topics"][SESSIONS] for m in marks if SESSIONS in m["topics"]]
    assert changes[SESSIONS] == sessions and sessions["log_start_offsets"] == {"0": 240}
    assert steps.retention_changes(tmp_path / "no-marks") == {}


def test_a_retried_step_changes_nothing_more_and_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms)
    before = tree_digest(log_dir)
    dry = tmp_path / "dry"
    scan = steps.scan_partitions(dry, _settings(log_dir, now_ms, dry_run=True))
    plan = steps.plan_retention_shard(dry, scan["shards"][0]["path"])
    mark = steps.mark_shard(dry, plan["plan"])
    assert mark["segments"] == 12 and mark["newest_mark_ms"] is None
    assert mark["topics"] == {} and steps.retention_changes(dry) == {}  # nothing to announce
    steps.delete_marked(dry)
    steps.select_logs_to_clean(dry)
    assert tree_digest(log_dir) == before

    real = tmp_path / "real"
    scan = steps.scan_partitions(real, _settings(log_dir, now_ms))
    plan = steps.plan_retention_shard(real, scan["shards"][0]["path"])
    assert steps.mark_shard(real, plan["plan"])["segments"] == 12
    after = tree_digest(log_dir)
    again = steps.mark_shard(real, plan["plan"])  # Airflow's retry of the same task
    assert again["segments"] == 0 and again["errors"] == 0
    assert {k: v for k, v in tree_digest(log_dir).items() if "journal" not in k} == \
        {k: v for k, v in after.items() if "journal" not in k}


def test_a_reviewed_plan_is_applied_and_never_more(tmp_path: Path) -> None:
    """`retention apply --plan` enforces the plan someone reviewed: what expired since is left for later."""
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms - 3_600_000)  # an hour older: one more events segment expires by now_ms
    early = now_ms - 3_600_000
    reviewed = run_cli("retention", "plan", "--log-dir", str(log_dir), "--now-ms", str(early), "--json")
    (tmp_path / "plan.json").write_text(reviewed.out)
    later = json.loads(run_cli("retention", "plan", "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--json").out)
    reviewed_doc = json.loads(reviewed.out)
    assert sum(len(p["segments"]) for p in later["partitions"]) > sum(len(p["segments"])
                                                                     for p in reviewed_doc["partitions"])
    applied = run_cli("retention", "apply", "--log-dir", str(log_dir), "--plan", str(tmp_path / "plan.json"), "--json")
    assert applied.code == 0, applied.err
    done = {(a["topic"], a["partition"]): a["segments"] for a in json.loads(applied.out)["applied"]}
    assert done == {(p["topic"], p["partition"]): [s["base_offset"] for s in p["segments"]]
                    for p in reviewed_doc["partitions"] if p["segments"]}
    refused = run_cli("retention", "apply", "--log-dir", str(log_dir), "--plan", str(tmp_path / "plan.json"),
                      "--now-ms", str(now_ms))
    assert refused.code == 1 and "--plan carries its own clock" in refused.err
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "kafkalog-compaction-plan", "version": 1}))
    bad = run_cli("retention", "apply", "--log-dir", str(log_dir), "--plan", str(tmp_path / "bad.json"))
    assert bad.code == 1 and "not a kafkalog-retention-plan version 1" in bad.err


def test_compaction_plan_files_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    target = {"topic": "t", "partition": 0, "log_dir": "/logs", "first_dirty_offset": 0,
              "first_uncleanable_offset": 10, "cleanable_bytes": 100, "total_bytes": 200, "dirty_ratio": 0.5,
              "trigger": "dirty-ratio", "limited_by": "active-segment"}
    good = {"version": 1, "kind": "kafkalog-compaction-plan", "now_ms": 5, "topic": None, "partitions": None,
            "selected": [target], "checkpoint_resets": [{"topic": "t", "partition": 1, "offset": 3}],
            "not_selected": [], "errors": []}
    path.write_text(json.dumps(good))
    read = compaction.read_compaction_plan(path)
    assert (read.selected[0].topic, read.selected[0].first_uncleanable_offset, read.checkpoint_resets[0].offset) == \
        ("t", 10, 3)
    assert read.to_json() == good  # what is read is what was written, key for key
    missing_errors = {k: v for k, v in good.items() if k != "errors"}
    for broken, message in [
        ({**good, "version": 2}, "not a kafkalog-compaction-plan version 1"),
        ({**good, "selected": good["selected"] * 2}, "t-0 is selected twice"),
        ({**good, "selected": [{**target, "first_dirty_offset": 20}]}, "not a valid range"),
        ({**good, "checkpoint_resets": [{"topic": "t"}]}, "checkpoint_resets[0]: missing key(s) partition, offset"),
        ({**good, "now_ms": "soon"}, "now_ms must be an integer"),
        # A misspelt key is an error, never a default: at the top, in an entry, or one left out.
        ({**good, "checkpoint_reset": []}, "unknown key(s) checkpoint_reset"),
        ({**good, "selected": [{**target, "first_dirty": 0}]}, "selected[0]: unknown key(s) first_dirty"),
        (missing_errors, "missing key(s) errors"),
        ({**good, "selected": [{**target, "dirty_ratio": "high"}]}, "dirty_ratio must be a number"),
    ]:
        path.write_text(json.dumps(broken))
        with pytest.raises(PlanError, match=re.escape(message)):
            compaction.read_compaction_plan(path)


def test_sweep_by_topic_and_the_cli_compact_refusal(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    log_dir = tmp_path / "logs"
    build_store(log_dir, now_ms, file_delete_delay_ms=0)
    assert run_cli("retention", "apply", "--log-dir", str(log_dir), "--now-ms", str(now_ms)).code == 0
    swept = json.loads(run_cli("retention", "sweep", "--log-dir", str(log_dir), "--topic", SESSIONS, "--json").out)
    assert {p["topic"] for p in swept["partitions"]} == {SESSIONS} and swept["deleted_files"] > 0
    assert list((log_dir / f"{EVENTS}-0").glob("*.deleted")) and not list((log_dir / f"{SESSIONS}-0").glob("*.deleted"))
    refused = run_cli("compact", "--log-dir", str(log_dir), "--topic", EVENTS)
    assert refused.code == 1 and "cleanup.policy=delete: only a compacted topic" in refused.err


def test_a_symlinked_partition_dir_is_named_by_the_scan_and_never_followed(tmp_path: Path) -> None:
    """A partition dir that is a symlink (into another directory, perhaps another store's) is not
    maintained and not left out without a word: the scan names it as failed, so the report does."""
    now_ms = int(time.time() * 1000) - 60_000
    log_dir, run_dir, outside = tmp_path / "logs", tmp_path / "run", tmp_path / "outside"
    build_store(log_dir, now_ms, file_delete_delay_ms=0)
    (log_dir / f"{EVENTS}-1").rename(outside)
    (log_dir / f"{EVENTS}-1").symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)
    scan = steps.scan_partitions(run_dir, _settings(log_dir, now_ms), shard_partitions=2)
    assert scan["partitions"] == 4
    [error] = scan["errors"]
    assert (error["topic"], error["partition"]) == (EVENTS, 1)
    assert error["error"].startswith(f"{log_dir / f'{EVENTS}-1'}: partition directory is a symlink to {outside}")
    for shard in scan["shards"]:
        steps.mark_shard(run_dir, steps.plan_retention_shard(run_dir, shard["path"])["plan"])
    assert tree_digest(outside) == before
    assert f"{EVENTS}-1" in {f.where for f in report.summarize(run_dir).failed}
