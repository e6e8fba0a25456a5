"""Bad input to the Spark compaction job (``spark_jobs/compact_logs.py``, issue #35): a clear, specific
error, and nothing changed; no data lost.

- Output and scratch paths (``--scratch-dir``, ``--numba-cache-dir``, ``--report`` and their defaults)
  that are, lie inside or contain a log dir or a partition dir, directly or through a symlink, are
  refused with one line naming the option and the log dir, before anything is written; and the job
  removes nothing from its scratch dir but the key maps its own tasks wrote.
- Arguments and plans that cannot be right (a negative ``--max-clock-skew-ms``, a checkpoint reset to a
  negative offset, a plan that is a FIFO) are refused; a checkpoint reset of a partition the log dirs do
  not hold fails that partition, as a selected one does, not the job.
- A plan that went stale (its topic no longer compacted, a range past what is cleanable now) fails its
  partitions through the real job on ``local[2]`` and changes none of their files.

The refusals run the job under plain ``python`` with a ``SPARK_HOME`` that holds no Spark: a job that got
as far as starting Spark fails at once (``spark-failed``) instead of running, so a refusal is proven to come
before Spark. Only the last tests start Spark (marked ``spark``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import pytest
from conftest import run_cli, tree_digest
from job_harness import JOB, TOPIC, LocalContext, Spark, build_topic, clocks, load_job, submit_job

# The module-scoped fixture, used by name: each test module gets its own. Imported "as spark", a re-export
# that the tests' arguments of that name do not redefine (F811).
from job_harness import spark as spark

from kafkalog.log import names
from kafkalog.log.checkpoint import read_offset_checkpoint

SEGMENT = "00000000000000000000.log"
OPTIONS = ("--scratch-dir", "--numba-cache-dir", "--report")
# Where a path may point: into the store, in every way the issue names, or (control) outside it.
TARGETS = ("log-dir", "partition-dir", "segment", "parent", "symlink", "outside")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compacted topic of three partitions, half of each dirty (``job_harness.build_topic``)."""
    log_dir = tmp_path_factory.mktemp("template") / "logs"
    build_topic(log_dir, segments=4)
    return log_dir


def _store(template: Path, tmp_path: Path) -> Path:
    """``tmp_path/store/logs``, a copy of the template, and ``tmp_path/link``, a symlink to its partition 0."""
    log_dir = tmp_path / "store" / "logs"
    shutil.copytree(template, log_dir)
    (tmp_path / "link").symlink_to(log_dir / f"{TOPIC}-0")
    return log_dir


