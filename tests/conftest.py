"""Shared test helpers: where the Kafka-written fixtures are, and running the CLI in-process."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests write and fsync files: a per-example deadline would time the disk and the other tests
# running beside them, not the code (speed is measured in benchmarks/).
settings.register_profile("kafkalog", deadline=None)
settings.load_profile("kafkalog")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "kafka-real"
NUMBA_CACHE_ENV = "KAFKALOG_NUMBA_CACHE_DIR"  # spark_jobs/compact_logs.py's default --numba-cache-dir
DAG_FILE_PROCESS_INTERVAL_ENV = "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"


def pytest_configure(config: pytest.Config) -> None:
    """One numba cache for every Spark job of the run (and of its xdist workers, which inherit it), as
    one installation's jobs share one: a cache beside each test's own store would compile the kernels
    again in every job's driver and Python workers. Removed at the end of the run."""
    if NUMBA_CACHE_ENV not in os.environ:
        os.environ[NUMBA_CACHE_ENV] = tempfile.mkdtemp(prefix="kafkalog-test-numba-")
        config.stash[_NUMBA_CACHE_KEY] = os.environ[NUMBA_CACHE_ENV]
    # No DAG file changes while a test's Airflow runs: its DAG processor parses each file when it starts, not
    # again every 30 s (Airflow's default), which an idle installation spends about half its CPU on.
    os.environ.setdefault(DAG_FILE_PROCESS_INTERVAL_ENV, "3600")


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_NUMBA_CACHE_KEY, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(NUMBA_CACHE_ENV, None)


_NUMBA_CACHE_KEY = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules that start Airflow or Spark first, the slow ones first of them, each module's tests kept
    together and in order. ``make test`` hands whole modules to its workers in this order (``--dist
    loadfile --no-loadscope-reorder``): the long modules start at once and the short ones fill in at the
    end, rather than a long one starting when the others are done."""
    def rank(item: pytest.Item) -> int:
        marks = {mark.name for mark in item.iter_markers()}
        if not marks & {"airflow", "spark"}:
            return 2
        return 0 if "slow" in marks else 1

    module_rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        module_rank[module] = min(module_rank.get(module, 2), rank(item))
    items.sort(key=lambda item: module_rank[item.nodeid.split("::")[0]])  # stable: each module's order kept


def kafka_fixtures_root() -> Path:
    """The read-only log dirs written by Apache Kafka brokers (never written to by tests).

    Found at ``$KAFKALOG_FIXTURES`` or ``../shared/fixtures/kafka-real`` beside the repo. A clone
    elsewhere skips the tests that need them; CI (``CI=true``) must have them and fails instead.
    """
    root = Path(os.environ.get("KAFKALOG_FIXTURES", DEFAULT_FIXTURES))
    if not root.is_dir():
        reason = f"Kafka-written fixtures not found at {root} (set KAFKALOG_FIXTURES)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; CI must run them")
        pytest.skip(reason)
    return root


@dataclass(frozen=True)
class FixtureDir:
    name: str
    data_dir: Path


def kafka_data_dirs() -> list[FixtureDir]:
    root = kafka_fixtures_root()
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        manifest = json.loads((folder / "MANIFEST.json").read_text())
        out.append(FixtureDir(folder.name, folder / manifest["data_dir"]))
    return out


@pytest.fixture
def fixtures_root() -> Path:
    return kafka_fixtures_root()


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, stdin: str = "") -> CliResult:
    """Run ``kafkalog`` in this process (fast) with stdin, capturing stdout/stderr."""
    from kafkalog.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse usage errors
                code = int(exc.code or 0)
    finally:
        sys.stdin = old_stdin
    return CliResult(code, out.getvalue(), err.getvalue())


def tree_digest(root: Path) -> dict[str, str]:
    """Path → sha256 of every file under ``root`` (to prove a command changed nothing)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def iter_log_files(root: Path) -> Iterator[Path]:
    yield from sorted(root.rglob("*.log"))


# What a test may start only when it is marked so: ``make test-fast`` (``-m "not airflow and not spark"``)
# must start none of them. An unmarked test that tries fails at once, naming the command.
_ENGINE_MARKERS = {"airflow": ("airflow", "dag_test_runner.py"), "spark": ("spark-submit", "spark-class", "java")}


def _engine_in(argv: object) -> str | None:
    args = [str(argv)] if isinstance(argv, str | bytes | os.PathLike) else [str(a) for a in argv]  # type: ignore[union-attr]
    words = [Path(a).name for a in args] + [w for a in args for w in a.split()]
    for marker, programs in _ENGINE_MARKERS.items():
        if any(w in programs for w in words) or (marker == "airflow" and any(
                "import airflow" in a or "from airflow" in a for a in args)):
            return marker
    return None


@pytest.fixture(autouse=True)
def _engines_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    allowed = {m for m in _ENGINE_MARKERS if request.node.get_closest_marker(m)}
    if allowed == set(_ENGINE_MARKERS):
        return
    original = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        marker = _engine_in(args)
        if marker is not None and marker not in allowed:
            raise AssertionError(f"{request.node.nodeid} starts {marker} ({str(args)[:200]}) but is not marked "
                                 f"@pytest.mark.{marker}: make test-fast must start no {marker} process")
        original(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
