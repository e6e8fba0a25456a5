"""kafkalog's provider metadata (the ``apache_airflow_provider`` entry point) and its ``[kafkalog]``
configuration section.

- The ``kafkalog`` connection type with its form (``conn-fields``: Airflow 3 builds the form from them
  without importing the hook) and ``KafkalogHook`` behind "Test connection".
- ``[kafkalog] stores``: the connection ids of the stores this installation maintains, one
  ``kafkalog_cleanup`` DAG each. Read from the configuration, never from the metadata DB, when the DAG
  files are parsed. ``[kafkalog] run_dir`` and the Log store page's cache settings.

Imports nothing heavy: every Airflow component reads ``get_provider_info`` at start.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kafkalog.errors import ConfigError

SECTION = "kafkalog"
DEFAULT_CONN_ID = "kafkalog_default"
DEFAULT_STORE_NAME = "default"  # the store name of kafkalog_default (its assets' URIs predate connections)
CLEANUP_DAG_ID = "kafkalog_cleanup"
# A conn id that can end a DAG id, and a store name that can be a URI authority: the same characters.
NAME_PATTERN = r"[A-Za-z0-9._-]{1,200}"


def _option(description: str, default: str, example: str | None = None, type_: str = "string") -> dict[str, Any]:
    return {"description": description, "version_added": None, "type": type_, "example": example, "default": default}


def get_provider_info() -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "package-name": "kafkalog",
        "name": "kafkalog",
        "description": "Kafka-format log stores maintained by Airflow: retention, two-phase deletion and log "
                       "compaction as Kafka's broker does them, compaction run by Spark.",
        "versions": [version("kafkalog")],
        "connection-types": [{
            "connection-type": "kafkalog",
            "hook-class-name": "kafkalog.airflow.hooks.KafkalogHook",
            "hook-name": "Kafka log store (kafkalog)",
            "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "password", "port", "extra"]},
            "conn-fields": {
                "log_dirs": {"label": "Log dirs", "schema": {"type": ["string", "null"]},
                             "description": "The store's log dirs (Kafka's log.dirs), absolute paths, comma-separated."
                                            " Empty: log.dirs of the broker file."},
                "config_file": {"label": "Broker file", "schema": {"type": ["string", "null"]},
                                "description": "The broker's server.properties (defaults, the retention check "
                                               "interval that schedules the cleanup DAG)."},
                "store_name": {"label": "Store name", "schema": {"type": ["string", "null"]},
                               "description": "The store in asset URIs, x-kafkalog://<store>/<topic>. Default: "
                                              "the connection id (default for kafkalog_default)."},
                "spark_conn_id": {"label": "Spark connection id",
                                  "schema": {"type": ["string", "null"], "default": "spark_default"},
                                  "description": "The Spark connection the compaction job runs on "
                                                 "(local[*] when it is not defined)."},
                "queue": {"label": "Celery queue", "schema": {"type": ["string", "null"]},
                          "description": "The queue of the workers on the host that owns the store's disks. "
                                         "Empty: Airflow's default queue."},
            },
        }],
        "plugins": [{"name": "kafkalog_ui", "plugin-class": "kafkalog.airflow.ui_plugin.KafkalogUiPlugin"}],
        "task-decorators": [{"name": "kafkalog_maintenance",
                             "class-name": "kafkalog.airflow.operators.maintenance_task"}],
        "config": {SECTION: {
            "description": "kafkalog's provider-wide settings.",
            "options": {
                "stores": _option("Connection ids (type kafkalog) of the stores this installation maintains, "
                                  "comma-separated: one cleanup DAG each (kafkalog_cleanup for kafkalog_default, "
                                  "kafkalog_cleanup__<conn id> for the others).", DEFAULT_CONN_ID,
                                  "kafkalog_default,broker2"),
                "run_dir": _option("Where the runs' plans and reports go, on a volume every worker of a store "
                                   "sees (default: .kafkalog-pipeline beside the store's first log dir; "
                                   "$KAFKALOG_PIPELINE_DIR also sets it).", "", "/var/lib/kafkalog/runs"),
                "ui_cache_ttl_s": _option("Seconds the Log store page serves a store's inventory before "
                                          "rebuilding it in the background.", "10", None, "float"),
                "ui_max_stale_s": _option("Seconds after which the page rebuilds the inventory before answering.",
                                          "300", None, "float"),
            },
        }},
    }


def option(name: str, fallback: str = "") -> str:
    """An option of ``[kafkalog]`` (``AIRFLOW__KAFKALOG__<NAME>`` or airflow.cfg)."""
    from airflow.configuration import conf

    return str(conf.get(SECTION, name, fallback=fallback))


def configured_stores() -> list[str]:
    """The connection ids of ``[kafkalog] stores``, each once, ``ConfigError`` for one that cannot name a DAG."""
    stores: list[str] = []
    for conn_id in (s.strip() for s in option("stores", DEFAULT_CONN_ID).split(",")):
        if not conn_id:
            continue
        if not re.fullmatch(NAME_PATTERN, conn_id):
            raise ConfigError(f"[kafkalog] stores: connection id {conn_id!r} must be 1-200 of A-Z a-z 0-9 _ . - "
                              "(it ends its cleanup DAG's id)")
        if conn_id not in stores:
            stores.append(conn_id)
    return stores or [DEFAULT_CONN_ID]


def cleanup_dag_id(conn_id: str) -> str:
    """``kafkalog_cleanup`` for ``kafkalog_default``, ``kafkalog_cleanup__<conn id>`` for the others."""
    return CLEANUP_DAG_ID if conn_id == DEFAULT_CONN_ID else f"{CLEANUP_DAG_ID}__{conn_id}"


def run_dir_base() -> str | None:
    """``[kafkalog] run_dir``, else ``$KAFKALOG_PIPELINE_DIR``, else None (beside the first log dir)."""
    return option("run_dir") or os.environ.get("KAFKALOG_PIPELINE_DIR") or None
