"""The Spark job tests' harness: submitting ``spark_jobs/compact_logs.py`` with ``spark-submit`` (on ``local[*]`` or a
standalone cluster on 127.0.0.1), building the compacted topic it cleans, and comparing what it writes with the
single-process cleaner's result (``compact()``), byte for byte and record by record; a stand-in SparkContext that
runs the driver's stages in this process.

Shared by ``test_compact_job.py``, ``test_executor_kill.py``, ``test_split_kill.py``, ``test_multi_host.py`` and
``test_job_inputs.py``. The module-scoped ``spark`` fixture is imported by name into each test module that uses
it: each gets its own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import NUMBA_CACHE_ENV, run_cli

from kafkalog.format.compression import CompressionType
from kafkalog.format.scan import scan_batches, scan_records
from kafkalog.log import names
from kafkalog.log.store import LogStore
from kafkalog.maintenance import cleaner
from kafkalog.maintenance import compact as compact_module
from kafkalog.maintenance.compact import CompactReport
from tests.spark.processes import BIN, kill_tree, listening_addresses, spark_missing, standalone_cluster

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "spark_jobs" / "compact_logs.py"
TOPIC = "changes"
DAY = 86_400_000
CODECS = (None, CompressionType.LZ4, CompressionType.ZSTD)  # one per partition
NOT_COMPARED = {names.JOURNAL_FILE, names.PARTITION_LOCK_FILE, names.CLEANER_LOCK_FILE, names.ADMIN_LOCK_FILE}
JOB_TIMEOUT_S = 150


# --- Spark availability and process handling ----------------------------------------------------------
@dataclass(frozen=True)
class Spark:
    env: dict[str, str]
    numba_cache_dir: Path
    scratch: Path


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Spark:
    reason = spark_missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Spark tests")
        pytest.skip(reason)
    import pyspark

    scratch = tmp_path_factory.mktemp("spark")
    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_DIRS=str(scratch))
    # The run's one numba cache (tests/conftest.py), as an installation's jobs share one: only the first job
    # of the run pays numba's compilation, in its driver and in each Python worker.
    return Spark(env, Path(os.environ[NUMBA_CACHE_ENV]), scratch)


@dataclass
class JobRun:
    code: int
    report: dict[str, Any]
    stdout: str
    stderr: str
    seconds: float
    listening: set[str] = field(default_factory=set)

    def explain(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-6000:]}"


def start_job(spark: Spark, log_dirs: Sequence[Path], report: Path, now_ms: int, wall_ms: int, *,
              master: str = "local[2]", conf: Sequence[str] = (),
              job_args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    cmd = [str(BIN / "spark-submit"), "--master", master]
    for item in conf:
        cmd += ["--conf", item]
    cmd += [str(JOB), *[a for d in log_dirs for a in ("--log-dir", str(d))], "--now-ms", str(now_ms),
            "--wall-now-ms", str(wall_ms), "--report", str(report), "--numba-cache-dir", str(spark.numba_cache_dir),
            *job_args]
    with open(report.with_suffix(".stdout"), "wb") as out, open(report.with_suffix(".stderr"), "wb") as err:
        return subprocess.Popen(cmd, env=spark.env, stdout=out, stderr=err, cwd=spark.scratch,
                                start_new_session=True)


def submit_job(spark: Spark, log_dirs: Sequence[Path], report: Path, now_ms: int, wall_ms: int, *,
               master: str = "local[2]", conf: Sequence[str] = (), job_args: Sequence[str] = (),
               watch: Sequence[int] = ()) -> JobRun:
    """Run the job to its end, noting every address a process of the job (or of ``watch``) listens on."""
    started = time.perf_counter()
    proc = start_job(spark, log_dirs, report, now_ms, wall_ms, master=master, conf=conf, job_args=job_args)
    listening: set[str] = set()
    try:
        while proc.poll() is None:
            listening |= listening_addresses([proc.pid, *watch])
            if time.perf_counter() - started > JOB_TIMEOUT_S:
                pytest.fail(f"spark-submit still running after {JOB_TIMEOUT_S} s")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    seconds = time.perf_counter() - started
    doc = json.loads(report.read_text()) if report.exists() else {}
    return JobRun(proc.returncode, doc, report.with_suffix(".stdout").read_text(errors="replace"),
                  report.with_suffix(".stderr").read_text(errors="replace"), seconds, listening)


def standalone_cluster_of(spark: Spark, workdir: Path,
                          workers: int = 2) -> AbstractContextManager[tuple[str, list[int]]]:
    """A master and ``workers`` one-core workers on 127.0.0.1; yields (master URL, their pids)."""
    return standalone_cluster(spark.env, workdir, workers)


# --- logs ---------------------------------------------------------------------------------------------
def build_topic(log_dir: Path, *, segments: int, seed: int = 7) -> None:
    """A compacted topic of three partitions (one codec each) of ``segments`` ~2 KB segments over 80 keys
    with tombstones. The first half was cleaned once, at a clock three days old, so the delete horizons
    stamped on its tombstones have passed now; the second half is dirty and leaves keys 0-19 alone (so
    some of those tombstones are still their key's latest record, and go now)."""
    store = LogStore([log_dir], create_missing=True)
    store.create_topic(TOPIC, len(CODECS), {"cleanup.policy": "compact", "segment.bytes": "2048",
                                            "delete.retention.ms": str(DAY)})
    rng = random.Random(seed)
    base_ts = int(time.time() * 1000) - 4 * DAY
    n = 0

    def write(partition: int, count: int, first_key: int) -> None:
        nonlocal n
        with store.writable_log(store.locate(TOPIC, partition)) as log:
            target = len(log.segments) + count
            while len(log.segments) < target:
                rows = []
                for _ in range(4):
                    key = f"key-{rng.randrange(first_key, 80):03d}".encode()
                    value = None if rng.random() < 0.08 else f"value-{n}-".encode() + b"x" * rng.randrange(40)
                    rows.append((key, value, (), base_ts + n))
                    n += 1
                log.append_records(rows, batch_records=rng.choice([1, 2, 4]), compression=CODECS[partition],
                                   now_ms=base_ts)

    for partition in range(len(CODECS)):
        write(partition, segments // 2, 0)
        location = store.locate(TOPIC, partition)
        active = store.open_log(location, read_only=True).active_segment.base_offset
        cleaner.clean_partition(store, location, 0, active, now_ms=base_ts + DAY, wall_now_ms=base_ts + DAY)
        write(partition, segments - segments // 2, 20)
    for leftover in log_dir.rglob(f"*{names.DELETED_SUFFIX}"):
        leftover.unlink()  # as if swept


def copy_tree(template: Path, to: Path) -> Path:
    shutil.copytree(template, to)
    return to


def digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file but the journal and the (empty) lock files."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in NOT_COMPARED}


def compact_single_process(log_dir: Path, now_ms: int, wall_ms: int) -> CompactReport:
    """``compact()`` as ``kafkalog compact`` runs it, with its wall clock pinned for the comparison."""
    return compact_module.compact(LogStore([log_dir]), now_ms=now_ms, wall_now_ms=wall_ms)


def clocks() -> tuple[int, int]:
    now_ms = int(time.time() * 1000) - 1000
    return now_ms, now_ms + 500


Rec = tuple[int, bytes | None, bytes | None, int]


def read_records(log_dir: Path, partition: int) -> list[Rec]:
    store = LogStore([log_dir])
    out: list[Rec] = []
    for segment in store.open_log(store.locate(TOPIC, partition), read_only=True).segments:
        data = segment.log_path.read_bytes()
        recs = scan_records(data, scan_batches(data))
        out += [(int(recs.offset[i]), recs.key(i), recs.value(i), int(recs.timestamp[i])) for i in range(len(recs))]
    return out


def live_values(records: list[Rec]) -> dict[bytes | None, bytes]:
    """Each key's latest value; a key whose latest record is a tombstone has none (and the tombstone may
    go once its delete horizon has passed)."""
    latest = {key: value for _, key, value, _ in records}
    return {key: value for key, value in latest.items() if value is not None}


def segment_bases(partition_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in partition_dir.iterdir() if p.name.endswith(names.LOG_SUFFIX))


def recover_old_or_new(victim: Path, template: Path, partitions: Iterable[int], before: dict[int, list[Rec]],
                       reference: dict[int, list[Rec]],
                       groups: dict[int, list[tuple[list[int], int]]]) -> dict[int, tuple[int, int]]:
    """After a kill: ``kafkalog recover`` and ``verify`` pass, no partition lost a key's latest value, each of
    the single-process cleaner's segment groups holds either the records it held before (old) or those the
    cleaner made of them (new), and the records past the last cleaned group are untouched. Returns
    (new groups, old groups) per partition."""
    recovered = run_cli("recover", "--log-dir", str(victim))
    assert recovered.code == 0, recovered.err
    print(recovered.out.strip())
    verified = run_cli("verify", "--log-dir", str(victim))
    assert verified.code == 0, verified.out + verified.err
    counts: dict[int, tuple[int, int]] = {}
    for p in partitions:
        after = read_records(victim, p)
        assert live_values(after) == live_values(before[p]), f"partition {p} lost a key's latest value"
        old_bases = segment_bases(template / f"{TOPIC}-{p}")
        new_groups = old_groups = 0
        for old, _new in groups[p]:
            low = old[0]
            high = next((b for b in old_bases if b > old[-1]), old_bases[-1])
            got = [r for r in after if low <= r[0] < high]
            if got == [r for r in before[p] if low <= r[0] < high]:
                old_groups += 1
            else:
                assert got == [r for r in reference[p] if low <= r[0] < high], (p, old)
                new_groups += 1
        tail = old_bases[-1]
        assert [r for r in after if r[0] >= tail] == [r for r in before[p] if r[0] >= tail]
        counts[p] = (new_groups, old_groups)
    return counts


def print_timings(label: str, run: JobRun) -> None:
    print(f"\n{label}: spark-submit {run.seconds:.1f} s; report timings {run.report.get('timings')}")


def check_rounds(run: JobRun, partitions: int, parts: int = 0) -> set[str]:
    """Every partition was cleaned: in one task each (``parts`` 0), or in a key-map stage of ``parts`` tasks
    each and a rewrite stage of a task per group; the executors that did the work."""
    assert run.code == 0, run.explain()
    rounds = [p.get("round") for p in run.report["partitions"]]
    assert len(rounds) == partitions and all(r and r["map_parts"] == parts and r["groups"] > 1 and
                                             r["tasks"] == (parts + r["groups"] if parts else 1)
                                             for r in rounds), rounds
    stages = run.report["spark"]["stages"]
    assert stages["clean"]["tasks"] == partitions * max(1, parts) and stages["clean"]["error"] is None, stages
    if parts:
        assert stages["rewrite"]["tasks"] == sum(r["groups"] for r in rounds if r), stages
    return {e for r in rounds if r for e in r["executors"]}


# --- a SparkContext in this process ------------------------------------------------------------------
class LocalContext:
    """Stands in for a SparkContext: runs the mapped function here, in the calling thread, inside
    ``executor_view``, a context manager that changes what this "executor" sees of the file system."""

    master = applicationId = "in-process"

    def __init__(self, executor_view: Any) -> None:
        self.executor_view = executor_view
        self.defaultParallelism = 1
        self.job_groups: set[str] = set()

    def parallelize(self, data: Sequence[Any], slices: int) -> LocalRDD:
        return LocalRDD(self, list(data), None)

    def setJobGroup(self, group: str, description: str) -> None:  # noqa: N802 - SparkContext's name
        self.job_groups.add(group)

    def getConf(self) -> dict[str, str]:  # noqa: N802 - SparkContext's name
        return {}

    def stop(self) -> None:
        pass


@dataclass
class LocalRDD:
    sc: LocalContext
    data: list[Any]
    fn: Any

    def map(self, fn: Any) -> LocalRDD:
        return LocalRDD(self.sc, self.data, fn)

    def collect(self) -> list[Any]:
        with self.sc.executor_view():
            return [self.fn(x) for x in self.data]


def load_job() -> Any:
    spec = importlib.util.spec_from_file_location("compact_logs_job", JOB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
