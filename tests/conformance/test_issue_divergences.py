"""The divergences from Kafka that its own tests found, each through the CLI and the Spark job's tasks.

``segment.bytes=128`` holds one batch a segment, so each segment is a group of its own when cleaned
(Kafka's ``groupSegmentsBySize``): state that must cross groups is exercised.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_log import DAY, T0, ScenarioLog

SURFACES = ["cli", "spark-tasks"]


@pytest.mark.parametrize("surface", SURFACES)
def test_committed_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testCommittedTransactionSpanningSegments: the COMMIT marker of a transaction
    whose data is in an earlier group stays, and so does the data."""
    log = ScenarioLog(tmp_path, cleanup_policy="compact", segment_bytes=128)
    log.txn(1, [("1", "x")])
    log.roll()
    log.commit(1)
    log.roll()
    log.two_pass_clean(T0, surface=surface)
    assert log.offsets_in_log() == [0, 1]
    assert log.last_offsets_per_batch() == [0, 1]
    assert all(b.delete_horizon_ms is None for b in log.batches())  # the marker is not discardable
    # Later data and another round that covers the marker again leave it in place.
    log.append_each([("2", "y")])
    log.roll()
    log.clean(T0 + 3 * DAY, surface=surface)
    assert log.offsets_in_log() == [0, 1, 2]


@pytest.mark.parametrize("surface", SURFACES)
def test_aborted_transaction_spanning_segments(tmp_path: Path, surface: str) -> None:
    """LogCleanerTest.testAbortedTransactionSpanningSegments: the aborted data goes but its batch stays
    empty (the producer's last), and the ABORT marker stays with its ``.txnindex`` entry because that
    batch of its transaction is still there, round after round."""
    log = ScenarioLog(tmp_path, cleanup_policy="compact", segment_bytes=128)
    log.txn(1, [("1", "x")])
    log.roll()
    log.abort(1)
    log.roll()
    assert log.aborted_txns() == [(1, 0, 1, 2)]
    for now in (T0, T0 + 10 * DAY):
        log.clean(now, surface=surface)
        assert log.offsets_in_log() == [1]  # the aborted record is gone
        assert log.last_offsets_per_batch() == [0, 1]
        assert [b.records for b in log.batches()] == [0, 1]
        assert log.aborted_txns() == [(1, 0, 1, 2)]
        assert all(b.delete_horizon_ms is None for b in log.batches())
