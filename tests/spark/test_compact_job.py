"""The Spark compaction job (``spark_jobs/compact_logs.py``) against the single-process cleaner.

Real Spark, submitted with the venv's ``spark-submit`` as a subprocess in its own session: on
``local[2]`` and on a standalone master with two one-core workers on 127.0.0.1. For the same input
and the same two clocks (``--now-ms`` and ``--wall-now-ms``) the job must write the segments
``compact()`` writes in one process, byte for byte (the journal, which records who ran and how long,
and the empty lock files aside). A locked and a corrupt partition are reported and left untouched
while the rest is compacted; killing the whole job mid-run leaves every partition recoverable to old
or new per segment group. The driver's refusals (bad input, executors that do not share the log
dirs) and a cycle with nothing to clean are checked without a Spark session.

Skipped with the reason when pyspark or Java is missing, except under ``CI=true`` where that fails.
Processes are stopped by process group and by the ids of their descendants, never by name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from job_harness import (
    CODECS,
    DAY,
    JOB,
    JOB_TIMEOUT_S,
    REPO,
    TOPIC,
    LocalContext,
    Spark,
    build_topic,
    check_rounds,
    clocks,
    compact_single_process,
    copy_tree,
    digest,
    live_values,
    load_job,
    print_timings,
    read_records,
    recover_old_or_new,
    segment_bases,
    standalone_cluster_of,
    start_job,
    submit_job,
)

# The module-scoped fixture, used by name: each test module gets its own. Imported "as spark", a re-export
# that the tests' arguments of that name do not redefine (F811).
from job_harness import spark as spark

from kafkalog.log import names
from kafkalog.log.checkpoint import read_offset_checkpoint
from kafkalog.log.config import BrokerConfig
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import compact as compact_module
from tests.spark.processes import kill_tree

pytestmark = pytest.mark.spark


# --- the tests ----------------------------------------------------------------------------------------
def test_local_job_writes_the_same_bytes_as_the_single_process_cleaner(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=20)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()

    reference = compact_single_process(single, now_ms, wall_ms)
    assert [(r.topic, r.partition) for r in sorted(reference.cleaned, key=lambda r: r.partition)] == \
        [(TOPIC, p) for p in range(3)] and not reference.failures
    assert sum(r.stats.tombstones_removed for r in reference.cleaned) > 0  # the old horizons have passed

    run = submit_job(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms)
    print_timings("local[2]", run)
    assert run.code == 0, run.explain()
    report = run.report
    assert report["status"] == "ok" and report["now_ms"] == now_ms and report["wall_now_ms"] == wall_ms
    assert report["totals"]["cleaned"] == 3 and report["totals"]["failed"] == 0
    assert {(p["topic"], p["partition"]): p["end_offset"] for p in report["partitions"]} == \
        {(r.topic, r.partition): r.end_offset for r in reference.cleaned}
    assert report["totals"]["bytes_written"] == sum(r.stats.bytes_written for r in reference.cleaned)
    assert set(report["timings"]) >= {"plan_s", "session_start_s", "executor_check_s", "clean_job_s", "total_s"}
    # One task per partition, in one stage; no second stage for partitions this small.
    assert report["spark"]["stages"]["clean"]["tasks"] == 3 and report["spark"]["stages"]["clean"]["error"] is None
    assert set(report["spark"]["stages"]) == {"clean"}

    assert digest(distributed) == digest(single)
    assert digest(distributed) != digest(template)
    # The executors compiled into the shared cache dir, not per task into site-packages.
    assert any(spark.numba_cache_dir.rglob("*.nbi")), "numba wrote no cache index into --numba-cache-dir"
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening


@pytest.mark.parametrize("damaged", ["first", "last"])
def test_locked_and_corrupt_partitions_are_reported_and_left_untouched(tmp_path: Path, spark: Spark,
                                                                       damaged: str) -> None:
    """A damaged last segment fails the round's key map; a damaged first one only once the later groups'
    .cleaned segments are written (the first group is written first, so none here), which must then go."""
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=12)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()
    compact_single_process(single, now_ms, wall_ms)
    # Planned by `kafkalog compact --dry-run --json` (as a pipeline's planning task does) before the damage.
    dry_run = run_cli("compact", "--log-dir", str(distributed), "--now-ms", str(now_ms), "--dry-run", "--json")
    assert dry_run.code == 0, dry_run.err
    plan = tmp_path / "plan.json"
    plan.write_text(dry_run.out)
    assert len(json.loads(dry_run.out)["selected"]) == 3

    locked, corrupt = distributed / f"{TOPIC}-1", distributed / f"{TOPIC}-2"
    store = LogStore([distributed])
    segments = store.open_log(store.locate(TOPIC, 2), read_only=True).segments
    segment = segments[0] if damaged == "first" else segments[-2]  # not the active one
    data = bytearray(segment.log_path.read_bytes())
    data[65] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segment.log_path.write_bytes(bytes(data))
    before = {d: digest(d) for d in (locked, corrupt)}

    with cleaner_lock(locked, timeout_s=0):  # another cleaner is busy with partition 1
        run = submit_job(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms,
                         job_args=["--plan", str(plan)])
    print_timings(f"local[2], --plan, locked + corrupt ({damaged} segment)", run)
    assert run.code == 2, run.explain()
    by_partition = {p["partition"]: p for p in run.report["partitions"]}
    assert run.report["status"] == "partitions-failed" and run.report["plan"]["source"] == str(plan)
    assert by_partition[0]["status"] == "cleaned" and by_partition[0]["ok"]
    assert by_partition[0]["round"]["groups"] > 1
    assert by_partition[1]["status"] == "locked" and not by_partition[1]["ok"]
    assert "locked" in by_partition[1]["error"]
    assert by_partition[2]["status"] == "failed" and not by_partition[2]["ok"]
    error = by_partition[2]["error"]
    assert "record is corrupt" in error, error
    totals = run.report["totals"]
    assert (totals["cleaned"], totals["locked"], totals["failed"]) == (1, 1, 1)
    assert run.report["spark"]["stages"]["clean"]["error"] is None  # the round failed, not Spark

    assert {d: digest(d) for d in (locked, corrupt)} == before
    assert digest(distributed / f"{TOPIC}-0") == digest(single / f"{TOPIC}-0")


def test_local_job_with_key_maps_in_parts_writes_the_same_bytes(tmp_path: Path, spark: Spark) -> None:
    """local[4], the huge-partition path forced: each partition's key map built in a stage of its own, in
    four hash-shared parts (one per core), then a stage of one task per group."""
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=20, seed=3)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()
    compact_single_process(single, now_ms, wall_ms)
    run = submit_job(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master="local[4]",
                     job_args=["--split-bytes", "1"])
    print_timings("local[4], key maps in 4 parts", run)
    check_rounds(run, 3, parts=4)
    assert digest(distributed) == digest(single)
    scratch = Path(run.report["scratch_dir"])
    assert scratch.is_dir() and not any(scratch.iterdir())  # the key-map parts are gone


def test_a_split_round_whose_keys_overflow_the_dedupe_buffer_ends_where_the_cli_s_does(
        tmp_path: Path, spark: Spark) -> None:
    """With room for 30 keys in the dedupe buffer, each partition's hash-shared key-map parts hold
    more keys than that: the job maps the round again as one capped map (a stage of one task a round),
    which ends it where the single-process cleaner's ends (a prefix of the dirty range), byte for byte."""
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=20, seed=5)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    broker_file = tmp_path / "server.properties"
    broker_file.write_text(f"log.cleaner.dedupe.buffer.size={34 * 24}\n")  # 34 slots: 30 keys at 0.9
    now_ms, wall_ms = clocks()
    report = compact_module.compact(LogStore([single], BrokerConfig.load(broker_file)), now_ms=now_ms,
                                    wall_now_ms=wall_ms)
    ends = sorted((c.partition, c.end_offset) for c in report.cleaned)
    run = submit_job(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master="local[2]",
                     job_args=["--split-bytes", "1", "--config-file", str(broker_file)])
    assert run.code == 0, run.explain()
    assert run.report["spark"]["stages"]["map-whole"]["tasks"] == len(CODECS)
    assert sorted((p["partition"], p["end_offset"]) for p in run.report["partitions"]) == ends
    assert all(end < active for (_, end), active in zip(ends, (segment_bases(single / f"{TOPIC}-{p}")[-1]
                                                               for p in range(len(CODECS))), strict=True))
    assert digest(distributed) == digest(single)


