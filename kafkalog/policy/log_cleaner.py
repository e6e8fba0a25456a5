"""Whether the broker config runs a log cleaner (spec §8.1, §10.1), the one rule every driver follows.

Kafka's ``LogManager.startup`` creates the ``LogCleaner`` only with ``log.cleaner.enable=true``, and
``LogCleaner.startup`` starts ``log.cleaner.threads`` threads, which may be 0. Without a thread no log
is compacted, and compacted logs (``compact`` and ``compact,delete``) get no retention either: it runs
in the cleaner threads, while the LogManager's retention task takes only logs that are not compacted.
The planners (``plan_retention``, ``select_logs_to_clean``) apply this; whoever is asked to compact a
named topic or carry out a compaction plan calls :func:`require_cleaner` first.
"""

from __future__ import annotations

from typing import Final

from kafkalog.errors import ConfigError
from kafkalog.log.config import BrokerConfig

CLEANER_DISABLED: Final = "cleaner-disabled"  # the blocked_by / not_selected kind


def cleaner_disabled_by(broker: BrokerConfig) -> str | None:
    """The broker setting that leaves no cleaner thread running (``key=value``), or None when one runs."""
    if not broker.log_cleaner_enable:
        return "log.cleaner.enable=false"
    if broker.log_cleaner_threads == 0:
        return "log.cleaner.threads=0"
    return None


def require_cleaner(broker: BrokerConfig) -> None:
    """Refuse explicit compaction (a named topic, a plan) while the broker config runs no cleaner."""
    off = cleaner_disabled_by(broker)
    if off is not None:
        fix = "log.cleaner.enable=true" if off.startswith("log.cleaner.enable") else "log.cleaner.threads to at least 1"
        raise ConfigError(f"{off} in the broker config: no log cleaner runs, so nothing is compacted; "
                          f"set {fix} to compact")
