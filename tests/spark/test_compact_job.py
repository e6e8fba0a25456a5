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
import hashlib
import importlib.util
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log import names
from kafkalog.log.checkpoint import read_offset_checkpoint
from kafkalog.log.config import BrokerConfig
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore
from kafkalog.maintenance import cleaner
from kafkalog.maintenance import compact as compact_module
from kafkalog.maintenance.compact import CompactReport
from tests.spark.processes import BIN, kill_tree, listening_addresses, spark_missing, standalone_cluster

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "spark_jobs" / "compact_logs.py"
TOPIC = "changes"
DAY = 86_400_000
CODECS = (None, CompressionType.LZ4, CompressionType.ZSTD)  # one per partition
NOT_COMPARED = {names.JOURNAL_FILE, names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE}
JOB_TIMEOUT_S = 150


# --- Spark availability and process handling ----------------------------------------------------------
@dataclass(frozen=True)
class Spark:
    env: dict[str, str]
    numba_cache_dir: Path
    scratch: Path


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Spark:
    reason = spark_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Spark tests")
        pytest.skip(reason)
    import pyspark

    scratch = tmp_path_factory.mktemp("spark")
    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_DIRS=str(scratch))
    # Shared by every job of this module: only the first one pays numba's compilation.
    return Spark(env, scratch / "numba-cache", scratch)


@dataclass
class JobRun:
    code: int
    report: dict[str, Any]
    stdout: str
    stderr: str
    seconds: float
    listening: set[str] = field(default_factory=set)

    def explain(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-6000:]}"


