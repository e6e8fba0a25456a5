"""Killing Spark executors mid-task (``spark_jobs/compact_logs.py`` on a standalone cluster).

A master and two one-core workers on 127.0.0.1 run the job over three compactable partitions. Three times
in one job an executor is SIGKILLed while one of its tasks is inside ``clean_partition``: that task's
Python worker, seen holding the partition's cleaner lock, is frozen with SIGSTOP; if it still holds the
lock the partition's in-flight files are noted and the executor's whole tree (its JVM, pyspark's daemon
and workers: descendants of the standalone workers, stopped and then killed by id, never by name) is
killed. The moments: (1) a first attempt once a third of its partition's old segments are swapped out;
(2) the first attempt seen taking a cleaner lock after kill 1, at once (typically the retry resolving
kill 1's leftover ``.cleaned``/``.swap`` files); (3) an attempt first seen after kill 2, once it has
swapped out three more segments (typically a retry recleaning a partly swapped partition). Spark
re-runs lost tasks on a surviving or a relaunched executor and finishes, or gives up: either is fine.

Afterwards ``kafkalog recover`` and ``kafkalog verify`` must pass, every partition must keep each key's
latest value, and every segment group must be wholly old or wholly new. If the job finished, every
partition must hold the records the single-process cleaner keeps, and the partitions that no kill caught
with segments swapped out must be byte for byte the single-process result (a retry reclean groups a
partly swapped partition's smaller segments differently, so its files may differ; its records may not).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_compact_job as job_tests  # helpers only: pytest collects tests from the names bound here
from test_compact_job import (
    CODECS,
    JOB_TIMEOUT_S,
    TOPIC,
    JobRun,
    Spark,
    _build,
    _clocks,
    _compact_single_process,
    _copy,
    _digest,
    _live,
    _records,
    _recover_old_or_new,
    _standalone_cluster,
    _start,
)

from kafkalog.log import names
from spark_jobs.processes import descendants, kill_tree, listening_addresses

pytestmark = pytest.mark.spark

spark = job_tests.spark  # the module-scoped fixture: skips without pyspark/Java (fails instead under CI=true)
PARTITIONS = range(len(CODECS))
EXECUTOR_MAIN = b"CoarseGrainedExecutorBackend"
# Every JVM here (master, workers, driver, executors and those relaunched after each kill) does little but
# start: C1 only and one GC thread roughly halve the job's time on a two-core machine.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# (name, how many old segments a task attempt first seen after the previous kill must have swapped out
# since it was first seen, given how many of its partition's segments the single-process cleaner swaps out)
MOMENTS: list[tuple[str, Callable[[int], int]]] = [
    ("kill 1, a first attempt mid-swap", lambda old: max(1, old // 3)),
    ("kill 2, the next attempt at once", lambda old: 0),
    ("kill 3, a later attempt mid-swap", lambda old: 3),
]


# --- processes ------------------------------------------------------------------------------------------
def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def _gone(pid: int) -> bool:
    fields = _stat(pid)
    return not fields or fields[0] in ("Z", "X")


def _wait_stopped(pids: Iterable[int]) -> None:
    """SIGSTOP is delivered asynchronously: wait until each process is really stopped (or gone)."""
    deadline = time.monotonic() + 10
    for pid in pids:
        while (fields := _stat(pid)) and fields[0] not in ("T", "t", "Z", "X"):
            assert time.monotonic() < deadline, f"process {pid} did not stop"
            time.sleep(0.001)


def _open_cleaner_locks(pid: int, log_dir: Path | None = None) -> set[str]:
    """Names of the partition dirs (of ``log_dir``, when given) whose cleaner lock file this process
    has open. The executors' kernel warm-up cleans a throwaway partition in a temp dir: not a target."""
    out: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/" + names.CLEANER_LOCK_FILE) and \
                (log_dir is None or Path(target).parent.parent == log_dir):
            out.add(Path(target).parent.name)
    return out


@dataclass(frozen=True)
class Holder:
    """One task attempt inside clean_partition."""

    partition_dir: str
    pid: int  # the Python worker running it
    executor: int  # that worker's executor JVM


class _ExecutorWatch:
    """The executors' Python processes, found as descendants of the standalone workers (re-listed every
    0.1 s or on demand: a walk of /proc costs milliseconds of a machine the job shares), and which of them
    hold a partition's cleaner lock (checked on every call)."""

    def __init__(self, worker_pids: Iterable[int], log_dir: Path | None = None) -> None:
        self.worker_pids = list(worker_pids)
        self.log_dir = log_dir
        self.python: dict[int, int] = {}  # Python process -> its executor JVM
        self.listed_at = -1.0

    def relist(self) -> None:
        self.python = {}
        for worker in self.worker_pids:
            procs = descendants(worker)
            executors = {p for p in procs if EXECUTOR_MAIN in _cmdline(p)}
            for pid in procs:
                if pid in executors or b"python" not in _cmdline(pid).split(b"\0", 1)[0]:
                    continue
                ancestor = _parent(pid)
                while ancestor > 1 and ancestor not in executors:
                    ancestor = _parent(ancestor)
                if ancestor in executors:
                    self.python[pid] = ancestor
        self.listed_at = time.monotonic()

    def holders(self) -> list[Holder]:
        if time.monotonic() - self.listed_at > 0.1:
            self.relist()
        return [Holder(name, pid, executor) for pid, executor in self.python.items()
                for name in sorted(_open_cleaner_locks(pid, self.log_dir))]


