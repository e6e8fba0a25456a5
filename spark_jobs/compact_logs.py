"""Compact Kafka-format logs with Spark: plan and commit on the driver, clean in Spark tasks.

    spark-submit spark_jobs/compact_logs.py --log-dir DIR [--log-dir DIR2] \\
        [--plan PLAN.json | --topic T [--partition P]] --now-ms MS --report REPORT.json [--config-file F]

The driver checks the log dirs, builds the compaction plan exactly as ``kafkalog compact`` does (or
reads one written by ``kafkalog compact --dry-run --json``) and takes every selected partition's
cleaner lock. A probe stage then checks that the executors see the log dirs, see those locks as held
(the same file system, with working ``flock``) and agree with the driver's clock. The cleaning is
plain Spark stages of tasks that are pure functions of their inputs
(``kafkalog.maintenance.cleaning_tasks``): one task per partition, biggest first; a partition bigger
than its share of the cores has its key map built in a first stage (in parts by key hash if it would
not fit one task's memory) and its segment groups rewritten in a second, one task per group. Each
task attempt writes under a name of its own and returns the size and CRC-32C of what it wrote; the
driver alone commits: it checks each group's files against what the attempt reported and swaps them
in with Kafka's ``.cleaned -> .swap`` protocol, then removes every other attempt's files. Failed
tasks are Spark's to retry; a partition whose task fails reports why, and the others go on. No
record bytes go through Spark.

Every task uses the driver's ``now_ms`` and one ``wall_now_ms`` chosen on the driver, so the segments
written are byte for byte those of ``kafkalog compact`` in one process for the same input and clocks.

Exit codes: 0 every planned partition was cleaned; 1 the job refused to run or Spark failed (bad
arguments, a log dir missing or not shared with the executors, an unreadable plan); 2 it ran, and at
least one partition failed or was skipped (locked by another cleaner, corrupt). The JSON report is
written in every case where the arguments name one.

Crash story: nothing is swapped but by the driver, under the partition's locks, group by group; a
kill at any point leaves every partition recoverable to old or new by ``kafkalog recover``, which
also deletes every attempt's leftover ``.cleaned`` files; running the job again finishes the work.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import fcntl
import gc
import json
import math
import os
import shutil
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK, EXIT_REFUSED, EXIT_PARTITIONS_FAILED = 0, 1, 2
REPORT_VERSION = 2
LOOPBACK = "127.0.0.1"
DEFAULT_NUMBA_CACHE = ".kafkalog-numba-cache"  # beside the first log dir, not inside it (unknown file)
DEFAULT_SCRATCH = ".kafkalog-spark-scratch"
MIN_SPLIT_BYTES = 64 << 20  # below this, a second stage costs more than it saves
# A key map takes ~40 B per distinct key; a dirty range of tiny records has a key per ~30 B of log.
MAP_BYTES_PER_DIRTY_BYTE = 1.5
DEFAULT_MAP_MEMORY = 2 << 30  # a task's key map, unless spark.executor.pyspark.memory says otherwise
DEFAULT_MAX_CLOCK_SKEW_MS = 2000
SHARED_HINT = ("every log dir must be on a volume mounted at the same path on the driver and on every "
               "Spark worker, with flock shared by every host (see spark_jobs/README.md)")

Doc = dict[str, Any]


class JobError(Exception):
    """The job refuses to run; the message says why and what to do."""


# --- arguments -------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 1, not argparse's 2: 2 means "see the report"
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message}\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog="compact_logs.py", description="Compact Kafka-format logs on Spark.")
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
                   help="where a huge partition's key-map stage leaves its maps for the rewrite stage (a dir "
                        f"every executor sees) (default: <first log dir>/../{DEFAULT_SCRATCH})")
    p.add_argument("--split-bytes", type=int, metavar="N",
                   help="give a partition a key-map stage and one rewrite task per segment group when the bytes "
                        "it recopies exceed N (0: never; default: its fair share of the cores, total / default "
                        "parallelism, and at least 64 MiB)")
    p.add_argument("--map-memory", type=int, metavar="BYTES",
                   help="a task's key-map budget: a partition whose map would need more is mapped in parts that "
                        "share its keys by hash (default: half of spark.executor.pyspark.memory, else 2 GiB)")
    p.add_argument("--max-clock-skew-ms", type=int, default=DEFAULT_MAX_CLOCK_SKEW_MS,
                   help="refuse executors whose clock differs from the driver's by more (default: %(default)s)")
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


def lock_seen(path: str) -> str:
    """"held" if another process holds an ``flock`` on ``path`` (as the driver does), else why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot be opened ({exc.strerror})"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return "held" if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else f"flock fails ({exc.strerror})"
    finally:
        os.close(fd)  # also releases the lock, if this process got it
    return "free"