def _job(tmp_path: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """The job under plain ``python``, unable to start Spark (see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKALOG_")}
    env["SPARK_HOME"] = str(tmp_path / "no-spark-here")
    return subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, env=env,
                          timeout=timeout_s)


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The job's one line on stderr, having exited 1."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return lines[0]


# --- 1. output and scratch paths in the store --------------------------------------------------------------
def _paths(root: Path) -> list[str]:
    """Every file and directory under ``root``: ``tree_digest`` does not see an empty directory made."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _target(kind: str, log_dir: Path, tmp_path: Path) -> Path:
    return {"log-dir": log_dir, "partition-dir": log_dir / f"{TOPIC}-0", "segment": log_dir / f"{TOPIC}-0" / SEGMENT,
            "parent": log_dir.parent, "symlink": tmp_path / "link", "outside": tmp_path / "out" / "x"}[kind]


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("option", OPTIONS)
def test_output_and_scratch_paths_in_a_log_dir_are_refused(template: Path, tmp_path: Path, option: str,
                                                           kind: str) -> None:
    """The issue's reproduction (``--topic``, so every partition is selected) with each path-taking option
    pointing into the store: refused in one line naming the option and the log dir, no report written
    over the store, nothing changed. Pointing outside it (the control), the job passes the checks and
    fails only because it cannot start Spark here."""
    log_dir = _store(template, tmp_path)
    before, paths = tree_digest(log_dir.parent), _paths(log_dir.parent)
    now_ms, _ = clocks()
    target = _target(kind, log_dir, tmp_path)
    report = target if option == "--report" else tmp_path / "report.json"
    args = ["--log-dir", str(log_dir), "--topic", TOPIC, "--now-ms", str(now_ms), "--report", str(report)]
    if option != "--report":
        args += [option, str(target)]
    done = _job(tmp_path, *args)
    if kind == "outside":  # planning went on, and wrote the default numba cache beside the log dir
        assert done.returncode == 1 and json.loads(report.read_text())["status"] == "spark-failed", done.stderr
        assert tree_digest(log_dir) == {k[len("logs/"):]: v for k, v in before.items() if k.startswith("logs/")}
        return
    assert tree_digest(log_dir.parent) == before
    line = _refusal(done)
    assert line.startswith(f"compact_logs: error: {option} ") and str(log_dir.resolve()) in line, line
    if option == "--report":
        assert "no report" in done.stdout and not (tmp_path / "report.json").exists()
    else:
        doc = json.loads(report.read_text())
        assert doc["status"] == "refused" and doc["error"] in line and "spark" not in doc
    written = {report.name} if option != "--report" else set()
    assert {p.name for p in tmp_path.iterdir()} == {"store", "link"} | written
    assert _paths(log_dir.parent) == paths


def test_default_and_linked_partition_paths_are_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults (beside the first log dir) are checked as given paths are; so is the place a log dir's
    symlinked partition dir leads to (a partition kept on another volume); and so is the shared cache
    of ``$KAFKALOG_NUMBA_CACHE_DIR``."""
    job = load_job()
    monkeypatch.delenv(job.NUMBA_CACHE_ENV, raising=False)
    outer, inner, elsewhere = tmp_path / "a", tmp_path / "a" / "logs", tmp_path / "elsewhere"
    for d in (inner, elsewhere):
        d.mkdir(parents=True)
    (inner / f"{TOPIC}-9").symlink_to(elsewhere)
    args = job.parse_args(["--report", str(tmp_path / "r.json"), "--now-ms", "0"])
    with pytest.raises(job.JobError, match=r"^--numba-cache-dir \(default\) .* lies inside log dir "):
        job.job_dirs(args, [inner, outer])  # the defaults, beside the first log dir, are in the second
    args = job.parse_args(["--report", str(tmp_path / "r.json"), "--now-ms", "0",
                           "--scratch-dir", str(elsewhere / "scratch")])
    with pytest.raises(job.JobError) as refused:
        job.job_dirs(args, [inner])
    assert str(elsewhere) in str(refused.value) and f"log dir {inner}" in str(refused.value)
    assert job.job_dirs(job.parse_args(["--report", "r.json", "--now-ms", "0"]), [inner]) == \
        (str(outer / ".kafkalog-numba-cache"), str(outer / ".kafkalog-spark-scratch"))
    monkeypatch.setenv(job.NUMBA_CACHE_ENV, str(tmp_path / "cache"))
    assert job.job_dirs(job.parse_args(["--report", "r.json", "--now-ms", "0"]), [inner])[0] == \
        str(tmp_path / "cache")
    monkeypatch.setenv(job.NUMBA_CACHE_ENV, str(inner / "cache"))
    with pytest.raises(job.JobError, match=r"^--numba-cache-dir \(\$KAFKALOG_NUMBA_CACHE_DIR\) .* inside log dir "):
        job.job_dirs(job.parse_args(["--report", "r.json", "--now-ms", "0"]), [inner])


def _run_dir(scratch: Path, files: dict[str, str], *, locked: bool = False) -> tuple[Path, IO[str]]:
    """A run dir as the job makes one (its marker, flock-ed while its job lives) holding ``files``."""
    run = scratch / f"kafkalog-run-{uuid.uuid4().hex}"
    for name, text in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    marker = open(run / ".kafkalog-spark-run", "w")  # noqa: SIM115 - held for the test's length
    if locked:
        fcntl.flock(marker, fcntl.LOCK_EX)
    else:
        marker.close()
    return run, marker


def test_the_job_removes_only_the_key_maps_its_runs_wrote(template: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole driver in this process (``LocalContext``), key maps in parts. The scratch dir holds a
    directory named like a partition (the job used to remove ``<scratch>/<partition>``), a killed run's
    key maps (removed once the job holds their partitions' locks, then its directory), another killed
    run's maps beside a file of someone else's (the maps go, the file stays) and a live run's (untouched).
    The job's own run dir is gone at the end."""
    from kafkalog.maintenance import cleaning_tasks

    job = load_job()
    log_dir = _store(template, tmp_path)
    scratch = tmp_path / "scratch"
    (scratch / f"{TOPIC}-0").mkdir(parents=True)
    (scratch / f"{TOPIC}-0" / "keep.txt").write_text("not the job's")
    maps = {f"{TOPIC}-{p}/map-{i}-attempt-{7 + i}{suffix}": "x" for p in (1, 2) for i in (0, 1)
            for suffix in (".json", ".table.npy", ".arena.npy.tmp")}
    killed, _ = _run_dir(scratch, maps)
    half_killed, _ = _run_dir(scratch, {f"{TOPIC}-0/map-whole-pid-3.json": "x", f"{TOPIC}-0/notes.txt": "mine"})
    live, lock = _run_dir(scratch, {f"{TOPIC}-5/map-0-attempt-1.json": "x"}, locked=True)  # of no partition here
    monkeypatch.setattr(job, "start_spark", lambda args, cache_dir: LocalContext(contextlib.nullcontext))
    saved: list[Path] = []  # where the key-map tasks saved their parts
    map_part_task = cleaning_tasks.map_part_task

    def spy(store: Any, spec: Any, part: int, prefix: Path) -> Any:
        saved.append(prefix)
        return map_part_task(store, spec, part, prefix)

    monkeypatch.setattr(cleaning_tasks, "map_part_task", spy)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))  # run_task sets it if unset: restored after
    # Each partition's key map in parts: a budget of a third of its log, which is half dirty.
    budget = max(sum(f.stat().st_size for f in (log_dir / f"{TOPIC}-{p}").glob("*.log")) for p in range(3)) // 3
    now_ms, wall_ms = clocks()
    try:
        code = job.main(["--log-dir", str(log_dir), "--now-ms", str(now_ms), "--wall-now-ms", str(wall_ms),
                         "--report", str(tmp_path / "report.json"), "--numba-cache-dir", str(tmp_path / "cache"),
                         "--scratch-dir", str(scratch), "--map-memory", str(budget)])
        doc = json.loads((tmp_path / "report.json").read_text())
        assert code == 0 and doc["status"] == "ok", doc
        assert all(p["round"]["map_parts"] > 1 for p in doc["partitions"]), doc
        # In the run's own dir, one sub-directory per partition; none of them is left.
        [own] = {prefix.parent.parent for prefix in saved}
        assert own.parent == scratch and own not in (killed, half_killed, live) and not own.exists()
        assert {prefix.parent.name for prefix in saved} == {f"{TOPIC}-{p}" for p in range(3)}
        left = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*"))
        assert left == sorted([f"{TOPIC}-0", f"{TOPIC}-0/keep.txt",
                               half_killed.name, f"{half_killed.name}/.kafkalog-spark-run",
                               f"{half_killed.name}/{TOPIC}-0", f"{half_killed.name}/{TOPIC}-0/notes.txt",
                               live.name, f"{live.name}/.kafkalog-spark-run", f"{live.name}/{TOPIC}-5",
                               f"{live.name}/{TOPIC}-5/map-0-attempt-1.json"]), left
        assert not killed.exists()
    finally:
        lock.close()


