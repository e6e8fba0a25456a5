"""kafkalog as an Airflow provider: the metadata Airflow reads (``airflow providers …``, the connection
form, the ``[kafkalog]`` section) and what a ``kafkalog`` connection says, checked key by key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import airflow_env

from kafkalog.airflow.hooks import KafkalogHook, StoreConnection
from kafkalog.airflow.provider import cleanup_dag_id, get_provider_info
from kafkalog.errors import ConfigError


def _airflow(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.airflow
def test_airflow_lists_the_provider_its_hook_and_its_config_section(tmp_path: Path) -> None:
    env = airflow_env(tmp_path, AIRFLOW__KAFKALOG__STORES="kafkalog_default,store_b")
    providers = {row["package_name"]: row for row in json.loads(_airflow(env, "providers", "list", "-o", "json"))}
    assert providers["kafkalog"]["version"] == get_provider_info()["versions"][0]
    hooks = {row["connection_type"]: row for row in json.loads(_airflow(env, "providers", "hooks", "-o", "json"))}
    assert hooks["kafkalog"]["class"] == "kafkalog.airflow.hooks.KafkalogHook"
    assert hooks["kafkalog"]["conn_id_attribute_name"] == "kafkalog_conn_id"
    assert _airflow(env, "config", "get-value", "kafkalog", "stores").strip() == "kafkalog_default,store_b"
    assert _airflow(airflow_env(tmp_path), "config", "get-value", "kafkalog", "stores").strip() == "kafkalog_default"


def test_the_provider_info_is_valid_for_airflow() -> None:
    import jsonschema
    from airflow.providers_manager import _create_provider_info_schema_validator

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    fields = info["connection-types"][0]["conn-fields"]
    assert sorted(fields) == ["config_file", "log_dirs", "queue", "spark_conn_id", "store_name"]
    with pytest.raises(jsonschema.ValidationError):
        _create_provider_info_schema_validator().validate({k: v for k, v in info.items() if k != "description"})


def test_a_connection_holds_the_store_and_refuses_what_it_cannot_mean(tmp_path: Path) -> None:
    store = StoreConnection.from_extra("store_b", {"log_dirs": "/data/a, /data/b", "config_file": "/etc/b.properties",
                                                   "queue": "host-b"})
    assert store == StoreConnection("store_b", "store_b", ("/data/a", "/data/b"), "/etc/b.properties",
                                    "spark_default", "host-b")
    assert StoreConnection.from_extra("x", {"log_dirs": ["/a"], "store_name": "east", "spark_conn_id": "spark_b"}) \
        == StoreConnection("x", "east", ("/a",), None, "spark_b", None)
    assert StoreConnection.from_extra("kafkalog_default", {}).name == "default"
    refused = {
        "log_dir": {"log_dir": "/a"},  # a misspelt key is an error, not an empty store
        "relative": {"log_dirs": "data/a"},
        "kind": {"log_dirs": 5},
        "config": {"config_file": "server.properties"},
        "name": {"store_name": "a/b"},
        "queue": {"queue": ["q"]},
    }
    messages = {}
    for case, extra in refused.items():
        with pytest.raises(ConfigError) as caught:
            StoreConnection.from_extra("store_b", extra)
        messages[case] = str(caught.value)
    assert messages["log_dir"].startswith("connection store_b: unknown key(s) log_dir")
    assert "'data/a' is not an absolute path" in messages["relative"]
    assert "log_dirs must be absolute paths" in messages["kind"]
    assert "config_file 'server.properties' is not an absolute path" in messages["config"]
    assert "store_name 'a/b'" in messages["name"]
    assert "queue must be a string" in messages["queue"]


def test_a_store_without_log_dirs_takes_its_broker_files_and_says_when_there_are_none(tmp_path: Path) -> None:
    broker = tmp_path / "server.properties"
    broker.write_text(f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'}\n")
    store = StoreConnection.from_extra("store_b", {"config_file": str(broker)})
    assert store.resolved_log_dirs() == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert store.resolved_log_dirs(["/given"]) == ["/given"]  # a run's log_dirs param wins
    with pytest.raises(ConfigError, match="store store_b .connection store_b. has no log dirs: set log_dirs"):
        StoreConnection.from_extra("store_b", {}).resolved_log_dirs()


def test_kafkalog_default_without_a_connection_is_the_environments_store(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALOG_LOG_DIRS", f"{tmp_path / 'a'},{tmp_path / 'b'}")
    monkeypatch.setenv("KAFKALOG_STORE_NAME", "prod")
    monkeypatch.delenv("AIRFLOW_CONN_KAFKALOG_DEFAULT", raising=False)
    store = KafkalogHook().store
    assert (store.conn_id, store.name, store.log_dirs) == ("kafkalog_default", "prod",
                                                           (str(tmp_path / "a"), str(tmp_path / "b")))
    with pytest.raises(ConfigError, match="no connection store_zz: define it"):
        _ = KafkalogHook("store_zz").store
    monkeypatch.setenv("AIRFLOW_CONN_STORE_ZZ", json.dumps({"conn_type": "http", "host": "x"}))
    with pytest.raises(ConfigError, match="connection store_zz is of type 'http', not 'kafkalog'"):
        _ = KafkalogHook("store_zz").store
    assert (cleanup_dag_id("kafkalog_default"), cleanup_dag_id("store_zz")) == ("kafkalog_cleanup",
                                                                                "kafkalog_cleanup__store_zz")
