"""Every surface that compacts decides as ``kafkalog compact`` does, on damaged partitions and on the
layouts where kafkalog diverged from Kafka's tests (issue #34, acceptance):

- topic ``bad``: one partition per damage of the corruption matrix (``tests/test_corruption_matrix.py``)
  and a healthy one; topics ``commit``, ``abort``, ``rebuilt``, ``span`` and ``sparse``: the layouts of
  points 1-4 (``layouts.py``; ``rebuilt`` after ``kafkalog recover --full`` rebuilt its ``.txnindex``);
- the Spark job on ``local[2]`` and on a standalone cluster, and ``kafkalog_compact`` through Airflow,
  each from the store as ``kafkalog retention apply`` + ``retention sweep`` left it, end with the files
  ``kafkalog compact`` writes; a damaged partition that the CLI refuses fails alone on each, its error
  naming the damaged file, and is left as it was;
- one ``kafkalog_cleanup`` cycle through Airflow ends with the CLI's files and fails naming each
  partition the CLI refused.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import layouts
import pytest
from conftest import run_cli

from kafkalog.cycle.documents import read_json
from kafkalog.format.batch import ControlType
from kafkalog.log.store import LogStore
from tests.pipeline.helpers import dag_test, live_files, migrated_env, require_spark, run_dir
from tests.spark.processes import BIN, standalone_cluster
from tests.test_corruption_matrix import CORRUPTIONS, DAMAGED, expected

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]
HOUR_MS = 3_600_000
BAD = "bad"
DAMAGES = list(CORRUPTIONS)  # partition i of BAD has damage i; the last partition is healthy
JOB = Path(__file__).resolve().parents[2] / "spark_jobs" / "compact_logs.py"


def _partition(i: int) -> str:
    return f"{BAD}-{i}"


def _refused() -> list[str]:
    """The partitions ``kafkalog compact`` refuses (the corruption matrix's answers)."""
    return [_partition(i) for i, damage in enumerate(DAMAGES) if expected(damage, "compact") == "REFUSED"]


class Store:
    """The store and its clocks: the cycle's clock five minutes back, a pinned wall clock after it."""

    def __init__(self, root: Path) -> None:
        wall = int(time.time() * 1000)
        self.now_ms, self.wall_ms = wall - 300_000, wall - 240_000
        self.root = root
        self.base = root / "base"
        self.broker = root / "server.properties"
        self.broker.write_text("log.segment.delete.delay.ms=1000\n")
        self.named: dict[str, str] = {}  # partition -> the file its damage's message must name

    def cli(self, log_dir: Path, *args: str) -> int:
        return run_cli(*args, "--log-dir", str(log_dir), "--config-file", str(self.broker)).code

    def build(self) -> None:
        self.base.mkdir(parents=True)
        assert run_cli("topics", "create", "--log-dir", str(self.base), "--topic", BAD, "--partitions",
                       str(len(DAMAGES) + 1), "--config", "cleanup.policy=compact,delete", "--config",
                       "segment.bytes=2048", "--config", "retention.ms=3600000", "--config",
                       "min.cleanable.dirty.ratio=0.01").code == 0
        store = LogStore([self.base])
        for p in range(len(DAMAGES) + 1):  # as the corruption matrix's store: 200 expired records, 200 recent
            with store.writable_log(store.locate(BAD, p)) as log:
                for ts, first in ((self.now_ms - 10 * HOUR_MS, 0), (self.now_ms - 60_000, 200)):
                    log.append_records([(f"k{i % 20}".encode(), f"v{i}".encode(), (), ts)
                                        for i in range(first, first + 200)], batch_records=10, now_ms=ts)
            assert (self.base / _partition(p) / f"{DAMAGED}.log").is_file()
        layouts.transaction_spanning_segments(self.base, ControlType.COMMIT, "commit")
        layouts.transaction_spanning_segments(self.base, ControlType.ABORT, "abort")
        layouts.abort_of_a_transaction_opened_earlier(self.base, "rebuilt")
        layouts.group_span_beyond_max_int(self.base, "span")
        layouts.sparse_offsets_and_empty_segments(self.base, "sparse")
        assert self.cli(self.base, "recover", "--full") == 0  # rebuilds rebuilt-0's .txnindex (point 2)
        for i, damage in enumerate(DAMAGES):
            self.named[_partition(i)] = CORRUPTIONS[damage](self.base / _partition(i))

    def copy(self, name: str, source: Path | None = None) -> Path:
        target = self.root / name
        shutil.copytree(source or self.base, target, symlinks=True, copy_function=_copy_file)
        return target

    def retention(self, log_dir: Path) -> Path:
        """``retention apply`` at the cycle's clock, then ``retention sweep`` once the delay has passed."""
        self.cli(log_dir, "retention", "apply", "--now-ms", str(self.now_ms))  # damaged partitions may refuse
        time.sleep(1.5)
        self.cli(log_dir, "retention", "sweep")
        return log_dir


def _copy_file(source: str, target: str) -> None:
    """``shutil.copy2``, but a FIFO (one of the damages) is made anew instead of read."""
    if stat.S_ISFIFO(os.lstat(source).st_mode):
        os.mkfifo(target)
    else:
        shutil.copy2(source, target)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    require_spark()
    built = Store(tmp_path_factory.mktemp("surfaces"))
    built.build()
    retained = built.retention(built.copy("retained"))
    cli = built.copy("cli", retained)
    assert built.cli(cli, "compact", "--now-ms", str(built.now_ms), "--wall-now-ms", str(built.wall_ms)) == 1
    return built


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return migrated_env(tmp_path_factory.mktemp("airflow"))


def _spark_env(root: Path) -> dict[str, str]:
    import pyspark

    return dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
                PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                SPARK_LOCAL_DIRS=str(root / "spark-local"))


