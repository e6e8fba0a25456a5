"""Compact Kafka-format logs with Spark: the driver plans and commits, Spark tasks clean
(``kafkalog.maintenance.cleaning_tasks``). Every task decides with the driver's two clocks, so the job
writes the segments ``kafkalog compact`` writes, byte for byte; only the driver swaps, under the
partitions' cleaner locks, so a kill at any point leaves every partition recoverable to old or new by
``kafkalog recover``. Exit codes: 0 every planned partition was cleaned; 1 the job refused to run
(nothing changed) or Spark failed; 2 a partition failed or was locked. The steps, the file-system
contract, the options and the report: ``spark_jobs/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import gc
import math
import os
import re
import socket
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, NoReturn

from kafkalog.cycle.compaction import apply_checkpoint_resets, plan_compaction, read_compaction_plan
from kafkalog.cycle.documents import CompactionPlanDocument, write_json
from kafkalog.cycle.results import JOB_REPORT_VERSION
from kafkalog.errors import KafkaLogError, LogLockedError
from kafkalog.log import names
from kafkalog.log.config import BrokerConfig
from kafkalog.log.lock import cleaner_lock
from kafkalog.log.store import LogStore, configured_broker_file, configured_log_dirs
from kafkalog.maintenance.journal import new_run_id
from kafkalog.policy.log_cleaner import require_cleaner

# cleaning_tasks is imported where used: numba, which comes with it, reads NUMBA_CACHE_DIR (set by `run`) then.

EXIT_OK, EXIT_REFUSED, EXIT_PARTITIONS_FAILED = 0, 1, 2
LOOPBACK = "127.0.0.1"
DEFAULT_NUMBA_CACHE = ".kafkalog-numba-cache"  # beside the first log dir, not inside it (unknown file)
# One cache for the jobs of every store on these hosts: each new cache dir pays the kernels' compilation
# again, in the driver and in every executor's Python worker.
NUMBA_CACHE_ENV = "KAFKALOG_NUMBA_CACHE_DIR"
DEFAULT_SCRATCH = ".kafkalog-spark-scratch"
# A run's own sub-directory of the scratch dir, and its marker, flock-ed while the run's driver lives.
SCRATCH_RUN = re.compile(r"kafkalog-run-[0-9a-f]{32}")
SCRATCH_MARKER = ".kafkalog-spark-run"
# The files a key-map task saves (KeyMap.save at `<name>-<attempt tag>`): the only files the job removes there.
MAP_FILE = re.compile(r"map-(\d+|whole)-(attempt|pid)-\d+\.(table\.npy|arena\.npy|superseded\.npy|json)(\.tmp)?")
MIN_SPLIT_BYTES = 64 << 20  # below this, a second stage costs more than it saves
# A key map takes ~40 B per distinct key; a dirty range of tiny records has a key per ~30 B of log.
MAP_BYTES_PER_DIRTY_BYTE = 1.5
DEFAULT_MAP_MEMORY = 2 << 30  # a task's key map, unless spark.executor.pyspark.memory says otherwise
SHARED_HINT = ("every log dir must be on a volume mounted at the same path on the driver and on every "
               "Spark worker, with flock shared by every host (see spark_jobs/README.md)")
# What the job sets unless spark-submit's --master or --conf does: loopback (a cluster spread over several
# hosts must pass a driver host its executors reach), no UI, and this Python on the executors too.
SPARK_DEFAULTS = {"spark.master": "local[*]", "spark.app.name": "kafkalog-compact", "spark.log.level": "WARN",
                  "spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK, "spark.ui.enabled": "false",
                  "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}
SUMMED = ("bytes_read", "bytes_written", "records_read", "records_written", "tombstones_removed")

Doc = dict[str, Any]


class JobError(Exception):
    """The job refuses to run; the message says why and what to do."""


# --- arguments (spark_jobs/README.md explains each) -------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 1, not argparse's 2: 2 means "see the report"
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {message}\n")


def non_negative(text: str) -> int:
    """An argument that counts bytes or milliseconds: a negative one cannot be right (a clock skew of -1
    would refuse every executor)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog="compact_logs.py", description="Compact Kafka-format logs on Spark (spark_jobs/README.md).")
    p.add_argument("--log-dir", action="append", metavar="DIR", help="repeatable (env KAFKALOG_LOG_DIRS)")
    p.add_argument("--config-file", metavar="FILE", help="broker defaults (env KAFKALOG_CONFIG)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--plan", metavar="PLAN.json", help="the output of `kafkalog compact --dry-run --json`")
    which.add_argument("--topic", help="clean this topic's cleanable ranges whatever their dirty ratio")
    p.add_argument("--partition", type=int, help="with --topic: only this partition")
    p.add_argument("--now-ms", type=int, help="the cycle's clock (required unless the plan carries now_ms)")
    p.add_argument("--wall-now-ms", type=int, help="stamped into new tombstone horizons (default: the driver's clock)")
    p.add_argument("--byte-budget", type=non_negative, help="at most this many cleanable bytes")
    p.add_argument("--run-id", help="journal run id (default: a new one)")
    p.add_argument("--report", required=True, metavar="REPORT.json", help="where to write the JSON report")
    p.add_argument("--master", help="Spark master (default: spark-submit's --master, else local[*])")
    p.add_argument("--numba-cache-dir", metavar="DIR",
                   help=f"default: ${NUMBA_CACHE_ENV}, else <first log dir>/../{DEFAULT_NUMBA_CACHE}")
    p.add_argument("--scratch-dir", metavar="DIR", help=f"default: <first log dir>/../{DEFAULT_SCRATCH}")
    p.add_argument("--split-bytes", type=non_negative, metavar="N",
                   help="split a partition that recopies more (0: never)")
    p.add_argument("--map-memory", type=non_negative, metavar="BYTES", help="a task's key-map budget")
    p.add_argument("--max-clock-skew-ms", type=non_negative, default=2000, help="(default: %(default)s)")
    p.add_argument("--partition-failures-ok", action="store_true", help="exit 0 even if partitions failed")
    p.add_argument("--ui", action="store_true", help="enable the Spark UI (needs $SPARK_LOCAL_IP)")
    args = p.parse_args(argv)
    if args.partition is not None and args.topic is None:
        p.error("--partition needs --topic")
    if args.plan is None and args.now_ms is None:
        p.error("--now-ms is required (the cycle's clock), unless --plan gives it")
    return args


