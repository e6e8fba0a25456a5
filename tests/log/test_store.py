"""LogStore: how a writing command's load consumes a broker's clean shutdown file (``.kafka_cleanshutdown``)
and what that means for the dir's partitions, read and written by other processes."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import run_cli

from kafkalog.log import checkpoint, names
from kafkalog.log.store import LogStore, had_clean_shutdown

NOW = int(time.time() * 1000)


def _store(tmp_path: Path, partitions: int = 1) -> tuple[LogStore, Path]:
    """``partitions`` partitions of 40 records in three segments or more, their recovery points behind
    their ends (as a broker's checkpoint thread can leave them), and a broker's clean shutdown file."""
    log_dir = tmp_path / "logs"
    store = LogStore([log_dir], create_missing=True)
    store.create_topic("t", partitions, {"segment.bytes": "2048", "index.interval.bytes": "256"})
    for partition in range(partitions):
        with store.writable_log(store.locate("t", partition)) as log:
            for i in range(40):
                log.append_records([(b"k%d" % i, b"v" * 60, (), NOW + i)])
    checkpoint.write_offset_checkpoint(log_dir / names.RECOVERY_POINT_CHECKPOINT,
                                       {("t", p): 0 for p in range(partitions)})
    (log_dir / names.CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":0}')
    return LogStore([log_dir]), log_dir


def test_a_writable_open_consumes_the_clean_shutdown_file_and_loads_as_clean(tmp_path: Path) -> None:
    """The first writing open of any partition of the dir is the broker start: it loads as clean (no
    segment re-validated, recovery point 0 or not) and deletes the file, so a writer that dies later
    is recovered at the next load instead of being trusted as a clean shutdown."""
    store, log_dir = _store(tmp_path)
    location = store.locate("t", 0)
    store.open_log(location, read_only=True)
    assert (log_dir / names.CLEAN_SHUTDOWN_FILE).exists(), "a reader changes nothing"
    with store.writable_log(location) as log:
        assert log.load_report.recovered_segments == ()
        assert not (log_dir / names.CLEAN_SHUTDOWN_FILE).exists()
        log.append_records([(b"k", b"after", (), NOW)])
    checkpoint.write_offset_checkpoint(log_dir / names.RECOVERY_POINT_CHECKPOINT, {("t", 0): 0})  # as after a crash
    with LogStore([log_dir]).writable_log(location) as log:
        assert log.load_report.recovered_segments == tuple(s.base_offset for s in log.segments)


def test_the_other_partitions_of_the_dir_load_from_their_recovery_points(tmp_path: Path) -> None:
    """The file is per dir and gone after one partition's load: the next partition's load is unclean
    and re-validates what lies past its recovery point (nothing, where the broker checkpointed it at
    its log end, as it does at a clean shutdown)."""
    store, log_dir = _store(tmp_path, partitions=2)
    checkpoint.write_offset_checkpoint(log_dir / names.RECOVERY_POINT_CHECKPOINT, {("t", 0): 0, ("t", 1): 40})
    with store.writable_log(store.locate("t", 0)) as log:
        assert log.load_report.recovered_segments == ()
    with store.writable_log(store.locate("t", 1)) as log:
        assert log.load_report.recovered_segments == ()
    checkpoint.write_offset_checkpoint(log_dir / names.RECOVERY_POINT_CHECKPOINT, {("t", 0): 40, ("t", 1): 0})
    with LogStore([log_dir]).writable_log(store.locate("t", 1)) as log:
        assert len(log.load_report.recovered_segments) == len(log.segments)


def test_recover_consumes_the_file_even_where_it_leaves_a_partition_alone(tmp_path: Path) -> None:
    """``kafkalog recover`` loads every partition: the file vouches for the first one it asks about,
    and is gone afterwards, as Kafka's LogManager leaves it."""
    store, log_dir = _store(tmp_path)
    assert store.clean_log_end(store.locate("t", 0)) == 40
    assert not (log_dir / names.CLEAN_SHUTDOWN_FILE).exists()
    assert store.clean_log_end(store.locate("t", 0)) is None  # recovery point 0: the full load decides
    (log_dir / names.CLEAN_SHUTDOWN_FILE).touch()
    result = run_cli("recover", "--json", "--log-dir", str(log_dir))
    assert result.code == 0, result.err
    assert '"recovered_segments": []' in result.out
    assert not (log_dir / names.CLEAN_SHUTDOWN_FILE).exists()


def test_had_clean_shutdown_without_consuming_changes_nothing(tmp_path: Path) -> None:
    assert not had_clean_shutdown(tmp_path, consume=True)
    (tmp_path / names.CLEAN_SHUTDOWN_FILE).touch()
    assert had_clean_shutdown(tmp_path, consume=False) and had_clean_shutdown(tmp_path, consume=False)
    assert had_clean_shutdown(tmp_path, consume=True)
    assert not (tmp_path / names.CLEAN_SHUTDOWN_FILE).exists() and not had_clean_shutdown(tmp_path, consume=True)
