"""A Spark standalone cluster of several "hosts" on this one machine, made of Linux network namespaces.

``netns_cluster`` makes a bridge in the root namespace (the driver's host: spark-submit runs there and
binds to the bridge's address) and one network namespace per Spark process: the master's and each
worker's, each joined to the bridge by a veth pair and given an address of its own on the bridge's /24,
with its own loopback. The master and the workers run in their namespaces through ``ip netns exec``, with
``SPARK_LOCAL_IP`` set to that namespace's address (their web UIs bind to it; the executors a worker
launches inherit its environment and its namespaces), so nothing of the cluster listens on a wildcard
address: ``NetnsCluster.listening`` reports what each namespace listens on, as ``ss -ltnp`` there sees it.

A worker may also get a private mount namespace in which directories are bind-mounted over others
(``private_mounts``): that worker and its executors then see another directory at the same path as the
driver, as an executor on a host that does not share the driver's file system would.

Needs root and iproute2 (``ip netns``, ``ip link``), and ``unshare`` and ``mount`` for private mounts;
``netns_missing`` says why they cannot be used here. Every bridge, veth pair and namespace is removed
again, and every process killed by id (its process group, its descendants and whatever is left in the
namespaces made here), also when setting up fails half way.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.spark.processes import BIN, descendants, kill_tree
from tests.spark.processes import cmdline as _cmdline

SUBNET_PREFIX = "10.213"  # 10.213.<n>.0/24, n chosen per cluster
MASTER_PORT = 7077  # fixed: every namespace has ports of its own
MASTER_WEBUI_PORT = 8080
WORKER_WEBUI_PORT = 8081
PREFIX = "kltst"  # of every interface and namespace made here (interface names: at most 15 characters)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netns_missing() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return f"network namespaces need root (the test runs as uid {os.geteuid()})"
    for tool in ("ip", "unshare", "mount", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2 / util-linux)"
    try:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns list failed: {exc}"
    if listed.returncode != 0:
        return f"ip netns is not available: {listed.stderr.strip()}"
    return None


@dataclass(frozen=True)
class Listener:
    address: str  # "0.0.0.0" / "::" for a wildcard
    port: int
    process: str  # ss's users:(...) column

    @property
    def wildcard(self) -> bool:
        return ipaddress.ip_address(self.address).is_unspecified


@dataclass
class NetnsCluster:
    master_url: str  # spark://<master address>:7077
    driver_host: str  # the bridge's address in the root namespace: spark.driver.host and bindAddress
    master_host: str
    worker_hosts: list[str]
    namespaces: dict[str, str]  # namespace -> its address ("master", "worker0", ... in the order above)
    master_pid: int
    worker_pids: list[int]
    webui: str  # the master's web UI
    workdir: Path
    bridge: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def pids(self) -> list[int]:
        return [self.master_pid, *self.worker_pids]

    def driver_conf(self) -> list[str]:
        """spark-submit --conf values for a driver in the root namespace that the executors can reach."""
        return [f"spark.driver.host={self.driver_host}", f"spark.driver.bindAddress={self.driver_host}"]

    def state(self) -> dict[str, Any]:
        """The master's /json/ document."""
        return _master_state(self.webui)

    def listening(self) -> dict[str, set[Listener]]:
        """Per namespace, the TCP sockets listening there (``ss -Hltnp`` inside it): every one belongs to
        a process of this cluster, since nothing else runs in these namespaces."""
        return {ns: _listeners(ns) for ns in self.namespaces}

    def executors(self, worker: int) -> list[int]:
        """Pids of the executor JVMs (CoarseGrainedExecutorBackend) the worker ``worker`` runs now."""
        return [p for p in descendants(self.worker_pids[worker]) if b"CoarseGrainedExecutorBackend" in _cmdline(p)]

    def log(self, name: str) -> str:
        """The output of "master" or "worker<i>"."""
        return _tail(self.workdir, name, None)


def _tail(workdir: Path, name: str, chars: int | None = 3000) -> str:
    try:
        text = (workdir / f"{name}.out").read_text(errors="replace")
        return text if chars is None else text[-chars:]
    except OSError:
        return ""


