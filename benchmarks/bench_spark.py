"""Compaction on Spark (``local[2]`` and a standalone cluster of 2 one-core workers) vs. one process.

    python -m benchmarks.bench_spark [--quick] [--runs N] [--partitions 8] [--partition-mb 250] [--single-mb 1000]

Data sets (built once, in parallel, cached under ``benchmarks/.data/``): a compacted topic of
``--partitions`` partitions of ``--partition-mb`` MB each, and one of a single ``--single-mb`` MB
partition. The records are those of ``bench_compaction``: v2 batches of 100 uncompressed records of
~100 B (11-byte keys, 80-byte values), 1 distinct key per 5 records spread over the whole partition,
~1 % tombstones; segments of 64 MiB or a 4.5th of the partition if that is smaller, so ~89-94 % of
each partition is cleanable (all but the active segment). ``--quick`` is 4 x 50 MB and 1 x 200 MB.

Contestants, each compacting a fresh ``cp -r`` copy of the cached log dir (copy and ``sync`` untimed),
all with the same ``now_ms`` and ``wall_now_ms``:

(a) ``compact()`` (what ``kafkalog compact`` runs) in a child process, timed inside it: Python start-up,
    imports and loading the numba kernels (``warmup.warm()``) are excluded, as in ``bench_compaction``;
(p) the limit two cores set, with no Spark (multi-partition set only): two such children started together
    once both have warmed up, each compacting every other partition with ``compact(topic=, partition=)``,
    timed from the first one's start to the last one's end. Two cleaners share the memory bus, the
    last-level cache and the page cache, and two vCPUs may share host cores: this is what any two-worker job
    can reach at best on the machine, measured in the same rounds;
(m) the machine's own limit, at the start of every round: a pure Python integer loop (~1 s; no memory
    traffic, no I/O, nothing shared) by one process, then by two at once: 2 x one's time / the pair's is
    what the machine's two cores give right then. Not a contestant: it says how far any two-process result can go;
(b) ``spark_jobs/compact_logs.py`` via ``spark-submit --master local[2]``, and the same with ``local[4]``
    (more tasks than cores: what the job does given more cores than this machine has);
(c) the same job on a standalone master with 2 one-core workers, all on 127.0.0.1, started for each run
    (the workers once the master is ALIVE) and stopped afterwards by process group (multi-partition set
    only). The application UI is off (the job's default); the master's and workers' web UIs cannot be
    turned off in Spark 4.3 and listen on 127.0.0.1 like every other port.

For (b) and (c) the throughput is the job's own clean phase (``timings.clean_job_s`` of its JSON
report: the rounds' planning, the stages and the driver's commits); session start and the executor
probe are reported separately, as is spark-submit's end-to-end wall time. Before timing, an untimed small
run of (a) and (b) warms the numba cache dir shared by the child and every executor
(``--numba-cache-dir``). Rounds are interleaved
(a, p, b, c on the multi-partition set, then a, b on the single partition) and each figure is the median
over ``--runs`` rounds (default 5). Sanity checks: every run writes the same files, byte for byte (journal and lock
files aside), and every socket a Spark process listens on is on 127.0.0.1.

Floors (issue acceptance): on the multi-partition set local[2] >= 0.85 x (p), the two-process ceiling
measured in the same rounds; on the single 1 GB partition local[2] >= 0.9 x one process (its key map in a
stage of its own, then a rewrite task per group); Spark session start < 20 s.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._machine import describe
from benchmarks.bench_compaction import RECORDS_PER_BATCH, T0, _records_section
from kafkalog.format.batch import assemble_batch
from kafkalog.log import names
from kafkalog.log.store import LogStore
from tests.spark.processes import BIN, kill_tree, listening_addresses, spark_missing, standalone_cluster

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / ".data"
JOB = REPO / "spark_jobs" / "compact_logs.py"
TOPIC = "bench"
LOG_BYTES_PER_RECORD = 100.5  # measured: ~99.9 B of record plus a 61 B batch header per 100 records
MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DATA_VERSION = 1
NOT_COMPARED = {names.JOURNAL_FILE, names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE}
JOB_TIMEOUT_S = 900
LOOPBACK = "127.0.0.1"


# --- data ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataSet:
    name: str
    partitions: int
    partition_mb: int

    @property
    def root(self) -> Path:
        return DATA / f"spark-{self.partitions}x{self.partition_mb}mb"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def label(self) -> str:
        return f"{self.partitions} x {self.partition_mb} MB" if self.partitions > 1 else f"1 x {self.partition_mb} MB"


def _segment_bytes(partition_mb: int) -> int:
    return min(MAX_SEGMENT_BYTES, int(partition_mb * 1_000_000 / 4.5))


def _fill_partition(logs: str, partition: int, partition_mb: int) -> None:
    """One partition: the records of ``bench_compaction`` with this partition's own keys and values."""
    total = int(partition_mb * 1_000_000 / LOG_BYTES_PER_RECORD)
    rng = np.random.default_rng(42 + partition)
    keys = rng.integers(0, total // 5, size=total)
    tombstones = rng.random(total) < 0.01
    seed_base = partition * 1_000_000_000  # distinct values per partition
    store = LogStore([logs])
    with store.writable_log(store.locate(TOPIC, partition)) as log:
        for start in range(0, total, RECORDS_PER_BATCH):
            n = min(RECORDS_PER_BATCH, total - start)
            body = _records_section(start, keys[start:start + n], tombstones[start:start + n],
                                    seed_base + start).tobytes()
            raw = assemble_batch(start, 0, 0, n - 1, T0 + start, T0 + start + n - 1, -1, -1, -1, n, body)
            log.append_batch(raw, now_ms=T0)


def build(data: DataSet) -> dict[str, Any]:
    marker = data.root / "info.json"
    if marker.exists():
        info: dict[str, Any] = json.loads(marker.read_text())
        if info.get("version") == DATA_VERSION:
            return info
    if data.root.exists():
        shutil.rmtree(data.root)
    store = LogStore([data.logs], create_missing=True)
    segment_bytes = _segment_bytes(data.partition_mb)
    store.create_topic(TOPIC, data.partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
    with ProcessPoolExecutor(max_workers=min(data.partitions, os.cpu_count() or 1)) as pool:
        list(pool.map(_fill_partition, [str(data.logs)] * data.partitions, range(data.partitions),
                      [data.partition_mb] * data.partitions))
    subprocess.run(["sync"], check=True)
    log_bytes = sum(p.stat().st_size for p in data.logs.rglob(f"*{names.LOG_SUFFIX}"))
    segments = sum(1 for _ in data.logs.rglob(f"*{names.LOG_SUFFIX}"))
    info = {"version": DATA_VERSION, "partitions": data.partitions, "partition_mb": data.partition_mb,
            "segment_bytes": segment_bytes, "log_bytes": log_bytes, "segments": segments,
            "records_per_partition": int(data.partition_mb * 1_000_000 / LOG_BYTES_PER_RECORD)}
    marker.write_text(json.dumps(info))
    return info


def _digest(root: Path) -> str:
    """One sha256 over (relative path, sha256) of every file but the journal and the empty lock files."""
    outer = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in NOT_COMPARED:
            inner = hashlib.sha256()
            with open(p, "rb") as f:
                while chunk := f.read(1 << 22):
                    inner.update(chunk)
            outer.update(f"{p.relative_to(root)}\0{inner.hexdigest()}\n".encode())
    return outer.hexdigest()


def _fresh_copy(source: Path, work: Path) -> Path:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(source), str(work / "logs")], check=True)
    subprocess.run(["sync"], check=True)
    return work / "logs"