# --- executor side (pickled by value with this module; kafkalog is imported inside) ------------------------
def executor_name() -> str:
    """``host/executor`` of this Python worker: its executor's work dir on a cluster (unique per executor)."""
    work_dir = os.environ.get("SPARK_EXECUTOR_DIRS", "")
    executor = os.path.basename(work_dir.split(os.pathsep)[0]) if work_dir else "driver"
    return f"{socket.gethostname()}/{executor}"


def lock_seen(path: str) -> str:
    """"held" if another process holds an ``flock`` on ``path`` (as the driver does), else what it is."""
    try:
        with open(path, "rb") as f:  # closing it releases the lock, if this process got it
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "held"
    except OSError as exc:
        return f"not lockable ({exc.strerror})"
    return "free"


def probe(log_dirs: Sequence[str], expected: dict[str, list[str]], held: Sequence[str],
          job_dirs: dict[str, str]) -> Doc:
    """What one executor sees of what the driver relies on: ``problems``, each a refusal, and its clock."""
    where = f"the executor on {socket.gethostname()} (pid {os.getpid()})"
    problems: list[str] = []
    for d in log_dirs:
        missing = [name for name in expected.get(d, []) if not (Path(d) / name).is_dir()]
        if not Path(d).is_dir():
            wrong = "does not exist or is not a directory"
        elif not os.access(d, os.R_OK | os.X_OK | os.W_OK):
            wrong = "is not readable and writable"
        elif missing:
            wrong = f"lacks partition directories the driver sees: {', '.join(missing[:5])}"
        else:
            continue
        problems.append(f"log dir {d} {wrong} as seen by {where}, though the driver sees it: {SHARED_HINT}")
    for lock in held:
        if (state := lock_seen(lock)) != "held":
            problems.append(f"{where} does not see the driver's lock on {lock} as held (it is {state} there): "
                            f"{SHARED_HINT}")
    for option, d in job_dirs.items():
        try:
            Path(d).mkdir(parents=True, exist_ok=True)
            problem = None if os.access(d, os.W_OK | os.X_OK) else "is not writable"
        except OSError as exc:
            problem = f"cannot be created ({exc.strerror})"
        if problem:
            problems.append(f"{option} {d} {problem} on {where}; pass {option} DIR writable by every executor")
    # This Python worker (Spark reuses it) will run cleaning tasks: load the compiled kernels now, once,
    # rather than in the first task it runs.
    os.environ.setdefault("NUMBA_CACHE_DIR", job_dirs["--numba-cache-dir"])
    try:
        from kafkalog.maintenance.warmup import warm

        warm()
    except ImportError as exc:
        problems.append(f"{where} cannot import kafkalog ({exc}): spark.pyspark.python must be a Python with "
                        "kafkalog installed")
    except Exception:  # noqa: BLE001 - the cleaning tasks will report what is wrong
        pass
    # pyspark runs a full gc.collect() after each task of a reused worker; with the kernels and their modules
    # in reach each one walks ~10^5 objects (tens of ms a task). They live as long as the worker.
    gc.collect()
    gc.freeze()
    return {"where": where, "executor": executor_name(), "problems": problems, "clock_ms": time.time() * 1000}


