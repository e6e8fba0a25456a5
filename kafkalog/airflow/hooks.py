"""The ``kafkalog`` connection type: one Kafka-format log store, and ``KafkalogHook``, which turns such
a connection into the store.

A connection's extra holds the store (the form's fields, see ``kafkalog.airflow.provider``):

- ``log_dirs``: the store's log dirs (Kafka's ``log.dirs``), absolute, comma-separated or a list;
  empty: ``log.dirs`` of the broker file;
- ``config_file``: the broker file (``server.properties``: Kafka's defaults and the retention check
  interval, the cycle's schedule);
- ``store_name``: the store in lineage (``x-kafkalog://<store>/<topic>``; default: the connection id,
  ``default`` for ``kafkalog_default``);
- ``spark_conn_id``: the Spark connection its compaction job runs on (default ``spark_default``);
- ``queue``: the Celery queue of the host that owns the store's disks (every task of its DAGs runs
  there; default: Airflow's default queue).

``kafkalog_default`` without a connection is the store of ``$KAFKALOG_LOG_DIRS``/``$KAFKALOG_CONFIG``
(``$KAFKALOG_STORE_NAME``), so a single-store installation needs no set-up. An unknown key or a value
of the wrong kind is a ``ConfigError`` naming the connection and the key, never a silent default.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from kafkalog.airflow.provider import DEFAULT_CONN_ID, DEFAULT_STORE_NAME, NAME_PATTERN
from kafkalog.errors import ConfigError

if TYPE_CHECKING:
    from kafkalog.log.store import LogStore

CONN_TYPE = "kafkalog"
DEFAULT_SPARK_CONN_ID = "spark_default"
EXTRA_KEYS = ("log_dirs", "config_file", "store_name", "spark_conn_id", "queue")


@dataclass(frozen=True)
class StoreConnection:
    """A log store as its connection describes it (nothing read from its log dirs)."""

    conn_id: str
    name: str
    log_dirs: tuple[str, ...] = ()  # empty: log.dirs of the broker file
    config_file: str | None = None
    spark_conn_id: str = DEFAULT_SPARK_CONN_ID
    queue: str | None = None

    @classmethod
    def from_extra(cls, conn_id: str, extra: Mapping[str, Any]) -> StoreConnection:
        """The store of connection ``conn_id`` from its extra, checked key by key."""
        where = f"connection {conn_id}"
        unknown = sorted(set(extra) - set(EXTRA_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} in its extra; a kafkalog connection "
                              f"holds {', '.join(EXTRA_KEYS)}")
        raw_dirs = extra.get("log_dirs") or ()
        if isinstance(raw_dirs, str):
            raw_dirs = [d for d in re.split(r"[,\n]", raw_dirs)]
        if not isinstance(raw_dirs, list | tuple) or not all(isinstance(d, str) for d in raw_dirs):
            raise ConfigError(f"{where}: log_dirs must be absolute paths, comma-separated or a JSON list, "
                              f"not {raw_dirs!r}")
        log_dirs = tuple(d.strip() for d in raw_dirs if d.strip())
        for d in log_dirs:
            if not os.path.isabs(d):
                raise ConfigError(f"{where}: log dir {d!r} is not an absolute path (every worker must find it)")
        config_file = _optional_str(where, extra, "config_file")
        if config_file is not None and not os.path.isabs(config_file):
            raise ConfigError(f"{where}: config_file {config_file!r} is not an absolute path")
        default_name = DEFAULT_STORE_NAME if conn_id == DEFAULT_CONN_ID else conn_id
        name = _optional_str(where, extra, "store_name") or default_name
        if not re.fullmatch(NAME_PATTERN, name):
            raise ConfigError(f"{where}: store_name {name!r} must be 1-200 of A-Z a-z 0-9 . _ - (it names the "
                              "store's assets, x-kafkalog://<store>/<topic>)")
        return cls(conn_id, name, log_dirs, config_file,
                   _optional_str(where, extra, "spark_conn_id") or DEFAULT_SPARK_CONN_ID,
                   _optional_str(where, extra, "queue"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> StoreConnection:
        """``kafkalog_default`` where no connection defines it: the environment's store, its variables read
        as the CLI reads them."""
        from kafkalog.log.store import configured_broker_file, configured_log_dirs

        return cls.from_extra(DEFAULT_CONN_ID, {
            "log_dirs": configured_log_dirs(None, None, environ),
            "config_file": configured_broker_file(None, environ),
            "store_name": environ.get("KAFKALOG_STORE_NAME") or None})

    def resolved_log_dirs(self, log_dirs: tuple[str, ...] | list[str] = (),
                          config_file: str | None = None) -> list[str]:
        """The log dirs a run uses: those given (a run's ``log_dirs`` param), else the connection's, else
        ``log.dirs`` of the broker file (``config_file``, else the connection's); ``ConfigError`` if none."""
        if log_dirs or self.log_dirs:
            return list(log_dirs or self.log_dirs)
        from kafkalog.log.config import BrokerConfig

        broker_file = config_file or self.config_file
        dirs = list(BrokerConfig.load(broker_file).log_dirs) if broker_file else []
        if not dirs:
            raise ConfigError(f"store {self.name} (connection {self.conn_id}) has no log dirs: set log_dirs in the "
                              "connection" + (" or log.dirs in its broker file" if broker_file else
                                              ", or a broker file with log.dirs")
                              + (" (or $KAFKALOG_LOG_DIRS)" if self.conn_id == DEFAULT_CONN_ID else ""))
        return dirs

    def open(self) -> LogStore:
        """The store, its log dirs checked as every driver checks them."""
        from kafkalog.log.config import BrokerConfig
        from kafkalog.log.store import LogStore

        return LogStore([Path(d) for d in self.resolved_log_dirs()], BrokerConfig.load(self.config_file))


def _optional_str(where: str, extra: Mapping[str, Any], key: str) -> str | None:
    value = extra.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, not {value!r}")
    return value.strip() or None


class KafkalogHook(BaseHook):
    """A log store from its ``kafkalog`` connection: ``store_connection()`` what it says, ``get_conn()``
    the opened store; ``test_connection()`` is the UI's "Test" button."""

    conn_name_attr = "kafkalog_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Kafka log store (kafkalog)"

    def __init__(self, kafkalog_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafkalog_conn_id = kafkalog_conn_id

    @functools.cached_property
    def store(self) -> StoreConnection:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.kafkalog_conn_id)
        except AirflowNotFoundException:
            if self.kafkalog_conn_id == DEFAULT_CONN_ID:
                return StoreConnection.from_env()
            raise ConfigError(f"no connection {self.kafkalog_conn_id}: define it (type {CONN_TYPE}) with the "
                              "store's log dirs and broker file") from None
        if conn.conn_type != CONN_TYPE:
            raise ConfigError(f"connection {self.kafkalog_conn_id} is of type {conn.conn_type!r}, not {CONN_TYPE!r}")
        try:
            extra = conn.extra_dejson
        except Exception as exc:  # noqa: BLE001 - a malformed extra, named
            raise ConfigError(f"connection {self.kafkalog_conn_id}: its extra is not a JSON object: {exc}") from None
        return StoreConnection.from_extra(self.kafkalog_conn_id, extra if isinstance(extra, Mapping) else {})

    def get_conn(self) -> LogStore:
        return self.store.open()

    def test_connection(self) -> tuple[bool, str]:
        """Open the store and list its partitions, or say what is wrong (what the UI shows)."""
        from kafkalog.errors import KafkaLogError

        try:
            store = self.get_conn()
            locations = store.partitions()
        except (KafkaLogError, OSError) as exc:
            return False, str(exc)
        topics = {location.topic_partition.topic for location in locations}
        dirs = ", ".join(map(str, store.log_dirs))
        return True, f"{len(locations)} partitions of {len(topics)} topics in {dirs}"