# --- the machine's own limit ---------------------------------------------------------------------------
CPU_LOOP_N = 12_000_000  # about a second of one core: long against the start of a process, short per round


def _cpu_loop(start: Any) -> None:
    start.wait()
    x = 0
    for i in range(CPU_LOOP_N):
        x += i * i


def _cpu_loops_at_once(processes: int) -> float:
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(processes + 1)
    children = [ctx.Process(target=_cpu_loop, args=(start,)) for _ in range(processes)]
    for child in children:
        child.start()
    start.wait()  # every child has started and is released with this clock
    started = time.perf_counter()
    for child in children:
        child.join()
    return time.perf_counter() - started


def machine_limit(alternations: int = 3) -> dict[str, float]:
    """(m): the same CPU loop by one process, then by two at once, ``alternations`` times (alternated, as a
    vCPU's speed can move from one second to the next on a shared host); ``x`` = 2 x median one / median two."""
    ones, twos = [], []
    for _ in range(alternations):
        ones.append(_cpu_loops_at_once(1))
        twos.append(_cpu_loops_at_once(2))
    one, two = statistics.median(ones), statistics.median(twos)
    return {"one_s": round(one, 3), "two_s": round(two, 3), "x": round(2 * one / two, 3)}


# --- processes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Env:
    spark_env: dict[str, str]
    numba_cache_dir: Path
    scratch: Path
    now_ms: int
    wall_ms: int


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# --- (a) one process -----------------------------------------------------------------------------------
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from kafkalog.log.store import LogStore
from kafkalog.maintenance.compact import compact
from kafkalog.maintenance.warmup import warm
store = LogStore([Path(sys.argv[1])])
warm()  # the kernels loaded before the clock starts, as the Spark job's probe loads them into its workers
partitions = [int(p) for p in sys.argv[5].split(",")] if len(sys.argv) > 5 else None
if partitions is not None:  # one of a pair: say it is ready, wait for the other, so both clocks start together
    go = Path(sys.argv[4])
    go.with_name(f"{go.name}.ready-{sys.argv[5]}").touch()
    while not go.exists():
        time.sleep(0.001)
