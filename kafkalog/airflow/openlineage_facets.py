"""OpenLineage for the pipeline's tasks: the topics a task read and changed as datasets (the same
names as the Airflow Assets, ``kafkalog.airflow.lineage``), each changed topic with the
``kafkalogMaintenance`` facet carrying what changed. Imported only when a task's lineage is
extracted, so the DAGs parse without the OpenLineage client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attr
from airflow.providers.common.compat.openlineage.facet import DatasetFacet, InputDataset, OutputDataset
from airflow.providers.openlineage.extractors import OperatorLineage

from kafkalog.airflow import lineage

FACET_NAME = "kafkalogMaintenance"
FACET_SCHEMA = "https://kafkalog.dev/spec/facets/1-0-0/KafkalogMaintenanceDatasetFacet.json"


@attr.define
class KafkalogMaintenanceDatasetFacet(DatasetFacet):
    """What one maintenance task did to a topic: ``task`` and its numbers (segments and bytes marked
    deleted, new log start offsets, files deleted, records and bytes removed by compaction)."""

    task: str
    changes: dict[str, Any] = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


def operator_lineage(task_id: str, result: Mapping[str, Any] | None,
                     store: str | None) -> OperatorLineage:  # type: ignore[type-arg]
    ns = lineage.namespace(store)
    changed = lineage.changed_topics(result)
    inputs = [InputDataset(namespace=ns, name=t) for t in lineage.read_topics(result)]
    outputs = [OutputDataset(namespace=ns, name=t,
                             facets={FACET_NAME: KafkalogMaintenanceDatasetFacet(task=task_id, changes=change)})
               for t, change in changed.items()]
    return OperatorLineage(inputs=inputs, outputs=outputs)