def _start(spark: Spark, log_dirs: Sequence[Path], report: Path, now_ms: int, wall_ms: int, *,
           master: str = "local[2]", conf: Sequence[str] = (), job_args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    cmd = [str(BIN / "spark-submit"), "--master", master]
    for item in conf:
        cmd += ["--conf", item]
    cmd += [str(JOB), *[a for d in log_dirs for a in ("--log-dir", str(d))], "--now-ms", str(now_ms),
            "--wall-now-ms", str(wall_ms), "--report", str(report), "--numba-cache-dir", str(spark.numba_cache_dir),
            *job_args]
    with open(report.with_suffix(".stdout"), "wb") as out, open(report.with_suffix(".stderr"), "wb") as err:
        return subprocess.Popen(cmd, env=spark.env, stdout=out, stderr=err, cwd=spark.scratch,
                                start_new_session=True)


def _submit(spark: Spark, log_dirs: Sequence[Path], report: Path, now_ms: int, wall_ms: int, *,
            master: str = "local[2]", conf: Sequence[str] = (), job_args: Sequence[str] = (),
            watch: Sequence[int] = ()) -> JobRun:
    """Run the job to its end, noting every address a process of the job (or of ``watch``) listens on."""
    started = time.perf_counter()
    proc = _start(spark, log_dirs, report, now_ms, wall_ms, master=master, conf=conf, job_args=job_args)
    listening: set[str] = set()
    try:
        while proc.poll() is None:
            listening |= listening_addresses([proc.pid, *watch])
            if time.perf_counter() - started > JOB_TIMEOUT_S:
                pytest.fail(f"spark-submit still running after {JOB_TIMEOUT_S} s")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    seconds = time.perf_counter() - started
    doc = json.loads(report.read_text()) if report.exists() else {}
    return JobRun(proc.returncode, doc, report.with_suffix(".stdout").read_text(errors="replace"),
                  report.with_suffix(".stderr").read_text(errors="replace"), seconds, listening)


def _standalone_cluster(spark: Spark, workdir: Path,
                        workers: int = 2) -> AbstractContextManager[tuple[str, list[int]]]:
    """A master and ``workers`` one-core workers on 127.0.0.1; yields (master URL, their pids)."""
    return standalone_cluster(spark.env, workdir, workers)


# --- logs ---------------------------------------------------------------------------------------------
def _build(log_dir: Path, *, segments: int, seed: int = 7) -> None:
    """A compacted topic of three partitions (one codec each) of ``segments`` ~2 KB segments over 80 keys
    with tombstones. The first half was cleaned once, at a clock three days old, so the delete horizons
    stamped on its tombstones have passed now; the second half is dirty and leaves keys 0-19 alone (so
    some of those tombstones are still their key's latest record, and go now)."""
    store = LogStore([log_dir], create_missing=True)
    store.create_topic(TOPIC, len(CODECS), {"cleanup.policy": "compact", "segment.bytes": "2048",
                                            "delete.retention.ms": str(DAY)})
    rng = random.Random(seed)
    base_ts = int(time.time() * 1000) - 4 * DAY
    n = 0

    def write(partition: int, count: int, first_key: int) -> None:
        nonlocal n
        with store.writable_log(store.locate(TOPIC, partition)) as log:
            target = len(log.segments) + count
            while len(log.segments) < target:
                rows = []
                for _ in range(4):
                    key = f"key-{rng.randrange(first_key, 80):03d}".encode()
                    value = None if rng.random() < 0.08 else f"value-{n}-".encode() + b"x" * rng.randrange(40)
                    rows.append((key, value, (), base_ts + n))
                    n += 1
                log.append_records(rows, batch_records=rng.choice([1, 2, 4]), compression=CODECS[partition],
                                   now_ms=base_ts)

    for partition in range(len(CODECS)):
        write(partition, segments // 2, 0)
        location = store.locate(TOPIC, partition)
        active = store.open_log(location, read_only=True).active_segment.base_offset
        cleaner.clean_partition(store, location, 0, active, now_ms=base_ts + DAY, wall_now_ms=base_ts + DAY)
        write(partition, segments - segments // 2, 20)
    for leftover in log_dir.rglob(f"*{names.DELETED_SUFFIX}"):
        leftover.unlink()  # as if swept


def _copy(template: Path, to: Path) -> Path:
    shutil.copytree(template, to)
    return to


def _digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file but the journal and the (empty) lock files."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def _compact_single_process(log_dir: Path, now_ms: int, wall_ms: int) -> CompactReport:
    """``compact()`` as ``kafkalog compact`` runs it, with its wall clock pinned for the comparison."""
    return compact_module.compact(LogStore([log_dir]), now_ms=now_ms, wall_now_ms=wall_ms)


def _clocks() -> tuple[int, int]:
    now_ms = int(time.time() * 1000) - 1000
    return now_ms, now_ms + 500


Rec = tuple[int, bytes | None, bytes | None, int]


def _records(log_dir: Path, partition: int) -> list[Rec]:
    store = LogStore([log_dir])
    out: list[Rec] = []
    for segment in store.open_log(store.locate(TOPIC, partition), read_only=True).segments:
        data = segment.log_path.read_bytes()
        recs = scan_records(data, scan_batches(data))
        out += [(int(recs.offset[i]), recs.key(i), recs.value(i), int(recs.timestamp[i])) for i in range(len(recs))]
    return out


def _live(records: list[Rec]) -> dict[bytes | None, bytes]:
    """Each key's latest value; a key whose latest record is a tombstone has none (and the tombstone may
    go once its delete horizon has passed)."""
    latest = {key: value for _, key, value, _ in records}
    return {key: value for key, value in latest.items() if value is not None}


def _bases(partition_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in partition_dir.iterdir() if p.name.endswith(names.LOG_SUFFIX))


def _recover_old_or_new(victim: Path, template: Path, partitions: Iterable[int], before: dict[int, list[Rec]],
                        reference: dict[int, list[Rec]],
                        groups: dict[int, list[tuple[list[int], int]]]) -> dict[int, tuple[int, int]]:
    """After a kill: ``kafkalog recover`` and ``verify`` pass, no partition lost a key's latest value, each of
    the single-process cleaner's segment groups holds either the records it held before (old) or those the
    cleaner made of them (new), and the records past the last cleaned group are untouched. Returns
    (new groups, old groups) per partition."""
    recovered = run_cli("recover", "--log-dir", str(victim))
    assert recovered.code == 0, recovered.err
    print(recovered.out.strip())
    verified = run_cli("verify", "--log-dir", str(victim))
    assert verified.code == 0, verified.out + verified.err
    counts: dict[int, tuple[int, int]] = {}
    for p in partitions:
        after = _records(victim, p)
        assert _live(after) == _live(before[p]), f"partition {p} lost a key's latest value"
        old_bases = _bases(template / f"{TOPIC}-{p}")
        new_groups = old_groups = 0
        for old, _new in groups[p]:
            low = old[0]
            high = next((b for b in old_bases if b > old[-1]), old_bases[-1])
            got = [r for r in after if low <= r[0] < high]
            if got == [r for r in before[p] if low <= r[0] < high]:
                old_groups += 1
            else:
                assert got == [r for r in reference[p] if low <= r[0] < high], (p, old)
                new_groups += 1
        tail = old_bases[-1]
        assert [r for r in after if r[0] >= tail] == [r for r in before[p] if r[0] >= tail]
        counts[p] = (new_groups, old_groups)
    return counts


def _print_timings(label: str, run: JobRun) -> None:
    print(f"\n{label}: spark-submit {run.seconds:.1f} s; report timings {run.report.get('timings')}")


# --- the tests ----------------------------------------------------------------------------------------
def test_local_job_writes_the_same_bytes_as_the_single_process_cleaner(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    _build(template, segments=20)
    single, distributed = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = _clocks()

    reference = _compact_single_process(single, now_ms, wall_ms)
    assert [(r.topic, r.partition) for r in sorted(reference.cleaned, key=lambda r: r.partition)] == \
        [(TOPIC, p) for p in range(3)] and not reference.failures
    assert sum(r.stats.tombstones_removed for r in reference.cleaned) > 0  # the old horizons have passed

    run = _submit(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms)
    _print_timings("local[2]", run)
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

    assert _digest(distributed) == _digest(single)
    assert _digest(distributed) != _digest(template)
    # The executors compiled into the shared cache dir, not per task into site-packages.
    assert any(spark.numba_cache_dir.rglob("*.nbi")), "numba wrote no cache index into --numba-cache-dir"
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening


@pytest.mark.parametrize("damaged", ["first", "last"])
def test_locked_and_corrupt_partitions_are_reported_and_left_untouched(tmp_path: Path, spark: Spark,
                                                                       damaged: str) -> None:
    """A damaged last segment fails the round's key map; a damaged first one only once the later groups'
    .cleaned segments are written (the first group is written first, so none here), which must then go."""
    template = tmp_path / "template" / "logs"
    _build(template, segments=12)
    single, distributed = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = _clocks()
    _compact_single_process(single, now_ms, wall_ms)
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
    before = {d: _digest(d) for d in (locked, corrupt)}

    with cleaner_lock(locked, timeout_s=0):  # another cleaner is busy with partition 1
        run = _submit(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, job_args=["--plan", str(plan)])
    _print_timings(f"local[2], --plan, locked + corrupt ({damaged} segment)", run)
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

    assert {d: _digest(d) for d in (locked, corrupt)} == before
    assert _digest(distributed / f"{TOPIC}-0") == _digest(single / f"{TOPIC}-0")


def _check_rounds(run: JobRun, partitions: int, parts: int = 0) -> set[str]:
    """Every partition was cleaned: in one task each (``parts`` 0), or in a key-map stage of ``parts`` tasks
    each and a rewrite stage of a task per group; the executors that did the work."""
    assert run.code == 0, run.explain()
    rounds = [p.get("round") for p in run.report["partitions"]]
    assert len(rounds) == partitions and all(r and r["map_parts"] == parts and r["groups"] > 1 and
                                             r["tasks"] == (parts + r["groups"] if parts else 1)
                                             for r in rounds), rounds
    stages = run.report["spark"]["stages"]
    assert stages["clean"]["tasks"] == partitions * max(1, parts) and stages["clean"]["error"] is None, stages
    if parts:
        assert stages["rewrite"]["tasks"] == sum(r["groups"] for r in rounds if r), stages
    return {e for r in rounds if r for e in r["executors"]}


def test_local_job_with_key_maps_in_parts_writes_the_same_bytes(tmp_path: Path, spark: Spark) -> None:
    """local[4], the huge-partition path forced: each partition's key map built in a stage of its own, in
    four hash-shared parts (one per core), then a stage of one task per group."""
    template = tmp_path / "template" / "logs"
    _build(template, segments=20, seed=3)
    single, distributed = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = _clocks()
    _compact_single_process(single, now_ms, wall_ms)
    run = _submit(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master="local[4]",
                  job_args=["--split-bytes", "1"])
    _print_timings("local[4], key maps in 4 parts", run)
    _check_rounds(run, 3, parts=4)
    assert _digest(distributed) == _digest(single)
    scratch = Path(run.report["scratch_dir"])
    assert scratch.is_dir() and not any(scratch.iterdir())  # the key-map parts are gone


def test_a_split_round_whose_keys_overflow_the_dedupe_buffer_ends_where_the_cli_s_does(
        tmp_path: Path, spark: Spark) -> None:
    """With room for 30 keys in the dedupe buffer, each partition's hash-shared key-map parts hold
    more keys than that: the job maps the round again as one capped map (a stage of one task a round),
    which ends it where the single-process cleaner's ends (a prefix of the dirty range), byte for byte."""
    template = tmp_path / "template" / "logs"
    _build(template, segments=20, seed=5)
    single, distributed = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    broker_file = tmp_path / "server.properties"
    broker_file.write_text(f"log.cleaner.dedupe.buffer.size={34 * 24}\n")  # 34 slots: 30 keys at 0.9
    now_ms, wall_ms = _clocks()
    report = compact_module.compact(LogStore([single], BrokerConfig.load(broker_file)), now_ms=now_ms,
                                    wall_now_ms=wall_ms)
    ends = sorted((c.partition, c.end_offset) for c in report.cleaned)
    run = _submit(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master="local[2]",
                  job_args=["--split-bytes", "1", "--config-file", str(broker_file)])
    assert run.code == 0, run.explain()
    assert run.report["spark"]["stages"]["map-whole"]["tasks"] == len(CODECS)
    assert sorted((p["partition"], p["end_offset"]) for p in run.report["partitions"]) == ends
    assert all(end < active for (_, end), active in zip(ends, (_bases(single / f"{TOPIC}-{p}")[-1]
                                                               for p in range(len(CODECS))), strict=True))
    assert _digest(distributed) == _digest(single)


def test_standalone_cluster_writes_the_same_bytes(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    _build(template, segments=20, seed=11)
    single, distributed = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = _clocks()
    _compact_single_process(single, now_ms, wall_ms)

    started = time.perf_counter()
    with _standalone_cluster(spark, tmp_path / "cluster") as (url, cluster_pids):
        cluster_s = time.perf_counter() - started
        # Wait for both executors before scheduling, so the tasks spread over both workers.
        conf = ["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0"]
        run = _submit(spark, [distributed], tmp_path / "report.json", now_ms, wall_ms, master=url, conf=conf,
                      watch=cluster_pids)
    print(f"\nstandalone: master + 2 workers ALIVE after {cluster_s:.1f} s")
    _print_timings("standalone", run)
    assert run.report["spark"]["master"] == url
    executors = _check_rounds(run, 3)
    assert len(executors) == 2 and not any(e.endswith("/driver") for e in executors), executors  # both cleaned
    assert _digest(distributed) == _digest(single)
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening


def test_killing_the_job_mid_run_recovers_to_old_or_new(tmp_path: Path, spark: Spark) -> None:
    template = tmp_path / "template" / "logs"
    _build(template, segments=60, seed=5)
    partitions = range(len(CODECS))
    before = {p: _records(template, p) for p in partitions}
    now_ms, wall_ms = _clocks()
    ref = _copy(template, tmp_path / "ref" / "logs")
    reference_report = _compact_single_process(ref, now_ms, wall_ms)
    reference = {p: _records(ref, p) for p in partitions}
    groups = {r.partition: r.groups for r in reference_report.cleaned}
    assert set(groups) == set(partitions)
    assert all(_live(reference[p]) == _live(before[p]) for p in partitions)
    old_segments = sum(len(old) for g in groups.values() for old, _ in g)

    victim = _copy(template, tmp_path / "killed" / "logs")
    dirs = [victim / f"{TOPIC}-{p}" for p in partitions]
    proc = _start(spark, [victim], tmp_path / "report.json", now_ms, wall_ms)
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

    counts = _recover_old_or_new(victim, template, partitions, before, reference, groups)
    new_groups, old_groups = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"\nkilled after {swapped} of {old_segments} segment swaps: {new_groups} groups new, {old_groups} old")
    assert new_groups and old_groups, "the kill did not land mid-run"

    # Compacting again finishes the work without losing anything.
    again = _compact_single_process(victim, now_ms, wall_ms)
    assert not again.failures
    assert {p: _live(_records(victim, p)) for p in partitions} == {p: _live(before[p]) for p in partitions}
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
    _build(template, segments=12, seed=9)
    single, victim = _copy(template, tmp_path / "a" / "logs"), _copy(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = _clocks()
    _compact_single_process(single, now_ms, wall_ms)
    before = {p: _live(_records(template, p)) for p in range(3)}
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
        assert _digest(victim / f"{TOPIC}-{p}") == _digest(single / f"{TOPIC}-{p}")
    assert {p: _live(_records(victim, p)) for p in range(3)} == before  # no key lost its latest value
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
    _build(log_dir, segments=4)
    before = _digest(log_dir)
    now_ms, _ = _clocks()
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
    assert _digest(log_dir) == before


def test_a_cycle_with_nothing_to_clean_starts_no_spark(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    _build(log_dir, segments=4)
    now_ms, wall_ms = _clocks()
    _compact_single_process(log_dir, now_ms, wall_ms)  # nothing dirty is left
    report = tmp_path / "report.json"
    done = _run_job_without_spark("--log-dir", str(log_dir), "--now-ms", str(now_ms), "--report", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text())
    assert doc["status"] == "ok" and doc["partitions"] == [] and "spark" not in doc
    assert "session_start_s" not in doc["timings"]


class _LocalContext:
    """Stands in for a SparkContext: runs the mapped function here, in the calling thread, inside
    ``executor_view``, a context manager that changes what this "executor" sees of the file system."""

    master = applicationId = "in-process"

    def __init__(self, executor_view: Any) -> None:
        self.executor_view = executor_view
        self.defaultParallelism = 1
        self.job_groups: set[str] = set()

    def parallelize(self, data: Sequence[Any], slices: int) -> _LocalRDD:
        return _LocalRDD(self, list(data), None)

    def setJobGroup(self, group: str, description: str) -> None:  # noqa: N802 - SparkContext's name
        self.job_groups.add(group)

    def getConf(self) -> dict[str, str]:  # noqa: N802 - SparkContext's name
        return {}

    def stop(self) -> None:
        pass


@dataclass
class _LocalRDD:
    sc: _LocalContext
    data: list[Any]
    fn: Any

    def map(self, fn: Any) -> _LocalRDD:
        return _LocalRDD(self.sc, self.data, fn)

    def collect(self) -> list[Any]:
        with self.sc.executor_view():
            return [self.fn(x) for x in self.data]


def _load_job() -> Any:
    spec = importlib.util.spec_from_file_location("compact_logs_job", JOB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("view", ["missing", "empty-local-dir", "same"])
def test_executors_that_do_not_share_the_log_dir_are_refused(tmp_path: Path, view: str) -> None:
    job = _load_job()
    log_dir = tmp_path / "logs"
    _build(log_dir, segments=4)
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

    sc = _LocalContext(executor_view)
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
    """The whole driver (``main``) with ``_LocalContext`` for Spark: its exit code and its report."""
    monkeypatch.setattr(job, "start_spark", lambda args, cache_dir: _LocalContext(contextlib.nullcontext))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))  # run_task sets it if unset: restored after
    report = tmp_path / "report.json"
    code = job.main(["--log-dir", str(log_dir), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms),
                     "--report", str(report), "--numba-cache-dir", str(tmp_path / "cache"),
                     "--scratch-dir", str(tmp_path / "scratch")])
    return code, json.loads(report.read_text())


def test_a_bug_while_planning_one_partition_fails_that_partition_only(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole driver (``main``), its one stage run here by ``_LocalContext``: planning partition 1
    raises an error no kafkalog code raises on purpose (a bug). That partition is reported failed and left
    as it was with its cleaner lock free; the others are cleaned to the single-process bytes; exit 2."""
    from kafkalog.maintenance import cleaning_tasks

    job = _load_job()
    template = tmp_path / "template"
    _build(template, segments=4)
    now_ms, wall_ms = _clocks()
    expected = _copy(template, tmp_path / "expected")
    _compact_single_process(expected, now_ms, wall_ms)
    log_dir = _copy(template, tmp_path / "logs")
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

    got, want, before = _digest(log_dir), _digest(expected), _digest(template)
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
    job = _load_job()
    log_dir = tmp_path / "logs"
    _build(log_dir, segments=2)
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