def test_standalone_cluster_writes_the_same_bytes(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=20, seed=11)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()
    compact_single_process(single, now_ms, wall_ms)

    started = time.perf_counter()
    with standalone_cluster_of(spark, tmp_path / "cluster") as (url, cluster_pids):
        cluster_s = time.perf_counter() - started
        # Wait for both executors before scheduling, so the tasks spread over both workers.
        conf = ["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0"]
        run = submit_job(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master=url, conf=conf,
                         watch=cluster_pids)
    print(f"\nstandalone: master + 2 workers ALIVE after {cluster_s:.1f} s")
    print_timings("standalone", run)
    assert run.report["spark"]["master"] == url
    executors = check_rounds(run, 3)
    assert len(executors) == 2 and not any(e.endswith("/driver") for e in executors), executors  # both cleaned
    assert digest(distributed) == digest(single)
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening


def test_killing_the_job_mid_run_recovers_to_old_or_new(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=60, seed=5)
    partitions = range(len(CODECS))
    before = {p: read_records(template, p) for p in partitions}
    now_ms, wall_ms = clocks()
    ref = copy_tree(template, tmp_path / "ref" / "logs")
    reference_report = compact_single_process(ref, now_ms, wall_ms)
    reference = {p: read_records(ref, p) for p in partitions}
    groups = {r.partition: r.groups for r in reference_report.cleaned}
    assert set(groups) == set(partitions)
    assert all(live_values(reference[p]) == live_values(before[p]) for p in partitions)
    old_segments = sum(len(old) for g in groups.values() for old, _ in g)

    victim = copy_tree(template, tmp_path / "killed" / "logs")
    dirs = [victim / f"{TOPIC}-{p}" for p in partitions]
    proc = start_job(spark, [victim], tmp_path / "report.json", now_ms, wall_ms)
    swapped = 0
    try:
        while proc.poll() is None:  # kill when half of all old segments have been swapped out
            swapped = sum(1 for d in dirs for n in os.listdir(d) if n.endswith(names.LOG_SUFFIX + names.DELETED_SUFFIX))
            if swapped >= old_segments // 2:
                break
            time.sleep(0.0005)
    finally:
        kill_tree(proc)
    assert proc.returncode == -signal.SIGKILL, "the job finished before half of its swaps: nothing was killed"

    counts = recover_old_or_new(victim, template, partitions, before, reference, groups)
    new_groups, old_groups = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"\nkilled after {swapped} of {old_segments} segment swaps: {new_groups} groups new, {old_groups} old")
    assert new_groups and old_groups, "the kill did not land mid-run"

    # Compacting again finishes the work without losing anything.
    again = compact_single_process(victim, now_ms, wall_ms)
    assert not again.failures
    assert {p: live_values(read_records(victim, p)) for p in partitions} == \
        {p: live_values(before[p]) for p in partitions}
    assert run_cli("verify", "--log-dir", str(victim)).code == 0


