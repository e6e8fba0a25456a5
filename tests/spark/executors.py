"""The Spark kill tests' process helpers: the executors of a standalone cluster, their Python workers and the task
outputs those hold open, found through /proc; freezing and killing an executor's whole tree (its JVM, pyspark's
daemon and workers) by process id, never by name; the numba cache warmed for the executors; a partition's segments
in flight.

Shared by ``test_executor_kill.py``, ``test_split_kill.py`` and ``test_multi_host.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from job_harness import Spark

from kafkalog.log import names
from tests.spark.processes import cmdline as _cmdline
from tests.spark.processes import descendants

EXECUTOR_MAIN = b"CoarseGrainedExecutorBackend"
# Every JVM here (master, workers, driver, executors and those relaunched after each kill) does little but
# start: with C1 only and one GC thread, no compiler or GC threads take the cores the Python workers need.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def stat_fields(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def parent_pid(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else 0


def process_gone(pid: int) -> bool:
    fields = stat_fields(pid)
    return not fields or fields[0] in ("Z", "X")


def wait_stopped(pids: Iterable[int]) -> None:
    """SIGSTOP is delivered asynchronously: wait until each process is really stopped (or gone)."""
    deadline = time.monotonic() + 10
    for pid in pids:
        while (fields := stat_fields(pid)) and fields[0] not in ("T", "t", "Z", "X"):
            assert time.monotonic() < deadline, f"process {pid} did not stop"
            time.sleep(0.001)


def open_outputs(pid: int, log_dir: Path) -> set[tuple[str, str]]:
    """(partition dir, file name) of every task attempt's output under ``log_dir`` this process has open:
    open only while its task writes that group."""
    out: set[tuple[str, str]] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = Path(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if target.name.endswith(names.CLEANED_SUFFIX) and log_dir in target.parents:
            out.add((target.parent.name, target.name))
    return out


@dataclass(frozen=True)
class Holder:
    """One task attempt's Python worker writing a group."""

    partition_dir: str
    claim: str  # the output file's name
    pid: int  # the Python worker
    executor: int  # that worker's executor JVM


class ExecutorWatch:
    """The executors' Python processes, found as descendants of the standalone workers (re-listed every
    0.1 s or on demand: a walk of /proc costs milliseconds of a machine the job shares), and the outputs
    they have open (checked on every call)."""

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
                ancestor = parent_pid(pid)
                while ancestor > 1 and ancestor not in executors:
                    ancestor = parent_pid(ancestor)
                if ancestor in executors:
                    self.python[pid] = ancestor
        self.listed_at = time.monotonic()

    def holders(self) -> list[Holder]:
        if time.monotonic() - self.listed_at > 0.1:
            self.relist()
        assert self.log_dir is not None
        return [Holder(name, claim, pid, executor) for pid, executor in self.python.items()
                for name, claim in sorted(open_outputs(pid, self.log_dir))]


def freeze_tree(root: int) -> list[int]:
    """SIGSTOP ``root``, then its descendants until no new one appears (so nothing forks or is orphaned
    meanwhile); returns them all."""
    stopped: list[int] = []
    frontier = [root]
    while frontier:
        for pid in frontier:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                pass
        wait_stopped(frontier)
        frontier = [p for p in descendants(root) if p not in stopped]
    return stopped


def kill_all(pids: list[int]) -> None:
    """SIGKILL ``pids`` by id and wait (20 s at most) until every one is gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 20
    while not all(process_gone(p) for p in pids):
        assert time.monotonic() < deadline, f"killed processes {pids} still alive after 20 s"
        time.sleep(0.01)


def kill_executor(executor: int) -> list[int]:
    """Freeze the executor JVM's whole tree (``freeze_tree``), then kill it all (``kill_all``)."""
    stopped = freeze_tree(executor)
    kill_all(stopped)
    return stopped


def warm_numba_cache(spark: Spark, scratch_log_dir: Path) -> subprocess.Popen[bytes]:
    """``kafkalog compact`` of a throwaway log with the executors' NUMBA_CACHE_DIR, while the cluster and
    the job start: the executors then load the compiled kernels instead of each compiling them in its
    first task (which would only make the test slower, not its kill moments different)."""
    env = dict(spark.env, NUMBA_CACHE_DIR=str(spark.numba_cache_dir))
    with open(scratch_log_dir.parent / "compact.out", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "kafkalog.cli", "compact", "--log-dir", str(scratch_log_dir)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def in_flight(partition_dir: Path) -> dict[str, int]:
    """A partition's segments in flight: ``.cleaned`` (written, one log file a group, under an attempt's
    name or the driver's), ``.swap`` files, and old log files swapped out (``.deleted``)."""
    files = os.listdir(partition_dir)
    return {"cleaned": sum(".log." in n and n.endswith(names.CLEANED_SUFFIX) for n in files),
            "swap": sum(n.endswith(names.SWAP_SUFFIX) for n in files),
            "swapped_out": sum(n.endswith(names.LOG_SUFFIX + names.DELETED_SUFFIX) for n in files)}


def executor_id_of(executor: int) -> str:
    args = _cmdline(executor).split(b"\0")
    return args[args.index(b"--executor-id") + 1].decode() if b"--executor-id" in args else "?"