t1, started_at = time.perf_counter(), time.time()
now_ms, wall_ms = int(sys.argv[2]), int(sys.argv[3])
reports = [compact(store, now_ms=now_ms, wall_now_ms=wall_ms, run_id="bench-single")] if partitions is None else [
    compact(store, now_ms=now_ms, wall_now_ms=wall_ms, topic="bench", partition=p, run_id="bench-pair")
    for p in partitions]
t2 = time.perf_counter()
print(json.dumps({"startup_s": t1 - t0, "compact_s": t2 - t1, "started_at": started_at, "finished_at": time.time(),
                  "failures": [f for r in reports for f in r.failures],
                  "cleaned": [{"partition": c.partition, "stats": c.stats.to_dict()}
                              for r in reports for c in r.cleaned]}))
"""


def run_single(env: Env, logs: Path, expect_partitions: int) -> dict[str, Any]:
    child_env = dict(os.environ, NUMBA_CACHE_DIR=str(env.numba_cache_dir))
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, str(logs), str(env.now_ms), str(env.wall_ms)],
                         capture_output=True, text=True, env=child_env, cwd=REPO)
    wall = time.perf_counter() - started
    if out.returncode:
        raise SystemExit(f"single-process compaction failed:\n{out.stderr[-4000:]}")
    doc = json.loads(out.stdout)
    if doc["failures"] or len(doc["cleaned"]) != expect_partitions:
        raise SystemExit(f"single-process compaction cleaned {len(doc['cleaned'])} of {expect_partitions} "
                         f"partitions; failures: {doc['failures']}")
    return {"wall_s": wall, "clean_s": doc["compact_s"], "startup_s": doc["startup_s"],
            "bytes_read": sum(c["stats"]["bytes_read"] for c in doc["cleaned"]),
            "bytes_written": sum(c["stats"]["bytes_written"] for c in doc["cleaned"]),
            "partition_s": [round(c["stats"]["map_seconds"] + c["stats"]["clean_seconds"], 3) for c in doc["cleaned"]]}


def run_pair(env: Env, logs: Path, partitions: int) -> dict[str, Any]:
    """(p): two plain processes started together, each compacting every other partition: what two cores
    give this work on this machine at this moment, with no Spark at all (the ceiling for (b) and (c))."""
    child_env = dict(os.environ, NUMBA_CACHE_DIR=str(env.numba_cache_dir))
    go = logs.parent / "go"
    go.unlink(missing_ok=True)
    started = time.perf_counter()
    halves = [",".join(str(p) for p in range(half, partitions, 2)) for half in (0, 1)]
    args = [sys.executable, "-c", _CHILD, str(logs), str(env.now_ms), str(env.wall_ms), str(go)]
    procs = [subprocess.Popen([*args, half], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env,
                              cwd=REPO) for half in halves]
    ready = [go.with_name(f"{go.name}.ready-{p}") for p in halves]
    deadline = time.perf_counter() + 120
    while not all(r.exists() for r in ready) and time.perf_counter() < deadline \
            and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    go.touch()  # both have loaded the kernels and faulted in their table memory (warm()): start together
    outs = [p.communicate() for p in procs]
    for r in ready:
        r.unlink(missing_ok=True)
    wall = time.perf_counter() - started
    go.unlink()
    for p, (_out, err) in zip(procs, outs, strict=True):
        if p.returncode:
            raise SystemExit(f"a plain process of the pair failed:\n{err[-4000:]}")
    docs = [json.loads(out) for out, _err in outs]
    cleaned = [c for d in docs for c in d["cleaned"]]
    if any(d["failures"] for d in docs) or len(cleaned) != partitions:
        raise SystemExit(f"the pair cleaned {len(cleaned)} of {partitions} partitions")
    return {"wall_s": wall, "clean_s": max(d["finished_at"] for d in docs) - min(d["started_at"] for d in docs),
            "start_skew_s": abs(docs[0]["started_at"] - docs[1]["started_at"]),
            "process_s": [round(d["compact_s"], 3) for d in docs],
            "bytes_read": sum(c["stats"]["bytes_read"] for c in cleaned)}


# --- (b), (c) Spark ------------------------------------------------------------------------------------
def submit(env: Env, logs: Path, report: Path, *, master: str, conf: Sequence[str] = (),
           watch: Sequence[int] = (), expect_partitions: int) -> dict[str, Any]:
    cmd = [str(BIN / "spark-submit"), "--master", master]
    for item in conf:
        cmd += ["--conf", item]
    cmd += [str(JOB), "--log-dir", str(logs), "--now-ms", str(env.now_ms), "--wall-now-ms", str(env.wall_ms),
            "--report", str(report), "--numba-cache-dir", str(env.numba_cache_dir), "--run-id", "bench-spark"]
    stdout, stderr = report.with_suffix(".stdout"), report.with_suffix(".stderr")
    listening: set[str] = set()
    started = time.perf_counter()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(cmd, env=env.spark_env, stdout=out, stderr=err, cwd=env.scratch,
                                start_new_session=True)
    try:
        next_look = started
        while proc.poll() is None:
            now = time.perf_counter()
            if now >= next_look:  # once a second: cheap next to the work on 2 cores
                listening |= listening_addresses([proc.pid, *watch])
                next_look = now + 1.0
            if now - started > JOB_TIMEOUT_S:
                raise SystemExit(f"spark-submit still running after {JOB_TIMEOUT_S} s; see {stderr}")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    wall = time.perf_counter() - started
    if proc.returncode != 0 or not report.exists():
        raise SystemExit(f"spark-submit --master {master} exited {proc.returncode}:\n{_tail(stderr)}")
    doc = json.loads(report.read_text())
    if doc["status"] != "ok" or doc["totals"]["cleaned"] != expect_partitions:
        raise SystemExit(f"the job cleaned {doc['totals']['cleaned']} of {expect_partitions} partitions "
                         f"({doc['status']}); see {report}")
    t, stages = doc["timings"], doc["spark"]["stages"]
    commits = [p["round"]["commit_s"] for p in doc["partitions"] if p.get("round")]
    return {"wall_s": wall, "clean_s": t["clean_job_s"], "session_start_s": t["session_start_s"],
            "executor_check_s": t["executor_check_s"], "plan_s": t["plan_s"], "job_total_s": t["total_s"],
            "bytes_read": doc["totals"]["bytes_read"], "bytes_written": doc["totals"]["bytes_written"],
            "stage_s": {name: st["seconds"] for name, st in stages.items()},
            "task_s": {name: st["task_s"] for name, st in stages.items()}, "commit_s": round(sum(commits), 3),
            "executors": sorted({e for st in stages.values() for e in st["executors"]}),
            "listening": sorted(listening)}


# --- one run -------------------------------------------------------------------------------------------
def run_one(env: Env, data: DataSet, runner: str, tag: str) -> dict[str, Any]:
    work = DATA / "spark-runs" / tag
    logs = _fresh_copy(data.logs, work)
    report = env.scratch / f"{tag}.json"
    if runner == "single":
        result = run_single(env, logs, data.partitions)
    elif runner == "pair":
        result = run_pair(env, logs, data.partitions)
    elif runner in ("local[2]", "local[4]"):
        result = submit(env, logs, report, master=runner, expect_partitions=data.partitions)
    else:
        started = time.perf_counter()
        with standalone_cluster(env.spark_env, env.scratch / f"{tag}-cluster") as (url, pids):
            cluster_s = time.perf_counter() - started
            listening = listening_addresses(pids)
            result = submit(env, logs, report, master=url, watch=pids, expect_partitions=data.partitions,
                            conf=["spark.cores.max=2", "spark.scheduler.minRegisteredResourcesRatio=1.0"])
        result["cluster_start_s"] = cluster_s
        result["listening"] = sorted(listening | set(result["listening"]))
        spread = result["executors"]
        if len(spread) != 2 or any(e.endswith("/driver") for e in spread):
            raise SystemExit(f"standalone run did not use both workers' executors: {spread}")
    result["digest"] = _digest(logs)
    shutil.rmtree(work)
    return result


# --- report --------------------------------------------------------------------------------------------
def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


RUNNERS = {"single": "(a) kafkalog compact, 1 process", "pair": "(p) 2 plain processes, half the partitions each",
           "local[2]": "(b) Spark local[2]", "local[4]": "(b) Spark local[4]",
           "standalone": "(c) Spark standalone, 2 workers x 1 core"}
TAGS = {"single": "single", "pair": "pair", "local[2]": "local2", "local[4]": "local4", "standalone": "standalone"}


Results = dict[tuple[str, str], list[dict[str, Any]]]  # (data set, runner) -> one dict per round


def print_tables(sets: list[tuple[DataSet, dict[str, Any], list[str]]], results: Results,
                 limits: list[dict[str, float]], runs: int) -> list[tuple[str, bool]]:
    print(f"\nMedians of {runs} run(s). MB/s = MB of log in the data set (all segments, 1 MB = 10^6 B) / clean s. "
          "clean s: compact() inside the child for (a), from the first compact() start to the last end for (p), "
          "the job's clean_job_s for (b) and (c) (its stages and the driver's commits).\n")
    print("| data set | runner | clean s | MB/s | x (a), clean | spark-submit / child wall s | x (a), wall "
          "| session start s | executor probe s | driver commits s | cluster start s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for data, info, runners in sets:
        mb = info["log_bytes"] / 1e6
        base = results[(data.name, "single")]
        base_clean, base_wall = _median(base, "clean_s"), _median(base, "wall_s")
        for runner in runners:
            rs = results[(data.name, runner)]
            clean, wall = _median(rs, "clean_s"), _median(rs, "wall_s")
            assert clean is not None and wall is not None and base_clean is not None and base_wall is not None
            first = runner == "single"
            print(f"| {data.label()} | {RUNNERS[runner]} | {clean:.2f} | {mb / clean:.0f} "
                  f"| {'' if first else f'{base_clean / clean:.2f}x'} | {wall:.1f} "
                  f"| {'' if first else f'{base_wall / wall:.2f}x'} "
                  f"| {_fmt(_median(rs, 'session_start_s'))} | {_fmt(_median(rs, 'executor_check_s'))} "
                  f"| {_fmt(_median(rs, 'commit_s'))} | {_fmt(_median(rs, 'cluster_start_s'), '.1f')} |")

    verdicts: list[tuple[str, bool]] = []
    print("\n| target | needed | measured | result |")
    print("|---|---:|---:|---|")
    if limits:  # not a target: what the VM's two vCPUs gave a loop that shares nothing, in the same rounds
        xs = [m["x"] for m in limits]
        spread = f" (rounds {min(xs):.2f}-{max(xs):.2f}x)" if len(xs) > 1 else ""
        print(f"| limit: a pure CPU loop, 2 processes / 1 process (nothing shared) | (the VM's 2 vCPUs) "
              f"| {statistics.median(xs):.2f}x{spread} | - |")
    for data, _info, _runners in sets:
        single_s = _median(results[(data.name, "single")], "clean_s")
        local_s = _median(results[(data.name, "local[2]")], "clean_s")
        assert single_s is not None and local_s is not None
        if (data.name, "pair") in results:  # the floor is a share of the two-process ceiling, same rounds
            pair_s = _median(results[(data.name, "pair")], "clean_s")
            assert pair_s is not None
            ceiling = [a["clean_s"] / p["clean_s"] for a, p in zip(results[(data.name, "single")],
                                                                   results[(data.name, "pair")], strict=True)]
            spread = f" (rounds {min(ceiling):.2f}-{max(ceiling):.2f}x)" if len(ceiling) > 1 else ""
            print(f"| limit (p): 2 plain processes / single process, {data.label()} | (the 2-core ceiling) "
                  f"| {single_s / pair_s:.2f}x{spread} | - |")
            paired = [p["clean_s"] / b["clean_s"] for p, b in zip(results[(data.name, "pair")],
                                                                  results[(data.name, "local[2]")], strict=True)]
            name, needed, ratio = f"local[2] / (p), {data.label()}", 0.85, pair_s / local_s
        else:
            paired = [a["clean_s"] / b["clean_s"] for a, b in zip(results[(data.name, "single")],
                                                                  results[(data.name, "local[2]")], strict=True)]
            name, needed, ratio = f"local[2] / single process, {data.label()}", 0.9, single_s / local_s
        ok = ratio >= needed
        verdicts.append((name, ok))
        spread = f" (rounds {min(paired):.2f}-{max(paired):.2f}x)" if len(paired) > 1 else ""
        # Three decimals: rounded to two, 0.845x would read as the 0.85x it misses.
        print(f"| {name} (clean time) | >= {needed}x | {ratio:.3f}x{spread} | {'PASS' if ok else 'FAIL'} |")
    for runner in ("local[2]", "standalone"):
        values = [r["session_start_s"] for (_, rn), rs in results.items() if rn == runner for r in rs]
        if values:
            ok = max(values) < 20
            verdicts.append((f"session start {runner}", ok))
            print(f"| Spark session start, {runner} (worst of {len(values)} runs) | < 20 s | {max(values):.2f} s "
                  f"| {'PASS' if ok else 'FAIL'} |")
    for data, _info, runners in sets:
        digests = {r["digest"] for runner in runners for r in results[(data.name, runner)]}
        ok = len(digests) == 1
        verdicts.append((f"identical {data.label()}", ok))
        who = ", ".join(r.split()[0] for r in (RUNNERS[x] for x in runners))
        print(f"| same segment files, byte for byte, {who}: {data.label()} | identical | "
              f"{'identical' if ok else f'{len(digests)} different results'} | {'PASS' if ok else 'FAIL'} |")
    addresses = {a for rs in results.values() for r in rs for a in r.get("listening", [])}
    ok = bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    verdicts.append(("loopback only", ok))
    print(f"| every listening socket of spark-submit and the cluster | 127.0.0.1 | {', '.join(sorted(addresses))} "
          f"| {'PASS' if ok else 'FAIL'} |")
    return verdicts


def _round_details(runner: str, r: dict[str, Any]) -> str:
    if runner == "single":
        return f", map+clean per partition {r['partition_s']}"
    if runner == "pair":
        return f", each process {r['process_s']} s, started {r['start_skew_s']:.3f} s apart"
    extra = (f", session start {r['session_start_s']:.2f} s, probe {r['executor_check_s']:.2f} s, "
             f"stages {r['stage_s']} s, tasks {r['task_s']} s, commits {r['commit_s']:.2f} s")
    if "cluster_start_s" in r:
        extra += f", cluster start {r['cluster_start_s']:.1f} s"
    return extra


# --- main ----------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_spark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the multi-partition set (default 8)")
    parser.add_argument("--partition-mb", type=int, default=250, help="MB per partition of that set (default 250)")
    parser.add_argument("--single-mb", type=int, default=1000, help="MB of the single-partition set (default 1000)")
    parser.add_argument("--runs", type=int, help="interleaved rounds; medians are reported (default 5, --quick 1)")
    parser.add_argument("--quick", action="store_true", help="4 x 50 MB and 1 x 200 MB, 1 round: a smoke test")
    parser.add_argument("--no-cluster", action="store_true", help="skip (c), the standalone cluster")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.partition_mb, args.single_mb = 4, 50, 200
    if args.runs is None:
        args.runs = 1 if args.quick else 5
    print(describe("bench_spark"), flush=True)
    reason = spark_missing()
    if reason is not None:
        raise SystemExit(f"cannot run the Spark benchmark: {reason}")
    import pyspark

    t_start = time.perf_counter()
    multi = DataSet("multi", args.partitions, args.partition_mb)
    single = DataSet("single", 1, args.single_mb)
    warm = DataSet("warmup", 2, 5)
    infos = {}
    for data in (warm, multi, single):
        started = time.perf_counter()
        infos[data.name] = info = build(data)
        print(f"{data.label()}: {info['log_bytes'] / 1e6:.0f} MB of log in {info['segments']} segments of "
              f"<= {info['segment_bytes'] / 1e6:.1f} MB, {info['records_per_partition']} records per partition "
              f"(built/checked in {time.perf_counter() - started:.1f} s)", flush=True)

    scratch = DATA / "spark-scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    shutil.rmtree(DATA / "spark-runs", ignore_errors=True)
    now_ms = int(time.time() * 1000) - 1000  # one pair of clocks for every run: their outputs must be equal
    spark_env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP=LOOPBACK,
                     PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                     SPARK_LOCAL_DIRS=str(scratch))
    env = Env(spark_env, DATA / "spark-numba-cache", scratch, now_ms, now_ms + 500)

    # Untimed: fill (or load) the numba cache the child and every executor use; warm the OS caches.
    for runner in ("single", "local[2]"):
        r = run_one(env, warm, runner, f"warmup-{TAGS[runner]}")
        print(f"warm-up {RUNNERS[runner]}: clean {r['clean_s']:.2f} s, wall {r['wall_s']:.1f} s", flush=True)

    sets = [(multi, infos["multi"], ["single", "pair", "local[2]", "local[4]",
                                     *([] if args.no_cluster else ["standalone"])]),
            (single, infos["single"], ["single", "local[2]", "local[4]"])]
    results: Results = {(d.name, r): [] for d, _, rs in sets for r in rs}
    limits: list[dict[str, float]] = []
    for round_ in range(args.runs):
        limits.append(machine_limit())
        print(f"round {round_ + 1}: (m) CPU loop: 1 process {limits[-1]['one_s']:.2f} s, 2 at once "
              f"{limits[-1]['two_s']:.2f} s: {limits[-1]['x']:.2f}x", flush=True)
        for data, _info, runners in sets:
            for runner in runners:
                r = run_one(env, data, runner, f"{data.name}-{TAGS[runner]}-{round_ + 1}")
                results[(data.name, runner)].append(r)
                print(f"round {round_ + 1}: {data.label()} {RUNNERS[runner]}: clean {r['clean_s']:.2f} s, "
                      f"wall {r['wall_s']:.1f} s{_round_details(runner, r)}", flush=True)

    verdicts = print_tables(sets, results, limits, args.runs)
    (DATA / "spark-results.json").write_text(json.dumps(
        {"args": vars(args), "data": infos, "now_ms": now_ms, "machine_limit": limits,
         "results": {f"{d}/{r}": v for (d, r), v in results.items()}}, indent=1))
    shutil.rmtree(DATA / "spark-runs", ignore_errors=True)
    passed = sum(ok for _, ok in verdicts)
    print(f"\n{passed} of {len(verdicts)} checks pass; total {time.perf_counter() - t_start:.0f} s "
          f"(job reports and Spark logs in {scratch}, all numbers in {DATA / 'spark-results.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
