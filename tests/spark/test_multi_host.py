"""The Spark compaction job (``spark_jobs/compact_logs.py``) on a cluster of several hosts.

The hosts are Linux network namespaces on this machine (``netns_cluster.py``): a standalone master and two
one-core workers, each in a namespace of its own with an address of its own on a bridge, and the driver
(spark-submit) in the root namespace on the bridge's address. Nothing of it may listen on a wildcard
address or on the driver's loopback: each process listens on its own host's address (a namespace's loopback
is its own host's). Three cases:

1. The job writes byte for byte the segments the single-process cleaner writes, both executors cleaning.
2. An executor is SIGKILLed (its JVM, pyspark's daemon and workers: descendants of a worker, stopped and
   then killed by id) once the cleaning stage has begun writing ``.cleaned`` segments. Spark relaunches it
   and retries; the job either finishes, byte for byte the single-process result, or gives up, and then
   ``kafkalog recover`` and ``kafkalog verify`` pass and every segment group is wholly old or wholly new.
3. One worker sees a copy of the log dir bind-mounted over it (a private mount namespace): the same
   partition directories and files, but other inodes, so a lock the driver holds is not held there. The
   executor probe must refuse that executor ("does not see the driver's lock"): exit 1, nothing changed.

Needs root and ``ip netns`` besides Spark: skipped with the reason without them, except under ``CI=true``
where that fails. Processes are stopped by process group and by the ids of their descendants, never by name.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from executors import QUICK_JVM, executor_id_of, kill_executor, warm_numba_cache
from job_harness import (
    CODECS,
    JOB_TIMEOUT_S,
    TOPIC,
    JobRun,
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
    start_job,
)

# The module-scoped fixture, used by name: each test module gets its own. Imported "as spark", a re-export
# that the tests' arguments of that name do not redefine (F811).
from job_harness import spark as spark
from netns_cluster import Listener, NetnsCluster, netns_cluster, netns_missing

from kafkalog.log import names
from tests.spark.processes import kill_tree, listening_addresses

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = range(len(CODECS))
LOCK_REFUSAL = "does not see the driver's lock"


@pytest.fixture(scope="module")
def netns(spark: Spark) -> Spark:
    """The Spark environment, once network namespaces can be made here (root, ``ip netns``); the cluster's
    JVMs start with the quick JVM options."""
    reason = netns_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the multi-host Spark tests")
        pytest.skip(reason)
    return dataclasses.replace(spark, env=dict(spark.env, SPARK_DAEMON_JAVA_OPTS=QUICK_JVM))


@dataclass
class ClusterRun:
    run: JobRun
    cluster_listening: dict[str, set[Listener]] = field(default_factory=dict)  # namespace -> what listened


def _submit(spark: Spark, cluster: NetnsCluster, log_dir: Path, report: Path, now_ms: int, wall_ms: int, *,
            on_poll: Callable[[subprocess.Popen[bytes]], None] | None = None) -> ClusterRun:
    """Run the job against the cluster, its driver on the bridge's address, to its end; note what the driver
    (in the root namespace) and every namespace of the cluster listen on, every 0.5 s."""
    conf = ["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0",  # both executors, then tasks
            f"spark.driver.extraJavaOptions={QUICK_JVM}", f"spark.executor.extraJavaOptions={QUICK_JVM}",
            *cluster.driver_conf()]
    started = time.perf_counter()
    proc = start_job(spark, [log_dir], report, now_ms, wall_ms, master=cluster.master_url, conf=conf)
    listening: set[str] = set()
    cluster_listening: dict[str, set[Listener]] = {ns: set() for ns in cluster.namespaces}
    listened_at = 0.0
    try:
        while proc.poll() is None:
            now = time.perf_counter()
            if now - started > JOB_TIMEOUT_S:
                pytest.fail(f"spark-submit still running after {JOB_TIMEOUT_S} s")
            if now - listened_at > 0.5:
                listening |= listening_addresses([proc.pid])  # the root namespace's tables: the driver's
                for ns, found in cluster.listening().items():
                    cluster_listening[ns] |= found
                listened_at = now
            if on_poll is not None:
                on_poll(proc)
            time.sleep(0.01)
    finally:
        kill_tree(proc)  # a no-op once it has exited
    doc = json.loads(report.read_text()) if report.exists() else {}
    run = JobRun(proc.returncode, doc, report.with_suffix(".stdout").read_text(errors="replace"),
                 report.with_suffix(".stderr").read_text(errors="replace"), time.perf_counter() - started, listening)
    return ClusterRun(run, cluster_listening)


def _check_listening(cluster: NetnsCluster, result: ClusterRun) -> None:
    """The driver listens on the bridge's address (py4j on the loopback); every process of the cluster on
    its namespace's address or that namespace's own loopback; nothing anywhere on a wildcard address."""
    driver = result.run.listening
    assert cluster.driver_host in driver, driver
    assert all(a == cluster.driver_host or ipaddress.ip_address(a).is_loopback for a in driver), driver
    for ns, found in result.cluster_listening.items():
        own = cluster.namespaces[ns]
        assert found, f"nothing seen listening in {ns}"
        assert any(lst.address == own for lst in found), (ns, found)
        wrong = [lst for lst in found if lst.address != own and not ipaddress.ip_address(lst.address).is_loopback]
        assert not wrong, f"{ns} (address {own}) listens elsewhere: {wrong}"
        assert not any(lst.wildcard for lst in found), (ns, found)
    print(f"\nlistening: driver {sorted(driver)}; "
          + "; ".join(f"{ns} {sorted({(lst.address, lst.port, lst.process.split(',')[0]) for lst in found})}"
                      for ns, found in result.cluster_listening.items()))


def _cluster_logs(cluster: NetnsCluster) -> str:
    return "".join(f"\n--- {name}\n{cluster.log(name)[-2000:]}" for name in ("master", "worker0", "worker1"))


def _started(spark: Spark, tmp_path: Path) -> subprocess.Popen[bytes]:
    """The numba cache warmed while the cluster starts (see ``executors.warm_numba_cache``)."""
    warm_dir = tmp_path / "warm" / "logs"
    build_topic(warm_dir, segments=4, seed=13)
    return warm_numba_cache(spark, warm_dir)


def _warmed(warm: subprocess.Popen[bytes], tmp_path: Path) -> None:
    try:
        assert warm.wait(timeout=120) == 0, (tmp_path / "warm" / "compact.out").read_text()
    finally:
        kill_tree(warm)


# --- the tests ----------------------------------------------------------------------------------------
def test_job_on_three_hosts_writes_the_same_bytes(tmp_path: Path, netns: Spark) -> None:
    warm = _started(netns, tmp_path)
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=20, seed=11)
    single, distributed = copy_tree(template, tmp_path / "a" / "logs"), copy_tree(template, tmp_path / "b" / "logs")
    now_ms, wall_ms = clocks()
    reference = compact_single_process(single, now_ms, wall_ms)
    assert len(reference.cleaned) == len(PARTITIONS) and not reference.failures

    started = time.perf_counter()
    with netns_cluster(netns.env, tmp_path / "cluster") as cluster:
        cluster_s = time.perf_counter() - started
        _warmed(warm, tmp_path)
        result = _submit(netns, cluster, distributed, tmp_path / "report.json", now_ms, wall_ms)
        logs = _cluster_logs(cluster)
    run = result.run
    print(f"\nnetns cluster {cluster.master_url} ALIVE after {cluster_s:.1f} s; spark-submit exit {run.code} "
          f"after {run.seconds:.1f} s; timings {run.report.get('timings')}")
    assert run.code == 0, run.explain() + logs
    assert run.report["status"] == "ok" and run.report["spark"]["master"] == cluster.master_url, run.explain()
    executors = check_rounds(run, len(PARTITIONS))
    assert len(executors) == 2 and not any(e.endswith("/driver") for e in executors), executors  # both cleaned
    assert digest(distributed) == digest(single)
    assert {p: live_values(read_records(distributed, p)) for p in PARTITIONS} == \
        {p: live_values(read_records(template, p)) for p in PARTITIONS}
    _check_listening(cluster, result)


def _cleaned_files(log_dir: Path) -> list[str]:
    return [n for d in log_dir.iterdir() if d.is_dir() for n in os.listdir(d) if n.endswith(names.CLEANED_SUFFIX)]


def test_an_executor_killed_mid_stage_leaves_every_partition_old_or_new(tmp_path: Path, netns: Spark) -> None:
    warm = _started(netns, tmp_path)
    template = tmp_path / "template" / "logs"
    build_topic(template, segments=60, seed=5)
    before = {p: read_records(template, p) for p in PARTITIONS}
    now_ms, wall_ms = clocks()
    ref = copy_tree(template, tmp_path / "ref" / "logs")
    reference_report = compact_single_process(ref, now_ms, wall_ms)
    reference = {p: read_records(ref, p) for p in PARTITIONS}
    groups = {r.partition: r.groups for r in reference_report.cleaned}
    assert set(groups) == set(PARTITIONS) and not reference_report.failures
    victim = copy_tree(template, tmp_path / "victim" / "logs")

    kills: list[str] = []
    with netns_cluster(netns.env, tmp_path / "cluster") as cluster:
        _warmed(warm, tmp_path)
        t0 = time.perf_counter()

        def kill_once_cleaning(proc: subprocess.Popen[bytes]) -> None:
            if kills or proc.poll() is not None:
                return
            cleaned = _cleaned_files(victim)
            if not cleaned:
                return
            for worker in range(len(cluster.worker_pids)):
                for executor in cluster.executors(worker):
                    executor_id = executor_id_of(executor)
                    killed = kill_executor(executor)
                    kills.append(f"at {time.perf_counter() - t0:.2f} s, with {len(cleaned)} .cleaned segments "
                                 f"({cleaned[:3]}...), SIGKILLed executor {executor_id} of worker{worker} "
                                 f"({cluster.worker_hosts[worker]}): JVM {executor}, pids {killed}")
                    print(f"\n{kills[-1]}", flush=True)
                    return

        result = _submit(netns, cluster, victim, tmp_path / "report.json", now_ms, wall_ms,
                         on_poll=kill_once_cleaning)
        logs = _cluster_logs(cluster)
    run = result.run
    print(f"\nspark-submit exit {run.code} after {run.seconds:.1f} s; status {run.report.get('status')}; "
          f"timings {run.report.get('timings')}; stages {run.report.get('spark', {}).get('stages')}")
    assert kills, f"no executor was killed: the job ended before a .cleaned segment was seen\n{run.explain()}{logs}"
    # The driver saw the executor go with a task of the cleaning stage running (spark-submit's log at WARN).
    assert "Lost task" in run.stdout + run.stderr, run.explain()
    _check_listening(cluster, result)

    if run.code == 0:
        assert run.report["status"] == "ok" and run.report["totals"]["cleaned"] == len(PARTITIONS), run.explain()
        for p in PARTITIONS:
            assert read_records(victim, p) == reference[p], f"{TOPIC}-{p}: not the single-process cleaner's records"
        assert digest(victim) == digest(ref), "not the single-process cleaner's bytes"
        assert not _cleaned_files(victim)
    else:
        print(f"the job gave up (acceptable): {run.explain()}{logs}")
    counts = recover_old_or_new(victim, template, PARTITIONS, before, reference, groups)
    new_groups, old_groups = (sum(c[i] for c in counts.values()) for i in (0, 1))
    print(f"after recover: verify passes, no key lost; {new_groups} segment groups new, {old_groups} old")


def test_an_executor_that_does_not_see_the_drivers_lock_is_refused(tmp_path: Path, netns: Spark) -> None:
    log_dir = tmp_path / "logs"
    build_topic(log_dir, segments=8, seed=3)
    elsewhere = tmp_path / "elsewhere" / "logs"
    shutil.copytree(log_dir, elsewhere)  # the same names and bytes, other inodes: no lock of the driver's
    before, elsewhere_before = digest(log_dir), digest(elsewhere)
    assert before == elsewhere_before
    now_ms, wall_ms = clocks()

    with netns_cluster(netns.env, tmp_path / "cluster", private_mounts={1: [(elsewhere, log_dir)]}) as cluster:
        # worker1 (and so its executors) sees the copy at the log dir's path; worker0 the log dir itself.
        seen = {w: os.stat(f"/proc/{pid}/root{log_dir}/{TOPIC}-0").st_ino for w, pid in enumerate(cluster.worker_pids)}
        assert seen == {0: os.stat(log_dir / f"{TOPIC}-0").st_ino, 1: os.stat(elsewhere / f"{TOPIC}-0").st_ino}, seen
        result = _submit(netns, cluster, log_dir, tmp_path / "report.json", now_ms, wall_ms)
        logs = _cluster_logs(cluster)
    run = result.run
    print(f"\nspark-submit exit {run.code} after {run.seconds:.1f} s; status {run.report.get('status')}; "
          f"error {run.report.get('error')}")
    assert run.code == 1, run.explain() + logs
    said = run.stdout + run.stderr + str(run.report.get("error") or "")
    assert LOCK_REFUSAL in said, run.explain()
    assert digest(log_dir) == before, "the refused job changed the log dir"
    assert digest(elsewhere) == elsewhere_before, "the refused job changed what the blind executor saw"
    _check_listening(cluster, result)
