"""Compact Kafka-format logs with Spark: plan on the driver, clean on the executors.

    spark-submit spark_jobs/compact_logs.py --log-dir DIR [--log-dir DIR2] \\
        [--plan PLAN.json | --topic T [--partition P]] --now-ms MS --report REPORT.json [--config-file F]

The driver checks the log dirs, builds the compaction plan exactly as ``kafkalog compact`` does (or
reads one written by ``kafkalog compact --dry-run --json``), checks from the executors that they see
the same log dirs, then cleans every selected partition in one stage of one task per core
(``round_task``). The stage is queued behind the executor probe, so its tasks are up and waiting
when the probe's answers are in; the driver then takes each partition's cleaner lock and plans its
round, handing the plans to the tasks as it makes them. Any task builds any partition's key
map (from its last segment back) or writes the segment groups a map has passed, so every core has
work until the last group; the driver swaps each partition in as soon as its groups are all written.
Tasks get paths and offsets and return a small dict: no record bytes go through Spark. Every task
uses the driver's ``now_ms`` and one ``wall_now_ms`` chosen on the driver, so the segments written are
byte for byte those of ``kafkalog compact`` in one process for the same input and clocks.

Exit codes: 0 every planned partition was cleaned; 1 the job refused to run or Spark failed (bad
arguments, a log dir missing or not shared with the executors, an unreadable plan); 2 it ran, and at
least one partition failed or was skipped (locked by another cleaner, corrupt). The JSON report is
written in every case where the arguments name one.

Crash story: each partition is cleaned by the library's ``.cleaned -> .swap`` protocol under the
partition's cleaner lock (the driver's), so killing the job (or an executor) at any point leaves every partition
recoverable to old or new by ``kafkalog recover``; running the job again finishes the work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

# Executors get these from this job; the driver JVM (in local mode, also the executor) is started
# before this code runs, so spark-submit must pass them (kafkalog.pipeline.spark does).
from kafkalog.pipeline.spark import LEAN_JVM_OPTIONS  # light: neither numba nor pyspark

EXIT_OK, EXIT_REFUSED, EXIT_PARTITIONS_FAILED = 0, 1, 2
REPORT_VERSION = 1
LOOPBACK = "127.0.0.1"
DEFAULT_NUMBA_CACHE = ".kafkalog-numba-cache"  # beside the first log dir, not inside it (unknown file)
DEFAULT_SCRATCH = ".kafkalog-spark-scratch"
MIN_SPLIT_BYTES = 64 << 20  # below this, a key map in parts costs more than it saves
DRIVER_POLL_S = 0.01  # how often the driver looks for rounds to swap in while the stage runs
PROBE_GROUP = "kafkalog-executor-probe"  # the probe's Spark job group: the cleaning stage is queued behind it
SHARED_HINT = ("every log dir must be on a volume mounted at the same path on the driver and on every "
               "Spark worker (NFS, or the deployment's shared log volume)")

Targets = list[dict[str, Any]]  # one small JSON-able dict per partition


class JobError(Exception):
    """The job refuses to run; the message says why and what to do."""


# --- arguments -------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 1, not argparse's 2: 2 means "see the report"
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message}\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog="compact_logs.py", description="Compact Kafka-format logs on Spark, one task per core.")
    p.add_argument("--log-dir", action="append", metavar="DIR",
                   help="a log directory shared by driver and executors (repeatable; env KAFKALOG_LOG_DIRS)")
    p.add_argument("--config-file", metavar="FILE",
                   help="broker defaults, server.properties style (env KAFKALOG_CONFIG)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--plan", metavar="PLAN.json", help="the output of `kafkalog compact --dry-run --json`")
    which.add_argument("--topic", help="clean this topic's cleanable ranges whatever their dirty ratio")
    p.add_argument("--partition", type=int, help="with --topic: only this partition")
    p.add_argument("--now-ms", type=int, help="the cycle's clock (required unless the plan carries now_ms)")
    p.add_argument("--wall-now-ms", type=int,
                   help="wall clock stamped into new tombstone horizons (default: the driver's clock at start)")
    p.add_argument("--byte-budget", type=int, help="at most this many cleanable bytes (the cleaner manager's cap)")
    p.add_argument("--run-id", help="journal run id (default: a new one)")
    p.add_argument("--report", required=True, metavar="REPORT.json", help="where to write the JSON report")
    p.add_argument("--master", help="Spark master (default: spark-submit's --master, else local[*])")
    p.add_argument("--numba-cache-dir", metavar="DIR",
                   help="compiled-kernel cache writable by every executor "
                        f"(default: <first log dir>/../{DEFAULT_NUMBA_CACHE})")
    p.add_argument("--scratch-dir", metavar="DIR",
                   help="where the tasks share each partition's final bits, group results and key-map parts (a "
                        "dir every executor sees, with flock) "
                        f"(default: <first log dir>/../{DEFAULT_SCRATCH})")
    p.add_argument("--split-bytes", type=int, metavar="N",
                   help="build a partition's key map in parts, by several tasks at once (4 or more cores), when the "
                        "bytes it recopies exceed N (0: never; default: its fair share of the cores, total / default "
                        "parallelism, and at least 64 MiB)")
    p.add_argument("--partition-failures-ok", action="store_true",
                   help="exit 0 when the job ran even if partitions failed (the report names them): for callers "
                        "that read the report, such as the pipeline's report task")
    p.add_argument("--ui", action="store_true",
                   help="enable the Spark UI; it listens on $SPARK_LOCAL_IP, which must then be set")
    args = p.parse_args(argv)
    if args.partition is not None and args.topic is None:
        p.error("--partition needs --topic")
    if args.plan is None and args.now_ms is None:
        p.error("--now-ms is required (the cycle's clock), unless --plan gives it")
    return args


# --- executor side (pickled by value with this module; imports stay inside) ------------------------------
def executor_name() -> str:
    """This Python worker's executor: its work dir on a cluster (unique per executor), else the driver's."""
    work_dir = os.environ.get("SPARK_EXECUTOR_DIRS", "")
    return os.path.basename(work_dir.split(os.pathsep)[0]) if work_dir else "driver"


def _set_numba_cache(cache_dir: str) -> None:
    # numba reads NUMBA_CACHE_DIR when first imported; spark.executorEnv sets it for new Python workers.
    os.environ.setdefault("NUMBA_CACHE_DIR", cache_dir)


def probe_dirs(log_dirs: Sequence[str], expected: dict[str, list[str]], cache_dir: str,
               scratch_dir: str = "") -> dict[str, Any]:
    """What one executor sees of the log dirs, the partitions to clean, the numba cache and scratch dirs."""
    seen: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "executor": executor_name(),
                            "dirs": {}}
    for d in log_dirs:
        path = Path(d)
        problems = []
        if not path.is_dir():
            problems.append("does not exist or is not a directory")
        else:
            if not os.access(path, os.R_OK | os.X_OK | os.W_OK):
                problems.append("is not readable and writable")
            missing = [name for name in expected.get(d, []) if not (path / name).is_dir()]
            if missing:
                problems.append(f"lacks partition directories the driver sees: {', '.join(missing[:5])}")
        seen["dirs"][d] = problems
    try:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        seen["cache_problem"] = None if os.access(cache_dir, os.W_OK) else "is not writable"
    except OSError as exc:
        seen["cache_problem"] = f"cannot be created ({exc.strerror})"
    seen["scratch_problem"] = None
    if scratch_dir and not (os.path.isdir(scratch_dir) and os.access(scratch_dir, os.W_OK | os.X_OK)):
        seen["scratch_problem"] = "does not exist or is not writable"
    # This Python worker will run cleaning tasks: load the compiled kernels now, once, rather than in
    # the first task it runs (the time is reported with the probe, not hidden).
    try:
        _set_numba_cache(cache_dir)
        from kafkalog.maintenance.warmup import warm

        seen["warm_s"] = warm()
    except Exception as exc:  # noqa: BLE001 - the cleaning tasks will report what is wrong
        seen["warm_s"], seen["warm_error"] = None, f"{type(exc).__name__}: {exc}"
    time.sleep(0.05)  # keep each probe task busy a moment, so the probes spread over the executors
    return seen


def round_task(item: dict[str, Any]) -> dict[str, Any]:
    """One worker of the job's cleaning stage (``kafkalog.maintenance.split_clean.run_split_task``): the
    ready segment groups and the free key-map parts of every round, until each round is complete or
    failed. A round's failure is published on its board; anything else comes back as a dict."""
    _set_numba_cache(item["numba_cache_dir"])
    started, usage = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {"ok": False, "error": None, "executor": executor_name(), "host": socket.gethostname(),
                           "pid": os.getpid(), "task_started_at": started}
    try:
        from kafkalog.log.config import BrokerConfig
        from kafkalog.log.store import LogStore
        from kafkalog.maintenance import split_clean
        from kafkalog.maintenance.warmup import warm
    except ImportError as exc:
        out.update(error=f"cannot import kafkalog on executor {socket.gethostname()} ({exc}); "
                         f"spark.pyspark.python must be a Python with kafkalog installed", task_finished_at=time.time())
        return out
    try:
        warm()  # idempotent: free after the probe's; a worker that got no probe task loads and freezes here
        for d in item["log_dirs"]:
            if not os.path.isdir(d):
                raise FileNotFoundError(f"log dir {d} does not exist on executor {socket.gethostname()}: {SHARED_HINT}")
        store = LogStore(item["log_dirs"], BrokerConfig.from_properties(item["broker_properties"]))
        out.update(split_clean.run_split_task(store, [], executor_name(), Path(item["run_dir"])))
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported with the rounds it leaves undone
        out.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8))
    out["task_finished_at"] = time.time()
    end = resource.getrusage(resource.RUSAGE_SELF)
    out.update(user_s=round(end.ru_utime - usage.ru_utime, 3), sys_s=round(end.ru_stime - usage.ru_stime, 3),
               minor_faults=end.ru_minflt - usage.ru_minflt, switches=end.ru_nivcsw - usage.ru_nivcsw)
    return out