def _spark_job(store: Store, log_dir: Path, master: str, env: dict[str, str], *args: str) -> dict[str, object]:
    report = log_dir.parent / f"{log_dir.name}-report.json"
    done = subprocess.run([str(BIN / "spark-submit"), "--master", master, str(JOB), "--log-dir", str(log_dir),
                           "--config-file", str(store.broker), "--now-ms", str(store.now_ms), "--wall-now-ms",
                           str(store.wall_ms), "--report", str(report), "--partition-failures-ok", *args],
                          env=env, capture_output=True, text=True, timeout=600, cwd=store.root)
    assert done.returncode == 0, done.stderr[-4000:]
    doc: dict[str, object] = json.loads(report.read_text())
    return doc


def _check_failures(store: Store, partitions: list[dict[str, object]]) -> None:
    """The partitions that failed are those the CLI refuses, each naming its damaged file."""
    failed = {f"{p['topic']}-{p['partition']}": str(p["error"]) for p in partitions if not p["ok"]}
    assert sorted(failed) == sorted(_refused()), failed
    for name, error in failed.items():
        assert store.named[name] in error, (name, error)


def _same_as_cli(store: Store, log_dir: Path) -> None:
    assert live_files(log_dir) == live_files(store.root / "cli")


@pytest.mark.parametrize("cluster", ["local[2]", "local[2], every round split", "standalone"])
def test_the_spark_job_writes_what_the_cli_writes_and_fails_what_it_refuses(store: Store, cluster: str) -> None:
    """On a split round each damaged segment's CRCs are checked by the map part whose slice it is in,
    and the group tasks rely on that: the damage is still caught."""
    log_dir = store.copy(f"spark-{cluster.split(',')[0].replace('[', '').replace(']', '')}-{len(cluster)}",
                         store.root / "retained")
    env = _spark_env(store.root)
    if cluster == "standalone":
        with standalone_cluster(env, store.root / "cluster") as (url, _pids):
            doc = _spark_job(store, log_dir, url, env)
        assert len(doc["spark"]["executors_seen"]) == 2  # type: ignore[index]
    else:
        split = ("--split-bytes", "1") if "split" in cluster else ()
        doc = _spark_job(store, log_dir, "local[2]", env, *split)
        if split:
            assert doc["spark"]["stages"]["rewrite"]["tasks"] > 0  # type: ignore[index]
    _check_failures(store, doc["partitions"])  # type: ignore[arg-type]
    _same_as_cli(store, log_dir)


def test_kafkalog_compact_through_airflow_writes_what_compact_topic_writes(store: Store,
                                                                          airflow: dict[str, str]) -> None:
    by_dag = store.copy("dag-compact", store.root / "retained")
    by_cli = store.copy("cli-compact-topic", store.root / "retained")
    assert store.cli(by_cli, "compact", "--topic", BAD, "--now-ms", str(store.now_ms),
                     "--wall-now-ms", str(store.wall_ms)) == 1
    run = dag_test(airflow, "kafkalog_compact", store.now_ms, {"log_dirs": [str(by_dag)], "topic": BAD,
                                                               "config_file": str(store.broker),
                                                               "wall_now_ms": store.wall_ms})
    assert run.state == "failed", run.explain()
    report = read_json(run_dir(airflow, "kafkalog_compact", run.run_id) / "compaction-report.json")
    _check_failures(store, report["partitions"])
    assert live_files(by_dag) == live_files(by_cli)


def test_one_cleanup_cycle_through_airflow_ends_as_the_cli_and_fails_naming_the_damaged(
        store: Store, airflow: dict[str, str]) -> None:
    by_dag = store.copy("dag-cleanup")
    run = dag_test(airflow, "kafkalog_cleanup", store.now_ms, {"log_dirs": [str(by_dag)],
                                                               "config_file": str(store.broker),
                                                               "wall_now_ms": store.wall_ms})
    assert run.state == "failed", run.explain()
    assert run.tasks["report"] == "failed", run.tasks
    failed_line = next(line for line in run.output.splitlines()
                       if "the cycle failed in partitions" in line and "join" not in line)  # not the source
    for name in _refused():
        assert name in failed_line, (name, failed_line)
    for healthy in (_partition(len(DAMAGES)), "commit-0", "abort-0", "rebuilt-0", "span-0", "sparse-0"):
        assert healthy not in failed_line.split(" and tasks")[0], failed_line
    _same_as_cli(store, by_dag)
