"""The Airflow side of the pipeline: a task decorator and two operators over ``kafkalog.cycle``.

- ``@maintenance_task``: a TaskFlow task whose returned ``topics`` become asset events (through the
  ``kafkalog-topics`` AssetAlias) and OpenLineage datasets with the ``kafkalogMaintenance`` facet.
- ``WaitFileDeleteDelayOperator``: defers on the **wall clock** until this run's newest mark plus the
  largest ``file.delete.delay.ms`` involved; the triggerer ends it, so no worker slot is held.
- ``CompactLogsOperator``: ``SparkSubmitOperator`` running ``spark_jobs/compact_logs.py`` with the
  cycle's compaction plan on the ``spark_default`` connection (``local[*]`` when there is none);
  skipped when nothing is due.

Importing this module imports Airflow, never numba or pyspark: DAG files import it at parse time.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import Asset, AssetAlias, BaseOperator, Context, Param
from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from kafkalog.airflow import lineage
from kafkalog.airflow.hooks import DEFAULT_SPARK_CONN_ID, KafkalogHook, StoreConnection
from kafkalog.airflow.provider import run_dir_base
from kafkalog.cycle.report import compaction_changes, failure_message, format_report, summarize
from kafkalog.cycle.results import CompactionJobReport, SelectResult, compaction_report_path
from kafkalog.cycle.steps import (
    CycleSettings,
    cycle_clock_ms,
    describe_error,
    file_delete_wait,
    format_ms,
    load_settings,
    permanent_error,
    run_dir_for,
    wall_clock_ms,
)

TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
WAIT_SLACK = datetime.timedelta(minutes=10)  # how long past its moment a wait may take before it fails
ERROR_XCOM_KEY = "kafkalog_error"  # a failed task's error, for the report task to name the cause
MAX_ERROR_CHARS = 2000  # of it (a spark-submit failure quotes its whole command line)
SCAN_TASK = "scan_partitions"
# Wall clocks in milliseconds since the epoch have 13 digits (2001-09-09 to 2286-11-20): fewer is a time
# in seconds or a small number, more one in microseconds.
EPOCH_MS_MIN, EPOCH_MS_MAX = 10**12, 10**13 - 1


@dataclass(frozen=True)
class ParsedStore:
    """What a store's cleanup DAG needs when its file is parsed: its schedule and queue."""

    interval: datetime.timedelta
    queue: str | None
    note: str  # for the DAG's doc: where they came from, or why the defaults are used


def parse_time_store(conn_id: str) -> ParsedStore:
    """The store's retention check interval (``log.retention.check.interval.ms`` of its broker file) and
    queue, read from its connection as the DAG file is parsed (no log dir is read). A connection or
    broker file that cannot be read leaves the DAG on Kafka's default interval and the default queue,
    and its scan names the problem, instead of breaking every store's DAGs at parse time."""
    from kafkalog.errors import KafkaLogError
    from kafkalog.log.config import BrokerConfig

    try:
        store = KafkalogHook(conn_id).store
        interval_ms = BrokerConfig.load(store.config_file).log_retention_check_interval_ms
    except (KafkaLogError, OSError) as exc:
        return ParsedStore(datetime.timedelta(milliseconds=BrokerConfig.load(None).log_retention_check_interval_ms),
                           None, f" (not readable when parsed: {exc}; Kafka's default interval)")
    note = f", store `{store.name}`" + (f", queue `{store.queue}`" if store.queue else "")
    return ParsedStore(datetime.timedelta(milliseconds=interval_ms), store.queue, note)


def store_of(context: Mapping[str, Any]) -> StoreConnection:
    """The store this run maintains: the ``kafkalog`` connection its ``store`` param names."""
    return KafkalogHook(context["params"]["store"]).store


