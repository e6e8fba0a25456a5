"""``kafkalog_compact``: compact the named topic (or some of its partitions) now, whatever their
dirty ratio: the "compact now" Kafka users ask for. Manual only.

As Kafka's cleaner would, it never touches the active segment, never cleans past the last stable
offset, and leaves records younger than ``min.compaction.lag.ms`` alone. A topic that is not
compacted (``cleanup.policy`` without ``compact``) is refused by ``plan_compaction``, and so is any
topic while the broker file runs no log cleaner (``log.cleaner.enable=false`` or
``log.cleaner.threads=0``): like every bad input (an unknown topic or partition, a bad log dir or
broker file), at once, without retries, and the report says why. A partition another cleaner is
cleaning is skipped, and the report says so.
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.sdk import Param, TriggerRule, dag, task

from kafkalog.airflow.operators import (
    TOPIC_PATTERN,
    CompactLogsOperator,
    cycle_params,
    cycle_settings,
    maintenance_task,
    report_run,
    run_dir,
)
from kafkalog.airflow.provider import DEFAULT_CONN_ID, configured_stores
from kafkalog.cycle import steps


@dag(
    dag_id="kafkalog_compact",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    default_args={"owner": "kafkalog", "retries": 2, "retry_delay": datetime.timedelta(seconds=20),
                  "retry_exponential_backoff": 2.0, "max_retry_delay": datetime.timedelta(minutes=10),
                  "execution_timeout": datetime.timedelta(hours=1)},
    params=cycle_params(
        Param(DEFAULT_CONN_ID, type="string", enum=configured_stores(),
              description="The store (its kafkalog connection), one of [kafkalog] stores."),
        topic=Param("", type="string", pattern=TOPIC_PATTERN, description="The compacted topic to compact now."),
        partitions=Param(None, type=["null", "array"], uniqueItems=True, items={"type": "integer", "minimum": 0},
                         description="Only these partitions (default: every partition of the topic)."),
    ),
    tags=["kafkalog", "kafka", "maintenance"],
    doc_md=__doc__,
)
def kafkalog_compact() -> None:
    @maintenance_task
    def plan_compaction(**context: Any) -> dict[str, Any]:
        """The topic's cleanable ranges, whatever their dirty ratio, as a compaction plan."""
        params = context["params"]
        directory = run_dir(context)
        steps.start_cycle(directory, cycle_settings(context))
        result = steps.select_logs_to_clean(directory, topic=params["topic"], partitions=params["partitions"])
        print(f"{result['selected']} partitions of {params['topic']} to compact "
              f"({result['cleanable_bytes']} cleanable bytes); plan {result['plan']}")
        return result

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def report(**context: Any) -> dict[str, Any]:
        """What was compacted; fails naming each partition and task that failed, with the cause."""
        summary = report_run(context, subject="compaction", first_task="plan_compaction")
        compaction: dict[str, Any] = summary["compaction"]
        return compaction

    planned = plan_compaction()
    compact = CompactLogsOperator(task_id="compact", execution_timeout=datetime.timedelta(hours=6),
                                  doc_md="The Spark compaction job on the plan (spark_default).")
    planned >> compact >> report()


kafkalog_compact()