def run_task(item: Doc) -> Doc:
    """One task: a whole round, a key-map part, or one group of a huge partition
    (``kafkalog.maintenance.cleaning_tasks``). A failure the library reports is the task's result; a
    crash is Spark's to retry."""
    # numba reads NUMBA_CACHE_DIR when first imported; spark.executorEnv also sets it for new workers.
    os.environ.setdefault("NUMBA_CACHE_DIR", item["numba_cache_dir"])
    from pyspark import TaskContext

    from kafkalog.log.config import BrokerConfig
    from kafkalog.log.store import LogStore
    from kafkalog.maintenance import cleaning_tasks as tasks

    task = TaskContext.get()
    tag = f"attempt-{task.taskAttemptId()}" if task is not None else f"pid-{os.getpid()}"
    out: Doc = {"key": item["key"], "kind": item["kind"], "ok": False, "error": None, "tag": tag,
                "executor": executor_name(), "started_at": time.time()}
    try:
        store = LogStore(item["log_dirs"], BrokerConfig.from_properties(item["broker_properties"]))
        spec = tasks.RoundSpec.from_dict(item["spec"])
        if item["kind"] == "round":
            out.update(tasks.clean_round_task(store, spec, tag))
        elif item["kind"] == "map":
            done = tasks.map_part_task(store, spec, item["part"], Path(item["scratch"]) / f"{item['map']}-{tag}")
            out.update(groups=[], maps=[done["stats"]], part=item["part"], prefix=done["prefix"],
                       txn_events=done["txn_events"], end_offset=done["end_offset"])
        else:
            out.update(groups=[tasks.write_group_task(store, spec, item["index"], item["map_prefixes"],
                                                      item["txn_state"], tag)], maps=[])
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
        out.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=6))
    out["finished_at"] = time.time()
    return out


# --- driver: checks ----------------------------------------------------------------------------------------
def resolve_clocks(args: argparse.Namespace, plan: CompactionPlanDocument | None, wall_ms: int) -> tuple[int, int]:
    """(now_ms, wall_now_ms): the cycle's clock and the one wall clock every task stamps horizons with."""
    now_ms: int = args.now_ms if plan is None else plan.now_ms
    if args.now_ms not in (None, now_ms):
        raise JobError(f"--now-ms {args.now_ms} differs from the plan's now_ms {now_ms}; the plan's ranges "
                       "were chosen at its clock")
    wall_now_ms: int = wall_ms if args.wall_now_ms is None else args.wall_now_ms
    if now_ms < 0:
        raise JobError(f"--now-ms {now_ms}: must not be negative")
    if now_ms > wall_ms:
        raise JobError(f"--now-ms {now_ms} is in the future (wall clock {wall_ms}); a cycle may never "
                       "decide more than is due now")
    if wall_now_ms < now_ms:
        raise JobError(f"--wall-now-ms {wall_now_ms} is before --now-ms {now_ms}; the cycle's clock is never "
                       "ahead of the wall clock")
    return now_ms, wall_now_ms


def open_store(args: argparse.Namespace) -> tuple[LogStore, dict[str, str]]:
    """The log dirs as ``kafkalog`` finds them, and the broker file's properties (the executors get those)."""
    broker = BrokerConfig.load(configured_broker_file(args.config_file))  # refuses an unreadable or invalid file
    store = LogStore(configured_log_dirs(args.log_dir, broker), broker)  # refuses a missing log dir
    for d in store.log_dirs:
        if not os.access(d, os.R_OK | os.X_OK | os.W_OK):
            raise JobError(f"log dir {d} is not readable and writable by this user on the driver")
    return store, dict(broker.properties)


# Where the job writes (the report, the numba cache, a split partition's key maps in the scratch dir) must not
# be in the store: the report would replace a segment, key maps would sit in a partition, and a scratch
# path in a partition named after it would be removed with them. Paths are compared resolved (symlinks and
# `..` followed), before anything is written.
def named_log_dirs(args: argparse.Namespace) -> list[Path]:
    """The existing log dirs the arguments name, found as ``open_store`` finds them but refusing none: a
    refusal writes the report too, so its path is checked against these first (a broker file that cannot
    be read hides its ``log.dirs``; the job then refuses it)."""
    try:
        broker: BrokerConfig | None = BrokerConfig.load(configured_broker_file(args.config_file))
    except KafkaLogError:
        broker = None
    found = []
    for d in configured_log_dirs(args.log_dir, broker):
        with contextlib.suppress(OSError, RuntimeError):
            if (path := Path(d).resolve()).is_dir():
                found.append(path)
    return found


