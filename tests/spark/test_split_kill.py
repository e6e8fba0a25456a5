"""Crashes while the Spark job cleans its partitions (``spark_jobs/compact_logs.py``).

The driver holds every partition's cleaner lock from before the probe until the partition is committed;
the tasks write each segment group's ``.cleaned`` segment beside its sources under their attempt's own
name, and the driver alone checks each group against what its attempt reported and swaps it in.

1. On a standalone cluster (a master and two one-core workers on 127.0.0.1), the huge-partition path
   forced (a key-map stage of two hash-shared parts per partition, then a rewrite stage of one task per
   group), an executor is SIGKILLed twice in one job: once while a key-map task runs, early, and once
   after a rewrite task's Python worker has done its work and gone quiet but before its executor could
   report the result, so the retried attempt writes the group again under its own name beside the lost
   one's files. Which task runs where comes from the driver's scheduler log (``TaskSetManager`` at INFO,
   the rest at WARN); the executor (its JVM, pyspark's daemon and workers: descendants of the standalone
   workers, stopped and then killed by id, never by name) is frozen first, so what it was doing can be
   checked before it dies. Spark must retry the lost tasks and the job must finish: exit 0, every
   partition cleaned, byte for byte the single-process result, the run's scratch dir gone and no
   ``.cleaned`` file left.
2. On ``local[2]`` the whole job (spark-submit's process group, stopped at once, then it and its descendants
   killed) is SIGKILLed: while the stage runs (half of a partition's groups written, nothing swapped yet),
   or as soon as the driver's first swap has marked an old segment ``.deleted`` (typically mid-swap:
   ``.swap`` files in place). At most one partition is then partly swapped in (the driver commits one at
   a time). The poller shares the two cores with the job and may see the moment late: a kill that missed
   it is checked all the same and tried again, up to three times. ``kafkalog recover`` and ``kafkalog
   verify`` must pass, no key may lose its latest value, every segment group must be wholly old or wholly
   new, and the job run again (with the killed run's id and scratch dir) must exit 0
   with the single-process cleaner's records, byte for byte what the single-process cleaner makes of the
   same recovered log dir, and byte for byte the single-process result from the original logs for every
   partition without a group swapped in at the kill. A partition killed with some groups swapped in is
   recleaned with their smaller segments grouped anew (by either cleaner), so its segments differ from a
   one-pass result while its records do not.

Skipped with the reason when pyspark or Java is missing, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import run_cli
from executors import (
    EXECUTOR_MAIN,
    QUICK_JVM,
    ExecutorWatch,
    freeze_tree,
    in_flight,
    kill_all,
    process_gone,
    stat_fields,
    wait_stopped,
)
from job_harness import (
    CODECS,
    JOB_TIMEOUT_S,
    TOPIC,
    JobRun,
    Rec,
    Spark,
    build_topic,
    check_rounds,
    clocks,
    compact_single_process,
    copy_tree,
    digest,
    live_values,
    read_records,
    recover_old_or_new,
    standalone_cluster_of,
    start_job,
    submit_job,
)

# The module-scoped fixture, used by name: each test module gets its own. Imported "as spark", a re-export
# that the tests' arguments of that name do not redefine (F811).
from job_harness import spark as spark

from kafkalog.log import names
from tests.spark.processes import cmdline as _cmdline
from tests.spark.processes import descendants, kill_tree

pytestmark = pytest.mark.spark

PARTITIONS = range(len(CODECS))
# 40 segments of ~2 KB per partition: ~25 segment groups, enough tasks' work to kill one mid-stage; the
# kills are aimed by the driver's log and by freezing, not by luck.
SEGMENTS = 40
LOCAL_CONF = [f"spark.driver.extraJavaOptions={QUICK_JVM}"]  # local[2]: the executors run in the driver's JVM
ATTEMPTS = 3  # kills of the whole job, to land one at the moment aimed at
# The driver logs which task attempt starts, finishes or is lost where; everything else stays at WARN.
LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = info
"""
TASK_LINE = re.compile(r"(Starting|Finished|Lost) task (\d+)\.(\d+) in stage (\d+)\.(\d+) \(TID (\d+)\)")
# An ExecutorLostFailure the driver does not count against the task (the worker did not blame the app for
# the exit) is logged this way instead of as "Lost task".
EXECUTOR_EXITED_LINE = re.compile(r"task (\d+)\.(\d+) in stage (\d+)\.(\d+) \(TID (\d+)\) failed because while it "
                                  r"was being computed, its executor exited")
