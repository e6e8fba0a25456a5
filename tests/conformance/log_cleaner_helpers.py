"""Helpers of the LogCleanerTest port (``test_log_cleaner.py`` and ``test_log_cleaner_2.py``), on top of the
harness in ``kafka_log.py``: the surfaces each scenario cleans through (``SURFACES``: the ``kafkalog compact``
CLI and the Spark job's tasks), building a log as LogCleanerTest's ``logConfig`` does (``kafka_log``) with
its producers kept alive across the rounds (``STILL_ACTIVE``) and broker settings for both surfaces
(``with_broker``), filling it to a number of segments, and reading back a partition's log end offset, its
open segments, a round's end offset and the digest of its files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from kafka_log import ScenarioLog

from kafkalog.log.segment import LogSegment

SURFACES = ["cli", "spark-tasks"]
# LogCleanerTest runs on a clock that stands still, so no producer ever expires there; kafkalog's rounds
# run at their own clock, which expires a producer idle for producer.id.expiration.ms. Every log here
# has it at its maximum (about 24.8 days) and is cleaned within it.
STILL_ACTIVE: dict[str, str | int] = {"producer_id_expiration_ms": 2**31 - 1}


def kafka_log(tmp_path: Path, name: str = "logs", **configs: str | int) -> ScenarioLog:
    """LogCleanerTest's ``logConfig``: segment.bytes=1024, segment.index.bytes=1024, compact; then
    the test's own overrides."""
    settings: dict[str, str | int] = {"cleanup_policy": "compact", "segment_bytes": 1024, "segment_index_bytes": 1024}
    settings.update(configs)
    return ScenarioLog(tmp_path / name, broker=STILL_ACTIVE, **settings)


def with_broker(log: ScenarioLog, monkeypatch: pytest.MonkeyPatch, **props: str | int) -> None:
    """Broker settings (server.properties) for both surfaces: the CLI reads ``$KAFKALOG_CONFIG``, the
    Spark tasks the store's broker config."""
    log.set_broker(**{**STILL_ACTIVE, **props})
    assert log.broker_file is not None
    monkeypatch.setenv("KAFKALOG_CONFIG", str(log.broker_file))  # for the CLI run without the harness


def leo(log: ScenarioLog) -> int:
    return log.store.open_log(log.location, read_only=True).log_end_offset


def fill_until(log: ScenarioLog, segments: int, row: Any = None) -> None:
    """Append one record a batch until the log has ``segments`` segments; ``row(offset)`` gives the
    (key, value), by default Kafka's ``record(offset, offset)``."""
    while len(log.segment_bases()) < segments:
        offset = leo(log)
        log.append_each([row(offset) if row else (str(offset), str(offset))])


def end_offset(report: dict[str, Any]) -> int:
    (cleaned,) = report["cleaned"]
    return int(cleaned["end_offset"])


def digest(directory: Path) -> dict[str, str]:
    """sha256 of every file of a partition dir (kafkalog's lock files aside)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
            if p.is_file() and not p.name.startswith(".kafkalog")}


def open_segments(log: ScenarioLog) -> list[LogSegment]:
    return list(log.store.open_log(log.location, read_only=True).segments)