# Runs the job under plain ``python`` (it launches its own JVM) with the driver's commit wrapped: before
# partition P is committed, the .cleaned log its task attempt wrote for its last group is removed or cut
# by a byte (as another host "recovering" it, or a second writer of the same path, would).
_DAMAGING_DRIVER = """
import importlib.util, os, sys
from kafkalog.log import names
from kafkalog.maintenance import cleaning_tasks
damage, partition, job = sys.argv[1], int(sys.argv[2]), sys.argv[3]
commit_round = cleaning_tasks.commit_round
def damaged_first(ctx, spec, groups, maps, run_id=""):
    if spec.partition == partition:
        last = max(groups, key=lambda g: g["base_offset"])
        path = names.log_file(ctx.location.directory, last["base_offset"], cleaning_tasks.attempt_suffix(last["tag"]))
        path.unlink() if damage == "removed" else os.truncate(path, path.stat().st_size - 1)
    return commit_round(ctx, spec, groups, maps, run_id)
cleaning_tasks.commit_round = damaged_first
spec = importlib.util.spec_from_file_location("compact_logs_job", job)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module  # its dataclasses look their module up there
spec.loader.exec_module(module)
from pyspark import cloudpickle
cloudpickle.register_pickle_by_value(module)  # as spark-submit's __main__ is: the executors cannot import it
sys.exit(module.main(sys.argv[4:]))
"""


