"""Kafka's log configs: names, defaults, validation and precedence (spec §13, §10.4).

Two sources feed a partition's effective config, as on a broker. The broker file (server.properties)
holds ``log.*`` synonyms of topic configs plus broker-only settings; like Kafka, unknown keys there are
ignored (but listed in ``BrokerConfig.ignored_keys`` for a warning) while a bad value of a known key is
an error. Topic overrides reject unknown keys, since a typo would silently keep data longer or shorter.
Precedence: topic override > broker chain (first key present wins, e.g. ``log.retention.ms`` >
``log.retention.minutes`` > ``log.retention.hours``) > default. Errors name key, value and valid range.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from kafkalog.errors import ConfigError, InvalidTopicError

ConfigType = Literal["long", "int", "double", "boolean", "string", "list", "class"]
Value = int | float | bool | str | frozenset[str] | tuple[str, ...]

MAX_LONG = 2**63 - 1
MAX_DOUBLE = sys.float_info.max  # Java's Double.MAX_VALUE
_BITS = {"int": 32, "long": 64}
_COMPRESSIONS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# ASCII-only on purpose: Python's \d and str.isdigit() also accept non-ASCII digits and int() accepts
# "1_000", none of which Kafka's parser takes.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# --- validators: callables that return the normalised value or raise ValueError(reason) -----------


@dataclass(frozen=True)
class Range:
    """A closed numeric range; ``also`` lists sentinels allowed outside it (gzip's −1)."""

    lo: float | None = None
    hi: float | None = None
    also: tuple[int, ...] = ()

    def __call__(self, value: Any) -> Any:
        above, below = self.lo is None or value >= self.lo, self.hi is None or value <= self.hi
        if value in self.also or above and below:
            return value
        raise ValueError("must be " + self.describe())

    def describe(self) -> str:
        lo, hi = (None if b is None else _num(b) for b in (self.lo, self.hi))
        if lo is None:
            text = "any value" if hi is None else f"at most {hi}"
        else:
            text = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        return text + "".join(f", or {v}" for v in self.also)


@dataclass(frozen=True)
class Choice:
    """One of fixed strings (case-sensitive, as Kafka's ValidString), or with ``many`` a non-empty
    comma list of them, case-insensitive (as Kafka treats cleanup.policy), returned as a frozenset."""

    choices: tuple[str, ...]
    many: bool = False

    def __call__(self, value: Any) -> Any:
        if not self.many:
            if value not in self.choices:
                raise ValueError("must be " + self.describe())
            return value
        items = [item.lower() for item in value]
        bad = [item for item in items if item not in self.choices]
        if not items or bad:
            raise ValueError(f"must be {self.describe()} ({f'unknown item {bad[0]!r}' if bad else 'empty'})")
        return frozenset(items)

    def describe(self) -> str:
        return ("a comma-separated list of " if self.many else "one of ") + ", ".join(self.choices)


@dataclass(frozen=True)
class Pattern:
    regex: str
    text: str

    def __call__(self, value: Any) -> Any:
        if not re.fullmatch(self.regex, value):
            raise ValueError("must be " + self.text)
        return value

    def describe(self) -> str:
        return self.text


ANY = Range()
Validator = Range | Choice | Pattern


# --- the declarative tables ------------------------------------------------------------------------


@dataclass(frozen=True)
class Synonym:
    """A broker key feeding a topic config's default; ``scale`` converts its unit into the topic's
    (hours → ms). ``type``/``validator`` of None mean "the same as the topic config's"."""

    name: str
    type: ConfigType | None = None
    scale: int = 1
    validator: Validator | None = None


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Value
    validator: Validator
    synonyms: tuple[Synonym, ...]  # broker keys, highest priority first
    doc: str

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


def _key(name: str, type_: ConfigType, default: Value, validator: Validator, doc: str,
         *synonyms: str | Synonym) -> ConfigKey:
    syns = tuple(s if isinstance(s, Synonym) else Synonym(s) for s in synonyms)
    return ConfigKey(name, type_, default, validator, syns, doc)


_HOURS, _MINUTES = 3_600_000, 60_000
_NOT_LOG = "replication setting; stored, not used by the log layer"
_TIERED = "tiered storage only; -2 = use retention.*"
_RATE = "how far {} a CreateTime timestamp may be"

TOPIC_CONFIGS = MappingProxyType({k.name: k for k in [
    _key("cleanup.policy", "list", frozenset({"delete"}), Choice(("compact", "delete"), many=True),
         "delete old segments, compact by key, or both", "log.cleanup.policy"),
    _key("segment.bytes", "int", 1073741824, Range(14), "roll at this size", "log.segment.bytes"),
    _key("segment.ms", "long", 604800000, Range(1), "roll when the first record is this old",
         "log.roll.ms", Synonym("log.roll.hours", "int", _HOURS, Range(1))),
    _key("segment.jitter.ms", "long", 0, Range(0), "random amount subtracted from segment.ms per segment",
         "log.roll.jitter.ms", Synonym("log.roll.jitter.hours", "int", _HOURS, Range(0))),
    _key("segment.index.bytes", "int", 10485760, Range(4), "index file size", "log.index.size.max.bytes"),
    _key("index.interval.bytes", "int", 4096, Range(0), "bytes per index entry", "log.index.interval.bytes"),
    _key("flush.messages", "long", MAX_LONG, Range(1), "fsync period", "log.flush.interval.messages"),
    _key("flush.ms", "long", MAX_LONG, Range(0), "fsync period", "log.flush.interval.ms",
         "log.flush.scheduler.interval.ms"),
    _key("retention.bytes", "long", -1, ANY, "size limit; -1 = unlimited", "log.retention.bytes"),
    # Any value is accepted from the broker: a negative result becomes -1 (see BrokerConfig).
    _key("retention.ms", "long", 604800000, Range(-1), "delete segments older than this; -1 = unlimited",
         Synonym("log.retention.ms", validator=ANY), Synonym("log.retention.minutes", "int", _MINUTES, ANY),
         Synonym("log.retention.hours", "int", _HOURS, ANY)),
    _key("max.message.bytes", "int", 1048588, Range(0), "largest batch accepted", "message.max.bytes"),
    _key("file.delete.delay.ms", "long", 60000, Range(0), "wait between renaming to .deleted and removing",
         "log.segment.delete.delay.ms"),
    _key("delete.retention.ms", "long", 86400000, Range(0), "how long compaction keeps tombstones",
         "log.cleaner.delete.retention.ms"),
    _key("min.compaction.lag.ms", "long", 0, Range(0), "records younger than this are not compacted",
         "log.cleaner.min.compaction.lag.ms"),
    _key("max.compaction.lag.ms", "long", MAX_LONG, Range(1), "records older than this force compaction",
         "log.cleaner.max.compaction.lag.ms"),
    _key("min.cleanable.dirty.ratio", "double", 0.5, Range(0, 1), "dirty/total bytes that trigger compaction",
         "log.cleaner.min.cleanable.ratio"),
    _key("compression.type", "string", "producer", Choice(_COMPRESSIONS),
         "codec of stored batches; producer = keep the producer's", "compression.type"),
    _key("compression.gzip.level", "int", -1, Range(1, 9, (-1,)), "gzip level", "compression.gzip.level"),
    _key("compression.lz4.level", "int", 9, Range(1, 17), "lz4 level", "compression.lz4.level"),
    _key("compression.zstd.level", "int", 3, Range(-131072, 22), "zstd level", "compression.zstd.level"),
    _key("preallocate", "boolean", False, ANY, "preallocate new segment files", "log.preallocate"),
    _key("message.timestamp.type", "string", "CreateTime", Choice(("CreateTime", "LogAppendTime")),
         "keep the producer's timestamp or stamp the append time", "log.message.timestamp.type"),
    _key("message.timestamp.before.max.ms", "long", MAX_LONG, Range(0), _RATE.format("in the past"),
         "log.message.timestamp.before.max.ms"),
    _key("message.timestamp.after.max.ms", "long", MAX_LONG, Range(0), _RATE.format("in the future"),
         "log.message.timestamp.after.max.ms"),
    _key("message.timestamp.difference.max.ms", "long", MAX_LONG, Range(0),
         "deprecated; used only while before/after.max.ms are at their defaults",
         "log.message.timestamp.difference.max.ms"),
    _key("message.format.version", "string", "3.0-IV1",
         Pattern(r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?", "a Kafka version such as 2.8 or 3.0-IV1"),
         "deprecated; ignored from IBP 3.0", "log.message.format.version"),
    _key("local.retention.ms", "long", -2, Range(-2), _TIERED, "log.local.retention.ms"),
    _key("local.retention.bytes", "long", -2, Range(-2), _TIERED, "log.local.retention.bytes"),
    _key("remote.storage.enable", "boolean", False, ANY, "tiered storage: copy rolled segments to the remote tier"),
    _key("remote.log.copy.disable", "boolean", False, ANY,
         "tiered storage: copy no more; what the remote tier holds stays readable until retention"),
    _key("remote.log.delete.on.disable", "boolean", False, ANY,
         "tiered storage: delete the remote tier's data when remote.storage.enable turns false"),
    _key("min.insync.replicas", "int", 1, Range(1), _NOT_LOG, "min.insync.replicas"),
    _key("unclean.leader.election.enable", "boolean", False, ANY, _NOT_LOG, "unclean.leader.election.enable"),
]})

BROKER_CONFIGS = MappingProxyType({k.name: k for k in [
    _key("log.dir", "string", "/tmp/kafka-logs", Pattern(r".+", "a directory"), "if log.dirs is unset"),
    _key("log.dirs", "list", (), ANY, "the log directories, comma-separated; wins over log.dir"),
    _key("log.retention.check.interval.ms", "long", 300000, Range(1), "how often retention runs"),
    _key("log.initial.task.delay.ms", "long", 30000, Range(0), "delay before the first retention run"),
    _key("log.flush.offset.checkpoint.interval.ms", "int", 60000, Range(0), "recovery point checkpoints"),
    _key("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, Range(0), "log start checkpoints"),
    # Kafka declares no bound here, but its scheduler refuses a period of 0.
    _key("replica.high.watermark.checkpoint.interval.ms", "long", 5000, Range(1), "HW checkpoints"),
    _key("num.recovery.threads.per.data.dir", "int", 1, Range(1), "threads recovering each log dir"),
    _key("log.cleaner.enable", "boolean", True, ANY, "run compaction"),
    _key("log.cleaner.threads", "int", 1, Range(0), "compaction threads"),
    _key("log.cleaner.dedupe.buffer.size", "long", 134217728, Range(0), "offset map memory, all threads"),
    _key("log.cleaner.io.buffer.size", "int", 524288, Range(0), "I/O buffer of a cleaner thread"),
    _key("log.cleaner.io.buffer.load.factor", "double", 0.9, Range(0, 1), "offset map load factor (sic)"),
    _key("log.cleaner.io.max.bytes.per.second", "double", MAX_DOUBLE, Range(0), "cleaner I/O throttle"),
    _key("log.cleaner.backoff.ms", "long", 15000, Range(0), "cleaner sleep when nothing is cleanable"),
    _key("producer.id.expiration.ms", "int", 86400000, Range(1), "idle time before a producer id expires"),
    _key("remote.log.storage.system.enable", "boolean", False, ANY, "tiered storage: topics may enable it"),
]})

_SYNONYM_OF = {s.name: k.name for k in TOPIC_CONFIGS.values() for s in k.synonyms}


# --- parsing ------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def format_value(value: Value) -> str:
    """Kafka's text form of a parsed value (what `topics describe` prints and overrides store)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset | tuple):
        return ",".join(sorted(value) if isinstance(value, frozenset) else value)
    return repr(value) if isinstance(value, float) else str(value)


def _parse(name: str, type_: ConfigType, validator: Validator, raw: str) -> Value:
    text = raw.strip()  # Kafka trims every value before parsing it

    def error(problem: str) -> ConfigError:
        return ConfigError(f"{name}={text}: {problem}")

    bound = "" if validator == ANY else f", {validator.describe()}"
    value: Value
    if type_ in _BITS:
        bits = _BITS[type_]
        if not _INTEGER.fullmatch(text):
            raise error(f"must be a {bits}-bit integer{bound}")
        value = int(text)
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise error(f"must be a {bits}-bit integer ({-(2 ** (bits - 1))}..{2 ** (bits - 1) - 1}){bound}")
    elif type_ == "double":
        if not _DECIMAL.fullmatch(text) or not math.isfinite(float(text)):
            raise error(f"must be a number{bound}")
        value = float(text)
    elif type_ == "boolean":
        if text.lower() not in ("true", "false"):
            raise error("must be true or false")
        value = text.lower() == "true"
    elif type_ == "list":
        value = tuple(item.strip() for item in text.split(",")) if text else ()
    else:
        value = text
    try:
        result: Value = validator(value)
    except ValueError as exc:
        raise error(str(exc)) from None
    return result


def _parse_overrides(overrides: Mapping[str, str]) -> dict[str, Value]:
    values: dict[str, Value] = {}
    for name, raw in overrides.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            hint = f"it is the broker key for '{_SYNONYM_OF[name]}'; " if name in _SYNONYM_OF else ""
            raise ConfigError(f"unknown topic config '{name}' ({hint}valid: {', '.join(TOPIC_CONFIGS)})")
        values[name] = _parse(name, key.type, key.validator, raw)
    return values


def validate_topic_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check topic-level overrides and return them in canonical text form (e.g. " Delete " → "delete")."""
    return {name: format_value(value) for name, value in _parse_overrides(overrides).items()}


def parse_properties(text: str) -> dict[str, str]:
    """Parse the subset of Java's .properties format that server.properties files use.

    Comments (`#`, `!`), `key=value`, `key: value`, `key value`, backslash continuation and the
    usual escapes. A later duplicate wins, as in java.util.Properties. Values are trimmed.
    """
    props: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)  # Java's line ends only; str.splitlines knows many more
    i = 0
    while i < len(lines):
        start, logical = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue  # a comment ending in a backslash does not continue (Java agrees)
        while _continues(logical) and i < len(lines):
            logical = logical[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(logical):
            logical = logical[:-1]
        match = re.match(r"((?:\\.|[^\\=:\s])*)\s*[=:]?\s*(.*)", logical, re.DOTALL)
        assert match is not None  # the pattern matches any string
        key, value = _unescape(match[1]), _unescape(match[2]).strip()
        if not key:
            raise ConfigError(f"line {start}: no key before the value in {logical.strip()!r}")
        props[key] = value
    return props


def _continues(line: str) -> bool:
    # An odd number of trailing backslashes: the last one escapes the line end.
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        s = m[1]
        return chr(int(s[1:], 16)) if s[0] == "u" else _ESCAPES.get(s, s)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text, flags=re.DOTALL)


def read_regular_text(path: str | Path) -> str:
    """The UTF-8 text of a file a user names (a broker file, a plan), or ``InputFileError`` at once
    unless it is a regular text file: opening a FIFO would wait for a writer forever, a device may never
    end, and a segment named by mistake is bytes, not text."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a device or socket"
        raise InputFileError(f"not a regular file ({kind})")
    with open(fd, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
                             "a binary file, such as a segment?") from None


class InputFileError(OSError):
    """A file kafkalog reads whole is a FIFO, a directory, a device or not text."""


# --- broker and topic config objects --------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfig:
    """Broker-level settings: the resolved default of every topic config plus broker-only values."""

    topic_defaults: Mapping[str, Value] = field(hash=False)
    # topic config -> the broker key its default came from, or None for the built-in default
    topic_default_keys: Mapping[str, str | None] = field(hash=False)
    log_dirs: tuple[str, ...]
    log_retention_check_interval_ms: int
    log_initial_task_delay_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_recovery_threads_per_data_dir: int
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_backoff_ms: int
    producer_id_expiration_ms: int
    remote_log_storage_system_enable: bool
    ignored_keys: tuple[str, ...] = ()  # keys of the file that are not log settings; Kafka ignores them too
    # What it was made from: the Spark job ships these to executors, which may not see the file.
    properties: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        defaults: dict[str, Value] = {}
        sources: dict[str, str | None] = {}
        for key in TOPIC_CONFIGS.values():
            # Parse every synonym present, not only the winner: Kafka fails on any bad value.
            present = [(s, _parse(s.name, s.type or key.type, s.validator or key.validator, props[s.name]))
                       for s in key.synonyms if s.name in props]
            if not present:
                defaults[key.name], sources[key.name] = key.default, None
                continue
            syn, value = present[0]
            if syn.scale != 1:
                assert isinstance(value, int)
                value *= syn.scale
            if key.name == "retention.ms" and isinstance(value, int) and value < 0:
                value = -1  # Kafka: any negative log.retention.{ms,minutes,hours} means unlimited
            defaults[key.name], sources[key.name] = value, syn.name
        kwargs: dict[str, Any] = {
            k.attr: _parse(k.name, k.type, k.validator, props[k.name]) if k.name in props else k.default
            for k in BROKER_CONFIGS.values()}
        # Empty items of log.dirs are dropped, as Kafka's CSV parsing does; when set it wins over log.dir.
        dirs, log_dir = tuple(d for d in kwargs.pop("log_dirs") if d), kwargs.pop("log_dir")
        if "log.dirs" in props and not dirs:
            raise ConfigError(f"log.dirs={props['log.dirs'].strip()}: must name at least one directory")
        kwargs["log_dirs"] = dirs or (log_dir,)
        known = _SYNONYM_OF.keys() | BROKER_CONFIGS.keys()
        config = cls(topic_defaults=MappingProxyType(defaults), topic_default_keys=MappingProxyType(sources),
                     ignored_keys=tuple(sorted(props.keys() - known)), properties=MappingProxyType(dict(props)),
                     **kwargs)
        if config.remote_log_storage_system_enable:  # Kafka's validateBrokerLogConfigValues
            _check_local_retention(defaults, config.topic_default_source)
        return config

    @classmethod
    def load(cls, path: str | Path | None) -> BrokerConfig:
        """Read a server.properties file; None means every setting at its default."""
        if path is None:
            return cls.from_properties({})
        try:
            text = read_regular_text(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read broker config file {path}: {exc}") from exc
        try:
            return cls.from_properties(parse_properties(text))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def topic_default_source(self, name: str) -> str:
        """Where the default of topic config ``name`` came from: "broker file: <key>" or "default"."""
        broker_key = self.topic_default_keys[name]
        return "default" if broker_key is None else f"broker file: {broker_key}"

    @property
    def topic_default_sources(self) -> Mapping[str, str]:
        return {name: self.topic_default_source(name) for name in TOPIC_CONFIGS}


@dataclass(frozen=True)
class LogConfig:
    """The effective config of one log (partition), every field named after its Kafka key with units."""

    cleanup_policy: frozenset[str]
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    file_delete_delay_ms: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    preallocate: bool
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    message_timestamp_difference_max_ms: int
    message_format_version: str
    local_retention_ms: int
    local_retention_bytes: int
    remote_storage_enable: bool
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    min_insync_replicas: int
    unclean_leader_election_enable: bool

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def effective_local_retention_ms(self) -> int:
        """How long the local tier keeps a segment: ``local.retention.ms``, -2 meaning ``retention.ms``
        (Kafka's ``LogConfig.localRetentionMs``)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, -2 meaning ``retention.bytes`` (``LogConfig.localRetentionBytes``)."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    def timestamp_limit_ms(self, side: Literal["before", "after"]) -> tuple[int, str]:
        """How far a CreateTime timestamp may lie ``side`` the append time, and the key that says so:
        ``message.timestamp.<side>.max.ms``, or the deprecated ``message.timestamp.difference.max.ms``
        while that key is at its default (Kafka's LogConfig, for the deprecation period)."""
        own = self.message_timestamp_before_max_ms if side == "before" else self.message_timestamp_after_max_ms
        if own != MAX_LONG:
            return own, f"message.timestamp.{side}.max.ms"
        return self.message_timestamp_difference_max_ms, "message.timestamp.difference.max.ms"

    @classmethod
    def resolve(cls, broker: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
        """Topic override > broker synonym chain > built-in default."""
        values = {**broker.topic_defaults, **_parse_overrides(overrides)}
        kwargs: dict[str, Any] = {TOPIC_CONFIGS[name].attr: value for name, value in values.items()}
        return cls(**kwargs)

    @classmethod
    def default(cls) -> LogConfig:
        return cls.resolve(BrokerConfig.from_properties({}), {})


# Each local-tier retention key beside the whole log's (tiered storage).
_LOCAL_RETENTION = (("retention.bytes", "local.retention.bytes"), ("retention.ms", "local.retention.ms"))


def validate_topic_config(broker: BrokerConfig, overrides: Mapping[str, str],
                          existing: Mapping[str, str] | None = None) -> LogConfig:
    """Kafka's checks of a topic's config as a whole on this broker (``LogConfig.validate``), beyond each
    value's own range; returns the effective config. ``overrides``: the topic's overrides as they
    would be; ``existing``: as they are (an alteration), for the rule on turning remote storage off."""
    config = LogConfig.resolve(broker, overrides)
    source = {name: "topic" if name in overrides else broker.topic_default_source(name) for name in TOPIC_CONFIGS}
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise ConfigError(f"conflicting settings: min.compaction.lag.ms={config.min_compaction_lag_ms} "
                          f"({source['min.compaction.lag.ms']}) > max.compaction.lag.ms="
                          f"{config.max_compaction_lag_ms} ({source['max.compaction.lag.ms']})")
    if not config.remote_storage_enable:
        was_enabled = existing is not None and LogConfig.resolve(broker, existing).remote_storage_enable
        if was_enabled and not config.remote_log_delete_on_disable:
            raise ConfigError("remote.storage.enable=false: remote storage cannot be disabled while the remote tier "
                              "keeps its data; to keep it read-only set remote.storage.enable=true and "
                              "remote.log.copy.disable=true, to delete it set remote.storage.enable=false and "
                              "remote.log.delete.on.disable=true")
        return config
    if not broker.remote_log_storage_system_enable:
        raise ConfigError("remote.storage.enable=true: tiered storage is disabled on this broker "
                          "(remote.log.storage.system.enable=false), so no topic may enable remote log storage")
    if config.compact:
        raise ConfigError(f"remote.storage.enable=true with cleanup.policy={','.join(sorted(config.cleanup_policy))} "
                          f"({source['cleanup.policy']}): remote log storage is unsupported for compacted topics")
    _check_local_retention({name: getattr(config, key.attr) for name, key in TOPIC_CONFIGS.items()}, source.__getitem__)
    if config.remote_log_copy_disable:  # nothing more reaches the remote tier: local retention is all there is
        for total, local in _LOCAL_RETENTION:
            values = {name: getattr(config, TOPIC_CONFIGS[name].attr) for name in (total, local)}
            if values[local] not in (-2, values[total]):
                raise ConfigError(f"remote.log.copy.disable=true: {local}={values[local]} must be -2 or equal "
                                  f"{total}={values[total]}, since nothing more is copied to the remote tier")
    return config


def _check_local_retention(values: Mapping[str, Value], source: Any) -> None:
    """With tiered storage, the local tier keeps no more than the whole log: ``local.retention.*`` is -2
    (the total), or a limit within ``retention.*`` when that is limited (Kafka's
    ``validateRemoteStorageRetentionSize``/``Time``). ``source(name)`` says where a value came from."""
    for total, local in _LOCAL_RETENTION:
        total_value, local_value = values[total], values[local]
        assert isinstance(total_value, int) and isinstance(local_value, int)
        if total_value < 0 or local_value == -2:
            continue
        if local_value == -1 or local_value > total_value:
            raise ConfigError(f"{local}={local_value} ({source(local)}): must not be "
                              f"{'-1 (unlimited)' if local_value == -1 else 'more than'} while {total}={total_value} "
                              f"({source(total)}); the local tier keeps at most what the whole log keeps")


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    source: str  # "topic" | "broker:<key>" | "default"


def describe(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config's effective value and where it came from, in table order."""
    parsed = _parse_overrides(overrides)
    entries = []
    for name in TOPIC_CONFIGS:
        if name in parsed:
            value, source = parsed[name], "topic"
        else:
            key = broker.topic_default_keys[name]
            value, source = broker.topic_defaults[name], "default" if key is None else f"broker:{key}"
        entries.append(ConfigEntry(name, format_value(value), source))
    return entries


# --- topic names --------------------------------------------------------------------------------

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit: "<topic>-<partition>" must fit a 255-byte file name
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Reject names Kafka's Topic.validate rejects, checking its rules in the same order."""
    if not name:
        rule = "it is empty"
    elif name in (".", ".."):
        rule = "it cannot be '.' or '..'"  # they would name the log dir itself or its parent
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        rule = f"it is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    elif not _TOPIC_NAME.fullmatch(name):
        rule = "it contains a character other than ASCII letters, digits, '.', '_' and '-'"
    else:
        return
    shown = name if len(name) <= 60 else name[:57] + "..."
    raise InvalidTopicError(f"illegal topic name {shown!r}: {rule}")
