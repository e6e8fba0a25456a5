"""Killing Spark executors mid-task (``spark_jobs/compact_logs.py`` on a standalone cluster).

A master and two one-core workers on 127.0.0.1 run the job over three compactable partitions, one task
per partition; each task attempt writes its groups' ``.cleaned`` segments under a name of its own, and
only the driver checks and swaps them in. Three times in one job an executor is SIGKILLed while one of
its tasks is writing such a segment (its Python worker has the file open): that worker is frozen with
SIGSTOP; if it still has the file open, the files are noted and the executor's whole tree (its JVM,
pyspark's daemon and workers: descendants of the standalone workers, stopped and then killed by id,
never by name) is killed. The moments: (1) a worker writing a group (once both executors' workers have
written: a task still starting fetches its binary from the peer executor, and waits 5 s to retry if
that one dies); (2) the next worker seen writing after kill 1, at once; (3) a worker first seen after
kill 2 (typically a relaunched executor's). Spark re-runs lost tasks on a surviving or a relaunched
executor and finishes, or gives up: either is fine.

Afterwards ``kafkalog recover`` and ``kafkalog verify`` must pass, every partition must keep each key's
latest value, and every segment group must be wholly old or wholly new. If the job finished, every
partition must be byte for byte the single-process result, with no attempt's file left behind.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from executors import (
    QUICK_JVM,
    ExecutorWatch,
    Holder,
    executor_id_of,
    in_flight,
    kill_executor,
    open_outputs,
    wait_stopped,
    warm_numba_cache,
)
from job_harness import (
    CODECS,
    JOB_TIMEOUT_S,
    TOPIC,
    JobRun,
    Spark,
    build_topic,
    clocks,
    compact_single_process,
    copy_tree,
    digest,
    live_values,
    read_records,
    recover_old_or_new,
    standalone_cluster_of,
    start_job,
)

# The module-scoped fixture, used by name: each test module gets its own. Imported "as spark", a re-export
# that the tests' arguments of that name do not redefine (F811).
from job_harness import spark as spark

from kafkalog.log import names
from tests.spark.processes import kill_tree, listening_addresses

pytestmark = pytest.mark.spark

PARTITIONS = range(len(CODECS))

@dataclass
class Kill:
    moment: str
    at_s: float  # since spark-submit started
    holder: Holder
    executor_id: str
    killed: list[int]
    state: dict[str, int]  # the holder's partition's files while its task was frozen

    def describe(self) -> str:
        return (f"{self.moment}: at {self.at_s:.2f} s SIGKILLed executor {self.executor_id} (JVM pid "
                f"{self.holder.executor}; pids {self.killed}) while its Python worker {self.holder.pid} wrote "
                f"{self.holder.partition_dir}/{self.holder.claim}; its files then: {self.state}")


def _try_kill(holder: Holder, moment: str, log_dir: Path, t0: float) -> Kill | None:
    """Freeze the writer; if it still has its output open it is mid-work: note the files, kill its executor."""
    try:
        os.kill(holder.pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    wait_stopped([holder.pid])
    if (holder.partition_dir, holder.claim) not in open_outputs(holder.pid, log_dir):  # done meanwhile
        os.kill(holder.pid, signal.SIGCONT)
        return None
    at_s = time.perf_counter() - t0
    state = in_flight(log_dir / holder.partition_dir)
    executor_id = executor_id_of(holder.executor)
    return Kill(moment, at_s, holder, executor_id, kill_executor(holder.executor), state)


# (name, whether a holder first seen after the previous kill qualifies)
MOMENTS: list[tuple[str, Callable[[Holder, Path], bool]]] = [
    ("kill 1, a worker writing a group's .cleaned segment", lambda h, log_dir: ".log." in h.claim),
    ("kill 2, the next worker seen writing, at once", lambda h, log_dir: True),
    ("kill 3, a worker first seen after kill 2, at its first output", lambda h, log_dir: True),
]


def _run_with_kills(spark: Spark, log_dir: Path, report: Path, now_ms: int, wall_ms: int, url: str,
                    cluster_pids: list[int], scratch: Path) -> tuple[JobRun, list[Kill]]:
    t0 = time.perf_counter()
    proc = start_job(spark, [log_dir], report, now_ms, wall_ms, master=url,
                     conf=["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                           f"spark.driver.extraJavaOptions={QUICK_JVM}",
                           f"spark.executor.extraJavaOptions={QUICK_JVM}"],
                     job_args=["--scratch-dir", str(scratch)])
    kills: list[Kill] = []
    earlier: set[int] = set()  # kill 3: the Python workers alive at kill 2 do not qualify
    # Kill 1 waits until both executors' workers have written: a task that has not started yet fetches
    # the stage's task binary from its peer executor, and if that one dies meanwhile it retries after 5 s
    # (spark.shuffle.io.retryWait); the job then went on with the other executor's task alone and
    # finished before any relaunched executor could be the third kill's.
    claimed_by: set[int] = set()
    watch = ExecutorWatch(cluster_pids[1:], log_dir.resolve())  # the workers (the master comes first)
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
                moment, qualifies = MOMENTS[len(kills)]
                holders = watch.holders()
                claimed_by |= {h.executor for h in holders}
                for holder in holders:
                    if holder.pid in earlier or not qualifies(holder, log_dir) or len(claimed_by) < 2:
                        continue
                    kill = _try_kill(holder, moment, log_dir.resolve(), t0)
                    if kill is not None:
                        kills.append(kill)
                        print(f"\n{kill.describe()}", flush=True)
                        watch.relist()
                        if len(kills) == 2:
                            earlier = set(watch.python)
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
    build_topic(warm_dir, segments=4, seed=13)
    warm = warm_numba_cache(spark, warm_dir)  # on the other core, while this one builds the logs
    try:
        template = tmp_path / "template" / "logs"
        build_topic(template, segments=60, seed=13)
        before = {p: read_records(template, p) for p in PARTITIONS}
        now_ms, wall_ms = clocks()
        ref = copy_tree(template, tmp_path / "ref" / "logs")
        reference_report = compact_single_process(ref, now_ms, wall_ms)
        reference = {p: read_records(ref, p) for p in PARTITIONS}
        groups = {r.partition: r.groups for r in reference_report.cleaned}
        assert set(groups) == set(PARTITIONS) and not reference_report.failures
        assert all(live_values(reference[p]) == live_values(before[p]) for p in PARTITIONS)
        victim = copy_tree(template, tmp_path / "victim" / "logs")

        quick = dataclasses.replace(spark, env=dict(spark.env, SPARK_DAEMON_JAVA_OPTS=QUICK_JVM))
        with standalone_cluster_of(quick, tmp_path / "cluster") as (url, cluster_pids):
            cluster_s = time.perf_counter() - started
            warm_running = warm.poll() is None
            run, kills = _run_with_kills(spark, victim, tmp_path / "report.json", now_ms, wall_ms, url, cluster_pids,
                                         tmp_path / "scratch")
        assert warm.wait(timeout=60) == 0, (tmp_path / "warm" / "compact.out").read_text()
    finally:
        kill_tree(warm)
    print(f"\nlogs built and cluster ALIVE after {cluster_s:.1f} s (numba warm-up still running: {warm_running}); "
          f"spark-submit exit {run.code} after {run.seconds:.1f} s; status {run.report.get('status')}; "
          f"timings {run.report.get('timings')}; stages {run.report.get('spark', {}).get('stages')}")
    for r in run.report.get("partitions", []):
        print(f"  {r['topic']}-{r['partition']}: {r['status']} {r.get('error') or ''} {r.get('round')}")
    assert len(kills) == len(MOMENTS), f"{len(kills)} kills: {[k.describe() for k in kills]}\n{run.explain()}"
    assert kills[0].state["cleaned"] and ".log." in kills[0].holder.claim, kills[0].describe()
    assert run.listening and all(ipaddress.ip_address(a).is_loopback for a in run.listening), run.listening

    if run.code == 0:
        assert run.report["status"] == "ok" and run.report["totals"]["cleaned"] == len(PARTITIONS), run.explain()
        checkpoint = names.CLEANER_OFFSET_CHECKPOINT
        assert (victim / checkpoint).read_bytes() == (ref / checkpoint).read_bytes()
        for p in PARTITIONS:
            name = f"{TOPIC}-{p}"
            assert read_records(victim, p) == reference[p], f"{name}: not the single-process cleaner's records"
            assert digest(victim / name) == digest(ref / name), f"{name}: not the single-process cleaner's bytes"
        assert not any((tmp_path / "scratch").iterdir()), "the run's scratch dir was left behind"
        assert not [p for p in victim.rglob("*") if p.name.endswith(names.CLEANED_SUFFIX)], "attempts left behind"
    else:
        print(f"the job gave up (acceptable): {run.explain()}")

    counts = recover_old_or_new(victim, template, PARTITIONS, before, reference, groups)
    new_groups, old_groups = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"after recover: verify passes, no key lost; {new_groups} segment groups new, {old_groups} old")