def _log_dirs(context: Mapping[str, Any], store: StoreConnection) -> list[str]:
    """The run's log dirs: the ``log_dirs`` param, else the store's (its connection's), else ``log.dirs``
    of the broker file (the ``config_file`` param, else the store's)."""
    params = context["params"]
    return store.resolved_log_dirs(params["log_dirs"], params.get("config_file"))


def cycle_params(store: Param, **extra: Param) -> dict[str, Param]:
    """The trigger form of both DAGs, validated by Airflow before a run is created: what a JSON schema
    can refuse is refused there (the rest fails the first task at once, naming the value). Nothing in
    it is read from a store or the environment when the DAG file is parsed."""
    return {
        "store": store,
        "log_dirs": Param([], type="array", uniqueItems=True, items={"type": "string", "pattern": "^/.*[^/]"},
                          description="Absolute paths of the log dirs (Kafka's log.dirs), each once, not /. Empty: "
                                      "the store's (its kafkalog connection's), else log.dirs of the broker file."),
        "config_file": Param(None, type=["null", "string"], pattern="^/",
                             description="Absolute path of the broker defaults, server.properties style "
                                         "(log.retention.hours=…). Empty: the store's."),
        "topics": Param(None, type=["null", "array"], uniqueItems=True,
                        items={"type": "string", "pattern": TOPIC_PATTERN},
                        description="Only these topics (default: every topic)."),
        "dry_run": Param(False, type="boolean",
                         description="Plan and report exactly what a real run would do; change nothing."),
        "wall_now_ms": Param(None, type=["null", "integer"], minimum=EPOCH_MS_MIN, maximum=EPOCH_MS_MAX,
                             description="Pin the wall clock stamped into new tombstone delete horizons, to "
                                         "reproduce a cycle byte for byte: milliseconds since the epoch, not before "
                                         "the cycle's clock. Default: the wall clock."),
        **extra,
    }


def cycle_settings(context: Mapping[str, Any]) -> CycleSettings:
    """The cycle's settings from the run's params and clock: the end of its data interval when it has
    one (scheduled, backfilled, or triggered with a logical date), else ``run_after``; never later
    than the wall clock."""
    params = context["params"]
    store = store_of(context)  # one lookup of the connection for the whole settings
    logical = context.get("data_interval_end") or context["dag_run"].run_after
    return CycleSettings(
        run_id=f"{context['dag'].dag_id}/{context['run_id']}",
        now_ms=cycle_clock_ms(int(logical.timestamp() * 1000)),
        log_dirs=tuple(_log_dirs(context, store)),
        config_file=params.get("config_file") or store.config_file,
        topics=None if params.get("topics") is None else tuple(params["topics"]),
        dry_run=bool(params.get("dry_run")),
        wall_now_ms=params.get("wall_now_ms"))


def run_dir(context: Mapping[str, Any]) -> Path:
    """The run dir of this DAG run (derived, not passed: every task of the run finds the same one)."""
    return run_dir_for(run_dir_base(), _log_dirs(context, store_of(context)), context["dag"].dag_id,
                       context["run_id"])


# --- failures: one classification for every task ---------------------------------------------------------
@contextlib.contextmanager
def failing_fast(context: Mapping[str, Any]) -> Iterator[None]:
    """Around a task's work: an error a retry would meet again (``cycle.permanent_error``: bad config,
    log dirs, topics, params, data) fails the task at once, with its message, instead of being
    retried for minutes; a transient one (I/O, a held lock, Spark) keeps its retries. Either way the
    error goes to XCom (``ERROR_XCOM_KEY``), where the report task finds the cause of the run's failure."""
    try:
        yield
    except AirflowSkipException:  # (deferring is a BaseException: it passes too)
        raise
    except Exception as exc:
        message = describe_error(exc)
        ti = context["ti"]
        label = ti.task_id if getattr(ti, "map_index", -1) in (-1, None) else f"{ti.task_id}[{ti.map_index}]"
        with contextlib.suppress(Exception):  # never hide the error behind a failure to record it
            ti.xcom_push(key=ERROR_XCOM_KEY, value={"task": label, "error": message[:MAX_ERROR_CHARS]})
        if permanent_error(exc):
            raise AirflowFailException(message) from exc
        raise


