"""Kafka's ``LogConfigTest``: the checks of a topic's config as a whole (compaction lags, tiered storage),
through ``kafkalog topics create``/``alter`` with a broker file, and the library's ``LogConfig``.

Kafka refuses with a ``ConfigException``; kafkalog with exit code 1 and an error naming the keys, and
the store is left as it was (no partition directory, no registry entry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.errors import ConfigError
from kafkalog.log import names
from kafkalog.log.config import BrokerConfig, LogConfig, validate_topic_config


def _broker_file(tmp_path: Path, **props: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{key.replace('_', '.')}={value}\n" for key, value in props.items()))
    return path


def _create(log_dir: Path, broker_file: Path | None, *configs: str) -> tuple[int, str]:
    args = ["topics", "create", "--log-dir", str(log_dir), "--topic", "t", "--partitions", "1"]
    if broker_file is not None:
        args += ["--config-file", str(broker_file)]
    for config in configs:
        args += ["--config", config]
    done = run_cli(*args)
    return done.code, done.err


def _refused(log_dir: Path, broker_file: Path | None, *configs: str) -> str:
    code, err = _create(log_dir, broker_file, *configs)
    assert code == 1, err
    assert not (log_dir / "t-0").exists()
    registry = log_dir / names.TOPIC_CONFIG_FILE
    assert not registry.exists() or "t" not in json.loads(registry.read_text())["topics"]
    return err


def test_invalid_compaction_lag_config(tmp_path: Path) -> None:
    err = _refused(tmp_path, None, "max.compaction.lag.ms=100", "min.compaction.lag.ms=200")
    assert "min.compaction.lag.ms=200" in err and "max.compaction.lag.ms=100" in err
    assert _create(tmp_path, None, "max.compaction.lag.ms=200", "min.compaction.lag.ms=200")[0] == 0


def test_local_log_retention_derived_props() -> None:
    config = LogConfig.resolve(BrokerConfig.from_properties({}), {"retention.bytes": "1024", "retention.ms": "1000"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (1000, 1024)
    assert (config.local_retention_ms, config.local_retention_bytes) == (-2, -2)  # as set: "the total"


def test_local_log_retention_derived_default_props() -> None:
    config = LogConfig.default()
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (604800000, -1)


def test_local_log_retention_props() -> None:
    config = LogConfig.resolve(BrokerConfig.from_properties({}), {
        "retention.bytes": "2000", "retention.ms": "1000", "local.retention.ms": "500",
        "local.retention.bytes": "1000"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (500, 1000)


@pytest.mark.parametrize(("local_ms", "local_bytes", "total_bytes", "total_ms", "named"), [
    (-3, 10, 2, 500, "local.retention.ms=-3"),  # below -2: the value's own range
    (500, -3, 2, 1000, "local.retention.bytes=-3"),
    (2000, 2, 100, 1000, "local.retention.ms=2000"),  # more than retention.ms
    (500, 200, 100, 1000, "local.retention.bytes=200"),  # more than retention.bytes
    (-1, 200, 100, 1000, "local.retention.ms=-1"),  # unlimited under a limited retention.ms
    (2000, -1, 100, 1000, "local.retention.ms=2000"),  # Kafka checks the size first; either is refused
])
def test_invalid_local_log_retention_props(tmp_path: Path, local_ms: int, local_bytes: int, total_bytes: int,
                                          total_ms: int, named: str) -> None:
    broker = _broker_file(tmp_path, remote_log_storage_system_enable="true")
    err = _refused(tmp_path, broker, "remote.storage.enable=true", f"retention.bytes={total_bytes}",
                   f"retention.ms={total_ms}", f"local.retention.ms={local_ms}", f"local.retention.bytes={local_bytes}")
    assert "local.retention" in err


def test_enable_remote_log_storage_on_compacted_topic(tmp_path: Path) -> None:
    broker = _broker_file(tmp_path, remote_log_storage_system_enable="true")
    for policy in ("compact", "delete,compact", "compact,delete"):
        err = _refused(tmp_path, broker, f"cleanup.policy={policy}", "remote.storage.enable=true")
        assert "remote.storage.enable=true" in err and "cleanup.policy=" in err and "compacted" in err
    assert _create(tmp_path, broker, "cleanup.policy=delete", "remote.storage.enable=true")[0] == 0


@pytest.mark.parametrize("system_enabled", [True, False])
def test_enable_remote_log_storage(tmp_path: Path, system_enabled: bool) -> None:
    broker = _broker_file(tmp_path, remote_log_storage_system_enable=str(system_enabled).lower())
    if system_enabled:
        assert _create(tmp_path, broker, "remote.storage.enable=true")[0] == 0
    else:
        err = _refused(tmp_path, broker, "remote.storage.enable=true")
        assert "tiered storage is disabled on this broker" in err and "remote.log.storage.system.enable" in err


@pytest.mark.parametrize("was_enabled", [True, False])
def test_disable_remote_log_storage(tmp_path: Path, was_enabled: bool) -> None:
    broker = _broker_file(tmp_path, remote_log_storage_system_enable="true")
    assert _create(tmp_path, broker, f"remote.storage.enable={str(was_enabled).lower()}")[0] == 0
    alter = ["topics", "alter", "--log-dir", str(tmp_path), "--config-file", str(broker), "--topic", "t"]
    before = (tmp_path / names.TOPIC_CONFIG_FILE).read_text()
    turned_off = run_cli(*alter, "--config", "remote.storage.enable=false")
    if was_enabled:
        assert turned_off.code == 1 and "remote.log.delete.on.disable=true" in turned_off.err
        assert (tmp_path / names.TOPIC_CONFIG_FILE).read_text() == before
        deleting = run_cli(*alter, "--config", "remote.storage.enable=false", "--config",
                           "remote.log.delete.on.disable=true")
        assert deleting.code == 0, deleting.err
    else:
        assert turned_off.code == 0, turned_off.err


@pytest.mark.parametrize("system_enabled", [True, False])
def test_topic_creation_with_invalid_retention_time(tmp_path: Path, system_enabled: bool) -> None:
    """The local retention time a topic inherits from the broker exceeds the topic's own total."""
    broker = _broker_file(tmp_path, remote_log_storage_system_enable=str(system_enabled).lower(),
                          log_retention_ms="1000", log_local_retention_ms="900")
    configs = (f"remote.storage.enable={str(system_enabled).lower()}", "retention.ms=500")
    if system_enabled:
        err = _refused(tmp_path, broker, *configs)
        assert "local.retention.ms=900 (broker file: log.local.retention.ms)" in err and "retention.ms=500" in err
    else:
        assert _create(tmp_path, broker, *configs)[0] == 0


