"""``kafkalog_cleanup``: one cleanup cycle of a Kafka-format log store, the work Kafka's LogManager
and LogCleaner threads do on a broker, every ``log.retention.check.interval.ms``.

One DAG per store of ``[kafkalog] stores`` (``kafkalog_cleanup`` for ``kafkalog_default``,
``kafkalog_cleanup__<conn id>`` for the others), each scheduled by its broker file's interval and run on
its connection's queue.

Each task reads its params and context, calls one step of ``kafkalog.cycle.steps`` and returns a
small dict; plans and results live in the run dir every worker sees. Nothing here touches a log dir,
numba or pyspark at parse time.
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.sdk import Param, TriggerRule, dag, task

from kafkalog.airflow.operators import (
    CompactLogsOperator,
    WaitFileDeleteDelayOperator,
    cycle_params,
    cycle_settings,
    failing_fast,
    maintenance_task,
    parse_time_store,
    report_run,
    require_scan,
    run_dir,
)
from kafkalog.airflow.provider import cleanup_dag_id, configured_stores
from kafkalog.cycle import steps

DEFAULT_ARGS = {
    "owner": "kafkalog",
    "retries": 3,
    "retry_delay": datetime.timedelta(seconds=20),
    "retry_exponential_backoff": 2.0,  # a multiplier in Airflow 3: 20 s, 40 s, 80 s ... (transient errors only:
    "max_retry_delay": datetime.timedelta(minutes=10),  # bad input fails a task at once, see failing_fast)
    "execution_timeout": datetime.timedelta(hours=1),
}


DOC = """
**Tasks.** `scan_partitions` resolves interrupted swaps and topic deletions and splits the partitions
into shards by bytes. Per shard, `plan_retention` writes Kafka's `deleteOldSegments` decisions to a
plan file and `mark_deleted` applies *that* plan (phase one: `.deleted`, log start offsets).
`wait_file_delete_delay` defers on the wall clock until this run's marks are due (mark time plus the
topic's `file.delete.delay.ms`; no worker slot is held), never longer than the cycle's interval: marks
due later are deleted by a later cycle. `delete_marked` then deletes what is due, this run's and earlier
runs' marks and deleted topics' `-delete` dirs. `select_dirtiest_logs` writes the cleaner manager's
choice as a compaction plan once retention has set this cycle's log start offsets (a dry run also reads
what the compaction would read, and names the partitions it would fail on), and `compact` runs the
Spark job on it (skipped when nothing is due); compaction never waits for the delete delay; a partition
another cleaner holds is skipped, as Kafka's cleaner skips a log in progress. `report` always runs, and
fails naming every partition and task that failed anywhere, with the cause.

**Failures.** Bad input (a log dir, the broker file, a param, a topic) fails its task at once, with the
error, and the tasks that need the scan are skipped; I/O errors and held locks are retried with backoff.

