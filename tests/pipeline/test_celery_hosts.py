"""Maintenance of local broker disks without a shared file system: two stores, each on its own "host",
each host's Celery worker serving only its store's queue.

The hosts are Linux network namespaces on a bridge (``tests/spark/netns_cluster.py``'s), each with a host
name and a mount namespace of its own: both stores are configured at the *same* log dir path, and on each
host that path is a bind mount of that host's own disk, while the other host's disk is hidden under an
empty tmpfs. The Airflow components (CeleryExecutor) run in the root namespace on 127.0.0.1, with Redis
and Postgres; the workers reach them, and the api-server's execution API, through ``socat`` forwarders
listening on the bridge's address only.

One ``kafkalog_cleanup__<store>`` run per store, triggered through the REST API: each succeeds, every task
of it on its store's queue and its host (the task instances' host names), each store ends byte for byte
as the CLI leaves a copy of it, and neither worker can see the other's disk.

Needs root, ``ip netns``, ``unshare``, ``nsenter`` and ``socat`` besides Spark, Redis and Postgres:
skipped with the reason without them, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import run_cli
from helpers import live_files, require_spark
from services import postgres_db, redis_broker  # noqa: F401 - fixtures, used by name
from synthetic import build_store

from devtools.airflow_local import LocalAirflow
from tests.spark.netns_cluster import SUBNET_PREFIX, _listeners, _make_bridge, _make_namespace, netns_missing
from tests.spark.processes import kill_tree

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
DELAY_MS = 2000
STORES = {"store_a": "host-a", "store_b": "host-b"}  # connection id -> its host (queue, host name, namespace)
RUN_DEADLINE_S = 900


def _require_hosts() -> None:
    reason = netns_missing() or next((f"{tool} is not installed" for tool in ("socat", "nsenter")
                                      if shutil.which(tool) is None), None)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the two-host test")
        pytest.skip(reason)


def _forward(stack: ExitStack, address: str, port: int, logs: Path) -> None:
    """``address:port`` (the bridge's) forwarded to ``127.0.0.1:port``, until the stack unwinds."""
    with open(logs / f"socat-{port}.log", "wb") as log:
        proc = subprocess.Popen(["socat", f"TCP-LISTEN:{port},bind={address},fork,reuseaddr", f"TCP:127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(kill_tree, proc)


def _worker(stack: ExitStack, env: dict[str, str], namespace: str, host: str, disk: Path, hidden: Path,
            log_dir: Path, logs: Path) -> subprocess.Popen[bytes]:
    """A Celery worker serving queue ``host`` in ``namespace``, with host name ``host`` and ``disk`` mounted
    at ``log_dir`` (``hidden``, the other host's disk, under an empty tmpfs)."""
    worker = [sys.executable, "-m", "airflow", "celery", "worker", "--concurrency", "2", "--skip-serve-logs",
              "--queues", host, "--celery-hostname", f"{host}@{host}", "--without-mingle", "--without-gossip"]
    hosts = logs / f"hosts-{host}"  # its own name resolves (Spark's JVM asks for it) without DNS
    hosts.write_text(f"127.0.0.1 localhost {host}\n")
    script = " && ".join([f"hostname {shlex.quote(host)}", f"mount --bind {shlex.quote(str(hosts))} /etc/hosts",
                          f"mount --bind {shlex.quote(str(disk))} {shlex.quote(str(log_dir))}",
                          f"mount -t tmpfs tmpfs {shlex.quote(str(hidden))}", 'exec "$@"'])
    command = ["ip", "netns", "exec", namespace, "unshare", "--mount", "--uts", "--propagation", "private",
               "sh", "-c", script, "sh", *worker]
    with open(logs / f"worker-{host}.log", "wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(kill_tree, proc)
    return proc


def _in_mounts_of(pid: int, *argv: str) -> str:
    done = subprocess.run(["nsenter", "-t", str(pid), "-m", "--", *argv], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_host_maintains_only_its_own_store(postgres_db: str,  # noqa: F811 - fixtures
                                                redis_broker: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    _require_hosts()
    require_spark()
    broker_url, queue = redis_broker
    now_ms = int(time.time() * 1000) - 120_000
    wall_ms = now_ms + 60_000
    log_dir = tmp_path / "kafka-logs"  # every store's log dir path; empty on the Airflow host
    log_dir.mkdir()
    disks = {host: tmp_path / f"disk-{host}" for host in STORES.values()}
    references = {host: tmp_path / f"cli-{host}" for host in STORES.values()}
    for i, host in enumerate(STORES.values()):
        build_store(disks[host], now_ms, file_delete_delay_ms=DELAY_MS, event_hours=6 + i)
        shutil.copytree(disks[host], references[host])
    (tmp_path / "idle-logs").mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()

    with ExitStack() as stack:
        n, bridge = _make_bridge(stack)
        gateway = f"{SUBNET_PREFIX}.{n}.1"  # the Airflow host, as the worker hosts reach it
        namespaces = dict(_make_namespace(stack, n, i, host, bridge) for i, host in enumerate(STORES.values()))
        connections = {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({"conn_type": "kafkalog", "extra": {
            "log_dirs": str(log_dir), "queue": host}}) for conn_id, host in STORES.items()}
        airflow = LocalAirflow(
            tmp_path / "home", executor="CeleryExecutor", broker_url=broker_url, queue=queue,
            extra_env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_db, "SPARK_LOCAL_IP": "127.0.0.1",
                       "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the runs triggered here
                       "AIRFLOW__KAFKALOG__STORES": ",".join(["kafkalog_default", *STORES]),
                       "KAFKALOG_LOG_DIRS": str(tmp_path / "idle-logs"), **connections})
        airflow.start(timeout_s=300, dag_ids=[f"kafkalog_cleanup__{conn_id}" for conn_id in STORES])
        stack.callback(airflow.stop)
        for port in (5432, 6379, airflow.port):
            _forward(stack, gateway, port, logs)
        remote = {"AIRFLOW__CELERY__BROKER_URL": broker_url.replace("127.0.0.1", gateway),
                  "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_db.replace("127.0.0.1", gateway),
                  "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + postgres_db.replace("127.0.0.1", gateway),
                  "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{gateway}:{airflow.port}/execution/",
                  "AIRFLOW__CORE__HOSTNAME_CALLABLE": "socket.gethostname",  # the host's name, no DNS asked
                  "NO_PROXY": f"{gateway},127.0.0.1,localhost", "no_proxy": f"{gateway},127.0.0.1,localhost"}
        workers = {}
        for host, (namespace, _) in zip(STORES.values(), namespaces.items(), strict=True):
            other = next(disk for h, disk in disks.items() if h != host)
            workers[host] = _worker(stack, {**airflow.env(), **remote}, namespace, host, disks[host], other, log_dir,
                                    logs)
        time.sleep(5)
        dead = {host: proc.returncode for host, proc in workers.items() if proc.poll() is not None}
        assert not dead, f"workers exited: {dead}; logs in {logs}"

        logical = datetime.fromtimestamp(now_ms / 1000, UTC).isoformat()
        runs = {conn_id: airflow.trigger(f"kafkalog_cleanup__{conn_id}", {"wall_now_ms": wall_ms},
                                         logical_date=logical) for conn_id in STORES}
        states = {conn_id: airflow.wait_for_run(f"kafkalog_cleanup__{conn_id}", run_id, timeout_s=RUN_DEADLINE_S)
                  for conn_id, run_id in runs.items()}
        tis = {conn_id: airflow.task_instances(f"kafkalog_cleanup__{conn_id}", run_id)
               for conn_id, run_id in runs.items()}
        assert states == {conn_id: "success" for conn_id in STORES}, {
            c: airflow.task_states(f"kafkalog_cleanup__{c}", r) for c, r in runs.items()}

        for conn_id, host in STORES.items():
            ran = {(t["task_id"], t["map_index"]): (t["state"], t["queue"], t["hostname"]) for t in tis[conn_id]}
            assert {state for state, _, _ in ran.values()} <= {"success", "skipped"}, ran
            assert {(q, h) for _, q, h in ran.values()} == {(host, host)}, ran  # its queue, on its host
            # Each worker sees its own disk at the stores' path, and nothing of the other's.
            pid = workers[host].pid
            own = _in_mounts_of(pid, "ls", "-A", str(log_dir)).split()
            assert own == sorted(p.name for p in disks[host].iterdir()), own
            other = next(disk for h, disk in disks.items() if h != host)
            assert _in_mounts_of(pid, "ls", "-A", str(other)).split() == []
            assert all(not listener.wildcard for listener in _listeners(namespaces_by_host(namespaces)[host]))
        assert list(log_dir.iterdir()) == []  # the Airflow host never saw a store

    for host, reference in references.items():
        assert run_cli("retention", "apply", "--log-dir", str(reference), "--now-ms", str(now_ms)).code == 0
        time.sleep(DELAY_MS / 1000 + 0.5)
        assert run_cli("retention", "sweep", "--log-dir", str(reference)).code == 0
        done = run_cli("compact", "--log-dir", str(reference), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms))
        assert done.code == 0, done.err
        assert live_files(disks[host]) == live_files(reference), host


def namespaces_by_host(namespaces: dict[str, str]) -> dict[str, str]:
    """Host → its namespace (namespaces are named ``<prefix><n>-<host>``)."""
    return {namespace.split("-", 1)[1]: namespace for namespace in namespaces}