@pytest.mark.parametrize("damage", ["removed", "truncated"])
def test_a_cleaned_log_damaged_before_the_commit_loses_nothing(tmp_path: Path, spark: Spark, damage: str) -> None:
    """The driver swaps a group only if its file has the size and CRC-32C the attempt reported: the damaged
    group (the partition's last) is not swapped, its sources stay, the partition is reported failed and
    its cleaner checkpoint does not move; the other partitions are cleaned as in one process."""
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=12, seed=9)
    single, victim = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()
    compact_single_process(single, now_ms, wall_ms)
    before = {p: live_values(read_records(template, p)) for p in range(3)}
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", _DAMAGING_DRIVER, damage, "1", str(JOB), "--master", "local[2]",
                           "--log-dir", str(victim), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms),
                           "--report", str(report), "--numba-cache-dir", str(spark.numba_cache_dir)],
                          env=spark.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=spark.scratch)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    by_partition = {p["partition"]: p for p in json.loads(report.read_text())["partitions"]}
    assert by_partition[1]["status"] == "failed" and "nothing swapped" in by_partition[1]["error"], by_partition[1]
    assert ("missing" if damage == "removed" else "bytes with CRC-32C") in by_partition[1]["error"]
    assert [by_partition[p]["status"] for p in (0, 2)] == ["cleaned", "cleaned"]
    for p in (0, 2):
        assert digest(victim / f"{TOPIC}-{p}") == digest(single / f"{TOPIC}-{p}")
    assert {p: live_values(read_records(victim, p)) for p in range(3)} == before  # no key lost its latest value
    checkpoints = [read_offset_checkpoint(d / names.CLEANER_OFFSET_CHECKPOINT).get((TOPIC, 1))
                   for d in (template, victim)]
    assert checkpoints[0] == checkpoints[1]
    assert not [f for f in victim.rglob("*") if f.name.endswith(names.CLEANED_SUFFIX)]
    assert run_cli("verify", "--log-dir", str(victim)).code == 0


# --- the driver's refusals and checks, without a Spark session ---------------------------------------
def _run_job_without_spark(*args: str) -> subprocess.CompletedProcess[str]:
    """The job under plain ``python``: everything before the first Spark call runs the same way."""
    return subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", ["missing-log-dir", "future-now", "wall-before-now", "bad-plan", "partition-only"])