**Clock.** The end of the run's data interval (a backfilled run decides what was due at its date),
never later than the wall clock. Grace periods promised to readers run on the wall clock.
"""


def cleanup_dag(conn_id: str) -> None:
    """The cleanup DAG of the store of connection ``conn_id``."""
    store = parse_time_store(conn_id)

    @dag(
        dag_id=cleanup_dag_id(conn_id),
        # Kafka's retention check interval (log.retention.check.interval.ms, default 5 minutes) is the cycle.
        schedule=store.interval,
        start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, **({"queue": store.queue} if store.queue else {})},
        params=cycle_params(Param(conn_id, type="string", enum=[conn_id],
                                  description="The store this DAG maintains (its kafkalog connection).")),
        tags=["kafkalog", "kafka", "maintenance", f"store:{conn_id}"],
        doc_md=f"{__doc__}\n**Store.** Connection `{conn_id}`{store.note}.\n{DOC}",
    )
    def kafkalog_cleanup() -> None:
        _cycle()

    kafkalog_cleanup()


def _cycle() -> None:
    @task
    def scan_partitions(**context: Any) -> list[dict[str, Any]]:
        """Recover interrupted swaps and topic deletions, inventory the log dirs, shard them by bytes."""
        with failing_fast(context):  # bad log dirs, broker file or params fail here at once, named
            result = steps.scan_partitions(run_dir(context), cycle_settings(context))
        print(f"{result['partitions']} partitions, {result['bytes']} bytes in {len(result['shards'])} shards at "
              f"now_ms={result['now_ms']}; recovered {result['recovered'] or 'nothing'}")
        shards: list[dict[str, Any]] = result["shards"]
        return shards

    @maintenance_task
    def plan_retention(shard: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Kafka's deleteOldSegments for one shard at the cycle's clock, written as a plan file."""
        result = steps.plan_retention_shard(run_dir(context), str(shard["path"]))
        print(f"shard {result['shard']}: {result['segments']} segments ({result['bytes']} bytes) deletable in "
              f"{result['deletable_partitions']} of {result['partitions']} partitions; plan {result['plan']}")
        return result

    @maintenance_task(asset_events=False)  # delete_marked announces the step's changes (kafkalog.airflow.lineage)
    def mark_deleted(planned: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Apply that shard's plan: rename segments to .deleted, advance log start offsets (never more)."""
        result = steps.mark_shard(run_dir(context), str(planned["plan"]))
        for topic, change in result["topics"].items():
            print(f"{topic}: {change['segments_deleted']} segments, {change['bytes_deleted']} bytes marked; "
                  f"log start offsets {change['log_start_offsets']}")
        return result

    @maintenance_task(trigger_rule=TriggerRule.ALL_DONE)
    def delete_marked(**context: Any) -> dict[str, Any]:
        """Delete .deleted files and -delete dirs whose file.delete.delay.ms has passed (wall clock);
        announce what this run's retention changed, one asset event per topic."""
        require_scan(context)
        result = steps.delete_marked(run_dir(context))
        print(f"deleted {result['deleted_files']} files ({result['deleted_bytes']} bytes) and "
              f"{result['deleted_dirs']} topic dirs; {result['waiting_files']} files wait, next due at "
              f"{result['next_due_ms']}")
        return {**result, "asset_events": steps.retention_changes(run_dir(context))}

    @maintenance_task(trigger_rule=TriggerRule.ALL_DONE)
    def select_dirtiest_logs(**context: Any) -> dict[str, Any]:
        """The cleaner manager's choice (dirty ratio, compaction lags) as the cycle's compaction plan."""
        require_scan(context)
        result = steps.select_logs_to_clean(run_dir(context))
        print(f"{result['selected']} logs selected ({result['cleanable_bytes']} cleanable bytes); "
              f"plan {result['plan']}{'; a dry run: the compaction would fail in ' if result['would_fail'] else ''}"
              f"{result['would_fail'] or ''}{' partitions' if result['would_fail'] else ''}")
        return result

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def report(**context: Any) -> dict[str, Any]:
        """The cycle's summary; fails naming each partition and task that failed anywhere, with the cause."""
        summary = report_run(context, subject="the cycle", first_task="scan_partitions", prune=True)
        return {k: summary[k] for k in ("now_ms", "dry_run", "partitions", "retention", "deletion")}

    scan = scan_partitions()
    marks = mark_deleted.expand(planned=plan_retention.expand(shard=scan))
    wait = WaitFileDeleteDelayOperator(task_id="wait_file_delete_delay", execution_timeout=None,
                                       trigger_rule=TriggerRule.ALL_DONE,
                                       doc_md="Defers on the wall clock until this run's marks are due.")
    deleted = delete_marked()
    selected = select_dirtiest_logs()
    compact = CompactLogsOperator(task_id="compact", execution_timeout=datetime.timedelta(hours=6),
                                  doc_md="The Spark compaction job on the cycle's plan (spark_default).")
    marks >> wait >> deleted
    scan >> selected
    marks >> selected  # compaction sees the log start offsets this cycle's retention set, as the CLI does
    selected >> compact
    [deleted, compact] >> report()


for _conn_id in configured_stores():
    cleanup_dag(_conn_id)