# --- 2. arguments and plans that cannot be right ------------------------------------------------------------
@pytest.mark.parametrize("option", ["--max-clock-skew-ms", "--split-bytes", "--map-memory", "--byte-budget"])
def test_negative_numbers_are_refused_when_parsed(template: Path, tmp_path: Path, option: str) -> None:
    log_dir = _store(template, tmp_path)
    before = tree_digest(log_dir)
    now_ms, _ = clocks()
    done = _job(tmp_path, "--log-dir", str(log_dir), "--now-ms", str(now_ms), "--report",
                str(tmp_path / "report.json"), option, "-1")
    assert done.returncode == 1, done.stderr
    assert f"argument {option}: must be 0 or more, not -1" in done.stderr
    assert tree_digest(log_dir) == before and not (tmp_path / "report.json").exists()


def _plan(now_ms: int, **fields: Any) -> dict[str, Any]:
    return {"version": 1, "kind": "kafkalog-compaction-plan", "now_ms": now_ms, "topic": None, "partitions": None,
            "selected": [], "checkpoint_resets": [], "not_selected": [], "errors": [], **fields}


@pytest.mark.parametrize("resets", [
    [{"topic": TOPIC, "partition": 0, "offset": -5}],
    [{"topic": TOPIC, "partition": -1, "offset": 0}],
    [{"topic": TOPIC, "partition": 0, "offset": True}],
    None,
], ids=["offset-5", "partition-1", "offset-bool", "not-a-list"])
def test_a_plan_with_an_impossible_checkpoint_reset_is_refused(template: Path, tmp_path: Path,
                                                               resets: Any) -> None:
    log_dir = _store(template, tmp_path)
    before = tree_digest(log_dir)
    now_ms, _ = clocks()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(now_ms, checkpoint_resets=resets)))
    done = _job(tmp_path, "--log-dir", str(log_dir), "--plan", str(plan), "--report", str(tmp_path / "report.json"))
    line = _refusal(done)
    assert "checkpoint_resets" in line and str(plan) in line, line
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "refused"
    assert tree_digest(log_dir) == before


