"""Every driver finds the log dirs the same way: given ones, else $KAFKALOG_LOG_DIRS, else the broker
file's ``log.dirs`` (the CLI, the DAGs' tasks, the Spark job and the Airflow UI page)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.airflow.log_store_view import StoreSpec
from kafkalog.airflow.operators import _log_dirs, store_of
from kafkalog.log.config import BrokerConfig
from kafkalog.log.store import configured_broker_file, configured_log_dirs


def test_given_then_environment_then_broker_file(tmp_path: Path) -> None:
    broker = BrokerConfig.from_properties({"log.dirs": "/k/a,/k/b"})
    env = {"KAFKALOG_LOG_DIRS": " /e/a , ,/e/b "}
    assert configured_log_dirs(["/g"], broker, env) == ["/g"]
    assert configured_log_dirs(None, broker, env) == ["/e/a", "/e/b"]
    assert configured_log_dirs([], broker, {"KAFKALOG_LOG_DIRS": " , "}) == ["/k/a", "/k/b"]
    assert configured_log_dirs(None, None, {}) == []
    assert configured_broker_file(None, {"KAFKALOG_CONFIG": "/etc/k.properties"}) == "/etc/k.properties"
    assert configured_broker_file("/x.properties", {"KAFKALOG_CONFIG": "/etc/k.properties"}) == "/x.properties"
    assert configured_broker_file(None, {"KAFKALOG_CONFIG": ""}) is None


def test_the_broker_config_remembers_its_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.dirs=/k/a\nlog.retention.hours=5\nbroker.id=3\n")
    assert dict(BrokerConfig.load(path).properties) == {"log.dirs": "/k/a", "log.retention.hours": "5",
                                                        "broker.id": "3"}


# A task's context as far as the lookup reads it: a run of kafkalog_default's DAG with empty params.
DEFAULT_STORE_RUN = {"params": {"store": "kafkalog_default", "log_dirs": [], "config_file": None}}


def test_each_driver_finds_the_same_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker_file = tmp_path / "server.properties"
    broker_file.write_text(f"log.dirs={a},{b}\n")
    monkeypatch.setenv("KAFKALOG_LOG_DIRS", f" {a} , {b} ")  # spaces around items, as people write them
    monkeypatch.setenv("KAFKALOG_CONFIG", str(broker_file))
    created = run_cli("topics", "create", "--topic", "t", "--partitions", "2")
    assert created.code == 0, created.err
    assert sorted(p.name for d in (a, b) for p in d.iterdir() if p.is_dir()) == ["t-0", "t-1"]
    assert not any(p.name.startswith(" ") for p in Path.cwd().iterdir())
    assert StoreSpec.of("kafkalog_default").log_dirs == (str(a), str(b))
    assert _log_dirs(DEFAULT_STORE_RUN, store_of(DEFAULT_STORE_RUN)) == [str(a), str(b)]
    monkeypatch.delenv("KAFKALOG_LOG_DIRS")  # now the broker file's log.dirs, for every driver
    assert StoreSpec.of("kafkalog_default").log_dirs == (str(a), str(b))
    assert _log_dirs(DEFAULT_STORE_RUN, store_of(DEFAULT_STORE_RUN)) == [str(a), str(b)]
    described = run_cli("topics", "describe", "--topic", "t")
    assert described.code == 0 and "t" in described.out, described.err