def probe(log_dirs: Sequence[str], expected: dict[str, list[str]], held: Sequence[str], cache_dir: str,
          scratch_dir: str) -> Doc:
    """What one executor sees: the log dirs and partition dirs, the driver's held locks, its clock."""
    seen: Doc = {"host": socket.gethostname(), "pid": os.getpid(), "executor": executor_name(), "dirs": {}}
    for d in log_dirs:
        path, problems = Path(d), []
        if not path.is_dir():
            problems.append("does not exist or is not a directory")
        else:
            if not os.access(path, os.R_OK | os.X_OK | os.W_OK):
                problems.append("is not readable and writable")
            missing = [name for name in expected.get(d, []) if not (path / name).is_dir()]
            if missing:
                problems.append(f"lacks partition directories the driver sees: {', '.join(missing[:5])}")
        seen["dirs"][d] = problems
    seen["locks"] = {path: lock_seen(path) for path in held}
    for name, d in (("cache", cache_dir), ("scratch", scratch_dir)):
        try:
            Path(d).mkdir(parents=True, exist_ok=True)
            seen[f"{name}_problem"] = None if os.access(d, os.W_OK | os.X_OK) else "is not writable"
        except OSError as exc:
            seen[f"{name}_problem"] = f"cannot be created ({exc.strerror})"
    seen["clock_ms"] = time.time() * 1000
    # This Python worker (Spark reuses it) will run cleaning tasks: load the compiled kernels now, once,
    # rather than in the first task it runs (the time is reported with the probe).
    os.environ.setdefault("NUMBA_CACHE_DIR", cache_dir)
    try:
        from kafkalog.maintenance.warmup import warm

        seen["warm_s"] = warm()
        # pyspark runs a full gc.collect() after each task of a reused worker; with the kernels and their
        # modules in reach each one walks ~10^5 objects (tens of ms a task). They live as long as the worker.
        gc.collect()
        gc.freeze()
    except Exception as exc:  # noqa: BLE001 - the cleaning tasks will report what is wrong
        seen["warm_s"] = f"{type(exc).__name__}: {exc}"
    return seen


def run_task(item: Doc) -> Doc:
    """One task: a whole round, a key-map part, or one group of a huge partition
    (``kafkalog.maintenance.cleaning_tasks``). A failure the library reports is the task's result; a
    crash is Spark's to retry."""
    # numba reads NUMBA_CACHE_DIR when first imported; spark.executorEnv also sets it for new workers.
    os.environ.setdefault("NUMBA_CACHE_DIR", item["numba_cache_dir"])
    from pyspark import TaskContext

    task = TaskContext.get()
    tag = f"attempt-{task.taskAttemptId()}" if task is not None else f"pid-{os.getpid()}"
    out: Doc = {"key": item["key"], "kind": item["kind"], "ok": False, "error": None, "tag": tag,
                "executor": f"{socket.gethostname()}/{executor_name()}", "started_at": time.time()}
    try:
        from kafkalog.log.config import BrokerConfig
        from kafkalog.log.store import LogStore
        from kafkalog.maintenance import cleaning_tasks as tasks
    except ImportError as exc:
        out["error"] = (f"cannot import kafkalog on executor {socket.gethostname()} ({exc}); "
                        "spark.pyspark.python must be a Python with kafkalog installed")
        return out
    try:
        store = LogStore(item["log_dirs"], BrokerConfig.from_properties(item["broker_properties"]))
        spec = tasks.RoundSpec.from_dict(item["spec"])
        if item["kind"] == "round":
            out.update(tasks.clean_round_task(store, spec, tag))
        elif item["kind"] == "map":
            done = tasks.map_part_task(store, spec, item["part"], Path(item["scratch"]) / f"map-{item['part']}-{tag}")
            out.update(groups=[], maps=[done["stats"]], part=item["part"], prefix=done["prefix"])
        else:
            out.update(groups=[tasks.write_group_task(store, spec, item["index"], item["map_prefixes"], tag)], maps=[])
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
        out.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=6))
    out["finished_at"] = time.time()
    return out


