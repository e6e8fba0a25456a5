"""One cleanup cycle through real Airflow vs. the same work by the CLI, over 1,000 and 10,000 partitions.

    python -m benchmarks.bench_pipeline [--partitions 1000,10000] [--segments 20] [--expired 5]

Airflow runs as a deployment does (``devtools.airflow_local``): api-server, scheduler with
the LocalExecutor (parallelism 2), dag-processor and triggerer on 127.0.0.1, a fresh Postgres database
(127.0.0.1:5432, dropped after). For each size, two copies of one store are built outside the timed
region: P partitions over 100 topics, S segments each, the oldest ``--expired`` of them past
``retention.ms`` and ``file.delete.delay.ms`` 0 (the cycle's work is marking and deleting, not waiting),
with a recovery-point checkpoint at the log end as a running store has.

* **CLI**: ``kafkalog retention apply``, ``retention sweep`` and ``kafkalog compact``, each a fresh
  process, on one copy — the same work in one process at a time;
* **Airflow**: one ``kafkalog_cleanup`` run on the other copy, from the REST trigger to the run's end,
  with every task's time;
* **no-op cycle**: a second run on the 1,000-partition copy, with nothing left to do.

Floors: a no-op cycle ≤ 30 s end to end (issue #20); each cycle ≤ the CLI's time + 30 s (issue #37: the
CLI's apply + sweep + 30 s; its compaction, a fraction of a second here, is counted in the CLI's time).
Both copies end with the same live files (checked).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._machine import describe
from devtools.airflow_local import LocalAirflow
from kafkalog.format.batch import Record, build_batch
from kafkalog.log import checkpoint, names
from kafkalog.log.index import encode_time_index

DATA = Path(__file__).resolve().parent / ".data"
HOUR_MS = 3_600_000
RECORDS = 10
TOPICS = 100
CLEANUP = "kafkalog_cleanup"


def build(root: Path, partitions: int, segments: int, expired: int, now_ms: int) -> int:
    """The store; returns how many segments retention takes at ``now_ms``. Segment i of every partition
    holds its newest record ``segments - i`` hours before ``now_ms``; retention.ms keeps the newest
    ``segments - expired`` of them."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    templates = []
    for i in range(segments):
        base, newest = i * RECORDS, now_ms - (segments - i) * HOUR_MS
        batch = build_batch([Record(base + j, newest - RECORDS + 1 + j, b"key-%d" % j, b"v" * 80)
                             for j in range(RECORDS)], partition_leader_epoch=0)
        templates.append((base, batch, encode_time_index([(newest, base + RECORDS - 1)], base)))
    retention_ms = (segments - expired) * HOUR_MS + HOUR_MS // 2
    per_topic = max(1, partitions // TOPICS)
    topics: dict[str, Any] = {}
    for p in range(partitions):
        topic, partition = f"bench-{p // per_topic}", p % per_topic
        topics[topic] = {"partitions": partition + 1, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
                         "config": {"retention.ms": str(retention_ms), "file.delete.delay.ms": "0"}}
        directory = root / f"{topic}-{partition}"
        directory.mkdir()
        for base, batch, time_entry in templates:
            names.log_file(directory, base).write_bytes(batch)
            names.index_file(directory, base).write_bytes(b"")
            names.time_index_file(directory, base).write_bytes(time_entry)
    (root / names.TOPIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "generation": 1, "topics": topics}))
    # Every flushed segment is below the recovery point, as a broker's checkpoint thread or kafkalog's
    # own writes leave it: without one, the first writing command re-validates every segment, as
    # Kafka does after an unclean shutdown, and that one-time cost is not a cycle's.
    log_end = {(f"bench-{p // per_topic}", p % per_topic): segments * RECORDS for p in range(partitions)}
    checkpoint.write_offset_checkpoint(root / names.RECOVERY_POINT_CHECKPOINT, log_end)
    return partitions * expired


def live_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith(names.DELETED_SUFFIX) and path.name not in (
                names.JOURNAL_FILE, names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run_cli(root: Path, now_ms: int) -> tuple[float, dict[str, float]]:
    steps = {"retention apply": ["retention", "apply", "--now-ms", str(now_ms)], "retention sweep":
             ["retention", "sweep"], "compact": ["compact", "--now-ms", str(now_ms)]}
    times = {}
    for label, args in steps.items():
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kafkalog.cli", *args, "--log-dir", str(root)], check=True,
                       stdout=subprocess.DEVNULL)
        times[label] = time.perf_counter() - started
    return sum(times.values()), times


