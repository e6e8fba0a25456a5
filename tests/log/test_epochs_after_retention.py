"""The leader-epoch checkpoint after retention is what Kafka's next load leaves, so nothing changes
it again: a retried mark (a killed pipeline task) and a plain `kafkalog retention apply` end alike."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from conftest import run_cli

from kafkalog.log import checkpoint, names
from kafkalog.log.snapshot import snapshot_log
from kafkalog.log.store import LogStore
from kafkalog.maintenance.retention import apply_retention
from kafkalog.policy.retention import plan_retention
from tests.pipeline.helpers import live_files

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


def test_a_mark_killed_after_its_renames_and_retried_ends_as_one_uninterrupted(tmp_path: Path) -> None:
    """A ``mark_deleted`` task killed between its renames and the leader-epoch checkpoint: the next load
    keeps the old entry (Kafka's loader truncates from the start only at the checkpointed log start
    offset, which the kill left behind too). The retry, with the plan its first try had, finds nothing
    left to rename and finishes the truncation, so it ends with the files of an uninterrupted apply."""
    now = int(time.time() * 1000)
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    assert run_cli("topics", "create", "--log-dir", str(killed), "--topic", "t", "--config", "retention.ms=3600000",
                   "--config", "segment.bytes=1024").code == 0
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    assert run_cli("produce", "--log-dir", str(killed), "--topic", "t", "--key-separator", ":", "--partition", "0",
                   "--timestamp-ms", str(now - 2 * HOUR_MS), "--batch-records", "10", stdin=lines).code == 0
    shutil.copytree(killed, reference)
    assert run_cli("retention", "apply", "--log-dir", str(reference), "--now-ms", str(now)).code == 0

    store = LogStore([killed])
    location = store.locate("t", 0)
    config = store.log_config("t")
    plan = plan_retention(snapshot_log(killed, "t", 0, config, store.log_dir_checkpoints(killed)), now,
                          broker=store.broker)
    epochs = killed / "t-0" / names.LEADER_EPOCH_CHECKPOINT
    before_kill = epochs.read_bytes()
    with store.writable_log(location) as log:  # the first try, up to its last rename
        log.roll()
        log.mark_segments_deleted(len(plan.segments), mark_time_ms=now)
    epochs.write_bytes(before_kill)  # ... killed before the epoch checkpoint and the other checkpoints
    for name in (names.LOG_START_OFFSET_CHECKPOINT, names.RECOVERY_POINT_CHECKPOINT):
        (killed / name).unlink(missing_ok=True)
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == [(0, 0)]

    apply_retention(LogStore([killed]), location, plan, run_id="retry")
    assert checkpoint.read_leader_epoch_checkpoint(epochs) == []
    assert live_files(killed) == live_files(reference)