# --- driver: checks and plan -----------------------------------------------------------------------------
def resolve_log_dirs(args: argparse.Namespace, broker_log_dirs: Sequence[str]) -> list[str]:
    dirs = list(args.log_dir or [])
    if not dirs and os.environ.get("KAFKALOG_LOG_DIRS"):
        dirs = [d.strip() for d in os.environ["KAFKALOG_LOG_DIRS"].split(",") if d.strip()]
    if not dirs:
        dirs = list(broker_log_dirs)
    if not dirs:
        raise JobError("no log directory given: pass --log-dir DIR or set KAFKALOG_LOG_DIRS")
    out = []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            raise JobError(f"log dir {d} does not exist or is not a directory (on the driver); {SHARED_HINT}")
        if not os.access(path, os.R_OK | os.X_OK | os.W_OK):
            raise JobError(f"log dir {d} is not readable and writable by this user on the driver")
        out.append(str(path.resolve()))
    return out


def check_clocks(now_ms: int, wall_now_ms: int, driver_wall_ms: int) -> None:
    if now_ms < 0:
        raise JobError(f"--now-ms {now_ms}: must not be negative")
    if now_ms > driver_wall_ms:
        raise JobError(f"--now-ms {now_ms} is in the future (wall clock {driver_wall_ms}); a cycle may never "
                       "decide more than is due now")
    if wall_now_ms < now_ms:
        raise JobError(f"--wall-now-ms {wall_now_ms} is before --now-ms {now_ms}; the cycle's clock is never "
                       "ahead of the wall clock")