def run_airflow(airflow: LocalAirflow, root: Path) -> tuple[float, dict[str, float], str]:
    started = time.perf_counter()
    run_id = airflow.trigger(CLEANUP, {"log_dirs": [str(root)]})
    state = airflow.wait_for_run(CLEANUP, run_id, timeout_s=3600)
    total = time.perf_counter() - started
    if state != "success":
        failed = [task for task, task_state in airflow.task_states(CLEANUP, run_id).items() if task_state == "failed"]
        for task in failed:  # the logs go with the run's temporary directory: show why here
            for log in sorted(airflow.home.glob(f"logs/**/task_id={task.split('[')[0]}/**/*.log")):
                print(f"--- {log}\n" + log.read_text(errors="replace")[-3000:], flush=True)
            # Why the scheduler ended it, where the task's own log ends in success (a lost heartbeat, ...).
            for component in sorted(airflow.home.glob("component-logs/*.log")):
                said = [line for line in component.read_text(errors="replace").splitlines()
                        if task.split("[")[0] in line and run_id in line]
                print(f"--- {component.name}, lines on {task}:\n" + "\n".join(said[-20:]), flush=True)
        raise SystemExit(f"{CLEANUP} run {run_id} ended {state}: {airflow.task_states(CLEANUP, run_id)}")
    tasks: dict[str, float] = {}
    for ti in airflow.task_instances(CLEANUP, run_id):
        if ti["start_date"] and ti["end_date"]:
            ended, begun = datetime.fromisoformat(ti["end_date"]), datetime.fromisoformat(ti["start_date"])
            seconds = (ended - begun).total_seconds()
            name = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            tasks[name] = seconds
    return total, tasks, run_id


@contextmanager
def postgres_database() -> Iterator[str]:
    import psycopg2

    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=5)
    admin.autocommit = True
    name = f"kafkalog_bench_{uuid.uuid4().hex[:10]}"
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        admin.cursor().execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1000,10000", help="store sizes, comma-separated (default 1000,10000)")
    parser.add_argument("--segments", type=int, default=20, help="segments per partition (default 20)")
    parser.add_argument("--expired", type=int, default=5, help="segments per partition past retention (default 5)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.partitions.split(",")]
    print(describe("bench_pipeline"), flush=True)
    rows: list[tuple[str, float | None, float, bool, str, bool]] = []
    task_tables: list[tuple[str, dict[str, float], dict[str, float]]] = []
    with tempfile.TemporaryDirectory(dir=DATA if DATA.exists() else None) as tmp, postgres_database() as db:
        base = Path(tmp)
        (base / "idle").mkdir()
        (base / "broker.properties").write_text("log.retention.check.interval.ms=86400000\n")
        airflow = LocalAirflow(base / "airflow", extra_env={
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{db}",
            "KAFKALOG_LOG_DIRS": str(base / "idle"), "KAFKALOG_CONFIG": str(base / "broker.properties")})
        started = time.perf_counter()
        airflow.start()
        try:
            airflow.wait_for_run(CLEANUP, airflow.first_run(CLEANUP), timeout_s=300)  # the scheduler's own first
            print(f"Airflow up (Postgres, LocalExecutor, parallelism 2) in {time.perf_counter() - started:.1f} s",
                  flush=True)
            for partitions in sizes:
                now_ms = int(time.time() * 1000)
                started = time.perf_counter()
                by_cli, by_airflow = base / f"cli-{partitions}", base / f"airflow-{partitions}"
                marked = build(by_cli, partitions, args.segments, args.expired, now_ms)
                shutil.copytree(by_cli, by_airflow)
                print(f"\n{partitions} partitions x {args.segments} segments ({marked} to delete) built in "
                      f"{time.perf_counter() - started:.1f} s", flush=True)
                cli_s, cli_steps = run_cli(by_cli, int(time.time() * 1000))
                airflow_s, tasks, _ = run_airflow(airflow, by_airflow)
                same = live_digest(by_cli) == live_digest(by_airflow)
                rows.append((f"{partitions} x {args.segments}", cli_s, airflow_s, same, "<= CLI + 30 s",
                             airflow_s <= cli_s + 30))
                task_tables.append((f"{partitions} partitions", cli_steps, tasks))
            idle_s, tasks, _ = run_airflow(airflow, base / f"airflow-{sizes[0]}")
            rows.append((f"no-op, {sizes[0]} x {args.segments}", None, idle_s, True, "<= 30 s", idle_s <= 30))
            task_tables.append((f"no-op cycle, {sizes[0]} partitions", {}, tasks))
        finally:
            airflow.stop()
    print(f"\n{'cycle':<28}{'CLI s':>9}{'Airflow s':>11}{'overhead s':>12}{'same files':>12}   floor")
    for label, cli_time, airflow_time, same, floor, ok in rows:
        cli = "-" if cli_time is None else f"{cli_time:.1f}"
        overhead = "-" if cli_time is None else f"{airflow_time - cli_time:+.1f}"
        print(f"{label:<28}{cli:>9}{airflow_time:>11.1f}{overhead:>12}{'yes' if same else 'NO':>12}   "
              f"{floor} {'PASS' if ok else 'FAIL'}")
    for label, cli_steps, tasks in task_tables:
        print(f"\n{label}: " + ", ".join(f"CLI {k} {v:.1f} s" for k, v in cli_steps.items()))
        for task, seconds in sorted(tasks.items(), key=lambda kv: kv[0]):
            print(f"  {task:<26}{seconds:>8.1f} s")
    return 0 if all(ok and same for *_, same, _, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