def _listeners(namespace: str) -> set[Listener]:
    done = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Hltnp"], capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ss in {namespace} failed: {done.stderr.strip()}")
    out: set[Listener] = set()
    for line in done.stdout.splitlines():
        cols = line.split()
        if len(cols) < 4:
            continue
        local = cols[3]  # State Recv-Q Send-Q Local:Port Peer:Port [Process]
        host, _, port = local.rpartition(":")
        host = host.strip("[]").split("%", 1)[0]
        if host == "*":
            host = "::"
        ip = ipaddress.ip_address(host)
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        out.add(Listener(str(mapped or ip), int(port), " ".join(cols[5:])))
    return out


def _master_state(webui: str) -> dict[str, Any]:
    # No proxy: the cluster is on a private bridge of this machine.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{webui}/json/", timeout=2) as response:
        state: dict[str, Any] = json.load(response)
    return state


def _addresses_in_use() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    done = _ip("-4", "-o", "addr", "show")
    nets = set()
    for line in done.stdout.splitlines():
        cols = line.split()
        if "inet" in cols:
            nets.add(ipaddress.ip_interface(cols[cols.index("inet") + 1]).network)
    return nets


def _make_bridge(stack: ExitStack) -> tuple[int, str]:
    """A bridge named after a free subnet number n (tried from one derived from this process's id), up, with
    10.213.<n>.1/24; its removal goes on ``stack``. Creating the link is the claim: a name taken by a
    parallel run fails and the next n is tried."""
    in_use = _addresses_in_use()
    start = os.getpid() % 250
    for k in range(250):
        n = (start + k) % 250 + 2  # 2..251
        net = ipaddress.ip_network(f"{SUBNET_PREFIX}.{n}.0/24")
        if any(net.overlaps(other) for other in in_use):
            continue
        bridge = f"{PREFIX}{n}br"
        if f"{PREFIX}{n}-" in _ip("netns", "list").stdout:
            continue
        if _ip("link", "add", bridge, "type", "bridge", check=False).returncode != 0:
            continue  # taken (a parallel run, or one that left it behind)
        stack.callback(_ip, "link", "del", bridge, check=False)
        _ip("link", "set", bridge, "alias", f"kafkalog netns_cluster of pid {os.getpid()}", check=False)
        _ip("addr", "add", f"{SUBNET_PREFIX}.{n}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        return n, bridge
    raise RuntimeError(f"no free subnet {SUBNET_PREFIX}.<n>.0/24 for a bridge")


def _make_namespace(stack: ExitStack, n: int, index: int, name: str, bridge: str) -> tuple[str, str]:
    """Namespace ``<PREFIX><n>-<name>`` with a veth to the bridge, address 10.213.<n>.<index + 2>/24."""
    namespace = f"{PREFIX}{n}-{name}"
    address = f"{SUBNET_PREFIX}.{n}.{index + 2}"
    host_end, ns_end = f"{PREFIX}{n}v{index}", f"{PREFIX}{n}p{index}"
    _ip("netns", "add", namespace)
    stack.callback(_delete_namespace, namespace)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
    stack.callback(_ip, "link", "del", host_end, check=False)  # gone with its peer's namespace, normally
    _ip("link", "set", ns_end, "netns", namespace)
    _ip("link", "set", host_end, "master", bridge)
    _ip("link", "set", host_end, "up")
    _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", ns_end)
    _ip("-n", namespace, "link", "set", ns_end, "up")
    _ip("-n", namespace, "link", "set", "lo", "up")
    return namespace, address


def _namespace_pids(namespace: str) -> list[int]:
    done = _ip("netns", "pids", namespace, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _delete_namespace(namespace: str) -> None:
    """Kill by id whatever still runs in it (only this cluster's processes can), then delete it."""
    deadline = time.monotonic() + 20
    while pids := _namespace_pids(namespace):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            break  # deleted all the same: the namespace lives on until they are gone
        time.sleep(0.05)
    _ip("netns", "del", namespace, check=False)


def _command(namespace: str, argv: Sequence[str], mounts: Sequence[tuple[Path, Path]]) -> list[str]:
    if not mounts:
        return ["ip", "netns", "exec", namespace, *argv]
    script = " && ".join(f"mount --bind -- {shlex.quote(str(src))} {shlex.quote(str(dst))}" for src, dst in mounts)
    return ["ip", "netns", "exec", namespace, "unshare", "--mount", "--propagation", "private",
            "sh", "-c", f'{script} && exec "$@"', "sh", *argv]


@contextmanager
def netns_cluster(env: Mapping[str, str], workdir: Path, workers: int = 2, *,
                  private_mounts: Mapping[int, Sequence[tuple[Path, Path]]] | None = None,
                  timeout_s: float = 120) -> Iterator[NetnsCluster]:
    """A Spark master and ``workers`` one-core workers, each in a network namespace of its own on a bridge
    whose address is the driver's; yields the cluster once every worker is ALIVE; removes it all after.

    ``env`` is the processes' environment (SPARK_HOME, PYSPARK_PYTHON, ...; SPARK_DAEMON_JAVA_OPTS for
    their JVM options); SPARK_LOCAL_IP and SPARK_MASTER_OPTS are set here. ``private_mounts`` maps a
    worker's index to (source, target) directories bind-mounted in a mount namespace of that worker's own.
    """
    private_mounts = dict(private_mounts or {})
    if any(not 0 <= i < workers for i in private_mounts):
        raise ValueError(f"private_mounts names workers {sorted(private_mounts)}, there are {workers}")
    workdir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:  # unwinds (kills, deletes) in the reverse order of making, on any error too
        n, bridge = _make_bridge(stack)
        driver_host = f"{SUBNET_PREFIX}.{n}.1"
        names = ["master", *[f"worker{i}" for i in range(workers)]]
        namespaces = dict(_make_namespace(stack, n, i, name, bridge) for i, name in enumerate(names))
        (master_ns, master_host), *worker_nss = namespaces.items()
        url = f"spark://{master_host}:{MASTER_PORT}"
        procs: list[subprocess.Popen[bytes]] = []

        def launch(name: str, namespace: str, address: str, argv: list[str],
                   mounts: Sequence[tuple[Path, Path]] = ()) -> subprocess.Popen[bytes]:
            proc_env = dict(env, SPARK_LOCAL_IP=address, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
            with open(workdir / f"{name}.out", "wb") as log:
                proc = subprocess.Popen(_command(namespace, [str(BIN / "spark-class"), *argv], mounts), env=proc_env,
                                        stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
            stack.callback(kill_tree, proc)  # the namespace's deletion kills what got away
            procs.append(proc)
            return proc

        master = launch("master", master_ns, master_host,
                        ["org.apache.spark.deploy.master.Master", "--host", master_host, "--port", str(MASTER_PORT),
                         "--webui-port", str(MASTER_WEBUI_PORT)])
        webui = f"http://{master_host}:{MASTER_WEBUI_PORT}"
        deadline = time.monotonic() + timeout_s

        def wait_for(what: str, done: Callable[[dict[str, Any]], bool]) -> None:
            while True:
                for proc, name in zip(procs, names, strict=False):
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited with {proc.returncode}:\n{_tail(workdir, name)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no {what} after {timeout_s:.0f} s" + "".join(
                        f"\n--- {name}\n{_tail(workdir, name)}" for name in names[:len(procs)]))
                try:
                    if done(_master_state(webui)):
                        return
                except (OSError, ValueError):  # not up yet (or a page that is not JSON yet)
                    pass
                time.sleep(0.2)

        # Workers that register while the master is still becoming leader may get no answer and retry only
        # after ~10 s: start them once it is ALIVE.
        wait_for("ALIVE master", lambda state: state.get("status") == "ALIVE")
        worker_procs = [
            launch(f"worker{i}", ns, address,
                   ["org.apache.spark.deploy.worker.Worker", "--host", address, "--cores", "1", "--memory", "2g",
                    "--webui-port", str(WORKER_WEBUI_PORT), "--work-dir", str(workdir / f"work{i}"), url],
                   private_mounts.get(i, ()))
            for i, (ns, address) in enumerate(worker_nss)]
        cluster = NetnsCluster(url, driver_host, master_host, [a for _, a in worker_nss], namespaces, master.pid,
                               [p.pid for p in worker_procs], webui, workdir, bridge, procs)
        wait_for(f"{workers} ALIVE workers on {cluster.worker_hosts}", lambda state: set(cluster.worker_hosts) <= {
            w.get("host") for w in state.get("workers", []) if w.get("state") == "ALIVE"})
        yield cluster