def plan_targets(doc: dict[str, Any]) -> tuple[Targets, Targets]:
    """(targets, plan-time errors) of a compaction plan (``kafkalog.pipeline.plans``)."""
    targets = [{k: t[k] for k in ("topic", "partition", "first_dirty_offset", "first_uncleanable_offset")}
               for t in doc["selected"]]
    errors = [{"topic": e.get("topic"), "partition": e.get("partition"), "ok": False, "status": "failed",
               "stage": "plan", "error": e.get("error")} for e in doc.get("errors") or [] if isinstance(e, dict)]
    return targets, errors


def read_plan_file(path: str) -> dict[str, Any]:
    from kafkalog.pipeline.plans import PlanError, read_compaction_plan

    try:
        return read_compaction_plan(path)
    except PlanError as exc:
        raise JobError(str(exc)) from None


def build_plan(store: Any, args: argparse.Namespace, now_ms: int) -> dict[str, Any]:
    """What ``kafkalog compact`` would clean now, as a compaction plan."""
    from kafkalog.pipeline.plans import plan_compaction

    partitions = None if args.partition is None else [args.partition]
    return plan_compaction(store, now_ms=now_ms, topic=args.topic, partitions=partitions, byte_budget=args.byte_budget)


# --- driver: Spark ---------------------------------------------------------------------------------------
def start_spark(args: argparse.Namespace, numba_cache_dir: str) -> Any:
    # pyspark warns about the pinned pandas 3 on import; this job uses no pandas API.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # for a JVM this process launches (plain `python`)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python (SparkContext.pythonExec)
    # Read only when this process launches the JVM itself (plain `python`, not spark-submit).
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f'--driver-java-options "{LEAN_JVM_OPTIONS}" pyspark-shell')
    from pyspark import SparkConf, SparkContext

    # Attach to spark-submit's JVM (or launch one) first: only a JVM-backed SparkConf sees spark-submit's
    # --master and --conf values, which the defaults below must not override.
    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    jvm_local_ip = jvm.java.lang.System.getenv("SPARK_LOCAL_IP")
    if args.ui and not jvm_local_ip:
        # The UI binds to $SPARK_LOCAL_IP of the JVM's environment, or to every interface; no conf moves it.
        raise JobError("--ui: SPARK_LOCAL_IP is not set in spark-submit's environment, so the Spark UI would "
                       "listen on every interface; export SPARK_LOCAL_IP=127.0.0.1 before spark-submit")
    conf = SparkConf()
    if args.master:
        conf.setMaster(args.master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    conf.setIfMissing("spark.app.name", "kafkalog-compact")
    conf.setIfMissing("spark.log.level", "WARN")  # applied as the context starts: its INFO lines are noise here
    # Loopback unless spark-submit says otherwise (a multi-host cluster must pass a reachable driver host).
    conf.setIfMissing("spark.driver.host", LOOPBACK)
    conf.setIfMissing("spark.driver.bindAddress", LOOPBACK)
    if args.ui:
        conf.set("spark.ui.enabled", "true")
    else:
        conf.setIfMissing("spark.ui.enabled", "false")
    conf.setIfMissing("spark.pyspark.python", sys.executable)
    conf.setIfMissing("spark.pyspark.driver.python", sys.executable)
    conf.set("spark.executorEnv.NUMBA_CACHE_DIR", numba_cache_dir)
    # A speculative copy of a task would find the partition's cleaner lock taken and report "locked", and
    # whichever attempt loses is killed mid-swap: one attempt per partition.
    conf.set("spark.speculation", "false")
    # The cleaning stage is queued behind the executor probe and its tasks wait for plans: the probe's
    # tasks must get the cores first, which FIFO scheduling (the default) guarantees. Under FAIR the
    # waiting tasks could take every core and the probe would never run.
    asked = conf.get("spark.scheduler.mode", "FIFO")
    if asked.upper() != "FIFO":
        print(f"compact_logs: warning: spark.scheduler.mode={asked} is overridden with FIFO: the cleaning "
              "stage waits behind the executor probe, which must get the cores first", file=sys.stderr)
    conf.set("spark.scheduler.mode", "FIFO")
    conf.setIfMissing("spark.executorEnv.SPARK_LOCAL_IP", LOOPBACK)
    conf.setIfMissing("spark.executor.extraJavaOptions", LEAN_JVM_OPTIONS)
    return SparkContext.getOrCreate(conf)


def driver_jvm_options(sc: Any) -> list[str]:
    """The driver JVM's own options (the report shows whether spark-submit passed the lean ones)."""
    try:
        return [str(a) for a in sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
                if str(a).startswith("-XX:")]
    except Exception:  # noqa: BLE001 - diagnostics only
        return []


def check_executors_see(sc: Any, log_dirs: list[str], targets: Targets, store: Any,
                        numba_cache_dir: str, scratch_dir: str = "") -> dict[str, Any]:
    locations = {(loc.topic_partition.topic, loc.topic_partition.partition): loc for loc in store.partitions()}
    expected: dict[str, list[str]] = {}
    for t in targets:
        location = locations.get((t["topic"], t["partition"]))
        if location is not None:  # a partition gone since planning fails in its own task
            expected.setdefault(str(location.log_dir), []).append(location.directory.name)
    slices = max(2, 2 * sc.defaultParallelism)
    sc.setJobGroup(PROBE_GROUP, "kafkalog: what the executors see of the log dirs")  # CleanStage waits for it
    views = sc.parallelize(range(slices), slices).map(
        lambda _: probe_dirs(log_dirs, expected, numba_cache_dir, scratch_dir)).collect()
    for view in views:
        where = f"executor on {view['host']} (pid {view['pid']})"
        for d, problems in view["dirs"].items():
            if problems:
                raise JobError(f"log dir {d} {'; '.join(problems)} as seen by the {where}, though the driver "
                               f"sees it: {SHARED_HINT}")
        if view["cache_problem"]:
            raise JobError(f"numba cache dir {numba_cache_dir} {view['cache_problem']} on the {where}; "
                           "pass --numba-cache-dir DIR writable by every executor")
        if view.get("scratch_problem"):
            raise JobError(f"scratch dir {scratch_dir} {view['scratch_problem']} on the {where}; "
                           "pass --scratch-dir DIR writable by every executor")
    warmed = [v["warm_s"] for v in views if v.get("warm_s")]
    return {"probe_tasks": len(views), "executors_seen": sorted({f"{v['host']}/{v['executor']}" for v in views}),
            "python_workers_warmed": len(warmed), "worker_warmup_s": round(max(warmed, default=0.0), 3),
            "warmup_errors": sorted({v["warm_error"] for v in views if v.get("warm_error")})}


# --- driver: the rounds -----------------------------------------------------------------------------------
def recopy_sizes(store: Any, target: dict[str, Any]) -> list[int]:
    """The sizes of the segments a round recopies: every segment below the first uncleanable offset."""
    from kafkalog.log import names

    try:
        directory = store.locate(target["topic"], target["partition"]).directory
    except Exception:  # noqa: BLE001 - a partition gone since planning fails when its round is planned
        return []
    sizes = []
    for path in directory.iterdir():
        parsed = names.parse_segment_file_name(path.name)
        if parsed is not None and not parsed.state and parsed.suffix == names.LOG_SUFFIX \
                and parsed.base_offset < target["first_uncleanable_offset"]:
            sizes.append(path.stat().st_size)
    return sizes


def choose_map_parts(sizes: list[int], split_bytes: int | None, parallelism: int) -> list[int]:
    """Key-map parts per round: a partition whose recopy exceeds its fair share of the cores has its map
    built by several tasks at once (hash-shared parts); any other by one task."""
    from kafkalog.maintenance.split_clean import map_parts_for

    parts = map_parts_for(parallelism)
    if parts < 2 or split_bytes == 0:
        return [1] * len(sizes)
    threshold = split_bytes if split_bytes is not None else max(MIN_SPLIT_BYTES, sum(sizes) // parallelism)
    return [parts if size > threshold else 1 for size in sizes]


class DriverRound:
    """One partition's round as the driver runs it: its cleaner lock, held from planning until its
    groups are swapped in or discarded, its plan, and the partition's entry in the report."""

    def __init__(self, target: dict[str, Any], started: float) -> None:
        self.target = target
        self.lock = contextlib.ExitStack()
        self.location: Any = None
        self.plan: Any = None
        self.ctx: Any = None  # the round's context as planned: the swaps use it
        self.board: Any = None
        self.out: dict[str, Any] = {
            "topic": target["topic"], "partition": target["partition"], "ok": False, "status": "failed",
            "error": None, "error_type": None, "first_dirty_offset": target["first_dirty_offset"],
            "first_uncleanable_offset": target["first_uncleanable_offset"], "task_started_at": started}

    def prepare(self, store: Any, scratch: Path, parts: int) -> bool:
        """Lock, resolve leftovers, plan the groups, make the board; False (and the report says why) if
        the partition is locked by another cleaner or cannot be planned."""
        from kafkalog.errors import KafkaLogError, LogLockedError
        from kafkalog.log.lock import cleaner_lock
        from kafkalog.maintenance import split_clean

        t = self.target
        job = split_clean.SplitRound(t["topic"], t["partition"], t["first_dirty_offset"],
                                     t["first_uncleanable_offset"], t["now_ms"], t["wall_now_ms"])
        try:
            self.location = store.locate(t["topic"], t["partition"])
            self.out["log_dir"] = str(self.location.log_dir)
            self.lock.enter_context(cleaner_lock(self.location.directory, timeout_s=0))
            board = scratch / self.location.directory.name
            _remove_stale_boards(scratch, board.name)
            shutil.rmtree(board, ignore_errors=True)  # left by a killed run of the same id: its results are stale
            board.mkdir(parents=True)
            self.plan, self.ctx = split_clean.plan_round(store, self.location, job, board, parts)
            self.board = split_clean.Board(self.plan)
            return True
        except LogLockedError as exc:
            self._failed(exc, LogLockedError)
            self.out["status"] = "locked"
        except Exception as exc:  # noqa: BLE001 - this partition fails, the others are still planned
            self._failed(exc, KafkaLogError, OSError)
        self.end()
        return False

    def _failed(self, exc: Exception, *expected: type[Exception]) -> None:
        """The report's error; one of no ``expected`` type (a bug) is marked as unexpected."""
        message = str(exc) if isinstance(exc, expected) else f"unexpected {type(exc).__name__}: {exc}"
        self.out.update(error=message, error_type=type(exc).__name__)

    def finish(self, run_id: str, stage_started: float, unfinished_because: str = "") -> None:
        """Swap the round in if every part and group is published, else discard it; release the lock.
        ``unfinished_because``: why the stage ended, when it has (named if the round is not done)."""
        from kafkalog.errors import KafkaLogError
        from kafkalog.maintenance import split_clean

        done_at = time.time()
        try:
            if not self.board.settled():
                raise _RoundNotDone(f"no worker finished the round: {unfinished_because}")
            written, maps = split_clean.collect(self.board)  # the results this driver has seen already
            result = split_clean.swap_and_finish(self.ctx, written, maps, run_id=run_id)
        except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
            # Its .cleaned segments go while the lock is still held; a group swapped already has none left.
            split_clean.discard(self.location, [g[0] for g in self.plan.groups])
            self._failed(exc, KafkaLogError, OSError, _RoundNotDone)
        else:
            self.out.update(ok=True, status="cleaned", error=None, end_offset=result.end_offset,
                            groups=[[list(old), new] for old, new in result.groups], stats=result.stats.to_dict(),
                            round={"map_parts": self.plan.parts, "groups": len(self.plan.groups),
                                   "workers": sorted({d.get("worker", "") for d in (*maps, *written)}),
                                   "map_task_s": [round(m["map_seconds"], 3) for m in maps],
                                   "group_task_s": [round(w["stats"]["clean_seconds"], 3) for w in written],
                                   "done_s": round(done_at - stage_started, 3),
                                   "swap_s": round(time.time() - done_at, 3)})
        finally:
            self.end()

    def end(self) -> None:
        """Release the cleaner lock (once)."""
        if "task_finished_at" not in self.out:
            self.lock.close()
            self.out["task_finished_at"] = time.time()


class _RoundNotDone(Exception):
    """The stage ended with the round neither complete nor failed on its board."""


class CleanStage:
    """The job's one cleaning stage, ``tasks`` x ``round_task``, run by a thread of the driver. It is
    submitted right behind the executor probe's job (``PROBE_GROUP``): Spark's FIFO scheduler gives the
    probe's tasks the cores first, and the cleaning tasks take them as the probe's end, while the
    driver checks the probe's answers; they wait for plans in the run dir. So Spark's launch of the
    stage overlaps the probe instead of opening the clean phase. If the job stops before
    the rounds are planned, ``call_off`` tells the waiting tasks that there are none."""

    def __init__(self, sc: Any, worker: dict[str, Any], tasks: int, run_dir: Path) -> None:
        self.sc, self.tasks, self.run_dir = sc, tasks, run_dir
        self.item = {**worker, "run_dir": str(run_dir)}  # the same for every task
        self.outcome: dict[str, Any] = {}
        self.rounds_handed_over = False  # set by the driver before it plans the first round
        self._probe_over = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkalog-clean-stage", daemon=True)

    def start_behind_probe(self) -> None:
        """Start the thread; it submits the stage once the probe's job is submitted (or over)."""
        self._thread.start()

    def probe_over(self) -> None:
        self._probe_over.set()

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._probe_over.is_set() and not tracker.getJobIdsForGroup(PROBE_GROUP):
            self._probe_over.wait(0.002)
        self.outcome["submitted_at"] = time.time()
        try:
            self.outcome["outs"] = self.sc.parallelize([self.item] * self.tasks, self.tasks).map(round_task).collect()
        except Exception as exc:  # noqa: BLE001 - a task lost too often: what is not complete fails
            first = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
            self.outcome["error"] = f"the Spark stage failed: {type(exc).__name__}: {first}"

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def call_off(self) -> None:
        """The driver stops before the stage has ended. Before any round was handed over (the probe refused
        the executors): the waiting tasks are told that none will come, and return. After (the driver
        failed): the tasks stop as the run dir is removed and Spark stops."""
        from kafkalog.maintenance import split_clean

        self.probe_over()
        if not self.rounds_handed_over:
            with contextlib.suppress(OSError):
                split_clean.publish_plans_end(self.run_dir, 0)
            self.join()


def stage_tasks(parallelism: int, parts: list[int], segments: list[int]) -> int:
    """One task per core, but not more than there can be key-map parts and groups to share."""
    return max(1, min(parallelism, sum(parts) + sum(segments)))


def clean_rounds(runner: CleanStage, store: Any, rounds_to_run: Targets, sizes: list[int], parts: list[int],
                 run_id: str) -> tuple[Targets, dict[str, Any]]:
    """Every partition's round in the job's one stage (``CleanStage``, already submitted), biggest first:
    the driver locks and plans each round and hands it to the tasks in the run dir. Each round is swapped
    in here as soon as a worker says it is settled, while the stage goes on with the others. Returns the
    partitions' report entries and the stage's."""
    from kafkalog.maintenance import split_clean

    started, cpu_started = time.time(), time.process_time()
    scratch, outcome = runner.run_dir, runner.outcome
    runner.rounds_handed_over = True
    rounds: list[DriverRound] = []
    results: Targets = []
    stage: dict[str, Any] = {}
    try:
        try:
            for i in sorted(range(len(rounds_to_run)), key=lambda i: -sizes[i]):  # the small ones end the stage
                r = DriverRound(rounds_to_run[i], started)
                if r.prepare(store, scratch, parts[i]):
                    split_clean.publish_plan(scratch, len(rounds), r.plan)
                    rounds.append(r)
                else:
                    results.append(r.out)
        finally:
            split_clean.publish_plans_end(scratch, len(rounds))  # the tasks return once these are settled
        stage.update(rounds=len(rounds), plan_rounds_s=round(time.time() - started, 3))
        pending = list(rounds)
        while pending:
            stage_over = not runner.is_alive()  # looked at before the boards: what they show then is final
            because = ""
            if stage_over:
                task_errors = [o["error"] for o in outcome.get("outs", []) if not o["ok"]]
                because = outcome.get("error") or next(iter(task_errors), "the stage ended")
            said = set() if stage_over else split_clean.settled_rounds(scratch)
            for r in [r for r in pending if stage_over or (r.board.directory.name in said and r.board.settled())]:
                pending.remove(r)
                r.finish(run_id, started, because)
                results.append(r.out)
            if pending:
                runner.join(timeout=DRIVER_POLL_S)
        runner.join()
    finally:
        for r in rounds:  # the driver itself failed (Spark, a bug): the locks still go, recovery does the rest
            r.end()
    outs = outcome.get("outs", [])
    stage.update(tasks=runner.tasks, stage_s=round(time.time() - started, 3), error=outcome.get("error"),
                 driver_cpu_s=round(time.process_time() - cpu_started, 3),
                 executors=sorted({o["executor"] for o in outs}),
                 task_s=[o.get("task_s") for o in outs], idle_per_task_s=[o.get("idle_s") for o in outs],
                 cpu_per_task_s=[[o.get("user_s"), o.get("sys_s")] for o in outs],
                 faults_per_task=[o.get("minor_faults") for o in outs],
                 preempted_per_task=[o.get("switches") for o in outs],
                 groups_per_task=[sum(len(d["groups_written"]) for d in o.get("rounds", {}).values()) for o in outs],
                 task_errors=[o["error"] for o in outs if not o["ok"]])
    if "submitted_at" in outcome:  # before the clean phase began: negative
        stage["submitted_s"] = round(outcome["submitted_at"] - started, 3)
    if outs:  # negative: the tasks were up and waiting before the clean phase began
        stage["first_task_started_s"] = round(min(o["task_started_at"] for o in outs) - started, 3)
    return results, stage


def _remove_stale_boards(scratch: Path, partition_dir: str) -> None:
    """Boards (key-map parts, bits, group results) earlier, killed runs left for this partition (its cleaner
    lock is ours now), and such a run's dir once no board of it is left."""
    from kafkalog.maintenance import split_clean

    for stale in scratch.parent.glob(f"*/{partition_dir}"):
        if stale.parent != scratch:
            shutil.rmtree(stale, ignore_errors=True)
            split_clean.remove_dead_run_dir(stale.parent)


# --- driver: report --------------------------------------------------------------------------------------
def write_report(path: str, doc: dict[str, Any]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def totals(results: Targets) -> dict[str, int]:
    out = {"partitions": len(results), "cleaned": 0, "locked": 0, "failed": 0, "bytes_read": 0,
           "bytes_written": 0, "records_read": 0, "records_written": 0, "tombstones_removed": 0}
    for r in results:
        out[r["status"] if r["status"] in ("cleaned", "locked") else "failed"] += 1
        for key in ("bytes_read", "bytes_written", "records_read", "records_written", "tombstones_removed"):
            out[key] += int((r.get("stats") or {}).get(key, 0))
    return out


def resolve_clocks(args: argparse.Namespace, plan_now_ms: int | None, t0: float) -> tuple[int, int]:
    """(now_ms, wall_now_ms): the cycle's clock and the one wall clock every task stamps horizons with."""
    if args.now_ms is not None and plan_now_ms is not None and args.now_ms != plan_now_ms:
        raise JobError(f"--now-ms {args.now_ms} differs from the plan's now_ms {plan_now_ms}; the plan's ranges "
                       "were chosen at its clock")
    now_ms = args.now_ms if args.now_ms is not None else plan_now_ms
    if now_ms is None:
        raise JobError(f"plan {args.plan} has no now_ms: pass --now-ms")
    driver_wall_ms = int(t0 * 1000)
    wall_now_ms = args.wall_now_ms if args.wall_now_ms is not None else driver_wall_ms
    check_clocks(now_ms, wall_now_ms, driver_wall_ms)
    return now_ms, wall_now_ms


def load_broker_properties(args: argparse.Namespace) -> tuple[dict[str, str], Any]:
    """The broker file's properties (shipped to the executors as text values) and the BrokerConfig."""
    from kafkalog.errors import KafkaLogError  # neither module imports numba
    from kafkalog.log.config import BrokerConfig, parse_properties

    config_file = args.config_file or os.environ.get("KAFKALOG_CONFIG") or None
    try:
        properties = parse_properties(Path(config_file).read_text(encoding="utf-8")) if config_file else {}
        return properties, BrokerConfig.from_properties(properties)
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(f"cannot read broker config file {config_file}: {exc}") from None
    except KafkaLogError as exc:
        raise JobError(f"{config_file}: {exc}") from None


def prepare_numba_cache(args: argparse.Namespace, log_dirs: list[str]) -> str:
    cache_dir = str(Path(args.numba_cache_dir or Path(log_dirs[0]).parent / DEFAULT_NUMBA_CACHE).resolve())
    try:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JobError(f"numba cache dir {cache_dir} cannot be created ({exc.strerror}); "
                       "pass --numba-cache-dir DIR writable by every executor") from None
    os.environ["NUMBA_CACHE_DIR"] = cache_dir  # before kafkalog imports numba in this process
    return cache_dir


def apply_checkpoint_resets(store: Any, plan: dict[str, Any]) -> None:
    """Rewrite out-of-range cleaner checkpoints, as ``compact()`` does before cleaning."""
    from kafkalog.pipeline.plans import apply_checkpoint_resets as apply

    apply(store, plan)


def worker_settings(doc: dict[str, Any], broker_properties: dict[str, str]) -> dict[str, Any]:
    """What every cleaning task needs besides the rounds: how to open the log dirs as the driver does."""
    return {"log_dirs": doc["log_dirs"], "broker_properties": broker_properties,
            "numba_cache_dir": doc["numba_cache_dir"]}


def clean_on_spark(args: argparse.Namespace, doc: dict[str, Any], t0: float, store: Any, plan: Any,
                   rounds_to_run: Targets, worker: dict[str, Any]) -> Targets:
    from kafkalog.maintenance import split_clean

    timings = doc["timings"]
    log_dirs, cache_dir = doc["log_dirs"], doc["numba_cache_dir"]
    t_session = time.time()
    sc = start_spark(args, cache_dir)
    try:
        timings["session_start_s"] = round(time.time() - t_session, 3)
        doc["spark"] = {"master": sc.master, "app_id": sc.applicationId, "default_parallelism": sc.defaultParallelism,
                        "driver_jvm_options": driver_jvm_options(sc)}
        jvm_start = _jvm_start_s(sc)
        if jvm_start is not None:
            timings["jvm_start_to_driver_s"] = round(t0 - jvm_start, 3)
        segment_sizes = [recopy_sizes(store, t) for t in rounds_to_run]  # reads only
        sizes = [sum(s) for s in segment_sizes]
        parts = choose_map_parts(sizes, args.split_bytes, sc.defaultParallelism)
        scratch = Path(doc["scratch_dir"]) / doc["run_id"]
        stage = CleanStage(sc, worker, stage_tasks(sc.defaultParallelism, parts, [len(s) for s in segment_sizes]),
                           scratch)
        try:
            split_clean.start_run_dir(scratch)  # before any task can look for plans there
            t_probe = time.time()
            stage.start_behind_probe()
            try:
                doc["spark"].update(check_executors_see(sc, log_dirs, rounds_to_run, store, cache_dir,
                                                        doc["scratch_dir"]))
            finally:
                stage.probe_over()
            timings["executor_check_s"] = round(time.time() - t_probe, 3)
            apply_checkpoint_resets(store, plan)  # the first change to the log dirs: nothing was refused before it
            t_job = time.time()
            results, doc["spark"]["stage"] = clean_rounds(stage, store, rounds_to_run, sizes, parts, doc["run_id"])
        finally:
            if stage.is_alive():  # the driver stops early: the probe refused, or it failed
                stage.call_off()
            shutil.rmtree(scratch, ignore_errors=True)
        timings["clean_job_s"] = round(time.time() - t_job, 3)
        if "first_task_started_s" in doc["spark"]["stage"]:
            timings["first_task_started_s"] = doc["spark"]["stage"]["first_task_started_s"]
        done = [r["task_finished_at"] for r in results if r["ok"]]
        if done:
            timings["first_partition_done_s"] = round(min(done) - t_job, 3)
    finally:
        sc.stop()
    for r in results:
        r["task_s"] = round(r["task_finished_at"] - r["task_started_at"], 3)
    return results


def run(args: argparse.Namespace, doc: dict[str, Any], t0: float) -> int:
    plan_doc = read_plan_file(args.plan) if args.plan else None
    now_ms, wall_now_ms = resolve_clocks(args, None if plan_doc is None else plan_doc["now_ms"], t0)
    doc.update(now_ms=now_ms, wall_now_ms=wall_now_ms)
    broker_properties, broker = load_broker_properties(args)
    doc["log_dirs"] = log_dirs = resolve_log_dirs(args, broker.log_dirs)
    doc["numba_cache_dir"] = prepare_numba_cache(args, log_dirs)
    scratch_dir = str(Path(args.scratch_dir or Path(log_dirs[0]).parent / DEFAULT_SCRATCH).resolve())
    doc["scratch_dir"] = scratch_dir
    try:
        Path(scratch_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JobError(f"scratch dir {scratch_dir} cannot be created ({exc.strerror}); "
                       "pass --scratch-dir DIR writable by every executor") from None

    from kafkalog.errors import KafkaLogError
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance.journal import new_run_id

    try:
        store = LogStore(log_dirs, broker)
        if plan_doc is not None:
            doc["plan"] = {"source": args.plan}
        else:
            plan_doc = build_plan(store, args, now_ms)
            doc["plan"] = {"source": "cleaner-manager", "topic": args.topic, "partition": args.partition}
        targets, errors = plan_targets(plan_doc)
    except KafkaLogError as exc:
        raise JobError(str(exc)) from None
    doc["plan"]["targets"] = targets
    doc["run_id"] = args.run_id or new_run_id()
    doc["timings"]["plan_s"] = round(time.time() - t0, 3)

    results: list[dict[str, Any]] = []
    if targets:
        rounds_to_run = [{**t, "now_ms": now_ms, "wall_now_ms": wall_now_ms} for t in targets]
        results = clean_on_spark(args, doc, t0, store, plan_doc, rounds_to_run,
                                 worker_settings(doc, broker_properties))
    else:  # a cycle with nothing to clean does not pay for a Spark session
        apply_checkpoint_resets(store, plan_doc)
    partitions = errors + sorted(results, key=lambda r: (r["topic"], r["partition"]))
    doc["partitions"] = partitions
    doc["totals"] = totals(partitions)
    ok = all(p["ok"] for p in partitions)
    doc["status"] = "ok" if ok else "partitions-failed"
    return EXIT_OK if ok or args.partition_failures_ok else EXIT_PARTITIONS_FAILED


def _jvm_start_s(sc: Any) -> float | None:
    try:
        return float(sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime()) / 1000
    except Exception:  # noqa: BLE001 - a timing nicety only
        return None


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    args = parse_args(argv)
    doc: dict[str, Any] = {"version": REPORT_VERSION, "status": "refused", "started_at": t0, "timings": {},
                           "partitions": [], "totals": totals([])}
    code = EXIT_REFUSED
    try:
        code = run(args, doc, t0)
    except JobError as exc:
        doc["error"] = str(exc)
        print(f"compact_logs: error: {exc}", file=sys.stderr)
    except Exception as exc:  # Spark itself failed: still leave a report saying so
        doc.update(status="spark-failed", error=f"{type(exc).__name__}: {exc}")
        print(f"compact_logs: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc()
    doc["timings"]["total_s"] = round(time.time() - t0, 3)
    write_report(args.report, doc)
    t = doc["totals"]
    print(f"compact_logs: {doc['status']}: {t['cleaned']} cleaned, {t['locked']} locked, {t['failed']} failed "
          f"of {t['partitions']} partitions in {doc['timings']['total_s']:.1f} s; report {args.report}")
    return code


if __name__ == "__main__":
    sys.exit(main())
