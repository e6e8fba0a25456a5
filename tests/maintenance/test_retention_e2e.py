"""Retention end to end through the CLI: plan changes nothing, apply marks exactly the plan, sweep
waits for file.delete.delay.ms; kill -9 during apply always converges; Kafka-written dirs work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import kafka_fixtures_root, run_cli, tree_digest

from kafkalog.log import checkpoint, names
from kafkalog.log.store import LogStore
from kafkalog.tools.verify import verify_store

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000


def _build_log(log_dir: Path, segments: int, *, retention_ms: int, records_per_segment: int = 10,
               file_delete_delay_ms: int = 60_000) -> None:
    """A topic whose segment i holds records timestamped T0 + i hours (one segment per hour)."""
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("t", 1, {"segment.bytes": "1048576", "retention.ms": str(retention_ms),
                                "file.delete.delay.ms": str(file_delete_delay_ms)})
    with store.writable_log(store.locate("t", 0)) as log:
        for i in range(segments):
            rows = [(f"k{j}".encode(), f"seg{i}-{j}".encode(), (), T0 + i * HOUR_MS + j)
                    for j in range(records_per_segment)]
            log.append_records(rows, batch_records=5, now_ms=T0)
            log.roll()


def _live_segments(partition: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))


def test_plan_apply_consume_sweep(tmp_path: Path) -> None:
    _build_log(tmp_path, 6, retention_ms=3 * HOUR_MS)
    partition = tmp_path / "t-0"
    assert _live_segments(partition) == [0, 10, 20, 30, 40, 50, 60]  # six full segments + empty active
    now = T0 + 6 * HOUR_MS  # segments 0..2 (newest ts T0+2h+9ms) are more than 3 h old
    before = tree_digest(tmp_path)

    plan = run_cli("retention", "plan", "--log-dir", str(tmp_path), "--now-ms", str(now), "--json")
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)["partitions"][0]
    assert [s["base_offset"] for s in doc["segments"]] == [0, 10, 20]
    assert {s["reason"] for s in doc["segments"]} == {"retention.ms"}
    assert doc["log_start_offset_after"] == 30
    assert any("retention.ms: segment 30" in b for b in doc["blocked_by"])
    assert tree_digest(tmp_path) == before  # plan changes no file

    applied = run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(now), "--json")
    assert applied.code == 0, applied.err
    marked = sorted(p.name for p in partition.glob("*.deleted"))
    expected = sorted(f"{b:020d}.{kind}.deleted" for b in (0, 10, 20) for kind in ("log", "index", "timeindex"))
    expected += [f"{b:020d}.snapshot.deleted" for b in (10, 20)]  # producer snapshots taken at those rolls
    assert marked == sorted(expected)
    assert _live_segments(partition) == [30, 40, 50, 60]
    assert checkpoint.read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 30}
    lines = run_cli("consume", "--log-dir", str(tmp_path), "--topic", "t", "--partition", "0", "--print-offset")
    assert [int(line.split("\t")[0]) for line in lines.out.splitlines()] == list(range(30, 60))
    entries = json.loads(run_cli("journal", "--log-dir", str(tmp_path), "--json").out)["entries"]
    assert [(e["action"], e["segments"]) for e in entries] == [("mark-deleted", [0]), ("mark-deleted", [10]),
                                                              ("mark-deleted", [20])]
    assert all(e["log_start_offset_after"] == 30 for e in entries)
    assert run_cli("verify", "--log-dir", str(tmp_path)).code == 0

    # Re-applying the same cycle changes nothing more.
    again = run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(now), "--json")
    assert json.loads(again.out)["partitions"][0]["segments"] == []

    # Sweep before file.delete.delay.ms (60 s since marking) deletes nothing ...
    swept = run_cli("retention", "sweep", "--log-dir", str(tmp_path), "--json")
    assert swept.code == 0 and json.loads(swept.out)["deleted_bytes"] == 0
    assert sorted(p.name for p in partition.glob("*.deleted")) == sorted(expected)
    # ... and after it, exactly the .deleted files.
    past = time.time() - 61
    for path in partition.glob("*.deleted"):
        os.utime(path, (past, past))
    others = sorted(p.name for p in partition.iterdir() if not p.name.endswith(".deleted"))
    swept = run_cli("retention", "sweep", "--log-dir", str(tmp_path), "--json")
    assert sorted(json.loads(swept.out)["partitions"][0]["deleted_files"]) == sorted(expected)
    assert sorted(p.name for p in partition.iterdir()) == others


def test_sweep_never_follows_a_symlink(tmp_path: Path) -> None:
    _build_log(tmp_path / "logs", 1, retention_ms=HOUR_MS, file_delete_delay_ms=0)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (tmp_path / "logs" / "t-0" / "00000000000000000099.log.deleted").symlink_to(outside)
    result = run_cli("retention", "sweep", "--log-dir", str(tmp_path / "logs"))
    assert result.code == 1 and "not a regular file (a symlink); left alone" in result.err, result.err
    assert outside.read_text() == "keep me"


def test_future_now_is_refused(tmp_path: Path) -> None:
    _build_log(tmp_path, 1, retention_ms=HOUR_MS)
    future = int(time.time() * 1000) + 60_000
    before = tree_digest(tmp_path)
    result = run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(future))
    assert result.code == 1 and "in the future" in result.err
    assert tree_digest(tmp_path) == before


def test_status_explains_why_retention_waits(tmp_path: Path) -> None:
    _build_log(tmp_path, 3, retention_ms=10 * HOUR_MS)
    rows = json.loads(run_cli("status", "--log-dir", str(tmp_path), "--now-ms", str(T0 + HOUR_MS), "--json").out)
    row = rows["partitions"][0]
    assert row["segment_count"] == 4 and row["log_end_offset"] == 30 and row["pending_delete_bytes"] == 0
    expires = T0 + 9 + 10 * HOUR_MS + 1
    assert any(b.startswith("retention.ms: segment 0") and str(expires) in b for b in row["blocked_by"])
    assert any(b.startswith("unlimited: retention.bytes=-1") for b in row["blocked_by"])


# --- kill -9 during apply ----------------------------------------------------------------------------
def _apply_process(log_dir: Path, now_ms: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kafkalog.cli", "retention", "apply", "--log-dir",
                             str(log_dir), "--now-ms", str(now_ms)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _state(log_dir: Path) -> tuple[list[int], int]:
    store = LogStore([log_dir])
    log = store.open_log(store.locate("t", 0), read_only=True)
    return [s.base_offset for s in log.segments], log.log_start_offset


def _wait_for_marked(segment_log: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``segment_log`` is renamed ``.deleted`` (or the process ends). The renames go oldest first and
    take a few milliseconds in all: one file's name is watched, not the listing, so the kill that follows
    lands in them."""
    marked = segment_log.with_name(segment_log.name + ".deleted")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and not marked.exists():
        time.sleep(0.0001)