def test_bad_input_is_refused_before_spark_starts(tmp_path: Path, case: str) -> None:
    log_dir = tmp_path / "logs"
    build_topic(log_dir, segments=4)
    before = digest(log_dir)
    now_ms, _ = clocks()
    report = tmp_path / "report.json"
    args = ["--log-dir", str(log_dir), "--now-ms", str(now_ms), "--report", str(report)]
    expected = {
        "missing-log-dir": "does not exist",
        "future-now": "is in the future",
        "wall-before-now": "is before --now-ms",
        "bad-plan": "selected[0]: missing key(s) partition",
        "partition-only": "--partition needs --topic",
    }[case]
    if case == "missing-log-dir":
        args = ["--log-dir", str(tmp_path / "nowhere"), *args[2:]]
    elif case == "future-now":
        args[3] = str(now_ms + DAY)
    elif case == "wall-before-now":
        args += ["--wall-now-ms", str(now_ms - 1)]
    elif case == "bad-plan":
        (tmp_path / "plan.json").write_text(json.dumps({
            "version": 1, "kind": "kafkalog-compaction-plan", "now_ms": now_ms, "topic": None, "partitions": None,
            "selected": [{"topic": TOPIC}], "checkpoint_resets": [], "not_selected": [], "errors": []}))
        args = [*args[:2], "--plan", str(tmp_path / "plan.json"), *args[4:]]
    else:
        args += ["--partition", "0"]
    done = _run_job_without_spark(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert expected in done.stderr
    if case != "partition-only":  # an argument error stops before the report is known to be wanted
        doc = json.loads(report.read_text())
        assert doc["status"] == "refused" and expected in doc["error"] and "spark" not in doc
    assert digest(log_dir) == before


def test_a_cycle_with_nothing_to_clean_starts_no_spark(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    build_topic(log_dir, segments=4)
    now_ms, wall_ms = clocks()
    compact_single_process(log_dir, now_ms, wall_ms)  # nothing dirty is left
    report = tmp_path / "report.json"
    done = _run_job_without_spark("--log-dir", str(log_dir), "--now-ms", str(now_ms), "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text())
    assert doc["status"] == "ok" and doc["partitions"] == [] and "spark" not in doc
    assert "session_start_s" not in doc["timings"]


@pytest.mark.parametrize("view", ["missing", "empty-local-dir", "same"])
def test_executors_that_do_not_share_the_log_dir_are_refused(tmp_path: Path, view: str) -> None:
    job = load_job()
    log_dir = tmp_path / "logs"
    build_topic(log_dir, segments=4)
    store = LogStore([log_dir])
    targets = [{"topic": TOPIC, "partition": p} for p in range(3)]

    @contextmanager
    def executor_view() -> Iterator[None]:
        if view == "same":
            yield
            return
        hidden = tmp_path / "elsewhere"
        log_dir.rename(hidden)  # this "executor" has no such directory, or a local one of its own
        if view == "empty-local-dir":
            log_dir.mkdir()
        try:
            yield
        finally:
            if view == "empty-local-dir":
                log_dir.rmdir()
            hidden.rename(log_dir)

    sc = LocalContext(executor_view)
    job_state = job.Job([str(log_dir)], str(tmp_path / "cache"), str(tmp_path / "scratch"), 0, 0, "run", {},
                        [job.Round({**t, "first_dirty_offset": 0, "first_uncleanable_offset": 1}, {}) for t in targets])
    job.lock_rounds(store, job_state)
    args = job.parse_args(["--report", "r.json", "--now-ms", "0"])
    try:
        if view == "same":
            seen = job.check_executors(sc, job_state, args)
            assert seen["probe_tasks"] == 2
            return
        with pytest.raises(job.JobError) as refused:
            job.check_executors(sc, job_state, args)
    finally:
        for r in job_state.rounds:
            r.end()
    message = str(refused.value)
    assert str(log_dir) in message and "shared" in message and "executor on" in message
    assert ("does not exist" if view == "missing" else f"{TOPIC}-0") in message


def _main_in_process(job: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, log_dir: Path, now_ms: int,
                     wall_ms: int) -> tuple[int, dict[str, Any]]:
    """The whole driver (``main``) with ``LocalContext`` for Spark: its exit code and its report."""
    monkeypatch.setattr(job, "start_spark", lambda args, cache_dir: LocalContext(contextlib.nullcontext))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))  # run_task sets it if unset: restored after
    report = tmp_path / "report.json"
    code = job.main(["--log-dir", str(log_dir), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms),
                     "--report", str(report), "--numba-cache-dir", str(tmp_path / "cache"),
                     "--scratch-dir", str(tmp_path / "scratch")])
    return code, json.loads(report.read_text())