# --- driver: checks and plan -----------------------------------------------------------------------------
def resolve_log_dirs(args: argparse.Namespace, broker_log_dirs: Sequence[str]) -> list[str]:
    dirs = list(args.log_dir or [])
    if not dirs and os.environ.get("KAFKALOG_LOG_DIRS"):
        dirs = [d.strip() for d in os.environ["KAFKALOG_LOG_DIRS"].split(",") if d.strip()]
    dirs = dirs or list(broker_log_dirs)
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
    if now_ms < 0:
        raise JobError(f"--now-ms {now_ms}: must not be negative")
    if now_ms > driver_wall_ms:
        raise JobError(f"--now-ms {now_ms} is in the future (wall clock {driver_wall_ms}); a cycle may never "
                       "decide more than is due now")
    if wall_now_ms < now_ms:
        raise JobError(f"--wall-now-ms {wall_now_ms} is before --now-ms {now_ms}; the cycle's clock is never "
                       "ahead of the wall clock")
    return now_ms, wall_now_ms


def load_broker_properties(args: argparse.Namespace) -> tuple[dict[str, str], Any]:
    """The broker file's properties (shipped to the executors as text values) and the BrokerConfig."""
    from kafkalog.errors import KafkaLogError
    from kafkalog.log.config import BrokerConfig, parse_properties

    config_file = args.config_file or os.environ.get("KAFKALOG_CONFIG") or None
    try:
        properties = parse_properties(Path(config_file).read_text(encoding="utf-8")) if config_file else {}
        return properties, BrokerConfig.from_properties(properties)
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(f"cannot read broker config file {config_file}: {exc}") from None
    except KafkaLogError as exc:
        raise JobError(f"{config_file}: {exc}") from None


def job_dir(args: argparse.Namespace, option: str, default: str, log_dirs: list[str]) -> str:
    """A dir beside the first log dir (or as given) that every executor must be able to write."""
    path = Path(getattr(args, option) or Path(log_dirs[0]).parent / default).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JobError(f"{option.replace('_', ' ')} {path} cannot be created ({exc.strerror}); pass "
                       f"--{option.replace('_', '-')} DIR writable by every executor") from None
    return str(path)


def read_plan(args: argparse.Namespace, store: Any, now_ms: int, plan_doc: Doc | None) -> Doc:
    from kafkalog.pipeline.plans import plan_compaction

    if plan_doc is not None:
        return plan_doc
    partitions = None if args.partition is None else [args.partition]
    return plan_compaction(store, now_ms=now_ms, topic=args.topic, partitions=partitions, byte_budget=args.byte_budget)