def test_kill_9_during_apply_always_converges(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    _build_log(pristine, 150, retention_ms=HOUR_MS, records_per_segment=2)
    now = T0 + 101 * HOUR_MS  # segments 0..99 (ts up to T0+99h) expire, 100.. stay
    cut = 99 * 2

    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    started = time.monotonic()
    assert _apply_process(reference, now).wait(timeout=120) == 0
    duration = time.monotonic() - started
    expected_segments, expected_start = _state(reference)
    assert expected_start == 200 and expected_segments[0] == 200

    kills = 24
    partial_kills = 0
    for i in range(kills):
        work = tmp_path / f"run{i}"
        shutil.copytree(pristine, work)
        proc = _apply_process(work, now)
        if i % 2:
            time.sleep(duration * (i + 0.5) / kills)  # anywhere in the run, start-up included
        else:
            # In the middle of the renames: once the .log of segment 4i (of the 100 due) is gone.
            _wait_for_marked(names.log_file(work / "t-0", 2 * 4 * i), proc)  # 2 records a segment
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # Whatever was renamed lies below the planned cut; nothing above it was touched.
        marked = list((work / "t-0").glob("*.deleted"))
        for path in marked:
            assert int(path.name.split(".")[0]) <= cut, path
        partial_kills += 0 < sum(path.name.endswith(".log.deleted") for path in marked) < 100  # of 100 due
        assert run_cli("recover", "--log-dir", str(work)).code == 0
        assert run_cli("retention", "apply", "--log-dir", str(work), "--now-ms", str(now)).code == 0
        assert _state(work) == (expected_segments, expected_start), f"kill {i} did not converge"
        assert run_cli("verify", "--log-dir", str(work)).code == 0
        served = run_cli("consume", "--log-dir", str(work), "--topic", "t", "--partition", "0", "--print-offset")
        assert [int(x.split("\t")[0]) for x in served.out.splitlines()] == list(range(200, 300))
        shutil.rmtree(work)
    print(f"{partial_kills} of {kills} kills landed mid-apply")
    assert partial_kills >= kills // 4  # the test really interrupts renames, not just start-up


# --- Kafka-written log dirs ---------------------------------------------------------------------------
def test_retention_on_a_kafka_written_dir(tmp_path: Path) -> None:
    source = kafka_fixtures_root() / "smartassets-backend-server" / "kafka" / "data"
    work = tmp_path / "data"
    shutil.copytree(source, work)
    now = int(time.time() * 1000)
    plan = json.loads(run_cli("retention", "plan", "--log-dir", str(work), "--now-ms", str(now), "--json").out)
    assert plan["errors"] == []
    by_tp = {(p["topic"], p["partition"]): p for p in plan["partitions"]}
    # __consumer_offsets is compacted (Kafka creates it so): only log-start-offset breaches apply.
    offsets = by_tp[("__consumer_offsets", 27)]
    assert any(b.startswith("policy:") for b in offsets["blocked_by"])
    # Delete-policy topics written years ago are fully expired under the default 7 days: rolled, then gone.
    deletable = [p for p in plan["partitions"] if p["segments"]]
    assert deletable and all(p["roll_first"] for p in deletable if p["topic"] == "temperature")
    applied = run_cli("retention", "apply", "--log-dir", str(work), "--now-ms", str(now), "--json")
    assert applied.code == 0, applied.err
    report = verify_store(LogStore([work]))
    assert report.all_problems() == []
    starts = checkpoint.read_offset_checkpoint(work / "log-start-offset-checkpoint")
    for p in deletable:
        assert starts[(p["topic"], p["partition"])] == p["log_start_offset_after"]
    temperature = work / "temperature-0"
    assert len(list(temperature.glob("*.log"))) == 1  # one empty active segment remains