def test_a_plan_that_is_a_fifo_is_refused_without_blocking(template: Path, tmp_path: Path) -> None:
    log_dir = _store(template, tmp_path)
    before = tree_digest(log_dir)
    os.mkfifo(tmp_path / "plan.json")
    done = _job(tmp_path, "--log-dir", str(log_dir), "--plan", str(tmp_path / "plan.json"), "--report",
                str(tmp_path / "report.json"), timeout_s=30)
    assert "not a regular file" in _refusal(done)
    assert tree_digest(log_dir) == before


@pytest.mark.parametrize("failures_ok", [False, True])
def test_a_checkpoint_reset_of_an_unknown_partition_fails_that_partition(template: Path, tmp_path: Path,
                                                                         failures_ok: bool) -> None:
    """As a selected partition the log dirs do not hold: reported failed (exit 2, or 0 with
    ``--partition-failures-ok``), no traceback; the plan's other resets are applied."""
    log_dir = _store(template, tmp_path)
    checkpoint = log_dir / names.CLEANER_OFFSET_CHECKPOINT
    assert read_offset_checkpoint(checkpoint)[(TOPIC, 0)] > 0
    now_ms, _ = clocks()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(now_ms, checkpoint_resets=[{"topic": "gone", "partition": 3, "offset": 10},
                                                                {"topic": TOPIC, "partition": 0, "offset": 0}])))
    report = tmp_path / "report.json"
    done = _job(tmp_path, "--log-dir", str(log_dir), "--plan", str(plan), "--report", str(report),
                *(["--partition-failures-ok"] if failures_ok else []))
    assert done.returncode == (0 if failures_ok else 2), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    doc = json.loads(report.read_text())
    assert doc["status"] == "partitions-failed" and "spark" not in doc
    [failed] = doc["partitions"]
    assert (failed["topic"], failed["partition"], failed["status"], failed["stage"]) == \
        ("gone", 3, "failed", "checkpoint-reset")
    assert "partition gone-3 does not exist" in failed["error"], failed
    assert read_offset_checkpoint(checkpoint)[(TOPIC, 0)] == 0


# --- 3. a stale plan through the real job -------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_a_stale_plan_fails_its_partitions_and_changes_nothing(template: Path, tmp_path: Path, spark: Spark) -> None:
    """``kafkalog compact --dry-run --json`` writes the plan; the topic then stops being compacted: every
    partition fails with the library's reason (exit 2) and no file changes. The topic compacted again and
    one range raised past what is cleanable now: that partition fails (exit 0 with
    ``--partition-failures-ok``) and keeps its files; the others are cleaned."""
    log_dir = _store(template, tmp_path)
    now_ms, wall_ms = clocks()
    made = run_cli("compact", "--log-dir", str(log_dir), "--dry-run", "--json", "--now-ms", str(now_ms))
    assert made.code == 0, made.err
    plan = json.loads(made.out)
    assert sorted(s["partition"] for s in plan["selected"]) == [0, 1, 2]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    altered = run_cli("topics", "alter", "--log-dir", str(log_dir), "--topic", TOPIC, "--config",
                      "cleanup.policy=delete")
    assert altered.code == 0, altered.err
    before = tree_digest(log_dir)

    run = submit_job(spark, [log_dir], tmp_path / "stale.json", now_ms, wall_ms,
                     job_args=["--plan", str(tmp_path / "plan.json")])
    assert run.code == 2, run.explain()
    assert [(p["partition"], p["status"]) for p in run.report["partitions"]] == [(p, "failed") for p in range(3)]
    for p in run.report["partitions"]:
        assert "cleanup.policy=delete is not compacted any more" in p["error"], p
    assert tree_digest(log_dir) == before

    assert run_cli("topics", "alter", "--log-dir", str(log_dir), "--topic", TOPIC, "--config",
                   "cleanup.policy=compact").code == 0
    plan["selected"][0]["first_uncleanable_offset"] = 10**12
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    raised = plan["selected"][0]["partition"]
    before = tree_digest(log_dir / f"{TOPIC}-{raised}")
    run = submit_job(spark, [log_dir], tmp_path / "raised.json", now_ms, wall_ms,
                     job_args=["--plan", str(tmp_path / "plan.json"), "--partition-failures-ok"])
    assert run.code == 0, run.explain()
    by_partition = {p["partition"]: p for p in run.report["partitions"]}
    assert by_partition[raised]["status"] == "failed" and "reaches past what is cleanable now" in \
        by_partition[raised]["error"], by_partition[raised]
    assert sorted(p for p, doc in by_partition.items() if doc["status"] == "cleaned") == \
        sorted({0, 1, 2} - {raised})
    assert tree_digest(log_dir / f"{TOPIC}-{raised}") == before