EXECUTOR_IN_LINE = re.compile(r"executor (\w+)")


# --- shared by both tests -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def warm(spark: Spark) -> Iterator[subprocess.Popen[bytes]]:
    """Compile the cleaner's kernels into the executors' numba cache while the logs are built and the
    cluster starts: the executors' tasks then only load them (else every executor would compile them,
    seconds of CPU each)."""
    env = dict(spark.env, NUMBA_CACHE_DIR=str(spark.numba_cache_dir))
    with open(spark.scratch / "warm.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from kafkalog.maintenance.warmup import warm; warm()"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        kill_tree(proc)


def _wait_warm(spark: Spark, warm: subprocess.Popen[bytes]) -> None:
    assert warm.wait(timeout=120) == 0, (spark.scratch / "warm.out").read_text()


@dataclass(frozen=True)
class Logs:
    template: Path
    ref: Path  # the template compacted by the single-process cleaner
    now_ms: int
    wall_ms: int
    before: dict[int, list[Rec]]
    reference: dict[int, list[Rec]]
    groups: dict[int, list[tuple[list[int], int]]]  # partition -> its segment groups (old bases, new base)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory, warm: subprocess.Popen[bytes]) -> Logs:
    root = tmp_path_factory.mktemp("split-kill")
    template = root / "template" / "logs"
    build_topic(template, segments=SEGMENTS, seed=17)
    now_ms, wall_ms = clocks()
    ref = copy_tree(template, root / "ref" / "logs")
    report = compact_single_process(ref, now_ms, wall_ms)
    groups = {r.partition: [(list(old), new) for old, new in r.groups] for r in report.cleaned}
    assert set(groups) == set(PARTITIONS) and not report.failures
    before = {p: read_records(template, p) for p in PARTITIONS}
    reference = {p: read_records(ref, p) for p in PARTITIONS}
    assert all(live_values(reference[p]) == live_values(before[p]) for p in PARTITIONS)
    return Logs(template, ref, now_ms, wall_ms, before, reference, groups)


def _leftovers(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.rglob("*") if p.name.endswith((names.CLEANED_SUFFIX, names.SWAP_SUFFIX)))


def _huge_path(log_dir: Path) -> list[str]:
    """Every partition's key map in a stage of its own, in two parts: a key-map budget under the 1.5 bytes
    per dirty byte that one map of the largest partition would take (the partitions are alike)."""
    largest = max(sum(f.stat().st_size for f in d.glob("*.log")) for d in log_dir.glob(f"{TOPIC}-*"))
    return ["--split-bytes", "1", "--map-memory", str(largest)]


def _map_files(scratch: Path) -> list[str]:
    """The key-map parts the map stage's attempts saved (the driver removes a partition's once it is committed),
    in the job's own run directory ``kafkalog-run-<random>/<partition>/`` of the scratch dir."""
    return sorted(p.name for p in scratch.glob("kafkalog-run-*/*/map-*.json"))


# --- 1. executors killed mid-stage ----------------------------------------------------------------------
@dataclass
class Attempt:
    """One task attempt, as the driver's scheduler logs it."""

    tid: int
    stage: int
    index: int  # the task's index in its stage
    attempt: int
    executor: str
    seen_at: float  # when this test read its "Starting" line
    state: str = "running"  # running, finished or lost
    lost_reason: str = ""


class DriverLog:
    """Follows spark-submit's stderr: the task attempts, by TID."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.attempts: dict[int, Attempt] = {}

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        now = time.perf_counter()
        for raw in lines:
            line = raw.decode(errors="replace")
            m = TASK_LINE.search(line)
            if not m:
                exited = EXECUTOR_EXITED_LINE.search(line)
                if exited and int(exited.group(5)) in self.attempts:
                    a = self.attempts[int(exited.group(5))]
                    a.state, a.lost_reason = "lost", f"ExecutorLostFailure, not counted: {line[exited.start():]}"[:200]
                continue
            what, index, attempt, stage, _stage_attempt, tid = m.group(1), *map(int, m.groups()[1:])
            if what == "Starting":
                executor = EXECUTOR_IN_LINE.search(line[m.end():])
                self.attempts[tid] = Attempt(tid, stage, index, attempt, executor.group(1) if executor else "?", now)
            elif tid in self.attempts:
                a = self.attempts[tid]
                a.state = "finished" if what == "Finished" else "lost"
                a.lost_reason = line[m.end():].strip()[:200] if what == "Lost" else ""

    def running(self) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.state == "running"]


def _stage_kind(stage: int) -> str:
    """Stage 0 probes the executors; stage 1 builds the key maps (or cleans whole partitions); 2 rewrites."""
    return ("probe", "clean", "rewrite")[min(stage, 2)]


def _executor_jvms(worker_pids: Iterable[int]) -> dict[str, int]:
    """Executor id -> its JVM pid, for the executors the standalone workers run now."""
    out = {}
    for worker in worker_pids:
        for pid in descendants(worker):
            args = _cmdline(pid).split(b"\0")
            if EXECUTOR_MAIN in _cmdline(pid) and b"--executor-id" in args and not process_gone(pid):
                out[args[args.index(b"--executor-id") + 1].decode()] = pid
    return out


def _cpu_ticks(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else -1  # utime + stime


def _python_workers(watch: ExecutorWatch, jvm: int) -> list[int]:
    watch.relist()
    return [pid for pid, executor in watch.python.items() if executor == jvm]


def _wait_idle(pids: list[int], timeout_s: float = 5.0) -> bool:
    """True once none of ``pids`` has used CPU for 0.15 s (its task done, blocked on the frozen JVM)."""
    deadline = time.monotonic() + timeout_s
    last, quiet_since = [_cpu_ticks(p) for p in pids], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.03)
        now = [_cpu_ticks(p) for p in pids]
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= 0.15:
            return True
    return False


@dataclass(frozen=True)
class Moment:
    name: str
    stage: str  # the stage whose task is killed
    after_s: float  # how long the attempt must have run (as seen here) before its executor is frozen
    let_python_finish: bool  # only the JVM frozen first, till its Python worker has done its work and is quiet


MOMENTS = [
    Moment("kill 1, a key-map task early in its run", "clean", 0.03, False),
    Moment("kill 2, a rewrite task whose worker has written its group and gone quiet, its result not sent",
           "rewrite", 0.02, True),
]


@dataclass
class Kill:
    moment: Moment
    at_s: float  # since spark-submit started
    attempt: Attempt
    jvm: int
    killed: list[int]
    files: dict[str, object] = field(default_factory=dict)  # what the partitions and scratch held while it was frozen

    def describe(self) -> str:
        a = self.attempt
        return (f"{self.moment.name}: at {self.at_s:.2f} s SIGKILLed executor {a.executor} (JVM pid {self.jvm}; "
                f"pids {self.killed}) running task {a.index}.{a.attempt} of stage {a.stage} (TID {a.tid}, "
                f"{_stage_kind(a.stage)} stage); files then: {self.files}")


def _try_kill(moment: Moment, attempt: Attempt, jvm: int, watch: ExecutorWatch, log: DriverLog, log_dir: Path,
              maps: list[str], t0: float) -> Kill | None:
    """Freeze the attempt's executor (first only its JVM, if its Python worker is to finish its task), check
    that the driver has not seen the attempt finish, note the files, kill. None if it was too late."""
    files: dict[str, object] = {}
    if moment.let_python_finish:
        # Only while a Python worker of the executor is busy, i.e. inside this task (not still receiving it).
        pythons = _python_workers(watch, jvm)
        before = [_cpu_ticks(p) for p in pythons]
        time.sleep(0.02)
        if [_cpu_ticks(p) for p in pythons] == before:
            return None
        try:
            os.kill(jvm, signal.SIGSTOP)
        except ProcessLookupError:
            return None
        wait_stopped([jvm])
        time.sleep(0.01)
        pythons = _python_workers(watch, jvm)  # a worker forked for this very task is listed now
        files["python_finished"] = _wait_idle(pythons, timeout_s=30)  # it may do all of the others' work too
        if not files["python_finished"]:
            os.kill(jvm, signal.SIGCONT)
            return None
    stopped = freeze_tree(jvm)
    time.sleep(0.05)  # a result sent just before the freeze reaches the driver by now
    log.poll()
    if attempt.state != "running":  # it finished after all: let it be
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        return None
    at_s = time.perf_counter() - t0
    files.update({d.name: in_flight(d) for d in sorted(log_dir.glob(f"{TOPIC}-*"))})
    files["key_map_parts_saved"] = len(maps)
    kill_all(stopped)
    return Kill(moment, at_s, attempt, jvm, stopped, files)


def _run_killing_executors(spark: Spark, log_dir: Path, report: Path, logs: Logs, url: str, workers: list[int],
                           scratch: Path, run_id: str, log4j: Path) -> tuple[JobRun, list[Kill], DriverLog]:
    t0 = time.perf_counter()
    driver_opts = f"-Dlog4j2.configurationFile=file:{log4j} {QUICK_JVM}"
    proc = start_job(spark, [log_dir], report, logs.now_ms, logs.wall_ms, master=url,
                     conf=["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                           f"spark.driver.extraJavaOptions={driver_opts}",
                           f"spark.executor.extraJavaOptions={QUICK_JVM}"],
                     job_args=["--scratch-dir", str(scratch), "--run-id", run_id, *_huge_path(log_dir)])
    log = DriverLog(report.with_suffix(".stderr"))
    watch = ExecutorWatch(workers)
    kills: list[Kill] = []
    try:
        while proc.poll() is None:
            if time.perf_counter() - t0 > JOB_TIMEOUT_S:
                pytest.fail(f"spark-submit still running after {JOB_TIMEOUT_S} s; kills: "
                            + "; ".join(k.describe() for k in kills))
            log.poll()
            if len(kills) < len(MOMENTS):
                moment = MOMENTS[len(kills)]
                killed = {k.attempt.tid for k in kills}
                now = time.perf_counter()
                candidates = [a for a in log.running() if _stage_kind(a.stage) == moment.stage
                              and a.tid not in killed and now - a.seen_at >= moment.after_s]
                jvms = _executor_jvms(workers) if candidates else {}  # a walk of /proc: only when needed
                for attempt in candidates:
                    if attempt.executor not in jvms:
                        continue
                    kill = _try_kill(moment, attempt, jvms[attempt.executor], watch, log, log_dir,
                                     _map_files(scratch), t0)
                    if kill is not None:
                        kills.append(kill)
                        print(f"\n{kill.describe()}", flush=True)
                        break
            time.sleep(0.003)
    finally:
        kill_tree(proc)  # a no-op once it has exited
    log.poll()
    doc = json.loads(report.read_text()) if report.exists() else {}
    run = JobRun(proc.returncode, doc, report.with_suffix(".stdout").read_text(errors="replace"),
                 report.with_suffix(".stderr").read_text(errors="replace"), time.perf_counter() - t0)
    for kill in kills:  # the attempt as the driver saw it at the end
        kill.attempt = log.attempts[kill.attempt.tid]
    return run, kills, log


def test_executors_killed_mid_stage_are_retried_to_the_same_bytes(tmp_path: Path, spark: Spark, logs: Logs,
                                                                         warm: subprocess.Popen[bytes]) -> None:
    started = time.perf_counter()
    victim = copy_tree(logs.template, tmp_path / "victim" / "logs")
    scratch, run_id = tmp_path / "scratch", "split-kill-executors"
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(LOG4J2)
    quick = dataclasses.replace(spark, env=dict(spark.env, SPARK_DAEMON_JAVA_OPTS=QUICK_JVM))
    with standalone_cluster_of(quick, tmp_path / "cluster") as (url, cluster_pids):
        cluster_s = time.perf_counter() - started
        _wait_warm(spark, warm)
        warm_s = time.perf_counter() - started
        run, kills, log = _run_killing_executors(spark, victim, tmp_path / "report.json", logs, url, cluster_pids[1:],
                                                 scratch, run_id, log4j)
    print(f"\ncluster ALIVE after {cluster_s:.1f} s, kernels compiled after {warm_s:.1f} s; spark-submit exit "
          f"{run.code} after {run.seconds:.1f} s; timings {run.report.get('timings')}")
    for p in run.report.get("partitions", []):
        print(f"  {p['topic']}-{p['partition']}: {p['status']} {p.get('error') or ''} round {p.get('round')}")
    for kill in kills:
        a = kill.attempt
        retries = [r for r in log.attempts.values() if (r.stage, r.index) == (a.stage, a.index) and r.tid != a.tid]
        print(f"  TID {a.tid} (stage {a.stage}, task {a.index}): {a.state} {a.lost_reason[:90]}; "
              f"then {[(r.tid, r.attempt, r.executor, r.state) for r in retries]}")

    assert len(kills) == len(MOMENTS), f"{len(kills)} kills: {[k.describe() for k in kills]}\n{run.explain()}"
    for kill in kills:
        # Mid-stage, mid-task: the driver lost the attempt with its executor and ran the task again.
        assert kill.attempt.state == "lost" and "ExecutorLostFailure" in kill.attempt.lost_reason, kill.describe()
        a = kill.attempt
        assert any(r.state == "finished" for r in log.attempts.values()
                   if (r.stage, r.index) == (a.stage, a.index) and r.attempt > a.attempt), kill.describe()
    assert kills[1].files["python_finished"], kills[1].describe()

    assert run.code == 0, run.explain()
    assert run.report["status"] == "ok" and run.report["totals"]["cleaned"] == len(PARTITIONS), run.explain()
    check_rounds(run, len(PARTITIONS), parts=2)
    for p in run.report["partitions"]:
        assert p["round"]["groups"] == len(logs.groups[p["partition"]]), p["round"]
        assert p["groups"] == [[old, new] for old, new in logs.groups[p["partition"]]]
    assert digest(victim) == digest(logs.ref)
    assert not any(scratch.iterdir()), sorted(scratch.rglob("*"))  # every partition's key maps are gone
    assert _leftovers(victim) == []
    verified = run_cli("verify", "--log-dir", str(victim))
    assert verified.code == 0, verified.out + verified.err


# --- 2. the whole job killed ----------------------------------------------------------------------------
def _kill_job(spark: Spark, log_dir: Path, report: Path, logs: Logs, scratch: Path, run_id: str,
              moment: str) -> tuple[str, dict[str, dict[str, int]], float] | None:
    """Run the job on local[2] and SIGKILL it: once a partition has half of its groups' .cleaned segments (an
    attempt's) and nothing is swapped out yet (``group-stage``), or once the driver has swapped out a partition's first
    old segments (``first-swaps``). Returns that partition, every partition's files then, and when; None
    if this poller saw the moment too late (it shares two cores with the job's three busy processes)."""
    t0 = time.perf_counter()
    proc = start_job(spark, [log_dir], report, logs.now_ms, logs.wall_ms, conf=LOCAL_CONF,
                     job_args=["--scratch-dir", str(scratch), "--run-id", run_id])
    dirs = [log_dir / f"{TOPIC}-{p}" for p in PARTITIONS]
    target = ""
    try:
        while proc.poll() is None:
            assert time.perf_counter() - t0 < JOB_TIMEOUT_S, "the job ran too long"
            state = {d.name: in_flight(d) for d in dirs}
            if moment == "group-stage":
                if any(s["swapped_out"] for s in state.values()):
                    break  # too late
                target = next((name for name, s in state.items()
                               if s["cleaned"] >= len(logs.groups[int(name.rsplit("-", 1)[1])]) // 2), "")
            else:
                target = next((name for name, s in state.items() if s["swapped_out"]), "")
            if target:
                os.killpg(proc.pid, signal.SIGSTOP)  # the driver stops at once; kill_tree then finds the rest
                break
            time.sleep(0.0005)
    finally:
        at_s = time.perf_counter() - t0
        kill_tree(proc)
    if proc.returncode != -signal.SIGKILL or not target:
        return None
    return target, {d.name: in_flight(d) for d in dirs}, at_s


@pytest.mark.parametrize("moment", ["group-stage", "first-swaps"])
def test_killing_the_job_recovers_old_or_new_and_a_rerun_finishes(tmp_path: Path, spark: Spark, logs: Logs,
                                                                  warm: subprocess.Popen[bytes], moment: str) -> None:
    _wait_warm(spark, warm)
    # The poller shares two cores with the job: under load it can see the moment late (a partition's swaps
    # take a few ms). Every kill is checked for old-or-new; a kill that missed the moment is tried again.
    for attempt in range(1, ATTEMPTS + 1):
        victim = copy_tree(logs.template, tmp_path / f"victim-{attempt}" / "logs")
        scratch = tmp_path / f"scratch-{attempt}"
        killed_at = _kill_job(spark, victim, tmp_path / f"killed-{attempt}.json", logs, scratch, "killed", moment)
        if killed_at is None:
            print(f"\n{moment}, attempt {attempt}: the job went past the moment before the poller saw it")
            continue
        target, state, at_s = killed_at
        print(f"\n{moment}, attempt {attempt}: SIGKILLed the job at {at_s:.2f} s, {target} caught; files then "
              f"{state}")
        counts = recover_old_or_new(victim, logs.template, PARTITIONS, logs.before, logs.reference, logs.groups)
        assert _leftovers(victim) == []
        print(f"after recover: verify passes, no key lost; groups new/old per partition: {counts}")
        # The driver swaps one partition at a time: at most one is partly swapped in, whenever the kill lands.
        partly = [p for p, (new, old) in counts.items() if new and old]
        assert len(partly) <= 1, counts
        if moment == "group-stage":
            assert state[target]["cleaned"] and all(new == 0 for new, _old in counts.values()), (state, counts)
            break
        if partly:  # the kill landed between a partition's first and last swap
            break
        print("the kill landed between two partitions' swaps: trying again")
    else:
        pytest.fail(f"{ATTEMPTS} kills all missed the moment {moment}")

    # What the single-process cleaner makes of the recovered log dir, for the same clocks.
    resumed = copy_tree(victim, tmp_path / "resumed" / "logs")
    resumed_report = compact_single_process(resumed, logs.now_ms, logs.wall_ms)
    assert not resumed_report.failures

    rerun = submit_job(spark, [victim], tmp_path / "rerun.json", logs.now_ms, logs.wall_ms, conf=LOCAL_CONF,
                       job_args=["--scratch-dir", str(scratch), "--run-id", "killed"])  # the killed run's id
    print(f"rerun: exit {rerun.code} after {rerun.seconds:.1f} s; cleaned "
          f"{[(p['partition'], p['status']) for p in rerun.report.get('partitions', [])]}")
    assert rerun.code == 0, rerun.explain()
    check_rounds(rerun, len(rerun.report["partitions"]))
    assert not any(scratch.iterdir())  # no partition's key maps are left
    assert _leftovers(victim) == []
    for p in PARTITIONS:
        assert read_records(victim, p) == logs.reference[p], f"partition {p}: not the single-process cleaner's records"
    # Byte for byte what the single-process cleaner makes of the same recovered log dir; and, where the kill
    # swapped no group in, of the untouched one too. (A partition with some groups swapped in is recleaned
    # with those groups' smaller segments grouped anew, by either cleaner: same records, other segments.)
    assert digest(victim) == digest(resumed)
    same = {p: digest(victim / f"{TOPIC}-{p}") == digest(logs.ref / f"{TOPIC}-{p}") for p in PARTITIONS}
    print(f"byte for byte the single-process result from the template, per partition: {same}")
    assert all(same[p] for p, (new, _old) in counts.items() if not new), same
    if moment == "group-stage":
        assert digest(victim) == digest(logs.ref)
    assert run_cli("verify", "--log-dir", str(victim)).code == 0
