"""Names of topics as lineage datasets: one stable form for Airflow Assets and OpenLineage.

A topic of a store is the Airflow Asset ``x-kafkalog://<store>/<topic>`` (the ``x-`` prefix marks a
scheme no Airflow provider registers, as AIP-60 asks) and the OpenLineage dataset with namespace
``x-kafkalog://<store>`` and name ``<topic>``. ``<store>`` is the store's name (``store_name`` of its
``kafkalog`` connection: default the connection id, ``default`` for ``kafkalog_default``). A downstream
DAG schedules on a topic with ``schedule=[Asset(topic_asset_uri("orders", "default"))]``.

Each task that changes topics returns ``"topics": {topic: {number: value}}``; these numbers are the
asset events' ``extra`` and the OpenLineage facet ``kafkalogMaintenance`` alike. The shards of a mapped
step do not emit asset events: Airflow creates the row of an asset first named by an alias event when
the emitting task reports success, and of two tasks creating the same new asset at once the one that
loses the insert is set to failed after its work succeeded. The step's single successor announces the
step's changes instead, one event per topic (``"asset_events"`` in its result).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalog.airflow.provider import DEFAULT_STORE_NAME
from kafkalog.errors import KafkaLogError

SCHEME = "x-kafkalog"
TOPICS_ALIAS = "kafkalog-topics"  # the AssetAlias every topic-changing task emits its events through


def namespace(store: str | None) -> str:
    return f"{SCHEME}://{store or DEFAULT_STORE_NAME}"


def topic_asset_uri(topic: str, store: str | None) -> str:
    return f"{namespace(store)}/{topic}"


def changed_topics(result: Any) -> dict[str, dict[str, Any]]:
    """The topics a task's result says it changed (``topics``: {topic: {number: value}}), only those whose
    numbers changed. A result without ``topics`` changed none: ``@maintenance_task`` serves any function."""
    topics = _declared(result, "topics", dict)
    for topic, change in topics.items():
        if not isinstance(change, dict):
            raise KafkaLogError(f"a task's result says topic {topic!r} changed by {change!r:.100}: expected an "
                                "object of numbers")
    return {t: dict(change) for t, change in sorted(topics.items()) if any(change.values())}


def announced_topics(result: Any) -> dict[str, dict[str, Any]]:
    """The topic changes a task emits as asset events: ``asset_events`` when its result has them (it
    announces a mapped step's changes), else what it changed itself (``topics``)."""
    if isinstance(result, Mapping) and "asset_events" in result:
        return changed_topics({"topics": result["asset_events"]})
    return changed_topics(result)


def read_topics(result: Any) -> list[str]:
    """The topics a task's result says it read (``topics_read``: a list of names)."""
    return sorted(str(t) for t in _declared(result, "topics_read", list))


def _declared(result: Any, key: str, kind: type) -> Any:
    if not isinstance(result, Mapping) or key not in result:
        return kind()
    if not isinstance(result[key], kind):
        raise KafkaLogError(f"a task's result has {key} = {result[key]!r:.100}: expected a {kind.__name__}")
    return result[key]
