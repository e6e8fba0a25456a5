"""Process helpers for Spark tests and benchmarks: kill a job's whole process tree, see what it
listens on. Linux only (reads /proc). Spark's Python worker daemon moves itself into a process group
of its own, so killing spark-submit's group alone leaves workers behind; these find them by id.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devtools.airflow_local import descendants  # shared with the Airflow harness

BIN = Path(sys.executable).parent  # the venv's spark-submit / spark-class come with its pyspark


def spark_missing() -> str | None:
    """Why Spark cannot run here (pyspark, Java or pyspark's scripts missing), or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -c constraints.txt -e '.[pipeline]')"
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and (Path(java_home) / "bin" / "java").exists()):
        return "Java is not installed (Spark 4 needs a JDK/JRE 17)"
    for script in ("spark-submit", "spark-class"):
        if not (BIN / script).exists():
            return f"{BIN / script} not found (pyspark's scripts are installed beside the venv's python)"
    return None


def cmdline(pid: int) -> bytes:
    """A process's NUL-separated command line; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process started with start_new_session=True: its process group, then each descendant by
    id (pyspark's worker daemon moves itself and its workers into a process group of their own). The tree
    is frozen first, the group and then every descendant stopped until a listing finds none it has not
    stopped: the daemon forks a worker per task, and one forked after the listing the kills go by would
    go on writing. A process that has already exited and been reaped is left alone: its id may belong to
    someone else by now."""
    if proc.poll() is not None:
        return
    _signal_group(proc.pid, signal.SIGSTOP)
    stopped: set[int] = set()
    for _ in range(100):  # a stopped process forks no more: a few rounds find the whole tree
        found = set(descendants(proc.pid)) - stopped
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        stopped |= found
    _signal_group(proc.pid, signal.SIGKILL)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def listening_addresses(roots: Sequence[int]) -> set[str]:
    """Local addresses of the TCP sockets listening in these processes or their descendants."""
    inodes: set[str] = set()
    for pid in [p for r in roots for p in (r, *descendants(r))]:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            hex_ip = cols[1].split(":")[0]
            raw = b"".join(bytes.fromhex(hex_ip[i:i + 8])[::-1] for i in range(0, len(hex_ip), 8))
            ip = ipaddress.ip_address(raw)
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            found.add(str(mapped or ip))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def standalone_cluster(env: Mapping[str, str], workdir: Path, workers: int = 2,
                       timeout_s: float = 90) -> Iterator[tuple[str, list[int]]]:
    """A Spark standalone master and ``workers`` one-core workers on 127.0.0.1, each in its own session;
    yields (master URL, their pids) once every worker is ALIVE, and kills them all after."""
    port, webui = free_port(), free_port()
    env = dict(env, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")  # no REST port 6066
    workdir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    names = ["master", *[f"worker{i}" for i in range(workers)]]
    deadline = time.monotonic() + timeout_s

    def launch(name: str, *args: str) -> None:
        with open(workdir / f"{name}.out", "wb") as log:
            procs.append(subprocess.Popen([str(BIN / "spark-class"), *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True))

    def wait_for(what: str, reached: Callable[[dict[str, Any]], bool]) -> None:
        while True:
            for p, name in zip(procs, names, strict=False):
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}:\n"
                                       f"{(workdir / f'{name}.out').read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not reached after {timeout_s:.0f} s; see {workdir}")
            time.sleep(0.1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=2) as response:
                    if reached(json.load(response)):
                        return
            except (OSError, ValueError):  # not up yet; a master UI just started once answered an HTML page
                continue

    url = f"spark://127.0.0.1:{port}"
    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(webui))
        # A worker started before the master is up retries its registration only after 5-15 s (Spark's
        # fuzzed initial retry interval): start the workers once the master says it is ALIVE.
        wait_for("master ALIVE", lambda state: state.get("status") == "ALIVE")
        for i in range(workers):
            launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                   "--memory", "2g", "--webui-port", str(free_port()), "--work-dir", str(workdir / f"work{i}"), url)
        wait_for(f"{workers} workers ALIVE",
                 lambda state: sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") >= workers)
        yield url, [p.pid for p in procs]
    finally:
        for p in reversed(procs):
            kill_tree(p)