@pytest.mark.parametrize("system_enabled", [True, False])
def test_topic_creation_with_invalid_retention_size(tmp_path: Path, system_enabled: bool) -> None:
    broker = _broker_file(tmp_path, remote_log_storage_system_enable=str(system_enabled).lower(),
                          log_retention_bytes="1024", log_local_retention_bytes="512")
    configs = (f"remote.storage.enable={str(system_enabled).lower()}", "retention.bytes=128")
    if system_enabled:
        err = _refused(tmp_path, broker, *configs)
        assert "local.retention.bytes=512" in err and "retention.bytes=128" in err
    else:
        assert _create(tmp_path, broker, *configs)[0] == 0


@pytest.mark.parametrize("system_enabled", [True, False])
def test_validate_broker_log_configs(tmp_path: Path, system_enabled: bool) -> None:
    props = {"remote.log.storage.system.enable": str(system_enabled).lower(), "log.retention.bytes": "1024",
             "log.local.retention.bytes": "2048"}
    if system_enabled:
        with pytest.raises(ConfigError, match="local.retention.bytes=2048"):
            BrokerConfig.from_properties(props)
        done = run_cli("status", "--log-dir", str(tmp_path), "--config-file",
                       str(_broker_file(tmp_path, **{k.replace(".", "_"): v for k, v in props.items()})))
        assert done.code == 1 and "local.retention.bytes=2048" in done.err
    else:
        assert BrokerConfig.from_properties(props).topic_defaults["local.retention.bytes"] == 2048


@pytest.mark.parametrize("copy_disabled", [True, False])
def test_valid_remote_log_copy_disabled(copy_disabled: bool) -> None:
    broker = BrokerConfig.from_properties({"remote.log.storage.system.enable": "true"})
    config = validate_topic_config(broker, {"remote.storage.enable": "true",
                                            "remote.log.copy.disable": str(copy_disabled).lower()})
    assert config.remote_log_copy_disable is copy_disabled


@pytest.mark.parametrize("delete_on_disable", [True, False])
def test_valid_remote_log_delete_on_disable(delete_on_disable: bool) -> None:
    broker = BrokerConfig.from_properties({"remote.log.storage.system.enable": "true"})
    config = validate_topic_config(broker, {"remote.storage.enable": "true",
                                            "remote.log.delete.on.disable": str(delete_on_disable).lower()})
    assert config.remote_log_delete_on_disable is delete_on_disable


def test_retention_configs_when_remote_copy_disabled() -> None:
    """``validateRetentionConfigsWhenRemoteCopyDisabled``: with copying off, local retention is the total."""
    broker = BrokerConfig.from_properties({"remote.log.storage.system.enable": "true"})
    base = {"remote.storage.enable": "true", "remote.log.copy.disable": "true", "retention.ms": "1000"}
    with pytest.raises(ConfigError, match="local.retention.ms=500 must be -2 or equal retention.ms=1000"):
        validate_topic_config(broker, {**base, "local.retention.ms": "500"})
    assert validate_topic_config(broker, {**base, "local.retention.ms": "1000"}).effective_local_retention_ms == 1000


def test_timestamp_before_max_ms_uses_deprecated_config() -> None:
    """Broker before/after limits at their defaults: the deprecated difference limit is what applies."""
    one_day_ms = 24 * 3_600_000
    broker = BrokerConfig.from_properties({"log.message.timestamp.before.max.ms": str(2**63 - 1),
                                           "log.message.timestamp.after.max.ms": str(2**63 - 1),
                                           "log.message.timestamp.difference.max.ms": str(one_day_ms)})
    config = LogConfig.resolve(broker, {})
    assert config.timestamp_limit_ms("before") == (one_day_ms, "message.timestamp.difference.max.ms")
    assert config.timestamp_limit_ms("after") == (one_day_ms, "message.timestamp.difference.max.ms")
