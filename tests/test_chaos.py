"""The chaos harness (``tests/chaos.py``), short: kill -9 maintenance — retention apply and sweep,
compact, recover and the Spark job — at random moments while producers and readers go on; nothing
acknowledged is lost, no reader sees a gap, a repeat or an error, and the store verifies."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos import Harness

from tests.spark.processes import spark_missing

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_kill_9_during_maintenance_loses_nothing(tmp_path: Path) -> None:
    if spark_missing():
        pytest.skip(str(spark_missing()))
    outcome = Harness(tmp_path, seed=7).run(kills=40, spark_every=20)
    assert sum(outcome.kills.values()) == 40 and outcome.kills["spark job"] == 2
    assert outcome.killed_running >= 20  # most kills land while the command runs
    assert outcome.acked_events > 0 and outcome.acked_state > 0
    assert (outcome.records_lost, outcome.latest_values_lost, outcome.reader_violations) == (0, 0, 0)
    assert outcome.reader_errors == [] and outcome.verify_ok
