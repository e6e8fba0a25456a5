"""Chaos harness: kill -9 maintenance over and over while producers and readers keep going, then check
that nothing the policy does not allow was lost.

    python tests/chaos.py --kills 1000 [--spark-every 50] [--seed 1] [--dir DIR]

A store with a delete topic (``events``: unkeyed, small segments, ``retention.ms`` 60 s of its record
timestamps) and a compacted one (``state``: 50 keys). Two producer threads append through ``kafkalog
produce`` (each command's records count as acknowledged when it exits 0); a reader thread consumes
both topics through ``kafkalog consume`` again and again. Meanwhile the harness starts one maintenance
command after another — ``retention apply`` (with a clock that expires the older records), ``retention
sweep``, ``compact`` (the cleaner manager's choice or ``--topic state``), ``recover`` and, every
``--spark-every`` kills, the Spark compaction job — and SIGKILLs each at a random moment (its process
group and every descendant). At the end it runs ``kafkalog recover`` and ``verify`` and counts:

- records lost: acknowledged ``events`` records missing from the log though a later one is there
  (retention only ever removes a prefix);
- latest values lost: ``state`` keys whose newest acknowledged value is not the value the log serves;
- reader violations: a consume that served offsets out of order or repeated, or an ``events`` gap;
- reader errors: a consume that failed (exit ≠ 0) while maintenance ran.

All four must be 0, and ``verify`` must pass. ``tests/test_chaos.py`` runs a short version in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.spark.processes when run as a script

from tests.spark.processes import descendants  # noqa: E402

CLI = [sys.executable, "-m", "kafkalog.cli"]
DAY_MS = 86_400_000
RETENTION_MS = 60_000
STEP_MS = 100  # the timestamp step between consecutive events records
KEYS = 50


@dataclass
class Outcome:
    kills: Counter[str] = field(default_factory=Counter)
    killed_running: int = 0  # kills that found the command still running (not already done)
    acked_events: int = 0
    acked_state: int = 0
    records_lost: int = 0
    latest_values_lost: int = 0
    reader_violations: int = 0
    reader_errors: list[str] = field(default_factory=list)
    verify_ok: bool = False
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return (self.records_lost == 0 and self.latest_values_lost == 0 and self.reader_violations == 0
                and not self.reader_errors and self.verify_ok)


class Harness:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.log_dir = root / "logs"
        self.rng = random.Random(seed)
        self.t0 = int(time.time() * 1000) - DAY_MS  # event i is stamped t0 + i * STEP_MS
        self.lock = threading.Lock()
        self.events: list[str] = []  # acknowledged, in append order
        self.state: dict[str, str] = {}  # key -> latest acknowledged value
        self.sequence = 0
        self.stop = threading.Event()
        self.seconds: dict[str, float] = {}  # per kind of command: a wait it was last seen to end within
        self.outcome = Outcome()

    def cli(self, *args: str, stdin: str | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args, "--log-dir", str(self.log_dir)], input=stdin, capture_output=True,
                              text=True, timeout=timeout_s, cwd=REPO)

    def setup(self) -> None:
        self.log_dir.mkdir(parents=True)
        for topic, configs in (("events", ["segment.bytes=2048", f"retention.ms={RETENTION_MS}",
                                           "file.delete.delay.ms=0"]),
                               ("state", ["cleanup.policy=compact", "segment.bytes=2048",
                                          "min.cleanable.dirty.ratio=0.01", "file.delete.delay.ms=0"])):
            done = self.cli("topics", "create", "--topic", topic, *[a for c in configs for a in ("--config", c)])
            assert done.returncode == 0, done.stderr

    # --- producers and readers --------------------------------------------------------------------------
    def produce_events(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                first, self.sequence = self.sequence, self.sequence + 20
            values = [f"e-{i}" for i in range(first, first + 20)]
            done = self.cli("produce", "--topic", "events", "--partition", "0", "--batch-records", "5",
                            "--timestamp-ms", str(self.t0 + first * STEP_MS), stdin="".join(v + "\n" for v in values))
            if done.returncode == 0:
                with self.lock:
                    self.events += values
                    self.outcome.acked_events += len(values)

    def produce_state(self) -> None:
        n = 0
        while not self.stop.is_set():
            rows = [(f"k{(n + i) % KEYS}", f"s-{n + i}") for i in range(20)]
            n += 20
            done = self.cli("produce", "--topic", "state", "--key-separator", ":", "--batch-records", "5",
                            stdin="".join(f"{k}:{v}\n" for k, v in rows))
            if done.returncode == 0:
                with self.lock:
                    self.state.update(rows)
                    self.outcome.acked_state += len(rows)

    def read(self) -> None:
        while not self.stop.is_set():
            for topic in ("events", "state"):
                done = self.cli("consume", "--topic", topic, "--partition", "0", "--print-offset")
                if done.returncode != 0:
                    self.outcome.reader_errors.append(f"{topic}: {done.stderr.strip()[:300]}")
                    continue
                offsets = [int(line.split("\t", 1)[0]) for line in done.stdout.splitlines()]
                increasing = all(b > a for a, b in zip(offsets, offsets[1:], strict=False))
                contiguous = topic != "events" or all(b == a + 1 for a, b in zip(offsets, offsets[1:], strict=False))
                if not (increasing and contiguous):
                    self.outcome.reader_violations += 1

    # --- maintenance, killed ----------------------------------------------------------------------------
    def maintenance_command(self, spark: bool) -> tuple[str, list[str]]:
        with self.lock:
            produced = self.sequence
        now_ms = min(self.t0 + max(0, produced - 400) * STEP_MS + RETENTION_MS, int(time.time() * 1000))
        log_dir = ["--log-dir", str(self.log_dir)]
        if spark:
            job = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
                   "--conf", "spark.ui.enabled=false", str(REPO / "spark_jobs" / "compact_logs.py"), *log_dir,
                   "--now-ms", str(int(time.time() * 1000)), "--report", str(self.root / "spark-report.json")]
            return "spark job", job
        kind = self.rng.choice(["retention apply", "retention sweep", "compact", "compact --topic", "recover"])
        args = {"retention apply": ["retention", "apply", "--now-ms", str(now_ms)],
                "retention sweep": ["retention", "sweep"], "compact": ["compact"],
                "compact --topic": ["compact", "--topic", "state"], "recover": ["recover"]}[kind]
        return kind, [*CLI, *args, *log_dir]

    def kill_one(self, spark: bool) -> None:
        kind, cmd = self.maintenance_command(spark)
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        # Aim each kill within the time this kind of command last took, from a quarter of it to near its
        # end (on this small store a command often ends within a fraction of a second, and a kill after
        # its end tests nothing). A command that ends first tells how long it took, and the next kill
        # of its kind is aimed within that.
        started = time.monotonic()
        try:
            proc.wait(timeout=self.rng.uniform(0.25, 0.9) * self.seconds.get(kind, 20.0 if spark else 0.5))
            self.seconds[kind] = time.monotonic() - started
        except subprocess.TimeoutExpired:
            self.outcome.killed_running += 1
            victims = descendants(proc.pid)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in victims:  # Spark's Python workers leave the job's process group
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait(timeout=60)
        self.outcome.kills[kind] += 1

    # --- the run ---------------------------------------------------------------------------------------
    def run(self, kills: int, spark_every: int) -> Outcome:
        started = time.monotonic()
        self.setup()
        threads = [threading.Thread(target=f) for f in (self.produce_events, self.produce_state, self.read)]
        for t in threads:
            t.start()
        try:
            for k in range(kills):
                self.kill_one(spark=spark_every > 0 and k % spark_every == spark_every - 1)
        finally:
            self.stop.set()
            for t in threads:
                t.join(timeout=300)
        self.check()
        self.outcome.seconds = time.monotonic() - started
        return self.outcome

    def check(self) -> None:
        recovered = self.cli("recover", timeout_s=600)
        assert recovered.returncode == 0, recovered.stderr
        self.outcome.verify_ok = self.cli("verify", timeout_s=600).returncode == 0
        lines = self.cli("consume", "--topic", "events", "--partition", "0").stdout.splitlines()
        present = {line.rsplit("\t", 1)[-1] for line in lines}  # "null<TAB>e-17": unkeyed
        first = next((i for i, v in enumerate(self.events) if v in present), len(self.events))
        self.outcome.records_lost = sum(1 for v in self.events[first:] if v not in present)
        latest: dict[str, str] = {}
        for line in self.cli("consume", "--topic", "state", "--partition", "0").stdout.splitlines():
            key, _, value = line.partition("\t")
            latest[key] = value
        self.outcome.latest_values_lost = sum(1 for k, v in self.state.items() if latest.get(k) != v)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python tests/chaos.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000, help="maintenance commands to SIGKILL (default 1000)")
    parser.add_argument("--spark-every", type=int, default=50, help="every Nth kill is of the Spark job (0: never)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="work dir (default: a temporary one, removed after)")
    args = parser.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kafkalog-chaos-"))
    try:
        outcome = Harness(root, args.seed).run(args.kills, args.spark_every)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({**{k: v for k, v in vars(outcome).items() if k != "kills"}, "kills": dict(outcome.kills)},
                     indent=1))
    print(f"\n| kills | of them mid-run | acked records | records lost | latest values lost | reader violations "
          f"| reader errors | verify |\n|---|---|---|---|---|---|---|---|\n"
          f"| {sum(outcome.kills.values())} | {outcome.killed_running} | "
          f"{outcome.acked_events + outcome.acked_state} | {outcome.records_lost} | {outcome.latest_values_lost} | "
          f"{outcome.reader_violations} | {len(outcome.reader_errors)} | {'OK' if outcome.verify_ok else 'FAILED'} |")
    return 0 if outcome.clean else 1


if __name__ == "__main__":
    sys.exit(main())
