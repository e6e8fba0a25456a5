"""Tests of kafkalog.log.config against spec §13 (names, defaults, ranges) and §10.4 (precedence)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kafkalog.errors import ConfigError, InvalidTopicError
from kafkalog.log.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigEntry,
    LogConfig,
    describe,
    parse_properties,
    validate_topic_name,
    validate_topic_overrides,
)

MAX_LONG = 9223372036854775807

# Spec §13.1, transcribed by hand so that a wrong default in the table fails here.
SPEC_TOPIC_DEFAULTS: dict[str, object] = {
    "cleanup.policy": frozenset({"delete"}),
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760,
    "index.interval.bytes": 4096,
    "flush.messages": MAX_LONG,
    "flush.ms": MAX_LONG,
    "retention.bytes": -1,
    "retention.ms": 604800000,
    "max.message.bytes": 1048588,
    "file.delete.delay.ms": 60000,
    "delete.retention.ms": 86400000,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": MAX_LONG,
    "min.cleanable.dirty.ratio": 0.5,
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "preallocate": False,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": MAX_LONG,
    "message.timestamp.after.max.ms": MAX_LONG,
    "message.timestamp.difference.max.ms": MAX_LONG,
    "message.format.version": "3.0-IV1",
    "local.retention.ms": -2,
    "local.retention.bytes": -2,
    # Tiered storage (KIP-405), from Kafka's LogConfig: not in the spec's table.
    "remote.storage.enable": False,
    "remote.log.copy.disable": False,
    "remote.log.delete.on.disable": False,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
}

# Spec §13.2.
SPEC_BROKER_DEFAULTS: dict[str, object] = {
    "log_dirs": ("/tmp/kafka-logs",),
    "log_retention_check_interval_ms": 300000,
    "log_initial_task_delay_ms": 30000,
    "log_flush_offset_checkpoint_interval_ms": 60000,
    "log_flush_start_offset_checkpoint_interval_ms": 60000,
    "replica_high_watermark_checkpoint_interval_ms": 5000,
    "num_recovery_threads_per_data_dir": 1,
    "log_cleaner_enable": True,
    "log_cleaner_threads": 1,
    "log_cleaner_dedupe_buffer_size": 134217728,
    "log_cleaner_io_buffer_size": 524288,
    "log_cleaner_io_buffer_load_factor": 0.9,
    "log_cleaner_io_max_bytes_per_second": 1.7976931348623157e308,
    "log_cleaner_backoff_ms": 15000,
    "producer_id_expiration_ms": 86400000,
    "remote_log_storage_system_enable": False,  # Kafka's RemoteLogManagerConfig; not in the spec's table
}


def broker(**props: str) -> BrokerConfig:
    """A broker config from keyword props, with '_' standing for '.' in key names."""
    return BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


# --- defaults -----------------------------------------------------------------------------------


def test_the_table_holds_exactly_the_spec_topic_configs() -> None:
    assert list(TOPIC_CONFIGS) == list(SPEC_TOPIC_DEFAULTS)


def test_log_config_fields_are_the_table_keys_in_snake_case() -> None:
    assert [f.name for f in dataclasses.fields(LogConfig)] == [k.replace(".", "_") for k in TOPIC_CONFIGS]


@pytest.mark.parametrize(("name", "expected"), SPEC_TOPIC_DEFAULTS.items())
def test_topic_default_equals_spec(name: str, expected: object) -> None:
    assert getattr(LogConfig.default(), name.replace(".", "_")) == expected
    assert TOPIC_CONFIGS[name].default == expected
    assert BrokerConfig.load(None).topic_default_source(name) == "default"


@pytest.mark.parametrize(("field", "expected"), SPEC_BROKER_DEFAULTS.items())
def test_broker_only_default_equals_spec(field: str, expected: object) -> None:
    assert getattr(BrokerConfig.load(None), field) == expected


def test_defaults_have_nothing_ignored_and_default_policy_is_delete_only() -> None:
    config = LogConfig.default()
    assert (config.delete, config.compact) == (True, False)
    assert BrokerConfig.load(None).ignored_keys == ()


# --- the broker synonym chains (spec §10.4) ---------------------------------------------------


@pytest.mark.parametrize(
    ("props", "topic_key", "expected", "source"),
    [
        ({}, "retention.ms", 604800000, None),
        ({"log.retention.hours": "1"}, "retention.ms", 3600000, "log.retention.hours"),
        ({"log.retention.hours": "1", "log.retention.minutes": "5"}, "retention.ms", 300000,
         "log.retention.minutes"),
        ({"log.retention.hours": "1", "log.retention.minutes": "5", "log.retention.ms": "1234"},
         "retention.ms", 1234, "log.retention.ms"),
        ({"log.retention.ms": "0"}, "retention.ms", 0, "log.retention.ms"),
        ({"log.retention.hours": "-1"}, "retention.ms", -1, "log.retention.hours"),
        ({"log.retention.minutes": "-3"}, "retention.ms", -1, "log.retention.minutes"),
        ({"log.retention.ms": "-5", "log.retention.hours": "2"}, "retention.ms", -1, "log.retention.ms"),
        ({"log.retention.hours": "2147483647"}, "retention.ms", 2147483647 * 3600000, "log.retention.hours"),
        ({"log.roll.hours": "2"}, "segment.ms", 7200000, "log.roll.hours"),
        ({"log.roll.hours": "2", "log.roll.ms": "1000"}, "segment.ms", 1000, "log.roll.ms"),
        ({"log.roll.jitter.hours": "1"}, "segment.jitter.ms", 3600000, "log.roll.jitter.hours"),
        ({"log.roll.jitter.hours": "1", "log.roll.jitter.ms": "7"}, "segment.jitter.ms", 7,
         "log.roll.jitter.ms"),
        ({"log.flush.scheduler.interval.ms": "3000"}, "flush.ms", 3000, "log.flush.scheduler.interval.ms"),
        ({"log.flush.scheduler.interval.ms": "3000", "log.flush.interval.ms": "10"}, "flush.ms", 10,
         "log.flush.interval.ms"),
        ({"log.segment.bytes": "1048576"}, "segment.bytes", 1048576, "log.segment.bytes"),
        ({"message.max.bytes": "2000000"}, "max.message.bytes", 2000000, "message.max.bytes"),
        ({"log.cleanup.policy": "compact"}, "cleanup.policy", frozenset({"compact"}), "log.cleanup.policy"),
        ({"log.cleaner.min.cleanable.ratio": "0.1"}, "min.cleanable.dirty.ratio", 0.1,
         "log.cleaner.min.cleanable.ratio"),
        ({"log.preallocate": "TRUE"}, "preallocate", True, "log.preallocate"),
        ({"compression.type": "zstd"}, "compression.type", "zstd", "compression.type"),
    ],
)
def test_broker_chain(props: dict[str, str], topic_key: str, expected: object, source: str | None) -> None:
    config = BrokerConfig.from_properties(props)
    assert getattr(LogConfig.resolve(config, {}), topic_key.replace(".", "_")) == expected
    assert config.topic_default_keys[topic_key] == source
    expected_source = "default" if source is None else f"broker file: {source}"
    assert config.topic_default_source(topic_key) == expected_source


def test_topic_override_beats_every_broker_key() -> None:
    config = broker(log_retention_ms="1", log_retention_hours="1", log_segment_bytes="1000")
    log = LogConfig.resolve(config, {"retention.ms": "5000", "segment.bytes": "2000"})
    assert (log.retention_ms, log.segment_bytes) == (5000, 2000)
    assert LogConfig.resolve(config, {}).retention_ms == 1


def test_negative_topic_retention_below_minus_one_is_rejected_even_though_broker_clamps() -> None:
    with pytest.raises(ConfigError, match=r"retention\.ms=-2: must be at least -1"):
        validate_topic_overrides({"retention.ms": "-2"})


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        # a bad lower-priority synonym fails even when a higher one is set, as on a Kafka broker
        ({"log.retention.ms": "1", "log.retention.hours": "abc"}, "log.retention.hours=abc"),
        ({"log.retention.minutes": "3000000000"}, "log.retention.minutes=3000000000: must be a 32-bit"),
        ({"log.segment.bytes": "10"}, "log.segment.bytes=10: must be at least 14"),
        ({"log.roll.hours": "0"}, "log.roll.hours=0: must be at least 1"),
        ({"log.roll.ms": "0"}, "log.roll.ms=0: must be at least 1"),
        ({"log.roll.jitter.hours": "-1"}, "log.roll.jitter.hours=-1: must be at least 0"),
        ({"log.cleanup.policy": "remove"}, "log.cleanup.policy=remove"),
        ({"log.cleaner.min.cleanable.ratio": "2"}, "log.cleaner.min.cleanable.ratio=2: must be between 0"),
        ({"log.cleaner.threads": "-1"}, "log.cleaner.threads=-1: must be at least 0"),
        ({"log.cleaner.enable": "maybe"}, "log.cleaner.enable=maybe: must be true or false"),
        ({"log.retention.check.interval.ms": "0"}, "log.retention.check.interval.ms=0: must be at least 1"),
        ({"log.cleaner.io.buffer.load.factor": "1.5"}, "log.cleaner.io.buffer.load.factor=1.5"),
        ({"log.dirs": " , "}, "log.dirs=,: must name at least one directory"),
    ],
)
def test_bad_broker_value_is_rejected_naming_the_key(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(props)
    assert fragment in str(info.value)


def test_unknown_broker_keys_are_ignored_but_recorded() -> None:
    props = {
        "broker.id": "0", "node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://:9092", "zookeeper.connect": "localhost:2181", "num.partitions": "3",
        "offsets.topic.replication.factor": "1", "retention.ms": "5",  # a topic key means nothing here
        "log.retention.hours": "24", "log.dirs": "/data/a, /data/b,,",
    }
    config = BrokerConfig.from_properties(props)
    assert config.ignored_keys == ("broker.id", "listeners", "node.id", "num.partitions",
                                   "offsets.topic.replication.factor", "process.roles", "retention.ms",
                                   "zookeeper.connect")
    assert config.log_dirs == ("/data/a", "/data/b")
    assert LogConfig.resolve(config, {}).retention_ms == 86400000


def test_log_dirs_wins_over_log_dir() -> None:
    assert broker(log_dir="/one").log_dirs == ("/one",)
    assert broker(log_dir="/one", log_dirs="/two").log_dirs == ("/two",)


def test_broker_only_values_are_parsed() -> None:
    config = broker(log_cleaner_threads="4", log_cleaner_enable="false",
                    log_cleaner_io_buffer_load_factor="0.75", log_cleaner_io_max_bytes_per_second="1e6",
                    producer_id_expiration_ms="1000")
    assert (config.log_cleaner_threads, config.log_cleaner_enable) == (4, False)
    assert config.log_cleaner_io_buffer_load_factor == 0.75
    assert config.log_cleaner_io_max_bytes_per_second == 1e6
    assert config.producer_id_expiration_ms == 1000


def test_every_broker_only_key_reaches_a_field() -> None:
    fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    assert {k.replace(".", "_") for k in BROKER_CONFIGS} - {"log_dir"} <= fields


# --- .properties files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a = 1 ", {"a": "1"}),
        ("a: 1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("   a\t=\t1", {"a": "1"}),
        ("a=", {"a": ""}),
        ("a", {"a": ""}),
        ("a=x=y", {"a": "x=y"}),
        ("# comment\n! also a comment\n\n   \na=1", {"a": "1"}),
        ("  # indented comment=1", {}),
        ("a=1 # not a comment", {"a": "1 # not a comment"}),
        ("a=1\na=2", {"a": "2"}),
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("log.dirs=/a,\\\n    /b,\\\n    /c", {"log.dirs": "/a,/b,/c"}),
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # an escaped backslash does not continue the line
        ("# comment \\\na=1", {"a": "1"}),  # comments never continue
        ("a=last\\", {"a": "last"}),
        ("my\\ key=v\\u00e9", {"my key": "v\u00e9"}),
        ("k\\=x=1", {"k=x": "1"}),
    ],
)
def test_parse_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


@pytest.mark.parametrize(("text", "line"), [("=1", 1), ("a=1\n# c\n  : value", 3), ("a=1\\\n b\n=x", 3)])
def test_parse_properties_line_without_key_names_the_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError, match=rf"^line {line}: no key"):
        parse_properties(text)


def test_load_reads_a_server_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("broker.id=0\nlog.dirs=/var/kafka\nlog.retention.minutes=10\nlog.cleanup.policy=compact,delete\n")
    config = BrokerConfig.load(path)
    assert config.log_dirs == ("/var/kafka",)
    assert config.ignored_keys == ("broker.id",)
    expected = ConfigEntry("cleanup.policy", "compact,delete", "broker:log.cleanup.policy")
    assert describe(config, {})[0] == expected
    assert LogConfig.resolve(config, {}).retention_ms == 600000


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    with pytest.raises(ConfigError, match="cannot read broker config file"):
        BrokerConfig.load(path)
    path.write_text("log.segment.bytes=-1\n")
    with pytest.raises(ConfigError, match=r"server\.properties: log\.segment\.bytes=-1: must be at least 14"):
        BrokerConfig.load(str(path))


# --- topic overrides ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw", "normalised"),
    [
        ("cleanup.policy", "compact,delete", "compact,delete"),
        ("cleanup.policy", "delete , COMPACT", "compact,delete"),
        ("cleanup.policy", " Delete ", "delete"),
        ("segment.bytes", " 14 ", "14"),
        ("segment.bytes", "2147483647", "2147483647"),
        ("retention.ms", "-1", "-1"),
        ("retention.ms", "+5", "5"),
        ("retention.bytes", "-100", "-100"),
        ("flush.messages", str(MAX_LONG), str(MAX_LONG)),
        ("min.cleanable.dirty.ratio", "0", "0.0"),
        ("min.cleanable.dirty.ratio", "1", "1.0"),
        ("min.cleanable.dirty.ratio", ".25", "0.25"),
        ("preallocate", "TRUE", "true"),
        ("unclean.leader.election.enable", "False", "false"),
        ("compression.type", "lz4", "lz4"),
        ("compression.gzip.level", "-1", "-1"),
        ("compression.gzip.level", "9", "9"),
        ("compression.zstd.level", "-131072", "-131072"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("message.format.version", "2.8-IV1", "2.8-IV1"),
        ("local.retention.ms", "-2", "-2"),
        ("index.interval.bytes", "0", "0"),
    ],
)
def test_valid_override_is_normalised(name: str, raw: str, normalised: str) -> None:
    assert validate_topic_overrides({name: raw}) == {name: normalised}


@pytest.mark.parametrize(
    ("name", "raw", "fragment"),
    [
        ("segment.bytes", "-5", "segment.bytes=-5: must be at least 14"),
        ("segment.bytes", "13", "segment.bytes=13: must be at least 14"),
        ("segment.bytes", "1.5", "segment.bytes=1.5: must be a 32-bit integer, at least 14"),
        ("segment.bytes", "abc", "segment.bytes=abc: must be a 32-bit integer"),
        ("segment.bytes", "", "segment.bytes=: must be a 32-bit integer"),
        ("segment.bytes", "2147483648", "segment.bytes=2147483648: must be a 32-bit integer"),
        ("segment.index.bytes", "2147483648", "segment.index.bytes=2147483648: must be a 32-bit"),
        ("segment.index.bytes", "3", "segment.index.bytes=3: must be at least 4"),
        ("index.interval.bytes", "4294967296", "index.interval.bytes=4294967296: must be a 32-bit"),
        ("max.message.bytes", "2147483648", "max.message.bytes=2147483648: must be a 32-bit"),
        ("min.insync.replicas", "2147483648", "min.insync.replicas=2147483648: must be a 32-bit"),
        ("min.insync.replicas", "0", "min.insync.replicas=0: must be at least 1"),
        ("retention.ms", "9223372036854775808", "retention.ms=9223372036854775808: must be a 64-bit"),
        ("retention.bytes", "1_000", "retention.bytes=1_000: must be a 64-bit integer"),
        ("retention.bytes", "\u0661", "must be a 64-bit integer"),  # a non-ASCII digit
        ("segment.ms", "0", "segment.ms=0: must be at least 1"),
        ("flush.messages", "0", "flush.messages=0: must be at least 1"),
        ("max.compaction.lag.ms", "0", "max.compaction.lag.ms=0: must be at least 1"),
        ("delete.retention.ms", "-1", "delete.retention.ms=-1: must be at least 0"),
        ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio=1.5: must be between 0 and 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "min.cleanable.dirty.ratio=-0.1: must be between 0 and 1"),
        ("min.cleanable.dirty.ratio", "nan", "min.cleanable.dirty.ratio=nan: must be a number"),
        ("min.cleanable.dirty.ratio", "half", "min.cleanable.dirty.ratio=half: must be a number"),
        ("cleanup.policy", "compact,foo", "cleanup.policy=compact,foo: must be a comma-separated list of "
                                          "compact, delete (unknown item 'foo')"),
        ("cleanup.policy", "", "cleanup.policy=: must be a comma-separated list of compact, delete (empty)"),
        ("cleanup.policy", "compact,,delete", "unknown item ''"),
        ("compression.type", "brotli", "compression.type=brotli: must be one of uncompressed, zstd, lz4"),
        ("compression.type", "GZIP", "compression.type=GZIP: must be one of"),
        ("compression.gzip.level", "0", "compression.gzip.level=0: must be between 1 and 9, or -1"),
        ("compression.gzip.level", "10", "compression.gzip.level=10: must be between 1 and 9, or -1"),
        ("compression.lz4.level", "18", "compression.lz4.level=18: must be between 1 and 17"),
        ("compression.zstd.level", "23", "compression.zstd.level=23: must be between -131072 and 22"),
        ("compression.zstd.level", "-131073", "compression.zstd.level=-131073: must be between -131072"),
        ("message.timestamp.type", "createtime", "message.timestamp.type=createtime: must be one of Create"),
        ("message.timestamp.before.max.ms", "-1", "message.timestamp.before.max.ms=-1: must be at least 0"),
        ("preallocate", "yes", "preallocate=yes: must be true or false"),
        ("message.format.version", "latest", "message.format.version=latest: must be a Kafka version"),
        ("local.retention.bytes", "-3", "local.retention.bytes=-3: must be at least -2"),
    ],
)
def test_invalid_override_is_rejected_naming_key_value_and_range(name: str, raw: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_overrides({name: raw})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("foo", ""), ("log.retention.hours", "broker key for 'retention.ms'"), ("Retention.ms", ""),
     ("retention.ms ", "")],
)
def test_unknown_topic_key_is_rejected_with_its_name(name: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.resolve(BrokerConfig.load(None), {"retention.ms": "1", name: "1"})
    message = str(info.value)
    assert message.startswith(f"unknown topic config '{name}' (")
    assert hint in message and "valid: cleanup.policy, segment.bytes," in message


@pytest.mark.parametrize(
    ("policy", "compact", "delete"),
    [("delete", False, True), ("compact", True, False), ("compact,delete", True, True),
     ("Delete, Compact", True, True)],
)
def test_policy_properties(policy: str, compact: bool, delete: bool) -> None:
    config = LogConfig.resolve(BrokerConfig.load(None), {"cleanup.policy": policy})
    assert (config.compact, config.delete) == (compact, delete)


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LogConfig.default().retention_ms = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BrokerConfig.load(None).log_cleaner_threads = 2  # type: ignore[misc]


# --- describe -------------------------------------------------------------------------------------


def test_describe_reports_value_and_source_of_every_key() -> None:
    config = broker(log_retention_hours="1", log_retention_minutes="5", log_segment_bytes="1048576")
    overrides = {"segment.bytes": "2048", "cleanup.policy": "delete,compact"}
    entries = {e.name: e for e in describe(config, overrides)}
    assert list(entries) == list(TOPIC_CONFIGS)
    assert entries["retention.ms"] == ConfigEntry("retention.ms", "300000", "broker:log.retention.minutes")
    assert entries["segment.bytes"] == ConfigEntry("segment.bytes", "2048", "topic")
    assert entries["cleanup.policy"] == ConfigEntry("cleanup.policy", "compact,delete", "topic")
    assert entries["min.cleanable.dirty.ratio"] == ConfigEntry("min.cleanable.dirty.ratio", "0.5", "default")
    assert entries["flush.ms"] == ConfigEntry("flush.ms", str(MAX_LONG), "default")
    assert entries["preallocate"] == ConfigEntry("preallocate", "false", "default")


def test_describe_rejects_bad_overrides() -> None:
    with pytest.raises(ConfigError, match="segment.bytes=-5"):
        describe(BrokerConfig.load(None), {"segment.bytes": "-5"})


# --- topic names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "empty"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a" * 250, "longer than 249"),
        ("bad/name", "character other than"),
        ("sp ace", "character other than"),
        ("tab\t", "character other than"),
        ("new\n", "character other than"),
        ("caf\u00e9", "character other than"),
        ("\u0661", "character other than"),
        ("a:b", "character other than"),
    ],
)
def test_illegal_topic_name_is_rejected(name: str, rule: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert rule in str(info.value)
    assert repr(name[:20]).rstrip("'") in str(info.value)


@pytest.mark.parametrize("name", ["a.b_c-1", "a" * 249, "...", "_", "-", "Topic.Dots", "__consumer_offsets"])
def test_legal_topic_name_is_accepted(name: str) -> None:
    validate_topic_name(name)  # raises on failure