# --- driver: Spark ---------------------------------------------------------------------------------------
def start_spark(args: argparse.Namespace, numba_cache_dir: str) -> Any:
    # pyspark warns about the pinned pandas 3 on import; this job uses no pandas API.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # for a JVM this process launches (plain `python`)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    # Attach to spark-submit's JVM (or launch one) first: only a JVM-backed SparkConf sees spark-submit's
    # --master and --conf values, which the defaults below must not override.
    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    if args.ui and not jvm.java.lang.System.getenv("SPARK_LOCAL_IP"):
        # The UI binds to $SPARK_LOCAL_IP of the JVM's environment, or to every interface; no conf moves it.
        raise JobError("--ui: SPARK_LOCAL_IP is not set in spark-submit's environment, so the Spark UI would "
                       "listen on every interface; export SPARK_LOCAL_IP=127.0.0.1 before spark-submit")
    conf = SparkConf()
    if args.master:
        conf.setMaster(args.master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    conf.setIfMissing("spark.app.name", "kafkalog-compact")
    conf.setIfMissing("spark.log.level", "WARN")
    # Loopback unless spark-submit says otherwise (a multi-host cluster must pass a reachable driver host).
    conf.setIfMissing("spark.driver.host", LOOPBACK)
    conf.setIfMissing("spark.driver.bindAddress", LOOPBACK)
    conf.set("spark.ui.enabled", "true") if args.ui else conf.setIfMissing("spark.ui.enabled", "false")
    conf.setIfMissing("spark.pyspark.python", sys.executable)
    conf.setIfMissing("spark.pyspark.driver.python", sys.executable)
    conf.set("spark.executorEnv.NUMBA_CACHE_DIR", numba_cache_dir)
    return SparkContext.getOrCreate(conf)


def run_stage(sc: Any, items: list[Doc], name: str) -> list[Doc]:
    """One Spark stage of ``run_task``, a task per item in the given order (the biggest first)."""
    sc.setJobGroup(f"kafkalog-{name}", f"kafkalog: {name}")
    return sc.parallelize(items, len(items)).map(run_task).collect() if items else []


def check_executors(sc: Any, job: Job, args: argparse.Namespace) -> Doc:
    """The probe stage: refuse executors that do not see what the driver sees (``SHARED_HINT``)."""
    from kafkalog.log import names

    expected: dict[str, list[str]] = {}
    held: dict[str, str] = {}  # a lock the driver holds, per log dir
    for r in job.rounds:
        if r.location is not None and r.locked:
            log_dir, name = str(r.location.log_dir), r.location.directory.name
            expected.setdefault(log_dir, []).append(name)
            held.setdefault(log_dir, str(r.location.directory / names.CLEANER_LOCK_FILE))
    slices = max(2, 2 * sc.defaultParallelism)
    before = time.time() * 1000
    sc.setJobGroup("kafkalog-probe", "kafkalog: what the executors see of the log dirs")
    log_dirs, locks, cache_dir, scratch_dir = job.log_dirs, list(held.values()), job.cache_dir, job.scratch_dir
    views = sc.parallelize(range(slices), slices).map(
        lambda _: probe(log_dirs, expected, locks, cache_dir, scratch_dir)).collect()
    after = time.time() * 1000
    for view in views:
        where = f"the executor on {view['host']} (pid {view['pid']})"
        for d, problems in view["dirs"].items():
            if problems:
                raise JobError(f"log dir {d} {'; '.join(problems)} as seen by {where}, though the driver "
                               f"sees it: {SHARED_HINT}")
        for path, state in view["locks"].items():
            if state != "held":
                raise JobError(f"{where} does not see the driver's lock on {path} as held (it is {state} there): "
                               f"{SHARED_HINT}")
        for name, option in (("cache", "numba-cache-dir"), ("scratch", "scratch-dir")):
            if view[f"{name}_problem"]:
                raise JobError(f"{name} dir {getattr(job, f'{name}_dir')} {view[f'{name}_problem']} on {where}; "
                               f"pass --{option} DIR writable by every executor")
        skew = max(before - view["clock_ms"], view["clock_ms"] - after, 0)
        if skew > args.max_clock_skew_ms:
            raise JobError(f"the clock of {where} is {skew:.0f} ms off the driver's (more than "
                           f"--max-clock-skew-ms {args.max_clock_skew_ms}): it would shorten or lengthen "
                           "file.delete.delay.ms; synchronize the hosts' clocks (NTP)")
    warmed = [v["warm_s"] for v in views if isinstance(v["warm_s"], float)]
    return {"probe_tasks": len(views), "executors_seen": sorted({f"{v['host']}/{v['executor']}" for v in views}),
            "worker_warmup_s": round(max(warmed, default=0.0), 3),
            "warmup_errors": sorted({v["warm_s"] for v in views if isinstance(v["warm_s"], str)})}


# --- driver: rounds --------------------------------------------------------------------------------------
@dataclass
class Round:
    """One partition's round on the driver: its cleaner lock (held from before the probe until its
    commit or discard), its spec and context, and its entry in the report."""

    target: Doc
    out: Doc
    location: Any = None
    locked: bool = False
    spec: Any = None
    ctx: Any = None
    recopy_bytes: int = 0
    maps: list[Doc] = field(default_factory=list)  # the key-map stage's outputs
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def split(self) -> bool:
        """A key-map stage of ``spec.parts`` tasks, then a rewrite task per group."""
        return self.spec is not None and self.spec.parts > 1

    def fail(self, exc: BaseException | str, status: str = "failed") -> None:
        from kafkalog.errors import KafkaLogError

        if isinstance(exc, BaseException) and not isinstance(exc, KafkaLogError | OSError):
            exc = f"unexpected {type(exc).__name__}: {exc}"
        self.out.update(ok=False, status=status, error=str(exc))
        self.end()

    def end(self) -> None:
        """Discard every attempt's leftovers (if tasks ran) and release the cleaner lock (once)."""
        from kafkalog.maintenance.cleaning_tasks import discard_attempts

        if self.locked:
            if self.spec is not None:
                with contextlib.suppress(OSError):
                    discard_attempts(self.location)
            self.held.close()
            self.locked = False
            self.out["finished_at"] = time.time()


@dataclass
class Job:
    log_dirs: list[str]
    cache_dir: str
    scratch_dir: str
    run_dir: Path
    now_ms: int
    wall_now_ms: int
    run_id: str
    worker: Doc  # what every task needs besides its round: how to open the log dirs as the driver does
    rounds: list[Round] = field(default_factory=list)


def lock_rounds(store: Any, job: Job) -> None:
    """Every selected partition's cleaner lock, before the probe (which checks the executors see it)."""
    from kafkalog.errors import LogLockedError
    from kafkalog.log.lock import cleaner_lock

    for r in job.rounds:
        try:
            r.location = store.locate(r.target["topic"], r.target["partition"])
            r.out["log_dir"] = str(r.location.log_dir)
            r.held.enter_context(cleaner_lock(r.location.directory, timeout_s=0))
            r.locked = True
        except LogLockedError as exc:
            r.fail(exc, "locked")
        except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
            r.fail(exc)


def plan_rounds(store: Any, job: Job, split_bytes: int | None, parallelism: int, map_memory: int) -> None:
    """Leftovers resolved and each round's spec fixed; a huge partition gets a key-map stage, in as many
    parts as its map needs to fit a task's memory."""
    from kafkalog.maintenance.cleaning_tasks import plan_round

    for r in job.rounds:
        if not r.locked:
            continue
        try:
            t = r.target
            r.spec, r.ctx = plan_round(store, r.location, t["first_dirty_offset"], t["first_uncleanable_offset"],
                                       now_ms=job.now_ms, wall_now_ms=job.wall_now_ms)
            bases = {b for g in r.spec.groups for b in g}
            r.recopy_bytes = sum(s.size for s in r.ctx.segments if s.base_offset in bases)
        except Exception as exc:  # noqa: BLE001
            r.fail(exc)
    live = [r for r in job.rounds if r.locked]
    threshold = split_bytes if split_bytes is not None else \
        max(MIN_SPLIT_BYTES, sum(r.recopy_bytes for r in live) // max(1, parallelism))
    for r in live:
        dirty = sum(s.size for s in r.ctx.segments if s.base_offset >= r.spec.first_dirty_offset
                    and s.base_offset < r.spec.first_uncleanable_offset)
        parts = max(1, math.ceil(dirty * MAP_BYTES_PER_DIRTY_BYTE / map_memory))  # to fit a task's memory
        huge = split_bytes != 0 and parallelism > 1 and len(r.spec.groups) > 1 and r.recopy_bytes > threshold
        if huge or parts > 1:
            # A part of a key map spread over the whole range costs nearly the whole map's inserts (its
            # keys) and the whole range's reading: parts by hash, one per core, halve the inserts each.
            r.spec = dataclasses.replace(r.spec, parts=max(parts, parallelism if huge else 1))


def item(job: Job, r: Round, kind: str, **extra: Any) -> Doc:
    return {**job.worker, "key": r.location.directory.name, "kind": kind, "spec": r.spec.to_dict(), **extra}


def clean_rounds(sc: Any, job: Job) -> Doc:
    """The cleaning stages, and each round's commit as soon as its last stage is in."""
    stages: Doc = {}
    live = sorted((r for r in job.rounds if r.locked), key=lambda r: -r.recopy_bytes)
    first = [item(job, r, "map", part=p, scratch=str(job.run_dir / r.location.directory.name))
             for r in live if r.split for p in range(r.spec.parts)]
    first += [item(job, r, "round") for r in live if not r.split]
    outs = _stage(sc, job, first, "clean", stages)
    second = []
    for r in live:
        if not r.split:
            _commit(job, r, outs.get(r.location.directory.name, []), 1)
        elif r.locked and _all_ok(r, maps := outs.get(r.location.directory.name, []), r.spec.parts):
            r.maps = sorted(maps, key=lambda m: m["part"])
            second += [item(job, r, "group", index=i, map_prefixes=[m["prefix"] for m in r.maps])
                       for i in range(len(r.spec.groups))]
    outs = _stage(sc, job, second, "rewrite", stages)
    for r in live:
        if r.split:
            _commit(job, r, outs.get(r.location.directory.name, []), len(r.spec.groups))
    return stages


def _stage(sc: Any, job: Job, items: list[Doc], name: str, stages: Doc) -> dict[str, list[Doc]]:
    """Run a stage; its task outputs by partition. If Spark gives up on it, its rounds fail."""
    if not items:
        return {}
    started, by_key = time.time(), dict[str, list[Doc]]()
    try:
        outs = run_stage(sc, items, name)
    except Exception as exc:  # noqa: BLE001 - Spark gave up (a task failed too often): these rounds fail
        message = str(exc).strip().splitlines()[0][:500]
        stages[name] = {"tasks": len(items), "seconds": round(time.time() - started, 3), "error": message}
        for r in job.rounds:
            if r.locked and any(i["key"] == r.location.directory.name for i in items):
                r.fail(f"Spark gave up on the {name} stage: {message}")
        return {}
    for out in outs:
        by_key.setdefault(out["key"], []).append(out)
    ended = time.time()
    stages[name] = {"tasks": len(items), "seconds": round(ended - started, 3), "error": None,
                    "executors": sorted({o["executor"] for o in outs}),
                    "first_task_started_s": round(min(o["started_at"] for o in outs) - started, 3),
                    "after_last_task_s": round(ended - max(o["finished_at"] for o in outs), 3),
                    "task_s": [round(o["finished_at"] - o["started_at"], 3) for o in outs]}
    return by_key


def _all_ok(r: Round, outs: list[Doc], expected: int) -> bool:
    """Whether every task of the round's stage reported success; else the round fails."""
    bad = [o["error"] for o in outs if not o["ok"]]
    if bad or len(outs) != expected:
        r.fail(bad[0] if bad else f"{expected - len(outs)} of the round's tasks returned nothing")
    return not bad and len(outs) == expected


def _commit(job: Job, r: Round, outs: list[Doc], expected: int) -> None:
    from kafkalog.maintenance.cleaning_tasks import commit_round

    if not r.locked or not _all_ok(r, outs, expected):
        return
    started = time.time()
    try:
        result = commit_round(r.ctx, r.spec, [g for o in outs for g in o["groups"]],
                              [m for o in (*r.maps, *outs) for m in o["maps"]], run_id=job.run_id)
    except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
        r.fail(exc)
        return
    r.out.update(ok=True, status="cleaned", error=None, end_offset=result.end_offset,
                 groups=[[list(old), new] for old, new in result.groups], stats=result.stats.to_dict(),
                 round={"map_parts": len(r.maps), "groups": len(r.spec.groups), "tasks": len(outs) + len(r.maps),
                        "executors": sorted({o["executor"] for o in (*r.maps, *outs)}),
                        "commit_s": round(time.time() - started, 3)})
    r.end()


def remove_stale_scratch(job: Job) -> None:
    """Key maps that killed runs left for the partitions this job now holds (their cleaner locks are ours)."""
    scratch = Path(job.scratch_dir)
    for r in job.rounds:
        if r.locked:
            for stale in scratch.glob(f"*/{r.location.directory.name}"):
                shutil.rmtree(stale, ignore_errors=True)
    for run_dir in scratch.iterdir():
        with contextlib.suppress(OSError):  # not empty: another job's, still running
            run_dir.rmdir()


def map_memory(sc: Any, args: argparse.Namespace) -> int:
    """A task's key-map budget: as given, or half the executor's declared Python memory."""
    declared = sc.getConf().get("spark.executor.pyspark.memory", None)
    if args.map_memory:
        return int(args.map_memory)
    if not declared:
        return DEFAULT_MAP_MEMORY
    return int(sc._jvm.org.apache.spark.util.Utils.byteStringAsBytes(declared)) // 2


def clean_on_spark(args: argparse.Namespace, doc: Doc, store: Any, plan: Doc, job: Job) -> None:
    from kafkalog.pipeline.plans import apply_checkpoint_resets

    timings = doc["timings"]
    started = time.time()
    sc = start_spark(args, job.cache_dir)
    try:
        timings["session_start_s"] = round(time.time() - started, 3)
        doc["spark"] = {"master": sc.master, "app_id": sc.applicationId, "default_parallelism": sc.defaultParallelism}
        lock_rounds(store, job)
        started = time.time()
        doc["spark"].update(check_executors(sc, job, args))
        timings["executor_check_s"] = round(time.time() - started, 3)
        apply_checkpoint_resets(store, plan)  # the first change to the log dirs: nothing was refused before it
        remove_stale_scratch(job)
        plan_rounds(store, job, args.split_bytes, sc.defaultParallelism, map_memory(sc, args))
        started = time.time()
        doc["spark"]["stages"] = clean_rounds(sc, job)
        timings["clean_job_s"] = round(time.time() - started, 3)
    finally:
        for r in job.rounds:  # the driver itself failed (Spark, a bug): the locks still go, recovery does the rest
            if r.locked:
                r.fail("the job stopped before this partition was committed")
        shutil.rmtree(job.run_dir, ignore_errors=True)
        sc.stop()


# --- driver: report --------------------------------------------------------------------------------------
def write_report(path: str, doc: Doc) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def totals(results: list[Doc]) -> dict[str, int]:
    out = {"partitions": len(results), "cleaned": 0, "locked": 0, "failed": 0, "bytes_read": 0,
           "bytes_written": 0, "records_read": 0, "records_written": 0, "tombstones_removed": 0}
    for r in results:
        out[r["status"] if r["status"] in ("cleaned", "locked") else "failed"] += 1
        for key in ("bytes_read", "bytes_written", "records_read", "records_written", "tombstones_removed"):
            out[key] += int((r.get("stats") or {}).get(key, 0))
    return out


def run(args: argparse.Namespace, doc: Doc, t0: float) -> int:
    from kafkalog.errors import KafkaLogError
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance.journal import new_run_id
    from kafkalog.pipeline.plans import PlanError, apply_checkpoint_resets, read_compaction_plan

    try:
        plan_doc = read_compaction_plan(args.plan) if args.plan else None
    except PlanError as exc:
        raise JobError(str(exc)) from None
    now_ms, wall_now_ms = resolve_clocks(args, None if plan_doc is None else plan_doc["now_ms"], t0)
    doc.update(now_ms=now_ms, wall_now_ms=wall_now_ms)
    broker_properties, broker = load_broker_properties(args)
    doc["log_dirs"] = log_dirs = resolve_log_dirs(args, broker.log_dirs)
    doc["numba_cache_dir"] = cache_dir = job_dir(args, "numba_cache_dir", DEFAULT_NUMBA_CACHE, log_dirs)
    os.environ["NUMBA_CACHE_DIR"] = cache_dir  # before kafkalog imports numba in this process
    doc["scratch_dir"] = scratch_dir = job_dir(args, "scratch_dir", DEFAULT_SCRATCH, log_dirs)
    try:
        store = LogStore(log_dirs, broker)
        plan = read_plan(args, store, now_ms, plan_doc)
    except KafkaLogError as exc:
        raise JobError(str(exc)) from None
    doc["plan"] = {"source": args.plan or "cleaner-manager", "topic": args.topic, "partition": args.partition}
    targets = [{k: t[k] for k in ("topic", "partition", "first_dirty_offset", "first_uncleanable_offset")}
               for t in plan["selected"]]
    errors = [{"topic": e.get("topic"), "partition": e.get("partition"), "ok": False, "status": "failed",
               "stage": "plan", "error": e.get("error")} for e in plan.get("errors") or [] if isinstance(e, dict)]
    doc["plan"]["targets"] = targets
    doc["run_id"] = run_id = args.run_id or new_run_id()
    doc["timings"]["plan_s"] = round(time.time() - t0, 3)
    job = Job(log_dirs, cache_dir, scratch_dir, Path(scratch_dir) / run_id, now_ms, wall_now_ms, run_id,
              {"log_dirs": log_dirs, "broker_properties": broker_properties, "numba_cache_dir": cache_dir},
              [Round(t, {**t, "ok": False, "status": "failed", "error": None, "started_at": time.time()})
               for t in targets])
    if targets:
        clean_on_spark(args, doc, store, plan, job)
    else:  # a cycle with nothing to clean does not pay for a Spark session
        apply_checkpoint_resets(store, plan)
    partitions: list[Doc] = errors + sorted((r.out for r in job.rounds), key=lambda r: (r["topic"], r["partition"]))
    for p in partitions:
        if "finished_at" in p:
            p["task_s"] = round(p["finished_at"] - p["started_at"], 3)
    doc["partitions"] = partitions
    doc["totals"] = totals(partitions)
    ok = all(p["ok"] for p in partitions)
    doc["status"] = "ok" if ok else "partitions-failed"
    return EXIT_OK if ok or args.partition_failures_ok else EXIT_PARTITIONS_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    args = parse_args(argv)
    doc: Doc = {"version": REPORT_VERSION, "status": "refused", "started_at": t0, "timings": {},
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
