"""The cleaner's I/O throttle (``log.cleaner.io.max.bytes.per.second``, Kafka's ``Throttler``).

Every byte a cleaning round reads (building the key map, recopying segments) and writes (the cleaned
segments) is counted; when, over a check interval, they come faster than the configured rate, the
cleaner sleeps until the average is back at the rate. As Kafka's cleaner threads share one throttler
per broker, the cleanings of one process share one per rate (``throttler``); a Spark job's executors
each throttle their own work, so a job's rate is up to the rate times its task slots.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafkalog.errors import ConfigError

CHECK_INTERVAL_S = 0.3  # Kafka's LogCleaner checks its rate every 300 ms


class Throttler:
    """Hold the bytes counted through ``maybe_throttle`` to ``rate_bytes_per_s`` on average."""

    def __init__(self, rate_bytes_per_s: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not rate_bytes_per_s > 0:
            raise ValueError(f"a throttle rate must be above 0 bytes/s, not {rate_bytes_per_s}")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0
        self.slept_s = 0.0  # in all, for reports and tests

    def maybe_throttle(self, observed_bytes: int) -> None:
        with self._lock:
            self._observed += observed_bytes
            now = self._clock()
            elapsed = now - self._period_start
            # Judged every check interval (Kafka's rule), and also as soon as the bytes exceed one
            # interval's worth: a fast reader would otherwise run ahead a whole interval unchecked,
            # and a round that ends then would leave all of it unpaid.
            if self._observed <= 0 or (elapsed <= CHECK_INTERVAL_S
                                       and self._observed <= self.rate_bytes_per_s * CHECK_INTERVAL_S):
                return
            pause = self._observed / self.rate_bytes_per_s - elapsed
            if pause > 0:  # the period went faster than the rate: wait until it averages at the rate
                self._sleep(pause)
                self.slept_s += pause
                now = self._clock()
            self._period_start, self._observed = now, 0


class Unthrottled:
    def maybe_throttle(self, observed_bytes: int) -> None:
        pass


UNTHROTTLED = Unthrottled()
_shared: dict[float, Throttler] = {}
_shared_lock = threading.Lock()


def throttler(rate_bytes_per_s: float) -> Throttler | Unthrottled:
    """This process's throttler for ``rate_bytes_per_s`` (none for Kafka's default, Double.MAX_VALUE)."""
    if rate_bytes_per_s >= 1.7976931348623157e308:
        return UNTHROTTLED
    if not rate_bytes_per_s > 0:
        raise ConfigError(f"log.cleaner.io.max.bytes.per.second={rate_bytes_per_s}: the cleaner could read "
                          "nothing; set a rate above 0 (Kafka's default, 1.7976931348623157E308, is no limit)")
    with _shared_lock:
        return _shared.setdefault(rate_bytes_per_s, Throttler(rate_bytes_per_s))