def _task_states(context: Mapping[str, Any]) -> dict[str, str]:
    """Each task of this run by its label (``task`` or ``task[map index]``) with its state."""
    ti = context["ti"]
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id]).get(ti.run_id, {})
    ids = set(context["dag"].task_ids)
    labels = {}
    for key, state in states.items():
        mapped = re.fullmatch(r"(.+)_(\d+)", key)
        labels[f"{mapped[1]}[{mapped[2]}]" if key not in ids and mapped and mapped[1] in ids else key] = str(state)
    return labels


def failed_tasks(context: Mapping[str, Any]) -> list[str]:
    """The tasks of this run that failed (or could not run because an upstream task failed)."""
    return sorted(task for task, state in _task_states(context).items() if state in ("failed", "upstream_failed"))


def task_errors(context: Mapping[str, Any]) -> dict[str, str | None]:
    """The tasks of this run that failed, each with the error it recorded (None: it could not run
    because an upstream task failed, or it left no error)."""
    failed = failed_tasks(context)
    ids = sorted({re.sub(r"\[\d+\]$", "", t) for t in failed})
    recorded = context["ti"].xcom_pull(task_ids=ids, key=ERROR_XCOM_KEY) if ids else []
    errors = {r["task"]: r["error"] for r in recorded or [] if isinstance(r, Mapping)}
    return {task: errors.get(task) for task in failed}


def require_scan(context: Mapping[str, Any]) -> None:
    """A task that runs whatever happened upstream has nothing to do when the cycle never started:
    skipped then, so that the report names the scan's error once rather than each task's echo of it."""
    state = _task_states(context).get(SCAN_TASK)
    if state != "success":
        raise AirflowSkipException(f"the cycle did not start ({SCAN_TASK}: {state}); nothing to do")


def report_run(context: Mapping[str, Any], *, subject: str, first_task: str, prune: bool = False) -> dict[str, Any]:
    """The ``report`` task of both DAGs: print the run's report (``prune``: and remove this DAG's old
    run dirs); fail naming each failed partition and task with its cause, and saying whether anything
    was maintained at all (``first_task`` failed: nothing was)."""
    from kafkalog.cycle.steps import prune_run_dirs

    try:
        directory: Path | None = run_dir(context)
    except Exception as exc:  # noqa: BLE001 - the cause is a failed task's, named below
        print(f"no run dir: {describe_error(exc)}")
        directory = None
    summary = summarize(directory)
    for line in format_report(summary):
        print(line)
    if prune and directory is not None and directory.parent.is_dir():
        prune_run_dirs(directory)
    tasks = task_errors(context)
    started = _task_states(context).get(first_task) == "success"
    message = failure_message(summary, tasks, subject=subject, started=started)
    if message is not None:
        raise AirflowFailException(message)
    return summary.to_json()


# --- lineage ---------------------------------------------------------------------------------------------
class _LineageMixin:
    """Turns a step's ``topics`` into asset events and OpenLineage datasets."""

    _kafkalog_result: Mapping[str, Any] | None = None
    _kafkalog_store: str | None = None

    def emit_topic_events(self, context: Context, result: Mapping[str, Any] | None, *, assets: bool = True) -> None:
        """``assets``: emit asset events too (False: OpenLineage only, for a shard of a mapped step)."""
        self._kafkalog_result = result
        self._kafkalog_store = store_of(context).name
        for topic, change in (lineage.announced_topics(result) if assets else {}).items():
            context["outlet_events"][AssetAlias(lineage.TOPICS_ALIAS)].add(
                Asset(lineage.topic_asset_uri(topic, store_of(context).name)), extra={"task": self.task_id, **change})  # type: ignore[attr-defined]

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from kafkalog.airflow.openlineage_facets import operator_lineage

        return operator_lineage(self.task_id, self._kafkalog_result, self._kafkalog_store)  # type: ignore[attr-defined]