def test_a_bug_while_planning_one_partition_fails_that_partition_only(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole driver (``main``), its one stage run here by ``LocalContext``: planning partition 1
    raises an error no kafkalog code raises on purpose (a bug). That partition is reported failed and left
    as it was with its cleaner lock free; the others are cleaned to the single-process bytes; exit 2."""
    from kafkalog.maintenance import cleaning_tasks

    job = load_job()
    template = tmp_path / "template"
    build_topic(template, segments=4)
    now_ms, wall_ms = clocks()
    expected = copy_tree(template, tmp_path / "expected")
    compact_single_process(expected, now_ms, wall_ms)
    log_dir = copy_tree(template, tmp_path / "logs")
    planned = cleaning_tasks.plan_round

    def plan_round(store: LogStore, location: Any, *rest: Any, **kwargs: Any) -> Any:
        if location.topic_partition.partition == 1:
            raise ZeroDivisionError("a bug in planning")
        return planned(store, location, *rest, **kwargs)

    monkeypatch.setattr(cleaning_tasks, "plan_round", plan_round)
    code, doc = _main_in_process(job, monkeypatch, tmp_path, log_dir, now_ms, wall_ms)

    assert code == 2 and doc["status"] == "partitions-failed"
    by_partition = {p["partition"]: p for p in doc["partitions"]}
    assert sorted(by_partition) == [0, 1, 2]
    failed = by_partition[1]
    assert (failed["ok"], failed["status"]) == (False, "failed")
    assert failed["error"] == "unexpected ZeroDivisionError: a bug in planning"
    assert all(by_partition[p]["status"] == "cleaned" for p in (0, 2))
    assert doc["totals"]["cleaned"] == 2 and doc["totals"]["failed"] == 1

    got, want, before = digest(log_dir), digest(expected), digest(template)
    checkpoints = {name: read_offset_checkpoint(d / names.CLEANER_OFFSET_CHECKPOINT)
                   for name, d in (("got", log_dir), ("want", expected), ("before", template))}
    for p in (0, 2):
        assert checkpoints["got"][(TOPIC, p)] == checkpoints["want"][(TOPIC, p)]
    assert checkpoints["got"].get((TOPIC, 1)) == checkpoints["before"].get((TOPIC, 1)) is not None
    assert checkpoints["want"][(TOPIC, 1)] > checkpoints["before"][(TOPIC, 1)]  # it had work to do
    for path, sha in got.items():
        if path == names.CLEANER_OFFSET_CHECKPOINT:
            continue
        if path.startswith(f"{TOPIC}-1/"):
            assert sha == before.get(path), f"{path} changed in the partition that failed"
        else:
            assert sha == want.get(path), f"{path} differs from the single-process cleaner's"
    assert {p for p in got if not p.startswith(f"{TOPIC}-1/")} == {p for p in want if not p.startswith(f"{TOPIC}-1/")}
    assert {p for p in got if p.startswith(f"{TOPIC}-1/")} == {p for p in before if p.startswith(f"{TOPIC}-1/")}
    with cleaner_lock(log_dir / f"{TOPIC}-1", timeout_s=0):
        pass  # released: the next cycle can clean it


def test_the_driver_finds_the_log_dirs_as_the_cli_does_and_ships_the_broker_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = load_job()
    log_dir = tmp_path / "logs"
    build_topic(log_dir, segments=2)
    broker_file = tmp_path / "server.properties"
    broker_file.write_text(f"log.dirs={log_dir}\nlog.cleaner.delete.retention.ms=5000\nbroker.id=7\n")
    monkeypatch.setenv("KAFKALOG_LOG_DIRS", f" {log_dir} ,")
    report = ["--report", str(tmp_path / "report.json"), "--now-ms", "0"]
    store, properties = job.open_store(job.parse_args(["--config-file", str(broker_file), *report]))
    assert store.log_dirs == [log_dir.resolve()]
    # Executors may not see the file: they get its properties, read once on the driver.
    assert properties == {"log.dirs": str(log_dir), "log.cleaner.delete.retention.ms": "5000", "broker.id": "7"}
    monkeypatch.delenv("KAFKALOG_LOG_DIRS")
    monkeypatch.setenv("KAFKALOG_CONFIG", str(broker_file))
    store, _ = job.open_store(job.parse_args(report))
    assert store.log_dirs == [log_dir.resolve()]


def test_the_driver_loads_numba_only_after_setting_its_cache_dir() -> None:
    """numba reads NUMBA_CACHE_DIR when first imported: loading the job must not import it (``run`` sets
    the variable, then the driver's first kernel use imports numba)."""
    check = ("import importlib.util, sys\n"
             f"spec = importlib.util.spec_from_file_location('compact_logs_job', {str(JOB)!r})\n"
             "module = importlib.util.module_from_spec(spec)\n"
             "sys.modules[spec.name] = module\n"
             "spec.loader.exec_module(module)\n"
             "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