def _kill_executor(executor: int) -> list[int]:
    """SIGSTOP the executor JVM, then its descendants until no new one appears (so nothing forks or is
    orphaned meanwhile), then SIGKILL them all by id and wait until they are gone."""
    stopped: list[int] = []
    frontier = [executor]
    while frontier:
        for pid in frontier:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                pass
        _wait_stopped(frontier)
        frontier = [p for p in descendants(executor) if p not in stopped]
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 20
    while not all(_gone(p) for p in stopped):
        assert time.monotonic() < deadline, f"killed processes {stopped} still alive after 20 s"
        time.sleep(0.01)
    return stopped


def _warm_numba_cache(spark: Spark, scratch_log_dir: Path) -> subprocess.Popen[bytes]:
    """``kafkalog compact`` of a throwaway log with the executors' NUMBA_CACHE_DIR, while the cluster and
    the job start: the executors then load the compiled kernels instead of each compiling them for ~20 s
    in its first task (which would only make the test slower, not its kill moments different)."""
    env = dict(spark.env, NUMBA_CACHE_DIR=str(spark.numba_cache_dir))
    with open(scratch_log_dir.parent / "compact.out", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "kafkalog.cli", "compact", "--log-dir", str(scratch_log_dir)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


# --- the kills ------------------------------------------------------------------------------------------
def _in_flight(partition_dir: Path) -> dict[str, int]:
    files = os.listdir(partition_dir)
    return {"swapped_out": sum(n.endswith(names.LOG_SUFFIX + names.DELETED_SUFFIX) for n in files),
            "cleaned": sum(n.endswith(names.CLEANED_SUFFIX) for n in files),
            "swap": sum(n.endswith(names.SWAP_SUFFIX) for n in files)}


@dataclass
class Kill:
    moment: str
    at_s: float  # since spark-submit started
    holder: Holder
    executor_id: str
    killed: list[int]
    state: dict[str, int]  # the partition's files while its task was frozen (log files *.deleted, *.cleaned, *.swap)
    swapped_at_start: int  # its log files *.deleted when this attempt was first seen

    def describe(self) -> str:
        return (f"{self.moment}: at {self.at_s:.2f} s SIGKILLed executor {self.executor_id} (JVM pid "
                f"{self.holder.executor}; pids {self.killed}) while its Python worker {self.holder.pid} held "
                f"{self.holder.partition_dir}'s cleaner lock; files then: {self.state}, swapped out when this "
                f"attempt was first seen: {self.swapped_at_start}")


def _executor_id(executor: int) -> str:
    args = _cmdline(executor).split(b"\0")
    return args[args.index(b"--executor-id") + 1].decode() if b"--executor-id" in args else "?"


def _try_kill(holder: Holder, moment: str, log_dir: Path, t0: float, swapped_at_start: int) -> Kill | None:
    """Freeze the holder; if it still holds the lock it is mid-task: note the files, kill its executor."""
    try:
        os.kill(holder.pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    _wait_stopped([holder.pid])
    if holder.partition_dir not in _open_cleaner_locks(holder.pid):  # it finished meanwhile
        os.kill(holder.pid, signal.SIGCONT)
        return None
    at_s = time.perf_counter() - t0
    state = _in_flight(log_dir / holder.partition_dir)
    executor_id = _executor_id(holder.executor)
    return Kill(moment, at_s, holder, executor_id, _kill_executor(holder.executor), state, swapped_at_start)


def _run_with_kills(spark: Spark, log_dir: Path, report: Path, now_ms: int, wall_ms: int, url: str,
                    cluster_pids: list[int], old_segments: dict[str, int]) -> tuple[JobRun, list[Kill]]:
    t0 = time.perf_counter()
    proc = _start(spark, [log_dir], report, now_ms, wall_ms, master=url,
                  conf=["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                        f"spark.driver.extraJavaOptions={QUICK_JVM}", f"spark.executor.extraJavaOptions={QUICK_JVM}"])
    kills: list[Kill] = []
    first_seen: dict[Holder, int] = {}  # attempt -> its partition's log files *.deleted when first seen
    earlier: set[Holder] = set()  # attempts seen before the last kill
    watch = _ExecutorWatch(cluster_pids[1:], log_dir.resolve())  # the workers (the master comes first)
    listening: set[str] = set()
    listened_at = 0.0
    try:
        while proc.poll() is None:
            now = time.perf_counter()
            if now - t0 > JOB_TIMEOUT_S:
                pytest.fail(f"spark-submit still running after {JOB_TIMEOUT_S} s; kills: "
                            + "; ".join(k.describe() for k in kills))
            if now - listened_at > 2:  # relaunched executors too
                listening |= listening_addresses([proc.pid, *cluster_pids])
                listened_at = now
            if len(kills) < len(MOMENTS):
                moment, wanted = MOMENTS[len(kills)]
                for holder in watch.holders():
                    swapped = _in_flight(log_dir / holder.partition_dir)["swapped_out"]
                    first_seen.setdefault(holder, swapped)
                    if holder in earlier or swapped - first_seen[holder] < wanted(old_segments[holder.partition_dir]):
                        continue
                    kill = _try_kill(holder, moment, log_dir, t0, first_seen[holder])
                    if kill is not None:
                        kills.append(kill)
                        print(f"\n{kill.describe()}", flush=True)
                        watch.relist()
                        earlier = set(first_seen) | set(watch.holders())
                        break
            time.sleep(0.002)
    finally:
        kill_tree(proc)  # a no-op once it has exited
    doc = json.loads(report.read_text()) if report.exists() else {}
    return JobRun(proc.returncode, doc, report.with_suffix(".stdout").read_text(errors="replace"),
                  report.with_suffix(".stderr").read_text(errors="replace"), time.perf_counter() - t0,
                  listening), kills


# --- the test -------------------------------------------------------------------------------------------
def test_killing_executors_mid_task_leaves_every_partition_old_or_new(tmp_path: Path, spark: Spark) -> None:
    started = time.perf_counter()
    warm_dir = tmp_path / "warm" / "logs"
    _build(warm_dir, segments=4, seed=13)
    warm = _warm_numba_cache(spark, warm_dir)  # on the other core, while this one builds the logs
    try:
        template = tmp_path / "template" / "logs"
        _build(template, segments=60, seed=13)
        before = {p: _records(template, p) for p in PARTITIONS}
        now_ms, wall_ms = _clocks()
        ref = _copy(template, tmp_path / "ref" / "logs")
        reference_report = _compact_single_process(ref, now_ms, wall_ms)
        reference = {p: _records(ref, p) for p in PARTITIONS}
        groups = {r.partition: r.groups for r in reference_report.cleaned}
        assert set(groups) == set(PARTITIONS) and not reference_report.failures
        assert all(_live(reference[p]) == _live(before[p]) for p in PARTITIONS)
        old_segments = {f"{TOPIC}-{p}": sum(len(old) for old, _ in groups[p]) for p in PARTITIONS}
        victim = _copy(template, tmp_path / "victim" / "logs")

        quick = dataclasses.replace(spark, env=dict(spark.env, SPARK_DAEMON_JAVA_OPTS=QUICK_JVM))
        with _standalone_cluster(quick, tmp_path / "cluster") as (url, cluster_pids):
            cluster_s = time.perf_counter() - started
            warm_running = warm.poll() is None
            run, kills = _run_with_kills(spark, victim, tmp_path / "report.json", now_ms, wall_ms, url, cluster_pids,
                                         old_segments)
        assert warm.wait(timeout=60) == 0, (tmp_path / "warm" / "compact.out").read_text()
    finally:
        kill_tree(warm)
    print(f"\nlogs built and cluster ALIVE after {cluster_s:.1f} s (numba warm-up still running: {warm_running}); "
          f"spark-submit exit {run.code} after {run.seconds:.1f} s; status {run.report.get('status')}; "
          f"timings {run.report.get('timings')}")
    for r in run.report.get("partitions", []):
        print(f"  {r['topic']}-{r['partition']}: {r['status']} on {r.get('executor')} {r.get('error') or ''}")
    assert len(kills) == len(MOMENTS), f"{len(kills)} kills: {[k.describe() for k in kills]}\n{run.explain()}"
    for kill, (_, wanted) in zip(kills, MOMENTS, strict=True):  # (a retry's first steps may delete *.deleted)
        need = wanted(old_segments[kill.holder.partition_dir])
        assert need == 0 or kill.state["swapped_out"] - kill.swapped_at_start >= need, kill.describe()
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening

    if run.code == 0:
        assert run.report["status"] == "ok" and run.report["totals"]["cleaned"] == len(PARTITIONS), run.explain()
        checkpoint = names.CLEANER_OFFSET_CHECKPOINT
        assert (victim / checkpoint).read_bytes() == (ref / checkpoint).read_bytes()
        caught_swapped = {k.holder.partition_dir for k in kills if k.state["swapped_out"]}
        for p in PARTITIONS:
            name = f"{TOPIC}-{p}"
            assert _records(victim, p) == reference[p], f"{name}: not the single-process cleaner's records"
            same_bytes = _digest(victim / name) == _digest(ref / name)
            if name in caught_swapped:
                print(f"{name} (killed with segments swapped out, then recleaned): byte for byte the "
                      f"single-process result: {same_bytes}")
            else:
                assert same_bytes, f"{name}: not the single-process cleaner's bytes"
    else:
        print(f"the job gave up (acceptable): {run.explain()}")

    counts = _recover_old_or_new(victim, template, PARTITIONS, before, reference, groups)
    new_groups, old_groups = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"after recover: verify passes, no key lost; {new_groups} segment groups new, {old_groups} old")