def store_areas(log_dir: Path) -> list[tuple[Path, str]]:
    """The log dir, and where each of its partition dirs that is a symlink leads (a partition kept on
    another volume), resolved, each with how to name it."""
    areas = [(log_dir, f"log dir {log_dir}")]
    with contextlib.suppress(OSError):
        for entry in os.scandir(log_dir):
            if entry.is_symlink() and names.parse_partition_dir_name(entry.name) is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    areas.append((Path(entry.path).resolve(), f"partition dir {entry.path} of log dir {log_dir}"))
    return areas


def outside_log_dirs(option: str, given: Path | str, log_dirs: Sequence[Path]) -> Path:
    """``given``, resolved, if it neither is nor lies inside nor contains a log dir or a partition dir;
    else a one-line refusal naming ``option`` and the log dir."""
    try:
        path = Path(given).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise JobError(f"{option} {given} cannot be resolved ({exc})") from None
    shown = str(given) if path == Path(given) else f"{given} (= {path})"
    for log_dir in log_dirs:
        for area, what in store_areas(log_dir):
            if path == area:
                where = f"is {what}"
            elif area in path.parents:
                where = f"lies inside {what}"
            elif path in area.parents:
                where = f"contains {what}"
            else:
                continue
            raise JobError(f"{option} {shown} {where}: the job's own files stay out of the log dirs and their "
                           "partitions; pass a path outside every log dir, not above one")
    return path


def report_path(args: argparse.Namespace) -> str:
    """``--report``, checked before anything else: the job writes it even when it refuses to run."""
    path = outside_log_dirs("--report", args.report, named_log_dirs(args))
    if path.exists() and not path.is_file():  # the report would take its place (a directory fails at the end)
        raise JobError(f"--report {args.report} exists and is not a regular file; pass the path of a JSON file")
    return str(args.report)


def job_dirs(args: argparse.Namespace, log_dirs: Sequence[Path]) -> tuple[str, str]:
    """The numba cache and scratch dirs, as given (the cache: else at ``$KAFKALOG_NUMBA_CACHE_DIR``), else
    beside the first log dir, checked (the probe checks that every executor can write them)."""
    chosen = []
    cache_env = os.environ.get(NUMBA_CACHE_ENV) or None
    for option, given, default in (("--numba-cache-dir", args.numba_cache_dir, DEFAULT_NUMBA_CACHE),
                                   ("--scratch-dir", args.scratch_dir, DEFAULT_SCRATCH)):
        if not given and option == "--numba-cache-dir" and cache_env:
            given, shown = cache_env, f"{option} (${NUMBA_CACHE_ENV})"
        else:
            shown = option if given else f"{option} (default)"
        path = outside_log_dirs(shown, given or log_dirs[0].parent / default, log_dirs)
        if path.exists() and not path.is_dir():
            raise JobError(f"{shown} {path} is not a directory")
        chosen.append(str(path))
    return chosen[0], chosen[1]


# --- driver: Spark -----------------------------------------------------------------------------------------
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
    conf = SparkConf().set("spark.executorEnv.NUMBA_CACHE_DIR", numba_cache_dir)
    if args.master:
        conf.setMaster(args.master)
    if args.ui:
        conf.set("spark.ui.enabled", "true")
    for key, value in SPARK_DEFAULTS.items():
        conf.setIfMissing(key, value)
    return SparkContext.getOrCreate(conf)


