"""Airflow on one machine for the pipeline: ``make demo``, ``make airflow``, the tests and the benchmark.

Starts the Airflow 3 components the way a deployment runs them, each a process of its own in its own
process group, everything on 127.0.0.1: ``api-server`` (the UI, the REST API and the execution API the
task processes talk to), ``scheduler`` (LocalExecutor), ``dag-processor`` and ``triggerer``. The
metadata DB is SQLite in ``AIRFLOW_HOME`` unless ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` names another;
the Spark connection is ``local[2]`` unless ``AIRFLOW_CONN_SPARK_DEFAULT`` says otherwise. Stopping
kills each process group it started, never anything by name.

With ``executor="CeleryExecutor"`` the scheduler sends the tasks to a queue of this installation's own
on a Redis broker and a ``celery-worker`` component runs them; Celery's results go to the metadata DB,
which must then be a server's (Postgres).

    python -m devtools.airflow_local demo  [--dir demo-logs]   # one whole cycle, printed
    python -m devtools.airflow_local serve [--dir demo-logs]   # the UI until Ctrl-C
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
COMPONENTS = {
    "api-server": ["api-server", "--host", LOOPBACK, "--port", "{port}", "--workers", "1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
# No log server (--skip-serve-logs: it would listen on 0.0.0.0); remote control goes through the broker.
CELERY_WORKER = ["celery", "worker", "--concurrency", "2", "--skip-serve-logs", "--queues", "{queue}",
                 "--celery-hostname", "{queue}@%h", "--without-mingle", "--without-gossip"]
EXECUTORS = ("LocalExecutor", "CeleryExecutor")
SQL_CONN = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
FINISHED = {"success", "failed"}


class AirflowError(RuntimeError):
    """A component did not start, or a request or a wait did not succeed in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalAirflow:
    """One Airflow installation under ``home``: ``start()`` it, talk to it, ``stop()`` it."""

    home: Path
    dags_folder: Path = REPO / "dags"
    port: int = 0
    parallelism: int = 2
    spark_master: str | None = "local[2]"  # AIRFLOW_CONN_SPARK_DEFAULT; None: the connection is managed in Airflow
    executor: str = "LocalExecutor"  # or "CeleryExecutor"
    broker_url: str = "redis://127.0.0.1:6379/0"  # CeleryExecutor: the broker
    queue: str = field(default_factory=lambda: f"kafkalog-{secrets.token_hex(6)}")  # CeleryExecutor: the tasks' queue
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    extra_env: Mapping[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _token: str | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        self.port = self.port or free_port()
        if self.executor not in EXECUTORS:
            raise AirflowError(f"executor {self.executor!r}: one of {', '.join(EXECUTORS)}")

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def env(self) -> dict[str, str]:
        from kafkalog.cycle.documents import write_json

        passwords = self.home / "passwords.json"
        if not passwords.exists() or json.loads(passwords.read_text() or "{}") != {"admin": self.password}:
            # Replaced whole, never rewritten in place: each component's auth manager reads this file as
            # it starts, and one that found it empty would write a password of its own for admin.
            write_json(passwords, {"admin": self.password})
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret(),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            **self._celery_env(),
            **self.extra_env,
        }
        if self.spark_master is not None:
            env.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": self.spark_master}))
        env.setdefault("KAFKALOG_PIPELINE_DIR", str(self.home / "kafkalog-runs"))
        return env

    def _celery_env(self) -> dict[str, str]:
        if self.executor != "CeleryExecutor":
            return {}
        sql = self.extra_env.get(SQL_CONN) or os.environ.get(SQL_CONN, "")
        if not sql or sql.startswith("sqlite"):
            raise AirflowError(f"the CeleryExecutor needs a metadata DB server ({SQL_CONN}), not {sql or 'SQLite'}")
        return {"AIRFLOW__CELERY__BROKER_URL": self.broker_url,
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{sql}",  # the metadata DB
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue}

    def components(self) -> dict[str, list[str]]:
        """Component name → ``airflow`` CLI arguments."""
        celery = {"celery-worker": CELERY_WORKER} if self.executor == "CeleryExecutor" else {}
        return {name: [a.format(port=self.port, queue=self.queue) for a in args]
                for name, args in {**COMPONENTS, **celery}.items()}

    def _secret(self) -> str:
        path = self.home / "jwt-secret"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text()

    def airflow(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        """Run an ``airflow`` CLI command against this installation."""
        done = subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env(), capture_output=True,
                              text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise AirflowError(f"airflow {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done

    def start(self, *, timeout_s: float = 180,
              dag_ids: Sequence[str] = ("kafkalog_cleanup", "kafkalog_compact")) -> None:
        """Migrate the DB, start the components, wait until they are healthy and ``dag_ids`` parsed."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.airflow("db", "migrate")
        env = self.env()
        logs = self.home / "component-logs"
        logs.mkdir(exist_ok=True)
        for name, args in self.components().items():
            cmd = [sys.executable, "-m", "airflow", *args]
            with open(logs / f"{name}.log", "ab") as out:
                self.processes[name] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                        start_new_session=True)
        try:
            self.wait_healthy(timeout_s=timeout_s, dag_ids=dag_ids)
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self, *, timeout_s: float, dag_ids: Sequence[str] = ("kafkalog_cleanup", "kafkalog_compact"),
                     ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            dead = {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}
            if dead:
                raise AirflowError(f"Airflow components exited: {dead}; logs in {self.home / 'component-logs'}")
            try:
                health = self.request("GET", "/api/v2/monitor/health", auth=False)
                healthy = all(health.get(c, {}).get("status") == "healthy"
                              for c in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
                if healthy and all(self.request("GET", f"/api/v2/dags/{d}", ok=(200, 404)).get("dag_id") == d
                                   for d in dag_ids):
                    return
            except (OSError, AirflowError):
                pass
            if time.monotonic() > deadline:
                raise AirflowError(f"Airflow not healthy after {timeout_s:.0f} s; logs in "
                                   f"{self.home / 'component-logs'}")
            time.sleep(1)

    def stop(self, *, timeout_s: float = 30) -> None:
        """SIGTERM each component's process group, SIGKILL what is left after ``timeout_s``: the groups,
        and by id every process they had started (a task process, and its spark-submit, runs in a
        process group of its own)."""
        tree = {pid for proc in self.processes.values() for pid in descendants(proc.pid)}
        for proc in self.processes.values():
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)  # the group's other members (task processes, workers)
            proc.wait(timeout=30)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.processes.clear()

    # --- REST ------------------------------------------------------------------------------------------
    def token(self) -> str:
        if self._token is None:
            doc = self.request("POST", "/auth/token", {"username": "admin", "password": self.password}, auth=False,
                               ok=(200, 201))
            self._token = str(doc["access_token"])
        return self._token

    def request(self, method: str, path: str, body: Any = None, *, auth: bool = True,
                ok: Sequence[int] = (200,), timeout_s: float = 30) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        if status not in ok:
            raise AirflowError(f"{method} {path}: HTTP {status}: {text[:500]}")
        return json.loads(text) if text else {}

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None, *, logical_date: str | None = None) -> str:
        doc = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                           {"logical_date": logical_date, "conf": dict(conf or {})}, ok=(200,))
        return str(doc["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quote(run_id)}")["state"])

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout_s: float = 600) -> str:
        """The run's final state (``success`` or ``failed``); AirflowError if it takes longer."""
        deadline = time.monotonic() + timeout_s
        while (state := self.run_state(dag_id, run_id)) not in FINISHED:
            if time.monotonic() > deadline:
                raise AirflowError(f"{dag_id} run {run_id} still {state} after {timeout_s:.0f} s")
            time.sleep(1)
        return state

    def first_run(self, dag_id: str, *, timeout_s: float = 120) -> str:
        """The id of the DAG's first run, once the scheduler has created it."""
        deadline = time.monotonic() + timeout_s
        while not (runs := self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=1")
                   ["dag_runs"]):
            if time.monotonic() > deadline:
                raise AirflowError(f"the scheduler created no {dag_id} run in {timeout_s:.0f} s")
            time.sleep(1)
        return str(runs[0]["dag_run_id"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        doc = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quote(run_id)}/taskInstances?limit=1000")
        return list(doc["task_instances"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``task_id`` (``task_id[i]`` for mapped instances) → state."""
        return {(t["task_id"] if t["map_index"] < 0 else f"{t['task_id']}[{t['map_index']}]"): t["state"]
                for t in self.task_instances(dag_id, run_id)}


def _quote(run_id: str) -> str:
    return urllib.parse.quote(run_id, safe="")


def descendants(root: int) -> list[int]:
    """The ids of every process below ``root`` (Linux: read from /proc), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        out += kids
        frontier += kids
    return out


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def running(home: Path, **kwargs: Any) -> Iterator[LocalAirflow]:
    airflow = LocalAirflow(home, **kwargs)
    airflow.start()
    try:
        yield airflow
    finally:
        airflow.stop()


# --- make demo / make airflow --------------------------------------------------------------------------
def _demo_store(directory: Path) -> dict[str, str]:
    """The demo log dir, uncompacted, with a broker file whose delete delay keeps the demo short."""
    from kafkalog.tools.demo import write_demo_store

    write_demo_store(directory)
    config = directory.parent / f"{directory.name}.properties"
    config.write_text("# the demo's broker defaults: deletions wait 10 s instead of Kafka's 60 s\n"
                      "log.segment.delete.delay.ms=10000\n")
    return {"KAFKALOG_LOG_DIRS": str(directory.resolve()), "KAFKALOG_CONFIG": str(config.resolve())}


def demo(directory: Path, home: Path) -> int:
    from kafkalog.cycle.report import format_report, summarize
    from kafkalog.cycle.steps import run_dir_for

    env = _demo_store(directory)
    print(f"Wrote the demo log dir {directory}; starting Airflow (LocalExecutor, Spark local[2]) in {home} ...")
    with running(home, extra_env=env) as airflow:
        run_id = airflow.first_run("kafkalog_cleanup")
        print(f"The scheduler started kafkalog_cleanup run {run_id}; waiting for it (the delete delay is 10 s) ...")
        state = airflow.wait_for_run("kafkalog_cleanup", run_id)
        states = airflow.task_states("kafkalog_cleanup", run_id)
        run_dir = run_dir_for(airflow.env()["KAFKALOG_PIPELINE_DIR"], [env["KAFKALOG_LOG_DIRS"]], "kafkalog_cleanup",
                              run_id)
    print(f"\nkafkalog_cleanup {run_id}: {state}")
    print("tasks: " + ", ".join(f"{t}={s}" for t, s in sorted(states.items())))
    print("\nThe cycle's report:")
    for line in format_report(summarize(run_dir)):
        print(f"  {line}")
    return 0 if state == "success" else 1


def serve(directory: Path, home: Path, port: int) -> int:
    env = _demo_store(directory) if not os.environ.get("KAFKALOG_LOG_DIRS") else {}
    airflow = LocalAirflow(home, port=port, extra_env=env)
    airflow.start()
    print(f"Airflow is up at {airflow.url} — log in as admin / {airflow.password}")
    print(f"Log dirs: {airflow.env()['KAFKALOG_LOG_DIRS']}; kafkalog_cleanup runs every "
          "log.retention.check.interval.ms. Ctrl-C stops everything.")
    try:
        while all(p.poll() is None for p in airflow.processes.values()):
            time.sleep(1)
        print("an Airflow component exited; stopping", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        airflow.stop()


def _exit_once(signum: int, frame: object) -> None:
    """SIGTERM stops the components as Ctrl-C does (the finally blocks run). ``make`` passes its own SIGTERM
    on to this process, so a second one can come while the components are being stopped; it must not cut
    that stop short and leave them running."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.airflow_local",
                                     description="Airflow on one machine for the kafkalog pipeline.")
    parser.add_argument("command", choices=["demo", "serve"])
    parser.add_argument("--dir", default="demo-logs", help="the demo log dir (rewritten)")
    parser.add_argument("--airflow-home", default=".airflow", help="AIRFLOW_HOME (default: ./.airflow)")
    parser.add_argument("--port", type=int, default=8080, help="serve: the UI's port on 127.0.0.1")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_once)
    if args.command == "demo":
        return demo(Path(args.dir), Path(args.airflow_home))
    return serve(Path(args.dir), Path(args.airflow_home), args.port)


if __name__ == "__main__":
    sys.exit(main())
