"""The leader-epoch checkpoint after retention is what Kafka's next load leaves, so nothing changes
it again: a retried mark (a killed pipeline task) and a plain `kafkalog retention apply` end alike."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import run_cli

from kafkalog.log import checkpoint, names

HOUR_MS = 3_600_000


def test_retention_that_takes_every_record_leaves_the_epochs_a_load_would(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    assert run_cli("topics", "create", "--log-dir", str(tmp_path), "--topic", "t", "--config",
                   "retention.ms=3600000", "--config", "segment.bytes=1024").code == 0
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    assert run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", "--partition", "0",
                   "--timestamp-ms", str(now - 2 * HOUR_MS), "--batch-records", "10", stdin=lines).code == 0
    epochs = tmp_path / "t-0" / names.LEADER_EPOCH_CHECKPOINT
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == [(0, 0)]
    assert run_cli("retention", "apply", "--log-dir", str(tmp_path), "--now-ms", str(now)).code == 0
    # Every record went and the log starts again at 100: Kafka's truncateFromStart(100) would leave
    # (0, 100), and its next load's truncateFromEnd(100) then drops it; retention leaves it dropped.
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == []
    after_retention = epochs.read_bytes()
    assert run_cli("recover", "--full", "--log-dir", str(tmp_path)).code == 0
    assert epochs.read_bytes() == after_retention
    assert run_cli("produce", "--log-dir", str(tmp_path), "--topic", "t", "--key-separator", ":", "--partition", "0",
                   stdin="k:v\n").code == 0
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == [(0, 100)]