def check_executors(sc: Any, job: Job, args: argparse.Namespace) -> Doc:
    """The probe stage: refuse executors that do not see what the driver sees (``SHARED_HINT``)."""
    expected: dict[str, list[str]] = {}
    held: dict[str, str] = {}  # a lock the driver holds, per log dir
    for r in job.live():
        log_dir = str(r.location.log_dir)
        expected.setdefault(log_dir, []).append(r.name)
        held.setdefault(log_dir, str(r.location.directory / names.CLEANER_LOCK_FILE))
    log_dirs, locks = job.log_dirs, list(held.values())
    job_dirs = {"--numba-cache-dir": job.cache_dir, "--scratch-dir": job.scratch_dir}
    slices = max(2, 2 * sc.defaultParallelism)
    sc.setJobGroup("kafkalog-probe", "kafkalog: what the executors see of the log dirs")
    before = time.time() * 1000
    views = sc.parallelize(range(slices), slices).map(lambda _: probe(log_dirs, expected, locks, job_dirs)).collect()
    after = time.time() * 1000
    for view in views:
        skew = max(before - view["clock_ms"], view["clock_ms"] - after, 0)
        if skew > args.max_clock_skew_ms:
            view["problems"].append(f"the clock of {view['where']} is {skew:.0f} ms off the driver's (more than "
                                    f"--max-clock-skew-ms {args.max_clock_skew_ms}): it would shorten or lengthen "
                                    "file.delete.delay.ms; synchronize the hosts' clocks (NTP)")
        if view["problems"]:
            raise JobError(view["problems"][0])
    return {"probe_tasks": len(views), "executors_seen": sorted({v["executor"] for v in views})}


# --- driver: rounds ----------------------------------------------------------------------------------------
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
    scratch: Path | None = None  # where this run's key maps of it go (``ScratchRun.partition``)
    split: bool = False  # a key-map stage of ``spec.parts`` tasks, then a rewrite task per group
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def name(self) -> str:  # its tasks' key
        return str(self.location.directory.name)


    def fail(self, exc: BaseException | str, status: str = "failed") -> None:
        if isinstance(exc, BaseException) and not isinstance(exc, KafkaLogError | OSError):
            exc = f"unexpected {type(exc).__name__}: {exc}"
        self.out.update(ok=False, status=status, error=str(exc))
        self.end()

    def end(self) -> None:
        """Discard every attempt's leftovers (if tasks ran) and release the cleaner lock (once)."""
        if self.locked:
            if self.spec is not None:
                from kafkalog.maintenance import cleaning_tasks as tasks
                with contextlib.suppress(OSError):
                    tasks.discard_attempts(self.location)
            if self.scratch is not None:
                remove_maps(self.scratch)
            self.held.close()
            self.locked = False
            self.out["finished_at"] = time.time()


def remove_maps(directory: Path) -> None:
    """One run's key maps of one partition: the files a key-map task saves (``MAP_FILE``), then the
    directory if that left it empty. Anything else there stays; a symlink is not followed."""
    if directory.is_symlink():
        return
    try:
        entries = list(os.scandir(directory))
    except OSError:  # none were saved
        return
    for entry in entries:
        if MAP_FILE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        directory.rmdir()


class ScratchRun:
    """This run's own sub-directory of ``--scratch-dir``, ``kafkalog-run-<random>/``: a split partition's
    key maps go to ``<it>/<partition dir name>/``. The scratch dir may hold anything, so the job removes
    there only what its runs made: key-map files (``remove_maps``) and, once empty, their directories;
    never a tree, never a name made of a partition's alone.

    A run dir's marker is flock-ed while its driver lives (it appears only once locked). A killed run's
    dir has its marker free: its maps of a partition go once this job holds that partition's cleaner lock
    (nobody can be using them then), and the dir itself at the end, if nothing else is left in it."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.dir = base / f"kafkalog-run-{uuid.uuid4().hex}"
        self.dir.mkdir()
        self._marker: IO[str] = open(self.dir / f"{SCRATCH_MARKER}.tmp", "w")  # noqa: SIM115 - held until close
        fcntl.flock(self._marker, fcntl.LOCK_EX)
        os.rename(self.dir / f"{SCRATCH_MARKER}.tmp", self.dir / SCRATCH_MARKER)
        self.killed = [d for d in base.iterdir() if SCRATCH_RUN.fullmatch(d.name) and d != self.dir
                       and not d.is_symlink() and (d / SCRATCH_MARKER).is_file()]

    def partition(self, name: str) -> Path:
        """Where this run's key maps of partition dir ``name`` go; killed runs' of it are removed (the
        caller holds its cleaner lock)."""
        for killed in self.killed:
            remove_maps(killed / name)
        return self.dir / name

    def close(self) -> None:
        """This run's dir (its partitions' maps went with their rounds) and the killed runs' left empty."""
        self._marker.close()
        for d in (self.dir, *self.killed):
            try:
                with open(d / SCRATCH_MARKER) as marker:
                    fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its driver is gone (or is this one)
                    if {e.name for e in os.scandir(d)} == {SCRATCH_MARKER}:
                        os.unlink(d / SCRATCH_MARKER)
                        d.rmdir()
            except OSError:  # held by a live run, not empty, or gone
                continue