class _MaintenanceTaskOperator(_LineageMixin, DecoratedOperator, PythonOperator):
    custom_operator_name = "@maintenance_task"

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Sequence[Any] | None,
                 op_kwargs: Mapping[str, Any] | None, asset_events: bool = True, **kwargs: Any) -> None:
        self.asset_events = asset_events
        super().__init__(kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args,
                                             "op_kwargs": op_kwargs},
                         python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs, **kwargs)

    def execute(self, context: Context) -> Any:
        with failing_fast(context):
            result = super().execute(context)
        doc = result if isinstance(result, Mapping) else None
        self.emit_topic_events(context, doc, assets=self.asset_events)
        if doc is None or "asset_events" not in doc:
            return result
        # The announced changes travel as asset events, not again as XCom (every partition's log start
        # offset: XCom carries paths and counts).
        return {k: v for k, v in doc.items() if k != "asset_events"}


def maintenance_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``@task`` for pipeline steps: declares the topics alias as outlet, emits the lineage, and shows
    the function's docstring as the task's doc (mapped tasks included). ``asset_events=False``: the
    task's changes go to OpenLineage only, a later task announcing them (the shards of a mapped step:
    see ``kafkalog.airflow.lineage``)."""
    kwargs.setdefault("outlets", [AssetAlias(lineage.TOPICS_ALIAS)])

    def decorate(function: Callable[..., Any]) -> TaskDecorator:
        return task_decorator_factory(python_callable=function, decorated_operator_class=_MaintenanceTaskOperator,
                                      **{"doc_md": function.__doc__, **kwargs})

    return decorate(python_callable) if python_callable is not None else decorate


# --- the file-delete wait --------------------------------------------------------------------------------
class WaitFileDeleteDelayOperator(BaseOperator):
    """Wait, on the wall clock, until every ``.deleted`` file this run marked is due for deletion
    (the ``mark_deleted`` results in the run dir say when they were marked and with which delay).
    A backfilled run waits too: the delay is a grace period promised to readers, not a date.
    """

    ui_color = "#e8f4fd"

    def execute(self, context: Context) -> None:
        require_scan(context)
        now_ms = wall_clock_ms()
        with failing_fast(context):
            wait = file_delete_wait(run_dir(context), wall_now_ms=now_ms)
        if wait["later"]:
            self.log.info("%d partitions' marks fall due after this cycle's interval (log.retention.check.interval.ms"
                          "=%d), the first at %s: not waited for; a later cycle deletes them", wait["later"],
                          wait["interval_ms"], format_ms(wait["next_due_ms"]))
        deadline_ms = wait["until_ms"]
        if deadline_ms is None:
            self.log.info("nothing this run marked falls due within the cycle's interval; no wait")
            return
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        moment = datetime.datetime.fromtimestamp(deadline_ms / 1000, tz=datetime.UTC)
        self.log.info("this run's marks are due at %s (in %.1f s); deferring on the wall clock",
                      moment.isoformat(), (deadline_ms - now_ms) / 1000)
        self.defer(trigger=DateTimeTrigger(moment=moment, end_from_trigger=True), method_name="execute_complete",
                   timeout=datetime.timedelta(milliseconds=deadline_ms - now_ms) + WAIT_SLACK)

    def execute_complete(self, context: Context, event: Any = None) -> None:
        self.log.info("file.delete.delay.ms has passed for this run's marks")


# --- the Spark job ---------------------------------------------------------------------------------------
class CompactLogsOperator(_LineageMixin, SparkSubmitOperator):
    """``spark_jobs/compact_logs.py`` with the run's compaction plan, as the run's
    ``select_logs_to_clean`` result (in its run dir) names it: set the task that wrote it upstream.
    Skipped (not succeeded) when nothing is due or in a dry run. Partitions that fail, or that another
    cleaner holds (skipped, as Kafka's cleaner skips a log in progress), are in the job's report, which
    the report task reads; the task fails only when the job itself does: at once when it refused its
    input (nothing changed), else retried, safely (the cleaner's swap is crash-safe and a rerun
    finishes it)."""

    def __init__(self, *, conn_id: str | None = None, **kwargs: Any) -> None:
        """``conn_id``: the Spark connection; default: the one the store's connection names."""
        kwargs.setdefault("outlets", [AssetAlias(lineage.TOPICS_ALIAS)])
        super().__init__(application="", conn_id=conn_id or DEFAULT_SPARK_CONN_ID, name="kafkalog-compact", **kwargs)
        self.spark_conn_id_given = conn_id

    def execute(self, context: Context) -> Any:
        from kafkalog.errors import KafkaLogError

        with failing_fast(context):
            selection = SelectResult.load(run_dir(context))
            if selection is None:
                raise KafkaLogError(f"no {SelectResult.STEP} result in {run_dir(context)}: set the task that "
                                    "selects the logs to clean upstream of this one")
        if selection.dry_run:
            raise AirflowSkipException(f"dry run: the plan {selection.plan} selects {selection.selected}"
                                       " partitions; nothing is compacted")
        if not selection.selected:
            raise AirflowSkipException("nothing is due for compaction (see select_logs_to_clean for why)")
        with failing_fast(context):
            return self._compact(context, selection)

    def _compact(self, context: Context, selection: SelectResult) -> Any:
        from airflow.sdk import BaseHook

        from kafkalog.cycle.documents import plain
        from kafkalog.cycle.spark import submit_settings
        from kafkalog.errors import KafkaLogError

        directory = run_dir(context)
        settings = load_settings(directory)  # what the run's first task wrote: its clock, dirs and broker file
        self._conn_id = self.spark_conn_id_given or store_of(context).spark_conn_id
        report = compaction_report_path(directory)
        report.unlink(missing_ok=True)  # a report here is this attempt's
        spark = submit_settings()
        self.application = spark.application
        self.conf = {**spark.conf, **(self.conf or {})}
        self.env_vars = {**spark.env, **(self.env_vars or {})}
        args = ["--plan", selection.plan, "--report", str(report), "--run-id", settings.run_id,
                "--partition-failures-ok", *[a for d in settings.log_dirs for a in ("--log-dir", d)]]
        if settings.config_file:
            args += ["--config-file", settings.config_file]
        if settings.wall_now_ms is not None:
            args += ["--wall-now-ms", str(settings.wall_now_ms)]
        self.application_args = args
        try:
            BaseHook.get_connection(self._conn_id)
        except Exception:  # noqa: BLE001 - no such connection: the documented default, not yarn
            self.log.info("connection %s is not defined: running on local[*]", self._conn_id)
            os.environ[f"AIRFLOW_CONN_{self._conn_id.upper()}"] = '{"conn_type": "spark", "host": "local[*]"}'
        try:
            super().execute(context)
        except AirflowException:
            failed = CompactionJobReport.load(directory)
            if failed and failed.status == "refused":  # bad input: nothing changed, a retry changes nothing
                raise KafkaLogError(f"the compaction job refused to run: {failed.error}") from None
            raise
        done = CompactionJobReport.load(directory)
        if done is None:
            raise KafkaLogError(f"the compaction job succeeded but left no report at {report}")
        for p in done.partitions:
            self.log.info("%s-%s: %s%s", p.topic, p.partition, p.status, f" ({p.error})" if p.error else "")
        result = {"report": str(report), "status": done.status, "totals": done.totals,
                  "topics": plain(compaction_changes(done)), "topics_read": list(done.topics_read)}
        self.emit_topic_events(context, result)
        return result
