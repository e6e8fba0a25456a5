"""The cleaner's I/O throttle (``log.cleaner.io.max.bytes.per.second``, Kafka's ``Throttler``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from kafkalog.errors import ConfigError
from kafkalog.log.config import BrokerConfig
from kafkalog.log.store import LogStore
from kafkalog.maintenance import throttle
from kafkalog.maintenance.compact import compact
from kafkalog.maintenance.throttle import UNTHROTTLED, Throttler


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_bytes_faster_than_the_rate_sleep_until_the_average_is_the_rate() -> None:
    clock = FakeClock()
    t = Throttler(1000.0, clock=clock, sleep=clock.sleep)
    t.maybe_throttle(200)  # within the check interval and its allowance (300 bytes): no decision yet
    clock.now = 0.5
    t.maybe_throttle(1800)  # 2000 bytes in 0.5 s: 2 s of budget, so 1.5 s more
    assert clock.slept == [1.5]
    clock.now += 1.0
    t.maybe_throttle(1000)  # 1000 bytes in 1 s: exactly the rate, no sleep
    assert clock.slept == [1.5] and t.slept_s == 1.5
    clock.now += 0.1
    t.maybe_throttle(200)  # inside the next check interval and its allowance: counted, not judged yet
    assert clock.slept == [1.5]
    t.maybe_throttle(10**6)  # more than an interval's allowance: judged at once
    assert clock.slept == [1.5, (10**6 + 200) / 1000 - 0.1]


def test_the_default_rate_is_no_throttle_and_a_zero_rate_is_refused() -> None:
    assert throttle.throttler(1.7976931348623157e308) is UNTHROTTLED
    assert throttle.throttler(5e6) is throttle.throttler(5e6)  # one per process and rate, shared by threads
    with pytest.raises(ConfigError, match=r"log.cleaner.io.max.bytes.per.second=0.0: the cleaner could read nothing"):
        throttle.throttler(0.0)


def test_a_throttled_round_counts_what_it_reads_and_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round reading ~300 KB twice (key map, rewrite) at 1 MB/s takes about 0.6 s, and writes what an
    unthrottled one does. (The rate is checked at every count here: a round this small ends within
    Kafka's 300 ms check interval, and a process's next rounds would be held back instead.)"""
    monkeypatch.setattr(throttle, "CHECK_INTERVAL_S", 0.0)
    rows = "".join(f"k{i % 50}:{'v' * 200}{i}\n" for i in range(1500))
    for name in ("fast", "slow"):
        log_dir = tmp_path / name
        assert run_cli("topics", "create", "--log-dir", str(log_dir), "--topic", "t", "--config",
                       "cleanup.policy=compact", "--config", "segment.bytes=100000").code == 0
        assert run_cli("produce", "--log-dir", str(log_dir), "--topic", "t", "--key-separator", ":",
                       "--timestamp-ms", "1700000000000", "--batch-records", "50", stdin=rows).code == 0
    now = 1_700_000_100_000
    compact(LogStore([tmp_path / "fast"]), now_ms=now, topic="t", wall_now_ms=now)
    rate = 1_000_001.0  # a throttler of its own: the process keeps one per rate
    store = LogStore([tmp_path / "slow"], BrokerConfig.from_properties(
        {"log.cleaner.io.max.bytes.per.second": str(rate)}))
    shared = throttle.throttler(rate)
    assert isinstance(shared, Throttler)
    before = shared.slept_s
    [result] = compact(store, now_ms=now, topic="t", wall_now_ms=now).cleaned
    # The key map read the dirty segments, the rewrite read them again and wrote the cleaned ones.
    moved = result.stats.dirty_bytes + result.stats.bytes_read + result.stats.bytes_written
    assert moved > 550_000
    assert moved / rate - 0.3 < shared.slept_s - before <= moved / rate
    digest = {p.name: p.read_bytes() for p in (tmp_path / "fast" / "t-0").glob("*.log")}
    assert {p.name: p.read_bytes() for p in (tmp_path / "slow" / "t-0").glob("*.log")} == digest
    assert json.dumps(result.stats.to_dict())  # the round's report is unchanged in shape