@dataclass
class Job:
    log_dirs: list[str]
    cache_dir: str
    scratch_dir: str
    now_ms: int
    wall_now_ms: int
    run_id: str
    worker: Doc  # what every task needs besides its round: how to open the log dirs as the driver does
    rounds: list[Round] = field(default_factory=list)
    scratch: ScratchRun | None = None  # made once Spark runs
    failures: list[Doc] = field(default_factory=list)  # checkpoint resets of partitions the log dirs lack

    def live(self) -> list[Round]:
        """The rounds still holding their lock: neither committed nor failed yet."""
        return [r for r in self.rounds if r.locked]


def lock_rounds(store: LogStore, job: Job) -> None:
    """Every selected partition's cleaner lock, before the probe (which checks the executors see it)."""
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


def plan_rounds(sc: Any, store: LogStore, job: Job, split_bytes: int | None, map_memory: int | None) -> None:
    """Leftovers resolved and each round's spec fixed; a huge partition gets a key-map stage, in as many
    parts as its map needs to fit a task's memory (as given, or half the executor's declared Python memory)."""
    from kafkalog.maintenance import cleaning_tasks as tasks
    from kafkalog.maintenance.cleaner import dirty_segments
    assert job.scratch is not None
    for r in job.live():
        r.scratch = job.scratch.partition(r.name)  # the partition's lock is ours: killed runs' key maps go
        try:
            r.spec, r.ctx = tasks.plan_round(store, r.location, r.target["first_dirty_offset"],
                                             r.target["first_uncleanable_offset"], now_ms=job.now_ms,
                                             wall_now_ms=job.wall_now_ms)
            bases = {b for g in r.spec.groups for b in g}
            r.recopy_bytes = sum(s.size for s in r.ctx.segments if s.base_offset in bases)
        except Exception as exc:  # noqa: BLE001
            r.fail(exc)
    if not map_memory:
        declared = sc.getConf().get("spark.executor.pyspark.memory", None)
        map_memory = sc._jvm.org.apache.spark.util.Utils.byteStringAsBytes(declared) // 2 if declared else \
            DEFAULT_MAP_MEMORY
    parallelism = sc.defaultParallelism
    threshold = split_bytes if split_bytes is not None else \
        max(MIN_SPLIT_BYTES, sum(r.recopy_bytes for r in job.live()) // max(1, parallelism))
    for r in job.live():
        dirty = sum(s.size for s in dirty_segments(r.ctx))
        parts = max(1, math.ceil(dirty * MAP_BYTES_PER_DIRTY_BYTE / map_memory))  # to fit a task's memory
        huge = split_bytes != 0 and parallelism > 1 and len(r.spec.groups) > 1 and r.recopy_bytes > threshold
        if huge or parts > 1:
            # A part of a key map spread over the whole range costs nearly the whole map's inserts (its
            # keys) and the whole range's reading: parts by hash, one per core, halve the inserts each.
            r.spec = replace(r.spec, parts=max(parts, parallelism if huge else 1))
            r.split = r.spec.parts > 1


def item(job: Job, r: Round, kind: str, **extra: Any) -> Doc:
    return {**job.worker, "key": r.name, "kind": kind, "spec": r.spec.to_dict(), **extra}


def clean_rounds(sc: Any, job: Job) -> Doc:
    """The cleaning stages, and each round's commit as soon as its last stage is in."""
    from kafkalog.maintenance import cleaning_tasks as tasks
    stages: Doc = {}
    live = sorted(job.live(), key=lambda r: -r.recopy_bytes)  # the biggest first
    first = [item(job, r, "map", part=p, map=f"map-{p}", scratch=str(r.scratch)) for r in live if r.split
             for p in range(r.spec.parts)]
    first += [item(job, r, "round") for r in live if not r.split]
    outs = run_stage(sc, first, "clean", stages)
    split = []
    for r in live:
        if not r.split:
            commit(job, r, outs.get(r.name, []), 1)
        elif r.locked and all_ok(r, maps := outs.get(r.name, []), r.spec.parts):
            r.maps = sorted(maps, key=lambda m: m["part"])
            split.append(r)
    # Parts that hold more keys than the dedupe buffer's map: one capped map finds where the round ends.
    refit = [r for r in split if not tasks.keys_fit(r.ctx, [m for o in r.maps for m in o["maps"]])]
    for r in refit:
        r.spec = replace(r.spec, parts=1)
    outs = run_stage(sc, [item(job, r, "map", part=0, map="map-whole", scratch=str(r.scratch)) for r in refit],
                     "map-whole", stages)
    second = []
    for r in split:
        if r in refit and not all_ok(r, maps := outs.get(r.name, []), 1):
            continue
        r.maps = maps if r in refit else r.maps
        r.spec = tasks.settled(r.ctx, r.spec, r.maps[0]["end_offset"])
        states = tasks.group_txn_states(r.ctx, r.spec, r.maps)
        second += [item(job, r, "group", index=i, map_prefixes=[m["prefix"] for m in r.maps], txn_state=state)
                   for i, state in enumerate(states)]
    outs = run_stage(sc, second, "rewrite", stages)
    for r in live:
        if r.split:
            commit(job, r, outs.get(r.name, []), len(r.spec.groups))
    return stages


def run_stage(sc: Any, items: list[Doc], name: str, stages: Doc) -> dict[str, list[Doc]]:
    """One Spark stage of ``run_task``, a task per item in the given order; its outputs by partition."""
    if not items:
        return {}
    stage: Doc = {"tasks": len(items), "error": None}
    started, stages[name] = time.time(), stage
    sc.setJobGroup(f"kafkalog-{name}", f"kafkalog: {name}")
    try:
        outs = sc.parallelize(items, len(items)).map(run_task).collect()
        stage.update(executors=sorted({o["executor"] for o in outs}),
                     task_s=[round(o["finished_at"] - o["started_at"], 3) for o in outs])
    except Exception as exc:  # noqa: BLE001 - Spark gave up (a task failed too often): these rounds fail
        stage["error"] = (str(exc).strip() or type(exc).__name__).splitlines()[0][:500]
        outs = [{"key": i["key"], "ok": False, "error": f"Spark gave up on the {name} stage: {stage['error']}"}
                for i in items]
    stage["seconds"] = round(time.time() - started, 3)
    by_key: dict[str, list[Doc]] = {}
    for out in outs:
        by_key.setdefault(out["key"], []).append(out)
    return by_key


def all_ok(r: Round, outs: list[Doc], expected: int) -> bool:
    """Whether every task of the round's stage reported success; else the round fails."""
    bad = [o["error"] for o in outs if not o["ok"]]
    if bad or len(outs) != expected:
        r.fail(bad[0] if bad else f"{expected - len(outs)} of the round's tasks returned nothing")
    return not bad and len(outs) == expected


def commit(job: Job, r: Round, outs: list[Doc], expected: int) -> None:
    from kafkalog.maintenance import cleaning_tasks as tasks
    if not r.locked or not all_ok(r, outs, expected):
        return
    started = time.time()
    try:
        if not r.split:  # the round's one task says where its map ended it
            r.spec = tasks.settled(r.ctx, r.spec, outs[0]["end_offset"])
        result = tasks.commit_round(r.ctx, r.spec, [g for o in outs for g in o["groups"]],
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


def clean_on_spark(args: argparse.Namespace, doc: Doc, store: LogStore, plan: CompactionPlanDocument,
                   job: Job) -> None:
    timings, started = doc["timings"], time.time()
    sc = start_spark(args, job.cache_dir)
    try:
        timings["session_start_s"] = round(time.time() - started, 3)
        try:
            job.scratch = ScratchRun(Path(job.scratch_dir))
        except OSError as exc:
            raise JobError(f"--scratch-dir {job.scratch_dir}: cannot make this run's directory in it on the driver "
                           f"({exc}); {SHARED_HINT}") from None
        doc["spark"] = {"master": sc.master, "app_id": sc.applicationId, "default_parallelism": sc.defaultParallelism}
        lock_rounds(store, job)
        started = time.time()
        doc["spark"].update(check_executors(sc, job, args))
        timings["executor_check_s"] = round(time.time() - started, 3)
        job.failures += apply_resets(store, plan)  # the first change to the log dirs: nothing was refused before it
        plan_rounds(sc, store, job, args.split_bytes, args.map_memory)
        started = time.time()
        doc["spark"]["stages"] = clean_rounds(sc, job)
        timings["clean_job_s"] = round(time.time() - started, 3)
    finally:
        for r in job.live():  # the driver itself failed (Spark, a bug): the locks still go, recovery does the rest
            r.fail("the job stopped before this partition was committed")
        if job.scratch is not None:
            job.scratch.close()
        sc.stop()


# --- driver: the run and its report ------------------------------------------------------------------------
def apply_resets(store: LogStore, plan: CompactionPlanDocument) -> list[Doc]:
    """The plan's checkpoint resets. A reset of a partition the log dirs do not hold (deleted since the
    plan was made, or a plan made elsewhere) fails that partition, as a selected one does, and the others
    are applied; returns those failures, for the report."""
    known, failures = [], []
    for reset in plan.checkpoint_resets:
        try:
            store.locate(reset.topic, reset.partition)
            known.append(reset)
        except (KafkaLogError, OSError) as exc:
            failures.append({"topic": reset.topic, "partition": reset.partition, "ok": False,
                             "status": "failed", "stage": "checkpoint-reset",
                             "error": f"checkpoint reset to offset {reset.offset}: {exc}"})
    apply_checkpoint_resets(store, dataclasses.replace(plan, checkpoint_resets=tuple(known)))
    return failures


def totals(partitions: list[Doc]) -> dict[str, int]:
    out = {"partitions": len(partitions), "cleaned": 0, "locked": 0, "failed": 0}
    for p in partitions:
        out[p["status"] if p["status"] in ("cleaned", "locked") else "failed"] += 1
    return out | {key: sum(int(p["stats"][key]) for p in partitions if p["status"] == "cleaned") for key in SUMMED}


def run(args: argparse.Namespace, doc: Doc, t0: float) -> int:
    try:
        plan = read_compaction_plan(args.plan) if args.plan else None
        now_ms, wall_now_ms = resolve_clocks(args, plan, int(t0 * 1000))
        doc.update(now_ms=now_ms, wall_now_ms=wall_now_ms)
        store, broker_properties = open_store(args)
        if plan is not None:
            require_cleaner(store.broker)  # a plan is explicit compaction (--topic is refused by plan_compaction)
        doc["log_dirs"] = log_dirs = [str(d) for d in store.log_dirs]
        cache_dir, scratch_dir = job_dirs(args, store.log_dirs)
        doc.update(numba_cache_dir=cache_dir, scratch_dir=scratch_dir)
        os.environ["NUMBA_CACHE_DIR"] = cache_dir  # also for a JVM this process launches, and its workers
        if plan is None:
            plan = plan_compaction(store, now_ms=now_ms, topic=args.topic, byte_budget=args.byte_budget,
                                   partitions=None if args.partition is None else [args.partition])
    except KafkaLogError as exc:
        raise JobError(str(exc)) from None
    targets = [{"topic": t.topic, "partition": t.partition, "first_dirty_offset": t.first_dirty_offset,
                "first_uncleanable_offset": t.first_uncleanable_offset} for t in plan.selected]
    doc["plan"] = {"source": args.plan or "cleaner-manager", "topic": args.topic, "partition": args.partition,
                   "targets": targets}
    doc["run_id"] = run_id = args.run_id or new_run_id()
    doc["timings"]["plan_s"] = round(time.time() - t0, 3)
    job = Job(log_dirs, cache_dir, scratch_dir, now_ms, wall_now_ms, run_id,
              {"log_dirs": log_dirs, "broker_properties": broker_properties, "numba_cache_dir": cache_dir},
              [Round(t, {**t, "ok": False, "status": "failed", "error": None, "started_at": time.time()})
               for t in targets])
    if targets:
        clean_on_spark(args, doc, store, plan, job)
    else:  # a cycle with nothing to clean does not pay for a Spark session
        job.failures += apply_resets(store, plan)
    errors = [{"topic": e.topic, "partition": e.partition, "ok": False, "status": "failed", "stage": "plan",
               "error": e.error} for e in plan.errors]
    doc["partitions"] = errors + job.failures + sorted((r.out for r in job.rounds),
                                                       key=lambda p: (p["topic"], p["partition"]))
    doc["totals"] = totals(doc["partitions"])
    ok = all(p["ok"] for p in doc["partitions"])
    doc["status"] = "ok" if ok else "partitions-failed"
    return EXIT_OK if ok or args.partition_failures_ok else EXIT_PARTITIONS_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    args = parse_args(argv)
    doc: Doc = {"version": JOB_REPORT_VERSION, "status": "refused", "error": None, "plan": None, "started_at": t0,
                "timings": {}, "partitions": [], "totals": totals([])}
    code, report = EXIT_REFUSED, None
    try:
        report = report_path(args)
        code = run(args, doc, t0)
    except JobError as exc:
        doc["error"] = str(exc)
        print(f"compact_logs: error: {exc}", file=sys.stderr)
    except Exception as exc:  # Spark itself failed: still leave a report saying so
        doc.update(status="spark-failed", error=f"{type(exc).__name__}: {exc}")
        print(f"compact_logs: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc()
    doc["timings"]["total_s"] = round(time.time() - t0, 3)
    if report is not None:
        write_json(report, doc)
    t = doc["totals"]
    print(f"compact_logs: {doc['status']}: {t['cleaned']} cleaned, {t['locked']} locked, {t['failed']} failed "
          f"of {t['partitions']} partitions in {doc['timings']['total_s']:.1f} s; "
          f"{f'report {report}' if report else 'no report written'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
